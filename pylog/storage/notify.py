"""Cross-process wake-ups for readers waiting on a partition: a shared counter and a Linux futex.

A reader in another process than the partition's writer learns of new batches by re-reading the log end.
To wait for them without polling, each partition directory holds a small shared file, ``notify`` (layout in
docs/FORMAT.md), that the writer and waiting readers map:

- the writer, once an append is visible to readers, adds one to the *sequence* word, then reads the
  *waiters* word and only when it is non-zero makes a ``FUTEX_WAKE`` system call: an append that nobody
  waits for costs a store, a lock round trip and a load (about 1 µs), no system call;
- a waiting reader adds one to *waiters* (atomically, in the kernel, with ``FUTEX_WAKE_OP``), reads the
  sequence, checks the log end, and sleeps in ``FUTEX_WAIT`` while the sequence still holds the value it
  read, at most :data:`SLICE` seconds at a time; it subtracts one from *waiters* when its wait ends.

Why a wake-up is not lost: the reader's atomic add is a full barrier between its registration and its read
of the sequence, and the writer puts a full barrier (a lock acquire: a locked instruction on x86-64) between
its store of the sequence and its read of *waiters*. So either the writer sees the reader counted and wakes
it (``FUTEX_WAIT`` returns at once when the sequence already moved: the kernel compares it under its own
lock), or the reader reads the new sequence, and then its log-end check, made after, finds the data.

Invariants:

1. A wait never outlasts its caller's timeout, and never sleeps longer than :data:`SLICE` at a time; the
   caller re-checks the log end after every sleep, so a lost wake-up, a dead writer or a replaced file
   delays a reader by at most one slice.
2. Only the partition's writer stores the sequence (one writer per partition, under its ``flock``), so its
   plain read-modify-write is race-free; *waiters* only changes through atomic kernel operations.
3. The file is derived, disposable data. A missing, short or damaged one is rewritten in place, under an
   ``flock`` of the file itself, so every process keeps mapping the same inode, and the file never shrinks
   to nothing under a mapping (which would raise SIGBUS). Its counters then restart from 0: a waiter
   count that goes below zero, or that a killed reader left above it, only makes the writer wake needlessly
   (one ``FUTEX_WAKE``, about 1 µs, per append). A file replaced or deleted by hand is noticed by its path
   naming another inode: by the writer within :data:`_RECHECK` seconds of appending, by a reader after a
   slice without wake-ups.
4. Wake-ups only reach processes on the writer's kernel. A reader that finds new data after a full slice
   with no wake-up while the sequence did not move (a writer on another host of a shared filesystem, or one
   with notifications off) stops trusting the file and lets its caller poll, until it sees the sequence move.

Not available (then :meth:`Notifier.watch` returns None and callers poll the log end): platforms other than
Linux on x86-64, :data:`ENABLED` false (``PYLOG_NOTIFY=0`` in the environment), a store opened with
``read_only=True``, or a file that cannot be opened read-write (a read-only file system); after an open
fails it is tried again :data:`_RETRY` seconds later.

Thread-safety: :meth:`Notifier.publish` is called by the writer under the partition's append lock; the
other methods from any thread.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import math
import mmap
import os
import platform
import sys
import threading
import time
from typing import Any

from .filenames import NOTIFY_FILE

__all__ = ["Notifier", "Watch", "AppendWatch", "wait_any", "ENABLED", "SLICE"]

log = logging.getLogger("pylog.notify")

MAGIC = b"PLNF"
VERSION = 1
#: File size in bytes: magic (4), version (uint16), reserved (uint16, 0), sequence (uint32), waiters (uint32).
SIZE = 16
_HEADER = MAGIC + VERSION.to_bytes(2, "little") + bytes(2)
_SEQ, _WAITERS = 2, 3  # indexes of the 32-bit words
#: Longest sleep before a waiter looks at the log end again (seconds).
SLICE = 0.05
#: Seconds before opening the file again after an open failed.
_RETRY = 5.0
#: Seconds between checks that the path still names the mapped file.
_RECHECK = 1.0
#: Whether partitions use the file; read when a partition first needs it. False: readers poll the log end.
ENABLED = os.environ.get("PYLOG_NOTIFY", "1").lower() not in ("0", "false", "no", "off")

_SYS_FUTEX = 202  # x86-64
_SYS_FUTEX_WAITV = 449  # x86-64, Linux 5.16+
_FUTEX2_SIZE_U32 = 0x02  # futex_waitv flags: 32-bit words, shared (no FUTEX2_PRIVATE)
_CLOCK_MONOTONIC = 1
#: futex(2) operations (FUTEX_WAIT is also how tests recognise a wait in a replaced :func:`futex`).
FUTEX_WAIT, FUTEX_WAKE, _FUTEX_WAKE_OP = 0, 1, 5  # shared (not FUTEX_PRIVATE_FLAG): across processes
_FUTEX_OP_ADD = 1
_WAKE_ALL = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load_syscall() -> Any:
    """libc's ``syscall`` with futex's argument types, or None where this module does not apply.

    x86-64 only: the writer's barrier (see the module doc) relies on a lock acquire being a full fence.
    """
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "amd64"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        # long syscall(SYS_futex, uint32_t *uaddr, int op, uint32_t val, timespec *timeout, uint32_t *uaddr2,
        # uint32_t val3)
        proto = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, use_errno=True)
        return proto(("syscall", libc))
    except (OSError, AttributeError):
        return None


#: The system-call seam: libc's ``syscall`` (see :func:`_load_syscall`), or None where futexes are not used.
#: Module-level so tests may replace it (e.g. to simulate a kernel that refuses a call).
syscall = _load_syscall()


class _WaitV(ctypes.Structure):
    _fields_ = [("val", ctypes.c_uint64), ("uaddr", ctypes.c_uint64), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


#: None until the first multi-wait finds out whether the kernel has futex_waitv; then True or False.
#: Tests may set it (False: multi-partition waits take turns, as on a kernel without futex_waitv).
waitv_works: bool | None = None


def futex(addr: int, op: int, val: int, timeout: Any = None, addr2: Any = None, val3: int = 0) -> int:
    """One futex call: its result, or ``-errno``. Every futex call of this module goes through this
    module-level name, so tests may replace it (to watch or fail calls); the wait sleeps inside it."""
    r = syscall(_SYS_FUTEX, addr, op, val, timeout, addr2, val3)
    return -ctypes.get_errno() if r < 0 else r


class _Mapping:
    """The file mapped read-write. Dropping the last reference unmaps it (a thread still waiting on it
    keeps it alive: the words array holds the mmap)."""

    __slots__ = ("words", "seq_addr", "waiters_addr", "ident")

    def __init__(self, mm: mmap.mmap, ident: tuple[int, int]) -> None:
        self.words = (ctypes.c_uint32 * (SIZE // 4)).from_buffer(mm)
        self.seq_addr = ctypes.addressof(self.words) + 4 * _SEQ
        self.waiters_addr = ctypes.addressof(self.words) + 4 * _WAITERS
        self.ident = ident  # (st_dev, st_ino)

    @classmethod
    def open(cls, path: str) -> "_Mapping":
        """Open (creating or repairing) and map the file. :raises OSError: when it cannot be opened read-write."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _flock_briefly(fd)
            try:
                raw = os.pread(fd, SIZE + 1, 0)
                if len(raw) != SIZE or raw[:len(_HEADER)] != _HEADER:
                    if raw:
                        log.warning("%s: not a valid notify file (%d bytes); rewriting it", path, len(raw))
                    os.ftruncate(fd, SIZE)  # grows or shrinks, never to nothing: mappings stay valid
                    os.pwrite(fd, _HEADER + bytes(SIZE - len(_HEADER)), 0)
                mm = mmap.mmap(fd, SIZE)  # MAP_SHARED, read-write
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            st = os.fstat(fd)
        finally:
            os.close(fd)  # the mmap keeps its own descriptor
        return cls(mm, (st.st_dev, st.st_ino))

    def add_waiter(self, delta: int) -> int:
        """Atomically add ``delta`` (-2048..2047) to *waiters* (a full barrier); 0 or ``-errno``."""
        return futex(self.seq_addr, _FUTEX_WAKE_OP, 0, None, self.waiters_addr,
                      (_FUTEX_OP_ADD << 28) | ((delta & 0xFFF) << 12))

    def wake(self) -> int:
        return futex(self.seq_addr, FUTEX_WAKE, _WAKE_ALL)


