"""Reading a segment's log: scanning whole batches, reads by offset and lookups by timestamp.

The read half of :class:`~pylog.storage.segment.Segment`, kept in its own file: the functions here take a
segment and use only its public names (``read_fd``, ``mapping``, ``position_for``, ``indexes``,
``batch_headers``, ``tail``, ``tail_end``, ``recent``, ``forget_tail``, ``rebuild_indexes``,
``batch_hint``, ``verified``, ``note_verified``); :class:`Segment` delegates its :meth:`~Segment.scan`,
:meth:`~Segment.read` and :meth:`~Segment.offset_for_timestamp` to them, so callers use the segment's methods.

Invariants:
- Nothing here writes to the log: a wrong index (derived data) is rebuilt through
  :meth:`Segment.rebuild_indexes`, and a reader's record of its end is only ever dropped whole
  (:meth:`Segment.forget_tail`), never edited.
- Every scan bounds each batch by ``end`` and reads it whole once: a header that does not check, or a
  batch running past ``end``, raises :class:`~pylog.errors.CorruptRecordError` (or ends the scan, with
  ``tolerate_tail``), never a hang or a read of unbounded size.
- A read checks the CRC-32C of every batch it serves or skips (with ``verify``), except one whose start
  the segment's memo (:meth:`Segment.verified`) holds: a batch of the same open file, checked by an earlier
  read while no byte below the visible size could change since. Only a read that checked a batch whole
  records it there; section bounds are checked on every read all the same (:class:`BatchView`).
- A read never skips records on the word of an unchecked header: a batch skipped for lying below the
  wanted offset (or timestamp) has its checksum checked too (when ``verify``), so a damaged base offset
  raises instead of silently dropping its records; and an index entry that does not lead to its batch
  makes the read rebuild the index and scan from the segment start, not skip ahead.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..errors import CorruptRecordError
from .records import HEADER_SIZE, LENGTH_PREFIX, BatchHeader, BatchView, batch_crc, check_header, parse_header

if TYPE_CHECKING:
    from .segment import Segment

__all__ = ["ReadSlice", "MIN_CHUNK", "MAX_CHUNK", "scan", "read", "offset_for_timestamp", "check_not_cut"]

log = logging.getLogger("pylog.segment")  # the segment's logger: these are its messages

#: (batch, first index in batch, stop index in batch)
ReadSlice = tuple[BatchView, int, int]

#: Smallest and largest single read of a scan.
MIN_CHUNK = 64 * 1024
MAX_CHUNK = 16 * 1024 * 1024


def scan(seg: Segment, pos: int, end: int, chunk: int | list[int], tolerate_tail: bool
         ) -> Iterator[tuple[int, BatchHeader, Any, int]]:
    """Yield ``(file position, header, buffer, position in buffer)`` for each whole batch in [pos, end).

    Each yielded buffer holds the whole batch. ``chunk`` is the read size, or a one-item list the
    consumer may update between batches to size the next read. With ``tolerate_tail`` a batch that runs past
    ``end`` or a partial header at the end stops the scan silently (a writer may still be writing it);
    otherwise it raises :class:`CorruptRecordError` naming the file and position.
    """
    # Not a generator itself: the iterator it returns is the only one a batch passes through (a random
    # read of one record takes one batch from it).
    mm = seg.mapping() if seg.immutable or seg.writable else None
    if mm is not None and end <= len(mm):
        if seg.writable and not seg.immutable:
            check_not_cut(seg, end)
        return _scan_mapped(seg, mm, pos, end, tolerate_tail)
    return _scan_read(seg, pos, end, chunk, tolerate_tail)


def check_not_cut(seg: Segment, end: int) -> None:
    """:raises CorruptRecordError: when the writer's active log file holds fewer than the ``end`` bytes its
    writer wrote: cut by another hand. Checked (one ``fstat``) before the writer reads its mapping, whose
    pages past the end of a cut file would read as zeros or kill the process (SIGBUS)."""
    size = seg.file_size()
    if size < end:
        raise CorruptRecordError(f"the log file is {size} bytes where its writer wrote {end}: it was cut under "
                                 f"the writer (by hand, or a file system fault)", seg.log_path, size)


def _scan_read(seg: Segment, pos: int, end: int, chunk: int | list[int], tolerate_tail: bool
               ) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
    """:func:`scan` through ``pread`` (a reader's active segment, or past a writer's mapping)."""
    fd = seg.read_fd()
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
                raise CorruptRecordError(f"log ends at {pos + len(buf)}, expected {end}", seg.log_path,
                                         pos + len(buf))
        p = 0
        n = len(buf)
        while p < n:
            if p + HEADER_SIZE > n:
                if pos + p + HEADER_SIZE > end:
                    if tolerate_tail:
                        return
                    raise CorruptRecordError("partial batch header at end of log", seg.log_path, pos + p)
                break  # header crosses the chunk: re-read from here
            h = parse_header(buf, p)
            try:
                check_header(h, seg.log_path, pos + p)
            except CorruptRecordError:
                if tolerate_tail:
                    return
                raise
            if pos + p + h.size > end:
                if tolerate_tail:
                    return
                raise CorruptRecordError(f"batch of {h.size} bytes runs past the end of the log ({end})",
                                         seg.log_path, pos + p)
            if p + h.size > n:
                need = h.size  # re-read from this batch, wholly
                break
            yield pos + p, h, buf, p
            p += h.size
        pos += p


def _scan_mapped(seg: Segment, mm: mmap.mmap, pos: int, end: int, tolerate_tail: bool
                 ) -> Iterator[tuple[int, BatchHeader, Any, int]]:
    """:func:`scan` over an immutable segment's mapping: no reads, no copies."""
    while pos < end:
        if pos + HEADER_SIZE > end:
            if tolerate_tail:
                return
            raise CorruptRecordError("partial batch header at end of log", seg.log_path, pos)
        h = parse_header(mm, pos)
        try:
            check_header(h, seg.log_path, pos)
            if pos + h.size > end:
                raise CorruptRecordError(f"batch of {h.size} bytes runs past the end of the log ({end})",
                                         seg.log_path, pos)
        except CorruptRecordError:
            if tolerate_tail:
                return
            raise
        yield pos, h, mm, pos
        pos += h.size


