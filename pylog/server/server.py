"""``pylog serve``: a Kafka broker over a pylog store, in one process, on one asyncio event loop.

:class:`Server` owns the listening socket, the connections (:mod:`pylog.server.connection`), the storage
thread pool that appends and fsyncs, the fetch waiters (:mod:`pylog.server.waiting`), the group
coordinator (:mod:`pylog.server.coordinator`) and, for a store whose cleaner is off, the sweep of timed-out
transactions (:mod:`pylog.server.transactions`). It runs either in the caller's thread (the CLI:
:meth:`Server.serve_forever`, stopped by SIGTERM or SIGINT) or in a thread of its own (embedded:
:func:`serve`, :meth:`Server.start`, a context manager).

Invariants:
- The server listens on loopback unless told otherwise (``host``); it is node 0, the only broker, the
  leader of every partition and the coordinator of every group.
- A clean stop (:meth:`Server.close`, SIGTERM) stops accepting, lets every connection finish the request it
  is answering, waits for the storage pool's appends, and then closes the store it opened (a clean close:
  everything fsynced) or flushes the one it was given. Whatever was acknowledged is on disk per the topics'
  settings before the stop returns, and fsynced after it.
- Nothing the server does for one client blocks the event loop on the disk or on another process's lock:
  appends, fsyncs, topic and group-offset changes run in the storage thread pool, reads in the read pool,
  the decoding of large request frames and the encoding of large answers in the decoder thread.
- What clients can make the server hold is bounded (:mod:`pylog.server.limits`, docs/SERVER.md
  "Robustness"): the memory of requests and fetch answers by ``queued_max_request_bytes``, connections by
  ``max_connections`` / ``max_connections_per_ip``, a request's items by ``max_request_items``, its time in
  arriving and its answer's in leaving by ``request_receive_timeout_ms`` / ``response_send_timeout_ms``,
  topics and partitions created by the creation limits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from typing import Any, Callable

from .. import metrics
from ..errors import DESCRIPTOR_ERRNOS, InvalidArgumentError, PylogError, RateLimitedLog
from ..store import Store, transaction_coordinator
from ..store import open as open_store
from . import routes
from .auth import plain_exposed_addresses
from .authorizer import Authorizer, parse_principals
from .connection import Connection
from .settings import ServerConfig
from .state import ServerState
from .turns import SWEEP_DUTY, SWEEP_S

__all__ = ["Server", "ServerConfig", "serve"]

log = logging.getLogger("pylog.server")
#: Out of descriptors, the same failure repeats for every connection and request: one line per kind a minute.
_shortage = RateLimitedLog(log, 60.0)
#: Partitions whose files the store lets go of when an accept finds no descriptor left.
_SHRINK_ON_EMFILE = 16

#: asyncio accepts as many connections per turn of the event loop as the listen backlog it is given, each a
#: transport to set up (and, beyond ``max_connections``, to close again): 1,024 in one turn held the other
#: connections' answers ~150 ms in a connection flood. It is given 50 (Kafka's ``socket.listen.backlog.size``
#: default), and the kernel's queue is set to :data:`_KERNEL_BACKLOG` afterwards, so that a burst of clients
#: (or a server briefly out of descriptors) still finds its connections queued rather than refused.
_ACCEPTS_PER_TURN = 50
_KERNEL_BACKLOG = 1024


def _warn_plain_in_the_clear(config: ServerConfig, addresses: list[str]) -> None:
    """A loud warning when SASL/PLAIN is offered without TLS on an address other machines may reach."""
    if config.sasl_credentials is None:
        return
    exposed = plain_exposed_addresses(config.sasl_mechanisms, config.ssl_context is not None, addresses)
    if exposed:
        log.warning("pylog serve: SASL/PLAIN is enabled without TLS on %s, reachable beyond this machine: "
                    "passwords cross the network in the clear; enable TLS (--tls-cert/--tls-key, ssl_context) or "
                    "offer only SCRAM (--sasl-mechanisms SCRAM-SHA-256,SCRAM-SHA-512)", ", ".join(exposed))


def _deepen_backlog(listener: asyncio.Server) -> None:
    """Set the kernel's listen queue of ``listener``'s sockets to :data:`_KERNEL_BACKLOG` (asyncio listened with
    :data:`_ACCEPTS_PER_TURN`, the number it accepts per turn). ``listen`` again on a listening socket only
    changes its backlog; asyncio's socket wrappers do not offer it, so a duplicate descriptor does."""
    for ts in listener.sockets:
        try:
            with socket.socket(fileno=os.dup(ts.fileno())) as dup:
                dup.listen(_KERNEL_BACKLOG)
        except OSError:  # out of descriptors at start-up: the shorter queue serves
            pass


