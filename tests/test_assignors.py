"""Assignment strategies: Kafka's documented examples, and properties over random groups."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor, TopicPartition
from pylog.clients.assignors import ASSIGNORS, assignor_named

ALL = [RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor]


def tps(*pairs: tuple[str, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in pairs]


def test_range_matches_kafkas_example():
    # Kafka's RangeAssignor javadoc: C0, C1 on t0 and t1 with 3 partitions each.
    got = RangePartitionAssignor.assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert got == {"C0": tps(("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)), "C1": tps(("t0", 2), ("t1", 2))}


def test_range_as_seed_001_describes_it():
    # 10 partitions, 3 consumers: 4, 3, 3 in contiguous ranges.
    got = RangePartitionAssignor.assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 10})
    assert [[tp.partition for tp in got[m]] for m in "abc"] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_round_robin_matches_kafkas_example():
    got = RoundRobinPartitionAssignor.assign({"C0": ["t0", "t1"], "C1": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert got == {"C0": tps(("t0", 0), ("t0", 2), ("t1", 1)), "C1": tps(("t0", 1), ("t1", 0), ("t1", 2))}


def test_round_robin_skips_members_not_subscribed():
    got = RoundRobinPartitionAssignor.assign({"a": ["t0"], "b": ["t0", "t1"]}, {"t0": 2, "t1": 2})
    assert got == {"a": tps(("t0", 0)), "b": tps(("t0", 1), ("t1", 0), ("t1", 1))}


def test_strategy_names_and_errors():
    assert set(ASSIGNORS) == {"range", "roundrobin", "sticky"}
    assert assignor_named("sticky") is StickyPartitionAssignor
    assert assignor_named(RoundRobinPartitionAssignor) is RoundRobinPartitionAssignor
    with pytest.raises(ValueError):
        assignor_named("fastest")
    with pytest.raises(ValueError):
        assignor_named(dict)


groups = st.fixed_dictionaries({}).flatmap(lambda _: st.tuples(
    st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 9), min_size=1, max_size=4),  # topic -> partitions
    st.lists(st.sampled_from(["m1", "m2", "m3", "m4", "m5"]), min_size=1, max_size=5, unique=True),
)).flatmap(lambda tm: st.tuples(
    st.just(tm[0]),
    st.fixed_dictionaries({m: st.lists(st.sampled_from(sorted(tm[0]) + ["missing"]), min_size=1, unique=True)
                           for m in tm[1]}),
))


@settings(max_examples=300, deadline=None)
@given(groups)
def test_every_strategy_assigns_each_subscribed_partition_exactly_once(group):
    partitions, subs = group
    for assignor in ALL:
        got = assignor.assign(subs, partitions)
        assert got == assignor.assign(dict(reversed(list(subs.items()))), partitions)  # order-independent
        assert set(got) == set(subs)
        flat = [tp for ps in got.values() for tp in ps]
        want = {TopicPartition(t, p) for t, n in partitions.items() if any(t in s for s in subs.values())
                for p in range(n)}
        assert len(flat) == len(set(flat)) and set(flat) == want, assignor.name
        for m, ps in got.items():
            assert all(tp.topic in subs[m] for tp in ps)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.integers(1, 4))
def test_balance_and_stickiness_with_identical_subscriptions(n_parts, n_members, topics):
    partitions = {f"t{i}": n_parts for i in range(topics)}
    members = [f"m{i}" for i in range(n_members)]
    subs = {m: list(partitions) for m in members}
    for assignor in (RoundRobinPartitionAssignor, StickyPartitionAssignor):
        counts = [len(ps) for ps in assignor.assign(subs, partitions).values()]
        assert max(counts) - min(counts) <= 1
    before = StickyPartitionAssignor.assign(subs, partitions)
    assert StickyPartitionAssignor.assign(subs, partitions, before) == before  # nothing changed: nothing moves
    if n_members > 1:
        # A member leaves: every survivor keeps everything it had.
        gone = members[0]
        after = StickyPartitionAssignor.assign({m: subs[m] for m in members[1:]}, partitions, before)
        for m in members[1:]:
            assert set(before[m]) <= set(after[m])
        counts = [len(ps) for ps in after.values()]
        assert max(counts) - min(counts) <= 1
        # It comes back: only what it gets moves, and that is no more than its fair share.
        back = StickyPartitionAssignor.assign(subs, partitions, after)
        moved = sum(len(set(after[m]) - set(back[m])) for m in members[1:])
        assert moved == len(back[gone]) <= -(-n_parts * topics // n_members)
