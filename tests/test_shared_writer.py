"""Writers taking turns on one partition: producers of several processes share a partition by handing its
writer lock over (PartitionInternals.handover_wanted / wait_to_write / release_writer)."""

from __future__ import annotations

import collections
import os
import signal
import threading
import time

import pytest

import pylog
from pylog.__main__ import ExitCode, main
from pylog.partition import internals

from childproc import Child
from storetools import read_all, wait_for


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    return bool(wait_for(predicate, timeout, step=0.005))


def _all(p):
    return read_all(p, chunk=10_000)


def _values(store, topic="ev"):
    return _all(store.topic(topic).partition(0))


def test_a_waiting_handle_is_seen_and_gets_the_partition_when_the_writer_hands_over(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        pa = a.create_topic("ev").partition(0)
        pa.append_values([b"a0"])
        pb = b.topic("ev").partition(0)
        assert pa.is_writer and not internals(pa).handover_wanted()
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(pb.wait_to_write(10_000)))
        waiter.start()
        assert _wait_for(internals(pa).handover_wanted), "the holder never saw the waiting handle"
        assert not got
        pa.release_writer()
        waiter.join(10)
        assert got == [None] and pb.is_writer and not pa.is_writer
        assert not internals(pb).handover_wanted()  # nobody waits any more
        pb.append_values([b"b0", b"b1"])
        assert [r.value for r in _all(pa)] == [b"a0", b"b0", b"b1"]  # the released handle reads on
        pb.release_writer()
        pa.append_values([b"a1"])  # and takes its turn again
        assert [(r.offset, r.value) for r in _all(pb)] == [(0, b"a0"), (1, b"b0"), (2, b"b1"), (3, b"a1")]


