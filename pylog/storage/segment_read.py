"""Reading a segment's log: scanning whole batches, reads by offset and lookups by timestamp.

The functions here read a log through a :class:`LogBytes` (a descriptor, the mapping scans may use, the
path for errors) and take everything else as arguments: they never see the
:class:`~pylog.segment.Segment` and never call back into it. The segment decides what to read
(from its record of its end, from an index position), builds the :class:`LogBytes`, and updates its own
state from what these return (the size of the last batch read, a record to drop, an index to rebuild).

Invariants:
- Nothing here writes to the log, nor to anything but the lists and sets handed in (a read's output, the
  memo of verified batches, a scan's chunk hint, a reader's :class:`Continuation`).
- Every scan bounds each batch by ``end`` and reads it whole once: a header that does not check, or a
  batch running past ``end``, raises :class:`~pylog.errors.CorruptRecordError` (or ends the scan, with
  ``tolerate_tail``), never a hang or a read of unbounded size.
- A read checks the CRC-32C of every batch it serves or skips (with ``verify``), except one whose start
  the memo handed in holds (:meth:`Segment.verified`): a batch of the same open file, checked by an earlier
  read while no byte below the visible size could change since. Only a read that checked a batch whole
  records it there, while the memo has room; section bounds are checked on every read all the same
  (:class:`BatchView`).
- A read never skips records on the word of an unchecked header: a batch skipped for lying below the
  wanted offset (or timestamp) has its checksum checked too (when ``verify``), so a damaged base offset
  raises; a batch at an indexed position that is not the one the index names makes :func:`read_from`
  return None, and the segment rebuilds its index and reads from its start, not skip ahead.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import CorruptRecordError
from .records import HEADER_SIZE, LENGTH_PREFIX, BatchHeader, BatchView, batch_crc, check_header, parse_header

__all__ = ["LogBytes", "ReadSlice", "MIN_CHUNK", "MAX_CHUNK", "Continuation", "scan", "valid_batches", "read_from",
           "offset_for_timestamp", "check_not_cut"]

#: (batch, first index in batch, stop index in batch)
ReadSlice = tuple[BatchView, int, int]

#: Smallest and largest single read of a scan.
MIN_CHUNK = 64 * 1024
MAX_CHUNK = 16 * 1024 * 1024


class LogBytes:
    """A segment's log file as the functions here read it: its read descriptor ``fd``; ``mm``, a read-only
    mapping scans may use for the bytes it covers (None: read with ``pread``); ``path``, for errors; and
    ``writer_active``, True for the writer's own active segment, whose file size is checked before its
    mapping is read (another hand may have cut the file; see :func:`check_not_cut`)."""

    __slots__ = ("fd", "mm", "path", "writer_active")

    def __init__(self, fd: int, mm: mmap.mmap | None, path: str, writer_active: bool) -> None:
        self.fd = fd
        self.mm = mm
        self.path = path
        self.writer_active = writer_active

    def file_size(self) -> int:
        return os.fstat(self.fd).st_size


def scan(lb: LogBytes, pos: int, end: int, chunk: int | list[int], tolerate_tail: bool
         ) -> Iterator[tuple[int, BatchHeader, Any, int]]:
    """Yield ``(file position, header, buffer, position in buffer)`` for each whole batch in [pos, end).

    Each yielded buffer holds the whole batch. ``chunk`` is the read size, or a one-item list the
    consumer may update between batches to size the next read. With ``tolerate_tail`` a batch that runs past
    ``end`` or a partial header at the end stops the scan silently (a writer may still be writing it);
    otherwise it raises :class:`CorruptRecordError` naming the file and position.
    """
    # Not a generator itself: the iterator it returns is the only one a batch passes through (a random
    # read of one record takes one batch from it).
    mm = lb.mm
    if mm is not None and end <= len(mm):
        if lb.writer_active:
            check_not_cut(lb, end)
        return _scan_mapped(lb.path, mm, pos, end, tolerate_tail)
    return _scan_read(lb, pos, end, chunk, tolerate_tail)


def check_not_cut(lb: LogBytes, end: int) -> None:
    """:raises CorruptRecordError: when the writer's active log file holds fewer than the ``end`` bytes its
    writer wrote: cut by another hand. Checked (one ``fstat``) before the writer reads its mapping, whose
    pages past the end of a cut file would read as zeros or kill the process (SIGBUS)."""
    size = lb.file_size()
    if size < end:
        raise CorruptRecordError(f"the log file is {size} bytes where its writer wrote {end}: it was cut under "
                                 f"the writer (by hand, or a file system fault)", lb.path, size)


def valid_batches(lb: LogBytes, pos: int, end: int, tolerate_tail: bool,
                  on_view: Callable[[int, BatchView], None] | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of each wholly checked batch (CRC, sections) from ``pos``; with
    ``tolerate_tail`` the first bad or incomplete batch ends the walk instead of raising.
    ``on_view(position, view)``, when given, is called with each checked batch's view before it is
    yielded (a check that decodes the records too: the view is only valid until the next step)."""
    for fpos, h, buf, p in scan(lb, pos, end, MAX_CHUNK, tolerate_tail):
        try:
            view = BatchView.from_buffer(buf, p, lb.path, fpos, header=h)
        except CorruptRecordError:
            if tolerate_tail:
                return
            raise
        if on_view is not None:
            on_view(fpos, view)
        yield fpos, h


