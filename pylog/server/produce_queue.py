"""A connection's queue of Produce appends (:class:`AppendQueue`), made in the storage pool a group at a time,
and the queued request (:class:`Produce`).

The handlers (:mod:`pylog.server.handlers`) queue each Produce request here and make its appends
(:meth:`~pylog.server.handlers.DataHandlers.append_queued`, the function this queue is given); the connection
(:mod:`pylog.server.connection`) holds the queue and waits for it (:meth:`AppendQueue.drained`) before any
other request.

Invariants:
- A connection's appends are made in the order of its requests: one drain at a time per connection, which
  takes every request queued so far as one group (an idempotent producer's batches must be appended in the
  order sent).
- A request other than Produce is handled only once the appends queued before it are done
  (:meth:`AppendQueue.drained`), so it sees them as it would one at a time.
- Every queued request's answer future is ended: by the handlers once appended (and, for ``acks=all``,
  fsynced), with the error of a bug in a group (each of its requests then answered UNKNOWN_SERVER_ERROR by the
  connection), or, when the storage pool was shut down (a stop under way), with that error; futures are ended
  on the loop (:func:`answered`), and never when already cancelled (an aborted connection).
- A drain goes on in its storage thread for at most :data:`_DRAIN_TURN_S` while more keeps arriving, then goes
  to the back of the pool's queue: other connections' work gets its turn.
- A request's records (memoryviews of its frame) are let go of once taken for the appends
  (:meth:`Produce.take_request`): a request whose answer waits for its fsync holds no request data.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable

from .state import ServerState

__all__ = ["AppendQueue", "Produce", "answered"]

log = logging.getLogger("pylog.server")

#: How long one drain of a connection's Produce appends goes on in its storage thread while more keep arriving
#: (seconds), before it goes to the back of the storage pool's queue: handing each group to the pool anew woke
#: another thread for it (the submit's wake-up under the GIL was ~5% of the server's Python time at 500
#: partitions), and other connections' work must still get its turn.
_DRAIN_TURN_S = 0.005


class Produce:
    """One Produce request queued for its appends: what :meth:`~pylog.server.handlers.DataHandlers.append_requests`
    takes, the (topic, partition) of each of its partitions and the partition counts of its topics (to build the
    answer), and the future of its answer (resolved on the loop). The request (its records: memoryviews of the
    frame) is let go of once taken for the appends, so a request whose answer waits for its fsync holds no request
    data."""

    __slots__ = ("request", "acks", "keys", "topics", "answer")

    def __init__(self, request: tuple[list[tuple[str, int, Any]], int, int, str | None, str | None],
                 keys: list[tuple[str, int]], topics: list[tuple[str, int]], answer: "asyncio.Future[dict]") -> None:
        self.request: tuple[list[tuple[str, int, Any]], int, int, str | None, str | None] | None = request
        self.acks = request[1]
        self.keys = keys
        self.topics = topics
        self.answer = answer

    def take_request(self) -> tuple[list[tuple[str, int, Any]], int, int, str | None, str | None]:
        """The request, for its appends (once)."""
        request, self.request = self.request, None
        assert request is not None, "a Produce request taken for its appends twice"
        return request


class AppendQueue:
    """One connection's Produce appends, in request order, made in the storage pool a group at a time: those
    that arrive while a group is being appended go together in the next one (librdkafka sends one request per
    partition and batch, pipelined: hundreds of small requests a second per connection, which one hop each
    made wait for the pool one after another). One drain at a time per connection (the order of its appends);
    a drain that finds more queued after its group hands itself back to the pool (behind other connections'
    work) rather than return to the loop, and hands each answer to the loop itself
    (:meth:`~pylog.server.handlers.DataHandlers.append_queued`): a request costs the loop no wake-up between
    its appends and its fsyncs. The connection's other requests wait until the appends queued before them are done
    (:meth:`drained`), so they see those appends as they would one at a time."""

    def __init__(self, append: Callable[[list[Produce]], None], state: ServerState) -> None:
        self._append = append  # DataHandlers.append_queued: appends a group, hands each answer to the loop
        self._state = state  # its storage pool (executor) and post (a call on the loop)
        self._lock = threading.Lock()  # between the loop (add, drained) and the draining storage thread
        self._queue: list[Produce | asyncio.Future[None]] = []  # requests, and drained()'s markers, in order
        self._running = False  # a drain is queued in the pool or under way

    def add(self, produce: Produce) -> None:
        """On the loop: queue a request's appends; its answer future is resolved once done."""
        with self._lock:
            self._queue.append(produce)
            if self._running:
                return
            self._running = True
        try:
            self._state.executor.submit(self._drain)
        except RuntimeError as exc:  # the pool was shut down: a stop under way, nothing is appended any more
            with self._lock:
                queued, self._queue, self._running = self._queue, [], False
            for item in queued:
                future = item.answer if isinstance(item, Produce) else item
                if not future.done():
                    future.set_exception(exc)

    async def drained(self) -> None:
        """Return once every append queued so far is done."""
        with self._lock:
            if not self._running:
                return
            marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queue.append(marker)
        await marker

    def _drain(self) -> None:
        """In the storage pool: append what is queued, in order (see the class docstring); what keeps arriving
        for up to :data:`_DRAIN_TURN_S`, then what is queued after that from the pool's queue again."""
        began = time.monotonic()
        while True:
            with self._lock:
                group, self._queue = self._queue, []
            batch = [item for item in group if isinstance(item, Produce)]
            try:
                if batch:
                    self._append(batch)
            except BaseException as exc:  # a bug: each request of the group is answered UNKNOWN_SERVER_ERROR
                log.error("pylog serve: a group of produce requests failed", exc_info=exc)
                error = exc if isinstance(exc, Exception) else RuntimeError(str(exc))
                for p in batch:
                    self._state.post(_resolve, p.answer, error)
                if not isinstance(exc, Exception):
                    raise
            finally:
                for item in group:
                    if not isinstance(item, Produce):
                        self._state.post(_resolve, item)
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
            if time.monotonic() - began < _DRAIN_TURN_S:
                continue  # no hand-over to another pool thread (a wake-up) for what came meanwhile
            try:
                self._state.executor.submit(self._drain)  # the others' work first, then the rest
                return
            except RuntimeError:  # the pool is shutting down: the rest here
                continue


def answered(answer: "asyncio.Future[dict]", results: list[dict]) -> None:
    """On the loop: a Produce's answer, unless its future was cancelled (its connection was aborted)."""
    if not answer.done():
        answer.set_result({"responses": results, "throttle_time_ms": 0})


def _resolve(future: "asyncio.Future[Any]", error: BaseException | None = None) -> None:
    """On the loop: end ``future`` (with ``error``, if any) unless it was cancelled."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
