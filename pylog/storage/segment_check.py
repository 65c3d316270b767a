"""Checking a segment's log: validation walks, damage classification, index rebuilds.

The functions here read a log through a :class:`~pylog.storage.segment_read.LogBytes` and take everything
else they need as plain arguments (base offset, sizes, an index's path and entries): they never see the
:class:`~pylog.segment.Segment` nor the index classes (:mod:`pylog.index`, above this module) and never call
back into them. The segment delegates its :meth:`~Segment.check`, :meth:`~Segment.first_damage`,
:meth:`~Segment.damage_is_at_tail`, :meth:`~Segment.cut_below_index` and its index checks and rebuilds to
them: :func:`build_indexes` returns the entries the segment makes its indexes from (:class:`Rebuilt`),
:func:`index_problem` what the segment's indexes get wrong. Nothing here writes: recovery
(``Segment.recover``) cuts what :func:`build_indexes` finds.

Invariants:
- Damage is classified, never guessed: what follows the valid batches is ``"none"``, ``"partial"`` (the
  start of a batch a live writer is writing), ``"torn"`` (an interrupted write: fewer bytes than a header,
  a last batch that runs to or past the end, or only zero bytes) or ``"damage"`` (anything else: bit rot
  or a foreign hand, which recovery must not cut on its own, since whole batches may follow).
- :func:`check` decodes every valid batch's headers section too (what a read decodes beyond the checked
  sections), so a batch whose checksum holds but that no read could return is reported; and it reports a
  file shorter than what was written into it (``end`` past the file's size).
- Every check reads and checksums every batch it covers: none uses the memo of batches reads have
  checked (:meth:`Segment.verified`), nor adds to it, so ``pylog verify`` and a writer's open checks see
  damage that reads of an open file no longer look for.
- Every walk reads each batch once and bounds it by the file's size: hostile bytes give a
  :class:`~pylog.errors.CorruptRecordError` or a problem string, never a hang or a huge allocation.
"""

from __future__ import annotations

import mmap
import os
from typing import NamedTuple

import numpy as np

from ..errors import CorruptRecordError
from .records import HEADER_SIZE, BatchView, batch_crc, check_header, checked_prefix, parse_header
from .segment_file import LogFile
from .segment_read import MAX_CHUNK as _MAX_CHUNK, LogBytes, scan, valid_batches

__all__ = ["check", "cut_below_index", "first_damage", "damage_is_at_tail", "tail_kind", "valid_end",
           "valid_batch_after", "build_indexes", "Rebuilt", "index_due", "walk_end",
           "index_problem", "IndexProblem"]


def index_due(pos: int, since: int, interval_bytes: int) -> bool:
    """The one indexing rule, for appends and rebuilds alike: the batch at ``pos`` gets index entries
    when ``index.interval.bytes`` of log were written since the last entry (never the segment start)."""
    return pos > 0 and since >= interval_bytes


class Rebuilt(NamedTuple):
    """What :func:`build_indexes` found: the entries of both indexes (offset index: relative offsets and
    positions; time index: timestamps and relative offsets; plain int lists, for the segment to make its
    indexes from) and the state of the log they cover."""
    offset_rels: list[int]
    offset_positions: list[int]
    time_stamps: list[int]
    time_rels: list[int]
    #: Bytes of log after the last offset index entry.
    since: int
    max_ts: int
    next_offset: int
    #: End of the valid batches.
    valid_end: int
    #: Max timestamp of the first batch (None: no batch).
    first_ts: int | None
    #: Why the scan stopped before ``end`` (with ``verify``; None: it did not).
    error: CorruptRecordError | None


def build_indexes(lb: LogBytes, base_offset: int, end: int, verify: bool, interval_bytes: int) -> Rebuilt:
    """Scan the log up to ``end`` and collect the index entries a writer would have made (an entry every
    ``interval_bytes``); stops at the first bad batch if verifying."""
    orel: list[int] = []
    opos: list[int] = []
    tts: list[int] = []
    trel: list[int] = []
    since = 0
    max_ts = -1
    next_offset = base_offset
    valid_end = 0
    first_ts = None
    error: CorruptRecordError | None = None
    try:
        for pos, h, buf, p in scan(lb, 0, end, _MAX_CHUNK, tolerate_tail=False):
            if verify:
                BatchView.from_buffer(buf, p, lb.path, pos, header=h)
            if h.base_offset < next_offset:
                raise CorruptRecordError(f"batch base offset {h.base_offset} not above {next_offset - 1}",
                                         lb.path, pos)
            if h.last_offset - base_offset > 0xFFFFFFFF:
                raise CorruptRecordError("offset too far above the segment base", lb.path, pos)
            if index_due(pos, since, interval_bytes):
                rel = h.base_offset - base_offset
                orel.append(rel)
                opos.append(pos)
                if max_ts > (tts[-1] if tts else -(1 << 63)):
                    tts.append(max_ts)
                    trel.append(rel)
                since = 0
            since += h.size
            if first_ts is None:
                first_ts = h.max_timestamp
            max_ts = max(max_ts, h.max_timestamp)
            next_offset = h.next_offset
            valid_end = pos + h.size
    except CorruptRecordError as exc:
        if not verify:
            raise
        error = exc
    return Rebuilt(orel, opos, tts, trel, since, max_ts, next_offset, valid_end, first_ts, error)


