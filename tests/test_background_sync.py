"""A roll leaves the fsync of the sealed segment to the background sync thread (pylog.storage.syncer): the appending
thread does not wait for the disk, the recovery point moves once the sync is done, and whoever needs the
data durable at once (flush, close, handing the writer lock over) syncs what is still pending itself."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import pylog
from pylog.partition import internals
from pylog.storage import syncer
from pylog.storage.checkpoint import read_checkpoint
from pylog.maintenance.compaction import cleanable_range, read_cleaner_checkpoint
from pylog.errors import LogFailedError
from pylog.storage.filenames import CHECKPOINT_FILE
from pylog.segment import Segment

from storetools import crash_copy

VALUES = [b"v" * 100] * 100
SMALL = {"segment.bytes": 32 * 1024}  # a roll every ~3 appends of VALUES


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every fsync/fdatasync as (thread name, path of the file or directory)."""
    seen: list[tuple[str, str]] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def record(real):  # noqa: ANN001, ANN202
        def call(fd: int) -> None:
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = "?"
            seen.append((threading.current_thread().name, path))
            real(fd)
        return call

    monkeypatch.setattr(os, "fsync", record(real_fsync))
    monkeypatch.setattr(os, "fdatasync", record(real_fdatasync))
    return seen


class _Held:
    """Holds the sync thread on a job of its own, so the jobs of the rolls queue up behind it."""

    def __enter__(self) -> "_Held":
        self.started = threading.Event()
        self.go = threading.Event()

        def hold() -> None:
            self.started.set()
            self.go.wait(30)

        syncer.submit(hold)
        assert self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.go.set()
        assert syncer.wait_idle(30)


def _roll_a_few(p: pylog.Partition) -> None:
    for _ in range(10):  # three rolls or so at SMALL's segment size
        p.append_values(VALUES)


def _logs(seen: list[tuple[str, str]], thread: str) -> set[str]:
    return {os.path.basename(p) for t, p in seen if t == thread and p.endswith(".log")}


def _sealed_logs(p: pylog.Partition) -> set[str]:
    return {os.path.basename(s.log_path) for s in p.segments[:-1]}


def test_roll_syncs_in_background_and_moves_recovery_point(tmp_path, fsyncs) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        _roll_a_few(p)
        assert syncer.wait_idle(30)
        sealed = _sealed_logs(p)
        assert len(sealed) >= 3
        assert not _logs(fsyncs, threading.current_thread().name)  # the appending thread never waited
        assert _logs(fsyncs, "pylog-syncer") == sealed
        synced = {os.path.basename(path) for t, path in fsyncs if t == "pylog-syncer"}
        for name in sealed:  # the indexes the roll sealed too, and the directory holding their new names
            stem = name[:-len(".log")]
            assert {stem + ".index", stem + ".timeindex"} <= synced
        assert os.path.basename(p.directory) in synced
        cp = read_checkpoint(os.path.join(p.directory, CHECKPOINT_FILE))
        assert cp is not None and not cp.clean
        assert cp.recovery_point == p.segments[-1].base_offset


def test_recovery_point_waits_for_the_sync(tmp_path) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        p.append_values(VALUES)
        with _Held():
            _roll_a_few(p)
            cp = read_checkpoint(os.path.join(p.directory, CHECKPOINT_FILE))
            assert cp is not None and cp.recovery_point == 0  # nothing rolled is durable yet
        cp = read_checkpoint(os.path.join(p.directory, CHECKPOINT_FILE))
        assert cp is not None and cp.recovery_point == p.segments[-1].base_offset


def test_flush_syncs_pending_rolls_itself(tmp_path, fsyncs) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        with _Held():
            _roll_a_few(p)
            p.flush()
            me = threading.current_thread().name
            assert _logs(fsyncs, me) == _sealed_logs(p) | {os.path.basename(p.segments[-1].log_path)}
            cp = read_checkpoint(os.path.join(p.directory, CHECKPOINT_FILE))
            assert cp is not None and cp.recovery_point == p.segments[-1].base_offset
            done = len(fsyncs)
        # The queued jobs find nothing left: no second round of fsyncs of the sealed logs.
        assert not _logs(fsyncs[done:], "pylog-syncer")


