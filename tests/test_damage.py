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

import contextlib
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgpack
import pytest

import pylog
from pylog.__main__ import ExitCode
from pylog.__main__ import main as pylog_main
from pylog.maintenance.cleaner import Cleaner
from pylog.storage.records import HEADER_SIZE, parse_header, stamp_base_offset
from pylog.partition import internals

from childproc import Child
from storetools import crash_copy, flip_byte, log_batches

TOPIC = "t"
ROOT = Path(__file__).resolve().parent.parent
#: Records per append (one batch each) and appends: about 230 KB in one active segment, so the default
#: index.interval.bytes (4096) puts dozens of index entries after a batch damaged near the start.
PER_BATCH, BATCHES = 10, 200
#: The batch that gets damaged: far before the active segment's last index entry.
VICTIM = 50

# Where in the batch a byte is flipped: header fields (see pylog/storage/records/format.py) and the body.
_FLIPS = {"body": HEADER_SIZE + 100, "crc": 14, "base_offset": 3, "batch_length": 8, "magic": 12,
          "record_count": 53}


def _value(offset: int) -> bytes:
    return b"value-%06d-" % offset + b"x" * 100


def _log(path, base: int = 0) -> str:
    return os.path.join(str(path), TOPIC, "0", "%020d.log" % base)


def _batch_starts(log_path: str) -> list[tuple[int, int]]:
    """``(position, base offset)`` of each batch of an intact file."""
    return [(pos, h.base_offset) for pos, h in log_batches(log_path)]


def _fill(p, start: int, batches: int = BATCHES) -> None:
    for b in range(batches):
        first = start + b * PER_BATCH
        assert p.append_values([_value(o) for o in range(first, first + PER_BATCH)]) == first


def _flip(log_path: str, at: int) -> None:
    flip_byte(log_path, at, 0x41)


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


@pytest.mark.parametrize("past", [10, HEADER_SIZE - 1, HEADER_SIZE + 5])
def test_a_handle_whose_checked_end_was_repaired_away_and_regrown_just_past_it_appends(tmp_path, past):
    """Handle A remembers checking its active segment up to byte P. Handle B repairs the segment below P
    and appends one batch that ends ``past`` bytes after P: what is at P is not A's next batch (a short
    header, or the middle of B's batch). A must walk the segment again from byte 0 and append, not fail
    with a foreign error (a short header read raised struct.error) on this and every later append."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as a, \
            pylog.open(str(tmp_path), log_cleaner_enable=False) as b:
        pa = a.create_topic(TOPIC).partition(0)
        for o in range(4):
            assert pa.append_values([b"x" * 100]) == o
        pa.release_writer()
        log = _log(tmp_path)
        starts = _batch_starts(log)
        checked_end = os.path.getsize(log)
        _flip(log, starts[1][0] + _FLIPS["body"] - 40)  # a value byte of batch 1
        pb = b.topic(TOPIC).partition(0)
        pb.repair()
        cut = os.path.getsize(log)
        assert cut == starts[1][0]
        overhead = starts[1][0] - 100  # one batch of one 100-byte value
        assert pb.append_values([b"y" * (checked_end + past - cut - overhead)]) == 1
        pb.release_writer()
        assert os.path.getsize(log) == checked_end + past
        assert pa.append_values([b"z"]) == 2
        assert pa.append_values([b"z2"]) == 3
        assert [r.value for r in pa.read(0, 10)][1:] == [b"y" * (checked_end + past - cut - overhead), b"z", b"z2"]


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


# ------------------------------------------------- maintenance and deletion of a damaged partition


def _two_topics_one_damaged(path) -> None:
    """Topics ``a`` and ``b``, three segments each, retention.bytes keeping about one; cleanly closed, and
    then ``a``'s active segment damaged in the middle (whole batches follow the bad one)."""
    cfg = {"segment.bytes": 60000, "retention.bytes": 60000}
    with pylog.open(str(path), log_cleaner_enable=False) as store:
        for name in ("a", "b"):
            p = store.create_topic(name, 1, config=cfg).partition(0)
            for _ in range(1000):
                p.append_values([b"x" * 100])
            assert len(p.segments) == 3
    adir = os.path.join(str(path), "a", "0")
    active = os.path.join(adir, sorted(f for f in os.listdir(adir) if f.endswith(".log"))[-1])
    _flip(active, _batch_starts(active)[5][0] + _FLIPS["body"])


