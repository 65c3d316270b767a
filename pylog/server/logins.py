"""Login throttling for ``pylog serve``: SASL steps off the event loop, one at a time per client address, and
a growing delay after failed logins.

A SASL step can be expensive: a PLAIN login of a user with only pre-salted SCRAM entries runs PBKDF2 (up to
16,384 rounds of SHA-512), and so does one of an unknown user when such users exist. On the event loop, a few
connections sending wrong passwords in a loop delayed every other client's requests about twelvefold, and
nothing limited how fast passwords could be guessed. :class:`LoginGuard` takes every step of every exchange.

Invariants:
- Every SASL step (:meth:`~pylog.server.auth.SaslSession.step`) runs in the guard's small thread pool, never on
  the event loop (``hashlib``'s PBKDF2 releases the GIL: the loop keeps serving while it runs).
- One client address has at most one step under way; its other connections' steps wait their turn. So one
  address holds at most one of the pool's threads, whatever number of connections it opens.
- A failed step (an :class:`~pylog.errors.AuthenticationError`) is raised only after a delay: Kafka's
  ``connection.failed.authentication.delay.ms`` for the first failure from an address, doubled for each
  further consecutive failure up to ``max_delay_ms``, and the address's next step waits out the same delay
  (also when the failed client disconnected meanwhile). One address thus tries at most about one password per
  ``max_delay_ms`` once it has failed a few times. A successful login clears the address's failures, and so
  does :data:`FORGET_AFTER_S` seconds without a failure.
- The per-address table holds at most ``max_addresses`` entries: beyond that, the least recently used entry
  with no step under way is dropped (its failures are forgotten: a bound on memory, not on guessing from many
  addresses, which the pool's size and the connection limits bound).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
from dataclasses import dataclass, field

from ..errors import AuthenticationError
from .auth import SaslSession

__all__ = ["LoginGuard", "FORGET_AFTER_S"]

#: Seconds without a failed login after which an address's failures are forgotten.
FORGET_AFTER_S = 600.0


@dataclass
class _Address:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failures: int = 0
    not_before: float = 0.0  # loop time before which the address's next step does not start
    last_failure: float = 0.0
    active: int = 0  # steps waiting for or holding the lock


class LoginGuard:
    """Runs SASL steps for the connections of one server (see the module docstring). Made and used on the
    server's event loop; :meth:`close` when the server stops."""

    def __init__(self, *, threads: int = 2, delay_ms: int = 100, max_delay_ms: int = 5000,
                 max_addresses: int = 10_000) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="pylog-serve-login")
        self._delay = delay_ms / 1000.0
        self._max_delay = max(max_delay_ms, delay_ms) / 1000.0
        self._max_addresses = max_addresses
        self._table: collections.OrderedDict[str, _Address] = collections.OrderedDict()

    def failures(self, address: str) -> int:
        """Consecutive failed logins from ``address`` that the guard remembers."""
        entry = self._table.get(address)
        return 0 if entry is None else entry.failures

    def __len__(self) -> int:
        return len(self._table)

    def _entry(self, address: str, now: float) -> _Address:
        entry = self._table.get(address)
        if entry is None:
            entry = self._table[address] = _Address()
            self._trim()
        else:
            self._table.move_to_end(address)
            if entry.failures and now - entry.last_failure > FORGET_AFTER_S:
                entry.failures = 0
        return entry

    def _trim(self) -> None:
        excess = len(self._table) - self._max_addresses
        if excess <= 0:
            return
        idle = list(itertools.islice((a for a, e in self._table.items() if e.active == 0), excess))  # LRU first
        for address in idle:
            del self._table[address]

    def delay_after(self, failures: int) -> float:
        """Seconds a failure answer is held back after ``failures`` consecutive failures (>= 1)."""
        return min(self._delay * 2.0 ** min(failures - 1, 30), self._max_delay)

    async def step(self, address: str, session: SaslSession, token: bytes) -> tuple[bytes, bool]:
        """``session.step(token)`` in the pool, in ``address``'s turn; a failure is raised after the back-off."""
        loop = asyncio.get_running_loop()
        entry = self._entry(address, loop.time())
        entry.active += 1
        try:
            async with entry.lock:
                wait = entry.not_before - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    result = await loop.run_in_executor(self._pool, session.step, token)
                except AuthenticationError:
                    now = loop.time()
                    entry.failures += 1
                    entry.last_failure = now
                    delay = self.delay_after(entry.failures)
                    entry.not_before = now + delay
                    await asyncio.sleep(delay)
                    raise
                if session.done:
                    entry.failures = 0
                    entry.not_before = 0.0
                return result
        finally:
            entry.active -= 1

    def close(self) -> None:
        """Stop the pool (a step under way finishes; its connection is closing)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
