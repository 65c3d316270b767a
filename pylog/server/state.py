"""What one running ``pylog serve`` shares between its connections and handlers: :class:`ServerState`.

The state is made once per server start (:meth:`pylog.server.server.Server`), before the first connection is
accepted, and lives until the server's clean stop has drained its pools. It holds the store, the settings,
the thread pools every blocking call runs in, the bounds of :mod:`pylog.server.limits`, the group
coordinator, the fetch waiters, the partitions held for appends (:mod:`pylog.server.turns`), quotas and the
authorizer. The handler table (``handlers``) is filled in by :func:`pylog.server.routes.install`, which
imports the handler modules: those import this module, never the reverse, so the server's modules form no
import cycle.

Invariants:
- Whatever may block (an append, an fsync, another process's writer lock, a directory listing) runs in one
  of the state's pools (:meth:`ServerState.run`, :meth:`ServerState.read`, :meth:`ServerState.decode`),
  never on the event loop.
- ``acks=all`` fsyncs go through the process's group commit (:meth:`ServerState.when_durable`), shared with the
  pylog producers of the same process.
- :class:`ProducerOwners` remembers at most :data:`MAX_PRODUCER_OWNERS` producer ids.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import functools
import hashlib
import logging
import os
import threading
from typing import Any, Awaitable, Callable, Protocol

from ..errors import PylogError, RateLimitedLog
from ..partition import Partition, internals
from ..store import Store
from . import protocol
from .authorizer import Authorizer, ResourceType, principal_of
from .coordinator import GroupCoordinator
from .limits import BytePool, ConnectionCounts, CreationGuard
from .logins import LoginGuard
from .operations import CLUSTER, GROUP, TOPIC, authorized_operations
from .quotas import ServerQuotas
from .settings import ServerConfig
from .turns import Turns
from .waiting import FetchWaiters

__all__ = ["Client", "Handler", "MAX_PRODUCER_OWNERS", "ProducerOwners", "ServerState"]

log = logging.getLogger("pylog.server")


class Client(Protocol):
    """What the server sees of a connection (:class:`pylog.server.connection.Connection`)."""

    client_host: str
    principal: str | None

    def close(self) -> None: ...
    def abort(self) -> None: ...
    def idle_for(self, now: float) -> float: ...
    def receiving_for(self, now: float) -> float: ...
    async def finished(self) -> None: ...


#: A handler's answer: the response body, None (no answer: acks=0), or a future of the body (answered later,
#: in order: see :mod:`pylog.server.connection`). It is given the request and the connection.
Handler = Callable[[Any, Any], Awaitable["dict | asyncio.Future[dict] | None"]]


class ServerState:
    """What the connections and handlers of one running server share (internal to pylog.server)."""

    def __init__(self, store: Store, config: ServerConfig, loop: asyncio.AbstractEventLoop,
                 advertised: tuple[str, int], authorizer: Authorizer | None = None) -> None:
        self.store = store
        self.config = config
        self.advertised = advertised
        self.cluster_id = _cluster_id(store.path)
        self.connections: set[Client] = set()
        self.pool = BytePool(config.queued_max_request_bytes, config.max_request_bytes)
        self.counts = ConnectionCounts(config.max_connections, config.max_connections_per_ip)
        self.creations = CreationGuard(config.max_topics, config.max_partitions, config.controller_mutation_rate,
                                       max(10 * config.controller_mutation_rate, config.max_partitions_per_topic),
                                       self._count_topics)
        self.rlog = RateLimitedLog(log)
        self.executor = concurrent.futures.ThreadPoolExecutor(config.storage_threads,
                                                              thread_name_prefix="pylog-serve-storage")
        self.readers = concurrent.futures.ThreadPoolExecutor(config.storage_threads,
                                                             thread_name_prefix="pylog-serve-read")
        # Large request frames are decoded by one thread: decoding is pure Python and holds the GIL, and more
        # threads decoding at once would each take turns with the event loop (the loop then waits for several).
        self.decoder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pylog-serve-decode")
        self.waiters = FetchWaiters(loop)
        #: The fsyncs of acks=all: the process's group commit, shared with pylog's producers in this process.
        self.group_commit = store.group_commit
        self.group_commit.set_syncfs_partitions(config.group_commit_syncfs_partitions)
        self.loop = loop
        #: Calls other threads handed to the loop (:meth:`post`) that it has not made yet.
        self._posted: list[tuple[Callable[..., None], tuple]] = []
        self._posted_lock = threading.Lock()
        self._gc_start = self.group_commit.stats()
        self.acks_all_requests = 0  # produce requests with acks=all answered after their fsyncs
        #: The partitions the server holds for its appends, handed over when idle (pylog.server.turns).
        self.turns = Turns()
        self.logins = LoginGuard(threads=config.sasl_login_threads,
                                 delay_ms=config.connection_failed_authentication_delay_ms,
                                 max_delay_ms=config.connection_failed_authentication_delay_max_ms)
        # Offset commits wait for __consumer_offsets' writer lock like any append: the storage pool, which a clean
        # stop drains before the store closes (the loop's default executor is not waited for).
        self.coordinator = GroupCoordinator(store, initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                                            max_group_size=config.group_max_size, max_groups=config.max_groups,
                                            max_metadata_bytes=config.offset_metadata_max_bytes,
                                            max_member_bytes=config.max_group_member_bytes,
                                            executor=self.executor)
        self.api_keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(protocol.supported_versions().items())]
        #: Kafka API key -> handler, filled in by :func:`pylog.server.routes.install` once the state is made.
        self.handlers: dict[int, Handler] = {}
        #: Which principal got each producer id this server handed out (bounded: see ProducerOwners).
        self.producer_owners = ProducerOwners()
        #: Client quotas: those of the settings with the changes AlterClientQuotas saved in the store (read here,
        #: before serving: a damaged file stops the start as a damaged ACL file does), saved again at each change.
        self.quotas = ServerQuotas(config.quotas or {}, config.quota_window_num, config.quota_window_size_s,
                                   store.client_quota_changes())
        self.quotas.save = functools.partial(self.run, store.replace_client_quota_changes)
        self.authorizer = authorizer

    def is_super_user(self, user: str | None) -> bool:
        """Whether a connection authenticated as ``user`` is one of ``super_users`` (with the authorizer on)."""
        return self.authorizer is not None and self.authorizer.is_super(principal_of(user))

    def authorized_operations(self, conn: Any, resource: str, name: str) -> int:
        """KIP-430's bit field of what ``conn``'s principal may do with the ``resource`` (operations.TOPIC,
        CLUSTER or GROUP) called ``name``: the authorizer's decisions, or everything without one."""
        authorizer = self.authorizer
        if authorizer is None:
            return authorized_operations(resource, self.store.read_only)
        principal, rtype = principal_of(conn.principal), _RESOURCE_TYPES[resource]
        return authorized_operations(resource, self.store.read_only,
                                     lambda op: authorizer.authorize(principal, conn.client_host, op, rtype, name))

    def default_partitions(self) -> int:
        """Partitions of a topic created without a count (auto-creation, CreateTopics with -1)."""
        n = self.config.num_partitions
        return self.store.settings["num.partitions"] if n is None else n
    def _count_topics(self) -> tuple[int, int]:
        """The store's topics and partitions (in the storage pool: it lists the store's directory)."""
        names = self.store.topics()
        partitions = 0
        for name in names:
            try:
                partitions += self.store.topic(name).num_partitions
            except PylogError:  # deleted meanwhile
                pass
        return len(names), partitions

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the storage thread pool (appends, fsyncs, anything that may wait for a lock)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def decode(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the decoder thread (the decoding of a large request frame)."""
        return await asyncio.get_running_loop().run_in_executor(self.decoder, fn, *args)

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        """From any thread: call ``fn(*args)`` on the loop (dropped if the loop closes first). Calls posted
        while the loop has not yet made the earlier ones reach it with one wake-up (one self-pipe write), not one
        each: a store-wide round or a storage thread's pipelined appends complete many requests at once."""
        with self._posted_lock:
            first = not self._posted
            self._posted.append((fn, args))
        if first:
            try:
                self.loop.call_soon_threadsafe(self._run_posted)
            except RuntimeError:  # the loop closed meanwhile (a hurried stop): nobody waits for the answer
                pass

    def _run_posted(self) -> None:
        """On the loop: make every call :meth:`post` handed over since the last time."""
        with self._posted_lock:
            posted, self._posted = self._posted, []
        for fn, args in posted:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one answer's bug must not lose the others
                log.exception("pylog serve: a call handed to the event loop failed")

    def when_durable(self, parts: list[Partition], then: Callable[[list[BaseException | None]], None]) -> None:
        """From any thread: fsync ``parts`` (appended to already) through the group commit, then call ``then``
        on the loop with per partition None or the error (not at all if the loop closes first). A callback, not
        a future awaited by a task: librdkafka sends one small Produce per partition batch, and a task per
        request was a large share of the loop's time per request."""
        self.group_commit.submit([internals(p) for p in parts], functools.partial(self.post, then))

    def stats(self) -> dict[str, float]:
        """The group commit's figures since this server started: ``acks_all_requests`` answered after their
        fsyncs, ``group_commit_fsyncs`` (partitions made durable in this process, pylog producers' included) and
        their ratio ``fsyncs_per_acks_all_request``; of those, ``group_commit_round_flushes`` made durable in
        ``group_commit_rounds`` store-wide rounds (one ``syncfs`` each); ``group_commit_syncs``: the calls that
        made data durable (an fdatasync per partition flushed alone, a syncfs per round)."""
        now = self.group_commit.stats()
        delta = {key: now[key] - self._gc_start[key] for key in ("flushes", "rounds", "round_flushes", "syncs")}
        fsyncs = delta["flushes"]
        return {"acks_all_requests": self.acks_all_requests, "group_commit_fsyncs": fsyncs,
                "fsyncs_per_acks_all_request": fsyncs / self.acks_all_requests if self.acks_all_requests else 0.0,
                "group_commit_rounds": delta["rounds"], "group_commit_round_flushes": delta["round_flushes"],
                "group_commit_syncs": delta["syncs"]}

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the read thread pool: reads of segment files (a cold page faults on the disk) and
        of the store's directory, kept off the event loop and out of the appenders' way."""
        return await asyncio.get_running_loop().run_in_executor(self.readers, fn, *args)


_RESOURCE_TYPES = {TOPIC: ResourceType.TOPIC, CLUSTER: ResourceType.CLUSTER, GROUP: ResourceType.GROUP}


def _cluster_id(path: str) -> str:
    """A stable Kafka-style cluster id (22 characters of URL-safe base64) derived from the store's path."""
    digest = hashlib.blake2b(os.path.realpath(path).encode(), digest_size=16).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")

class ProducerOwners:
    """Which principal (a SASL user name; None without SASL) owns each producer id seen by this server: the one
    it was issued to by InitProducerId, or, for an id this server did not issue (one from before a restart),
    the first that produces with it. A produce naming another principal's id is refused, so one user cannot
    fence another's idempotent producer. Bounded: past :data:`MAX_PRODUCER_OWNERS` ids the least recently used
    is forgotten (it is then claimed again by its next producer). Thread-safe (the storage pool's threads claim)."""

    def __init__(self, limit: int | None = None) -> None:
        self._owners: collections.OrderedDict[int, str | None] = collections.OrderedDict()
        self._limit = MAX_PRODUCER_OWNERS if limit is None else limit
        self._lock = threading.Lock()

    def issued(self, pid: int, principal: str | None) -> None:
        with self._lock:
            self._record(pid, principal)

    def claim(self, pid: int, principal: str | None) -> bool:
        """Whether ``principal`` may produce with ``pid`` (recording it as the owner when nobody is)."""
        with self._lock:
            owners = self._owners
            if pid in owners:
                if owners[pid] != principal:
                    return False
                owners.move_to_end(pid)  # least recently used first out: a producer in use is remembered
                return True
            self._record(pid, principal)
            return True

    def _record(self, pid: int, principal: str | None) -> None:
        owners = self._owners
        owners[pid] = principal
        owners.move_to_end(pid)
        while len(owners) > self._limit:
            owners.popitem(last=False)


#: The most producer ids :class:`ProducerOwners` remembers (about 100 bytes each).
MAX_PRODUCER_OWNERS = 100_000
