"""Group commit: the fsyncs that ``acks=all`` asks for, shared across requests, connections, partitions and
producers of one process.

Before this module a request with ``acks=all`` fsynced each partition it appended to, one after another, in
its own thread: a Produce naming 500 partitions made 500 fsyncs before its answer, and two requests to the
same partition made two fsyncs where one, started after both appends, covers both. Durable systems answer
this with group commit; here it is per partition: a caller asks for partitions to be made durable
(:meth:`GroupCommit.submit`) after appending to them, and a small pool of threads fsyncs each partition
asked for (``Partition.flush``) once for every caller that asked while that partition was waiting or while
its previous fsync was under way. fsync releases the GIL, so the pool's fsyncs of different partitions run
at once (and the file system's journal commits them together).

Invariants:
1. A caller's ``done`` callback runs once, after every partition it named has been flushed by a
   ``flush()`` call that *started* after the caller's :meth:`GroupCommit.submit` call (so after its appends):
   the same promise as the caller's own ``flush()``, never an acknowledgement before the fsync that covers
   it. A flush under way when a caller asks does not count for it: the partition is flushed again after.
2. At most one flush of a partition runs at a time; callers asking meanwhile wait for the next one, which
   covers them all. Different partitions are flushed in parallel, by up to ``threads`` threads.
3. A flush that raises gives its exception to every caller it was to cover, for that partition only (the
   results list of ``done`` has one entry per partition named, None for success); the partition's own state
   (``Durability.failed``) makes every later flush raise too.
4. Nothing is kept for a partition with no caller waiting and no flush under way (thousands of partitions
   cost nothing once idle). Threads are started on first use; after ``fork`` the child starts afresh.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from typing import Any, Callable, Protocol, Sequence

__all__ = ["GroupCommit", "Flushable", "default", "sync"]

log = logging.getLogger("pylog.group_commit")

#: Threads flushing partitions at once in the process-wide instance (:func:`default`). fsync mostly waits
#: on the disk (the GIL is released), and the journal commits concurrent fsyncs together. 500 partitions
#: flushed here: 136 ms with one thread, 40-60 with 4 or 8, 33-42 with 16 to 64 (then the ~70 us of Python
#: per flush binds).
DEFAULT_THREADS = 16


class Flushable(Protocol):
    def flush(self) -> None: ...


Done = Callable[[list["BaseException | None"]], None]


class _Waiter:
    """One :meth:`GroupCommit.submit` call: its results so far and how many partitions are still to come."""

    __slots__ = ("results", "left", "done")

    def __init__(self, count: int, done: Done) -> None:
        self.results: list[BaseException | None] = [None] * count
        self.left = count
        self.done = done


class _Pending:
    """A partition with callers waiting, or a flush under way (removed when neither: invariant 4)."""

    __slots__ = ("part", "waiting", "running", "queued")

    def __init__(self, part: Flushable) -> None:
        self.part = part
        self.waiting: list[tuple[_Waiter, int]] = []  # covered by the next flush to start
        self.running = False
        self.queued = False


class GroupCommit:
    """Flushes partitions for many callers at once (see the module docstring). Thread-safe."""

    def __init__(self, threads: int = DEFAULT_THREADS, name: str = "pylog-group-commit") -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = threads
        self._name = name
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._pending: dict[int, _Pending] = {}  # by id() of the partition
        self._ready: collections.deque[_Pending] = collections.deque()  # waiting and not running, in order
        self._workers: list[threading.Thread] = []
        self._idle = 0  # workers waiting for work
        #: Flushes done (one per partition per round, whatever the number of callers it covered).
        self.flushes = 0
        #: Calls of :meth:`submit` completed, and the partitions they named in all.
        self.requests = 0
        self.requested = 0

    # ------------------------------------------------------------------ callers

    def submit(self, parts: Sequence[Flushable], done: Done) -> None:
        """Flush every partition of ``parts`` (appended to already) and then call ``done(results)`` from a
        flushing thread (or here, at once, when ``parts`` is empty): one result per partition, None or what
        its flush raised. ``done`` must not block: it runs in the pool."""
        if not parts:
            done([])
            return
        waiter = _Waiter(len(parts), done)
        with self._cond:
            for i, part in enumerate(parts):
                key = id(part)
                p = self._pending.get(key)
                if p is None:
                    p = self._pending[key] = _Pending(part)
                p.waiting.append((waiter, i))
                if not p.running and not p.queued:
                    p.queued = True
                    self._ready.append(p)
            self._start_workers()
            self._cond.notify(min(len(self._ready), self._idle) or 1)

    def sync(self, parts: Sequence[Flushable], timeout: float | None = None) -> list[BaseException | None]:
        """:meth:`submit` and wait for it: the results (None: flushed). :raises TimeoutError: after ``timeout``
        seconds (the flushes go on)."""
        finished = threading.Event()
        box: list[list[BaseException | None]] = []

        def done(results: list[BaseException | None]) -> None:
            box.append(results)
            finished.set()
        self.submit(parts, done)
        if not finished.wait(timeout):
            raise TimeoutError(f"group commit: {len(parts)} partition(s) not flushed within {timeout} s")
        return box[0]

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no flush is waiting or under way (True), or ``timeout`` seconds pass (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending, timeout)

    def stats(self) -> dict[str, int]:
        """``flushes`` done, ``requests`` completed, the partitions they ``requested`` in all."""
        with self._cond:
            return {"flushes": self.flushes, "requests": self.requests, "requested": self.requested}

    # ------------------------------------------------------------------ the pool

    def _start_workers(self) -> None:
        # Under the lock: one more thread while work waits that no idle thread will take.
        while len(self._ready) > self._idle and len(self._workers) < self.threads:
            thread = threading.Thread(target=self._run, name=f"{self._name}-{len(self._workers)}", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # at interpreter shutdown: the threads there are will do it
                if not self._workers:
                    raise
                return
            self._workers.append(thread)
            self._idle += 1

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._ready:
                    self._cond.wait()
                self._idle -= 1
                p = self._ready.popleft()
                p.queued = False
                p.running = True
                covered, p.waiting = p.waiting, []
            error: BaseException | None = None
            try:
                p.part.flush()
            except Exception as exc:  # noqa: BLE001 - invariant 3: each caller gets it for this partition
                error = exc
            completed = self._finish(p, covered, error)
            for waiter in completed:
                try:
                    waiter.done(waiter.results)
                except Exception:  # noqa: BLE001 - a caller's callback must not stop the pool
                    log.exception("group commit: a completion callback failed")

    def _finish(self, p: _Pending, covered: list[tuple[_Waiter, int]], error: BaseException | None) -> list[_Waiter]:
        """After a flush of ``p``: record it for the callers it covered; requeue ``p`` if more came meanwhile."""
        completed = []
        with self._cond:
            self.flushes += 1
            p.running = False
            for waiter, i in covered:
                waiter.results[i] = error
                waiter.left -= 1
                if not waiter.left:
                    completed.append(waiter)
                    self.requests += 1
                    self.requested += len(waiter.results)
            if p.waiting:
                p.queued = True
                self._ready.append(p)
            else:
                del self._pending[id(p.part)]
            self._idle += 1
            self._cond.notify_all()  # wait_idle, and a worker for a requeued partition
        return completed


_DEFAULT = GroupCommit()
os.register_at_fork(after_in_child=_DEFAULT._reset)  # invariant 4: the parent's threads are not here


def default() -> GroupCommit:
    """The process-wide instance: pylog's producers and ``pylog serve`` share it, so one fsync covers them all."""
    return _DEFAULT


def sync(parts: Sequence[Any], timeout: float | None = None) -> list[BaseException | None]:
    """Flush ``parts`` through the process-wide group commit and wait (see :meth:`GroupCommit.sync`)."""
    return _DEFAULT.sync(parts, timeout)
