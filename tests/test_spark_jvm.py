"""The JVM reader (pylog/java) against the Python reader, the reference: the same rows, columns and errors.

In the shared session the jar is loaded, so ``format("pylog")`` (the ``jvm_reader`` fixture) is the JVM
provider and ``format("pylog-python")`` the Python source.

Each test writes a store through pylog's public API (plain, lz4, headers, null keys and values, compacted gaps,
a torn tail, records removed from the head) and reads it with both readers in the shared session; every column
of every row must be equal. Option errors must carry the Python reader's message.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

import pylog

pytestmark = pytest.mark.spark


def _rows(df):
    return [tuple(r) for r in sorted(df.collect(), key=lambda r: (r["topic"], r["partition"], r["offset"]))]


def _both(spark, jvm_reader, path, **options):
    options = {k: str(v) for k, v in options.items()}
    jvm = spark.read.format(jvm_reader).options(**options).load(str(path))
    py = spark.read.format("pylog-python").options(**options).load(str(path))
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


def _counting_store(tmp_path, topic: str, count: int):
    """A store with ``topic`` of 2 partitions, each holding the values b"0" .. b"<count - 1>"; its path."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic(topic, partitions=2)
        for n in range(2):
            store.topic(topic).partition(n).append_values([b"%d" % i for i in range(count)])
    return path


def test_jvm_reader_offset_ranges_splits_and_pruned_columns(spark, jvm_reader, tmp_path):
    path = _counting_store(tmp_path, "r", 1000)
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
    {"subscribe": "r", "startingTimestamp": "-5"},
    {"subscribe": "r", "startingTimestamp": "9999999999999"},
    {"subscribe": "r", "endingOffsetsByTimestamp": '{"r":{"0":-3,"1":5}}'},
    {"subscribe": "r", "startingOffsetsByTimestamp": '{"r":{"0":5}}'},
    {"subscribe": "r", "startingOffsetsByTimestampStrategy": "sometimes"},
])
def test_jvm_reader_refuses_bad_options_with_the_python_readers_message(spark, jvm_reader, tmp_path, options):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("r", partitions=2)
        store.topic("r").partition(0).append_values([b"x"] * 10)
    messages = []
    for fmt in (jvm_reader, "pylog-python"):
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


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_jvm_reader_timestamp_options_and_pushed_filters_read_what_the_python_reader_reads(spark, jvm_reader,
                                                                                           tmp_path, request):
    path = tmp_path / "store"
    base = 1_700_000_000_000
    with pylog.open(path) as store:
        store.create_topic("t", partitions=3, config={"segment.bytes": 8 * 1024})
        producer = store.producer()
        for i in range(3000):   # timestamps grow with offsets, except a few late records
            late = i % 97 == 0
            producer.send("t", value=b"%d" % i, partition=i % 3, timestamp_ms=base + (i - 500 if late else i) * 10)
        producer.flush()
        producer.close()
    cases = [
        dict(subscribe="t", startingTimestamp=base + 10_000),
        dict(subscribe="t", startingTimestamp=base + 10_000, endingTimestamp=base + 20_000),
        dict(subscribe="t", startingOffsetsByTimestamp=f'{{"t":{{"0":{base + 5_000},"1":0,"2":{base}}}}}',
             endingOffsetsByTimestamp=f'{{"t":{{"0":{base + 25_000},"1":{base + 29_000},"2":{base + 10 ** 9}}}}}'),
        dict(subscribe="t", startingTimestamp=base + 10 ** 9, startingOffsetsByTimestampStrategy="latest"),
    ]
    for options in cases:
        _same(spark, jvm_reader, path, **options)
    ts = f"timestamp_millis({base + 15_000})"
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    request.addfinalizer(lambda: spark.conf.unset("spark.sql.python.filterPushdown.enabled"))
    for where in ("offset > 900", "partition = 1 and offset between 100 and 200", "partition in (0, 2)",
                  f"timestamp >= {ts}", f"timestamp > {ts} and offset < 950", "offset in (5, 7, 999)"):
        jvm, py = _both(spark, jvm_reader, path, subscribe="t", filterPushdown="true")
        a, b = _rows(jvm.where(where)), _rows(py.where(where))
        assert a == b and a, where
        assert jvm.where(where).count() == len(a)
    cut = spark.read.format(jvm_reader).option("subscribe", "t").load(str(path)).where("offset >= 990")
    assert cut.rdd.getNumPartitions() == 1 and cut.count() == 3 * 10   # three small ranges, one task


