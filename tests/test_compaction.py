"""Log compaction: Kafka's semantics checked against a model, plus digests, the offset map and the swap.

Run: ``python -m pytest tests/test_compaction.py -q``

The clock is injected (``now=`` on compaction, explicit record timestamps), so no test sleeps.
"""

from __future__ import annotations

import os
import random
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylog
from storetools import abandon
from pylog.errors import LogFailedError
from pylog.storage import swap
from pylog.storage.filenames import segment_path
from pylog.maintenance.compaction import OffsetMap, clean_partition, key_digests, read_cleaner_checkpoint
from pylog.partition import internals

DAY = 86_400_000
T0 = 1_800_000_000_000
TOPIC = "c"


def _store(path, **cfg):
    cfg.setdefault("segment_bytes", 600)
    return pylog.open(str(path), log_cleaner_enable=False, **cfg)


def _compacted(store, **cfg):
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": DAY}
    config.update(cfg)
    store.create_topic(TOPIC, config=config)
    return store.topic(TOPIC).partition(0)


def _all(p):
    return p.read(p.log_start_offset, max_records=10 ** 7)


# ------------------------------------------------------------------------------------ the model property

_keys = st.sampled_from([b"a", b"b", b"c", b"d", b"", b"k" * 70, b"e" * 9])
_ops = st.lists(st.one_of(
    st.tuples(st.just("put"), _keys, st.one_of(st.none(), st.binary(max_size=40))),
    st.tuples(st.just("roll")),
    st.tuples(st.just("compact"), st.integers(0, 2 * DAY)),
), min_size=1, max_size=60)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=_ops)
def test_compaction_keeps_latest_per_key_and_tombstones_for_delete_retention(tmp_path, ops):
    """For any sequence of keyed writes and tombstones: after each compaction every key's latest record is
    readable at its original offset, offsets are a strictly increasing subset of the originals with their
    original contents, and a tombstone disappears only after delete.retention.ms has passed since the
    first cleaning that reached it (and does disappear once that has passed)."""
    path = tempfile.mkdtemp(dir=tmp_path)
    now = T0
    written: dict[int, tuple[bytes, bytes | None, int]] = {}  # offset -> (key, value, timestamp)
    latest: dict[bytes, int] = {}
    first_reached: dict[int, int] = {}  # tombstone offset -> time of the first cleaning that covered it
    with _store(path) as store:
        p = _compacted(store)
        for op in ops:
            if op[0] == "put":
                _, key, value = op
                off = p.append_values([value], keys=[key], timestamps=[now])
                written[off] = (key, value, now)
                latest[key] = off
            elif op[0] == "roll":
                p.roll()
            else:
                now += op[1]
                [r] = store.compact(TOPIC, now=now)
                covered = p.segments[-1].base_offset  # everything below the active segment was cleaned
                for off, (_, value, _) in written.items():
                    if value is None and off < covered:
                        first_reached.setdefault(off, now)
                recs = _all(p)
                offs = [x.offset for x in recs]
                assert offs == sorted(set(offs))
                for x in recs:
                    assert (x.key, x.value, x.timestamp) == written[x.offset]
                present = set(offs)
                for key, off in latest.items():
                    value = written[off][1]
                    if value is not None:
                        assert off in present, (key, off)
                    elif off in first_reached:
                        gone_ok = now - first_reached[off] > DAY
                        assert (off not in present) == gone_ok, (key, off, now - first_reached[off])
                    else:
                        assert off in present
                # A record is gone once a later record of its key lies in the cleaned range too.
                cleaned_latest: dict[bytes, int] = {}
                for off, (key, _, _) in written.items():
                    if off < covered:
                        cleaned_latest[key] = off
                for off, (key, _, _) in written.items():
                    if off < cleaned_latest.get(key, -1):
                        assert off not in present
                assert p.check() == []
        final = [(x.offset, x.key, x.value) for x in _all(p)]
    # Everything still holds after a reopen.
    with _store(path) as store:
        p = store.topic(TOPIC).partition(0)
        assert [(x.offset, x.key, x.value) for x in _all(p)] == final


# ------------------------------------------------------------------------------------ scenarios


def _write_keys(p, n, nkeys, ts=T0, value_size=20, seed=0):
    rnd = random.Random(seed)
    latest = {}
    for start in range(0, n, 50):
        keys = [b"key-%d" % rnd.randrange(nkeys) for _ in range(min(50, n - start))]
        values = [b"%d:" % (start + i) + b"v" * value_size for i in range(len(keys))]
        first = p.append_values(values, keys=keys, timestamps=[ts] * len(keys))
        for i, k in enumerate(keys):
            latest[k] = (first + i, values[i])
    return latest