def _flock_briefly(fd: int) -> None:
    """Exclusive flock, waiting at most ~20 ms (it is held for microseconds; a stopped holder must not stall
    a reader). :raises BlockingIOError:"""
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.001)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


class Notifier:
    """A partition's wake-up file, mapped on first use. ``directory`` is the partition's directory.
    ``read_only`` (a store opened read-only): never open, create or map the file; waiters poll."""

    def __init__(self, directory: str, read_only: bool = False) -> None:
        self.path = os.path.join(directory, NOTIFY_FILE)
        self._open_lock = threading.Lock()
        self._fence = threading.Lock()  # acquired as a memory barrier in publish()
        self._map: _Mapping | None = None
        self._closed = False
        # Monotonic time before which no open is tried (after a failure; never for a read-only store, whose
        # waiters would otherwise write their count into the file).
        self._retry_at = math.inf if read_only else 0.0
        self._check_at = 0.0  # monotonic time of the next check that the path names the mapped file
        self._trusted = True  # False while wake-ups are found not to reach this process (invariant 4)
        self._seen = 0  # the sequence when they were found not to

    @property
    def trusted(self) -> bool:
        """False while wake-ups are found not to reach this process (its waiters then poll; invariant 4)."""
        return self._trusted

    @property
    def mapped(self) -> bool:
        """True while the wake-up file is mapped in this process (never for a read-only store)."""
        return self._map is not None

    def _mapping(self) -> _Mapping | None:
        m = self._map
        if m is not None or syscall is None or not ENABLED or self._closed or time.monotonic() < self._retry_at:
            return m
        with self._open_lock:
            if self._map is None and not self._closed:
                try:
                    self._map = _Mapping.open(self.path)
                    self._check_at = time.monotonic() + _RECHECK
                except OSError as exc:
                    self._retry_at = time.monotonic() + _RETRY
                    log.debug("%s: no cross-process wake-ups for now (%s); readers poll", self.path, exc)
            return self._map

    def _disable(self, what: str, err: int) -> None:
        """A futex call failed unexpectedly (e.g. ENOSYS under a seccomp filter): stop using the file."""
        log.warning("%s: %s failed (%s); readers of this partition poll from now on", self.path, what,
                    errno.errorcode.get(err, err))
        self._retry_at = float("inf")
        self._map = None

    def _recheck(self, m: _Mapping, now: float) -> None:
        """Every _RECHECK seconds: drop the mapping when the path names another file (or none); the next
        use maps the file there, creating it if need be."""
        if now < self._check_at:
            return
        self._check_at = now + _RECHECK
        try:
            st = os.stat(self.path)
            same = (st.st_dev, st.st_ino) == m.ident
        except OSError:
            same = False
        if not same and self._map is m:
            log.info("%s: replaced or removed; mapping it again", self.path)
            self._map = None

    def publish(self) -> None:
        """The writer's appends are visible to readers: move the sequence and wake waiters, if any.

        Called under the partition's append lock (one writer, so the increment needs no atomic operation).
        Never raises for the notification's sake: appends must not fail because of it.
        """
        m = self._map or self._mapping()
        if m is None:
            return
        w = m.words
        w[_SEQ] = (w[_SEQ] + 1) & 0xFFFFFFFF
        with self._fence:  # full barrier: the store above is visible before the load below (module doc)
            pass
        if w[_WAITERS]:
            r = m.wake()
            if r < 0:
                self._disable("FUTEX_WAKE", -r)
                return
        self._recheck(m, time.monotonic())

    def watch(self) -> "Watch | None":
        """Register as a waiter for the duration of one wait (call :meth:`Watch.close` after), or None when
        wake-ups are unavailable here: then the caller polls."""
        m = self._mapping()
        if m is None:
            return None
        r = m.add_waiter(1)
        if r < 0:
            self._disable("FUTEX_WAKE_OP", -r)
            return None
        return Watch(self, m)

    def release(self) -> None:
        """Drop the mapping (and with it its descriptor, once the waits using it end); the next use maps
        the file again. For a partition letting go of its files (:mod:`pylog.storage.handles`)."""
        self._map = None

    def close(self) -> None:
        """Stop using the file; wakes this process's waiters (and, needlessly, other processes' ones)."""
        self._closed = True
        m, self._map = self._map, None
        if m is not None and m.words[_WAITERS]:
            m.wake()


