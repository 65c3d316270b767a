"""Reads check each batch's CRC-32C once per open file: what a segment's memo of checked batches may and may
not vouch for (see GUARANTEES.md, "What a read checks, and when").

Real stores, real segment files; damage is a byte flipped in the file on disk.
Run: ``python -m pytest tests/test_verified_reads.py -q``
"""

from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import CorruptRecordError
from pylog.storage.records import HEADER_SIZE, encode_parts
from pylog.segment import Segment

from storetools import flip_byte, log_batches

TOPIC = "t"
OPTIONS = {"segment_bytes": 4096, "index_interval_bytes": 128, "log_cleaner_enable": False}


def _value(offset: int, generation: int = 0) -> bytes:
    return b"g%d-%d-" % (generation, offset) + b"v" * 40


def _key(offset: int) -> bytes:
    return b"dup" if offset % 2 else b"u%d" % offset  # compaction keeps the even ones and the last odd one


def _append(p, first: int, count: int, per_batch: int = 5, generation: int = 0) -> None:
    for start in range(first, first + count, per_batch):
        n = min(per_batch, first + count - start)
        p.append_values([_value(o, generation) for o in range(start, start + n)],
                        keys=[_key(o) for o in range(start, start + n)])


def _flip(path: str, at: int) -> None:
    """Flip one bit of the file on disk (through the file, as bit rot or a foreign hand would)."""
    flip_byte(path, at, 0x20)


def _made(path, count: int = 200) -> None:
    with pylog.open(str(path), **OPTIONS) as store:
        _append(store.create_topic(TOPIC).partition(0), 0, count)


def _reads_one(p, offset: int) -> None:
    [r] = p.read(offset, max_records=1)
    assert (r.offset, r.value) == (offset, _value(offset))


def test_a_read_remembers_the_batches_it_checked_and_reads_them_again_unchanged(tmp_path):
    _made(tmp_path)
    with pylog.open(str(tmp_path), **OPTIONS) as store:
        p = store.topic(TOPIC).partition(0)
        sealed = p.segments[1]
        (pos, h), *_ = [b for b in log_batches(sealed.log_path) if b[1].base_offset > sealed.base_offset]
        assert sealed.verified() == set()
        for _ in range(3):
            _reads_one(p, h.base_offset + 2)
        assert pos in sealed.verified()
        # Reads with verify=False check nothing, so they remember nothing.
        other = p.segments[2]
        p.read(other.base_offset, max_records=1, verify=False)
        assert other.verified() == set()


def test_a_batch_damaged_after_a_read_checked_it_is_found_once_its_file_is_opened_again(tmp_path):
    _made(tmp_path)
    with pylog.open(str(tmp_path), **OPTIONS) as store:
        p = store.topic(TOPIC).partition(0)
        seg = p.segments[1]
        pos, h = log_batches(seg.log_path)[2]
        _reads_one(p, h.base_offset + 1)
        assert pos in seg.verified()
        _flip(seg.log_path, pos + h.size - 3)  # in the value data
        # The check behind `pylog verify` reads every batch again, memo or not.
        problems = p.check()
        assert any("checksum" in x and f"@ byte {pos}]" in x for x in problems), problems
    with pylog.open(str(tmp_path), **OPTIONS) as store:
        p = store.topic(TOPIC).partition(0)
        for _ in range(2):  # a batch that fails is never remembered
            with pytest.raises(CorruptRecordError) as err:
                p.read(h.base_offset + 1, max_records=1)
            assert err.value.position == pos and err.value.path == seg.log_path
        assert pos not in p.segments[1].verified()


