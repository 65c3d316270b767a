"""The batch read side of the ``pylog`` Spark data source: input partitions and the batch readers.

:class:`~pylog.spark.source.PylogDataSource` hands out these readers; the streaming reader
(:mod:`pylog.spark.stream`) reads its micro-batches through :class:`PylogInputPartition` and
:func:`read_partition` too. The work itself (planning, Arrow conversion) is in :mod:`pylog.spark.reader`.

Invariants:
- Planning (``partitions()``) runs in a Python process on the driver and resolves every offset there; a
  task's :class:`PylogInputPartition` carries everything ``read()`` needs, because ``read()`` runs on an
  executor with a copy of the reader pickled before planning.
- The batch reader only has a ``pushFilters`` method when ``filterPushdown=true``: PySpark fails any query
  whose reader defines one unless ``spark.sql.python.filterPushdown.enabled`` is true.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable, Iterator, List, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from .options import ReadOptions
from .reader import OffsetRange, RangeFilter, filter_from_pushed, open_store, plan_ranges, read_range, split_ranges

__all__ = ["PylogBatchReader", "PylogFilteringBatchReader", "PylogInputPartition", "read_partition"]


class PylogInputPartition(InputPartition):
    """One Spark task's work: offsets ``[start, end)`` of one log partition, plus how to read them."""

    def __init__(self, path: str, rng: OffsetRange, include_headers: bool, fail_on_data_loss: bool,
                 columns: Sequence[str] | None = None, committed: bool = False,
                 remote: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(rng)
        self.path = path
        self.remote = remote  # how to reach the bucket of an s3:// path
        self.range = rng
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.columns = tuple(columns) if columns is not None else None  # None: the whole Kafka schema
        self.committed = committed  # kafka.isolation.level=read_committed

    @classmethod
    def planned(cls, opts: ReadOptions, ranges: Sequence[OffsetRange],
                columns: Sequence[str] | None) -> list["PylogInputPartition"]:
        """One input partition per range of a query with options ``opts``."""
        return [cls(opts.path, r, opts.include_headers, opts.fail_on_data_loss, columns, opts.committed, opts.remote)
                for r in ranges]

    def __repr__(self) -> str:
        r = self.range
        return f"PylogInputPartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned partition (an executor's side of a batch or micro-batch read)."""
    if not isinstance(partition, PylogInputPartition):  # Spark's stand-in when nothing was planned
        return iter(())
    return _read(partition)


def _read(partition: PylogInputPartition) -> Iterator[pa.RecordBatch]:
    store = open_store(partition.path, partition.remote)
    try:
        yield from read_range(store, partition.range, partition.include_headers, partition.fail_on_data_loss,
                              columns=partition.columns, committed=partition.committed)
    finally:
        store.close()


class PylogBatchReader(DataSourceReader):
    """Batch reader: plans offset ranges once, reads each as Arrow batches (see :mod:`pylog.spark.reader`)."""

    def __init__(self, opts: ReadOptions, columns: Sequence[str] | None = None) -> None:
        self.opts = opts
        self.columns = columns  # a declared subset of the Kafka schema's columns, or None for all
        self.pushed: RangeFilter | None = None

    def partitions(self) -> Sequence[InputPartition]:
        store = open_store(self.opts.path, self.opts.remote)
        try:
            ranges = plan_ranges(store, self.opts, self.pushed)
        finally:
            store.close()
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return PylogInputPartition.planned(self.opts, ranges, self.columns)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


def _timestamp_ms(value: Any) -> int | None:
    """A pushed timestamp literal in ms since the epoch, rounded down; naive datetimes are taken as UTC
    minus a day's margin (the session time zone is unknown here; a lower bound may only be too low)."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            return int((value.replace(tzinfo=_dt.timezone.utc) - _dt.timedelta(days=1)).timestamp() * 1000)
        return int(value.timestamp() * 1000)
    return None


class PylogFilteringBatchReader(PylogBatchReader):
    """:class:`PylogBatchReader` that prunes partitions and offset ranges by pushed filters
    (``filterPushdown=true``; needs ``spark.sql.python.filterPushdown.enabled=true``)."""

    def pushFilters(self, filters: List[Filter]) -> Iterable[Filter]:
        self.pushed, remaining = filter_from_pushed(filters, _timestamp_ms)
        return remaining