def walk_end(lb: LogBytes, pos: int, end: int, tolerate_tail: bool, next_offset: int, max_ts: int, last_index_pos: int
             ) -> tuple[int, int, int, int, list[int], list[int]]:
    """The wholly checked batches from ``pos`` (the batch with base offset ``next_offset``, which the indexes
    point at) to ``end``, for a load: ``(next offset, max timestamp, end of the valid batches, bytes since
    the index entry at ``last_index_pos``, base offsets, positions)``; ``max_ts`` is the largest timestamp
    before ``pos``. With ``tolerate_tail`` (a reader) a bad or incomplete batch, or one that does not
    continue the batches before it, ends the walk; otherwise it raises :class:`CorruptRecordError`."""
    valid_end = pos
    since = 0
    offs: list[int] = []
    poss: list[int] = []
    for fpos, h in valid_batches(lb, pos, end, tolerate_tail):
        if poss and h.base_offset < next_offset:
            # Not the continuation of the batches before it (recovery cuts the log here too).
            if tolerate_tail:
                break
            raise CorruptRecordError(f"batch base offset {h.base_offset} not above {next_offset - 1}", lb.path, fpos)
        next_offset = h.next_offset
        max_ts = max(max_ts, h.max_timestamp)
        valid_end = fpos + h.size
        since = 0 if fpos == last_index_pos else since
        since += h.size
        poss.append(fpos)
        offs.append(h.base_offset)
    return next_offset, max_ts, valid_end, since, offs, poss


class IndexProblem(NamedTuple):
    """Why a segment's indexes do not fit its log (see :func:`index_problem`)."""
    reason: str
    #: True: the time index is wrong; False: the offset index.
    time_index: bool


def index_problem(last: tuple[int, int] | None, time_last: tuple[int, int] | None, size: int, base_offset: int,
                  lf: LogFile) -> IndexProblem | None:
    """Cheap checks that the indexes' last entries (``last``: the offset index's ``(relative offset,
    position)``, ``time_last``: the time index's ``(timestamp, relative offset)``) point inside the
    visible log (``size`` bytes of the file ``lf``) at a batch with that offset; None when they do, else
    what is wrong (the caller rebuilds the indexes from the log).

    The caller limits a live (unsealed) index of another process's writer to the visible size first: it
    may run ahead of what this reader has checked, and entries past it are ignored rather than distrusted.
    """
    if last is not None:
        rel, pos = last
        if pos + HEADER_SIZE > size:
            return IndexProblem("offset index points past the end of the log", False)
        h = parse_header(os.pread(lf.read_fd(), HEADER_SIZE, pos))
        if h.base_offset != base_offset + rel:
            return IndexProblem(f"offset index entry ({rel}, {pos}) does not point at its batch", False)
    if time_last is not None and last is not None and time_last[1] > last[0] + (1 << 31):
        return IndexProblem("time index points past the offset index", True)
    return None


def valid_end(lb: LogBytes, end: int) -> int:
    """End of the prefix of wholly valid batches (length, header, CRC, sections) in ``[0, end)``."""
    valid_end = 0
    for fpos, h in valid_batches(lb, 0, end, tolerate_tail=True):
        valid_end = fpos + h.size
    return valid_end


def valid_batch_after(lb: LogBytes, pos: int, end: int) -> bool:
    """True when a wholly valid batch follows the bad one at ``pos``, reachable through the lengths in
    the headers from there: damage in the middle, not a torn tail. A header that fails its checks
    ends the walk (nothing after it can be located), as does the end of the file."""
    fd = lb.fd
    first = pos
    while pos + HEADER_SIZE <= end:
        h = parse_header(os.pread(fd, HEADER_SIZE, pos))
        try:
            check_header(h, lb.path, pos)
        except CorruptRecordError:
            return False
        nxt = pos + h.size
        if nxt > end:
            return False
        if pos != first:  # the bad batch itself says nothing about what follows it
            try:
                BatchView.from_buffer(os.pread(fd, h.size, pos), 0, lb.path, pos, h)
                return True
            except CorruptRecordError:
                pass
        pos = nxt
    return False