@pytest.mark.parametrize("where", ["sealed", "active"])
def test_damaged_bytes_are_never_served_whatever_else_was_read_first(tmp_path, where):
    """Every other batch of the segment read (and remembered) first; then one damaged on disk: every
    read that needs it raises, in the writer's process (active: its own mapping) and after a reopen."""
    with pylog.open(str(tmp_path), **OPTIONS) as store:
        p = store.create_topic(TOPIC).partition(0)
        _append(p, 0, 200)
        seg = p.segments[1] if where == "sealed" else p.segments[-1]
        batches = log_batches(seg.log_path)
        assert len(batches) >= 4
        victim_pos, victim = batches[len(batches) // 2]
        for pos, h in batches:
            if pos != victim_pos:
                _reads_one(p, h.base_offset + h.record_count - 1)
        assert seg.verified() == {pos for pos, _ in batches} - {victim_pos}
        _flip(seg.log_path, victim_pos + HEADER_SIZE + 1)
        for offset in (victim.base_offset, victim.base_offset + victim.record_count - 1):
            for _ in range(2):
                with pytest.raises(CorruptRecordError) as err:
                    p.read(offset, max_records=1)
                assert err.value.position == victim_pos
        # A read from before it returns the records up to it, and no further.
        start = batches[0][1].base_offset
        got = p.read(start, max_records=1000)
        assert [r.offset for r in got] == list(range(start, victim.base_offset))


def test_a_readers_view_of_the_active_segment_checks_every_read(tmp_path):
    """A handle that does not hold the writer lock cannot prove that the active segment's bytes stay as it
    checked them (a new writer's recovery may cut and rewrite them): it keeps no memo there."""
    with pylog.open(str(tmp_path), **{**OPTIONS, "segment_bytes": 1 << 20}) as writer:
        p = writer.create_topic(TOPIC).partition(0)
        _append(p, 0, 60)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            q = reader.topic(TOPIC).partition(0)
            active = q.segments[-1]
            pos, h = log_batches(active.log_path)[1]
            _reads_one(q, h.base_offset)
            assert active.verified() is None
            _flip(active.log_path, pos + h.size - 1)
            with pytest.raises(CorruptRecordError) as err:
                q.read(h.base_offset, max_records=1)
            assert err.value.position == pos


def test_a_reader_continuing_where_its_last_read_stopped_is_handed_the_rest_of_that_batch_as_checked(tmp_path):
    """A reader's view of the active segment checks every read of the file; a read that continues at the
    offset where the last one stopped inside a batch is handed the rest of that batch as the last read
    checked it (a consumer's polls, a read() loop: a ~1 MB batch was read and checked once per 1,000
    records). Any other read reads the file and checks it, and so finds damage done since."""
    with pylog.open(str(tmp_path), **{**OPTIONS, "segment_bytes": 1 << 20}) as writer:
        p = writer.create_topic(TOPIC).partition(0)
        _append(p, 0, 5)
        _append(p, 5, 50, per_batch=50)
        _append(p, 55, 5)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            q = reader.topic(TOPIC).partition(0)
            active = q.segments[-1]
            pos, h = log_batches(active.log_path)[1]
            assert (h.base_offset, h.record_count) == (5, 50)
            assert [r.offset for r in q.read(5, max_records=10)] == list(range(5, 15))
            _flip(active.log_path, pos + h.size - 1)
            got = q.read(15, max_records=100)  # continues: the rest as checked, then the next batch from the file
            assert [(r.offset, r.value) for r in got] == [(o, _value(o)) for o in range(15, 60)]
            with pytest.raises(CorruptRecordError) as err:
                q.read(20, max_records=1)  # not a continuation: the file is read and checked
            assert err.value.position == pos
            with pytest.raises(CorruptRecordError):
                q.read(15, max_records=1)  # the slot went with that read's batch: checked again


def test_a_compaction_swap_leaves_no_memo_vouching_for_the_new_file(tmp_path):
    """The memo is the old file's: the segment swapped in under the same name is read and checked anew."""
    cfg = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}
    with pylog.open(str(tmp_path), **OPTIONS) as store:
        p = store.create_topic(TOPIC, config=cfg).partition(0)
        _append(p, 0, 300)
        p.roll()
        first = p.segments[0]
        name = first.log_path
        # Read every batch of the first segment: its memo holds them all.
        for pos, h in log_batches(name):
            _reads_one(p, h.base_offset)
        assert len(first.verified()) == len(log_batches(name))
        [r] = store.compact(TOPIC)
        assert r.records_removed > 0
        now = p.segments[0]
        assert now.log_path == name and now is not first and now.verified() == set()
        # The first batch of the new file sits where the old file had its first batch, which was read.
        pos, h = log_batches(name)[0]
        assert pos in first.verified()
        _flip(name, pos + h.size - 2)
        with pytest.raises(CorruptRecordError) as err:
            p.read(h.base_offset, max_records=1)
        assert err.value.path == name and err.value.position == pos