def test_jvm_reader_packs_the_small_ranges_a_filter_leaves_into_one_task(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("small", partitions=3)
        store.create_topic("big", partitions=2)
        for n in range(3):
            store.topic("small").partition(n).append_values([b"%d-%d" % (n, i) for i in range(1000)])
        for n in range(2):   # 9 MB per partition: two ranges of it exceed one packed task's 16 MiB
            store.topic("big").partition(n).append_values([bytes([n]) * 10_000] * 900)
    small = spark.read.format(jvm_reader).option("subscribe", "small").load(str(path))
    assert small.rdd.getNumPartitions() == 3   # unfiltered: one task per partition, as Kafka's source plans
    for where in ("offset >= 990", "offset >= 400 and offset < 420", "partition in (0, 2) and offset < 3"):
        jvm, py = _both(spark, jvm_reader, path, subscribe="small")
        assert jvm.where(where).rdd.getNumPartitions() == 1, where
        assert _rows(jvm.where(where)) == _rows(py.where(where)) != [], where
    for options, tasks in (({"maxRecordsPerPartition": "5"}, 6), ({"minPartitions": "6"}, 6)):
        df = spark.read.format(jvm_reader).option("subscribe", "small").options(**options).load(str(path))
        assert df.where("offset >= 990").rdd.getNumPartitions() == tasks, options   # asked-for splits stay
    big = spark.read.format(jvm_reader).option("subscribe", "big").load(str(path)).where("offset >= 10")
    assert big.rdd.getNumPartitions() == 2
    assert big.selectExpr("count(*)", "sum(length(value))").collect()[0] == (2 * 890, 2 * 890 * 10_000)


def test_one_name_reads_on_the_jvm_and_writes_through_the_python_writer_in_spark_default_mode(
        spark, jvm_reader, tmp_path):
    from pylog.spark import which_reader
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("w", partitions=2)
    assert which_reader(spark) == "jvm"
    df = spark.range(100).selectExpr("cast(id as string) as key", "cast(id * 2 as string) as value")
    # Through the JVM's own DataFrameWriter (not PySpark's, whose wrapper turns the default mode into append):
    # Spark's default mode, ErrorIfExists, reaches the provider and appends, as Kafka's sink does.
    df._jdf.write().format("pylog").option("topic", "w").save(str(path))
    df.write.format("pylog").option("topic", "w").mode("append").save(str(path))
    for mode in ("overwrite", "ignore"):
        with pytest.raises(Exception, match="a pylog topic is append-only"):
            df._jdf.write().format("pylog").option("topic", "w").mode(mode).save(str(path))
    read = spark.read.format("pylog").option("subscribe", "w").load(str(path))
    assert "JVM reader" in _plan(read)
    assert read.count() == 200
    assert sorted(r[0] for r in read.selectExpr("cast(value as string)").collect()) == \
        sorted([str(i * 2) for i in range(100)] * 2)


def test_transactions_control_batches_are_skipped_and_read_committed_reads_what_the_python_source_reads(
        spark, jvm_reader, tmp_path):
    from pylog.partition import internals
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=1)
        p = store.topic("t").partition(0)
        p.append_values([b"plain-%d" % i for i in range(5)])
        for n, commit in enumerate((True, False, True)):
            pid = store.new_producer_id()
            p.append_values([b"txn%d-%d" % (n, i) for i in range(4)], producer=(pid, 0, 0), transactional=True)
            internals(p).append_marker(pid, 0, commit=commit)
        p.append_values([b"plain-last"])
        pid = store.new_producer_id()   # an open transaction at the end: read_committed stops before it
        p.append_values([b"open"], producer=(pid, 0, 0), transactional=True)
    rows = _same(spark, jvm_reader, path, subscribe="t")     # read_uncommitted: every record, no marker
    assert len(rows) == 5 + 12 + 1 + 1
    committed = spark.read.format(jvm_reader).option("subscribe", "t").option("kafka.isolation.level", "read_committed")
    committed = committed.load(str(path))
    assert "JVM reader" in _plan(committed)
    values = sorted(bytes(r[0]) for r in committed.select("value").collect())
    assert values == sorted([b"plain-%d" % i for i in range(5)] + [b"txn0-%d" % i for i in range(4)]
                            + [b"txn2-%d" % i for i in range(4)] + [b"plain-last"])
    rows = _same(spark, jvm_reader, path, subscribe="t", **{"kafka.isolation.level": "read_committed"})
    assert sorted(bytes(r[1]) for r in rows) == values       # every column as the Python source reads it
    counted = committed.selectExpr("count(*) as n")
    assert "count(*) from batch headers" in _plan(counted) and counted.collect()[0].n == len(values)
    # the open transaction starts at offset 21 (5 + 3 x (4 + a marker) + 1): the last stable offset, which a batch
    # read's end may not pass
    ending = {"subscribe": "t", "kafka.isolation.level": "read_committed", "endingOffsets": '{"t": {"0": 22}}'}
    # a start there: both said "beyond the log end 21", naming the last stable offset the log end (it is 22)
    starting = {"subscribe": "t", "kafka.isolation.level": "read_committed", "startingOffsets": '{"t": {"0": 22}}'}
    for fmt in (jvm_reader, "pylog-python"):
        with pytest.raises(Exception, match="end offset 22 is beyond the last stable offset .*read_committed.* 21"):
            spark.read.format(fmt).options(**ending).load(str(path)).collect()
        with pytest.raises(Exception, match="start offset 22 is beyond the last stable offset .*read_committed.* 21"):
            spark.read.format(fmt).options(**starting).load(str(path)).collect()
    with pytest.raises(Exception, match="option 'kafka.isolation.level': expected read_uncommitted or read_committed"):
        spark.read.format("pylog").option("subscribe", "t").option("kafka.isolation.level", "serializable") \
            .load(str(path)).collect()


def _aborts_then_y(tmp_path, count):
    """A store whose topic t's partition 0 holds ``count`` aborted transactions of 3 records each, then a plain
    ``y``: ``(store path, its .txnindex's path, the index's bytes)``."""
    from pylog.partition import internals
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=1)
        p = store.topic("t").partition(0)
        for n in range(count):
            pid = store.new_producer_id()
            p.append_values([b"x%d" % n] * 3, producer=(pid, 0, 0), transactional=True)
            internals(p).append_marker(pid, 0, commit=False)
        p.append_values([b"y"])
        index = p.directory + "/00000000000000000000.txnindex"
    return path, index, open(index, "rb").read()


