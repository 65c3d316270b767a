"""Retention by time, by size, both, and delete-records (Kafka's DeleteRecords), with reopen after each.

Run: ``python -m pytest tests/test_retention.py -q``

Timestamps are explicit and retention is enforced with an explicit ``now``, so no test sleeps.
"""

from __future__ import annotations

import os
import time

import pytest

import pylog
from pylog.storage.retention import deletable_prefix

from storetools import wait_for

DAY = 86_400_000
NOW = 1_800_000_000_000
TOPIC = "t"


def _store(path, **cfg):
    return pylog.open(str(path), log_cleaner_enable=False, segment_bytes=1024, **cfg)


def _fill(p, n_segments, ts, value=b"x" * 100):
    """Append records with timestamp ``ts`` until ``n_segments`` more segments have been rolled."""
    start = max(1, len(p.segments))  # a new partition has no segment until its first write
    while len(p.segments) < start + n_segments:
        p.append_values([value], keys=[b"k"], timestamps=[ts])
    return p.log_end_offset


def _offsets(p, start=None):
    start = p.log_start_offset if start is None else start
    return [r.offset for r in p.read(start, max_records=10 ** 6)]


def _seg_files(p):
    return sorted(f for f in os.listdir(p.directory) if f.endswith(".log"))


def test_time_retention_deletes_old_segments_and_stops_at_the_first_young_one(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"retention.ms": DAY})
        p = store.topic(TOPIC).partition(0)
        _fill(p, 3, NOW - 3 * DAY)  # old
        young_start = p.segments[-1].base_offset
        _fill(p, 1, NOW)  # young
        _fill(p, 2, NOW - 3 * DAY)  # old again, but after a young one: Kafka stops at the first young segment
        end = p.log_end_offset
        before = len(p.segments)
        [r] = store.enforce_retention(TOPIC, now=NOW)
        assert r.reasons == ["time"] and not r.rolled
        assert len(r.deleted_segments) == 3 and len(p.segments) == before - 3
        assert p.log_start_offset == young_start == p.segments[0].base_offset
        assert _offsets(p) == list(range(young_start, end))
        with pytest.raises(pylog.OffsetOutOfRangeError):
            p.read(young_start - 1)
        assert p.check() == []
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_start_offset == young_start
        assert _offsets(p) == list(range(young_start, end))
        assert store.enforce_retention(TOPIC, now=NOW)[0].deleted_segments == []


def test_time_retention_rolls_when_every_segment_expired_and_keeps_offsets(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"retention.ms": DAY})
        p = store.topic(TOPIC).partition(0)
        _fill(p, 2, NOW - 3 * DAY)
        p.append_values([b"last"], keys=[b"k"], timestamps=[NOW - 3 * DAY])  # active segment, non-empty
        end = p.log_end_offset
        [r] = store.enforce_retention(TOPIC, now=NOW)
        assert r.rolled and r.reasons == ["time"]
        assert len(p.segments) == 1 and p.segments[0].size == 0
        assert p.log_start_offset == p.log_end_offset == end
        assert p.read(end) == []
        # The only, empty segment is never deleted, and offsets are never reused.
        assert store.enforce_retention(TOPIC, now=NOW + 100 * DAY)[0].deleted_segments == []
        assert p.append_values([b"new"], keys=[b"k"], timestamps=[NOW]) == end
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_start_offset == end
        assert [(r.offset, r.value) for r in p.read(end)] == [(end, b"new")]


def test_retention_of_an_empty_partition_does_nothing(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"retention.ms": 0, "retention.bytes": 0})
        [r] = store.enforce_retention(TOPIC, now=NOW)
        assert r.deleted_segments == [] and store.topic(TOPIC).partition(0).log_end_offset == 0


def test_size_retention_keeps_at_least_the_limit(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"retention.bytes": 3000})
        p = store.topic(TOPIC).partition(0)
        _fill(p, 8, NOW)
        end = p.log_end_offset
        sizes = [s.size for s in p.segments]
        [r] = store.enforce_retention(TOPIC, now=NOW)
        assert r.reasons == ["size"]
        remaining = sum(s.size for s in p.segments)
        assert remaining >= 3000
        # Dropping one more segment would have gone below the limit.
        assert remaining - p.segments[0].size < 3000
        assert r.bytes_deleted == sum(sizes) - remaining
        assert _offsets(p) == list(range(p.log_start_offset, end))
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert sum(s.size for s in p.segments) == remaining
        assert store.enforce_retention(TOPIC, now=NOW)[0].deleted_segments == []