def test_close_syncs_pending_rolls_and_marks_clean(tmp_path, fsyncs) -> None:
    store = pylog.open(tmp_path / "s")
    p = store.create_topic("t", 1, config=SMALL).partition(0)
    with _Held():
        _roll_a_few(p)
        sealed = _sealed_logs(p)
        end = p.log_end_offset
        store.close()
        assert sealed <= _logs(fsyncs, threading.current_thread().name)
        cp = read_checkpoint(os.path.join(str(tmp_path / "s"), "t", "0", CHECKPOINT_FILE))
        assert cp is not None and cp.clean and cp.recovery_point == end


def test_handover_syncs_pending_rolls(tmp_path, fsyncs) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        with _Held():
            _roll_a_few(p)
            sealed = _sealed_logs(p)
            p.release_writer()  # a clean checkpoint names offsets past the rolled segments: they must be durable
            assert sealed <= _logs(fsyncs, threading.current_thread().name)


def test_failed_background_fsync_fails_the_partition(tmp_path, monkeypatch) -> None:
    def broken(self: Segment) -> bool:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(Segment, "sync_files", broken)
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        for _ in range(4):
            p.append_values(VALUES)
        assert syncer.wait_idle(30)
        with pytest.raises(LogFailedError, match="fsync of a rolled segment failed"):
            p.append_values(VALUES)
    monkeypatch.undo()
    with pylog.open(tmp_path / "s") as store:  # reopening recovers from the old recovery point
        p = store.topic("t").partition(0)
        assert p.log_end_offset == 4 * len(VALUES)
        p.append_values(VALUES)  # the first write opens as writer, which recovers
        assert p.last_recovery is not None and p.last_recovery["segments_validated"] >= 2


def test_deleted_partition_under_a_pending_sync(tmp_path, caplog) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        with _Held():
            _roll_a_few(p)
            store.delete_topic("t")
        store.create_topic("t", 1).partition(0).append_values(VALUES)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_flush_after_a_failed_background_fsync_raises(tmp_path, monkeypatch) -> None:
    """Linux reports a failed writeback to one fsync only: a later flush must not call the data durable."""
    real = Segment.sync_files
    calls = []

    def fails_once(self: Segment) -> bool:
        calls.append(self.log_path)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return real(self)

    monkeypatch.setattr(Segment, "sync_files", fails_once)
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        while len(p.segments) < 2:
            p.append_values(VALUES)
        assert syncer.wait_idle(30)
        with pytest.raises(LogFailedError):
            p.flush()
        with pytest.raises(LogFailedError):
            store.flush()
        cp = read_checkpoint(os.path.join(p.directory, CHECKPOINT_FILE))
        assert cp is not None and cp.recovery_point == 0 and not cp.clean


def test_failed_inline_sync_fails_the_partition(tmp_path, monkeypatch) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        with _Held():
            _roll_a_few(p)

            def broken(self: Segment) -> bool:
                raise OSError(5, "Input/output error")

            monkeypatch.setattr(Segment, "sync_files", broken)
            with pytest.raises(OSError):
                p.flush()
            monkeypatch.undo()
            with pytest.raises(LogFailedError):
                p.append_values(VALUES)
            with pytest.raises(LogFailedError):
                p.flush()  # a second fsync through a new descriptor would "succeed": it must not be asked


def test_compaction_syncs_pending_rolls_before_choosing_what_is_clean(tmp_path) -> None:
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        p = store.create_topic("c", 1, config={**SMALL, "cleanup.policy": "compact",
                                               "min.cleanable.dirty.ratio": 0.01}).partition(0)
        with _Held():
            for i in range(12):
                p.append_values(VALUES, keys=[b"k%d" % (j % 7) for j in range(len(VALUES))])
            assert internals(p).durability.unsynced
            results = store.compact("c")
            assert results and results[0].passes >= 1
            assert not internals(p).durability.unsynced
            cp = read_checkpoint(os.path.join(p.directory, CHECKPOINT_FILE))
            assert cp is not None and cp.recovery_point == p.segments[-1].base_offset
            assert read_cleaner_checkpoint(p.directory).first_dirty <= cp.recovery_point


def test_a_sync_thread_that_failed_to_start_is_started_again(monkeypatch) -> None:
    s = syncer.Syncer()
    real = threading.Thread.start
    tries = []

    def start(self: threading.Thread) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("can't create new thread at interpreter shutdown")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    ran = threading.Event()
    with pytest.raises(RuntimeError):
        s.submit(ran.set)
    s.submit(ran.set)
    assert s.wait_idle(10) and ran.is_set()


