"""Group commit: the fsyncs that ``acks=all`` asks for, shared across requests, connections, partitions and
producers of one process.

Before this module a request with ``acks=all`` fsynced each partition it appended to, one after another, in
its own thread: a Produce naming 500 partitions made 500 fsyncs before its answer, and two requests to the
same partition made two fsyncs where one, started after both appends, covers both. Durable systems answer
this with group commit. Here a caller asks for partitions to be made durable (:meth:`GroupCommit.submit`)
after appending to them, and a small pool of threads makes each partition asked for durable once for every
caller that asked while that partition was waiting or while its previous flush was under way, in one of two ways:

- **one partition at a time** (``Partition.flush``: an fdatasync of its active log): fdatasync releases the
  GIL, so the pool's fsyncs of different partitions run at once (and the file system's journal commits them
  together). Used while fewer than ``syncfs_partitions`` partitions wait.
- **store-wide, in rounds**: once ``syncfs_partitions`` or more partitions wait (librdkafka sends one Produce
  per partition batch, so with hundreds of partitions each request names another partition and one fsync
  covered ~0.9 requests), one thread takes every waiting partition, runs the first half of each one's flush
  (``Partition.begin_flush``: rolled segments, the recovery point; a descriptor of the active log), makes their
  file system durable with ONE ``syncfs`` (:mod:`pylog.storage.fs_sync`), then checks each partition's log for a
  writeback error (``Partition.end_flush`` with :func:`~pylog.storage.fs_sync.check_written`). 500 partitions:
  ~2.6 ms and 0.6 ms of CPU instead of ~21 ms and 21 ms of CPU (``benchmarks/bench_fsync.py``). While a round
  runs no other flush starts; what arrives meanwhile waits for the next round, which covers it all. Only where
  :data:`pylog.storage.fs_sync.AVAILABLE` (Linux 5.8+, where ``syncfs`` reports writeback errors).

Invariants:
1. A caller's ``done`` callback runs once, after every partition it named has been made durable by a flush
   (an fdatasync of it, or a ``syncfs`` of its file system) that *started* after the caller's
   :meth:`GroupCommit.submit` call (so after its appends): the same promise as the caller's own ``flush()``,
   never an acknowledgement before the fsync that covers it. A flush under way when a caller asks does not
   count for it: the partition is flushed again after.
2. At most one flush of a partition runs at a time; callers asking meanwhile wait for the next one, which
   covers them all. Different partitions are flushed in parallel, by up to ``threads`` threads, or together
   in a store-wide round (at most one round at a time, and no one-partition flush starts while it runs).
3. A flush that raises gives its exception to every caller it was to cover, for that partition only (the
   results list of ``done`` has one entry per partition named, None for success); the partition's own state
   (``Durability.failed``) makes every later flush raise too. A ``syncfs`` that fails fails every partition of
   its round on that file system (the error cannot be told to be another's); a partition whose own
   writeback failed is told by its check, in or out of a round.
4. Nothing is kept for a partition with no caller waiting and no flush under way (thousands of partitions
   cost nothing once idle). Threads are started on first use; after ``fork`` the child starts afresh.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Callable, Protocol, Sequence

from .. import metrics
from . import fs_sync

__all__ = ["GroupCommit", "Flushable", "default", "sync", "DEFAULT_THREADS", "DEFAULT_SYNCFS_PARTITIONS"]

log = logging.getLogger("pylog.group_commit")

#: Threads flushing partitions at once in the process-wide instance (:func:`default`). fsync mostly waits
#: on the disk (the GIL is released), and the journal commits concurrent fsyncs together. 500 partitions
#: flushed here: 136 ms with one thread, 40-60 with 4 or 8, 33-42 with 16 to 64 (then the ~70 us of Python
#: per flush binds).
DEFAULT_THREADS = 16
#: Partitions waiting at once from which the process-wide instance makes them durable together with one
#: ``syncfs`` (where :data:`pylog.storage.fs_sync.AVAILABLE`). ``benchmarks/bench_fsync.py`` here: with 4 files
#: one syncfs already beats 4 parallel fdatasyncs (0.13 against 0.38 ms); 8 leaves the few-partition case (and
#: its latency) to the per-partition path, which does not write back other files of the file system; that is
#: the value to turn it on with. Off (0) by default: a ``syncfs`` also waits for every other writer's dirty data on
#: the store's file system (21-155 ms on a shared root file system here), which a store on a file system of its
#: own does not pay.
DEFAULT_SYNCFS_PARTITIONS = 0


class Flushable(Protocol):
    """A partition, as the group commit uses it (:class:`pylog.partition.Partition`)."""

    def flush(self) -> None: ...

    def begin_flush(self) -> int | None: ...

    def end_flush(self, fd: int, sync: Callable[[int], None] | None = None) -> None: ...


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

    def __init__(self, threads: int = DEFAULT_THREADS, name: str = "pylog-group-commit",
                 syncfs_partitions: int = 0) -> None:
        """:param syncfs_partitions: from how many waiting partitions on make them durable together with one
            ``syncfs`` (0: never; ignored where :data:`pylog.storage.fs_sync.AVAILABLE` is False)."""
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = threads
        self._name = name
        self.set_syncfs_partitions(syncfs_partitions)
        self._reset()

    def set_syncfs_partitions(self, count: int) -> None:
        """From how many waiting partitions on the store-wide round runs (0: never; see the module docstring)."""
        if count < 0:
            raise ValueError(f"syncfs_partitions must be 0 or more, got {count}")
        self.syncfs_partitions = count if fs_sync.AVAILABLE else 0

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle_cond = threading.Condition(self._lock)  # wait_idle waits on it (same lock): no worker woken for it
        old: _Bell | None = getattr(self, "_bell", None)
        if old is not None:  # after a fork: the parent's workers and their bell are not here
            old.close()
        self._bell = _Bell()  # idle workers wait on it for work
        self._rung = 0  # wake-ups rung and not yet taken by a worker (at most the idle workers)
        self._pending: dict[int, _Pending] = {}  # by id() of the partition
        self._ready: collections.deque[_Pending] = collections.deque()  # waiting and not running, in order
        self._workers: list[threading.Thread] = []
        self._idle = 0  # workers waiting for work
        self._round = False  # a store-wide round is under way (invariant 2)
        #: Flushes done (one per partition per round, whatever the number of callers it covered).
        self.flushes = 0
        #: Store-wide rounds done (each one syncfs per file system), and the partitions they flushed.
        self.rounds = 0
        self.round_flushes = 0
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
        with self._lock:
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
            self._wake()

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
        with self._idle_cond:
            return self._idle_cond.wait_for(lambda: not self._pending, timeout)

    def stats(self) -> dict[str, int]:
        """``flushes`` done (partitions made durable, one per partition per flush), of which ``round_flushes`` in
        the ``rounds`` store-wide rounds; ``syncs``: the calls that made data durable (an fdatasync per partition
        flushed alone, a syncfs per round); ``requests`` completed, the partitions they ``requested`` in all."""
        with self._lock:
            return {"flushes": self.flushes, "rounds": self.rounds, "round_flushes": self.round_flushes,
                    "syncs": self.flushes - self.round_flushes + self.rounds,
                    "requests": self.requests, "requested": self.requested}

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
        bell = self._bell
        while True:
            bell.wait()
            with self._lock:
                self._rung -= 1
                if not self._ready or self._round:
                    continue  # another worker took it, or a round runs (its end rings again)
                self._idle -= 1
                together = self.syncfs_partitions and len(self._ready) >= self.syncfs_partitions
                batch = list(self._ready) if together else [self._ready.popleft()]
                if together:
                    self._ready.clear()
                    self._round = True
                taken = []
                for p in batch:
                    p.queued = False
                    p.running = True
                    taken.append((p, p.waiting))
                    p.waiting = []
            if together:
                errors = self._flush_together([p.part for p, _ in taken])
            else:
                errors = [None]
                try:
                    batch[0].part.flush()
                except Exception as exc:  # noqa: BLE001 - invariant 3: each caller gets it for this partition
                    errors[0] = exc
            for waiter in self._finish(taken, errors, bool(together)):
                try:
                    waiter.done(waiter.results)
                except Exception:  # noqa: BLE001 - a caller's callback must not stop the pool
                    log.exception("group commit: a completion callback failed")

    @staticmethod
    def _flush_together(parts: list[Any]) -> list[BaseException | None]:
        """A store-wide round (see the module docstring): the first half of each partition's flush, one syncfs per
        file system among them (an fdatasync where a file system has one partition), each one's check; per
        partition None or what its flush raised (invariant 3)."""
        errors: list[BaseException | None] = [None] * len(parts)
        by_device: dict[int, list[tuple[int, int]]] = {}
        for i, part in enumerate(parts):
            try:
                fd = part.begin_flush()
            except Exception as exc:  # noqa: BLE001 - invariant 3
                errors[i] = exc
                continue
            if fd is not None:
                try:
                    device = os.fstat(fd).st_dev
                except OSError:  # never seen (fd is a fresh dup): its own fdatasync then, under a key of its own
                    device = -1 - i
                by_device.setdefault(device, []).append((i, fd))
        for members in by_device.values():
            sync: Callable[[int], None] | None = None  # one partition on its file system: its own fdatasync
            if len(members) > 1:
                try:
                    began = time.perf_counter()
                    fs_sync.syncfs(members[0][1])
                    if metrics.state.on:  # one flush of many segment logs: counted once
                        metrics.fsynced(time.perf_counter() - began)
                    sync = fs_sync.check_written
                except OSError as exc:
                    sync = _failing(exc)
            for i, fd in members:
                try:
                    parts[i].end_flush(fd, sync)
                except Exception as exc:  # noqa: BLE001 - invariant 3
                    errors[i] = exc
        return errors

    def _finish(self, taken: list[tuple[_Pending, list[tuple[_Waiter, int]]]], errors: list[BaseException | None],
                together: bool) -> list[_Waiter]:
        """After a flush of each partition of ``taken`` (with the callers it covered): record it for those callers;
        requeue a partition if more came meanwhile. The callers now complete are returned."""
        completed = []
        with self._lock:
            self.flushes += len(taken)
            if together:
                if not self.rounds:
                    log.info("group commit: %d partitions waiting: made durable together by one syncfs of their "
                             "file system (store-wide rounds from %d on)", len(taken), self.syncfs_partitions)
                self._round = False
                self.rounds += 1
                self.round_flushes += len(taken)
            for (p, covered), error in zip(taken, errors, strict=True):
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
            self._start_workers()
            self._wake()
            if not self._pending:
                self._idle_cond.notify_all()
        return completed

    def _wake(self) -> None:
        """Under the lock: wake as many idle workers as the ready partitions need (one for a store-wide round),
        none while a round runs (its end wakes them): waking every worker for each request cost the event loop's
        thread the GIL hundreds of times a round. One system call for them all, made without the GIL
        (:class:`_Bell`)."""
        ready = len(self._ready)
        if self._round or not ready:
            return
        together = self.syncfs_partitions and ready >= self.syncfs_partitions
        want = min(1 if together else ready, self._idle) - self._rung
        if want > 0:
            self._rung += want
            self._bell.ring(want)


class _Bell:
    """How idle workers wait for work: a semaphore. On Linux an ``eventfd`` in semaphore mode, whose write wakes
    any number of waiters in one system call made without the GIL: a ``threading.Condition``'s notify wakes
    each waiter by releasing a lock while holding the GIL, and on this 2-core VM that was ~30% of the samples
    in which the submitting storage thread held the GIL (``py-spy --gil``, 500 partitions, acks=all): every
    other thread of the server waited meanwhile. Elsewhere a ``threading.Semaphore``."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_SEMAPHORE | os.EFD_CLOEXEC) if hasattr(os, "eventfd") else -1
        self._sem = threading.Semaphore(0)

    def ring(self, n: int) -> None:
        """Let ``n`` waiters (present or future) through."""
        if self._fd >= 0:
            os.eventfd_write(self._fd, n)
        else:
            self._sem.release(n)

    def wait(self) -> None:
        """Block until let through (a ring's unit is taken by one waiter)."""
        if self._fd < 0:
            self._sem.acquire()
            return
        while True:
            try:
                os.eventfd_read(self._fd)
                return
            except InterruptedError:  # a signal delivered to this thread: nothing was taken
                continue

    def close(self) -> None:
        """After a fork, in the child: the parent's bell is not the child's."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _failing(error: OSError) -> Callable[[int], None]:
    """What a partition's ``end_flush`` calls instead of a sync when its file system's syncfs failed: raise it."""
    def sync(fd: int) -> None:
        raise OSError(error.errno, f"syncfs of the file system failed: {error.strerror}")
    return sync


_DEFAULT = GroupCommit(syncfs_partitions=DEFAULT_SYNCFS_PARTITIONS)
os.register_at_fork(after_in_child=_DEFAULT._reset)  # invariant 4: the parent's threads are not here


def default() -> GroupCommit:
    """The process-wide instance: pylog's producers and ``pylog serve`` share it, so one fsync covers them all."""
    return _DEFAULT


def sync(parts: Sequence[Any], timeout: float | None = None) -> list[BaseException | None]:
    """Flush ``parts`` through the process-wide group commit and wait (see :meth:`GroupCommit.sync`)."""
    return _DEFAULT.sync(parts, timeout)