class Watch:
    """One waiter's registration (a count in *waiters*) for the length of one wait. Use::

        watch = notifier.watch()
        try:
            while True:
                seq = watch.sequence()       # first the sequence,
                if <data is there>:           # then the log end
                    watch.found(seq); return True
                if <timed out>: return False
                watch.sleep(seq, remaining)  # False: poll instead
        finally:
            watch.close()

    Not shared between threads.
    """

    __slots__ = ("_notifier", "_m", "_timed_out")

    def __init__(self, notifier: Notifier, m: _Mapping) -> None:
        self._notifier = notifier
        self._m: _Mapping | None = m
        self._timed_out: int | None = None  # the sequence a full slice waited on in vain

    def sequence(self) -> int:
        """The current sequence; read it before checking the log end, and pass it to :meth:`sleep`."""
        return self._m.words[_SEQ] if self._m is not None else 0

    def sleep(self, seq: int, timeout: float | None) -> bool:
        """Sleep until the sequence is no longer ``seq`` (an append, or a wake-up) or ``min(timeout, SLICE)``
        seconds pass. Returns False at once when the caller should poll instead (wake-ups unavailable or
        found not to reach this process); True after sleeping (the caller re-checks the log end)."""
        n, m = self._notifier, self._m
        if m is None:
            return False
        if not n._trusted:
            if m.words[_SEQ] == n._seen:
                return False
            n._trusted = True  # the sequence moved: a writer on this host publishes again
        step = SLICE if timeout is None else min(timeout, SLICE)
        ts = _Timespec(int(step), int((step % 1) * 1e9))
        r = futex(m.seq_addr, FUTEX_WAIT, seq, ctypes.addressof(ts))
        self._timed_out = None
        if r == -errno.ETIMEDOUT:
            if step >= SLICE:
                self._timed_out = seq
            now = time.monotonic()
            n._recheck(m, now)
            if n._map is not m:  # the file was replaced: register on the new one
                self.close()
                new = n._mapping()
                if new is not None and new.add_waiter(1) == 0:
                    self._m = new
        elif r < 0 and r not in (-errno.EAGAIN, -errno.EINTR):
            n._disable("FUTEX_WAIT", -r)
            self.close()
        return True

    def found(self, seq: int) -> None:
        """The caller found data after reading ``seq``: if a full slice just passed without a wake-up and
        the sequence never moved, the writer's wake-ups do not reach this process (invariant 4)."""
        m = self._m
        if self._timed_out is not None and self._timed_out == seq and m is not None and m.words[_SEQ] == seq:
            n = self._notifier
            if n._trusted:
                log.info("%s: new data without a wake-up; polling until the sequence moves", n.path)
            n._trusted, n._seen = False, seq

    def close(self) -> None:
        """End the registration (idempotent)."""
        m, self._m = self._m, None
        if m is not None:
            m.add_waiter(-1)


