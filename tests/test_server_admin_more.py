"""``pylog serve``'s admin and operations APIs beyond the core (issue 19: "unsupported APIs answer with Kafka's
own error codes, never a dropped connection"): IncrementalAlterConfigs, DescribeCluster, OffsetDelete and
DescribeLogDirs through the real admin clients; the single-node answers (ElectLeaders, partition
reassignments, transactions); the refused ACL and SCRAM-credential APIs; APIs not advertised, which clients
report as unsupported by the broker themselves and which get UNSUPPORTED_VERSION when sent anyway
(transactional producers: tests/test_server_transactions.py). Raw requests
(``pylog.server.protocol.encode_request`` over a socket) where no client has the call."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

import pylog
from pylog.errors import RebalanceInProgressError
from pylog.server.protocol import ApiKey, ErrorCode, encode_request, parse_response, supported_versions
from pylog.structs import TopicPartition as PTP

from serverutil import wait_until

kafka = pytest.importorskip("kafka")
ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("aiokafka")
import aiokafka  # noqa: E402
import aiokafka.admin  # noqa: E402
import aiokafka.errors  # noqa: E402
import kafka.errors as KErr  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,  # noqa: E402
                                   AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter  # noqa: E402
from kafka.admin import ACLResourcePatternType as KPatternType  # noqa: E402
from kafka.admin import ResourceType as KResourceType  # noqa: E402

pytestmark = pytest.mark.slow


# The store and server fixtures: tests/conftest.py.


@pytest.fixture
def ck_admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap_servers})


@pytest.fixture
def kp_admin(server):
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
    yield a
    a.close()


def _call(server, api_key: int, version: int, body: dict, sock: socket.socket | None = None) -> dict:
    """One raw request, its parsed response body (on ``sock`` when given: it must stay open)."""
    s = sock or socket.create_connection((server.host, server.port), timeout=10)
    try:
        s.sendall(encode_request(api_key, version, 41, "raw", body))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        corr, resp = parse_response(api_key, version, s.recv(size, socket.MSG_WAITALL))
        assert corr == 41
        return resp
    finally:
        if sock is None:
            s.close()


def _healthy(server, store) -> None:
    """A produce and a metadata request still work (the server survived whatever came before)."""
    if "health" not in store:
        store.create_topic("health")
    p = KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks=1)
    try:
        p.send("health", b"ok").get(timeout=10)
    finally:
        p.close()


# --------------------------------------------------------------------------- ApiVersions: what is advertised

def test_advertised_versions_of_the_new_apis():
    sv = supported_versions()
    assert sv[ApiKey.INCREMENTAL_ALTER_CONFIGS] == (0, 1)
    assert sv[ApiKey.DESCRIBE_CLUSTER] == (0, 1)
    assert sv[ApiKey.OFFSET_DELETE] == (0, 0)
    assert sv[ApiKey.DESCRIBE_LOG_DIRS] == (1, 4)
    for k in (29, 30, 31, 34, 43, 46, 48, 49, 50, 51, 61, 65, 66):
        assert k in sv
    assert 45 not in sv  # answered only with UNSUPPORTED_VERSION: not advertised
    for k in (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT):
        assert sv[k] == (0, 3)  # the transaction APIs (tests/test_server_transactions.py)


# --------------------------------------------------------------------------- IncrementalAlterConfigs (44)

def test_incremental_alter_configs_confluent(server, store, ck_admin):
    store.create_topic("t", config={"retention.ms": 1000, "max.message.bytes": 5000})

    def alter(*entries, validate_only=False, name="t", rtype=ResourceType.TOPIC):
        r = ConfigResource(rtype, name, incremental_configs=list(entries))
        return ck_admin.incremental_alter_configs([r], validate_only=validate_only)[r].result(10)

    alter(ConfigEntry("retention.ms", "7777", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
          ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE))
    cfg = store.topic("t").config
    assert cfg["retention.ms"] == 7777
    assert set(cfg["cleanup.policy"]) == {"compact", "delete"}
    assert not cfg.is_override("max.message.bytes")  # DELETE: back to the store's default

    alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert store.topic("t").config["cleanup.policy"] == ("compact",)

    # validate_only changes nothing
    alter(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET), validate_only=True)
    assert store.topic("t").config["retention.ms"] == 7777

    # per-resource errors
    with pytest.raises(KafkaException) as e:
        alter(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET), name="nope")
    assert e.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaException) as e:  # subtracting the last policy leaves none: an invalid config
        alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert e.value.args[0].code() == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaException) as e:
        alter(ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND))
    assert e.value.args[0].code() == ErrorCode.INVALID_CONFIG and "list" in e.value.args[0].str()
    with pytest.raises(KafkaException) as e:
        alter(ConfigEntry("log.retention.ms", "5", incremental_operation=AlterConfigOpType.SET),
              name="0", rtype=ResourceType.BROKER)
    assert e.value.args[0].code() == ErrorCode.INVALID_REQUEST and "broker" in e.value.args[0].str()
    assert store.topic("t").config["cleanup.policy"] == ("compact",)


def test_incremental_alter_configs_kafka_python(server, store, kp_admin):
    from kafka.admin import AlterConfigOp, ConfigResource as KConfigResource, ConfigResourceType
    store.create_topic("k", config={"retention.ms": 1000})
    # kafka-python uses IncrementalAlterConfigs whenever the broker advertises it
    res = kp_admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "k", configs={
        "retention.ms": (AlterConfigOp.DELETE, None), "segment.ms": "600000",
        "cleanup.policy": (AlterConfigOp.APPEND, "compact")})])
    assert res == {"topic": {"k": "OK"}}
    cfg = store.topic("k").config
    assert not cfg.is_override("retention.ms") and cfg["segment.ms"] == 600000
    assert set(cfg["cleanup.policy"]) == {"compact", "delete"}


def test_incremental_alter_configs_raw_errors(server, store):
    store.create_topic("r")
    body = {"resources": [
        {"resource_type": 2, "resource_name": "r", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "5000"},
            {"name": "retention.ms", "config_operation": 1, "value": None}]},
        {"resource_type": 2, "resource_name": "r", "configs": [{"name": "no.such", "config_operation": 0,
                                                                  "value": "1"}]},
        {"resource_type": 2, "resource_name": "r", "configs": [{"name": "retention.ms", "config_operation": 9,
                                                                  "value": "1"}]},
        {"resource_type": 2, "resource_name": "r", "configs": [{"name": "retention.ms", "config_operation": 0,
                                                                  "value": "12345"}]},
    ], "validate_only": False}
    resp = _call(server, 44, 1, body)
    codes = [r["error_code"] for r in resp["responses"]]
    assert codes == [ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST, 0]
    assert store.topic("r").config["retention.ms"] == 12345  # the others' failures did not stop the last one


# --------------------------------------------------------------------------- DescribeCluster (60)

def test_describe_cluster_with_every_client(server, store, ck_admin, kp_admin):
    host, port = server.advertised
    r = ck_admin.describe_cluster().result(10)
    assert r.controller.id == 0 and [(n.id, n.host, n.port) for n in r.nodes] == [(0, host, port)]
    cluster_id = r.cluster_id
    assert cluster_id and len(cluster_id) == 22

    d = kp_admin.describe_cluster()
    assert d["cluster_id"] == cluster_id and d["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in d["brokers"]] == [(0, host, port)]

    async def aio():
        a = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        await a.start()
        try:
            return await a.describe_cluster()
        finally:
            await a.close()
    got = asyncio.run(aio())
    assert got["cluster_id"] == cluster_id and got["controller_id"] == 0
    assert [(b["node_id"], b["host"], b["port"]) for b in got["brokers"]] == [(0, host, port)]


def test_describe_cluster_advertises_the_advertised_address(tmp_path):
    with pylog.serve(tmp_path / "s", port=0, advertised_host="kafka.example", advertised_port=1234) as srv:
        resp = _call(srv, 60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
        assert resp["brokers"] == [{"broker_id": 0, "host": "kafka.example", "port": 1234, "rack": None}]
        assert resp["error_code"] == 0 and resp["controller_id"] == 0 and resp["endpoint_type"] == 1


# --------------------------------------------------------------------------- OffsetDelete (47)

def test_store_delete_committed_offsets(store):
    store.create_topic("a", partitions=3)
    store.commit_offsets("g", {PTP("a", 0): 5, PTP("a", 1): 6, PTP("a", 2): 7})
    assert store.delete_committed_offsets("g", [PTP("a", 1), PTP("a", 2), PTP("zz", 0)]) == 2
    assert store.committed_offsets("g") == {PTP("a", 0): pylog.OffsetAndMetadata(5, "")}
    assert store.delete_committed_offsets("g", []) == 0
    assert store.delete_committed_offsets("never", [PTP("a", 0)]) == 0
    with store.consumer("a", group_id="live") as c:  # a live pylog member subscribed to "a"
        c.poll(timeout_ms=100)
        with pytest.raises(RebalanceInProgressError):
            store.delete_committed_offsets("live", [PTP("a", 0)])


def test_alter_topic_config_remove(store):
    store.create_topic("c", config={"retention.ms": 1000, "segment.ms": 60_000})
    cfg = store.alter_topic_config("c", {"segment.ms": 120_000}, remove=["retention.ms"])
    assert cfg.overrides == {"segment.ms": 120_000}
    reopened = pylog.open(store.path)
    try:
        assert reopened.topic("c").config.overrides == {"segment.ms": 120_000}
    finally:
        reopened.close()


def test_offset_delete_kafka_python(server, store, kp_admin):
    store.create_topic("o", partitions=2)
    store.create_topic("other")
    store.commit_offsets("grp", {PTP("o", 0): 3, PTP("o", 1): 4, PTP("other", 0): 1})
    res = kp_admin.delete_group_offsets("grp", [TopicPartition("o", 0), TopicPartition("o", 9)])
    assert res[TopicPartition("o", 0)] is KErr.NoError
    assert res[TopicPartition("o", 9)] is KErr.UnknownTopicOrPartitionError
    assert set(store.committed_offsets("grp")) == {PTP("o", 1), PTP("other", 0)}
    with pytest.raises(KErr.GroupIdNotFoundError):
        kp_admin.delete_group_offsets("no-such-group", [TopicPartition("o", 0)])


def test_offset_delete_refuses_topics_live_members_consume(server, store, kp_admin):
    store.create_topic("sub", partitions=1)
    store.create_topic("free")
    store.commit_offsets("live", {PTP("sub", 0): 1, PTP("free", 0): 2})
    consumer = KafkaConsumer("sub", bootstrap_servers=server.bootstrap_servers, group_id="live",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        wait_until(lambda: consumer.poll(timeout_ms=100) is not None and consumer.assignment(), what="assignment")
        res = kp_admin.delete_group_offsets("live", [TopicPartition("sub", 0), TopicPartition("free", 0)])
        assert res[TopicPartition("sub", 0)] is KErr.GroupSubscribedToTopicError
        assert res[TopicPartition("free", 0)] is KErr.NoError
        assert set(store.committed_offsets("live")) == {PTP("sub", 0)}
    finally:
        consumer.close()


def test_offset_delete_raw_top_level_errors(server, store):
    resp = _call(server, 47, 0, {"group_id": "", "topics": [{"name": "x", "partitions": [{"partition_index": 0}]}]})
    assert resp["error_code"] == ErrorCode.INVALID_GROUP_ID and resp["topics"] == []
    resp = _call(server, 47, 0, {"group_id": "ghost", "topics": []})
    assert resp["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


# --------------------------------------------------------------------------- DescribeLogDirs (35)

def test_describe_log_dirs_kafka_python(server, store, kp_admin):
    store.create_topic("d", partitions=2)
    with store.producer() as p:
        for i in range(50):
            p.send("d", b"x" * 100, partition=i % 2)
    res = kp_admin.describe_log_dirs()
    (broker,) = res
    (logdir,) = broker["log_dirs"]
    assert logdir["error_code"] == 0 and logdir["log_dir"] == os.path.realpath(store.path)
    parts = {(t["name"], p["partition_index"]): p for t in logdir["topics"] for p in t["partitions"]}
    for i in range(2):
        got = parts[("d", i)]
        assert got["partition_size"] == store.topic("d").partition(i).size_bytes() > 0
        assert got["offset_lag"] == 0 and got["is_future_key"] is False
    # only the partitions asked for; unknown ones left out
    resp = _call(server, 35, 4, {"topics": [{"topic": "d", "partitions": [1, 7]}, {"topic": "nope",
                                                                                 "partitions": [0]}]})
    (result,) = resp["results"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]] == [("d", [1])]
    assert result["total_bytes"] > 0 and result["usable_bytes"] >= 0


# --------------------------------------------------------------------------- single-node answers

def test_elect_leaders_is_never_needed(server, store, ck_admin, kp_admin):
    from confluent_kafka import ElectionType, TopicPartition as CTP
    store.create_topic("e", partitions=2)
    res = ck_admin.elect_leaders(ElectionType.PREFERRED, [CTP("e", 0), CTP("e", 5)]).result(10)
    codes = {(tp.topic, tp.partition): err.code() for tp, err in res.items()}
    assert codes == {("e", 0): ErrorCode.ELECTION_NOT_NEEDED, ("e", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    resp = _call(server, 43, 2, {"election_type": 0, "topic_partitions": None, "timeout_ms": 1000})
    assert resp["error_code"] == 0 and resp["replica_election_results"] == []


def test_reassignments_and_transactions_are_empty(server, store, kp_admin):
    store.create_topic("q")
    assert kp_admin.list_partition_reassignments() == {}
    assert kp_admin.list_transactions() == {0: []}
    # kafka-python's describe_transactions looks for the transaction coordinator first (this node), which
    # knows no transactional id: Kafka's answer for one never used
    with pytest.raises(KErr.TransactionalIdNotFoundError):
        kp_admin.describe_transactions(["a"])
    resp = _call(server, 65, 0, {"transactional_ids": ["a", "b"]})
    assert [(s["transactional_id"], s["error_code"]) for s in resp["transaction_states"]] == [
        ("a", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND), ("b", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)]


def test_alter_replica_log_dirs(server, store):
    store.create_topic("m", partitions=2)
    body = {"dirs": [{"path": store.path, "topics": [{"name": "m", "partitions": [0, 3]}]},
                     {"path": "/elsewhere", "topics": [{"name": "m", "partitions": [1]}]}]}
    resp = _call(server, 34, 2, body)
    assert resp["results"] == [{"topic_name": "m", "partitions": [
        {"partition_index": 0, "error_code": 0},
        {"partition_index": 3, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
        {"partition_index": 1, "error_code": ErrorCode.LOG_DIR_NOT_FOUND}]}]


# --------------------------------------------------------------------------- refused: ACLs and SCRAM users

def test_acl_apis_answer_security_disabled(server, store, ck_admin, kp_admin):
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as e:
        ck_admin.create_acls([binding])[binding].result(10)
    assert e.value.args[0].code() == ErrorCode.SECURITY_DISABLED and "no ACLs" in e.value.args[0].str()
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    with pytest.raises(KafkaException) as e:
        ck_admin.delete_acls([flt])[flt].result(10)
    assert e.value.args[0].code() == ErrorCode.SECURITY_DISABLED
    # librdkafka reports no ACLs for DescribeAcls (true: there are none) rather than the error
    assert ck_admin.describe_acls(flt).result(10) == []

    kflt = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, KPatternType.ANY))
    with pytest.raises(KErr.SecurityDisabledError, match="no ACLs"):
        kp_admin.describe_acls(kflt)
    for version in (1, 2, 3):
        resp = _call(server, 29, version, {"resource_type_filter": 1, "operation": 1, "permission_type": 1})
        assert resp["error_code"] == ErrorCode.SECURITY_DISABLED and "no ACLs" in resp["error_message"]
    _healthy(server, store)


def test_scram_credential_apis_answer_security_disabled(server, store, ck_admin, kp_admin):
    with pytest.raises(KafkaException) as e:
        ck_admin.describe_user_scram_credentials(["alice"])["alice"].result(10)
    assert e.value.args[0].code() == ErrorCode.SECURITY_DISABLED and "users file" in e.value.args[0].str()
    assert ck_admin.describe_user_scram_credentials().result(10) == {}  # no users managed through the protocol
    up = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw")
    with pytest.raises(KafkaException) as e:
        ck_admin.alter_user_scram_credentials([up])["bob"].result(10)
    assert e.value.args[0].code() == ErrorCode.SECURITY_DISABLED
    resp = _call(server, 51, 0, {"deletions": [{"name": "a", "mechanism": 1}], "upsertions": [
        {"name": "b", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]})
    assert [(r["user"], r["error_code"]) for r in resp["results"]] == [
        ("a", ErrorCode.SECURITY_DISABLED), ("b", ErrorCode.SECURITY_DISABLED)]
    _healthy(server, store)


# --------------------------------------------------------------------------- not advertised

def test_unadvertised_apis_are_reported_by_the_client(server, store, kp_admin):
    store.create_topic("u")
    with pytest.raises(KErr.IncompatibleBrokerVersion, match="AlterPartitionReassignments"):
        kp_admin.alter_partition_reassignments({TopicPartition("u", 0): [0]})


@pytest.mark.parametrize("api_key,version,body,array", [
    (45, 0, {"timeout_ms": 1, "topics": [{"name": "u", "partitions": [{"partition_index": 0, "replicas": [0]}]}]},
     "responses"),
])
def test_unadvertised_apis_sent_anyway_get_unsupported_version(server, store, api_key, version, body, array):
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        resp = _call(server, api_key, version, body, sock=s)
        assert len(resp[array]) == 1  # mirrors the request, every error field UNSUPPORTED_VERSION
        assert str(int(ErrorCode.UNSUPPORTED_VERSION)) in repr(resp)
        # the connection stays open: the next request on it is answered
        assert _call(server, 60, 0, {"include_cluster_authorized_operations": False}, sock=s)["controller_id"] == 0


# --------------------------------------------------------------------------- broker configs

def test_describe_broker_configs_lists_the_store_defaults_under_kafkas_names(tmp_path):
    """DescribeConfigs for the broker lists every broker config (it returned nothing when the store had no
    explicit defaults): the store's topic defaults under Kafka's broker names, given ones as
    STATIC_BROKER_CONFIG, the others as DEFAULT_CONFIG, all read-only; the store's and the coordinator's
    settings too."""
    with pylog.open(tmp_path / "s", retention_ms=3_600_000, offsets_topic_num_partitions=4) as store, \
            pylog.serve(store, port=0) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        [entries] = [f.result(10) for f in admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()]
        assert entries["log.retention.ms"].value == "3600000" and not entries["log.retention.ms"].is_default
        assert entries["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert entries["log.segment.bytes"].value == str(1024 ** 3) and entries["log.segment.bytes"].is_default
        assert entries["log.cleanup.policy"].value == "delete" and entries["message.max.bytes"].value
        assert entries["offsets.topic.num.partitions"].value == "4"
        assert entries["group.initial.rebalance.delay.ms"].value == "300" and entries["broker.id"].value == "0"
        assert all(e.is_read_only for e in entries.values())
        assert "retention.ms" not in entries  # topic names are the topics' own
        # kafka-python reads them too (DescribeConfigs v1+).
        kp = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
        try:
            from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType
            res = [KConfigResource(ConfigResourceType.BROKER, "0")]
            every = kp.describe_configs(res, config_filter="all")["broker"]["0"]
            assert {"log.retention.ms", "log.segment.bytes", "num.partitions"} <= set(every)
        finally:
            kp.close()


def test_describe_broker_configs_reports_the_servers_own_settings(tmp_path):
    """The broker's configs are what the running server uses: ``pylog serve --num-partitions 3`` gives
    auto-created topics 3 partitions, and DescribeConfigs said num.partitions 1 (the store's default,
    DEFAULT_CONFIG). The server's settings that Kafka has (auto.create.topics.enable,
    socket.request.max.bytes, group.max.size ...) are listed too, STATIC_BROKER_CONFIG when given."""
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType
    with pylog.open(tmp_path / "s") as store, pylog.serve(store, port=0, num_partitions=3, auto_create_topics=False,
                                                           max_request_bytes=1 << 20, group_max_size=7) as server:
        kp = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
        try:
            every = kp.describe_configs([KConfigResource(ConfigResourceType.BROKER, "0")],
                                        config_filter="all")["broker"]["0"]
        finally:
            kp.close()
        got = {k: (every[k]["value"], every[k]["config_source"]) for k in
               ("num.partitions", "auto.create.topics.enable", "socket.request.max.bytes", "group.max.size",
                "max.connections")}
        assert got == {"num.partitions": ("3", "STATIC_BROKER_CONFIG"),
                       "auto.create.topics.enable": ("false", "STATIC_BROKER_CONFIG"),
                       "socket.request.max.bytes": (str(1 << 20), "STATIC_BROKER_CONFIG"),
                       "group.max.size": ("7", "STATIC_BROKER_CONFIG"),
                       "max.connections": ("1000", "DEFAULT_CONFIG")}
        assert all(e["read_only"] for e in every.values())


def test_altering_broker_configs_is_refused_per_config_as_kafka_refuses_static_ones(server, store, ck_admin):
    """Broker configs are fixed when the store is opened: AlterConfigs and IncrementalAlterConfigs answer
    INVALID_REQUEST naming each config ("Cannot update these configs dynamically", Kafka's words), and an
    unknown name as unknown; nothing changes."""
    before = dict(store.defaults)
    with pytest.raises(KafkaException) as e:
        ck_admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
            ConfigEntry("log.retention.ms", "5", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])])[
            ConfigResource(ResourceType.BROKER, "0")].result(10)
    err = e.value.args[0]
    assert err.code() == ErrorCode.INVALID_REQUEST
    assert "Cannot update these configs dynamically: log.retention.ms" in err.str()
    assert "Unknown broker configs: no.such.config" in err.str()
    resp = _call(server, 33, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
        {"name": "num.partitions", "value": "3"}]}], "validate_only": True})
    [r] = resp["responses"]
    assert r["error_code"] == ErrorCode.INVALID_REQUEST and "num.partitions" in r["error_message"]
    assert store.defaults == before and store.settings["num.partitions"] == 1
