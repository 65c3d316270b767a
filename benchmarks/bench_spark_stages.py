"""Where an issue-31 query's time goes, per reader: Spark's task metrics per stage, from the session's event log.

Usage::

    python benchmarks/bench_spark_stages.py --dir DIR                      # group by key, 10M rows, 5 runs each
    python benchmarks/bench_spark_stages.py --dir DIR --query "offset > X (1%)" --reps 30
    python benchmarks/bench_spark_stages.py --dir DIR --variants jvm,parquet,parquet-4,jvm-8

The store and Parquet copy of ``bench_spark.py`` (``--rows`` records, 4 partitions; the Parquet copy written by
Spark from the pylog source, one file per partition) are written under ``--dir`` once and reused by later runs
with the same ``--rows``. Each variant's query (``bench_spark.QUERIES``) runs round-robin in one ``local[*]``
session with Spark's event log on (under ``--dir``), a warm-up round and then ``--reps`` runs; the variants:

- ``jvm``: the JVM reader (one task per partition); ``jvm-8``: the same with ``minPartitions=8``;
- ``parquet``: Parquet as Spark plans it (``spark.sql.files.maxPartitionBytes`` 128 MiB: 9 tasks at 10M rows);
  ``parquet-4`` / ``parquet-8``: Parquet planned as one task per file (300 MiB) / two per file (140 MiB).

Printed per variant, medians over the runs: the query's wall time; for each stage of the query in order (the
one that reads input marked "scan"), the tasks, the summed executor run time, CPU time and GC time, the
largest peak execution memory of a task, bytes spilled and shuffle write time; for the whole query the jobs,
the time from the SQL execution's start to its first job (Spark's planning, with the reader's), each job's
duration and the summed task CPU. Nothing asserts except that every variant gives the same answer.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_spark  # noqa: E402

#: variant -> (reader options for the JVM reader, or None for Parquet; Parquet's maxPartitionBytes)
VARIANTS: dict[str, tuple[dict[str, str] | None, str]] = {
    "jvm": ({}, "128m"), "jvm-8": ({"minPartitions": "8"}, "128m"),
    "parquet": (None, "128m"), "parquet-4": (None, "300m"), "parquet-8": (None, "140m"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="the store, its Parquet copy and the event logs (kept)")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--query", default="group by key", choices=list(bench_spark.QUERIES))
    ap.add_argument("--variants", default="jvm,parquet,parquet-4", help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable), e.g. "
                         "spark.sql.execution.bypassPartialAggregation=true")
    args = ap.parse_args(argv)
    from pylog.spark import session

    data = os.path.join(os.path.abspath(args.dir), f"rows-{args.rows}")
    store, parquet = os.path.join(data, "store"), os.path.join(data, "parquet")
    events = os.path.join(data, "events", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(events)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = session("local[*]", "pylog-bench-stages", conf={
        "spark.local.dir": os.path.join(data, "tmp"), "spark.driver.memory": "4g",
        "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + events,
        "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
        **dict(c.split("=", 1) for c in args.conf)})
    spark.sparkContext.setLogLevel("ERROR")
    if spark.sparkContext.getConf().get("spark.eventLog.dir", "") != "file://" + events:
        raise SystemExit("bench_spark_stages.py needs a Spark session of its own (its event log): run it as a script")
    try:
        if not os.path.exists(os.path.join(parquet, "_SUCCESS")):
            bench_spark.make_store(store, args.rows)
            spark.read.format("pylog").option("subscribe", "bench").load(store).write.mode("overwrite").parquet(parquet)
        query = bench_spark.QUERIES[args.query][0]
        names = args.variants.split(",")
        dfs = {}
        for name in names:
            options, split = VARIANTS[name]
            spark.conf.set("spark.sql.files.maxPartitionBytes", split)
            dfs[name] = (spark.read.parquet(parquet) if options is None else
                         spark.read.format("pylog").option("subscribe", "bench").options(**options).load(store))
        walls: dict[str, list[float]] = {n: [] for n in names}
        answers = set()
        for rep in range(args.reps + 1):   # rep 0 warms; the order rotates so that no variant always runs first
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                spark.conf.set("spark.sql.files.maxPartitionBytes", VARIANTS[name][1])
                spark.sparkContext.setJobDescription(f"{name}:{rep}")
                t0 = time.perf_counter()
                answers.add(tuple(query(dfs[name], args.rows).collect()[0]))
                if rep:
                    walls[name].append(time.perf_counter() - t0)
        assert len(answers) == 1, answers
    finally:
        spark.stop()
    print(f"{args.query}, {args.rows:,} rows, median of {args.reps} runs per variant (after a warm-up round)"
          f"{', ' + ', '.join(args.conf) if args.conf else ''}")
    report(events, walls)
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


def report(events: str, walls: dict[str, list[float]]) -> None:
    """Per variant, the medians over its timed runs (job descriptions ``variant:rep``, rep 0 left out)."""
    stage_desc: dict[int, str] = {}
    jobs: dict[str, list[list[Any]]] = collections.defaultdict(list)
    tasks: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    sql: dict[int, int] = {}
    job_desc: dict[int, str] = {}
    for path in glob.glob(os.path.join(events, "**", "*"), recursive=True):
        if not os.path.isfile(path) or "appstatus" in os.path.basename(path):
            continue
        with open(path) as f:
            for line in f:
                e = json.loads(line)
                kind = e["Event"]
                if kind == "SparkListenerJobStart":
                    props = e.get("Properties", {})
                    desc = props.get("spark.job.description", "")
                    job_desc[e["Job ID"]] = desc
                    jobs[desc].append([e["Job ID"], e["Submission Time"], None, e["Stage IDs"],
                                       props.get("spark.sql.execution.id")])
                    for s in e["Stage IDs"]:
                        stage_desc[s] = desc
                elif kind == "SparkListenerJobEnd":
                    for j in jobs[job_desc[e["Job ID"]]]:
                        if j[0] == e["Job ID"]:
                            j[2] = e["Completion Time"]
                elif kind == "SparkListenerTaskEnd" and e.get("Task Metrics"):
                    tasks[e["Stage ID"]].append(e["Task Metrics"])
                elif kind.endswith("SQLExecutionStart"):
                    sql[e["executionId"]] = e["time"]
    per: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for desc, js in jobs.items():
        name, _, rep = desc.partition(":")
        if name not in walls or rep in ("", "0"):
            continue
        m = per[name]
        for i, s in enumerate(sorted({s for j in js for s in j[3] if tasks.get(s)})):
            ts = tasks[s]
            reads = sum(t.get("Input Metrics", {}).get("Records Read", 0) for t in ts)
            stage = f"stage {i + 1}{' (scan)' if reads else ''}"
            m[f"{stage}.tasks"].append(len(ts))
            m[f"{stage}.run ms"].append(sum(t["Executor Run Time"] for t in ts))
            m[f"{stage}.cpu ms"].append(sum(t["Executor CPU Time"] for t in ts) / 1e6)
            m[f"{stage}.gc ms"].append(sum(t["JVM GC Time"] for t in ts))
            m[f"{stage}.peak MB"].append(max(t.get("Peak Execution Memory", 0) for t in ts) / 1e6)
            m[f"{stage}.spilled MB"].append(sum(t["Memory Bytes Spilled"] + t["Disk Bytes Spilled"] for t in ts) / 1e6)
            m[f"{stage}.shuffle write ms"].append(
                sum(t.get("Shuffle Write Metrics", {}).get("Shuffle Write Time", 0) for t in ts) / 1e6)
        first = min(j[1] for j in js)
        if js[0][4] is not None and int(js[0][4]) in sql:
            m["query.start to first job ms"].append(first - sql[int(js[0][4])])
        m["query.jobs"].append(len(js))
        for i, j in enumerate(sorted(js, key=lambda j: j[1])):
            m[f"query.job {i + 1} ms"].append(j[2] - j[1])
        m["query.task cpu ms"].append(sum(t["Executor CPU Time"] for j in js for s in j[3] for t in tasks.get(s, []))
                                      / 1e6)
    base = statistics.median(walls["parquet"]) if "parquet" in walls else None
    for name, ts in walls.items():
        ratio = f", Parquet / this {base / statistics.median(ts):.2f}x" if base else ""
        print(f"{name}: wall {statistics.median(ts) * 1000:.0f} ms (runs: "
              f"{', '.join(f'{t * 1000:.0f}' for t in ts)}){ratio}")
        for key in sorted(per[name]):
            print(f"    {key:28s} {statistics.median(per[name][key]):9.1f}")


if __name__ == "__main__":
    sys.exit(main())
