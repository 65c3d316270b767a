"""Executors in separate JVMs read and write the store from its path: Spark's ``local-cluster[2,1,1024]``.

Run: ``python -m pytest tests/test_spark_cluster.py -q`` (needs Java).

A process can hold one SparkContext, and the session fixture's is ``local[2]``, so the cluster runs in a
child process (:data:`SCRIPT`), with neither ``PYSPARK_PYTHON`` nor ``PYSPARK_DRIVER_PYTHON`` set and a
``python3`` on ``PATH`` that is not this interpreter: importing ``pylog.spark`` must point the workers here. It reads a store of 20,000 records through the pylog source with 4 tasks
and reports the process ids of the JVMs that ran the read tasks: they must be executors, not the driver.
It reads twice: with ``format("pylog")``, the JVM reader, whose jar ``spark.jars`` ships to the executors (when
there is a JDK: the jar the shared session built), and with ``format("pylog-python")``, the Python source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402

SCRIPT = r'''
import json, os, sys
import pylog.spark  # before the session: points the workers at this interpreter (python3 on PATH has no pylog)
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

path, scratch, jar = sys.argv[1], sys.argv[2], sys.argv[3]
spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("pylog-cluster-test")
         .config("spark.jars", jar)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.local.dir", scratch)
         .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1 -Djava.io.tmpdir=" + scratch)
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -Djava.io.tmpdir=" + scratch)
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")


def jvm_pid():
    # A Python worker is forked by its executor's daemon, whose parent is the executor JVM.
    with open(f"/proc/{os.getppid()}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


pid = udf(jvm_pid, "long")
# getOrCreate returns before local-cluster's executors have registered with the driver; Spark offers no
# handshake for that from Python, so the count is polled, bounded, before it is reported.
import time
deadline = time.monotonic() + 240
while spark.sparkContext._jsc.sc().getExecutorIds().size() < 2 and time.monotonic() < deadline:
    time.sleep(0.1)
report = {"driver_jvm": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(),
          "executors": spark.sparkContext._jsc.sc().getExecutorIds().size()}
for fmt in ("pylog", "pylog-python"):
    df = spark.read.format(fmt).option("subscribe", "c").option("minPartitions", "4").load(path)
    rows = df.select("value", pid().alias("jvm")).collect()
    report[fmt] = {"rows": len(rows), "distinct": len({r.value for r in rows}), "task_jvms": sorted({r.jvm for r in rows}),
                   "plan": df._jdf.queryExecution().executedPlan().toString()}
print(json.dumps(report))
spark.stop()
'''


def test_local_cluster_executors_read_the_store_by_path(tmp_path, jvm_jar):
    jar = jvm_jar
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        topic = store.create_topic("c", partitions=2)
        for p in range(2):
            topic.partition(p).append_values([b"%d-%d" % (p, i) for i in range(10_000)])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # As a virtualenv's interpreter run without activating the virtualenv: python3 on PATH is another Python,
    # without pylog, and nothing names this one (issue 17: the format was not found).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\necho 'not the interpreter with pylog' >&2\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, path, str(scratch), jar or ""], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("\tat "))[-6000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["executors"] == 2
    for fmt in ("pylog", "pylog-python"):
        read = report[fmt]
        assert read["rows"] == read["distinct"] == 20000
        assert read["task_jvms"] and report["driver_jvm"] not in read["task_jvms"]
    assert ("JVM reader" in report["pylog"]["plan"]) == (jar is not None)
    assert "JVM reader" not in report["pylog-python"]["plan"]
