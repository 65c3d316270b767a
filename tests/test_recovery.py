"""Corruption and crash-recovery scenarios, plus the record decoder fed hostile bytes.

Run: ``python -m pytest tests/test_recovery.py -q -p no:cacheprovider``

A crash is simulated in-process by copying the store directory while the store is open: that is what a
crash leaves on disk (every write is in the page cache, the checkpoint says "not clean"). Damage is then
done to the copy and the copy is opened. Recovery only runs on an unclean shutdown, so scenarios on a
cleanly closed store delete or rewrite ``partition.checkpoint`` when they want recovery to run.

What every scenario holds pylog to: damaged bytes raise :class:`pylog.CorruptRecordError` naming the file
and byte position, or recovery cuts the log back to the last whole batch; offsets stay dense; ``check()``
comes back empty afterwards; nothing hangs or allocates memory in proportion to a length field's claim.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylog
from pylog.storage.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from pylog.storage.records import (CODEC_LZ4, HEADER_SIZE, BatchView, RecordColumns, batch_crc, crc32c,
                           encode_batch, parse_header)

from storetools import crash_copy, flip_byte, log_batches

T0 = 1_700_000_000_000
TOPIC = "t"
MiB = 1 << 20

# Header field positions (see the table in pylog/storage/records/format.py).
BATCH_LENGTH_AT = 8
MAGIC_AT = 12
CRC_AT = 13
ATTRIBUTES_AT = 17
RECORD_COUNT_AT = 53
BODY_SIZE_AT = 57


# ------------------------------------------------------------------------------------------- helpers


def _value(offset):
    return b"value-%06d-" % offset + bytes([offset % 251]) * (offset % 40)


def _key(offset):
    return b"key-%d" % (offset % 17)


def _ts(offset):
    return T0 + (offset * 7919) % 5000  # not monotonic


def _pdir(store_path):
    return os.path.join(str(store_path), TOPIC, "0")


def _logs(pdir):
    return [os.path.join(pdir, n) for n in sorted(os.listdir(pdir)) if n.endswith(".log")]


def _append(p, start, count, per_batch=3):
    """Append records ``start .. start + count`` (content a function of the offset) in small batches."""
    off = start
    while off < start + count:
        n = min(per_batch, start + count - off)
        offs = range(off, off + n)
        got = p.append_values([_value(o) for o in offs], keys=[_key(o) for o in offs],
                              timestamps=[_ts(o) for o in offs],
                              headers=[[("o", b"%d" % o)] if o % 5 == 0 else [] for o in offs])
        assert got == off
        off += n


def _append_one(p, offset):
    """Append the generated record for ``offset``; return the offset it got."""
    return p.append_values([_value(offset)], keys=[_key(offset)], timestamps=[_ts(offset)],
                           headers=[[("o", b"%d" % offset)] if offset % 5 == 0 else []])


def _assert_prefix(p, end):
    """The partition holds exactly records 0 .. end - 1, dense, with the generated content."""
    assert p.log_end_offset == end
    recs = p.read(0, max_records=10 ** 6)
    assert [r.offset for r in recs] == list(range(end))
    for r in recs:
        assert (r.key, r.value, r.timestamp) == (_key(r.offset), _value(r.offset), _ts(r.offset)), r.offset
        assert r.headers == ((("o", b"%d" % r.offset),) if r.offset % 5 == 0 else ())


def _assert_read_stops_at(read, start, bad_offset, path, pos):
    """``read(offset)`` (a list of offsets) from ``start`` hands out the records before the bad batch at
    ``bad_offset`` (as a read that ends at a torn tail does), and the next read, from there, raises at it."""
    if start < bad_offset:
        assert read(start) == list(range(start, bad_offset))
        start = bad_offset
    with pytest.raises(pylog.CorruptRecordError) as info:
        read(start)
    assert (info.value.path, info.value.position) == (path, pos), (start, str(info.value))


def _reads(p):
    """p.read and p.read_columns as functions of the start offset giving the offsets they return."""
    return (lambda s: [r.offset for r in p.read(s, max_records=10 ** 6)],
            lambda s: p.read_columns(s).offsets.tolist())


def _brute_offset_for_timestamp(end, target):
    return next((o for o in range(end) if _ts(o) >= target), None)


def _make_store(path, count=300, **options):
    """A cleanly closed store with ``count`` records in several segments."""
    options.setdefault("segment_bytes", 4096)
    options.setdefault("index_interval_bytes", 128)
    options.setdefault("segment_index_bytes", 65536)
    with pylog.open(str(path), **options) as store:
        p = store.create_topic(TOPIC).partition(0)
        _append(p, 0, count)
        assert len(p.segments) >= 3
    return count


def _crash_copy(store, src, dst):
    """Copy the store directory while ``store`` is open (a crash image), then close the original."""
    crash_copy(src, dst)
    store.close()
    cp = read_checkpoint(os.path.join(_pdir(dst), "partition.checkpoint"))
    assert cp is not None and not cp.clean
    return dst


def _crashed_store(tmp_path, sealed=240, flushed=30, unflushed=60, **options):
    """A crash image of one partition: ``sealed`` records in closed segments, then an active segment with
    ``flushed`` records fsynced and ``unflushed`` more after them (only those may be torn by a crash).

    :return: (path of the image, offset below which everything was fsynced, log end offset)
    """
    options.setdefault("segment_bytes", 16384)
    options.setdefault("index_interval_bytes", 128)
    options.setdefault("segment_index_bytes", 65536)  # small preallocated indexes: cheap crash copies
    src = tmp_path / "live"
    store = pylog.open(str(src), **options)
    p = store.create_topic(TOPIC).partition(0)
    _append(p, 0, sealed)
    p.roll()
    _append(p, sealed, flushed)
    p.flush()
    _append(p, sealed + flushed, unflushed)
    # Keep the unflushed records in one active segment, so "after the last fsync" is one file's tail.
    assert p.segments[-1].base_offset == sealed, "test setup: the active segment rolled"
    assert len(p.segments) >= 3 or sealed < 200
    return _crash_copy(store, src, tmp_path / "crashed"), sealed + flushed, sealed + flushed + unflushed


def _patch(path, at, data):
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _flip(path, at, mask=0xFF):
    flip_byte(path, at, mask)


def _fix_crc(buf, pos=0):
    """Recompute the CRC of the batch at ``buf[pos:]`` in place (to get past the checksum on purpose)."""
    h = parse_header(buf, pos)
    struct.pack_into("<I", buf, pos + CRC_AT, batch_crc(bytes(buf[pos:pos + h.size])))


def _fix_crc_in_file(path, pos):
    with open(path, "r+b") as f:
        raw = bytearray(f.read())
    _fix_crc(raw, pos)
    with open(path, "wb") as f:
        f.write(raw)


class _Bounded:
    """Asserts a block allocates little (no allocation sized by a hostile length) and ends. The time limit
    is a hang guard (a loop that never ends on hostile input), far above what the block takes on a loaded
    machine, not a speed requirement."""

    def __init__(self, max_bytes=64 * MiB, max_seconds=300.0):
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds

    def __enter__(self):
        tracemalloc.start()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        elapsed = time.monotonic() - self.t0
        assert peak < self.max_bytes, f"peak allocation {peak} bytes"
        assert elapsed < self.max_seconds, f"took {elapsed:.1f}s"
        return False


# ------------------------------------------------------------------------------ torn tails and recovery


@pytest.mark.parametrize("where", ["partial_header", "mid_header", "mid_body", "one_byte_short", "boundary"])
def test_recover_torn_tail_mid_batch(tmp_path, where):
    crashed, flushed, written = _crashed_store(tmp_path)
    active = _logs(_pdir(crashed))[-1]
    batches = log_batches(active)
    # Tear the last-but-two unflushed batch, so whole batches after it are lost too.
    pos, h = batches[-3]
    assert h.base_offset >= flushed
    cut = {"partial_header": pos + 1, "mid_header": pos + HEADER_SIZE // 2, "mid_body": pos + h.size // 2 + 3,
           "one_byte_short": pos + h.size - 1, "boundary": pos}[where]
    os.truncate(active, cut)
    survivors = h.base_offset

    with pylog.open(str(crashed)) as store:
        p = store.topic(TOPIC).partition(0)
        _assert_prefix(p, survivors)  # a lock-free reader stops at the last whole batch
        assert p.check() == []
        # The first write recovers: the torn batch is cut off and offsets continue densely.
        assert _append_one(p, survivors) == survivors
        _assert_prefix(p, survivors + 1)
        assert p.check() == []
        assert os.path.getsize(active) == pos + log_batches(active)[-1][1].size
        assert survivors >= flushed
    with pylog.open(str(crashed)) as store:  # and a clean reopen after recovery keeps it
        p = store.topic(TOPIC).partition(0)
        _assert_prefix(p, survivors + 1)
        assert p.check() == []


def test_recover_crash_image_without_damage_keeps_everything(tmp_path):
    crashed, _, written = _crashed_store(tmp_path)
    with pylog.open(str(crashed)) as store:
        p = store.topic(TOPIC).partition(0)
        _assert_prefix(p, written)
        _append(p, written, 10)
        _assert_prefix(p, written + 10)
        assert p.check() == []
        for target in (T0, T0 + 1234, T0 + 4999, T0 + 5000):
            assert p.offset_for_timestamp(target) == _brute_offset_for_timestamp(written + 10, target)


def test_recover_every_cut_point_of_the_last_batch(tmp_path):
    crashed, flushed, written = _crashed_store(tmp_path, sealed=30, flushed=3, unflushed=6)
    active = _logs(_pdir(crashed))[-1]
    pos, h = log_batches(active)[-1]
    pristine = tmp_path / "pristine"
    shutil.copytree(crashed, pristine)
    # Every byte of the header, then a sample of the body (each cut costs a copy and a few fsyncs).
    cuts = sorted(set(range(pos, pos + HEADER_SIZE + 2)) | set(range(pos + HEADER_SIZE + 2, pos + h.size, 7))
                  | {pos + h.size - 1, pos + h.size})
    for cut in cuts:
        target = tmp_path / f"cut{cut}"
        shutil.copytree(pristine, target)
        os.truncate(_logs(_pdir(target))[-1], cut)
        expected = written if cut == pos + h.size else h.base_offset
        with pylog.open(str(target)) as store:
            p = store.topic(TOPIC).partition(0)
            assert p.log_end_offset == expected, cut
            assert _append_one(p, expected) == expected
            assert p.check() == [], cut
            _assert_prefix(p, expected + 1)
        shutil.rmtree(target)


@pytest.mark.parametrize("how", ["deleted", "rewritten_unclean"])
def test_recover_when_the_checkpoint_says_unclean(tmp_path, how):
    path = tmp_path / "s"
    count = _make_store(path)
    pdir = _pdir(path)
    active = _logs(pdir)[-1]
    pos, h = log_batches(active)[-1]
    os.truncate(active, pos + h.size - 5)  # damage after the clean close ...
    cp_path = os.path.join(pdir, "partition.checkpoint")
    if how == "deleted":  # ... and lose the checkpoint, or say the shutdown was not clean
        os.unlink(cp_path)
    else:
        write_checkpoint(cp_path, Checkpoint(recovery_point=0, log_start_offset=0, clean=False))
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_end_offset == h.base_offset
        assert _append_one(p, h.base_offset) == h.base_offset
        _assert_prefix(p, h.base_offset + 1)
        assert p.check() == []
    assert h.base_offset < count


def test_recovery_cuts_at_the_first_bad_batch_and_drops_later_segments(tmp_path):
    """With recovery from offset 0, a bad batch in an old segment ends the log there: no gap is left."""
    path = tmp_path / "s"
    _make_store(path)
    pdir = _pdir(path)
    logs = _logs(pdir)
    victim = logs[1]
    pos, h = log_batches(victim)[2]
    _flip(victim, pos + HEADER_SIZE + 2)  # body byte: CRC mismatch
    os.unlink(os.path.join(pdir, "partition.checkpoint"))
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        _append_one(p, h.base_offset)
        _assert_prefix(p, h.base_offset + 1)
        assert p.check() == []
        assert len(_logs(pdir)) == 2
        assert os.path.getsize(victim) > pos


# ------------------------------------------------------------------------------- damage to sealed data


# (name, byte offset inside the batch) - every one must be caught and reported at the batch's position.
_SEALED_FLIPS = [("batch_length_high", BATCH_LENGTH_AT + 3), ("batch_length_low", BATCH_LENGTH_AT),
                 ("magic", MAGIC_AT), ("crc", CRC_AT + 1), ("attributes", ATTRIBUTES_AT),
                 ("last_offset_delta", 19), ("first_timestamp", 23), ("record_count", RECORD_COUNT_AT),
                 ("body_size", BODY_SIZE_AT), ("reserved", 62), ("body_first", HEADER_SIZE),
                 ("body_middle", None), ("body_last", -1)]


@pytest.mark.parametrize("name,at", _SEALED_FLIPS, ids=[f[0] for f in _SEALED_FLIPS])
def test_flipped_byte_in_sealed_segment_raises_corrupt_record_error(tmp_path, name, at):
    path = tmp_path / "s"
    count = _make_store(path)
    logs = _logs(_pdir(path))
    victim = logs[1]
    batches = log_batches(victim)
    pos, h = batches[len(batches) // 2]
    at = h.size // 2 + 5 if at is None else (h.size - 1 if at == -1 else at)
    _flip(victim, pos + at, 0x40)
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_end_offset == count
        # Records before the damaged batch still read fine ...
        before = p.read(0, max_records=h.base_offset)
        assert [r.offset for r in before] == list(range(h.base_offset))
        # ... a read that needs it stops before it, and the next raises, naming the file and the batch's
        # position, never garbage.
        for start in (0, h.base_offset, h.base_offset + 1, batches[0][1].base_offset):
            for read in _reads(p):
                _assert_read_stops_at(read, start, h.base_offset, victim, pos)
        # The next batch and the segments after are unaffected.
        nxt = batches[len(batches) // 2 + 1][1].base_offset
        assert [r.offset for r in p.read(nxt, max_records=5)] == list(range(nxt, nxt + 5))
        assert p.check() != []


@pytest.mark.parametrize("direction", ["up", "down", "far_up", "negative", "previous_batch"])
def test_damaged_base_offset_in_sealed_segment_raises(tmp_path, direction):
    """The base offset is covered by the CRC: a damaged one is an error at the batch, never wrong offsets
    and never silently skipped records (a reader must not trust it to skip the batch unchecked)."""
    path = tmp_path / "s"
    _make_store(path)
    victim = _logs(_pdir(path))[1]
    batches = log_batches(victim)
    i = len(batches) // 2
    pos, h = batches[i]
    base = h.base_offset
    assert base & (base - 1) != base and base > 4
    new = {"up": base + 256, "down": base & (base - 1), "far_up": base | (1 << 40), "negative": base - (1 << 63),
           "previous_batch": batches[i - 1][1].base_offset}[direction]
    _patch(victim, pos, struct.pack("<q", new))
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        for start in (0, batches[0][1].base_offset, base - 1, base, base + 1, h.last_offset):
            for read in _reads(p):
                _assert_read_stops_at(read, start, base, victim, pos)
        assert p.check() != []


def test_damaged_max_timestamp_in_sealed_segment_is_not_skipped_silently(tmp_path):
    """offset_for_timestamp must not skip a batch on the word of a damaged header (a wrong, later answer)."""
    path = tmp_path / "s"
    count = _make_store(path)
    logs = _logs(_pdir(path))
    # A batch in a sealed segment that holds the answer for its own max timestamp (a new running maximum).
    victim, pos, h = next((log, pos, h) for log in logs[1:-1] for pos, h in log_batches(log)
                          if h.base_offset <= _brute_offset_for_timestamp(count, h.max_timestamp) < h.next_offset)
    target = h.max_timestamp
    _patch(victim, pos + 31, struct.pack("<q", h.first_timestamp))  # max timestamp lowered to the first one
    assert h.first_timestamp < target
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        with pytest.raises(pylog.CorruptRecordError) as info:
            p.offset_for_timestamp(target)
        assert (info.value.path, info.value.position) == (victim, pos)
        for other in (T0 - 1, T0 + 1):  # answers before the damage are still found
            assert p.offset_for_timestamp(other) == _brute_offset_for_timestamp(count, other)


def test_damaged_sealed_segment_does_not_block_recovery_of_the_active_one(tmp_path):
    crashed, flushed, written = _crashed_store(tmp_path)
    logs = _logs(_pdir(crashed))
    pos, h = log_batches(logs[0])[1]
    _flip(logs[0], pos + HEADER_SIZE + 1)
    os.truncate(logs[-1], os.path.getsize(logs[-1]) - 3)
    with pylog.open(str(crashed)) as store:
        p = store.topic(TOPIC).partition(0)
        last = log_batches(logs[-1])[-1][1].next_offset
        assert p.append_values([b"after"]) == last
        _assert_read_stops_at(_reads(p)[0], 0, h.base_offset, logs[0], pos)
        assert [r.offset for r in p.read(last - 2)] == [last - 2, last - 1, last]


# ------------------------------------------------------------------------------ hostile length fields


@pytest.mark.parametrize("length", [1 << 31, (1 << 31) - 13, 0xFFFFFFFF, 0, 51, 1 << 24])
def test_huge_or_tiny_batch_length_in_sealed_segment(tmp_path, length):
    path = tmp_path / "s"
    _make_store(path)
    victim = _logs(_pdir(path))[0]
    pos, h = log_batches(victim)[3]
    _patch(victim, pos + BATCH_LENGTH_AT, struct.pack("<I", length))
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        with _Bounded():
            for start in (0, h.base_offset):
                _assert_read_stops_at(_reads(p)[0], start, h.base_offset, victim, pos)
            assert any(victim in problem for problem in p.check())


@pytest.mark.parametrize("count", [-1, -(1 << 31), (1 << 31) - 1, 0, 10 ** 6])
def test_hostile_record_count_with_valid_crc_in_sealed_segment(tmp_path, count):
    path = tmp_path / "s"
    _make_store(path)
    victim = _logs(_pdir(path))[0]
    pos, h = log_batches(victim)[3]
    _patch(victim, pos + RECORD_COUNT_AT, struct.pack("<i", count))
    _fix_crc_in_file(victim, pos)
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        with _Bounded():
            with pytest.raises(pylog.CorruptRecordError) as info:
                p.read(h.base_offset)
        assert (info.value.path, info.value.position) == (victim, pos)


@pytest.mark.parametrize("length", [1 << 31, (1 << 31) - 13, 0xFFFFFFFF, 0])
@pytest.mark.parametrize("which", ["last", "middle"])
def test_hostile_batch_length_in_active_segment_is_cut_by_recovery(tmp_path, length, which):
    crashed, flushed, written = _crashed_store(tmp_path)
    active = _logs(_pdir(crashed))[-1]
    batches = log_batches(active)
    pos, h = batches[-1] if which == "last" else batches[-len(batches) // 3]
    assert h.base_offset >= flushed
    _patch(active, pos + BATCH_LENGTH_AT, struct.pack("<I", length))
    with _Bounded():
        with pylog.open(str(crashed)) as store:
            p = store.topic(TOPIC).partition(0)
            if which == "last":
                assert p.log_end_offset == h.base_offset  # a lock-free reader stops before a bad tail
            else:
                # A reader only scans the tail of the active segment (from its last index entry), so it
                # meets damage further back when it reads there: the records before it, then an error at
                # the spot, never garbage.
                _assert_read_stops_at(_reads(p)[0], 0, h.base_offset, active, pos)
            assert _append_one(p, h.base_offset) == h.base_offset  # the writer's recovery cuts it off
            _assert_prefix(p, h.base_offset + 1)
            assert p.check() == []


def test_hostile_record_count_in_active_segment_is_cut_by_recovery(tmp_path):
    crashed, flushed, written = _crashed_store(tmp_path)
    active = _logs(_pdir(crashed))[-1]
    pos, h = log_batches(active)[-2]
    _patch(active, pos + RECORD_COUNT_AT, struct.pack("<i", (1 << 31) - 1))
    _fix_crc_in_file(active, pos)
    with _Bounded():
        with pylog.open(str(crashed)) as store:
            p = store.topic(TOPIC).partition(0)
            _append_one(p, h.base_offset)
            _assert_prefix(p, h.base_offset + 1)
            assert p.check() == []


# ------------------------------------------------------------------------------------ garbage at the end


@pytest.mark.parametrize("junk", ["random", "zeros", "header_like", "whole_fake_batch"])
def test_garbage_appended_to_active_segment_after_crash(tmp_path, junk):
    crashed, flushed, written = _crashed_store(tmp_path)
    active = _logs(_pdir(crashed))[-1]
    size = os.path.getsize(active)
    rng = random.Random(5)
    if junk == "random":
        data = rng.randbytes(300)
    elif junk == "zeros":  # what a file system may show after a power loss: allocated, never written
        data = bytes(4096)
    elif junk == "header_like":  # a plausible header (right magic, sane length) with no valid body
        data = bytearray(encode_batch([b"x" * 100], base_offset=written))
        data[HEADER_SIZE + 5] ^= 1
        data = bytes(data)
    else:  # a whole, valid batch with offsets that do not follow (e.g. a stale page)
        data = encode_batch([b"stale"], base_offset=written - 5)
    with open(active, "ab") as f:
        f.write(data)
    with pylog.open(str(crashed)) as store:
        p = store.topic(TOPIC).partition(0)
        if junk != "whole_fake_batch":
            _assert_prefix(p, written)
        assert _append_one(p, written) == written
        _assert_prefix(p, written + 1)
        assert p.check() == []
        assert os.path.getsize(active) == size + log_batches(active)[-1][1].size


def test_garbage_appended_to_cleanly_closed_segment(tmp_path):
    """No crash can put it there, so the writer refuses to append after it (or recovers); never reads it."""
    path = tmp_path / "s"
    count = _make_store(path)
    active = _logs(_pdir(path))[-1]
    size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(b"\x00garbage!" * 20)
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        _assert_prefix(p, count)
        try:
            off = _append_one(p, count)
        except pylog.CorruptRecordError as exc:
            assert (exc.path, exc.position) == (active, size)
            _assert_prefix(p, count)
        else:
            assert off == count
            _assert_prefix(p, count + 1)
            assert p.check() == []


# ----------------------------------------------------------------------------------- damaged indexes


def _index_files(pdir):
    return sorted(os.path.join(pdir, n) for n in os.listdir(pdir) if n.endswith((".index", ".timeindex")))


def _check_reads(p, end):
    _assert_prefix(p, end)
    rng = random.Random(end)
    for start in [rng.randrange(end) for _ in range(40)] + [s.base_offset for s in p.segments if s.size]:
        recs = p.read(start, max_records=7)
        assert [r.offset for r in recs] == list(range(start, min(start + 7, end))), start
        assert [r.value for r in recs] == [_value(o) for o in range(start, min(start + 7, end))]
    for target in (T0 - 1, T0, T0 + 17, T0 + 2500, T0 + 4999, T0 + 5000) + tuple(_ts(o) for o in range(0, end, 37)):
        assert p.offset_for_timestamp(target) == _brute_offset_for_timestamp(end, target), target


def _garble(path, how, rng, other):
    size = os.path.getsize(path)
    if how == "deleted":
        os.unlink(path)
    elif how == "empty":
        os.truncate(path, 0)
    elif how == "truncated":
        os.truncate(path, 10)
    elif how == "zeros":
        with open(path, "wb") as f:
            f.write(bytes(size))
    elif how == "random":
        with open(path, "wb") as f:
            f.write(rng.randbytes(max(size, 64)))
    elif how == "flipped_entry":
        if size > 64:
            _flip(path, rng.randrange(64, size))
        else:
            _flip(path, 20)
    elif how == "flipped_header":
        _flip(path, rng.randrange(0, 60))
    elif how == "other_segment":  # a well-formed index of a different segment
        shutil.copyfile(other, path)
    elif how == "grown":
        with open(path, "ab") as f:
            f.write(b"\x01" * 24)


_GARBLES = ["deleted", "empty", "truncated", "zeros", "random", "flipped_entry", "flipped_header",
            "other_segment", "grown"]


@pytest.mark.parametrize("how", _GARBLES)
def test_damaged_indexes_of_a_closed_store_are_rebuilt(tmp_path, how):
    path = tmp_path / "s"
    count = _make_store(path, count=400, index_interval_bytes=64)
    pdir = _pdir(path)
    files = _index_files(pdir)
    rng = random.Random(how)
    for f in files:
        other = files[(files.index(f) + 2) % len(files)]  # same suffix, other base offset
        _garble(f, how, rng, other)
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        _check_reads(p, count)  # as a reader: rebuilt in memory
        assert p.check() == []
        _append(p, count, 50)  # as the writer: the active segment's indexes are rebuilt on disk
        _check_reads(p, count + 50)
        assert p.check() == []
    with pylog.open(str(path)) as store:
        p = store.topic(TOPIC).partition(0)
        _check_reads(p, count + 50)
        assert p.check() == []


@pytest.mark.parametrize("how", ["deleted", "random", "zeros", "flipped_entry", "other_segment"])
def test_damaged_live_indexes_after_a_crash_are_rebuilt(tmp_path, how):
    crashed, flushed, written = _crashed_store(tmp_path, index_interval_bytes=64)
    pdir = _pdir(crashed)
    files = _index_files(pdir)
    rng = random.Random(how)
    active_stem = os.path.basename(_logs(pdir)[-1])[:-4]
    for f in files:
        if os.path.basename(f).startswith(active_stem):
            _garble(f, how, rng, files[(files.index(f) + 2) % len(files)])
    with pylog.open(str(crashed)) as store:
        p = store.topic(TOPIC).partition(0)
        _append(p, written, 20)  # the writer recovers the active segment, rebuilding its indexes
        _check_reads(p, written + 20)
        assert p.check() == []


def test_live_indexes_with_entries_past_a_torn_tail(tmp_path):
    """After a power loss the index pages may survive when the log's do not: entries point past the end."""
    crashed, flushed, written = _crashed_store(tmp_path, index_interval_bytes=0)
    active = _logs(_pdir(crashed))[-1]
    batches = log_batches(active)
    pos, h = batches[-len(batches) // 2]
    os.truncate(active, pos + 7)
    with pylog.open(str(crashed)) as store:
        p = store.topic(TOPIC).partition(0)
        _check_reads(p, h.base_offset)  # reader, before any recovery
        assert p.check() == []
        _append(p, h.base_offset, 10)
        _check_reads(p, h.base_offset + 10)
        assert p.check() == []


# ------------------------------------------------------------------------------------- the checkpoint


@pytest.mark.parametrize("how", ["flipped", "truncated", "empty", "garbage", "bad_magic", "negative", "longer"])
def test_damaged_partition_checkpoint_raises_clear_error(tmp_path, how):
    path = tmp_path / "s"
    _make_store(path)
    cp = os.path.join(_pdir(path), "partition.checkpoint")
    raw = bytearray(open(cp, "rb").read())
    if how == "flipped":
        raw[9] ^= 0x10
    elif how == "truncated":
        raw = raw[:20]
    elif how == "empty":
        raw = b""
    elif how == "garbage":
        raw = bytearray(random.Random(1).randbytes(40))
    elif how == "bad_magic":
        raw[0:4] = b"XXXX"
        struct.pack_into("<I", raw, 36, crc32c(bytes(raw[:36])))
    elif how == "negative":
        struct.pack_into("<q", raw, 8, -5)
        struct.pack_into("<I", raw, 36, crc32c(bytes(raw[:36])))
    elif how == "longer":
        raw += b"\x00" * 8
    with open(cp, "wb") as f:
        f.write(raw)
    with pylog.open(str(path)) as store:
        with pytest.raises(pylog.CorruptRecordError) as info:
            p = store.topic(TOPIC).partition(0)
            p.read(0)
            p.append_values([b"x"])
        assert info.value.path == cp
        assert "checkpoint" in str(info.value)


# ------------------------------------------------------------------------- the decoder, hostile bytes


def _sample_batch(codec=0, n=20):
    values = [None if i % 7 == 3 else b"value %d " % i * (i % 4 + 1) for i in range(n)]
    keys = [None if i % 5 == 1 else b"k%d" % i for i in range(n)]
    headers = [[("h", b"%d" % i), ("n", None)] if i % 3 == 0 else [] for i in range(n)]
    stamps = [T0 + (i * 37) % 11 for i in range(n)]
    raw = encode_batch(values, keys, stamps, headers, base_offset=1000, codec=codec,
                       offset_deltas=np.array([2 * i for i in range(n)], np.int32))
    return bytearray(raw), values, keys, headers


def _decode_all(buf):
    """Everything a reader does with a batch; returns the records."""
    view = BatchView.from_buffer(buf)
    recs = view.records("t", 0)
    cols = RecordColumns.concat_views([(view, 0, view.count), (view, 1, view.count)], "t", 0)
    assert len(cols) == 2 * view.count - 1
    cols.to_records()
    return recs


def _assert_well_formed(recs):
    for r in recs:
        assert isinstance(r.offset, int) and isinstance(r.timestamp, int)
        assert r.key is None or isinstance(r.key, bytes)
        assert r.value is None or isinstance(r.value, bytes)
        assert isinstance(r.headers, tuple)
        for pair in r.headers:
            assert isinstance(pair, tuple) and len(pair) == 2, pair
            assert isinstance(pair[0], str) and (pair[1] is None or isinstance(pair[1], bytes)), pair


def test_sample_batch_decodes():
    for codec in (0, CODEC_LZ4):
        raw, values, keys, headers = _sample_batch(codec)
        recs = _decode_all(bytes(raw))
        assert [r.value for r in recs] == values
        assert [r.key for r in recs] == keys
        assert [r.offset for r in recs] == [1000 + 2 * i for i in range(20)]
        _assert_well_formed(recs)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=400))
