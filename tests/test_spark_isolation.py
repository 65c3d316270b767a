"""The Spark source's ``kafka.isolation.level``: read_committed batch and streaming reads stop at the last
stable offset and never return aborted records; neither level returns transaction markers, and a range
ending in markers is not data loss.

Run: ``python -m pytest tests/test_spark_isolation.py -q`` (the Spark tests need Java and use the session
``spark`` fixture; option parsing and planning run without a JVM).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402
from pylog.partition import internals  # noqa: E402
from pylog.spark.options import InvalidOptionError, parse_read_options, parse_write_options  # noqa: E402
from pylog.spark.reader import OffsetRange, plan_ranges, read_range  # noqa: E402

TOPIC = "tx"
COMMITTED = {"kafka.isolation.level": "read_committed"}


def _txn(p, pid, seq, values):
    p.append_values(values, producer=(pid, 0, seq), transactional=True)


def _build(path):
    """Partition 0: a0, a committed c0 c1, an aborted x0, a1, then an open o0 and a plain a2 after it.
    Partition 1: a committed d0 d1 whose commit marker is the last offset. Returns the two producers of 0."""
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions=2)
        p0, p1 = store.topic(TOPIC).partition(0), store.topic(TOPIC).partition(1)
        a, b, c = (store.new_producer_id() for _ in range(3))
        p0.append_values([b"a0"])
        _txn(p0, a, 0, [b"c0", b"c1"])
        internals(p0).append_marker(a, 0, commit=True)
        _txn(p0, a, 2, [b"x0"])
        internals(p0).append_marker(a, 0, commit=False)
        p0.append_values([b"a1"])
        _txn(p0, b, 0, [b"o0"])
        p0.append_values([b"a2"])
        _txn(p1, c, 0, [b"d0", b"d1"])
        internals(p1).append_marker(c, 0, commit=True)
        return a, b


UNCOMMITTED_0 = [b"a0", b"c0", b"c1", b"x0", b"a1", b"o0", b"a2"]
COMMITTED_0 = [b"a0", b"c0", b"c1", b"a1"]
PARTITION_1 = [b"d0", b"d1"]


def _opts(path, **options):
    return parse_read_options({"path": path, "subscribe": TOPIC, **options})


# ---------------------------------------------------------------------------------------------- no JVM


def test_isolation_level_option_defaults_to_read_uncommitted_and_refuses_other_values(tmp_path):
    path = str(tmp_path / "s")
    _build(path)
    assert _opts(path).isolation_level == "read_uncommitted"
    assert _opts(path, **{"KAFKA.Isolation.Level": " READ_COMMITTED "}).committed  # Spark lower-cases names
    assert parse_read_options({"path": path, "subscribe": TOPIC, **COMMITTED}, streaming=True).committed
    with pytest.raises(InvalidOptionError, match="kafka.isolation.level.*read_committed.*'serializable'"):
        _opts(path, **{"kafka.isolation.level": "serializable"})
    parse_write_options({"path": path, **COMMITTED})  # a consumer setting: writes ignore it


def test_read_committed_plans_up_to_the_last_stable_offset_and_skips_aborted_records(tmp_path):
    path = str(tmp_path / "s")
    _build(path)
    with pylog.open(path, log_cleaner_enable=False) as store:
        lso = store.topic(TOPIC).partition(0).last_stable_offset
        assert lso == 7  # o0
        assert [(r.partition, r.start, r.end) for r in plan_ranges(store, _opts(path))] == [(0, 0, 9), (1, 0, 3)]
        ranges = plan_ranges(store, _opts(path, **COMMITTED))
        assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, lso), (1, 0, 3)]
        got = {r.partition: [v for b in read_range(store, r, False, True, committed=True)
                             for v in b.column("value").to_pylist()] for r in ranges}
        assert got == {0: COMMITTED_0, 1: PARTITION_1}
        with pytest.raises(InvalidOptionError, match="beyond the last stable offset"):
            plan_ranges(store, _opts(path, endingOffsets='{"tx": {"0": 9, "1": -1}}', **COMMITTED))


def test_a_range_ending_in_a_marker_is_not_data_loss_at_either_level(tmp_path):
    """Partition 1's last offset is a commit marker: a range up to the log end reads d0 d1 and ends, and a
    range holding only the marker reads nothing, with failOnDataLoss=true."""
    path = str(tmp_path / "s")
    _build(path)
    with pylog.open(path, log_cleaner_enable=False) as store:
        for committed in (False, True):
            whole = list(read_range(store, OffsetRange(TOPIC, 1, 0, 3), False, True, committed=committed))
            assert [v for b in whole for v in b.column("value").to_pylist()] == PARTITION_1
            assert list(read_range(store, OffsetRange(TOPIC, 1, 2, 3), False, True, committed=committed)) == []
        aborted_only = OffsetRange(TOPIC, 0, 4, 6)  # x0 and its abort marker
        assert list(read_range(store, aborted_only, False, True, committed=True)) == []


# ---------------------------------------------------------------------------------------------- Spark


def _by_partition(df):
    out: dict[int, list[bytes]] = {}
    for r in sorted(df.select("partition", "offset", "value").collect()):
        out.setdefault(r.partition, []).append(bytes(r.value))
    return out


def test_spark_batch_read_at_each_isolation_level(spark, tmp_path):
    path = str(tmp_path / "s")
    _build(path)
    read = spark.read.format("pylog").option("subscribe", TOPIC)
    assert _by_partition(read.load(path)) == {0: UNCOMMITTED_0, 1: PARTITION_1}
    committed = read.options(**COMMITTED).load(path)
    assert _by_partition(committed) == {0: COMMITTED_0, 1: PARTITION_1}


def test_spark_stream_read_committed_waits_for_the_open_transaction_then_reads_on(spark, tmp_path):
    """Three availableNow runs over one checkpoint, copying into another topic: the first stops at the open
    transaction, the second (after it committed and more was appended, with another aborted transaction)
    reads on from there; every committed record arrives once, no aborted one ever."""
    path = str(tmp_path / "s")
    checkpoint = str(tmp_path / "ck")
    _, open_pid = _build(path)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("copy", partitions=1)

    def run():
        reader = spark.readStream.format("pylog").option("subscribe", TOPIC).option("startingOffsets", "earliest")
        q = (reader.option("kafka.isolation.level", "read_committed").load(path).select("value")
             .writeStream.format("pylog").option("topic", "copy").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(path))
        q.awaitTermination()
        assert q.exception() is None
        with pylog.open(path, log_cleaner_enable=False) as store:
            return [r.value for r in store.topic("copy").partition(0).read(0, max_records=1000)]

    assert Counter(run()) == Counter(COMMITTED_0 + PARTITION_1)
    with pylog.open(path, log_cleaner_enable=False) as store:
        p0 = store.topic(TOPIC).partition(0)
        internals(p0).append_marker(open_pid, 0, commit=True)  # o0 commits: o0 and a2 become readable
        other = store.new_producer_id()
        _txn(p0, other, 0, [b"y0"])
        internals(p0).append_marker(other, 0, commit=False)
        p0.append_values([b"a3"])
    assert Counter(run()) == Counter(COMMITTED_0 + PARTITION_1 + [b"o0", b"a2", b"a3"])
    assert Counter(run()) == Counter(COMMITTED_0 + PARTITION_1 + [b"o0", b"a2", b"a3"])  # nothing new


@pytest.mark.parametrize("fmt", ["jvm", "pylog-python"])
def test_running_read_committed_stream_waits_at_each_open_transaction_across_segment_rolls(spark, tmp_path, request,
                                                                                           fmt):
    """One query running while a producer appends: each trigger's end is the last stable offset the files give
    then (the JVM driver goes on from the batch headers it replayed at the trigger before, across segment
    rolls), an open transaction holds back the records after it until its commit, an aborted one never shows."""
    fmt = request.getfixturevalue("jvm_reader") if fmt == "jvm" else fmt
    path = str(tmp_path / "s")
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("live", partitions=1, config={"segment.bytes": 1024})
        store.topic("live").partition(0).append_values([b"first-%d" % i for i in range(20)])
    name = f"live_{fmt.replace('-', '_')}"
    query = (spark.readStream.format(fmt).option("subscribe", "live").option("startingOffsets", "earliest")
             .options(**COMMITTED).load(path).select("value").writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(processingTime="100 milliseconds").start())

    def seen():
        query.processAllAvailable()
        return sorted(bytes(r.value) for r in spark.table(name).collect())

    try:
        assert seen() == sorted(b"first-%d" % i for i in range(20))
        with pylog.open(path, log_cleaner_enable=False) as store:
            p = store.topic("live").partition(0)
            kept, dropped = store.new_producer_id(), store.new_producer_id()
            for seq in range(0, 30, 3):   # two transactions over several segments, with plain records between
                p.append_values([b"kept-%d" % (seq + i) for i in range(3)], producer=(kept, 0, seq), transactional=True)
                p.append_values([b"dropped-%d" % (seq + i) for i in range(3)], producer=(dropped, 0, seq),
                                transactional=True)
                p.append_values([b"plain-%d" % seq])
            internals(p).append_marker(dropped, 0, commit=False)
        assert len([f for f in os.listdir(os.path.join(path, "live", "0")) if f.endswith(".log")]) > 3
        assert seen() == sorted(b"first-%d" % i for i in range(20))   # held back by the open transaction
        with pylog.open(path, log_cleaner_enable=False) as store:
            p = store.topic("live").partition(0)
            internals(p).append_marker(kept, 0, commit=True)
            p.append_values([b"last"])
        assert seen() == sorted([b"first-%d" % i for i in range(20)] + [b"kept-%d" % i for i in range(30)]
                                + [b"plain-%d" % s for s in range(0, 30, 3)] + [b"last"])
        assert query.exception() is None
        if fmt == "pylog":   # the JVM stream ran (only it reports the Kafka source's lag metrics)
            assert "maxOffsetsBehindLatest" in query.lastProgress["sources"][0]["metrics"]
    finally:
        query.stop()
