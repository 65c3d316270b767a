"""Waking readers that wait for appends: this process's through a condition variable, other processes'
through the partition's ``notify`` file (:mod:`pylog.storage.notify`).

Invariants:
- A waiter never sleeps past a wake-up it should get: the notify sequence is read before the log end, and
  the condition is notified after every append (whatever its flush did) and on close.
- A wait never blocks past its timeout, and returns False at once after close; a lost cross-process
  wake-up or a dead writer costs a bounded delay (the log end is re-checked at least every
  :data:`pylog.storage.notify.SLICE` seconds, or polled where futexes are unavailable).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from ..notify import Notifier
from .local_log import LocalLog
from .segments import S

__all__ = ["Waiters"]

#: Polling interval bounds of a reader waiting for another process's appends when it gets no wake-ups from
#: them (see pylog.storage.notify), in seconds.
_POLL_MIN, _POLL_MAX = 0.0002, 0.005


class Waiters:
    """The wake-ups of one partition handle's readers."""

    def __init__(self, directory: str, read_only: bool) -> None:
        self._appended = threading.Condition(threading.Lock())
        #: Wakes readers in other processes after appends (a shared counter + futex; see pylog.storage.notify).
        self.notifier = Notifier(directory, read_only=read_only)

    def publish(self) -> None:
        """Appended batches are visible (to readers in other processes, which read up to the file size)."""
        self.notifier.publish()

    def wake_local(self) -> None:
        """Wake this process's waiters: records are there to read (or the partition closed)."""
        with self._appended:
            self._appended.notify_all()

    def close(self) -> None:
        """Close the notify file and wake every waiter of this handle."""
        self.notifier.close()  # wakes this handle's waiters sleeping on the notify file
        self.wake_local()

    def wait_for_data(self, offset: int, timeout: float | None, local: LocalLog[S], log_end: Callable[[], int],
                      is_writer: Callable[[], bool], is_closed: Callable[[], bool]) -> bool:
        """Block until ``log_end() > offset`` or ``timeout`` seconds pass; True when data is there. See
        :meth:`Partition.wait_for_data`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = _POLL_MIN
        watch = None if is_writer() or is_closed() else self.notifier.watch()
        try:
            while True:
                seq = watch.sequence() if watch is not None else 0  # before the log end: see pylog.storage.notify
                if log_end() > offset:
                    if watch is not None:
                        watch.found(seq)
                    return True
                if is_closed():
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if watch is not None and not is_writer() and watch.sleep(seq, remaining):
                    continue
                # The writer's own appends notify the condition; without wake-ups from another process, poll.
                if is_writer():
                    step = remaining
                else:
                    step = poll if remaining is None else min(poll, remaining)
                poll = min(poll * 2, _POLL_MAX)
                with self._appended:
                    segs = local.segments  # empty for a reader opened before the writer created any segment
                    if not segs or segs[-1].next_offset <= offset:
                        self._appended.wait(step)
        finally:
            if watch is not None:
                watch.close()
