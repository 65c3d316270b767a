"""Writing for the Spark sink: ``df.write.format("pylog")`` and ``df.writeStream.format("pylog")``.

Columns, as Spark's Kafka sink: ``value`` (binary or string, required), ``key`` (binary or string),
``topic`` (string; used only without a ``topic`` option, which overrides it as in Kafka's sink),
``partition`` (int), ``headers``
(``array<struct<key:string,value:binary>>``) and ``timestamp`` (timestamp, or long milliseconds; null or
absent means the append time). Other columns are ignored, so a DataFrame read from pylog can be written
back as it is.

Invariants:
- A row goes to its ``partition`` when given; otherwise a keyed row goes where pylog's producer (and Kafka's
  Java client) would put it, ``murmur2(key) % partitions``
  (:func:`pylog.clients.partitioner.partitions_for_keys`); otherwise all key-less rows of one Arrow batch go
  to one partition, rotating from batch to batch.
- Topics are never created unless ``autoCreateTopics=true``: the ``topic`` option's topic is checked (or
  created) on the driver before any task starts; topics named by a ``topic`` column, by the tasks.
- Rows of one task keep their input order within each partition.
- Each task buffers Arrow slices per partition and appends them in whole batches while holding the
  partition's writer lock (taken by the first append, waiting up to ``lockTimeoutMs`` for another task or
  application to let go), then hands the lock back at once (:meth:`pylog.Partition.release_writer`), so
  concurrent tasks and a concurrent application writer take turns and never interleave inside a batch.
- Keys and values go to :meth:`pylog.Partition.append_columns` as the Arrow buffers themselves (lengths
  from the offsets with numpy); only rows with headers go through per-record Python objects.
- Batch writes, and streams with ``deliveryGuarantee=at-least-once``, are at-least-once like the Kafka sink:
  a failed and retried task appends its rows again, and an aborted job leaves what its tasks appended.
- Streaming writes are exactly-once by default (:mod:`pylog.spark.exactly_once`): a task appends its rows
  as one transaction, with the partition's next sequence for its producer taken in the same writer-lock turn
  as the append, each partition added to the transaction before its first append; the driver's ``commit``
  decides the micro-batch and commits them all, its ``abort`` aborts them.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructType,
                               TimestampType)

from ..clients.partitioner import partitions_for_keys
from ..errors import (InvalidConfigError, InvalidRecordError, InvalidTopicError, PartitionLockedError, TopicExistsError,
                      UnknownTopicError)
from ..partition import Partition, internals
from ..storage.records import now_ms
from ..store import Store, is_internal_topic
from ..store import open as open_pylog
from .exactly_once import (TaskIdentity, TaskTransaction, TaskTransactions, abort_batch, commit_batch,
                           read_batch_record, task_identity)
from .options import AT_LEAST_ONCE, EXACTLY_ONCE, InvalidOptionError, WriteOptions
from .reader import open_store

__all__ = ["PylogWriter", "PylogStreamWriter", "PylogCommitMessage", "write_batches", "check_write_schema",
           "topic_partitions", "prepare_topics", "FLUSH_BYTES", "BUFFER_BYTES"]

log = logging.getLogger("pylog.spark")

#: A partition's buffered bytes that trigger an append (one lock turn), and the cap on a task's buffers.
FLUSH_BYTES = 16 * 1024 * 1024
BUFFER_BYTES = 64 * 1024 * 1024

_BYTES_TYPES = (BinaryType, StringType)


@dataclass
class PylogCommitMessage(WriterCommitMessage):
    """What one task appended: ``{(topic, partition): [rows, first offset, last append's first offset]}``;
    for an exactly-once stream also the query id, the task's open transaction (None when it appended
    nothing), and ``skipped`` when the micro-batch was already decided (a re-run: nothing written)."""

    appended: dict = field(default_factory=dict)
    query_id: str | None = None
    txn: TaskTransaction | None = None
    skipped: bool = False

    @property
    def rows(self) -> int:
        return sum(v[0] for v in self.appended.values())


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """Check the DataFrame's columns against the Kafka sink's (see the module docstring).

    :raises InvalidRecordError: naming the column, for a missing ``value`` or a column of the wrong type.
    :raises InvalidOptionError: when there is neither a ``topic`` option nor a ``topic`` column.
    """
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise InvalidRecordError("a pylog write needs a 'value' column (binary or string)")
    expected = {
        "value": (_BYTES_TYPES, "binary or string"), "key": (_BYTES_TYPES, "binary or string"),
        "topic": ((StringType,), "string"), "partition": ((IntegerType,), "int"),
        "timestamp": ((TimestampType, LongType), "timestamp or long (ms)"), "headers": ((ArrayType,), _HEADERS_DDL),
    }
    for name, (allowed, text) in expected.items():
        if name in types and not isinstance(types[name], allowed):
            raise InvalidRecordError(f"column {name!r} must be {text}, got {types[name].simpleString()}")
    if "headers" in types:
        elem = types["headers"].elementType  # type: ignore[attr-defined]
        if not (isinstance(elem, StructType) and [f.name for f in elem.fields] == ["key", "value"]
                and isinstance(elem.fields[0].dataType, StringType)
                and isinstance(elem.fields[1].dataType, BinaryType)):
            raise InvalidRecordError(f"column 'headers' must be {_HEADERS_DDL}, got {types['headers'].simpleString()}")
    if opts.topic is None and "topic" not in types:
        raise InvalidOptionError("topic", "give the topic option or a 'topic' column")


_HEADERS_DDL = "array<struct<key:string,value:binary>>"


# ------------------------------------------------------------------------------------------------ columns


def _bytes_column(arr: pa.Array) -> tuple[np.ndarray, bytes | memoryview]:
    """(int32 lengths with -1 for null, the non-null items' bytes) of a binary/string array, uncopied
    unless null slots hold bytes (then the non-null items are gathered first)."""
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        otype: type[np.signedinteger] = np.int64
    else:
        otype = np.int32
    if arr.null_count and arr.null_count != len(arr):
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    else:
        valid = None
    bufs = arr.buffers()
    n = len(arr)
    if arr.null_count == n:
        return np.full(n, -1, np.int32), b""
    offsets = np.frombuffer(bufs[1], otype, n + 1, arr.offset * np.dtype(otype).itemsize)
    lengths = np.diff(offsets).astype(np.int32)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data: bytes | memoryview = memoryview(bufs[2])[lo:hi] if bufs[2] is not None else b""
    if valid is not None:
        if lengths[~valid].any():  # null slots with bytes: keep only the non-null items' bytes
            data = _bytes_column(arr.filter(pa.array(valid)))[1]
        lengths[~valid] = -1
    return lengths, data


def _timestamps_ms(arr: pa.Array) -> np.ndarray:
    """Milliseconds since the epoch; nulls become the append time (now)."""
    if pa.types.is_timestamp(arr.type):
        unit = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[arr.type.unit]
        ints = arr.cast(pa.int64())
        ms_per = 1000 / unit
    else:
        ints, ms_per = arr.cast(pa.int64()), 1.0
    if ints.null_count:
        ints = ints.fill_null(0)
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
    else:
        valid = None
    raw = ints.to_numpy()
    ms = raw if ms_per == 1.0 else (raw * int(ms_per) if ms_per > 1 else raw // int(1 / ms_per))
    if valid is not None:
        ms = np.where(valid, ms, now_ms())
    return ms.astype(np.int64, copy=False)


def _headers_rows(arr: pa.Array) -> list:
    """Per-row header tuples ``((key, value), ...)`` (empty for null) from the ``headers`` column.

    The header keys and values are listed once for the whole column and each row takes a slice of the
    pairs (C-level ``map``), instead of Arrow building a dict per header.
    """
    offs = arr.offsets.to_numpy()
    base, top = int(offs[0]), int(offs[-1])
    items = arr.values.slice(base, top - base)
    keys = items.field("key")
    if items.null_count or keys.null_count:
        raise InvalidRecordError("a header needs a non-null key")
    pairs = list(zip(keys.to_pylist(), items.field("value").to_pylist(), strict=True))
    bounds = (offs - base).tolist()
    rows = list(map(tuple, map(pairs.__getitem__, map(slice, bounds[:-1], bounds[1:]))))
    if arr.null_count:
        for i in np.flatnonzero(~arr.is_valid().to_numpy(zero_copy_only=False)).tolist():
            rows[i] = ()
    return rows


# ------------------------------------------------------------------------------------------------ writing


def topic_partitions(store: Store, topic: str, opts: WriteOptions) -> int:
    """The partition count of ``topic``, which the sink may write: created first (``numPartitions``
    partitions) if it is missing and ``autoCreateTopics=true``.

    :raises InvalidTopicError: for pylog's internal topics.
    :raises UnknownTopicError: for a missing topic without ``autoCreateTopics=true``, saying how to create it.
    """
    if is_internal_topic(topic):
        raise InvalidTopicError(f"{topic!r} is an internal topic of pylog: the sink cannot write to it")
    try:
        return store.topic(topic).num_partitions
    except UnknownTopicError:
        if not opts.auto_create_topics:
            raise UnknownTopicError(
                f"topic {topic!r} does not exist in {store.path}: create it first (`pylog topics create`, "
                "store.create_topic), or write with .option('autoCreateTopics', 'true') and "
                ".option('numPartitions', N)") from None
    try:
        created = store.create_topic(topic, partitions=opts.num_partitions)
        log.info("pylog: created topic %r with %d partitions (autoCreateTopics)", topic, opts.num_partitions)
        return created.num_partitions
    except TopicExistsError:  # another task or application created it first
        return store.topic(topic).num_partitions


def prepare_topics(opts: WriteOptions) -> None:
    """On the driver, before any task starts: the ``topic`` option's topic exists or is created
    (``autoCreateTopics``), so a write to a missing topic fails at once, not in every task.

    Topics named only by a ``topic`` column are checked (or created) by the tasks that meet them.
    """
    if opts.topic is None:
        return
    store = open_store(opts.path)
    try:
        topic_partitions(store, opts.topic, opts)
    finally:
        store.close()


class _TaskWriter:
    """One task's appends: placement, per-partition buffers and lock turns (see the module docstring)."""

    def __init__(self, store: Store, opts: WriteOptions, txn: TaskTransactions | None = None) -> None:
        self.store = store
        self.opts = opts
        self.txn = txn
        self.buffers: dict[tuple[str, int], list[pa.RecordBatch]] = {}
        self.sizes: dict[tuple[str, int], int] = {}
        self.total = 0
        self.appended: dict[tuple[str, int], list[int]] = {}
        self.rng = random.Random()
        self.batch_no = self.rng.randrange(1 << 30)

    def _partition_count(self, topic: str) -> int:
        return topic_partitions(self.store, topic, self.opts)

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        self.batch_no += 1
        if self.opts.topic is not None:  # the option beats the column, as in Kafka's sink
            self._add_topic(self.opts.topic, batch)
            return
        names = batch.schema.names
        col = batch.column("topic") if "topic" in names else None
        if col is None or col.null_count:
            raise InvalidOptionError("topic", "rows with a null 'topic' and no topic option")
        uniq = pc.unique(col).to_pylist()
        if len(uniq) == 1:
            self._add_topic(uniq[0], batch)
        else:
            for t in uniq:
                self._add_topic(t, batch.filter(pc.equal(col, t)))

    def _add_topic(self, topic: str, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        count = self._partition_count(topic)
        names = batch.schema.names
        parts = np.full(n, -1, np.int32)
        if "partition" in names:
            col = batch.column("partition")
            if col.null_count < n:
                given = col.fill_null(-1).to_numpy().astype(np.int32)
                bad = (given >= count) | (given < -1)
                if bad.any():
                    raise InvalidRecordError(f"partition {int(given[bad][0])} does not exist in topic {topic!r} "
                                             f"(it has {count})")
                parts = given
        todo = parts < 0
        if todo.any() and "key" in names:
            kcol = batch.column("key")
            if kcol.null_count < n:
                if not todo.all():
                    kcol = kcol.filter(pa.array(todo))
                lengths, data = _bytes_column(kcol)
                keyed = partitions_for_keys(lengths, data, count)
                if todo.all():
                    parts = keyed
                else:
                    parts[todo] = keyed
                todo = parts < 0
        if todo.any():  # key-less rows: one partition per batch, rotating
            parts[todo] = self.batch_no % count
        first = int(parts[0])
        if (parts == first).all():
            self._buffer(topic, first, batch)
            return
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        cut = np.flatnonzero(np.diff(sorted_parts)) + 1
        taken = batch.take(pa.array(order))
        for a, b in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [n])).tolist(), strict=True):
            self._buffer(topic, int(sorted_parts[a]), taken.slice(a, b - a))

    def _buffer(self, topic: str, number: int, batch: pa.RecordBatch) -> None:
        tp = (topic, number)
        size = batch.nbytes
        self.buffers.setdefault(tp, []).append(batch)
        self.sizes[tp] = self.sizes.get(tp, 0) + size
        self.total += size
        if self.sizes[tp] >= FLUSH_BYTES:
            self.flush(tp)
        elif self.total >= BUFFER_BYTES:
            self.flush_all()

    def flush_all(self) -> None:
        if self.txn is not None:
            self.txn.add(self.buffers)  # one coordinator call for all the partitions the task still holds
        for tp in list(self.buffers):
            self.flush(tp)

    def flush(self, tp: tuple[str, int]) -> None:
        """Append a partition's buffered rows during one turn of its writer lock."""
        batches = self.buffers.pop(tp, [])
        self.total -= self.sizes.pop(tp, 0)
        if not batches:
            return
        if self.txn is not None:
            self.txn.add([tp])
        p = self.store.topic(tp[0]).partition(tp[1])
        # Appends from Spark tasks take the lock for one turn, as consumer-group commits do: the checkpoint
        # written on taking it need not be fsynced (a power cut means the next writer recovers from an older
        # point), which is what `transient` tells the partition.
        internals(p).transient = True
        try:
            for batch in batches:
                first = self._append(p, batch)
                stats = self.appended.setdefault(tp, [0, first, first])
                stats[0] += batch.num_rows
                stats[2] = first
        except PartitionLockedError as exc:
            raise PartitionLockedError(f"{exc}; waited lockTimeoutMs={self.opts.lock_timeout_ms} for it "
                                       "(another task or application is writing this partition)") from None
        finally:
            p.release_writer()

    def _append(self, p: Partition, batch: pa.RecordBatch) -> int:
        names = batch.schema.names
        value = batch.column("value")
        key = batch.column("key") if "key" in names else None
        ts = _timestamps_ms(batch.column("timestamp")) if "timestamp" in names else None
        headers = None
        producer = None if self.txn is None else self.txn.producer_args(p)
        txn = producer is not None
        if "headers" in names:
            hcol = batch.column("headers")
            if hcol.null_count < len(hcol):
                headers = _headers_rows(hcol)
        if headers is not None:
            values = value.cast(pa.binary()).to_pylist()
            keys = key.cast(pa.binary()).to_pylist() if key is not None else None
            return p.append_values(values, keys=keys, timestamps=ts, headers=headers, producer=producer,
                                   transactional=txn)
        vlens, vdata = _bytes_column(value)
        klens, kdata = _bytes_column(key) if key is not None and key.null_count < len(key) else (None, None)
        return p.append_columns(vlens, vdata, klens, kdata, ts, producer=producer, transactional=txn)