def first_damage(lb: LogBytes, mm: mmap.mmap | None, base_offset: int, end: int, start: int = 0,
                 start_offset: int | None = None) -> CorruptRecordError | None:
    """The first batch in ``[start, end)`` (``end``: the segment's size) whose header, checksum or offset
    order does not check, as the error a read of it raises; None when every batch there checks.

    A writer's check, after a clean close, of the active segment below where :meth:`Segment.load` looked:
    bit rot there is damage in the middle (the batches ``load`` checked follow it). ``start`` is where
    the caller checked up to before, the start of the batch with base offset ``start_offset``; when
    no such batch is there (the file was cut, and maybe written again, since), the walk starts from 0.
    Reads and checksums each batch once (:func:`~pylog.storage.records.checked_prefix` over the writer's
    mapping ``mm``); sections are not decoded: a batch whose checksum holds was written so.
    """
    prev = base_offset - 1
    if start > end:  # the file is shorter than when the caller looked: cut (and maybe regrown) since
        start = 0
    if start == end:
        return None
    if start:
        # The memo is trusted only if a batch with the remembered base offset starts there. Anything
        # else (fewer bytes than a header: the file was cut below ``start`` and regrown to just past
        # it; a header that fails its checks; another base offset) means the memo is stale.
        raw = os.pread(lb.fd, HEADER_SIZE, start)
        ok = False
        if len(raw) == HEADER_SIZE:
            h = parse_header(raw)
            try:
                check_header(h, lb.path, start)
                ok = h.base_offset == start_offset
            except CorruptRecordError:
                pass
        prev, start = (h.base_offset - 1, start) if ok else (prev, 0)
    if mm is not None and len(mm) >= end:
        start, prev = checked_prefix(mm, start, end, prev)  # the fast walk, to the first batch that fails
        if start == end:
            return None
    # From there (or from the start without a mapping): the walk reads use, for their error.
    try:
        for fpos, h, buf, p in scan(lb, start, end, _MAX_CHUNK, tolerate_tail=False):
            if batch_crc(memoryview(buf)[p:p + h.size]) != h.crc:
                raise CorruptRecordError("batch checksum mismatch", lb.path, fpos)
            if h.base_offset <= prev:
                raise CorruptRecordError(f"batch base offset {h.base_offset} not above {prev}",
                                         lb.path, fpos)
            prev = h.last_offset
    except CorruptRecordError as exc:
        return exc
    return None


def damage_is_at_tail(lb: LogBytes) -> bool:
    """True when what follows the file's valid batches looks like an interrupted write, and nothing
    else: fewer bytes than a header; a header that checks, whose batch runs to or past the end of the
    file (cut short, or the last batch and bad); or only zero bytes (blocks a power loss left
    unwritten). False for anything else (a damaged header, a bad batch with bytes after it): bit rot
    or a foreign hand, which recovery must not cut on its own, since whole batches may follow."""
    end = lb.file_size()
    return tail_kind(lb, valid_end(lb, end), end) != "damage"


def tail_kind(lb: LogBytes, valid_end: int, end: int) -> str:
    """What the bytes ``[valid_end, end)`` after the valid batches are: ``"none"``; ``"partial"``, the
    start of a batch the file does not wholly hold yet (all a live writer ever leaves there);
    ``"torn"``, otherwise an interrupted write (see :func:`damage_is_at_tail`); or ``"damage"``."""
    if valid_end >= end:
        return "none"
    if end - valid_end < HEADER_SIZE:
        return "partial"
    fd = lb.fd
    h = parse_header(os.pread(fd, HEADER_SIZE, valid_end))
    try:
        check_header(h, lb.path, valid_end)
        if valid_end + h.size > end:
            return "partial"
        if valid_end + h.size == end:
            return "torn"
    except CorruptRecordError:
        pass
    pos = valid_end
    while pos < end:
        chunk = os.pread(fd, min(_MAX_CHUNK, end - pos), pos)
        if not chunk or chunk.count(0) != len(chunk):
            return "damage"
        pos += len(chunk)
    return "torn"


