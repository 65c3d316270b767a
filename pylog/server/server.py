"""``pylog serve``: a Kafka broker over a pylog store, in one process, on one asyncio event loop.

:class:`Server` owns the listening socket, the connections (:mod:`pylog.server.connection`), the storage
thread pool that appends and fsyncs, the fetch waiters (:mod:`pylog.server.waiting`) and the group
coordinator (:mod:`pylog.server.coordinator`). It runs either in the caller's thread (the CLI:
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
import base64
import concurrent.futures
import functools
import hashlib
import logging
import os
import signal
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from .. import metrics
from ..errors import InvalidArgumentError, PylogError
from ..partition import Partition, internals
from ..storage.fileio import DESCRIPTOR_ERRNOS
from ..storage.handles import PER_PARTITION, RateLimitedLog, descriptor_limit
from ..store import Store
from ..store import open as open_store
from ..storage import group_commit
from . import protocol
from .admin import AdminHandlers
from .access import Access, AclHandlers
from .auth import Credentials, SaslServer, plain_exposed_addresses
from .authorizer import Authorizer, ResourceType, parse_principals, principal_of
from .connection import Connection
from .coordinator import GroupCoordinator
from .handlers import DataHandlers, ProducerOwners
from .limits import BytePool, ConnectionCounts, CreationGuard
from .logins import LoginGuard
from .operations import CLUSTER, GROUP, TOPIC, authorized_operations
from .quotas import ServerQuotas
from .turns import SWEEP_S, Turns
from .waiting import FetchWaiters

__all__ = ["Server", "ServerConfig", "serve"]

log = logging.getLogger("pylog.server")
#: Out of descriptors, the same failure repeats for every connection and request: one line per kind a minute.
_shortage = RateLimitedLog(log, 60.0)
#: Partitions whose files the store lets go of when an accept finds no descriptor left.
_SHRINK_ON_EMFILE = 16

#: A handler's answer: the response body, None (no answer: acks=0), or a future of the body (answered later,
#: in order: see :mod:`pylog.server.connection`).
Handler = Callable[[Any, Connection], Awaitable["dict | asyncio.Future[dict] | None"]]
#: asyncio accepts as many connections per turn of the event loop as the listen backlog it is given, each a
#: transport to set up (and, beyond ``max_connections``, to close again): 1,024 in one turn held the other
#: connections' answers ~150 ms in a connection flood. It is given 50 (Kafka's ``socket.listen.backlog.size``
#: default), and the kernel's queue is set to :data:`_KERNEL_BACKLOG` afterwards, so that a burst of clients
#: (or a server briefly out of descriptors) still finds its connections queued rather than refused.
_ACCEPTS_PER_TURN = 50
_KERNEL_BACKLOG = 1024


@dataclass
class ServerConfig:
    """The settings of a :class:`Server` (keyword arguments of :func:`serve`)."""

    #: Address to listen on. Loopback by default: pass ``"0.0.0.0"`` (with TLS and SASL) to be reachable.
    host: str = "127.0.0.1"
    #: TCP port; 0 picks a free one (:attr:`Server.port` says which).
    port: int = 9092
    #: The host and port clients are told to connect to (Metadata, FindCoordinator); default: the bound ones.
    advertised_host: str | None = None
    advertised_port: int | None = None
    #: Create a topic a Metadata request names when the client allows it (Kafka's
    #: ``auto.create.topics.enable``, true by default there too), with the store's ``num.partitions``.
    auto_create_topics: bool = True
    #: Kafka's ``num.partitions``: the partition count of a topic created by auto-creation or by a CreateTopics
    #: request that gives none (-1); None: the store's ``num.partitions`` setting.
    num_partitions: int | None = None
    #: Largest request frame accepted (Kafka's ``socket.request.max.bytes``); a larger one closes the connection.
    max_request_bytes: int = 100 * 1024 * 1024
    #: Largest decompressed record batch accepted in a produce request.
    max_batch_bytes: int = 64 * 1024 * 1024
    #: TLS: a server-side ``ssl.SSLContext`` (see :func:`pylog.server.auth.make_server_ssl_context`).
    ssl_context: ssl.SSLContext | None = None
    #: SASL: the users (:class:`pylog.server.auth.Credentials`) clients must log in as; None: no authentication.
    sasl_credentials: Credentials | None = None
    #: The SASL mechanisms offered (default: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512).
    sasl_mechanisms: list[str] | None = None
    #: The most partitions CreateTopics and CreatePartitions give a topic: each is a directory of files, and a
    #: client should not be able to fill the disk's inodes with one request (pylog itself allows 2**20).
    max_partitions_per_topic: int = 10_000
    #: Kafka's ``connections.max.idle.ms``: a connection with no request for this long is closed (clients
    #: reconnect when they need to); 0 keeps idle connections open.
    connections_max_idle_ms: int = 600_000
    #: Kafka's ``queued.max.request.bytes``: bytes held by requests being received, queued or answered and by
    #: fetch answers being built or sent, across all connections. A connection whose next request does not fit
    #: stops being read until others give bytes back; a fetch gets what is free (waiting for at least 1 MiB).
    #: At least ``max_request_bytes`` (Kafka's rule), so that any one request can be served.
    queued_max_request_bytes: int = 128 * 1024 * 1024
    #: A request must arrive whole within this long of its first byte (slowloris, a partial frame held
    #: forever); time spent paused by the server does not count. 0: no deadline. (Kafka has none; its clients'
    #: ``request.timeout.ms``, 30 s, is the same bound from the other side.)
    request_receive_timeout_ms: int = 30_000
    #: A connection whose client reads nothing of its answer for this long is closed (the answer and its pool
    #: bytes are dropped); until then it is sent no further answer. 0: wait forever.
    response_send_timeout_ms: int = 30_000
    #: Kafka's ``max.connections`` and ``max.connections.per.ip``: connections beyond are closed at accept.
    max_connections: int = 1000
    max_connections_per_ip: int = 500
    #: The most topics, partitions, groups ... (struct array elements) one request may name; a request naming
    #: more closes its connection, as any request that does not decode. Bounds the work and memory of one request
    #: (a 10 MiB Metadata request named 1.3 M topics: a minute and 750 MB).
    max_request_items: int = 50_000
    #: The most topics and partitions in the store: topic creation (auto-create, CreateTopics) and
    #: CreatePartitions beyond are refused. Each partition is a directory of files.
    max_topics: int = 10_000
    max_partitions: int = 100_000
    #: Partitions created per second, server-wide, by auto-creation, CreateTopics and CreatePartitions (Kafka's
    #: ``controller_mutation_rate`` quota); bursts up to ten seconds' worth (at least ``max_partitions_per_topic``).
    #: Beyond: THROTTLING_QUOTA_EXCEEDED (CreateTopics, CreatePartitions), UNKNOWN_TOPIC_OR_PARTITION (Metadata).
    controller_mutation_rate: float = 1000.0
    #: The most topics one Metadata request may auto-create; the others it names get UNKNOWN_TOPIC_OR_PARTITION.
    auto_create_topics_per_request: int = 100
    #: Kafka's ``group.initial.rebalance.delay.ms``: how long a new group's first rebalance waits for more members.
    group_initial_rebalance_delay_ms: int = 300
    #: Kafka's ``group.max.size`` (unbounded there): members per group, counting those asked to join again
    #: (MEMBER_ID_REQUIRED); a JoinGroup beyond is answered GROUP_MAX_SIZE_REACHED.
    group_max_size: int = 1000
    #: Groups the coordinator holds at once. A JoinGroup starting a group beyond first drops Empty groups (never
    #: joined ones first; their committed offsets stay in the store); with none to drop it is answered
    #: GROUP_MAX_SIZE_REACHED (not retriable, so clients report it rather than retry in a loop).
    max_groups: int = 10_000
    #: Bytes the members of all groups may hold: their subscriptions (protocol metadata) and assignments, each
    #: member counted with a fixed 512-byte overhead too. A JoinGroup or a leader's SyncGroup that would take more
    #: is answered GROUP_MAX_SIZE_REACHED. Without it, members as large as ``max_request_bytes`` could pile up
    #: across ``max_groups`` groups.
    max_group_member_bytes: int = 256 * 1024 * 1024
    #: Kafka's ``offset.metadata.max.bytes``: longest metadata string of a committed offset (UTF-8 bytes);
    #: longer: OFFSET_METADATA_TOO_LARGE.
    offset_metadata_max_bytes: int = 4096
    #: Kafka's ``connection.failed.authentication.delay.ms``: a failed SASL login is answered after this delay,
    #: doubled for each further consecutive failure from the same client address (and that address's next login
    #: step waits as long), up to ``connection_failed_authentication_delay_max_ms``.
    connection_failed_authentication_delay_ms: int = 100
    connection_failed_authentication_delay_max_ms: int = 5000
    #: Threads the SASL steps run in (PBKDF2 for PLAIN logins of pre-salted users): never the event loop.
    sasl_login_threads: int = 2
    #: Kafka's ``authorizer.class.name`` set: every request is checked against the ACLs kept in the store
    #: (``<store>/__acls``, managed with CreateAcls / DescribeAcls / DeleteAcls; docs/SERVER.md, "Authorization").
    #: Off by default: without it every client may do everything, and the ACL APIs answer SECURITY_DISABLED.
    authorizer: bool = False
    #: Kafka's ``super.users``: principals allowed everything (``"User:admin;User:ops"`` or a list).
    super_users: str | list[str] | None = None
    #: Kafka's ``allow.everyone.if.no.acl.found``: a resource no ACL names is open to everyone (false, as in
    #: Kafka: with the authorizer on, what no ACL allows is refused).
    allow_everyone_if_no_acl_found: bool = False
    #: Client quotas (docs/SERVER.md, "Quotas"): Kafka's entities (``"user=alice"``, ``"client-id=etl"``, both,
    #: ``<default>`` for either) -> {``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``}.
    #: A client over its quota has its responses delayed and told so in ``throttle_time_ms``.
    quotas: dict[str, dict[str, float]] | None = None
    #: Kafka's ``quota.window.num`` and ``quota.window.size.seconds``: the window rates are measured over.
    quota_window_num: int = 11
    quota_window_size_s: float = 1.0
    #: Threads appending and fsyncing for the connections.
    storage_threads: int = 4
    #: How long a clean stop waits for the requests under way (seconds).
    shutdown_timeout_s: float = 10.0
    #: The store's ``max.open.descriptors`` when the server opens it (given a path); 0: half of RLIMIT_NOFILE.
    max_open_descriptors: int = 0
    #: From how many partitions waiting for an fsync (acks=all, flush.messages) on the process's group commit
    #: makes them durable together with one ``syncfs`` of their file system (0: an fdatasync each). Process-wide:
    #: it is set on the group commit that pylog's producers of this process share.
    group_commit_syncfs_partitions: int = group_commit.DEFAULT_SYNCFS_PARTITIONS

    def check(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"port must be an int in [0, 65535], got {self.port!r}")
        if self.max_request_bytes < 1024:
            raise InvalidArgumentError(f"max_request_bytes must be at least 1024, got {self.max_request_bytes}")
        if not isinstance(self.max_partitions_per_topic, int) or self.max_partitions_per_topic < 1:
            raise InvalidArgumentError("max_partitions_per_topic must be at least 1, got "
                                       f"{self.max_partitions_per_topic!r}")
        if not isinstance(self.connections_max_idle_ms, int) or self.connections_max_idle_ms < 0:
            raise InvalidArgumentError(f"connections_max_idle_ms must be >= 0, got {self.connections_max_idle_ms!r}")
        if self.num_partitions is not None and (type(self.num_partitions) is not int or
                                                not 1 <= self.num_partitions <= self.max_partitions_per_topic):
            raise InvalidArgumentError(f"num_partitions must be in [1, max_partitions_per_topic "
                                       f"({self.max_partitions_per_topic})], got {self.num_partitions!r}")
        for name in ("request_receive_timeout_ms", "response_send_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("max_connections", "max_connections_per_ip", "max_request_items", "max_topics",
                     "max_partitions", "auto_create_topics_per_request", "group_max_size", "max_groups",
                     "max_group_member_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.queued_max_request_bytes, int) or \
                self.queued_max_request_bytes < self.max_request_bytes:
            raise InvalidArgumentError(f"queued_max_request_bytes ({self.queued_max_request_bytes!r}) must be at "
                                       f"least max_request_bytes ({self.max_request_bytes})")
        if not isinstance(self.controller_mutation_rate, (int, float)) or not self.controller_mutation_rate > 0:
            raise InvalidArgumentError(f"controller_mutation_rate must be > 0, got {self.controller_mutation_rate!r}")
        for name in ("offset_metadata_max_bytes", "max_open_descriptors", "group_commit_syncfs_partitions"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"{name} must be >= 0, got {value!r}")
        for name in ("connection_failed_authentication_delay_ms", "connection_failed_authentication_delay_max_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= 300_000:
                raise InvalidArgumentError(f"{name} must be an int in [0, 300000], got {value!r}")
        if not isinstance(self.sasl_login_threads, int) or self.sasl_login_threads < 1:
            raise InvalidArgumentError(f"sasl_login_threads must be at least 1, got {self.sasl_login_threads!r}")
        if self.storage_threads < 1:
            raise InvalidArgumentError(f"storage_threads must be at least 1, got {self.storage_threads}")
        parse_principals(self.super_users)  # raises InvalidArgumentError for a malformed principal
        if (self.super_users or self.allow_everyone_if_no_acl_found) and not self.authorizer:
            raise InvalidArgumentError("super_users and allow_everyone_if_no_acl_found need authorizer=True")
        if self.quotas is not None:
            ServerQuotas(self.quotas, self.quota_window_num, self.quota_window_size_s)  # raises for bad quotas
        if self.sasl_credentials is not None:
            SaslServer(self.sasl_credentials, self.sasl_mechanisms)  # raises SecurityConfigError for bad mechanisms
        elif self.sasl_mechanisms is not None:
            raise InvalidArgumentError("sasl_mechanisms needs sasl_credentials (the users who may log in)")


class ServerState:
    """What the connections and handlers of one running server share (internal to pylog.server)."""

    def __init__(self, store: Store, config: ServerConfig, loop: asyncio.AbstractEventLoop,
                 advertised: tuple[str, int], authorizer: Authorizer | None = None) -> None:
        self.store = store
        self.config = config
        self.advertised = advertised
        self.cluster_id = _cluster_id(store.path)
        self.connections: set[Connection] = set()
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
        self.group_commit = group_commit.default()
        self.group_commit.set_syncfs_partitions(config.group_commit_syncfs_partitions)
        #: Completed group-commit answers not yet handed to the loop (see when_durable).
        self._durable_done: list[tuple[Callable[[list[BaseException | None]], None],
                                       list[BaseException | None]]] = []
        self._durable_lock = threading.Lock()
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
        data, admin = DataHandlers(self), AdminHandlers(self)
        groups = {k: _group_handler(self.coordinator, name) for k, name in (
            (8, "offset_commit"), (9, "offset_fetch"), (11, "join_group"), (12, "heartbeat"), (13, "leave_group"),
            (14, "sync_group"), (15, "describe_groups"), (16, "list_groups"), (42, "delete_groups"))}
        groups[15] = _with_group_operations(self, groups[15])
        self.handlers: dict[int, Handler] = {
            0: data.produce, 1: data.fetch, 2: data.list_offsets, 3: data.metadata, 10: data.find_coordinator,
            18: data.api_versions, 19: admin.create_topics, 20: admin.delete_topics, 21: admin.delete_records,
            22: data.init_producer_id, 32: admin.describe_configs, 33: admin.alter_configs,
            37: admin.create_partitions, **groups, **admin.handlers(),
        }
        supported = protocol.supported_versions()
        #: Which principal got each producer id this server handed out (bounded: see ProducerOwners).
        self.producer_owners = ProducerOwners()
        #: Client quotas: those of the settings with the changes AlterClientQuotas saved in the store (read here,
        #: before serving: a damaged file stops the start as a damaged ACL file does), saved again at each change.
        self.quotas = ServerQuotas(config.quotas or {}, config.quota_window_num, config.quota_window_size_s,
                                   store.client_quota_changes())
        self.quotas.save = functools.partial(self.run, store.replace_client_quota_changes)
        self.handlers.update(self.quotas.handlers())
        self.authorizer = authorizer
        if self.authorizer is not None:
            self.handlers.update(AclHandlers(self, self.authorizer).handlers())
            # (Access types answers as dicts; the Produce handler's future of one passes through it as is.)
            self.handlers = Access(self, self.authorizer).wrap(  # type: ignore[assignment]
                {k: h for k, h in self.handlers.items() if k in supported})  # type: ignore[misc]
        self.handlers = self.quotas.wrap({k: h for k, h in self.handlers.items() if k in supported})

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

    def when_durable(self, parts: list[Partition], then: Callable[[list[BaseException | None]], None]) -> None:
        """On the loop: fsync ``parts`` (appended to already) through the group commit, then call ``then`` on the
        loop with per partition None or the error (not at all if the loop closes first). A callback, not a
        future awaited by a task: librdkafka sends one small Produce per partition batch, and a task per request
        was a large share of the loop's time per request."""
        loop = asyncio.get_running_loop()

        def done(results: list[BaseException | None]) -> None:
            # A store-wide round completes hundreds of requests at once: they reach the loop with one wake-up (one
            # self-pipe write), not one each.
            with self._durable_lock:
                first = not self._durable_done
                self._durable_done.append((then, results))
            if first:
                try:
                    loop.call_soon_threadsafe(self._resolve_durable)
                except RuntimeError:  # the loop closed meanwhile (a hurried stop): nobody waits for the answer
                    pass
        self.group_commit.submit([internals(p) for p in parts], done)

    def _resolve_durable(self) -> None:
        """On the loop: call back every :meth:`when_durable` whose fsyncs completed since the last call."""
        with self._durable_lock:
            done, self._durable_done = self._durable_done, []
        for then, results in done:
            try:
                then(results)
            except Exception:  # noqa: BLE001 - one answer's bug must not lose the others
                log.exception("pylog serve: handing an fsync's result over failed")

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