def test_compaction_scenario_with_reopen_and_read_paths(tmp_path):
    with _store(tmp_path, segment_bytes=4096) as store:
        p = _compacted(store)
        latest = _write_keys(p, 3000, 40)
        p.roll()
        before = len(p.segments)
        [r] = store.compact(TOPIC)
        assert r.skipped is None and r.records_read == 3000 and r.records_written == 40
        assert r.records_removed == 2960 and r.segments_before == before and r.segments_after < before
        recs = _all(p)
        assert {x.key: (x.offset, x.value) for x in recs} == latest
        # A compacted-away offset reads as the next surviving record, for rows and columns alike.
        offs = [x.offset for x in recs]
        gap = next(o for o in range(offs[-1]) if o not in set(offs))
        nxt = min(o for o in offs if o > gap)
        assert p.read(gap, max_records=1)[0].offset == nxt
        cols = p.read_columns(gap, max_records=3)
        assert cols.offsets.tolist() == [o for o in offs if o >= gap][:3]
        assert cols.values() == [x.value for x in recs if x.offset >= gap][:3]
        assert p.read(p.log_start_offset, max_records=1)[0].offset == offs[0]
        assert p.check() == []
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert [(x.offset, x.value) for x in _all(p)] == [(x.offset, x.value) for x in recs]
        # Compacting again with nothing new changes nothing.
        [r] = store.compact(TOPIC)
        assert r.records_removed == 0
        assert [(x.offset, x.value) for x in _all(p)] == [(x.offset, x.value) for x in recs]


def test_headers_timestamps_codec_and_log_append_time_survive(tmp_path):
    with _store(tmp_path, segment_bytes=2048) as store:
        store.create_topic("lz", config={"cleanup.policy": "compact", "compression.type": "lz4"})
        store.create_topic("lat", config={"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"})
        for name in ("lz", "lat"):
            p = store.topic(name).partition(0)
            keep = {}
            for i in range(200):
                key = b"k%d" % (i % 7)
                hdrs = [("i", b"%d" % i)] if i % 3 else None
                off = p.append([pylog.Record(value=b"value-%d" % i * 3, key=key, timestamp=T0 + i,
                                             headers=hdrs or [])])
                keep[key] = off
            p.roll()
            want = {x.offset: x for x in _all(p) if keep[x.key] == x.offset}
            store.compact(name)
            got = _all(p)
            assert [x.offset for x in got] == sorted(want)
            for x in got:
                w = want[x.offset]
                assert (x.key, x.value, x.headers, x.timestamp, x.timestamp_type) == \
                    (w.key, w.value, w.headers, w.timestamp, w.timestamp_type)


def test_keys_longer_than_the_bulk_hash_and_binary_keys(tmp_path):
    with _store(tmp_path, segment_bytes=4096) as store:
        p = _compacted(store)
        keys = [b"", b"\x00", b"\x00\x00", b"x" * 64, b"x" * 65, b"x" * 1000, b"x" * 63 + b"\x00", bytes(range(200))]
        latest = {}
        for rnd in range(5):
            first = p.append_values([b"%d-%d" % (rnd, i) for i in range(len(keys))], keys=keys)
            for i, k in enumerate(keys):
                latest[k] = first + i
        p.roll()
        store.compact(TOPIC)
        assert {x.key: x.offset for x in _all(p)} == latest


def test_min_cleanable_dirty_ratio_and_max_compaction_lag(tmp_path):
    with _store(tmp_path, segment_bytes=4096) as store:
        p = _compacted(store, **{"min.cleanable.dirty.ratio": 0.9, "max.compaction.lag.ms": 10 * DAY})
        _write_keys(p, 500, 10)
        p.roll()
        r = clean_partition(p, 1 << 20, now=T0 + DAY)
        assert r.skipped is None  # everything is dirty: ratio 1.0 > 0.9
        _write_keys(p, 50, 10, ts=T0 + DAY, seed=1)
        p.roll()
        r = clean_partition(p, 1 << 20, now=T0 + 2 * DAY)
        assert r.skipped is not None and "dirty ratio" in r.skipped
        assert 0 < r.dirty_ratio <= 0.9
        # Overdue by max.compaction.lag.ms: cleaned whatever the ratio.
        r = clean_partition(p, 1 << 20, now=T0 + 20 * DAY)
        assert r.skipped is None and r.records_removed > 0


