"""Kafka's default partitioner: murmur2 and key placement checked against kafka-python and Kafka's own test
vectors, the vectorised path against the scalar one, and the sticky partitioner's KIP-480 behaviour.

Run: ``python -m pytest tests/test_partitioner.py -q``

kafka-python (a test-only dependency) is the oracle for the property tests; those tests are skipped when it
is not installed, the others do not need it.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.clients import partitioner
from pylog.clients.partitioner import (SCALAR_CUTOFF, DefaultPartitioner, StickyPartitioner, murmur2, murmur2_many,
                               partition_for_key, partitions_for_keys)

# From Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2).
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# Computed once with kafka-python's murmur2 (converted to Java's signed int) and hard-coded, covering every
# tail length and bytes >= 0x80 (which Java sees as negative bytes). b"kafka" is also a librdkafka vector.
PINNED = {
    b"": 275646681,
    b"\x00": 375494588,
    b"\xff": -311467685,
    b"\x80\x81": 1642145146,
    b"\xfe\xff\x80": 1812616159,
    b"\xff\xff\xff\xff": 644171429,
    b"\x00\x01\x02\x03\x04": -1916494074,
    b"kafka": -798503068,
    b"pylog-key-0000001": -602134924,
}

# kafka-python's test_murmur2_java_compatibility: partition of each key among 1000 partitions, "compared
# with output from Kafka's org.apache.kafka.clients.producer.Partitioner".
KAFKA_PYTHON_1000 = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}


class _Cluster:
    """The slice of kafka-python's ClusterMetadata its partitioners read: one topic "t" of n partitions."""

    def __init__(self, n: int) -> None:
        self._parts = set(range(n))

    def topics(self):
        return {"t"}

    def partitions_for_topic(self, topic):
        return self._parts

    def available_partitions_for_topic(self, topic):
        return self._parts


@pytest.fixture(scope="module")
def kafka_default():
    """kafka-python's ``(murmur2, partition(key, n))``, or a skip when kafka-python is missing."""
    pytest.importorskip("kafka")
    from kafka.partitioner.default import DefaultPartitioner as KafkaDefault
    from kafka.partitioner.default import murmur2 as kafka_murmur2

    if hasattr(KafkaDefault, "partition"):  # kafka-python >= 3.0: Partitioner.partition(..., cluster)
        oracle = KafkaDefault()

        def place(key, n):
            return oracle.partition("t", key, key, None, None, _Cluster(n))
    else:  # older: DefaultPartitioner()(key, all_partitions, available_partitions)
        def place(key, n):
            parts = list(range(n))
            return KafkaDefault()(key, parts, parts)
    return kafka_murmur2, place


def _column(keys):
    """(int32 lengths, concatenated bytes) of a list of keys (None = null key)."""
    lengths = np.array([-1 if k is None else len(k) for k in keys], np.int32)
    return lengths, b"".join(k for k in keys if k is not None)


def _scalar_hashes(keys):
    return [0 if k is None else murmur2(k) for k in keys]


# ---------------------------------------------------------------------------------------------- murmur2


def test_kafka_utils_test_vectors():
    for key, expected in KAFKA_UTILS_TEST.items():
        assert murmur2(key) == expected, key


def test_pinned_vectors():
    for key, expected in PINNED.items():
        assert murmur2(key) == expected, key
        assert murmur2(bytearray(key)) == expected
        assert murmur2(memoryview(b"xx" + key)[2:]) == expected


def test_kafka_python_java_compatibility_vectors():
    for key, expected in KAFKA_PYTHON_1000.items():
        assert partition_for_key(key, 1000) == expected, key
    assert DefaultPartitioner()(b"abc", list(range(1000))) == 107


def test_long_keys_use_the_numpy_word_mix_identically():
    """murmur2 mixes the words of long keys with numpy; a plain transcription of Kafka's code agrees."""
    rng = random.Random(7)
    for n in (124, 127, 128, 129, 131, 132, 1000, 4099):
        key = rng.randbytes(n)
        assert murmur2(key) == _reference_murmur2(key), n


