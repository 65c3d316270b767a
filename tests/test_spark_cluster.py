"""Executors in separate JVMs read and write the store from its path: Spark's ``local-cluster[2,1,1024]``.

Run: ``python -m pytest tests/test_spark_cluster.py -q`` (needs Java).

A process can hold one SparkContext, and the session fixture's is ``local[2]``, so the cluster runs in a
child process (:data:`SCRIPT`). It reads a store of 20,000 records through the pylog source with 4 tasks
and reports the process ids of the JVMs that ran the read tasks: they must be executors, not the driver.
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
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

path, scratch = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("pylog-cluster-test")
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
df = spark.read.format("pylog").option("subscribe", "c").option("minPartitions", "4").load(path)
rows = df.select("value", pid().alias("jvm")).collect()
print(json.dumps({
    "rows": len(rows), "distinct": len({r.value for r in rows}),
    "task_jvms": sorted({r.jvm for r in rows}),
    "driver_jvm": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(),
    "executors": spark.sparkContext._jsc.sc().getExecutorIds().size(),
}))
spark.stop()
'''


def test_local_cluster_executors_read_the_store_by_path(tmp_path):
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        topic = store.create_topic("c", partitions=2)
        for p in range(2):
            topic.partition(p).append_values([b"%d-%d" % (p, i) for i in range(10_000)])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, path, str(scratch)], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("\tat "))[-6000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["executors"] == 2
    assert report["rows"] == report["distinct"] == 20000
    assert report["task_jvms"] and report["driver_jvm"] not in report["task_jvms"]
