"""A store's budget of file descriptors: partitions open their files on demand, the least recently used let go.

A partition that was written holds about :data:`PER_PARTITION` descriptors (the writer lock and its
hand-over probe, the wake-up file's mapping, the active segment's log for writing, reading and its mapping,
the two index mappings: CPython's ``mmap`` keeps a descriptor of its own for as long as the mapping lives), and a
read segment three or four more. A store that touches thousands of partitions would run the process out of
descriptors (``EMFILE``), and with it every socket and file the process opens. :class:`HandleCache` keeps
the partitions this store used in least-recently-used order and, past its capacity, asks the oldest to let
go of their files (:meth:`PartitionInternals.release_handles`); they open them again on their next use.

Invariants:
1. The partitions listed hold at most ``budget`` descriptors as counted (:data:`PER_PARTITION` each, plus
   :data:`SEGMENT_COST` per sealed segment a read keeps open), except while the most recent
   ``_MIN_PARTITIONS`` alone are over it, and except partitions that were busy when their turn to let go
   came (a retention or compaction pass, an append in another thread): they stay listed, as the most
   recently used, and let go when their turn comes again. The order is approximate: a partition touched
   less than a quarter of the capacity ago keeps its place (:meth:`HandleCache.fresh`).
2. Letting go never closes a descriptor another thread may be using (the partition drops its segment objects,
   which close when the last read holding them ends) and keeps the crash-safety invariants of a hand-over:
   a writer lets go of its lock exactly as :meth:`Partition.release_writer` does (a clean checkpoint,
   rolled segments fsynced first, the active segment fsynced by name by the handle's next flush).
3. No deadlock: :meth:`HandleCache.touch` is called before the touching partition takes any of its locks,
   and lets go of the others with non-blocking lock attempts only.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import collections
import itertools
import logging
import resource
import threading
from typing import Protocol

from ..errors import RateLimitedLog

__all__ = ["HandleCache", "Releasable", "PER_PARTITION", "SEGMENT_COST", "default_budget", "descriptor_limit",
           "RateLimitedLog"]

log = logging.getLogger("pylog.handles")

#: Descriptors a partition is counted for (see the module docstring: 7 or 8 for a written one), plus
#: SEGMENT_COST for each sealed segment its reads keep open.
PER_PARTITION = 10
#: Descriptors of a sealed segment a read keeps open: its log, the log's mapping and two index mappings.
SEGMENT_COST = 4
#: The fewest partitions a cache keeps open, whatever the budget.
_MIN_PARTITIONS = 4


class Releasable(Protocol):
    """What the cache needs of a partition."""

    def release_handles(self) -> bool:
        """Let go of every file descriptor and mapping; False when busy (try again later)."""
        ...


def descriptor_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` (how many descriptors it may have open; 2**20 when unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY or soft <= 0 else soft


def default_budget(limit: int | None = None) -> int:
    """The default ``max.open.descriptors``: half of ``limit`` (default: :func:`descriptor_limit`), the
    other half left to sockets, the store's own files, the interpreter and the application."""
    return max(PER_PARTITION * _MIN_PARTITIONS, (descriptor_limit() if limit is None else limit) // 2)


class HandleCache:
    """The partitions of one store that hold files, least recently used first, each with the descriptors it
    is counted for (see the module docstring).

    ``budget``: descriptors the store's partitions may hold (``max.open.descriptors``); 0: :func:`default_budget`.
    """

    def __init__(self, budget: int = 0) -> None:
        self.budget = budget or default_budget()
        #: Written partitions the budget holds at once (what the server's start-up line reports).
        self.capacity = max(_MIN_PARTITIONS, self.budget // PER_PARTITION)
        self._lru: collections.OrderedDict[Releasable, int] = collections.OrderedDict()
        self._total = 0  # descriptors counted for the partitions listed
        self._lock = threading.Lock()
        #: Real touches so far: a partition touched fewer than ``_slack`` ago need not move (see :meth:`fresh`).
        self.ticks = 0
        self._slack = max(1, self.capacity // 4)
        #: Partitions let go of since the cache was made (for tests, health and the operator).
        self.released = 0

    def figures(self) -> dict[str, int]:
        """How this process may spend file descriptors: ``limit`` (its ``RLIMIT_NOFILE``), ``budget`` (what the
        store's partitions keep at most), ``per_partition`` (about this many per partition in use) and
        ``partitions`` (partitions open at once within the budget): what ``pylog serve`` logs at start."""
        return {"limit": descriptor_limit(), "budget": self.budget, "per_partition": PER_PARTITION,
                "partitions": self.capacity}

    def __len__(self) -> int:
        return len(self._lru)

    def fresh(self, tick: int) -> bool:
        """True when a partition whose last :meth:`touch` returned ``tick`` is still among the most recently
        used (fewer than a quarter of the capacity touched since): it need not touch again, unless its count
        of descriptors changed. Lock-free, for the read and append paths."""
        return self.ticks - tick < self._slack

    def touch(self, part: Releasable, weight: int = PER_PARTITION) -> int:
        """``part`` is about to open or use its files, and is counted for ``weight`` descriptors: make it the
        most recently used and let go of the least recently used others while the count is past the budget
        (always keeping the most recent :data:`_MIN_PARTITIONS`). Call before taking any lock of ``part``.
        Returns the tick for :meth:`fresh`."""
        lru = self._lru
        with self._lock:
            self.ticks += 1
            tick = self.ticks
            self._total += weight - lru.pop(part, 0)
            lru[part] = weight
            if self._total <= self.budget or len(lru) <= _MIN_PARTITIONS:
                return tick
            victims = self._oldest(self._total - self.budget, part)
        self._let_go(victims)
        return tick

    def shrink(self, count: int) -> int:
        """Let go of the ``count`` least recently used partitions now (after an ``EMFILE`` elsewhere in the
        process: a socket's accept); returns how many did."""
        with self._lock:
            victims = list(self._lru)[:count]
        return self._let_go(victims)

    def forget(self, part: Releasable) -> None:
        """``part`` closed: it holds nothing any more."""
        with self._lock:
            self._total -= self._lru.pop(part, 0)

    def _oldest(self, excess: int, spare: Releasable) -> list[Releasable]:
        """The least recently used partitions counted for at least ``excess`` descriptors, never ``spare`` nor
        the most recent :data:`_MIN_PARTITIONS`."""
        out: list[Releasable] = []
        # Lazily, in LRU order: copying the whole list on every touch past the budget made a store that
        # cycles through thousands of partitions quadratic; the victims are found among the first few.
        candidates = itertools.islice(self._lru.items(), max(0, len(self._lru) - _MIN_PARTITIONS))
        for p, weight in candidates:
            if excess <= 0:
                break
            if p is not spare:
                out.append(p)
                excess -= weight
        return out

    def _let_go(self, victims: list[Releasable]) -> int:
        done = 0
        for p in victims:
            try:
                ok = p.release_handles()
            except Exception:  # a partition that failed or was deleted under us holds nothing worth keeping
                log.debug("pylog: letting go of %r's files failed", p, exc_info=True)
                ok = True
            with self._lock:
                if ok:
                    weight = self._lru.pop(p, None)
                    if weight is not None:
                        self._total -= weight
                        self.released += 1
                        done += 1
                elif p in self._lru:
                    self._lru.move_to_end(p)  # busy: its turn comes again after the others (invariant 1)
        return done
