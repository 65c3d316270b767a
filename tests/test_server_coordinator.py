"""pylog/server/coordinator.py: Kafka's group coordinator driven directly with request dicts under asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import struct
import tempfile
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pylog
from pylog.server import coordinator as co
from pylog.server.coordinator import GroupCoordinator
from pylog.server.protocol import codes as E
from pylog.structs import OffsetAndMetadata, TopicPartition


@pytest.fixture
def store(tmp_path: Any) -> Any:
    s = pylog.open(tmp_path / "store")
    s.create_topic("t", 3)
    s.create_topic("u", 1)
    yield s
    s.close()


def make(store: Any, delay_ms: int = 0, **kw: Any) -> GroupCoordinator:
    return GroupCoordinator(store, initial_rebalance_delay_ms=delay_ms, min_session_timeout_ms=1, **kw)


def join_req(group: str = "g", member_id: str = "", session: int = 5000, rebalance: int = 5000,
             protocols: Any = (("range", b"meta"),), ptype: str = "consumer", instance: str | None = None) -> dict:
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": ptype,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": None}


async def join(c: GroupCoordinator, version: int = 9, client_id: str = "cli", **kw: Any) -> dict:
    """JoinGroup, answering MEMBER_ID_REQUIRED with the id given, as clients do."""
    r = await c.join_group(join_req(**kw), version, client_id=client_id, client_host="/127.0.0.1")
    if r["error_code"] == co.MEMBER_ID_REQUIRED:
        assert r["generation_id"] == -1 and r["member_id"].startswith(client_id + "-")
        kw["member_id"] = r["member_id"]
        r = await c.join_group(join_req(**kw), version, client_id=client_id, client_host="/127.0.0.1")
    return r


async def sync(c: GroupCoordinator, member_id: str, gen: int, assignments: dict | None = None,
               group: str = "g", version: int = 5, **extra: Any) -> dict:
    req = {"group_id": group, "generation_id": gen, "member_id": member_id, "group_instance_id": None,
           "protocol_type": "consumer", "protocol_name": extra.pop("protocol_name", "range"),
           "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}
    req.update(extra)
    return await c.sync_group(req, version)


async def hb(c: GroupCoordinator, member_id: str, gen: int, group: str = "g") -> int:
    r = await c.heartbeat({"group_id": group, "generation_id": gen, "member_id": member_id,
                           "group_instance_id": None}, 4)
    return r["error_code"]


async def commit(c: GroupCoordinator, offsets: dict, member_id: str = "", gen: int = -1, group: str = "g",
                 version: int = 8) -> dict:
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        off, meta = o if isinstance(o, tuple) else (o, "")
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                         "committed_leader_epoch": -1, "committed_metadata": meta})
    r = await c.offset_commit({"group_id": group, "generation_id_or_member_epoch": gen, "member_id": member_id,
                               "group_instance_id": None,
                               "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, version)
    return {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}


async def fetch(c: GroupCoordinator, group: str = "g", topics: Any = None, version: int = 7) -> dict:
    r = await c.offset_fetch({"group_id": group, "topics": topics, "require_stable": False}, version)
    assert r["error_code"] == 0
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"], p["error_code"])
            for t in r["topics"] for p in t["partitions"]}


async def describe(c: GroupCoordinator, *groups: str) -> list[dict]:
    return (await c.describe_groups({"groups": list(groups), "include_authorized_operations": False}, 5))["groups"]


async def listed(c: GroupCoordinator, version: int = 4, states: Any = ()) -> dict:
    r = await c.list_groups({"states_filter": list(states), "types_filter": []}, version)
    assert r["error_code"] == 0
    return {g["group_id"]: (g["protocol_type"], g["group_state"]) for g in r["groups"]}


# ---------------------------------------------------------------------------------------------- one member

@pytest.mark.asyncio
async def test_single_member_join_sync_heartbeat_commit_fetch(store: Any) -> None:
    c = make(store)
    first = await c.join_group(join_req(), 9, client_id="cli")
    assert first["error_code"] == co.MEMBER_ID_REQUIRED and first["protocol_name"] is None
    assert first["members"] == [] and first["leader"] == ""
    r = await c.join_group(join_req(member_id=first["member_id"]), 9, client_id="cli")
    assert r["error_code"] == 0 and r["generation_id"] == 1 and r["member_id"] == first["member_id"]
    assert r["leader"] == r["member_id"] and r["protocol_name"] == "range" and r["protocol_type"] == "consumer"
    assert r["members"] == [{"member_id": r["member_id"], "group_instance_id": None, "metadata": b"meta"}]
    me = r["member_id"]
    assert c.group_state("g") == co.COMPLETING_REBALANCE
    assert await hb(c, me, 1) == 0  # heartbeats are fine while waiting to sync
    s = await sync(c, me, 1, {me: b"assign"})
    assert s == {"throttle_time_ms": 0, "error_code": 0, "protocol_type": "consumer", "protocol_name": "range",
                 "assignment": b"assign"}
    assert c.group_state("g") == co.STABLE
    assert (await sync(c, me, 1))["assignment"] == b"assign"  # a repeated SyncGroup: the same assignment
    assert await hb(c, me, 1) == 0
    assert await commit(c, {("t", 0): (5, "m0"), ("t", 2): 7}, me, 1) == {("t", 0): 0, ("t", 2): 0}
    assert store.committed_offsets("g") == {TopicPartition("t", 0): OffsetAndMetadata(5, "m0"),
                                            TopicPartition("t", 2): OffsetAndMetadata(7, "")}
    assert await fetch(c, topics=[{"name": "t", "partition_indexes": [0, 1, 2]}]) == {
        ("t", 0): (5, "m0", 0), ("t", 1): (-1, "", 0), ("t", 2): (7, "", 0)}
    assert await fetch(c) == {("t", 0): (5, "m0", 0), ("t", 2): (7, "", 0)}  # topics None: everything
    pylog_producer = store.producer()
    for _ in range(10):
        pylog_producer.send("t", b"x", partition=0)
    pylog_producer.close()
    assert store.group_lag("g")[TopicPartition("t", 0)].lag == 5
    # Leaving empties the group; its offsets stay.
    r = await c.leave_group({"group_id": "g", "members": [{"member_id": me, "group_instance_id": None,
                                                           "reason": "bye"}]}, 5)
    assert r == {"throttle_time_ms": 0, "error_code": 0,
                 "members": [{"member_id": me, "group_instance_id": None, "error_code": 0}]}
    assert c.group_state("g") == co.EMPTY and c.group_generation("g") == 2
    assert await hb(c, me, 1) == co.UNKNOWN_MEMBER_ID
    assert (await fetch(c))[("t", 0)] == (5, "m0", 0)
    c.close()


@pytest.mark.asyncio
async def test_old_versions_field_shapes(store: Any) -> None:
    c = make(store)
    # v0: no rebalance timeout (the session timeout is used), no MEMBER_ID_REQUIRED round.
    req = join_req(session=3000)
    del req["rebalance_timeout_ms"]
    r = await c.join_group(req, 0, client_id="old")
    assert r["error_code"] == 0 and r["generation_id"] == 1 and r["protocol_name"] == "range"
    me = r["member_id"]
    s = await c.sync_group({"group_id": "g", "generation_id": 1, "member_id": me,
                            "assignments": [{"member_id": me, "assignment": b"a"}]}, 0)
    assert s["error_code"] == 0 and s["assignment"] == b"a"
    # OffsetCommit v2 names the generation generation_id in older specs; both spellings are read.
    r2 = await c.offset_commit({"group_id": "g", "generation_id": 1, "member_id": me, "retention_time_ms": -1,
                                "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 3,
                                                                         "committed_metadata": None}]}]}, 2)
    assert r2["topics"][0]["partitions"][0]["error_code"] == 0
    assert store.committed_offsets("g")[TopicPartition("t", 1)] == OffsetAndMetadata(3, "")
    r3 = await c.offset_commit({"group_id": "g", "generation_id": 7, "member_id": me,
                                "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 4,
                                                                         "committed_metadata": ""}]}]}, 2)
    assert r3["topics"][0]["partitions"][0]["error_code"] == co.ILLEGAL_GENERATION
    f = await c.offset_fetch({"group_id": "g", "topics": [{"name": "t", "partition_indexes": [1]}]}, 1)
    assert f["topics"][0]["partitions"][0]["committed_offset"] == 3
    # v8: several groups in one request.
    f8 = await c.offset_fetch({"groups": [{"group_id": "g", "topics": None}, {"group_id": "nope", "topics": None},
                                          {"group_id": "", "topics": None}], "require_stable": True}, 8)
    assert [(g["group_id"], g["error_code"], g["topics"]) for g in f8["groups"]] == [
        ("g", 0, [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 3,
                                                "committed_leader_epoch": -1, "metadata": "", "error_code": 0}]}]),
        ("nope", 0, []), ("", co.INVALID_GROUP_ID, [])]
    # LeaveGroup v0: one member, its error at the top.
    assert (await c.leave_group({"group_id": "g", "member_id": "stranger"}, 0))["error_code"] == co.UNKNOWN_MEMBER_ID
    assert (await c.leave_group({"group_id": "g", "member_id": me}, 1)) == {"throttle_time_ms": 0, "error_code": 0}
    assert c.group_state("g") == co.EMPTY
    c.close()


# ---------------------------------------------------------------------------------------------- several members

@pytest.mark.asyncio
async def test_three_members_leader_assigns_then_leave_and_expiry(store: Any) -> None:
    c = make(store, delay_ms=100)
    # Joining together within the initial delay: one generation of three.
    rs = await asyncio.gather(*(join(c, client_id=f"c{i}", session=400, rebalance=2000) for i in range(3)))
    assert {r["error_code"] for r in rs} == {0} and {r["generation_id"] for r in rs} == {1}
    leader = rs[0]["leader"]
    assert {r["leader"] for r in rs} == {leader}
    ids = [r["member_id"] for r in rs]
    assert leader in ids
    for r in rs:
        if r["member_id"] == leader:
            assert sorted(m["member_id"] for m in r["members"]) == sorted(ids)
        else:
            assert r["members"] == []
    followers = [m for m in ids if m != leader]
    # Followers wait for the leader's SyncGroup.
    waiting = [asyncio.ensure_future(sync(c, m, 1)) for m in followers]
    await asyncio.sleep(0.02)
    assert not any(w.done() for w in waiting)
    assignment = {m: m.encode() for m in ids[:2]}  # one member left out: it gets an empty assignment
    mine = await sync(c, leader, 1, assignment)
    got = {m: (await w)["assignment"] for m, w in zip(followers, waiting, strict=True)}
    got[leader] = mine["assignment"]
    assert got == {m: assignment.get(m, b"") for m in ids}
    desc = (await describe(c, "g"))[0]
    assert desc["group_state"] == "Stable" and desc["protocol_data"] == "range"
    assert {m["member_id"]: m["member_assignment"] for m in desc["members"]} == got
    assert {m["client_id"] for m in desc["members"]} == {"c0", "c1", "c2"}
    assert {m["client_host"] for m in desc["members"]} == {"/127.0.0.1"}

    # One leaves: the others hear of the rebalance through their heartbeats and rejoin.
    gone, a, b = ids[0], ids[1], ids[2]
    r = await c.leave_group({"group_id": "g", "members": [{"member_id": gone, "group_instance_id": None}]}, 4)
    assert r["members"][0]["error_code"] == 0
    assert c.group_state("g") == co.PREPARING_REBALANCE
    assert await hb(c, a, 1) == co.REBALANCE_IN_PROGRESS
    assert (await sync(c, a, 1))["error_code"] == co.REBALANCE_IN_PROGRESS
    ra, rb = await asyncio.gather(join(c, member_id=a, session=400, rebalance=2000),
                                  join(c, member_id=b, session=400, rebalance=2000))
    assert ra["generation_id"] == rb["generation_id"] == 2
    lead2 = ra["leader"]
    await asyncio.gather(sync(c, a, 2, {a: b"A", b: b"B"} if lead2 == a else None),
                         sync(c, b, 2, {a: b"A", b: b"B"} if lead2 == b else None))
    assert c.group_state("g") == co.STABLE
    # b stops heartbeating: after its session timeout it is removed and a rejoins alone.
    for _ in range(8):
        await asyncio.sleep(0.1)
        code = await hb(c, a, 2)
        if code != 0:
            break
    assert code == co.REBALANCE_IN_PROGRESS
    assert await hb(c, b, 2) == co.UNKNOWN_MEMBER_ID
    r = await join(c, member_id=a, session=400, rebalance=2000)
    assert r["generation_id"] == 3 and r["leader"] == a and [m["member_id"] for m in r["members"]] == [a]
    c.close()


@pytest.mark.asyncio
async def test_member_that_does_not_rejoin_is_removed_after_rebalance_timeout(store: Any) -> None:
    c = make(store)
    r1 = await join(c, client_id="a", session=10_000, rebalance=300)
    await sync(c, r1["member_id"], 1, {r1["member_id"]: b"x"})
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    r2 = await join(c, client_id="b", session=10_000, rebalance=300)  # a never rejoins
    assert 0.25 < loop.time() - t0 < 2
    assert r2["generation_id"] == 2 and r2["leader"] == r2["member_id"]
    assert [m["member_id"] for m in r2["members"]] == [r2["member_id"]]
    assert await hb(c, r1["member_id"], 1) == co.UNKNOWN_MEMBER_ID
    c.close()


@pytest.mark.asyncio
async def test_initial_delay_waits_for_late_joiners(store: Any) -> None:
    c = make(store, delay_ms=150)
    first = asyncio.ensure_future(join(c, client_id="a"))
    await asyncio.sleep(0.1)
    second = asyncio.ensure_future(join(c, client_id="b"))  # within the delay: extends it, same generation
    r1, r2 = await asyncio.gather(first, second)
    assert r1["generation_id"] == r2["generation_id"] == 1 and r1["leader"] == r2["leader"]


@pytest.mark.asyncio
async def test_stable_follower_rejoin_without_change_keeps_generation_leader_rejoin_rebalances(store: Any) -> None:
    c = make(store, delay_ms=100)  # both join the first generation
    ra, rb = await asyncio.gather(join(c, client_id="a"), join(c, client_id="b"))
    leader = ra["leader"]
    follower = rb["member_id"] if leader == ra["member_id"] else ra["member_id"]
    await asyncio.gather(sync(c, leader, 1, {leader: b"L", follower: b"F"}), sync(c, follower, 1))
    r = await join(c, member_id=follower)
    assert r["generation_id"] == 1 and r["members"] == [] and c.group_state("g") == co.STABLE
    # A changed subscription (new metadata) rebalances.
    pending = asyncio.ensure_future(join(c, member_id=follower, protocols=(("range", b"new"),)))
    await asyncio.sleep(0.01)
    assert c.group_state("g") == co.PREPARING_REBALANCE
    assert await hb(c, leader, 1) == co.REBALANCE_IN_PROGRESS
    rl = await join(c, member_id=leader)
    rf = await pending
    assert rl["generation_id"] == rf["generation_id"] == 2
    assert {m["member_id"]: m["metadata"] for m in rl["members"]}[follower] == b"new"
    c.close()


# ---------------------------------------------------------------------------------------------- errors

@pytest.mark.asyncio
async def test_sync_and_heartbeat_errors(store: Any) -> None:
    c = make(store)
    r = await join(c)
    me = r["member_id"]
    assert (await sync(c, me, 2))["error_code"] == co.ILLEGAL_GENERATION
    assert (await sync(c, "who", 1))["error_code"] == co.UNKNOWN_MEMBER_ID
    assert (await sync(c, me, 1, group="other"))["error_code"] == co.UNKNOWN_MEMBER_ID
    assert (await sync(c, me, 1, group=""))["error_code"] == co.INVALID_GROUP_ID
    bad = await sync(c, me, 1, protocol_name="roundrobin")
    assert bad["error_code"] == co.INCONSISTENT_GROUP_PROTOCOL and bad["protocol_name"] is None
    assert await hb(c, me, 0) == co.ILLEGAL_GENERATION
    assert await hb(c, "who", 1) == co.UNKNOWN_MEMBER_ID
    assert await hb(c, me, 1, group="nope") == co.UNKNOWN_MEMBER_ID
    assert await hb(c, me, 1, group="") == co.INVALID_GROUP_ID
    assert (await sync(c, me, 1, {me: b"a"}))["error_code"] == 0
    # A new member starts a rebalance: SyncGroup and commits of the old generation are refused or redirected.
    newcomer = asyncio.ensure_future(join(c, client_id="n"))
    await asyncio.sleep(0.01)
    assert (await sync(c, me, 1))["error_code"] == co.REBALANCE_IN_PROGRESS
    assert await commit(c, {("t", 0): 1}, me, 1) == {("t", 0): 0}  # allowed while preparing, as in Kafka
    r2 = await join(c, member_id=me)
    await newcomer
    assert await commit(c, {("t", 0): 2}, me, 2) == {("t", 0): co.REBALANCE_IN_PROGRESS}  # awaiting sync
    assert await commit(c, {("t", 0): 3}, me, 1) == {("t", 0): co.ILLEGAL_GENERATION}
    assert await commit(c, {("t", 0): 4}, "who", 2) == {("t", 0): co.UNKNOWN_MEMBER_ID}
    assert await commit(c, {("t", 0): 5}) == {("t", 0): co.UNKNOWN_MEMBER_ID}  # simple commit, group not empty
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 1
    assert r2["generation_id"] == 2
    c.close()


@pytest.mark.asyncio
async def test_join_errors(store: Any) -> None:
    c = make(store, max_group_size=2)
    assert (await join(c, group=""))["error_code"] == co.INVALID_GROUP_ID
    assert (await join(c, group="\udc80"))["error_code"] == co.INVALID_GROUP_ID
    assert (await join(c, member_id="made-up"))["error_code"] == co.UNKNOWN_MEMBER_ID
    strict = GroupCoordinator(store, initial_rebalance_delay_ms=0)  # Kafka's minimum session timeout, 6 s
    assert (await join(strict, session=10))["error_code"] == co.INVALID_SESSION_TIMEOUT
    assert (await join(c, protocols=()))["error_code"] == co.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(c, ptype=""))["error_code"] == co.INCONSISTENT_GROUP_PROTOCOL
    a = await join(c, protocols=(("range", b""), ("roundrobin", b"")))
    assert a["error_code"] == 0
    # A member with no protocol in common, or another protocol type, is refused.
    assert (await join(c, protocols=(("sticky", b""),)))["error_code"] == co.INCONSISTENT_GROUP_PROTOCOL
    assert (await join(c, ptype="connect"))["error_code"] == co.INCONSISTENT_GROUP_PROTOCOL
    b = asyncio.ensure_future(join(c, protocols=(("roundrobin", b""), ("range", b""))))
    await asyncio.sleep(0.01)
    assert (await join(c, client_id="third"))["error_code"] == co.GROUP_MAX_SIZE_REACHED
    ra = await join(c, member_id=a["member_id"], protocols=(("range", b""), ("roundrobin", b"")))
    rb = await b
    assert ra["generation_id"] == rb["generation_id"] == 2
    assert ra["protocol_name"] == rb["protocol_name"] == "range"  # a tie goes to the leader's preference
    c.close()


@pytest.mark.asyncio
async def test_join_flood_with_new_group_ids_is_bounded_by_max_groups(store: Any) -> None:
    c = make(store, max_groups=2)
    # Group "a" completes a generation, commits and empties: it may be dropped, its offsets stay in the store.
    a = await join(c, group="a")
    assert a["generation_id"] == 1
    await sync(c, a["member_id"], 1, {a["member_id"]: b"x"}, group="a")
    assert await commit(c, {("t", 0): 7}, a["member_id"], 1, group="a") == {("t", 0): 0}
    r = await c.leave_group({"group_id": "a", "member_id": a["member_id"]}, 1)
    assert r["error_code"] == 0 and c.group_state("a") == co.EMPTY
    # A flood of first JoinGroups with new group ids, never joining again (each leaves a pending member).
    flood = [await c.join_group(join_req(group=f"f{i}"), 9, client_id="x") for i in range(3)]
    assert [r["error_code"] for r in flood] == [co.MEMBER_ID_REQUIRED, co.MEMBER_ID_REQUIRED,
                                                co.GROUP_MAX_SIZE_REACHED]
    assert c.group_state("a") is None and c.group_state("f2") is None  # "a" made room for "f1"
    assert store.committed_offsets("a")[TopicPartition("t", 0)].offset == 7
    # A group whose only member never joined again (expired: an Empty group of generation 0) goes before one
    # that completed a generation.
    d = make(store, max_groups=2)
    b = await join(d, group="b")
    await sync(d, b["member_id"], 1, {b["member_id"]: b"x"}, group="b")
    await d.leave_group({"group_id": "b", "member_id": b["member_id"]}, 1)
    assert (await d.join_group(join_req(group="v", session=50), 9))["error_code"] == co.MEMBER_ID_REQUIRED
    await asyncio.sleep(0.2)  # the pending member expires
    assert (await join(d, group="w"))["generation_id"] == 1
    assert d.group_state("v") is None and d.group_state("b") == co.EMPTY
    c.close()
    d.close()


@pytest.mark.asyncio
async def test_members_of_all_groups_are_bounded_by_max_member_bytes(store: Any) -> None:
    big = b"m" * 40_000
    c = make(store, max_member_bytes=100_000)
    # Two groups of one large member each fit; a third large subscription in any group does not.
    a = await join(c, group="a", protocols=(("range", big),))
    b = await join(c, group="b", protocols=(("range", big),))
    assert a["error_code"] == b["error_code"] == 0
    assert 80_000 < c.member_bytes() <= 100_000
    r = await join(c, group="c", protocols=(("range", big),))
    assert r["error_code"] == co.GROUP_MAX_SIZE_REACHED and c.member_bytes() <= 100_000
    # A small member still joins, and a leader's assignment that would pass the bound is refused.
    s = await join(c, group="s")
    assert s["error_code"] == 0
    assert (await sync(c, s["member_id"], 1, {s["member_id"]: big}, group="s"))["error_code"] == \
        co.GROUP_MAX_SIZE_REACHED
    assert (await sync(c, s["member_id"], 1, {s["member_id"]: b"x"}, group="s"))["error_code"] == 0
    # Members that leave give their bytes back: the refused subscription now fits.
    await c.leave_group({"group_id": "a", "member_id": a["member_id"]}, 1)
    assert c.member_bytes() < 60_000
    assert (await join(c, group="c", protocols=(("range", big),)))["error_code"] == 0
    c.close()


@pytest.mark.asyncio
async def test_protocol_vote(store: Any) -> None:
    c = make(store, delay_ms=50)
    prefs = [("range", "roundrobin"), ("roundrobin", "range"), ("roundrobin", "range", "sticky")]
    rs = await asyncio.gather(*(join(c, protocols=[(p, p.encode()) for p in ps]) for ps in prefs))
    assert {r["protocol_name"] for r in rs} == {"roundrobin"}
    lead = next(r for r in rs if r["members"])
    assert {m["metadata"] for m in lead["members"]} == {b"roundrobin"}
    c.close()


@pytest.mark.asyncio
async def test_pending_member_expires_and_close_wakes_waiters(store: Any) -> None:
    c = make(store)
    r = await c.join_group(join_req(session=100), 4)
    assert r["error_code"] == co.MEMBER_ID_REQUIRED
    await asyncio.sleep(0.2)  # never came back: forgotten
    assert (await c.join_group(join_req(member_id=r["member_id"]), 4))["error_code"] == co.UNKNOWN_MEMBER_ID
    a = await join(c)
    await sync(c, a["member_id"], 1, {a["member_id"]: b"x"})
    b = asyncio.ensure_future(join(c, client_id="b"))
    await asyncio.sleep(0.01)
    c.close()
    assert (await b)["error_code"] == co.NOT_COORDINATOR
    assert await hb(c, a["member_id"], 1) == co.NOT_COORDINATOR
    assert (await join(c))["error_code"] == co.NOT_COORDINATOR


@pytest.mark.asyncio
async def test_leave_v3_batch_and_pending_sync_answered(store: Any) -> None:
    c = make(store, delay_ms=100)  # both join the first generation
    ra, rb = await asyncio.gather(join(c, client_id="a"), join(c, client_id="b"))
    follower = rb["member_id"] if ra["leader"] == ra["member_id"] else ra["member_id"]
    waiting = asyncio.ensure_future(sync(c, follower, 1))
    await asyncio.sleep(0.01)
    r = await c.leave_group({"group_id": "g", "members": [
        {"member_id": ra["leader"], "group_instance_id": None}, {"member_id": "ghost", "group_instance_id": None},
        {"member_id": "", "group_instance_id": "not-static"}]}, 3)
    assert [m["error_code"] for m in r["members"]] == [0, co.UNKNOWN_MEMBER_ID, co.UNKNOWN_MEMBER_ID]
    assert (await waiting)["error_code"] == co.REBALANCE_IN_PROGRESS  # the leader will never assign
    r = await c.leave_group({"group_id": "nope", "members": [{"member_id": "x", "group_instance_id": None}]}, 3)
    assert r["error_code"] == 0 and r["members"][0]["error_code"] == co.UNKNOWN_MEMBER_ID
    assert (await c.leave_group({"group_id": "", "members": []}, 3))["error_code"] == co.INVALID_GROUP_ID
    c.close()


@pytest.mark.asyncio
async def test_static_members(store: Any) -> None:
    c = make(store)
    r = await c.join_group(join_req(instance="i1"), 9, client_id="s")
    assert r["error_code"] == 0 and r["generation_id"] == 1  # no MEMBER_ID_REQUIRED round for static members
    assert r["members"] == [{"member_id": r["member_id"], "group_instance_id": "i1", "metadata": b"meta"}]
    old = r["member_id"]
    await sync(c, old, 1, {old: b"x"})
    # The same instance restarts without its member id: it replaces the old member, in the same generation
    # (the group is Stable and its protocol stays): no rebalance, the old assignment, and the previous
    # leader's id, so that it does not assign.
    r2 = await c.join_group(join_req(instance="i1"), 9, client_id="s")
    assert r2["error_code"] == 0 and r2["generation_id"] == 1 and r2["member_id"] != old
    assert r2["leader"] == old and r2["members"] == [] and c.group_state("g") == co.STABLE
    assert (await sync(c, r2["member_id"], 1, group_instance_id="i1"))["assignment"] == b"x"
    assert await hb(c, old, 1) == co.UNKNOWN_MEMBER_ID
    fenced = await c.heartbeat({"group_id": "g", "generation_id": 1, "member_id": old,
                                "group_instance_id": "i1"}, 4)
    assert fenced["error_code"] == co.FENCED_INSTANCE_ID  # its instance id is another member's now
    assert (await c.join_group(join_req(member_id=old, instance="i1"), 9))["error_code"] == co.FENCED_INSTANCE_ID
    assert (await sync(c, old, 1, group_instance_id="i1"))["error_code"] == co.FENCED_INSTANCE_ID
    # A restart preferring another protocol changes what the group would choose: that one rebalances.
    r4 = await c.join_group(join_req(instance="i1", protocols=(("roundrobin", b"m2"), ("range", b"m"))), 9,
                            client_id="s")
    assert r4["error_code"] == 0 and r4["generation_id"] == 2 and r4["leader"] == r4["member_id"]
    r3 = await c.leave_group({"group_id": "g", "members": [{"member_id": "", "group_instance_id": "i1"}]}, 4)
    assert r3["members"][0]["error_code"] == 0 and c.group_state("g") == co.EMPTY
    c.close()


@pytest.mark.asyncio
async def test_static_member_restart_does_not_rebalance_the_other_members(store: Any) -> None:
    """librdkafka's test 0102: a static member that restarts (a new member id, the same group.instance.id)
    within its session timeout takes its place back; the other member's heartbeats never see a rebalance."""
    c = make(store, delay_ms=200)  # both members form generation 1
    a, b = await asyncio.gather(join(c, instance="a", client_id="a"), join(c, instance="b", client_id="b"))
    leader = a if a["members"] else b
    ids = {r["member_id"] for r in (a, b)}
    await asyncio.gather(*(sync(c, m, 1, {i: i.encode() for i in ids} if m == leader["member_id"] else None)
                           for m in ids))
    r = await c.join_group(join_req(instance="b"), 9, client_id="b")
    assert (r["error_code"], r["generation_id"]) == (0, 1)
    assert (await sync(c, r["member_id"], 1))["assignment"] == b["member_id"].encode()
    assert await hb(c, a["member_id"], 1) == 0 and await hb(c, r["member_id"], 1) == 0
    assert c.group_generation("g") == 1 and c.group_state("g") == co.STABLE
    c.close()


