"""The exactly-once streaming sink's protocol (pylog/spark/exactly_once.py) without a JVM: tasks' transactions,
the driver's batch record and commit, re-runs of a micro-batch after crashes (a driver SIGKILLed between
commits, a run that died before deciding, a retried task attempt), read back with read_committed and
read_uncommitted readers. The same protocol under Spark itself: tests/test_spark_sink_eos.py."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pyarrow as pa
import pytest

import pylog
from pylog.clients.transactions import TransactionCoordinator
from pylog.spark.exactly_once import (SinkTransactionLostError, TaskIdentity, abort_batch, commit_batch,
                                      read_batch_record)
from pylog.spark.options import parse_write_options
from pylog.spark.writer import write_batches

QUERY = "0d6f6c0e-5a8e-4d4f-9d61-9a3f1d2c7b10"


def _opts(path):
    return parse_write_options({"path": str(path), "topic": "out"})


def _rows(first: int, n: int) -> list[pa.RecordBatch]:
    values = [f"v{i}".encode() for i in range(first, first + n)]
    keys = [f"k{i}".encode() for i in range(first, first + n)]
    return [pa.record_batch([pa.array(keys, pa.binary()), pa.array(values, pa.binary())], names=["key", "value"])]


def _task(path, batch, partition, first, n, attempt=0):
    """Task ``partition`` of micro-batch ``batch`` writing rows ``first .. first+n``; its commit message."""
    return write_batches(_opts(path), iter(_rows(first, n)), TaskIdentity(QUERY, batch, partition, attempt))


def _values(path, isolation_level="read_committed") -> list[bytes]:
    out = []
    with pylog.open(path, read_only=True) as s:
        for p in s.topic("out").partitions:
            pos = p.log_start_offset
            while True:
                recs = p.read(pos, 10_000, isolation_level=isolation_level)
                if not recs:
                    break
                out.extend(r.value for r in recs)
                pos = recs[-1].offset + 1
    return sorted(out)


def _expected(n: int) -> list[bytes]:
    return sorted(f"v{i}".encode() for i in range(n))


def _commit(path, batch, messages):
    with pylog.open(path, log_cleaner_enable=False) as s:
        return commit_batch(s, batch, QUERY, [m.txn for m in messages if m.txn is not None])


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "store"
    with pylog.open(p) as s:
        s.create_topic("out", 3)
    return p


def test_micro_batch_rows_visible_to_read_committed_only_after_the_driver_commit(path):
    msgs = [_task(path, 0, 0, 0, 50), _task(path, 0, 1, 50, 50)]
    assert all(m.txn is not None and m.rows == 50 for m in msgs)
    assert _values(path) == []
    assert _values(path, "read_uncommitted") == _expected(100)
    _commit(path, 0, msgs)
    assert _values(path) == _expected(100)
    with pylog.open(path, read_only=True) as s:
        record = read_batch_record(s, QUERY)
    assert record is not None and record.batch_id == 0 and set(record.transactions) == {m.txn for m in msgs}


def test_rerun_of_a_committed_micro_batch_writes_nothing(path):
    _commit(path, 0, [_task(path, 0, 0, 0, 40), _task(path, 0, 1, 40, 40)])
    with pylog.open(path, read_only=True) as s:
        ends = [p.log_end_offset for p in s.topic("out").partitions]
    again = [_task(path, 0, 0, 0, 40), _task(path, 0, 1, 40, 40)]
    assert all(m.skipped and m.txn is None and not m.appended for m in again)
    _commit(path, 0, again)
    with pylog.open(path, read_only=True) as s:
        assert [p.log_end_offset for p in s.topic("out").partitions] == ends
    assert _values(path, "read_uncommitted") == _values(path) == _expected(80)
    # the next batch goes on as usual
    _commit(path, 1, [_task(path, 1, 0, 80, 20)])
    assert _values(path) == _expected(100)


def _commit_then_die(path, batch, txns, commits_before_dying):
    real = TransactionCoordinator.end_txn
    done = []

    def end_txn(self, *args, **kwargs):
        if len(done) == commits_before_dying:
            os.kill(os.getpid(), signal.SIGKILL)
        real(self, *args, **kwargs)
        done.append(args)

    TransactionCoordinator.end_txn = end_txn  # type: ignore[method-assign]
    with pylog.open(path, log_cleaner_enable=False) as s:
        commit_batch(s, batch, QUERY, txns)


def test_driver_killed_between_commits_rerun_completes_the_batch_once(path):
    msgs = [_task(path, 0, p, p * 30, 30) for p in range(3)]
    child = multiprocessing.get_context("spawn").Process(
        target=_commit_then_die, args=(path, 0, [m.txn for m in msgs], 1))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    visible = _values(path)
    assert 0 < len(visible) < 90  # one task's transaction committed, the others still open
    # Spark re-runs micro-batch 0: its tasks find it decided and write nothing; the commit completes it.
    again = [_task(path, 0, p, p * 30, 30) for p in range(3)]
    assert all(m.skipped for m in again)
    assert "re-run" in _commit(path, 0, again)
    assert _values(path) == _values(path, "read_uncommitted") == _expected(90)


def test_run_that_died_before_deciding_leaves_only_aborted_rows(path):
    # The first run's tasks wrote (3 partitions, attempt 0 and 1 of partition 2), its driver died before commit.
    [_task(path, 0, p, p * 30, 30) for p in range(3)]
    _task(path, 0, 2, 60, 30, attempt=1)
    # The re-run is planned with 2 partitions: partition 2's ids are leftovers the driver's commit aborts.
    msgs = [_task(path, 0, 0, 0, 45), _task(path, 0, 1, 45, 45)]
    assert "2 leftovers aborted" in _commit(path, 0, msgs)
    assert _values(path) == _expected(90)
    uncommitted = _values(path, "read_uncommitted")
    assert len(uncommitted) == 90 + 90 + 30  # read_uncommitted sees the aborted leftovers, read_committed never
    with pylog.open(path, read_only=True) as s:
        assert all(p.last_stable_offset == p.log_end_offset for p in s.topic("out").partitions)


def test_failed_task_attempt_leftover_aborted_retry_lands_once(path):
    _task(path, 0, 0, 0, 25, attempt=0)  # the attempt that failed (its rows written, its result lost)
    retry = _task(path, 0, 0, 0, 25, attempt=1)
    other = _task(path, 0, 1, 25, 25)
    assert "1 leftovers aborted" in _commit(path, 0, [retry, other])
    assert _values(path) == _expected(50)
    assert len(_values(path, "read_uncommitted")) == 75


def test_aborted_micro_batch_leaves_nothing_visible(path):
    msgs = [_task(path, 0, 0, 0, 20), _task(path, 0, 1, 20, 20)]
    with pylog.open(path, log_cleaner_enable=False) as s:
        abort_batch(s, 0, QUERY, [m.txn for m in msgs])
    assert _values(path) == []
    with pylog.open(path, read_only=True) as s:
        assert all(p.last_stable_offset == p.log_end_offset for p in s.topic("out").partitions)
    _commit(path, 0, [_task(path, 0, 0, 0, 20, attempt=1), _task(path, 0, 1, 20, 20, attempt=1)])
    assert _values(path) == _expected(40)


def test_decided_batch_whose_transaction_timed_out_is_reported_lost(path):
    opts = parse_write_options({"path": str(path), "topic": "out", "transactionTimeoutMs": "1"})
    msgs = [write_batches(opts, iter(_rows(0, 10)), TaskIdentity(QUERY, 0, p, 0)) for p in range(2)]
    child = multiprocessing.get_context("spawn").Process(
        target=_commit_then_die, args=(path, 0, [m.txn for m in msgs], 0))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL  # died after writing the record, before any commit
    with pylog.open(path, log_cleaner_enable=False) as s:
        assert len(pylog.store.transaction_coordinator(s).abort_timed_out()) == 2
        with pytest.raises(SinkTransactionLostError, match="rows of the batch are lost"):
            commit_batch(s, 0, QUERY, [])


def test_delivery_guarantee_option_checked_and_exactly_once_refused_for_batch_writes(path):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from pylog.spark.options import InvalidOptionError
    from pylog.spark.writer import PylogWriter

    with pytest.raises(InvalidOptionError, match="deliveryGuarantee.*exactly-once, at-least-once"):
        parse_write_options({"path": str(path), "topic": "out", "deliveryGuarantee": "twice"})
    opts = parse_write_options({"path": str(path), "topic": "out", "deliveryGuarantee": "Exactly-Once"})
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(InvalidOptionError, match="applies to streaming writes"):
        PylogWriter(opts, schema)
    PylogWriter(parse_write_options({"path": str(path), "topic": "out", "deliveryGuarantee": "at-least-once"}), schema)


@pytest.mark.parametrize("metadata", ["", "[]", '{"v": 1, "txns": [["id", 1]]}', '{"v": 2, "txns": []}',
                                      "[" * 100_000])
def test_damaged_batch_record_is_a_corrupt_record_error(path, metadata):
    from pylog.errors import CorruptRecordError
    from pylog.spark.exactly_once import RECORD_KEY, group_id
    from pylog.structs import OffsetAndMetadata

    with pylog.open(path, log_cleaner_enable=False) as s:
        s.commit_offsets(group_id(QUERY), {RECORD_KEY: OffsetAndMetadata(3, metadata)})
    with pytest.raises(CorruptRecordError, match="batch record of Spark query .* is damaged"):
        _task(path, 4, 0, 0, 10)
