"""Offset commits from Kafka clients keep their committed leader epoch (OffsetCommit v6+ in, OffsetFetch v5+
out), as Kafka does: librdkafka and the Java client validate their position against it after a leader change
(KIP-320), and librdkafka's regression tests read it back."""

from __future__ import annotations

import msgpack
import pytest

import pylog
from pylog.clients.offsets import decode_commit, offset_key, offset_value
from pylog.structs import OffsetAndMetadata, TopicPartition

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka import TopicPartition as CkTopicPartition  # noqa: E402

QUIET = {"log_level": 3}


def _consumer(server, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": group, "enable.auto.commit": False,
                     **QUIET})


def test_committed_leader_epoch_round_trips_through_commit_and_committed(server):
    server.store.create_topic("epochs", partitions=2)
    c = _consumer(server, "epoch-group")
    try:
        c.commit(offsets=[CkTopicPartition("epochs", 0, 5, leader_epoch=3),
                          CkTopicPartition("epochs", 1, 9)], asynchronous=False)
        got = {tp.partition: (tp.offset, tp.leader_epoch)
               for tp in c.committed([CkTopicPartition("epochs", 0), CkTopicPartition("epochs", 1)], timeout=30)}
    finally:
        c.close()
    assert got == {0: (5, 3), 1: (9, None)}  # None: librdkafka's "no epoch" (-1 on the wire)
    assert server.store.committed_offsets("epoch-group")[TopicPartition("epochs", 0)] == OffsetAndMetadata(5, "", 3)


def test_committed_leader_epoch_survives_a_server_restart(tmp_path):
    path = tmp_path / "store"
    with pylog.serve(path, port=0) as server:
        server.store.create_topic("kept")
        c = _consumer(server, "kept-group")
        c.commit(offsets=[CkTopicPartition("kept", 0, 42, leader_epoch=11)], asynchronous=False)
        c.close()
    with pylog.serve(path, port=0) as server:
        c = _consumer(server, "kept-group")
        try:
            [tp] = c.committed([CkTopicPartition("kept", 0)], timeout=30)
        finally:
            c.close()
    assert (tp.offset, tp.leader_epoch) == (42, 11)


def test_commit_records_without_a_leader_epoch_read_back_with_epoch_minus_one():
    key = offset_key("g", TopicPartition("t", 0))
    old = msgpack.packb([1, 5, "meta", 1_700_000_000_000, 3, "member"], use_bin_type=True)  # before the epoch
    assert decode_commit(key, old) == (("g", "t", 0), OffsetAndMetadata(5, "meta", -1))
    assert decode_commit(key, offset_value(OffsetAndMetadata(5, "meta", 8), 3, "member"))[1].leader_epoch == 8
    bad = msgpack.packb([1, 5, "meta", 1_700_000_000_000, 3, "member", 1 << 40], use_bin_type=True)
    assert decode_commit(key, bad)[1] == OffsetAndMetadata(5, "meta", -1)
