"""The producer's send path in C (native/send.c) against its pure-Python reference: murmur2 (scalar, bulk,
per key column) against the pure functions and kafka-python's, the drain's column helpers, and send()
itself: the same records, futures, metadata and errors whichever path runs.

Run: ``python -m pytest tests/test_native_send.py -q``

The pure reference runs in the same process: the modules' ``_native`` set to None (monkeypatch) and
``Producer.send`` called as the class's Python method, which the compiled ``send`` hands back to.
"""

from __future__ import annotations

import contextlib
import random
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pylog
from pylog import accel
from pylog.clients import accumulator, partitioner
from pylog.clients.producer import Producer
from pylog.errors import InvalidArgumentError, PylogError
from pylog.store import quota_manager

needs_native = pytest.mark.skipif(accel.native is None, reason=f"compiled extension not live: {accel.REASON}")
pytestmark = needs_native

kafka_murmur2 = pytest.importorskip("kafka.partitioner.default").murmur2

keys_st = st.binary(max_size=300)


def _signed(u: int) -> int:
    return u - (1 << 32) if u & 0x80000000 else u


@settings(max_examples=2000, deadline=None)
@given(keys_st)
def test_murmur2_c_equals_pure_and_kafka_python(key):
    c = accel.native.murmur2(key)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(partitioner, "_native", None)
        pure = partitioner.murmur2(key)
    assert c == pure == _signed(kafka_murmur2(key))
    assert accel.native.murmur2(bytearray(key)) == accel.native.murmur2(memoryview(key)) == c


def test_murmur2_refuses_what_the_pure_function_refuses():
    strided = memoryview(b"abcdef")[::2]
    for bad in ("str", 5, strided):
        with pytest.raises(TypeError) as c_err:
            accel.native.murmur2(bad)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(partitioner, "_native", None)
            with pytest.raises(TypeError) as pure_err:
                partitioner.murmur2(bad)
        assert type(c_err.value) is type(pure_err.value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | keys_st, max_size=60), st.integers(1, 1000))
def test_bulk_and_key_column_partitions_equal_pure(keys, n):
    lengths = np.array([-1 if k is None else len(k) for k in keys], np.int64)
    data = b"".join(k for k in keys if k is not None)
    c_hash = partitioner.murmur2_many(lengths, data)
    c_parts = partitioner.partitions_for_keys(lengths, data, n)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(partitioner, "_native", None)
        assert c_hash.tolist() == partitioner.murmur2_many(lengths, data).tolist()
        assert c_parts.tolist() == partitioner.partitions_for_keys(lengths, data, n).tolist()
    column = np.frombuffer(accel.native.key_partitions(keys, n), np.int32).tolist()
    assert column == c_parts.tolist()
    assert column == [-1 if k is None else (kafka_murmur2(k) & 0x7FFFFFFF) % n for k in keys]


@pytest.mark.parametrize("lengths,data", [([3, 2], b"abcd"), ([3], b"abcd"), ([-2, 1], b"a"), ([5], b""),
                                         ([2**62, 0], b"ab")])
def test_bulk_lying_lengths_raise_the_same_error(lengths, data):
    with pytest.raises(InvalidArgumentError) as c_err:
        partitioner.murmur2_many(np.array(lengths, np.int64), data)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(partitioner, "_native", None)
        with pytest.raises(InvalidArgumentError) as pure_err:
            partitioner.murmur2_many(np.array(lengths, np.int64), data)
    assert str(c_err.value) == str(pure_err.value)
    with pytest.raises(ValueError):  # the C function checks the lengths itself too
        accel.native.murmur2_lengths(np.array(lengths, np.int64), data)


def test_key_column_with_other_types_is_left_to_the_general_path():
    assert accel.native.key_partitions([b"a", memoryview(b"b")], 4) is None
    with pytest.raises(ValueError):
        accel.native.key_partitions([b"a"], 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=4) | st.tuples(st.binary(max_size=3), st.none() | st.binary(max_size=3),
                                                     st.none(), st.none(), st.none()), max_size=40),
       st.data())
