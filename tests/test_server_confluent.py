"""confluent-kafka (librdkafka, from the package registry) against ``pylog serve``: produce with and without
keys, headers, every codec, consume from earliest / latest / a timestamp, group commits in pylog's state."""

from __future__ import annotations

import time

import pytest

from pylog.clients.partitioner import partition_for_key

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.slow

QUIET = {"log_level": 3}  # librdkafka logs disconnects at shutdown at level 6


# The store and server fixtures: tests/conftest.py.


def _produce(server, topic, items, **conf):
    """items: (value, key, headers, timestamp) tuples; returns [(partition, offset)] in send order."""
    p = Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 5, **QUIET, **conf})
    out: list = [None] * len(items)
    errors = []

    def done(i):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                out[i] = (msg.partition(), msg.offset())
        return cb

    for i, (value, key, headers, ts) in enumerate(items):
        kw = {"timestamp": ts} if ts else {}
        p.produce(topic, value=value, key=key, headers=headers, on_delivery=done(i), **kw)
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []
    return out


def _consume(server, topics, n, timeout=20.0, **conf):
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": conf.pop("group.id", "reader"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **QUIET, **conf})
    c.subscribe(topics)
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m)
        return got, c
    except BaseException:
        c.close()
        raise


def test_records_with_many_headers_round_trip_through_the_server(server, store):
    # More than 16 headers per record: pylog <= 0.1.0 appended them and could then never serve them again.
    store.create_topic("traced")
    items = [(b"v%d" % i, None, [(f"h{j}", b"x" * (j % 5)) for j in range(count)] or None, None)
             for i, count in enumerate([17, 0, 64, 2])]
    assert _produce(server, "traced", items) == [(0, i) for i in range(4)]
    got, c = _consume(server, ["traced"], 4)
    c.close()
    assert [(m.offset(), m.value(), m.headers()) for m in got] == [(i, v, h) for i, (v, _, h, _) in enumerate(items)]


def test_keys_headers_and_partitioning(server, store):
    store.create_topic("orders", partitions=4)
    items = []
    for i in range(400):
        key = None if i % 4 == 0 else f"user-{i % 23}".encode()
        headers = [("trace", str(i).encode())] if i % 3 == 0 else None
        items.append((f"v{i}".encode(), key, headers, None))
    # librdkafka's default partitioner is CRC32-based; murmur2_random is the Java client's (and pylog's).
    placed = _produce(server, "orders", items, partitioner="murmur2_random")
    for (_value, key, _headers, _), (partition, _) in zip(items, placed, strict=True):
        if key is not None:
            assert partition == partition_for_key(key, 4)
    got, c = _consume(server, ["orders"], 400)
    c.close()
    seen = {(m.partition(), m.offset()): (m.key(), m.value(), m.headers()) for m in got}
    for (value, key, headers, _), pos in zip(items, placed, strict=True):
        assert seen[pos] == (key, value, headers)
        rec = store.topic("orders").partition(pos[0]).read(pos[1], max_records=1)[0]
        assert (rec.key, rec.value, list(rec.headers) or None) == (key, value, headers)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_each_compression_codec(server, store, codec):
    store.create_topic("c", partitions=1)
    values = [(b"y" * (i % 90)) + str(i).encode() for i in range(5000)]
    placed = _produce(server, "c", [(v, None, None, None) for v in values], **{"compression.type": codec})
    assert [o for _, o in placed] == list(range(5000))
    got, c = _consume(server, ["c"], 5000)
    c.close()
    assert [m.value() for m in got] == values
    assert [r.value for r in store.topic("c").partition(0).read(0, max_records=10_000)] == values


def test_timestamps_and_latest(server, store):
    store.create_topic("t", partitions=1)
    base = int(time.time() * 1000) - 50_000
    _produce(server, "t", [(str(i).encode(), None, None, base + 10 * i) for i in range(100)])
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "ts", **QUIET})
    found = c.offsets_for_times([TopicPartition("t", 0, base + 505)], timeout=10)
    assert found[0].offset == 51
    assert c.get_watermark_offsets(TopicPartition("t", 0), timeout=10) == (0, 100)
    c.assign([TopicPartition("t", 0, 51)])
    msgs = []
    deadline = time.monotonic() + 10
    while len(msgs) < 10 and time.monotonic() < deadline:
        msgs += c.consume(10 - len(msgs), 0.5)
    assert [(m.offset(), m.timestamp()[1]) for m in msgs] == [(i, base + 10 * i) for i in range(51, 61)]
    # From the end: only what is produced after.
    c.assign([TopicPartition("t", 0, OFFSET_END)])
    c.consume(1, 1.0)
    _produce(server, "t", [(b"late", None, None, None)])
    late = []
    deadline = time.monotonic() + 10
    while not late and time.monotonic() < deadline:
        late = c.consume(1, 0.5)
    assert [(m.offset(), m.value()) for m in late] == [(100, b"late")]
    c.close()


def test_group_commit_lands_in_pylog_group_state(server, store):
    store.create_topic("g", partitions=3)
    _produce(server, "g", [(str(i).encode(), str(i).encode(), None, None) for i in range(300)],
             partitioner="murmur2_random")
    got, c = _consume(server, ["g"], 300, **{"group.id": "ck-group"})
    assert len(got) == 300
    c.commit(asynchronous=False)
    committed = store.committed_offsets("ck-group")
    assert {tp.partition: om.offset for tp, om in committed.items()} == \
        {p: store.topic("g").partition(p).log_end_offset for p in range(3)}
    assert sum(lag.lag for lag in store.group_lag("ck-group").values()) == 0
    c.close()


def test_admin_list_topics(server, store):
    from confluent_kafka.admin import AdminClient
    store.create_topic("listed", partitions=2)
    md = AdminClient({"bootstrap.servers": server.bootstrap_servers, **QUIET}).list_topics(timeout=10)
    assert "listed" in md.topics and sorted(md.topics["listed"].partitions) == [0, 1]
    assert [b.id for b in md.brokers.values()] == [0]


def test_kip848_consumer_group_protocol_fails_loudly_instead_of_consuming_nothing(server, store):
    """group.protocol=consumer (KIP-848): pylog serve lists ConsumerGroupHeartbeat and answers it with
    UNSUPPORTED_VERSION, which librdkafka turns into a fatal error delivered by poll() (and logged at the
    default level). Not listing the API (as before) left the consumer polling forever, silently, with nothing
    consumed (librdkafka only says so in its debug log)."""
    store.create_topic("t848", 1)
    _produce(server, "t848", [(b"v", None, None, None)])
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "g848", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", **QUIET})
    c.subscribe(["t848"])
    try:
        deadline = time.monotonic() + 30
        err = None
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, "consumed a record through an unsupported protocol"
                err = m.error()
        assert err is not None and err.code() == ck.KafkaError._FATAL
        assert "ConsumerGroupHeartbeat" in err.str() and "API version not supported" in err.str()
    finally:
        c.close()