# ---------------------------------------------------------------------------------------------- saved groups

def _pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(1)


@pytest.mark.asyncio
async def test_group_membership_survives_a_restart_of_the_coordinator(store: Any) -> None:
    """A clean stop saves every group; the next coordinator loads them: members go on heartbeating,
    syncing and committing with their member ids and generation, without a rebalance."""
    pool = _pool()
    c = make(store, delay_ms=200, executor=pool)
    a, b = await asyncio.gather(join(c, client_id="a", instance="static-a"), join(c, client_id="b"))
    leader = a if a["members"] else b
    ids = [r["member_id"] for r in (a, b)]
    await asyncio.gather(*(sync(c, m, 1, {i: b"part-" + i.encode() for i in ids} if m == leader["member_id"]
                                else None) for m in ids))
    await asyncio.gather(join(c, group="empty-now", client_id="e"))
    await c.leave_group({"group_id": "empty-now", "members": [
        {"member_id": m, "group_instance_id": None} for m in
        [x["member_id"] for x in (await c.describe_groups({"groups": ["empty-now"]}, 5))["groups"][0]["members"]]]}, 3)
    c.close()
    pool.shutdown(wait=True)  # the server drains its storage pool on stop: the final write is done
    c2 = make(store, executor=_pool())
    await c2.load()
    assert c2.group_state("g") == co.STABLE and c2.group_generation("g") == 1
    assert c2.group_state("empty-now") == co.EMPTY and c2.group_generation("empty-now") == 2
    for m in ids:
        assert await hb(c2, m, 1) == 0
        assert (await sync(c2, m, 1))["assignment"] == b"part-" + m.encode()
    assert await commit(c2, {("t", 0): 7}, ids[0], 1) == {("t", 0): 0}
    # The static member restarting after the server did keeps its place too.
    r = await c2.join_group(join_req(instance="static-a"), 9, client_id="a")
    assert (r["error_code"], r["generation_id"]) == (0, 1)
    desc = (await c2.describe_groups({"groups": ["g"]}, 5))["groups"][0]
    assert desc["group_state"] == co.STABLE and len(desc["members"]) == 2
    c2.close()


