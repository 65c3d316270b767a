"""The JVM reader's own CPU per row: pylog's share of a Spark scan or stream, with Spark's share left out.

Usage::

    python benchmarks/bench_jvm_reader.py --dir DIR --rows 4000000 --rounds 8

The store is bench_spark.py's (``--rows`` records, 100-byte values, 8-byte keys, 4 partitions). One JVM
thread reads every partition through the reader's ``ColumnarReader`` into Spark's column vectors, as a task
does, with nothing else (benchmarks/jvm/ReaderCpu.java, compiled here against the reader's jar and the jars
pyspark ships); each round prints the thread's CPU time per row, for all seven columns (what an
``availableNow`` stream of the Kafka schema reads) and for ``value`` alone (``sum(length(value))``). Thread
CPU time, not wall time: the figure holds on a loaded machine, and compares two trees of the reader run one
after the other (the first rounds warm the JIT: the median of the later half is printed). Needs a JDK.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pylog import jvm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    javac, java = shutil.which("javac"), shutil.which("java")
    if not javac or not java:
        print("no JDK on PATH: nothing to measure")
        return 1
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations, "pyspark is not installed"
    classpath = os.pathsep.join([jvm.ensure_jar(), os.path.join(list(spec.submodule_search_locations)[0], "jars", "*")])
    root = tempfile.mkdtemp(prefix="pylog-bench-jvm-reader-", dir=args.dir)
    try:
        bench = importlib.util.spec_from_file_location("bench_spark", os.path.join(HERE, "bench_spark.py"))
        assert bench is not None and bench.loader is not None
        module = importlib.util.module_from_spec(bench)
        bench.loader.exec_module(module)
        store = os.path.join(root, "store")
        module.make_store(store, args.rows)
        classes = os.path.join(root, "classes")
        subprocess.run([javac, "-nowarn", "-d", classes, "-cp", classpath,
                        os.path.join(HERE, "jvm", "ReaderCpu.java")], check=True)
        print(f"JVM reader alone: {args.rows:,} rows in {module.PARTITIONS} partitions, one thread, {jvm.jar_path()}")
        for columns in ("all", "value"):
            out = subprocess.run([java, "-Xmx2g", "-cp", os.pathsep.join([classes, classpath]),
                                  "org.pylog.spark.ReaderCpu", store, "bench", str(module.PARTITIONS),
                                  str(args.rows // module.PARTITIONS), str(args.rounds), columns],
                                 check=True, capture_output=True, text=True).stdout
            per_row = [float(x) for x in re.findall(r"([0-9.]+) ns of CPU per row", out)]
            later = per_row[len(per_row) // 2:]
            print(f"columns {columns:6s} {statistics.median(later):6.1f} ns of CPU per row (median of rounds "
                  f"{len(per_row) - len(later)}..{len(per_row) - 1}: {', '.join(f'{x:.1f}' for x in later)})")
        print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
