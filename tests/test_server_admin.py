"""Kafka admin clients against ``pylog serve``: aiokafka's AIOKafkaAdminClient and confluent-kafka's AdminClient
create topics with configs, describe and alter configs, add partitions, delete topics, and list, describe and
delete consumer groups; each result checked in the store too. (kafka-python's admin client:
tests/test_server_kafka_python.py.)"""

from __future__ import annotations

import asyncio
import time

import pytest


pytest.importorskip("aiokafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic  # noqa: E402
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType  # noqa: E402
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException  # noqa: E402
from confluent_kafka import admin as cadmin  # noqa: E402

pytestmark = pytest.mark.slow


# The store and server fixtures: tests/conftest.py.


def _fill_and_commit(server, store, topic: str, group: str, n: int = 20) -> Consumer:
    """n records in partition 0 of topic, all consumed and committed by a confluent consumer of group, which
    is returned still a member (the caller closes it)."""
    with store.producer() as p:
        for i in range(n):
            p.send(topic, str(i).encode(), partition=0)
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 20
    while got < n and time.monotonic() < deadline:
        got += len([m for m in c.consume(num_messages=100, timeout=0.2) if m.error() is None])
    assert got == n
    c.commit(asynchronous=False)
    return c


# ---------------------------------------------------------------------------------------------- aiokafka


def test_aiokafka_admin_topics_and_configs(server, store):
    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
        await admin.start()
        try:
            resp = await admin.create_topics([
                NewTopic("ak1", num_partitions=3, replication_factor=1,
                         topic_configs={"retention.ms": "3600000", "cleanup.policy": "compact"}),
                NewTopic("ak2", num_partitions=1, replication_factor=1)])
            assert all(err == 0 for _, err, *_ in resp.topic_errors), resp
            assert store.topic("ak1").num_partitions == 3
            assert store.topic("ak1").config["retention.ms"] == 3600000
            assert "compact" in store.topic("ak1").config["cleanup.policy"]
            # An existing topic: TOPIC_ALREADY_EXISTS (36), the store unchanged.
            resp = await admin.create_topics([NewTopic("ak1", num_partitions=5, replication_factor=1)])
            assert [err for _, err, *_ in resp.topic_errors] == [36]
            assert store.topic("ak1").num_partitions == 3
            assert {"ak1", "ak2"} <= set(await admin.list_topics())

            [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "ak1")])
            [res] = described.resources
            error_code, _, rtype, name, entries = res[:5]
            assert (error_code, name) == (0, "ak1")
            values = {e[0]: e[1] for e in entries}
            assert values["retention.ms"] == "3600000" and values["cleanup.policy"] == "compact"
            # Only the names asked for.
            [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "ak1",
                                                                       {"retention.ms": None})])
            assert [e[0] for e in described.resources[0][4]] == ["retention.ms"]

            altered = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "ak2",
                                                                {"retention.ms": "7200000"})])
            assert all(r[0] == 0 for r in altered[0].resources), altered
            assert store.topic("ak2").config["retention.ms"] == 7200000

            await admin.create_partitions({"ak1": NewPartitions(total_count=5)})
            assert store.topic("ak1").num_partitions == 5
            with pytest.raises(Exception, match="(?i)invalid|partitions"):  # fewer partitions: refused
                await admin.create_partitions({"ak1": NewPartitions(total_count=2)})
            assert store.topic("ak1").num_partitions == 5

            resp = await admin.delete_topics(["ak1"])
            assert [err for _, err, *_ in resp.topic_error_codes] == [0]
            assert "ak1" not in store and "ak2" in store
            resp = await admin.delete_topics(["nope"])
            assert [err for _, err, *_ in resp.topic_error_codes] == [3]  # UNKNOWN_TOPIC_OR_PARTITION
        finally:
            await admin.close()

    asyncio.run(main())


def test_aiokafka_admin_groups(server, store):
    store.create_topic("akg", partitions=1)
    member = _fill_and_commit(server, store, "akg", "ak-group")

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
        await admin.start()
        try:
            groups = await admin.list_consumer_groups()
            assert ("ak-group", "consumer") in [tuple(g[:2]) for g in groups]
            [resp] = await admin.describe_consumer_groups(["ak-group"])
            [g] = resp.groups
            assert g[0] == 0 and g[1] == "ak-group" and g[2] == "Stable" and g[3] == "consumer"
            assert len(g[5]) == 1  # one member
            offsets = await admin.list_consumer_group_offsets("ak-group")
            assert {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()} == {("akg", 0): 20}
        finally:
            await admin.close()

    try:
        asyncio.run(main())
    finally:
        member.close()


# ---------------------------------------------------------------------------------------------- confluent-kafka


def _admin(server) -> cadmin.AdminClient:
    return cadmin.AdminClient({"bootstrap.servers": server.bootstrap_servers})


