"""Partition assignment strategies for consumer groups: range, round-robin and sticky.

An assignor is a pure function of the group's members (each with the topics it subscribes to), the
partition count of every topic, and the previous assignment; every member of a group computes the same
answer from the same inputs, so whichever member rebalances the group gets the assignment everyone
agrees on.

Invariants (checked by property tests):
- Every partition of a topic that some member subscribes to is assigned to exactly one member, and only
  to a member subscribing to its topic; partitions of topics nobody subscribes to are not assigned.
- Deterministic: the result depends only on the inputs (members are ordered by id, never by arrival).
- range and round-robin follow Kafka's ``RangeAssignor`` and ``RoundRobinAssignor``; sticky balances
  the counts (members sharing the same subscriptions differ by at most one partition) while keeping as
  many partitions as possible where they were.
"""

from __future__ import annotations

from typing import ClassVar, Mapping, Sequence

from ..structs import TopicPartition

__all__ = ["AbstractPartitionAssignor", "RangePartitionAssignor", "RoundRobinPartitionAssignor",
           "StickyPartitionAssignor", "ASSIGNORS", "assignor_named"]

#: member id -> the topics it subscribes to
Subscriptions = Mapping[str, Sequence[str]]
#: member id -> the partitions it holds
Assignment = dict[str, list[TopicPartition]]


class AbstractPartitionAssignor:
    """Base of the strategies; ``name`` is what ``partition_assignment_strategy`` and the group state use."""

    name: ClassVar[str] = ""

    @classmethod
    def assign(cls, subscriptions: Subscriptions, partitions: Mapping[str, int],
               previous: Mapping[str, Sequence[TopicPartition]] | None = None) -> Assignment:
        """The new assignment. ``partitions`` gives each existing topic's partition count; subscribed
        topics missing from it are ignored. ``previous`` is the group's last assignment (sticky uses it)."""
        raise NotImplementedError


class RangePartitionAssignor(AbstractPartitionAssignor):
    """Kafka's range assignor (seed 001): per topic, the members subscribing to it in id order each take a
    contiguous range; the first ``partitions % members`` of them take one partition more."""

    name = "range"

    @classmethod
    def assign(cls, subscriptions: Subscriptions, partitions: Mapping[str, int],
               previous: Mapping[str, Sequence[TopicPartition]] | None = None) -> Assignment:
        out: Assignment = {m: [] for m in sorted(subscriptions)}
        for topic in sorted(partitions):
            members = [m for m in out if topic in subscriptions[m]]
            if not members:
                continue
            n = partitions[topic]
            per, extra = divmod(n, len(members))
            start = 0
            for i, m in enumerate(members):
                count = per + (1 if i < extra else 0)
                out[m].extend(TopicPartition(topic, p) for p in range(start, start + count))
                start += count
        return out


class RoundRobinPartitionAssignor(AbstractPartitionAssignor):
    """Kafka's round-robin assignor: all partitions in (topic, partition) order dealt to the members in id
    order, skipping a member that does not subscribe to the partition's topic."""

    name = "roundrobin"

    @classmethod
    def assign(cls, subscriptions: Subscriptions, partitions: Mapping[str, int],
               previous: Mapping[str, Sequence[TopicPartition]] | None = None) -> Assignment:
        out: Assignment = {m: [] for m in sorted(subscriptions)}
        members = list(out)
        if not members:
            return out
        subs = {m: set(subscriptions[m]) for m in members}
        k = 0
        for topic in sorted(partitions):
            if not any(topic in s for s in subs.values()):
                continue
            for p in range(partitions[topic]):
                while topic not in subs[members[k % len(members)]]:
                    k += 1
                out[members[k % len(members)]].append(TopicPartition(topic, p))
                k += 1
        return out


class StickyPartitionAssignor(AbstractPartitionAssignor):
    """Balanced like round-robin, but a partition stays with its previous owner whenever balance allows,
    so a rebalance moves as few partitions as possible (Kafka's ``StickyAssignor`` goal).

    Each partition is given, in turn, to the eligible member holding the fewest partitions; partitions
    keep their previous owner first while that owner is below its fair share. Fair share is computed
    over the members eligible for each topic, so members with identical subscriptions end up within one
    partition of each other.
    """

    name = "sticky"

    @classmethod
    def assign(cls, subscriptions: Subscriptions, partitions: Mapping[str, int],
               previous: Mapping[str, Sequence[TopicPartition]] | None = None) -> Assignment:
        out: Assignment = {m: [] for m in sorted(subscriptions)}
        if not out:
            return out
        subs = {m: set(subscriptions[m]) for m in out}
        wanted = [TopicPartition(t, p) for t in sorted(partitions) if any(t in s for s in subs.values())
                  for p in range(partitions[t])]
        # Target: the count each member would get from an even deal over its eligible partitions.
        target = {m: len(ps) for m, ps in RoundRobinPartitionAssignor.assign(subscriptions, partitions).items()}
        owner: dict[TopicPartition, str] = {}
        prev = previous or {}
        for m in sorted(prev):
            if m in out:
                for tp in prev[m]:
                    owner.setdefault(TopicPartition(*tp), m)
        free = []
        for tp in wanted:
            held_by = owner.get(tp)
            if held_by is not None and tp.topic in subs[held_by] and len(out[held_by]) < target[held_by]:
                out[held_by].append(tp)
            else:
                free.append(tp)
        for tp in free:
            eligible = [m for m in out if tp.topic in subs[m]]
            # Fewest first; among equals the one furthest below its target, then by id (deterministic).
            best = min(eligible, key=lambda m: (len(out[m]) >= target[m], len(out[m]), m))
            out[best].append(tp)
        for m in out:
            out[m].sort()
        return out


#: Strategies by the name stored in the group state and accepted in ``partition_assignment_strategy``.
ASSIGNORS: dict[str, type[AbstractPartitionAssignor]] = {
    a.name: a for a in (RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor)}


def assignor_named(strategy: object) -> type[AbstractPartitionAssignor]:
    """A strategy given by name ("range", "roundrobin", "sticky") or as one of the assignor classes."""
    if isinstance(strategy, str):
        try:
            return ASSIGNORS[strategy]
        except KeyError:
            raise ValueError(f"unknown partition assignment strategy {strategy!r}; "
                             f"use one of {sorted(ASSIGNORS)}") from None
    if isinstance(strategy, type) and issubclass(strategy, AbstractPartitionAssignor) and strategy.name:
        return strategy
    raise ValueError(f"not a partition assignment strategy: {strategy!r}")
