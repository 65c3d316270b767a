"""The ``pylog`` Spark data source: ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("pylog")``.

:class:`PylogDataSource` is what ``pyspark_pylog.DefaultSource`` exports for discovery and what
:func:`pylog.spark.register` registers. It parses options (:mod:`pylog.spark.options`) and hands out
readers and writers; all work happens in :mod:`pylog.spark.reader`, :mod:`~pylog.spark.stream` and
:mod:`~pylog.spark.writer`.

Invariants:
- The schema is the Kafka source's: ``key binary, value binary, topic string, partition int, offset long,
  timestamp timestamp, timestampType int`` plus ``headers array<struct<key:string,value:binary>>`` with
  ``includeHeaders=true``; a user-given schema must equal it.
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
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from .options import InvalidOptionError, ReadOptions, parse_read_options, parse_write_options
from .reader import OffsetRange, RangeFilter, filter_from_pushed, open_store, plan_ranges, read_range, split_ranges

__all__ = ["PylogDataSource", "PylogBatchReader", "PylogFilteringBatchReader", "PylogInputPartition",
           "kafka_schema", "NAME"]

#: The format name: ``spark.read.format("pylog")``.
NAME = "pylog"

_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool = False) -> StructType:
    """The Kafka source's schema (with the ``headers`` column when ``include_headers``)."""
    fields = [
        StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
        StructField("partition", IntegerType()), StructField("offset", LongType()),
        StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS))
    return StructType(fields)


class PylogInputPartition(InputPartition):
    """One Spark task's work: offsets ``[start, end)`` of one log partition, plus how to read them."""

    def __init__(self, path: str, rng: OffsetRange, include_headers: bool, fail_on_data_loss: bool) -> None:
        super().__init__(rng)
        self.path = path
        self.range = rng
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss

    def __repr__(self) -> str:
        r = self.range
        return f"PylogInputPartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one planned partition (an executor's side of a batch or micro-batch read)."""
    if not isinstance(partition, PylogInputPartition):  # Spark's stand-in when nothing was planned
        return iter(())
    return _read(partition)


def _read(partition: PylogInputPartition) -> Iterator[pa.RecordBatch]:
    store = open_store(partition.path)
    try:
        yield from read_range(store, partition.range, partition.include_headers, partition.fail_on_data_loss)
    finally:
        store.close()


def _check_schema(schema: StructType | None, opts: ReadOptions) -> None:
    expected = kafka_schema(opts.include_headers)
    if schema is not None and schema != expected:
        raise InvalidOptionError("schema", f"the pylog source's schema is fixed ({expected.simpleString()}); "
                                 f"got {schema.simpleString()}")


class PylogBatchReader(DataSourceReader):
    """Batch reader: plans offset ranges once, reads each as Arrow batches (see :mod:`pylog.spark.reader`)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.pushed: RangeFilter | None = None

    def partitions(self) -> Sequence[InputPartition]:
        store = open_store(self.opts.path)
        try:
            ranges = plan_ranges(store, self.opts, self.pushed)
        finally:
            store.close()
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [PylogInputPartition(self.opts.path, r, self.opts.include_headers, self.opts.fail_on_data_loss)
                for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
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


class PylogDataSource(DataSource):
    """``format("pylog")``: the store directory is the path; options as Spark's Kafka source (docs/SPARK.md)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Parsed here too so that bad options fail at load(), not at the first action; whether the read is
        # batch or streaming is not known yet, so the reader checks the options again.
        return kafka_schema(parse_read_options(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options)
        _check_schema(schema, opts)
        return PylogFilteringBatchReader(opts) if opts.filter_pushdown else PylogBatchReader(opts)

    def streamReader(self, schema: StructType) -> Any:
        from .stream import PylogStreamReader

        opts = parse_read_options(self.options, streaming=True)
        _check_schema(schema, opts)
        return PylogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import PylogWriter

        if overwrite:
            raise InvalidOptionError("mode", "a pylog topic is append-only: use mode('append')")
        return PylogWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .writer import PylogStreamWriter

        if overwrite:
            raise InvalidOptionError("outputMode", "a pylog topic is append-only: use outputMode('append')")
        return PylogStreamWriter(parse_write_options(self.options), schema)