def _segment_with_batches(directory: str, generation: int, count: int = 8) -> Segment:
    seg = Segment.create(directory, 0, 1 << 16, 128)
    for i in range(count):
        _append_batch(seg, i * 4, generation)
    return seg


def _append_batch(seg: Segment, base: int, generation: int) -> None:
    parts, h = encode_parts([_value(base + j, generation) for j in range(4)], [b"k"] * 4, base_offset=base)
    seg.append(h, parts, h.max_timestamp)


def test_truncation_drops_the_memo_so_batches_written_again_there_are_checked(tmp_path):
    """The writer cuts its active segment and writes other batches at the same positions: what it checked
    before the cut vouches for none of them."""
    seg = _segment_with_batches(str(tmp_path), generation=0)
    try:
        slices, _ = seg.read(12, 1, 1 << 20)
        assert slices[0][0].records()[0].value == _value(12)
        positions = {pos for pos, _ in log_batches(seg.log_path)}
        for pos, h in log_batches(seg.log_path):
            seg.read(h.base_offset, 1, 1 << 20)
        assert seg.verified() == positions
        # A new writer's recovery cut the log after batches 0 and 4: writable again (recovered).
        os.truncate(seg.log_path, next(pos for pos, h in seg.batch_headers() if h.base_offset == 8))
        assert seg.recover() == 0
        assert seg.verified() == set()
        for base in range(8, 32, 4):
            _append_batch(seg, base, generation=1)
        assert {pos for pos, _ in log_batches(seg.log_path)} == positions  # the same positions, other bytes
        pos, h = next((pos, h) for pos, h in log_batches(seg.log_path) if h.base_offset == 12)
        _flip(seg.log_path, pos + h.size - 1)
        with pytest.raises(CorruptRecordError) as err:
            seg.read(12, 1, 1 << 20)
        assert err.value.position == pos
    finally:
        seg.close()


def test_a_writer_that_hands_over_forgets_what_it_checked_in_the_active_segment(tmp_path):
    """Another writer may cut and rewrite the active segment once the lock is gone (here: a repair of
    damage, then appends at the same positions); the first handle, writer again, checks anew."""
    path = str(tmp_path)
    with pylog.open(path, **OPTIONS) as a_store:
        a = a_store.create_topic(TOPIC).partition(0)
        _append(a, 0, 40)
        active = a.segments[-1]
        batches = log_batches(active.log_path)
        for pos, h in batches:
            _reads_one(a, h.base_offset)
        assert a.segments[-1].verified() == {pos for pos, _ in batches}
        a.release_writer()
        assert active.verified() is None  # not the writer: no memo consulted
        cut_pos, cut = batches[2]
        _flip(active.log_path, cut_pos + cut.size - 1)
        with pylog.open(path, **OPTIONS) as b_store:
            b = b_store.topic(TOPIC).partition(0)
            b.repair()
            assert b.log_end_offset == cut.base_offset
            _append(b, cut.base_offset, 40 - cut.base_offset, generation=1)
        again = log_batches(active.log_path)
        assert [pos for pos, _ in again] == [pos for pos, _ in batches]
        pos, h = again[3]
        _flip(active.log_path, pos + h.size - 1)
        assert a.try_become_writer()
        with pytest.raises(CorruptRecordError) as err:
            a.read(h.base_offset, max_records=1)
        assert err.value.position == pos


def test_the_memo_stays_small(tmp_path):
    """At most one remembered position per 64 KiB of segment (at least 1,024), however many batches."""
    seg = Segment.create(str(tmp_path), 0, 1 << 20, 4096)
    try:
        for i in range(1500):
            _append_batch(seg, i * 4, 0)
        assert seg.size < 1024 * 64 * 1024
        for base in range(0, 1500 * 4, 4):
            seg.read(base, 1, 1 << 20)
        assert len(seg.verified()) == 1024
    finally:
        seg.close()