def _scan_read(lb: LogBytes, pos: int, end: int, chunk: int | list[int], tolerate_tail: bool
               ) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
    """:func:`scan` through ``pread`` (a reader's active segment, or past a writer's mapping)."""
    fd = lb.fd
    path = lb.path
    hint = chunk if isinstance(chunk, list) else [chunk]
    need = 0  # size of a batch that did not fit the last read
    while pos < end:
        want = min(max(MIN_CHUNK, min(hint[0], MAX_CHUNK), need), end - pos)
        need = 0
        buf = os.pread(fd, want, pos)
        if len(buf) < want:
            if tolerate_tail:
                end = pos + len(buf)
                if not buf:
                    return
            else:
                raise CorruptRecordError(f"log ends at {pos + len(buf)}, expected {end}", path,
                                         pos + len(buf))
        p = 0
        n = len(buf)
        while p < n:
            if p + HEADER_SIZE > n:
                if pos + p + HEADER_SIZE > end:
                    if tolerate_tail:
                        return
                    raise CorruptRecordError("partial batch header at end of log", path, pos + p)
                break  # header crosses the chunk: re-read from here
            h = parse_header(buf, p)
            try:
                check_header(h, path, pos + p)
            except CorruptRecordError:
                if tolerate_tail:
                    return
                raise
            if pos + p + h.size > end:
                if tolerate_tail:
                    return
                raise CorruptRecordError(f"batch of {h.size} bytes runs past the end of the log ({end})",
                                         path, pos + p)
            if p + h.size > n:
                need = h.size  # re-read from this batch, wholly
                break
            yield pos + p, h, buf, p
            p += h.size
        pos += p


def _scan_mapped(path: str, mm: mmap.mmap, pos: int, end: int, tolerate_tail: bool
                 ) -> Iterator[tuple[int, BatchHeader, Any, int]]:
    """:func:`scan` over an immutable segment's mapping: no reads, no copies."""
    while pos < end:
        if pos + HEADER_SIZE > end:
            if tolerate_tail:
                return
            raise CorruptRecordError("partial batch header at end of log", path, pos)
        h = parse_header(mm, pos)
        try:
            check_header(h, path, pos)
            if pos + h.size > end:
                raise CorruptRecordError(f"batch of {h.size} bytes runs past the end of the log ({end})",
                                         path, pos)
        except CorruptRecordError:
            if tolerate_tail:
                return
            raise
        yield pos, h, mm, pos
        pos += h.size


class Continuation:
    """A reader's view of the active segment: the batch its last read ended in, kept for the read that
    continues at the next offset (a consumer's next poll, a ``read()`` loop), which is handed the rest of it
    as that read checked it instead of reading and checksumming the whole batch again (a reader checks every
    read of that file: a poll of 500 through a ~1 MB batch of 8,000 records read and checked it 16 times).

    One slot, replaced whole: ``(the offset a continuing read starts at, the view, its file position, its
    size)``; every read of the file empties it first, so it only ever holds where the last read stopped. Only a
    batch read into memory (``pread``) and checked whole is kept, cut short by the read's limits; a batch in a
    read buffer more than twice its size is copied out first. A read at any other offset (a random read, a seek,
    another reader of the handle) reads the file and checks what it reads. The segment drops it whenever it
    drops its memo of checked batches (:meth:`~pylog.segment.Segment.forget_verified`).
    """

    __slots__ = ("slot",)

    def __init__(self) -> None:
        self.slot: tuple[int, BatchView, int, int] | None = None

    def serve(self, offset: int, max_records: int, end: int) -> tuple[ReadSlice, int, int] | None:
        """``(slice, file position after the batch, its size)`` when ``offset`` continues the kept batch
        (which lies below ``end``), else None; the slot moves on to where the slice stops (or empties when
        it takes the batch's last record)."""
        slot = self.slot
        if slot is None or slot[0] != offset:
            return None
        _, view, fpos, size = slot
        if fpos + size > end:
            return None
        h = view.header
        deltas = view.offset_deltas
        a = offset - h[0] if deltas is None else int(np.searchsorted(deltas, offset - h[0]))
        b = min(h[11], a + max_records)
        self.slot = None if b >= h[11] else (h[0] + (b if deltas is None else int(deltas[b])), view, fpos, size)
        return (view, a, b), fpos + size, size

    def keep(self, pos: int, view: BatchView, buf: Any, p: int, size: int, stop: int) -> None:
        """Keep ``view`` (the checked batch of ``size`` bytes at ``buf[p:]``, file position ``pos``), whose
        records a read took up to index ``stop``, for the read that continues there."""
        h = view.header
        if stop >= h[11]:
            return
        if isinstance(buf, bytes) and len(buf) > 2 * size and not isinstance(view.body, bytes):
            # The batch's body is a view of a larger read: copy the batch out rather than keep the read.
            view = BatchView.from_buffer(bytes(memoryview(buf)[p:p + size]), 0, None, pos, h, False)
        deltas = view.offset_deltas
        self.slot = (h[0] + (stop if deltas is None else int(deltas[stop])), view, pos, size)


