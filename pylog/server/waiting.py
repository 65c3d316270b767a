"""Long-poll fetches: waking a Fetch that waits for records as soon as an append makes them readable.

A Fetch with nothing to return (or less than its ``min_bytes``) waits up to its ``max_wait_ms``. Three kinds
of append can end the wait, and each reaches the waiter its own way:

- the server's own appends (Kafka producers): the storage thread that made them asks
  :meth:`FetchWaiters.waiting_on` and, where a fetch waits, hands :meth:`FetchWaiters.appended` to the event loop
  at once (one hop, before any fsync: this is the end-to-end latency path), which resolves the waiters;
- appends by other processes (pylog producers, the CLI, Spark writers): one watcher thread sleeps in the
  partitions' wake-ups (:func:`pylog.partition.watch_appends`, one ``futex_waitv`` over all waited partitions)
  and hands the news to the loop with ``call_soon_threadsafe``;
- appends by other handles of this process, or on a machine without those wake-ups: the same thread
  compares log ends, every :data:`POLL_S` seconds at first and backing off to :data:`POLL_MAX_S` while
  nothing arrives (an idle consumer's long poll costs a few wake-ups a second, not hundreds).

Invariants:
- A waiter is resolved at most once, on the loop thread, and never blocks the loop.
- A registration that races an append is not lost: the fetch handler checks the log end after it registers
  (:meth:`FetchWaiters.wait` does), and the watcher re-reads log ends after every sleep.
- The watcher thread exists only while the server runs, sleeps only while some fetch waits, and stops on
  :meth:`FetchWaiters.close` within one sleep slice.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from ..partition import Partition, watch_appends

__all__ = ["FetchWaiters", "POLL_S", "POLL_MAX_S"]

log = logging.getLogger("pylog.server")

#: How often the watcher compares log ends when no wake-up can reach it (seconds).
POLL_S = 0.002
#: The longest such interval, reached by doubling while nothing arrives (seconds).
POLL_MAX_S = 0.025
#: Longest sleep of the watcher before it looks at new registrations again (seconds).
_SLICE_S = 0.05

Key = tuple[str, int]


class _Waiter:
    __slots__ = ("future", "wants", "signalled")

    def __init__(self, future: asyncio.Future[None], wants: dict[Key, tuple[Partition, int]]) -> None:
        self.future = future
        self.wants = wants  # (topic, partition) -> (its handle, the offset whose arrival ends the wait)
        self.signalled = False  # the watcher handed it to the loop already (it is not watched again)


class FetchWaiters:
    """The fetches waiting for appends, and the thread that watches other writers for them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._by_key: dict[Key, set[_Waiter]] = {}
        self._lock = threading.Lock()  # guards _by_key between the loop and the watcher thread
        self._changed = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._poll = POLL_S  # the watcher's current polling interval (its thread only)

    async def wait(self, wants: dict[Key, tuple[Partition, int]], timeout: float) -> bool:
        """Wait until one of ``wants``' partitions has a record at or past its offset, or ``timeout`` seconds
        pass. True when woken by data (the caller reads again), False on timeout."""
        if not wants or timeout <= 0:
            return False
        fut: asyncio.Future[None] = self._loop.create_future()
        waiter = _Waiter(fut, wants)
        with self._lock:
            for key in wants:
                self._by_key.setdefault(key, set()).add(waiter)
        try:
            # After registering: an append that landed between the caller's read and now is seen here.
            if any(p.log_end_offset > offset for p, offset in wants.values()):
                return True
            self._ensure_thread()
            self._changed.set()
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
                return True
            except asyncio.TimeoutError:
                return False
        finally:
            self._forget(waiter)

    def waiting_on(self, topic: str, partition: int) -> bool:
        """From any thread (the storage pool, right after an append): whether a fetch waits for ``topic``-
        ``partition``, so that the append is worth a call of :meth:`appended` on the loop. A fetch registering
        after this answered False is not lost: it registers, then reads the log end, which the append has
        advanced already (invariant 2)."""
        return (topic, partition) in self._by_key  # one dict lookup: atomic under the GIL

    def appended(self, topic: str, partition: int, log_end: int) -> None:
        """On the loop, after this server appended to ``topic``-``partition`` up to ``log_end``."""
        with self._lock:
            waiters = self._by_key.get((topic, partition))
            if not waiters:
                return
            ready = [w for w in waiters if log_end > w.wants[(topic, partition)][1]]
        for w in ready:
            if not w.future.done():
                w.future.set_result(None)

    def wake_all(self) -> None:
        """On the loop: end every wait now (a clean stop; each fetch reads once more and answers)."""
        with self._lock:
            waiters = {w for ws in self._by_key.values() for w in ws}
        for w in waiters:
            if not w.future.done():
                w.future.set_result(None)

    def close(self) -> None:
        """Stop the watcher thread; waiting fetches end at their timeouts (the server cancels them first)."""
        self._closed = True
        self._changed.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=2)

    # ------------------------------------------------------------------ internals

    def _forget(self, waiter: _Waiter) -> None:
        with self._lock:
            for key in waiter.wants:
                ws = self._by_key.get(key)
                if ws is not None:
                    ws.discard(waiter)
                    if not ws:
                        del self._by_key[key]

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._watch, name="pylog-serve-fetch-watcher", daemon=True)
            self._thread.start()

    def _snapshot(self) -> dict[Key, tuple[Partition, list[_Waiter]]]:
        """What is waited for: per partition its handle and the waiters not handed to the loop yet."""
        with self._lock:
            out: dict[Key, tuple[Partition, list[_Waiter]]] = {}
            for key, ws in self._by_key.items():
                lst = [w for w in ws if not w.signalled]
                if lst:
                    out[key] = (lst[0].wants[key][0], lst)
            return out

    def _resolve(self, waiters: list[_Waiter]) -> None:
        for w in waiters:
            w.signalled = True

        def done() -> None:
            for w in waiters:
                if not w.future.done():
                    w.future.set_result(None)
        try:
            self._loop.call_soon_threadsafe(done)
        except RuntimeError:  # the loop closed under us: nothing waits any more
            pass

    def _watch(self) -> None:
        while not self._closed:
            waited = self._snapshot()
            if not waited:
                self._changed.wait(_SLICE_S)
                self._changed.clear()
                continue
            self._changed.clear()
            try:
                self._watch_once(waited)
            except Exception:  # a partition closed or deleted under the wait: look again at what remains
                log.debug("pylog serve: fetch watcher", exc_info=True)
                self._changed.wait(POLL_S)

    def _watch_once(self, waited: dict[Key, tuple[Partition, list[_Waiter]]]) -> None:
        """One sleep over the waited partitions' wake-ups (or one poll interval), then hand over every waiter
        whose data arrived."""
        with watch_appends([part for part, _ in waited.values()]) as watch:  # before the log ends: no lost wake-up
            if self._deliver(waited):
                self._poll = POLL_S
                return
            if not watch.sleep(_SLICE_S):  # this process writes one of them, or no futexes: compare log ends
                if self._changed.wait(self._poll):
                    self._poll = POLL_S  # a new wait was registered: look closely again
                else:
                    self._poll = min(self._poll * 2, POLL_MAX_S)
            if self._deliver(waited):
                self._poll = POLL_S

    def _deliver(self, waited: dict[Key, tuple[Partition, list[_Waiter]]]) -> bool:
        ready: list[_Waiter] = []
        for key, (part, ws) in waited.items():
            end = _log_end(part)
            ready.extend(w for w in ws if end > w.wants[key][1])
        if ready:
            self._resolve(ready)
        return bool(ready)


def _log_end(part: Partition) -> int:
    try:
        return part.log_end_offset
    except Exception:  # closed or deleted: the fetch finds out when it reads
        return 1 << 63