def test_a_damaged_aborted_transaction_index_fails_both_readers_at_read_committed(spark, jvm_reader, tmp_path):
    """A flipped byte in an index entry made both readers skip the entries from it on and return aborted
    records as committed; a torn last entry (no marker after it: a crash before its fsync) reads on."""
    path, index, good = _aborts_then_y(tmp_path, 3)
    committed = {"subscribe": "t", "kafka.isolation.level": "read_committed"}
    for damage in (8 + 20, len(good) - 3):   # the first entry; the last one, which its marker follows
        raw = bytearray(good)
        raw[damage] ^= 0xFF
        open(index, "wb").write(raw)
        for fmt in (jvm_reader, "pylog-python"):
            with pytest.raises(Exception, match="CorruptRecordError.*aborted-transaction index entry checksum"):
                spark.read.format(fmt).options(**committed).load(str(path)).collect()
    open(index, "wb").write(good + bytes(36))   # a torn 4th entry whose marker never landed
    rows = _same(spark, jvm_reader, path, **committed)
    assert [bytes(r[1]) for r in rows] == [b"y"]


def test_a_torn_last_index_entry_after_a_commit_marker_reads_on_in_both_readers(spark, jvm_reader, tmp_path):
    """A commit marker after the index's entries (commits have no entry) made both readers take a torn last
    entry (an abort's, written before its marker landed) for damage and refuse read_committed reads."""
    from pylog.partition import internals
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=1)
        p = store.topic("t").partition(0)
        for commit in (False, True):
            pid = store.new_producer_id()
            p.append_values([b"c" if commit else b"x"] * 3, producer=(pid, 0, 0), transactional=True)
            internals(p).append_marker(pid, 0, commit=commit)
        index = p.directory + "/00000000000000000000.txnindex"
    with open(index, "ab") as f:
        f.write(bytes(range(36)))
    rows = _same(spark, jvm_reader, path, subscribe="t", **{"kafka.isolation.level": "read_committed"})
    assert [bytes(r[1]) for r in rows] == [b"c"] * 3


