"""The partition's writer lock and the turn-taking protocol between writers.

Invariants (numbered as in :mod:`pylog.partition`):
4. Exactly one writer per partition across threads and processes at any moment: an ``flock`` on ``.lock``
   taken on the first write and held until :meth:`Partition.close` or :meth:`Partition.release_writer`
   (also called when the store's descriptor budget lets go of the partition's files).
   Writers that take turns (producers of several processes sharing a partition) ask the holder for it
   through a shared ``flock`` on ``.want`` while they wait; the holder looks with
   :meth:`WriterLock.handover_wanted` and hands over by releasing. Readers take no lock.

:class:`WriterLock` owns the lock's descriptor and the turn state: the partition calls it under its append
lock (``Partition._append_lock``), except for the probes that do not wait for appends (:attr:`WriterLock.held`,
:meth:`WriterLock.handover_wanted`) and :meth:`WriterLock.ask_for_handover`. The ``.want`` probe's
descriptor is used, opened and closed only under :attr:`WriterLock.probe_lock` (two system calls at most
while held, never another lock taken under it): a probe in one thread (a producer's idle look, the
server's sweep) never flocks a descriptor :meth:`WriterLock.close` closed under it in another (the store's
descriptor budget letting go of the partition's files). Such a number is soon another file's, perhaps
another partition's ``.lock``, which the probe's unlock would release: two writers.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from typing import Callable

from ...errors import PartitionLockedError, ReadOnlyStoreError, UnknownTopicError
from ..fileio import try_flock
from ..filenames import LOCK_FILE, WANT_FILE

__all__ = ["WriterLock", "retry"]


class WriterLock:
    """The ``flock`` on a partition's ``.lock`` (:attr:`fd` while held) and its ``.want`` hand-over probe."""

    def __init__(self, directory: str, name: str, read_only: bool) -> None:
        self.directory = directory
        self.name = name  # "topic-number", for messages
        self.read_only = read_only
        #: The locked ``.lock`` descriptor while this handle is the writer, else None.
        self.fd: int | None = None
        #: ``.want``, opened on the first :meth:`handover_wanted` probe; used, opened and closed only under
        #: :attr:`probe_lock` (see the module docstring).
        self.want_fd: int | None = None
        self.probe_lock = threading.Lock()
        #: This handle has handed the lock over (release_writer) before: it takes turns with other writers,
        #: so its opens as writer do not fsync the checkpoint either (see loader.open_as_writer).
        self.takes_turns = False
        #: The lock is held for a turn (taken by wait_to_write, used only by producers' appends since): it
        #: may be handed over (hand_over). A direct append pins it: cleared until the lock is let go.
        self.in_turns = False

    @property
    def held(self) -> bool:
        """True while this handle holds the writer lock."""
        return self.fd is not None

    def open_file(self, name: str) -> int:
        """Open (creating) the partition's file ``name`` read-write; refused for a read-only handle."""
        if self.read_only:
            raise ReadOnlyStoreError(f"partition {self.name} belongs to a store opened with "
                                     "read_only=True, which takes no locks")
        try:
            return os.open(os.path.join(self.directory, name), os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise UnknownTopicError(f"partition {self.name} was deleted ({self.directory})") from None

    def acquire(self, timeout_ms: float) -> int:
        """Take the ``flock`` on ``.lock``, waiting up to ``timeout_ms``; returns the descriptor, which the
        caller :meth:`adopt` s once the partition is open for writing (or unlocks and closes).

        :raises PartitionLockedError: when another writer holds it past the timeout.
        """
        fd = self.open_file(LOCK_FILE)
        try:
            got = retry(lambda: try_flock(fd), time.monotonic() + timeout_ms / 1000, 0.001, 0.05)
        except OSError:
            os.close(fd)
            raise
        if not got:
            os.close(fd)
            raise PartitionLockedError(f"partition {self.name} is locked by another writer ({self.directory})")
        return fd

    def adopt(self, fd: int) -> None:
        """This handle is the writer from now on, holding the lock through ``fd``."""
        self.fd = fd

    def let_go(self) -> None:
        """Unlock and close the lock's descriptor, if held; the turn ends with it."""
        fd, self.fd = self.fd, None
        self.in_turns = False
        if fd is not None:
            self.unlock(fd)

    @staticmethod
    def unlock(fd: int) -> None:
        """Unlock and close a descriptor :meth:`acquire` returned that was not adopted."""
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def ask_for_handover(self) -> int:
        """Hold a shared ``flock`` on ``.want`` (until the returned descriptor is closed): tells the writer,
        if it takes turns, that another handle waits for the partition."""
        fd = self.open_file(WANT_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a holder's probe has it (microseconds)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_probe(self) -> None:
        """Open ``.want`` for :meth:`handover_wanted`, once (under the partition's append lock)."""
        with self.probe_lock:
            if self.want_fd is None:
                self.want_fd = self.open_file(WANT_FILE)

    def handover_wanted(self) -> bool:
        """True while another handle holds ``.want`` shared (waits for the lock). :meth:`open_probe` first;
        False when the probe was closed meanwhile (the handle let go of its files, its lock first)."""
        with self.probe_lock:
            fd = self.want_fd
            if fd is None:
                return False
            if try_flock(fd):  # nobody holds it shared
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
            return True

    def wait_for_turn(self, take_turn: Callable[[], bool], timeout_ms: float,
                      between: Callable[[], object] | None) -> bool:
        """Call ``take_turn`` until it returns True or ``timeout_ms`` passes, holding ``.want`` meanwhile so
        that a writer taking turns hands over; ``between`` runs after each failed attempt. True on success."""
        if take_turn():
            return True
        deadline = time.monotonic() + timeout_ms / 1000
        want = self.ask_for_handover()

        def attempt() -> bool:
            if take_turn():
                return True
            if between is not None:
                between()
            return False

        try:
            return retry(attempt, deadline, 0.0002, 0.005)
        finally:
            os.close(want)

    def close(self) -> None:
        """Close the ``.want`` probe (the lock itself goes with :meth:`let_go`); waits for a probe under way
        in another thread."""
        with self.probe_lock:
            fd, self.want_fd = self.want_fd, None
            if fd is not None:
                os.close(fd)


def retry(attempt: Callable[[], bool], deadline: float, delay: float, cap: float) -> bool:
    """Call ``attempt`` until it returns True (True) or ``time.monotonic()`` passes ``deadline`` after a
    failed attempt (False), sleeping ``delay`` seconds between attempts, doubled each time up to ``cap``."""
    while not attempt():
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, cap)
    return True
