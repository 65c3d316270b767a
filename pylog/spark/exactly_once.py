"""Exactly-once streaming writes (``writeStream.format("pylog")``): each task's rows as one transaction, all of
a micro-batch's transactions committed by the driver after a durable record of the batch.

Spark runs a micro-batch's tasks (``write`` on the executors), then ``commit(messages, batchId)`` on the driver,
then records the batch in its checkpoint (``commits/<batchId>``). After a crash anywhere before that record,
the restarted query runs the batch again, with the same id and input. This module makes the re-run land
nothing twice, using pylog's transaction coordinator (:mod:`pylog.clients.transactions`):

- **Task** (batch B, Spark partition P, attempt A of query Q): when Q's batch record says B is decided
  (a re-run), it writes nothing. Otherwise it takes the transactional id ``pylog-spark-<Q>-<P>-<A>``
  (``init_producer_id``: a transaction that id left open is aborted and its producer fenced), adds each pylog
  partition to the transaction before its first append there, appends transactionally, fsyncs what it
  appended, and returns ``(id, producer id, epoch)`` in its commit message, the transaction left open.
- **Driver**, ``commit(B)``: reads Q's batch record (a commit of the consumer group ``pylog-spark-<Q>``, key
  ``spark:micro-batch``/0: offset = the batch id, metadata = its transactions as JSON). If it names B (the
  previous run decided B and died committing it), it commits the transactions the record names (a repeat of a
  done commit succeeds). Otherwise it aborts every open transaction of Q that is not one of B's (leftovers of
  failed task attempts and of a run that died before deciding), writes the record for B and fsyncs it (the
  batch's commit point), then commits B's transactions one by one. ``abort(B)`` aborts B's transactions.

Invariants:
- A batch's rows become visible to read_committed readers once: B's transactions are committed only when the
  record names B, written once per batch before any of them commits; a run that finds the record naming B
  writes nothing new for B and only completes those commits. Transactions named by no record are only ever
  aborted.
- A transaction of the record is never aborted by this module: a task of batch B+1 reuses an id only after the
  driver's ``commit(B)`` returned (Spark starts B+1 after it), and the re-run of B writes nothing.
- What remains open (a task done, the driver not yet committed; or a dead driver's decided batch) holds the
  partitions' last stable offset until the driver commits it or, past ``transactionTimeoutMs``, any writing
  store's timeout sweep aborts it. A decided batch whose transaction the sweep aborted is reported by the next
  ``commit(B)`` as :class:`SinkTransactionLostError` (its rows are lost): the timeout must outlast a restart.
- Deterministic input is assumed, as by every exactly-once Spark sink: the re-run of B reads the same offsets
  (Spark's offset log) and, when B was not decided, writes all of it again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Iterable, Sequence

from pyspark import TaskContext

from ..errors import (CorruptRecordError, ProducerFencedError, SinkTransactionLostError,
                      TransactionalIdNotFoundError)
from ..partition import Partition, internals
from ..store import Store, TxnState, group_offsets, transaction_coordinator
from ..structs import OffsetAndMetadata, TopicPartition

__all__ = ["TaskIdentity", "BatchRecord", "TaskTransaction", "SinkTransactionLostError", "task_identity",
           "TaskTransactions", "group_id", "read_batch_record", "commit_batch", "abort_batch", "RECORD_KEY"]

log = logging.getLogger("pylog.spark")

#: The committed-offset key of a query's batch record: ':' is no topic character, so it never names a topic.
RECORD_KEY = TopicPartition("spark:micro-batch", 0)
_PREFIX = "pylog-spark-"
_RECORD_VERSION = 1
# Spark's local properties, set by its micro-batch engine on the driver's job and passed to every task.
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class TaskIdentity:
    """Which task of which micro-batch of which query a ``write`` runs as (Spark's task context)."""
    query_id: str
    batch_id: int
    partition: int
    attempt: int

    @property
    def transactional_id(self) -> str:
        return f"{_PREFIX}{self.query_id}-{self.partition}-{self.attempt}"


@dataclass(frozen=True)
class TaskTransaction:
    """A task's open transaction, as its commit message carries it to the driver."""
    transactional_id: str
    producer_id: int
    epoch: int


@dataclass(frozen=True)
class BatchRecord:
    """A query's last decided micro-batch and its transactions."""
    batch_id: int
    transactions: tuple[TaskTransaction, ...]


def group_id(query_id: str) -> str:
    """The consumer group whose committed offsets hold the query's batch record."""
    return f"{_PREFIX}{query_id}"


def task_identity() -> TaskIdentity | None:
    """The running Spark task's identity, or None outside a streaming micro-batch (no task context, or
    Spark set no batch or query id)."""
    ctx = TaskContext.get()
    if ctx is None:
        return None
    batch, query = ctx.getLocalProperty(_BATCH_ID_PROPERTY), ctx.getLocalProperty(_QUERY_ID_PROPERTY)
    if batch is None or query is None:
        return None
    return TaskIdentity(query, int(batch), ctx.partitionId(), ctx.attemptNumber())


def read_batch_record(store: Store, query_id: str) -> BatchRecord | None:
    """The query's batch record, None before its first decided batch.

    :raises CorruptRecordError: a record whose metadata is not what :func:`commit_batch` writes."""
    om = store.committed_offsets(group_id(query_id)).get(RECORD_KEY)
    if om is None:
        return None
    try:
        doc = json.loads(om.metadata)
        if not (isinstance(doc, dict) and doc.get("v") == _RECORD_VERSION and isinstance(doc.get("txns"), list)):
            raise ValueError("not a batch record")
        txns = tuple(TaskTransaction(t[0], t[1], t[2]) for t in doc["txns"]
                     if isinstance(t, list) and len(t) == 3 and isinstance(t[0], str) and type(t[1]) is int
                     and type(t[2]) is int)
        if len(txns) != len(doc["txns"]):
            raise ValueError("a transaction entry is not [id, producer id, epoch]")
    except (ValueError, RecursionError) as exc:
        raise CorruptRecordError(f"the batch record of Spark query {query_id} (group {group_id(query_id)!r}) "
                                 f"is damaged: {exc}") from None
    return BatchRecord(om.offset, txns)


class TaskTransactions:
    """One task's transaction: opened at its first append, partitions added before their first append."""

    def __init__(self, store: Store, task: TaskIdentity, timeout_ms: int | None) -> None:
        self.store = store
        self.task = task
        self.timeout_ms = timeout_ms if timeout_ms is not None else store.settings["transaction.max.timeout.ms"]
        self.coordinator = transaction_coordinator(store)
        self.producer: tuple[int, int] | None = None
        self.added: set[tuple[str, int]] = set()
        self.written: list[Partition] = []

    def add(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Before appending to ``partitions``: the transaction is open (init on first use) and has them. No
        partition, no transaction: a task without rows (an empty shuffle partition of an aggregation) opens
        none, so the driver has none to commit (an id initialised with nothing added has none open)."""
        tid = self.task.transactional_id
        new = [TopicPartition(t, n) for t, n in partitions if (t, n) not in self.added]
        if not new:
            return
        if self.producer is None:
            taken = self.coordinator.init_producer_id(tid, self.timeout_ms)
            self.producer = (taken.producer_id, taken.epoch)
        self.coordinator.add_partitions(tid, *self.producer, new)
        self.added.update((tp.topic, tp.partition) for tp in new)

    def producer_args(self, p: Partition) -> tuple[int, int, int]:
        """``producer=`` of the next append to ``p`` (call as its writer: the sequence is the partition's next)."""
        assert self.producer is not None
        if p not in self.written:
            self.written.append(p)
        return (*self.producer, internals(p).next_sequence(*self.producer))

    def finish(self) -> TaskTransaction | None:
        """fsync what the task appended (before the driver may commit it); the transaction to commit."""
        for p in self.written:
            p.flush()
        if self.producer is None:
            return None
        return TaskTransaction(self.task.transactional_id, *self.producer)


def _end(store: Store, txn: TaskTransaction, commit: bool) -> None:
    coordinator = transaction_coordinator(store)
    if commit:
        try:
            coordinator.end_txn(txn.transactional_id, txn.producer_id, txn.epoch, True)
        except ProducerFencedError:
            meta = coordinator.describe(txn.transactional_id)
            raise SinkTransactionLostError(
                f"{txn.transactional_id}: its transaction (producer {txn.producer_id}, epoch {txn.epoch}) was "
                f"aborted before the driver committed it (state {meta.state.kafka_name}, epoch "
                f"{meta.producer_epoch}; a transaction timeout?): that task's rows of the batch are lost") from None
        return
    # An abort fences too (a bumped epoch), so a task attempt still running cannot add to it.
    coordinator.init_producer_id(txn.transactional_id, _timeout(store, txn.transactional_id),
                                 txn.producer_id, txn.epoch)


def _timeout(store: Store, transactional_id: str) -> int:
    try:
        return transaction_coordinator(store).describe(transactional_id).timeout_ms
    except TransactionalIdNotFoundError:
        return int(store.settings["transaction.max.timeout.ms"])


def _abort_leftovers(store: Store, query_id: str, keep: Sequence[TaskTransaction]) -> int:
    """Abort the query's open transactions other than ``keep`` (fencing their producers); returns how many."""
    prefix = f"{_PREFIX}{query_id}-"
    kept = {(t.transactional_id, t.producer_id, t.epoch) for t in keep}
    coordinator = transaction_coordinator(store)
    aborted = 0
    for meta in coordinator.list_transactions(states=[TxnState.ONGOING]):
        tid = meta.transactional_id
        if tid.startswith(prefix) and (tid, meta.producer_id, meta.producer_epoch) not in kept:
            try:
                coordinator.init_producer_id(tid, meta.timeout_ms)
            except ProducerFencedError:  # another process fenced it meanwhile: ended all the same
                continue
            aborted += 1
    return aborted


def commit_batch(store: Store, batch_id: int, query_id: str, transactions: Sequence[TaskTransaction]) -> str:
    """The driver's ``commit(batchId)`` (see the module docstring); returns what it did, for the log.

    :raises SinkTransactionLostError: a decided batch's transaction was aborted by its timeout.
    """
    record = read_batch_record(store, query_id)
    if record is not None and record.batch_id >= batch_id:
        aborted = _abort_leftovers(store, query_id, record.transactions)
        if record.batch_id > batch_id:
            log.warning("pylog: Spark query %s re-ran micro-batch %d, older than its last decided one (%d): "
                        "nothing written", query_id, batch_id, record.batch_id)
            return f"already decided (batch {record.batch_id}), {aborted} leftovers aborted"
        for txn in record.transactions:
            _end(store, txn, True)
        return f"re-run: {len(record.transactions)} transactions of the decided batch completed, {aborted} " \
               "leftovers aborted"
    aborted = _abort_leftovers(store, query_id, transactions)
    doc = {"v": _RECORD_VERSION, "txns": [[t.transactional_id, t.producer_id, t.epoch] for t in transactions]}
    offsets = group_offsets(store)
    gid = group_id(query_id)
    offsets.commit(gid, {RECORD_KEY: OffsetAndMetadata(batch_id, json.dumps(doc, separators=(",", ":")))})
    offsets.partition_for(gid).flush()  # the batch's commit point: durable before any transaction commits
    for txn in transactions:
        _end(store, txn, True)
    return f"{len(transactions)} transactions committed, {aborted} leftovers aborted"


def abort_batch(store: Store, batch_id: int, query_id: str, transactions: Sequence[TaskTransaction]) -> None:
    """The driver's ``abort(batchId)``: the tasks' transactions aborted, unless a record decided the batch
    (then the re-run's ``commit`` completes it)."""
    record = read_batch_record(store, query_id)
    if record is not None and record.batch_id >= batch_id:
        return
    for txn in transactions:
        try:
            _end(store, txn, False)
        except ProducerFencedError:
            continue