def test_min_compaction_lag_protects_young_records(tmp_path):
    with _store(tmp_path, segment_bytes=2048) as store:
        p = _compacted(store, **{"min.compaction.lag.ms": DAY})
        _write_keys(p, 300, 5, ts=T0)
        p.roll()
        young = _write_keys(p, 300, 5, ts=T0 + 10 * DAY, seed=2)
        p.roll()
        young_start = min(o for o, _ in young.values())
        before = {x.offset for x in _all(p) if x.offset >= young_start}
        [r] = store.compact(TOPIC, now=T0 + 10 * DAY + 1000)
        assert r.records_removed > 0
        after = _all(p)
        # Young records were not compacted, and every old record of a key rewritten later is... kept,
        # since the map covered only the old range; what was cleaned is below the young segments.
        assert {x.offset for x in after if x.offset >= young_start} >= before - {None}
        assert r.cleaned_up_to <= young_start + 50


def test_small_dedupe_buffer_cleans_in_several_passes(tmp_path):
    with _store(tmp_path, segment_bytes=8192) as store:
        p = _compacted(store)
        latest = _write_keys(p, 2000, 200)
        p.roll()
        r = clean_partition(p, 64 * 80, force=True)  # room for 80 keys per pass (a batch has 50 records)
        assert r.passes > 1 and r.map_keys <= 80
        assert {x.key: (x.offset, x.value) for x in _all(p)} == latest
        assert p.check() == []


def test_a_dedupe_buffer_too_small_for_one_batch_is_a_clear_error(tmp_path):
    with _store(tmp_path, segment_bytes=8192) as store:
        p = _compacted(store)
        _write_keys(p, 400, 300)
        p.roll()
        with pytest.raises(pylog.PylogError, match="dedupe.buffer.size"):
            clean_partition(p, 64 * 10, force=True)
        assert p.check() == []


def test_compacted_topic_rejects_records_without_a_key(tmp_path):
    with _store(tmp_path) as store:
        p = _compacted(store)
        with pytest.raises(pylog.InvalidRecordError):
            p.append_values([b"v"])
        with pytest.raises(pylog.InvalidRecordError):
            p.append_values([b"v", b"w"], keys=[b"k", None])


def test_keyless_records_written_before_the_switch_to_compact_are_removed(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"a", b"b"])
        p.append_values([b"c"], keys=[b"k"])
        p.roll()
        store.alter_topic_config(TOPIC, {"cleanup.policy": "compact"})
        [r] = store.compact(TOPIC)
        assert r.keyless_removed == 2
        assert [(x.offset, x.value) for x in _all(p)] == [(2, b"c")]


def test_compaction_is_a_writer_operation(tmp_path):
    with _store(tmp_path) as a, _store(tmp_path) as b:
        pa = _compacted(a)
        pa.append_values([b"v"], keys=[b"k"])
        with pytest.raises(pylog.PartitionLockedError):
            b.compact(TOPIC)


