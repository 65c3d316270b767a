"""Streaming reads: ``spark.readStream.format("pylog")``, with the Kafka source's offsets and options.

Offsets are JSON objects ``{"topic": {"0": next offset, ...}, ...}`` (string keys, as Spark requires),
the Kafka source's layout. A micro-batch reads ``[start, end)`` of every partition in its end offset.

Invariants:
- Spark's checkpoint is the source of truth: this reader keeps no progress of its own (``commit()`` does
  nothing), so a restarted query resumes exactly at the checkpointed end offsets, with no loss and no
  duplicate.
- ``latestOffset`` never moves a partition backwards and, under ``ReadMaxRows`` (``maxOffsetsPerTrigger``),
  returns at most that many offsets beyond ``start`` in total, shared in proportion to each partition's
  backlog (largest remainders get the leftover units), so the limit is never exceeded.
- A partition that appears after the query started (a new topic matching the subscription, or
  partitions added to a topic) is read from its earliest offset.
- With ``trigger(availableNow=True)`` the end is frozen at the log ends seen by
  ``prepareForTriggerAvailableNow``; partitions created later wait for the next run.
- Offsets below a partition's log start (removed by retention) or beyond its end (a truncated or
  recreated log) are data loss: an error with ``failOnDataLoss=true``, otherwise skipped with a warning.
- Under ``kafka.isolation.level=read_committed`` a partition's latest offset is its last stable offset: a
  micro-batch never reaches into an open transaction (it waits for the transaction's marker), never returns
  an aborted record; offsets past the last stable offset but within the log are not data loss.
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .options import DataLossError, ReadOptions, check_partitions_named, resolve_offset
from .reader import OffsetRange, list_partitions, open_store, split_ranges, stable_end
from .batch import PylogInputPartition, read_partition

__all__ = ["PylogStreamReader", "to_json", "from_json", "prorate"]

log = logging.getLogger("pylog.spark")

TP = tuple[str, int]


def to_json(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """``{(topic, p): n}`` as the Kafka source's offset JSON ``{"topic": {"p": n}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), n in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = int(n)
    return out


def from_json(doc: dict) -> dict[TP, int]:
    """The inverse of :func:`to_json`."""
    return {(topic, int(p)): int(n) for topic, parts in (doc or {}).items() for p, n in parts.items()}


def prorate(begin: dict[TP, int], end: dict[TP, int], limit: int) -> dict[TP, int]:
    """Ends that advance at most ``limit`` offsets in total past ``begin``, shared by backlog.

    Each partition gets ``floor(limit * backlog / total)``; the units left over go one each to the
    partitions with the largest fractional parts (ties by partition order), capped by their backlog.
    """
    backlog = {tp: max(0, end[tp] - begin.get(tp, end[tp])) for tp in end}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    share = {tp: limit * b // total for tp, b in backlog.items()}
    left = limit - sum(share.values())
    order = sorted(backlog, key=lambda tp: (-((limit * backlog[tp]) % total), tp))
    for tp in order:
        if left <= 0:
            break
        if share[tp] < backlog[tp]:
            share[tp] += 1
            left -= 1
    return {tp: begin.get(tp, end[tp]) + share[tp] for tp in end}


class PylogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over a store's partitions (see the module docstring)."""

    def __init__(self, opts: ReadOptions, columns: Sequence[str] | None = None) -> None:
        self.opts = opts
        self.columns = columns  # a declared subset of the Kafka schema's columns, or None for all
        self._target: dict[TP, int] | None = None  # availableNow: the ends to stop at

    def _snapshot(self) -> dict[TP, tuple[int, int, int]]:
        """``(log start, end to read to, log end)`` of every subscribed partition now; the end to read to is
        the last stable offset under read_committed, else the log end."""
        store = open_store(self.opts.path)
        try:
            out = {}
            for topic, number in list_partitions(store, self.opts.subscription):
                p = store.topic(topic).partition(number)
                end = p.log_end_offset
                stable = stable_end(p, self.opts.committed)
                out[(topic, number)] = (p.log_start_offset, stable, end)
            return out
        finally:
            store.close()

    def initialOffset(self) -> dict:
        store = open_store(self.opts.path)
        try:
            offsets = {}
            partitions = list_partitions(store, self.opts.subscription)
            check_partitions_named(self.opts.starting, partitions)
            for topic, number in partitions:
                p = store.topic(topic).partition(number)
                end = p.log_end_offset
                start = p.log_start_offset
                off = resolve_offset(self.opts.starting, topic, number, start, stable_end(p, self.opts.committed),
                                     p.offset_for_timestamp, strategy=self.opts.starting_by_timestamp_strategy)
                if off < start:
                    self._loss(f"{topic}-{number}: offsets [{off}, {start}) were removed before the query started "
                               f"(the log now starts at {start})", off, start, end)
                    off = start
                elif off > end:
                    self._loss(f"{topic}-{number}: starting offset {off} is beyond the log end {end}", off, start, end)
                    off = end
                offsets[(topic, number)] = off
            return to_json(offsets)
        finally:
            store.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: stable for tp, (_, stable, _) in self._snapshot().items()}

    def reportLatestOffset(self) -> dict | None:
        return to_json({tp: stable for tp, (_, stable, _) in self._snapshot().items()})

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        snap = self._snapshot()
        end: dict[TP, int] = {}
        for tp, (log_start, stable, log_end) in snap.items():
            if self._target is not None:
                if tp not in self._target:
                    continue  # appeared after the availableNow run started: next run
                stable = min(stable, self._target[tp])
            b = begin.get(tp)
            if b is None:  # a new partition: from its earliest offset
                begin[tp] = b = log_start
            elif log_end < b:
                self._loss(f"{tp[0]}-{tp[1]}: the log ends at {log_end}, before offset {b} already read "
                           "(truncated or recreated)", b, log_start, log_end)
            end[tp] = max(stable, b)  # never backwards (read_committed: a start past the LSO waits there)
        if isinstance(limit, ReadMaxRows):
            end = prorate(begin, end, limit.max_rows)
        for tp, b in from_json(start).items():  # partitions gone from the store keep their position
            end.setdefault(tp, b)
        return to_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        if not stop or begin == stop:
            return []
        snap = self._snapshot()
        ranges = []
        for tp, e in sorted(stop.items()):
            log_start, _, log_end = snap.get(tp, (None, None, None))
            if log_start is None or log_end is None:
                if e > begin.get(tp, e):
                    self._loss(f"{tp[0]}-{tp[1]}: the partition is gone", begin.get(tp, 0), 0, 0)
                continue
            b = begin.get(tp, log_start)
            if b < log_start:
                self._loss(f"{tp[0]}-{tp[1]}: offsets [{b}, {min(e, log_start)}) were removed before they were read "
                           f"(the log now starts at {log_start})", b, log_start, log_end)
                b = min(log_start, e)
            if b < e:
                ranges.append(OffsetRange(tp[0], tp[1], b, e))
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return PylogInputPartition.planned(self.opts, ranges, self.columns)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, and a pylog log keeps no reader state."""

    def _loss(self, message: str, offset: int, log_start: int, log_end: int) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to skip what is gone)", offset, log_start,
                                log_end)
        log.warning("pylog: %s; skipping it (failOnDataLoss=false)", message)
