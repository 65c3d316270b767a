"""Damage in the middle of a log: appends after a clean close, and reads that run into it.

Run: ``python -m pytest tests/test_damage.py -q -p no:cacheprovider``

Two promises are held here (docs/GUARANTEES.md "Damage in a cleanly closed store", docs/OPERATIONS.md
"A corrupt segment"):

- After a clean close, whole batches that follow damage in the active segment are never cut on the
  writer's own judgement: appends to the partition raise :class:`pylog.CorruptRecordError` ("damaged in
  the middle after a clean close", naming ``pylog repair``) until ``pylog repair`` cuts the log on purpose,
  wherever in the segment the damage is (not only after its last index entry). A torn tail after an
  unclean stop is still recovered by the next writer on its own.
- A read whose range runs into a batch that does not check returns the records before it (like a read at a
  torn tail) and the next read, which starts at the bad batch, raises, naming the file and byte.

Damage is done by hand to the files of a closed store (or of a crash image), as bit rot would.
"""

from __future__ import annotations

import os

import pytest

import pylog
from pylog.storage.records import HEADER_SIZE, parse_header

from childproc import Child
from storetools import crash_copy

TOPIC = "t"
#: Records per append (one batch each) and appends: about 230 KB in one active segment, so the default
#: index.interval.bytes (4096) puts dozens of index entries after a batch damaged near the start.
PER_BATCH, BATCHES = 10, 200
#: The batch that gets damaged: far before the active segment's last index entry.
VICTIM = 50

# Where in the batch a byte is flipped: header fields (see pylog/storage/records.py) and the body.
_FLIPS = {"body": HEADER_SIZE + 100, "crc": 14, "base_offset": 3, "batch_length": 8, "magic": 12,
          "record_count": 53}


def _value(offset: int) -> bytes:
    return b"value-%06d-" % offset + b"x" * 100


def _log(path, base: int = 0) -> str:
    return os.path.join(str(path), TOPIC, "0", "%020d.log" % base)


def _batch_starts(log_path: str) -> list[tuple[int, int]]:
    """``(position, base offset)`` of each batch, walked through the length fields of an intact file."""
    with open(log_path, "rb") as f:
        raw = f.read()
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(raw):
        h = parse_header(raw, pos)
        out.append((pos, h.base_offset))
        pos += h.size
    return out


def _fill(p, start: int, batches: int = BATCHES) -> None:
    for b in range(batches):
        first = start + b * PER_BATCH
        assert p.append_values([_value(o) for o in range(first, first + PER_BATCH)]) == first


def _flip(log_path: str, at: int) -> None:
    with open(log_path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x41]))


def _clean_store_damaged_in_the_middle(path, where: str = "body") -> tuple[str, int, int]:
    """A cleanly closed store whose one (active) segment has batch ``VICTIM`` damaged at ``where``.

    Returns (log path, byte position of the bad batch, its base offset)."""
    with pylog.open(str(path), log_cleaner_enable=False) as store:
        _fill(store.create_topic(TOPIC).partition(0), 0)
        assert len(store.topic(TOPIC).partition(0).segments) == 1
    log = _log(path)
    pos, base = _batch_starts(log)[VICTIM]
    _flip(log, pos + _FLIPS[where])
    return log, pos, base


def _offsets(recs) -> list[int]:
    return [r.offset for r in recs]


# ------------------------------------------------------------------- appends after a clean close


@pytest.mark.parametrize("where", list(_FLIPS))
def test_clean_store_damaged_before_the_last_index_entry_refuses_appends(tmp_path, where):
    """The independent run's finding: a flipped byte far inside the active segment of a cleanly closed
    store let appends go on after it, although reads raise and verify reports it."""
    log, pos, base = _clean_store_damaged_in_the_middle(tmp_path, where)
    with open(log, "rb") as f:
        before = f.read()
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.check() != []  # what `pylog verify` reports (exit 1)
        for attempt in range(2):  # refused every time, not only on the first try
            with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle after a clean close") as info:
                p.append_values([b"new"])
            assert "pylog repair" in str(info.value)
            assert info.value.path == log and info.value.position == pos
            assert not p.is_writer
        # Reads still serve every record before the damage.
        assert _offsets(p.read(0, max_records=base)) == list(range(base))
    with open(log, "rb") as f:
        assert f.read() == before  # nothing cut, nothing appended