def _results(futures: dict, timeout: float = 15) -> dict:
    return {k: f.result(timeout=timeout) for k, f in futures.items()}


def test_confluent_admin_topics_and_configs(server, store):
    admin = _admin(server)
    _results(admin.create_topics([
        cadmin.NewTopic("ck1", num_partitions=3, replication_factor=1,
                        config={"retention.ms": "3600000", "max.message.bytes": "2000000"}),
        cadmin.NewTopic("ck2", num_partitions=2, replication_factor=1)], operation_timeout=10))
    assert store.topic("ck1").num_partitions == 3 and store.topic("ck2").num_partitions == 2
    assert store.topic("ck1").config["retention.ms"] == 3600000
    assert store.topic("ck1").config["max.message.bytes"] == 2000000
    with pytest.raises(KafkaException) as info:
        _results(admin.create_topics([cadmin.NewTopic("ck1", num_partitions=1, replication_factor=1)]))
    assert info.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    # validate_only creates nothing.
    _results(admin.create_topics([cadmin.NewTopic("ck3", num_partitions=1, replication_factor=1)],
                                 validate_only=True))
    assert "ck3" not in store

    md = admin.list_topics(timeout=10)
    assert {"ck1", "ck2"} <= set(md.topics) and len(md.topics["ck1"].partitions) == 3

    res = cadmin.ConfigResource(cadmin.ResourceType.TOPIC, "ck1")
    [entries] = _results(admin.describe_configs([res])).values()
    assert entries["retention.ms"].value == "3600000"
    assert entries["max.message.bytes"].value == "2000000"
    assert not entries["retention.ms"].is_default
    assert "cleanup.policy" in entries and entries["cleanup.policy"].value == "delete"

    # AlterConfigs (API 33; librdkafka deprecates it for IncrementalAlterConfigs, which pylog serve lacks).
    with pytest.warns(DeprecationWarning):
        futures = admin.alter_configs([cadmin.ConfigResource(cadmin.ResourceType.TOPIC, "ck2",
                                                             set_config={"retention.ms": "7200000"})])
    _results(futures)
    assert store.topic("ck2").config["retention.ms"] == 7200000

    _results(admin.create_partitions([cadmin.NewPartitions("ck1", 6)], operation_timeout=10))
    assert store.topic("ck1").num_partitions == 6
    with pytest.raises(KafkaException):
        _results(admin.create_partitions([cadmin.NewPartitions("ck1", 4)]))
    assert store.topic("ck1").num_partitions == 6

    _results(admin.delete_topics(["ck1"], operation_timeout=10))
    assert "ck1" not in store and "ck2" in store
    with pytest.raises(KafkaException) as info:
        _results(admin.delete_topics(["nope"]))
    assert info.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"


def test_confluent_admin_groups(server, store):
    store.create_topic("ckg", partitions=1)
    admin = _admin(server)
    member = _fill_and_commit(server, store, "ckg", "ck-group")
    try:
        listed = admin.list_consumer_groups().result(timeout=15)
        assert not listed.errors, listed.errors
        ids = {g.group_id: g for g in listed.valid}
        assert "ck-group" in ids and ids["ck-group"].state == ConsumerGroupState.STABLE

        [desc] = _results(admin.describe_consumer_groups(["ck-group"])).values()
        assert desc.group_id == "ck-group" and desc.state == ConsumerGroupState.STABLE
        assert len(desc.members) == 1
        assert [(tp.topic, tp.partition) for tp in desc.members[0].assignment.topic_partitions] == [("ckg", 0)]

        [offs] = _results(admin.list_consumer_group_offsets(
            [confluent_kafka.ConsumerGroupTopicPartitions("ck-group")])).values()
        assert [(tp.topic, tp.partition, tp.offset) for tp in offs.topic_partitions] == [("ckg", 0, 20)]

        # A group with a member cannot be deleted (NON_EMPTY_GROUP); its offsets stay.
        with pytest.raises(KafkaException) as info:
            _results(admin.delete_consumer_groups(["ck-group"]))
        assert info.value.args[0].name() == "NON_EMPTY_GROUP"
        assert store.committed_offsets("ck-group")
    finally:
        member.close()

    # Once the member left: Empty, and deleting forgets its committed offsets.
    [desc] = _results(admin.describe_consumer_groups(["ck-group"])).values()
    assert desc.state == ConsumerGroupState.EMPTY
    _results(admin.delete_consumer_groups(["ck-group"]))
    assert store.committed_offsets("ck-group") == {}
    listed = admin.list_consumer_groups().result(timeout=15)
    assert "ck-group" not in {g.group_id for g in listed.valid}
    with pytest.raises(KafkaException) as info:
        _results(admin.delete_consumer_groups(["never-was"]))
    assert info.value.args[0].name() == "GROUP_ID_NOT_FOUND"