def test_unzip_and_take_equal_pure(rows, data):
    values, keys = accel.native.unzip2(rows)
    assert values == [r[0] if type(r) is tuple else r for r in rows]
    assert keys == [r[1] if type(r) is tuple else None for r in rows]
    if rows:
        idx = np.array(data.draw(st.lists(st.integers(-len(rows), len(rows) - 1), max_size=50)), np.int64)
        expected = [rows[i] for i in idx.tolist()]
        assert accumulator.take(rows, idx) == expected
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(accumulator, "_native", None)
            assert accumulator.take(rows, idx) == expected
    with pytest.raises(IndexError):
        accel.native.take(rows, np.array([len(rows)], np.int64))
    with pytest.raises(TypeError):
        accel.native.take(rows, np.array([0], np.int32))


# ------------------------------------------------------------------------------------------------ send()

record_st = st.fixed_dictionaries({"value": st.binary(max_size=40)},
                                  optional={"key": st.none() | st.binary(max_size=12),
                                            "partition": st.none() | st.integers(-2, 5) | st.booleans(),
                                            "headers": st.none() | st.just([("h", b"v")]),
                                            "timestamp_ms": st.none() | st.integers(0, 2**40)})


def _outcome(send, records):
    """Send every record: "sent", or the type of the PylogError it raised; and the futures."""
    out = []
    futures = []
    for r in records:
        try:
            futures.append(send("t", **r))
            out.append("sent")
        except PylogError as exc:
            out.append(type(exc).__name__)
    return out, futures


def _run(store, records, pure):
    with store.producer(acks=1, batch_size=64, buffer_memory=4096) as producer:
        if pure:
            def send(topic, **kw):
                return Producer.send(producer, topic, **kw)
        else:
            assert type(producer.send).__name__ == "Sender"
            send = producer.send
        seen: list = []
        outcomes, futures = _outcome(send, records)
        for f in futures:
            f.add_callback(lambda m: seen.append((m.partition, m.offset)))
        producer.flush()
        metas = [f.get(5) for f in futures]
    return outcomes, sorted(seen), [(m.partition, m.offset, m.serialized_key_size, m.serialized_value_size,
                       m.serialized_header_size, m.timestamp if r.get("timestamp_ms") is not None else None)
                      for m, r in zip(metas, [r for r, o in zip(records, outcomes) if o == "sent"])]


@contextlib.contextmanager
def _on_path(path, partitions, pure):
    """A store at ``path`` with topic "t", its producers on the compiled path or (``pure``) the reference."""
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=partitions)
        with pytest.MonkeyPatch.context() as mp:
            # The same sticky partitions for key-less records on both runs.
            mp.setattr(partitioner, "random", types.SimpleNamespace(Random=lambda: random.Random(0)))
            if pure:
                mp.setattr(accumulator, "_native", None)
                mp.setattr(partitioner, "_native", None)
            yield store


@settings(max_examples=40, deadline=None)
@given(st.lists(record_st, max_size=60))
def test_send_gives_the_same_records_futures_and_errors_on_both_paths(tmp_path_factory, records):
    root = tmp_path_factory.mktemp("send")
    results = []
    logs = []
    for pure in (False, True):
        with _on_path(root / ("pure" if pure else "c"), 4, pure) as store:
            results.append(_run(store, records, pure))
            t = store.topic("t")
            logs.append([[(r.offset, r.key, r.value, r.headers) for r in t.partition(i).read(0, 10_000)]
                         for i in range(4)])
    assert results[0] == results[1]
    assert logs[0] == logs[1]


