"""Kafka's group coordinator (the classic consumer group protocol) for Kafka clients of ``pylog serve``.

The server is a single node and the coordinator of every group. :class:`GroupCoordinator` answers
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and
DeleteGroups. Each method takes a decoded request body (a dict, Kafka's JSON message spec field names in
snake_case) and the request's API version, and returns the response body dict. Everything runs on the
server's one event loop; the store's file operations run in an executor (a commit may wait for the offsets
partition's writer lock held by another process).

States, as Kafka's ``GroupCoordinator``: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back
to PreparingRebalance when a member joins, changes its protocols, leaves or expires; Dead for a deleted
group or after :meth:`GroupCoordinator.close`.

Invariants:
- Memory is bounded: at most ``max_groups`` groups (Empty ones are dropped to make room for new ones), at most
  ``max_group_size`` members per group counting those asked to join again, each member's protocols and
  assignment no larger than the request that brought them (``max_request_bytes``), the members of all groups
  together at most ``max_member_bytes`` (each group keeps its own count, ``held_bytes``, recounted after every
  change of its members, protocols or assignments; their sum is the coordinator's), commit metadata at most
  ``max_metadata_bytes``.
- A group's generation id only grows, by one per completed join phase, while the coordinator holds the group
  (an Empty group dropped for ``max_groups`` starts again from 0). Every member in CompletingRebalance
  or Stable joined in the current generation (members that did not rejoin are removed when the join phase
  completes); the leader is one of them and is the only one whose JoinGroup response lists the members.
- Assignments are those the current generation's leader sent in its SyncGroup (members it left out get an
  empty one); a new rebalance clears them and fails waiting SyncGroups with REBALANCE_IN_PROGRESS, so a
  SyncGroup never returns another generation's assignment.
- Every member not waiting in a JoinGroup has a session deadline; one that neither heartbeats, joins,
  syncs nor commits within ``session_timeout_ms`` is removed and the group rebalances.
- An offset commit from a member is accepted only when its member id and generation are the group's
  current ones (a "simple" commit, generation < 0 and no member id, only while the group has no members).
  Accepted commits go through ``store.commit_offsets`` into ``__consumer_offsets``, the same committed
  offsets pylog's own consumers and ``store.group_lag`` use. A group's commits and deletion are
  serialised, so they land in the order they were validated.
- Group state (generation, protocol, leader, members with their subscriptions and assignments) is saved in
  the store (:mod:`pylog.server.groupstate`, ``__consumer_groups/.coordinator``) each time a group reaches a
  new stable generation, becomes empty, is deleted or a static member is replaced, and is loaded by
  :meth:`GroupCoordinator.load` when the server starts: after a restart (clean, or a crash: the last
  saved stable generation) every member carries on with its member id, generation and assignment, and a
  member that does not come back expires after its session timeout, as after Kafka's coordinator moves.
  Committed offsets persist in the store's ``__consumer_offsets``.

Differences from Kafka, by design:
- pylog's own consumers coordinate through file locks in the store, not through this coordinator. A
  JoinGroup that would start a group that has live pylog members (``store.describe_consumer_group``) is
  refused with INCONSISTENT_GROUP_PROTOCOL (the error Kafka gives a member of another protocol type) and
  logged; a simple commit to it gets UNKNOWN_MEMBER_ID (Kafka's answer for a commit from a non-member to a
  non-empty group). The reverse is not detected: pylog consumers started while Kafka clients hold the group
  do not see them (they would share the group's offsets, not its partitions).
- Static membership (``group_instance_id``, KIP-345): such a member needs no MEMBER_ID_REQUIRED round; a
  JoinGroup with a known instance id and no member id replaces the old member (which gets
  FENCED_INSTANCE_ID). In a Stable group whose protocol the new member keeps, it takes over the old
  member's assignment without a rebalance, as in Kafka (its JoinGroup names the previous leader, so it does
  not assign); otherwise the group rebalances. A request naming an instance id with another member's id
  gets FENCED_INSTANCE_ID.
- The initial rebalance delay (Kafka's ``group.initial.rebalance.delay.ms``, 3000 ms there) defaults to
  :data:`DEFAULT_INITIAL_REBALANCE_DELAY_MS` (300 ms): long enough for consumers started together to
  form one generation, short for a development server. It is extended by up to one more delay each time a
  member joins during it, never beyond the largest rebalance timeout, as in Kafka.
- No pending-sync timeout (Kafka 3.x removes members that do not SyncGroup within the rebalance timeout):
  such a member is removed by its session timeout instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterable, NamedTuple, TypeVar

from ..clients.groups import check_group_id
from ..errors import (InvalidGroupError, InvalidTopicError, PartitionLockedError, PylogError, RebalanceInProgressError,
                      RecordTooLargeError, UnknownTopicError)
from ..storage.handles import RateLimitedLog
from ..structs import OffsetAndMetadata, TopicPartition
from .groupstate import SavedGroup, SavedMember, encode_groups, read_groups, write_groups
from .protocol.codes import (  # Kafka's error codes
    UNKNOWN_SERVER_ERROR, NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE,
    COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS,
    INVALID_COMMIT_OFFSET_SIZE, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED,
    FENCED_INSTANCE_ID,
)

__all__ = ["GroupCoordinator", "DEFAULT_INITIAL_REBALANCE_DELAY_MS", "EMPTY", "PREPARING_REBALANCE",
           "COMPLETING_REBALANCE", "STABLE", "DEAD"]

log = logging.getLogger("pylog.server.coordinator")
#: Refusals a flood repeats (max_groups): one line per 10 s, with the count left out.
_rlog = RateLimitedLog(log)
#: After a scan for Empty groups to drop found none, new groups are refused without scanning for this long (s):
#: a flood of JoinGroups at ``max_groups`` would otherwise scan every group for each.
_FULL_RESCAN_S = 1.0

_T = TypeVar("_T")

# Group states, named as Kafka names them in DescribeGroups and ListGroups.
EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

#: Default initial rebalance delay (Kafka's group.initial.rebalance.delay.ms is 3000 ms).
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 300
#: Kafka's group.min.session.timeout.ms / group.max.session.timeout.ms defaults.
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
#: Kafka's offset.metadata.max.bytes default.
DEFAULT_MAX_METADATA_BYTES = 4096
#: The protocol type pylog's own groups are listed and described with.
CONSUMER_PROTOCOL_TYPE = "consumer"
#: The group type ListGroups v5 reports (KIP-848 calls the protocol this coordinator speaks "classic").
CLASSIC_GROUP_TYPE = "classic"


class _JoinResult(NamedTuple):
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[dict[str, Any], ...] = ()


class _SyncResult(NamedTuple):
    error_code: int
    assignment: bytes = b""


@dataclass(eq=False)
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[_JoinResult] | None = None
    sync_future: asyncio.Future[_SyncResult] | None = None
    #: Loop time after which the member is expired (when not waiting in a JoinGroup).
    expires_at: float = 0.0
    timer: asyncio.TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass(eq=False)
class _Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    #: Insertion-ordered: the first member is the next leader when the leader goes.
    members: dict[str, _Member] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED, waiting for their second JoinGroup (expiry timers).
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    #: group_instance_id -> member id of its static member.
    static: dict[str, str] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    #: Whether the running join phase is the initial delay (completes only when its timer fires).
    initial_join: bool = False
    new_member_added: bool = False
    #: The members' protocol metadata and assignment bytes as last counted (:meth:`GroupCoordinator._recount`).
    held_bytes: int = 0
    #: New generations this coordinator made for the group (pylog_group_rebalances_total).
    rebalances: int = 0

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols().intersection(names))

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that all support; most votes
        wins, ties go to the leader's preference."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n in m.protocol_names() if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {n: i for i, n in enumerate(leader.protocol_names())}
        return min(votes, key=lambda n: (-votes[n], order.get(n, len(order))))

    def fenced(self, instance_id: str | None, member_id: str) -> bool:
        """Kafka's isStaticMemberFenced: the instance id belongs to another member id."""
        return instance_id is not None and self.static.get(instance_id, member_id) != member_id

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_future is not None for m in self.members.values())

    def current_members(self) -> tuple[dict[str, Any], ...]:
        return tuple({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                      "metadata": m.metadata(self.protocol_name)} for m in self.members.values())