def _reference_murmur2(data: bytes) -> int:
    """A direct transcription of Kafka's Utils.murmur2 (Java ints emulated with masks)."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length % 4
    if rest >= 3:
        h ^= data[(length & ~3) + 2] << 16
    if rest >= 2:
        h ^= data[(length & ~3) + 1] << 8
    if rest >= 1:
        h ^= data[length & ~3]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


@settings(max_examples=400)
@given(key=st.binary(min_size=0, max_size=300))
def test_murmur2_matches_kafka_python(kafka_default, key):
    kafka_murmur2, _ = kafka_default
    h = murmur2(key)
    assert -(1 << 31) <= h < 1 << 31  # Java's signed int
    assert h & 0xFFFFFFFF == kafka_murmur2(key)  # kafka-python returns the same bits unsigned


@settings(max_examples=400)
@given(key=st.binary(min_size=0, max_size=300), n=st.integers(1, 1000))
def test_partition_matches_kafka_python(kafka_default, key, n):
    _, place = kafka_default
    expected = place(key, n)
    assert partition_for_key(key, n) == expected
    assert DefaultPartitioner()(key, range(n)) == expected
    assert partitions_for_keys(np.array([len(key)], np.int32), key, n).tolist() == [expected]


def test_partition_for_key_rejects_bad_counts():
    for n in (0, -1, 1 << 31):
        with pytest.raises(ValueError):
            partition_for_key(b"k", n)
        with pytest.raises(ValueError):
            partitions_for_keys(np.array([1], np.int32), b"k", n)


# ---------------------------------------------------------------------------------------------- bulk


def _check_bulk(keys, n_partitions=997):
    lengths, data = _column(keys)
    hashes = murmur2_many(lengths, data)
    assert hashes.dtype == np.int32
    assert hashes.tolist() == _scalar_hashes(keys)
    parts = partitions_for_keys(lengths, data, n_partitions)
    assert parts.dtype == np.int32
    assert parts.tolist() == [-1 if k is None else partition_for_key(k, n_partitions) for k in keys]


_key = st.one_of(st.none(), st.binary(max_size=12), st.binary(max_size=SCALAR_CUTOFF + 40))


@settings(max_examples=200)
@given(keys=st.lists(_key, max_size=40))
def test_bulk_equals_scalar(keys):
    _check_bulk(keys)


def test_bulk_mixed_lengths_every_tail_and_long_keys():
    rng = random.Random(1)
    lengths = list(range(0, 20)) + [63, 64, 65, SCALAR_CUTOFF - 1, SCALAR_CUTOFF, SCALAR_CUTOFF + 1, 1000]
    keys = [None if rng.random() < 0.1 else rng.randbytes(rng.choice(lengths)) for _ in range(3000)]
    _check_bulk(keys)
    _check_bulk(list(reversed(keys)), n_partitions=1)


@pytest.mark.parametrize("length", list(range(0, 13)) + [36, SCALAR_CUTOFF])
@pytest.mark.parametrize("nulls", [False, True])
def test_bulk_one_length(length, nulls):
    """The back-to-back fast path, including its end (the last keys' partial words) for 1-3 byte keys."""
    rng = random.Random(length)
    for count in (1, 2, 3, 4, 5, 50):
        keys = [rng.randbytes(length) for _ in range(count)]
        if nulls:
            keys = [None] + [k for key in keys for k in (key, None)]
        _check_bulk(keys)


def test_bulk_across_chunks(monkeypatch):
    monkeypatch.setattr(partitioner, "CHUNK_KEYS", 7)
    rng = random.Random(2)
    uniform = [rng.randbytes(10) for _ in range(100)]
    _check_bulk(uniform)
    _check_bulk([None if i % 9 == 0 else k for i, k in enumerate(uniform)])
    _check_bulk([rng.randbytes(rng.randrange(0, 40)) if rng.random() < 0.9 else None for _ in range(200)])
    _check_bulk([rng.randbytes(rng.choice([3, 5, SCALAR_CUTOFF + 3])) for _ in range(100)])


def test_bulk_large_batch_sampled():
    """More than one real chunk of keys, 0-48 bytes; the scalar check is on a sample to keep it quick."""
    rng = np.random.default_rng(3)
    n = partitioner.CHUNK_KEYS + 5000
    lengths = rng.integers(0, 49, n).astype(np.int32)
    lengths[rng.random(n) < 0.05] = -1
    data = rng.integers(0, 256, int(np.maximum(lengths, 0).sum()), dtype=np.uint8).tobytes()
    hashes = murmur2_many(lengths, data)
    starts = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))])
    for i in rng.choice(n, 3000, replace=False).tolist() + [n - 1, n - 2, n - 3]:
        expected = 0 if lengths[i] < 0 else murmur2(data[starts[i]:starts[i + 1]])
        assert hashes[i] == expected, i