def test_fork_child_gets_a_sync_thread_of_its_own(tmp_path) -> None:
    with _Held():  # the parent's thread is busy (and its lock may be held) at the fork
        pid = os.fork()
        if pid == 0:  # the child: exits without running the parent's atexit or pytest
            ok = False
            try:
                ran = threading.Event()
                syncer.submit(ran.set)
                ok = syncer.wait_idle(10) and ran.is_set()
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


_KILLED_WRITER = """
import sys, threading, pylog
from pylog.storage import syncer
hold = threading.Event()
syncer.submit(lambda: hold.wait())  # the rolls' syncs never run: the process is killed first
store = pylog.open(sys.argv[1])
p = store.create_topic("t", 1, config={"segment.bytes": 32 * 1024}).partition(0)
for _ in range(10):
    p.append_values([b"v" * 100] * 100)
print(p.log_end_offset, flush=True)
sys.stdin.read()
"""


def test_killed_before_the_background_sync(tmp_path) -> None:
    path = str(tmp_path / "s")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        end = int(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    with pylog.open(path) as store:
        p = store.topic("t").partition(0)
        assert p.log_end_offset == end  # the page cache kept everything
        segments = len(p.segments)
        p.append_values([b"after"])  # the first write opens as writer, which recovers
        # The recovery point never moved: every segment was re-validated.
        assert p.last_recovery is not None and p.last_recovery["segments_validated"] == segments
        assert [r.offset for r in p.read(0, max_records=end + 1)] == list(range(end + 1))


def test_roll_after_a_clean_handover_marks_the_checkpoint_dirty_at_once(tmp_path) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        p.append_values(VALUES)
        p.release_writer()  # a clean checkpoint, which the next turn leaves as it is
        path = os.path.join(p.directory, CHECKPOINT_FILE)
        with _Held():
            p.append_values(VALUES)
            cp = read_checkpoint(path)
            assert cp is not None and cp.clean
            before = len(p.segments)
            while len(p.segments) == before:
                p.append_values(VALUES)
            # The rolled segment is not durable yet: a power cut now must leave a checkpoint that makes the
            # next writer re-validate it, so the roll itself wrote a dirty one.
            cp = read_checkpoint(path)
            assert cp is not None and not cp.clean and cp.recovery_point < p.segments[-1].base_offset


def test_power_cut_before_the_background_sync(tmp_path) -> None:
    """A power cut may take the tail of a segment whose sync had not finished, while the segment after it
    survives. Recovery re-validates from the recovery point (before that segment), cuts it at the damage
    and drops what follows: nothing flushed is there (a flush syncs the rolled segments first), and the
    lost offsets go to the next appends."""
    src = tmp_path / "s"
    with pylog.open(src) as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        p.append_values(VALUES)
        p.flush()
        flushed = p.log_end_offset
        with _Held():
            while len(p.segments) < 3:
                p.append_values(VALUES)
            p.append_values(VALUES)
            crashed = tmp_path / "crashed"
            crash_copy(src, crashed)  # what the disk holds if the power goes now, before the tail is cut
    pdir = os.path.join(crashed, "t", "0")
    cp = read_checkpoint(os.path.join(pdir, CHECKPOINT_FILE))
    logs = sorted(f for f in os.listdir(pdir) if f.endswith(".log"))
    first_rolled = os.path.join(pdir, logs[0])
    assert cp is not None and not cp.clean and cp.recovery_point < int(logs[1][:-4])
    # The first rolled segment loses its last batch's tail, and garbage follows; the later ones survive.
    size = os.path.getsize(first_rolled)
    with open(first_rolled, "r+b") as f:
        f.truncate(size - 500)
        f.seek(0, os.SEEK_END)
        f.write(b"\x5a" * 300)
    with pylog.open(crashed) as store:
        p = store.topic("t").partition(0)
        p.append_values([b"after"])  # the writer recovers first
        assert p.last_recovery is not None and p.last_recovery["bytes_dropped"] > 0
        end = p.log_end_offset
        records = p.read(0, max_records=end)
        assert [r.offset for r in records] == list(range(end))  # dense, the lost offsets given again
        assert records[-1].value == b"after"
        assert flushed <= end - 1 < len(VALUES) * 3
        assert p.check() == []


def test_cleanable_range_stops_at_a_pending_sync(tmp_path) -> None:
    """An append in another thread may roll between compaction's sync and its choice of range: the range
    still ends before the first rolled segment whose fsync is pending."""
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        p = store.create_topic("c", 1, config={**SMALL, "cleanup.policy": "compact"}).partition(0)
        with _Held():
            for i in range(12):
                p.append_values(VALUES, keys=[b"k%d" % (j % 7) for j in range(len(VALUES))])
            assert len(internals(p).durability.unsynced) >= 2
            rng = cleanable_range(p)
            assert rng.uncleanable == internals(p).synced_through == internals(p).durability.unsynced[0].base_offset
            assert rng.uncleanable < p.segments[-1].base_offset


def test_a_write_failure_part_way_reports_itself_and_wakes_waiters(tmp_path, monkeypatch) -> None:
    """With flush.messages=1 the batches that landed before the failure are not flushed on the way out: the
    flush's error (LogFailedError, the partition having failed) would replace the one that stopped the
    call, and the waiters of this handle would not be woken."""
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        # Several batches of max.message.bytes, over segments of two or three of them (the batches of a call
        # that go into one segment are written at once): the second write fails.
        p = store.create_topic("t", 1, config={"flush.messages": 1, "max.message.bytes": 4096,
                                               "segment.bytes": 8192}).partition(0)
        p.append_values([b"first"])
        calls = []

        def fails_second(real: Any) -> Any:
            def write(seg: Segment, *args: Any) -> Any:
                calls.append(1)
                if len(calls) == 2:
                    internals(p).durability.failed = "simulated: the write could not be rolled back"
                    raise OSError(28, "No space left on device")
                return real(seg, *args)
            return write

        monkeypatch.setattr(Segment, "append", fails_second(Segment.append))
        monkeypatch.setattr(Segment, "append_batches", fails_second(Segment.append_batches))
        woken = []
        waiter = threading.Thread(target=lambda: woken.append(p.wait_for_data(p.log_end_offset, 60)))
        waiter.start()
        with pytest.raises(OSError) as info:
            p.append_values([b"v" * 1000] * 10)
        assert info.value.errno == 28
        waiter.join(30)
        assert woken == [True]
        with pytest.raises(LogFailedError):
            p.flush()  # nothing pending to sync: the failed partition refuses all the same


def test_a_failed_partition_syncs_nothing_more(tmp_path, fsyncs) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        with _Held():
            _roll_a_few(p)
            internals(p).durability.failed = "simulated: an earlier fsync failed"
            done = len(fsyncs)
            with pytest.raises(LogFailedError):
                internals(p).sync_rolled()
            assert not _logs(fsyncs[done:], threading.current_thread().name)
            internals(p).durability.failed = None  # let the store close


def _mapped(paths: list[str]) -> set[str]:
    """The files among ``paths`` that this process maps (Linux: /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        maps = f.read()
    return {path for path in paths if os.path.realpath(path) in maps}


def test_columns_keep_no_view_of_a_segment_mapping(tmp_path) -> None:
    """Columns are copies: a sealed segment's mapping closes with the store although they live on."""
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        for i in range(10):
            p.append_values([b"v%d" % i] * 100, keys=[b"k"] * 100, headers=[[("h", b"x")]] * 100)
        logs = [s.log_path for s in p.segments[:-1]]
        kept = [p.read_columns(5, max_records=3), p.read_columns(0, max_records=1000), p.read_columns(150, 1)]
        assert _mapped(logs) == set(logs)  # read through their mappings
    assert _mapped(logs) == set()
    for cols in kept:
        assert type(cols.value_data) is bytes and type(cols.key_data) is bytes
    assert kept[0].values() == [b"v0"] * 3 and kept[2].keys() == [b"k"]


def test_flush_after_a_handover_fsyncs_what_this_handle_appended(tmp_path, fsyncs) -> None:
    """A producer of this process may hand the partition over between another producer's append and its
    flush (they share the handle): the flush must still make that append durable."""
    me = threading.current_thread().name
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1).partition(0)
        p.wait_to_write(1000)
        internals(p).append_values_in_turn(VALUES, None, None, None, None, None)  # as a producer appends
        appended = os.path.basename(p.segments[-1].log_path)
        assert internals(p).release_turn()
        done = len(fsyncs)
        p.flush()
        assert appended in _logs(fsyncs[done:], me)
        done = len(fsyncs)
        p.flush()  # durable now: nothing is left to fsync
        assert not _logs(fsyncs[done:], me)