def test_repair_of_a_clean_store_damaged_in_the_middle_makes_appends_work_again(tmp_path):
    log, pos, base = _clean_store_damaged_in_the_middle(tmp_path)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        stats = p.repair()
        assert stats["segments_validated"] == 1 and stats["bytes_dropped"] > 0
        assert p.log_end_offset == base
        assert p.append_values([b"new"]) == base  # the dropped offsets go to the next appends
        assert p.check() == []
    assert os.path.getsize(log) > pos
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:  # and after a clean reopen
        p = store.topic(TOPIC).partition(0)
        assert p.append_values([b"newer"]) == base + 1
        recs = p.read(0, max_records=10 ** 6)
        assert _offsets(recs) == list(range(base + 2))
        assert [r.value for r in recs[-2:]] == [b"new", b"newer"]


def test_torn_tail_after_an_unclean_stop_is_still_recovered_with_a_long_active_segment(tmp_path):
    """Not a regression of the fix: the writer's own recovery of an interrupted write stays automatic."""
    live = tmp_path / "live"
    store = pylog.open(str(live), log_cleaner_enable=False)
    p = store.create_topic(TOPIC).partition(0)
    _fill(p, 0)
    p.flush()
    crashed = tmp_path / "crashed"
    crash_copy(live, crashed)
    store.close()
    log = _log(crashed)
    with open(log, "r+b") as f:
        f.truncate(os.path.getsize(log) - 7)  # the last batch cut short, as a write a crash tore
    with pylog.open(str(crashed), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        last = (BATCHES - 1) * PER_BATCH
        assert p.append_values([b"after"]) == last
        assert p.last_recovery is not None and p.last_recovery["bytes_dropped"] > 0
        assert _offsets(p.read(0, max_records=10 ** 6)) == list(range(last + 1))
        assert p.check() == []


def test_clean_store_with_a_bad_last_batch_still_recovers_with_a_long_active_segment(tmp_path):
    """A bad last batch (a writer taking turns that died mid-append leaves the checkpoint clean) is cut."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        _fill(store.create_topic(TOPIC).partition(0), 0)
    log = _log(tmp_path)
    _flip(log, os.path.getsize(log) - 3)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        last = (BATCHES - 1) * PER_BATCH
        assert p.append_values([b"after"]) == last
        assert p.check() == []


def test_damage_behind_a_handover_is_found_by_the_next_handle_that_writes(tmp_path):
    """Writers taking turns leave a clean checkpoint and live (unsealed) indexes: the next handle to
    write checks the whole active segment, not only the batches after the last index entry."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as a:
        pa = a.create_topic(TOPIC).partition(0)
        _fill(pa, 0)
        pa.release_writer()
        log = _log(tmp_path)
        pos, base = _batch_starts(log)[VICTIM]
        _flip(log, pos + _FLIPS["body"])
        with pylog.open(str(tmp_path), log_cleaner_enable=False) as b:
            pb = b.topic(TOPIC).partition(0)
            with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle after a clean close"):
                pb.append_values([b"new"])
            assert not pb.is_writer


def test_a_handle_taking_turns_checks_what_others_appended_since_its_last_turn(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as a, \
            pylog.open(str(tmp_path), log_cleaner_enable=False) as b:
        pa = a.create_topic(TOPIC).partition(0)
        pa.append_values([b"a0"])
        pa.release_writer()
        pb = b.topic(TOPIC).partition(0)
        _fill(pb, 1)
        pb.release_writer()
        log = _log(tmp_path)
        pos, base = _batch_starts(log)[VICTIM]  # written by b, after a's last turn
        _flip(log, pos + _FLIPS["body"])
        with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle after a clean close"):
            pa.append_values([b"a1"])


# --------------------------------------------------------------------- reads that run into damage


# (read, damage): without verify a body's checksum is not looked at, so only header damage is seen there.
_READS = [(how, where) for how in ("read", "read_columns", "read_unverified")
          for where in ("body", "magic", "batch_length") if (how, where) != ("read_unverified", "body")]


@pytest.mark.parametrize("how,where", _READS, ids=["-".join(r) for r in _READS])
def test_a_large_read_into_damage_returns_the_records_before_it_then_raises(tmp_path, how, where):
    log, pos, base = _clean_store_damaged_in_the_middle(tmp_path, where)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)

        def read(offset):
            if how == "read_columns":
                return p.read_columns(offset, max_records=10 ** 6).offsets.tolist()
            return _offsets(p.read(offset, max_records=10 ** 6, verify=how == "read"))

        for start in (0, 3, base - PER_BATCH, base - 1):
            assert read(start) == list(range(start, base))
        for start in (base, base + 1):
            with pytest.raises(pylog.CorruptRecordError) as info:
                read(start)
            assert (info.value.path, info.value.position) == (log, pos)


def test_a_read_spanning_a_damaged_sealed_segment_start_returns_the_earlier_segments(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False, segment_bytes=64 * 1024) as store:
        p = store.create_topic(TOPIC).partition(0)
        _fill(p, 0)
        second = p.segments[1].base_offset
        assert len(p.segments) >= 3
    log = _log(tmp_path, second)
    _flip(log, _FLIPS["body"])  # the first batch of the second segment
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        assert _offsets(p.read(0, max_records=10 ** 6)) == list(range(second))
        assert p.read_columns(5, max_records=10 ** 6).offsets.tolist() == list(range(5, second))
        with pytest.raises(pylog.CorruptRecordError) as info:
            p.read(second, max_records=10 ** 6)
        assert (info.value.path, info.value.position) == (log, 0)


def test_a_read_spanning_damage_in_a_not_yet_recovered_crash_image(tmp_path):
    """A crash image read before any writer recovers it: its active segment's indexes point past a batch
    that does not check, so the reader's view spans it."""
    live = tmp_path / "live"
    store = pylog.open(str(live), log_cleaner_enable=False)
    p = store.create_topic(TOPIC).partition(0)
    _fill(p, 0)
    crashed = tmp_path / "crashed"
    crash_copy(live, crashed)
    store.close()
    log = _log(crashed)
    pos, base = _batch_starts(log)[VICTIM]
    _flip(log, pos + _FLIPS["body"])
    with pylog.open(str(crashed), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        assert _offsets(p.read(0, max_records=10 ** 6)) == list(range(base))
        with pytest.raises(pylog.CorruptRecordError):
            p.read(base)


def test_a_consumer_poll_into_damage_gets_the_records_before_it_then_raises(tmp_path):
    log, pos, base = _clean_store_damaged_in_the_middle(tmp_path)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        consumer = store.consumer(TOPIC, auto_offset_reset="earliest", max_poll_records=10 ** 6)
        got = [r.offset for recs in consumer.poll().values() for r in recs]
        assert got == list(range(base))
        with pytest.raises(pylog.CorruptRecordError) as info:
            consumer.poll()
        assert (info.value.path, info.value.position) == (log, pos)
        consumer.close()


_READER = """
import sys, pylog
store = pylog.open(sys.argv[1], log_cleaner_enable=False)
p = store.topic("t").partition(0)
print("read", " ".join(str(r.offset) for r in p.read(0, max_records=10 ** 6)[-1:]), flush=True)
cols = p.read_columns(0, max_records=10 ** 6)
print("columns", len(cols), flush=True)
try:
    p.read(len(cols), max_records=10 ** 6)
    print("next ok", flush=True)
except pylog.CorruptRecordError as exc:
    print("next raised", exc.position, flush=True)
sys.stdin.readline()
store.close()
"""


def test_a_reader_in_another_process_gets_the_records_before_damage_while_a_writer_holds_the_lock(tmp_path):
    """A writer in this process holds the partition; damage falls behind its index (bit rot under a
    running writer); a reader process's large read returns the records before it, then raises."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.create_topic(TOPIC).partition(0)
        _fill(p, 0)
        p.flush()
        log = _log(tmp_path)
        pos, base = _batch_starts(log)[VICTIM]
        _flip(log, pos + _FLIPS["body"])
        child = Child(_READER, str(tmp_path), cwd=str(tmp_path))
        try:
            assert child.expect("read", 60) == str(base - 1)
            assert child.expect("columns", 60) == str(base)
            assert child.expect("next", 60) == f"raised {pos}"
            child.send("done")
            assert child.wait(60) == 0
        finally:
            child.kill()
