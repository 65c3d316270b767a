"""``trigger(continuous=...)`` on the JVM reader (pylog/java/.../PylogContinuous.java), and where it is refused.

A continuous query runs one long task per pylog partition; each reads the partition's visible records and
polls for more. The sink is Spark's ``memory`` sink, which runs in continuous mode inside the JVM (Python's
``foreach`` cannot: PySpark's foreach writer needs a micro-batch id); pylog's own writer cannot, and says so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import pylog

pytestmark = pytest.mark.spark

#: Bounds every wait on a continuous query (a loaded 2-core machine starts its tasks in seconds to tens of seconds).
WAIT_S = 240


def _produce(path: Path, topic: str, first: int, count: int) -> None:
    with pylog.open(path) as store:
        producer = store.producer()
        for i in range(first, first + count):
            producer.send(topic, value=b"v%d" % i, key=None if i % 4 == 0 else b"k%d" % (i % 5),
                          headers=[("n", b"%d" % i)] if i % 3 == 0 else None, partition=i % 2,
                          timestamp_ms=1_700_000_000_000 + i)
        producer.flush()
        producer.close()


def _rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[2], r[3], r[4]))   # topic, partition, offset


def _wait_for_rows(spark, table: str, done, query) -> list[tuple]:
    """The memory sink's rows once ``done(rows)`` (the query failing or the deadline fails the test)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        rows = _rows(spark.table(table))
        if done(rows):
            return rows
        assert query.isActive, query.exception()
        assert time.monotonic() < deadline, f"{len(rows)} rows after {WAIT_S} s"
        query.awaitTermination(0.5)   # returns at once if the query died (then isActive says so above)


def _stop(query) -> None:
    started = time.monotonic()
    query.stop()
    assert not query.isActive
    assert time.monotonic() - started < WAIT_S


def _fails_with(query, pattern: str) -> None:
    """``query`` ends with an error matching ``pattern`` within WAIT_S, then stops in bounded time."""
    try:
        with pytest.raises(Exception, match=pattern):
            query.awaitTermination(WAIT_S)
    finally:
        _stop(query)