def wait_any(watches: list["Watch"], seqs: list[int], timeout: float) -> bool:
    """Sleep until one of the watched sequences is no longer its ``seqs`` entry, or ``min(timeout, SLICE)``
    seconds pass (Linux's ``futex_waitv``: one sleep over several partitions). Returns False at once, for
    the caller to fall back on other means, when that call is unavailable or a watch is unusable.
    """
    global waitv_works
    if waitv_works is False or syscall is None or not watches:
        return False
    ws = (_WaitV * len(watches))()
    for w, seq, slot in zip(watches, seqs, ws, strict=True):
        m, n = w._m, w._notifier
        if m is None or not n._trusted:
            return False
        slot.val, slot.uaddr, slot.flags = seq, m.seq_addr, _FUTEX2_SIZE_U32
    step = min(timeout, SLICE)
    deadline = time.clock_gettime(time.CLOCK_MONOTONIC) + max(step, 0.0)
    ts = _Timespec(int(deadline), int((deadline % 1) * 1e9))
    # long syscall(SYS_futex_waitv, struct futex_waitv *waiters, unsigned nr, unsigned flags,
    # struct timespec *timeout (absolute), clockid_t clockid): the futex prototype's slots carry them.
    r = syscall(_SYS_FUTEX_WAITV, ctypes.addressof(ws), len(watches), 0, ctypes.addressof(ts), _CLOCK_MONOTONIC, 0)
    if r >= 0:
        waitv_works = True
        return True
    err = ctypes.get_errno()
    if err in (errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR):
        waitv_works = True
        return True
    if waitv_works is None:
        log.info("futex_waitv unavailable (%s): multi-partition waits take turns", errno.errorcode.get(err, err))
    waitv_works = False
    return False


class AppendWatch:
    """One wait for an append to any of several partitions (one ``futex_waitv`` over their sequences), for
    the length of one wait; what :func:`pylog.partition.watch_appends` hands out. Use::

        with AppendWatch(notifiers) as watch:   # first the sequences,
            if <data is there at entry i>:      # then the log ends
                watch.found(i); return
            if not watch.sleep(timeout):        # False: unusable, poll instead
                <poll>

    Unusable (:meth:`sleep` returns False at once) when any notifier is None (a partition the caller's own
    handle writes: its appends do not go through the futex to itself) or cannot be watched. Not shared between
    threads.
    """

    __slots__ = ("_watches", "_seqs", "usable")

    def __init__(self, notifiers: "list[Notifier | None]") -> None:
        self._watches: list[Watch] = []
        self.usable = bool(notifiers)
        for n in notifiers:
            w = n.watch() if n is not None else None
            if w is None:
                self.usable = False
                break
            self._watches.append(w)
        #: Read on entry, before the caller checks the log ends (see the module docstring: no lost wake-up).
        self._seqs = [w.sequence() for w in self._watches]

    def found(self, i: int) -> None:
        """The caller found data at the ``i``-th partition after entry (see :meth:`Watch.found`)."""
        if self.usable:
            self._watches[i].found(self._seqs[i])

    def sleep(self, timeout: float) -> bool:
        """Sleep until an append to one of the partitions since entry, or ``min(timeout, SLICE)`` seconds;
        False at once when the caller should poll instead."""
        return self.usable and wait_any(self._watches, self._seqs, timeout)

    def close(self) -> None:
        for w in self._watches:
            w.close()

    def __enter__(self) -> "AppendWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
