"""Writes through Spark: ``df.write.format("pylog")`` with the Kafka sink's columns.

Run: ``python -m pytest tests/test_spark_writer.py -q`` (needs Java; uses the session ``spark`` fixture).

The round trip writes 1,000,000 rows with keys and headers from two Spark tasks at once (so tasks take
turns on each partition's writer lock), reads them back with ``spark.read`` and with pylog's own reader,
and checks every row, the partition each key went to, and the log's own consistency check.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyspark")

import pyarrow as pa  # noqa: E402

import pylog  # noqa: E402
from pylog.clients.partitioner import partitions_for_keys  # noqa: E402
from pylog.spark.reader import HEADERS_TYPE, binary_array, headers_array  # noqa: E402

N = 1_000_000


def _store(tmp_path, **topics):
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        for name, partitions in topics.items():
            store.create_topic(name, partitions=partitions)
    return path


def _rows_df(spark, n, partitions=2, headers=True):
    cols = ["cast(id as string) as key", "cast(concat('value-', id) as binary) as value"]
    if headers:
        cols.append("if(id % 10 = 0, array(), array(named_struct('key', 'n', 'value', cast(cast(id % 7 as string) as binary)),"
                    " named_struct('key', 'src', 'value', cast('spark' as binary)))) as headers")
    return spark.range(0, n, 1, partitions).selectExpr(*cols)


def test_round_trip_million_rows_with_keys_and_headers(spark, tmp_path):
    path = _store(tmp_path, rt=4)
    _rows_df(spark, N).write.format("pylog").option("topic", "rt").mode("append").save(path)

    # pylog's own reader: every row once, in its key's partition
    with pylog.open(path) as store:
        topic = store.topic("rt")
        assert all(not p.check() for p in topic.partitions)
        cols = [topic.partition(p).read_columns(0, max_records=N, max_bytes=1 << 30) for p in range(4)]
        heads = [topic.partition(p).read(0, max_records=20) for p in range(4)]
    assert sum(len(c) for c in cols) == N
    ids = []
    for p, c in enumerate(cols):
        assert (c.key_lengths > 0).all()
        assert (partitions_for_keys(c.key_lengths, c.key_data, 4) == p).all()
        keys = c.keys()
        assert c.values() == [b"value-" + k for k in keys]
        ids.append(np.array(keys, dtype=np.int64))
        for rec in heads[p]:
            i = int(rec.key)
            assert rec.headers == (() if i % 10 == 0 else (("n", str(i % 7).encode()), ("src", b"spark")))
    assert np.array_equal(np.sort(np.concatenate(ids)), np.arange(N))

    # spark.read returns exactly what pylog's reader does, column by column (compared as Arrow arrays)
    df = spark.read.format("pylog").option("subscribe", "rt").option("includeHeaders", "true").load(path)
    got = df.select("key", "value", "partition", "offset", "headers").toArrow()
    assert got.num_rows == N
    part = got.column("partition").to_numpy()
    off = got.column("offset").to_numpy()
    for p, c in enumerate(cols):
        idx = np.flatnonzero(part == p)
        mine = got.take(pa.array(idx[np.argsort(off[idx], kind="stable")])).combine_chunks()
        assert np.array_equal(mine.column("offset").to_numpy(), c.offsets)
        assert mine.column("key").chunk(0).equals(binary_array(c.key_lengths, c.key_data))
        assert mine.column("value").chunk(0).equals(binary_array(c.value_lengths, c.value_data))
        assert mine.column("headers").chunk(0).cast(HEADERS_TYPE).equals(headers_array(c.headers, len(c)))


def test_topic_and_partition_columns_and_timestamps(spark, tmp_path):
    path = _store(tmp_path, a=2, b=3)
    df = spark.createDataFrame(
        [("a", None, "x", 1700000000000), ("b", 2, "y", None), ("b", 1, "z", 1700000000123)],
        "topic string, partition int, value string, ts long").selectExpr(
        "topic", "partition", "value", "ts as timestamp")
    df.write.format("pylog").mode("append").save(path)  # no topic option: each row's topic column
    with pylog.open(path) as store:
        a = [r for p in range(2) for r in store.topic("a").partition(p).read(0)]
        b = {p: store.topic("b").partition(p).read(0) for p in range(3)}
    assert [(r.value, r.timestamp) for r in a] == [(b"x", 1700000000000)]
    assert [(r.value, r.timestamp) for r in b[1]] == [(b"z", 1700000000123)]
    assert [r.value for r in b[2]] == [b"y"]


def test_write_errors(spark, tmp_path):
    path = _store(tmp_path, t=1)
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="'value' column"):
        spark.range(3).write.format("pylog").option("topic", "t").mode("append").save(path)
    with pytest.raises(Exception, match="option 'topic'"):
        df.write.format("pylog").mode("append").save(path)
    with pytest.raises(Exception, match="append-only"):
        df.write.format("pylog").option("topic", "t").mode("overwrite").save(path)
    with pytest.raises(Exception, match="'nope' does not exist"):
        df.write.format("pylog").option("topic", "nope").mode("append").save(path)
    with pytest.raises(Exception, match="column 'partition' must be int"):
        df.selectExpr("value", "1L as partition").write.format("pylog").option("topic", "t").mode("append").save(path)


def test_partition_held_by_an_application_writer(spark, tmp_path):
    path = _store(tmp_path, t=1)
    with pylog.open(path) as app:
        app.topic("t").partition(0).append_values([b"app"])  # the application holds t-0's writer lock
        df = spark.range(5).selectExpr("cast(id as string) as value")
        with pytest.raises(Exception, match=r"(?s)PartitionLockedError.*lockTimeoutMs=100"):
            df.write.format("pylog").option("topic", "t").option("lockTimeoutMs", "100").mode("append").save(path)
    df.write.format("pylog").option("topic", "t").mode("append").save(path)  # released: the write goes in
    with pylog.open(path) as store:
        p = store.topic("t").partition(0)
        values = [r.value for r in p.read(0)]
        assert values[0] == b"app" and sorted(values[1:]) == [b"0", b"1", b"2", b"3", b"4"]
        assert not p.check()