def _offsets_of_last_commit(checkpoint: Path) -> dict:
    """The source offsets of the last epoch the checkpoint's commit log holds (Spark's offset log layout: a
    version line, the metadata line, then one line per source)."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()
    return json.loads(lines[2])


def test_continuous_query_reads_records_appended_while_it_runs_row_for_row(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("in", partitions=2, config={"segment.bytes": 2048})   # several segments per partition
    _produce(path, "in", 0, 20)
    checkpoint = tmp_path / "checkpoint"

    query = (spark.readStream.format(jvm_reader).option("subscribe", "in").option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load(str(path))
             .writeStream.format("memory").queryName("continuous_rows").option("checkpointLocation", str(checkpoint))
             .trigger(continuous="1 second").start())
    try:
        _wait_for_rows(spark, "continuous_rows", lambda rows: len(rows) >= 20, query)
        _produce(path, "in", 20, 60)          # appended while the query runs: the tasks poll the visible end
        seen = _wait_for_rows(spark, "continuous_rows", lambda rows: len(rows) >= 80, query)
    finally:
        _stop(query)
    batch = _rows(spark.read.format("pylog-python").option("subscribe", "in").option("includeHeaders", "true")
                  .load(str(path)))
    assert len(batch) == 80
    assert seen == batch                      # every column of every row, each once

    # epochs' offsets are the micro-batch stream's JSON, each partition's next offset to read (Spark's memory
    # sink cannot restart from a checkpoint, so a restart is not tried here)
    committed = _offsets_of_last_commit(checkpoint)
    assert set(committed) == {"in"} and set(committed["in"]) == {"0", "1"}
    assert all(0 <= committed["in"][p] <= 40 for p in ("0", "1"))


def test_continuous_trigger_is_refused_where_it_cannot_run(spark, jvm_reader, tmp_path):
    """The Python source has no continuous mode (Spark refuses it by name), nor has the JVM reader at
    read_committed (refused by name), and pylog's writer (Python) fails the query at its first row instead of
    letting Spark drop the rows (or, as ``pylog-python``, refuses every epoch's commit)."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("in", partitions=2)
        store.create_topic("out", partitions=1)
    _produce(path, "in", 0, 4)

    def stream(fmt, **options):
        return (spark.readStream.format(fmt).option("subscribe", "in").option("startingOffsets", "earliest")
                .options(**options).load(str(path)))

    for fmt, options, expected in (("pylog-python", {}, "Data source pylog-python does not support continuous"),
                                   (jvm_reader, {"kafka.isolation.level": "read_committed"},
                                    "kafka.isolation.level.*not supported with the continuous trigger")):
        with pytest.raises(Exception, match=expected):
            query = (stream(fmt, **options).writeStream.format("memory").queryName("refused")
                     .option("checkpointLocation", str(tmp_path / f"ck-{fmt}")).trigger(continuous="1 second").start())
            try:
                query.awaitTermination(WAIT_S)
            finally:
                query.stop()

    query = (stream(jvm_reader).selectExpr("value").writeStream.format("pylog").option("topic", "out")
             .option("checkpointLocation", str(tmp_path / "ck-sink")).trigger(continuous="1 second").start(str(path)))
    _fails_with(query, r"pylog\.errors\.InvalidConfigError: writeStream\.format\('pylog'\) "
                       r"cannot run with trigger\(continuous=\.\.\.\)")
    # the Python writer alone (no JVM sink around it) gets no rows and refuses each epoch's commit: Spark keeps
    # the query running, but records no epoch as done
    query = (stream(jvm_reader).selectExpr("value").writeStream.format("pylog-python").option("topic", "out")
             .option("checkpointLocation", str(tmp_path / "ck-python")).trigger(continuous="1 second")
             .start(str(path)))
    try:
        deadline = time.monotonic() + WAIT_S
        while len(list((tmp_path / "ck-python" / "offsets").glob("[0-9]*"))) < 3:   # epochs that ended
            assert time.monotonic() < deadline and query.isActive, query.exception()
            query.awaitTermination(0.5)
    finally:
        _stop(query)
    with pylog.open(path) as store:
        assert store.topic("out").partition(0).log_end_offset == 0
    for checkpoint in ("ck-sink", "ck-python"):
        assert not any((tmp_path / checkpoint / "commits").glob("[0-9]*"))


def test_continuous_query_starts_where_starting_offsets_say_and_fails_on_data_loss(spark, jvm_reader, tmp_path):
    """``startingOffsets`` per partition as in micro-batches; offsets already removed when the query starts
    fail it with the micro-batch stream's DataLossError under ``failOnDataLoss`` (the default)."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("in", partitions=2)
    _produce(path, "in", 0, 20)               # 10 records in each partition
    with pylog.open(path) as store:
        store.delete_records("in", 1, 4)

    def start(name, **options):
        return (spark.readStream.format(jvm_reader).option("subscribe", "in").options(**options).load(str(path))
                .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / name))
                .trigger(continuous="1 second").start())

    query = start("continuous_from", startingOffsets='{"in": {"0": 7, "1": -2}}')
    try:
        rows = _wait_for_rows(spark, "continuous_from", lambda rows: len(rows) >= 9, query)
    finally:
        _stop(query)
    assert [(r[3], r[4]) for r in rows] == [(0, 7), (0, 8), (0, 9)] + [(1, o) for o in range(4, 10)]

    query = start("continuous_lost", startingOffsets='{"in": {"0": 0, "1": 2}}')
    _fails_with(query, r"pylog\.errors\.DataLossError: in-1: offsets \[2, 4\) were removed "
                       r"before the query started \(the log now starts at 4\)")


@pytest.mark.slow
def test_continuous_query_reads_a_partition_added_while_it_runs(spark, jvm_reader, tmp_path):
    """A partition added to a subscribed topic makes Spark re-plan the tasks (needsReconfiguration); the new
    one is read from its log start, the others continue where their last epoch ended (Spark replays from the
    last committed epoch across the re-plan, at-least-once: rows are compared as a set)."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("grow", partitions=1)
        store.topic("grow").partition(0).append_values([b"a%d" % i for i in range(5)])
    query = (spark.readStream.format(jvm_reader).option("subscribe", "grow").option("startingOffsets", "earliest")
             .load(str(path)).writeStream.format("memory").queryName("continuous_grow")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(continuous="1 second").start())
    try:
        _wait_for_rows(spark, "continuous_grow", lambda rows: len(rows) >= 5, query)
        with pylog.open(path) as store:
            store.topic("grow").add_partitions(2)
            store.topic("grow").partition(1).append_values([b"b%d" % i for i in range(3)])
            store.topic("grow").partition(0).append_values([b"a5"])
        rows = _wait_for_rows(spark, "continuous_grow", lambda rows: len({(r[3], r[4]) for r in rows}) >= 9, query)
    finally:
        _stop(query)
    assert {(r[3], r[4], bytes(r[1])) for r in rows} == \
        {(0, i, b"a%d" % i) for i in range(6)} | {(1, i, b"b%d" % i) for i in range(3)}