def write_batches(opts: WriteOptions, batches: Iterator[pa.RecordBatch],
                  task: TaskIdentity | None = None) -> PylogCommitMessage:
    """Append Arrow batches with the Kafka sink's columns to the store (one Spark task's work); with
    ``task``, as that micro-batch task's transaction (:mod:`pylog.spark.exactly_once`), or nothing when the
    batch was already decided."""
    open_store(opts.path).close()  # checks the path is a store here, without creating one
    store = open_pylog(opts.path, log_cleaner_enable=False, lock_timeout_ms=opts.lock_timeout_ms)
    try:
        txn = None
        if task is not None:
            record = read_batch_record(store, task.query_id)
            if record is not None and record.batch_id >= task.batch_id:
                log.info("pylog: micro-batch %d of query %s was decided before: task %d writes nothing",
                         task.batch_id, task.query_id, task.partition)
                return PylogCommitMessage(query_id=task.query_id, skipped=True)
            txn = TaskTransactions(store, task, opts.transaction_timeout_ms)
        w = _TaskWriter(store, opts, txn)
        for batch in batches:
            w.add(batch)
        w.flush_all()
        appended = {tp: tuple(v) for tp, v in w.appended.items()}
        if txn is None:
            return PylogCommitMessage(appended)
        return PylogCommitMessage(appended, task.query_id if task else None, txn.finish())
    finally:
        store.close()


