"""Consumer groups in one process: membership, rebalancing, ownership, committed offsets, lag, admin calls.

Several consumers of one group in one process are as separate as processes would be: each holds its own
file locks. A member that dies runs in a child process and is SIGKILLed; the multi-process scenarios
(members in several processes, delivery across a kill) are in test_groups_process.py.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

import pylog
from pylog.clients.consumer import group_member
from pylog import CommitFailedError, OffsetAndMetadata, TopicPartition
from pylog.store import group_offsets
from pylog.storage.filenames import GROUPS_DIR, OFFSETS_TOPIC

from childproc import Child
from storetools import wait_for


@pytest.fixture
def store(tmp_path):
    with pylog.open(tmp_path / "store", log_cleaner_enable=False) as s:
        yield s


def _fill(store, topic="t", partitions=4, n=400):
    if topic not in store:
        store.create_topic(topic, partitions=partitions)
    with store.producer() as p:
        for i in range(n):
            p.send(topic, b"%d" % i, partition=i % partitions)


def _member(store, topics=("t",), **kw):
    kw.setdefault("group_id", "g")
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("heartbeat_interval_ms", 100)
    kw.setdefault("session_timeout_ms", 1000)
    return store.consumer(*topics, **kw)


def _owned(c):
    return sorted(tp.partition for tp in c.assignment() if tp not in c.pending())


# A member in a child process, to be SIGKILLed: it polls in a loop and says which partitions it owns (its
# member id too) each time that changes. It stops by itself when its stdin closes (the test is gone) or
# after two minutes.
_MEMBER_PROCESS = """
    import os, sys, threading, time, pylog
    from pylog.clients.consumer import group_member
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    deadline = time.monotonic() + 120
    store = pylog.open(sys.argv[1], log_cleaner_enable=False)
    c = store.consumer("t", group_id="g", auto_offset_reset="earliest", heartbeat_interval_ms=int(sys.argv[2]),
                       session_timeout_ms=2 * int(sys.argv[2]))
    last = None
    while time.monotonic() < deadline:
        c.poll(timeout_ms=20)
        owned = sorted(tp.partition for tp in c.assignment() if tp not in c.pending())
        if owned != last:
            last = owned
            print("owns", group_member(c).member_id, *owned, flush=True)
