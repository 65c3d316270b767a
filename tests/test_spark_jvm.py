"""The JVM reader (jvm/) against the Python reader, the reference: the same rows, columns and errors.

Each test writes a store through pylog's public API (plain, lz4, headers, null keys and values, compacted gaps,
a torn tail, records removed from the head) and reads it with both readers in the shared session; every column
of every row must be equal. Option errors must carry the Python reader's message.
"""

from __future__ import annotations

import os

import pytest

import pylog

pytestmark = pytest.mark.spark


def _rows(df):
    return [tuple(r) for r in sorted(df.collect(), key=lambda r: (r["topic"], r["partition"], r["offset"]))]


def _both(spark, jvm_reader, path, **options):
    options = {k: str(v) for k, v in options.items()}
    jvm = spark.read.format(jvm_reader).options(**options).load(str(path))
    py = spark.read.format("pylog").options(**options).load(str(path))
    return jvm, py


def _same(spark, jvm_reader, path, **options):
    jvm, py = _both(spark, jvm_reader, path, **options)
    a, b = _rows(jvm), _rows(py)
    assert len(a) == len(b)
    assert a == b
    assert jvm.count() == py.count() == len(a)
    return a


def test_jvm_reader_reads_what_the_python_reader_reads_headers_nulls_lz4(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("plain", partitions=3, config={"segment.bytes": 64 * 1024})
        store.create_topic("packed", partitions=1, config={"compression.type": "lz4"})
        producer = store.producer()
        for i in range(3000):
            producer.send("plain", value=None if i % 11 == 0 else os.urandom(i % 50) + b"%d" % i,
                          key=None if i % 7 == 0 else b"k%d" % (i % 13),
                          headers=[("h", b"x" * (i % 3)), ("none", None)] if i % 5 == 0 else None,
                          partition=i % 3, timestamp_ms=1_700_000_000_000 + i)
            producer.send("packed", value=b"abc" * 40 + b"%d" % i, key=b"same")
        producer.flush()
        producer.close()
    rows = _same(spark, jvm_reader, path, subscribePattern="p.*", includeHeaders="true")
    assert len(rows) == 6000
    assert any(r[7] is not None for r in rows) and any(r[7] is None for r in rows)


def test_jvm_reader_skips_compacted_gaps_and_removed_head(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("c", partitions=1, config={"cleanup.policy": "compact", "segment.bytes": 4096,
                                                      "min.cleanable.dirty.ratio": 0.01})
        p = store.topic("c").partition(0)
        for round_ in range(20):
            p.append_values([b"v%d-%d" % (round_, i) for i in range(50)], keys=[b"k%d" % (i % 10) for i in range(50)])
        store.compact("c")
        store.delete_records("c", 0, 100)
    rows = _same(spark, jvm_reader, path, subscribe="c", failOnDataLoss="false")
    offsets = [r[4] for r in rows]
    assert offsets == sorted(offsets) and offsets[0] >= 100 and len(offsets) < 900


def test_jvm_reader_stops_at_a_torn_tail_as_the_python_reader_does(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("t", partitions=1)
        store.topic("t").partition(0).append_values([b"x%d" % i for i in range(100)])
    log = path / "t" / "0" / "00000000000000000000.log"
    whole = log.read_bytes()
    with open(log, "ab") as f:      # half of a copy of the last batch: a writer caught mid-append
        f.write(whole[: len(whole) // 2])
    rows = _same(spark, jvm_reader, path, subscribe="t")
    assert [r[4] for r in rows] == list(range(100))


def test_jvm_reader_offset_ranges_splits_and_pruned_columns(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("r", partitions=2)
        for n in range(2):
            store.topic("r").partition(n).append_values([b"%d" % i for i in range(1000)])
    opts = dict(subscribe="r", startingOffsets='{"r":{"0":10,"1":-2}}', endingOffsets='{"r":{"0":500,"1":-1}}',
                maxRecordsPerPartition=77)
    rows = _same(spark, jvm_reader, path, **opts)
    assert len(rows) == 490 + 1000
    jvm, py = _both(spark, jvm_reader, path, **opts)
    assert jvm.rdd.getNumPartitions() == py.rdd.getNumPartitions()
    assert sorted(jvm.select("value").collect()) == sorted(py.select("value").collect())
    assert jvm.select("partition").groupBy("partition").count().orderBy("partition").collect() == \
        py.select("partition").groupBy("partition").count().orderBy("partition").collect()


@pytest.mark.parametrize("options", [
    {"subscribe": "r", "startingOffsets": "latest"},
    {"subscribe": "r", "endingOffsets": "earliest"},
    {"subscribe": "r", "assign": '{"r":[0]}'},
    {"assign": '{"r":[5]}'},
    {"assign": '{"nope":[0]}'},
    {"subscribe": "r", "startingOffsets": '{"r":{"0":-7}}'},
    {"subscribe": "r", "startingOffsets": '{"r":{"0":0}}'},
    {"subscribe": "r", "endingOffsets": '{"r":{"0":5000,"1":-1}}'},
    {"subscribe": "r", "minPartitions": "0"},
    {"subscribe": "r", "includeHeaders": "maybe"},
    {"subscribe": "r", "startingOffsets": "{not json"},
])
def test_jvm_reader_refuses_bad_options_with_the_python_readers_message(spark, jvm_reader, tmp_path, options):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("r", partitions=2)
        store.topic("r").partition(0).append_values([b"x"] * 10)
    messages = []
    for fmt in (jvm_reader, "pylog"):
        with pytest.raises(Exception) as info:
            spark.read.format(fmt).options(**options).load(str(path)).collect()
        text = str(info.value)
        found = [line for line in text.splitlines() if "option '" in line]
        assert found, text
        messages.append(found[0][found[0].index("option '"):].strip())
    jvm_message, py_message = messages
    if "not valid JSON" in py_message:   # the JSON parsers word their own part differently
        jvm_message, py_message = jvm_message.split("(")[0], py_message.split("(")[0]
    assert jvm_message == py_message
