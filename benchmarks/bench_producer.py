"""Producer benchmark (issue 4, first part): ``send()`` one record at a time, and acks="all" group commit.

    python benchmarks/bench_producer.py [--quick] [--dir DIR] [--json FILE]

Figures, each with a baseline measured in the same run:

- ``send()`` of 100-byte values one at a time, ``acks=1``, then ``flush()``: records/s. Baselines: the
  Python floor of any thread-safe one-call-per-record API here (a function that appends a tuple to a list
  under a lock), and ``append_values`` of the same records in 10,000-record lists (what the drains do).
- ``acks="all"`` with 1, 4 and 16 threads each calling ``send(...).get()``: records/s and fsyncs per
  record (group commit shares one fsync among the records drained together). Baseline: one thread
  appending one record at a time with an fsync each (``flush.messages=1``).

Targets (issue 4): send() >= 1,000,000 records/s; acks="all" reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import pylog
from pylog.partition import Partition

ROWS: list[dict[str, Any]] = []


def row(name: str, value: float, unit: str, ratio: float | None = None, baseline: str = "", target: str = "") -> None:
    ROWS.append({"figure": name, "value": value, "unit": unit, "ratio": ratio, "baseline": baseline,
                 "target": target})
    r = f"{ratio:.2f}x" if ratio is not None else ""
    print(f"{name:<52} {value:>12,.2f} {unit:<10} {r:>7}  {baseline:<40} {target}", flush=True)


def bench_send(root: str, n: int) -> None:
    value = b"x" * 100
    lock = threading.Lock()
    sink: list = []

    def floor(topic: str, value: bytes | None = None, key: bytes | None = None) -> int:
        with lock:
            sink.append((value, key))
        return len(sink)

    t0 = time.perf_counter()
    for _ in range(n):
        floor("t", value)
    floor_rate = n / (time.perf_counter() - t0)
    row("baseline: lock + list.append per call", floor_rate / 1e6, "M calls/s")
    sink.clear()

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, same code paths")
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    a = ap.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="pylog-bench-producer-")
    os.makedirs(root, exist_ok=True)
    print(f"pylog {pylog.__version__} producer benchmark in {root} (python {sys.version.split()[0]})")
    try:
        bench_send(root, 20_000 if a.quick else 1_000_000)
        bench_acks_all(root, 50 if a.quick else 500)
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(ROWS, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
