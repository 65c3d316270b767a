"""The segment's append path: encoded batches written at the end of its log, indexed as they go.

The writer of a partition appends to its active segment through :meth:`~pylog.segment.Segment.append` and
:meth:`~pylog.segment.Segment.append_batches`, which call these functions. They never see the
:class:`~pylog.segment.Segment`: they get the write descriptor, the two index columns and what the segment
knows of its end (an :class:`End`) as arguments, and return the :class:`End` after the write, which the
segment takes into its state.

Invariants:
- Nothing is written unless the file is the size its writer left it (:func:`append_position`): ``O_APPEND``
  writes at the file's end, so a file cut or written by another hand would put batches where their offsets
  and index entries do not say; that is a :class:`~pylog.errors.CorruptRecordError` and the file is left
  as it is.
- A failed write cuts the file back to the size it had (none of the call's batches written) and re-raises;
  the indexes and the returned state are then untouched (the entries are appended only after the write).
- An index entry is due where :func:`~pylog.storage.segment_check.index_due` says (the rule load and index
  rebuilds follow too), batch after batch, so an index built by appends matches one rebuilt from the log.
  The pages of the entries due get their blocks before the log is written (``reserve_next``): on a full
  disk the append fails with ``ENOSPC`` and writes nothing, where a store into a mapped page without
  blocks would kill the process with SIGBUS.
- The time index entry of a batch holds the segment's max timestamp *before* that batch (Kafka's rule).
"""

from __future__ import annotations

import os
from typing import NamedTuple, Protocol, Sequence

from ..errors import CorruptRecordError
from .fileio import Data, write_all
from .records import BatchHeader
from .segment_check import index_due

__all__ = ["WRITE_CHUNK", "IndexColumn", "End", "append_position", "write_batch", "write_batches"]

#: Bytes per ``writev`` of :func:`write_batches` (whole parts; a larger part is written alone). One
#: ``writev`` of a producer drain's whole 11 MB cost 1.5-5x the system time of writes of 256 KB-2 MB each
#: (which all measured alike; 100,000 records of 100 bytes, CPU per record, load 14-17: 32-196 ns of system
#: time against 20-52), the copy into the page cache reading back what was encoded long before.
WRITE_CHUNK = 1 << 20


class IndexColumn(Protocol):
    """What the append path uses of an offset or time index (:class:`~pylog.index.OffsetIndex`,
    :class:`~pylog.index.TimeIndex`): blocks for the entries due, then the entries."""

    def reserve_next(self, ahead: int = 1) -> None: ...

    def append(self, a: int, b: int, /) -> None: ...


class End(NamedTuple):
    """What a segment knows of its end, before and after an append."""

    #: Visible bytes: where the next batch goes.
    size: int
    #: Bytes written since the last index entry.
    since: int
    #: The largest record timestamp (-1 when empty).
    max_ts: int
    #: The max timestamp of the first batch (None when empty).
    first_ts: int | None


def append_position(fd: int | None, size: int, log_path: str) -> tuple[int, int]:
    """The descriptor to append through and the position the next batch goes to (``size``), once the file
    is checked to be the size this writer left it.

    :raises ValueError: when the segment is not open for appending (``fd`` None).
    :raises CorruptRecordError: when the file is another size; nothing is written.
    """
    if fd is None:
        raise ValueError("segment is not open for appending")
    actual = os.lseek(fd, 0, os.SEEK_END)  # the file's size: a fifth of an fstat's cost (no stat object)
    if actual != size:
        # O_APPEND would write at the file's end, not at ``size``: offsets and index entries would no
        # longer match the bytes. Only another hand changes the file under its writer.
        raise CorruptRecordError(f"the log file is {actual} bytes where its writer wrote {size}: it was "
                                 f"{'cut' if actual < size else 'written'} under the writer (by another hand, "
                                 f"or a file system fault)", log_path, min(actual, size))
    return fd, size


def write_batch(fd: int, header: BatchHeader, parts: Sequence[Data], max_timestamp: int, end: End,
                offsets: IndexColumn | None, times: IndexColumn | None, base_offset: int,
                interval: int) -> End:
    """Write one encoded batch (``parts``: its bytes) at ``end.size`` and index it; the end after it.

    ``max_timestamp``: the batch's max timestamp. The index columns may be None only while no entry is due.
    """
    pos = end.size
    due = index_due(pos, end.since, interval)
    if due:
        assert offsets is not None and times is not None
        # Before the log (see the module docstring; not a guarantee on copy-on-write file systems, btrfs or
        # ZFS, where rewriting a block allocates).
        offsets.reserve_next()
        times.reserve_next()
    try:
        write_all(fd, parts)
    except BaseException:
        os.ftruncate(fd, pos)
        raise
    since = end.since
    if due:
        assert offsets is not None and times is not None
        rel = header.base_offset - base_offset
        offsets.append(rel, pos)
        times.append(end.max_ts, rel)
        since = 0
    first_ts = max_timestamp if end.first_ts is None else end.first_ts
    return End(pos + header.size, since + header.size, max(max_timestamp, end.max_ts), first_ts)


def write_batches(fd: int, headers: Sequence[BatchHeader], parts: Sequence[Data], end: End,
                  offsets: IndexColumn | None, times: IndexColumn | None, base_offset: int,
                  interval: int) -> End:
    """Write consecutive encoded batches (``parts``: all their bytes, in order) at ``end.size``, a
    ``writev`` per :data:`WRITE_CHUNK` bytes; index each as :func:`write_batch` would have, one after the
    other; the end after them."""
    pos = end.size
    # The index entries due, found before writing (the rule of write_batch, batch after batch): their pages
    # get their blocks first, as write_batch's do.
    since, at = end.since, pos
    due: list[int] = []  # positions of the batches that get entries
    for h in headers:
        if index_due(at, since, interval):
            due.append(at)
            since = 0
        since += h.size
        at += h.size
    if due:
        assert offsets is not None and times is not None
        offsets.reserve_next(len(due))
        times.reserve_next(len(due))
    try:
        write_all(fd, parts, WRITE_CHUNK)
    except BaseException:
        os.ftruncate(fd, pos)
        raise
    at, entries = pos, iter(due)
    next_due = next(entries, -1)
    max_ts, first_ts = end.max_ts, end.first_ts
    for h in headers:
        if at == next_due:
            assert offsets is not None and times is not None
            rel = h.base_offset - base_offset
            offsets.append(rel, at)
            times.append(max_ts, rel)
            next_due = next(entries, -1)
        if first_ts is None:
            first_ts = h.max_timestamp
        if h.max_timestamp > max_ts:
            max_ts = h.max_timestamp
        at += h.size
    return End(at, since, max_ts, first_ts)
