"""Reading for the Spark source: plan offset ranges on the driver, turn them into Arrow batches on executors.

No PySpark import here (only pyarrow and pylog), so planning and conversion are testable without a JVM;
:mod:`pylog.spark.batch` and :mod:`pylog.spark.stream` wrap them in Spark's reader classes.

Invariants:
- A record is converted without a Python object of its own: keys and values become Arrow ``binary``
  arrays over the very ``bytes`` buffers :meth:`pylog.Partition.read_columns` returns, with int32 offsets
  from one ``cumsum`` of the length column and a validity bitmap only when there are nulls; offsets,
  timestamps and timestamp types are numpy arrays handed to Arrow. Only headers, which pylog keeps as
  per-record tuples, are built from Python objects (and only with ``includeHeaders=true``).
- Every batch has exactly Spark's Arrow schema for the Kafka source's columns (:data:`ARROW_SCHEMA` /
  :data:`ARROW_SCHEMA_WITH_HEADERS`), or for the subset of them a user declared (column pruning, in the
  declared order): ``binary`` (not ``large_binary``), ``timestamp[us, tz=UTC]``, all fields nullable, list
  items named ``element``; Spark rejects any other schema. A column not asked for is not built.
- A range ``[start, end)`` yields each record with ``start <= offset < end`` exactly once, in offset order.
  Offsets compacted away are simply absent. Offsets removed by retention before or while the range is read
  raise :class:`~pylog.spark.options.DataLossError` with ``failOnDataLoss=true``, and are skipped with a
  warning otherwise.
- Planning reads no records: it looks at log start/end offsets and time indexes only.
- Under ``kafka.isolation.level=read_committed`` a partition's end is its last stable offset
  (:func:`stable_end`): a range never reaches into an open transaction, and its reads skip aborted
  transactions' records. Neither level returns transaction markers; a range whose last offsets hold only
  markers or aborted records ends where the readable records do, which is not data loss.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ..errors import OffsetOutOfRangeError, UnknownTopicError
from ..partition import IsolationLevel, Partition
from ..storage.records import RecordColumns
from ..store import Store, is_store
from ..store import open as open_pylog
from ..tiered import attach, is_remote_location
from .options import (DataLossError, InvalidOptionError, ReadOptions, Subscription, check_partitions_named,
                      resolve_offset)

__all__ = [
    "OffsetRange", "ARROW_SCHEMA", "ARROW_SCHEMA_WITH_HEADERS", "HEADERS_TYPE", "open_store",
    "list_partitions", "plan_ranges", "split_ranges", "read_range", "columns_to_arrow", "binary_array",
    "RangeFilter", "filter_from_pushed", "READ_RECORDS", "READ_BYTES", "COLUMNS", "arrow_schema", "stable_end",
]

log = logging.getLogger("pylog.spark")

#: Records and bytes one ``read_columns`` call (so one Arrow batch) holds at most: the bytes bound keeps a
#: batch's data far below the 2 GiB that ``binary``'s int32 offsets allow.
READ_RECORDS = 100_000
READ_BYTES = 32 * 1024 * 1024

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
#: Spark's Arrow type for ``array<struct<key:string,value:binary>>`` (the list field is named "element").
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))
_TS_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()), pa.field("timestamp", _TS_TYPE),
    pa.field("timestampType", pa.int32()),
])
ARROW_SCHEMA_WITH_HEADERS = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one log partition: the unit of work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RangeFilter:
    """Pushed-down predicates, as bounds: which partitions, which offsets, records from which time.

    Partition numbers are kept in ``[partition_min, partition_max)`` and, unless ``partitions`` is None, in
    that set. Offsets are kept in ``[offset_min, offset_max)``. Records with a timestamp >=
    ``timestamp_min_ms`` lie at or after the time index's answer for it, so a range may start there (the
    exact timestamp test stays with Spark).
    """

    partitions: frozenset[int] | None = None
    partition_min: int = 0
    partition_max: int = 2 ** 63 - 1
    offset_min: int = 0
    offset_max: int = 2 ** 63 - 1
    timestamp_min_ms: int | None = None

    def allows_partition(self, number: int) -> bool:
        return (self.partition_min <= number < self.partition_max
                and (self.partitions is None or number in self.partitions))


# --------------------------------------------------------------------------------------------- the store


def open_store(path: str, remote: Sequence[tuple[str, str]] = ()) -> Store:
    """Open the store at ``path`` for reading or appending from a Spark task: no background cleaner. A path
    ``s3://bucket/prefix`` is attached read-only from the bucket (``pylog.attach``), reached with the
    ``remote.storage.*`` settings ``remote``.

    The path was checked on the driver; it is checked again here because an executor on another machine
    may not see it (a store is one filesystem).

    :raises UnknownTopicError: when ``path`` holds no store on this machine.
    """
    if is_remote_location(path):
        return attach(path, **{name.replace(".", "_"): value for name, value in remote})
    if not is_store(path):
        raise UnknownTopicError(f"no pylog store at {path} on host {os.uname().nodename} "
                                "(executors must see the store's path: local disk or a shared filesystem)")
    return open_pylog(path, log_cleaner_enable=False)


def list_partitions(store: Store, sub: Subscription) -> list[tuple[str, int]]:
    """The ``(topic, partition)`` pairs a subscription reads now, sorted.

    Subscribed topics that do not exist (yet) contribute nothing, as with Kafka.
    :raises InvalidOptionError: for an ``assign`` naming a missing topic or partition.
    """
    if sub.kind == "assign":
        out = []
        for topic, number in sub.assigned:
            try:
                count = store.topic(topic).num_partitions
            except UnknownTopicError:
                raise InvalidOptionError("assign", f"topic {topic!r} does not exist in {store.path}") from None
            if number >= count:
                raise InvalidOptionError("assign", f"topic {topic!r} has no partition {number} (it has {count})")
            out.append((topic, number))
        return out
    out = []
    for topic in store.topics():
        if sub.matches(topic):
            out.extend((topic, i) for i in range(store.topic(topic).num_partitions))
    if sub.kind == "subscribe":
        missing = sorted(set(sub.topics) - {t for t, _ in out})
        if missing:
            log.warning("pylog: subscribed topics %s do not exist in %s", missing, store.path)
    return out


def stable_end(partition: Partition, committed: bool) -> int:
    """Where a read of ``partition`` ends now: its last stable offset under read_committed (what Kafka's
    ``endOffsets`` answers at that level), else its log end."""
    return partition.last_stable_offset if committed else partition.log_end_offset


def _data_loss(fail: bool, message: str, offset: int, log_start: int, log_end: int) -> None:
    if fail:
        raise DataLossError(message + " (set failOnDataLoss=false to skip what is gone)", offset, log_start, log_end)
    log.warning("pylog: %s; skipping it (failOnDataLoss=false)", message)


def plan_ranges(store: Store, opts: ReadOptions, pushed: RangeFilter | None = None) -> list[OffsetRange]:
    """Resolve a batch query's start and end in every subscribed partition, as offset ranges (unsplit).

    :raises InvalidOptionError: per-partition JSON not naming exactly the partitions read, a start after its
        end, an end beyond the log end, an unmatched starting timestamp (strategy ``error``).
    :raises DataLossError: a start below the log start with ``failOnDataLoss=true``.
    """
    ranges = []
    partitions = list_partitions(store, opts.subscription)
    check_partitions_named(opts.starting, partitions)
    check_partitions_named(opts.ending, partitions)
    for topic, number in partitions:
        if pushed is not None and not pushed.allows_partition(number):
            continue
        p = store.topic(topic).partition(number)
        end_now = stable_end(p, opts.committed)  # first: it refreshes a reader's view, log_start_offset does not
        start_now = p.log_start_offset
        start = resolve_offset(opts.starting, topic, number, start_now, end_now, p.offset_for_timestamp,
                               strategy=opts.starting_by_timestamp_strategy)
        end = resolve_offset(opts.ending, topic, number, start_now, end_now, p.offset_for_timestamp)
        what = ("the last stable offset (kafka.isolation.level=read_committed: an open transaction starts "
                "there)") if opts.committed else "the log end"
        if end > end_now:
            raise InvalidOptionError(opts.ending.option, f"{topic}-{number}: end offset {end} is beyond {what} "
                                     f"{end_now}")
        if start > end_now:
            raise InvalidOptionError(opts.starting.option,
                                     f"{topic}-{number}: start offset {start} is beyond {what} {end_now}")
        if start > end:
            raise InvalidOptionError(opts.starting.option,
                                     f"{topic}-{number}: start offset {start} is after the end offset {end} "
                                     f"({opts.ending.option})")
        if start < start_now:
            _data_loss(opts.fail_on_data_loss, f"{topic}-{number}: offsets [{start}, {min(end, start_now)}) were "
                       f"removed (the log now starts at {start_now})", start, start_now, end_now)
            start = min(start_now, end)
        if pushed is not None:
            start = max(start, pushed.offset_min)
            end = min(end, pushed.offset_max)
            if pushed.timestamp_min_ms is not None and start < end:
                found = p.offset_for_timestamp(pushed.timestamp_min_ms)
                start = max(start, end if found is None else found)
        if start < end:
            ranges.append(OffsetRange(topic, number, start, end))
    return ranges


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange]:
    """Split ranges so all cores work: the Kafka source's rule.

    With ``max_records``, no range holds more offsets than that. With ``min_partitions`` larger than the
    number of ranges, each range is cut into ``max(1, round(size / total * min_partitions))`` equal
    parts, so big partitions get more tasks than small ones.
    """
    out: list[OffsetRange] = []
    total = sum(r.size for r in ranges)
    for r in ranges:
        parts = 1
        if min_partitions is not None and len(ranges) < min_partitions and total > 0:
            parts = max(1, round(r.size / total * min_partitions))
        if max_records is not None:
            parts = max(parts, math.ceil(r.size / max_records))
        parts = max(1, min(parts, r.size))
        bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
        out.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a)
    return out


# ---------------------------------------------------------------------------------------------- arrow


_BINARY = pa.binary()  # binary_array's default type


def binary_array(lengths: np.ndarray, data: Any, typ: pa.DataType = _BINARY) -> pa.Array:
    """An Arrow ``binary`` (or ``string``) array over ``data`` without copying it.

    ``lengths`` is an int32 column with -1 for null, ``data`` the non-null items concatenated (bytes-like,
    under 2 GiB).
    """
    n = len(lengths)
    nonneg = np.maximum(lengths, 0)
    offsets = np.empty(n + 1, np.int32)
    offsets[0] = 0
    np.cumsum(nonneg, dtype=np.int32, out=offsets[1:])
    valid = lengths >= 0
    null_count = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=null_count)


def headers_array(headers: list | None, n: int) -> pa.Array:
    """The ``headers`` column: null for a record without headers (as the Kafka source does)."""
    if headers is None:
        return pa.nulls(n, HEADERS_TYPE)
    counts = np.fromiter(map(len, headers), np.int32, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    flat = list(itertools.chain.from_iterable(headers))
    keys, values = (zip(*flat, strict=True) if flat else ((), ()))
    items = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                       fields=list(HEADER_STRUCT))
    mask = pa.array(counts == 0) if not counts.all() else None
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=HEADERS_TYPE, mask=mask)


#: How each column of the Kafka schema is built from ``(columns, topic, partition)``.
_BUILD: dict[str, Callable[[RecordColumns, str, int], pa.Array]] = {
    "key": lambda c, t, p: binary_array(c.key_lengths, c.key_data),
    "value": lambda c, t, p: binary_array(c.value_lengths, c.value_data),
    "topic": lambda c, t, p: pa.repeat(pa.scalar(t, pa.string()), len(c)),
    "partition": lambda c, t, p: pa.array(np.full(len(c), p, np.int32)),
    "offset": lambda c, t, p: pa.array(c.offsets),
    "timestamp": lambda c, t, p: pa.Array.from_buffers(_TS_TYPE, len(c), [None, pa.py_buffer(c.timestamps * 1000)]),
    "timestampType": lambda c, t, p: pa.array(c.timestamp_types.astype(np.int32)),
    "headers": lambda c, t, p: headers_array(c.headers, len(c)),
}
#: Every column's name, in the Kafka schema's order (``headers`` last, only with ``includeHeaders``).
COLUMNS = tuple(_BUILD)


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    """Spark's Arrow schema for ``columns`` (names of :data:`COLUMNS`, in any order)."""
    return pa.schema([ARROW_SCHEMA_WITH_HEADERS.field(name) for name in columns])


