"""Client quotas: byte-rate limits per client id, enforced by delaying the client (Kafka's quotas).

A quota caps the bytes per second that the clients sharing one ``client_id`` produce (kind ``"produce"``)
or consume (kind ``"consume"``) through one :class:`~pylog.store.Store`. As on a Kafka broker, work over the
limit is not refused: the client's bytes are recorded, its rate is measured over a sliding window, and
when that rate is over the limit the client is delayed just long enough to bring it back::

    delay = (observed - limit) / limit * window

``observed`` is the bytes recorded in the window divided by ``window``, the time the window spans, so the
delay is the ``X`` that solves ``observed * window / (window + X) == limit``. The window is made of
``window_num`` samples of ``window_size_s`` seconds (Kafka's ``quota.window.num`` = 11 and
``quota.window.size.seconds`` = 1) and is measured as Kafka's ``Rate`` does:

- A sample starts at its first record and is complete ``window_size_s`` later; the next record then
  starts a new sample in the oldest slot. A sample older than ``window_num * window_size_s`` is forgotten.
- ``window`` is the time since the oldest remaining sample started, but never less than
  ``window_num - 1`` full samples (plus the current one's elapsed part): a client that has just started
  is not judged on one second of traffic. The first ``(window_num - 1) * window_size_s * limit`` bytes
  therefore pass without delay (a burst allowance, as in Kafka), after which the long-run rate converges
  to the limit.

Where it is enforced: a producer records each drain's payload (values, keys, headers) and waits the delay
before completing the drain's futures and starting the next (a Kafka broker delays its produce response
the same way), see :mod:`pylog.clients.producer`; a consumer's fetch path calls
``quotas.throttle(client_id, CONSUME, nbytes)`` (or :meth:`QuotaManager.record` to wait on its own terms)
on the manager its store handed it when it was made (``store.producer()``, ``store.consumer()``).

Invariants:

- One budget per (client id, kind) per store: every producer (or consumer) of a store with the same
  client id records into one window, so two producers with one client id share the limit.
- A client without a quota costs a dict miss per call: no lock, no clock read, never delayed.
- The delay is zero while the observed rate is at or under the limit, and never negative. It is the wait
  after which the rate over the window, grown by that wait, is back at the limit (Kafka's assumption);
  in steady state a throttled client's long-run rate converges to the limit. Delays are not capped
  (Kafka's byte-rate quotas are not either), and a single request larger than ``limit * window`` is
  forgotten before it is fully paid for (use a window that holds the largest request).
- Quotas live in memory in their :class:`QuotaManager` (one per :class:`~pylog.store.Store` object): they
  are not persisted and not shared with other processes or other store handles.

Thread-safe: one lock per manager, taken only for clients that have a quota.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

from ..errors import InvalidArgumentError, InvalidConfigError

__all__ = ["QuotaManager", "throttle_delay", "PRODUCE", "CONSUME", "REQUEST", "QUOTA_WINDOW_NUM",
           "QUOTA_WINDOW_SIZE_S"]

#: The kinds of traffic a quota limits. REQUEST is ``pylog serve``'s request quota (Kafka's
#: ``request_percentage``): recorded in percent-seconds of handling time, limited in percent of one thread.
PRODUCE = "produce"
CONSUME = "consume"
REQUEST = "request"
_KINDS = frozenset((PRODUCE, CONSUME, REQUEST))
#: Kafka's defaults: quota.window.num (samples) and quota.window.size.seconds (seconds per sample).
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_S = 1.0
#: The window is never taken as shorter than this (Kafka: 1 ms), so a rate is always defined.
_MIN_WINDOW_S = 0.001


class _Window:
    """Kafka's ``SampledStat`` behind a ``Rate``: up to ``num`` samples, each a start time and a byte total.

    Samples are created as records arrive (at most ``num``; then the oldest slot is reused), so an idle
    client holds one sample. Not thread-safe: the manager's lock guards it.

    ``total`` is the sum of ``totals`` and ``oldest`` the least of ``starts``, kept as samples change, so that
    recording and measuring within one sample cost O(1) (a ``pylog serve`` request quota records twice per
    request); both are recomputed from the samples whenever a sample starts or is forgotten (at most once per
    ``size`` seconds), so the running sum never drifts further than one sample's additions.
    """

    __slots__ = ("starts", "totals", "current", "total", "oldest")

    def __init__(self, now: float) -> None:
        self.starts = [now]
        self.totals = [0.0]
        self.current = 0
        self.total = 0.0
        self.oldest = now

    def record(self, now: float, nbytes: float, num: int, size: float) -> None:
        cur = self.current
        if now - self.starts[cur] >= size:  # the current sample is complete: the next one starts now
            cur = self.current = (cur + 1) % num
            if cur == len(self.starts):
                self.starts.append(now)
                self.totals.append(0.0)
            else:
                self.starts[cur] = now
                self.totals[cur] = 0.0
            self.totals[cur] += nbytes
            self._resum()
            return
        self.totals[cur] += nbytes
        self.total += nbytes

    def add(self, now: float, nbytes: float, num: int, size: float) -> tuple[float, float]:
        """:meth:`record`, then :meth:`measure`: in one call while the current sample is open and none is
        obsolete (the usual case, O(1)), else through both."""
        cur = self.current
        if now - self.starts[cur] >= size or now - self.oldest >= num * size:
            self.record(now, nbytes, num, size)
            return self.measure(now, num, size)
        self.totals[cur] += nbytes
        self.total += nbytes
        return self.total, _span(now - self.oldest, num, size)

    def _resum(self) -> None:
        self.total = sum(self.totals)
        self.oldest = min(self.starts)

    def measure(self, now: float, num: int, size: float) -> tuple[float, float]:
        """(bytes in the window, the window's length in seconds) at ``now``; forgets obsolete samples."""
        expire = num * size
        if now - self.oldest >= expire:  # some sample is obsolete (none is while the oldest is not)
            starts, totals = self.starts, self.totals
            for i, start in enumerate(starts):
                if now - start >= expire:  # Kafka resets an obsolete sample to start now, empty
                    starts[i] = now
                    totals[i] = 0.0
            self._resum()
        return self.total, _span(now - self.oldest, num, size)


def _span(elapsed: float, num: int, size: float) -> float:
    """The window's length for ``elapsed`` seconds since its oldest sample started: never less than ``num - 1``
    full samples plus the current one's elapsed part, nor than :data:`_MIN_WINDOW_S`."""
    full = int(elapsed // size)
    if full < num - 1:
        elapsed += (num - 1 - full) * size
    return elapsed if elapsed > _MIN_WINDOW_S else _MIN_WINDOW_S


class QuotaManager:
    """Byte-rate quotas of one store's clients, keyed by ``(client_id, kind)``; kind is ``"produce"`` or
    ``"consume"``. Thread-safe.

    ``clock`` (seconds, monotonic; default :func:`time.monotonic`) and ``sleep`` (default
    :func:`time.sleep`) are attributes a test may replace with a synthetic clock.
    """

    def __init__(self, window_num: int = QUOTA_WINDOW_NUM, window_size_s: float = QUOTA_WINDOW_SIZE_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        """:raises InvalidConfigError: for ``window_num < 1`` or ``window_size_s <= 0``."""
        self._lock = threading.Lock()
        # Keyed by (client id, kind); a client id of None (a client without one) never has a quota.
        self._limits: dict[tuple[str | None, str], float] = {}
        self._windows: dict[tuple[str | None, str], _Window] = {}
        self.clock = clock
        self.sleep = sleep
        self.window_num = QUOTA_WINDOW_NUM
        self.window_size_s = QUOTA_WINDOW_SIZE_S
        self.configure_window(window_num, window_size_s)

    def configure_window(self, window_num: int = QUOTA_WINDOW_NUM, window_size_s: float = QUOTA_WINDOW_SIZE_S) -> None:
        """Use ``window_num`` samples of ``window_size_s`` seconds from now on; forgets what was recorded.

        :raises InvalidConfigError: for ``window_num < 1`` or ``window_size_s <= 0``.
        """
        if not isinstance(window_num, int) or isinstance(window_num, bool) or window_num < 1:
            raise InvalidConfigError(f"quota window_num must be a positive int, got {window_num!r}")
        if not _positive(window_size_s):
            raise InvalidConfigError(f"quota window_size_s must be a positive number, got {window_size_s!r}")
        with self._lock:
            self.window_num = window_num
            self.window_size_s = float(window_size_s)
            self._windows.clear()

    # ------------------------------------------------------------------ configuration

    def set_quota(self, client_id: str, kind: str, byte_rate: float | None) -> None:
        """Limit ``client_id``'s ``kind`` traffic to ``byte_rate`` bytes/s; ``None`` removes the limit.

        Changing a limit keeps what was recorded (the new limit applies to the same window); removing it
        forgets the window.
        :raises InvalidArgumentError: for a client id that is not a str or an unknown kind (also a
            TypeError / ValueError, what they raised before).
        :raises InvalidConfigError: for a rate that is not a positive finite number.
        """
        if not isinstance(client_id, str):
            raise InvalidArgumentError(f"client_id must be a str, got {type(client_id).__name__}")
        _check_kind(kind)
        key = (client_id, kind)
        if byte_rate is None:
            with self._lock:
                self._limits.pop(key, None)
                self._windows.pop(key, None)
            return
        if not _positive(byte_rate):
            raise InvalidConfigError(f"{kind} byte rate of {client_id!r} must be a positive number of bytes/s, "
                                     f"got {byte_rate!r}")
        with self._lock:
            self._limits[key] = float(byte_rate)

    def quota(self, client_id: str, kind: str) -> float | None:
        """The limit in bytes/s of ``client_id``'s ``kind`` traffic, or None."""
        _check_kind(kind)
        return self._limits.get((client_id, kind))

    def quotas(self) -> dict[str, dict[str, float]]:
        """Every limit: ``{client_id: {"producer_byte_rate": ..., "consumer_byte_rate": ...}}`` (a client
        appears with the kinds it has a limit for)."""
        names = {PRODUCE: "producer_byte_rate", CONSUME: "consumer_byte_rate", REQUEST: "request_percentage"}
        out: dict[str, dict[str, float]] = {}
        with self._lock:
            items = sorted((c, k, rate) for (c, k), rate in self._limits.items() if c is not None)
        for client_id, kind, rate in items:
            out.setdefault(client_id, {})[names[kind]] = rate
        return out

    def active(self, client_id: str | None, kind: str) -> bool:
        """Whether ``client_id`` has a ``kind`` quota (a dict lookup: for callers that must do work, such as
        counting bytes, before :meth:`record`)."""
        return (client_id, kind) in self._limits

    # ------------------------------------------------------------------ recording

    def record(self, client_id: str | None, kind: str, nbytes: float, now: float | None = None) -> float:
        """Record ``nbytes`` of ``client_id``'s ``kind`` traffic now; return the delay in seconds the client
        should wait before its next request (0.0 when within its quota or without one). Does not sleep.
        ``now``: the time on :attr:`clock` already read by the caller (one read for several records), else
        the clock is read here.

        :raises ValueError: for an unknown kind.
        """
        key = (client_id, kind)
        limit = self._limits.get(key)
        if limit is None:
            if kind not in _KINDS:
                _check_kind(kind)
            return 0.0
        with self._lock:
            limit = self._limits.get(key)  # removed meanwhile: nothing to enforce
            if limit is None:
                return 0.0
            if now is None:
                now = self.clock()
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = _Window(now)
            total, span = window.add(now, nbytes, self.window_num, self.window_size_s)
        observed = total / span
        return 0.0 if observed <= limit else (observed - limit) / limit * span  # throttle_delay(), inlined

    def throttle(self, client_id: str | None, kind: str, nbytes: float) -> float:
        """:meth:`record`, then sleep the delay (with :attr:`sleep`); returns the delay slept, in seconds.

        For a client's fetch or produce path: ``quotas.throttle(client_id, "consume", nbytes)``.
        """
        delay = self.record(client_id, kind, nbytes)
        if delay > 0:
            self.sleep(delay)
        return delay

    def observed_rate(self, client_id: str, kind: str) -> float:
        """``client_id``'s ``kind`` rate in bytes/s over the window, as the quota sees it now (0.0 without
        a quota: nothing is recorded for such clients)."""
        _check_kind(kind)
        with self._lock:
            window = self._windows.get((client_id, kind))
            if window is None:
                return 0.0
            total, span = window.measure(self.clock(), self.window_num, self.window_size_s)
        return total / span


def throttle_delay(observed: float, limit: float, window: float) -> float:
    """Kafka's throttle time: the delay ``X`` (seconds) with ``observed * window / (window + X) == limit``,
    i.e. ``(observed - limit) / limit * window``; 0.0 when ``observed <= limit``."""
    if observed <= limit:
        return 0.0
    return (observed - limit) / limit * window


def _check_kind(kind: str) -> None:
    if kind not in _KINDS:
        raise InvalidArgumentError(f"quota kind must be {PRODUCE!r}, {CONSUME!r} or {REQUEST!r}, got {kind!r}")


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
