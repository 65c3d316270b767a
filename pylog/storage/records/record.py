"""The :class:`Record` type, and helpers for building many records and stamping them.

Invariants: a :class:`Record` is an immutable tuple whose field order is ``Record._fields``; readers build
them with ``tuple.__new__`` at C speed, so the order is part of this module's contract with :mod:`.views`.
Pickles name ``pylog.storage.records._rebuild_record``, which the package re-exports.
"""

from __future__ import annotations

import contextlib
import gc
import time
from operator import itemgetter
from typing import Any, Iterable, Iterator

from ...errors import InvalidRecordError
from .format import CREATE_TIME

_BYTES_OR_NONE = (bytes, bytearray, memoryview, type(None))

__all__ = ["Record", "EMPTY_HEADERS", "gc_paused", "now_ms"]

#: The headers of a record without headers (one shared empty tuple).
EMPTY_HEADERS: tuple = ()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many records.

    Every allocated tuple counts towards a collection, and a collection walks the young objects: building
    10,000 records would trigger a dozen passes that find nothing (records hold no cycles), about 40% of
    the cost of :meth:`BatchView.records`. Only re-enables what it disabled, so nested or concurrent use
    and a caller's own ``gc.disable()`` are respected.
    """
    if gc.isenabled():
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
    else:
        yield


def now_ms() -> int:
    """Wall-clock time in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


_tuple_new = tuple.__new__


class Record(tuple):
    """One record: ``Record(value=b"v", key=b"k", headers=[("h", b"x")], timestamp=ms)``.

    Records read back also carry ``offset``, ``topic``, ``partition`` and ``timestamp_type``
    (0 CreateTime, 1 LogAppendTime). A ``value`` of ``None`` is a tombstone. ``headers`` is always a
    tuple of ``(str, bytes | None)`` pairs. Records are immutable tuples, so reading builds them at C speed.
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "key", "value", "headers", "topic", "partition", "timestamp_type")

    def __new__(cls, value: bytes | None = None, key: bytes | None = None,
                headers: Iterable[tuple[str, bytes | None]] | None = None, timestamp: int | None = None, *,
                offset: int = -1, topic: str | None = None, partition: int = -1,
                timestamp_type: int = CREATE_TIME) -> "Record":
        if not (isinstance(value, _BYTES_OR_NONE) and isinstance(key, _BYTES_OR_NONE)):
            raise InvalidRecordError(f"Record value and key must be bytes or None, got {type(value).__name__} and "
                                     f"{type(key).__name__}: encode them first (e.g. str.encode())")
        hdrs = tuple((k, v) for k, v in headers) if headers else EMPTY_HEADERS
        return _tuple_new(cls, (offset, timestamp, key, value, hdrs, topic, partition, timestamp_type))

    offset = property(itemgetter(0), doc="Offset in the partition (-1 before it is appended).")
    timestamp = property(itemgetter(1), doc="Timestamp in ms since the epoch (None: the append time).")
    key = property(itemgetter(2), doc="Key bytes or None.")
    value = property(itemgetter(3), doc="Value bytes or None (a tombstone).")
    headers = property(itemgetter(4), doc="Tuple of (str, bytes | None) pairs.")
    topic = property(itemgetter(5), doc="Topic name (None before it is appended).")
    partition = property(itemgetter(6), doc="Partition number (-1 before it is appended).")
    timestamp_type = property(itemgetter(7), doc="0 CreateTime, 1 LogAppendTime.")

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        return "Record(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True)) + ")"

    def __reduce__(self) -> Any:  # pickle every field, not just what __new__'s keywords take
        return (_rebuild_record, (tuple(self),))


def _rebuild_record(fields: tuple) -> Record:
    return _tuple_new(Record, fields)


# Pickles made before records became a package name the function by its old module: keep that name.
_rebuild_record.__module__ = "pylog.storage.records"
