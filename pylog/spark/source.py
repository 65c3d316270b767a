"""The ``pylog`` Spark data source: ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("pylog")``.

:class:`PylogDataSource` is what ``pyspark_pylog.DefaultSource`` exports for discovery and what
:func:`pylog.spark.register` registers. It parses options (:mod:`pylog.spark.options`) and hands out
readers and writers; all work happens in :mod:`pylog.spark.batch` (batch reader), :mod:`~pylog.spark.stream`
(streaming reader), :mod:`~pylog.spark.writer` (writers) and :mod:`~pylog.spark.reader` (planning, Arrow).
This module sits above all of them and imports them; none of them imports it.

Invariants:
- The schema is the Kafka source's: ``key binary, value binary, topic string, partition int, offset long,
  timestamp timestamp, timestampType int`` plus ``headers array<struct<key:string,value:binary>>`` with
  ``includeHeaders=true``. A user-declared schema must be a subset of those columns with those types, in
  any order; the read then produces only those (column pruning).
- A batch write with Spark's default save mode (ErrorIfExists) appends, as Kafka's sink does: importing
  this package installs that default (:mod:`pylog.spark.savemode`).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from .batch import PylogBatchReader, PylogFilteringBatchReader
from ..errors import PylogError
from .options import InvalidOptionError, ReadOptions, parse_read_options, parse_write_options
from .stream import PylogStreamReader
from .writer import PylogStreamWriter, PylogWriter

__all__ = ["PylogDataSource", "PylogPythonDataSource", "kafka_schema", "read_columns", "NAME", "PYTHON_NAME"]

#: The format name: ``spark.read.format("pylog")``.
NAME = "pylog"
#: The Python source's second name: the JVM reader, which owns ``pylog`` once its jar is loaded, hands it writes,
#: streams and the reads it does not handle (docs/SPARK.md, "Which reader runs").
PYTHON_NAME = "pylog-python"

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


def read_columns(schema: StructType | None, opts: ReadOptions) -> tuple[str, ...] | None:
    """The columns a read produces: None for the whole Kafka schema, or the names of a user-declared
    subset (``.schema("value binary")``), in the declared order: column pruning, since a Python source
    gets no pruning from Spark. A declared ``headers`` column reads headers without ``includeHeaders``.

    :raises InvalidOptionError: a declared column that is not one of the Kafka schema's, has another type
        or nullability, or appears twice.
    """
    if schema is None or schema == kafka_schema(opts.include_headers):
        return None
    known = {f.name: f for f in kafka_schema(True).fields}
    names = [f.name for f in schema.fields]
    for f in schema.fields:
        want = known.get(f.name)
        if want is None or f.dataType != want.dataType or not f.nullable:
            what = (f"unknown column {f.name!r}" if want is None
                    else f"column {f.name!r} must be {want.dataType.simpleString()} (nullable)")
            raise InvalidOptionError("schema", f"{what}: declare a subset of the pylog source's columns "
                                     f"({kafka_schema(True).simpleString()}), e.g. .schema('value binary')")
    if not names or len(set(names)) != len(names):
        raise InvalidOptionError("schema", f"declare each column once, at least one; got {schema.simpleString()}")
    return tuple(names)


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
        columns = read_columns(schema, opts)
        return PylogFilteringBatchReader(opts, columns) if opts.filter_pushdown else PylogBatchReader(opts, columns)

    def streamReader(self, schema: StructType) -> Any:
        try:
            opts = parse_read_options(self.options, streaming=True)
            return PylogStreamReader(opts, read_columns(schema, opts))
        except PylogError as exc:
            # Raised here, PySpark's streaming planner (4.x) loses it: its ``finally: reader.stop()`` meets an
            # unbound ``reader`` and reports that UnboundLocalError, pylog's error only in the chained traceback
            # (or not at all with tracebacks hidden). Raised from the reader's first call, it is the error.
            return RefusedStreamReader(exc)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        if overwrite:
            raise InvalidOptionError("mode", "a pylog topic is append-only: use mode('append')")
        return PylogWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        # ``overwrite``: outputMode("complete"). A topic is append-only: as Spark's Kafka sink does, each
        # micro-batch appends the whole result table.
        return PylogStreamWriter(parse_write_options(self.options), schema)


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream whose options were refused: every call raises that error (see ``streamReader``); stopping it
    does nothing."""

    def __init__(self, error: PylogError) -> None:
        self.error = error

    def initialOffset(self) -> dict:
        raise self.error

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.error

    def stop(self) -> None:
        pass


class PylogPythonDataSource(PylogDataSource):
    """The same source under :data:`PYTHON_NAME` (``pyspark_pylog_python`` registers it): always the Python
    implementation, whether or not the JVM reader's jar is loaded."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_NAME