@settings(max_examples=100)
@given(key=st.binary(max_size=SCALAR_CUTOFF + 8), seed=st.integers(0, 2**32 - 1), at=st.integers(0, 30))
def test_bulk_result_does_not_depend_on_neighbours(key, seed, at):
    rng = random.Random(seed)
    alone = murmur2_many(np.array([len(key)], np.int32), key)[0]
    assert alone == murmur2(key)
    for widths in ([0, 1, 2, 3], [SCALAR_CUTOFF], [len(key)], [600, 5, 40]):
        others = [None if rng.random() < 0.2 else rng.randbytes(rng.choice(widths)) for _ in range(30)]
        keys = others[:at] + [key] + others[at:]
        lengths, data = _column(keys)
        assert murmur2_many(lengths, data)[at] == alone


def test_bulk_inputs_and_edge_cases():
    keys = [b"a", None, b"", b"abcde", b"xyz"]
    lengths, data = _column(keys)
    expected = _scalar_hashes(keys)
    for buf in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        assert murmur2_many(lengths, buf).tolist() == expected
    for dtype in (np.int8, np.int16, np.int64):
        assert murmur2_many(lengths.astype(dtype), data).tolist() == expected
    assert murmur2_many(np.array([], np.int32), b"").tolist() == []
    assert partitions_for_keys(np.array([], np.int32), b"", 3).dtype == np.int32
    assert partitions_for_keys(np.array([-1, -1], np.int32), b"", 3).tolist() == [-1, -1]
    assert murmur2_many(np.array([0, 0, -1], np.int32), b"").tolist() == [PINNED[b""], PINNED[b""], 0]
    assert murmur2_many(np.array([1], np.int32), b"\xff").tolist() == [PINNED[b"\xff"]]


def test_bulk_rejects_bad_input():
    with pytest.raises(ValueError):
        murmur2_many(np.array([2, 2], np.int32), b"abc")  # lengths disagree with the data
    with pytest.raises(ValueError):
        murmur2_many(np.array([3, 3], np.int32), b"abcdefg")
    with pytest.raises(ValueError):
        murmur2_many(np.array([-2, 1], np.int32), b"a")
    with pytest.raises(TypeError):
        murmur2_many(np.array([1.0]), b"a")
    with pytest.raises(TypeError):
        murmur2_many(np.array([[1]], np.int32), b"a")


# ---------------------------------------------------------------------------------------------- sticky


def test_sticky_keeps_partition_until_new_batch():
    sticky = StickyPartitioner(random.Random(0))
    parts = range(6)
    assert sticky.current("t") is None
    first = sticky.partition("t", parts)
    assert first in parts
    assert all(sticky.partition("t", parts) == first for _ in range(100))
    prev = first
    seen = {first}
    for _ in range(200):
        new = sticky.on_new_batch("t", prev, parts)
        assert new in parts and new != prev
        assert sticky.partition("t", parts) == new == sticky.current("t")
        seen.add(new)
        prev = new
    assert seen == set(parts)  # every partition gets its turn


