"""Streaming through Spark: ``spark.readStream.format("pylog")`` and ``writeStream.format("pylog")``.

Run: ``python -m pytest tests/test_spark_stream.py -q`` (needs Java; uses the session ``spark`` fixture).

The main scenario runs ``trigger(availableNow=True)`` three times over one checkpoint while the log
grows (and gains a partition) between runs, copying into another pylog topic with the streaming sink:
every source record must arrive exactly once.
"""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402


def _stream(spark, path, **options):
    reader = spark.readStream.format("pylog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def _values(path, topic):
    with pylog.open(path) as store:
        t = store.topic(topic)
        return [r.value for p in range(t.num_partitions) for r in t.partition(p).read(0, max_records=10 ** 6)]


def test_available_now_three_runs_one_checkpoint_exactly_once(spark, tmp_path):
    path = str(tmp_path / "store")
    checkpoint = str(tmp_path / "checkpoint")
    with pylog.open(path) as store:
        store.create_topic("src", partitions=2)
        store.create_topic("copy", partitions=3)
    written = []
    batches = []
    for run in range(3):
        with pylog.open(path) as store:
            src = store.topic("src")
            if run == 1:
                src.add_partitions(3)  # a new partition: read from its earliest offset
            for p in range(src.num_partitions):
                vals = [b"r%d-p%d-%d" % (run, p, i) for i in range(400 + 100 * p)]
                src.partition(p).append_values(vals)
                written += vals
        query = (_stream(spark, path, subscribe="src", startingOffsets="earliest", maxOffsetsPerTrigger="500")
                 .selectExpr("value", "cast(partition as string) as key")
                 .writeStream.format("pylog").option("topic", "copy").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(path))
        query.awaitTermination()
        assert query.exception() is None
        batches += [p["numInputRows"] for p in query.recentProgress]
    copied = _values(path, "copy")
    assert Counter(copied) == Counter(written)  # every record exactly once
    assert len(copied) == len(written) == 900 + 1500 + 1500
    assert max(batches) <= 500 and sum(batches) == len(written)  # maxOffsetsPerTrigger held


def test_stream_offsets_timestamps_and_data_loss(spark, tmp_path):
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        p = store.create_topic("t", partitions=1).partition(0)
        p.append_values([b"%d" % i for i in range(100)], timestamps=[1000 + i for i in range(100)])
    out = str(tmp_path / "out")

    def run(name, **options):
        q = (_stream(spark, path, subscribe="t", **options).selectExpr("offset")
             .writeStream.format("parquet").option("path", f"{out}/{name}")
             .option("checkpointLocation", f"{out}/{name}-ck").trigger(availableNow=True).start())
        q.awaitTermination()
        return sorted(r.offset for r in spark.read.parquet(f"{out}/{name}").collect())

    assert run("json", startingOffsets='{"t": {"0": 95}}') == list(range(95, 100))
    assert run("ts", startingTimestamp="1097") == [97, 98, 99]
    with pylog.open(path) as store:
        store.delete_records("t", 0, 50)
    with pytest.raises(Exception, match=r"t-0: offsets \[10, 50\) were removed before the query started"):
        run("lost", startingOffsets='{"t": {"0": 10}}')
    assert run("skipped", startingOffsets='{"t": {"0": 10}}', failOnDataLoss="false") == list(range(50, 100))


def test_latest_start_reads_only_new_records(spark, tmp_path):
    path = str(tmp_path / "store")
    checkpoint = str(tmp_path / "ck")
    with pylog.open(path) as store:
        store.create_topic("t", partitions=1).partition(0).append_values([b"old"] * 10)
    seen = []

    def run():
        q = (_stream(spark, path, subscribe="t").writeStream
             .foreachBatch(lambda df, _: seen.extend(bytes(r.value) for r in df.collect()))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        q.awaitTermination()

    run()  # the first run only fixes the start at the log end
    with pylog.open(path) as store:
        store.topic("t").partition(0).append_values([b"new1", b"new2"])
    run()
    assert seen == [b"new1", b"new2"]
