"""The producer: kafka-python's KafkaProducer API over a store.

Run: ``python -m pytest tests/test_producer.py -q``
"""

from __future__ import annotations

import json
import os
import threading

import pytest

import pylog
from pylog.partition import Partition, PartitionInternals, internals
from pylog.clients.partitioner import partition_for_key
from pylog.clients.producer import ProducerTimeoutError
from pylog.structs import RecordMetadata, TopicPartition

from childproc import Child


@pytest.fixture
def store(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as s:
        yield s


def _records(store, topic, partition=0):
    p = store.topic(topic).partition(partition)
    return p.read(p.log_start_offset, max_records=10 ** 6)


def test_send_returns_metadata_and_records_land_in_order(store):
    store.create_topic("t", partitions=1)
    with store.producer() as producer:
        futures = [producer.send("t", b"v%d" % i, key=b"k", headers=[("h", b"x")], timestamp_ms=1000 + i)
                   for i in range(100)]
        md = futures[7].get(timeout=10)
    assert isinstance(md, RecordMetadata)
    assert md == RecordMetadata("t", 0, TopicPartition("t", 0), 7, 1007, -1, None, 1, 2, 2)
    assert [f.get().offset for f in futures] == list(range(100))
    assert all(f.is_done and f.succeeded() and not f.failed() and f.exception is None for f in futures)
    recs = _records(store, "t")
    assert [(r.value, r.key, r.headers, r.timestamp) for r in recs] == [
        (b"v%d" % i, b"k", (("h", b"x"),), 1000 + i) for i in range(100)]


def test_keyed_records_follow_kafkas_partitioner_and_keyless_stick_per_batch(store):
    store.create_topic("t", partitions=6)
    with store.producer(linger_ms=60_000, batch_size=1 << 30) as producer:
        keyed = {k: producer.send("t", b"v", key=k) for k in [b"a", b"b", b"user-42", b"", b"\x00" * 9]}
        keyless = [producer.send("t", b"x") for _ in range(20)]
        explicit = producer.send("t", b"e", key=b"a", partition=5)
        producer.flush()
    for k, f in keyed.items():
        assert f.get().partition == partition_for_key(k, 6)
    assert len({f.get().partition for f in keyless}) == 1  # one batch: one sticky partition
    assert explicit.get().partition == 5
    assert producer.partitions_for("t") == set(range(6))


def test_serializers_compression_and_acks(store):
    store.create_topic("t")
    with store.producer(value_serializer=lambda v: json.dumps(v).encode(), key_serializer=str.encode,
                        compression_type="lz4", acks="all") as producer:
        md = producer.send("t", {"n": 1, "pad": "a" * 500}, key="k1").get(10)
        assert md.serialized_key_size == 2 and md.offset == 0
    [rec] = _records(store, "t")
    assert (rec.key, json.loads(rec.value)) == (b"k1", {"n": 1, "pad": "a" * 500})
    [(_, h)] = list(store.topic("t").partition(0).segments[0].batch_headers())
    assert h.codec == 1 and h.size < 300  # lz4, the producer's choice (compression.type=producer)
    with store.producer(acks=0) as producer:
        md = producer.send("t", b"fire-and-forget").get(10)
        assert md.offset == -1 and md.partition == 0
    assert _records(store, "t")[-1].value == b"fire-and-forget"


# A producer with acks="all" in a child process whose os.fsync and os.fdatasync are wrapped (the real call
# still does the work): each sync appends "sync <size> <path>" to the event file after it returns (size:
# the file's size when it began, so at least that much is on disk), and each completed future appends
# "ack <offset> <value>" after get() returns. It produces until killed. Event lines are plain writes,
# which outlive a SIGKILL; the simulated power cut below then keeps of each file what its syncs covered.
_SYNC_SPY_PRODUCER = """
    import os, sys, threading, pylog
    root, events = sys.argv[1], sys.argv[2]
    ev = os.open(events, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lock = threading.Lock()

    def note(line):
        with lock:
            os.write(ev, (line + "\\n").encode())

    def spy(real):
        def synced(fd):
            path = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
            size = os.fstat(fd).st_size
            real(fd)
            note(f"sync {size} {path}")
        return synced

    os.fsync, os.fdatasync = spy(os.fsync), spy(os.fdatasync)
    store = pylog.open(root, log_cleaner_enable=False)
    producer = store.producer(acks="all")
    i = 0
    while True:
        futures = [(producer.send("t", b"v%d" % (i + j)), i + j) for j in range(1 + i % 37)]
        for f, n in futures:
            note(f"ack {f.get(60).offset} v{n}")
        i += len(futures)
        if i >= 3000 and i - len(futures) < 3000:
            print("acked", i, flush=True)
"""


def test_acks_all_completes_a_future_only_after_its_record_is_fsynced_and_it_survives_a_power_cut(tmp_path):
    root = tmp_path / "store"
    events = tmp_path / "events"
    with pylog.open(str(root), log_cleaner_enable=False) as s:
        s.create_topic("t", config={"segment.bytes": 4096})
    child = Child(_SYNC_SPY_PRODUCER, str(root), str(events), cwd=str(tmp_path))
    try:
        child.expect("acked", 120)  # then killed while it goes on producing
        os.kill(child.proc.pid, 9)
        assert child.wait(30) == -9
    finally:
        child.kill()

    # Where each record lies: (log file, end of its batch), from the files the kill left.
    where: dict[int, tuple[str, int]] = {}
    with pylog.open(str(root), log_cleaner_enable=False) as s:
        p = s.topic("t").partition(0)
        assert len(p.segments) >= 5, "too few rolls: the rolled segments' syncs are part of the test"
        for seg in p.segments:
            path = os.path.realpath(seg.log_path)
            for pos, h in seg.batch_headers():
                for o in range(h.base_offset, h.last_offset + 1):
                    where[o] = (path, pos + h.size)

    # 1. Every future completed after an fsync covering its record's batch (the sync event comes first).
    synced: dict[str, int] = {}
    acked: dict[int, bytes] = {}
    for line in events.read_text().splitlines():
        kind, a, b = line.split(" ", 2)
        if kind == "sync":
            synced[b] = max(synced.get(b, 0), int(a))
        else:
            offset = int(a)
            path, end = where[offset]
            assert synced.get(path, 0) >= end, \
                f"offset {offset} acked before an fsync of {path} reached {end} (synced: {synced.get(path, 0)})"
            acked[offset] = b.encode()
    assert len(acked) >= 3000 and sorted(acked) == list(range(len(acked)))

    # 2. A power cut now: each log file keeps what its last sync covered (none: nothing); the rest is lost,
    #    and the active segment's lost tail reads back as zeros. Indexes and checkpoints stay as they are
    #    (derived data: recovery must not trust them past the log).
    logs = sorted(root.glob("t/0/*.log"))
    for log in logs:
        keep = synced.get(os.path.realpath(log), 0)
        lost = log.stat().st_size - keep
        os.truncate(log, keep)
        if log == logs[-1] and lost > 0:
            with open(log, "ab") as f:
                f.write(bytes(min(lost, 4096)))

    # Every acked record is there: for a reader before recovery, and after a writer recovered.
    with pylog.open(str(root), log_cleaner_enable=False) as s:
        p = s.topic("t").partition(0)
        got = {r.offset: r.value for r in p.read(0, max_records=10 ** 6)}
        assert all(got.get(o) == v for o, v in acked.items()), "acked records lost by the power cut"
        end = p.append_values([b"after"])  # recovers the log as the writer
        assert end >= len(acked)
        assert p.check() == []
        got = {r.offset: r.value for r in p.read(0, max_records=10 ** 6)}
        assert all(got.get(o) == v for o, v in acked.items()), "acked records lost by recovery"


def test_linger_waits_and_flush_sends(store):
    store.create_topic("t")
    producer = store.producer(linger_ms=60_000)
    f = producer.send("t", b"later")
    with pytest.raises(ProducerTimeoutError):
        f.get(timeout=0.2)
    assert store.topic("t").partition(0).log_end_offset == 0
    producer.flush(timeout=10)
    assert f.get(0).offset == 0
    producer.close()
    with pytest.raises(pylog.StoreClosedError):
        producer.send("t", b"x")


def test_linger_elapses_without_flush(store):
    store.create_topic("t")
    with store.producer(linger_ms=50) as producer:
        assert producer.send("t", b"soon").get(timeout=10).offset == 0


def test_callbacks(store):
    store.create_topic("t")
    got, errors = [], []
    with store.producer(linger_ms=60_000) as producer:
        f = producer.send("t", b"v")
        f.add_callback(lambda md, tag: got.append((tag, md.offset)), "before")
        producer.flush()
        f.add_callback(lambda md: got.append(("after", md.offset)))
        f.add_errback(errors.append)
    assert got == [("before", 0), ("after", 0)] and errors == []


def test_errors_at_send(store):
    store.create_topic("t")
    with pytest.raises(pylog.InvalidConfigError, match="broker"):
        store.producer(bootstrap_servers="localhost:9092")
    with pytest.raises(pylog.InvalidConfigError):
        store.producer(no_such_option=1)
    with pytest.raises(pylog.InvalidConfigError):
        store.producer(acks=2)
    with store.producer(max_request_size=1000) as producer:
        with pytest.raises(pylog.RecordTooLargeError):
            producer.send("t", b"x" * 2000)
        with pytest.raises(pylog.UnknownTopicError):
            producer.send("missing", b"x")
        with pytest.raises(ValueError):
            producer.send("t", b"x", partition=9)


def test_a_retried_append_after_a_lost_acknowledgement_is_not_duplicated(store, monkeypatch):
    """The append lands, then an error hides it from the producer, which retries with the same sequence
    numbers: the partition recognises the retry, and the records exist once."""
    store.create_topic("t")
    real = PartitionInternals.append_values_in_turn  # the producer's way into a partition
    calls = []

    def flaky(self, values, keys, timestamps, headers, producer, compression, batch_size=None):
        calls.append(producer)
        first = real(self, values, keys, timestamps, headers, producer, compression, batch_size)
        if len(calls) == 1:
            raise OSError("simulated: the write landed but its completion was lost")
        return first

    monkeypatch.setattr(PartitionInternals, "append_values_in_turn", flaky)
    with store.producer(retries=3, retry_backoff_ms=1, linger_ms=60_000) as producer:
        futures = [producer.send("t", b"v%d" % i) for i in range(10)]
        producer.flush()
    assert len(calls) == 2 and calls[0] == calls[1]  # retried with the same producer id and sequence
    assert [f.get().offset for f in futures] == list(range(10))
    assert [r.value for r in _records(store, "t")] == [b"v%d" % i for i in range(10)]
    # Without idempotence the same failure duplicates the records.
    calls.clear()
    with store.producer(retries=3, retry_backoff_ms=1, enable_idempotence=False, linger_ms=60_000) as producer:
        producer.send("t", b"dup")
    assert [r.value for r in _records(store, "t")].count(b"dup") == 2


def test_concurrent_senders_with_acks_all_share_fsyncs(store, monkeypatch):
    store.create_topic("t", partitions=2)
    fsyncs = []
    real = Partition.flush

    def counting(self):
        fsyncs.append(1)
        return real(self)

    monkeypatch.setattr(Partition, "flush", counting)
    with store.producer(acks="all") as producer:
        def work(t):
            for i in range(50):
                producer.send("t", b"%d-%d" % (t, i), key=b"%d" % t).get(10)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    total = sum(len(_records(store, "t", p)) for p in range(2))
    assert total == 400
    assert len(fsyncs) < 400  # group commit: fewer fsyncs than records
    for p in range(2):  # each thread's records in order
        seen: dict[bytes, int] = {}
        for r in _records(store, "t", p):
            t, i = r.value.split(b"-")
            assert int(i) > seen.get(t, -1)
            seen[t] = int(i)


def test_a_failing_partition_fails_only_its_records_and_starts_a_new_epoch(store, monkeypatch):
    store.create_topic("t", partitions=2)
    real = PartitionInternals.append_values_in_turn  # the producer's way into a partition

    def broken_on_1(self, *args, **kwargs):
        if self.name == "t-1" and not broken_on_1.healed:
            raise OSError(28, "injected: no space left")
        return real(self, *args, **kwargs)

    broken_on_1.healed = False
    monkeypatch.setattr(PartitionInternals, "append_values_in_turn", broken_on_1)
    with store.producer(linger_ms=60_000) as producer:
        good = [producer.send("t", b"a%d" % i, partition=0) for i in range(3)]
        bad = [producer.send("t", b"b%d" % i, partition=1) for i in range(3)]
        producer.flush()
        assert [f.get().offset for f in good] == [0, 1, 2]
        assert all(f.failed() and isinstance(f.exception, OSError) for f in bad)
        with pytest.raises(OSError):
            bad[0].get()
        broken_on_1.healed = True
        f = producer.send("t", b"b-again", partition=1)
        producer.flush()
        again = f.get(10)
        assert again.offset == 0
    headers = [h for seg in store.topic("t").partition(1).segments for _, h in seg.batch_headers()]
    assert [(h.producer_epoch, h.base_sequence) for h in headers] == [(1, 0)]
    with store.producer() as producer:
        with pytest.raises(ValueError):
            producer.send("t", b"x", partition=2)


def test_callbacks_may_send_and_flush(store):
    store.create_topic("t")
    with store.producer(buffer_memory=1000, linger_ms=60_000) as producer:
        forwarded = []

        def forward(md):
            forwarded.append(producer.send("t", b"fwd-%d" % md.offset))
            producer.flush()

        for i in range(20):
            producer.send("t", b"x" * 100).add_callback(forward)
        producer.flush()
    assert len(forwarded) == 20 and all(f.get(10).offset >= 0 for f in forwarded)
    assert store.topic("t").partition(0).log_end_offset == 40


def test_bad_records_are_refused_at_send_and_spoil_nothing(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        store.create_topic("t", config={"max.message.bytes": 1000})
        with store.producer(linger_ms=60_000) as producer:
            good = producer.send("t", b"ok", headers=[("h", None)])
            with pytest.raises(pylog.InvalidRecordError):
                producer.send("t", "not bytes")
            with pytest.raises(pylog.InvalidRecordError):
                producer.send("t", b"v", key="not bytes")
            with pytest.raises(pylog.InvalidRecordError):
                producer.send("t", b"v", headers=[("h", "not bytes")])
            with pytest.raises(pylog.RecordTooLargeError):
                producer.send("t", b"x" * 2000)  # under max_request_size, over the topic's limit
            producer.flush()
            assert good.get(0).offset == 0 and good.get(0).serialized_header_size == 1
        assert [r.value for r in _records(store, "t")] == [b"ok"]


def test_plain_and_checked_records_keep_send_order(store):
    """Records taking send()'s fast path (bytes value, nothing else) and the checked path interleave in
    one accumulation; a partition gets them in send order, each with its own metadata."""
    store.create_topic("t")
    with store.producer(linger_ms=60_000, batch_size=1 << 30) as producer:
        sent = [
            (b"plain-0", {}),
            (b"keyed", {"key": b"k"}),
            (bytearray(b"mutable"), {}),
            (None, {"key": b"tombstone"}),
            (b"plain-1", {}),
            (b"stamped", {"timestamp_ms": 1234}),
            (b"with-headers", {"headers": [("h", b"x")]}),
            (b"plain-2", {"partition": 0}),
            (b"plain-3", {}),
        ]
        futures = [producer.send("t", value, **kw) for value, kw in sent]
        assert producer.metrics()["buffered_bytes"] == sum(
            16 + (0 if v is None else len(v)) + len(kw.get("key", b"")) + (10 if "headers" in kw else 0)
            for v, kw in sent)
        producer.flush()
    recs = _records(store, "t")
    assert [r.value for r in recs] == [None if v is None else bytes(v) for v, _ in sent]
    assert [r.key for r in recs] == [kw.get("key") for _, kw in sent]
    assert recs[5].timestamp == 1234 and futures[5].get().timestamp == 1234
    assert [f.get().offset for f in futures] == list(range(len(sent)))
    assert futures[1].get().serialized_key_size == 1 and futures[0].get().serialized_key_size == -1
    assert futures[3].get().serialized_value_size == -1 and futures[6].get().serialized_header_size == 2


def test_buffer_memory_full_drains_in_the_sending_thread(store):
    store.create_topic("t")
    with store.producer(linger_ms=600_000, batch_size=1 << 30, buffer_memory=1000) as producer:
        futures = [producer.send("t", b"x" * 100) for _ in range(9)]  # 9 x 116 bytes: over 1000
        assert all(f.is_done for f in futures)  # drained in place by the send that filled the buffer
        assert producer.metrics()["buffered_bytes"] == 0
        later = producer.send("t", b"y")
        assert not later.is_done and producer.metrics()["buffered_bytes"] == 17
    assert store.topic("t").partition(0).log_end_offset == 10


def test_topic_limits_hold_after_drains_and_config_changes(store):
    store.create_topic("t", config={"max.message.bytes": 1000})
    with store.producer(linger_ms=60_000) as producer:
        producer.send("t", b"x" * 100)
        producer.flush()
        with pytest.raises(pylog.RecordTooLargeError):  # still refused after the first drain
            producer.send("t", b"x" * 2000)
        store.alter_topic_config("t", {"max.message.bytes": 200})
        stale = producer.send("t", b"x" * 150)  # checked against the limit its accumulation started with
        producer.flush()  # the partition refuses it; the drain picks up the new limit for what follows
        with pytest.raises(pylog.RecordTooLargeError):
            stale.get(10)
        with pytest.raises(pylog.RecordTooLargeError):
            producer.send("t", b"x" * 150)  # refused at send now
        small = producer.send("t", b"x" * 50)
        producer.flush()
        assert small.get(0).offset == 1
    assert [len(r.value) for r in _records(store, "t")] == [100, 50]


def test_a_closed_producer_refuses_every_record(store):
    store.create_topic("t")
    producer = store.producer()
    producer.send("t", b"warm").get(10)  # the topic is known: the next plain send takes the fast path
    producer.close()
    for kwargs in ({}, {"key": b"k"}):
        with pytest.raises(pylog.StoreClosedError):
            producer.send("t", b"late", **kwargs)
    assert store.topic("t").partition(0).log_end_offset == 1


def test_bad_timestamps_and_compacted_topics_are_refused_at_send(store):
    store.create_topic("t")
    store.create_topic("c", config={"cleanup.policy": "compact"})
    with store.producer() as producer:
        producer.send("c", b"v", key=b"k").get(10)
        with pytest.raises(pylog.InvalidRecordError):
            producer.send("c", b"no key")  # the plain record's fast path must not skip this check
        for bad in ("123", 1.5, 1 << 64):
            with pytest.raises(pylog.InvalidRecordError):
                producer.send("t", b"v", timestamp_ms=bad)
        assert producer.send("t", b"v", timestamp_ms=5).get(10).timestamp == 5


def test_value_serializer_applies_to_bytes_values_too(store):
    store.create_topic("t")
    with store.producer(value_serializer=lambda v: b"<" + bytes(v) + b">") as producer:
        producer.send("t", b"a").get(10)
        producer.send("t", b"b").get(10)
    assert [r.value for r in _records(store, "t")] == [b"<a>", b"<b>"]


def test_keyless_records_on_many_partitions_share_one_sticky_partition_per_drain(store):
    store.create_topic("t", partitions=4)
    with store.producer(linger_ms=60_000, batch_size=1 << 30) as producer:
        first = [producer.send("t", b"a%d" % i) for i in range(50)]
        producer.flush()
        second = [producer.send("t", b"b%d" % i) for i in range(50)]
        producer.flush()
    assert len({f.get().partition for f in first}) == 1 and len({f.get().partition for f in second}) == 1
    assert first[0].get().partition != second[0].get().partition  # a completed batch moves them on
    assert [f.get().offset for f in first] == list(range(50))


def test_buffer_memory_holds_for_records_of_any_size(store):
    """The fast paths count bytes only when a record's index reaches a precomputed one: with values of
    random sizes, keyed or not, the buffer still never holds buffer_memory once send() returns."""
    import random

    rng = random.Random(7)
    store.create_topic("t", partitions=3)
    sizes = [rng.choice([0, 1, 10, 100, 1000, 5000, 16 * 1024, 20_000]) for _ in range(600)]
    with store.producer(linger_ms=600_000, batch_size=1 << 30, buffer_memory=64 * 1024) as producer:
        futures = []
        for i, n in enumerate(sizes):
            key = None if i % 3 else b"k%d" % (i % 5)
            futures.append(producer.send("t", bytes([i % 251]) * n, key=key))
            buffered = producer.metrics()["buffered_bytes"]
            assert buffered < 64 * 1024
            assert buffered == sum(sizes[j] + 16 + (0 if j % 3 else len(b"k%d" % (j % 5)))
                                   for j, f in enumerate(futures) if not f.is_done)  # exact, not estimated
        producer.flush()
        assert producer.metrics()["buffered_bytes"] == 0
    got = {(f.get().partition, f.get().offset): i for i, f in enumerate(futures)}
    for p in range(3):
        for r in _records(store, "t", p):
            i = got[(p, r.offset)]
            assert r.value == bytes([i % 251]) * sizes[i] and r.key == (None if i % 3 else b"k%d" % (i % 5))
    assert len(got) == len(sizes)


def test_threads_sending_through_every_path_lose_and_duplicate_nothing(store):
    store.create_topic("t", partitions=2)
    with store.producer(batch_size=4096, buffer_memory=32 * 1024) as producer:  # drains all the time
        futures: dict[bytes, object] = {}

        def work(t):
            for i in range(1500):
                value = b"%d-%d" % (t, i)
                if i % 4 == 0:
                    f = producer.send("t", value)  # plain: fast path
                elif i % 4 == 1:
                    f = producer.send("t", value, key=b"%d" % t)  # keyed: fast path
                elif i % 4 == 2:
                    f = producer.send("t", value, headers=[("i", b"%d" % i)])  # checked
                else:
                    f = producer.send("t", value, partition=t % 2)  # checked
                futures[value] = f
                if i % 500 == 499:
                    producer.flush()

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    seen = {}
    for p in range(2):
        last: dict[bytes, int] = {}
        for r in _records(store, "t", p):
            assert r.value not in seen
            seen[r.value] = (p, r.offset)
            t, i = r.value.split(b"-")
            assert int(i) > last.get(t, -1)  # each thread's records in send order within a partition
            last[t] = int(i)
    assert len(seen) == 6 * 1500
    assert all((f.get(0).partition, f.get(0).offset) == seen[v] for v, f in futures.items())


def test_acks_all_future_succeeds_only_once_fsynced_though_another_producer_handed_over(store, monkeypatch):
    """Two producers of one process share the partition's handle. Producer B lets go of the partitions it
    holds (here: it closes) between producer A's append and A's fsync: A's future must still succeed only
    once A's record is fsynced (a handover does not fsync, and the handle is no longer the writer)."""
    store.create_topic("t", partitions=1)
    part = store.topic("t").partition(0)
    fsynced: list[tuple[str, int]] = []  # (file, its size when fsynced)
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def recording(real):
        def call(fd):
            fsynced.append((os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_size))
            real(fd)
        return call

    monkeypatch.setattr(os, "fsync", recording(real_fsync))
    monkeypatch.setattr(os, "fdatasync", recording(real_fdatasync))
    a = store.producer(acks="all", linger_ms=60_000)  # drained by flush() in this thread only
    b = store.producer(acks="all", linger_ms=60_000)
    b.send("t", b"from b", partition=0)
    b.flush()  # b holds the partition for a turn now
    assert part.is_writer
    ends: list[tuple[str, int]] = []
    real_wanted = internals(part).handover_wanted
    me = threading.current_thread()

    def b_lets_go_after_a_appended():  # a's drain asks this right after its append, before its fsync
        if me is threading.current_thread() and not ends:
            log_path = os.path.realpath(part.segments[-1].log_path)
            ends.append((log_path, os.path.getsize(log_path)))  # a's record ends here
            b.close()  # lets go of the partitions it holds: release_turn, which does not fsync
            assert not part.is_writer
        return real_wanted()

    monkeypatch.setattr(internals(part), "handover_wanted", b_lets_go_after_a_appended)
    future = a.send("t", b"from a" * 100, partition=0)
    a.flush()
    assert future.get(10).offset == 1
    seen = list(fsynced)
    assert ends, "b did not let go between a's append and a's fsync"
    (log_path, end), = ends
    assert any(path == log_path and size >= end for path, size in seen), (log_path, end, seen)
    a.close()


