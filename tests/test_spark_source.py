"""Batch reads through Spark: ``spark.read.format("pylog")`` with the Kafka source's options.

Run: ``python -m pytest tests/test_spark_source.py -q`` (needs Java; uses the session ``spark`` fixture).

Each test builds a small store under its temporary directory and compares what Spark returns with what
pylog's own reader returns. Every test runs twice: through ``format("pylog")`` (the JVM reader, whose jar the
shared session loads when there is a JDK) and ``format("pylog-python")`` (the Python source). Option parsing and planning are covered in detail without a JVM in
tests/test_spark_options.py; here every option goes through Spark once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402

T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def store_path(tmp_path):
    """Topic ``events`` (3 partitions; partition p holds 50 * (p + 1) records, timestamps T0 + 10 * offset,
    every third record with a header) and topic ``other`` (1 partition, 7 records)."""
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        store.create_topic("events", partitions=3)
        store.create_topic("other", partitions=1)
        for p in range(3):
            n = 50 * (p + 1)
            store.topic("events").partition(p).append_values(
                [b"%d-%d" % (p, i) for i in range(n)], keys=[b"k%d" % i if i % 2 else None for i in range(n)],
                timestamps=[T0 + 10 * i for i in range(n)],
                headers=[[("n", b"%d" % i)] if i % 3 == 0 else [] for i in range(n)])
        store.topic("other").partition(0).append_values([b"o"] * 7)
    return path


_FORMAT = "pylog"


@pytest.fixture(autouse=True, params=["pylog", "pylog-python"])
def reader_format(request):
    """The format each test reads through (both readers, one after the other)."""
    global _FORMAT
    _FORMAT = request.param
    yield request.param
    _FORMAT = "pylog"


def _load(spark, path, **options):
    reader = spark.read.format(_FORMAT)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def _triples(df):
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.select("partition", "offset", "value").collect())


def _expected(path, topic, ranges):
    out = []
    with pylog.open(path) as store:
        for p, (a, b) in ranges.items():
            out += [(p, r.offset, r.value) for r in store.topic(topic).partition(p).read(a, max_records=b - a)]
    return sorted(out)


def test_discovered_without_register_and_rows_match_pylog(spark, store_path):
    df = _load(spark, store_path, subscribe="events", includeHeaders="true")
    assert df.schema.simpleString() == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                                        "timestamp:timestamp,timestampType:int,"
                                        "headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    with pylog.open(store_path) as store:
        expected = sorted((r.partition, r.offset, r.key, r.value, r.timestamp, r.headers or None)
                          for p in range(3) for r in store.topic("events").partition(p).read(0, max_records=1000))
    got = sorted((r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value),
                  round(r.timestamp.timestamp() * 1000),
                  None if r.headers is None else tuple((h.key, bytes(h.value)) for h in r.headers)) for r in rows)
    assert got == expected
    assert {r.topic for r in rows} == {"events"} and {r.timestampType for r in rows} == {0}


def test_subscribe_pattern_and_assign(spark, store_path):
    assert _load(spark, store_path, subscribe="events,other").count() == 307
    assert _load(spark, store_path, subscribePattern="oth.*").count() == 7
    assert _triples(_load(spark, store_path, assign='{"events": [0, 2]}')) == \
        _expected(store_path, "events", {0: (0, 50), 2: (0, 150)})


def test_starting_and_ending_offsets_json(spark, store_path):
    df = _load(spark, store_path, subscribe="events", startingOffsets='{"events": {"0": 10, "1": -2, "2": 140}}',
               endingOffsets='{"events": {"0": 20, "1": 5, "2": -1}}')
    assert _triples(df) == _expected(store_path, "events", {0: (10, 20), 1: (0, 5), 2: (140, 150)})


def test_timestamp_bounds(spark, store_path):
    df = _load(spark, store_path, subscribe="events", startingTimestamp=str(T0 + 395), endingTimestamp=str(T0 + 1000))
    assert _triples(df) == _expected(store_path, "events", {0: (40, 50), 1: (40, 100), 2: (40, 100)})
    df = _load(spark, store_path, subscribe="events",
               startingOffsetsByTimestamp=f'{{"events": {{"0": 0, "1": {T0 + 950}, "2": 0}}}}',
               endingOffsetsByTimestamp=f'{{"events": {{"0": {T0 + 20}, "1": {2 ** 60}, "2": {2 ** 60}}}}}')
    assert _triples(df) == _expected(store_path, "events", {0: (0, 2), 1: (95, 100), 2: (0, 150)})


def test_min_partitions_splits_offset_ranges(spark, store_path):
    df = _load(spark, store_path, subscribe="events", minPartitions="12")
    assert df.rdd.getNumPartitions() == 12  # 2 + 4 + 6 tasks by size
    assert _triples(df) == _expected(store_path, "events", {0: (0, 50), 1: (0, 100), 2: (0, 150)})
    assert _load(spark, store_path, subscribe="events").rdd.getNumPartitions() == 3


def test_fail_on_data_loss(spark, store_path):
    with pylog.open(store_path) as store:
        store.delete_records("events", 1, 30)
    with pytest.raises(Exception, match=r"events-1: offsets \[10, 30\) were removed"):
        _load(spark, store_path, subscribe="events", startingOffsets='{"events": {"0": -2, "1": 10, "2": -2}}').count()
    df = _load(spark, store_path, subscribe="events", startingOffsets='{"events": {"0": -2, "1": 10, "2": -2}}', failOnDataLoss="false")
    assert _triples(df) == _expected(store_path, "events", {0: (0, 50), 1: (30, 100), 2: (0, 150)})


def test_bad_options_name_the_option(spark, store_path):
    with pytest.raises(Exception, match="option 'startingOffsets'"):
        _load(spark, store_path, subscribe="events", startingOffsets="yesterday")
    with pytest.raises(Exception, match="option 'subscribe'.*exactly one"):
        _load(spark, store_path)
    with pytest.raises(Exception, match="option 'path'.*not a pylog store"):
        _load(spark, store_path + "-missing", subscribe="events")
    with pytest.raises(Exception, match="option 'minPartitions'"):
        _load(spark, store_path, subscribe="events", minPartitions="-3").count()


def test_filter_pushdown_is_opt_in_and_prunes(spark, store_path):
    plain = _load(spark, store_path, subscribe="events").where("partition = 1 and offset >= 90")
    assert _triples(plain) == _expected(store_path, "events", {1: (90, 100)})
    pushing = _load(spark, store_path, subscribe="events", filterPushdown="true")
    from pylog.spark import which_reader
    if _FORMAT == "pylog" and which_reader(spark) == "jvm":   # the JVM reader prunes whatever that setting says
        assert pushing.where("partition = 1").count() == 100
    else:
        with pytest.raises(Exception, match="spark.sql.python.filterPushdown.enabled"):
            pushing.where("partition = 1").count()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = pushing.where("partition = 1 and offset >= 90")
        assert df.rdd.getNumPartitions() == 1
        assert _triples(df) == _expected(store_path, "events", {1: (90, 100)})
        df = pushing.where("partition in (0, 2) and offset < 3")
        jvm = _FORMAT == "pylog" and which_reader(spark) == "jvm"
        assert df.rdd.getNumPartitions() == (1 if jvm else 2)   # the JVM reader packs small filtered ranges
        assert _triples(df) == _expected(store_path, "events", {0: (0, 3), 2: (0, 3)})
        # timestamp lower bounds start each range at the time index's answer; Spark still applies them
        df = pushing.where(f"timestamp >= timestamp_millis({T0 + 1450})")
        assert _triples(df) == _expected(store_path, "events", {2: (145, 150)})
        assert df.rdd.getNumPartitions() == 1
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_spark_doc_example_runs(spark, tmp_path, monkeypatch):
    text = (ROOT / "docs" / "SPARK.md").read_text()
    code = re.search(r"^# Spark\s.*?```python\n(.*?)```", text, re.S | re.M).group(1)
    monkeypatch.chdir(tmp_path)
    saved = {k: spark.conf.get(k, None) for k in ("spark.sql.shuffle.partitions",
                                                   "spark.sql.python.filterPushdown.enabled")}
    try:
        exec(compile(code, "docs/SPARK.md", "exec"), {})  # session() returns the running session
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    assert spark.read.parquet(str(tmp_path / "events-parquet")).count() == 1000


def test_register_is_an_explicit_fallback(spark, store_path):
    from pylog.spark import register

    register(spark)  # on top of discovery: harmless, same class
    assert _load(spark, store_path, subscribe="other").count() == 7