def read(seg: Segment, offset: int, max_records: int, max_bytes: int, end: int | None = None,
         verify: bool = True) -> tuple[list[ReadSlice], int]:
    """Batches holding records with offsets >= ``offset``, up to the limits.

    Returns ``(slices, bytes)``. At least one batch is returned if any exists, even past ``max_bytes``.
    ``end`` is the visible size to read up to (default: the segment's ``size``). A reader (another process
    than the writer) reads its latest batches through the record its refreshes keep, see
    :func:`_read_at_tail`; everyone else starts at the index entry at or before ``offset``.

    :raises CorruptRecordError: when a batch in the visible range does not check.
    """
    end = seg.size if end is None else end
    offs, poss = seg.tail
    if offs and offset >= offs[0] and seg.tail_end >= end:
        result = _read_at_tail(seg, offs, poss, offset, max_records, max_bytes, end, verify)
        if result is not None:
            return result
    pos, expect = seg.position_for(offset)
    try:
        result = _read_from(seg, pos, expect, offset, max_records, max_bytes, end, verify)
    except CorruptRecordError:
        # An index entry may point into the middle of a batch (an index file that belongs to another
        # version of this segment, swapped in by compaction). If every entry points at a batch start,
        # the log itself is damaged there: report it; otherwise rebuild the index and read again.
        if pos == 0 or _index_matches_log(seg):
            raise
        result = None
    if result is None:
        # The batch at the indexed position does not carry the offset the index names, and its
        # checksum holds: the index is wrong (derived data): rebuild it and scan from the segment start
        # rather than skip records silently.
        log.warning("%s: offset index entry for offset %d points at the wrong batch; rebuilding",
                    seg.log_path, expect)
        seg.rebuild_indexes()
        result = _read_from(seg, 0, seg.base_offset, offset, max_records, max_bytes, end, verify)
        assert result is not None
    return result


