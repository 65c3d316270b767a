"""pylog.segment: one ``.log`` with its sparse indexes, through the Segment's public methods.

Each test names the invariant of the module docstring (or the method docstring) it holds the segment to.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from pylog.errors import CorruptRecordError
from pylog.storage.checkpoint import Checkpoint, write_checkpoint
from pylog.storage.records import HEADER_SIZE, encode_parts
from pylog.segment import Segment, SegmentReplacedError

INDEX_BYTES = 1 << 16
INTERVAL = 128  # small: a few batches per index entry, so lookups go through the index


def _writer(directory, base=100):
    return Segment.create(str(directory), base, INDEX_BYTES, INTERVAL)


def _append(seg: Segment, count: int, ts: int = 1000, value: bytes = b"v") -> tuple[int, int]:
    """Append one batch of ``count`` records at the segment's next offset; (position, base offset)."""
    base = seg.next_offset
    parts, h = encode_parts([value + b"%d" % (base + i) for i in range(count)], base_offset=base,
                            default_timestamp=ts)
    return seg.append(h, parts, h.max_timestamp), base


def _offsets(slices) -> list[int]:
    return [int(o) for view, a, b in slices for o in view.offsets()[a:b]]


def _values(slices) -> list[bytes]:
    return [bytes(r.value) for view, a, b in slices for r in view.records(start=a, stop=b)]


def _cut_as_recovery_does(seg: Segment, offset: int) -> None:
    """Cut the log at the start of the batch holding ``offset`` and recover the segment (writable again), as
    a new writer's recovery of a log damaged there does."""
    cut = next(pos for pos, h in seg.batch_headers() if h.last_offset >= offset)
    os.truncate(seg.log_path, cut)
    assert seg.recover() == 0


def _reader(directory, base=100) -> Segment:
    seg = Segment.open(str(directory), base, INDEX_BYTES, INTERVAL)
    seg.load(tolerate_tail=True)
    return seg


def test_segment_read_past_the_last_batch_returns_no_batches(tmp_path):
    seg = _writer(tmp_path)
    for i in range(4):
        _append(seg, 3, ts=1000 + i)
    assert seg.next_offset == 112
    assert seg.read(112, 10, 1 << 20) == ([], 0)
    assert seg.read(10_000, 10, 1 << 20) == ([], 0)


def test_segment_read_from_inside_a_batch_starts_at_that_offset(tmp_path):
    seg = _writer(tmp_path)
    for i in range(20):
        _append(seg, 3)
    slices, nbytes = seg.read(131, 5, 1 << 20)
    assert _offsets(slices) == [131, 132, 133, 134, 135]
    assert _values(slices) == [b"v%d" % o for o in range(131, 136)]
    assert nbytes > 0


def test_segment_read_before_the_base_offset_starts_at_the_first_record(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 3)
    assert _offsets(seg.read(0, 10, 1 << 20)[0]) == [100, 101, 102]


def test_segment_read_returns_one_batch_even_when_it_exceeds_max_bytes(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 2, value=b"x" * 1000)
    _append(seg, 2)
    slices, nbytes = seg.read(100, 100, max_bytes=1)
    assert _offsets(slices) == [100, 101]
    assert nbytes > 1


@settings(max_examples=30)
@given(counts=st.lists(st.integers(1, 7), min_size=1, max_size=40), data=st.data())
def test_segment_read_at_any_offset_returns_exactly_the_records_from_there(tmp_path_factory, counts, data):
    seg = _writer(tmp_path_factory.mktemp("seg"), base=7)
    for c in counts:
        _append(seg, c)
    end = seg.next_offset
    offset = data.draw(st.integers(7, end))
    limit = data.draw(st.integers(1, 50))
    got = _offsets(seg.read(offset, limit, 1 << 20)[0])
    # A read may end early at max_bytes, never here (1 MiB): exactly the next ``limit`` offsets.
    assert got == list(range(offset, min(end, offset + limit)))
    reader = _reader(seg.directory, 7)
    assert _offsets(reader.read(offset, limit, 1 << 20)[0]) == got
    seg.close()
    reader.close()


def test_segment_create_refuses_an_existing_log(tmp_path):
    _writer(tmp_path).close()
    with pytest.raises(FileExistsError):
        _writer(tmp_path)


def test_segment_append_to_a_read_only_segment_is_refused(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 1)
    seg.seal()
    assert not seg.writable
    with pytest.raises(ValueError):
        _append(seg, 1)


