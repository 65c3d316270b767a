"""Spark benchmark: the pylog source and sink against Parquet and a tuple-yielding reader, in one session.

Usage::

    python benchmarks/bench_spark.py                     # full run: 10M rows (~1.3 GB pylog + parquet under
                                                         # --dir); a few minutes on 2 cores
    python benchmarks/bench_spark.py --quick             # 40,000 rows, same code paths (the test suite)
    python benchmarks/bench_spark.py --dir /work/bench --rows 10000000 --reps 3
    python benchmarks/bench_spark.py --dir /work/bench --rows 4000000 --streams-only   # the stream figures only
    python benchmarks/bench_spark.py --dir /work/bench --rows 4000000 --only "group by key"   # one issue-31 query
    python benchmarks/bench_spark.py --dir /work/bench --steady 5 --only "offset > X (1%)"  # steady state

Workload (issue 5): ``--rows`` records with 100-byte values and 8-byte keys in a topic of 4 partitions,
written straight through ``Partition.append_columns`` (100,000 per call). The same rows (all seven
columns of the Kafka schema) are written once to Parquet by Spark, from the pylog source.

Timed in one ``local[*]`` session (UI off), rows/s:

- issue 31 (the JVM reader, docs/SPARK.md "Which reader runs"): ``sum(length(value))``, ``sum(hash(...))`` of
  the seven columns, ``count(*)``, ``offset >= X`` selecting 1% then ``sum(length(value))``, and a group-by on
  ``key`` (``sum(count)`` and the number of groups, so that the grouping is not optimized away); each over
  the JVM reader (``format("pylog")`` with its jar loaded), over the Python source
  (``format("pylog-python")``, with ``filterPushdown`` for the filter when the session allows it) with its full
  schema and with a declared schema of only the columns the query needs (column pruning for a Python source),
  and over Parquet of the same rows; round-robin, a warm-up round then the median of ``--reps``. Targets
  (issue 31, JVM / Parquet): >= 1.5x, 1.0x, 1.0x, 2x, 1.0x. The load average is printed at the end.
- stream (issue 31): a ``readStream`` with ``trigger(availableNow=True)`` of all seven columns into Spark's
  ``noop`` sink, each run with a fresh checkpoint, from the start of the query to its end: over the JVM reader,
  the Python source, and Spark's Parquet file stream (``readStream.parquet``) of the same rows (4 files, one
  per partition); a warm-up round then the median of ``--reps``, each run after a full GC of the driver, the
  JVM and Parquet runs of a round back to back in alternating order, the Python source's after them. Target
  (JVM / Parquet stream): >= 1.5x, printed as the ratio of the medians, the median of the rounds' ratios and
  the ratio of the driver JVM's CPU time (steadier on a shared machine). Each run must report every row in
  its progress (``numInputRows``); both streams must read them in as many micro-batches (one each: neither
  has a read limit); the tasks per micro-batch and Spark's per-trigger durations are printed.
- read (issue 5), best of ``--reps``: ``sum(length(value))`` over the Python source, Parquet, ``pylog_tuples``
  (a minimal Python data source in this file that yields one tuple per row with ``Partition.read``) and
  ``pylog_ceiling`` (a Python data source yielding one prebuilt Arrow batch again and again: the cost of
  Spark's Python data source path itself, which bounds any Python source with these columns).
- write: ``df.write.format("pylog").mode("append")`` of the rows' ``key`` and ``value`` into a fresh
  4-partition topic (the Python writer, whichever reader runs), against ``df.write.parquet`` of the same two
  columns; ``df`` reads the Parquet copy, in both.

Nothing asserts here except that every query counts every row and gives every variant's answer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pylog  # noqa: E402

VALUE_BYTES = 100
KEY_BYTES = 8
PARTITIONS = 4
PER_CALL = 100_000


def make_store(path: str, rows: int) -> None:
    """``rows`` records (100-byte values, 8-byte keys) spread evenly over the 4 partitions of ``bench``."""
    rng = np.random.default_rng(5)
    value_block = rng.integers(0, 256, VALUE_BYTES * PER_CALL, dtype=np.uint8).tobytes()
    with pylog.open(path, log_cleaner_enable=False) as store:
        topic = store.create_topic("bench", partitions=PARTITIONS)
        store.create_topic("sink", partitions=PARTITIONS)
        store.create_topic("warm", partitions=PARTITIONS)
        per = rows // PARTITIONS
        for p in range(PARTITIONS):
            part = topic.partition(p)
            done = 0
            while done < per:
                n = min(PER_CALL, per - done)
                keys = np.arange(done, done + n, dtype=np.int64).tobytes()
                part.append_columns(np.full(n, VALUE_BYTES, np.int32), value_block[:n * VALUE_BYTES],
                                    np.full(n, KEY_BYTES, np.int32), keys)
                done += n
            part.flush()


def tuple_source() -> Any:
    """A minimal Python data source (``pylog_tuples``) that yields one tuple per record: the baseline."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pylog.spark.source import kafka_schema

    class TupleReader(DataSourceReader):
        def __init__(self, path: str) -> None:
            self.path = path

        def partitions(self) -> list:
            with pylog.open(self.path, log_cleaner_enable=False) as store:
                return [InputPartition((p, store.topic("bench").partition(p).log_end_offset))
                        for p in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Any:
            number, end = partition.value
            utc = dt.timezone.utc
            with pylog.open(self.path, log_cleaner_enable=False) as store:
                part = store.topic("bench").partition(number)
                pos = 0
                while pos < end:
                    recs = part.read(pos, max_records=10_000)
                    for r in recs:
                        yield (r.key, r.value, "bench", number, r.offset,
                               dt.datetime.fromtimestamp(r.timestamp / 1000, utc), r.timestamp_type)
                    pos = recs[-1].offset + 1

    class TupleSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pylog_tuples"

        def schema(self) -> Any:
            return kafka_schema(False)

        def reader(self, schema: Any) -> TupleReader:
            return TupleReader(self.options["path"])

    return TupleSource


def arrow_ceiling_source() -> Any:
    """A Python data source (``pylog_ceiling``) that yields one Arrow batch of the Kafka schema, built once in
    memory, over and over: what Spark's Python data source path costs with no reading at all."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pylog.spark.source import kafka_schema

    class CeilingReader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self) -> list:
            return [InputPartition(self.rows // PARTITIONS) for _ in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa

            from pylog.spark.reader import ARROW_SCHEMA, binary_array

            n = min(PER_CALL, partition.value)
            batch = pa.RecordBatch.from_arrays([
                binary_array(np.full(n, KEY_BYTES, np.int32), bytes(KEY_BYTES * n)),
                binary_array(np.full(n, VALUE_BYTES, np.int32), bytes(VALUE_BYTES * n)),
                pa.repeat(pa.scalar("bench"), n), pa.array(np.zeros(n, np.int32)), pa.array(np.arange(n)),
                pa.array(np.zeros(n, np.int64)).cast(pa.timestamp("us", tz="UTC")), pa.array(np.zeros(n, np.int32)),
            ], schema=ARROW_SCHEMA)
            left = partition.value
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pylog_ceiling"

        def schema(self) -> Any:
            return kafka_schema(False)

        def reader(self, schema: Any) -> CeilingReader:
            return CeilingReader(int(self.options["rows"]))

    return CeilingSource


def best(reps: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def run(spark: Any, root: str, rows: int, reps: int, streams_only: bool = False,
        only: list[str] | None = None, steady_seconds: float = 0.0) -> dict[str, float]:
    store_path = os.path.join(root, "store")
    parquet = os.path.join(root, "parquet")
    t0 = time.perf_counter()
    make_store(store_path, rows)
    print(f"store: {rows:,} rows in {PARTITIONS} partitions written in {time.perf_counter() - t0:.1f} s")
    spark.dataSource.register(tuple_source())
    spark.dataSource.register(arrow_ceiling_source())
    pylog_df = spark.read.format("pylog").option("subscribe", "bench").load(store_path)
    pylog_df.write.mode("overwrite").parquet(parquet)
    total_bytes = rows * VALUE_BYTES
    results: dict[str, float] = {}
    if steady_seconds:
        steady(spark, store_path, parquet, rows, steady_seconds, only)
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return results
    if only:
        queries(spark, store_path, parquet, rows, reps, results, only)
        print_queries(results, only)
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return results
    if streams_only:
        streams(spark, root, store_path, parquet, rows, reps, results)
        print_streams(results)
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return results

    def sum_len(df: Any) -> Callable[[], int]:
        return lambda: df.selectExpr("sum(length(value)) as n").collect()[0].n

    for name, df, r in [
        ("python", spark.read.format("pylog-python").option("subscribe", "bench").load(store_path), reps),
        ("parquet", spark.read.parquet(parquet), reps),
        ("ceiling", spark.read.format("pylog_ceiling").option("rows", str(rows)).load(), reps),
        ("tuples", spark.read.format("pylog_tuples").load(store_path), 1),
    ]:
        sum_len(df)()  # warm-up: plans, workers, JIT
        secs, n = best(r, sum_len(df))
        assert n == total_bytes, (name, n, total_bytes)  # every row counted
        results[f"read_{name}"] = rows / secs
        print(f"read  {name:8s} {secs:7.2f} s  {rows / secs / 1e6:6.2f} M rows/s")

    queries(spark, store_path, parquet, rows, reps, results)
    streams(spark, root, store_path, parquet, rows, reps, results)

    source = spark.read.parquet(parquet).select("key", "value")
    source.write.format("noop").mode("overwrite").save()  # warm-up: parquet read path and the sink's workers
    source.limit(1000).write.format("pylog").option("topic", "warm").mode("append").save(store_path)

    def write_pylog() -> None:
        source.write.format("pylog").option("topic", "sink").mode("append").save(store_path)

    def write_parquet() -> None:
        source.write.mode("overwrite").parquet(os.path.join(root, "parquet-out"))

    for name, fn in [("pylog", write_pylog), ("parquet", write_parquet)]:
        secs, _ = best(reps, fn)
        results[f"write_{name}"] = rows / secs
        print(f"write {name:8s} {secs:7.2f} s  {rows / secs / 1e6:6.2f} M rows/s")
    with pylog.open(store_path) as store:
        assert sum(store.topic("sink").end_offsets().values()) == rows * reps

    rp, rq, rt, rc = (results["read_python"], results["read_parquet"], results["read_tuples"],
                      results["read_ceiling"])
    print()
    print("| figure | pylog | baseline (same session) | ratio | target |")
    print("|---|---:|---|---:|---|")
    print(f"| `spark.read.format(\"pylog-python\")`, sum(length(value)) | {rp / 1e6:.2f} M rows/s | "
          f"`spark.read.parquet`: {rq / 1e6:.2f} M/s | {rp / rq:.2f}x | >= 0.5x {'✔' if rp >= 0.5 * rq else '✘'} |")
    print(f"| same | {rp / 1e6:.2f} M rows/s | tuple-yielding reader: {rt / 1e6:.2f} M/s | {rp / rt:.1f}x | "
          f">= 5x {'✔' if rp >= 5 * rt else '✘'} |")
    print(f"| same | {rp / 1e6:.2f} M rows/s | in-memory Arrow batches, no reading (the API's ceiling): "
          f"{rc / 1e6:.2f} M/s | {rp / rc:.2f}x | report |")
    wp, wq = results["write_pylog"], results["write_parquet"]
    print(f"| `df.write.format(\"pylog\")` (key, value) | {wp / 1e6:.2f} M rows/s | `df.write.parquet`: "
          f"{wq / 1e6:.2f} M/s | {wp / wq:.2f}x | report |")
    print_queries(results)
    print_streams(results)
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return results


SEVEN = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
#: The issue-31 queries: name -> (a function of the DataFrame and the row count giving the query, the schema a
#: user declares to prune the Python source, the issue's target ratio of the JVM reader to Parquet).
QUERIES: dict[str, tuple[Callable[[Any, int], Any], str, float]] = {
    "sum(length(value))": (lambda df, rows: df.selectExpr("sum(length(value)) as n"), "value binary", 1.5),
    "7-column hash": (lambda df, rows: df.selectExpr(
        "sum(hash(key, value, topic, partition, offset, timestamp, timestampType)) as n"), SEVEN, 1.0),
    "count(*)": (lambda df, rows: df.selectExpr("count(*) as n"), "partition int", 1.0),
    "offset > X (1%)": (lambda df, rows: df.where(f"offset >= {rows // PARTITIONS - rows // PARTITIONS // 100}")
                        .selectExpr("sum(length(value)) as n"), "offset long, value binary", 2.0),
    # the number of groups too: with sum(count) alone Spark's optimizer drops the grouping (sum(1) over no column)
    "group by key": (lambda df, rows: df.groupBy("key").count().selectExpr("sum(count) as n", "count(*) as groups"),
                     "key binary", 1.0),
}


def queries(spark: Any, store_path: str, parquet: str, rows: int, reps: int, results: dict[str, float],
            only: list[str] | None = None) -> None:
    """Each query of :data:`QUERIES` over the JVM reader (``format("pylog")`` when its jar is loaded), the
    Python source with its full schema and with the declared (pruned) schema (``format("pylog-python")``), and
    Parquet of the same rows; round-robin in this session, a warm-up round then the median of ``reps``; rows/s
    into ``results`` as ``{query}_{variant}``. Every variant must give the same answer."""
    from pylog.spark import which_reader

    jvm = which_reader(spark) == "jvm"
    pushdown = spark.conf.get("spark.sql.python.filterPushdown.enabled", "false") == "true"
    for q, (query, declared, _) in QUERIES.items():
        if only and q not in only:
            continue
        py = spark.read.format("pylog-python").option("subscribe", "bench")
        if pushdown and q.startswith("offset"):
            py = py.option("filterPushdown", "true")
        variants = {"python": py.load(store_path), "declared": py.schema(declared).load(store_path),
                    "parquet": spark.read.parquet(parquet)}
        if jvm:
            variants = {"jvm": spark.read.format("pylog").option("subscribe", "bench").load(store_path), **variants}
        got, times = set(), {v: [] for v in variants}
        for rep in range(reps + 1):  # round-robin, so that no variant gains from running after another; rep 0 warms
            for variant, df in variants.items():
                t0 = time.perf_counter()
                got.add(query(df, rows).collect()[0].n)
                if rep:
                    times[variant].append(time.perf_counter() - t0)
        assert len(got) == 1, (q, got)  # the same answer from every variant
        for variant, ts in times.items():
            results[f"{q}_{variant}"] = rows / statistics.median(ts)
            print(f"{q:20s} {variant:8s} {statistics.median(ts):7.2f} s  {rows / statistics.median(ts) / 1e6:6.2f} "
                  "M rows/s (median)")


def steady(spark: Any, store_path: str, parquet: str, rows: int, seconds: float,
           only: list[str] | None = None) -> None:
    """The issue-31 queries in the steady state of a long-running session: each query over the JVM reader and
    Parquet, run back to back for ``seconds`` per window, the two readers' windows alternating, three rounds
    after a first (warming) round; prints the milliseconds per query of each window and the ratio of each
    round. What :func:`queries` times (a warm-up round, then ``--reps`` runs round-robin) is a session still
    compiling its code (Spark's planning and both readers' paths run partly interpreted by the JVM); here
    every path has been compiled, so what is left is each query's own cost: for a selective filter that is
    Spark's fixed cost per query (planning, two jobs, closure cleaning), the same for both readers."""
    from pylog.spark import which_reader

    if which_reader(spark) != "jvm":
        print("steady state: the JVM reader's jar is not loaded; nothing to compare")
        return
    print(f"steady state: {seconds:g} s windows of back-to-back runs, JVM reader and Parquet alternating")
    for q, (query, _, target) in QUERIES.items():
        if only and q not in only:
            continue
        # A new query object per run, as in queries(): collecting one DataFrame again reuses what its first run
        # materialized (adaptive execution keeps the finished shuffle stages), so it would time the final
        # stage alone.
        dfs = {"jvm": spark.read.format("pylog").option("subscribe", "bench").load(store_path),
               "parquet": spark.read.parquet(parquet)}
        ratios = []
        for rnd in range(4):  # round 0 warms
            ms = {}
            for variant, df in dfs.items():
                t0 = time.perf_counter()
                n = 0
                while time.perf_counter() - t0 < seconds or n == 0:
                    query(df, rows).collect()
                    n += 1
                ms[variant] = (time.perf_counter() - t0) * 1000 / n
            if rnd:
                ratios.append(ms["parquet"] / ms["jvm"])
            print(f"{q:20s} round {rnd}{' (warm-up)' if not rnd else ''}: JVM {ms['jvm']:.1f} ms, "
                  f"Parquet {ms['parquet']:.1f} ms per query: {ms['parquet'] / ms['jvm']:.2f}x")
        print(f"{q:20s} steady state JVM / Parquet: median {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f}x; the timed figure's target {target}x)")


def streams(spark: Any, root: str, store_path: str, parquet: str, rows: int, reps: int,
            results: dict[str, float]) -> None:
    """An availableNow ``readStream`` of every row into the ``noop`` sink, over the JVM reader (when its jar is
    loaded), the Python source and Spark's Parquet file stream; a warm-up round then ``reps`` rounds; rows/s
    into ``results`` as ``stream_{variant}`` (median), and ``stream_ratio`` (the median of each round's JVM /
    Parquet ratio). Every run must read every row.

    Fairness and stability: each run starts after a full GC of the driver JVM (so no run pays for the
    garbage of the one before); the JVM and Parquet runs of a round run back to back, in alternating order
    (the load of a shared machine drifts; a pair sees the same), and the Python source's run, whose Python
    workers load the cores, comes after both. Both streams must read the rows in the same number of
    micro-batches (availableNow without a read limit: one each); the micro-batches, their tasks and the
    medians of Spark's per-trigger durations (``durationMs``: the start, ``latestOffset``, planning, the read
    and sink in ``addBatch``, the offset and commit log writes) are printed: where each stream's time goes."""
    from pylog.spark import which_reader

    variants = {"parquet": lambda: spark.readStream.schema(spark.read.parquet(parquet).schema).parquet(parquet),
                "python": lambda: spark.readStream.format("pylog-python").option("subscribe", "bench")
                .option("startingOffsets", "earliest").load(store_path)}
    if which_reader(spark) == "jvm":
        variants = {"jvm": lambda: spark.readStream.format("pylog").option("subscribe", "bench")
                    .option("startingOffsets", "earliest").load(store_path), **variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    shape: dict[str, set[tuple[int, ...]]] = {v: set() for v in variants}
    phases: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    ratios: list[float] = []
    run_no = 0
    for rep in range(reps + 1):  # rep 0 warms
        order = list(variants)
        if rep % 2 and "jvm" in order:
            order[0], order[1] = order[1], order[0]   # parquet first in odd rounds
        this: dict[str, float] = {}
        for variant in order:
            run_no += 1
            secs, cpu_secs, tasks, durations = _stream_run(spark, variants[variant](),
                                                 os.path.join(root, f"stream-checkpoint-{run_no}"), rows, variant)
            if rep:
                this[variant] = secs
                times[variant].append(secs)
                cpu[variant].append(cpu_secs)
                shape[variant].add(tuple(tasks))
                for k, v in durations.items():
                    phases[variant].setdefault(k, []).append(v)
        if rep and "jvm" in this:
            ratios.append(this["parquet"] / this["jvm"])
    if "jvm" in shape:
        assert {len(s) for s in shape["jvm"]} == {len(s) for s in shape["parquet"]}, shape  # same micro-batches
    for variant, ts in times.items():
        results[f"stream_{variant}"] = rows / statistics.median(ts)
        phase = ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in phases[variant].items())
        print(f"stream availableNow {variant:8s} {statistics.median(ts):7.2f} s  "
              f"{rows / statistics.median(ts) / 1e6:6.2f} M rows/s (median of {', '.join(f'{t:.2f}' for t in ts)}); "
              f"micro-batches (tasks each) {sorted(shape[variant])}; median ms: {phase}; driver JVM CPU "
              f"{statistics.median(cpu[variant]):.2f} s (median)")
    if ratios:
        results["stream_ratio"] = statistics.median(ratios)
        print(f"stream availableNow JVM / Parquet per round: {', '.join(f'{r:.2f}x' for r in ratios)}")
        results["stream_cpu_ratio"] = statistics.median(cpu["parquet"]) / statistics.median(cpu["jvm"])
        print(f"stream availableNow JVM / Parquet in the driver JVM's CPU time (all of a local session's reading; "
              f"steadier than wall time on a shared machine): {results['stream_cpu_ratio']:.2f}x")


def _stream_run(spark: Any, df: Any, checkpoint: str, rows: int,
                variant: str) -> tuple[float, float, list[int], dict]:
    """One availableNow run of ``df`` into ``noop`` after a full GC of the driver: (seconds from ``start()``
    to its end, the driver JVM's CPU seconds meanwhile (0 without a local JVM), the tasks of each micro-batch
    that read rows, the sum over triggers of each ``durationMs`` phase plus ``start``, the time ``start()``
    took)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        jvm.System.gc()
    cpu0 = _jvm_cpu(spark)
    t0 = time.perf_counter()
    query = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
    started = time.perf_counter() - t0
    query.awaitTermination()
    secs = time.perf_counter() - t0
    cpu_secs = _jvm_cpu(spark) - cpu0
    progress = query.recentProgress
    read = sum(p["numInputRows"] for p in progress)
    assert read == rows, (variant, read, rows)  # every row, in this run
    durations: dict[str, float] = {"start": started * 1000}
    for p in progress:
        for k, v in p["durationMs"].items():
            if k != "triggerExecution":
                durations[k] = durations.get(k, 0) + v
    tracker = spark.sparkContext.statusTracker()
    tasks = []
    for job in sorted(tracker.getJobIdsForGroup(str(query.runId))):
        info = tracker.getJobInfo(job)
        stages = [tracker.getStageInfo(s) for s in info.stageIds] if info else []
        tasks.append(sum(s.numTasks for s in stages if s is not None))
    return secs, cpu_secs, [t for t in tasks if t], durations


def _jvm_cpu(spark: Any) -> float:
    """CPU seconds (user + system) the session's JVM process used so far; 0 when it is not a local process."""
    jvm = getattr(spark, "_jvm", None)
    try:
        pid = jvm.ProcessHandle.current().pid() if jvm is not None else None
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):
        return 0.0