def read_from(lb: LogBytes, pos: int, expect: int, offset: int, max_records: int, max_bytes: int, end: int,
              verify: bool, memo: set[int] | None, memo_room: int, hint: int, cont: Continuation | None = None
              ) -> tuple[list[ReadSlice], int, int] | None:
    """Batches holding records with offsets >= ``offset`` from file position ``pos``, where the batch with
    base offset ``expect`` should start, up to the limits (at least one batch if any exists, even past
    ``max_bytes``) and the visible size ``end``.

    ``memo`` is the segment's memo of verified batch starts (None: check every batch), taken once before
    the read; a batch checked whole is added to it while it holds fewer than ``memo_room``. ``hint`` sizes
    the first read. ``cont`` (a reader's view of the active segment): where the batch the read ends in is
    kept for the read that continues it (:class:`Continuation`). Returns ``(slices, bytes, size of the last
    batch looked at)`` (the caller's next hint; bytes as decompressed: ``max_bytes`` bounds what a read
    decompresses); None when another batch is at ``pos`` (its checksum holds:
    the index is wrong).

    :raises CorruptRecordError: when a batch in the range does not check.
    """
    out: list[ReadSlice] = []
    got = 0
    nbytes = 0  # decompressed: max_bytes bounds what a read decompresses, whatever the compression ratio
    stored = 0  # in the file: sizes the next read of it
    hints = [hint]
    path = lb.path
    size = HEADER_SIZE
    check_first = pos > 0
    for fpos, h, buf, p in scan(lb, pos, end, hints, tolerate_tail=False):
        # Header fields by index: this loop runs once per batch on the read hot path.
        base, size, count = h[0], h[1] + LENGTH_PREFIX, h[11]
        if check_first:
            check_first = False
            if base != expect:
                BatchView.from_buffer(buf, p, path, fpos, h, True)  # raises if this batch is damaged
                return None
        if base + h[5] < offset:  # last offset below the target
            # Skipping on the word of an unchecked header would silently drop the records of a batch
            # whose base offset was damaged downwards: check what is skipped too (at most about
            # index.interval.bytes per read).
            if verify and (memo is None or fpos not in memo):
                if batch_crc(memoryview(buf)[p:p + size]) != h[3]:
                    raise CorruptRecordError("batch checksum mismatch", path, fpos)
                if memo is not None and len(memo) < memo_room:
                    memo.add(fpos)
            continue
        if memo is None:
            view = BatchView.from_buffer(buf, p, path, fpos, h, verify)
        elif fpos in memo:
            view = BatchView.from_buffer(buf, p, path, fpos, h, False)  # checked by an earlier read
        else:
            view = BatchView.from_buffer(buf, p, path, fpos, h, True)
            if len(memo) < memo_room:
                memo.add(fpos)
        a = 0
        if offset > base:
            if view.offset_deltas is None:
                a = offset - base
            else:
                a = int(np.searchsorted(view.offset_deltas, offset - base))
        b = min(count, a + (max_records - got))
        out.append((view, a, b))
        got += b - a
        nbytes += h.decompressed_size
        stored += size
        if got >= max_records or nbytes >= max_bytes:
            if cont is not None and memo is None and verify:
                cont.keep(fpos, view, buf, p, size, b)
            break
        # Size the next read for what is still wanted, judging by the bytes per record so far.
        hints[0] = int(min(max_bytes - nbytes, stored / got * (max_records - got) * 1.05 + HEADER_SIZE))
    return out, nbytes, size


def offset_for_timestamp(lb: LogBytes, pos: int, start: int, timestamp: int, end: int) -> int | None:
    """First offset >= ``start`` whose record timestamp is >= ``timestamp`` in the batches from file position
    ``pos`` (the time index's entry for ``timestamp``) up to ``end``, or None."""
    for fpos, h, buf, p in scan(lb, pos, end, MIN_CHUNK, tolerate_tail=False):
        if h.next_offset <= start or h.max_timestamp < timestamp:
            # As in read_from(): never skip on the word of a damaged header.
            if batch_crc(memoryview(buf)[p:p + h.size]) != h.crc:
                raise CorruptRecordError("batch checksum mismatch", lb.path, fpos)
            continue
        view = BatchView.from_buffer(buf, p, lb.path, fpos, header=h)
        offs = view.offsets()
        hits = np.flatnonzero((view.timestamps() >= timestamp) & (offs >= start))
        if len(hits):
            return int(offs[hits[0]])
    return None
