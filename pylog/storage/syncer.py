"""Background fsync of rolled segments, off the appending thread.

A roll seals a segment that may hold up to ``segment.bytes`` of data not yet written back (the default
flush policy leaves fsync to the kernel). Syncing it in the appending thread stalled that append for as
long as the disk took to write the whole segment: 150–250 ms per 256 MB here. Kafka schedules the same
flush on a background thread and moves the recovery point once it is done; so does pylog.

Invariants:
1. One daemon thread per process runs the jobs one at a time, in the order they were submitted; each job
   runs once. A job that raises is logged and does not stop the thread (jobs record their own failures:
   a partition marks itself failed).
2. Nothing depends on a job having run: whoever needs the data durable now (``flush()``, ``close()``, handing
   the writer lock over, compaction before it decides what is clean) syncs what is still pending itself, and a
   job that finds nothing left to do does nothing. A process that exits with jobs queued loses only what the
   kernel has not yet written back, exactly as without a job; the recovery point still names the older
   segment, so the next open re-validates it.
3. After ``fork`` the child starts with an empty queue and, on its first submit, a thread of its own.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Callable

__all__ = ["submit", "wait_idle"]

log = logging.getLogger("pylog.syncer")


class Syncer:
    """A queue of fsync jobs and the daemon thread that runs them in order (one per process: ``_SYNCER``;
    tests make their own to watch one queue)."""

    def __init__(self) -> None:
        self._jobs: collections.deque[Callable[[], None]] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._running = 0  # jobs taken off the queue and not finished

    def submit(self, job: Callable[[], None]) -> None:
        with self._cond:
            self._jobs.append(job)
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="pylog-syncer", daemon=True)
                try:
                    thread.start()  # RuntimeError at interpreter shutdown: the next submit tries again
                except BaseException:
                    if thread.ident is None:  # never started: nobody will run the job
                        self._jobs.pop()
                        raise
                    self._thread = thread  # started, then interrupted (KeyboardInterrupt): it runs the job
                    raise
                self._thread = thread
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                job = self._jobs.popleft()
                self._running += 1
            try:
                job()
            except Exception:  # noqa: BLE001 - invariant 1: the thread outlives any job
                log.exception("background sync job failed")
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every job submitted so far has run; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._running, timeout)

    def _after_fork(self) -> None:
        # The parent's thread does not exist here, and a lock held by it at the fork would stay held.
        self._jobs = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._thread = None
        self._running = 0


_SYNCER = Syncer()
os.register_at_fork(after_in_child=_SYNCER._after_fork)


def submit(job: Callable[[], None]) -> None:
    """Run ``job`` on the process's background sync thread (started on first use)."""
    _SYNCER.submit(job)


def wait_idle(timeout: float | None = None) -> bool:
    """Block until every job submitted so far has run (True), or ``timeout`` seconds pass (False)."""
    return _SYNCER.wait_idle(timeout)