def _with_group_operations(state: ServerState, describe: Handler) -> Handler:
    """DescribeGroups answering ``include_authorized_operations`` (the coordinator knows no principals)."""
    async def handler(req: Any, conn: Connection) -> "dict | asyncio.Future[dict] | None":
        result = await describe(req, conn)
        if isinstance(result, dict) and req.body.get("include_authorized_operations"):
            for g in result.get("groups") or ():
                if g.get("error_code") == 0 and isinstance(g.get("group_id"), str):
                    g["authorized_operations"] = state.authorized_operations(conn, GROUP, g["group_id"])
        return result
    handler.__name__ = "describe_groups"
    return handler


def _group_handler(coordinator: GroupCoordinator, name: str) -> Handler:
    """A group API's handler: the coordinator's method, given the client's id and host."""
    method = getattr(coordinator, name)

    async def handler(req: Any, conn: Connection) -> dict | None:
        result: dict | None = await method(req.body, req.api_version, client_id=req.client_id or "",
                                           client_host=conn.client_host)
        return result

    handler.__name__ = name
    return handler


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


def _cluster_id(path: str) -> str:
    """A stable Kafka-style cluster id (22 characters of URL-safe base64) derived from the store's path."""
    digest = hashlib.blake2b(os.path.realpath(path).encode(), digest_size=16).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


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
                budget = self.config.max_open_descriptors
                self.store = await loop.run_in_executor(None, lambda: open_store(path, max_open_descriptors=budget))
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
        sock = listener.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        state = ServerState(store, self.config, loop, self.advertised, authorizer)
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
            await self._stop.wait()
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
                # Two system calls per partition held: with thousands held, sweeping takes milliseconds; it
                # never takes more than a fifth of one storage thread.
                pause = max(SWEEP_S, 4 * (loop.time() - began))

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
    limit = descriptor_limit()
    budget = store.handles.budget
    capacity = store.handles.capacity
    level = logging.WARNING if limit - budget < 256 else logging.INFO
    log.log(level, "pylog serve: may open %d file descriptors (RLIMIT_NOFILE, `ulimit -n`); the store's partitions "
            "keep at most %d of them (max.open.descriptors: about %d per partition in use, so %d partitions at once; "
            "the least recently used let go of their files and open them again when used), the other %d are for "
            "connections (one each) and the rest of the process%s", limit, budget, PER_PARTITION, capacity,
            limit - budget, "; raise `ulimit -n` to serve more than a few hundred connections"
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