def test_send_fast_path_arguments_and_fallbacks(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=2)
        with store.producer() as producer:
            assert producer.send("t", b"a").get(5).offset == 0
            assert producer.send("t", b"b", b"k", None, 1).get(5).partition == 1
            assert producer.send("t", value=b"c", partition=0).get(5).partition == 0
            assert producer.send("t", b"d", timestamp_ms=7).get(5).timestamp == 7
            with pytest.raises(TypeError):
                producer.send("t", b"x", value=b"y")  # given twice: the Python method says so
            with pytest.raises(TypeError):
                producer.send("t", b"x", nonsense=1)
            with pytest.raises(TypeError):
                producer.send()
            with pytest.raises(InvalidArgumentError):
                producer.send("t", b"x", partition=2**70)
            with pytest.raises(TypeError):
                producer.send(["unhashable"], b"x")
        with pytest.raises(pylog.errors.StoreClosedError):
            producer.send("t", b"late")


def test_a_subclass_that_overrides_send_keeps_it(tmp_path):
    calls = []

    class Counting(Producer):
        def send(self, *args, **kwargs):
            calls.append(args)
            return super().send(*args, **kwargs)

    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t")
        p = Counting(store, quotas=quota_manager(store))
        p.send("t", b"v").get(5)
        p.close()
    assert calls == [("t", b"v")]


def test_keyed_values_sent_beside_plain_and_tuple_records_keep_their_keys_on_both_paths(tmp_path):
    # A key alone goes beside its value (Accumulation.rkeys), a partition or headers make a tuple, a bare value
    # neither: one accumulation of all three, rkeys ending before records, drained once, on both paths.
    # (The topic's first record goes through the checks, which make the accumulation: a plain one here.)
    sends = [dict(value=b"p0"), dict(value=b"k1", key=b"a"), dict(value=b"p2"), dict(value=b"k3", key=b"b"),
             dict(value=b"t4", key=b"c", partition=1), dict(value=b"h5", headers=[("h", b"v")]),
             dict(value=b"k6", key=b""), dict(value=b"p7"), dict(value=b"p8")]
    logs = []
    for pure in (False, True):
        with _on_path(tmp_path / ("pure" if pure else "c"), 2, pure) as store:
            with store.producer(acks=1, linger_ms=60_000) as producer:
                send = (lambda **kw: Producer.send(producer, "t", **kw)) if pure else \
                    (lambda **kw: producer.send("t", **kw))
                futures = [send(**kw) for kw in sends]
                producer.flush()
                sizes = [f.get(5).serialized_key_size for f in futures]
            assert sizes == [-1, 1, -1, 1, 1, -1, 0, -1, -1]
            t = store.topic("t")
            got = {r.value: r.key for i in range(2) for r in t.partition(i).read(0, 100)}
            assert got == {kw["value"]: kw.get("key") for kw in sends}
            logs.append([[(r.offset, r.key, r.value, r.headers) for r in t.partition(i).read(0, 100)]
                         for i in range(2)])
    assert logs[0] == logs[1]


@needs_native
def test_keyed_records_waiting_for_a_drain_are_not_tracked_by_the_collector(tmp_path):
    """A keyed record waits for its drain as its value and its key, beside each other in the accumulation's
    two lists, no tuple: nothing the cyclic collector traverses, so the collections that a million waiting
    records' allocations would trigger do not traverse them all. (A record with a partition waits as a tuple
    of bytes, None and an int, untracked by the compiled send() path.)"""
    import gc
    with pylog.open(tmp_path / "store") as store:
        store.create_topic("gc", partitions=4)
        marker = b"untracked-%d"
        with store.producer(acks=1, linger_ms=60_000, batch_size=1 << 30) as producer:
            futures = [producer.send("gc", marker % i, key=b"k%d" % i) for i in range(1000)]
            waiting = [o for o in gc.get_objects() if type(o) is tuple and len(o) == 5
                       and isinstance(o[0], bytes) and o[0].startswith(b"untracked-")]
            assert waiting == []
            producer.flush()
        assert sorted(f.get(timeout=10).offset for f in futures)[-1] >= 249
