"""The resource bounds of ``pylog serve`` that span connections: the memory pool of requests and answers
(Kafka's ``queued.max.request.bytes``), the connection counts (``max.connections``, ``max.connections.per.ip``),
the rate of topic and partition creation and the floors of topic configs set by clients. (Rate-limited logging
is :class:`pylog.errors.RateLimitedLog`.)

Everything here but :class:`CreationGuard` (the storage pool's threads check creations) is used on the
server's event loop only, without locks: the connections and handlers call it from coroutines and callbacks.

Invariants:
1. :class:`BytePool`: ``used`` is the sum of what the holders took and have not given back; a take that does
   not fit is refused (the caller waits for :meth:`BytePool.when_free`) unless the pool is empty, so one
   request as large as the pool is always served eventually. ``used`` never goes below 0.
2. :class:`ConnectionCounts`: a connection is admitted only while fewer than ``max_connections`` are open and
   fewer than ``max_connections_per_ip`` from its address; every admitted connection is released once.
3. :class:`CreationGuard`: clients create and delete at most ``rate`` partitions per second on average (one
   bucket for both, as Kafka's controller mutation quota, KIP-599), with bursts up to the bucket's capacity,
   and never create past ``max_topics`` / ``max_partitions`` as last counted; a creation or deletion that does
   not fit takes nothing.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from ..config import SETTINGS, parse_value
from ..errors import InvalidConfigError

__all__ = ["BytePool", "ConnectionCounts", "CreationGuard", "check_client_config",
           "CLIENT_CONFIG_FLOORS"]

#: Floors for topic configs a client sets (CreateTopics, AlterConfigs, IncrementalAlterConfigs), above the
#: library's own minimums: values below them make a file per few records (``segment.bytes=14``: 4,504 files
#: from 1,500 produces). Kafka 4.0 raised ``segment.bytes``' minimum to 1 MiB and KIP-1030 plans 1 minute for
#: ``segment.ms`` and ``max.compaction.lag.ms``; ``segment.index.bytes`` at 64 KiB keeps an index from filling
#: (and rolling its segment) before 8,192 batches even with ``index.interval.bytes=0``. The library (a user
#: opening the store) may still set anything its own checks accept.
CLIENT_CONFIG_FLOORS: dict[str, int] = {
    "segment.bytes": 1 << 20,
    "segment.ms": 60_000,
    "segment.index.bytes": 64 << 10,
    "max.compaction.lag.ms": 60_000,
}


def check_client_config(config: dict[str, Any]) -> None:
    """Raise InvalidConfigError when a value a client sets is below :data:`CLIENT_CONFIG_FLOORS`."""
    for key, floor in CLIENT_CONFIG_FLOORS.items():
        if key in config and config[key] is not None:
            value = parse_value(SETTINGS[key], config[key])
            if value < floor:
                raise InvalidConfigError(f"{key}={value}: this server accepts at least {floor} from clients (a "
                                         "smaller value makes a file per few records)")


class BytePool:
    """Bytes held by requests being received, queued or answered, and by answers being built or sent, across
    all connections (Kafka's ``queued.max.request.bytes``). Invariant 1.

    Three bands, so that no kind of holder can starve the others: requests larger than :data:`SMALL` leave
    :attr:`reserve` bytes free (a quarter of the pool, less when the largest request needs it), answers half
    of that, and small requests (ApiVersions, Metadata, heartbeats, commits) may use it all. However many
    large requests wait for room (or are held, half sent, until their deadline), answers and small requests
    still fit."""

    #: Takes up to this size are small requests.
    SMALL = 64 << 10

    def __init__(self, capacity: int, largest: int = 0) -> None:
        self.capacity = capacity
        self.reserve = min(capacity // 4, capacity - largest)
        self.used = 0
        self._waiters: collections.deque[Callable[[], None]] = collections.deque()

    def try_take(self, n: int) -> bool:
        """Take ``n`` bytes of a request if they fit (or the pool is empty); False, taking nothing, otherwise."""
        if self.used and n > self.capacity - self.used - (0 if n <= self.SMALL else self.reserve):
            return False
        self.used += n
        return True

    def take_up_to(self, n: int, at_least: int) -> int:
        """For an answer: take ``min(n, room)`` bytes when that is at least ``min(n, at_least)`` (or the pool is
        empty); 0 otherwise."""
        got = n if not self.used else max(0, min(n, self.capacity - self.used - self.reserve // 2))
        if got < min(n, at_least) or got <= 0:
            return 0
        self.used += got
        return got

    def force(self, n: int) -> None:
        """Count ``n`` more bytes whether or not they fit (an answer's first record, which Kafka always sends)."""
        self.used += n

    def give(self, n: int) -> None:
        """Return ``n`` bytes; the callbacks waiting for room are called (each takes again or waits again)."""
        if n <= 0:
            return
        self.used = max(0, self.used - n)
        waiters, self._waiters = self._waiters, collections.deque()
        for w in waiters:
            w()

    def when_free(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, at the next :meth:`give`."""
        self._waiters.append(callback)


class ConnectionCounts:
    """Kafka's ``max.connections`` and ``max.connections.per.ip``. Invariant 2."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: collections.Counter[str] = collections.Counter()

    def admit(self, host: str) -> str | None:
        """Count a new connection from ``host``; the setting it would exceed (and nothing counted) otherwise."""
        if self.total >= self.max_connections:
            return "max_connections"
        if self.per_ip[host] >= self.max_per_ip:
            return "max_connections_per_ip"
        self.total += 1
        self.per_ip[host] += 1
        return None

    def release(self, host: str) -> None:
        self.total -= 1
        self.per_ip[host] -= 1
        if self.per_ip[host] <= 0:
            del self.per_ip[host]


class CreationGuard:
    """Topic and partition creation by clients: the store's totals (``max_topics``, ``max_partitions``) and a
    token bucket of partitions (``rate`` per second, up to ``burst`` at once). Thread-safe: creations are checked
    in the storage pool. Invariant 3.

    The totals are recounted (``count()``, in the caller's thread) when older than :data:`RECOUNT_S` and
    raised by every creation allowed here, so topics made or deleted by other processes are seen within that
    time; a creation allowed here that then fails (the topic existed) is counted until the next recount."""

    #: Seconds between two counts of the store's topics and partitions.
    RECOUNT_S = 10.0

    def __init__(self, max_topics: int, max_partitions: int, rate: float, burst: float,
                 count: Callable[[], tuple[int, int]], clock: Callable[[], float] = time.monotonic) -> None:
        self.max_topics, self.max_partitions = max_topics, max_partitions
        self.rate, self.burst = rate, burst
        self._count = count
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = burst
        self._at = clock()
        self._counted_at: float | None = None
        self._topics = self._partitions = 0

    def refusal(self, topics: int, partitions: int) -> tuple[str, bool] | None:
        """None when ``topics`` new topics with ``partitions`` partitions in all fit (they are counted); otherwise
        why not, and whether it is the rate (retriable later) rather than a total."""
        with self._lock:
            now = self._clock()
            if self._counted_at is None or now - self._counted_at > self.RECOUNT_S:
                self._topics, self._partitions = self._count()
                self._counted_at = now
            if self._topics + topics > self.max_topics:
                return f"the store has {self._topics} topics and this server makes at most {self.max_topics} " \
                    "(max_topics)", False
            if self._partitions + partitions > self.max_partitions:
                return f"the store has {self._partitions} partitions and this server makes at most " \
                    f"{self.max_partitions} (max_partitions)", False
            refused = self._take(now, partitions, "created")
            if refused is not None:
                return refused, True
            self._topics += topics
            self._partitions += partitions
            return None

    def deletion_refusal(self, partitions: int) -> str | None:
        """None when a topic of ``partitions`` partitions may be deleted now (taken from the same bucket as
        creations: Kafka's controller mutation quota covers DeleteTopics too); otherwise why not (retriable)."""
        with self._lock:
            refused = self._take(self._clock(), partitions, "deleted")
            if refused is None:
                self._topics = max(0, self._topics - 1)
                self._partitions = max(0, self._partitions - partitions)
            return refused

    def _take(self, now: float, partitions: int, what: str) -> str | None:
        # A topic larger than the whole bucket is allowed once the bucket is full (else it never could be).
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if partitions > self._tokens and self._tokens < self.burst:
            return f"{partitions} partitions exceed what may be {what} now (controller_mutation_rate=" \
                f"{self.rate:g} per second); retry later"
        self._tokens -= partitions
        return None
