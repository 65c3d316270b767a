"""Client benchmark (issue 4): producer ``send()``, acks="all" group commit, consumer iteration and
end-to-end latency across processes.

    python benchmarks/bench_clients.py [--quick] [--dir DIR] [--json FILE]

Figures, each with a baseline measured in the same run:

- ``send()`` of 100-byte values one at a time, ``acks=1``, then ``flush()``: records/s. Baselines: the
  Python floor of any thread-safe one-call-per-record API here (a function that appends a tuple to a list
  under a lock), and ``append_values`` of the same records in 10,000-record lists (what the drains do).
  Also ``send()`` with a key to a 4-partition topic (each drain hashes the keys and splits by partition).
- ``acks="all"`` with 1, 4 and 16 threads each calling ``send(...).get()``: records/s and fsyncs per
  record (group commit shares one fsync among the records drained together). Baseline: one thread
  appending one record at a time with an fsync each (``flush.messages=1``).
- Producer quota: a producer with ``producer_byte_rate`` (5 MB/s) sends 1,000-byte values as fast as it
  can for 6 s; the byte rate its records reach the log at, against the limit (ratio), and the same less
  the window's worth a quota lets through at once (as Kafka's does). The store's quota window is 11
  samples of 50 ms here (Kafka's default is 11 of 1 s) so a short run spans many windows. Target: within
  10% of the limit.

- Consumer iteration over 100-byte records: records/s. Baseline: ``Partition.read()`` of the same
  records as ``pylog.Record`` tuples.
- A consumer keeping up, one new record per ``poll()``, with the writer on another store handle: median
  µs per poll. Baseline: ``Partition.read()`` of one new record on the same reader handle, interleaved.
- End-to-end latency: ``send()`` (acks=1) in this process, one record every 0.5 ms, to the record
  arriving in a consumer iterating in another process; percentiles (CLOCK_MONOTONIC is shared by
  processes on Linux). The consumer wakes through the partition's notify file (``pylog/storage/notify.py``: a
  futex on a shared counter). Baseline: the same run with ``pylog.storage.notify.ENABLED = False`` in both
  processes, i.e. the polling fallback (every 0.2 ms backing off to 5 ms; ``PYLOG_NOTIFY=0`` does the
  same for a whole program).
- Wake-up latency: ``Partition.append_values`` of one record every 0.5 ms in this process to
  ``Partition.wait_for_data`` returning in another process (the wait alone: no consumer, no producer
  thread, no read), and the same with one record every 20 ms (a waiter that was idle: polling has backed
  off by then); same baseline.
- CPU of an idle consumer in another process waiting on 1 and on 4 partitions (``poll()`` with a
  timeout, nothing arriving), as a share of one core; same baseline. The same for ``pylog.aio``'s
  ``AIOKafkaConsumer.getmany(timeout_ms=...)`` in an event loop, against the synchronous consumer.

Targets (issue 4): send() >= 1,000,000 records/s; consumer >= 2,000,000 records/s; end-to-end p50 <= 0.5
ms, p99 <= 2 ms, p99.9 <= 5 ms; acks="all" reported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

import pylog
import pylog.storage.notify
from pylog.partition import Partition
from pylog.store import quota_manager

ROWS: list[dict[str, Any]] = []


def row(name: str, value: float, unit: str, ratio: float | None = None, baseline: str = "", target: str = "") -> None:
    ROWS.append({"figure": name, "value": value, "unit": unit, "ratio": ratio, "baseline": baseline,
                 "target": target})
    r = f"{ratio:.2f}x" if ratio is not None else ""
    print(f"{name:<52} {value:>12,.2f} {unit:<10} {r:>7}  {baseline:<40} {target}", flush=True)


def send_floor(n: int, value: bytes, keys: list[bytes] | None = None) -> float:
    """Calls per second of the floor of any thread-safe in-process ``send()``: a function taking a lock and
    appending to a list, called ``n`` times like ``send(topic, value[, key=...])``."""
    lock = threading.Lock()
    sink: list = []

    def floor(topic: str, value: bytes | None = None, key: bytes | None = None) -> int:
        with lock:
            sink.append((value, key))
        return len(sink)

    t0 = time.perf_counter()
    if keys is None:
        for _ in range(n):
            floor("t", value)
    else:
        for i in range(n):
            floor("t", value, key=keys[i % len(keys)])
    return n / (time.perf_counter() - t0)


def bench_send(root: str, n: int) -> None:
    value = b"x" * 100
    floor_rate = send_floor(n, value)
    row("baseline: lock + list.append per call", floor_rate / 1e6, "M calls/s")

    with pylog.open(os.path.join(root, "send"), log_cleaner_enable=False) as store:
        store.create_topic("t")
        p = store.topic("t").partition(0)
        chunk = [value] * 10_000
        t0 = time.perf_counter()
        for _ in range(n // 10_000):
            p.append_values(chunk)
        bulk = n / (time.perf_counter() - t0)
        row("baseline: append_values, 10,000 per call", bulk / 1e6, "M rec/s")
        store.create_topic("u")
        with store.producer(acks=1) as producer:
            send = producer.send
            t0 = time.perf_counter()
            for _ in range(n):
                send("u", value)
            producer.flush()
            rate = n / (time.perf_counter() - t0)
        assert store.topic("u").partition(0).log_end_offset == n
        row("send() one at a time, acks=1, then flush()", rate / 1e6, "M rec/s", rate / floor_rate,
            "vs lock + list.append floor", ">= 1 M rec/s " + ("PASS" if rate >= 1e6 else "MISS"))
        store.create_topic("k", partitions=4)
        keys = [b"key-%d" % i for i in range(1000)]
        m = n // 4
        with store.producer(acks=1) as producer:
            send = producer.send
            t0 = time.perf_counter()
            for i in range(m):
                send("k", value, key=keys[i % 1000])
            producer.flush()
            keyed = m / (time.perf_counter() - t0)
        row("send() with a key, 4 partitions", keyed / 1e6, "M rec/s", keyed / floor_rate,
            "vs lock + list.append floor", "report")
        with store.producer(acks=1) as producer:
            send = producer.send
            t0 = time.perf_counter()
            for i in range(m):
                send("k", value, partition=i & 3)
            producer.flush()
            given = m / (time.perf_counter() - t0)
        row("send() to a given partition, 4 partitions", given / 1e6, "M rec/s", given / floor_rate,
            "vs lock + list.append floor", "report")


def bench_quota(root: str, seconds: float, limit: float = 5e6) -> None:
    """A producer over its quota for ``seconds``: the rate its payload reaches the log at vs ``limit``."""
    value = b"q" * 1000
    num, size = 11, 0.05  # the quota window: 11 samples of 50 ms (Kafka's default: 11 of 1 s)
    with pylog.open(os.path.join(root, "quota"), log_cleaner_enable=False) as store:
        store.create_topic("q")
        quota_manager(store).configure_window(num, size)
        store.set_quota("bench-quota", producer_byte_rate=limit)
        # A small buffer: what waits in it (sent, not appended yet) is small next to what was appended.
        with store.producer(client_id="bench-quota", buffer_memory=64 * 1024) as producer:
            send = producer.send
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for _ in range(100):
                    send("q", value)
            producer.flush()
            elapsed = time.perf_counter() - t0
            throttle = producer.metrics()["produce-throttle-time-max"]
        total = store.topic("q").partition(0).log_end_offset * len(value)
    rate = total / elapsed
    # Kafka's window counts as (num - 1) samples long from the start: that much passes without delay.
    allowance = (num - 1) * size * limit
    row("quota: producer rate, whole run", rate / 1e6, "MB/s", rate / limit, f"vs limit {limit / 1e6:g} MB/s",
        "0.9-1.1x " + ("PASS" if 0.9 <= rate / limit <= 1.1 else "MISS"))
    row("  less the first window's allowance", (total - allowance) / elapsed / 1e6, "MB/s",
        (total - allowance) / elapsed / limit, f"{allowance / 1e6:g} MB pass at once", "report")
    row("  longest quota delay of a drain", throttle, "ms")


def bench_acks_all(root: str, per_thread: int) -> None:
    value = b"x" * 100
    with pylog.open(os.path.join(root, "durable"), log_cleaner_enable=False, flush_messages=1) as store:
        store.create_topic("d")
        p = store.topic("d").partition(0)
        m = max(200, per_thread // 4)
        t0 = time.perf_counter()
        for _ in range(m):
            p.append_values([value])
        base = m / (time.perf_counter() - t0)
    row("baseline: one append + fsync per record", base, "rec/s")
    real_flush = Partition.flush
    for threads in (1, 4, 16):
        fsyncs = [0]

        def counting(self: Partition) -> None:
            fsyncs[0] += 1
            real_flush(self)

        Partition.flush = counting  # type: ignore[method-assign]
        try:
            with pylog.open(os.path.join(root, f"all{threads}"), log_cleaner_enable=False) as store:
                store.create_topic("t")
                with store.producer(acks="all") as producer:
                    def work() -> None:
                        for _ in range(per_thread):
                            producer.send("t", value).get(60)
                    ts = [threading.Thread(target=work) for _ in range(threads)]
                    t0 = time.perf_counter()
                    for t in ts:
                        t.start()
                    for t in ts:
                        t.join()
                    dt = time.perf_counter() - t0
        finally:
            Partition.flush = real_flush  # type: ignore[method-assign]
        total = threads * per_thread
        row(f"acks='all', {threads} thread(s) send().get()", total / dt, "rec/s", total / dt / base,
            "vs fsync per record", "report")
        row(f"  records per fsync, {threads} thread(s)", total / max(fsyncs[0], 1), "rec/fsync")


def bench_consumer(root: str, n: int) -> None:
    with pylog.open(os.path.join(root, "consume"), log_cleaner_enable=False) as store:
        store.create_topic("t")
        p = store.topic("t").partition(0)
        chunk = [b"x" * 100] * 10_000
        for _ in range(n // 10_000):
            p.append_values(chunk)
        t0 = time.perf_counter()
        got = 0
        pos = 0
        while True:
            recs = p.read(pos, max_records=5000)
            if not recs:
                break
            got += len(recs)
            pos = recs[-1].offset + 1
        base = got / (time.perf_counter() - t0)
        row("baseline: Partition.read() as Record tuples", base / 1e6, "M rec/s")
        c = store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0, max_poll_records=5000)
        t0 = time.perf_counter()
        m = sum(1 for _ in c)
        rate = m / (time.perf_counter() - t0)
        assert m == got
        row("consumer iteration", rate / 1e6, "M rec/s", rate / base, "vs Partition.read()",
            ">= 2 M rec/s " + ("PASS" if rate >= 2e6 else "MISS"))


def bench_consumer_vs_lmdb(root: str, n: int, repeat: int = 3) -> None:
    """Consumer iteration (``ConsumerRecord``s, ``max_poll_records=5000``, drained by ``deque(maxlen=0)``)
    over 8-byte keys and 100-byte values, against an LMDB cursor over the same records drained the same way
    (bench_storage.py's ``lmdb_read_fns``), the two timed in turns, on whichever path is live: run again with
    PYLOG_PURE_PYTHON=1 for the other."""
    import collections
    import importlib.util
    if importlib.util.find_spec("lmdb") is None:
        print("(consumer vs LMDB skipped: the lmdb package is not installed)")
        return
    # The script's own directory: not on sys.path when run with PYTHONSAFEPATH=1 (as .ci/run does)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_storage import interleaved_best, lmdb_copy, lmdb_read_fns, make_data
    path = "accelerated" if pylog.ACCELERATED else "pure Python"
    values, keys = make_data(1000)
    with pylog.open(os.path.join(root, "consume-lmdb"), log_cleaner_enable=False) as store:
        store.create_topic("t")
        p = store.topic("t").partition(0)
        for _ in range(n // 1000):
            p.append_values(values, keys=keys)
        end = p.log_end_offset
        env = lmdb_copy(os.path.join(root, "consume-lmdb.mdb"), end, keys, values)

        def consume() -> float:
            c = store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0, max_poll_records=5000)
            t = time.perf_counter()
            collections.deque(c, maxlen=0)
            took = time.perf_counter() - t
            assert c.position(pylog.TopicPartition("t", 0)) == end
            c.close()
            return took

        drain, rate = (end / t for t in interleaved_best(repeat, lmdb_read_fns(env, end)[1], consume))
        env.close()
    row("baseline: LMDB cursor iteration, one txn", drain / 1e6, "M rec/s")
    ok = rate >= 3.5e6 and rate >= drain
    row(f"consumer iteration, keys, 5,000 per poll ({path})", rate / 1e6, "M rec/s", rate / drain,
        "vs LMDB cursor iteration", ">= 3.5 M rec/s and >= 1.0x " + ("PASS" if ok else "MISS"))


def bench_small_poll(root: str, n: int) -> None:
    """A consumer keeping up, one record per poll: what each poll costs beyond the read it wraps. The
    writer is another store handle (as another process would be), so the consumer's handle reads as a
    reader does: a refresh, then the new batch."""
    path = os.path.join(root, "small-poll")
    with pylog.open(path, log_cleaner_enable=False) as writer, pylog.open(path, log_cleaner_enable=False) as reader:
        writer.create_topic("t")
        wp = writer.topic("t").partition(0)
        wp.append_values([b"x" * 100])
        rp = reader.topic("t").partition(0)
        c = reader.consumer("t", auto_offset_reset="earliest")
        c.poll()
        polls, reads = [], []
        pos = wp.log_end_offset
        for i in range(n):
            wp.append_values([b"x" * 100])
            if i % 2:
                t0 = time.perf_counter()
                got = c.poll()
                polls.append(time.perf_counter() - t0)
                assert sum(map(len, got.values())) == 1
            else:
                t0 = time.perf_counter()
                recs = rp.read(pos, max_records=1)
                reads.append(time.perf_counter() - t0)
                assert len(recs) == 1
                c.seek(pylog.TopicPartition("t", 0), pos + 1)
            pos += 1
        base = float(np.median(reads)) * 1e6
        v = float(np.median(polls)) * 1e6
        row("baseline: Partition.read() of 1 new record, median", base, "us", None, f"{len(reads)} reads")
        row("consumer.poll() of 1 new record, median", v, "us", v / base, "vs Partition.read()", "report")


def bench_handover(root: str, reps: int, segment_counts: tuple[int, ...] = (3, 100, 1000)) -> None:
    """Writers taking turns: the cost of handing a partition's writer lock over (release + take back), and
    of a consumer group commit, which takes the committed-offsets partition's lock for each commit."""
    for nseg in segment_counts:
        path = os.path.join(root, f"handover-{nseg}")
        shutil.rmtree(path, ignore_errors=True)
        with pylog.open(path, log_cleaner_enable=False) as store:
            p = store.create_topic("t", config={"segment.bytes": 2000}).partition(0)
            while len(p.segments) < nseg:
                p.append_values([b"x" * 1500])
            t0 = time.perf_counter()
            for _ in range(reps):
                p.release_writer()
                p.try_become_writer()
            per = (time.perf_counter() - t0) / reps
            base = _timed_append(p, reps)
        row(f"writer handover, {nseg} segments", per * 1e3, "ms", per / base, "vs one 1-record append")
    path = os.path.join(root, "commit")
    shutil.rmtree(path, ignore_errors=True)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t")
        consumer = store.consumer(group_id="g", enable_auto_commit=False)
        tp = pylog.TopicPartition("t", 0)
        consumer.assign([tp])
        consumer.commit({tp: pylog.OffsetAndMetadata(0, "")})
        t0 = time.perf_counter()
        for i in range(reps):
            consumer.commit({tp: pylog.OffsetAndMetadata(i, "")})
        per = (time.perf_counter() - t0) / reps
        consumer.close()
    row("consumer.commit(), one partition", per * 1e3, "ms")


def send_rate(store: Any, topic: str, n: int, value: bytes, keys: list[bytes] | None = None) -> float:
    """Records per second of ``n`` ``send()`` calls, one at a time (with ``keys`` in turn when given), on a
    fresh ``acks=1`` producer, then ``flush()``."""
    with store.producer(acks=1) as producer:
        send = producer.send
        t0 = time.perf_counter()
        if keys is None:
            for _ in range(n):
                send(topic, value)
        else:
            for i in range(n):
                send(topic, value, key=keys[i % len(keys)])
        producer.flush()
        return n / (time.perf_counter() - t0)


def bench_send_targets(root: str, n: int) -> None:
    """Issue 16's send() targets: 100-byte values, 8-byte keys, ``acks=1``, one at a time then ``flush()``;
    each against the lock + list.append floor of the same run. The path (compiled or pure Python) is
    printed with the rows: run once as is and once with ``PYLOG_PURE_PYTHON=1``."""
    value = b"x" * 100
    keys = [b"%08d" % i for i in range(1000)]
    floor_rate = send_floor(n, value, keys)
    path = "accelerated" if pylog.ACCELERATED else "pure Python"
    row(f"baseline: lock + list.append per call ({path})", floor_rate / 1e6, "M calls/s")
    with pylog.open(os.path.join(root, "send-targets"), log_cleaner_enable=False) as store:
        store.create_topic("plain")
        store.create_topic("keyed", partitions=4)
        rate = send_rate(store, "plain", n, value)
        keyed = send_rate(store, "keyed", n, value, keys)
        assert sum(store.topic("keyed").partition(i).log_end_offset for i in range(4)) == n
    row(f"send() one at a time ({path})", rate / 1e6, "M rec/s", rate / floor_rate, "vs lock + list.append floor",
        ">= 2 M rec/s " + ("PASS" if rate >= 2e6 else "MISS"))
    row(f"send() 8-byte key, 4 partitions ({path})", keyed / 1e6, "M rec/s", keyed / floor_rate,
        "vs lock + list.append floor", ">= 1.5 M rec/s " + ("PASS" if keyed >= 1.5e6 else "MISS"))


def bench_send_latency(root: str, n: int) -> None:
    """Issue 16's end-to-end target: send() (acks=1) here to a consumer in another process, p50, against
    the polling fallback measured in the same run (see bench_latency)."""
    saved = pylog.storage.notify.ENABLED
    runs = {}
    try:
        for use_notify in (False, True):
            pylog.storage.notify.ENABLED = use_notify
            runs[use_notify] = _latency_once(os.path.join(root, "send-latency"), n, use_notify)
    finally:
        pylog.storage.notify.ENABLED = saved
    base, v = (runs[u][len(runs[u]) // 2] / 1e6 for u in (False, True))
    path = "accelerated" if pylog.ACCELERATED else "pure Python"
    row(f"baseline: end-to-end p50, polling fallback ({path})", base, "ms", None, f"{n} records")
    row(f"end-to-end latency p50, another process ({path})", v, "ms", v / base, "vs polling fallback",
        "<= 0.3 ms " + ("PASS" if v <= 0.3 else "MISS"))


def _timed_append(p: Any, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        p.append_values([b"y"])
    return (time.perf_counter() - t0) / reps


def _latency_consumer(path: str, n: int, use_notify: bool, ready: Any, out: Any) -> None:
    pylog.storage.notify.ENABLED = use_notify
    with pylog.open(path, log_cleaner_enable=False) as store:
        c = store.consumer("lat", consumer_timeout_ms=20_000)
        c.poll()
        ready.set()
        lat = []
        for rec in c:
            lat.append(time.monotonic_ns() - int(rec.value))
            if len(lat) == n:
                break
        out.put(lat)


def _wake_waiter(path: str, n: int, use_notify: bool, stamps: Any, ready: Any, out: Any) -> None:
    pylog.storage.notify.ENABLED = use_notify
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.topic("wake").partition(0)
        ready.set()
        lat: list[int] = []
        pos = 0
        while pos < n and p.wait_for_data(pos, 20):
            now = time.monotonic_ns()
            end = p.log_end_offset
            lat.extend(now - stamps[i] for i in range(pos, end))
            pos = end
        out.put(lat)


def _wake_once(root: str, n: int, use_notify: bool, interval: float) -> list[int]:
    import multiprocessing
    path = os.path.join(root, f"wake-{interval}-" + ("notify" if use_notify else "poll"))
    ctx = multiprocessing.get_context("fork")
    stamps = ctx.Array("q", n, lock=False)  # append times by offset, shared with the child
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("wake")
        p = store.topic("wake").partition(0)
        ready, out = ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=_wake_waiter, args=(path, n, use_notify, stamps, ready, out))
        proc.start()
        ready.wait(30)
        for i in range(n):
            stamps[i] = time.monotonic_ns()
            p.append_values([b"x"])
            time.sleep(interval)
        lat = sorted(out.get(timeout=60))
        proc.join(30)
    return lat


def _idle_consumer(path: str, topic: str, seconds: float, use_notify: bool, out: Any) -> None:
    pylog.storage.notify.ENABLED = use_notify
    with pylog.open(path, log_cleaner_enable=False) as store:
        c = store.consumer(topic)
        c.poll()  # positions at the end: nothing arrives from here on
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        got = c.poll(timeout_ms=seconds * 1000)
        r1, dt = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
        assert not got
        out.put((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / dt)


def _idle_aio_consumer(path: str, topic: str, seconds: float, use_notify: bool, out: Any) -> None:
    """The same wait through pylog.aio: ``getmany(timeout_ms=...)`` in an event loop, nothing arriving."""
    import asyncio
    from pylog.aio import AIOKafkaConsumer
    pylog.storage.notify.ENABLED = use_notify

    async def run() -> float:
        async with AIOKafkaConsumer(topic, bootstrap_servers=path) as c:
            await c.getmany(timeout_ms=0)  # positions at the end: nothing arrives from here on
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            got = await c.getmany(timeout_ms=seconds * 1000)
            r1, dt = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
            assert not got
            return (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / dt
    out.put(asyncio.run(run()))


def _child(target: Any, *args: Any) -> Any:
    """Run ``target(*args, queue)`` in a forked process; its one result."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    try:
        return out.get(timeout=120)
    finally:
        proc.join(30)


def _latency_once(root: str, n: int, use_notify: bool) -> list[int]:
    import multiprocessing
    path = os.path.join(root, "latency-notify" if use_notify else "latency-poll")
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("lat")
        ctx = multiprocessing.get_context("fork")
        ready, out = ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=_latency_consumer, args=(path, n, use_notify, ready, out))
        proc.start()
        ready.wait(30)
        with store.producer(acks=1) as producer:
            for _ in range(n):
                producer.send("lat", b"%d" % time.monotonic_ns())
                time.sleep(0.0005)
        lat = sorted(out.get(timeout=60))
        proc.join(30)
    return lat


def bench_latency(root: str, n: int, idle_seconds: float = 3.0) -> None:
    saved = pylog.storage.notify.ENABLED
    try:
        runs, wakes, sparse = {}, {}, {}
        for use_notify in (False, True):  # the writer (this process) publishes only with notifications on
            pylog.storage.notify.ENABLED = use_notify
            runs[use_notify] = _latency_once(root, n, use_notify)
            wakes[use_notify] = _wake_once(root, n, use_notify, 0.0005)
            sparse[use_notify] = _wake_once(root, max(20, n // 25), use_notify, 0.02)
        idle = {}
        path = os.path.join(root, "idle")
        with pylog.open(path, log_cleaner_enable=False) as store:
            for parts in (1, 4):
                store.create_topic(f"idle{parts}", partitions=parts)
                for i in range(parts):
                    store.topic(f"idle{parts}").partition(i).append_values([b"x"])  # this process writes
                for use_notify in (False, True):
                    pylog.storage.notify.ENABLED = use_notify
                    idle[parts, use_notify] = _child(_idle_consumer, path, f"idle{parts}", idle_seconds, use_notify)
                idle[parts, "aio"] = _child(_idle_aio_consumer, path, f"idle{parts}", idle_seconds, True)
    finally:
        pylog.storage.notify.ENABLED = saved

    def pct(lat: list[int], q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6
    for name, q, target in (("p50", 0.5, 0.5), ("p99", 0.99, 2.0), ("p99.9", 0.999, 5.0)):
        base = pct(runs[False], q)
        v = pct(runs[True], q)
        row(f"baseline: end-to-end {name}, polling fallback", base, "ms", None, f"{len(runs[False])} records")
        row(f"end-to-end latency {name}, another process", v, "ms", v / base, "vs polling fallback",
            f"<= {target} ms " + ("PASS" if v <= target else "MISS"))
    for label, lats, qs in (("every 0.5 ms", wakes, (0.5, 0.99, 0.999)), ("every 20 ms", sparse, (0.5, 0.99))):
        for q in qs:
            name = f"p{q * 100:g}"
            base = pct(lats[False], q)
            v = pct(lats[True], q)
            row(f"baseline: wake-up {name}, {label}, polling", base, "ms", None, f"{len(lats[False])} records")
            row(f"wake-up latency {name}, {label}, another process", v, "ms", v / base, "vs polling fallback",
                "report")
    for parts in (1, 4):
        base, v = idle[parts, False] * 100, idle[parts, True] * 100
        row(f"baseline: idle consumer CPU, {parts} partition(s), polling", base, "% of core", None,
            f"{idle_seconds:g} s poll()")
        row(f"idle consumer CPU, {parts} partition(s)", v, "% of core", v / base if base else None,
            "vs polling fallback", "report")
        a = idle[parts, "aio"] * 100
        row(f"idle async consumer CPU (pylog.aio getmany), {parts} partition(s)", a, "% of core",
            a / v if v else None, "vs the sync consumer above", "report")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, same code paths")
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--send-targets", action="store_true", help="only issue 16's send() and latency rows")
    ap.add_argument("--consumer-vs-lmdb", action="store_true", help="only the consumer row against LMDB")
    a = ap.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="pylog-bench-producer-")
    os.makedirs(root, exist_ok=True)
    print(f"pylog {pylog.__version__} client benchmark in {root} (python {sys.version.split()[0]})")
    try:
        if a.send_targets:
            bench_send_targets(root, 20_000 if a.quick else 1_000_000)
            bench_send_latency(root, 200 if a.quick else 5_000)
            return 0
        if a.consumer_vs_lmdb:
            bench_consumer_vs_lmdb(root, 20_000 if a.quick else 1_000_000, 1 if a.quick else 5)
            return 0
        bench_send(root, 20_000 if a.quick else 1_000_000)
        bench_quota(root, 2.0 if a.quick else 6.0)
        bench_acks_all(root, 50 if a.quick else 500)
        bench_consumer(root, 20_000 if a.quick else 1_000_000)
        bench_consumer_vs_lmdb(root, 20_000 if a.quick else 1_000_000, 1 if a.quick else 3)
        bench_small_poll(root, 200 if a.quick else 6_000)
        bench_handover(root, 20 if a.quick else 300, (3, 30) if a.quick else (3, 100, 1000))
        bench_latency(root, 200 if a.quick else 5_000, 1.0 if a.quick else 3.0)
        bench_send_targets(root, 20_000 if a.quick else 1_000_000)
        bench_send_latency(root, 200 if a.quick else 5_000)
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(ROWS, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
