"""kafka-python (from the package registry) against ``pylog serve``: produce, consume, codecs, timestamps,
admin, groups; and what it wrote seen through pylog's own API (and the reverse)."""

from __future__ import annotations

import time

import pytest

from pylog.clients.partitioner import partition_for_key

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic  # noqa: E402

pytestmark = pytest.mark.slow


# The store and server fixtures: tests/conftest.py.


def _consume_all(server, topic, n, **kw):
    consumer = KafkaConsumer(topic, bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, **kw)
    got = []
    try:
        for rec in consumer:
            got.append(rec)
            if len(got) >= n:
                break
    finally:
        consumer.close()
    return got


def test_records_with_many_headers_round_trip_through_the_server(server, store):
    # More than 16 headers per record (and than records per batch): pylog <= 0.1.0 appended them and then
    # answered every fetch from offset 0 with INVALID_MSG, forever.
    store.create_topic("traced")
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks=1, linger_ms=20)
    sent = []
    for i, count in enumerate([17, 0, 40, 1, 300]):
        headers = [(f"h{j}", bytes([j % 256]) * (j % 7)) for j in range(count)]
        meta = producer.send("traced", value=b"v%d" % i, headers=headers)
        sent.append((b"v%d" % i, headers, meta))
    producer.flush()
    offsets = [meta.get(timeout=10).offset for _, _, meta in sent]
    producer.close()
    assert offsets == list(range(5))
    got = _consume_all(server, "traced", 5)
    assert [(r.offset, r.value, list(r.headers)) for r in got] == \
        [(i, v, list(hs)) for i, (v, hs, _) in enumerate(sent)]
    assert [list(r.headers) for r in store.topic("traced").partition(0).read(0)] == [hs for _, hs, _ in sent]


def test_produce_keys_headers_and_consume(server, store):
    store.create_topic("orders", partitions=4)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks=1, linger_ms=5)
    sent = []
    for i in range(300):
        key = None if i % 3 == 0 else f"user-{i % 17}".encode()
        headers = [("trace", str(i).encode()), ("empty", b"")] if i % 5 == 0 else []
        meta = producer.send("orders", value=f"v{i}".encode(), key=key, headers=headers).get(timeout=10)
        if key is not None:
            assert meta.partition == partition_for_key(key, 4)  # Kafka's murmur2, same as pylog's producer
        sent.append((meta.partition, meta.offset, key, f"v{i}".encode(), headers))
    producer.close()

    got = _consume_all(server, "orders", 300)
    assert sorted((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in got) == \
        sorted((p, o, k, v, [(h, b) for h, b in hs]) for p, o, k, v, hs in sent)

    # The same records through pylog's own API, in the same store.
    by_pylog = {}
    for p in range(4):
        for rec in store.topic("orders").partition(p).read(0, max_records=1000):
            by_pylog[(p, rec.offset)] = (rec.key, rec.value, list(rec.headers))
    for p, o, k, v, hs in sent:
        assert by_pylog[(p, o)] == (k, v, list(hs))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_each_compression_codec(server, store, codec):
    store.create_topic("c", partitions=1)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, compression_type=codec, linger_ms=20,
                             batch_size=64 * 1024)
    values = [(b"x" * (i % 50)) + str(i).encode() for i in range(2000)]
    futures = [producer.send("c", v, key=str(i).encode()) for i, v in enumerate(values)]
    producer.flush()
    assert [f.get(timeout=10).offset for f in futures] == list(range(2000))
    producer.close()
    assert [r.value for r in _consume_all(server, "c", 2000)] == values
    assert [r.value for r in store.topic("c").partition(0).read(0, max_records=5000)] == values


def test_timestamps_latest_and_offsets_for_times(server, store):
    store.create_topic("t", partitions=1)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers)
    base = int(time.time() * 1000) - 100_000
    for i in range(100):
        producer.send("t", str(i).encode(), timestamp_ms=base + i * 10)
    producer.flush()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, consumer_timeout_ms=3000)
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    found = consumer.offsets_for_times({tp: base + 505})
    assert found[tp].offset == 51 and found[tp].timestamp == base + 510
    assert consumer.offsets_for_times({tp: base + 10 ** 6})[tp] is None
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 100}
    consumer.seek(tp, found[tp].offset)
    recs = consumer.poll(timeout_ms=3000, max_records=10)[tp]
    assert [r.offset for r in recs] == list(range(51, 61))
    assert [r.timestamp for r in recs] == [base + i * 10 for i in range(51, 61)]
    # From the end: only records produced after the consumer positioned itself.
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 100
    producer.send("t", b"late").get(timeout=10)
    recs = consumer.poll(timeout_ms=5000)[tp]
    assert [(r.offset, r.value) for r in recs] == [(100, b"late")]
    consumer.close()
    producer.close()


def test_admin_create_describe_grow_delete(server, store):
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    admin.create_topics([NewTopic("a1", num_partitions=3, replication_factor=1,
                                  topic_configs={"retention.ms": "3600000"})])
    assert "a1" in store and store.topic("a1").num_partitions == 3
    assert store.topic("a1").config["retention.ms"] == 3600000
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "a1")])
    text = repr(configs)
    assert "retention.ms" in text and "3600000" in text
    admin.create_partitions({"a1": NewPartitions(total_count=5)})
    assert store.topic("a1").num_partitions == 5
    assert "a1" in admin.list_topics()
    admin.delete_topics(["a1"])
    assert "a1" not in store
    admin.close()


def test_group_commits_are_pylog_committed_offsets(server, store):
    store.create_topic("g", partitions=2)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers)
    for i in range(50):
        producer.send("g", str(i).encode(), partition=i % 2)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("g", bootstrap_servers=server.bootstrap_servers, group_id="kp-group",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10_000)
    got = []
    for rec in consumer:
        got.append(rec)
        if len(got) == 50:
            break
    consumer.commit()
    committed = store.committed_offsets("kp-group")
    assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 25, 1: 25}
    consumer.close()
    # pylog's own consumer in the same group starts from those commits.
    with store.consumer("g", group_id="kp-group", consumer_timeout_ms=300) as c:
        assert list(c) == []


def test_records_of_a_pylog_producer_reach_a_kafka_consumer(server, store):
    store.create_topic("mixed", partitions=1)
    with store.producer() as p:
        for i in range(100):
            p.send("mixed", f"p{i}".encode(), key=b"k", headers=[("h", b"1")])
    got = _consume_all(server, "mixed", 100)
    assert [r.value for r in got] == [f"p{i}".encode() for i in range(100)]
    assert all(r.key == b"k" and list(r.headers) == [("h", b"1")] for r in got)


def test_unknown_topic_is_created_by_metadata_with_num_partitions(server, store):
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers)
    producer.send("fresh", b"1").get(timeout=10)
    producer.close()
    assert "fresh" in store and store.topic("fresh").num_partitions == 1


def test_admin_delete_records_moves_the_log_start(server, store):
    store.create_topic("trim", partitions=1, config={"segment.bytes": 4096})
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, linger_ms=0)
    for i in range(400):
        producer.send("trim", b"%03d" % i + b"x" * 60).get(timeout=10)
    producer.close()
    part = store.topic("trim").partition(0)
    assert len(part.segments) > 3
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    result = admin.delete_records({TopicPartition("trim", 0): 250})
    admin.close()
    assert result[TopicPartition("trim", 0)]["low_watermark"] == 250 == part.log_start_offset
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, consumer_timeout_ms=3000)
    tp = TopicPartition("trim", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 250}
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    assert consumer.poll(timeout_ms=3000, max_records=1)[tp][0].value.startswith(b"250")
    consumer.close()