def test_sticky_single_partition_and_no_partitions():
    sticky = StickyPartitioner()
    assert sticky.partition("t", [4]) == 4
    assert sticky.on_new_batch("t", 4, [4]) == 4
    with pytest.raises(ValueError):
        StickyPartitioner().partition("t", [])


def test_sticky_stale_new_batch_is_ignored():
    sticky = StickyPartitioner(random.Random(1))
    current = sticky.partition("t", range(5))
    other = (current + 1) % 5
    assert sticky.on_new_batch("t", other, range(5)) == current
    assert sticky.partition("t", range(5)) == current


def test_sticky_topics_are_independent_and_availability_counts():
    sticky = StickyPartitioner(random.Random(2))
    a = sticky.partition("a", range(8))
    for _ in range(20):
        b = sticky.partition("b", range(8), available_partitions=[3, 5])
        assert b in (3, 5)
        sticky.on_new_batch("b", b, range(8), available_partitions=[3, 5])
    assert sticky.partition("a", range(8)) == a
    # The sticky partition became unavailable: the next record moves to an available one.
    b = sticky.partition("b", range(8), available_partitions=[3, 5])
    still = [p for p in (3, 5) if p != b]
    assert sticky.partition("b", range(8), available_partitions=still) == still[0]
    # Nothing available: fall back to all partitions, as Kafka does.
    assert sticky.partition("c", range(3), available_partitions=[]) in range(3)


def test_sticky_concurrent_new_batch_rotates_once():
    sticky = StickyPartitioner()
    parts = range(16)
    for _ in range(20):
        prev = sticky.partition("t", parts)
        barrier = threading.Barrier(8)
        results: list[int] = []

        def report():
            barrier.wait()
            results.append(sticky.on_new_batch("t", prev, parts))

        threads = [threading.Thread(target=report) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(results)) == 1 and results[0] != prev
        assert sticky.partition("t", parts) == results[0]


def test_sticky_thread_safety_smoke():
    sticky = StickyPartitioner()
    errors: list[BaseException] = []
    out_of_range: list[int] = []

    def producer(seed):
        rng = random.Random(seed)
        try:
            for _ in range(3000):
                topic = rng.choice("xyz")
                p = sticky.partition(topic, range(7))
                if p not in range(7):
                    out_of_range.append(p)
                if rng.random() < 0.1:
                    sticky.on_new_batch(topic, p, range(7))
        except BaseException as e:  # noqa: BLE001 - surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not out_of_range


# ---------------------------------------------------------------------------------------------- default


def test_default_partitioner_single_records():
    part = DefaultPartitioner(StickyPartitioner(random.Random(3)))
    for key in (b"", b"abc", b"some-key"):
        assert part(key, range(12)) == partition_for_key(key, 12)
        # Partition ids are taken from the sorted list, as kafka-python does.
        assert part(key, [10, 20, 30]) == [10, 20, 30][partition_for_key(key, 3)]
        # Availability never moves a keyed record.
        assert part(key, range(12), [0]) == partition_for_key(key, 12)
    sticky = part(None, range(12), topic="t")
    assert all(part(None, range(12), topic="t") == sticky for _ in range(10))
    new = part.on_new_batch("t", sticky, range(12))
    assert new != sticky and part(None, range(12), topic="t") == new
    with pytest.raises(ValueError):
        part(b"k", [])


def test_default_partitioner_batch_matches_single_records():
    rng = random.Random(4)
    keys = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 30)) for _ in range(500)]
    lengths, data = _column(keys)
    for all_partitions in (range(9), [2, 4, 6, 8, 10]):
        part = DefaultPartitioner(StickyPartitioner(random.Random(5)))
        batch = part.partition_batch(lengths, data, all_partitions, topic="t")
        assert batch.dtype == np.int32
        assert batch.tolist() == [part(k, all_partitions, topic="t") for k in keys]
    assert DefaultPartitioner().partition_batch(np.array([], np.int32), b"", range(3)).tolist() == []
