"""A reader's record of the batches at its segment's end: where they start, and those its last refresh checked.

A reader in another process than the writer takes in the batches the writer appends to the active segment,
checking each whole once (:meth:`~pylog.segment.Segment.refresh`). This record keeps what that
learnt, so a consumer keeping up reads the batch it wants where it starts, without a second read nor
checksum, instead of from the last index entry (whose distance would be read and checked on every read).
It never sees the :class:`~pylog.segment.Segment`: it gets the log as a
:class:`~pylog.storage.segment_read.LogBytes` and the segment's size and next offset as arguments, and
returns what the segment must take from it.

Invariants:
- ``lists`` holds (base offsets, file positions) of consecutive batch starts ending at ``end`` (-1: no
  record). The two lists are swapped whole (trimmed into new lists, never in place) and appended to in
  order, positions first, so a thread reading them without the partition lock finds a position for every
  offset it sees. At most ``2 * TAIL_KEEP`` entries are kept across refreshes.
- ``recent`` holds the views of the batches the last refresh read and checked, by file position, only when
  that refresh read at most ``RECENT_BYTES``; bytes below the visible size never change, so they serve as
  they are.
- The record is dropped whole (:meth:`TailRecord.forget`), never edited, when a recorded batch is not
  where it was recorded (the file was cut and rewritten under the reader).
"""

from __future__ import annotations

import bisect

import numpy as np

from ..errors import CorruptRecordError
from .records import BatchView
from .segment_read import MAX_CHUNK, LogBytes, ReadSlice, scan

__all__ = ["TailRecord", "TAIL_KEEP", "RECENT_BYTES"]

#: Batch starts a reader keeps of its latest validated batches: enough for any consumer keeping up, whose
#: reads start in the last few; older positions come from the index.
TAIL_KEEP = 256
#: A reader keeps the batches one refresh checked (``recent``) when they were at most this many bytes.
RECENT_BYTES = 256 * 1024


class TailRecord:
    """A reader's record of its segment's end; see the module docstring for what it guarantees."""

    __slots__ = ("lists", "end", "recent")

    def __init__(self) -> None:
        self.lists: tuple[list[int], list[int]] = ([], [])
        self.end = -1
        self.recent: dict[int, BatchView] = {}

    def forget(self) -> None:
        """Drop the record: reads go through the index until the next load or refresh records again."""
        self.lists = ([], [])
        self.end = -1
        self.recent = {}

    def start(self, offsets: list[int], positions: list[int], end: int) -> None:
        """Record afresh the batch starts a load checked, up to ``end`` (the last ``TAIL_KEEP`` of them)."""
        self.lists = (offsets[-TAIL_KEEP:], positions[-TAIL_KEEP:])
        self.end = end
        self.recent = {}

    def take_in(self, lb: LogBytes, size: int, end: int, next_offset: int) -> tuple[int, int, int] | None:
        """Read and check whole the batches appended in ``[size, end)`` and record them; the first that is not
        whole yet (or a torn tail) ends the walk. Returns ``(new size, next offset, max timestamp of the
        new batches or -1)``; None when a batch does not continue at ``next_offset`` (the active segment's
        batches follow each other without gaps, and compaction never rewrites it): the file was cut and
        written again under the reader, which must start over rather than skip offsets or go back."""
        offs, poss = self.lists
        if self.end != size:  # reset after a mismatch: start the record afresh from here
            offs, poss = self.lists = ([], [])
        elif len(offs) >= 2 * TAIL_KEEP:
            # Trimmed into new lists: a thread reading the old ones keeps a pair that covers its read.
            offs, poss = self.lists = (offs[-TAIL_KEEP:], poss[-TAIL_KEEP:])
        start = size
        max_ts = -1
        recent: dict[int, BatchView] | None = {} if end - size <= RECENT_BYTES else None
        for fpos, h, buf, p in scan(lb, size, end, MAX_CHUNK, tolerate_tail=True):
            try:
                view = BatchView.from_buffer(buf, p, lb.path, fpos, header=h)
            except CorruptRecordError:
                break  # not whole yet, or a torn tail: not visible
            if h.base_offset != next_offset:
                return None
            if recent is not None:
                recent[fpos] = view
            poss.append(fpos)
            offs.append(h.base_offset)
            size = self.end = fpos + h.size
            next_offset = h.next_offset
            max_ts = max(max_ts, h.max_timestamp)
        if size != start:
            self.recent = recent if recent is not None else {}
        return size, next_offset, max_ts

    def serve(self, offs: list[int], poss: list[int], offset: int, max_records: int, max_bytes: int, end: int
              ) -> tuple[list[ReadSlice], int, int, int]:
        """The start of a reader's read at its end: the batches the last refresh kept (``recent``, by file
        position; checked then, and unchanged since: bytes below the visible size never change), from the
        recorded batch start at or before ``offset`` (``offs``/``poss``, the ``lists`` the caller took, which
        covers every batch up to at least ``end``), instead of from the last index entry, whose distance would
        be read and checksummed again on every read of a consumer keeping up.

        Returns ``(slices, bytes, records, i)``: ``i`` is where the record goes on past the kept batches (the
        caller reads from ``poss[i]``, where the batch with base offset ``offs[i]`` starts), -1 when the read
        is complete (the limits were reached, or nothing more is visible).
        """
        i = bisect.bisect_right(offs, offset) - 1
        n = len(offs)
        recent = self.recent
        out: list[ReadSlice] = []
        got = 0
        nbytes = 0
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
            nbytes += h.decompressed_size  # as read_from counts
            if got >= max_records or nbytes >= max_bytes:
                return out, nbytes, got, -1
        if i >= n or poss[i] >= end:
            return out, nbytes, got, -1  # the record runs up to its end, at or past end: nothing more is visible
        return out, nbytes, got, i