def test_size_retention_of_zero_rolls_and_empties_the_partition(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"retention.bytes": 0})
        p = store.topic(TOPIC).partition(0)
        _fill(p, 2, NOW)
        p.append_values([b"tail"], keys=[b"k"])
        end = p.log_end_offset
        [r] = store.enforce_retention(TOPIC, now=NOW)
        assert r.rolled and p.log_start_offset == end and p.size_bytes() == 0


def test_time_and_size_together_take_the_longer_prefix(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"retention.ms": DAY, "retention.bytes": 2500})
        p = store.topic(TOPIC).partition(0)
        _fill(p, 2, NOW - 3 * DAY)
        _fill(p, 6, NOW)
        end = p.log_end_offset
        [r] = store.enforce_retention(TOPIC, now=NOW)
        assert set(r.reasons) == {"time", "size"}
        assert sum(s.size for s in p.segments) >= 2500
        assert len(r.deleted_segments) > 2  # size went past what time alone removed
        assert _offsets(p) == list(range(p.log_start_offset, end))


def test_compact_only_topics_ignore_time_and_size_retention(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 0})
        p = store.topic(TOPIC).partition(0)
        _fill(p, 3, NOW - 3 * DAY)
        assert store.enforce_retention(TOPIC, now=NOW)[0].deleted_segments == []
        store.alter_topic_config(TOPIC, {"cleanup.policy": "compact,delete"})
        assert store.enforce_retention(TOPIC, now=NOW)[0].deleted_segments != []