@pytest.mark.asyncio
async def test_a_crash_keeps_the_last_stable_generation(store: Any) -> None:
    """Each new stable generation is saved when it forms (no clean stop needed): a coordinator started on the
    file after a crash (here: the first one never closed) has the group as of its last SyncGroup."""
    c = make(store)
    a = await join(c, client_id="a")
    await sync(c, a["member_id"], 1, {a["member_id"]: b"all"})
    assert c.write_state()  # what the queued write does in the storage pool
    joiner = asyncio.ensure_future(join(c, client_id="b"))  # a rebalance under way at the crash
    await asyncio.sleep(0.05)
    c2 = make(store)
    await c2.load()
    assert c2.group_generation("g") == 1 and await hb(c2, a["member_id"], 1) == 0
    assert (await sync(c2, a["member_id"], 1))["assignment"] == b"all"
    c.close()
    joiner.cancel()
    c2.close()


@pytest.mark.asyncio
async def test_a_damaged_saved_groups_file_starts_every_group_empty(store: Any, caplog: Any) -> None:
    from pylog.storage.group_state import groups_path
    c = make(store)
    a = await join(c, client_id="a")
    await sync(c, a["member_id"], 1, {a["member_id"]: b"all"})
    assert c.write_state()
    c.close()
    path = groups_path(store.path)
    raw = bytearray(open(path, "rb").read())
    raw[10] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    c2 = make(store)
    await c2.load()
    assert c2.group_state("g") is None and "cannot be read" in caplog.text
    assert await hb(c2, a["member_id"], 1) == co.UNKNOWN_MEMBER_ID
    c2.close()