def test_segment_reopened_after_seal_knows_its_end_and_timestamps(tmp_path):
    seg = _writer(tmp_path)
    for i in range(10):
        _append(seg, 2, ts=5000 - i if i != 4 else 9000)
    size, end = seg.size, seg.next_offset
    seg.seal()
    seg.close()
    reader = _reader(tmp_path)
    assert (reader.size, reader.next_offset, reader.max_timestamp) == (size, end, 9000)
    assert reader.first_timestamp == 5000
    assert reader.check() == []


def test_segment_empty_has_no_timestamps_and_reads_nothing(tmp_path):
    seg = _writer(tmp_path)
    assert seg.max_timestamp == -1 and seg.first_timestamp is None
    assert seg.read(100, 10, 1 << 20) == ([], 0)
    assert not seg.successor_exists()


def test_segment_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path):
    seg = _writer(tmp_path)
    for i in range(10):
        _append(seg, 2, ts=1000 + 10 * i)  # offsets 100 + 2i, 101 + 2i at ts 1000 + 10i
    assert seg.offset_for_timestamp(0) == 100
    assert seg.offset_for_timestamp(1035) == 108
    assert seg.offset_for_timestamp(1040) == 108
    assert seg.offset_for_timestamp(1040, min_offset=109) == 109
    assert seg.offset_for_timestamp(1091) is None


def test_segment_reader_does_not_see_a_torn_tail(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 3)
    _append(seg, 3)
    whole = seg.size
    seg.close()
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 10)  # fewer bytes than a header: a write cut short
    reader = _reader(tmp_path)
    assert (reader.size, reader.next_offset) == (whole, 106)
    assert _offsets(reader.read(100, 100, 1 << 20)[0]) == list(range(100, 106))


def test_segment_check_reports_a_partial_batch_unless_a_writer_may_be_writing_it(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 3)
    batch = open(seg.log_path, "rb").read()
    with open(seg.log_path, "ab") as f:
        f.write(batch[:HEADER_SIZE + 3])  # a whole header whose batch the file does not hold yet
    end = os.path.getsize(seg.log_path)
    reader = _reader(tmp_path)
    assert reader.check(end, partial_tail_ok=True) == []
    problems = reader.check(end)
    assert len(problems) == 1 and "after the last valid batch" in problems[0]
    assert reader.damage_is_at_tail()


def test_segment_recover_cuts_a_torn_tail_and_keeps_every_whole_batch(tmp_path):
    seg = _writer(tmp_path)
    for _ in range(5):
        _append(seg, 2)
    whole = seg.size
    seg.close()
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 4096)  # blocks a power loss left unwritten
    seg = Segment.open(str(tmp_path), 100, INDEX_BYTES, INTERVAL)
    assert seg.damage_is_at_tail()
    assert seg.recover() == 4096
    assert os.path.getsize(seg.log_path) == whole
    assert seg.next_offset == 110 and seg.writable
    _append(seg, 1)
    assert _offsets(seg.read(100, 100, 1 << 20)[0]) == list(range(100, 111))
    assert seg.check() == []


