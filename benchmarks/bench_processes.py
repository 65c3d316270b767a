"""Producers and consumers in separate processes, on their own partitions or sharing one (issue 4).

    python benchmarks/bench_processes.py [--quick] [--dir DIR] [--records N]

Runs two configurations on a 3-partition topic of 100-byte values, in the same run:

- baseline: one producer process (``send()`` one record at a time, acks=1) and one consumer process
  (iterating an ``assign()``ed partition) on partition 0, running at the same time;
- three producer processes and three consumer processes, producer *i* and consumer *i* on partition *i*;
- three producer processes sharing partition 0 (they take turns: each hands the partition's writer lock
  over when another waits for it) and one consumer process reading all their records from it.

Each process waits on a shared start event, then times itself (CLOCK_MONOTONIC, shared by processes on
Linux). Aggregate throughput = all records / (last end - first start), for producers and for consumers;
the ratio of the 3+3 figure to the 1+1 figure is printed. On a machine with fewer cores than processes
the ratio says how well the processes share the cores, not how pylog scales.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import pylog

TOPIC = "t"
VALUE = b"x" * 100


def _produce(path: str, partition: int, n: int, start: Any, out: Any) -> None:
    with pylog.open(path, log_cleaner_enable=False) as store:
        producer = store.producer(acks=1, linger_ms=5)
        send = producer.send
        start.wait()
        t0 = time.perf_counter()
        for _ in range(n):
            send(TOPIC, VALUE, partition=partition)
        producer.flush()
        t1 = time.perf_counter()
        producer.close()
    out.put(("produce", partition, t0, t1, n))


def _consume(path: str, partition: int, n: int, start: Any, out: Any) -> None:
    with pylog.open(path, log_cleaner_enable=False) as store:
        consumer = store.consumer(auto_offset_reset="earliest", max_poll_records=5000, consumer_timeout_ms=60_000)
        consumer.assign([pylog.TopicPartition(TOPIC, partition)])
        start.wait()
        t0 = time.perf_counter()
        got = 0
        for _ in consumer:
            got += 1
            if got == n:
                break
        t1 = time.perf_counter()
        consumer.close()
    out.put(("consume", partition, t0, t1, got))


def run(root: str, pairs: int, n: int, shared: bool = False) -> dict[str, float]:
    """Run ``pairs`` producer/consumer process pairs of ``n`` records each; aggregate records/s per role.

    ``shared``: the producers all write partition 0, and one consumer reads their ``pairs * n`` records.
    """
    path = os.path.join(root, f"pairs-{pairs}{'-shared' if shared else ''}")
    shutil.rmtree(path, ignore_errors=True)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions=3)
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    if shared:
        procs = [ctx.Process(target=_produce, args=(path, 0, n, start, out)) for _ in range(pairs)]
        procs.append(ctx.Process(target=_consume, args=(path, 0, pairs * n, start, out)))
    else:
        procs = [ctx.Process(target=fn, args=(path, i, n, start, out)) for i in range(pairs)
                 for fn in (_produce, _consume)]
    for p in procs:
        p.start()
    time.sleep(1.0 + 0.3 * len(procs))  # let every process import and open the store
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise SystemExit(f"a benchmark process failed with exit code {p.exitcode}")
    rates = {}
    for role in ("produce", "consume"):
        mine = [r for r in results if r[0] == role]
        total = sum(r[4] for r in mine)
        assert total == pairs * n, (role, total)
        rates[role] = total / (max(r[3] for r in mine) - min(r[2] for r in mine))
    return rates


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few seconds: 20,000 records per process")
    ap.add_argument("--dir", help="where to put the stores (default: a temporary directory, removed)")
    ap.add_argument("--records", type=int, default=None, help="records per producer (default 1,000,000)")
    args = ap.parse_args(argv)
    n = args.records or (20_000 if args.quick else 1_000_000)
    root = args.dir or tempfile.mkdtemp(prefix="pylog-bench-proc-")
    try:
        print(f"{n:,} records of {len(VALUE)} bytes per producer; {os.cpu_count()} CPUs")
        one = run(root, 1, n)
        three = run(root, 3, n)
        shared = run(root, 3, n, shared=True)
        for role, label in (("produce", "producers (send(), acks=1)"), ("consume", "consumers (iteration)")):
            print(f"{label:<28} 1 process: {one[role] / 1e6:6.3f} M rec/s   3 processes: "
                  f"{three[role] / 1e6:6.3f} M rec/s   ratio {three[role] / one[role]:.2f}x")
        print(f"{'3 producers, 1 shared part.':<28} {shared['produce'] / 1e6:6.3f} M rec/s (1 consumer: "
              f"{shared['consume'] / 1e6:6.3f} M rec/s)   vs own partitions {shared['produce'] / three['produce']:.2f}x"
              f"   vs 1 process {shared['produce'] / one['produce']:.2f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
