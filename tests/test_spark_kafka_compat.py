"""Where a Kafka user relies on Spark's Kafka source and sink, the pylog format behaves the same (issue 17).

Run: ``python -m pytest tests/test_spark_kafka_compat.py -q`` (needs Java; uses the session ``spark`` fixture).

One test per difference found by trying pylog as a Kafka user would, each through Spark end to end: the
``topic`` option beats the column; a Kafka job's options are accepted and ignored; the default save mode
appends; ``maxOffsetsPerTrigger`` is ignored by batch reads; per-partition JSON must name every partition;
workers that cannot import pylog are pointed at this interpreter; remote paths are refused by scheme; a
missing topic fails on the driver, or is created with ``autoCreateTopics``. Then column pruning through a
declared schema.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402
from pylog.spark import options as spark_options  # noqa: E402


@pytest.fixture
def store_path(tmp_path):
    """Topics ``a`` (2 partitions, 10 records each, keyed), ``w1`` and ``w2`` (1 partition each, empty)."""
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        store.create_topic("a", partitions=2)
        for p in range(2):
            store.topic("a").partition(p).append_values([b"a%d-%d" % (p, i) for i in range(10)],
                                                         keys=[b"k%d" % i for i in range(10)])
        store.create_topic("w1", partitions=1)
        store.create_topic("w2", partitions=1)
    return path


def _values(path, topic):
    with pylog.open(path) as store:
        t = store.topic(topic)
        return sorted(r.value for p in range(t.num_partitions) for r in t.partition(p).read(0))


def _load(spark, path, **options):
    reader = spark.read.format("pylog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def test_1_topic_option_overrides_the_topic_column(spark, store_path):
    df = spark.createDataFrame([("w1", "x"), ("w1", "y")], "topic string, value string")
    df.write.format("pylog").option("topic", "w2").mode("append").save(store_path)
    assert _values(store_path, "w2") == [b"x", b"y"] and _values(store_path, "w1") == []
    df.write.format("pylog").mode("append").save(store_path)  # no option: the column decides
    assert _values(store_path, "w1") == [b"x", b"y"]


def test_2_kafka_job_options_are_ignored_and_misspellings_named(spark, store_path, caplog):
    kafka_job = {"kafka.bootstrap.servers": "broker:9092", "groupIdPrefix": "job", "minOffsetsPerTrigger": "5",
                 "maxTriggerDelay": "1m", "fetchOffset.numRetries": "3", "kafkaConsumer.pollTimeoutMs": "100"}
    assert _load(spark, store_path, subscribe="a", **kafka_job).count() == 20
    spark.createDataFrame([("v",)], "value string").write.format("pylog").options(**kafka_job) \
        .option("topic", "w1").mode("append").save(store_path)
    assert _values(store_path, "w1") == [b"v"]
    with pytest.raises(Exception, match=r"option 'startingoffset': unknown option for reads; did you mean "
                                        r"'startingOffsets'\?"):
        _load(spark, store_path, subscribe="a", startingOffset="earliest")
    with pytest.raises(Exception, match=r"option 'startingOffsets': 'latest' is not allowed"):  # camelCase shown
        _load(spark, store_path, subscribe="a", STARTINGOFFSETS="latest").count()
    # the warning, once per process, names every ignored option (here checked in this process)
    spark_options._warned.clear()
    with caplog.at_level("WARNING", logger="pylog.spark"):
        spark_options.parse_read_options({"path": store_path, "subscribe": "a",
                                          **{k.lower(): v for k, v in kafka_job.items()}})
    assert [r.getMessage() for r in caplog.records] == [
        "pylog: ignoring options fetchOffset.numRetries, groupIdPrefix, kafka.bootstrap.servers, "
        "kafkaConsumer.pollTimeoutMs, maxTriggerDelay, minOffsetsPerTrigger for batch reads (Kafka settings "
        "pylog has no use for; see the options table in docs/SPARK.md)"]


def test_3_default_save_mode_appends(spark, store_path):
    df = spark.createDataFrame([("d1",)], "value string")
    df.write.format("pylog").option("topic", "w1").save(store_path)  # Spark's default: ErrorIfExists
    df.write.mode("error").format("pylog").option("topic", "w1").save(store_path)
    df.write.option("topic", "w1").save(store_path, format="pylog", mode="errorifexists")
    assert _values(store_path, "w1") == [b"d1"] * 3
    with pytest.raises(Exception, match="append-only"):
        df.write.format("pylog").option("topic", "w1").mode("overwrite").save(store_path)
    out = os.path.join(os.path.dirname(store_path), "parquet")
    df.write.format("parquet").save(out)  # other formats keep Spark's default
    with pytest.raises(Exception, match="already exists"):
        df.write.format("parquet").save(out)


def test_4_max_offsets_per_trigger_is_ignored_by_batch_reads(spark, store_path):
    df = _load(spark, store_path, subscribe="a", maxOffsetsPerTrigger="3")
    assert df.count() == 20


def test_5_partial_or_unknown_partitions_in_offsets_json(spark, store_path):
    with pytest.raises(Exception, match=r"option 'startingOffsets': must name every partition the query reads "
                                        r"\(use -2 for earliest, -1 for latest\): missing a-1"):
        _load(spark, store_path, subscribe="a", startingOffsets='{"a": {"0": 5}}').count()
    with pytest.raises(Exception, match=r"option 'endingOffsets'.*not read by this query.*: a-2"):
        _load(spark, store_path, subscribe="a", endingOffsets='{"a": {"0": 5, "1": 5, "2": 1}}').count()
    df = _load(spark, store_path, subscribe="a", startingOffsets='{"a": {"0": 5, "1": -2}}')
    assert df.count() == 15
    with pytest.raises(Exception, match=r"option 'startingOffsets': must name every partition.*missing a-1"):
        (spark.readStream.format("pylog").option("subscribe", "a").option("startingOffsets", '{"a": {"0": 5}}')
         .load(store_path).writeStream.format("noop")
         .option("checkpointLocation", os.path.join(os.path.dirname(store_path), "ck"))
         .trigger(availableNow=True).start().awaitTermination())


def test_6_workers_are_pointed_at_this_interpreter(tmp_path):
    """A venv's interpreter run without activating the venv: python3 on PATH is another Python, which
    cannot import pylog. Importing pylog.spark sets PYSPARK_PYTHON (unless the user set it), and
    worker_problem says what to set."""
    from pylog.spark.workers import worker_problem

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\nexit 1\n")  # a python3 that cannot import pylog
    (fake / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
    code = "import os, pylog.spark; print(os.environ.get('PYSPARK_PYTHON'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=str(tmp_path))
    assert out.stdout.strip() == sys.executable
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, PYSPARK_PYTHON="/opt/mine/python"),
                         capture_output=True, text=True, check=True, cwd=str(tmp_path))
    assert out.stdout.strip() == "/opt/mine/python"  # the user's choice is kept
    problem = worker_problem(str(fake / "python3"))
    assert problem and "cannot import pylog" in problem and f"PYSPARK_PYTHON={sys.executable}" in problem
    assert "not found" in worker_problem(str(tmp_path / "missing-python"))
    assert worker_problem(sys.executable) is None


@pytest.mark.parametrize("url", ["s3a://bucket/store", "hdfs://namenode/store"])
def test_7_remote_paths_name_the_scheme(spark, url):
    scheme = url.split(":")[0]
    with pytest.raises(Exception, match=rf"option 'path': '{url}': a pylog store must be on a local or shared "
                                        rf"\(mounted\) filesystem; {scheme}:// paths are not supported"):
        _load(spark, url, subscribe="a")
    with pytest.raises(Exception, match=rf"{scheme}:// paths are not supported"):
        spark.createDataFrame([("v",)], "value string").write.format("pylog").option("topic", "a").save(url)


def test_8_missing_topic_fails_on_the_driver_or_is_created(spark, store_path):
    df = spark.range(6).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    with pytest.raises(Exception, match=r"UnknownTopicError.*'fresh' does not exist.*autoCreateTopics") as info:
        df.write.format("pylog").option("topic", "fresh").save(store_path)
    assert "Task" not in str(info.value).split("UnknownTopicError")[0]  # raised before any task ran
    df.write.format("pylog").option("topic", "fresh").option("autoCreateTopics", "true") \
        .option("numPartitions", "3").save(store_path)
    with pylog.open(store_path) as store:
        assert store.topic("fresh").num_partitions == 3
    assert _values(store_path, "fresh") == sorted(b"%d" % i for i in range(6))


def test_declared_schema_prunes_columns(spark, store_path):
    full = _load(spark, store_path, subscribe="a")
    value = spark.read.format("pylog").schema("value binary").option("subscribe", "a").load(store_path)
    assert value.columns == ["value"]
    assert sorted(bytes(r.value) for r in value.collect()) == sorted(bytes(r.value) for r in full.collect())
    some = spark.read.format("pylog").schema("offset long, timestamp timestamp, partition int") \
        .option("subscribe", "a").load(store_path)
    assert sorted(tuple(r) for r in some.collect()) == sorted(
        tuple(r) for r in full.select("offset", "timestamp", "partition").collect())
    headers = spark.read.format("pylog").schema("headers array<struct<key:string,value:binary>>") \
        .option("subscribe", "a").load(store_path)
    assert headers.count() == 20 and headers.where("headers is not null").count() == 0
    with pytest.raises(Exception, match=r"option 'schema': column 'value' must be binary"):
        spark.read.format("pylog").schema("value string").option("subscribe", "a").load(store_path).collect()
    with pytest.raises(Exception, match=r"option 'schema': unknown column 'payload'"):
        spark.read.format("pylog").schema("payload binary").option("subscribe", "a").load(store_path).collect()
    stream = spark.readStream.format("pylog").schema("value binary, offset long").option("subscribe", "a") \
        .option("startingOffsets", "earliest").load(store_path)
    seen = []
    q = (stream.writeStream.foreachBatch(lambda df, _: seen.extend(tuple(r) for r in df.collect()))
         .option("checkpointLocation", os.path.join(os.path.dirname(store_path), "ck-prune"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert sorted(seen) == sorted((r.value, r.offset) for r in full.select("value", "offset").collect())
