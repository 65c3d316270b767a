"""The arguments of the partition's public API (:class:`pylog.partition.Partition`), checked and shaped.

What a caller passes to an append (records, parallel lists, columns, a producer, ``transactional``), a read
(``offset``, ``max_records``, ``max_bytes``), a time lookup or ``delete_records`` comes through here before
the partition takes a lock or touches a file.

Invariants:
- A bad argument is a :class:`~pylog.errors.PylogError` (:class:`~pylog.errors.InvalidArgumentError`,
  :class:`~pylog.errors.InvalidRecordError`, :class:`~pylog.errors.InvalidTxnStateError`), raised before
  anything is written, never a foreign exception from below (numpy, the encoder) nor silent wrong data: an
  integer argument is an int or a numpy integer, never a bool, a float (rounded) or a str (parsed); columnar
  timestamps are an integer array (a cast would truncate floats and parse strings).
- An append call's records become the appender's :class:`~pylog.storage.log.append.Columns` (one call, one
  set of columns: invariant 9 of :mod:`pylog.partition`, every batch checked before any is written, starts
  here); an empty call is refused. Headers are checked once, up front (sizing the batches reads them).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from ...errors import InvalidArgumentError, InvalidRecordError, InvalidTxnStateError
from ..records import Record, column_parts, header_rows
from .append import SEQ_MOD, Columns
from .batches import Data, Headers, Timestamps

__all__ = ["int_argument", "offset_argument", "record_lists", "list_columns", "array_columns", "with_header_rows",
           "check_producer"]


def int_argument(name: str, value: Any) -> int:
    """``value`` as an int when it is an integer (a Python or numpy int, not a bool).

    :raises InvalidArgumentError: for anything else (None, a float such as 1.5, a str such as "1"), which
        would otherwise be compared, rounded or converted somewhere below.
    """
    if type(value) is int:
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__} {value!r:.40}")


def offset_argument(name: str, value: Any) -> int:
    """``value`` when it is a Python int (not a bool) >= 0 (``delete_records``' offset).

    :raises InvalidArgumentError: for anything else.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgumentError(f"{name} must be >= 0, got {value}")
    return value


def record_lists(records: Iterable[Record]) -> tuple[list, list, list | None, Any]:
    """``Partition.append``'s records as parallel lists: values, keys, timestamps (None when every one is None)
    and headers (None when no record has any).

    :raises InvalidRecordError: for no record or an item that is not a :class:`~pylog.storage.records.Record`.
    """
    recs = list(records)
    if not recs:
        raise InvalidRecordError("nothing to append")
    for r in recs:
        if not isinstance(r, Record):
            raise InvalidRecordError(f"append takes pylog.Record objects, got {type(r).__name__}")
    _, ts, keys, values, headers = list(zip(*recs, strict=True))[:5]
    timestamps = None if all(t is None for t in ts) else list(ts)
    return list(values), list(keys), timestamps, headers if any(headers) else None


def list_columns(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                 timestamps: Timestamps | None, headers: Headers | None) -> Columns:
    """``Partition.append_values``' parallel lists as the appender's columns (one part per non-null item).

    :raises InvalidRecordError: for no value, or an item that is neither bytes-like nor None.
    """
    n = len(values)
    if n == 0:
        raise InvalidRecordError("nothing to append")
    vlens, vparts = column_parts(values, n, "values")
    klens, kparts = column_parts(keys, n, "keys")
    assert vlens is not None
    return Columns(n, vlens, vparts, klens, kparts, timestamps, headers, False)


def array_columns(value_lengths: np.ndarray, value_data: Data | None, key_lengths: np.ndarray | None,
                  key_data: Data | None, timestamps: np.ndarray | None, headers: Headers | None) -> Columns:
    """``Partition.append_columns``' arguments checked, as the appender's (contiguous) columns.

    :raises InvalidRecordError: for no value, key lengths not one per value, timestamps not a 1-d integer array.
    """
    vlens = np.ascontiguousarray(value_lengths, dtype=np.int32)
    n = len(vlens)
    if n == 0:
        raise InvalidRecordError("nothing to append")
    klens = None if key_lengths is None else np.ascontiguousarray(key_lengths, dtype=np.int32)
    if klens is not None and len(klens) != n:
        raise InvalidRecordError(f"{len(klens)} key lengths for {n} values")
    ts = None
    if timestamps is not None:
        ts = np.asarray(timestamps)
        if ts.dtype.kind != "i" or ts.ndim != 1:  # a cast would truncate floats and parse strings
            raise InvalidRecordError(f"timestamps must be an array of int64 milliseconds, got {ts.dtype}")
        ts = np.ascontiguousarray(ts, dtype=np.int64)
    return Columns(n, vlens, [value_data] if value_data is not None else [], klens,
                   [key_data] if key_data is not None else [], ts, headers, True)


def with_header_rows(cols: Columns) -> Columns:
    """``cols`` (whose headers are not None) with its headers checked, as the encoder's rows.

    :raises InvalidRecordError: for headers of a bad shape.
    """
    return Columns(*cols[:6], header_rows(cols.headers, cols.n), cols[7])  # _replace costs ~1 us more


def check_producer(producer: tuple[int, int, int] | None, transactional: bool) -> None:
    """An append's ``producer`` (id, epoch, first sequence) and ``transactional`` flag, checked.

    :raises InvalidArgumentError: for a negative producer id or a sequence outside [0, 2**31).
    :raises InvalidTxnStateError: for a transactional append without ``producer``.
    """
    if producer is not None and (producer[0] < 0 or not 0 <= producer[2] < SEQ_MOD):
        raise InvalidArgumentError(f"producer must be (id >= 0, epoch, 0 <= sequence < 2**31), got {producer!r}")
    if transactional and producer is None:
        raise InvalidTxnStateError("a transactional append needs producer=(id, epoch, sequence)")
