"""Kafka's transaction APIs in ``pylog serve``, and DescribeProducers.

DescribeProducers (61) answers from each partition's producer table as its files hold it (the producer
snapshot and the batch headers after it: :meth:`pylog.partition.PartitionInternals.active_producers`), so it
reports the producers of every writer, pylog's own producers of other processes included.

Invariants:
- Every handler answers each item (partition, transactional id) with its own error code; a failure of one item
  never fails the others.
- Whatever reads or writes the store runs in the server's pools (:meth:`ServerState.read`, :meth:`ServerState.run`),
  never on the event loop.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import PylogError
from ..partition import internals
from .errormap import code_for
from .handlers import DataHandlers
from .protocol import codes as E
from .state import Handler, ServerState

__all__ = ["TxnHandlers"]

log = logging.getLogger("pylog.server")


class TxnHandlers:
    """DescribeProducers (and, as they are built, the transaction APIs) of one server."""

    def __init__(self, state: ServerState, data: DataHandlers) -> None:
        self.s = state
        self.data = data

    def handlers(self) -> dict[int, Handler]:
        return {61: self.describe_producers}

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
            producers = internals(self.data.partition(topic, index)).active_producers()
        except PylogError as exc:
            entry.update(error_code=code_for(exc), error_message=str(exc))
            return entry
        entry["active_producers"] = [
            {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch, "last_sequence": p.last_sequence,
             "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
             "current_txn_start_offset": p.current_txn_start_offset} for p in producers]
        return entry