def test_a_handle_taking_turns_for_long_remembers_few_segments_and_its_flush_still_fsyncs_what_it_owes(
        tmp_path, fsyncs) -> None:
    """Two handles take turns with acks=1 and no flush policy, over many rolls and retention passes: each
    handover remembers the segment file it appended to (release_writer does not fsync it); the handle
    must not remember one per segment for its life, and what it appended must still be durable after its
    flush (fsynced after its last append to the file, by anyone), or gone to retention."""
    config = {"segment.bytes": 4096, "retention.bytes": 16384}
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as a, \
            pylog.open(tmp_path / "s", log_cleaner_enable=False) as b:
        pa = a.create_topic("t", 1, config=config).partition(0)
        pb = b.topic("t").partition(0)
        owed: dict[str, int] = {}  # file pa appended to -> len(fsyncs) after its last append there
        most = 0
        for turn in range(300):
            for store, p in ((a, pa), (b, pb)):
                p.wait_to_write(10_000)
                internals(p).append_values_in_turn([b"x" * 200] * 4, None, None, None, None, None)  # as a producer does
                if p is pa:
                    owed[os.path.realpath(p.segments[-1].log_path)] = len(fsyncs)
                if turn % 20 == 0:
                    store.enforce_retention("t")
                p.release_writer()
            most = max(most, len(internals(pa).durability.handed_over))
        assert len(owed) > 3 * 16  # many more segments than the handle may remember
        assert most <= 16
        pa.flush()
        for path, after in owed.items():
            assert not os.path.exists(path) or path in {f for _, f in fsyncs[after:]}, path
        done = len(fsyncs)
        pa.flush()  # all durable: nothing left to fsync
        assert not _logs(fsyncs[done:], threading.current_thread().name)


