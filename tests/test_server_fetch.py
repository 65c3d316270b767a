"""Fetch's byte limits in ``pylog serve``: a response stays within the request's ``max_bytes`` except for the
first record of the first partition with data (Kafka's rule, so that a record larger than the limits is still
consumed), with librdkafka's consumer (librdkafka's regression test 0082) and on the wire."""

from __future__ import annotations

import socket
import time

import pytest

from pylog.server.protocol import encode_request, parse_response
from serverutil import recv_frame

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402

RECORD = 900 * 1024  # as librdkafka's 0082: under 1 MB with the batch's overhead


def _fill(server, topic: str, partitions: int, per_partition: int, **conf: object) -> None:
    server.store.create_topic(topic, partitions=partitions)
    p = Producer({"bootstrap.servers": server.bootstrap_servers, "message.max.bytes": 2_000_000, "log_level": 3,
                  **conf})
    errors: list = []
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=bytes([65 + i]) * RECORD, partition=part,
                      on_delivery=lambda err, msg: err is not None and errors.append(err))
    assert p.flush(60) == 0
    assert errors == []


def _fetch(server, topic: str, partitions: int, max_bytes: int, partition_max_bytes: int) -> tuple[int, dict]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": i, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": partition_max_bytes} for i in range(partitions)]}]}
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        s.sendall(encode_request(1, 11, 7, "fetch-limits", body))
        frame = recv_frame(s)
    assert frame is not None
    return len(frame), parse_response(1, 11, frame)[1]


def _record_bytes(resp: dict) -> list[int]:
    return [sum(map(len, p["records"])) if isinstance(p["records"], list) else len(p["records"] or b"")
            for t in resp["responses"] for p in t["partitions"]]


def test_fetch_response_of_large_records_stays_within_fetch_max_bytes(server):
    _fill(server, "big", partitions=3, per_partition=2)
    size, resp = _fetch(server, "big", 3, max_bytes=1_000_000, partition_max_bytes=20_000_000)
    per_partition = _record_bytes(resp)
    # The first partition brings one record (it alone fits 1 MB); the others nothing rather than a second MB.
    assert per_partition[0] > RECORD and per_partition[1:] == [0, 0], per_partition
    assert size <= 1_000_512


def test_fetch_returns_a_record_larger_than_max_bytes_from_the_first_partition_only(server):
    _fill(server, "huge", partitions=2, per_partition=1)
    size, resp = _fetch(server, "huge", 2, max_bytes=1000, partition_max_bytes=1000)
    assert [n > RECORD for n in _record_bytes(resp)] == [True, False]
    assert RECORD < size < 2 * RECORD


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_librdkafka_consumer_with_fetch_max_bytes_below_two_records_reads_every_partition(server, compression):
    """librdkafka's 0082: 1 MB fetch.max.bytes, 20 MB max.partition.fetch.bytes, 900 KiB records on 3
    partitions. An answer past fetch.max.bytes + 512 is refused ("Invalid response size") and the consumer
    reconnects forever, reading nothing. Compressed by the producer, the records are stored in lz4 batches
    of several records, a few KiB each: the answer's size must be estimated decompressed (answers are
    uncompressed), or the whole batch (3 x 900 KiB) went out and the consumer read nothing."""
    _fill(server, "fetchmax", partitions=3, per_partition=3, **{"compression.type": compression, "linger.ms": 100})
    errors: list = []
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "fetchmax", "log_level": 3,
                  "error_cb": errors.append,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 20_000_000, "fetch.max.bytes": 1_000_000,
                  "receive.message.max.bytes": 1_000_512})
    try:
        c.subscribe(["fetchmax"])
        got: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while sum(got.values()) < 9 and time.monotonic() < deadline:
            for m in c.consume(10, 0.5):
                assert m.error() is None, m.error()
                assert len(m.value()) == RECORD
                got[m.partition()] = got.get(m.partition(), 0) + 1
        assert got == {0: 3, 1: 3, 2: 3}
        assert errors == []  # the refused answers show here first
    finally:
        c.close()
