"""Tests of pylog.partition through the public API: scenarios, then a stateful model test.

Run: ``python -m pytest tests/test_partition.py -q -p no:cacheprovider``

The stateful test drives one partition with every append/read path, rolls, flushes, clean reopens and
simulated crashes, and compares it after every step with the simplest model there is: a list with one
``(key, value, headers, timestamp)`` tuple per offset. A crash is simulated by copying the store
directory while the store is open (exactly what a crash leaves on disk, since every write is in the page
cache), optionally tearing the copied active log after the last durable byte, and opening the copy.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

import pylog
from pylog.storage.checkpoint import read_checkpoint

from storetools import crash_copy, log_batches
from pylog.storage.records import CODEC_LZ4

T0 = 1_700_000_000_000


# ------------------------------------------------------------------------------------------- helpers


def _open(path, **options):
    return pylog.open(str(path), **options)


def _summary(rec):
    """What the model stores per offset: (key, value, headers, timestamp)."""
    return (rec.key, rec.value, tuple(tuple(h) for h in rec.headers), rec.timestamp)


def _partition_dir(store_path, topic="t", number=0):
    return os.path.join(str(store_path), topic, str(number))


def _logs(pdir):
    return sorted(n for n in os.listdir(pdir) if n.endswith(".log"))


@pytest.fixture
def store(tmp_path):
    s = _open(tmp_path / "store")
    yield s
    s.close()


# ------------------------------------------------------------------------------------------ scenarios


def test_read_at_log_end_returns_empty(store):
    p = store.create_topic("t").partition(0)
    assert p.read(0) == []
    assert len(p.read_columns(0)) == 0
    first = p.append_values([b"a", b"b", b"c"])
    assert first == 0
    assert p.log_end_offset == 3
    assert p.read(3) == []
    assert len(p.read_columns(3)) == 0
    assert p.read(2, max_records=10)[0].value == b"c"


def test_read_out_of_range_raises(store):
    p = store.create_topic("t").partition(0)
    with pytest.raises(pylog.OffsetOutOfRangeError):
        p.read(1)
    p.append_values([b"x"] * 5)
    for bad in (-1, 6, 100):
        with pytest.raises(pylog.OffsetOutOfRangeError) as info:
            p.read(bad)
        assert isinstance(info.value, pylog.PylogError)
        with pytest.raises(pylog.OffsetOutOfRangeError):
            p.read_columns(bad)
    assert [r.offset for r in p.read(0)] == [0, 1, 2, 3, 4]


def test_append_nothing_or_mismatched_columns_raises(store):
    p = store.create_topic("t").partition(0)
    with pytest.raises(pylog.InvalidRecordError):
        p.append([])
    with pytest.raises(pylog.InvalidRecordError):
        p.append_values([])
    with pytest.raises(pylog.InvalidRecordError):
        p.append_values([b"a", b"b"], keys=[b"k"])
    with pytest.raises(pylog.InvalidRecordError):
        p.append_columns(np.array([1, 2], np.int32), b"abcd")  # lengths add up to 3
    with pytest.raises(pylog.InvalidRecordError):
        p.append_columns(np.array([1, 2], np.int32), b"abc", key_lengths=np.array([1], np.int32), key_data=b"k")
    assert p.log_end_offset == 0
    assert p.check() == []


def test_records_carry_offset_topic_partition_and_headers(store):
    p = store.create_topic("events", partitions=2).partition(1)
    first = p.append([pylog.Record(value=b"v", key=b"k", headers=[("h", b"x"), ("n", None)], timestamp=T0),
                      pylog.Record(value=None, key=b"tomb", timestamp=T0 + 1),
                      pylog.Record(value=b"", key=None, timestamp=T0 + 2)])
    recs = p.read(first)
    assert [(r.offset, r.topic, r.partition) for r in recs] == [(0, "events", 1), (1, "events", 1),
                                                                 (2, "events", 1)]
    assert recs[0].headers == (("h", b"x"), ("n", None))
    assert recs[0].key == b"k" and recs[0].value == b"v" and recs[0].timestamp == T0
    assert recs[1].value is None and recs[1].headers == ()
    assert recs[2].key is None and recs[2].value == b""


def test_timestamps_default_to_append_time(store):
    p = store.create_topic("t").partition(0)
    before = pylog.storage.records.now_ms()
    p.append_values([b"a", b"b"])
    p.append([pylog.Record(value=b"c"), pylog.Record(value=b"d", timestamp=T0)])
    after = pylog.storage.records.now_ms()
    ts = [r.timestamp for r in p.read(0)]
    assert all(before <= t <= after for t in ts[:3]), ts
    assert ts[3] == T0
    assert all(r.timestamp_type == 0 for r in p.read(0))


def _brute_offset_for_timestamp(timestamps, target):
    for off, ts in enumerate(timestamps):
        if ts >= target:
            return off
    return None


def test_offset_for_timestamp_monotonic(store):
    p = store.create_topic("t", config={"segment.bytes": 2048, "index.interval.bytes": 64}).partition(0)
    stamps = [T0 + 10 * i for i in range(300)]
    for i in range(0, 300, 3):
        p.append_values([b"v" * 20] * 3, timestamps=stamps[i:i + 3])
    assert len(p.segments) > 3
    assert p.offset_for_timestamp(0) == 0
    assert p.offset_for_timestamp(T0) == 0
    assert p.offset_for_timestamp(T0 + 1) == 1
    assert p.offset_for_timestamp(T0 + 10 * 299) == 299
    assert p.offset_for_timestamp(T0 + 10 * 299 + 1) is None
    for target in range(T0 - 5, T0 + 3000, 7):
        assert p.offset_for_timestamp(target) == _brute_offset_for_timestamp(stamps, target), target


def test_offset_for_timestamp_non_monotonic_across_segments(tmp_path):
    rng = random.Random(7)
    stamps = [T0 + rng.randrange(0, 5000) for _ in range(600)]
    with _open(tmp_path / "s") as store:
        p = store.create_topic("t", config={"segment.bytes": 4096, "index.interval.bytes": 100}).partition(0)
        i = 0
        while i < len(stamps):
            n = rng.randrange(1, 8)
            p.append_values([b"%d" % j for j in range(i, i + n)][:len(stamps) - i], timestamps=stamps[i:i + n])
            i += n
        assert len(p.segments) > 2
        targets = sorted(set(stamps)) + [T0 - 1, T0 + 5000, T0 + 10_000] + [rng.randrange(T0, T0 + 5000)
                                                                             for _ in range(100)]
        for target in targets:
            assert p.offset_for_timestamp(target) == _brute_offset_for_timestamp(stamps, target), target
        assert p.max_timestamp() == max(stamps)
    with _open(tmp_path / "s") as store:  # and from the sealed, reopened indexes
        p = store.topic("t").partition(0)
        for target in targets:
            assert p.offset_for_timestamp(target) == _brute_offset_for_timestamp(stamps, target), target
        assert p.max_timestamp() == max(stamps)


def test_offset_for_timestamp_empty_partition(store):
    p = store.create_topic("t").partition(0)
    assert p.offset_for_timestamp(0) is None
    assert p.max_timestamp() == -1


def test_read_columns_equals_read(tmp_path):
    rng = random.Random(3)
    with _open(tmp_path / "s", segment_bytes=8192, index_interval_bytes=256) as store:
        p = store.create_topic("t").partition(0)
        for i in range(120):
            n = rng.randrange(1, 6)
            values = [None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 80)) for _ in range(n)]
            keys = None if i % 3 == 0 else [None if rng.random() < 0.2 else b"k%d" % rng.randrange(9)
                                            for _ in range(n)]
            headers = None if i % 4 else [[("a", b"1")] if rng.random() < 0.5 else [] for _ in range(n)]
            stamps = None if i % 5 == 0 else [T0 + rng.randrange(1000) for _ in range(n)]
            p.append_values(values, keys=keys, timestamps=stamps, headers=headers)
        end = p.log_end_offset
        assert len(p.segments) > 2
        for start in [0, 1, end - 1, end] + [rng.randrange(end) for _ in range(30)]:
            for limit in (1, 7, 10_000):
                recs = p.read(start, max_records=limit)
                cols = p.read_columns(start, max_records=limit)
                assert len(recs) == min(limit, end - start)
                assert cols.to_records() == recs
                assert cols.values() == [r.value for r in recs]
                assert cols.keys() == [r.key for r in recs]
                assert cols.offsets.tolist() == [r.offset for r in recs]
                assert cols.timestamps.tolist() == [r.timestamp for r in recs]
                vo = cols.value_offsets
                assert vo[-1] == len(cols.value_data)
                for j, r in enumerate(recs):
                    if r.value is not None:
                        assert cols.value_data[vo[j]:vo[j + 1]] == r.value


def test_append_columns_round_trip(store):
    p = store.create_topic("t").partition(0)
    values = [b"alpha", None, b"", b"omega" * 10]
    keys = [b"k1", b"k2", None, b""]
    vl = np.array([-1 if v is None else len(v) for v in values], np.int32)
    kl = np.array([-1 if k is None else len(k) for k in keys], np.int32)
    stamps = np.array([T0 + 5, T0, T0 + 9, T0 + 1], np.int64)
    first = p.append_columns(vl, b"".join(v for v in values if v), kl, b"".join(k for k in keys if k), stamps)
    recs = p.read(first)
    assert [r.value for r in recs] == values
    assert [r.key for r in recs] == keys
    assert [r.timestamp for r in recs] == stamps.tolist()


def test_large_append_is_split_into_batches_by_max_message_bytes(tmp_path):
    limit = 1024
    with _open(tmp_path / "s") as store:
        p = store.create_topic("t", config={"max.message.bytes": limit}).partition(0)
        values = [bytes([i % 256]) * (50 + i % 60) for i in range(400)]
        keys = [b"key-%d" % i for i in range(400)]
        first = p.append_values(values, keys=keys, headers=[[("i", b"%d" % i)] for i in range(400)])
        vl = np.array([len(v) for v in values], np.int32)
        second = p.append_columns(vl, b"".join(values))
        assert (first, second) == (0, 400)
        assert p.log_end_offset == 800
        batches = [h for seg in p.segments for _, h in seg.batch_headers()]
        assert len(batches) > 20
        assert all(h.size <= limit for h in batches), max(h.size for h in batches)
        # Offsets stay dense across the split.
        nxt = 0
        for h in batches:
            assert h.base_offset == nxt
            nxt = h.next_offset
        recs = p.read(0, max_records=10_000)
        assert [r.value for r in recs] == values + values
        assert [r.key for r in recs[:400]] == keys
        assert [r.headers for r in recs[:400]] == [(("i", b"%d" % i),) for i in range(400)]
        assert all(r.key is None for r in recs[400:])
        assert p.check() == []


def test_one_huge_record_raises_record_too_large(store):
    p = store.create_topic("t", config={"max.message.bytes": 1000}).partition(0)
    p.append_values([b"ok"])
    for call in (lambda: p.append_values([b"x" * 2000]),
                 lambda: p.append_values([b"small"] * 10 + [b"x" * 2000]),
                 lambda: p.append([pylog.Record(value=b"v", key=b"k" * 5000)]),
                 lambda: p.append_columns(np.array([3000], np.int32), b"y" * 3000)):
        with pytest.raises(pylog.RecordTooLargeError):
            call()
    # Nothing of a refused append is written.
    assert p.log_end_offset == 1
    assert [r.value for r in p.read(0)] == [b"ok"]
    assert p.check() == []


def test_log_append_time_topic(store):
    p = store.create_topic("t", config={"message.timestamp.type": "LogAppendTime"}).partition(0)
    before = pylog.storage.records.now_ms()
    p.append_values([b"a", b"b"], timestamps=[1, 2])
    p.append([pylog.Record(value=b"c", timestamp=5)])
    after = pylog.storage.records.now_ms()
    recs = p.read(0)
    assert len(recs) == 3
    for r in recs:
        assert before <= r.timestamp <= after
        assert r.timestamp_type == 1
    cols = p.read_columns(0)
    assert cols.timestamp_types.tolist() == [1, 1, 1]
    assert cols.timestamps.tolist() == [r.timestamp for r in recs]
    assert p.offset_for_timestamp(3) == 0


@pytest.mark.parametrize("fresh_handle", [False, True])
def test_read_max_bytes_bounds_the_decompressed_size_of_lz4_batches(tmp_path, fresh_handle):
    """``max_bytes`` counts batches as decompressed: 400 batches of 64 KiB that lz4 stores in about 300 bytes
    each came back whole from a 1 MiB read (25 MiB decompressed; ``pylog serve`` decompressed 2 GB for one
    52 MB Fetch of such records). ``fresh_handle``: read from the file rather than the writer's recent
    batches (segment_tail)."""
    value = b"z" * 65536
    with _open(tmp_path / "s") as store:
        p = store.create_topic("t", config={"compression.type": "lz4"}).partition(0)
        for _ in range(400):
            p.append_values([value])
        assert p.size_bytes() < 400 * 1024  # stored compressed
        reader = pylog.open(tmp_path / "s", read_only=True) if fresh_handle else store
        try:
            got = reader.topic("t").partition(0).read(0, max_records=10_000, max_bytes=1 << 20)
        finally:
            if fresh_handle:
                reader.close()
        assert 0 < sum(len(r.value) for r in got) <= (1 << 20) + len(value)
        assert [r.offset for r in got] == list(range(len(got)))


def test_lz4_topic_round_trip(tmp_path):
    values = [(b"compressible-%d " % (i % 7)) * 20 for i in range(500)]
    keys = [b"k%d" % (i % 13) for i in range(500)]
    with _open(tmp_path / "s") as store:
        p = store.create_topic("t", config={"compression.type": "lz4", "segment.bytes": 16384}).partition(0)
        for i in range(0, 500, 50):
            p.append_values(values[i:i + 50], keys=keys[i:i + 50],
                            headers=[[("n", b"%d" % j)] for j in range(i, i + 50)])
        p.append_values([os.urandom(100)])  # incompressible: stored plain
        batches = [h for seg in p.segments for _, h in seg.batch_headers()]
        assert sum(h.codec == CODEC_LZ4 for h in batches) == 10
        assert sum(h.size for h in batches) < sum(map(len, values)) // 4
        assert [r.value for r in p.read(0, max_records=500)] == values
        assert p.check() == []
    with _open(tmp_path / "s") as store:
        p = store.topic("t").partition(0)
        recs = p.read(0, max_records=1000)
        assert [r.value for r in recs[:500]] == values
        assert [r.key for r in recs[:500]] == keys
        assert recs[123].headers == (("n", b"123"),)
        cols = p.read_columns(250, max_records=100)
        assert cols.values() == values[250:350]


def test_compacted_topic_rejects_keyless_records(store):
    p = store.create_topic("t", config={"cleanup.policy": "compact"}).partition(0)
    with pytest.raises(pylog.InvalidRecordError):
        p.append_values([b"v"])
    with pytest.raises(pylog.InvalidRecordError):
        p.append_values([b"v", b"w"], keys=[b"k", None])
    with pytest.raises(pylog.InvalidRecordError):
        p.append([pylog.Record(value=b"v")])
    with pytest.raises(pylog.InvalidRecordError):
        p.append_columns(np.array([1], np.int32), b"v")
    with pytest.raises(pylog.InvalidRecordError):
        p.append_columns(np.array([1], np.int32), b"v", np.array([-1], np.int32), b"")
    assert p.log_end_offset == 0
    assert p.append_values([b"v", None], keys=[b"k", b"k"]) == 0  # tombstones are fine with a key
    assert [(r.key, r.value) for r in p.read(0)] == [(b"k", b"v"), (b"k", None)]


def test_reading_across_many_segments(tmp_path):
    with _open(tmp_path / "s", segment_bytes=1024, index_interval_bytes=128) as store:
        p = store.create_topic("t").partition(0)
        for i in range(0, 2000, 4):
            p.append_values([b"value-%06d" % j for j in range(i, i + 4)], keys=[b"%d" % (j % 10) for j in
                                                                                 range(i, i + 4)])
        assert len(p.segments) > 50
        recs = p.read(0, max_records=10_000)
        assert [r.offset for r in recs] == list(range(2000))
        assert [r.value for r in recs] == [b"value-%06d" % j for j in range(2000)]
        rng = random.Random(1)
        for start in [rng.randrange(2000) for _ in range(100)] + [s.base_offset for s in p.segments]:
            limit = rng.randrange(1, 300)
            got = p.read(start, max_records=limit)
            assert [r.offset for r in got] == list(range(start, min(start + limit, 2000)))
            assert p.read_columns(start, max_records=limit).offsets.tolist() == [r.offset for r in got]
        # max_bytes stops early but always returns at least one batch.
        small = p.read(0, max_records=10_000, max_bytes=1)
        assert 1 <= len(small) <= 4 and small[0].offset == 0
        assert p.check() == []


def test_roll_and_flush(store):
    p = store.create_topic("t").partition(0)
    p.roll()  # no-op on an empty active segment
    assert len(p.segments) == 1
    p.append_values([b"a"])
    p.roll()
    p.roll()
    assert [s.base_offset for s in p.segments] == [0, 1]
    p.append_values([b"b"])
    p.flush()
    assert [r.value for r in p.read(0)] == [b"a", b"b"]
    assert p.check() == []


def test_reopen_cleanly_closed_store_keeps_everything(tmp_path):
    path = tmp_path / "s"
    expected = []
    with _open(path, segment_bytes=2048, index_interval_bytes=200) as store:
        store.create_topic("t", partitions=2, config={"compression.type": "lz4"})
        p = store.topic("t").partition(1)
        for i in range(200):
            rec = pylog.Record(value=b"v%d" % i * (i % 5), key=b"k%d" % i if i % 3 else None,
                               headers=[("i", b"%d" % i)] if i % 2 else None, timestamp=T0 + (i * 37) % 101)
            p.append([rec])
            expected.append((rec.key, rec.value, rec.headers, rec.timestamp))
        nsegs = len(p.segments)
        assert nsegs > 3
    for round_ in range(2):
        with _open(path) as store:
            p = store.topic("t").partition(1)
            assert store.topic("t").partition(0).log_end_offset == 0
            assert p.log_end_offset == len(expected)
            assert len(p.segments) == nsegs
            assert p.check() == []
            assert [_summary(r) for r in p.read(0, max_records=1000)] == expected
            # Appending after a clean reopen continues the offsets densely.
            off = p.append_values([b"more-%d" % round_], keys=[b"m"], timestamps=[T0])
            assert off == len(expected)
            expected.append((b"m", b"more-%d" % round_, (), T0))
            assert p.check() == []


def test_topic_name_rules(store):
    for bad in ("..", ".", "a/b", "x" * 250, "", "has space", "é", "../escape", "...", "t\n"):
        with pytest.raises(pylog.InvalidTopicError):
            store.create_topic(bad)
        with pytest.raises(pylog.InvalidTopicError):
            store.topic(bad)
    for good in ("x" * 249, "a.b-c_D9", "a..."):
        store.create_topic(good)
        assert store.topic(good).partition(0).log_end_offset == 0
    with pytest.raises(pylog.TopicExistsError):
        store.create_topic("a.b-c_D9")
    with pytest.raises(pylog.UnknownTopicError):
        store.topic("missing")
    with pytest.raises(pylog.UnknownTopicError):
        store.topic("a.b-c_D9").partition(1)
    assert sorted(store.topics()) == sorted(["x" * 249, "a.b-c_D9", "a..."])


@pytest.mark.parametrize("config", [
    {"no.such.setting": 1},
    {"segment.bytes": "abc"},
    {"segment.bytes": -1},
    {"segment.bytes": 1 << 40},
    {"segment.bytes": True},
    {"segment.bytes": 1.5},
    {"index.interval.bytes": -1},
    {"compression.type": "brotli"},
    {"compression.type": 1},
    {"cleanup.policy": "bogus"},
    {"cleanup.policy": ""},
    {"message.timestamp.type": "Whenever"},
    {"min.cleanable.dirty.ratio": 2},
    {"max.message.bytes": 10},
    {"max.compaction.lag.ms": 5, "min.compaction.lag.ms": 10},
])
def test_invalid_config_is_rejected(tmp_path, config):
    with _open(tmp_path / "s") as store:
        with pytest.raises(pylog.InvalidConfigError):
            store.create_topic("t", config=config)
        assert "t" not in store.topics()
    opts = {k.replace(".", "_"): v for k, v in config.items()}
    with pytest.raises(pylog.InvalidConfigError):
        _open(tmp_path / "s2", **opts)


def test_valid_config_strings_are_parsed(store):
    t = store.create_topic("t", config={"segment.bytes": "4096", "cleanup.policy": "compact,delete"})
    assert t.config["segment.bytes"] == 4096
    assert t.config.compact


#: Exception classes a caller never sees: raised and caught inside pylog (or turned into a CLI exit code),
#: so they are not exported. Every name here must exist; the test fails on a stale entry.
_INTERNAL_EXCEPTIONS = {
    "pylog.errors.CommandError",          # ends a CLI command: printed, and its code is the exit status
    "pylog.errors.BadInputLineError",     # a bad input line of the CLI producer, reported per line
    "pylog.errors.CleanerStoppedError",   # a cleaning cut short by closing; the cleaner thread catches it
    # Still defined outside pylog/errors.py: their modules (index.py, segment.py) are being split.
    "pylog.index.IndexError_",              # a failed index check; the segment rebuilds the index
    "pylog.storage.segment_file.SegmentReplacedError", # a FileNotFoundError: the partition's readers retry on it
}
#: Public errors exported from the ``pylog.spark`` subpackage rather than from ``pylog``.
_SPARK_EXCEPTIONS = {"pylog.errors.InvalidOptionError", "pylog.errors.DataLossError",
                     "pylog.errors.SinkTransactionLostError"}
#: Public errors still defined outside pylog/errors.py: none.
_PUBLIC_OUTSIDE_ERRORS_PY: set[str] = set()


def _pylog_modules() -> list:
    """Every module of the pylog package, imported (the Spark ones too: the test extra installs PySpark)."""
    import importlib
    import pkgutil
    mods = [pylog]
    for info in pkgutil.walk_packages(pylog.__path__, "pylog."):
        if info.name == "pylog.__main__":
            continue  # runs the CLI on import
        mods.append(importlib.import_module(info.name))
    return mods


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_every_exception_class_in_pylog_is_a_documented_exported_pylog_error():
    import ast
    import inspect
    import pylog.errors
    import pylog.spark
    exported = {name: getattr(pylog, name) for name in pylog.__all__}
    found: dict[str, type] = {}
    for mod in _pylog_modules():
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__.startswith("pylog"):
                found[_qualname(obj)] = obj
        if not (mod.__file__ or "").endswith(".py"):
            continue  # the compiled accelerator (pylog._native): no source to parse; it defines no classes
        # A class defined inside a function or another class is invisible to the walk above: refuse it.
        source = inspect.getsource(mod)
        top = {node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.name not in top:
                bases = [ast.unparse(b) for b in node.bases]
                assert not any(b.endswith(("Error", "Exception", "Error_")) for b in bases), (
                    f"{mod.__name__}: nested exception class {node.name}")
    for name, obj in exported.items():
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            found[_qualname(obj)] = obj
    for name in pylog.errors.__all__:
        found[_qualname(getattr(pylog.errors, name))] = getattr(pylog.errors, name)

    for allow in (_INTERNAL_EXCEPTIONS, _PUBLIC_OUTSIDE_ERRORS_PY):
        assert allow <= found.keys(), f"stale allow-list entries: {sorted(allow - found.keys())}"
    assert len(found) >= 30  # the walk found the package's classes (27 public errors, 5 internal today)
    problems = []
    for qual, cls in sorted(found.items()):
        if "__doc__" not in vars(cls) or not (cls.__doc__ or "").strip():
            problems.append(f"{qual}: no docstring of its own")
        if qual in _INTERNAL_EXCEPTIONS:
            if cls.__name__ in pylog.__all__:
                problems.append(f"{qual}: listed as internal but exported from pylog")
            continue
        if not issubclass(cls, pylog.PylogError):
            problems.append(f"{qual}: does not derive from pylog.PylogError")
        if qual in _SPARK_EXCEPTIONS:
            if getattr(pylog.spark, cls.__name__, None) is not cls or cls.__name__ not in pylog.spark.__all__:
                problems.append(f"{qual}: not exported from pylog.spark")
            continue
        if exported.get(cls.__name__) is not cls:
            problems.append(f"{qual}: not exported from pylog (pylog.__all__)")
        if cls.__module__ != "pylog.errors" and qual not in _PUBLIC_OUTSIDE_ERRORS_PY:
            problems.append(f"{qual}: defined outside pylog/errors.py")
        if cls.__module__ == "pylog.errors" and cls.__name__ not in pylog.errors.__all__:
            problems.append(f"{qual}: missing from pylog.errors.__all__")
    assert problems == []


def test_second_handle_reads_what_the_writer_appends(tmp_path):
    path = tmp_path / "s"
    with _open(path, segment_bytes=2048, index_interval_bytes=100) as writer_store:
        w = writer_store.create_topic("t").partition(0)
        with _open(path) as reader_store:
            r = reader_store.topic("t").partition(0)
            assert r.read(0) == []
            for i in range(50):
                w.append_values([b"v%d" % i] * 5, keys=[b"k"] * 5)
                assert r.log_end_offset == w.log_end_offset
                assert [x.value for x in r.read(i * 5, max_records=5)] == [b"v%d" % i] * 5
            assert r.check() == []
            with pytest.raises(pylog.PartitionLockedError):
                r.append_values([b"second writer"])


def test_closed_store_refuses_work(tmp_path):
    store = _open(tmp_path / "s")
    p = store.create_topic("t").partition(0)
    p.append_values([b"a"])
    store.close()
    with pytest.raises(pylog.StoreClosedError):
        store.topic("t")
    with pytest.raises(pylog.StoreClosedError):
        p.read(0)
    with pytest.raises(pylog.StoreClosedError):
        p.append_values([b"b"])


# ------------------------------------------------------------------------------------------ stateful

TOPIC = "t"

_keys = st.one_of(st.none(), st.binary(max_size=12))
_values = st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=600, max_size=900))
_timestamps = st.one_of(st.none(), st.integers(T0 - 10_000, T0 + 10_000), st.integers(0, 10 ** 13))
_headers = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=8))), max_size=2)


class PartitionMachine(RuleBasedStateMachine):
    """One partition against a list model; see the module docstring."""

    def __init__(self, workdir: str) -> None:
        super().__init__()
        self.workdir = tempfile.mkdtemp(dir=workdir)
        self.path = os.path.join(self.workdir, "store0")
        self.generation = 0
        self.model: list[tuple] = []
        self.durable = 0  # offsets below this were fsynced and must survive any crash
        self.store = None

    @initialize(segment_bytes=st.sampled_from([4096, 8192, 65536]),
                interval=st.sampled_from([0, 64, 512]),
                max_message=st.sampled_from([2048, 4096, 1 << 20]),
                codec=st.sampled_from(["producer", "lz4"]),
                index_bytes=st.sampled_from([4096, 65536]))
    def setup(self, segment_bytes, interval, max_message, codec, index_bytes):
        # 4096-byte indexes hold 504 entries: with interval 0 a full index forces rolls too.
        self.config = {"segment.bytes": segment_bytes, "index.interval.bytes": interval,
                       "max.message.bytes": max_message, "compression.type": codec,
                       "segment.index.bytes": index_bytes}
        self.store = _open(self.path)
        self.store.create_topic(TOPIC, config=self.config)

    @property
    def p(self):
        return self.store.topic(TOPIC).partition(0)

    def teardown(self):
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------ model helpers

    def _record_appended(self, first, keys, values, headers, stamps, t_before, t_after):
        n = len(values)
        assert first == len(self.model), (first, len(self.model))
        got = self.p.read(first, max_records=n)
        assert len(got) == n
        for i, r in enumerate(got):
            ts = stamps[i] if stamps is not None else None
            if ts is None:
                assert t_before <= r.timestamp <= t_after, (r.timestamp, t_before, t_after)
                ts = r.timestamp
            hdrs = tuple(tuple(h) for h in (headers[i] if headers is not None and headers[i] else ()))
            entry = (keys[i] if keys is not None else None, values[i], hdrs, ts)
            assert _summary(r) == entry, (first + i, _summary(r), entry)
            self.model.append(entry)

    def _compare(self, start, recs, limit):
        want = self.model[start:start + limit]
        got = [_summary(r) for r in recs]
        assert [r.offset for r in recs] == list(range(start, start + len(want)))
        if got != want:
            diff = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b) if len(got) == len(want) else None
            raise AssertionError(f"read({start}, {limit}): {len(got)} records vs model {len(want)}; "
                                 f"first difference at +{diff}: {got[diff] if diff is not None else None!r} != "
                                 f"{want[diff] if diff is not None else None!r}")

    # ------------------------------------------------------------ rules: appends

    @rule(recs=st.lists(st.tuples(_keys, _values, _headers, _timestamps), min_size=1, max_size=8))
    def append_records(self, recs):
        records = [pylog.Record(value=v, key=k, headers=h, timestamp=ts) for k, v, h, ts in recs]
        t0 = pylog.storage.records.now_ms()
        first = self.p.append(records)
        t1 = pylog.storage.records.now_ms()
        self._record_appended(first, [r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs],
                              [r[3] for r in recs], t0, t1)

    @rule(data=st.data(), n=st.integers(1, 40), with_keys=st.booleans(), with_ts=st.booleans(),
          with_headers=st.booleans())
    def append_values(self, data, n, with_keys, with_ts, with_headers):
        values = data.draw(st.lists(_values, min_size=n, max_size=n))
        keys = data.draw(st.lists(_keys, min_size=n, max_size=n)) if with_keys else None
        stamps = data.draw(st.lists(st.integers(0, 10 ** 13), min_size=n, max_size=n)) if with_ts else None
        headers = data.draw(st.lists(_headers, min_size=n, max_size=n)) if with_headers else None
        t0 = pylog.storage.records.now_ms()
        first = self.p.append_values(values, keys=keys, timestamps=stamps, headers=headers)
        t1 = pylog.storage.records.now_ms()
        self._record_appended(first, keys, values, headers, stamps, t0, t1)

    @rule(data=st.data(), n=st.integers(1, 200), with_keys=st.booleans(), with_ts=st.booleans())
    def append_columns(self, data, n, with_keys, with_ts):
        seed = data.draw(st.integers(0, 2 ** 32 - 1))
        rng = np.random.default_rng(seed)
        vl = rng.integers(-1, 60, n).astype(np.int32)
        vd = rng.integers(0, 256, int(np.maximum(vl, 0).sum()), dtype=np.uint8).tobytes()
        vstarts = pylog.RecordColumns.starts_of(vl)
        values = [None if vl[i] < 0 else vd[vstarts[i]:vstarts[i + 1]] for i in range(n)]
        kl = kd = keys = None
        if with_keys:
            kl = rng.integers(-1, 10, n).astype(np.int32)
            kd = rng.integers(0, 256, int(np.maximum(kl, 0).sum()), dtype=np.uint8).tobytes()
            starts = pylog.RecordColumns.starts_of(kl)
            keys = [None if kl[i] < 0 else kd[starts[i]:starts[i + 1]] for i in range(n)]
        stamps = rng.integers(T0 - 1000, T0 + 1000, n).astype(np.int64) if with_ts else None
        t0 = pylog.storage.records.now_ms()
        first = self.p.append_columns(vl, vd, kl, kd, stamps)
        t1 = pylog.storage.records.now_ms()
        self._record_appended(first, keys, values, None, None if stamps is None else stamps.tolist(), t0, t1)

    # ------------------------------------------------------------ rules: reads

    @rule(data=st.data(), limit=st.sampled_from([1, 3, 50, 100_000]))
    def read(self, data, limit):
        start = data.draw(st.integers(0, len(self.model)))
        self._compare(start, self.p.read(start, max_records=limit), limit)

    @rule(data=st.data(), limit=st.sampled_from([1, 7, 100_000]))
    def read_columns(self, data, limit):
        start = data.draw(st.integers(0, len(self.model)))
        cols = self.p.read_columns(start, max_records=limit)
        self._compare(start, cols.to_records(), limit)
        assert cols.values() == [m[1] for m in self.model[start:start + limit]]

    @rule(beyond=st.integers(1, 5))
    def read_out_of_range(self, beyond):
        for bad in (len(self.model) + beyond, -beyond):
            try:
                self.p.read(bad)
            except pylog.OffsetOutOfRangeError:
                pass
            else:
                raise AssertionError(f"read({bad}) with log end {len(self.model)} did not raise")

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        stamps = [m[3] for m in self.model]
        target = data.draw(st.one_of(st.sampled_from(stamps), st.integers(0, 10 ** 13),
                                     st.sampled_from(stamps).map(lambda t: t + 1)))
        assert self.p.offset_for_timestamp(target) == _brute_offset_for_timestamp(stamps, target), target

    @rule()
    def read_from_second_handle(self):
        with _open(self.path) as other:
            q = other.topic(TOPIC).partition(0)
            assert q.log_end_offset == len(self.model)
            self._compare(0, q.read(0, max_records=100_000), 100_000)

    # ------------------------------------------------------------ rules: lifecycle

    @rule()
    def roll(self):
        self.p.roll()
        self.durable = len(self.model)

    @rule()
    def flush(self):
        p = self.p
        p.flush()
        if p.is_writer:
            self.durable = len(self.model)

    @rule()
    def reopen(self):
        self.store.close()
        self.store = _open(self.path)
        self.durable = len(self.model)

    @rule(mode=st.sampled_from(["intact", "tear", "garbage"]), data=st.data())
    def crash_reopen(self, mode, data):
        self.generation += 1
        snap = os.path.join(self.workdir, f"store{self.generation}")
        segs = self.p.segments
        # What a crash leaves: the files as they are now (everything written is in the page cache).
        crash_copy(self.path, snap)
        self.store.close()
        shutil.rmtree(self.path)
        pdir = _partition_dir(snap, TOPIC)
        logs = _logs(pdir)
        expected = len(self.model)
        if not segs:  # never written to: no segment files yet
            assert logs == []
            mode = "intact"
        elif read_checkpoint(os.path.join(pdir, "partition.checkpoint")).clean:
            # Not written since a clean close: a crash now cannot leave torn or extra bytes behind.
            mode = "intact"
        if segs:
            active_base = segs[-1].base_offset
            log_path = os.path.join(pdir, logs[-1])
            assert int(logs[-1][:-4]) == active_base
        if mode == "tear":
            # Only bytes written after the last fsync (flush, roll, seal) may be lost.
            durable = max(self.durable, active_base)
            batches = log_batches(log_path)
            size = os.path.getsize(log_path)
            tear_from = next((pos for pos, h in batches if h.base_offset >= durable), size)
            cut = data.draw(st.integers(tear_from, size), label="cut")
            expected = active_base
            for pos, h in batches:
                if pos + h.size <= cut:
                    expected = h.next_offset
            os.truncate(log_path, cut)
        elif mode == "garbage":
            junk = data.draw(st.binary(min_size=1, max_size=200), label="junk")
            with open(log_path, "ab") as f:
                f.write(junk)
        assert expected >= self.durable
        self.path = snap
        self.store = _open(self.path)
        q = self.p
        assert q.log_end_offset == expected, (q.log_end_offset, expected, mode)
        del self.model[expected:]
        self._compare(0, q.read(0, max_records=100_000), 100_000)

    # ------------------------------------------------------------ invariants

    @invariant()
    def consistent(self):
        if self.store is None:
            return
        p = self.p
        problems = p.check()
        assert problems == [], problems
        assert p.log_end_offset == len(self.model), (p.log_end_offset, len(self.model))
        assert p.log_start_offset == 0


@pytest.mark.slow
def test_partition_state_machine(tmp_path):
    run_state_machine_as_test(
        lambda: PartitionMachine(str(tmp_path)),
        settings=settings(max_examples=50, stateful_step_count=30, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]))


# ---------------------------------------------------------------- review findings (all-or-nothing appends etc.)

def test_append_whose_headers_outgrow_the_estimate_is_split_not_half_written(tmp_path):
    with pylog.open(tmp_path, max_message_bytes=4096) as store:
        p = store.create_topic("t").partition(0)
        headers = [()] * 70 + [[("ключ" * 10, b"v")]] * 40
        first = p.append_values([b"x" * 40] * 110, headers=headers)
        assert first == 0 and p.log_end_offset == 110
        assert [r.headers for r in p.read(0, max_records=200)] == [()] * 70 + [(("ключ" * 10, b"v"),)] * 40
        assert all(h.size <= 4096 for seg in p.segments for _, h in seg.batch_headers())


def test_a_too_large_record_writes_nothing_of_its_call(tmp_path):
    with pylog.open(tmp_path, max_message_bytes=4096) as store:
        p = store.create_topic("t").partition(0)
        p.append_values([b"a"])
        with pytest.raises(pylog.RecordTooLargeError):
            p.append_values([b"x" * 1000] * 20 + [b"y" * 5000])
        assert p.log_end_offset == 1


def test_a_failed_roll_makes_the_partition_refuse_work_until_reopened(tmp_path, monkeypatch):
    from pylog import segment as segment_module
    with pylog.open(tmp_path, segment_bytes=1024) as store:
        p = store.create_topic("t").partition(0)
        p.append_values([b"x" * 600])

        def broken_create(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(segment_module.Segment, "create", broken_create)
        with pytest.raises(pylog.LogFailedError):
            p.append_values([b"y" * 600])
        monkeypatch.undo()
        with pytest.raises(pylog.LogFailedError):
            p.append_values([b"z"])
    with pylog.open(tmp_path) as store:
        p = store.topic("t").partition(0)
        assert p.append_values([b"after"]) == 1
        assert [r.value for r in p.read(0)] == [b"x" * 600, b"after"]


def test_an_index_looked_up_by_a_reader_thread_stays_usable_after_a_roll(tmp_path):
    with pylog.open(tmp_path, index_interval_bytes=0) as store:
        p = store.create_topic("t").partition(0)
        for i in range(20):
            p.append_values([b"v%d" % i])
        seg = p.segments[-1]
        oi, ti = seg.indexes()
        p.roll()
        assert oi.lookup(10) == (10, oi.lookup(10)[1]) and oi.lookup(10)[1] > 0
        assert ti.lookup(0) == 0


def test_threads_append_and_read_concurrently(tmp_path):
    """Writer threads share one partition (appends serialise) while reader threads read everything
    written so far, across rolls: dense offsets, whole batches, no errors."""
    import threading

    with pylog.open(tmp_path, segment_bytes=16 * 1024, index_interval_bytes=256) as store:
        p = store.create_topic("t").partition(0)
        errors: list[BaseException] = []
        done = threading.Event()

        def writer(tag: int) -> None:
            try:
                for i in range(150):
                    p.append_values([b"%d-%d-%d" % (tag, i, j) for j in range(1 + (i % 7))])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def reader() -> None:
            try:
                while not done.is_set():
                    end = p.log_end_offset
                    off = 0
                    while off < end:
                        cols = p.read_columns(off, max_records=5000)
                        assert cols.offsets.tolist() == list(range(off, off + len(cols)))
                        off += len(cols)
                    start = max(0, end - 50)
                    recs = p.read(start, max_records=50)  # more may have arrived since end was read
                    assert [r.offset for r in recs] == list(range(start, start + len(recs)))
                    assert len(recs) >= end - start
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        readers = [threading.Thread(target=reader) for _ in range(2)]
        writers = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        done.set()
        for t in readers:
            t.join()
        assert not errors, errors
        total = sum(1 + (i % 7) for i in range(150)) * 4
        assert p.log_end_offset == total and len(p.segments) > 3
        values = [r.value for r in p.read(0, max_records=total)]
        for tag in range(4):  # each writer's records are in its own order
            mine = [v for v in values if v.startswith(b"%d-" % tag)]
            assert mine == [b"%d-%d-%d" % (tag, i, j) for i in range(150) for j in range(1 + (i % 7))]
        assert p.check() == []


def test_partition_has_no_public_member_the_client_docs_do_not_name():
    """Partition carries only the API users are told about (docs/CLIENTS.md, "Partitions directly"): a member
    that pylog's own producer, server, cleaner or store needs belongs to ``pylog.partition.internals(p)``."""
    docs_path = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "CLIENTS.md")
    with open(docs_path, encoding="utf-8") as f:
        docs = f.read()
    public = sorted(name for name in dir(pylog.Partition) if not name.startswith("_"))
    assert public and [name for name in public if not re.search(r"[`.]%s\b" % name, docs)] == []
