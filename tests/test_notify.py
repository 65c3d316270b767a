"""pylog.storage.notify: readers waiting on a partition wake on another process's (or handle's) appends through the
partition's ``notify`` file, never wait past their timeout, and fall back to polling.

Cross-process children are separate interpreters (``python -c``); every wait has a timeout and every child
is killed in a ``finally``. Assertions are about results (the wait returned True, the data reads back, the
futex wait was woken rather than timed out), never about how long something took: where a test must
prove that a wake-up, not a periodic re-check, ended a wait, it makes the re-check interval
(``notify.SLICE``) longer than the test's own timeouts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import threading
import time

import pytest

import pylog
from pylog.partition import internals, watch_appends
from pylog.storage import notify

from childproc import Child
from storetools import blocked_in

TOPIC = "t"
needs_futex = pytest.mark.skipif(notify.syscall is None, reason="wake-ups need Linux on x86-64")


# A reader in another process: waits for data past the current end, says "sleeping" when it first enters
# FUTEX_WAIT, and reports whether a futex wait was woken (returned 0 or EAGAIN) rather than timed out.
# argv: root, SLICE, timeout.
_READER = """
import errno, json, sys
import pylog
from pylog.storage import notify
notify.SLICE = float(sys.argv[2])
results = []
real = notify.futex
def futex(addr, op, *args):
    if op == notify.FUTEX_WAIT and not results:
        print("sleeping", flush=True)
    r = real(addr, op, *args)
    if op == notify.FUTEX_WAIT:
        results.append(r)
    return r
notify.futex = futex
with pylog.open(sys.argv[1], log_cleaner_enable=False) as store:
    p = store.topic("t").partition(0)
    start = p.log_end_offset
    print("waiting", start, flush=True)
    ok = p.wait_for_data(start, float(sys.argv[3]))
    values = [r.value.decode() for r in p.read(start)] if ok else []
    print("done", json.dumps({"ok": ok, "values": values, "waits": len(results),
                              "woken": any(r in (0, -errno.EAGAIN) for r in results)}), flush=True)
"""

# A writer in another process: appends one record, says so, then waits to be killed (its stdin never
# gets a line).
_WRITER = """
import sys
import pylog
with pylog.open(sys.argv[1], log_cleaner_enable=False) as store:
    p = store.topic("t").partition(0)
    p.append_values([sys.argv[2].encode()])
    print("appended", p.log_end_offset, flush=True)
    sys.stdin.readline()
"""


def make_store(root: str) -> None:
    with pylog.open(root, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC)


def notify_path(root: str) -> str:
    return os.path.join(root, TOPIC, "0", notify.NOTIFY_FILE)


def waiters(root: str) -> int:
    """The waiter count in the partition's notify file (0 while it does not exist)."""
    try:
        with open(notify_path(root), "rb") as f:
            raw = f.read(notify.SIZE)
    except FileNotFoundError:
        return 0
    return struct.unpack_from("<i", raw, 12)[0] if len(raw) == notify.SIZE else 0


def until(cond, what: str, timeout: float = 60) -> None:
    """Wait (polling) until ``cond()``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.002)


class FutexSpy:
    """Records this process's futex calls; ``sleeping`` is set when a FUTEX_WAIT is about to start."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[int] = []
        self.sleeping = threading.Event()
        real = notify.futex

        def spy(addr, op, *args):
            self.calls.append(op)
            if op == notify.FUTEX_WAIT:
                self.sleeping.set()
            return real(addr, op, *args)
        monkeypatch.setattr(notify, "futex", spy)

    def wait_sleeping(self) -> None:
        assert self.sleeping.wait(60), "no FUTEX_WAIT started"
        self.sleeping.clear()