def test_an_index_cut_inside_its_last_entry_fails_both_readers_at_read_committed(spark, jvm_reader, tmp_path):
    """Bytes after an index's last whole entry ended its entries in both readers, even with the cut entry's
    abort marker in the log (active segment) or in a sealed index: the aborted records were read as
    committed. A cut entry of the active index with no abort marker after it (a crash) still reads on."""
    from pylog.partition import internals
    path, index, good = _aborts_then_y(tmp_path, 2)
    committed = {"subscribe": "t", "kafka.isolation.level": "read_committed"}
    for roll in (False, True):
        if roll:
            with pylog.open(path, log_cleaner_enable=False) as store:
                p = store.topic("t").partition(0)
                p.roll()
                p.append_values([b"z"])
        open(index, "wb").write(good[:-10])
        for fmt in (jvm_reader, "pylog-python"):
            with pytest.raises(Exception, match="CorruptRecordError.*aborted-transaction index.*torn entry"):
                spark.read.format(fmt).options(**committed).load(str(path)).collect()
        open(index, "wb").write(good)
    assert [bytes(r[1]) for r in _same(spark, jvm_reader, path, **committed)] == [b"y", b"z"]
    # The active segment's index cut inside a third entry that no abort marker follows: a torn write.
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        index = p.directory + "/%020d.txnindex" % p.segments[-1].base_offset
        pid = store.new_producer_id()
        p.append_values([b"x2"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        cut = open(index, "rb").read()
        p.append_values([b"w"])
    open(index, "wb").write(cut + cut[-36:-10])
    rows = _same(spark, jvm_reader, path, **committed)
    assert [bytes(r[1]) for r in rows] == [b"y", b"z", b"w"]


def test_an_active_index_with_a_torn_first_write_reads_on_unless_an_abort_marker_follows_in_both_readers(
        spark, jvm_reader, tmp_path):
    """The index file is created by its first entry's write: a crash before its fsync may leave it empty or
    zero-filled, with no marker after it (a torn write: both readers read on; a zeroed header failed every
    read_committed read). Emptied while abort markers follow, both readers read the aborted records."""
    path, index, _ = _aborts_then_y(tmp_path, 2)
    committed = {"kafka.isolation.level": "read_committed"}
    open(index, "wb").write(b"")
    for fmt in (jvm_reader, "pylog-python"):
        with pytest.raises(Exception, match="CorruptRecordError.*aborted-transaction index has a torn first write"):
            spark.read.format(fmt).options(subscribe="t", **committed).load(str(path)).collect()
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("u", partitions=1)
        p = store.topic("u").partition(0)
        p.append_values([b"plain"])
        open(p.directory + "/00000000000000000000.txnindex", "wb").write(bytes(44))
    rows = _same(spark, jvm_reader, path, subscribe="u", **committed)
    assert [bytes(r[1]) for r in rows] == [b"plain"]


def test_a_torn_last_index_entry_after_an_abort_without_records_here_reads_on_in_both_readers(spark, jvm_reader,
                                                                                             tmp_path):
    """An abort marker of a transaction with no record in the partition has no index entry (a coordinator marks
    every partition added to the transaction): both readers took a crash-torn entry after one for damage and
    refused read_committed reads. An abort that had records here still makes the torn entry damage."""
    from pylog.partition import internals
    path, index, good = _aborts_then_y(tmp_path, 2)
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        internals(p).append_marker(store.new_producer_id(), 0, commit=False)
        p.append_values([b"after"])
    open(index, "ab").write(bytes(range(36)))
    committed = {"subscribe": "t", "kafka.isolation.level": "read_committed"}
    assert [bytes(r[1]) for r in _same(spark, jvm_reader, path, **committed)] == [b"y", b"after"]
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        pid = store.new_producer_id()
        p.append_values([b"x9"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
    raw = bytearray(open(index, "rb").read())
    raw[-3] ^= 0xFF   # that abort's entry, whole once (its marker follows)
    open(index, "wb").write(raw)
    for fmt in (jvm_reader, "pylog-python"):
        with pytest.raises(Exception, match="CorruptRecordError.*abort marker follows"):
            spark.read.format(fmt).options(**committed).load(str(path)).collect()


def test_streams_on_the_jvm_read_the_micro_batches_the_python_source_reads_and_report_lag(spark, jvm_reader,
                                                                                           tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("s", partitions=2)
        for fmt in ("pylog", "pylog-python"):
            store.create_topic(f"out-{fmt}", partitions=1)
        for n in range(2):
            store.topic("s").partition(n).append_values([b"%d-%d" % (n, i) for i in range(30 + 7 * n)])
    progress = {}
    for fmt in ("pylog", "pylog-python"):
        query = (spark.readStream.format(fmt).option("subscribe", "s").option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", 25).load(str(path)).select("value")
                 .writeStream.format("pylog").option("topic", f"out-{fmt}")
                 .option("checkpointLocation", str(tmp_path / f"cp-{fmt}"))
                 .trigger(availableNow=True).start(str(path)))
        assert query.awaitTermination(300)
        assert query.exception() is None
        progress[fmt] = [p for p in query.recentProgress if p["numInputRows"]]
        with pylog.open(path) as store:
            got = sorted(r.value for r in store.topic(f"out-{fmt}").partition(0).read(0, max_records=1000))
        assert got == sorted(b"%d-%d" % (n, i) for n in range(2) for i in range(30 + 7 * n))
    assert [p["numInputRows"] for p in progress["pylog"]] == [p["numInputRows"] for p in progress["pylog-python"]] \
        == [25, 25, 17]
    assert [p["sources"][0]["endOffset"] for p in progress["pylog"]] == \
        [p["sources"][0]["endOffset"] for p in progress["pylog-python"]]
    # The first micro-batch ends at {0: 11, 1: 14} (25 offsets shared by backlog, 30 and 37), the logs at 30 and 37:
    # the Kafka source's lag metrics, which only the JVM reader reports.
    lag = progress["pylog"][0]["sources"][0]["metrics"]
    assert (lag["minOffsetsBehindLatest"], lag["maxOffsetsBehindLatest"], lag["avgOffsetsBehindLatest"]) == \
        ("19", "23", "21.0")
    assert "maxOffsetsBehindLatest" not in progress["pylog-python"][0]["sources"][0].get("metrics", {})


def test_jvm_stream_holds_a_micro_batch_back_until_min_offsets_per_trigger_wait(spark, jvm_reader, tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("m", partitions=2)
        store.topic("m").partition(0).append_values([b"a%d" % i for i in range(30)])
    query = (spark.readStream.format("pylog").option("subscribe", "m").option("startingOffsets", "earliest")
             .option("minOffsetsPerTrigger", 100).option("maxTriggerDelay", "1h").load(str(path)).select("value")
             .writeStream.format("memory").queryName("min_offsets_per_trigger")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="100 milliseconds").start())
    try:
        query.processAllAvailable()   # 30 offsets wait, fewer than 100, and the delay is an hour: no micro-batch
        assert spark.sql("select * from min_offsets_per_trigger").count() == 0
        with pylog.open(path) as store:
            store.topic("m").partition(1).append_values([b"b%d" % i for i in range(80)])
        query.processAllAvailable()
        assert spark.sql("select * from min_offsets_per_trigger").count() == 110
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [110]
    finally:
        query.stop()


def _committed_store(path) -> dict[str, int]:
    """A topic ``rc`` of 2 partitions in segments of 2 KiB: plain records, transactions of two producers
    interleaved (one committed, one aborted, each over several batches and segments), and at the end of
    partition 0 a transaction left open with plain records after it. Returns the producer ids by role."""
    from pylog.partition import internals
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("rc", partitions=2, config={"segment.bytes": 2048})
        ids = {role: store.new_producer_id() for role in ("commit0", "abort0", "open0", "abort1", "commit1")}
        for n, (commit, abort) in enumerate((("commit0", "abort0"), ("commit1", "abort1"))):
            p = store.topic("rc").partition(n)
            p.append_values([b"p%d-plain-%d" % (n, i) for i in range(9)])
            for seq in range(0, 12, 3):
                for role in (commit, abort):
                    p.append_values([b"p%d-%s-%d" % (n, role.encode(), seq + i) for i in range(3)],
                                    producer=(ids[role], 0, seq), transactional=True)
                p.append_values([b"p%d-between-%d" % (n, seq)])
            internals(p).append_marker(ids[commit], 0, commit=True)
            internals(p).append_marker(ids[abort], 0, commit=False)
            p.append_values([b"p%d-after-%d" % (n, i) for i in range(5)])
        p0 = store.topic("rc").partition(0)
        p0.append_values([b"p0-open-%d" % i for i in range(4)], producer=(ids["open0"], 0, 0), transactional=True)
        p0.append_values([b"p0-tail-%d" % i for i in range(6)])
    return ids


def test_read_committed_streams_on_the_jvm_read_what_the_python_source_reads(spark, jvm_reader, tmp_path):
    """Two availableNow runs over one checkpoint per reader at read_committed, 7 offsets per micro-batch: the
    first stops at partition 0's open transaction, the second (after it committed, another transaction was
    aborted and partition 1's producer snapshot was damaged) reads on. Every column of every row, the
    micro-batches and their end offsets are the Python source's; only the JVM stream reports lag metrics."""
    from pylog.partition import internals
    path = tmp_path / "store"
    ids = _committed_store(path)

    def run(fmt, round_no):
        got = []
        query = (spark.readStream.format(fmt).option("subscribe", "rc").option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", 7)
                 .load(str(path)).writeStream.foreachBatch(lambda df, _: got.extend(tuple(r) for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / f"cp-{fmt}")).trigger(availableNow=True).start())
        assert query.awaitTermination(300)
        assert query.exception() is None
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        return sorted(got, key=lambda r: (r[2], r[3], r[4])), progress

    def both(round_no):
        (jvm, jvm_progress), (py, py_progress) = (run(fmt, round_no) for fmt in (jvm_reader, "pylog-python"))
        assert jvm == py
        assert [p["numInputRows"] for p in jvm_progress] == [p["numInputRows"] for p in py_progress]
        assert [p["sources"][0]["endOffset"] for p in jvm_progress] == \
            [p["sources"][0]["endOffset"] for p in py_progress]
        assert "maxOffsetsBehindLatest" in jvm_progress[0]["sources"][0]["metrics"]   # the JVM stream ran
        return [bytes(r[1]) for r in jvm]

    first = both(1)
    assert not [v for v in first if b"abort" in v or b"open" in v or b"tail" in v]
    assert len(first) == 2 * (9 + 12 + 4 + 5)
    with pylog.open(path, log_cleaner_enable=False) as store:
        p0, p1 = store.topic("rc").partition(0), store.topic("rc").partition(1)
        internals(p0).append_marker(ids["open0"], 0, commit=True)
        p1.append_values([b"p1-late-abort"], producer=(ids["abort1"], 0, 12), transactional=True)
        internals(p1).append_marker(ids["abort1"], 0, commit=False)
        p1.append_values([b"p1-last"])
    snapshot = path / "rc" / "1" / "producer.snapshot"
    raw = bytearray(snapshot.read_bytes())
    raw[10] ^= 0xFF
    snapshot.write_bytes(bytes(raw))
    second = both(2)
    assert sorted(second) == sorted([b"p0-open-%d" % i for i in range(4)] + [b"p0-tail-%d" % i for i in range(6)]
                                    + [b"p1-last"])


def test_read_committed_micro_batch_ending_inside_an_aborted_transaction_whose_marker_is_segments_later(
        spark, jvm_reader, tmp_path):
    """Micro-batches of 4 offsets cut an aborted transaction of 30 one-record batches over several 1 KiB
    segments: each micro-batch's range ends segments before the abort marker (and its index entry), and
    still none of its records is read, on either reader."""
    from pylog.partition import internals
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("cut", partitions=1, config={"segment.bytes": 1024})
        p = store.topic("cut").partition(0)
        pid = store.new_producer_id()
        p.append_values([b"before-%d" % i for i in range(3)])
        for seq in range(30):
            p.append_values([b"abort-%d" % seq], producer=(pid, 0, seq), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        p.append_values([b"after-%d" % i for i in range(3)])
    assert len([f for f in os.listdir(path / "cut" / "0") if f.endswith(".log")]) >= 3
    got = {}
    for fmt in (jvm_reader, "pylog-python"):
        rows = []
        query = (spark.readStream.format(fmt).option("subscribe", "cut").option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", "read_committed").option("maxOffsetsPerTrigger", 4)
                 .load(str(path)).writeStream
                 .foreachBatch(lambda df, _, rows=rows: rows.extend(tuple(r) for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / f"cp-{fmt}")).trigger(availableNow=True).start())
        assert query.awaitTermination(300)
        assert query.exception() is None
        got[fmt] = sorted(rows, key=lambda r: r[4])
    assert got[jvm_reader] == got["pylog-python"]
    assert [bytes(r[1]) for r in got[jvm_reader]] == [b"before-%d" % i for i in range(3)] + \
        [b"after-%d" % i for i in range(3)]


def test_spark_jar_command_prints_the_cached_jar_the_session_loaded(spark, jvm_reader, capsys):
    from pylog import jvm
    from pylog.cli import main
    assert main(["spark-jar"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == jvm.jar_path()
    assert printed in spark.conf.get("spark.jars")
    assert f"Spark reader: JVM ({printed})" == jvm.describe()


def test_both_readers_read_the_golden_store_as_its_manifest_says(spark, jvm_reader, tmp_path):
    golden = Path(__file__).parent / "golden"
    manifest = json.loads((golden / "manifest.json").read_text())["store"]
    path = tmp_path / "store"
    shutil.copytree(golden / manifest["path"], path)
    rows = _same(spark, jvm_reader, path, subscribe=manifest["topic"], includeHeaders="true")
    assert [(r[4], None if r[0] is None else bytes(r[0]).hex(), None if r[1] is None else bytes(r[1]).hex(),
             [[h[0], None if h[1] is None else bytes(h[1]).hex()] for h in r[7] or []]) for r in rows] == \
        [(m["offset"], m["key"], m["value"], m["headers"]) for m in manifest["records"]]


def test_both_readers_read_a_random_store_identically(spark, jvm_reader, tmp_path, seed=31):
    """Random batches (sizes, nulls, headers, timestamps; lz4 in one topic), transactions committed, aborted and
    left open, a random head removed, compaction: every column of every row of both readers, with and without a
    random offset window, at both isolation levels."""
    from pylog.partition import internals
    rng = random.Random(seed)
    path = tmp_path / "store"

    ends: list[bool] = []

    def transaction(p, commit):
        ends.append(bool(commit))
        pid = store.new_producer_id()
        m = rng.randint(1, 9)
        p.append_values([rng.randbytes(rng.randint(0, 50)) for _ in range(m)],
                        keys=[b"t%d" % rng.randint(0, 20) for _ in range(m)], producer=(pid, 0, 0), transactional=True)
        if commit is not None:
            internals(p).append_marker(pid, 0, commit=commit)

    with pylog.open(path, log_cleaner_enable=False) as store:
        for t in range(2):
            store.create_topic(f"r{t}", partitions=rng.randint(1, 3),
                               config={"segment.bytes": rng.choice([4096, 32 * 1024, 1 << 20]),
                                       "compression.type": ["lz4", "none"][t],
                                       "cleanup.policy": "compact" if t else "delete",
                                       "min.cleanable.dirty.ratio": 0.01})
            topic = store.topic(f"r{t}")
            for n in range(topic.num_partitions):
                p = topic.partition(n)
                for _ in range(rng.randint(1, 40)):
                    k = rng.randint(1, 60)
                    p.append_values(
                        [None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 300)) for _ in range(k)],
                        keys=[None if t == 0 and rng.random() < 0.2 else b"k%d" % rng.randint(0, 20) for _ in range(k)],
                        timestamps=[1_700_000_000_000 + rng.randint(0, 10 ** 6) for _ in range(k)],
                        headers=[[("h%d" % j, None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 9)))
                                  for j in range(rng.randint(0, 3))] for _ in range(k)])
                    if rng.random() < 0.5:  # a transaction, committed and aborted in turn
                        transaction(p, len(ends) % 2 == 0)
                if rng.random() < 0.3:
                    transaction(p, None)  # left open: the last stable offset stops before it
                if rng.random() < 0.5:
                    store.delete_records(f"r{t}", n, rng.randint(0, p.log_end_offset))
        store.compact("r1")
    _same(spark, jvm_reader, path, subscribePattern="r.*", includeHeaders="true", failOnDataLoss="false")
    _same(spark, jvm_reader, path, subscribe="r0", failOnDataLoss="false", maxRecordsPerPartition=rng.randint(1, 90))
    committed = {"kafka.isolation.level": "read_committed", "failOnDataLoss": "false"}
    _same(spark, jvm_reader, path, subscribePattern="r.*", includeHeaders="true", **committed)
    _same(spark, jvm_reader, path, subscribe="r1", minPartitions=rng.randint(2, 9), **committed)


def _planned(spark, fmt, path, **options):
    """The RDD of a read whose offset ranges are planned now and read when an action runs on it."""
    df = spark.read.format(fmt).options(**{k: str(v) for k, v in options.items()}).load(str(path))
    return df._jdf.queryExecution().executedPlan().execute()


def _loss_message(text: str, topic: str) -> str:
    lines = [line for line in text.splitlines() if f"{topic}-0: " in line]
    assert lines, text
    return lines[0][lines[0].index(f"{topic}-0: "):].strip()


def test_jvm_reader_fails_on_data_loss_while_reading_as_the_python_reader_does(spark, jvm_reader, tmp_path):
    """Records removed (delete-records, retention) or a log cut short between planning and reading: with
    failOnDataLoss both readers fail with the same message, without it both skip what is gone."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("t", partitions=1)
        store.create_topic("cut", partitions=1)
        p = store.topic("t").partition(0)
        p.append_values([b"x%d" % i for i in range(60)])
        p.append_values([b"y%d" % i for i in range(40)])
        p.roll()
        p.append_values([b"z%d" % i for i in range(10)])
        q = store.topic("cut").partition(0)
        q.append_values([b"a%d" % i for i in range(50)])
        q.append_values([b"b%d" % i for i in range(50)])
    fmts = (jvm_reader, "pylog-python")
    plans = {(fmt, fail, topic): _planned(spark, fmt, path, subscribe=topic, failOnDataLoss=fail)
             for fmt in fmts for fail in ("true", "false") for topic in ("t", "cut")}
    with pylog.open(path) as store:
        store.delete_records("t", 0, 70)    # the log start moves inside the first segment
    log = path / "cut" / "0" / "00000000000000000000.log"
    with open(log, "r+b") as f:             # the second batch gone: a log truncated after planning
        f.truncate(log.stat().st_size // 2)
    for topic, expected in (("t", "t-0: offsets [0, 70) were removed before they were read (the log now starts at "
                                  "70) (set failOnDataLoss=false to skip what is gone)"),
                            ("cut", "cut-0: the log ends at 50, before offset 100 that the query planned to read up "
                                    "to (set failOnDataLoss=false to skip what is gone)")):
        for fmt in fmts:
            with pytest.raises(Exception) as info:
                plans[fmt, "true", topic].count()
            assert _loss_message(str(info.value), topic) == expected, fmt
        assert plans[jvm_reader, "false", topic].count() == plans["pylog-python", "false", topic].count() == \
            (40 if topic == "t" else 50)


def test_jvm_reader_seeks_timestamps_through_the_time_index_as_the_python_reader_does(spark, jvm_reader, tmp_path):
    """Timestamp options and a pushed timestamp filter over sealed segments, a live (unsealed) active segment,
    a missing time index and a damaged batch before the indexes' first entries: both readers seek through the
    time and offset indexes (the damaged batch is never read), walk headers where an index ends or is missing,
    and start at the same offsets."""
    path = tmp_path / "store"
    base = 1_700_000_000_000
    rng = random.Random(13)
    writer = pylog.open(path)     # left open: the active segments' indexes stay live while Spark reads
    try:
        writer.create_topic("ts", partitions=3, config={"segment.bytes": 8 * 1024, "index.interval.bytes": 256})
        for n in range(3):
            p = writer.topic("ts").partition(n)
            for b in range(150):  # batches of 5; timestamps rise with offsets, with a few late records
                offs = range(b * 5, b * 5 + 5)
                p.append_values([b"v%d" % o for o in offs],
                                timestamps=[base + o * 10 - (3000 if rng.random() < 0.05 else 0) for o in offs])
        first = "00000000000000000000"
        os.remove(path / "ts" / "1" / f"{first}.timeindex")
        with open(path / "ts" / "2" / f"{first}.log", "r+b") as f:   # the first batch's length: garbage
            f.seek(8)
            f.write(b"\x7f\xff\xff\x7f")
        assert len(list((path / "ts" / "0").glob("*.log"))) >= 3
        for lo in (base + 400, base + 2_350, base + 4_500):
            starts = {n: lo + n * 1_111 for n in range(3)}
            _same(spark, jvm_reader, path, subscribe="ts",
                  startingOffsetsByTimestamp=json.dumps({"ts": {str(n): t for n, t in starts.items()}}),
                  endingOffsetsByTimestamp=json.dumps({"ts": {str(n): t + 700 for n, t in starts.items()}}))
        _same(spark, jvm_reader, path, subscribe="ts", startingTimestamp=base + 7_000)
        where = f"timestamp >= timestamp_millis({base + 3_333})"  # pushed down on the JVM: a time index seek
        jvm, py = _both(spark, jvm_reader, path, assign='{"ts":[0,1]}')
        jvm, py = jvm.where(where), py.where(where)
        assert _rows(jvm) == _rows(py) and jvm.count() > 0
    finally:
        writer.close()


def test_streaming_aggregation_writes_to_a_topic_in_update_and_complete_modes_as_kafkas_sink(
        spark, jvm_reader, tmp_path):
    """A running count per key written to a topic, as with Spark's Kafka sink: update mode appends each
    micro-batch's changed rows, complete mode the whole result every micro-batch (the Python writer through the
    JVM provider; complete mode through the Python source alone too)."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("in", partitions=1)
        store.topic("in").partition(0).append_values([b"%d" % i for i in range(30)],
                                                      keys=[b"k%d" % (i % 3) for i in range(30)])

    def run(fmt: str, mode: str, topic: str) -> None:
        counts = (spark.readStream.format(jvm_reader).option("subscribe", "in").option("startingOffsets", "earliest")
                  .load(str(path)).groupBy("key").count().selectExpr("key", "cast(count as string) as value"))
        (counts.writeStream.format(fmt).option("topic", topic).option("autoCreateTopics", "true")
         .option("checkpointLocation", str(tmp_path / f"cp-{fmt}-{mode}")).outputMode(mode)
         .trigger(availableNow=True).start(str(path)).awaitTermination(120))

    def written(topic: str) -> list[tuple[str, str]]:
        with pylog.open(path, read_only=True) as store:
            return [(r.key.decode(), r.value.decode()) for r in store.topic(topic).partition(0).read(0, 100)]

    first = [("k0", "10"), ("k1", "10"), ("k2", "10")]
    for mode in ("update", "complete"):
        run(jvm_reader, mode, mode)
        assert sorted(written(mode)) == first
    run("pylog-python", "complete", "python-complete")
    assert sorted(written("python-complete")) == first
    with pylog.open(path) as store:
        store.topic("in").partition(0).append_values([b"more"] * 10, keys=[b"k0"] * 10)
    for mode in ("update", "complete"):
        run(jvm_reader, mode, mode)
    assert sorted(written("update")[3:]) == [("k0", "20")]
    assert sorted(written("complete")[3:]) == [("k0", "20"), ("k1", "10"), ("k2", "10")]


def test_count_is_answered_from_batch_headers_with_filters_gaps_and_transactions_as_the_python_reader_counts(
        spark, jvm_reader, tmp_path):
    from pylog.partition import internals
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("c", partitions=2, config={"cleanup.policy": "compact", "segment.bytes": 4096,
                                                      "min.cleanable.dirty.ratio": 0.01})
        for n in range(2):
            p = store.topic("c").partition(n)
            for _ in range(12):
                p.append_values([b"v%d" % i for i in range(40)], keys=[b"k%d" % (i % 9) for i in range(40)])
            for k, commit in enumerate((True, False, True)):   # control batches and aborted records
                pid = store.new_producer_id()
                p.append_values([b"t%d-%d" % (k, i) for i in range(5)], keys=[b"t%d" % i for i in range(5)],
                                producer=(pid, 0, 0), transactional=True)
                internals(p).append_marker(pid, 0, commit=commit)
            p.append_values([b"last"], keys=[b"last"])
        store.compact("c")
    ts = "timestamp_millis(0)"
    for where in (None, "offset >= 100", "partition = 1 and offset < 300", "offset in (1, 2, 470)",
                  f"timestamp >= {ts}"):
        jvm, py = _both(spark, jvm_reader, path, subscribe="c")
        if where:
            jvm, py = jvm.where(where), py.where(where)
        expected = len(py.select("offset").collect())
        counted = jvm.selectExpr("count(*) as a", "count(1) as b", "sum(1) as c", "sum(3) as d")
        pushed = "count(*) from batch headers" in _plan(counted)
        assert pushed == (where is None or "timestamp" not in where and " in " not in where), where
        assert tuple(counted.collect()[0]) == (expected, expected, expected or None,
                                               3 * expected if expected else None), where
        assert jvm.count() == py.count() == expected, where
    nothing = spark.read.format(jvm_reader).option("subscribe", "c").load(str(path)).where("offset >= 100000")
    assert tuple(nothing.selectExpr("count(*)", "sum(1)").collect()[0]) == (0, None)
    committed = {"subscribe": "c", "kafka.isolation.level": "read_committed"}
    jvm, py = _both(spark, jvm_reader, path, **committed)   # read_committed of a compacted topic, both readers
    assert jvm.count() == py.count() == len(py.select("value").collect())


def test_count_star_checks_every_partitions_batches_on_its_threads_and_fails_on_damage(spark, jvm_reader, tmp_path):
    """``count(*)`` from batch headers counts the ranges on several threads of its one task; each batch's CRC is
    still checked, and a damaged batch in one partition fails the count with the scan's error."""
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("t", partitions=4)
        for n in range(4):
            for _ in range(5):
                store.topic("t").partition(n).append_values([b"v%d" % i for i in range(50)])
    df = spark.read.format(jvm_reader).option("subscribe", "t").load(str(path))
    counted = df.selectExpr("count(*) as n")
    assert "count(*) from batch headers" in _plan(counted) and counted.collect()[0].n == 4 * 5 * 50
    log = path / "t" / "2" / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    raw[len(raw) // 2] ^= 0xFF   # inside a batch of partition 2
    log.write_bytes(raw)
    with pytest.raises(Exception, match="CorruptRecordError.*t/2/"):
        df.selectExpr("count(*) as n").collect()
    with pytest.raises(Exception, match="CorruptRecordError.*t/2/"):
        df.select("value").collect()


def test_offset_filters_at_the_largest_long_read_what_the_python_reader_reads(spark, jvm_reader, tmp_path):
    # The JVM reader turned `offset <= 9223372036854775807` into an exclusive bound of max + 1, which wrapped to
    # the smallest long: the scan read nothing where the Python reader read every row.
    path = _counting_store(tmp_path, "t", 20)
    biggest = 2 ** 63 - 1
    for where, expected in ((f"offset <= {biggest}", 40), (f"offset < {biggest}", 40), (f"offset = {biggest}", 0),
                            (f"offset >= {biggest}", 0), (f"offset in ({biggest}, 3)", 2),
                            (f"partition = 1 and offset <= {biggest}", 20)):
        jvm, py = _both(spark, jvm_reader, path, subscribe="t")
        a, b = _rows(jvm.where(where)), _rows(py.where(where))
        assert len(a) == expected and a == b, where
        assert jvm.where(where).count() == expected, where


def test_subscribe_pattern_with_python_named_groups_reads_the_topics_the_python_reader_reads(spark, jvm_reader,
                                                                                             tmp_path):
    # subscribePattern is a Python regular expression (re.fullmatch); the JVM reader compiled it as a Java one
    # and refused Python's named groups ("Unknown inline modifier").
    path = tmp_path / "store"
    with pylog.open(path) as store:
        for topic in ("t1", "t22", "x1", "a.b", "ab"):
            store.create_topic(topic, partitions=1)
            store.topic(topic).partition(0).append_values([topic.encode()])
    for pattern, topics in (("(?P<p>t)1", ["t1"]), ("(?P<p>[tx])(?P=p)?\\d+", ["t1", "t22", "x1"]),
                            ("[(?P<]a.b", []), ("a\\.b", ["a.b"]), ("t\\d+|a.", ["ab", "t1", "t22"])):
        read = _same(spark, jvm_reader, path, subscribePattern=pattern)
        assert sorted(r[2] for r in read) == topics, pattern


def test_a_query_reads_the_ranges_its_plan_was_made_with_when_records_follow(spark, jvm_reader, tmp_path):
    # Spark asks a scan for its input partitions twice per query with an exchange (the physical plan, then
    # adaptive execution's query stage): the JVM reader plans once, so records appended in between are not read
    # by that query (the plan shown is the one run); a new query reads them.
    path = _counting_store(tmp_path, "snap", 10)
    df = spark.read.format(jvm_reader).option("subscribe", "snap").load(str(path))
    queries = {"grouped": lambda d: d.groupBy("partition").agg({"value": "count"}).orderBy("partition"),
               "count": lambda d: d.selectExpr("count(*)"),
               "filtered": lambda d: d.where("offset >= 5").groupBy("partition").count().orderBy("partition")}
    planned = {name: q(df) for name, q in queries.items()}
    for q in planned.values():
        q._jdf.queryExecution().executedPlan()   # planned now
    with pylog.open(path) as store:
        for n in range(2):
            store.topic("snap").partition(n).append_values([b"late"] * 3)
    assert [tuple(r) for r in planned["grouped"].collect()] == [(0, 10), (1, 10)]
    assert planned["count"].collect()[0][0] == 20
    assert [tuple(r) for r in planned["filtered"].collect()] == [(0, 5), (1, 5)]
    assert [tuple(r) for r in queries["grouped"](df).collect()] == [(0, 13), (1, 13)]
    assert queries["count"](df).collect()[0][0] == 26
    assert [tuple(r) for r in queries["filtered"](df).collect()] == [(0, 8), (1, 8)]