def test_decode_random_bytes_raises_corrupt_record_error(junk):
    with pytest.raises(pylog.CorruptRecordError):
        BatchView.from_buffer(junk)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(min_size=HEADER_SIZE, max_size=400), st.sampled_from([0, CODEC_LZ4]))
def test_decode_random_bytes_with_a_plausible_header_and_valid_crc(junk, codec):
    """Random bytes dressed up to pass the magic, length and CRC checks still never decode into garbage."""
    buf = bytearray(junk)
    struct.pack_into("<IB", buf, BATCH_LENGTH_AT, len(buf) - 12, 1)
    struct.pack_into("<H", buf, ATTRIBUTES_AT, (struct.unpack_from("<H", buf, ATTRIBUTES_AT)[0] & 0x3F8) | codec)
    if codec == 0:
        struct.pack_into("<I", buf, BODY_SIZE_AT, len(buf) - HEADER_SIZE)
    _fix_crc(buf)
    try:
        recs = _decode_all(bytes(buf))
    except pylog.CorruptRecordError:
        return
    _assert_well_formed(recs)


@pytest.mark.parametrize("codec", [0, CODEC_LZ4])
def test_decode_every_truncation_raises(codec):
    raw, *_ = _sample_batch(codec)
    for cut in range(len(raw)):
        with pytest.raises(pylog.CorruptRecordError):
            BatchView.from_buffer(bytes(raw[:cut]))


