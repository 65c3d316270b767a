"""The ``pylog`` Spark data source: ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("pylog")``.

:class:`PylogDataSource` is what ``pyspark_pylog.DefaultSource`` exports for discovery and what
:func:`pylog.spark.register` registers. It parses options (:mod:`pylog.spark.options`) and hands out
readers and writers; all work happens in :mod:`pylog.spark.batch` (batch reader), :mod:`~pylog.spark.stream`
(streaming reader), :mod:`~pylog.spark.writer` (writers) and :mod:`~pylog.spark.reader` (planning, Arrow).
This module sits above all of them and imports them; none of them imports it.

Invariants:
- The schema is the Kafka source's: ``key binary, value binary, topic string, partition int, offset long,
  timestamp timestamp, timestampType int`` plus ``headers array<struct<key:string,value:binary>>`` with
  ``includeHeaders=true``; a user-given schema must equal it.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from .batch import PylogBatchReader, PylogFilteringBatchReader
from .options import InvalidOptionError, ReadOptions, parse_read_options, parse_write_options
from .stream import PylogStreamReader
from .writer import PylogStreamWriter, PylogWriter

__all__ = ["PylogDataSource", "kafka_schema", "NAME"]

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


def _check_schema(schema: StructType | None, opts: ReadOptions) -> None:
    expected = kafka_schema(opts.include_headers)
    if schema is not None and schema != expected:
        raise InvalidOptionError("schema", f"the pylog source's schema is fixed ({expected.simpleString()}); "
                                 f"got {schema.simpleString()}")


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
        opts = parse_read_options(self.options, streaming=True)
        _check_schema(schema, opts)
        return PylogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        if overwrite:
            raise InvalidOptionError("mode", "a pylog topic is append-only: use mode('append')")
        return PylogWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        if overwrite:
            raise InvalidOptionError("outputMode", "a pylog topic is append-only: use outputMode('append')")
        return PylogStreamWriter(parse_write_options(self.options), schema)