def test_segment_with_a_flipped_byte_in_the_middle_is_damage_not_a_torn_tail(tmp_path):
    seg = _writer(tmp_path)
    positions = [_append(seg, 2)[0] for _ in range(5)]
    seg.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(positions[2] + HEADER_SIZE + 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    seg = Segment.open(str(tmp_path), 100, INDEX_BYTES, INTERVAL)
    assert not seg.damage_is_at_tail()
    damage = seg.first_damage()
    assert isinstance(damage, CorruptRecordError)
    with pytest.raises(CorruptRecordError):
        seg.read(104, 100, 1 << 20)
    assert any("checksum" in p for p in seg.check())
    # What precedes the damage still reads.
    assert _offsets(seg.read(100, 4, 1 << 20)[0]) == [100, 101, 102, 103]


def test_segment_first_damage_is_none_for_an_intact_log(tmp_path):
    seg = _writer(tmp_path)
    for _ in range(5):
        _append(seg, 2)
    assert seg.first_damage() is None


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_segment_with_a_missing_index_rebuilds_it_from_the_log(tmp_path, suffix):
    seg = _writer(tmp_path)
    for i in range(30):
        _append(seg, 2, ts=1000 + i)
    seg.seal()
    seg.close()
    os.unlink(os.path.join(str(tmp_path), "%020d%s" % (100, suffix)))
    reader = _reader(tmp_path)
    assert _offsets(reader.read(150, 3, 1 << 20)[0]) == [150, 151, 152]
    assert reader.offset_for_timestamp(1020) == 140
    assert reader.max_timestamp == 1029


def test_segment_with_a_garbage_index_rebuilds_it_from_the_log(tmp_path):
    seg = _writer(tmp_path)
    for _ in range(30):
        _append(seg, 2)
    seg.seal()
    seg.close()
    with open(seg.index_path, "r+b") as f:
        f.write(os.urandom(os.path.getsize(seg.index_path)))
    reader = _reader(tmp_path)
    assert _offsets(reader.read(150, 3, 1 << 20)[0]) == [150, 151, 152]
    # The writer reopening it writes the rebuilt index back.
    writer = Segment.open(str(tmp_path), 100, INDEX_BYTES, INTERVAL)
    writer.open_for_append()
    _append(writer, 1)
    assert writer.check() == []


def test_segment_refresh_takes_in_what_the_writer_appended(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 2)
    reader = _reader(tmp_path)
    assert not reader.refresh()
    _append(seg, 3)
    assert reader.refresh()
    assert reader.next_offset == 105
    assert _offsets(reader.read(102, 10, 1 << 20)[0]) == [102, 103, 104]
    assert not reader.writable and not reader.refresh()


def test_segment_reader_starts_over_when_the_log_is_cut_and_rewritten_under_it(tmp_path):
    seg = _writer(tmp_path)
    for _ in range(3):
        _append(seg, 2)
    reader = _reader(tmp_path)
    assert reader.read(104, 10, 1 << 20)[0]  # the reader records where its last batches start
    _cut_as_recovery_does(seg, 102)  # a new writer's recovery cut the log under the reader ...
    assert not reader.refresh()
    assert reader.next_offset == 102
    for _ in range(3):
        _append(seg, 2, value=b"w")  # ... and wrote offsets 102.. again, with other bytes
    assert reader.refresh()
    slices = reader.read(102, 100, 1 << 20)[0]
    assert _offsets(slices) == list(range(102, 108))
    assert _values(slices) == [b"w%d" % o for o in range(102, 108)]


def test_segment_successor_exists_once_the_next_segment_is_created(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 3)
    assert not seg.successor_exists()
    nxt = Segment.create(str(tmp_path), seg.next_offset, INDEX_BYTES, INTERVAL)
    assert seg.successor_exists()
    nxt.close()


def test_segment_opened_under_an_older_swap_generation_raises_segment_replaced(tmp_path):
    cp = str(tmp_path / "checkpoint")
    write_checkpoint(cp, Checkpoint(swap_generation=1))
    seg = _writer(tmp_path)
    _append(seg, 2)
    seg.seal()
    seg.close()
    stale = Segment.open(str(tmp_path), 100, INDEX_BYTES, INTERVAL, generation=(cp, 1))
    write_checkpoint(cp, Checkpoint(swap_generation=2))  # compaction is about to rename over the name
    with pytest.raises(SegmentReplacedError):
        stale.read(100, 10, 1 << 20)
    assert issubclass(SegmentReplacedError, FileNotFoundError)
    fresh = Segment.open(str(tmp_path), 100, INDEX_BYTES, INTERVAL, generation=(cp, 2))
    fresh.load(tolerate_tail=True)
    assert _offsets(fresh.read(100, 10, 1 << 20)[0]) == [100, 101]


def test_segment_same_file_is_false_once_another_file_is_renamed_over_it(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 2)
    reader = _reader(tmp_path)
    assert reader.same_file()
    other = tmp_path / "other"
    other.mkdir()
    replacement = _writer(other)
    _append(replacement, 2)
    replacement.close()
    os.replace(replacement.log_path, seg.log_path)
    assert not reader.same_file()
    os.unlink(seg.log_path)
    assert not reader.same_file()


def test_segment_unlinked_under_a_reader_stays_readable_through_it(tmp_path):
    seg = _writer(tmp_path)
    for _ in range(3):
        _append(seg, 2)
    seg.seal()
    reader = _reader(tmp_path)
    reader.read(100, 1, 1 << 20)  # opened: descriptors and mappings held
    seg.unlink()
    assert not os.path.exists(seg.log_path) and not os.path.exists(seg.index_path)
    assert _offsets(reader.read(100, 100, 1 << 20)[0]) == list(range(100, 106))
    reader.close()


def test_segment_delete_removes_all_three_files(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 2)
    seg.delete()
    assert os.listdir(tmp_path) == []


def test_segment_sync_files_is_false_once_the_files_are_gone(tmp_path):
    seg = _writer(tmp_path)
    _append(seg, 2)
    seg.seal(durable=False)
    assert seg.sync_files()
    seg.delete()
    assert not seg.sync_files()