@pytest.mark.parametrize("codec", [0, CODEC_LZ4])
def test_decode_bad_crc_raises(codec):
    raw, *_ = _sample_batch(codec)
    for at in range(MAGIC_AT, len(raw)):
        for mask in (0x01, 0x80):
            bad = bytearray(raw)
            bad[at] ^= mask
            with pytest.raises(pylog.CorruptRecordError):
                BatchView.from_buffer(bytes(bad))


@pytest.mark.parametrize("body_size", ["plus_one", "minus_one", "double", "x255", "x300", "max", "zero", "tiny"])
def test_decode_lz4_body_size_lies_raise(body_size):
    raw, *_ = _sample_batch(CODEC_LZ4, n=200)
    h = parse_header(raw)
    assert h.codec == CODEC_LZ4
    stored = h.size - HEADER_SIZE
    claim = {"plus_one": h.body_size + 1, "minus_one": h.body_size - 1, "double": h.body_size * 2,
             "x255": stored * 255, "x300": stored * 300, "max": 0xFFFFFFFF, "zero": 0, "tiny": 4}[body_size]
    struct.pack_into("<I", raw, BODY_SIZE_AT, claim)
    _fix_crc(raw)
    with _Bounded(max_bytes=max(64 * MiB, 2 * stored * 256)):
        with pytest.raises(pylog.CorruptRecordError):
            BatchView.from_buffer(bytes(raw))


