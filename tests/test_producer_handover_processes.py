"""Producers of several processes sharing the partitions of one topic: a drain that appends to several
partitions must never hold one partition's writer lock while it waits for another's (two such producers
would each wait for the partition the other holds until ``max_block_ms`` ran out and their records failed).

Real processes; no timed assertion: ``max_block_ms`` is left at its default (60 s) and every future must
succeed, and every record be stored exactly once, in each producer's order per key."""

from __future__ import annotations

import collections

import pylog
from pylog.__main__ import ExitCode, main

from childproc import Child
from storetools import read_all

_KEYED_PRODUCER = """
    import sys, pylog
    path, name, n, acks = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), sys.argv[4]
    with pylog.open(path) as store, store.producer(acks="all" if acks == "all" else 1) as producer:
        print("ready", flush=True)
        sys.stdin.readline()
        futures = [producer.send("t", b"%s-%d" % (name, i), key=b"k%d" % (i % 61)) for i in range(n)]
        producer.flush()
        failed = []
        for f in futures:
            try:
                f.get(600)
            except pylog.PylogError as exc:
                failed.append(repr(exc))
        print("done", len(failed), failed[:1], flush=True)
"""


def _run_keyed_producers(tmp_path, names: str, n: int, acks: str = "1") -> None:
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=4)
    children = [Child(_KEYED_PRODUCER, str(tmp_path), name, str(n), acks, cwd=str(tmp_path)) for name in names]
    try:
        for c in children:
            c.expect("ready")
        for c in children:
            c.send("go")
        # A hang guard only (10 min): a stalled pair of producers fails its futures after max_block_ms.
        results = [c.expect("done", timeout=600) for c in children]
        for c in children:
            assert c.wait(120) == 0, c.err()
    finally:
        for c in children:
            c.kill()
    assert all(r.startswith("0 ") for r in results), f"futures failed: {results}"
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        topic = store.topic("t")
        seen: dict[tuple[bytes, bytes], list[int]] = collections.defaultdict(list)
        stored = 0
        for number in range(4):
            records = read_all(topic.partition(number), chunk=20_000)
            assert [r.offset for r in records] == list(range(len(records)))
            stored += len(records)
            for r in records:
                name, i = r.value.split(b"-")
                seen[(name, r.key)].append(int(i))
    assert stored == len(names) * n
    for name in names:
        for k in range(61):
            mine = seen[(name.encode(), b"k%d" % k)]
            # every record once, and in send order within its key (one key, one partition)
            assert mine == list(range(k, n, 61)), f"producer {name}, key k{k}"
    assert main(["verify", str(tmp_path)]) == ExitCode.OK


def test_two_producer_processes_sending_keyed_records_to_shared_partitions_never_stall(tmp_path):
    _run_keyed_producers(tmp_path, "AB", 30_000)


def test_three_producer_processes_with_acks_all_sharing_partitions_store_every_record_once(tmp_path):
    _run_keyed_producers(tmp_path, "ABC", 10_000, acks="all")


_THROTTLED_PRODUCER = """
    import sys, time, pylog
    from pylog.store import quota_manager
    store = pylog.open(sys.argv[1])
    store.set_quota("slow", producer_byte_rate=10)  # 10,000 bytes: a delay of about 1,000 s

    def sleep(delay):  # the quota's sleep (QuotaManager.sleep may be replaced in tests): say when it starts
        print("throttled", round(delay), flush=True)
        time.sleep(delay)

    quota_manager(store).sleep = sleep
    producer = store.producer(client_id="slow")
    producer.send("t", b"x" * 10_000, partition=0)
    sys.stdin.readline()  # killed before this returns
"""


def test_a_producer_waiting_out_its_quota_delay_hands_its_partitions_over(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=1)
    slow = Child(_THROTTLED_PRODUCER, str(tmp_path), cwd=str(tmp_path))
    try:
        assert int(slow.expect("throttled")) > 600  # appended, and now waiting out its delay
        with pylog.open(tmp_path, log_cleaner_enable=False) as store:
            part = store.topic("t").partition(0)
            # The delay is far longer than this wait: only a handover before it lets this one in.
            part.wait_to_write(60_000)
            assert part.append_values([b"other"]) == 1
    finally:
        slow.kill()


_CROSSING_PRODUCER = """
    import contextlib, sys, pylog
    from pylog.partition import internals
    path, mine, theirs, pass_under_way = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "pass"
    store = pylog.open(path, log_cleaner_enable=False)
    producer = store.producer(linger_ms=0)
    producer.send("t", b"first", partition=mine).get(60)  # holds its own partition for a turn
    print("holding", flush=True)
    sys.stdin.readline()
    part = store.topic("t").partition(mine)
    under_way = contextlib.ExitStack()
    if pass_under_way:  # a retention or compaction pass of the partition it holds, until told
        under_way.enter_context(internals(part).maintenance_pass())
    meta = producer.send("t", b"second", partition=theirs).get(60)  # a hang guard only
    print("sent", meta.partition, meta.offset, part.is_writer, flush=True)
    sys.stdin.readline()
    under_way.close()
    producer.close()
    store.close()
    print("done", flush=True)
"""


def test_two_producer_processes_crossing_partitions_never_stall_while_a_pass_holds_one_of_them(tmp_path):
    """Producer A holds partition 0, on which a pass is under way in its process, and sends to partition 1;
    producer B holds partition 1 and sends to partition 0. B lets go of partition 1 before it waits, so A's
    send completes while its pass still runs (before A lets go of anything); B's then completes once the
    pass is over."""
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=2)
    a = Child(_CROSSING_PRODUCER, str(tmp_path), "0", "1", "pass", cwd=str(tmp_path))
    b = Child(_CROSSING_PRODUCER, str(tmp_path), "1", "0", "-", cwd=str(tmp_path))
    try:
        a.expect("holding")
        b.expect("holding")
        a.send("go")
        b.send("go")
        assert a.expect("sent", timeout=120) == "1 1 True"  # partition 1, offset 1; partition 0 still held
        a.send("end the pass")
        assert b.expect("sent", timeout=120) == "0 1 False"  # it let go of partition 1 (to A)
        b.send("close")
        a.expect("done", timeout=120)
        b.expect("done", timeout=120)
        assert a.wait(60) == 0, a.err()
        assert b.wait(60) == 0, b.err()
    finally:
        a.kill()
        b.kill()
