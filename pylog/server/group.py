"""A consumer group as ``pylog serve``'s coordinator holds it: :class:`Group`, :class:`Member`, the group states
and the consumer protocol's bytes that describe pylog's own members to Kafka clients.

Plain data and the rules that read only one group (Kafka's protocol vote, static-member fencing); who changes
a group and when is :mod:`pylog.server.coordinator`'s, which groups are held :mod:`pylog.server.group_table`'s.

Invariants:
- A group's ``members`` keep their join order: the first is the next leader when the leader goes.
- ``static`` maps each static member's ``group_instance_id`` to its member id, and only to a member of
  ``members``.
- A member has at most one waiting JoinGroup (``join_future``) and one waiting SyncGroup (``sync_future``);
  :meth:`Member.fail` answers both, so no request waits on a member that is gone.
- :func:`member_size` counts a member's protocols, assignment and :data:`MEMBER_OVERHEAD`: the unit of the
  coordinator's ``max_member_bytes`` bound.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from ..errors import InvalidGroupError
from ..store import check_group_id
from ..structs import TopicPartition

__all__ = ["EMPTY", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE", "DEAD", "CONSUMER_PROTOCOL_TYPE",
           "CLASSIC_GROUP_TYPE", "JoinResult", "SyncResult", "Member", "Group", "MEMBER_OVERHEAD",
           "protocols_size", "member_size", "valid_group_id", "consumer_metadata", "subscription_topics",
           "consumer_assignment"]

# Group states, named as Kafka names them in DescribeGroups and ListGroups.
EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

#: The protocol type pylog's own groups are listed and described with.
CONSUMER_PROTOCOL_TYPE = "consumer"
#: The group type ListGroups v5 reports (KIP-848 calls the protocol this coordinator speaks "classic").
CLASSIC_GROUP_TYPE = "classic"


class JoinResult(NamedTuple):
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[dict[str, Any], ...] = ()


class SyncResult(NamedTuple):
    error_code: int
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
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
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
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

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def fail(self, error: int) -> None:
        """Answer the member's waiting JoinGroup and SyncGroup with ``error``."""
        if self.join_future is not None:
            if not self.join_future.done():
                self.join_future.set_result(JoinResult(error, member_id=self.member_id))
            self.join_future = None
        if self.sync_future is not None:
            if not self.sync_future.done():
                self.sync_future.set_result(SyncResult(error))
            self.sync_future = None


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    #: Insertion-ordered: the first member is the next leader when the leader goes.
    members: dict[str, Member] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED, waiting for their second JoinGroup (expiry timers).
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    #: group_instance_id -> member id of its static member.
    static: dict[str, str] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    #: Whether the running join phase is the initial delay (completes only when its timer fires).
    initial_join: bool = False
    new_member_added: bool = False
    #: The members' protocol metadata and assignment bytes as last counted (``GroupTable.recount``).
    held_bytes: int = 0
    #: New generations this coordinator made for the group (pylog_group_rebalances_total).
    rebalances: int = 0

    def cancel_join_timer(self) -> None:
        if self.join_timer is not None:
            self.join_timer.cancel()
            self.join_timer = None

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
MEMBER_OVERHEAD = 512


def protocols_size(protocols: list[tuple[str, bytes]]) -> int:
    return sum(len(name) + len(meta) for name, meta in protocols) + MEMBER_OVERHEAD


def member_size(m: Member) -> int:
    return protocols_size(m.protocols) + len(m.assignment)


def valid_group_id(group_id: Any) -> bool:
    try:
        check_group_id(group_id)
    except InvalidGroupError:
        return False
    return True


def consumer_metadata(topics: Iterable[str]) -> bytes:
    """A ConsumerProtocolSubscription v0 (topics, null user data): what pylog's own members are described with."""
    out = [struct.pack(">hi", 0, len(topics := list(topics)))]
    for t in topics:
        b = t.encode()
        out.append(struct.pack(">h", len(b)) + b)
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def subscription_topics(meta: bytes) -> list[str]:
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


def consumer_assignment(tps: Iterable[TopicPartition]) -> bytes:
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