def print_streams(results: dict[str, float]) -> None:
    j, py, pq = results.get("stream_jvm"), results["stream_python"], results["stream_parquet"]
    print()
    print("| `readStream` availableNow, 7 columns to `noop` | rows/s | / Parquet file stream (target) |")
    print("|---|---:|---:|")
    if j:
        r = results["stream_ratio"]
        print(f"| JVM reader | {j / 1e6:.2f} M/s | {j / pq:.2f}x of the medians, {r:.2f}x median of the rounds' "
              f"ratios (>= 1.5x {'✔' if min(r, j / pq) >= 1.5 else '✘'}) |")
    print(f"| Python source | {py / 1e6:.2f} M/s | {py / pq:.2f}x |")
    print(f"| Parquet file stream | {pq / 1e6:.2f} M/s | 1.00x |")


def print_queries(results: dict[str, float], only: list[str] | None = None) -> None:
    print()
    print("| query | JVM reader | Python source | Python, declared schema | Parquet | JVM / Parquet (target) | "
          "Python / Parquet | declared / Parquet |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for q, (_, declared, target) in QUERIES.items():
        if only and q not in only:
            continue
        j = results.get(f"{q}_jvm")
        py, d, pq = (results[f"{q}_{k}"] for k in ("python", "declared", "parquet"))
        jv = f"{j / 1e6:.2f} M rows/s" if j else "(no jar)"
        ratio = f"{j / pq:.2f}x (>= {target}x {'✔' if j >= target * pq else '✘'})" if j else "-"
        print(f"| `{q}` | {jv} | {py / 1e6:.2f} M/s | {d / 1e6:.2f} M/s (`{declared}`) | {pq / 1e6:.2f} M/s | "
              f"{ratio} | {py / pq:.2f}x | {d / pq:.2f}x |")


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    """Run the benchmark; ``spark`` reuses a session (the tests' fixture) instead of starting one."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--quick", action="store_true", help="40,000 rows, one rep: a smoke run (figures meaningless)")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--streams-only", action="store_true", help="only the availableNow readStream figures")
    ap.add_argument("--only", action="append", choices=list(QUERIES), metavar="QUERY",
                    help="only this issue-31 query (repeatable; one of: " + ", ".join(QUERIES).replace("%", "%%") + ")")
    ap.add_argument("--steady", type=float, default=0.0, metavar="SECONDS",
                    help="instead of the timed figures: the issue-31 queries (or --only ones) in a session's steady "
                         "state, JVM reader against Parquet in alternating windows of SECONDS of back-to-back runs")
    args = ap.parse_args(argv)
    rows, reps = (40_000, 1) if args.quick else (args.rows, args.reps)
    root = tempfile.mkdtemp(prefix="pylog-bench-spark-", dir=args.dir)
    own = spark is None
    try:
        if own:
            from pylog.spark import session

            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no network beyond the loopback
            spark = session(args.master, "pylog-bench", conf={"spark.local.dir": root, "spark.driver.memory": "4g",
                                                              "spark.driver.bindAddress": "127.0.0.1",
                                                              "spark.driver.host": "127.0.0.1"})
            spark.sparkContext.setLogLevel("ERROR")
        print(f"pylog Spark benchmark: {rows:,} rows, {VALUE_BYTES}-byte values, {PARTITIONS} partitions, "
              f"master {spark.sparkContext.master}, Python {sys.version.split()[0]}")
        run(spark, root, rows, reps, args.streams_only, args.only, args.steady)
    finally:
        if own and spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