# ---------------------------------------------------------------------------------------------- offsets

@pytest.mark.asyncio
async def test_offset_commit_per_partition_errors_and_simple_commits(store: Any) -> None:
    c = make(store, max_metadata_bytes=10)
    got = await commit(c, {("t", 0): 1, ("t", 3): 1, ("nope", 0): 1, ("u", 0): (2, "x" * 11), ("u", -1): 1},
                       group="simple")
    assert got == {("t", 0): 0, ("t", 3): E.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
                   ("u", 0): E.OFFSET_METADATA_TOO_LARGE, ("u", -1): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert store.committed_offsets("simple") == {TopicPartition("t", 0): OffsetAndMetadata(1, "")}
    # v0 has no generation: a simple commit.
    r = await c.offset_commit({"group_id": "simple", "topics": [{"name": "u", "partitions": [
        {"partition_index": 0, "committed_offset": 9, "committed_metadata": "v0"}]}]}, 0)
    assert r["topics"][0]["partitions"][0]["error_code"] == 0
    assert store.committed_offsets("simple")[TopicPartition("u", 0)] == OffsetAndMetadata(9, "v0")
    # A generation for a group the coordinator does not know: a stale member.
    assert await commit(c, {("t", 0): 5}, "m", 3, group="simple") == {("t", 0): co.ILLEGAL_GENERATION}
    assert await commit(c, {("t", 0): 5}, group="") == {("t", 0): co.INVALID_GROUP_ID}
    assert store.committed_offsets("simple")[TopicPartition("t", 0)].offset == 1
    # OffsetFetch v1 for an invalid group: the error is on each partition.
    f = await c.offset_fetch({"group_id": "", "topics": [{"name": "t", "partition_indexes": [0]}]}, 1)
    assert f["topics"][0]["partitions"][0]["error_code"] == co.INVALID_GROUP_ID
    f = await c.offset_fetch({"group_id": "", "topics": None}, 7)
    assert f["error_code"] == co.INVALID_GROUP_ID
    c.close()


@pytest.mark.asyncio
async def test_commits_of_one_group_land_in_order(store: Any) -> None:
    c = make(store)
    codes = await asyncio.gather(*(commit(c, {("t", 1): i}, group="order") for i in range(20)))
    assert all(x == {("t", 1): 0} for x in codes)
    assert store.committed_offsets("order")[TopicPartition("t", 1)].offset == 19
    c.close()


# ---------------------------------------------------------------------------------------------- admin

def _decode_assignment(b: bytes) -> dict[str, list[int]]:
    version, n = struct.unpack_from(">hi", b)
    pos, out = 6, {}
    for _ in range(n):
        (ln,) = struct.unpack_from(">h", b, pos)
        topic = b[pos + 2:pos + 2 + ln].decode()
        pos += 2 + ln
        (k,) = struct.unpack_from(">i", b, pos)
        out[topic] = list(struct.unpack_from(f">{k}i", b, pos + 4))
        pos += 4 + 4 * k
    assert struct.unpack_from(">i", b, pos) == (-1,) and pos + 4 == len(b) and version == 0
    return out


@pytest.mark.asyncio
async def test_list_describe_delete(store: Any) -> None:
    c = make(store)
    r = await join(c, group="live")
    await commit(c, {("t", 0): 3}, group="done")
    store.commit_offsets("pylog-only", {TopicPartition("u", 0): 1})
    assert await listed(c) == {"live": ("consumer", "CompletingRebalance"), "done": ("consumer", "Empty"),
                               "pylog-only": ("consumer", "Empty")}
    assert set(await listed(c, states=["empty"])) == {"done", "pylog-only"}
    assert set(await listed(c, version=0)) == {"live", "done", "pylog-only"}
    r5 = await c.list_groups({"states_filter": [], "types_filter": ["consumer"]}, 5)
    assert r5["groups"] == []  # these are classic groups
    d = {x["group_id"]: x for x in await describe(c, "live", "done", "unknown", "")}
    assert d["live"]["group_state"] == "CompletingRebalance" and d["live"]["protocol_data"] == ""
    assert d["live"]["members"][0]["member_metadata"] == b""  # metadata only once Stable, as in Kafka
    assert d["done"]["group_state"] == "Empty" and d["done"]["members"] == []
    assert d["unknown"]["group_state"] == "Dead" and d["unknown"]["error_code"] == 0
    assert d[""]["error_code"] == co.INVALID_GROUP_ID
    res = await c.delete_groups({"groups_names": ["live", "done", "pylog-only", "unknown", ""]}, 2)
    assert {x["group_id"]: x["error_code"] for x in res["results"]} == {
        "live": E.NON_EMPTY_GROUP, "done": 0, "pylog-only": 0, "unknown": E.GROUP_ID_NOT_FOUND,
        "": co.INVALID_GROUP_ID}
    assert store.committed_offsets("done") == {} and store.committed_offsets("pylog-only") == {}
    assert set(await listed(c)) == {"live"}
    await c.leave_group({"group_id": "live", "members": [{"member_id": r["member_id"], "group_instance_id": None}]}, 4)
    res = await c.delete_groups({"groups_names": ["live"]}, 1)
    assert res["results"] == [{"group_id": "live", "error_code": 0}]
    assert c.group_state("live") is None
    c.close()


@pytest.mark.asyncio
async def test_groups_of_pylog_consumers_are_not_shared(store: Any) -> None:
    c = make(store)
    consumer = store.consumer(group_id="pg", auto_offset_reset="earliest", client_id="pyc")
    consumer.subscribe(["t"])
    consumer.poll(timeout_ms=100)
    try:
        assert store.describe_consumer_group("pg").members
        assert (await join(c, group="pg"))["error_code"] == co.INCONSISTENT_GROUP_PROTOCOL
        assert c.group_state("pg") is None
        assert await commit(c, {("t", 0): 1}, group="pg") == {("t", 0): co.UNKNOWN_MEMBER_ID}
        assert (await listed(c))["pg"] == ("consumer", "Stable")
        (d,) = await describe(c, "pg")
        assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer" and d["protocol_data"] == "range"
        (m,) = d["members"]
        assert m["client_id"] == "pyc"
        assert _decode_assignment(m["member_assignment"]) == {"t": [0, 1, 2]}
        assert m["member_metadata"] == struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)
        res = await c.delete_groups({"groups_names": ["pg"]}, 2)
        assert res["results"][0]["error_code"] == E.NON_EMPTY_GROUP
    finally:
        consumer.close()
    res = await c.delete_groups({"groups_names": ["pg"]}, 2)
    assert res["results"][0]["error_code"] == 0
    assert (await join(c, group="pg"))["error_code"] == 0
    c.close()


