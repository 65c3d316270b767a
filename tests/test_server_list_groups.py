"""ListGroups' filters in ``pylog serve``: the states filter (KIP-518, v4) and the types filter (KIP-848, v5),
through confluent-kafka's ``list_consumer_groups`` (librdkafka's 0081 lists with both)."""

from __future__ import annotations

import time

import pytest

from pylog.structs import TopicPartition

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

QUIET = {"log_level": 3}


def _listed(admin: AdminClient, **filters) -> set[str]:
    result = admin.list_consumer_groups(**filters).result(30)
    assert result.errors == []
    return {g.group_id for g in result.valid}


def test_list_groups_filters_by_state_and_by_type(server):
    server.store.create_topic("listed")
    server.store.commit_offsets("idle-group", {TopicPartition("listed", 0): 0})  # Empty: offsets, no members
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "live-group", **QUIET})
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers, **QUIET})
    try:
        c.subscribe(["listed"])
        deadline = time.monotonic() + 30
        while "live-group" not in _listed(admin, states={ConsumerGroupState.STABLE}):
            assert time.monotonic() < deadline, "the consumer never joined"
            c.poll(0.2)
        assert _listed(admin, states={ConsumerGroupState.EMPTY}) == {"idle-group"}
        assert _listed(admin, types={ConsumerGroupType.CLASSIC}) == {"idle-group", "live-group"}
        assert _listed(admin, types={ConsumerGroupType.CONSUMER}) == set()
        assert _listed(admin, states={ConsumerGroupState.STABLE}, types={ConsumerGroupType.CLASSIC}) == {"live-group"}
        groups = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(30).valid
        assert {g.type for g in groups} == {ConsumerGroupType.CLASSIC}
    finally:
        c.close()
