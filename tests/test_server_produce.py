"""Produce's per-record errors in ``pylog serve`` (Kafka's KIP-467, ProduceResponse v8+ ``record_errors``): a
batch refused because of some of its records names them, so that a client fails those and not the others
(librdkafka's regression test 0011, ``test_message_single_partition_record_fail``)."""

from __future__ import annotations

import socket

import pytest

from pylog.server.protocol import codes as E
from pylog.server.protocol import encode_request, parse_response
from serverutil import kafka_batch, recv_frame

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402


def _produce_raw(server, topic: str, records: bytes, version: int) -> dict:
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        s.sendall(encode_request(0, version, 3, "record-errors", body))
        frame = recv_frame(s)
    assert frame is not None
    return parse_response(0, version, frame)[1]["responses"][0]["partition_responses"][0]


def test_keyless_records_on_a_compacted_topic_are_named_in_record_errors(server):
    server.store.create_topic("compacted", config={"cleanup.policy": "compact"})
    part = _produce_raw(server, "compacted", kafka_batch([b"a", b"b", b"c"]), version=9)
    assert part["error_code"] == E.INVALID_RECORD
    assert [e["batch_index"] for e in part["record_errors"]] == [0, 1, 2]
    assert "compacted" in part["error_message"]
    assert server.store.topic("compacted").partition(0).log_end_offset == 0  # the batch is refused whole


def test_produce_v7_gets_the_refusal_of_a_keyless_record_without_the_v8_fields(server):
    server.store.create_topic("compacted7", config={"cleanup.policy": "compact"})
    part = _produce_raw(server, "compacted7", kafka_batch([b"a"]), version=7)
    assert part["error_code"] == E.INVALID_RECORD
    assert part["record_errors"] == [] and part["error_message"] in ("", None)  # v7 has neither field


def _deliveries(server, topic: str, **conf) -> tuple[list[int], int]:
    """Produce 100 records, every tenth without a key: (error codes of the failed ones, delivered count)."""
    p = Producer({"bootstrap.servers": server.bootstrap_servers, "log_level": 3, "linger.ms": 200, **conf})
    failed: list[int] = []
    delivered = [0]

    def done(err, msg):
        if err is None:
            delivered[0] += 1
        else:
            failed.append(err.code())

    for i in range(100):
        p.produce(topic, value=b"value %d" % i, key=None if i % 10 == 0 else b"key %d" % i, partition=0,
                  on_delivery=done)
    assert p.flush(30) == 0
    return failed, delivered[0]


def test_librdkafka_fails_only_the_keyless_records_of_a_batch_as_invalid(server):
    server.store.create_topic("compacted-one-batch", config={"cleanup.policy": "compact"})
    failed, delivered = _deliveries(server, "compacted-one-batch")
    # One batch: the 10 named records fail INVALID_RECORD, the 90 others with librdkafka's own "a different
    # record of the batch was invalid" (before KIP-467 support all 100 failed INVALID_RECORD).
    assert failed.count(KafkaError.INVALID_RECORD) == 10
    assert len(failed) == 100 and delivered == 0


def test_librdkafka_delivers_the_keyed_records_sent_one_per_batch(server):
    server.store.create_topic("compacted-per-record", config={"cleanup.policy": "compact"})
    failed, delivered = _deliveries(server, "compacted-per-record", **{"batch.size": 1, "linger.ms": 0})
    assert failed == [KafkaError.INVALID_RECORD] * 10 and delivered == 90
    assert server.store.topic("compacted-per-record").partition(0).log_end_offset == 90