#: What a member costs beyond its metadata and assignment bytes (its object, ids, timers), for the byte bound.
_MEMBER_OVERHEAD = 512


def _protocols_size(protocols: list[tuple[str, bytes]]) -> int:
    return sum(len(name) + len(meta) for name, meta in protocols) + _MEMBER_OVERHEAD


def _member_size(m: _Member) -> int:
    return _protocols_size(m.protocols) + len(m.assignment)


def _valid_group_id(group_id: Any) -> bool:
    try:
        check_group_id(group_id)
    except InvalidGroupError:
        return False
    return True


def _consumer_metadata(topics: Iterable[str]) -> bytes:
    """A ConsumerProtocolSubscription v0 (topics, null user data): what pylog's own members are described with."""
    out = [struct.pack(">hi", 0, len(topics := list(topics)))]
    for t in topics:
        b = t.encode()
        out.append(struct.pack(">h", len(b)) + b)
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def _subscription_topics(meta: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: the topics come first); [] when it does not
    parse (a member's metadata is the client's bytes)."""
    try:
        (n,) = struct.unpack_from(">i", meta, 2)
        pos, out = 6, []
        for _ in range(max(0, min(n, len(meta)))):
            (ln,) = struct.unpack_from(">h", meta, pos)
            out.append(bytes(meta[pos + 2:pos + 2 + ln]).decode("utf-8"))
            pos += 2 + ln
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def _consumer_assignment(tps: Iterable[TopicPartition]) -> bytes:
    """A ConsumerProtocolAssignment v0 (topic partitions, null user data)."""
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, parts in by_topic.items():
        b = t.encode()
        out.append(struct.pack(">h", len(b)) + b + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


class GroupCoordinator:
    """The group coordinator of a single-node ``pylog serve`` over ``store``.

    All request methods are coroutines to be run on one event loop (the one running when they are first
    called); they take ``(request, version, *, client_id="", client_host="")`` and return the response
    body dict. ``throttle_time_ms`` is always 0.

    :param initial_rebalance_delay_ms: how long a group's first join phase (from Empty) waits for more
        members (Kafka's ``group.initial.rebalance.delay.ms``); 0 disables it.
    :param min_session_timeout_ms, max_session_timeout_ms: the session timeouts JoinGroup accepts
        (INVALID_SESSION_TIMEOUT otherwise), Kafka's defaults.
    :param max_group_size: members per group (GROUP_MAX_SIZE_REACHED beyond it); None for no limit.
    :param max_metadata_bytes: the longest commit metadata accepted (OFFSET_METADATA_TOO_LARGE beyond).
    :param max_groups: groups held at once; a JoinGroup that would start one more first drops Empty groups
        (:meth:`_make_room`) and is answered GROUP_MAX_SIZE_REACHED when none can go. None for no limit.
    :param max_member_bytes: the members' protocol metadata and assignments of all groups together, in bytes
        (each member counted with its protocols, assignment and a fixed overhead); a JoinGroup that would
        take more, or a leader's SyncGroup assignment that would, is answered GROUP_MAX_SIZE_REACHED. None for
        no limit. Without it, members as large as ``max_request_bytes`` times ``max_groups`` times
        ``max_group_size`` could be held.
    :param executor: where the store's file operations run; None for the loop's default executor.
    """

    def __init__(self, store: Any, *, initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS,
                 min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
                 max_group_size: int | None = None, max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
                 max_groups: int | None = None, max_member_bytes: int | None = None,
                 executor: Executor | None = None) -> None:
        self._store = store
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_group_size = max_group_size
        self.max_metadata_bytes = max_metadata_bytes
        self.max_groups = max_groups
        self.max_member_bytes = max_member_bytes
        self._member_bytes = 0  # the sum of every group's held_bytes
        self._full_until = 0.0  # loop time until which _make_room does not scan again (see _FULL_RESCAN_S)
        self._executor = executor
        self._groups: dict[str, _Group] = {}
        #: group id -> [lock, users]: serialises a group's store writes (commits, deletion).
        self._io_locks: dict[str, list[Any]] = {}
        self._closed = False
        #: Each group's last saved stable (or empty) state, and (version, file body) of the latest snapshot
        #: of them; the writer (the executor) writes a version once, the newest it finds (see _save).
        self._saved: dict[str, SavedGroup] = {}
        self._snapshot: tuple[int, bytes] = (0, b"")
        self._written_version = 0
        self._write_queued = False
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    @property
    def closed(self) -> bool:
        return self._closed

    def group_state(self, group_id: str) -> str | None:
        """The coordinator's state of ``group_id`` (None when it holds no such group): for tests and tools."""
        g = self._groups.get(group_id)
        return g.state if g is not None else None

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the live members of ``group_id`` subscribe to (from their consumer-protocol metadata, for
        the group's protocol or, before one is chosen, their first), or None when the coordinator holds no
        live member of the group or its members are not consumers (``protocol_type`` other than "consumer"):
        what OffsetDelete checks before deleting committed offsets."""
        g = self._groups.get(group_id)
        if g is None or not g.members or g.state == DEAD or g.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        topics: set[str] = set()
        for m in g.members.values():
            meta = m.metadata(g.protocol_name) if g.protocol_name else (m.protocols[0][1] if m.protocols else b"")
            topics.update(_subscription_topics(meta))
        return topics

    def group_generation(self, group_id: str) -> int | None:
        g = self._groups.get(group_id)
        return g.generation_id if g is not None else None

    def group_counts(self) -> list[tuple[str, int, int, int]]:
        """(group id, generation, live members, rebalances made here) per group held: for the metrics. Safe
        from another thread (a copy of the group table is read)."""
        return [(gid, g.generation_id, len(g.members), g.rebalances) for gid, g in list(self._groups.items())]

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await self._loop().run_in_executor(self._executor, fn, *args)

    @contextlib.asynccontextmanager
    async def _group_io(self, group_id: str) -> AsyncIterator[None]:
        entry = self._io_locks.get(group_id)
        if entry is None:
            entry = self._io_locks[group_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._io_locks[group_id]

    def _pylog_members(self, group_id: str) -> int:
        """How many live members pylog's own (file-lock) consumers have in the group; blocking."""
        return len(self._store.describe_consumer_group(group_id).members)

    def close(self) -> None:
        """Stop: cancel every timer, answer waiting JoinGroups and SyncGroups with NOT_COORDINATOR (clients
        look for the coordinator again) and forget every group; later requests get NOT_COORDINATOR."""
        if self._closed:
            return
        self._closed = True
        if self._snapshot[0] > self._written_version:
            self._queue_write()  # a failed earlier write: once more (the server drains its executor on stop)
        for g in self._groups.values():
            self._cancel_join_timer(g)
            for t in g.pending.values():
                t.cancel()
            g.pending.clear()
            for m in g.members.values():
                self._cancel_member_timer(m)
                self._fail_futures(m, NOT_COORDINATOR)
            g.state = DEAD
        self._groups.clear()

    # ------------------------------------------------------------------ saved group state

    async def load(self) -> None:
        """Take over the groups saved in the store (before serving any request): each comes back in the state
        it was saved in (Stable with its members, assignments and generation, or Empty), and every member's
        session starts now. A damaged file is logged and ignored (every group starts empty, clients rejoin);
        a group that pylog's own consumers took over meanwhile is left to them."""
        try:
            saved = await self._run(read_groups, self._store.path)
        except (PylogError, OSError) as exc:
            log.warning("the coordinator's saved groups cannot be read (%s); every group starts empty", exc)
            return
        for sg in saved:
            if sg.members:
                try:
                    live = await self._run(self._pylog_members, sg.group_id)
                except (PylogError, OSError):
                    live = 1
                if live:
                    log.warning("group %r: not restored: pylog consumers use it through the store", sg.group_id)
                    continue
            g = self._groups[sg.group_id] = _Group(sg.group_id, state=STABLE if sg.members else EMPTY,
                                                    generation_id=sg.generation, protocol_type=sg.protocol_type,
                                                    protocol_name=sg.protocol_name, leader_id=sg.leader)
            for sm in sg.members:
                m = _Member(sm.member_id, sm.group_instance_id, sm.client_id, sm.client_host, sm.session_timeout_ms,
                            sm.rebalance_timeout_ms, sg.protocol_type or "", list(sm.protocols), sm.assignment)
                g.members[m.member_id] = m
                if m.group_instance_id is not None:
                    g.static[m.group_instance_id] = m.member_id
                self._touch(g, m)
            self._recount(g)
            self._saved[sg.group_id] = sg
        if saved:
            log.info("coordinator: restored %d group(s) (%d member(s)) from the store", len(self._saved),
                     sum(len(g.members) for g in self._saved.values()))

    def _make_room(self) -> bool:
        """Whether one more group fits under ``max_groups``, after dropping Empty groups (no members, none asked
        to join again, no commit or deletion under way) when it is reached: all those that never completed a
        join phase (a JoinGroup flood with new group ids leaves only those), else the oldest tenth of the
        others. A dropped group's committed offsets stay in the store (as pylog's own groups' do); only its
        generation is forgotten, as Kafka forgets an Empty group whose offsets expired. One scan per drop of
        many groups, and none for :data:`_FULL_RESCAN_S` after one that found nothing to drop, so a flood costs
        amortised O(1) per JoinGroup."""
        if self.max_groups is None or len(self._groups) < self.max_groups:
            return True
        now = self._loop().time()
        if now < self._full_until:
            return False
        idle = [g for g in self._groups.values()
                if g.state == EMPTY and not g.members and not g.pending and g.group_id not in self._io_locks]
        drop = [g for g in idle if g.generation_id == 0] or idle[:max(1, self.max_groups // 10)]
        saved = False
        for g in drop:
            self._cancel_join_timer(g)
            g.state = DEAD
            del self._groups[g.group_id]
            saved = self._saved.pop(g.group_id, None) is not None or saved
        if saved:
            self._snapshot_changed()
        if drop:
            _rlog.log(logging.INFO, "groups dropped", "coordinator: %d empty group(s) dropped to stay within "
                      "max_groups=%d", len(drop), self.max_groups)
        else:
            self._full_until = now + _FULL_RESCAN_S
        return len(self._groups) < self.max_groups

    def _refuse_new_group(self, group_id: str, client_id: str, client_host: str, member_id: str) -> _JoinResult:
        _rlog.log(logging.WARNING, "max_groups", "group %r: JoinGroup from client %r (%s) refused: the coordinator "
                  "holds %d groups (max_groups) and none is empty", group_id, client_id, client_host,
                  len(self._groups))
        return _JoinResult(GROUP_MAX_SIZE_REACHED, member_id=member_id)

    def _save(self, g: _Group) -> None:
        """Record ``g``'s state (Stable or Empty) as the one a restarted server takes over, and queue a write."""
        self._saved[g.group_id] = SavedGroup(
            g.group_id, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id if g.members else None,
            [SavedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                         m.rebalance_timeout_ms, list(m.protocols), m.assignment) for m in g.members.values()])
        self._snapshot_changed()

    def _forget(self, group_id: str) -> None:
        if self._saved.pop(group_id, None) is not None:
            self._snapshot_changed()

    def _snapshot_changed(self) -> None:
        if self._store.read_only:
            return
        # One attribute, replaced whole: the writer thread reads a version and its body together.
        self._snapshot = (self._snapshot[0] + 1, encode_groups(list(self._saved.values())))
        if not self._write_queued:
            self._queue_write()

    def _queue_write(self) -> None:
        self._write_queued = True
        fut = self._loop().run_in_executor(self._executor, self.write_state)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # write_state logs its own failures

    def write_state(self) -> bool:
        """Write the newest snapshot of the saved groups (blocking; the server's storage pool runs it), unless
        it is written already; False when the file system refused (logged; the next change tries again)."""
        with self._write_lock:
            self._write_queued = False  # cleared first: a change from now on queues another write
            version, body = self._snapshot
            if version <= self._written_version:
                return True
            try:
                write_groups(self._store.path, body)
            except (PylogError, OSError) as exc:
                log.warning("the coordinator's groups could not be saved (%s): a restart would lose their "
                            "membership", exc)
                return False
            self._written_version = version
            return True

    # ------------------------------------------------------------------ timers and state changes

    @staticmethod
    def _cancel_join_timer(g: _Group) -> None:
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None

    @staticmethod
    def _cancel_member_timer(m: _Member) -> None:
        if m.timer is not None:
            m.timer.cancel()
            m.timer = None

    @staticmethod
    def _fail_futures(m: _Member, error: int) -> None:
        if m.join_future is not None:
            if not m.join_future.done():
                m.join_future.set_result(_JoinResult(error, member_id=m.member_id))
            m.join_future = None
        if m.sync_future is not None:
            if not m.sync_future.done():
                m.sync_future.set_result(_SyncResult(error))
            m.sync_future = None

    def _touch(self, g: _Group, m: _Member) -> None:
        """A sign of life from ``m``: its session starts again."""
        loop = self._loop()
        m.expires_at = loop.time() + m.session_timeout_ms / 1000
        if m.timer is None:
            m.timer = loop.call_at(m.expires_at, self._member_timer, g, m)

    def _member_timer(self, g: _Group, m: _Member) -> None:
        m.timer = None
        if g.members.get(m.member_id) is not m or m.join_future is not None:
            return  # gone, or waiting in a JoinGroup (kept until the join phase completes, as in Kafka)
        loop = self._loop()
        if loop.time() < m.expires_at:
            m.timer = loop.call_at(m.expires_at, self._member_timer, g, m)
            return
        log.info("group %r: member %s expired (no heartbeat for %d ms)", g.group_id, m.member_id,
                 m.session_timeout_ms)
        self._remove_member_and_update(g, m, UNKNOWN_MEMBER_ID)

    def _pending_expired(self, g: _Group, member_id: str) -> None:
        if g.pending.pop(member_id, None) is not None:
            log.info("group %r: pending member %s did not join again", g.group_id, member_id)
            self._check_join_complete(g)

    def _add_member(self, g: _Group, m: _Member) -> None:
        if not g.members:
            g.protocol_type = m.protocol_type
            g.leader_id = m.member_id
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static[m.group_instance_id] = m.member_id
        self._recount(g)

    def member_bytes(self) -> int:
        """The bytes the members of all groups are counted with (``max_member_bytes`` bounds them)."""
        return self._member_bytes

    def _recount(self, g: _Group) -> None:
        """Count ``g``'s members again after a change of its members, protocols or assignments (a group's
        own count, so a change counted late is made right by the group's next recount)."""
        held = sum(_member_size(m) for m in g.members.values())
        self._member_bytes += held - g.held_bytes
        g.held_bytes = held

    def _over_member_bytes(self, g: _Group, more: int, what: str, client_id: str, client_host: str) -> bool:
        """Whether ``more`` bytes of members would take the groups past ``max_member_bytes`` (logged)."""
        if self.max_member_bytes is None or self._member_bytes + more <= self.max_member_bytes:
            return False
        _rlog.log(logging.WARNING, "member bytes", "group %r: %s from client %r (%s) refused: the groups' members "
                  "would hold more than max_member_bytes (%d)", g.group_id, what, client_id, client_host,
                  self.max_member_bytes)
        return True

    def _remove_member(self, g: _Group, m: _Member, error: int) -> None:
        """Drop ``m`` (answering its waiting requests with ``error``) and pick a new leader if needed."""
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        self._recount(g)
        self._cancel_member_timer(m)
        self._fail_futures(m, error)
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _remove_member_and_update(self, g: _Group, m: _Member, error: int) -> None:
        self._remove_member(g, m, error)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        elif g.state == PREPARING_REBALANCE:
            self._check_join_complete(g)

    def _maybe_prepare_rebalance(self, g: _Group) -> None:
        if g.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(g)

    def _prepare_rebalance(self, g: _Group) -> None:
        if g.state == COMPLETING_REBALANCE:
            # The leader's assignment for this generation will never come: members waiting in SyncGroup
            # rejoin.
            for m in g.members.values():
                m.assignment = b""
                if m.sync_future is not None:
                    if not m.sync_future.done():
                        m.sync_future.set_result(_SyncResult(REBALANCE_IN_PROGRESS))
                    m.sync_future = None
            self._recount(g)
        was_empty = g.state == EMPTY
        g.state = PREPARING_REBALANCE
        self._cancel_join_timer(g)
        loop = self._loop()
        rebalance_ms = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        delay = self.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            g.initial_join = True
            g.new_member_added = False
            g.join_timer = loop.call_later(delay / 1000, self._initial_join_expired, g,
                                           max(rebalance_ms - delay, 0))
        else:
            g.initial_join = False
            g.join_timer = loop.call_later(rebalance_ms / 1000, self._complete_join, g)
        log.debug("group %r: preparing rebalance (generation %d)", g.group_id, g.generation_id)
        self._check_join_complete(g)  # e.g. the last member left: nobody to wait for

    def _initial_join_expired(self, g: _Group, remaining_ms: int) -> None:
        g.join_timer = None
        if g.state != PREPARING_REBALANCE:
            return
        if g.new_member_added and remaining_ms > 0:
            g.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            g.join_timer = self._loop().call_later(delay / 1000, self._initial_join_expired, g,
                                                   max(remaining_ms - delay, 0))
        else:
            self._complete_join(g)

    def _check_join_complete(self, g: _Group) -> None:
        if g.state == PREPARING_REBALANCE and not g.initial_join and g.all_joined():
            self._complete_join(g)

    def _complete_join(self, g: _Group) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation, answer the
        waiting JoinGroups (the leader with every member's metadata)."""
        self._cancel_join_timer(g)
        if g.state != PREPARING_REBALANCE:
            return
        g.initial_join = False
        for m in [m for m in g.members.values() if m.join_future is None]:
            log.info("group %r: member %s did not rejoin in time; removed", g.group_id, m.member_id)
            self._remove_member(g, m, UNKNOWN_MEMBER_ID)
        g.generation_id += 1
        g.rebalances += 1
        if not g.members:
            g.protocol_name = None
            g.state = EMPTY
            log.debug("group %r: empty at generation %d", g.group_id, g.generation_id)
            self._save(g)
            return
        g.protocol_name = g.select_protocol()
        g.state = COMPLETING_REBALANCE
        all_members = g.current_members()
        log.info("group %r: generation %d, protocol %r, leader %s, %d members", g.group_id, g.generation_id,
                 g.protocol_name, g.leader_id, len(g.members))
        for m in g.members.values():
            fut, m.join_future = m.join_future, None
            if fut is not None and not fut.done():
                fut.set_result(_JoinResult(NONE, g.generation_id, g.protocol_type, g.protocol_name,
                                           g.leader_id or "", m.member_id,
                                           all_members if m.member_id == g.leader_id else ()))
            self._touch(g, m)

    # ------------------------------------------------------------------ JoinGroup

    @staticmethod
    def _join_response(r: _JoinResult, version: int) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": r.error_code, "generation_id": r.generation_id,
                "protocol_type": r.protocol_type,
                # Nullable from v7 only: before, Kafka sends "" for no protocol.
                "protocol_name": r.protocol_name if r.protocol_name is not None or version >= 7 else "",
                "leader": r.leader, "skip_assignment": False, "member_id": r.member_id,
                "members": [dict(m) for m in r.members]}

    async def join_group(self, request: dict[str, Any], version: int, *, client_id: str = "",
                         client_host: str = "") -> dict[str, Any]:
        result = await self._join(request, version, client_id, client_host)
        return self._join_response(result, version)

    async def _join(self, request: dict[str, Any], version: int, client_id: str, client_host: str) -> _JoinResult:
        group_id = request.get("group_id")
        member_id = request.get("member_id") or ""
        instance_id = request.get("group_instance_id") if version >= 5 else None
        session_ms = int(request.get("session_timeout_ms", 0))
        rebalance_ms = request.get("rebalance_timeout_ms", -1) if version >= 1 else -1
        if rebalance_ms is None or rebalance_ms < 0:
            rebalance_ms = session_ms
        protocol_type = request.get("protocol_type") or ""
        protocols = [(str(p["name"]), bytes(p.get("metadata") or b"")) for p in request.get("protocols") or ()]
        names = [n for n, _ in protocols]
        if self._closed:
            return _JoinResult(NOT_COORDINATOR, member_id=member_id)
        if not _valid_group_id(group_id):
            return _JoinResult(INVALID_GROUP_ID, member_id=member_id)
        assert isinstance(group_id, str)
        if not self.min_session_timeout_ms <= session_ms <= self.max_session_timeout_ms:
            return _JoinResult(INVALID_SESSION_TIMEOUT, member_id=member_id)
        g = self._groups.get(group_id)
        if g is None and member_id:
            return _JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
        if g is None and not self._make_room():
            return self._refuse_new_group(group_id, client_id, client_host, member_id)
        if g is None or g.state == EMPTY:
            # The group would start here: refuse it while pylog's own consumers use it.
            try:
                live = await self._run(self._pylog_members, group_id)
            except (PylogError, OSError):
                log.exception("group %r: could not read pylog's membership", group_id)
                return _JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=member_id)
            if live:
                log.warning("group %r: JoinGroup from client %r (%s) refused: %d pylog consumer(s) use the group "
                            "through the store (a group cannot mix them with Kafka clients)", group_id, client_id,
                            client_host, live)
                return _JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            if self._closed:
                return _JoinResult(NOT_COORDINATOR, member_id=member_id)
            g = self._groups.get(group_id)  # looked up again: others may have joined during the await
            if g is None:
                if member_id:
                    return _JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
                if not self._make_room():  # again: others may have started groups during the await
                    return self._refuse_new_group(group_id, client_id, client_host, member_id)
                g = self._groups[group_id] = _Group(group_id)
        if g.state == DEAD:
            return _JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        known = g.members.get(member_id) if member_id else None
        if not g.supports(protocol_type, names):
            return _JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        more = _protocols_size(protocols) - (_protocols_size(known.protocols) if known is not None else 0)
        if more > 0 and self._over_member_bytes(g, more, "JoinGroup", client_id, client_host):
            return _JoinResult(GROUP_MAX_SIZE_REACHED, member_id=member_id)
        if not member_id or member_id in g.pending:
            return await self._join_new_member(g, request, version, member_id, instance_id, session_ms, rebalance_ms,
                                               protocol_type, protocols, client_id, client_host)
        if g.fenced(instance_id, member_id):
            return _JoinResult(FENCED_INSTANCE_ID, member_id=member_id)
        if known is None:
            return _JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
        return await self._join_known_member(g, known, session_ms, rebalance_ms, protocols, client_id, client_host)

    async def _join_new_member(self, g: _Group, request: dict[str, Any], version: int, member_id: str,
                               instance_id: str | None, session_ms: int, rebalance_ms: int, protocol_type: str,
                               protocols: list[tuple[str, bytes]], client_id: str, client_host: str) -> _JoinResult:
        loop = self._loop()
        replaced = g.members.get(g.static.get(instance_id, "")) if instance_id is not None else None
        if member_id:
            g.pending.pop(member_id).cancel()
        else:
            if (self.max_group_size is not None and replaced is None
                    and len(g.members) + len(g.pending) >= self.max_group_size):
                return _JoinResult(GROUP_MAX_SIZE_REACHED)
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is None and version >= 4:
                # KIP-394: the client must join again with this id, so a member whose JoinGroup response is
                # lost does not leave an unknown member behind; it is forgotten after a session timeout.
                g.pending[member_id] = loop.call_later(session_ms / 1000, self._pending_expired, g, member_id)
                return _JoinResult(MEMBER_ID_REQUIRED, member_id=member_id)
        m = _Member(member_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols)
        if replaced is not None:
            log.info("group %r: static member %r rejoined as %s, replacing %s", g.group_id, instance_id, member_id,
                     replaced.member_id)
            if g.state == STABLE:
                return await self._replace_static_member(g, replaced, m)
            self._remove_member(g, replaced, FENCED_INSTANCE_ID)
        m.join_future = loop.create_future()
        if g.state == PREPARING_REBALANCE and g.initial_join:
            g.new_member_added = True
        self._add_member(g, m)
        fut = m.join_future
        self._maybe_prepare_rebalance(g)
        self._check_join_complete(g)
        return await fut

    async def _replace_static_member(self, g: _Group, old: _Member, m: _Member) -> _JoinResult:
        """Kafka's updateStaticMemberAndRebalance for a Stable group: ``m`` takes ``old``'s place (its order,
        leadership and assignment; ``old``'s waiting requests get FENCED_INSTANCE_ID). When the group's
        protocol stays the one it would now choose, ``m`` gets the current generation without a rebalance
        and the previous leader's id (so it does not assign: a Stable group would not hand a new assignment
        out); else the group rebalances."""
        previous_leader = g.leader_id
        self._cancel_member_timer(old)
        self._fail_futures(old, FENCED_INSTANCE_ID)
        m.assignment = old.assignment
        g.members = {(m.member_id if k == old.member_id else k): (m if v is old else v) for k, v in g.members.items()}
        self._recount(g)
        assert m.group_instance_id is not None
        g.static[m.group_instance_id] = m.member_id
        if g.leader_id == old.member_id:
            g.leader_id = m.member_id
        if g.candidate_protocols() and g.select_protocol() == g.protocol_name:
            log.info("group %r: static member %r keeps its assignment (no rebalance)", g.group_id,
                     m.group_instance_id)
            self._touch(g, m)
            self._save(g)
            return _JoinResult(NONE, g.generation_id, g.protocol_type, g.protocol_name, previous_leader or "",
                               m.member_id)
        m.join_future = fut = self._loop().create_future()
        self._prepare_rebalance(g)
        self._check_join_complete(g)
        return await fut

    async def _join_known_member(self, g: _Group, m: _Member, session_ms: int, rebalance_ms: int,
                                 protocols: list[tuple[str, bytes]], client_id: str, client_host: str) -> _JoinResult:
        same = protocols == m.protocols
        if g.state == EMPTY:  # members are gone when the group is empty: a stale member
            return _JoinResult(UNKNOWN_MEMBER_ID, member_id=m.member_id)
        if g.state == COMPLETING_REBALANCE and same or g.state == STABLE and same and m.member_id != g.leader_id:
            # Nothing changed: the current generation, again (the leader's with the members).
            self._touch(g, m)
            return _JoinResult(NONE, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id or "",
                               m.member_id, g.current_members() if m.member_id == g.leader_id else ())
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
        m.client_id, m.client_host = client_id, client_host
        self._recount(g)
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(_JoinResult(REBALANCE_IN_PROGRESS, member_id=m.member_id))
        m.join_future = fut = self._loop().create_future()
        self._maybe_prepare_rebalance(g)
        self._check_join_complete(g)
        return await fut

    # ------------------------------------------------------------------ SyncGroup

    async def sync_group(self, request: dict[str, Any], version: int, *, client_id: str = "",
                         client_host: str = "") -> dict[str, Any]:
        group_id = request.get("group_id")
        g = self._groups.get(group_id) if isinstance(group_id, str) else None
        r = await self._sync(request, version, g)
        ok = r.error_code == NONE and g is not None
        return {"throttle_time_ms": 0, "error_code": r.error_code,
                "protocol_type": g.protocol_type if ok and g is not None else None,
                "protocol_name": g.protocol_name if ok and g is not None else None,
                "assignment": r.assignment}

    async def _sync(self, request: dict[str, Any], version: int, g: _Group | None) -> _SyncResult:
        member_id = request.get("member_id") or ""
        instance_id = request.get("group_instance_id") if version >= 3 else None
        if self._closed:
            return _SyncResult(NOT_COORDINATOR)
        if not _valid_group_id(request.get("group_id")):
            return _SyncResult(INVALID_GROUP_ID)
        if g is None:
            return _SyncResult(UNKNOWN_MEMBER_ID)
        if g.state == DEAD:
            return _SyncResult(COORDINATOR_NOT_AVAILABLE)
        if g.fenced(instance_id, member_id):
            return _SyncResult(FENCED_INSTANCE_ID)
        m = g.members.get(member_id)
        if m is None:
            return _SyncResult(UNKNOWN_MEMBER_ID)
        if request.get("generation_id") != g.generation_id:
            return _SyncResult(ILLEGAL_GENERATION)
        if version >= 5:
            ptype, pname = request.get("protocol_type"), request.get("protocol_name")
            if ptype is not None and ptype != g.protocol_type or pname is not None and pname != g.protocol_name:
                return _SyncResult(INCONSISTENT_GROUP_PROTOCOL)
        if g.state == PREPARING_REBALANCE:
            return _SyncResult(REBALANCE_IN_PROGRESS)
        self._touch(g, m)
        if g.state == STABLE:
            return _SyncResult(NONE, m.assignment)
        # CompletingRebalance: wait for the leader's assignment (the leader's own request delivers it).
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result(_SyncResult(REBALANCE_IN_PROGRESS))
        m.sync_future = fut = self._loop().create_future()
        if member_id == g.leader_id:
            given = {a.get("member_id"): bytes(a.get("assignment") or b"") for a in request.get("assignments") or ()}
            more = sum(len(given.get(k, b"")) - len(o.assignment) for k, o in g.members.items())
            if more > 0 and self._over_member_bytes(g, more, "SyncGroup", m.client_id, m.client_host):
                m.sync_future = None
                return _SyncResult(GROUP_MAX_SIZE_REACHED)
            unknown = set(given) - set(g.members)
            if unknown:
                log.debug("group %r: leader assigned to non-members %s (ignored)", g.group_id,
                          sorted(map(str, unknown)))
            g.state = STABLE
            log.info("group %r: generation %d stable", g.group_id, g.generation_id)
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
                if other.sync_future is not None:
                    if not other.sync_future.done():
                        other.sync_future.set_result(_SyncResult(NONE, other.assignment))
                    other.sync_future = None
            self._recount(g)
            self._save(g)  # as Kafka writes the group's metadata with the leader's assignment
        return await fut

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    async def heartbeat(self, request: dict[str, Any], version: int, *, client_id: str = "",
                        client_host: str = "") -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": self._heartbeat(request, version)}

    def _heartbeat(self, request: dict[str, Any], version: int) -> int:
        group_id = request.get("group_id")
        member_id = request.get("member_id") or ""
        instance_id = request.get("group_instance_id") if version >= 3 else None
        if self._closed:
            return NOT_COORDINATOR
        if not _valid_group_id(group_id):
            return INVALID_GROUP_ID
        g = self._groups.get(group_id)  # type: ignore[arg-type]
        if g is None:
            return UNKNOWN_MEMBER_ID
        if g.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if g.fenced(instance_id, member_id):
            return FENCED_INSTANCE_ID
        m = g.members.get(member_id)
        if g.state == EMPTY or m is None:
            return UNKNOWN_MEMBER_ID
        if request.get("generation_id") != g.generation_id:
            return ILLEGAL_GENERATION
        self._touch(g, m)
        return REBALANCE_IN_PROGRESS if g.state == PREPARING_REBALANCE else NONE

    async def leave_group(self, request: dict[str, Any], version: int, *, client_id: str = "",
                          client_host: str = "") -> dict[str, Any]:
        if version < 3:
            identities = [{"member_id": request.get("member_id") or "", "group_instance_id": None}]
        else:
            identities = list(request.get("members") or ())
        top, results = self._leave(request.get("group_id"), identities)
        if version < 3:
            # One member: its error is the response's error.
            return {"throttle_time_ms": 0, "error_code": top if top != NONE or not results else results[0][2]}
        return {"throttle_time_ms": 0, "error_code": top,
                "members": [{"member_id": mid, "group_instance_id": iid, "error_code": err}
                            for mid, iid, err in results]}

    def _leave(self, group_id: Any, identities: list[dict[str, Any]]) -> tuple[int, list[tuple[str, Any, int]]]:
        if self._closed:
            return NOT_COORDINATOR, []
        if not _valid_group_id(group_id):
            return INVALID_GROUP_ID, []
        g = self._groups.get(group_id)
        results = []
        if g is not None and g.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE, []
        for ident in identities:
            member_id = ident.get("member_id") or ""
            instance_id = ident.get("group_instance_id")
            results.append((member_id, instance_id, self._leave_one(g, member_id, instance_id)))
        return NONE, results

    def _leave_one(self, g: _Group | None, member_id: str, instance_id: str | None) -> int:
        if g is None:
            return UNKNOWN_MEMBER_ID
        if instance_id is not None:
            mapped = g.static.get(instance_id)
            if mapped is None:
                return UNKNOWN_MEMBER_ID
            if member_id and member_id != mapped:
                return FENCED_INSTANCE_ID
            member_id = mapped
        timer = g.pending.pop(member_id, None)
        if timer is not None:
            timer.cancel()
            self._check_join_complete(g)
            return NONE
        m = g.members.get(member_id)
        if m is None:
            return UNKNOWN_MEMBER_ID
        log.info("group %r: member %s left", g.group_id, member_id)
        self._remove_member_and_update(g, m, UNKNOWN_MEMBER_ID)
        return NONE

    # ------------------------------------------------------------------ OffsetCommit, OffsetFetch

    async def offset_commit(self, request: dict[str, Any], version: int, *, client_id: str = "",
                            client_host: str = "") -> dict[str, Any]:
        group_id = request.get("group_id")
        if version >= 1:
            generation = request.get("generation_id_or_member_epoch", request.get("generation_id", -1))
            member_id = request.get("member_id") or ""
        else:
            generation, member_id = -1, ""
        generation = -1 if generation is None else int(generation)
        instance_id = request.get("group_instance_id") if version >= 7 else None
        parts = [(t.get("name"), p.get("partition_index"), p.get("committed_offset"), p.get("committed_metadata"),
                  p.get("committed_leader_epoch", -1))
                 for t in request.get("topics") or () for p in t.get("partitions") or ()]

        def respond(codes: dict[tuple[Any, Any], int] | int) -> dict[str, Any]:
            topics: dict[Any, list[dict[str, Any]]] = {}
            for topic, partition, *_ in parts:
                code = codes if isinstance(codes, int) else codes.get((topic, partition), UNKNOWN_SERVER_ERROR)
                topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
            return {"throttle_time_ms": 0,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        if self._closed:
            return respond(NOT_COORDINATOR)
        if not _valid_group_id(group_id):
            return respond(INVALID_GROUP_ID)
        assert isinstance(group_id, str)
        async with self._group_io(group_id):
            # Validated under the group's store lock, right before the write, so commits land in the
            # order they were checked (no await between the check and handing the write over).
            error = self._validate_commit(group_id, generation, member_id, instance_id)
            if error != NONE:
                return respond(error)
            codes = await self._run(self._commit_blocking, group_id, parts)
        return respond(codes)

    def _validate_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        if self._closed:
            return NOT_COORDINATOR
        g = self._groups.get(group_id)
        if g is None:
            # Not a group this coordinator manages: only a simple commit (the store refuses it when
            # pylog's own consumers use the group).
            return NONE if generation < 0 else ILLEGAL_GENERATION
        if g.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation >= 0 or member_id or instance_id is not None:
            m = g.members.get(member_id)
            if g.fenced(instance_id, member_id):
                return FENCED_INSTANCE_ID
            if m is None:
                return UNKNOWN_MEMBER_ID
            if generation != g.generation_id:
                return ILLEGAL_GENERATION
            if g.state == COMPLETING_REBALANCE:
                return REBALANCE_IN_PROGRESS
            self._touch(g, m)  # Stable or PreparingRebalance: the heartbeat tells it to rejoin
            return NONE
        return NONE if g.state == EMPTY else UNKNOWN_MEMBER_ID

    def _commit_blocking(self, group_id: str,
                         parts: list[tuple[Any, Any, Any, Any, Any]]) -> dict[tuple[Any, Any], int]:
        codes: dict[tuple[Any, Any], int] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic, partition, offset, metadata, epoch in parts:
            key = (topic, partition)
            try:
                t = self._store.topic(topic)
            except (UnknownTopicError, InvalidTopicError):
                codes[key] = UNKNOWN_TOPIC_OR_PARTITION
                continue
            if type(partition) is not int or not 0 <= partition < t.num_partitions:
                codes[key] = UNKNOWN_TOPIC_OR_PARTITION
            elif metadata is not None and len(metadata.encode("utf-8", "surrogatepass")) > self.max_metadata_bytes:
                codes[key] = OFFSET_METADATA_TOO_LARGE
            else:
                # The leader epoch is kept for the client (its check of a truncated log after a leader change:
                # KIP-320); pylog's one leader never changes epochs, so nothing here depends on it.
                epoch = epoch if type(epoch) is int and -1 <= epoch < 1 << 31 else -1
                offsets[TopicPartition(topic, partition)] = OffsetAndMetadata(int(offset), metadata or "", epoch)
        if offsets:
            try:
                self._store.commit_offsets(group_id, offsets)
                code = NONE
            except RebalanceInProgressError:
                log.warning("group %r: offset commit refused: pylog consumers use the group through the store",
                            group_id)
                code = UNKNOWN_MEMBER_ID
            except PartitionLockedError as e:
                log.warning("group %r: offset commit failed: %s", group_id, e)
                code = COORDINATOR_NOT_AVAILABLE
            except RecordTooLargeError:
                code = INVALID_COMMIT_OFFSET_SIZE
            except (PylogError, OSError):
                log.exception("group %r: offset commit failed", group_id)
                code = UNKNOWN_SERVER_ERROR
            for tp in offsets:
                codes[tp] = code
        return codes

    async def offset_fetch(self, request: dict[str, Any], version: int, *, client_id: str = "",
                           client_host: str = "") -> dict[str, Any]:
        if version >= 8:
            groups = []
            for req in request.get("groups") or ():
                error, topics = await self._fetch_group(req.get("group_id"), req.get("topics"), version)
                groups.append({"group_id": req.get("group_id"), "topics": topics, "error_code": error})
            return {"throttle_time_ms": 0, "groups": groups}
        error, topics = await self._fetch_group(request.get("group_id"), request.get("topics"), version)
        return {"throttle_time_ms": 0, "topics": topics, "error_code": error}

    async def _fetch_group(self, group_id: Any, wanted: list[dict[str, Any]] | None,
                           version: int) -> tuple[int, list[dict[str, Any]]]:
        """(group error, topics); before v2 a group error is reported on each requested partition."""
        error = NONE
        committed: dict[TopicPartition, OffsetAndMetadata] = {}
        if self._closed:
            error = NOT_COORDINATOR
        elif not _valid_group_id(group_id):
            error = INVALID_GROUP_ID
        else:
            try:
                committed = await self._run(self._store.committed_offsets, group_id)
            except (PylogError, OSError):
                log.exception("group %r: could not read committed offsets", group_id)
                error = COORDINATOR_NOT_AVAILABLE
        if error != NONE and version >= 2:
            return error, []
        part_error = error
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(committed):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        topics = []
        for t in wanted:
            name = t.get("name")
            parts = []
            for p in t.get("partition_indexes") or ():
                om = committed.get(TopicPartition(name, p))  # type: ignore[arg-type]
                parts.append({"partition_index": p, "committed_offset": om.offset if om is not None else -1,
                              "committed_leader_epoch": om.leader_epoch if om is not None else -1,
                              "metadata": om.metadata if om is not None else "",
                              "error_code": part_error})
            topics.append({"name": name, "partitions": parts})
        return NONE, topics

    # ------------------------------------------------------------------ ListGroups, DescribeGroups, DeleteGroups

    async def list_groups(self, request: dict[str, Any], version: int, *, client_id: str = "",
                          client_host: str = "") -> dict[str, Any]:
        if self._closed:
            return {"throttle_time_ms": 0, "error_code": NOT_COORDINATOR, "groups": []}
        states = {s.lower() for s in request.get("states_filter") or ()} if version >= 4 else set()
        types = {s.lower() for s in request.get("types_filter") or ()} if version >= 5 else set()
        listed: dict[str, tuple[str, str]] = {}
        for gid, g in self._groups.items():
            if g.state not in (DEAD, EMPTY):
                listed[gid] = (g.protocol_type or CONSUMER_PROTOCOL_TYPE, g.state)
        empty_here = {gid for gid, g in self._groups.items() if g.state == EMPTY}
        try:
            found = await self._run(self._list_store_groups, set(listed), empty_here, version >= 4)
        except (PylogError, OSError):
            log.exception("could not list the store's consumer groups")
            return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE, "groups": []}
        for gid, state in found.items():
            if gid not in listed:
                here = self._groups.get(gid)
                listed[gid] = ((here.protocol_type if here is not None else None) or CONSUMER_PROTOCOL_TYPE, state)
        groups = [{"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": CLASSIC_GROUP_TYPE}
                  for gid, (ptype, state) in sorted(listed.items())
                  if (not states or state.lower() in states) and (not types or CLASSIC_GROUP_TYPE in types)]
        return {"throttle_time_ms": 0, "error_code": NONE, "groups": groups}

    def _list_store_groups(self, skip: set[str], also: set[str], with_state: bool) -> dict[str, str]:
        """The store's groups (and ``also``) not in ``skip``: Stable with live pylog members, else Empty."""
        out = {}
        for gid in sorted((set(self._store.consumer_groups()) | also) - skip):
            live = with_state and bool(self._pylog_members(gid))
            out[gid] = STABLE if live else EMPTY
        return out

    async def describe_groups(self, request: dict[str, Any], version: int, *, client_id: str = "",
                              client_host: str = "") -> dict[str, Any]:
        groups = [await self._describe(gid) for gid in request.get("groups") or ()]
        return {"throttle_time_ms": 0, "groups": groups}

    async def _describe(self, group_id: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": NONE, "group_id": group_id, "group_state": "", "protocol_type": "",
                               "protocol_data": "", "members": []}
        if self._closed:
            out["error_code"] = NOT_COORDINATOR
            return out
        if not _valid_group_id(group_id):
            out["error_code"] = INVALID_GROUP_ID
            return out
        g = self._groups.get(group_id)
        if g is not None and g.state not in (EMPTY, DEAD):
            stable = g.state == STABLE
            out.update(group_state=g.state, protocol_type=g.protocol_type or "",
                       protocol_data=(g.protocol_name or "") if stable else "",
                       members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "member_metadata": m.metadata(g.protocol_name) if stable else b"",
                                 "member_assignment": m.assignment if stable else b""}
                                for m in g.members.values()])
            return out
        try:
            desc, has_offsets = await self._run(self._describe_store_group, group_id)
        except (PylogError, OSError):
            log.exception("group %r: could not describe", group_id)
            out["error_code"] = COORDINATOR_NOT_AVAILABLE
            return out
        if desc.members:
            out.update(group_state=STABLE, protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_data=desc.protocol,
                       members=[{"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                                 "client_host": f"pid:{m.pid}", "member_metadata": _consumer_metadata(m.topics),
                                 "member_assignment": _consumer_assignment(m.assignment)} for m in desc.members])
        elif g is not None or has_offsets or desc.generation > 0:
            out.update(group_state=EMPTY, protocol_type=(g.protocol_type if g is not None else None)
                       or CONSUMER_PROTOCOL_TYPE)
        else:
            out.update(group_state=DEAD)  # Kafka's answer for a group it does not know (before v6)
        return out

    def _describe_store_group(self, group_id: str) -> tuple[Any, bool]:
        return self._store.describe_consumer_group(group_id), bool(self._store.committed_offsets(group_id))

    async def delete_groups(self, request: dict[str, Any], version: int, *, client_id: str = "",
                            client_host: str = "") -> dict[str, Any]:
        results = []
        for gid in request.get("groups_names") or ():
            results.append({"group_id": gid, "error_code": await self._delete(gid)})
        return {"throttle_time_ms": 0, "results": results}

    async def _delete(self, group_id: Any) -> int:
        if self._closed:
            return NOT_COORDINATOR
        if not _valid_group_id(group_id):
            return INVALID_GROUP_ID
        async with self._group_io(group_id):
            g = self._groups.get(group_id)
            if g is not None and g.state != EMPTY:
                return NON_EMPTY_GROUP
            if g is not None:
                # Dead from here: a JoinGroup during the deletion starts a new group.
                g.state = DEAD
                del self._groups[group_id]
                self._forget(group_id)
            try:
                return await self._run(self._delete_blocking, group_id, g is not None)
            except (PylogError, OSError):
                log.exception("group %r: could not delete", group_id)
                return UNKNOWN_SERVER_ERROR

    def _delete_blocking(self, group_id: str, known: bool) -> int:
        desc = self._store.describe_consumer_group(group_id)
        if desc.members:
            return NON_EMPTY_GROUP
        if not known and desc.generation == 0 and not self._store.committed_offsets(group_id):
            return GROUP_ID_NOT_FOUND
        try:
            self._store.delete_consumer_group(group_id)
        except RebalanceInProgressError:
            return NON_EMPTY_GROUP
        log.info("group %r deleted", group_id)
        return NONE
