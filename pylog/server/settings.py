"""The settings of ``pylog serve``: :class:`ServerConfig`, the keyword arguments of :func:`pylog.serve`.

Invariants:
- A :class:`ServerConfig` that passed :meth:`ServerConfig.check` is consistent: every bound is in its range,
  the memory pool holds at least one largest request, and the security settings name only what exists
  (principals parse, quotas parse, SASL mechanisms are known; ``super_users`` only with the authorizer).
- This module knows nothing of a running server: it imports only the parsers of the settings it checks.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from ..errors import InvalidArgumentError
from ..store import DEFAULT_SYNCFS_PARTITIONS
from .auth import Credentials, SaslServer
from .authorizer import parse_principals
from .quotas import ServerQuotas

__all__ = ["ServerConfig"]


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
    #: The store's ``transactional.id.expiration.ms`` when the server opens it (given a path): a transactional
    #: id whose last transaction ended this long ago is forgotten (its state and lock file); None: the store's
    #: default, 7 days (Kafka's).
    transactional_id_expiration_ms: int | None = None
    #: The store's ``remote.storage.location`` and ``remote.storage.endpoint.url`` (tiered storage) when the
    #: server opens it from a path: its upload thread ships the topics with ``remote.storage.enable`` there, and
    #: Fetch below the local log start reads from the bucket. None: the store's (no tiered storage).
    remote_storage_location: str | None = None
    remote_storage_endpoint_url: str | None = None
    #: From how many partitions waiting for an fsync (acks=all, flush.messages) on the process's group commit
    #: makes them durable together with one ``syncfs`` of their file system (0: an fdatasync each). Process-wide:
    #: it is set on the group commit that pylog's producers of this process share.
    group_commit_syncfs_partitions: int = DEFAULT_SYNCFS_PARTITIONS
    #: Kafka's ``socket.receive.buffer.bytes`` (same default): the kernel receive buffer of each connection's
    #: socket (``SO_RCVBUF``, set on the listening socket, so accepted ones have it from their first byte); -1:
    #: the operating system's, autotuned (up to ``net.ipv4.tcp_rmem``'s maximum, 32 MiB on some kernels). A
    #: connection that stops reading (docs/SERVER.md, "Pipelining") pushes back on its producer once this and
    #: the client's send buffer are full: an autotuned one holds thousands of small Produce requests.
    socket_receive_buffer_bytes: int = 102_400

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
        if self.transactional_id_expiration_ms is not None and (
                type(self.transactional_id_expiration_ms) is not int
                or not 1 <= self.transactional_id_expiration_ms <= (1 << 31) - 1):
            raise InvalidArgumentError("transactional_id_expiration_ms must be an int in [1, 2**31-1], got "
                                       f"{self.transactional_id_expiration_ms!r}")
        for name in ("remote_storage_location", "remote_storage_endpoint_url"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise InvalidArgumentError(f"{name} must be a str, got {getattr(self, name)!r:.200}")
        if type(self.socket_receive_buffer_bytes) is not int or not (
                self.socket_receive_buffer_bytes == -1 or 1024 <= self.socket_receive_buffer_bytes <= 1 << 30):
            raise InvalidArgumentError("socket_receive_buffer_bytes must be -1 (the system's) or in [1024, 2**30], "
                                       f"got {self.socket_receive_buffer_bytes!r}")
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
