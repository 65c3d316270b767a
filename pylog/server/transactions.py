"""Kafka's transaction APIs in ``pylog serve``, and DescribeProducers.

The server is the transaction coordinator of every transactional id (FindCoordinator answers this node) and runs the
library's coordinator (:class:`pylog.clients.transactions.TransactionCoordinator`,
``pylog.store.transaction_coordinator(store)``): InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, DescribeTransactions and ListTransactions map one to one onto its calls,
so Kafka clients, pylog's own transactional producers and the timeout sweep of any process share one state per id
(``__transaction_state``, under the id's coordinator lock). The state is the store's, so it survives a restart of
the server.

A transactional Produce is checked first (:func:`produce_check`, KIP-890's server-side defence): its
transactional id's state must be Ongoing with the batch's producer id and epoch, and the partition added to
the transaction; otherwise the partition is refused (INVALID_TXN_STATE, as Kafka answers a partition not
added; INVALID_PRODUCER_EPOCH or INVALID_PRODUCER_ID_MAPPING for another incarnation) and nothing is appended.

DescribeProducers (61) answers from each partition's producer table as its files hold it (the producer
snapshot and the batch headers after it: :meth:`pylog.partition.PartitionInternals.describe_producers`), so it
reports the producers of every writer, pylog's own producers of other processes included.

Invariants:
- Every handler answers each item (partition, transactional id) with its own error code; a failure of one item
  never fails the others, and a coordinator call refused as a whole changes nothing.
- Whatever reads or writes the store runs in the server's pools (:meth:`ServerState.read`, :meth:`ServerState.run`:
  a coordinator call may wait for another process's lock on the id), never on the event loop.
- A request version that predates PRODUCER_FENCED (KIP-588) gets INVALID_PRODUCER_EPOCH in its place.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..errors import InvalidTopicError, ProducerFencedError, PylogError, UnknownTopicError
from ..partition import Partition, internals
from ..store import Store, TransactionCoordinator, TxnState, transaction_coordinator
from ..structs import OffsetAndMetadata, TopicPartition
from .errormap import code_for
from .protocol import codes as E
from .state import Handler, ServerState

__all__ = ["TxnHandlers", "produce_check"]

log = logging.getLogger("pylog.server")

#: Kafka API key -> the first version that knows PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH.
_FENCED_FROM = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}


def _code(exc: PylogError, api_key: int, version: int) -> int:
    if isinstance(exc, ProducerFencedError):
        return E.PRODUCER_FENCED if version >= _FENCED_FROM.get(api_key, 1 << 15) else E.INVALID_PRODUCER_EPOCH
    return code_for(exc)


def produce_check(store: Store, transactional_id: str, producer_id: int, epoch: int, topic: str,
                  partition: int) -> tuple[int, str] | None:
    """KIP-890's check of a transactional batch (see the module docstring): None when it may be appended, else
    ``(error code, message)``. Reads the id's latest state (including other processes' transitions)."""
    try:
        meta = transaction_coordinator(store).describe(transactional_id)
    except PylogError as exc:
        return code_for(exc), f"transactional id {transactional_id!r}: {exc}"
    if meta.producer_id != producer_id:
        return E.INVALID_PRODUCER_ID_MAPPING, (f"producer id {producer_id} is not transactional id "
                                               f"{transactional_id!r}'s ({meta.producer_id})")
    if epoch != meta.producer_epoch:
        return E.INVALID_PRODUCER_EPOCH, (f"producer epoch {epoch} of transactional id {transactional_id!r} is not "
                                          f"its current one ({meta.producer_epoch})")
    if meta.state != TxnState.ONGOING or TopicPartition(topic, partition) not in meta.partitions:
        return E.INVALID_TXN_STATE, (f"{topic}-{partition} was not added to the open transaction of "
                                     f"{transactional_id!r} (AddPartitionsToTxn first; state {meta.state.kafka_name})")
    return None


class TxnHandlers:
    """The transaction APIs and DescribeProducers of one server; ``partition(topic, index)`` finds a partition
    (UnknownTopicError for a missing one)."""

    def __init__(self, state: ServerState, partition: Callable[[str, int], Partition]) -> None:
        self.s = state
        self.partition = partition

    @property
    def _coordinator(self) -> TransactionCoordinator:
        return transaction_coordinator(self.s.store)

    def handlers(self) -> dict[int, Handler]:
        return {24: self.add_partitions_to_txn, 25: self.add_offsets_to_txn, 26: self.end_txn,
                28: self.txn_offset_commit, 61: self.describe_producers, 65: self.describe_transactions,
                66: self.list_transactions}

    async def _call(self, req: Any, fn: Callable[..., Any], *args: Any) -> int:
        """``fn(*args)`` (a coordinator call) in the storage pool: its error code."""
        try:
            await self.s.run(fn, *args)
        except PylogError as exc:
            log.debug("pylog serve: %s: %s", getattr(fn, "__name__", fn), exc)
            return _code(exc, req.api_key, req.api_version)
        return E.NONE

    # ------------------------------------------------------------------ InitProducerId (with a transactional id)

    async def init_producer_id(self, req: Any, conn: Any) -> dict:
        b = req.body
        coordinator = self._coordinator
        try:
            got = await self.s.run(coordinator.init_producer_id, b["transactional_id"], b["transaction_timeout_ms"],
                                   b.get("producer_id", -1), b.get("producer_epoch", -1))
        except PylogError as exc:
            log.debug("pylog serve: InitProducerId %r: %s", b["transactional_id"], exc)
            return {"throttle_time_ms": 0, "error_code": _code(exc, req.api_key, req.api_version),
                    "producer_id": -1, "producer_epoch": -1}
        self.s.producer_owners.issued(got.producer_id, conn.principal)
        return {"throttle_time_ms": 0, "error_code": E.NONE, "producer_id": got.producer_id,
                "producer_epoch": got.epoch}

    # ------------------------------------------------------------------ AddPartitionsToTxn, AddOffsetsToTxn

    async def add_partitions_to_txn(self, req: Any, conn: Any) -> dict:
        """Every partition asked for joins the transaction, or none: a missing one is UNKNOWN_TOPIC_OR_PARTITION
        and the others OPERATION_NOT_ATTEMPTED (Kafka's answer)."""
        b = req.body
        topics = b["v3_and_below_topics"] or []
        asked = [(t["name"], p) for t in topics for p in t["partitions"] or []]
        missing = set(await self.s.read(self._missing, asked))
        codes: dict[tuple[str, int], int]
        if missing:
            codes = {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in missing else E.OPERATION_NOT_ATTEMPTED for tp in asked}
        else:
            code = await self._call(req, self._coordinator.add_partitions,
                                    b["v3_and_below_transactional_id"], b["v3_and_below_producer_id"],
                                    b["v3_and_below_producer_epoch"], [TopicPartition(t, p) for t, p in asked])
            codes = {tp: code for tp in asked}
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": codes[(t["name"], p)]} for p in t["partitions"] or []]}
            for t in topics]}

    def _missing(self, asked: list[tuple[str, int]]) -> list[tuple[str, int]]:
        out = []
        for topic, index in asked:
            try:
                self.partition(topic, index)
            except (UnknownTopicError, InvalidTopicError):
                out.append((topic, index))
        return out

    async def add_offsets_to_txn(self, req: Any, conn: Any) -> dict:
        b = req.body
        code = await self._call(req, self._coordinator.add_offsets, b["transactional_id"], b["producer_id"],
                                b["producer_epoch"], b["group_id"])
        return {"throttle_time_ms": 0, "error_code": code}

    # ------------------------------------------------------------------ TxnOffsetCommit

    async def txn_offset_commit(self, req: Any, conn: Any) -> dict:
        """The offsets become the group's when the transaction commits. A request naming a member (v3+: KIP-447's
        zombie fencing) is checked against the group's current generation first, as an OffsetCommit is."""
        b = req.body
        topics = b["topics"] or []
        group_id, generation, member_id = b["group_id"], b.get("generation_id", -1), b.get("member_id") or ""
        instance_id = b.get("group_instance_id")
        code: int = E.NONE
        if generation >= 0 or member_id or instance_id is not None:
            code = self.s.coordinator.check_commit(group_id, generation, member_id, instance_id)
        metadata_max = self.s.config.offset_metadata_max_bytes
        codes: dict[tuple[str, int], int] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in topics:
            for p in t["partitions"] or []:
                key = (t["name"], p["partition_index"])
                meta = p.get("committed_metadata") or ""
                if len(meta.encode("utf-8", "surrogatepass")) > metadata_max:
                    codes[key] = E.OFFSET_METADATA_TOO_LARGE
                else:
                    offsets[TopicPartition(*key)] = OffsetAndMetadata(p["committed_offset"], meta,
                                                                      p.get("committed_leader_epoch", -1))
        if code == E.NONE and offsets:
            missing = set(await self.s.read(self._missing, [(tp.topic, tp.partition) for tp in offsets]))
            for key in missing:
                codes[key] = E.UNKNOWN_TOPIC_OR_PARTITION
                offsets.pop(TopicPartition(*key))
            if offsets:
                code = await self._call(req, self._coordinator.txn_offset_commit, b["transactional_id"],
                                        b["producer_id"], b["producer_epoch"], group_id, offsets, generation,
                                        member_id)
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"],
                 "error_code": codes.get((t["name"], p["partition_index"]), code)} for p in t["partitions"] or []]}
            for t in topics]}

    # ------------------------------------------------------------------ EndTxn

    async def end_txn(self, req: Any, conn: Any) -> dict:
        """Answered once the transaction's markers are written (the library ends a transaction whole: its commit
        point, every marker, then the completed state), so a read_committed reader sees it at once."""
        b = req.body
        code = await self._call(req, self._coordinator.end_txn, b["transactional_id"], b["producer_id"],
                                b["producer_epoch"], b["committed"])
        return {"throttle_time_ms": 0, "error_code": code}

    # ------------------------------------------------------------------ DescribeTransactions, ListTransactions

    async def describe_transactions(self, req: Any, conn: Any) -> dict:
        def describe() -> list[dict]:
            return [self._described(tid) for tid in req.body["transactional_ids"] or []]
        return {"throttle_time_ms": 0, "transaction_states": await self.s.read(describe)}

    def _described(self, tid: str) -> dict:
        entry: dict[str, Any] = {"transactional_id": tid, "error_code": E.NONE, "transaction_state": "",
                                 "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                                 "producer_epoch": -1, "topics": []}
        try:
            meta = self._coordinator.describe(tid)
        except PylogError as exc:
            entry["error_code"] = code_for(exc)
            return entry
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(meta.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        entry.update(transaction_state=meta.state.kafka_name, transaction_timeout_ms=meta.timeout_ms,
                     transaction_start_time_ms=meta.start_ms, producer_id=meta.producer_id,
                     producer_epoch=meta.producer_epoch,
                     topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
        return entry

    async def list_transactions(self, req: Any, conn: Any) -> dict:
        """Filtered as Kafka filters: by state names (unknown ones listed back), producer ids and (v1) the
        transactions open for at least ``duration_filter`` ms."""
        b = req.body
        wanted = set(b["state_filters"] or [])
        pids = set(b["producer_id_filters"] or [])
        duration = b.get("duration_filter", -1)
        known = {s.kafka_name for s in TxnState}
        metas = await self.s.read(self._coordinator.list_transactions)
        now = time.time_ns() // 1_000_000
        states = [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                   "transaction_state": m.state.kafka_name} for m in metas
                  if (not wanted or m.state.kafka_name in wanted) and (not pids or m.producer_id in pids)
                  and (duration < 0 or (m.start_ms >= 0 and now - m.start_ms >= duration))]
        return {"throttle_time_ms": 0, "error_code": E.NONE, "unknown_state_filters": sorted(wanted - known),
                "transaction_states": states}

    # ------------------------------------------------------------------ DescribeProducers

    async def describe_producers(self, req: Any, conn: Any) -> dict:
        def lookups() -> list[dict]:
            return [{"name": t["name"], "partitions": [self._producers_of(t["name"], index)
                                                       for index in t["partition_indexes"] or []]}
                    for t in req.body["topics"] or []]
        return {"throttle_time_ms": 0, "topics": await self.s.read(lookups)}

    def _producers_of(self, topic: str, index: int) -> dict:
        entry: dict[str, Any] = {"partition_index": index, "error_code": E.NONE, "error_message": None,
                                 "active_producers": []}
        try:
            producers = internals(self.partition(topic, index)).describe_producers()
        except PylogError as exc:
            entry.update(error_code=code_for(exc), error_message=str(exc))
            return entry
        entry["active_producers"] = [
            {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "last_sequence": p.last_sequence,
             "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
             "current_txn_start_offset": p.current_txn_start_offset} for p in producers]
        return entry