def test_flush_fsyncs_a_segment_the_next_writer_rolled_before_its_sync(tmp_path, fsyncs) -> None:
    """The file this handle appended to is sealed by another writer, whose background sync has not run:
    this handle's flush fsyncs it by name."""
    me = threading.current_thread().name
    with pylog.open(tmp_path / "s") as store, pylog.open(tmp_path / "s") as other:
        p = store.create_topic("t", 1, config=SMALL).partition(0)
        p.append_values(VALUES)
        appended = os.path.basename(p.segments[-1].log_path)
        p.release_writer()
        q = other.topic("t").partition(0)
        with _Held():
            q.append_values(VALUES)
            q.roll()  # seals the file p appended to; its fsync waits for the held sync thread
            done = len(fsyncs)
            p.flush()
            assert appended in _logs(fsyncs[done:], me)


def test_close_after_a_handover_fsyncs_what_this_handle_appended(tmp_path, fsyncs) -> None:
    me = threading.current_thread().name
    store = pylog.open(tmp_path / "s")
    try:
        p = store.create_topic("t", 1).partition(0)
        p.append_values(VALUES)
        appended = os.path.basename(p.segments[-1].log_path)
        p.release_writer()
        done = len(fsyncs)
    finally:
        store.close()
    assert appended in _logs(fsyncs[done:], me)


def test_a_failed_fsync_after_a_handover_fails_the_partition(tmp_path, monkeypatch) -> None:
    with pylog.open(tmp_path / "s") as store:
        p = store.create_topic("t", 1).partition(0)
        p.append_values(VALUES)
        p.release_writer()
        real = os.fdatasync

        def broken(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
                raise OSError(5, "Input/output error")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", broken)
        with pytest.raises(OSError):
            p.flush()
        monkeypatch.undo()
        with pytest.raises(LogFailedError, match="before a handover failed"):
            p.flush()  # a second fsync through a new descriptor would "succeed": it must not be asked
        with pytest.raises(LogFailedError):
            p.append_values(VALUES)


def test_flush_ms_reaches_what_this_handle_appended_before_a_handover(tmp_path, fsyncs) -> None:
    """The store's background thread enforces ``flush.ms`` through flush_if_due, also on a handle that
    handed the partition over with appends not fsynced yet."""
    me = threading.current_thread().name
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        p = store.create_topic("t", 1).partition(0)
        p.append_values(VALUES)
        appended = os.path.basename(p.segments[-1].log_path)
        p.release_writer()
        store.alter_topic_config("t", {"flush.ms": 1})
        started = time.monotonic()
        while time.monotonic() - started < 0.002:  # flush.ms has passed since the append
            pass
        done = len(fsyncs)
        internals(p).flush_if_due()
        assert appended in _logs(fsyncs[done:], me)
        assert internals(p).durability.unflushed == 0