class Server:
    """A Kafka-protocol server on a pylog store. Use :func:`serve` (embedded) or ``pylog serve`` (CLI).

    ``store`` is a :class:`~pylog.Store` (left open at the end: the caller owns it) or a path (opened here,
    with ``create=True``, and closed cleanly when the server stops).
    """

    def __init__(self, store: Store | str | os.PathLike[str], **options: Any) -> None:
        self.config = ServerConfig(**options)
        self.config.check()
        self._owns_store = not isinstance(store, Store)
        self._store_arg = store
        self.store: Store | None = store if isinstance(store, Store) else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._state: ServerState | None = None
        self.host = self.config.host
        self.port = self.config.port
        self._stopped = threading.Event()
        # The event loop thread's CPU-time clock, taken by that thread itself while it runs: asking for a
        # thread's clock by its pthread id from another thread after it exited reads freed memory (a crash
        # in pthread_getcpuclockid), while reading a clock whose thread is gone only fails (EINVAL).
        self._loop_clock: int | None = None
        metrics.track("server", self)  # its gauges (connections, loop CPU, groups) are read when scraped

    # ------------------------------------------------------------------ public

    @property
    def bootstrap_servers(self) -> str:
        """``"host:port"``, what Kafka clients take as ``bootstrap_servers`` / ``bootstrap.servers``."""
        return f"{self.advertised[0]}:{self.advertised[1]}"

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.config.advertised_host or self.host
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1" if host != "::" else "::1"
        return host, self.config.advertised_port or self.port

    def resources(self) -> dict[str, int]:
        """A snapshot of what the server holds: ``connections`` open, ``pool_bytes_used`` of its memory pool
        (requests being received, queued or answered, fetch answers being built or sent) and ``pool_bytes``,
        the pool's size (``queued_max_request_bytes``). For monitoring and tests; safe from any thread."""
        state = self._state
        if state is None:
            return {"connections": 0, "pool_bytes_used": 0, "pool_bytes": self.config.queued_max_request_bytes}
        return {"connections": len(state.connections), "pool_bytes_used": state.pool.used,
                "pool_bytes": state.pool.capacity}

    def loop_cpu_seconds(self) -> float | None:
        """CPU seconds the event loop's thread has used so far, None when it is not serving (the metrics' event
        loop busy ratio, the analogue of Kafka's request handler idle percent). Safe from any thread."""
        clock = self._loop_clock
        if clock is None or self._stopped.is_set():
            return None
        try:
            return time.clock_gettime(clock)
        except OSError:
            return None

    def group_counts(self) -> list[tuple[str, int, int, int]]:
        """(group id, generation, live members, rebalances since the start) per group the coordinator holds;
        empty before it started. Safe from any thread."""
        state = self._state
        return state.coordinator.group_counts() if state is not None else []

    def start(self) -> "Server":
        """Start serving in a background thread; returns once the port is bound (raises what binding raised)."""
        if self._thread is not None:
            raise InvalidArgumentError("this server was started already")
        self._thread = threading.Thread(target=self._thread_main, name="pylog-serve", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        return self

    def serve_forever(self, handle_signals: bool = True) -> None:
        """Serve in this thread until :meth:`close` (from another thread) or, with ``handle_signals``, SIGTERM
        or SIGINT; then stop cleanly."""
        asyncio.run(self._main(handle_signals))
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        """Stop cleanly (see the module docstring); idempotent."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not self._stopped.is_set():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop is closed: it stopped already
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        elif loop is not None:
            self._stopped.wait()

    def stats(self) -> dict[str, float]:
        """Figures of the running (or stopped) server: see :meth:`ServerState.stats` (empty before it started)."""
        return self._state.stats() if self._state is not None else {}

    def __enter__(self) -> "Server":
        if self._thread is None and self._loop is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<pylog Server {self.bootstrap_servers} store={getattr(self.store, 'path', self._store_arg)!r}>"

    # ------------------------------------------------------------------ internals

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main(handle_signals=False))
        except BaseException as exc:  # reported by start() or logged: the thread must not die silently
            if not self._ready.is_set():
                self._failure = exc
            else:
                log.exception("pylog serve: the server thread failed")
        finally:
            self._ready.set()

    async def _main(self, handle_signals: bool) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()  # a second SIGTERM/SIGINT: stop without waiting for the requests under way
        states: list[ServerState] = []  # the state, once made: connections are accepted only after that
        try:
            if self.store is None:
                path = self._store_arg
                assert not isinstance(path, Store)
                options: dict[str, Any] = {"max_open_descriptors": self.config.max_open_descriptors}
                if self.config.transactional_id_expiration_ms is not None:
                    options["transactional_id_expiration_ms"] = self.config.transactional_id_expiration_ms
                for name in ("remote_storage_location", "remote_storage_endpoint_url"):
                    if getattr(self.config, name) is not None:
                        options[name] = getattr(self.config, name)
                self.store = await loop.run_in_executor(None, lambda: open_store(path, **options))
            store = self.store
            authorizer = None
            if self.config.authorizer:  # reads the store's ACLs: a damaged file stops the start here
                authorizer = await loop.run_in_executor(None, lambda: Authorizer(
                    store, parse_principals(self.config.super_users), self.config.allow_everyone_if_no_acl_found))
            listener = await loop.create_server(lambda: Connection(states[0]), self.config.host, self.config.port,
                                                ssl=self.config.ssl_context, reuse_address=True,
                                                backlog=_ACCEPTS_PER_TURN, start_serving=False)
        except BaseException as exc:
            self._failure = exc
            self._ready.set()
            if self._owns_store and self.store is not None:
                self.store.close()
            return
        if self.config.socket_receive_buffer_bytes != -1:
            for ts in listener.sockets:  # accepted sockets inherit it (before their handshake: the window fits)
                ts.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.socket_receive_buffer_bytes)
        sock = listener.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        state = ServerState(store, self.config, loop, self.advertised, authorizer)
        routes.install(state)
        # Before the first connection: the groups saved by the previous run are taken over, not rejoined.
        await state.coordinator.load()
        states.append(state)
        self._state = state
        await listener.start_serving()
        _deepen_backlog(listener)

        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal)
        log.info("pylog serve: listening on %s:%d (store %s)", self.host, self.port, store.path)
        _log_descriptors(store)
        loop.set_exception_handler(_loop_exception_handler(store))
        _warn_plain_in_the_clear(self.config, [s.getsockname()[0] for s in listener.sockets])
        self._loop_clock = time.pthread_getcpuclockid(threading.get_ident())
        self._ready.set()
        try:
            reaper = loop.create_task(self._reap(state))
            sweeper = loop.create_task(self._sweep_turns(state))
            timeouts = loop.create_task(self._abort_timed_out(state))
            await self._stop.wait()
            timeouts.cancel()
            sweeper.cancel()
            reaper.cancel()
        finally:
            await self._shutdown(listener, state)
            self._stopped.set()
            self._loop_clock = None

    async def _reap(self, state: ServerState) -> None:
        """Close connections idle for ``connections_max_idle_ms`` (Kafka's ``connections.max.idle.ms``: a client
        that went away without closing does not hold its socket forever) and those whose request under way has
        not arrived whole within ``request_receive_timeout_ms`` of its first byte (a partial frame, a slowloris)."""
        idle_ms, receive_ms = self.config.connections_max_idle_ms, self.config.request_receive_timeout_ms
        limits = [ms / 1000.0 for ms in (idle_ms, receive_ms) if ms]
        if not limits:
            return
        step = min(30.0, max(min(limits) / 4, 0.05))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(step)
            now = loop.time()
            for c in list(state.connections):
                if idle_ms and c.idle_for(now) * 1000 > idle_ms:
                    state.rlog.log(logging.INFO, "idle", "pylog serve: closing the connection from %s: idle for "
                                   "more than %d ms (connections_max_idle_ms)", c.client_host, idle_ms)
                    c.abort()
                elif receive_ms and c.receiving_for(now) * 1000 > receive_ms:
                    state.rlog.log(logging.WARNING, "receive timeout", "pylog serve: closing the connection from "
                                   "%s: a request not received whole within %d ms of its first byte "
                                   "(request_receive_timeout_ms)", c.client_host, receive_ms)
                    c.abort()

    @staticmethod
    async def _sweep_turns(state: ServerState) -> None:
        """Hand the partitions the server holds over to writers of other processes that wait for them, also
        while no client produces (see :mod:`pylog.server.turns`)."""
        loop = asyncio.get_running_loop()
        pause = SWEEP_S
        while True:
            await asyncio.sleep(pause)
            if state.turns:
                began = loop.time()
                try:
                    await state.run(state.turns.sweep)
                except RuntimeError:  # the storage pool shut down: the server is stopping
                    return
                # Two system calls per partition held: with hundreds held, sweeping takes milliseconds (500: ~1.5
                # ms of CPU); it never takes more than a twentieth of one storage thread (a fifth before: at 500
                # partitions that was ~15% of a core while a producer wrote them, and for 10 s after).
                pause = max(SWEEP_S, SWEEP_DUTY * (loop.time() - began))

    @staticmethod
    async def _abort_timed_out(state: ServerState) -> None:
        """Abort the transactions open past their timeout (a client that died mid-transaction) and forget the
        transactional ids idle past ``transactional.id.expiration.ms``, every
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, when the store does not already: a store
        open for writing sweeps them in a thread of its own when its cleaner is enabled (``log.cleaner.enable``)."""
        settings = state.store.settings
        if state.store.read_only or settings["log.cleaner.enable"]:
            return
        coordinator = transaction_coordinator(state.store)
        pause = settings["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000.0
        while True:
            await asyncio.sleep(pause)
            try:
                await state.run(coordinator.sweep)
            except RuntimeError:  # the storage pool shut down: the server is stopping
                return
            except PylogError as exc:  # a lock or the disk: the next sweep tries again
                log.warning("pylog serve: aborting timed-out transactions failed: %s", exc)

    def _on_signal(self) -> None:
        assert self._stop is not None and self._hurry is not None
        if self._stop.is_set():
            log.warning("pylog serve: second signal: closing the connections without waiting for their requests")
            self._hurry.set()
        self._stop.set()

    async def _shutdown(self, listener: asyncio.Server, state: ServerState) -> None:
        log.info("pylog serve: stopping")
        listener.close()
        conns = list(state.connections)
        for c in conns:
            c.close()
        # Before waiting for the connections: a JoinGroup parked in a rebalance is answered (NOT_COORDINATOR)
        # and long-poll fetches are woken (they see their connection closing and answer with what they have).
        state.coordinator.close()
        state.waiters.wake_all()
        if conns:
            async def finished() -> None:
                await asyncio.gather(*(c.finished() for c in conns), return_exceptions=True)

            async def hurried() -> None:
                if self._hurry is not None:
                    await self._hurry.wait()

            done, hurry = asyncio.ensure_future(finished()), asyncio.ensure_future(hurried())
            await asyncio.wait({done, hurry}, timeout=self.config.shutdown_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
            if not done.done():
                log.warning("pylog serve: connections still answering a request after %.0f s (or a second signal); "
                            "closing them", self.config.shutdown_timeout_s)
            for c in conns:
                c.abort()
        state.coordinator.close()
        state.waiters.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, state.executor.shutdown, True)
        await loop.run_in_executor(None, state.readers.shutdown, True)
        # The fsyncs of requests that were aborted above may still run: before the store closes under them.
        await loop.run_in_executor(None, state.group_commit.wait_idle, self.config.shutdown_timeout_s)
        st = state.stats()
        log.info("pylog serve: group commit: %d partition fsyncs for %d acks=all requests (%.2f per request); "
                 "%d disk syncs, %d of them store-wide syncfs rounds covering %d partitions",
                 st["group_commit_fsyncs"], st["acks_all_requests"], st["fsyncs_per_acks_all_request"],
                 st["group_commit_syncs"], st["group_commit_rounds"], st["group_commit_round_flushes"])
        await loop.run_in_executor(None, state.decoder.shutdown, True)
        await loop.run_in_executor(None, state.logins.close)
        store = state.store
        if self._owns_store:
            await loop.run_in_executor(None, store.close)
        elif not store.closed:
            await loop.run_in_executor(None, store.flush)
        log.info("pylog serve: stopped")


def _log_descriptors(store: Store) -> None:
    """Tell the operator how many file descriptors the server may use and how it will spend them."""
    d = store.handles.figures()
    limit, budget = d["limit"], d["budget"]
    level = logging.WARNING if limit - budget < 256 else logging.INFO
    log.log(level, "pylog serve: may open %d file descriptors (RLIMIT_NOFILE, `ulimit -n`); the store's partitions "
            "keep at most %d of them (max.open.descriptors: about %d per partition in use, so %d partitions at once; "
            "the least recently used let go of their files and open them again when used), the other %d are for "
            "connections (one each) and the rest of the process%s", limit, budget, d["per_partition"],
            d["partitions"], limit - budget, "; raise `ulimit -n` to serve more than a few hundred connections"
            if level == logging.WARNING else "")


def _loop_exception_handler(store: Store) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """The loop's handler of errors it has nowhere to send: out of descriptors, asyncio's accept backs off and
    tries again a second later; the store lets go of some partitions' files meanwhile, and the message is logged
    once a minute, not for every attempt."""
    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in DESCRIPTOR_ERRNOS:
            freed = store.handles.shrink(_SHRINK_ON_EMFILE)
            _shortage.log(logging.ERROR, "accept", "pylog serve: out of file descriptors (%s: %s); new connections "
                          "wait (accepting again every second), the store let go of %d partitions' files; raise "
                          "`ulimit -n` or lower max.open.descriptors", context.get("message"), exc, freed)
            return
        loop.default_exception_handler(context)
    return handler


def serve(store: Store | str | os.PathLike[str], host: str = "127.0.0.1", port: int = 9092,
          **options: Any) -> Server:
    """Serve ``store`` (a :class:`~pylog.Store` or a path) over Kafka's wire protocol from a background thread.

    Returns the started :class:`Server`; use it as a context manager (``with pylog.serve(store, port=0) as
    server:`` ... ``server.bootstrap_servers``) or call :meth:`Server.close`. Options are the fields of
    :class:`ServerConfig`.
    """
    return Server(store, host=host, port=port, **options).start()