def columns_to_arrow(cols: RecordColumns, topic: str, partition: int, include_headers: bool,
                     columns: Sequence[str] | None = None) -> pa.RecordBatch:
    """One Arrow batch for ``cols``: the Kafka source's columns (see :data:`ARROW_SCHEMA`), or only
    ``columns`` in that order (a user-declared schema: column pruning); then ``include_headers`` is unused."""
    if columns is None:
        columns = COLUMNS if include_headers else COLUMNS[:-1]
        schema = ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA
    else:
        schema = arrow_schema(columns)
    return pa.RecordBatch.from_arrays([_BUILD[name](cols, topic, partition) for name in columns], schema=schema)


def read_range(store: Store, r: OffsetRange, include_headers: bool, fail_on_data_loss: bool,
               max_records: int = READ_RECORDS, max_bytes: int = READ_BYTES,
               columns: Sequence[str] | None = None, committed: bool = False) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records with offsets in ``[r.start, r.end)`` of one partition, in order
    (only ``columns`` when given, see :func:`columns_to_arrow`); with ``committed`` (read_committed) without
    aborted transactions' records. Never a transaction marker.

    :raises DataLossError: with ``fail_on_data_loss``, when offsets of the range were removed (retention,
        delete-records) before they were read, or the log ends before ``r.end`` (truncated or recreated).
    """
    p = store.topic(r.topic).partition(r.partition)
    level: IsolationLevel = "read_committed" if committed else "read_uncommitted"
    pos = r.start
    while pos < r.end:
        try:
            cols = p.read_columns(pos, max_records=min(max_records, r.end - pos), max_bytes=max_bytes,
                                  isolation_level=level)
        except OffsetOutOfRangeError as exc:
            start, end = exc.log_start_offset, exc.log_end_offset
            if start is not None and pos < start:
                _data_loss(fail_on_data_loss, f"{r.topic}-{r.partition}: offsets [{pos}, {min(start, r.end)}) were "
                           f"removed before they were read (the log now starts at {start})", pos, start, end or start)
                pos = start
                continue
            raise
        if not len(cols):
            end = p.log_end_offset
            if end >= r.end:
                # A read goes on past what it does not return (markers, aborted records) up to the log end (the
                # LSO, which a range planned read_committed never passes): nothing readable is left in the range.
                return
            # the log ends before the range does: it was truncated or recreated
            _data_loss(fail_on_data_loss, f"{r.topic}-{r.partition}: the log ends at {end}, before offset {r.end} "
                       "that the query planned to read up to", pos, p.log_start_offset, end)
            return
        k = len(cols) if cols.offsets[-1] < r.end else int(np.searchsorted(cols.offsets, r.end))
        if k == 0:  # offsets compacted away up to past the range's end
            return
        batch = columns_to_arrow(cols, r.topic, r.partition, include_headers, columns)
        yield batch if k == len(cols) else batch.slice(0, k)
        pos = int(cols.offsets[k - 1]) + 1


def filter_from_pushed(filters: Sequence[Any], to_ms: Callable[[Any], int | None]) -> tuple[RangeFilter, list[Any]]:
    """Fold Spark's pushed filters into a :class:`RangeFilter`; return it and the filters Spark must still apply.

    ``filters`` are ``pyspark.sql.datasource`` filter objects (duck-typed here: class name, ``attribute``,
    ``value``). Integer comparisons (``=``, ``<``, ``<=``, ``>``, ``>=``) on ``partition`` and ``offset``,
    and ``IN`` on ``partition``, are applied exactly by the planned ranges, so Spark drops them. ``IN`` on
    offsets and timestamp lower bounds (``>``, ``>=``, ``=``, through the time index) only narrow the
    ranges and stay with Spark; anything else is left to Spark untouched. ``to_ms`` converts a timestamp
    literal to milliseconds rounded down (None if it cannot).
    """
    partitions: frozenset[int] | None = None
    bounds = {"partition": [0, 2 ** 63 - 1], "offset": [0, 2 ** 63 - 1]}
    ts_min: int | None = None
    remaining = []
    for f in filters:
        kind = type(f).__name__
        attr: tuple[str, ...] = getattr(f, "attribute", ())
        value: Any = getattr(f, "value", None)
        column = attr[0] if len(attr) == 1 else None
        if column in bounds and kind in _INT_BOUNDS or (column in bounds and kind == "In"):
            values = tuple(value) if kind == "In" else (value,)
            if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                remaining.append(f)
                continue
            b = bounds[column]
            if kind == "In":
                if column == "partition":
                    partitions = frozenset(values) if partitions is None else partitions & frozenset(values)
                else:
                    remaining.append(f)  # offsets IN (...): only bounded here, not exact
                b[0], b[1] = max(b[0], min(values)), min(b[1], max(values) + 1)
                continue
            lo, hi = _INT_BOUNDS[kind](value)
            b[0], b[1] = max(b[0], lo), min(b[1], hi)
            continue
        if column == "timestamp" and kind in ("EqualTo", "GreaterThan", "GreaterThanOrEqual"):
            ms = to_ms(value)
            if ms is not None:
                ts_min = ms if ts_min is None else max(ts_min, ms)
        remaining.append(f)
    (plo, phi), (olo, ohi) = bounds["partition"], bounds["offset"]
    return RangeFilter(partitions, plo, max(plo, phi), olo, max(olo, ohi), ts_min), remaining


#: ``[lo, hi)`` of the integers x satisfying ``x <op> v``, by filter class name.
_INT_BOUNDS: dict[str, Callable[[int], tuple[int, int]]] = {
    "EqualTo": lambda v: (v, v + 1),
    "GreaterThan": lambda v: (v + 1, 2 ** 63 - 1),
    "GreaterThanOrEqual": lambda v: (v, 2 ** 63 - 1),
    "LessThan": lambda v: (0, v),
    "LessThanOrEqual": lambda v: (0, v + 1),
}