@pytest.mark.parametrize("field,fmt,value", [
    ("record_count", "<i", -1), ("record_count", "<i", 1 << 30), ("record_count", "<i", 0),
    ("last_offset_delta", "<i", -1), ("last_offset_delta", "<i", 5),
    ("attributes", "<H", 0xFFFF), ("attributes", "<H", 0x0007), ("magic", "<B", 2),
    ("max_timestamp", "<q", 0),
])
def test_decode_hostile_header_fields_with_valid_crc_raise(field, fmt, value):
    at = {"record_count": RECORD_COUNT_AT, "last_offset_delta": 19, "attributes": ATTRIBUTES_AT,
          "magic": MAGIC_AT, "max_timestamp": 31}[field]
    raw, *_ = _sample_batch(0)
    struct.pack_into(fmt, raw, at, value)
    _fix_crc(raw)
    with _Bounded():
        with pytest.raises(pylog.CorruptRecordError):
            _decode_all(bytes(raw))


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0, CODEC_LZ4]), st.data())
def test_decode_mutated_batches_with_fixed_crc(codec, data):
    """Mutations anywhere past the CRC, with the CRC recomputed: a CorruptRecordError or well-formed records."""
    raw, *_ = _sample_batch(codec)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        at = data.draw(st.integers(ATTRIBUTES_AT, len(raw) - 1), label="at")
        kind = data.draw(st.sampled_from(["xor", "set", "int32"]), label="kind")
        if kind == "xor":
            raw[at] ^= data.draw(st.integers(1, 255), label="mask")
        elif kind == "set":
            raw[at] = data.draw(st.sampled_from([0, 0xFF, 0x7F, 0x80, 0x01]), label="value")
        elif at + 4 <= len(raw):
            struct.pack_into("<i", raw, at, data.draw(st.sampled_from([-1, -2, 0, 1 << 30, (1 << 31) - 1, 100]),
                                                      label="int32"))
    _fix_crc(raw)
    try:
        recs = _decode_all(bytes(raw))
    except pylog.CorruptRecordError:
        return
    _assert_well_formed(recs)
    assert len(recs) == parse_header(raw).record_count