def _read_at_tail(seg: Segment, offs: list[int], poss: list[int], offset: int, max_records: int, max_bytes: int,
                  end: int, verify: bool) -> tuple[list[ReadSlice], int] | None:
    """:func:`read` for a reader from the batch start it recorded at or before ``offset`` (see
    ``Segment.tail``), instead of from the last index entry, whose distance would be read and checksummed
    again on every read of a consumer keeping up. Batches the last refresh kept (``Segment.recent``) are
    handed out as they are: they were checked then, and bytes below the visible size never change.

    The record covers every batch up to ``Segment.tail_end`` (>= ``end``, checked by the caller), so the
    scan from there stops at the batch holding ``offset``. None when the file does not have the
    recorded batch at the recorded position any more (it changed under this reader, which only a
    power loss or a foreign hand does): the record is dropped and the caller reads through the index.
    """
    i = bisect.bisect_right(offs, offset) - 1
    n = len(offs)
    recent = seg.recent
    out: list[ReadSlice] = []
    got = 0
    nbytes = 0
    # First the batches the last refresh kept (checked then, and unchanged since: bytes below the
    # visible size never change), then from the file for whatever is left.
    while i < n:
        pos = poss[i]
        view = recent.get(pos)
        if view is None or pos >= end:
            break
        i += 1
        h = view.header
        base, count = h[0], h[11]
        if base + h[5] < offset:
            continue
        a = 0
        if offset > base:
            deltas = view.offset_deltas
            a = offset - base if deltas is None else int(np.searchsorted(deltas, offset - base))
        b = min(count, a + (max_records - got))
        out.append((view, a, b))
        got += b - a
        nbytes += h[1] + LENGTH_PREFIX
        if got >= max_records or nbytes >= max_bytes:
            return out, nbytes
    if i >= n or poss[i] >= end:
        return out, nbytes  # the record runs up to tail_end, at or past end: nothing more is visible
    pos, expect = poss[i], offs[i]
    try:
        result = _read_from(seg, pos, expect, offset, max_records - got, max(max_bytes - nbytes, 1), end, verify)
    except CorruptRecordError:
        result = None
    if result is None:
        log.warning("%s: the batch recorded at byte %d for offset %d is not there any more; reading "
                    "through the index", seg.log_path, pos, expect)
        seg.forget_tail()
        return None if not out else (out, nbytes)
    return out + result[0], nbytes + result[1]


def _read_from(seg: Segment, pos: int, expect: int, offset: int, max_records: int, max_bytes: int, end: int,
               verify: bool) -> tuple[list[ReadSlice], int] | None:
    """:func:`read` from file position ``pos``, where the batch with base offset ``expect`` should
    start; None when another batch is there (a damaged one raises :class:`CorruptRecordError`)."""
    out: list[ReadSlice] = []
    got = 0
    nbytes = 0
    hint = [min(seg.batch_hint, max_bytes)]
    path = seg.log_path
    size = HEADER_SIZE
    check_first = pos > 0
    # Taken once, before any byte is looked at: a memo dropped during this read is not written to.
    memo = seg.verified() if verify else None
    for fpos, h, buf, p in scan(seg, pos, end, hint, tolerate_tail=False):
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
                if memo is not None:
                    seg.note_verified(memo, fpos)
            continue
        if memo is None:
            view = BatchView.from_buffer(buf, p, path, fpos, h, verify)
        elif fpos in memo:
            view = BatchView.from_buffer(buf, p, path, fpos, h, False)  # checked by an earlier read
        else:
            view = BatchView.from_buffer(buf, p, path, fpos, h, True)
            seg.note_verified(memo, fpos)
        a = 0
        if offset > base:
            if view.offset_deltas is None:
                a = offset - base
            else:
                a = int(np.searchsorted(view.offset_deltas, offset - base))
        b = min(count, a + (max_records - got))
        out.append((view, a, b))
        got += b - a
        nbytes += size
        if got >= max_records or nbytes >= max_bytes:
            break
        # Size the next read for what is still wanted, judging by the bytes per record so far.
        hint[0] = int(min(max_bytes - nbytes, nbytes / got * (max_records - got) * 1.05 + HEADER_SIZE))
    seg.batch_hint = size
    return out, nbytes


def _index_matches_log(seg: Segment) -> bool:
    """True when every offset index entry points at a batch start (a header walk; a damaged header
    raises). An entry at a batch start naming another offset is left to :func:`_read_from`, which
    tells a wrong index (the batch checks) from a damaged batch."""
    oi, _ = seg.indexes()
    starts = {fpos for fpos, _ in seg.batch_headers()}
    return all(p in starts for p in oi.entries()[1].tolist())


def offset_for_timestamp(seg: Segment, timestamp: int, end: int | None = None, min_offset: int = 0) -> int | None:
    """First offset >= ``min_offset`` in this segment whose record timestamp is >= ``timestamp``, or None."""
    end = seg.size if end is None else end
    oi, ti = seg.indexes()
    rel = ti.lookup(timestamp)
    pos = oi.lookup(rel)[1]
    start = max(seg.base_offset + rel, min_offset)
    for fpos, h, buf, p in scan(seg, pos, end, MIN_CHUNK, tolerate_tail=False):
        if h.next_offset <= start or h.max_timestamp < timestamp:
            # As in read(): never skip on the word of a damaged header.
            if batch_crc(memoryview(buf)[p:p + h.size]) != h.crc:
                raise CorruptRecordError("batch checksum mismatch", seg.log_path, fpos)
            continue
        view = BatchView.from_buffer(buf, p, seg.log_path, fpos, header=h)
        offs = view.offsets()
        hits = np.flatnonzero((view.timestamps() >= timestamp) & (offs >= start))
        if len(hits):
            return int(offs[hits[0]])
    return None