def test_delete_policy_topic_is_not_compacted(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        [r] = store.compact(TOPIC)
        assert r.skipped and "cleanup.policy" in r.skipped


# ------------------------------------------------------------------------------------ crash-safe swap


def _prepare(tmp_path):
    store = _store(tmp_path, segment_bytes=2048)
    p = _compacted(store)
    latest = _write_keys(p, 600, 12)
    p.roll()
    return store, p, latest


@pytest.mark.parametrize("phase", ["before_commit", "after_commit", "mid_roll_forward"])
def test_an_interrupted_swap_is_rolled_back_or_forward(tmp_path, monkeypatch, phase):
    store, p, latest = _prepare(tmp_path)
    all_before = [(x.offset, x.key, x.value) for x in _all(p)]
    real_write, real_roll = swap.write_manifest, swap.roll_forward

    class Crash(Exception):
        pass

    def write_manifest(*a):
        if phase == "before_commit":
            raise Crash
        real_write(*a)
        if phase == "after_commit":
            raise Crash

    def roll_forward(directory, groups):
        # Finish the first group, rename the next group's new log in, then "crash" before the segments it
        # replaces are unlinked.
        real_roll(directory, groups[:1])
        new_base = next(new for new, _ in groups[1:] if new >= 0)
        src = segment_path(directory, new_base, ".log.swap")
        os.replace(src, segment_path(directory, new_base, ".log"))
        raise Crash

    monkeypatch.setattr(swap, "write_manifest", write_manifest)
    if phase == "mid_roll_forward":
        monkeypatch.setattr(swap, "roll_forward", roll_forward)
    with pytest.raises(Crash):
        store.compact(TOPIC)
    monkeypatch.setattr(swap, "write_manifest", real_write)
    monkeypatch.setattr(swap, "roll_forward", real_roll)
    directory = p.directory
    # Simulate the crash: drop the store (no cleaner thread: log_cleaner_enable=False) without a clean close
    # of the partition.
    abandon(p)
    del store
    with _store(tmp_path) as store2:
        p2 = store2.topic(TOPIC).partition(0)
        p2.append_values([b"z"], keys=[b"zz"])  # becoming the writer finishes or undoes the swap
        names = os.listdir(directory)
        assert not [n for n in names if ".cleaned" in n or ".swap" in n], names
        recs = [(x.offset, x.key, x.value) for x in _all(p2)][:-1]
        offs = [o for o, _, _ in recs]
        assert offs == sorted(set(offs))
        if phase == "before_commit":
            assert recs == all_before  # rolled back: nothing lost, nothing removed
        else:
            # The committed group was rolled forward: records are gone, none changed or appeared, and
            # every key's latest record is there.
            assert set(recs) < set(all_before)
            assert set(recs) >= {(o, k, v) for k, (o, v) in latest.items()}
        assert p2.check() == []
        store2.compact(TOPIC)
        assert {k: (o, v) for o, k, v in [(x.offset, x.key, x.value) for x in _all(p2)] if k != b"zz"} == latest


def test_a_swap_failing_past_its_commit_point_fails_the_partition_until_reopened(tmp_path, monkeypatch):
    """PartitionInternals.swap_in owns failure marking: past the manifest, files and view may disagree, so the
    partition refuses work (LogFailedError) until the store is reopened, whose writer open rolls the swap
    forward; every key's latest record survives."""
    store, p, latest = _prepare(tmp_path)
    real_roll = swap.roll_forward

    class Broken(Exception):
        pass

    def roll_forward(directory, groups):
        raise Broken("renaming the cleaned segments in broke")

    monkeypatch.setattr(swap, "roll_forward", roll_forward)
    with pytest.raises(Broken):
        store.compact(TOPIC)
    monkeypatch.setattr(swap, "roll_forward", real_roll)
    assert os.path.exists(os.path.join(p.directory, "cleaner.swap"))  # committed, not rolled forward
    with pytest.raises(LogFailedError, match="after its commit point"):
        p.append_values([b"z"], keys=[b"zz"])
    abandon(p)
    del store  # a crash: no clean close (and no cleaner thread: log_cleaner_enable=False)
    with _store(tmp_path) as store2:
        p2 = store2.topic(TOPIC).partition(0)
        p2.append_values([b"z"], keys=[b"zz"])  # becoming the writer rolls the swap forward
        names = os.listdir(p2.directory)
        assert "cleaner.swap" not in names and not [n for n in names if ".cleaned" in n or ".swap" in n], names
        got = {x.key: (x.offset, x.value) for x in _all(p2)}
        assert all(got[k] == v for k, v in latest.items())
        offs = [x.offset for x in _all(p2)]
        assert offs == sorted(set(offs))


def test_damaged_cleaner_checkpoint_only_restarts_cleaning(tmp_path):
    store, p, latest = _prepare(tmp_path)
    with store:
        store.compact(TOPIC)
        cp = os.path.join(p.directory, "cleaner.checkpoint")
        assert read_cleaner_checkpoint(p.directory).horizons
        with open(cp, "r+b") as f:
            f.seek(5)
            f.write(b"\xff")
        assert read_cleaner_checkpoint(p.directory).horizons == []
        [r] = store.compact(TOPIC)
        assert r.skipped is None
        assert {x.key: (x.offset, x.value) for x in _all(p)} == latest


# ------------------------------------------------------------------------------------ digests and map


def _lens_data(keys):
    lens = np.array([-1 if k is None else len(k) for k in keys], np.int32)
    return lens, b"".join(k for k in keys if k is not None)


def test_key_digests_are_equal_exactly_for_equal_keys_whatever_the_batch_shape():
    rnd = random.Random(7)
    keys = [bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 1, 7, 8, 9, 16, 33, 64, 65, 200])))
            for _ in range(3000)] + [None]
    seed = (123, 456)
    hi, lo = key_digests(*_lens_data(keys), seed)
    by_key = {}
    for k, h, l in zip(keys, hi.tolist(), lo.tolist()):
        by_key.setdefault(k, set()).add((h, l))
    assert all(len(v) == 1 for v in by_key.values())
    assert len({next(iter(v)) for v in by_key.values()}) == len(by_key)  # no collisions
    # The same key hashes alike alone, in a uniform-length batch and in a mixed one.
    for k in [b"abcdefgh", b"", b"x" * 65]:
        alone = key_digests(*_lens_data([k]), seed)
        uniform = key_digests(*_lens_data([k] * 5), seed)
        mixed = key_digests(*_lens_data([b"zz", k, b"q" * 70]), seed)
        assert (alone[0][0], alone[1][0]) == (uniform[0][3], uniform[1][3]) == (mixed[0][1], mixed[1][1])
    # Another seed gives other digests; keys differing only by trailing zero bytes differ.
    assert key_digests(*_lens_data([b"a"]), (1, 2))[0][0] != key_digests(*_lens_data([b"a"]), (3, 4))[0][0]
    d = key_digests(*_lens_data([b"a", b"a\x00", b"a\x00\x00\x00\x00\x00\x00\x00\x00"]), seed)
    assert len(set(zip(d[0].tolist(), d[1].tolist()))) == 3