@settings(max_examples=300, deadline=None, database=None)
@given(st.data())
def test_decode_mutated_uncompressed_body_sections(data):
    """Hostile section contents (lengths, offset deltas, headers blob) behind a valid header and CRC."""
    raw, *_ = _sample_batch(0)
    h = parse_header(raw)
    n = h.record_count
    # Section layout of this sample: offset deltas, timestamp deltas, key lengths, value lengths (see FORMAT).
    sections = {"deltas": HEADER_SIZE, "ts": HEADER_SIZE + 4 * n, "klens": HEADER_SIZE + 12 * n,
                "vlens": HEADER_SIZE + 16 * n}
    name = data.draw(st.sampled_from(sorted(sections)), label="section")
    width = 8 if name == "ts" else 4
    i = data.draw(st.integers(0, n - 1), label="index")
    value = data.draw(st.sampled_from([-2, -1, 0, 1, 7, 1 << 20, (1 << 31) - 1, -(1 << 31)]), label="value")
    struct.pack_into("<q" if width == 8 else "<i", raw, sections[name] + width * i, value)
    _fix_crc(raw)
    try:
        recs = _decode_all(bytes(raw))
    except pylog.CorruptRecordError:
        return
    _assert_well_formed(recs)
    assert sum(len(r.value) for r in recs if r.value) + sum(len(r.key) for r in recs if r.key) <= len(raw)