class Waiter(threading.Thread):
    """``partition.wait_for_data(offset, timeout)`` in a thread; ``result`` once joined."""

    def __init__(self, partition, offset: int, timeout: float | None) -> None:
        super().__init__(daemon=True)
        self.args_ = (partition, offset, timeout)
        self.result: bool | None = None

    def run(self) -> None:
        p, offset, timeout = self.args_
        self.result = p.wait_for_data(offset, timeout)

    def outcome(self, timeout: float = 60) -> bool | None:
        self.join(timeout)
        assert not self.is_alive(), "wait_for_data did not return"
        return self.result


# ----------------------------------------------------------------------------- across processes


@needs_futex
def test_reader_process_wakes_on_append(tmp_path):
    root = str(tmp_path / "s")
    make_store(root)
    # SLICE longer than the reader's timeout: only a wake-up can end its wait with data.
    child = Child(_READER, root, "120", "60", cwd=str(tmp_path))
    try:
        assert child.expect("waiting") == "0"
        child.expect("sleeping")
        assert waiters(root) == 1
        with pylog.open(root, log_cleaner_enable=False) as store:
            store.topic(TOPIC).partition(0).append_values([b"hello"])
            out = json.loads(child.expect("done"))
        assert out == {"ok": True, "values": ["hello"], "waits": out["waits"], "woken": True}
        assert child.proc.wait(30) == 0
        assert waiters(root) == 0  # the reader unregistered
    finally:
        child.kill()


