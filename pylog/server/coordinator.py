"""Kafka's group coordinator (the classic consumer group protocol) for Kafka clients of ``pylog serve``.

The server is a single node and the coordinator of every group. :class:`GroupCoordinator` answers
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and
DeleteGroups. Each method takes a decoded request body (a dict, Kafka's JSON message spec field names in
snake_case) and the request's API version, and returns the response body dict. Everything runs on the
server's one event loop; the store's file operations run in an executor (a commit may wait for the offsets
partition's writer lock held by another process).

This module is the membership protocol (join phases, generations, session timers, leader, assignments) and
the facade the server calls. Its parts, each stating its own invariants: :mod:`pylog.server.group` (a group and
its members, plain data), :mod:`pylog.server.group_table` (which groups are held, their memory bounds and their
saved state) and :mod:`pylog.server.group_offsets` (OffsetCommit/Fetch, ListGroups, DescribeGroups,
DeleteGroups: the APIs that read or write the store). None of them imports this module.

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
  the store (``Store.replace_coordinator_groups``, ``__consumer_groups/.coordinator``) each time a group reaches a
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
import logging
import uuid
from concurrent.futures import Executor
from typing import Any

from ..errors import PylogError
from .group import (COMPLETING_REBALANCE, CONSUMER_PROTOCOL_TYPE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group,
                    JoinResult, Member, SyncResult, protocols_size, subscription_topics, valid_group_id)
from .group_offsets import GroupOffsets
from .group_table import GroupTable, rlog
from .protocol.codes import (  # Kafka's error codes
    NONE, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED,
    GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID,
)

__all__ = ["GroupCoordinator", "DEFAULT_INITIAL_REBALANCE_DELAY_MS", "EMPTY", "PREPARING_REBALANCE",
           "COMPLETING_REBALANCE", "STABLE", "DEAD"]

log = logging.getLogger("pylog.server.coordinator")

#: Default initial rebalance delay (Kafka's group.initial.rebalance.delay.ms is 3000 ms).
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 300
#: Kafka's group.min.session.timeout.ms / group.max.session.timeout.ms defaults.
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
#: Kafka's offset.metadata.max.bytes default.
DEFAULT_MAX_METADATA_BYTES = 4096


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
        (:meth:`GroupTable.make_room`) and is answered GROUP_MAX_SIZE_REACHED when none can go. None for no
        limit.
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
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_group_size = max_group_size
        self.max_metadata_bytes = max_metadata_bytes
        #: The groups held, their bounds and saved state.
        self.table = GroupTable(store, max_groups=max_groups, max_member_bytes=max_member_bytes, executor=executor)
        offsets = GroupOffsets(self.table, max_metadata_bytes, self.check_commit)
        self.offset_commit = offsets.offset_commit
        self.offset_fetch = offsets.offset_fetch
        self.list_groups = offsets.list_groups
        self.describe_groups = offsets.describe_groups
        self.delete_groups = offsets.delete_groups

    # ------------------------------------------------------------------ plumbing

    @property
    def closed(self) -> bool:
        return self.table.closed

    def group_state(self, group_id: str) -> str | None:
        """The coordinator's state of ``group_id`` (None when it holds no such group): for tests and tools."""
        g = self.table.get(group_id)
        return g.state if g is not None else None

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the live members of ``group_id`` subscribe to (from their consumer-protocol metadata, for
        the group's protocol or, before one is chosen, their first), or None when the coordinator holds no
        live member of the group or its members are not consumers (``protocol_type`` other than "consumer"):
        what OffsetDelete checks before deleting committed offsets."""
        g = self.table.get(group_id)
        if g is None or not g.members or g.state == DEAD or g.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        topics: set[str] = set()
        for m in g.members.values():
            meta = m.metadata(g.protocol_name) if g.protocol_name else (m.protocols[0][1] if m.protocols else b"")
            topics.update(subscription_topics(meta))
        return topics

    def group_generation(self, group_id: str) -> int | None:
        g = self.table.get(group_id)
        return g.generation_id if g is not None else None

    def member_bytes(self) -> int:
        """The bytes the members of all groups are counted with (``max_member_bytes`` bounds them)."""
        return self.table.member_bytes()

    def write_state(self) -> bool:
        """Write the newest snapshot of the saved groups now (blocking): see :meth:`GroupTable.write_state`."""
        return self.table.write_state()

    def group_counts(self) -> list[tuple[str, int, int, int]]:
        """(group id, generation, live members, rebalances made here) per group held: for the metrics. Safe
        from another thread (a copy of the group table is read)."""
        return [(g.group_id, g.generation_id, len(g.members), g.rebalances) for g in self.table]

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def close(self) -> None:
        """Stop: cancel every timer, answer waiting JoinGroups and SyncGroups with NOT_COORDINATOR (clients
        look for the coordinator again) and forget every group; later requests get NOT_COORDINATOR."""
        if self.table.closed:
            return
        for g in self.table.close():
            g.cancel_join_timer()
            for t in g.pending.values():
                t.cancel()
            g.pending.clear()
            for m in g.members.values():
                m.cancel_timer()
                m.fail(NOT_COORDINATOR)
            g.state = DEAD

    async def load(self) -> None:
        """Take over the groups saved in the store (before serving any request: :meth:`GroupTable.load`); every
        restored member's session starts now."""
        for g in await self.table.load():
            for m in g.members.values():
                self._touch(g, m)

    def _refuse_new_group(self, group_id: str, client_id: str, client_host: str, member_id: str) -> JoinResult:
        rlog.log(logging.WARNING, "max_groups", "group %r: JoinGroup from client %r (%s) refused: the coordinator "
                 "holds %d groups (max_groups) and none is empty", group_id, client_id, client_host,
                 len(self.table))
        return JoinResult(GROUP_MAX_SIZE_REACHED, member_id=member_id)

    # ------------------------------------------------------------------ timers and state changes

    def _touch(self, g: Group, m: Member) -> None:
        """A sign of life from ``m``: its session starts again."""
        loop = self._loop()
        m.expires_at = loop.time() + m.session_timeout_ms / 1000
        if m.timer is None:
            m.timer = loop.call_at(m.expires_at, self._member_timer, g, m)

    def _member_timer(self, g: Group, m: Member) -> None:
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

    def _pending_expired(self, g: Group, member_id: str) -> None:
        if g.pending.pop(member_id, None) is not None:
            log.info("group %r: pending member %s did not join again", g.group_id, member_id)
            self._check_join_complete(g)

    def _add_member(self, g: Group, m: Member) -> None:
        if not g.members:
            g.protocol_type = m.protocol_type
            g.leader_id = m.member_id
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static[m.group_instance_id] = m.member_id
        self.table.recount(g)

    def _remove_member(self, g: Group, m: Member, error: int) -> None:
        """Drop ``m`` (answering its waiting requests with ``error``) and pick a new leader if needed."""
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        self.table.recount(g)
        m.cancel_timer()
        m.fail(error)
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _remove_member_and_update(self, g: Group, m: Member, error: int) -> None:
        self._remove_member(g, m, error)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        elif g.state == PREPARING_REBALANCE:
            self._check_join_complete(g)

    def _maybe_prepare_rebalance(self, g: Group) -> None:
        if g.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(g)

    def _prepare_rebalance(self, g: Group) -> None:
        if g.state == COMPLETING_REBALANCE:
            # The leader's assignment for this generation will never come: members waiting in SyncGroup
            # rejoin.
            for m in g.members.values():
                m.assignment = b""
                if m.sync_future is not None:
                    if not m.sync_future.done():
                        m.sync_future.set_result(SyncResult(REBALANCE_IN_PROGRESS))
                    m.sync_future = None
            self.table.recount(g)
        was_empty = g.state == EMPTY
        g.state = PREPARING_REBALANCE
        g.cancel_join_timer()
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

    def _initial_join_expired(self, g: Group, remaining_ms: int) -> None:
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

    def _check_join_complete(self, g: Group) -> None:
        if g.state == PREPARING_REBALANCE and not g.initial_join and g.all_joined():
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation, answer the
        waiting JoinGroups (the leader with every member's metadata)."""
        g.cancel_join_timer()
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
            self.table.save(g)
            return
        g.protocol_name = g.select_protocol()
        g.state = COMPLETING_REBALANCE
        all_members = g.current_members()
        log.info("group %r: generation %d, protocol %r, leader %s, %d members", g.group_id, g.generation_id,
                 g.protocol_name, g.leader_id, len(g.members))
        for m in g.members.values():
            fut, m.join_future = m.join_future, None
            if fut is not None and not fut.done():
                fut.set_result(JoinResult(NONE, g.generation_id, g.protocol_type, g.protocol_name,
                                           g.leader_id or "", m.member_id,
                                           all_members if m.member_id == g.leader_id else ()))
            self._touch(g, m)

    # ------------------------------------------------------------------ JoinGroup

    @staticmethod
    def _join_response(r: JoinResult, version: int) -> dict[str, Any]:
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

    async def _join(self, request: dict[str, Any], version: int, client_id: str, client_host: str) -> JoinResult:
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
        if self.table.closed:
            return JoinResult(NOT_COORDINATOR, member_id=member_id)
        if not valid_group_id(group_id):
            return JoinResult(INVALID_GROUP_ID, member_id=member_id)
        assert isinstance(group_id, str)
        if not self.min_session_timeout_ms <= session_ms <= self.max_session_timeout_ms:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id=member_id)
        g = self.table.get(group_id)
        if g is None and member_id:
            return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
        if g is None and not self.table.make_room():
            return self._refuse_new_group(group_id, client_id, client_host, member_id)
        if g is None or g.state == EMPTY:
            # The group would start here: refuse it while pylog's own consumers use it.
            try:
                live = await self.table.run(self.table.pylog_members, group_id)
            except (PylogError, OSError):
                log.exception("group %r: could not read pylog's membership", group_id)
                return JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=member_id)
            if live:
                log.warning("group %r: JoinGroup from client %r (%s) refused: %d pylog consumer(s) use the group "
                            "through the store (a group cannot mix them with Kafka clients)", group_id, client_id,
                            client_host, live)
                return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            if self.table.closed:
                return JoinResult(NOT_COORDINATOR, member_id=member_id)
            g = self.table.get(group_id)  # looked up again: others may have joined during the await
            if g is None:
                if member_id:
                    return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
                if not self.table.make_room():  # again: others may have started groups during the await
                    return self._refuse_new_group(group_id, client_id, client_host, member_id)
                g = self.table.add(group_id)
        if g.state == DEAD:
            return JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        known = g.members.get(member_id) if member_id else None
        if not g.supports(protocol_type, names):
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        more = protocols_size(protocols) - (protocols_size(known.protocols) if known is not None else 0)
        if more > 0 and self.table.over_member_bytes(g, more, "JoinGroup", client_id, client_host):
            return JoinResult(GROUP_MAX_SIZE_REACHED, member_id=member_id)
        if not member_id or member_id in g.pending:
            return await self._join_new_member(g, request, version, member_id, instance_id, session_ms, rebalance_ms,
                                               protocol_type, protocols, client_id, client_host)
        if g.fenced(instance_id, member_id):
            return JoinResult(FENCED_INSTANCE_ID, member_id=member_id)
        if known is None:
            return JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id)
        return await self._join_known_member(g, known, session_ms, rebalance_ms, protocols, client_id, client_host)

    async def _join_new_member(self, g: Group, request: dict[str, Any], version: int, member_id: str,
                               instance_id: str | None, session_ms: int, rebalance_ms: int, protocol_type: str,
                               protocols: list[tuple[str, bytes]], client_id: str, client_host: str) -> JoinResult:
        loop = self._loop()
        replaced = g.members.get(g.static.get(instance_id, "")) if instance_id is not None else None
        if member_id:
            g.pending.pop(member_id).cancel()
        else:
            if (self.max_group_size is not None and replaced is None
                    and len(g.members) + len(g.pending) >= self.max_group_size):
                return JoinResult(GROUP_MAX_SIZE_REACHED)
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is None and version >= 4:
                # KIP-394: the client must join again with this id, so a member whose JoinGroup response is
                # lost does not leave an unknown member behind; it is forgotten after a session timeout.
                g.pending[member_id] = loop.call_later(session_ms / 1000, self._pending_expired, g, member_id)
                return JoinResult(MEMBER_ID_REQUIRED, member_id=member_id)
        m = Member(member_id, instance_id, client_id, client_host, session_ms, rebalance_ms, protocol_type, protocols)
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

    async def _replace_static_member(self, g: Group, old: Member, m: Member) -> JoinResult:
        """Kafka's updateStaticMemberAndRebalance for a Stable group: ``m`` takes ``old``'s place (its order,
        leadership and assignment; ``old``'s waiting requests get FENCED_INSTANCE_ID). When the group's
        protocol stays the one it would now choose, ``m`` gets the current generation without a rebalance
        and the previous leader's id (so it does not assign: a Stable group would not hand a new assignment
        out); else the group rebalances."""
        previous_leader = g.leader_id
        old.cancel_timer()
        old.fail(FENCED_INSTANCE_ID)
        m.assignment = old.assignment
        g.members = {(m.member_id if k == old.member_id else k): (m if v is old else v) for k, v in g.members.items()}
        self.table.recount(g)
        assert m.group_instance_id is not None
        g.static[m.group_instance_id] = m.member_id
        if g.leader_id == old.member_id:
            g.leader_id = m.member_id
        if g.candidate_protocols() and g.select_protocol() == g.protocol_name:
            log.info("group %r: static member %r keeps its assignment (no rebalance)", g.group_id,
                     m.group_instance_id)
            self._touch(g, m)
            self.table.save(g)
            return JoinResult(NONE, g.generation_id, g.protocol_type, g.protocol_name, previous_leader or "",
                               m.member_id)
        m.join_future = fut = self._loop().create_future()
        self._prepare_rebalance(g)
        self._check_join_complete(g)
        return await fut

    async def _join_known_member(self, g: Group, m: Member, session_ms: int, rebalance_ms: int,
                                 protocols: list[tuple[str, bytes]], client_id: str, client_host: str) -> JoinResult:
        same = protocols == m.protocols
        if g.state == EMPTY:  # members are gone when the group is empty: a stale member
            return JoinResult(UNKNOWN_MEMBER_ID, member_id=m.member_id)
        if g.state == COMPLETING_REBALANCE and same or g.state == STABLE and same and m.member_id != g.leader_id:
            # Nothing changed: the current generation, again (the leader's with the members).
            self._touch(g, m)
            return JoinResult(NONE, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id or "",
                               m.member_id, g.current_members() if m.member_id == g.leader_id else ())
        m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms = protocols, session_ms, rebalance_ms
        m.client_id, m.client_host = client_id, client_host
        self.table.recount(g)
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(JoinResult(REBALANCE_IN_PROGRESS, member_id=m.member_id))
        m.join_future = fut = self._loop().create_future()
        self._maybe_prepare_rebalance(g)
        self._check_join_complete(g)
        return await fut

    # ------------------------------------------------------------------ SyncGroup

    async def sync_group(self, request: dict[str, Any], version: int, *, client_id: str = "",
                         client_host: str = "") -> dict[str, Any]:
        group_id = request.get("group_id")
        g = self.table.get(group_id) if isinstance(group_id, str) else None
        r = await self._sync(request, version, g)
        ok = r.error_code == NONE and g is not None
        return {"throttle_time_ms": 0, "error_code": r.error_code,
                "protocol_type": g.protocol_type if ok and g is not None else None,
                "protocol_name": g.protocol_name if ok and g is not None else None,
                "assignment": r.assignment}

    async def _sync(self, request: dict[str, Any], version: int, g: Group | None) -> SyncResult:
        member_id = request.get("member_id") or ""
        instance_id = request.get("group_instance_id") if version >= 3 else None
        if self.table.closed:
            return SyncResult(NOT_COORDINATOR)
        if not valid_group_id(request.get("group_id")):
            return SyncResult(INVALID_GROUP_ID)
        if g is None:
            return SyncResult(UNKNOWN_MEMBER_ID)
        if g.state == DEAD:
            return SyncResult(COORDINATOR_NOT_AVAILABLE)
        if g.fenced(instance_id, member_id):
            return SyncResult(FENCED_INSTANCE_ID)
        m = g.members.get(member_id)
        if m is None:
            return SyncResult(UNKNOWN_MEMBER_ID)
        if request.get("generation_id") != g.generation_id:
            return SyncResult(ILLEGAL_GENERATION)
        if version >= 5:
            ptype, pname = request.get("protocol_type"), request.get("protocol_name")
            if ptype is not None and ptype != g.protocol_type or pname is not None and pname != g.protocol_name:
                return SyncResult(INCONSISTENT_GROUP_PROTOCOL)
        if g.state == PREPARING_REBALANCE:
            return SyncResult(REBALANCE_IN_PROGRESS)
        self._touch(g, m)
        if g.state == STABLE:
            return SyncResult(NONE, m.assignment)
        # CompletingRebalance: wait for the leader's assignment (the leader's own request delivers it).
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result(SyncResult(REBALANCE_IN_PROGRESS))
        m.sync_future = fut = self._loop().create_future()
        if member_id == g.leader_id:
            given = {a.get("member_id"): bytes(a.get("assignment") or b"") for a in request.get("assignments") or ()}
            more = sum(len(given.get(k, b"")) - len(o.assignment) for k, o in g.members.items())
            if more > 0 and self.table.over_member_bytes(g, more, "SyncGroup", m.client_id, m.client_host):
                m.sync_future = None
                return SyncResult(GROUP_MAX_SIZE_REACHED)
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
                        other.sync_future.set_result(SyncResult(NONE, other.assignment))
                    other.sync_future = None
            self.table.recount(g)
            self.table.save(g)  # as Kafka writes the group's metadata with the leader's assignment
        return await fut

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    async def heartbeat(self, request: dict[str, Any], version: int, *, client_id: str = "",
                        client_host: str = "") -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": self._heartbeat(request, version)}

    def _heartbeat(self, request: dict[str, Any], version: int) -> int:
        group_id = request.get("group_id")
        member_id = request.get("member_id") or ""
        instance_id = request.get("group_instance_id") if version >= 3 else None
        if self.table.closed:
            return NOT_COORDINATOR
        if not valid_group_id(group_id):
            return INVALID_GROUP_ID
        g = self.table.get(group_id)
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
        if self.table.closed:
            return NOT_COORDINATOR, []
        if not valid_group_id(group_id):
            return INVALID_GROUP_ID, []
        g = self.table.get(group_id)
        results = []
        if g is not None and g.state == DEAD:
            return COORDINATOR_NOT_AVAILABLE, []
        for ident in identities:
            member_id = ident.get("member_id") or ""
            instance_id = ident.get("group_instance_id")
            results.append((member_id, instance_id, self._leave_one(g, member_id, instance_id)))
        return NONE, results

    def _leave_one(self, g: Group | None, member_id: str, instance_id: str | None) -> int:
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

    # ------------------------------------------------------------------ OffsetCommit's membership check

    def check_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        """Whether a commit's member and generation are current (NONE) or the error code to answer with; a
        member's commit is a sign of life (its session starts again). A "simple" commit (generation < 0, no
        member id) is accepted only for a group with no members."""
        if self.table.closed:
            return NOT_COORDINATOR
        g = self.table.get(group_id)
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