def test_an_index_entry_naming_the_wrong_batch_is_not_trusted(tmp_path):
    """A sealed index whose entries (with a correct checksum) point at a later batch: reads must still
    start at the requested offset, not silently skip to where the index points."""
    from pylog.index import OffsetIndex
    path = tmp_path / "s"
    with pylog.open(str(path), index_interval_bytes=0) as store:
        p = store.create_topic("t").partition(0)
        for i in range(30):
            p.append_values([b"%d" % i])
    pdir = path / "t" / "0"
    log = sorted(pdir.glob("*.log"))[0]
    index = str(log).replace(".log", ".index")
    idx = OffsetIndex.open(index, 0)
    a, b = idx.entries()
    idx.close()
    b[9] = b[10]  # the entry for offset 10 now points at the batch of offset 11 (still in order)
    OffsetIndex.write_file(index, 0, a, b, len(a), sealed=True)
    with pylog.open(str(path)) as store:
        p = store.topic("t").partition(0)
        assert [r.offset for r in p.read(10, max_records=3)] == [10, 11, 12]


def test_deeply_nested_json_is_a_corrupt_record_error(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("t")
    (tmp_path / "t" / "topic.json").write_text("[" * 100_000)
    with pylog.open(tmp_path) as store:
        with pytest.raises(pylog.CorruptRecordError):
            store.topic("t")