def cut_below_index(lb: LogBytes, base_offset: int, index_path: str, last: tuple[int, int] | None) -> str | None:
    """A problem when the log file is shorter than its offset index file says it was written: the last
    entry points at a batch the file no longer holds. Writers write a batch before its index entry and
    only ever shorten a log after cutting its index, so while the writer runs (or after a clean close)
    this is a file cut by another hand, not a write under way; after a crash it may also be what a power
    cut left (index pages written, log pages not), which recovery cuts: the caller knows which applies.
    ``last`` is the last entry of the index file at ``index_path`` as it is on disk, not as a reader rebuilt
    it in memory after finding it inconsistent; None when the index is empty, missing or damaged (that is
    reported and repaired as such)."""
    size = lb.file_size()
    if last is None or last[1] + HEADER_SIZE <= size:
        return None
    offset = base_offset + last[0]
    return (f"{lb.path}: the log is {size} bytes, but its offset index {index_path} has offset {offset} at "
            f"byte {last[1]}: the file was cut below what was written (by hand, or a file system fault); the "
            f"records from the end of the file to offset {offset} at least are gone")


def check(lb: LogBytes, base_offset: int, end: int, partial_tail_ok: bool,
          index_entries: tuple[np.ndarray, np.ndarray] | None, index_path: str, index_error: str,
          next_offset: int | None) -> list[str]:
    """Full consistency check of the bytes up to ``end``: every batch validates, offsets increase, the
    offset index's entries (``index_entries``: relative offsets and positions, of the index at
    ``index_path``) point at batches with their offsets. Returns a list of problems (empty when
    consistent). ``index_entries`` is None when the index could not be had (``index_error`` says why);
    ``next_offset``, the writer's next offset (None for a reader's check), must follow the last batch.

    Whatever follows the valid batches is a problem, except, with ``partial_tail_ok`` (a writer may be
    writing right now), the start of one batch the file does not wholly hold yet: a live writer never
    leaves anything else there. A bad batch with a valid one after it is reported as the bad batch.
    """
    problems: list[str] = []
    size = lb.file_size()
    if size < end:  # only another hand shortens a file below what this handle saw or wrote in it
        problems.append(f"{lb.path}: the log is {size} bytes where {end} were written: it was cut under the "
                        f"writer (by another hand, or a file system fault)")
        end = size
    # One pass over the valid prefix (each batch read and checksummed once): offsets, and the batch
    # starts the index points at (kept only there: memory bounded by the index, not the log).
    rels, poss = index_entries if index_entries is not None else (np.empty(0, np.int64), np.empty(0, np.int64))
    starts: dict[int, int] = dict.fromkeys(poss.tolist(), -1)
    order: list[str] = []
    prev = base_offset - 1
    seen = 0
    complete = 0
    unreadable: list[str] = []

    def decode(fpos: int, view: BatchView) -> None:
        # What a read decodes beyond the sections from_buffer checked: the headers section.
        try:
            view.headers()
        except CorruptRecordError as exc:
            h = view.header
            unreadable.append(f"{lb.path}@{fpos}: the records at offsets [{h.base_offset}, {h.last_offset}] "
                              f"cannot be read: {exc.reason}")

    for fpos, h in valid_batches(lb, 0, end, tolerate_tail=True, on_view=decode):
        if h.base_offset <= prev:
            order.append(f"{lb.path}@{fpos}: base offset {h.base_offset} not above {prev}")
        prev = h.last_offset
        seen += 1
        if fpos in starts:
            starts[fpos] = h.base_offset
        complete = fpos + h.size
    damage: str | None = None
    kind = tail_kind(lb, complete, end)
    if kind != "none":
        if valid_batch_after(lb, complete, end):
            # Damage in the middle: name the first bad batch, as a scan to the end reports it.
            try:
                for fpos, h, buf, p in scan(lb, complete, end, _MAX_CHUNK, tolerate_tail=False):
                    BatchView.from_buffer(buf, p, lb.path, fpos, header=h)
            except CorruptRecordError as exc:
                damage = str(exc)
        elif not (kind == "partial" and partial_tail_ok):
            what = ("damaged, not an interrupted write (after a clean close appends are refused until "
                    "`pylog repair`; after a crash recovery cuts it)" if kind == "damage" else
                    "a torn tail (an interrupted write: the next writer cuts it)")
            problems.append(f"{lb.path}@{complete}: the {end - complete} byte(s) after the last valid "
                            f"batch are {what}")
    problems.extend(unreadable)
    if index_entries is None:
        problems.append(index_error)
        return problems
    problems.extend(order)
    if damage is not None:
        problems.append(damage)
        return problems
    for rel, pos in zip(rels.tolist(), poss.tolist(), strict=True):
        if starts.get(pos) != base_offset + rel:
            problems.append(f"{index_path}: entry ({rel}, {pos}) does not point at the batch at offset "
                            f"{base_offset + rel}")
    if next_offset is not None and prev + 1 != next_offset and seen:
        problems.append(f"{lb.path}: next offset {next_offset} but last batch ends at {prev}")
    return problems