def _segment_count(path, topic: str) -> int:
    return len([f for f in os.listdir(os.path.join(str(path), topic, "0")) if f.endswith(".log")])


def test_deleting_a_topic_damaged_in_the_middle_after_a_clean_close_needs_no_repair(tmp_path):
    """delete_topic takes the writer lock only: it does not open the partition for appending, whose check
    of a damaged active segment refuses (and used to refuse the deletion too, until a repair)."""
    _clean_store_damaged_in_the_middle(tmp_path)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle"):
            store.topic(TOPIC).partition(0).append_values([b"x"])
        store.delete_topic(TOPIC)
        assert TOPIC not in store.topics()
        assert not os.path.exists(os.path.join(str(tmp_path), TOPIC))
        store.create_topic(TOPIC).partition(0).append_values([b"fresh"])  # and the name is free again
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        assert [r.value for r in store.topic(TOPIC).partition(0).read(0, 10)] == [b"fresh"]


def test_a_topic_deletion_that_fails_leaves_a_damaged_partition_locked_by_nobody(tmp_path, monkeypatch):
    _clean_store_damaged_in_the_middle(tmp_path)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        real = os.rename

        def refuse(src, dst, *a, **kw):
            raise PermissionError(13, "Permission denied", src)
        monkeypatch.setattr(os, "rename", refuse)
        with pytest.raises(pylog.PylogError):
            store.delete_topic(TOPIC)
        monkeypatch.setattr(os, "rename", real)
        assert not p.is_writer
        with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle"):
            p.append_values([b"x"])  # the check is back, not an append into a half-opened partition
        with pylog.open(str(tmp_path), log_cleaner_enable=False) as other:
            other.topic(TOPIC).partition(0).repair()  # the lock is free


def test_store_wide_retention_reports_a_damaged_partition_and_maintains_the_others(tmp_path, caplog):
    _two_topics_one_damaged(tmp_path)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        with caplog.at_level("WARNING"):
            results = {r.topic: r for r in store.enforce_retention()}
        assert results["a"].reasons == ["damaged"] and not results["a"].deleted_segments
        assert results["b"].reasons == ["size"] and results["b"].deleted_segments
        assert any("a-0" in m and "pylog repair" in m for m in caplog.messages)
        assert _segment_count(tmp_path, "a") == 3 and _segment_count(tmp_path, "b") == 2
        store.topic("a").partition(0).repair()
        [r] = store.enforce_retention("a")
        assert r.reasons == ["size"] and r.deleted_segments


def test_pylog_retention_skips_a_damaged_partition_with_the_repair_command_and_exits_1(tmp_path):
    import io
    from pylog.__main__ import ExitCode, main
    _two_topics_one_damaged(tmp_path)
    out = io.StringIO()
    assert main(["retention", str(tmp_path)], out) == ExitCode.PROBLEMS
    lines = out.getvalue().splitlines()
    assert "a-0: damaged, skipped (`pylog verify` shows the damage, `pylog repair STORE a 0` cuts the log there)" \
        in lines
    assert any(line.startswith("b-0: deleted 1 segment(s)") for line in lines)


def test_the_cleaner_skips_a_damaged_partition_written_in_turns_until_it_is_repaired(tmp_path, caplog):
    """A partition written in turns (Spark's writer) is maintained by whichever handle can take the lock.
    Damaged, it refuses that: the cleaner warns, maintains the others, and takes it up again once it is
    repaired, rather than marking it uncleanable (a cleaner error) for the rest of the process."""
    _two_topics_one_damaged(tmp_path)
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        parts = [store.topic(n).partition(0) for n in ("a", "b")]
        for p in parts:
            internals(p).transient = True
        cleaner = Cleaner(store.path, lambda: iter(parts), store.settings)  # its passes run here, not in a thread
        with caplog.at_level("WARNING"):
            cleaner.run_retention()
            cleaner.run_retention()
        assert cleaner.status().uncleanable == {}
        assert len([m for m in caplog.messages if "a-0" in m and "pylog repair" in m]) == 1
        assert _segment_count(tmp_path, "a") == 3 and _segment_count(tmp_path, "b") == 2
        parts[0].repair()
        parts[0].release_writer()
        cleaner.run_retention()
        assert _segment_count(tmp_path, "a") == 2
        assert cleaner.status().uncleanable == {}


