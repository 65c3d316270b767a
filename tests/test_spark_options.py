"""Tests of pylog.spark without a JVM: option parsing, planning, Arrow conversion, range reads, task writes.

Run: ``python -m pytest tests/test_spark_options.py -q``

Everything here calls the modules' functions directly on stores in temporary directories; the Spark
tests (tests/test_spark_*.py with the ``spark`` fixture) check the same paths end to end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import pylog  # noqa: E402
from pylog.clients.partitioner import partitions_for_keys  # noqa: E402
from pylog.spark.options import (DataLossError, InvalidOptionError, WriteOptions, parse_read_options,  # noqa: E402
                                 parse_write_options)
from pylog.spark.reader import (ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS, OffsetRange, binary_array,  # noqa: E402
                                columns_to_arrow, filter_from_pushed, open_store, plan_ranges, read_range,
                                split_ranges)
from pylog.spark.stream import from_json, prorate, to_json  # noqa: E402
from pylog.spark.writer import _bytes_column, _headers_rows, write_batches  # noqa: E402

T0 = 1_700_000_000_000


@pytest.fixture
def store_path(tmp_path):
    """A store with topic ``t`` (2 partitions, 100 records each, timestamps T0 + offset * 10) and ``u`` (1)."""
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        store.create_topic("t", partitions=2)
        store.create_topic("u", partitions=1)
        for p in range(2):
            store.topic("t").partition(p).append_values(
                [b"v%d-%d" % (p, i) for i in range(100)], keys=[b"k%d" % i if i % 3 else None for i in range(100)],
                timestamps=[T0 + i * 10 for i in range(100)])
        store.topic("u").partition(0).append_values([b"u"] * 5)
    return path


def _read(path, **options):
    return parse_read_options({"path": path, **options})


def _plan(path, **options):
    opts = _read(path, **options)
    store = open_store(opts.path)
    try:
        return plan_ranges(store, opts)
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------ options


@pytest.mark.parametrize("options, option", [
    ({}, "subscribe"),
    ({"subscribe": "t", "assign": '{"t": [0]}'}, "subscribe"),
    ({"subscribe": " , "}, "subscribe"),
    ({"subscribePattern": "(unclosed"}, "subscribePattern"),
    ({"assign": "[1, 2]"}, "assign"),
    ({"assign": '{"t": ["x"]}'}, "assign"),
    ({"subscribe": "t", "startingOffsets": "bogus"}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": -7}}'}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, "startingOffsets"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets"),
    ({"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, "endingOffsets"),
    ({"subscribe": "t", "endingOffsets": "{not json"}, "endingOffsets"),
    ({"subscribe": "t", "startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": "x"}}'}, "startingOffsetsByTimestamp"),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "maybe"}, "startingOffsetsByTimestampStrategy"),
    ({"subscribe": "t", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "t", "minPartitions": "many"}, "minPartitions"),
    ({"subscribe": "t", "failOnDataLoss": "yes"}, "failOnDataLoss"),
    ({"subscribe": "t", "includeHeaders": "1"}, "includeHeaders"),
    ({"subscribe": "t", "startingOffset": "earliest"}, "startingOffset"),
    ({"subscribe": "t", "lockTimeoutMs": "5"}, "lockTimeoutMs"),
])
def test_bad_read_option_is_named(store_path, options, option):
    with pytest.raises(InvalidOptionError) as info:
        _read(store_path, **options)
    assert info.value.option == option
    assert repr(option) in str(info.value)
    assert isinstance(info.value, pylog.PylogError)


def test_path_must_be_an_existing_store(tmp_path):
    with pytest.raises(InvalidOptionError, match="'path'.*not a pylog store"):
        parse_read_options({"path": str(tmp_path / "nowhere"), "subscribe": "t"})
    assert not (tmp_path / "nowhere").exists()  # never created by a read
    with pytest.raises(InvalidOptionError, match="'path'"):
        parse_read_options({"subscribe": "t"})


def test_option_names_are_case_insensitive_and_streaming_options_are_checked(store_path):
    opts = parse_read_options({"PATH": store_path, "SUBSCRIBE": "t", "includeheaders": "TRUE"})
    assert opts.include_headers and opts.subscription.topics == ("t",)
    stream = parse_read_options({"path": store_path, "subscribe": "t", "maxOffsetsPerTrigger": "5"}, streaming=True)
    assert stream.max_offsets_per_trigger == 5 and stream.starting.kind == "latest"
    with pytest.raises(InvalidOptionError, match="endingOffsets.*batch reads only"):
        parse_read_options({"path": store_path, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    either = parse_read_options({"path": store_path, "subscribe": "t", "maxOffsetsPerTrigger": "5",
                                 "endingOffsets": "latest"}, streaming=None)
    assert either.max_offsets_per_trigger == 5


def test_write_options(store_path):
    assert parse_write_options({"path": store_path, "topic": "t"}) == WriteOptions(store_path, "t", 60_000)
    assert parse_write_options({"path": store_path, "lockTimeoutMs": "5"}).lock_timeout_ms == 5
    with pytest.raises(InvalidOptionError, match="'lockTimeoutMs'"):
        parse_write_options({"path": store_path, "lockTimeoutMs": "-1"})
    with pytest.raises(InvalidOptionError, match="'filterPushdown'.*batch reads only"):
        parse_write_options({"path": store_path, "filterPushdown": "true"})
    assert parse_write_options({"path": store_path, "autoCreateTopics": "true", "numPartitions": "3"}) == \
        WriteOptions(store_path, None, 60_000, auto_create_topics=True, num_partitions=3)
    with pytest.raises(InvalidOptionError, match="'numPartitions'.*autoCreateTopics=true"):
        parse_write_options({"path": store_path, "numPartitions": "3"})
    with pytest.raises(InvalidOptionError, match="'numPartitions'.*>= 1"):
        parse_write_options({"path": store_path, "autoCreateTopics": "true", "numPartitions": "0"})


KAFKA_JOB = {  # what a Kafka job passes besides subscribe/topic: the Kafka source and sink accept all of it
    "kafka.bootstrap.servers": "broker:9092", "kafka.security.protocol": "SASL_SSL", "groupIdPrefix": "job",
    "minOffsetsPerTrigger": "10", "maxTriggerDelay": "5m", "fetchOffset.numRetries": "3",
    "fetchOffset.retryIntervalMs": "10", "kafkaConsumer.pollTimeoutMs": "1000",
}


def test_kafka_job_options_are_ignored_with_one_warning(store_path, caplog):
    from pylog.spark import options as options_module

    options_module._warned.clear()
    lowered = {k.lower(): v for k, v in KAFKA_JOB.items()}  # as Spark hands them over
    with caplog.at_level("WARNING", logger="pylog.spark"):
        batch = parse_read_options({"path": store_path, "subscribe": "t", "maxOffsetsPerTrigger": "5", **lowered})
        parse_read_options({"path": store_path, "subscribe": "t", "maxOffsetsPerTrigger": "5", **lowered})
        stream = parse_read_options({"path": store_path, "subscribe": "t", "maxOffsetsPerTrigger": "5",
                                     "topic": "t", **lowered}, streaming=True)
        write = parse_write_options({"path": store_path, "topic": "t", "subscribe": "t", "includeHeaders": "true",
                                     "startingOffsets": "earliest", **lowered})
    assert batch.max_offsets_per_trigger is None  # ignored in batch, as the Kafka source does
    assert stream.max_offsets_per_trigger == 5 and write.topic == "t"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3, warnings  # one per kind of query: the repeated batch parse logs nothing
    assert "fetchOffset.numRetries, fetchOffset.retryIntervalMs, groupIdPrefix, kafka.bootstrap.servers" in warnings[0]
    assert "kafkaConsumer.pollTimeoutMs, maxOffsetsPerTrigger, maxTriggerDelay, minOffsetsPerTrigger" in warnings[0]
    assert "batch reads" in warnings[0] and "maxOffsetsPerTrigger" not in warnings[1] and "topic" in warnings[1]
    assert "includeHeaders" in warnings[2] and "startingOffsets" in warnings[2] and "subscribe" in warnings[2]


@pytest.mark.parametrize("given, suggested", [
    ("startingoffset", "startingOffsets"), ("subscribpattern", "subscribePattern"),
    ("failondataloss ", "failOnDataLoss"), ("maxoffsetspertriger", "maxOffsetsPerTrigger"),
])
def test_misspelled_option_is_an_error_suggesting_the_closest(store_path, given, suggested):
    with pytest.raises(InvalidOptionError) as info:
        parse_read_options({"path": store_path, "subscribe": "t", given: "x"}, streaming=None)
    assert info.value.option == given
    assert f"option {given!r}: unknown option for reads; did you mean {suggested!r}?" in str(info.value)
    with pytest.raises(InvalidOptionError, match=r"'startingOffsets'.*'latest' is not allowed"):
        parse_read_options({"path": store_path, "subscribe": "t", "startingoffsets": "latest"})  # camelCase shown
    with pytest.raises(InvalidOptionError, match=r"'zzz': unknown option for writes \(known: autoCreateTopics"):
        parse_write_options({"path": store_path, "zzz": "1"})


@pytest.mark.parametrize("url", ["hdfs://namenode:8020/data/store", "gs://b/s", "abfss://c@a/s"])
def test_remote_paths_are_refused_naming_the_scheme(tmp_path, monkeypatch, url):
    monkeypatch.chdir(tmp_path)
    scheme = url.split(":")[0]
    with pytest.raises(InvalidOptionError, match=rf"'path': '{re.escape(url)}'.*local or shared.*{scheme}:// paths"):
        parse_read_options({"path": url, "subscribe": "t"})
    with pytest.raises(InvalidOptionError, match=rf"{scheme}:// paths are not supported"):
        parse_write_options({"path": url, "topic": "t"})
    assert not list(tmp_path.iterdir())  # nothing created under the working directory


def test_a_bucket_path_is_for_batch_reads_only_and_s3a_is_refused_saying_why(tmp_path, monkeypatch):
    """``s3://bucket/prefix`` (a store's remote.storage.location) is a batch read of the bucket, with
    ``remote.storage.*`` options; Hadoop's ``s3a://`` is refused with the reason, as are writes and streaming
    reads of a bucket, and remote options on a directory path."""
    monkeypatch.chdir(tmp_path)
    opts = parse_read_options({"path": "s3://bucket/store", "subscribe": "t",
                               "remote.storage.endpoint.url": "http://127.0.0.1:9", "remote.storage.region": "x"})
    assert opts.path == "s3://bucket/store"
    assert opts.remote == (("remote.storage.endpoint.url", "http://127.0.0.1:9"), ("remote.storage.region", "x"))
    with pytest.raises(InvalidOptionError, match=r"s3a:// is Hadoop's S3 filesystem.*write s3://bucket/prefix"):
        parse_read_options({"path": "s3a://bucket/store", "subscribe": "t"})
    with pytest.raises(InvalidOptionError, match=r"batch reads only read a bucket"):
        parse_write_options({"path": "s3://bucket/store", "topic": "t"})
    with pytest.raises(InvalidOptionError, match=r"batch reads only read a bucket"):
        parse_read_options({"path": "s3://bucket/store", "subscribe": "t"}, streaming=True)
    with pytest.raises(InvalidOptionError, match=r"remote.storage.region.*applies to batch reads only"):
        parse_write_options({"path": str(tmp_path), "topic": "t", "remote.storage.region": "x"})
    assert not list(tmp_path.iterdir())  # nothing created under the working directory


def test_a_stream_of_a_bucket_is_refused_for_its_path_not_for_the_bucket_options_with_it(store_path):
    """``readStream...load("s3://...")`` with the bucket's options (as the batch read of it takes) is refused
    for the path, saying streams need the store directory; those options on a stream of a directory are
    refused as applying to a bucket path only."""
    with pytest.raises(InvalidOptionError, match=r"'path'.*batch reads only read a bucket.*streaming reads need"):
        parse_read_options({"path": "s3://bucket/store", "subscribe": "t",
                            "remote.storage.endpoint.url": "http://127.0.0.1:9"}, streaming=True)
    with pytest.raises(InvalidOptionError, match=r"remote.storage.region.*applies to a path s3://"):
        parse_read_options({"path": store_path, "subscribe": "t", "remote.storage.region": "x"}, streaming=True)


# ----------------------------------------------------------------------------------------------- planning


def test_plan_subscribe_pattern_and_assign(store_path):
    assert _plan(store_path, subscribe="t") == [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 100)]
    assert [(r.topic, r.partition) for r in _plan(store_path, subscribePattern="[tu]")] == [("t", 0), ("t", 1), ("u", 0)]
    assert _plan(store_path, subscribePattern="t|x", assign=None) == _plan(store_path, subscribe="t,x")
    assert _plan(store_path, assign='{"t": [1]}') == [OffsetRange("t", 1, 0, 100)]
    with pytest.raises(InvalidOptionError, match="'assign'.*no partition 5"):
        _plan(store_path, assign='{"t": [5]}')
    with pytest.raises(InvalidOptionError, match="'assign'.*does not exist"):
        _plan(store_path, assign='{"nope": [0]}')


def test_plan_offsets_json_with_markers(store_path):
    ranges = _plan(store_path, subscribe="t", startingOffsets='{"t": {"0": 10, "1": -2}}',
                   endingOffsets='{"t": {"0": 20, "1": -1}}')
    assert ranges == [OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 0, 100)]
    assert _plan(store_path, subscribe="t", startingOffsets='{"t": {"0": 30, "1": -2}}',
                 endingOffsets='{"t": {"0": 30, "1": -1}}') == [OffsetRange("t", 1, 0, 100)]  # empty range dropped
    with pytest.raises(InvalidOptionError, match="'startingOffsets'.*after the end offset"):
        _plan(store_path, subscribe="t", startingOffsets='{"t": {"0": 50, "1": 0}}',
              endingOffsets='{"t": {"0": 20, "1": -1}}')
    with pytest.raises(InvalidOptionError, match="'endingOffsets'.*beyond the log end 100"):
        _plan(store_path, subscribe="t", endingOffsets='{"t": {"0": 500, "1": -1}}')


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets", "startingOffsetsByTimestamp",
                                    "endingOffsetsByTimestamp"])
def test_per_partition_json_must_name_every_partition_read(store_path, option):
    """As the Kafka source: JSON naming only some partitions, or partitions not read, is an error naming them."""
    value = 20 if "Offsets" == option[-7:] else T0
    with pytest.raises(InvalidOptionError, match=rf"'{option}': must name every partition the query reads.*"
                                                 r"missing t-1(?!,)"):
        _plan(store_path, subscribe="t", **{option: f'{{"t": {{"0": {value}}}}}'})
    with pytest.raises(InvalidOptionError, match=r"missing t-0, t-1; not read by this query.*: t-7, x-0$"):
        _plan(store_path, subscribe="t", **{option: f'{{"t": {{"7": {value}}}, "x": {{"0": {value}}}}}'})
    with pytest.raises(InvalidOptionError, match=r"not read by this query.*: u-0$"):
        _plan(store_path, assign='{"t": [0, 1]}',
              **{option: f'{{"t": {{"0": {value}, "1": {value}}}, "u": {{"0": 1}}}}'})
    ranges = _plan(store_path, assign='{"t": [1]}', **{option: f'{{"t": {{"1": {value}}}}}'})  # exactly: fine
    assert [r.partition for r in ranges] == ([] if option == "endingOffsetsByTimestamp" else [1])


def test_plan_timestamps(store_path):
    # timestamps are T0 + 10 * offset in both partitions
    assert _plan(store_path, subscribe="t", startingTimestamp=str(T0 + 105), endingTimestamp=str(T0 + 500)) == [
        OffsetRange("t", 0, 11, 50), OffsetRange("t", 1, 11, 50)]
    assert _plan(store_path, subscribe="t", startingOffsetsByTimestamp=f'{{"t": {{"0": 0, "1": {T0 + 990}}}}}',
                 endingOffsetsByTimestamp=f'{{"t": {{"0": {T0 + 30}, "1": {2 ** 60}}}}}') == [
        OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 99, 100)]
    # the timestamp option beats the by-timestamp one, which beats startingOffsets
    assert _plan(store_path, subscribe="t", startingTimestamp=str(T0 + 980), startingOffsets='{"t": {"0": 1}}',
                 startingOffsetsByTimestamp=f'{{"t": {{"0": {T0}}}}}')[0] == OffsetRange("t", 0, 98, 100)
    with pytest.raises(InvalidOptionError, match="'startingTimestamp'.*no record"):
        _plan(store_path, subscribe="t", startingTimestamp=str(T0 + 10_000))
    assert _plan(store_path, subscribe="t", startingTimestamp=str(T0 + 10_000),
                 startingOffsetsByTimestampStrategy="latest") == []
    # an ending timestamp after every record means the log end
    assert _plan(store_path, subscribe="u", endingTimestamp=str(2 ** 60)) == [OffsetRange("u", 0, 0, 5)]


def test_plan_fail_on_data_loss(store_path):
    with pylog.open(store_path) as store:
        store.delete_records("t", 0, 40)
    with pytest.raises(DataLossError, match=r"t-0: offsets \[10, 40\) were removed.*failOnDataLoss=false"):
        _plan(store_path, subscribe="t", startingOffsets='{"t": {"0": 10, "1": -2}}')
    assert _plan(store_path, subscribe="t", startingOffsets='{"t": {"0": 10, "1": -2}}', failOnDataLoss="false")[0] == \
        OffsetRange("t", 0, 40, 100)
    assert _plan(store_path, subscribe="t")[0] == OffsetRange("t", 0, 40, 100)  # earliest: no loss


def test_split_ranges_like_the_kafka_source():
    big, small = OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 0, 100)
    assert split_ranges([big, small], None, None) == [big, small]
    parts = split_ranges([big, small], 10, None)
    assert len([r for r in parts if r.partition == 0]) == 9 and len([r for r in parts if r.partition == 1]) == 1
    assert sum(r.size for r in parts) == 1000 and all(r.size == 100 for r in parts)
    capped = split_ranges([big], None, 250)
    assert [(r.start, r.end) for r in capped] == [(0, 225), (225, 450), (450, 675), (675, 900)]
    assert split_ranges([OffsetRange("a", 0, 5, 7)], 10, None) == [OffsetRange("a", 0, 5, 6), OffsetRange("a", 0, 6, 7)]


def test_pushed_filters_become_bounds():
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, Not, StringStartsWith

    fs = [In(("partition",), (1, 3, 4)), LessThan(("partition",), 4), GreaterThanOrEqual(("offset",), 10),
          LessThan(("offset",), 20), GreaterThan(("timestamp",), "T"), Not(EqualTo(("offset",), 12)),
          StringStartsWith(("topic",), "x"), In(("offset",), (15, 30))]
    rf, remaining = filter_from_pushed(fs, lambda v: 123)
    assert [rf.allows_partition(i) for i in range(5)] == [False, True, False, True, False]
    assert (rf.offset_min, rf.offset_max, rf.timestamp_min_ms) == (15, 20, 123)
    assert remaining == fs[4:]  # timestamp, Not, string and offset IN stay with Spark
    rf, _ = filter_from_pushed([EqualTo(("offset",), 7), GreaterThan(("offset",), 9)], lambda v: None)
    assert rf.offset_min == rf.offset_max  # contradictory: empty


def test_prorate_respects_the_limit():
    begin = {("a", 0): 0, ("a", 1): 10, ("b", 0): 5}
    end = {("a", 0): 100, ("a", 1): 11, ("b", 0): 5, ("c", 0): 0}
    out = prorate({**begin, ("c", 0): 0}, end, 50)
    assert sum(out[tp] - begin.get(tp, 0) for tp in out) == 50
    assert out[("b", 0)] == 5 and out[("a", 1)] <= 11
    assert prorate(begin, {("a", 0): 7, ("a", 1): 10, ("b", 0): 5}, 50)[("a", 0)] == 7
    assert from_json(to_json(end)) == end and to_json({("a", 0): 3}) == {"a": {"0": 3}}


# ---------------------------------------------------------------------------------------------- arrow


def test_arrow_schema_is_sparks():
    from pyspark.sql.pandas.types import to_arrow_schema

    from pylog.spark.source import kafka_schema

    assert to_arrow_schema(kafka_schema(False), timezone="UTC").equals(ARROW_SCHEMA)
    assert to_arrow_schema(kafka_schema(True), timezone="UTC").equals(ARROW_SCHEMA_WITH_HEADERS)


def test_declared_columns_build_only_those_with_sparks_arrow_schema(tmp_path):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from pylog.spark.reader import COLUMNS
    from pylog.spark.source import kafka_schema, read_columns

    with pylog.open(str(tmp_path / "s")) as store:
        p = store.create_topic("h", partitions=1).partition(0)
        p.append_values([b"a", None, b"ccc"], keys=[None, b"k", b"kk"], headers=[[("x", b"1")], [], []])
        cols = p.read_columns(0)
    full = columns_to_arrow(cols, "h", 0, include_headers=True)
    opts = parse_read_options({"path": str(tmp_path / "s"), "subscribe": "h"})
    field = {f.name: f for f in kafka_schema(True).fields}
    for names in [("value",), ("offset", "timestamp"), ("timestampType", "key", "topic"), ("headers", "partition")]:
        declared = StructType([field[n] for n in names])
        assert read_columns(declared, opts) == names
        batch = columns_to_arrow(cols, "h", 0, include_headers=False, columns=names)
        assert batch.schema.equals(to_arrow_schema(declared, timezone="UTC"))
        assert batch.to_pylist() == full.select(list(names)).to_pylist()
    assert read_columns(kafka_schema(False), opts) is None and COLUMNS == tuple(kafka_schema(True).names)
    for fields, message in [([StructField("value", StringType())], "'value' must be binary"),
                            ([StructField("payload", BinaryType())], "unknown column 'payload'"),
                            ([StructField("value", BinaryType(), False)], "'value' must be binary (nullable)"),
                            ([field["value"], field["value"]], "each column once")]:
        with pytest.raises(InvalidOptionError, match=re.escape(message)):
            read_columns(StructType(fields), opts)


def test_binary_array_over_the_buffer():
    lengths = np.array([2, -1, 0, 3], np.int32)
    data = b"abxyz"
    arr = binary_array(lengths, data)
    assert arr.to_pylist() == [b"ab", None, b"", b"xyz"]
    assert arr.buffers()[2].address == pa.py_buffer(data).address  # no copy of the data
    assert binary_array(np.array([1, 1], np.int32), b"ab").null_count == 0


def test_columns_to_arrow_matches_the_records(tmp_path):
    with pylog.open(str(tmp_path / "s")) as store:
        p = store.create_topic("h", partitions=1).partition(0)
        p.append_values([b"a", None, b"ccc"], keys=[None, b"k", b"kk"], timestamps=[T0, T0 + 1, T0 + 2],
                        headers=[[("x", b"1"), ("y", None)], [], [("z", b"")]])
        cols = p.read_columns(0)
        batch = columns_to_arrow(cols, "h", 0, include_headers=True)
        assert batch.schema.equals(ARROW_SCHEMA_WITH_HEADERS)
        rows = batch.to_pylist()
        assert [(r["key"], r["value"], r["offset"], r["partition"], r["topic"], r["timestampType"]) for r in rows] == [
            (None, b"a", 0, 0, "h", 0), (b"k", None, 1, 0, "h", 0), (b"kk", b"ccc", 2, 0, "h", 0)]
        assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [T0, T0 + 1, T0 + 2]
        assert [r["headers"] for r in rows] == [[{"key": "x", "value": b"1"}, {"key": "y", "value": None}], None,
                                                [{"key": "z", "value": b""}]]
        plain = columns_to_arrow(cols, "h", 0, include_headers=False)
        assert plain.schema.equals(ARROW_SCHEMA) and plain.num_rows == 3


def test_read_range_is_exact_and_batched(store_path):
    store = open_store(store_path)
    try:
        batches = list(read_range(store, OffsetRange("t", 1, 7, 93), False, True, max_records=20))
        assert [b.num_rows for b in batches] == [20, 20, 20, 20, 6]
        offsets = [o for b in batches for o in b.column("offset").to_pylist()]
        assert offsets == list(range(7, 93))
        values = [v for b in batches for v in b.column("value").to_pylist()]
        assert values == [b"v1-%d" % i for i in range(7, 93)]
    finally:
        store.close()


def test_read_range_over_compacted_gaps(tmp_path):
    path = str(tmp_path / "c")
    with pylog.open(path) as store:
        p = store.create_topic("c", partitions=1, config={"cleanup.policy": "compact"}).partition(0)
        p.append_values([b"%d" % i for i in range(100)], keys=[b"k%d" % (i % 10) for i in range(100)])
        p.roll()
        p.append_values([b"last"], keys=[b"x"])
        store.compact("c")
    store = open_store(path)
    try:
        got = [o for b in read_range(store, OffsetRange("c", 0, 0, 95), False, True, max_records=3)
               for o in b.column("offset").to_pylist()]
        assert got == list(range(90, 95))  # the latest record of each key survives; nothing past the end
    finally:
        store.close()


def test_read_range_data_loss_while_reading(store_path):
    """Retention removes offsets between planning and reading: error, or skip with failOnDataLoss=false."""
    with pylog.open(store_path) as writer:
        p = writer.topic("t").partition(0)
        p.roll()
        p.append_values([b"more"] * 10)
        writer.delete_records("t", 0, 100)
    store = open_store(store_path)
    try:
        with pytest.raises(DataLossError, match=r"t-0: offsets \[5, 100\) were removed before they were read"):
            list(read_range(store, OffsetRange("t", 0, 5, 110), False, True))
        got = [o for b in read_range(store, OffsetRange("t", 0, 5, 110), False, False)
               for o in b.column("offset").to_pylist()]
        assert got == list(range(100, 110))
        with pytest.raises(DataLossError, match="the log ends at 110, before offset 120"):
            list(read_range(store, OffsetRange("t", 0, 100, 120), False, True))
    finally:
        store.close()


# --------------------------------------------------------------------------------------------- writing


def test_bytes_column_from_sliced_arrays_with_nulls():
    arr = pa.array([b"a", None, b"bc", b"", None, b"def"])
    lengths, data = _bytes_column(arr.slice(1, 4))
    assert lengths.tolist() == [-1, 2, 0, -1] and bytes(data) == b"bc"
    lengths, data = _bytes_column(pa.array(["x", "yz"], pa.large_string()))
    assert lengths.tolist() == [1, 2] and bytes(data) == b"xyz"
    # a null slot that holds bytes (allowed by Arrow): the bytes are dropped
    odd = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(np.packbits([True, False], bitorder="little")),
                                                 pa.py_buffer(np.array([0, 1, 3], np.int32)), pa.py_buffer(b"abc")])
    lengths, data = _bytes_column(odd)
    assert lengths.tolist() == [1, -1] and bytes(data) == b"a"
    assert _bytes_column(pa.array([None, None], pa.binary()))[0].tolist() == [-1, -1]


def test_headers_rows_from_the_arrow_column():
    from pylog.spark.reader import HEADERS_TYPE

    col = pa.array([[{"key": "a", "value": b"1"}], None, [], [{"key": "b", "value": None}, {"key": "c", "value": b"3"}]],
                   type=HEADERS_TYPE)
    assert _headers_rows(col) == [(("a", b"1"),), (), (), (("b", None), ("c", b"3"))]
    assert _headers_rows(col.slice(2)) == [(), (("b", None), ("c", b"3"))]


def _sink_batch(n: int, keyed: bool = True, **extra) -> pa.RecordBatch:
    cols = {"value": pa.array([b"v%d" % i for i in range(n)])}
    if keyed:
        cols["key"] = pa.array([b"key-%d" % i if i % 5 else None for i in range(n)])
    for name, arr in extra.items():
        cols[name] = arr
    return pa.RecordBatch.from_pydict(cols)


def _all_records(path, topic):
    with pylog.open(path) as store:
        t = store.topic(topic)
        return {p: t.partition(p).read(0, max_records=10 ** 6) for p in range(t.num_partitions)}


def test_write_places_keyed_rows_like_the_producer(store_path):
    msg = write_batches(WriteOptions(store_path, "t"), iter([_sink_batch(1000), _sink_batch(10, keyed=False)]))
    assert msg.rows == 1010
    recs = _all_records(store_path, "t")
    keyed = [(r.key, p) for p, rs in recs.items() for r in rs[100:] if r.key is not None]
    keys = [k for k, _ in keyed]
    lengths = np.array([len(k) for k in keys], np.int32)
    expected = partitions_for_keys(lengths, b"".join(keys), 2)
    assert [p for _, p in keyed] == expected.tolist()
    assert len(keyed) == 800
    # key-less rows of one batch stay together in one partition, in order
    unkeyed_tail = [r.value for rs in recs.values() for r in rs[100:] if r.value.startswith(b"v") and r.key is None]
    assert sorted(unkeyed_tail) == sorted([b"v%d" % i for i in range(0, 1000, 5)] + [b"v%d" % i for i in range(10)])
    for rs in recs.values():  # input order kept within a partition
        vals = [int(r.value[1:]) for r in rs[100:] if r.key is not None]
        assert vals == sorted(vals)


def test_write_topic_partition_timestamp_and_headers_columns(store_path):
    from pylog.spark.reader import HEADERS_TYPE

    batch = _sink_batch(4, keyed=False,
                        topic=pa.array(["u", "t", "t", "t"]),
                        partition=pa.array([0, None, 1, None], pa.int32()),
                        timestamp=pa.array([T0 * 1000, None, (T0 + 5) * 1000, T0 * 1000], pa.timestamp("us", tz="UTC")),
                        headers=pa.array([[{"key": "h", "value": b"x"}], None, [], None], type=HEADERS_TYPE))
    write_batches(WriteOptions(store_path, None), iter([batch]))
    u = _all_records(store_path, "u")[0][5:]
    assert [(r.value, r.timestamp, r.headers) for r in u] == [(b"v0", T0, (("h", b"x"),))]
    t = _all_records(store_path, "t")
    new = {p: [(r.value, r.timestamp) for r in rs[100:]] for p, rs in t.items()}
    assert (b"v2", T0 + 5) in new[1]
    assert sorted(v for rs in new.values() for v, _ in rs) == [b"v1", b"v2", b"v3"]


def test_write_topic_option_beats_the_topic_column(store_path):
    """As in Kafka's sink: with a topic option every row goes there, whatever its topic column says."""
    batch = _sink_batch(3, keyed=False, topic=pa.array(["u", None, "t"]))
    write_batches(WriteOptions(store_path, "t"), iter([batch]))
    assert len(_all_records(store_path, "u")[0]) == 5  # untouched
    assert sorted(r.value for rs in _all_records(store_path, "t").values() for r in rs[100:]) == [b"v0", b"v1", b"v2"]
    with pytest.raises(InvalidOptionError, match="'topic': rows with a null 'topic' and no topic option"):
        write_batches(WriteOptions(store_path, None), iter([batch]))