def test_offset_map_keeps_the_latest_offset_and_respects_capacity():
    m = OffsetMap(1024)
    m.capacity = 10
    hi = np.array([5, 3, 5, 9], np.uint64)
    lo = np.array([1, 1, 1, 2], np.uint64)
    assert m.add(hi, lo, np.array([0, 1, 2, 3], np.int64))
    assert len(m) == 3
    assert m.latest(np.array([5, 3, 9, 9], np.uint64), np.array([1, 1, 2, 7], np.uint64)).tolist() == [2, 1, 3, -1]
    # Same hi word, different lo word: two keys.
    assert m.add(np.array([5], np.uint64), np.array([8], np.uint64), np.array([4], np.int64))
    assert m.latest(np.array([5, 5], np.uint64), np.array([1, 8], np.uint64)).tolist() == [2, 4]
    # Too many new keys: refused whole.
    many = np.arange(100, 110, dtype=np.uint64)
    assert not m.add(many, many, np.arange(10, 20, dtype=np.int64))
    assert len(m) == 4


# ------------------------------------------------------------------------------------ concurrent readers


def test_reader_threads_during_compaction_and_retention_never_see_errors_duplicates_or_going_back(tmp_path):
    """Readers in other threads of the writer's process, while it appends, compacts and deletes records."""
    import threading

    with _store(tmp_path, segment_bytes=2048) as store:
        p = _compacted(store, **{"cleanup.policy": "compact,delete", "retention.bytes": 20_000})
        written: dict[int, tuple[bytes, bytes]] = {}
        stop = threading.Event()
        problems: list[str] = []
        seen_counts = []

        def reader():
            pos, seen = 0, 0
            while not stop.is_set() or pos < p.log_end_offset:
                try:
                    recs = p.read(pos, max_records=200)
                except pylog.OffsetOutOfRangeError:
                    pos = max(pos, p.log_start_offset)
                    continue
                except Exception as exc:  # anything else is a bug
                    problems.append(repr(exc))
                    return
                if not recs:
                    p.wait_for_data(pos, 0.05)
                for r in recs:
                    if r.offset < pos:
                        problems.append(f"offset went back: {r.offset} < {pos}")
                        return
                    if written.get(r.offset) != (r.key, r.value):
                        problems.append(f"offset {r.offset}: {r.key!r}={r.value!r} was never written there")
                        return
                    pos = r.offset + 1
                    seen += 1
            seen_counts.append(seen)

        def record(first, keys, values):
            for i, (k, v) in enumerate(zip(keys, values)):
                written[first + i] = (k, v)

        keys0 = [b"k%d" % (i % 30) for i in range(30)]
        values0 = [b"v%d" % i for i in range(30)]
        record(p.append_values(values0, keys=keys0), keys0, values0)  # before the readers start
        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        rnd = random.Random(3)
        for round_ in range(40):
            keys = [b"k%d" % rnd.randrange(30) for _ in range(20)]
            values = [b"r%d-%d" % (round_, i) + b"x" * rnd.randrange(60) for i in range(20)]
            # written[] is filled before readers can see the offsets: they become visible on append.
            first = p.log_end_offset
            record(first, keys, values)
            assert p.append_values(values, keys=keys) == first
            if round_ % 4 == 3:
                store.compact(TOPIC)
            if round_ % 7 == 6:
                store.enforce_retention(TOPIC)
            if round_ == 20:
                store.delete_records(TOPIC, 0, p.log_start_offset + 5)
        stop.set()
        for t in threads:
            t.join(30)
        assert not problems, problems[:3]
        assert len(seen_counts) == 3 and all(n > 0 for n in seen_counts)
        assert p.check() == []