def test_delete_records_moves_the_log_start_and_survives_reopen(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        _fill(p, 5, NOW)
        end = p.log_end_offset
        segs = p.segments
        cut = segs[2].base_offset + 1  # inside the third segment
        assert store.delete_records(TOPIC, 0, cut) == cut
        assert p.log_start_offset == cut
        # Segments wholly below the cut are gone; the one holding it stays.
        assert p.segments[0].base_offset == segs[2].base_offset
        assert len(_seg_files(p)) == len(segs) - 2
        assert _offsets(p) == list(range(cut, end))
        with pytest.raises(pylog.OffsetOutOfRangeError):
            p.read(cut - 1)
        with pytest.raises(pylog.OffsetOutOfRangeError):
            p.read_columns(0)
        assert p.offset_for_timestamp(0) == cut
        # Below the current start: no change; past the end: an error.
        assert store.delete_records(TOPIC, 0, 1) == cut
        with pytest.raises(pylog.OffsetOutOfRangeError):
            store.delete_records(TOPIC, 0, end + 1)
        with pytest.raises(TypeError):
            store.delete_records(TOPIC, 0, "5")
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_start_offset == cut
        assert _offsets(p) == list(range(cut, end))
        # Up to the log end: everything goes, the active segment stays (it is never deleted).
        assert store.delete_records(TOPIC, 0, end) == end
        assert p.read(end) == [] and len(p.segments) == 1
        assert p.append_values([b"after"]) == end
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_start_offset == end and [r.value for r in p.read(end)] == [b"after"]


def test_a_reader_in_another_handle_sees_the_new_log_start(tmp_path):
    with _store(tmp_path) as writer, _store(tmp_path) as reader:
        writer.create_topic(TOPIC)
        wp = writer.topic(TOPIC).partition(0)
        _fill(wp, 4, NOW)
        end = wp.log_end_offset
        rp = reader.topic(TOPIC).partition(0)
        assert _offsets(rp, 0) == list(range(end))
        cut = wp.segments[2].base_offset
        writer.delete_records(TOPIC, 0, cut)
        # The reader's snapshot may still hold the deleted segments; a read there either still succeeds
        # (files it had open) or raises OffsetOutOfRangeError; after looking at the log end it knows.
        assert rp.log_end_offset == end
        assert rp.log_start_offset == cut
        with pytest.raises(pylog.OffsetOutOfRangeError):
            rp.read(0)
        assert _offsets(rp) == list(range(cut, end))


def test_segments_left_below_the_log_start_by_a_crash_are_deleted_on_open(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        _fill(p, 4, NOW)
        end = p.log_end_offset
        directory = p.directory
        cut = p.segments[2].base_offset
        # What a crash between the checkpoint write and the unlinks leaves: the new log start recorded,
        # the old segments still there.
        keep = {}
        for seg in p.segments[:2]:
            for path in (seg.log_path, seg.index_path, seg.timeindex_path):
                with open(path, "rb") as f:
                    keep[path] = f.read()
        store.delete_records(TOPIC, 0, cut)
    for path, data in keep.items():
        with open(path, "wb") as f:
            f.write(data)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_start_offset == cut
        assert _offsets(p) == list(range(cut, end))
        p.append_values([b"w"])  # the writer's open removes what lies below the log start
        assert len([f for f in os.listdir(directory) if f.endswith(".log")]) == len(p.segments)
        assert p.segments[0].base_offset == cut and p.check() == []


def test_segment_ms_rolls_so_that_time_retention_reaches_recent_data(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC, config={"segment.ms": 1000, "segment.bytes": 1 << 20, "retention.ms": 5000})
        p = store.topic(TOPIC).partition(0)
        for i in range(10):
            p.append_values([b"v"], timestamps=[NOW + i * 600])
        assert len(p.segments) >= 4  # rolled by time, not size
        [r] = store.enforce_retention(TOPIC, now=NOW + 10_000)
        assert r.deleted_segments and p.log_start_offset > 0
        assert all(NOW + 10_000 - rec.timestamp <= 5000 + 1200 for rec in p.read(p.log_start_offset))


def test_background_thread_enforces_retention(tmp_path):
    store = pylog.open(str(tmp_path), segment_bytes=1024, log_retention_check_interval_ms=20)
    try:
        store.create_topic(TOPIC, config={"retention.ms": DAY})
        p = store.topic(TOPIC).partition(0)
        old = int(time.time() * 1000) - 3 * DAY
        _fill(p, 3, old)
        p.append_values([b"young"])
        assert wait_for(lambda: p.log_start_offset > 0 and store.cleaner_status().segments_deleted >= 3, 120), \
            "the background thread did not enforce retention"
        assert p.log_start_offset > 0
        st = store.cleaner_status()
        assert st.alive and st.segments_deleted >= 3 and st.bytes_deleted > 0 and st.runs >= 1
        store.check_health()
    finally:
        store.close()
    assert not store.cleaner_status().alive


def test_enforce_retention_skips_partitions_another_process_writes(tmp_path):
    with _store(tmp_path) as a, _store(tmp_path) as b:
        a.create_topic(TOPIC, config={"retention.ms": 1})
        pa = a.topic(TOPIC).partition(0)
        _fill(pa, 2, NOW - DAY)
        [r] = b.enforce_retention(TOPIC, now=NOW)
        assert r.reasons == ["locked"] and r.deleted_segments == []
        assert a.enforce_retention(TOPIC, now=NOW)[0].deleted_segments


class _Seg:
    def __init__(self, base, size, ts):
        self.base_offset, self.size, self.max_timestamp = base, size, ts


@pytest.mark.parametrize("segs, log_start, rms, rbytes, expect", [
    ([], 0, 0, 0, 0),
    ([_Seg(0, 0, -1)], 0, 0, 0, 0),  # the only, empty segment
    ([_Seg(0, 10, 0), _Seg(5, 0, -1)], 0, 0, -1, 1),  # never the empty active one
    ([_Seg(0, 10, 0), _Seg(5, 10, 0)], 0, 0, -1, 2),  # the non-empty active one: caller rolls
    ([_Seg(0, 10, 0), _Seg(5, 10, 190), _Seg(9, 10, 0)], 0, 50, -1, 1),  # stop at the first young one
    ([_Seg(0, 10, 100), _Seg(5, 10, 100), _Seg(9, 10, 100)], 0, -1, 15, 1),
    ([_Seg(0, 10, 100), _Seg(5, 10, 100), _Seg(9, 10, 100)], 0, -1, 10, 2),
    ([_Seg(0, 10, 100), _Seg(5, 10, 100), _Seg(9, 10, 100)], 9, -1, -1, 2),  # below the log start
    ([_Seg(0, 10, 100), _Seg(5, 10, 100), _Seg(9, 10, 100)], 8, -1, -1, 1),
])
def test_deletable_prefix_rules(segs, log_start, rms, rbytes, expect):
    assert deletable_prefix(segs, log_start, 200, rms, rbytes)[0] == expect