def test_write_creates_missing_topics_only_when_asked(store_path):
    from pylog.spark.writer import prepare_topics

    with pytest.raises(pylog.UnknownTopicError, match=r"'new' does not exist.*autoCreateTopics"):
        prepare_topics(WriteOptions(store_path, "new"))
    prepare_topics(WriteOptions(store_path, None))  # topics from a column: the tasks check them
    opts = WriteOptions(store_path, None, auto_create_topics=True, num_partitions=3)
    prepare_topics(WriteOptions(store_path, "new", auto_create_topics=True, num_partitions=3))
    prepare_topics(WriteOptions(store_path, "new", auto_create_topics=True, num_partitions=5))  # exists: kept
    write_batches(opts, iter([_sink_batch(4, keyed=False, topic=pa.array(["new", "col", "col", "new"]))]))
    with pylog.open(store_path) as store:
        assert store.topic("new").num_partitions == 3 and store.topic("col").num_partitions == 3
    assert sorted(r.value for rs in _all_records(store_path, "col").values() for r in rs) == [b"v1", b"v2"]
    with pytest.raises(pylog.InvalidTopicError, match="internal topic"):
        prepare_topics(WriteOptions(store_path, "__consumer_offsets", auto_create_topics=True))


def test_write_errors_are_clear(store_path):
    with pytest.raises(pylog.UnknownTopicError, match="'nope' does not exist.*create it first"):
        write_batches(WriteOptions(store_path, "nope"), iter([_sink_batch(3)]))
    with pytest.raises(pylog.InvalidRecordError, match="partition 7 does not exist"):
        write_batches(WriteOptions(store_path, "t"), iter([_sink_batch(2, partition=pa.array([0, 7], pa.int32()))]))
    with pytest.raises(InvalidOptionError, match="'topic'"):
        write_batches(WriteOptions(store_path, None), iter([_sink_batch(2)]))