# ---------------------------------------------------------------------------------------------- stateful

class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test says so: timers fire in order, at once."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def time(self) -> float:
        return self.now


class _InlineExecutor(concurrent.futures.Executor):
    """Runs the store's calls at once on the loop's thread, so a step's outcome does not race threads."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        f: concurrent.futures.Future = concurrent.futures.Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            f.set_exception(e)
        return f


class _Client:
    def __init__(self, name: str, session: int) -> None:
        self.name = name
        self.session = session
        self.member_id = ""
        self.generation = -1
        self.members: list[str] = []
        self.join_task: asyncio.Task | None = None
        self.inbox: dict | None = None
        self.sync_task: asyncio.Task | None = None


class CoordinatorMachine(RuleBasedStateMachine):
    """Random joins, syncs, heartbeats, commits, leaves, crashes and the passing of time, against invariants:
    generations only grow; in CompletingRebalance and Stable every member joined the current generation and
    its leader saw exactly the members; every successful SyncGroup returns what that generation's leader
    assigned (one leader assignment per generation); commits succeed only from the current generation's
    members, and the store holds the last accepted one."""

    REBALANCE = 400

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="pylog-coord-")
        self.store = pylog.open(self.dir)
        self.store.create_topic("t", 1)
        self.loop = _VirtualTimeLoop()
        self.c = GroupCoordinator(self.store, initial_rebalance_delay_ms=100, min_session_timeout_ms=1,
                                  executor=_InlineExecutor())
        self.clients: list[_Client] = []
        self.next_name = 0
        self.max_generation = 0
        self.joins: dict[tuple[int, str], dict] = {}  # (generation, member) -> its successful JoinGroup response
        self.leader_syncs: dict[int, tuple[str, int]] = {}  # sync number -> (leader, generation)
        self.sync_seen: dict[int, int] = {}  # generation -> the leader sync number its members received
        self.sync_count = 0
        self.commit_value = 0
        self.last_accepted: int | None = None
        self.failures: list[BaseException] = []  # raised in done callbacks, which the loop would only log

    def teardown(self) -> None:
        self.c.close()
        self.settle()
        self.loop.close()
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -------------------------------------------------------------- plumbing

    def settle(self) -> None:
        for _ in range(30):
            self.loop.run_until_complete(asyncio.sleep(0))

    def run(self, coro: Any) -> Any:
        task = self.loop.create_task(coro)
        self.settle()
        assert task.done(), "a request that needs no other member's action should not wait"
        return task.result()

    def group(self) -> Any:
        return self.c.table.get("g")

    def pick(self, i: int) -> _Client | None:
        return self.clients[i % len(self.clients)] if self.clients else None

    def forget(self, cl: _Client) -> None:
        cl.member_id, cl.generation, cl.members = "", -1, []

    def checked(self, check: Any, *args: Any) -> None:
        try:
            check(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the no_failures invariant
            self.failures.append(e)

    def on_join(self, cl: _Client, task: asyncio.Task) -> None:
        cl.join_task = None
        r = task.result()
        if self.c.closed:
            return
        if r["error_code"] == 0:
            g = self.group()
            assert r["generation_id"] == g.generation_id
            self.joins[(r["generation_id"], r["member_id"])] = r
            cl.inbox = r  # the client acts on it when it is delivered: until then it uses its old generation
        elif r["error_code"] == co.UNKNOWN_MEMBER_ID:
            self.forget(cl)
        else:
            assert r["error_code"] == co.REBALANCE_IN_PROGRESS, r

    def on_sync(self, cl: _Client, gen: int, task: asyncio.Task) -> None:
        cl.sync_task = None
        r = task.result()
        if self.c.closed:
            return
        if r["error_code"] == 0:
            g_s, mid, k = r["assignment"].decode().split(":")
            assert (int(g_s), mid) == (gen, cl.member_id)
            assert self.leader_syncs[int(k)] == (self.joins[(gen, cl.member_id)]["leader"], gen)
            assert self.sync_seen.setdefault(gen, int(k)) == int(k), "two leader assignments in one generation"
        elif r["error_code"] == co.UNKNOWN_MEMBER_ID:
            self.forget(cl)
        else:
            assert r["error_code"] in (co.REBALANCE_IN_PROGRESS, co.ILLEGAL_GENERATION), r

    # -------------------------------------------------------------- rules

    @precondition(lambda self: len(self.clients) < 5)
    @rule(session=st.sampled_from([200, 600]))
    def add_client(self, session: int) -> None:
        """A session shorter or longer than the rebalance timeout (400 ms): a member that does not rejoin goes
        by one or the other."""
        self.clients.append(_Client(f"c{self.next_name}", session))
        self.next_name += 1

    @rule(i=st.integers(0, 4))
    def join(self, i: int) -> None:
        cl = self.pick(i)
        if cl is not None:
            self.start_join(cl)
            self.settle()

    def start_join(self, cl: _Client) -> None:
        if cl.join_task is not None:
            return
        cl.join_task = self.loop.create_task(join(self.c, client_id=cl.name, member_id=cl.member_id,
                                                  session=cl.session, rebalance=self.REBALANCE))
        cl.join_task.add_done_callback(lambda t, cl=cl: self.checked(self.on_join, cl, t))

    def deliver_to(self, cl: _Client) -> None:
        r, cl.inbox = cl.inbox, None
        if r is not None:
            cl.member_id, cl.generation = r["member_id"], r["generation_id"]
            cl.members = [m["member_id"] for m in r["members"]]

    @rule(i=st.integers(0, 4))
    def deliver(self, i: int) -> None:
        """A JoinGroup response reaches its client."""
        cl = self.pick(i)
        if cl is not None:
            self.deliver_to(cl)

    @rule(i=st.integers(0, 4))
    def sync(self, i: int) -> None:
        cl = self.pick(i)
        if cl is not None:
            self.start_sync(cl)
            self.settle()

    def start_sync(self, cl: _Client) -> None:
        if cl.sync_task is not None or cl.generation < 1:
            return
        assignments = None
        if cl.members:  # the leader of its generation
            self.sync_count += 1
            k = self.sync_count
            self.leader_syncs[k] = (cl.member_id, cl.generation)
            assignments = {m: f"{cl.generation}:{m}:{k}".encode() for m in cl.members}
        cl.sync_task = self.loop.create_task(sync(self.c, cl.member_id, cl.generation, assignments))
        cl.sync_task.add_done_callback(lambda t, cl=cl, gen=cl.generation: self.checked(self.on_sync, cl, gen, t))

    @rule(i=st.integers(0, 4))
    def heartbeat(self, i: int) -> None:
        cl = self.pick(i)
        if cl is None or not cl.member_id or cl.join_task is not None:
            return
        code = self.run(hb(self.c, cl.member_id, cl.generation))
        assert code in (0, co.REBALANCE_IN_PROGRESS, co.ILLEGAL_GENERATION, co.UNKNOWN_MEMBER_ID)
        if code == co.UNKNOWN_MEMBER_ID:
            self.forget(cl)

    @rule(i=st.integers(0, 4))
    def commit(self, i: int) -> None:
        """Also while rejoining, with the old generation (as clients commit when their partitions are revoked)."""
        cl = self.pick(i)
        if cl is None or not cl.member_id:
            return
        g = self.group()
        member_now = g is not None and g.generation_id == cl.generation and cl.member_id in g.members
        state = g.state if g is not None else None
        self.commit_value += 1
        code = self.run(commit(self.c, {("t", 0): self.commit_value}, cl.member_id, cl.generation))[("t", 0)]
        if code == 0:
            assert member_now and state in (co.STABLE, co.PREPARING_REBALANCE)
            self.last_accepted = self.commit_value
        else:
            assert not member_now or state == co.COMPLETING_REBALANCE, code
        committed = self.store.committed_offsets("g").get(TopicPartition("t", 0))
        assert (committed.offset if committed else None) == self.last_accepted

    @rule(i=st.integers(0, 4))
    def leave(self, i: int) -> None:
        cl = self.pick(i)
        if cl is None or not cl.member_id:
            return
        self.run(self.c.leave_group({"group_id": "g", "members": [{"member_id": cl.member_id,
                                                                   "group_instance_id": None}]}, 4))
        self.settle()
        self.forget(cl)

    @rule(i=st.integers(0, 4))
    def crash(self, i: int) -> None:
        """The client goes silent: its member stays until its session times out."""
        cl = self.pick(i)
        if cl is not None:
            self.clients.remove(cl)

    @rule(leader_first=st.booleans(), late=st.integers(0, 31))
    def cooperate(self, leader_first: bool, late: int) -> None:
        """What well-behaved clients do: everyone (re)joins, the join phase ends, everyone syncs; except that
        the JoinGroup responses of the clients whose bit is set in ``late`` arrive later."""
        g = self.group()
        for cl in self.clients:
            if not cl.member_id or g is None or g.state == co.PREPARING_REBALANCE or cl.generation != g.generation_id:
                self.start_join(cl)
        self.settle()
        self.advance(250)  # the initial delay, extended once by the members joining during it
        for n, cl in enumerate(self.clients):
            if not late >> n & 1:
                self.deliver_to(cl)
        for cl in sorted(self.clients, key=lambda cl: bool(cl.members) != leader_first):
            self.start_sync(cl)
        self.settle()

    @rule(ms=st.sampled_from([20, 100, 250, 400, 600]))
    def advance(self, ms: int) -> None:
        target = self.loop.now + ms / 1000
        while True:
            self.settle()
            due = [h.when() for h in self.loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
            if not due or min(due) > target:
                break
            self.loop.now = max(self.loop.now, min(due))
        self.loop.now = target
        self.settle()

    # -------------------------------------------------------------- invariants

    @invariant()
    def no_failures(self) -> None:
        if self.failures:
            raise self.failures[0]

    @invariant()
    def generations_grow(self) -> None:
        g = self.group()
        gen = g.generation_id if g is not None else 0
        assert gen >= self.max_generation
        self.max_generation = gen

    @invariant()
    def members_joined_the_current_generation(self) -> None:
        g = self.group()
        if g is None or g.state not in (co.COMPLETING_REBALANCE, co.STABLE):
            return
        assert g.leader_id in g.members
        for mid in g.members:
            assert (g.generation_id, mid) in self.joins
        lead = self.joins[(g.generation_id, g.leader_id)]
        assert {m["member_id"] for m in lead["members"]} == set(g.members)
        if g.state == co.STABLE:
            ks = {m.assignment.decode().split(":")[2] for m in g.members.values()}
            assert len(ks) == 1 and all(m.assignment.decode().startswith(f"{g.generation_id}:{m.member_id}:")
                                        for m in g.members.values())


CoordinatorMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
test_coordinator_state_machine = CoordinatorMachine.TestCase
