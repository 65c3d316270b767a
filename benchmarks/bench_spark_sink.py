"""Spark streaming sink benchmark: ``writeStream.format("pylog")`` exactly-once against at-least-once, one session.

Usage::

    python benchmarks/bench_spark_sink.py                          # 2,000,000 rows, 3 reps
    python benchmarks/bench_spark_sink.py --quick                  # 20,000 rows, one rep (the test suite)
    python benchmarks/bench_spark_sink.py --dir /work/bench --rows 2000000 --batch 250000 --reps 3

Workload: ``--rows`` records with 100-byte values and 8-byte keys in a source topic of 4 partitions. Each run
copies them all with a streaming query, ``readStream.format("pylog")`` (``maxOffsetsPerTrigger=--batch``,
``trigger(availableNow=True)``) ``.select("key", "value").writeStream.format("pylog")`` into a fresh topic of 4
partitions (keyed rows: murmur2 placement), with a fresh checkpoint. The two modes run alternately in one
``local[*]`` session: ``deliveryGuarantee=exactly-once`` (each task's rows one transaction, the driver's batch
record and commits) and ``deliveryGuarantee=at-least-once`` (plain appends, Spark's Kafka sink's guarantee).
Best of ``--reps`` each, rows/s, the ratio, the micro-batch count, and the load average before and after.
Nothing asserts here except that each run copied every row.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pylog  # noqa: E402

VALUE_BYTES = 100
KEY_BYTES = 8
PARTITIONS = 4
MODES = ("exactly-once", "at-least-once")


def make_source(path: str, rows: int) -> None:
    rng = np.random.default_rng(7)
    with pylog.open(path) as store:
        topic = store.create_topic("src", partitions=PARTITIONS)
        per = rows // PARTITIONS
        for p in range(PARTITIONS):
            done = 0
            while done < per:
                n = min(100_000, per - done)
                values = rng.integers(0, 256, n * VALUE_BYTES, dtype=np.uint8).tobytes()
                keys = rng.integers(0, 256, n * KEY_BYTES, dtype=np.uint8).tobytes()
                topic.partition(p).append_columns(np.full(n, VALUE_BYTES, np.int32), values,
                                                  np.full(n, KEY_BYTES, np.int32), keys)
                done += n


def copy(spark: Any, path: str, work: str, mode: str, run: int, batch: int, rows: int) -> tuple[float, int]:
    """One streaming copy of ``src`` into a new topic; (seconds, micro-batches)."""
    out = f"out_{mode.replace('-', '_')}_{run}"
    with pylog.open(path) as store:
        store.create_topic(out, partitions=PARTITIONS)
    checkpoint = os.path.join(work, f"checkpoint-{out}")
    start = time.perf_counter()
    query = (spark.readStream.format("pylog").option("subscribe", "src").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(batch)).load(path).select("key", "value")
             .writeStream.format("pylog").option("topic", out).option("deliveryGuarantee", mode)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(path))
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"{mode} run failed: {query.exception()}")
    batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    with pylog.open(path) as store:
        parts = store.topic(out).partitions
        copied = sum(p.log_end_offset for p in parts)
        # exactly-once: every copied row plus one commit marker per partition and micro-batch that wrote to it
        assert copied >= rows, (mode, copied, rows)
        assert all(p.last_stable_offset == p.log_end_offset for p in parts)
        store.delete_topic(out)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return seconds, batches


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--quick", action="store_true", help="20,000 rows, one rep: a smoke run (figures meaningless)")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.batch, args.reps = 20_000, 5_000, 1
    work = tempfile.mkdtemp(prefix="pylog-bench-sink-", dir=args.dir)
    own = spark is None
    try:
        path = os.path.join(work, "store")
        make_source(path, args.rows)
        if own:
            from pylog.spark import session
            spark = session(args.master)
        load_before = os.getloadavg()
        best: dict[str, tuple[float, int]] = {}
        for run in range(args.reps):
            for mode in (MODES if run % 2 == 0 else MODES[::-1]):
                seconds, batches = copy(spark, path, work, mode, run, args.batch, args.rows)
                print(f"  {mode:14} run {run}: {seconds:7.2f} s, {batches} micro-batches", flush=True)
                if mode not in best or seconds < best[mode][0]:
                    best[mode] = (seconds, batches)
        load_after = os.getloadavg()
        eos, alo = (args.rows / best[m][0] for m in MODES)
        print(f"\nstreaming sink, {args.rows:,} rows of {VALUE_BYTES} B in micro-batches of {args.batch:,}, "
              f"best of {args.reps}, master {args.master}")
        print(f"  exactly-once   {eos / 1e6:6.3f} M rows/s ({best['exactly-once'][1]} micro-batches)")
        print(f"  at-least-once  {alo / 1e6:6.3f} M rows/s ({best['at-least-once'][1]} micro-batches)")
        print(f"  | ratio | exactly-once / at-least-once = {eos / alo:.2f}x")
        print(f"  load average before {load_before[0]:.1f}, after {load_after[0]:.1f}")
        return 0
    finally:
        if own and spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