def test_write_waits_for_a_locked_partition_then_fails_clearly(store_path):
    holder = pylog.open(store_path)
    try:
        holder.topic("u").partition(0).append_values([b"held"])  # this handle now holds u-0's writer lock
        with pytest.raises(pylog.PartitionLockedError, match="lockTimeoutMs=50"):
            write_batches(WriteOptions(store_path, "u", lock_timeout_ms=50), iter([_sink_batch(3)]))
        done = []
        release = threading.Timer(0.2, holder.close)  # the application lets go while the task waits
        release.start()
        done.append(write_batches(WriteOptions(store_path, "u", lock_timeout_ms=30_000), iter([_sink_batch(3)])))
        release.join()
        assert done[0].rows == 3
        assert [r.value for r in _all_records(store_path, "u")[0]][-4:] == [b"held", b"v0", b"v1", b"v2"]
    finally:
        holder.close()


def test_import_pylog_loads_no_spark():
    code = ("import sys, pylog; bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'pandas')"
            " or m.startswith('pylog.spark')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(__file__))


def test_discovery_module_is_visible_to_pyspark_lookup(tmp_path):
    """PySpark finds sources with pkgutil.iter_modules: the install must expose pyspark_pylog to it from any
    directory (setup.cfg's package_dir makes an editable install a plain path entry)."""
    code = ("import pkgutil, pyspark_pylog; assert 'pyspark_pylog' in {m.name for m in pkgutil.iter_modules()}; "
            "assert pyspark_pylog.DefaultSource.name() == 'pylog'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(tmp_path))


def test_spark_doc_options_table_lists_every_option():
    """docs/SPARK.md's table compares every option the code knows (pylog's and the Kafka ones it ignores)."""
    from pathlib import Path

    from pylog.spark.options import known_options

    text = (Path(__file__).resolve().parent.parent / "docs" / "SPARK.md").read_text()
    table = text[text.index("## Options compared with Kafka's source and sink"):]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    documented = {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}
    assert set(known_options()) <= documented, set(known_options()) - documented
    assert {"kafka.bootstrap.servers", "kafka.group.id", "kafka.partitioner.class"} <= documented