"""


def _member_process(store, tmp_path, survivor, heartbeat_interval_ms):
    """A member in a child process that owns one partition of two and ``survivor`` the other; its member id.
    The child is started owning both (the survivor not yet polling), then hands one over."""
    child = Child(_MEMBER_PROCESS, store.path, str(heartbeat_interval_ms), cwd=str(tmp_path))
    try:
        while len(child.expect("owns").split()) != 3:  # member id, then its partitions: both
            pass
        assert wait_for(lambda: survivor.poll(timeout_ms=20) is not None and len(_owned(survivor)) == 1, 60)
        while True:
            said = child.expect("owns").split()
            if len(said) == 2:
                return child, said[0]
    except BaseException:
        child.kill()
        raise


def _drain(c, rounds=5):
    out = []
    for _ in range(rounds):
        for recs in c.poll(timeout_ms=20, max_records=10_000).values():
            out.extend((r.partition, r.offset) for r in recs)
    return out


class Recorder(pylog.ConsumerRebalanceListener):
    def __init__(self, consumer_ref=None):
        self.events: list[tuple[str, set]] = []
        self.consumer = consumer_ref

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", set(revoked)))
        if self.consumer is not None and revoked:
            # Revoked partitions are still owned here: committing them works.
            self.consumer.commit({tp: OffsetAndMetadata(self.consumer.position(tp), "from listener")
                                  for tp in revoked if group_member(self.consumer).owns(tp)})

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", set(assigned)))


def test_two_members_split_the_partitions_and_hand_them_over_without_loss(store):
    _fill(store)
    a = _member(store, client_id="a")
    got = _drain(a)
    assert _owned(a) == [0, 1, 2, 3] and len(got) == 400
    _fill(store)  # 400 more that a has not read yet
    b = _member(store, client_id="b")
    b.poll(0)  # joins: a new generation; a still holds b's partitions until a polls
    assert b.assignment() and _owned(b) == []
    got += _drain(a)  # a notices, commits and lets go of what moved
    got += _drain(b)
    assert len(_owned(a)) == 2 and len(_owned(b)) == 2 and set(_owned(a)).isdisjoint(_owned(b))
    got += _drain(a)
    assert sorted(got) == sorted({(p, o) for p in range(4) for o in range(200)})  # each exactly once
    desc = store.describe_consumer_group("g")
    assert desc.generation == 2 and desc.protocol == "range" and len(desc.members) == 2
    a.close()
    _drain(b)
    assert _owned(b) == [0, 1, 2, 3]
    assert store.describe_consumer_group("g").generation == 3
    b.close()
    assert store.describe_consumer_group("g").members == []


def test_commit_failed_for_partitions_not_owned_and_without_group(store):
    _fill(store, partitions=2, n=10)
    a = _member(store, enable_auto_commit=False)
    a.poll(0)
    b = _member(store, enable_auto_commit=False)
    b.poll(0)
    a.poll(0)  # gives b its partition
    b.poll(0)
    mine, theirs = (TopicPartition("t", p) for p in (_owned(a)[0], _owned(b)[0]))
    a.commit({mine: 3})
    assert a.committed(mine) == 3 and b.committed(mine) == 3
    with pytest.raises(CommitFailedError):
        a.commit({theirs: 1})
    with pytest.raises(ValueError):
        a.commit({mine: -1})
    plain = store.consumer("t")
    with pytest.raises(pylog.InvalidConfigError):
        plain.commit()
    with pytest.raises(pylog.InvalidConfigError):
        plain.committed(mine)
    a.close()
    b.close()
    with pytest.raises(CommitFailedError):  # a group consumer that never joined nor assigned
        store.consumer(group_id="g").commit({mine: 1})


def test_listener_sees_eager_revoke_and_assign_and_can_commit_in_revoke(store):
    _fill(store, partitions=2, n=20)
    a = _member(store, enable_auto_commit=False)
    rec = Recorder(a)
    a.subscribe(["t"], listener=rec)
    _drain(a, 1)
    assert rec.events == [("revoked", set()), ("assigned", {TopicPartition("t", 0), TopicPartition("t", 1)})]
    b = _member(store, enable_auto_commit=False)
    b.poll(0)
    a.poll(0)
    assert rec.events[2][0] == "revoked" and rec.events[2][1] == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert rec.events[3][0] == "assigned" and len(rec.events[3][1]) == 1  # ids decide which one stays
    (moved,) = {TopicPartition("t", 0), TopicPartition("t", 1)} - rec.events[3][1]
    assert b.committed(moved, metadata=True) == OffsetAndMetadata(10, "from listener")
    b.poll(0)
    assert b.position(moved) == 10  # b starts where a's listener committed
    with pytest.raises(TypeError):
        a.subscribe(["t"], listener=object())
    a.close()
    b.close()


def test_committed_offsets_survive_reopening_the_store(tmp_path):
    path = tmp_path / "s"
    with pylog.open(path) as s:
        _fill(s, partitions=2, n=100)
        c = _member(s)
        assert len(_drain(c)) == 100
        c.close()  # auto-commit on close
    with pylog.open(path) as s:
        assert s.committed_offsets("g") == {TopicPartition("t", 0): OffsetAndMetadata(50, ""),
                                            TopicPartition("t", 1): OffsetAndMetadata(50, "")}
        _fill(s, partitions=2, n=10)
        c = _member(s)
        got = _drain(c)
        assert sorted(o for _, o in got) == [50] * 2 + [51] * 2 + [52] * 2 + [53] * 2 + [54] * 2
        c.close()
        lag = s.group_lag("g")
        assert lag[TopicPartition("t", 0)] == pylog.PartitionLag(55, 0, 55, 0, 55)


def test_auto_commit_interval_and_lag(store):
    _fill(store, partitions=1, n=100)
    c = _member(store, auto_commit_interval_ms=1, max_poll_records=30)
    c.poll(0)
    time.sleep(0.005)  # not synchronisation: lets the 1 ms interval pass, which is what is tested
    c.poll(0)  # commits the first poll's position before reading more
    assert store.group_lag("g")[TopicPartition("t", 0)].committed == 30
    m = c.metrics()["t-0"]
    assert m["position"] == 60 and m["committed"] == 30 and m["lag"] == 40 and m["lead"] == 60 and m["owned"]
    c.close()
    assert store.group_lag("g")[TopicPartition("t", 0)] == pylog.PartitionLag(60, 0, 100, 40, 60)


def test_assign_with_group_id_commits_without_membership(store):
    _fill(store, partitions=2, n=20)
    tp = TopicPartition("t", 1)
    c = store.consumer(group_id="solo", enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([tp])
    assert len(c.poll(0)[tp]) == 10
    c.commit()
    c.close()
    c = store.consumer(group_id="solo", auto_offset_reset="earliest")
    c.assign([tp])
    assert c.position(tp) == 10
    assert not os.path.exists(os.path.join(store.path, GROUPS_DIR, "solo"))
    assert store.consumer_groups() == ["solo"]


def test_two_groups_are_independent(store):
    _fill(store, partitions=3, n=30)
    a, b = _member(store, group_id="ga"), _member(store, group_id="gb")
    assert len(_drain(a)) == 30 and len(_drain(b)) == 30
    a.close()
    b.close()
    assert sorted(store.consumer_groups()) == ["ga", "gb"]


def test_pattern_subscription_in_a_group_picks_up_new_topics(store):
    _fill(store, "ev-1", partitions=1, n=5)
    c = store.consumer(group_id="g", auto_offset_reset="earliest", metadata_max_age_ms=0)
    c.subscribe(pattern=r"ev-.*")
    assert len(_drain(c, 1)) == 5
    gen = store.describe_consumer_group("g").generation
    _fill(store, "ev-2", partitions=2, n=6)
    assert len(_drain(c, 2)) == 6
    assert {tp.topic for tp in c.assignment()} == {"ev-1", "ev-2"}
    assert store.describe_consumer_group("g").generation > gen
    assert OFFSETS_TOPIC not in {tp.topic for tp in c.assignment()}
    c.close()


def test_strategies_must_have_one_in_common(store):
    _fill(store, partitions=4, n=4)
    a = _member(store, partition_assignment_strategy=["sticky"])
    a.poll(0)
    with pytest.raises(pylog.InvalidConfigError, match="in common"):
        _member(store, partition_assignment_strategy=["roundrobin"]).poll(0)
    b = _member(store, partition_assignment_strategy=[pylog.RoundRobinPartitionAssignor, "sticky"])
    b.poll(0)
    assert store.describe_consumer_group("g").protocol == "sticky"
    assert len(store.describe_consumer_group("g").members) == 2
    a.close()
    b.close()


def test_a_member_waiting_in_poll_lets_go_for_a_joiner(store):
    _fill(store, partitions=2, n=0)
    a = _member(store)
    a.poll(0)
    done = threading.Event()

    def wait_long():
        a.poll(timeout_ms=3_600_000)  # no data: waits (an hour at most), but looks at the group every few ms
        done.set()

    t = threading.Thread(target=wait_long, daemon=True)
    t.start()
    try:
        b = _member(store)

        def joined() -> bool:
            b.poll(timeout_ms=10)
            return bool(_owned(b))
        assert wait_for(joined, 60), "the joiner never got a partition"
        # a let go of a partition while still in its (hour-long) poll, not by returning from it
        assert len(_owned(b)) == 1 and not done.is_set()
    finally:
        # Wake a's poll with a record on each partition (whichever it owns now).
        for p in store.topic("t").partitions:
            p.append_values([b"wake"])
        t.join(60)
    assert done.is_set(), "a's poll did not return after records came"
    a.close()
    b.close()


def test_dead_member_is_found_by_its_released_lock(store, tmp_path):
    _fill(store, partitions=2, n=10)
    a = _member(store)
    b, _ = _member_process(store, tmp_path, a, heartbeat_interval_ms=100)
    assert len(_owned(a)) == 1
    b.kill()  # SIGKILL (also the test's clean-up): its locks go with it, without leave() or a commit
    def took_over() -> bool:
        a.poll(timeout_ms=20)
        return _owned(a) == [0, 1]
    assert wait_for(took_over, 60), f"the survivor owns {_owned(a)}"
    assert _owned(a) == [0, 1]
    assert [m.member_id for m in store.describe_consumer_group("g").members] == [group_member(a).member_id]
    a.close()


def test_a_concurrent_describers_probe_does_not_make_a_dead_member_look_alive(store, tmp_path):
    """describe_group probes each member's lock. Two describers at once (monitoring, `pylog groups
    describe`) must not take each other's momentary probe for a live member: the probe is a shared lock."""
    _fill(store, partitions=2, n=10)
    a = _member(store, heartbeat_interval_ms=600_000, session_timeout_ms=1_200_000)
    b, b_id = _member_process(store, tmp_path, a, heartbeat_interval_ms=600_000)
    path = os.path.join(group_member(a).directory, "members", b_id)
    b.kill()  # as in the test above; nobody has noticed yet (heartbeats 10 minutes apart)
    with pylog.open(store.path, read_only=True) as reader:
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # another describer's probe, held right now
            for s in (store, reader):
                assert [m.member_id for m in s.describe_consumer_group("g").members] == [group_member(a).member_id]
        finally:
            os.close(fd)
    a.close()


def test_corrupt_group_state_is_rebuilt(store, caplog):
    _fill(store, partitions=2, n=10)
    a = _member(store)
    a.poll(0)
    state = os.path.join(group_member(a).directory, "state")
    with open(state, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xff")
    _drain(a)
    assert _owned(a) == [0, 1]
    assert store.describe_consumer_group("g").generation >= 1
    a.close()


def _msgpack_map_keyed_by_a_map(**fields):
    """msgpack bytes of a map holding ``fields`` plus one entry whose key is itself a map (``{"a": 1}``):
    valid msgpack that Python cannot build as a dict (the key is unhashable)."""
    import msgpack
    body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in fields.items())
    return bytes([0x80 | (len(fields) + 1)]) + body + b"\x81\xa1a\x01" + msgpack.packb(1)


@pytest.mark.parametrize("content", ["map_key_is_a_map", "wrong_types"])
def test_group_state_with_hostile_content_and_valid_crc_is_rebuilt(store, content):
    """A state file whose CRC checks but whose msgpack map has a map as a key used to raise
    ``TypeError: unhashable type`` out of describe_consumer_group, consumer_groups and a member's poll;
    one with fields of the wrong types (a str generation, a member that is not a map) raised
    AttributeError/TypeError further on."""
    from pylog.storage.fileio import checked, write_checked
    from pylog.clients.groups import MEMBER_MAGIC, STATE_MAGIC
    _fill(store, partitions=2, n=10)
    a = _member(store)
    a.poll(0)
    directory = group_member(a).directory
    if content == "map_key_is_a_map":
        doc = _msgpack_map_keyed_by_a_map(generation=5, group_id="g")
    else:
        import msgpack
        doc = msgpack.packb({"generation": 5, "group_id": "g", "members": {"x": 3}, "assignment": [1]})
    write_checked(os.path.join(directory, "state"), STATE_MAGIC + b"\x01" + doc, durable=False)
    with pytest.raises(pylog.CorruptRecordError):
        store.describe_consumer_group("g")
    assert "g" in store.consumer_groups()
    _drain(a)  # the member notices the bad state, rebuilds it and keeps its partitions
    assert _owned(a) == [0, 1]
    assert store.describe_consumer_group("g").generation >= 1
    # A live member (its file locked) whose file has the same content: read at the next rebalance, and
    # treated as subscribing to nothing.
    ghost = os.open(os.path.join(directory, "members", "ghost-1"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(ghost, fcntl.LOCK_EX)
        os.write(ghost, checked(MEMBER_MAGIC + b"\x01" + doc))
        b = _member(store)  # the joiner's rebalance reads every live member's file
        for _ in range(100):  # hand-over takes a few polls of each member
            _drain(b, 1)
            _drain(a, 1)
            if sorted(_owned(a) + _owned(b)) == [0, 1]:
                break
        assert sorted(_owned(a) + _owned(b)) == [0, 1]
        assert "ghost-1" in [m.member_id for m in store.describe_consumer_group("g").members]
        a.close()
        b.close()
    finally:
        os.close(ghost)


def test_offset_commits_with_wrong_types_are_skipped_not_trusted(store):
    """Records of __consumer_offsets whose key/value decode to the wrong types (a bool partition, an offset
    beyond int64, a map keyed by a map) are skipped like any record that is not a commit; a negative int64
    offset is a commit (Kafka clients commit -1/-2 to reset a group) and is read back as committed."""
    import msgpack
    from pylog.clients.offsets import decode_commit
    good_key = msgpack.packb([1, "g", "t", 0])
    assert decode_commit(good_key, msgpack.packb([1, 5, "", 0, -1, ""])) == (("g", "t", 0), OffsetAndMetadata(5, ""))
    assert decode_commit(msgpack.packb([1, "g", "t", True]), msgpack.packb([1, 5, ""])) is None
    assert decode_commit(good_key, msgpack.packb([1, -5, ""])) == (("g", "t", 0), OffsetAndMetadata(-5, ""))
    assert decode_commit(good_key, msgpack.packb([1, 1 << 63, ""])) is None
    assert decode_commit(good_key, msgpack.packb([1, True, ""])) is None
    assert decode_commit(_msgpack_map_keyed_by_a_map(), None) is None
    store.commit_offsets("g", {TopicPartition("t", 0): 3})
    p = group_offsets(store).partition_for("g")
    p.append_values([msgpack.packb([1, 1 << 63, ""])], [good_key])
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 3


def test_negative_commit_reads_back_and_consumer_applies_auto_offset_reset(store):
    """A -1/-2 commit (how kafkajs resets a group) is stored and returned by committed_offsets, and a pylog
    consumer of the group treats it as no position, like Kafka's Java consumer: auto_offset_reset applies."""
    store.create_topic("t", 1)
    with store.producer() as prod:
        for i in range(5):
            prod.send("t", b"v%d" % i, partition=0)
    store.commit_offsets("g", {TopicPartition("t", 0): 3})
    store.commit_offsets("g", {TopicPartition("t", 0): OffsetAndMetadata(-2, "reset")})
    assert store.committed_offsets("g")[TopicPartition("t", 0)] == OffsetAndMetadata(-2, "reset")
    assert TopicPartition("t", 0) not in store.group_lag("g")
    with _member(store, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        assert sorted(offset for _, offset in _drain(c)) == [0, 1, 2, 3, 4]
        assert c.committed(TopicPartition("t", 0)) is None
    store.commit_offsets("g", {TopicPartition("t", 0): -1})
    with _member(store, auto_offset_reset="latest", enable_auto_commit=False) as c:
        assert _drain(c) == []
        assert c.position(TopicPartition("t", 0)) == 5


def test_admin_reset_and_delete_group(store):
    _fill(store, partitions=2, n=10)
    c = _member(store)
    _drain(c)
    with pytest.raises(pylog.RebalanceInProgressError):
        store.commit_offsets("g", {TopicPartition("t", 0): 0})
    with pytest.raises(pylog.RebalanceInProgressError):
        store.delete_consumer_group("g")
    c.close()
    store.commit_offsets("g", {TopicPartition("t", 0): 2})
    assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 2
    assert store.delete_consumer_group("g") == 2
    assert store.committed_offsets("g") == {} and "g" not in store.consumer_groups()


def test_reserved_names_and_offsets_topic_compaction(tmp_path):
    with pylog.open(tmp_path / "s", log_cleaner_enable=False, offsets_topic_segment_bytes=2048,
                    offsets_topic_num_partitions=2) as store:
        with pytest.raises(pylog.InvalidTopicError):
            store.create_topic(OFFSETS_TOPIC)
        with pytest.raises(pylog.InvalidTopicError):
            store.create_topic(GROUPS_DIR)
        _fill(store, partitions=1, n=1)
        c = store.consumer(group_id="g", enable_auto_commit=False)
        tp = TopicPartition("t", 0)
        c.assign([tp])
        for i in range(300):
            c.commit({tp: i})
        assert store.topic(OFFSETS_TOPIC).num_partitions == 2
        p = group_offsets(store).partition_for("g")
        assert p.log_end_offset == 300 and not p.is_writer and len(p.segments) > 5
        store.compact(OFFSETS_TOPIC, p.number)
        assert not p.is_writer  # handed back after maintenance too
        left = len(p.read_columns(0, max_records=1000))
        assert left < 50, left  # the superseded commits of the cleaned segments are gone
        assert store.committed_offsets("g") == {tp: OffsetAndMetadata(299, "")}
        with pylog.open(store.path) as other:  # a fresh reader folds the compacted log to the same answer
            assert other.committed_offsets("g") == {tp: OffsetAndMetadata(299, "")}
        c.commit({tp: 300})  # and commits go on after the swap
        assert store.committed_offsets("g") == {tp: OffsetAndMetadata(300, "")}
        c.close()


def test_looking_up_offsets_never_creates_the_offsets_topic(store):
    _fill(store, partitions=1, n=3)
    c = _member(store, enable_auto_commit=False)
    _drain(c, 1)
    assert c.committed(TopicPartition("t", 0)) is None and store.committed_offsets("g") == {}
    assert store.group_lag("g") == {} and OFFSETS_TOPIC not in store
    c.commit()
    assert OFFSETS_TOPIC in store and c.committed(TopicPartition("t", 0)) == 3
    c.close()