def test_waiting_for_a_writer_that_never_hands_over_times_out(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        a.create_topic("ev").partition(0).append_values([b"x"])
        pb = b.topic("ev").partition(0)
        t0 = time.monotonic()
        with pytest.raises(pylog.PartitionLockedError, match="did not hand it over within 200 ms"):
            pb.wait_to_write(200)
        assert time.monotonic() - t0 >= 0.2
        assert not pb.is_writer
        # a producer bounded by max_block_ms fails its records the same way, and appends nothing
        with b.producer(max_block_ms=200) as prod:
            fut = prod.send("ev", b"y")
            with pytest.raises(pylog.PartitionLockedError):
                fut.get(30)
    with pylog.open(tmp_path, log_cleaner_enable=False) as s:
        assert [r.value for r in _values(s)] == [b"x"]


def test_an_idle_producer_hands_over_to_a_handle_that_waits_for_its_turn(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a:
        a.create_topic("ev")
        with a.producer() as prod:
            prod.send("ev", b"from-producer").get(10)
            assert a.topic("ev").partition(0).is_writer
            with pylog.open(tmp_path, log_cleaner_enable=False) as b:
                pb = b.topic("ev").partition(0)
                pb.wait_to_write(10_000)  # the idle producer's sender thread gives it up
                assert not a.topic("ev").partition(0).is_writer
                assert pb.append_values([b"direct"]) == 1  # a direct append pins the lock to b
                late = prod.send("ev", b"again")  # so this waits its turn until b closes
                assert _wait_for(internals(pb).handover_wanted), "the producer never asked for its turn"
                assert not late.is_done and not internals(pb).hand_over()
            assert late.get(10).offset == 2
    with pylog.open(tmp_path, log_cleaner_enable=False) as s:
        assert [r.value for r in _values(s)] == [b"from-producer", b"direct", b"again"]


def test_a_producer_never_hands_over_a_lock_a_direct_append_of_its_store_pinned(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        pa = a.create_topic("ev").partition(0)
        with a.producer() as prod:
            prod.send("ev", b"p").get(10)
            pa.append_values([b"direct"])  # the same store appends directly too: pinned
            with pytest.raises(pylog.PartitionLockedError):
                b.topic("ev").partition(0).wait_to_write(300)
            assert pa.is_writer
            pa.append_values([b"still mine"])
            assert prod.send("ev", b"p2").get(10).offset == 3
        assert pa.is_writer  # closing the producer leaves a pinned lock with the store


def test_a_closed_producer_hands_its_partitions_over(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        a.create_topic("ev")
        with a.producer() as prod:
            prod.send("ev", b"x").get(10)
        assert not a.topic("ev").partition(0).is_writer  # no sender thread is left to hand it over later
        with b.producer(max_block_ms=5000) as other:
            assert other.send("ev", b"y").get(10).offset == 1


def test_a_handover_does_not_wait_for_maintenance_under_way(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        a.create_topic("ev")
        pa = a.topic("ev").partition(0)
        pa.wait_to_write(1000)
        internals(pa).append_values_in_turn([b"x"], None, None, None, None, None)
        waiter = threading.Thread(target=lambda: b.topic("ev").partition(0).wait_to_write(10_000))
        waiter.start()
        assert _wait_for(internals(pa).handover_wanted)
        with internals(pa).maintenance_pass():  # a retention or compaction pass of this handle
            done: list = []
            t = threading.Thread(target=lambda: done.append(internals(pa).hand_over()))
            t.start()
            t.join(5)
            assert done == [False]  # did not block behind the pass
        assert internals(pa).hand_over()
        waiter.join(10)
        assert b.topic("ev").partition(0).is_writer


def test_a_send_does_not_wait_for_a_maintenance_pass_on_another_partition_its_producer_holds(tmp_path):
    """Before waiting for partition 1 a producer lets go of partition 0, which it holds for a turn; a
    retention or compaction pass of partition 0 under way must not hold the send up (nor count against
    its max_block_ms): partition 0 stays held until the pass ends. No timed assertion: the send completes
    while this thread still holds partition 0's maintenance lock (the 30 s is a hang guard)."""
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        a.create_topic("ev", partitions=2)
        with a.producer(linger_ms=0) as pa, b.producer(linger_ms=0) as pb:
            pa.send("ev", b"a0", partition=0).get(30)
            pb.send("ev", b"b0", partition=1).get(30)  # pb hands partition 1 over when asked
            p0 = a.topic("ev").partition(0)
            assert p0.is_writer and b.topic("ev").partition(1).is_writer
            with internals(p0).maintenance_pass():  # a pass of partition 0 in store a
                meta = pa.send("ev", b"a1", partition=1).get(30)
                assert p0.is_writer  # not let go of while its pass is under way
            assert (meta.partition, meta.offset) == (1, 1)
            # The pass over, partition 0 goes to the next producer that waits for it.
            assert pb.send("ev", b"b1", partition=0).get(30).offset == 1


def test_a_producer_waiting_for_a_partition_lets_go_of_another_as_soon_as_its_pass_ends(tmp_path):
    """A producer waiting for partition 1 could not let go of partition 0 (a pass was under way): its wait
    must let go of it once the pass ends, not hold it until partition 1 comes (the handle holding
    partition 1 here waits for partition 0 before it lets go of partition 1). Its sender thread is busy
    in that wait: only the wait itself can let go."""
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        a.create_topic("ev", partitions=2)
        with a.producer(linger_ms=0) as pa:
            pa.send("ev", b"a0", partition=0).get(30)
            p0 = a.topic("ev").partition(0)
            q0, q1 = b.topic("ev").partition(0), b.topic("ev").partition(1)
            q1.wait_to_write(10_000)  # held by b, which does not hand over on its own
            with internals(p0).maintenance_pass():  # a pass of partition 0 in store a
                future = pa.send("ev", b"a1", partition=1)
                assert _wait_for(internals(q1).handover_wanted)  # pa waits for partition 1...
                assert p0.is_writer  # ...still holding partition 0, whose pass is under way
            q0.wait_to_write(30_000)  # the pass over: pa's wait lets go of partition 0
            assert q0.append_values([b"b0"]) == 1
            q1.release_writer()
            assert future.get(30).offset == 0
            q0.release_writer()


def test_a_failed_release_still_lets_go_and_reads_on(tmp_path, monkeypatch):
    from pylog.storage.producer_state import ProducerState
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        pa = a.create_topic("ev").partition(0)
        pa.append_values([b"a0"], producer=(5, 0, 0))

        def full(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(ProducerState, "write_snapshot", full)
        with pytest.raises(OSError):
            pa.release_writer()
        monkeypatch.undo()
        assert not pa.is_writer
        pb = b.topic("ev").partition(0)
        pb.append_values([b"b0", b"b1"])  # the next writer gets the lock
        assert [r.value for r in _all(pa)] == [b"a0", b"b0", b"b1"]  # and the failed one reads on


def test_waiting_for_a_deleted_partition_names_it(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as a:
        p = a.create_topic("ev").partition(0)
        p.append_values([b"x"])
        p.release_writer()
        with pylog.open(tmp_path, log_cleaner_enable=False) as b:
            b.delete_topic("ev")
        with pytest.raises(pylog.UnknownTopicError, match="was deleted"):
            p.wait_to_write(100)


def test_idempotent_sequences_hold_across_handovers(tmp_path):
    """A producer's retry after other handles wrote in between is still recognised (state rebuilt from
    the snapshot written at the handover plus the batch headers after it)."""
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        pa = a.create_topic("ev").partition(0)
        first = pa.append_values([b"p1", b"p2"], producer=(77, 0, 0))
        pa.release_writer()
        pb = b.topic("ev").partition(0)
        pb.append_values([b"other"], producer=(78, 0, 0))
        pb.release_writer()
        assert pa.append_values([b"p1", b"p2"], producer=(77, 0, 0)) == first  # the retry: not appended again
        assert pa.append_values([b"p3"], producer=(77, 0, 2)) == 3
        with pytest.raises(pylog.OutOfOrderSequenceError):
            pa.append_values([b"gap"], producer=(77, 0, 9))
        assert [r.value for r in _all(pa)] == [b"p1", b"p2", b"other", b"p3"]


_PRODUCER = """
    import sys, pylog
    path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with pylog.open(path) as store, store.producer(linger_ms=1) as producer:
        print("ready", flush=True)
        sys.stdin.readline()
        futures = [producer.send("ev", b"%s-%d" % (name.encode(), i)) for i in range(n)]
        for f in futures:
            f.get(120)
        print("done", flush=True)
"""


def test_producers_of_three_processes_share_one_partition(tmp_path):
    n = 20_000
    pylog.open(tmp_path).create_topic("ev")
    children = [Child(_PRODUCER, str(tmp_path), name, str(n), cwd=str(tmp_path)) for name in "ABC"]
    try:
        for c in children:
            c.expect("ready")
        for c in children:
            c.send("go")
        for c in children:
            c.expect("done", timeout=120)
            assert c.wait(60) == 0, c.err()
    finally:
        for c in children:
            if c.proc.poll() is None:
                c.proc.kill()
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        records = _values(store)
    assert [r.offset for r in records] == list(range(3 * n))  # dense: every append took its own turn
    by_producer = collections.defaultdict(list)
    for r in records:
        name, i = r.value.split(b"-")
        by_producer[name].append(int(i))
    # every record once, and each producer's records in its send order
    assert {k: v for k, v in by_producer.items()} == {name.encode(): list(range(n)) for name in "ABC"}
    assert main(["verify", str(tmp_path)]) == ExitCode.OK


# Values of about 2 KB in batches of up to 1 MiB: a batch is written in many pages, so the kill often lands
# in the middle of a write (a torn tail), which the other producer's next turn must cut.
_ENDLESS = """
    import sys, itertools, pylog
    pad = b"-" + b"k" * 2000
    with pylog.open(sys.argv[1]) as store, store.producer(batch_size=1 << 20) as producer:
        for i in itertools.count():
            producer.send("ev", b"K-%d" % i + pad)
            if i == 1000:
                producer.flush()
                print("writing", flush=True)
"""

# Sends its first half, then waits for a line before the second: the test kills the other producer in between.
_PAUSING_PRODUCER = """
    import sys, pylog
    path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with pylog.open(path) as store, store.producer(linger_ms=1) as producer:
        print("ready", flush=True)
        sys.stdin.readline()
        for half in (range(n // 2), range(n // 2, n)):
            futures = [producer.send("ev", b"%s-%d" % (name.encode(), i)) for i in half]
            for f in futures:
                f.get(120)
            print("sent", flush=True)
            if half.start == 0:
                sys.stdin.readline()
        print("done", flush=True)
"""


def test_a_producer_killed_while_taking_turns_does_not_stop_the_others(tmp_path):
    n = 5000
    pylog.open(tmp_path).create_topic("ev")
    killed = Child(_ENDLESS, str(tmp_path), cwd=str(tmp_path))
    other = Child(_PAUSING_PRODUCER, str(tmp_path), "B", str(n), cwd=str(tmp_path))
    try:
        killed.expect("writing")
        other.expect("ready")
        # Killed once both append, handing the partition back and forth: a K record after B's first.
        with pylog.open(tmp_path, log_cleaner_enable=False) as watcher:
            wp = watcher.topic("ev").partition(0)
            seen = {"pos": wp.log_end_offset, "b_from": None}  # B's records all come after this
            other.send("go")

            def both_appending() -> bool:
                for r in wp.read(seen["pos"], max_records=10_000):
                    seen["pos"] = r.offset + 1
                    if seen["b_from"] is None and r.value.startswith(b"B-"):
                        seen["b_from"] = r.offset
                    elif seen["b_from"] is not None and r.value.startswith(b"K-"):
                        return True
                return False
            assert wait_for(both_appending, 120), "the two producers never took turns"
        os.kill(killed.proc.pid, signal.SIGKILL)
        killed.wait(30)
        # B's second half only now: B must take the partition over from the killed writer (whose last
        # write may be torn) and recover it. Without this pause B may have sent everything before the
        # kill, nobody would write after it, and `verify` would rightly report the killed writer's torn
        # tail, which only the next writer cuts.
        other.expect("sent", timeout=120)
        other.send("go")
        other.expect("sent", timeout=120)
        other.expect("done", timeout=120)
        assert other.wait(60) == 0, other.err()
    finally:
        for c in (killed, other):
            if c.proc.poll() is None:
                c.proc.kill()
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        records = _values(store)
        assert [r.offset for r in records] == list(range(len(records)))
        b = [int(r.value.split(b"-")[1]) for r in records if r.value.startswith(b"B-")]
        k = [int(r.value.split(b"-")[1]) for r in records if r.value.startswith(b"K-")]
        assert b == list(range(n))
        assert k == list(range(len(k))) and len(k) > 1000  # the killed one's records: a prefix, in order
        last_k = max(r.offset for r in records if r.value.startswith(b"K-"))
        assert all(r.offset > last_k for r in records if r.value.startswith(b"B-") and int(r.value[2:]) >= n // 2)
    assert main(["verify", str(tmp_path)]) == ExitCode.OK


_TEARING_WRITER = """
    import os, sys, pylog
    with pylog.open(sys.argv[1]) as store:
        p = store.topic("ev").partition(0)
        p.wait_to_write(60_000)
        p.append_values([b"K-0", b"K-1"])
        p.append_values([b"K-2" + b"k" * 5000])
        seg = p.segments[-1]
        pos, h = list(seg.batch_headers())[-1]
        with open(seg.log_path, "rb") as f:
            f.seek(pos)
            whole = f.read(h.size)
        fd = os.open(seg.log_path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, whole[: h.size // 2])  # a second copy of the batch, cut: a write the kill interrupted
        print("torn", p.log_end_offset, flush=True)
        sys.stdin.readline()  # killed here, holding the writer lock
"""


def test_a_torn_tail_left_by_a_writer_killed_during_its_turn_is_cut_by_the_next_turn(tmp_path, capsys):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        pb = store.create_topic("ev").partition(0)
        pb.append_values([b"B-0", b"B-1"])
        pb.release_writer()  # a clean hand-over: the killed writer's turn starts from a clean checkpoint
        child = Child(_TEARING_WRITER, str(tmp_path), cwd=str(tmp_path))
        try:
            assert child.expect("torn") == "5"
            os.kill(child.proc.pid, signal.SIGKILL)
            child.wait(30)
        finally:
            if child.proc.poll() is None:
                child.proc.kill()
        capsys.readouterr()
        # Before any writer's turn the torn tail is still there: verify says so (a reader cuts nothing).
        assert main(["verify", str(tmp_path)]) == ExitCode.PROBLEMS
        assert "a torn tail (an interrupted write: the next writer cuts it)" in capsys.readouterr().out
        assert [r.value[:3] for r in _all(pb)] == [b"B-0", b"B-1", b"K-0", b"K-1", b"K-2"]
        pb.append_values([b"B-2"])  # B's next turn: recovers the killed writer's tail first
        records = _all(pb)
        assert [r.offset for r in records] == list(range(6))
        assert [r.value[:3] for r in records] == [b"B-0", b"B-1", b"K-0", b"K-1", b"K-2", b"B-2"]
    assert main(["verify", str(tmp_path)]) == ExitCode.OK


def test_a_handle_taking_turns_never_reuses_segments_of_a_deleted_and_recreated_topic(tmp_path):
    """Sealed segment objects are kept across turns (no reopening); never those of files replaced since."""
    cfg = {"segment.bytes": 300}
    with pylog.open(tmp_path, log_cleaner_enable=False) as a, pylog.open(tmp_path, log_cleaner_enable=False) as b:
        a.create_topic("ev", config=cfg)
        pb = b.topic("ev").partition(0)
        for i in range(12):
            pb.append_values([b"old-%02d" % i])  # b writes: its sealed segments are trusted
        pb.release_writer()
        assert len(pb.segments) == 3  # two sealed, one active
        a.delete_topic("ev")
        pa = a.create_topic("ev", config=cfg).partition(0)
        for i in range(12):
            pa.append_values([b"NEW-%02d" % i])
        pa.release_writer()
        pb.append_values([b"from-b"])  # b's turn again, in the re-created partition
        assert [r.value for r in _all(pb)][:3] == [b"NEW-00", b"NEW-01", b"NEW-02"]
        assert _all(pb)[-1].value == b"from-b" and _all(pb)[-1].offset == 12


def test_whole_batches_after_a_damaged_header_are_not_cut_after_a_clean_close(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic("ev").partition(0)
        for i in range(20):
            p.append_values([b"value-%02d" % i])
        pos = [fpos for fpos, _ in p.segments[-1].batch_headers()][10]
    log = tmp_path / "ev" / "0" / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    raw[pos + 12] ^= 0x02  # a bit of the 11th batch's header (the magic byte): bit rot, not a torn write
    log.write_bytes(bytes(raw))
    size = len(raw)
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.topic("ev").partition(0)
        assert any("not an interrupted write" in m for m in p.check())
        with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle after a clean close"):
            p.append_values([b"new"])
    assert log.stat().st_size == size  # nothing cut