@needs_futex
def test_waiter_returns_at_its_timeout_when_the_writer_is_killed(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    make_store(root)
    writer = Child(_WRITER, root, "first", cwd=str(tmp_path))
    try:
        assert writer.expect("appended") == "1"
        with pylog.open(root, log_cleaner_enable=False) as store:
            p = store.topic(TOPIC).partition(0)
            assert p.log_end_offset == 1
            w = Waiter(p, 1, 1.0)
            w.start()
            until(lambda: waiters(root) >= 1, "the reader to register")
            writer.proc.send_signal(signal.SIGKILL)
            writer.proc.wait(30)
            assert w.outcome() is False
            assert waiters(root) == 0

            # The next writer (another process, after recovery) wakes the same reader handle.
            monkeypatch.setattr(notify, "SLICE", 120.0)
            w = Waiter(p, 1, 60)
            w.start()
            until(lambda: waiters(root) >= 1, "the reader to register again")
            writer = Child(_WRITER, root, "second", cwd=str(tmp_path))
            assert writer.expect("appended") == "2"
            assert w.outcome() is True
            assert [r.value for r in p.read(0)] == [b"first", b"second"]
    finally:
        writer.kill()


# ----------------------------------------------------------------------------- two handles in one process


@pytest.fixture
def handles(tmp_path):
    """(root, writer partition, reader partition): two stores on one directory, the first one writing."""
    root = str(tmp_path / "s")
    make_store(root)
    ws = pylog.open(root, log_cleaner_enable=False)
    rs = pylog.open(root, log_cleaner_enable=False)
    try:
        yield root, ws.topic(TOPIC).partition(0), rs.topic(TOPIC).partition(0)
    finally:
        rs.close()
        ws.close()


@pytest.mark.parametrize("damage", [b"", b"PLN", b"garbage!" * 5, notify.MAGIC + b"\x07\x00\x00\x00" + bytes(8)],
                         ids=["empty", "truncated", "garbage", "future-version"])
@needs_futex
def test_damaged_notify_file_is_rewritten_and_waits_still_wake(tmp_path, monkeypatch, damage):
    root = str(tmp_path / "s")
    make_store(root)
    with pylog.open(root, log_cleaner_enable=False) as store:
        store.topic(TOPIC).partition(0).append_values([b"a"])  # creates the file
    with open(notify_path(root), "rb") as f:
        good = f.read()
    assert good[:6] == notify.MAGIC + b"\x01\x00" and len(good) == notify.SIZE
    with open(notify_path(root), "wb") as f:  # nothing maps the file now: the store is closed
        f.write(damage)

    monkeypatch.setattr(notify, "SLICE", 120.0)  # only a wake-up ends the wait below
    with pylog.open(root, log_cleaner_enable=False) as rs, pylog.open(root, log_cleaner_enable=False) as ws:
        rp, wp = rs.topic(TOPIC).partition(0), ws.topic(TOPIC).partition(0)
        w = Waiter(rp, 1, 60)
        w.start()
        until(lambda: waiters(root) >= 1, "the reader to register")
        wp.append_values([b"b"])
        assert w.outcome() is True
        assert [r.value for r in rp.read(0)] == [b"a", b"b"]
    with open(notify_path(root), "rb") as f:
        raw = f.read()
    assert len(raw) == notify.SIZE and raw[:8] == notify.MAGIC + b"\x01\x00\x00\x00"


@needs_futex
def test_notify_file_deleted_while_in_use_is_mapped_again(handles, monkeypatch):
    root, wp, rp = handles
    wp.append_values([b"a"])
    assert rp.wait_for_data(0, 1)
    os.unlink(notify_path(root))
    monkeypatch.setattr(notify, "_RECHECK", 0.0)  # the writer looks at the path on its next append
    wp.append_values([b"b"])  # notices the file is gone: maps a new one on the next append
    w = Waiter(rp, 2, 60)  # the reader's first slice may wait on the old file; then it re-registers
    w.start()
    until(lambda: waiters(root) >= 1, "the reader to register on the new file")
    wp.append_values([b"c"])
    assert w.outcome() is True
    assert [r.value for r in rp.read(0)] == [b"a", b"b", b"c"]


@needs_futex
def test_append_without_waiters_makes_no_system_call(handles, monkeypatch):
    root, wp, rp = handles
    spy = FutexSpy(monkeypatch)
    for i in range(20):
        wp.append_values([b"%d" % i])
    assert spy.calls == []
    with open(notify_path(root), "rb") as f:
        assert struct.unpack_from("<I", f.read(), 8)[0] == 20  # the sequence moved once per append

    w = Waiter(rp, 20, 60)
    w.start()
    until(lambda: waiters(root) >= 1, "the reader to register")
    wp.append_values([b"x"])
    assert w.outcome() is True
    assert notify.FUTEX_WAKE in spy.calls


@needs_futex
def test_reader_polls_when_wake_ups_do_not_reach_it(handles, monkeypatch):
    """A writer that does not publish (another host, or notifications off): the reader still gets the
    data, after at most a slice, then polls until it sees the sequence move again."""
    root, wp, rp = handles
    spy = FutexSpy(monkeypatch)
    monkeypatch.setattr(internals(wp).notifier, "publish", lambda: None)
    w = Waiter(rp, 0, 60)
    w.start()
    spy.wait_sleeping()
    wp.append_values([b"a"])
    assert w.outcome() is True
    assert internals(rp).notifier.trusted is False

    monkeypatch.delattr(internals(wp).notifier, "publish")  # publishes again
    wp.append_values([b"b"])
    assert rp.wait_for_data(1, 0.01) is True
    assert rp.wait_for_data(2, 0.01) is False  # slept on the file again: the sequence moved
    assert internals(rp).notifier.trusted is True


@needs_futex
def test_close_ends_a_wait_on_the_notify_file(handles):
    root, wp, rp = handles
    wp.append_values([b"a"])
    w = Waiter(rp, 1, 60)
    w.start()
    until(lambda: waiters(root) >= 1, "the reader to register")
    rp.close()
    assert w.outcome() is False


# ----------------------------------------------------------------------------- everywhere


def test_wait_with_zero_timeout_returns_at_once(handles):
    root, wp, rp = handles
    assert rp.wait_for_data(0, 0) is False
    assert wp.wait_for_data(0, 0) is False
    wp.append_values([b"a"])
    assert rp.wait_for_data(0, 0) is True
    assert wp.wait_for_data(0, 0) is True
    assert rp.wait_for_data(1, 0) is False
    assert rp.wait_for_data(1, -1) is False
    assert waiters(root) == 0


def test_polling_fallback_when_disabled(handles, monkeypatch):
    root, wp, rp = handles
    monkeypatch.setattr(notify, "ENABLED", False)
    assert internals(rp).notifier.watch() is None
    w = Waiter(rp, 0, 60)
    w.start()
    wp.append_values([b"a"])
    assert w.outcome() is True
    assert not os.path.exists(notify_path(root))  # nobody created the file
    assert [r.value for r in rp.read(0)] == [b"a"]


def test_wait_on_a_closed_partition_returns_false(handles):
    root, wp, rp = handles
    rp.close()
    assert rp.wait_for_data(0, 1) is False


def test_one_sleep_over_several_partitions_wakes_on_any_of_them(tmp_path, monkeypatch):
    """A consumer of four partitions waits on all four wake-up words at once (futex_waitv), and still
    works, taking turns, where that call is unavailable."""
    for waitv in (None, False):
        monkeypatch.setattr(notify, "waitv_works", waitv)
        path = tmp_path / f"s{waitv}"
        with pylog.open(path) as writer_store, pylog.open(path) as reader_store:
            writer_store.create_topic("m", partitions=4)
            parts = writer_store.topic("m").partitions
            for p in parts:
                p.append_values([b"first"])
            c = reader_store.consumer("m", auto_offset_reset="latest")
            assert c.poll(0) == {}

            def woken_by(value: bytes) -> None:
                got: list = []
                # An hour-long poll, woken by an append made once it sleeps (futex_waitv, or one partition's
                # futex at a time): returning at all within the 60 s hang guard is the wake-up.
                t = threading.Thread(target=lambda: got.append(c.poll(timeout_ms=3_600_000)), daemon=True)
                t.start()
                until(lambda: blocked_in(t, "wait_any", "futex"), "the consumer to sleep")
                parts[3].append_values([value])
                t.join(60)
                assert not t.is_alive(), "the append did not wake the poll"
                assert [r.value for recs in got[0].values() for r in recs] == [value]

            woken_by(b"late")
            kernel = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
            if waitv is None and notify.syscall is not None and kernel >= (5, 16):
                # A first sleep may still take turns (a watch not yet registered when it began); once the
                # watches are registered, the sleep over all four partitions is one futex_waitv.
                for i in range(3):
                    if notify.waitv_works is not None:
                        break
                    woken_by(b"again %d" % i)
                assert notify.waitv_works is True  # the kernel has it and it was used
            c.close()


@needs_futex
def test_watch_appends_wakes_on_an_append_to_any_partition_and_is_unusable_on_its_own_writer(tmp_path,
                                                                                             monkeypatch):
    """pylog.partition.watch_appends, the wake-up API the server's long-poll fetches and the consumer use: one
    sleep over several partitions ends on an append to any of them by another handle; a partition this handle
    writes makes the watch unusable (its own appends do not go through the futex), so the caller polls."""
    monkeypatch.setattr(notify, "SLICE", 120.0)  # only a wake-up ends the sleep below
    with pylog.open(tmp_path, log_cleaner_enable=False) as ws, pylog.open(tmp_path, log_cleaner_enable=False) as rs:
        ws.create_topic("w", partitions=3)
        writers, readers = ws.topic("w").partitions, rs.topic("w").partitions
        for p in writers:
            p.append_values([b"first"])
        outcome: list[bool] = []
        with watch_appends(readers) as watch:
            assert watch.usable and [p.log_end_offset for p in readers] == [1, 1, 1]
            t = threading.Thread(target=lambda: outcome.append(watch.sleep(60)), daemon=True)
            t.start()
            until(lambda: blocked_in(t, "wait_any", "futex"), "the watch to sleep")
            writers[2].append_values([b"late"])
            t.join(60)
        assert outcome == [True] and readers[2].log_end_offset == 2
        with watch_appends([readers[0], writers[1]]) as mixed:
            assert not mixed.usable and mixed.sleep(60) is False  # at once: the caller polls
