"""One client connection of ``pylog serve``: framing, request order, authentication, back-pressure.

Kafka's framing is a 4-byte big-endian size and that many bytes of request. A connection cuts frames out of
what it receives, queues them and answers them one at a time, in order (as a Kafka broker does: clients
match responses to requests by order and correlation id, and an idempotent producer's batches must be
appended in the order sent).

Invariants:
- A frame larger than the server's ``max_request_bytes`` (or a negative size) closes the connection before
  anything is allocated for it; nothing past a bad frame is read.
- A frame's size is taken from the server's memory pool (``queued_max_request_bytes``,
  :class:`~pylog.server.limits.BytePool`) as soon as its prefix arrives and given back once it is answered
  (a Produce whose answer is owed: once its appends are done, as they hold its records until then);
  a fetch's answer takes its records' bytes from the pool and gives them back once written. While the pool
  cannot give a frame its size, its connection is not read: the requests of all connections and the fetch
  answers hold at most the pool (plus one record per answer, which Kafka always sends, and at most one
  socket read per connection).
- Reading also pauses while queued, unanswered frames exceed :data:`_MAX_QUEUED_BYTES` (or a 32nd of the pool,
  so that a few clients pipelining requests whose answers they do not read cannot fill it) or number
  :data:`_MAX_QUEUED_FRAMES` (the back-pressure that makes a pipelining producer batch), and answering pauses
  while the transport's write buffer is over its high-water mark (a slow consumer); a client that reads
  nothing for ``response_send_timeout_ms`` is closed (its answer dropped). A request not received whole
  within ``request_receive_timeout_ms`` of its first byte is closed by the server's reaper
  (:meth:`Connection.receiving_for`).
- Connections beyond ``max_connections`` (or ``max_connections_per_ip`` from one address) are closed at
  accept, before anything is read. A request naming more than ``max_request_items`` structs does not decode
  (the connection closes); frames above :data:`_DECODE_ON_LOOP_BYTES` are decoded off the event loop.
- A request that cannot be decoded closes the connection (what Kafka brokers do); a request whose handler
  failed is answered with UNKNOWN_SERVER_ERROR in every error field, and the connection goes on.
- With SASL enabled, nothing but ApiVersions, SaslHandshake and SaslAuthenticate is served before
  authentication succeeds; a failed authentication is answered and the connection closed. Every SASL token
  goes through the server's :class:`~pylog.server.logins.LoginGuard` (off the event loop, one step at a time
  per client address, failures answered after a growing delay).
- Between two requests of a connection the event loop serves the others (one request per turn per
  connection), and at most :data:`_CUT_PER_TURN` frames are cut from a connection's buffer per turn: a
  client pipelining requests is answered in turn with the rest, not ahead of them. Frames count
  :data:`_FRAME_OVERHEAD` bytes each beyond their size in the pool and the queue (the cost of an object).
- A client that disconnects mid-request loses only that request: its partial frame is dropped, the requests
  being handled complete (an append in the storage pool is never cut short).
- Answers leave in the order of the requests. A handler may answer with a future (a Produce: its appends are
  queued for the storage pool, in order, and for ``acks=all`` the future completes after the group commit's
  fsync); the connection then goes on with the next requests (at most :data:`_MAX_DEFERRED` answers
  outstanding) and writes each answer once it and every earlier one are ready (those ready at once in one
  write: one ``send``, and one wake-up of the client, for several pipelined answers), so consecutive Produce
  requests of a connection are appended in one hop to the storage pool and share fsyncs. A request other than
  Produce is handled only once the appends queued before it are done. A clean close writes the outstanding
  answers first.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from typing import Any

from .. import metrics
from ..errors import DESCRIPTOR_ERRNOS, AuthenticationError, PylogError, RateLimitedLog, UnsupportedApiVersionError
from . import auth, metering, protocol
from .protocol import codes as E
from .state import ServerState


__all__ = ["Connection"]

log = logging.getLogger("pylog.server")
#: Out of descriptors, every request may fail alike: one line a minute.
_shortage = RateLimitedLog(log, 60.0)

#: Received frames waiting for their turn, in bytes, above which the connection stops reading.
_MAX_QUEUED_BYTES = 16 << 20
#: Received frames waiting for their turn, in number, from which the connection stops reading. A producer
#: batches only while it cannot send: librdkafka makes a Produce request per partition as soon as ``linger.ms``
#: passes unless requests it made are still untransmitted (``queue.buffering.backpressure.threshold``), so a
#: server reading every request at once (thousands of small ones fit in the bytes bound and the socket buffers)
#: kept it sending requests of a few records each: with 500 partitions and acks=all, 4-20 records a request and
#: 13-55 us of server CPU per record, against 60-110 records and 2.6-5.5 us with this bound and
#: :data:`_MAX_DEFERRED` at 32 (benchmarks/bench_server.py; docs/PERFORMANCE.md). Kafka's broker reads one request
#: per connection at a time.
_MAX_QUEUED_FRAMES = 32
#: The largest frame a connection that must authenticate may send before it has (Kafka's 512 KiB).
_MAX_UNAUTHENTICATED_BYTES = 512 * 1024
#: Responses larger than this go to the transport a chunk of this size at a time, each once the previous has
#: drained (a slow reader then holds one response, not a second copy of it in the transport's buffer).
_WRITE_CHUNK = 1 << 20
#: What a queued frame costs beyond its bytes (the bytearray object, its allocation, its queue slot), counted in the
#: pool and the queue with them: 4 MiB of 40-byte requests are 100,000 objects, ~14 MB of memory.
_FRAME_OVERHEAD = 128
#: The most frames cut out of the receive buffer in one turn of the event loop (~1 ms of work).
_CUT_PER_TURN = 512
#: The longest a connection handles its queued requests before it lets the other connections have a turn of the
#: event loop (seconds): a yield per request cost a turn of the loop (an epoll call, the ready callbacks) per
#: request, and librdkafka pipelines one small Produce per partition batch.
_TURN_S = 0.0005
#: Frames larger than this are decoded in the decoder thread, not on the event loop: one this size holds at most
#: 12,288 structs (schema.struct_budget), ~30 ms of decoding.
_DECODE_ON_LOOP_BYTES = 64 << 10
#: Answers naming more items than this (see :func:`_items`) are encoded in the decoder thread (~2 us per item).
_ENCODE_ON_LOOP_ITEMS = 5_000
#: An answer waits for at least this much room in the pool (or all it asked for, when it asked for less).
_MIN_ANSWER_BYTES = 1 << 20
#: Answers a connection may owe at once (requests handled whose answer waits for an fsync, or for an earlier
#: answer that does): the next request waits beyond this (and, with :data:`_MAX_QUEUED_FRAMES` more queued,
#: reading pauses). An answer owed holds no request data (a few hundred bytes). 32 lets 32 Produce requests
#: share fsyncs (the group commit flushes their partitions in parallel) and still pushes back on the producer,
#: so that it batches (see :data:`_MAX_QUEUED_FRAMES`); 1,024 let librdkafka's Produce requests shrink to a
#: few records each at 500 partitions.
_MAX_DEFERRED = 32
PRODUCE, API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 18, 17, 36
_BEFORE_AUTH = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))


class Connection(asyncio.Protocol):
    """The asyncio protocol of one client connection (see the module docstring)."""

    def __init__(self, state: ServerState) -> None:
        self.s = state
        self.transport: asyncio.Transport | None = None
        self.client_host = ""
        self.closing = False
        self._sasl = None if state.config.sasl_credentials is None else \
            auth.SaslServer(state.config.sasl_credentials, state.config.sasl_mechanisms)
        self.authenticated = self._sasl is None
        self.principal: str | None = None
        self._raw_sasl = False  # SaslHandshake v0: the next frames are bare SASL tokens
        self._buf = bytearray()
        self._frames: collections.deque[bytearray] = collections.deque()
        self._queued = 0
        self._read_paused = False
        self._wakeup: asyncio.Future[None] | None = None
        self._hooked: Any = None  # the answer owed whose readiness wakes the request loop (see _serve)
        self._writable: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._busy = False  # a request is being answered
        #: The Produce appends queued for the storage pool (the data handlers' AppendQueue, made on first use); any
        #: other request waits until it has drained (see the module docstring).
        self.appends: Any = None
        #: Answers owed, in request order: (request, answer or a future of it) (see the module docstring).
        self._owed: collections.deque[tuple[Any, Any]] = collections.deque()
        self.last_active = 0.0  # loop time of the last bytes received or answer written
        # The memory pool (Kafka's queued.max.request.bytes): what this connection holds of it in all, of which
        # the frame being received (taken once its size is known) and the answer being built or sent.
        self._held = 0
        self._partial_held = 0
        self._answer_held = 0
        self._waiting_pool = False
        self._pauses: set[str] = set()  # why reading is paused: "queue", "pool", "closing"
        self._partial_since: float | None = None  # loop time the frame being received began (None: none is)
        self._admitted = False
        self._queue_limit = min(_MAX_QUEUED_BYTES, state.pool.capacity // 32)
        self._cut_later = False  # _cut_again is scheduled

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client_host = str(peer[0]) if peer else ""
        refused = self.s.counts.admit(self.client_host)
        if refused is not None:
            # Refused at accept (Kafka's max.connections / max.connections.per.ip): closed before anything is
            # read or allocated for it; logged at most every few seconds, whatever the flood.
            self.s.rlog.log(logging.WARNING, refused, "pylog serve: refusing a connection from %s: %s=%d reached",
                            self.client_host, refused, getattr(self.s.config, refused))
            self.closing = True
            transport.abort()
            return
        self._admitted = True
        self.s.connections.add(self)
        if metrics.state.on:
            metering.connection_created()
        loop = asyncio.get_running_loop()
        self.last_active = loop.time()
        self._task = loop.create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        now = asyncio.get_running_loop().time()
        self.last_active = now
        if not self._buf:
            self._partial_since = now
        self._buf += data
        self._cut_frames()

    def _cut_frames(self) -> None:
        """Cut the complete frames out of what was received. A frame's size is taken from the server's pool as
        soon as its prefix is read; when the pool cannot give it, reading pauses until another connection gives
        bytes back (nothing more is read, so nothing more is allocated: the kernel's buffers push back)."""
        buf = start = self._buf
        pos, n = 0, len(buf)
        pool = self.s.pool
        # Before authentication only small requests (SASL tokens, ApiVersions) are accepted, as in Kafka.
        limit = self.s.config.max_request_bytes if self.authenticated else _MAX_UNAUTHENTICATED_BYTES
        cut = 0
        frames = self._frames
        # Beyond the bounds, frames stay bytes in the buffer, and reading pauses.
        while n - pos >= 4 and self._queued <= self._queue_limit and len(frames) < _MAX_QUEUED_FRAMES:
            if cut == _CUT_PER_TURN:  # the rest in a later turn of the loop: other connections go first
                if not self._cut_later:
                    self._cut_later = True
                    asyncio.get_running_loop().call_soon(self._cut_again)
                break
            cut += 1
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if size < 0 or size > limit:
                self.s.rlog.log(logging.WARNING, "frame size", "pylog serve: closing the connection from %s: a "
                                "request of %d bytes (the limit is max_request_bytes=%d)", self.client_host, size,
                                limit)
                self._buf = bytearray()
                self.abort()
                return
            if not self._partial_held:
                if not pool.try_take(size + _FRAME_OVERHEAD):
                    if not self._waiting_pool:
                        self._waiting_pool = True
                        pool.when_free(self._pool_freed)
                    self._pause("pool")
                    break
                self._partial_held = size + _FRAME_OVERHEAD
                self._held += size + _FRAME_OVERHEAD
            if n - pos - 4 < size:
                break
            self._partial_held = 0
            self._queued += size + _FRAME_OVERHEAD
            if pos == 0 and size >= _DECODE_ON_LOOP_BYTES:
                # A large frame at the buffer's start becomes the frame itself (dropping a bytearray's first bytes
                # is O(1)); only what follows it is copied: a copy of 10 MiB costs the loop milliseconds.
                rest = buf[4 + size:]
                del buf[4 + size:]
                del buf[:4]
                self._frames.append(buf)
                self._buf = buf = rest
                n = len(buf)
                continue
            self._frames.append(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
        if pos:
            del buf[:pos]
        if self._buf is not start or pos:  # frames were cut: the next one's deadline counts from now
            self._partial_since = asyncio.get_running_loop().time() if buf else None
        if self._frames:
            self._wake()
        if self._queued > self._queue_limit or len(frames) >= _MAX_QUEUED_FRAMES:
            self._pause("queue")

    def _cut_again(self) -> None:
        self._cut_later = False
        if not self.closing:
            self._cut_frames()

    def _pool_freed(self) -> None:
        """The pool gave bytes back: take the waiting frame's size again (or wait again)."""
        self._waiting_pool = False
        if self.closing:
            return
        self._cut_frames()
        if not self._waiting_pool:
            self._unpause("pool")

    def _pause(self, reason: str) -> None:
        self._pauses.add(reason)
        self._apply_pauses()

    def _unpause(self, reason: str) -> None:
        self._pauses.discard(reason)
        self._apply_pauses()

    def _apply_pauses(self) -> None:
        want = bool(self._pauses)
        if want == self._read_paused or self.transport is None or self.transport.is_closing():
            return
        self._read_paused = want
        if want:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()
            if self._buf:  # the deadline for the frame under way counts from now: the pause was not its sender's
                self._partial_since = asyncio.get_running_loop().time()

    def _give(self, n: int) -> None:
        """Give ``n`` of the bytes this connection holds back to the pool (never more than it holds)."""
        n = min(n, self._held)
        if n > 0:
            self._held -= n
            self.s.pool.give(n)

    def _give_all(self) -> None:
        self._partial_held = self._answer_held = 0
        self._give(self._held)

    async def take_answer_bytes(self, n: int) -> int:
        """Take up to ``n`` bytes of the pool for an answer being built (a fetch's records), waiting while the
        pool has less than :data:`_MIN_ANSWER_BYTES` free; what was taken (0 once the connection is closing).
        The answer's bytes go back to the pool once it is written (or with :meth:`keep_answer_bytes`)."""
        pool = self.s.pool
        while not self.closing and n > 0:
            got = pool.take_up_to(n, _MIN_ANSWER_BYTES)
            if got:
                self._held += got
                self._answer_held += got
                return got
            freed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            pool.when_free(functools.partial(_set_done, freed))
            await freed
        return 0

    def keep_answer_bytes(self, n: int) -> None:
        """The answer being built holds ``n`` bytes: give back what was taken beyond, or count what it needed
        beyond (Kafka always answers with at least one record, whatever the limit)."""
        extra = n - self._answer_held
        if extra > 0:
            self.s.pool.force(extra)
            self._held += extra
        else:
            self._give(-extra)
        self._answer_held = n

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._buf = bytearray()
        self._frames.clear()
        self._give_all()
        if not self._admitted:
            return
        self._admitted = False
        self.s.counts.release(self.client_host)
        self.s.connections.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Finish the request under way, then close (the server's shutdown). A connection that has not logged
        in yet closes at once: its only request could be a login held back by the failed-login delay."""
        if not self.authenticated:
            self.abort()
            return
        self.closing = True
        self._pause("closing")
        self._frames.clear()
        self._wake()

    def abort(self) -> None:
        """Close now, dropping whatever is queued or still unsent (a client that stopped reading would keep a
        graceful close waiting for its buffer forever)."""
        self.closing = True
        self._frames.clear()
        if self.transport is not None:
            self.transport.abort()

    def idle_for(self, now: float) -> float:
        """Seconds without a request under way, queued or arriving (0 while one is: a long poll is not idle;
        a frame arriving has its own deadline, :meth:`receiving_for`)."""
        if self._busy or self._frames or self._buf or self._owed or (
                self._writable is not None and not self._writable.done()):
            return 0.0  # answering, asked, or an answer still leaving (a slow reader): not idle
        return now - self.last_active

    def receiving_for(self, now: float) -> float:
        """Seconds since the first byte of the frame being received arrived (0 when none is, or while reading
        is paused by the server: that wait is not the sender's)."""
        if self._partial_since is None or self._read_paused:
            return 0.0
        return now - self._partial_since

    async def finished(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def _wake(self) -> None:
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    def _wake_on(self, _: Any) -> None:
        """The oldest answer owed is ready (a done callback)."""
        self._wake()

    # ------------------------------------------------------------------ the request loop

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        turn_began = loop.time()
        try:
            while not self.closing:
                await self._write_owed(block=len(self._owed) >= _MAX_DEFERRED)
                if not self._frames:
                    self._wakeup = loop.create_future()
                    if self._owed:  # whichever comes first: the next request or the oldest answer owed
                        head = self._owed[0][1]
                        if head is not self._hooked:  # once per answer (asyncio.wait cost a task's worth per turn)
                            self._hooked = head
                            head.add_done_callback(self._wake_on)
                    await self._wakeup
                    self._wakeup = None
                    turn_began = loop.time()
                    continue
                frame = self._frames.popleft()
                self._queued -= len(frame) + _FRAME_OVERHEAD
                if ("queue" in self._pauses and self._queued <= self._queue_limit // 2
                        and len(self._frames) <= _MAX_QUEUED_FRAMES // 2):
                    self._unpause("queue")
                    self._cut_frames()  # the frames left in the buffer when the queue was full
                self._busy = True
                owed = len(self._owed)
                try:
                    if not await self._handle(frame):
                        break
                finally:
                    self._busy = False
                    self.last_active = loop.time()
                    # The request is handled and its answer written (its last chunk is in the transport's buffer,
                    # below its high-water mark) or owed: their bytes go back to the pool, those of a Produce whose
                    # answer is owed once its appends are done (they hold its records until then).
                    self._give_after(len(frame) + _FRAME_OVERHEAD, owed)
                    self._give(self._answer_held)
                    self._answer_held = 0
                if not await self._drained():  # a slow reader: answer nothing more until its buffer drains
                    break
                if self._frames and loop.time() - turn_began >= _TURN_S:
                    # Let the other connections have a turn: most handlers (ApiVersions, heartbeats) never wait,
                    # and 100,000 pipelined requests would otherwise be answered before anyone else's.
                    await asyncio.sleep(0)
                    turn_began = loop.time()
            await self._write_owed(block=True, every=True)  # a clean close answers what was handled
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug here must not take the server down: this connection ends
            log.exception("pylog serve: connection from %s failed", self.client_host)
        finally:
            self._give_all()
            if self.transport is not None:
                self.transport.close()

    async def _drained(self) -> bool:
        """Wait until the transport's buffer is below its low-water mark; False (and the connection aborted)
        when the client read nothing for ``response_send_timeout_ms``: a client that stops reading must not
        hold its answer, and the pool's bytes, forever."""
        w = self._writable
        if w is None or w.done():
            return True
        timeout_ms = self.s.config.response_send_timeout_ms
        try:
            await asyncio.wait_for(asyncio.shield(w), timeout_ms / 1000.0 if timeout_ms else None)
        except TimeoutError:
            self.s.rlog.log(logging.WARNING, "send timeout", "pylog serve: closing the connection from %s: it read "
                            "none of its answer for %d ms (response_send_timeout_ms)", self.client_host, timeout_ms)
            self.abort()
            return False
        return True

    def _give_after(self, n: int, owed_before: int) -> None:
        """Give ``n`` bytes back now, or when the answer the last request left owed is ready."""
        if len(self._owed) > owed_before and isinstance(self._owed[-1][1], asyncio.Future):
            self._owed[-1][1].add_done_callback(lambda _: self._give(n))
        else:
            self._give(n)

    async def _write_owed(self, block: bool, every: bool = False) -> None:
        """Write the answers owed whose turn has come: the ready ones at the head of the queue; with ``block``,
        wait for the oldest first (``every``: for all of them). Consecutive small answers ready at once go to
        the transport together (one ``send`` for the group commit's answers of several pipelined Produce
        requests, not one each: the client's network thread then wakes once for them, too)."""
        owed = self._owed
        ready: list = []  # encoded answers not yet written, in order
        try:
            while owed:
                req, answer = owed[0]
                if isinstance(answer, asyncio.Future):
                    if not answer.done():
                        if not block:
                            return
                        if ready:  # the answers ready so far do not wait for this one
                            self._write(ready)
                            ready = []
                        await asyncio.wait((answer,))
                    try:
                        answer = answer.result()
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        answer = self._failed(req, exc)
                owed.popleft()
                block = every
                parts = _encoded_on_loop(req, answer)
                if parts is not None and sum(map(len, parts)) <= _WRITE_CHUNK:
                    ready += parts
                    continue
                if ready:
                    self._write(ready)
                    ready = []
                if parts is None:
                    parts = await self.s.decode(protocol.encode_response_parts, req, answer)
                await self._write_parts(parts)
        finally:
            if ready:
                self._write(ready)

    async def _send_answer(self, req: Any, answer: dict) -> None:
        """Write one answer now (after the answers owed before it)."""
        parts = _encoded_on_loop(req, answer)
        if parts is None:
            parts = await self.s.decode(protocol.encode_response_parts, req, answer)
        await self._write_parts(parts)

    async def _write_parts(self, parts: list) -> None:
        if sum(map(len, parts)) > _WRITE_CHUNK:
            await self._write_chunked(parts)
        else:
            self._write(parts)

    def _write(self, data: bytes | list) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if isinstance(data, list):
            self.transport.writelines(data)
        else:
            self.transport.write(data)

    async def _handle(self, frame: bytearray) -> bool:
        """Answer one frame; False when the connection must close."""
        if self._raw_sasl:
            return await self._raw_sasl_token(bytes(frame))
        try:
            # A large frame is decoded in the decoder thread: decoding costs ~2.5 us per struct, and the loop
            # must keep answering the other connections meanwhile.
            if len(frame) > _DECODE_ON_LOOP_BYTES:
                req = await self.s.decode(protocol.parse_request, frame, self.s.config.max_request_items)
            else:
                req = protocol.parse_request(frame, self.s.config.max_request_items)
        except UnsupportedApiVersionError as exc:
            # An ApiVersions version we lack: v0 with our versions, as Kafka does (the client retries with
            # one we serve); for any other API Kafka closes the connection, and so do we.
            frame_out = protocol.unsupported_version_response(exc.header)  # type: ignore[arg-type]
            if frame_out is None:
                self.s.rlog.log(logging.WARNING, "bad request", "pylog serve: closing the connection from %s: %s",
                                self.client_host, exc)
                return False
            await self._write_owed(block=True, every=True)
            self._write(frame_out)
            return True
        except PylogError as exc:
            self.s.rlog.log(logging.WARNING, "bad request", "pylog serve: closing the connection from %s: %s",
                            self.client_host, exc)
            return False
        if not self.authenticated and req.api_key not in _BEFORE_AUTH:
            self.s.rlog.log(logging.WARNING, "before auth", "pylog serve: closing the connection from %s: API key "
                            "%d before SASL authentication", self.client_host, req.api_key)
            return False
        if req.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            await self._write_owed(block=True, every=True)  # these answers are written here, in turn
        if req.api_key == SASL_HANDSHAKE:
            body, ok = self._sasl_handshake(req)
            self._write(protocol.encode_response(req, body))
            return ok
        if req.api_key == SASL_AUTHENTICATE:
            body, ok = await self._sasl_authenticate(req)
            self._write(protocol.encode_response(req, body))
            return ok
        if self._owed:  # an answer owed goes out first, also one the client will wait for below
            await self._write_owed(block=False)
        if req.api_key != PRODUCE and self.appends is not None:
            await self.appends.drained()  # it sees the appends of the Produce requests before it
        handler = self.s.handlers.get(req.api_key)
        answer: dict | asyncio.Future[dict] | None
        began = time.perf_counter()
        try:
            if handler is None:
                answer = protocol.error_response(req, E.UNSUPPORTED_VERSION)
            else:
                answer = await handler(req, self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer = self._failed(req, exc)
        if metrics.state.on:
            metering.answered(req.api_key, began, answer)
        if isinstance(answer, asyncio.Future) or (answer is not None and self._owed):
            # After the answers owed before it (invariant: in order). The header only: the request's body holds
            # its frame (records), which an answer owed must not keep.
            self._owed.append((protocol.RequestHeader(req.api_key, req.api_version, req.correlation_id,
                                                      req.client_id), answer))
        elif answer is not None:
            await self._send_answer(req, answer)
        return True

    def _failed(self, req: Any, exc: Exception) -> dict:
        """The answer to a request whose handler raised ``exc`` (a Request, or the RequestHeader of one owed)."""
        if isinstance(exc, OSError) and exc.errno in DESCRIPTOR_ERRNOS:
            # Out of descriptors: this request only, logged once a minute (every request fails alike meanwhile).
            _shortage.log(logging.ERROR, "request", "pylog serve: out of file descriptors: %s", exc)
            return protocol.error_response(req, E.KAFKA_STORAGE_ERROR)
        log.error("pylog serve: a request (API key %d) from %s (client %r) failed", req.api_key, self.client_host,
                  req.client_id, exc_info=exc)
        return protocol.error_response(req, E.UNKNOWN_SERVER_ERROR)

    async def _write_chunked(self, parts: list) -> None:
        """A large response in :data:`_WRITE_CHUNK` pieces, each written once the transport drained the last:
        asyncio copies what a write cannot send at once into its buffer, so a 50 MiB fetch answer to a slow
        reader would otherwise be held twice."""
        for part in parts:
            mv = memoryview(part).cast("B")
            for i in range(0, len(mv), _WRITE_CHUNK):
                if self.transport is None or self.transport.is_closing():
                    return
                self.transport.write(mv[i:i + _WRITE_CHUNK])
                if not await self._drained():
                    return

    # ------------------------------------------------------------------ SASL

    def _sasl_handshake(self, req: Any) -> tuple[dict, bool]:
        sasl = self._sasl
        if sasl is None:  # a listener without SASL: Kafka answers ILLEGAL_SASL_STATE
            return {"error_code": E.ILLEGAL_SASL_STATE, "mechanisms": []}, True
        try:
            sasl.start(req.body["mechanism"])
        except AuthenticationError as exc:
            log.warning("pylog serve: SASL handshake from %s refused: %s", self.client_host, exc)
            if metrics.state.on:
                metering.authentication_failed()
            return {"error_code": auth.error_code(exc), "mechanisms": list(sasl.mechanisms)}, False
        self._raw_sasl = req.api_version == 0
        return {"error_code": E.NONE, "mechanisms": list(sasl.mechanisms)}, True

    async def _sasl_authenticate(self, req: Any) -> tuple[dict, bool]:
        sasl = self._sasl
        if sasl is None or sasl.session is None or self.authenticated:
            return {"error_code": E.ILLEGAL_SASL_STATE, "error_message": "SaslAuthenticate without a SaslHandshake "
                    "starting an exchange", "auth_bytes": b""}, False
        try:
            challenge, done = await self.s.logins.step(self.client_host, sasl.session, bytes(req.body["auth_bytes"]))
        except AuthenticationError as exc:
            log.warning("pylog serve: SASL authentication from %s failed: %s", self.client_host, exc)
            if metrics.state.on:
                metering.authentication_failed()
            return {"error_code": auth.error_code(exc), "error_message": str(exc), "auth_bytes": b""}, False
        if done:
            self._authenticated_as(sasl.principal)
        return {"error_code": E.NONE, "error_message": None, "auth_bytes": challenge,
                "session_lifetime_ms": 0}, True

    async def _raw_sasl_token(self, token: bytes) -> bool:
        """SaslHandshake v0: a bare token in, a bare challenge out (a zero-length frame for PLAIN's success)."""
        sasl = self._sasl
        assert sasl is not None and sasl.session is not None
        try:
            challenge, done = await self.s.logins.step(self.client_host, sasl.session, token)
        except AuthenticationError as exc:
            log.warning("pylog serve: SASL authentication from %s failed: %s", self.client_host, exc)
            if metrics.state.on:
                metering.authentication_failed()
            return False
        self._write(len(challenge).to_bytes(4, "big") + challenge)
        if done:
            self._raw_sasl = False
            self._authenticated_as(sasl.principal)
        return True

    def _authenticated_as(self, principal: str | None) -> None:
        self.authenticated = True
        self.principal = principal
        if metrics.state.on:
            metering.authenticated()
        log.info("pylog serve: %s authenticated as %r", self.client_host, principal)


def _set_done(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


def _encoded_on_loop(req: Any, answer: dict) -> list | None:
    """``answer``'s encoded parts, encoded here on the event loop; None when it names many items (e.g. Metadata
    of every topic: ~170 ms for 100,000 partitions), which the decoder thread encodes instead."""
    if _items(answer) > _ENCODE_ON_LOOP_ITEMS:
        return None
    return protocol.encode_response_parts(req, answer)


def _items(body: dict) -> int:
    """The entries of a response body's lists and of the lists in their entries (topics and their partitions,
    groups and their members): what its encoding costs, roughly, without walking deeper."""
    n = 0
    for value in body.values():
        if isinstance(value, list):
            n += len(value)
            for entry in value:
                if isinstance(entry, dict):
                    n += sum(len(v) for v in entry.values() if isinstance(v, list))
    return n
