"""``writeStream.format("pylog")`` exactly-once under Spark: micro-batches re-run after a restart, task attempts
retried, a whole Spark application SIGKILLed mid-stream and restarted from its checkpoint. Every record of the
source lands once for a read_committed reader. (The protocol step by step, without a JVM:
tests/test_spark_exactly_once.py.)"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_sink_child.py")


def _source(path, partitions=3, per_partition=300) -> list[bytes]:
    written = []
    with pylog.open(path) as store:
        src = store.create_topic("src", partitions=partitions)
        store.create_topic("out", partitions=2)
        for p in range(partitions):
            vals = [b"p%d-%d" % (p, i) for i in range(per_partition)]
            src.partition(p).append_values(vals, keys=[b"%d" % i for i in range(per_partition)])
            written += vals
    return written


def _out(path, isolation_level="read_committed") -> list[bytes]:
    out = []
    with pylog.open(path, read_only=True) as store:
        for p in store.topic("out").partitions:
            pos = p.log_start_offset
            while recs := p.read(pos, 100_000, isolation_level=isolation_level):
                out += [r.value for r in recs]
                pos = recs[-1].offset + 1
    return out


def _no_open_transactions(path) -> bool:
    with pylog.open(path, read_only=True) as store:
        return all(p.last_stable_offset == p.log_end_offset for p in store.topic("out").partitions)


def _copy_available_now(spark, path, checkpoint, max_offsets=400):
    query = (spark.readStream.format("pylog").option("subscribe", "src").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(max_offsets)).load(path).select("value", "key")
             .writeStream.format("pylog").option("topic", "out").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(path))
    query.awaitTermination()
    assert query.exception() is None
    return query


def test_restart_rerunning_committed_micro_batch_lands_each_record_once(spark, tmp_path):
    path, checkpoint = str(tmp_path / "store"), str(tmp_path / "checkpoint")
    written = _source(path)
    _copy_available_now(spark, path, checkpoint)
    assert Counter(_out(path)) == Counter(written)
    with pylog.open(path, read_only=True) as store:
        ends = [p.log_end_offset for p in store.topic("out").partitions]
    # Spark wrote its commit record of the last micro-batch after the sink's commit returned. Without it (a
    # driver that died in between), the restarted query runs that batch again, with the same id and offsets.
    commits = os.path.join(checkpoint, "commits")
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):  # the record and Hadoop's checksum of it
        os.remove(os.path.join(commits, name))
    query = _copy_available_now(spark, path, checkpoint)
    assert [p["batchId"] for p in query.recentProgress if p["numInputRows"]] == [last]  # the batch did re-run
    with pylog.open(path, read_only=True) as store:
        assert [p.log_end_offset for p in store.topic("out").partitions] == ends  # and wrote nothing
    assert Counter(_out(path)) == Counter(_out(path, "read_uncommitted")) == Counter(written)
    assert _no_open_transactions(path)
    committed = (spark.read.format("pylog").option("subscribe", "out").option("kafka.isolation.level", "read_committed")
                 .load(path).select("value").collect())
    assert Counter(bytes(r.value) for r in committed) == Counter(written)  # Spark's read_committed reader too


def test_at_least_once_stream_appends_without_transactions(spark, tmp_path):
    path, checkpoint = str(tmp_path / "store"), str(tmp_path / "checkpoint")
    written = _source(path, partitions=1, per_partition=200)
    query = (spark.readStream.format("pylog").option("subscribe", "src").option("startingOffsets", "earliest")
             .load(path).select("value").writeStream.format("pylog").option("topic", "out")
             .option("deliveryGuarantee", "at-least-once").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(path))
    query.awaitTermination()
    assert sorted(_out(path)) == sorted(written)
    with pylog.open(path, read_only=True) as store:
        assert store.list_transactions() == []


def _child(path, checkpoint, scratch, mode):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, CHILD, path, checkpoint, scratch, mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)


@pytest.mark.slow
def test_task_attempts_failing_once_are_retried_without_duplicates(tmp_path):
    path, checkpoint, scratch = str(tmp_path / "store"), str(tmp_path / "checkpoint"), str(tmp_path / "scratch")
    written = _source(path)
    child = _child(path, checkpoint, scratch, "retry")
    try:
        out, _ = child.communicate(timeout=600)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 0, out
    assert len(os.listdir(os.path.join(scratch, "markers"))) >= 3  # every task's first attempt failed
    assert Counter(_out(path)) == Counter(written)
    assert _no_open_transactions(path)


@pytest.mark.slow
def test_spark_application_sigkilled_mid_stream_restarts_exactly_once(spark, tmp_path):
    path, checkpoint, scratch = str(tmp_path / "store"), str(tmp_path / "checkpoint"), str(tmp_path / "scratch")
    written = _source(path, partitions=3, per_partition=600)  # 1800 records: 12 micro-batches of 150
    child = _child(path, checkpoint, scratch, "forever")
    commits = os.path.join(checkpoint, "commits")
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and child.poll() is None:
            if os.path.isdir(commits) and sum(n.isdigit() for n in os.listdir(commits)) >= 2:
                break
            time.sleep(0.2)  # polling the checkpoint another process writes: there is no handshake to wait on
        assert child.poll() is None, "the streaming child ended before two micro-batches"
        time.sleep(random.uniform(0, 1.5))  # somewhere in a later micro-batch: tasks, commits, or between
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    done = sum(n.isdigit() for n in os.listdir(commits))
    assert done < 12, "the child finished before it was killed: nothing was interrupted"
    _copy_available_now(spark, path, checkpoint, max_offsets=150)
    assert Counter(_out(path)) == Counter(written)
    assert len(_out(path, "read_uncommitted")) >= len(written)
    assert _no_open_transactions(path)


def test_sink_benchmark_quick_run(spark, tmp_path, capsys):
    """benchmarks/bench_spark_sink.py --quick runs in the tests' session and prints both modes and the ratio."""
    spec = importlib.util.spec_from_file_location(
        "bench_spark_sink", os.path.join(os.path.dirname(os.path.dirname(CHILD)), "benchmarks", "bench_spark_sink.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--dir", str(tmp_path)], spark=spark) == 0
    out = capsys.readouterr().out
    for figure in ("exactly-once  ", "at-least-once  ", "| ratio | exactly-once / at-least-once", "load average"):
        assert figure in out
    assert not list(tmp_path.iterdir())  # the run's directory is removed