# ------------------------------------------------------------------- a log cut under its writer


def _verify(path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = pylog_main(["verify", str(path)])
    return code, out.getvalue()


def test_a_log_cut_under_a_live_writer_fails_the_next_append_instead_of_renumbering(tmp_path):
    """The independent run's finding: a hand-truncated active segment under a live writer made offsets vanish
    silently (the next append landed at the cut with the next offset number, and verify saw nothing)."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p = store.create_topic(TOPIC).partition(0)
        _fill(p, 0)
        end = p.log_end_offset
        log = _log(tmp_path)
        pos, base = _batch_starts(log)[BATCHES // 2]
        os.truncate(log, pos + 10)  # really cut, under the open partition
        for attempt in range(2):  # the partition refuses work from then on, not only once
            with pytest.raises(pylog.LogFailedError, match="cut under the writer"):
                p.append_values([b"new"])
        assert p.log_end_offset == end  # no offset renumbered or given again
        with pytest.raises(pylog.CorruptRecordError):
            p.read(base + 1)  # the cut records raise, they are not skipped
        assert _offsets(p.read(0, max_records=base)) == list(range(base))  # what is left reads back
        code, text = _verify(tmp_path)  # the writer is live (this process): a cut, not a crash
        assert code == ExitCode.PROBLEMS and "the file was cut below what was written" in text
        assert any("cut under the writer" in problem for problem in p.check())
    assert os.path.getsize(log) == pos + 10  # nothing was appended at the cut


def test_pylog_verify_reports_a_cleanly_closed_log_cut_below_its_recovery_point(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        _fill(store.create_topic(TOPIC).partition(0), 0, batches=3)  # no index entry: only the checkpoint knows
    assert _verify(tmp_path)[0] == ExitCode.OK
    log = _log(tmp_path)
    pos, base = _batch_starts(log)[2]
    os.truncate(log, pos)  # a whole batch gone: the log still ends on a batch boundary
    code, text = _verify(tmp_path)
    assert code == ExitCode.PROBLEMS
    assert f"recovery point {3 * PER_BATCH} is past the log's end {base} after a clean close" in text


def test_a_writer_read_of_its_cut_log_raises_instead_of_touching_the_mapping_past_the_file(tmp_path):
    # The writer reads its active segment through a mapping; its pages past the end of a cut file would
    # read as zeros or kill the process with SIGBUS: run in a child, so a regression cannot kill the tests.
    script = textwrap.dedent(f"""
        import os, sys
        import pylog
        with pylog.open({str(tmp_path)!r}, log_cleaner_enable=False) as store:
            p = store.create_topic("t").partition(0)
            for i in range(400):
                p.append_values([b"%06d" % i + b"x" * 500] * 4)
            assert len(p.read(0, max_records=10 ** 6)) == 1600  # maps the whole active segment
            os.truncate(p.segments[-1].log_path, 4096)
            try:
                p.read(1500)
            except pylog.CorruptRecordError as exc:
                print("raised:", exc)
            try:
                p.append_values([b"y"])
            except pylog.LogFailedError as exc:
                print("refused:", exc)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert "raised:" in done.stdout and "cut under the writer" in done.stdout and "refused:" in done.stdout


def test_pylog_verify_reports_a_batch_whose_headers_do_not_decode(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        store.create_topic(TOPIC).partition(0).append_values([b"a", b"b"], headers=[[("k", b"v")], []])
    log = _log(tmp_path)
    with open(log, "rb") as f:
        raw = bytearray(f.read())
    h = parse_header(raw)
    # The headers section is the body's last bytes: a msgpack map where an array of rows belongs, in a batch
    # whose CRC holds (only the section check can tell): what a reader of a foreign writer's batch may meet.
    blob_start = h.size - len(msgpack.packb([[("k", b"v")], []], use_bin_type=True))
    raw[blob_start] = 0x82  # fixarray(2) -> fixmap(2)
    stamp_base_offset(raw, h.base_offset)  # recomputes the CRC
    with open(log, "wb") as f:
        f.write(raw)
    code, text = _verify(tmp_path)
    assert code == ExitCode.PROBLEMS
    assert f"{log}@0: the records at offsets [0, 1] cannot be read: headers section does not decode" in text