def _summarise(messages: List[Optional[WriterCommitMessage]]) -> tuple[int, int]:
    rows = sum(m.rows for m in messages if isinstance(m, PylogCommitMessage))
    return rows, sum(1 for m in messages if m is None)


class _TaskAppends:
    """What the batch and the streaming writer share: checked and prepared on the driver, each task appends
    its rows (see the module docstring)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        prepare_topics(opts)  # constructed on the driver: fails (or creates) before any task starts
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        return write_batches(self.opts, iterator)


class PylogWriter(_TaskAppends, DataSourceArrowWriter):
    """Batch writer: each task appends its rows (see the module docstring); the job commits nothing more."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        if opts.delivery_guarantee == EXACTLY_ONCE:
            raise InvalidOptionError("deliveryGuarantee", "exactly-once applies to streaming writes "
                                     "(writeStream); a batch write is at-least-once")
        super().__init__(opts, schema)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, _ = _summarise(messages)
        log.info("pylog: appended %d rows to %s", rows, self.opts.path)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        rows, failed = _summarise(messages)
        log.warning("pylog: write to %s aborted (%d tasks failed); %d rows appended by the tasks that succeeded "
                    "stay in the log (the sink is at-least-once)", self.opts.path, failed, rows)


class PylogStreamWriter(_TaskAppends, DataSourceStreamArrowWriter):
    """Streaming writer (``writeStream.format("pylog")``): exactly-once by default, each task's rows one
    transaction that the driver's ``commit`` commits (:mod:`pylog.spark.exactly_once`); with
    ``deliveryGuarantee=at-least-once`` the tasks append as in batch."""

    @property
    def exactly_once(self) -> bool:
        return self.opts.delivery_guarantee != AT_LEAST_ONCE

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        if not self.exactly_once:
            return write_batches(self.opts, iterator)
        task = task_identity()
        if task is None:
            raise InvalidOptionError("deliveryGuarantee", "exactly-once needs the micro-batch and query ids "
                                     "Spark's micro-batch engine gives its tasks, and this task has none; write "
                                     "with deliveryGuarantee=at-least-once")
        return write_batches(self.opts, iterator, task)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, missing = _summarise(messages)
        if missing:
            # Spark commits a micro-batch only when every task returned its message; a commit with tasks that
            # returned none is of a continuous query, whose engine hands rows one by one to a writer method
            # Python data sources do not have, and drops them (Spark 4.x): refuse rather than lose them
            raise InvalidConfigError(
                "writeStream.format('pylog') cannot run with trigger(continuous=...): Spark's continuous engine "
                "does not hand Python data source writers their rows (epoch %d: %d of %d tasks wrote nothing); "
                "use a processing-time or availableNow trigger" % (batchId, missing, len(messages)))
        done = self._transactions(messages, batchId, commit_batch)
        log.info("pylog: micro-batch %d appended %d rows to %s%s", batchId, rows, self.opts.path,
                 f" ({done})" if done else "")

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        rows, failed = _summarise(messages)
        self._transactions(messages, batchId, abort_batch)
        log.warning("pylog: micro-batch %d aborted (%d tasks failed); %d rows appended %s", batchId, failed,
                    rows, "in transactions, aborted" if self.exactly_once else "stay in the log")

    def _transactions(self, messages: List[Optional[WriterCommitMessage]], batch_id: int, end: Any) -> Any:
        """``end(store, batch_id, query_id, transactions)`` for an exactly-once batch whose tasks said which
        query they belong to (a batch without tasks has nothing to end)."""
        ours = [m for m in messages if isinstance(m, PylogCommitMessage) and m.query_id is not None]
        if not self.exactly_once or not ours:
            return None
        txns = [m.txn for m in ours if m.txn is not None]
        store = open_pylog(self.opts.path, log_cleaner_enable=False, lock_timeout_ms=self.opts.lock_timeout_ms)
        try:
            return end(store, batch_id, ours[0].query_id, txns)
        finally:
            store.close()
