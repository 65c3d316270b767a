"""One segment: a ``.log`` file of record batches with its sparse ``.index`` and ``.timeindex``.

Invariants:
- ``base_offset`` <= every offset in this segment; batch base offsets strictly increase along the file.
- Bytes below ``size`` are whole batches; ``size`` only grows after a batch is wholly written (the writer)
  or wholly read back and checksummed (a reader in another process), so no reader sees part of a batch.
- Readers in other processes read the active (last) segment with ``pread``, never an mmap, so a log
  truncated by crash recovery in another process cannot raise SIGBUS there; the writer, the only one who
  ever truncates, maps its own active segment. Older segments are immutable (sealed, then fsynced before
  the recovery point moves past them; only after a power cut that took a sealed segment's unsynced pages
  does recovery cut one, and that runs in the writer before any reader of the new process maps it) and are
  read through a read-only mmap without copying. Indexes are mmapped, which is safe because index files are only
  ever replaced by rename (see :mod:`pylog.index`).
- Indexes are derived data: a missing or damaged index is rebuilt from the log (written back by the
  writer, kept in memory by readers). A reader keeps its index mappings while the files keep their
  inode (files are replaced by rename only) and counts the entries the writer appends in place.
- A reader records where the batches it checked at its end start (offset -> position, up to the
  visible size) and keeps the batches of its last refresh, so a read at the end starts at the batch it
  wants without a second read or checksum; a recorded batch that is not where it was recorded (the file
  was cut and rewritten under the reader) drops the record and the read goes through the index.
- A segment remembers which batch starts of its open file have had their CRC-32C checked by a read
  (:meth:`Segment.verified`), and reads skip the checksum of those, only while no byte below the visible size
  can change: while it is immutable (sealed) or this process's writer holds it (the writer only appends,
  and unmaps before it cuts). The memo belongs to the open file, never to the name: it is dropped, never
  emptied in place, whenever that stops holding: with the descriptor and mapping (:meth:`close`, which
  recovery and truncation call first; a reader starting over), when the writer stops appending (another
  writer may cut the file next) or makes it writable again, and when a segment stops being immutable. A
  file replaced under the name is a new object (or :class:`SegmentReplacedError`), with its own memo. It
  holds at most one position per 64 KiB of the segment (at least 1,024).
- A reader's view of the active segment keeps the batch its last read stopped in, as that read checked it,
  for the read that continues at the next offset only (:class:`~pylog.storage.segment_read.Continuation`);
  every other read empties it, and it is dropped with the memo.
- Only the holder of the partition's writer lock calls the mutating methods (:meth:`append`,
  :meth:`recover`, :meth:`seal`, :meth:`delete`); those are not thread-safe on their
  own. Read methods may run concurrently with the writer.

Split by concern into helpers below this module that never call back into it (each gets the log file as a
:class:`~pylog.storage.segment_read.LogBytes` or :class:`~pylog.storage.segment_file.LogFile`, and the rest
as arguments): :mod:`~pylog.storage.segment_file` (the file pinned, its descriptor and mapping),
:mod:`~pylog.storage.segment_read` (scans, reads by offset and timestamp), :mod:`~pylog.storage.segment_tail`
(a reader's record of its end), :mod:`~pylog.storage.segment_check` (checks, damage, the entries of index
rebuilds), :mod:`~pylog.storage.segment_append` (the writer's appends: the size check, the writes, the index
entries due); above them, :class:`~pylog.index.SegmentIndexes` holds its two index files and mappings through
their life. This class holds the state, decides what to read and what the indexes hold, and updates its
state from what the helpers return.
"""

from __future__ import annotations

import logging
import mmap
import os
from typing import Iterator, Sequence


from .errors import CorruptRecordError
from .storage import prealloc
from .storage.fileio import Data, fsync_files, truncate_durably
from .storage.filenames import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, segment_path
from .index import IndexError_, OffsetIndex, SegmentIndexes, TimeIndex
from .storage.records import HEADER_SIZE, BatchHeader, check_header, parse_header
from .storage import segment_check, segment_read
from .storage.segment_append import End, append_position, write_batch, write_batches
from .storage.segment_check import Rebuilt
from .storage.segment_file import LogFile, SegmentReplacedError
from .storage.segment_read import MAX_CHUNK as _MAX_CHUNK, MIN_CHUNK as _MIN_CHUNK, Continuation, LogBytes, ReadSlice
from .storage.segment_tail import TailRecord


__all__ = ["Segment", "ReadSlice", "SegmentReplacedError"]

log = logging.getLogger("pylog.segment")


#: The memo of verified batches (``Segment._verified``) holds at most one position per this many bytes of
#: the segment, and at least _VERIFIED_MIN: a few hundred KiB for a 1 GiB segment of 100 KiB batches
#: (all of them), and bounded for small batches, which cost little to check again.
_VERIFIED_BYTES = 64 * 1024
_VERIFIED_MIN = 1024


class Segment:
    """A segment of a partition; see the module docstring for what it guarantees."""

    def __init__(self, directory: str, base_offset: int, index_max_bytes: int, index_interval_bytes: int,
                 suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        #: "" for a live segment; ".cleaned" / ".swap" for the compactor's files in flight.
        self.suffix = suffix
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX + suffix)
        self.index_path = segment_path(directory, base_offset, INDEX_SUFFIX + suffix)
        self.timeindex_path = segment_path(directory, base_offset, TIMEINDEX_SUFFIX + suffix)
        #: The log file as readers hold it: inode and swap generation pinned, descriptor, mapping.
        self._file = LogFile(self.log_path)
        #: Made or opened by the partition's writer, under its lock (a partition may reuse it across views).
        self.trusted = False
        self.index_max_bytes = index_max_bytes
        self.index_interval_bytes = index_interval_bytes
        self.size = 0  # visible bytes
        self.next_offset = base_offset  # one past the last offset seen (valid once loaded)
        self._max_timestamp = -1
        self._first_timestamp: int | None = None  # max timestamp of the first batch (for segment.ms)
        self._bytes_since_index = 0
        self._wfd: int | None = None
        #: Disk blocks reserved ahead of this writer's appends once the log is fsynced while active.
        self._reservation = prealloc.Reservation()
        #: Batch starts of the open file whose checksum a read checked (see :meth:`verified`).
        self._verified: set[int] = set()
        #: A reader's batch of the active segment its last read ended in (dropped with the memo).
        self._cont = Continuation()
        self._immutable = False
        #: Size of the last batch read: sizes the next read's first chunk (see segment_read.read_from).
        self._batch_hint = _MIN_CHUNK
        #: The offset and time index (opened on first use).
        self._idx = SegmentIndexes(self.index_path, self.timeindex_path, base_offset, index_max_bytes)
        #: A reader's record of the batches it validated last (see :meth:`_read_at_tail`).
        self._tail = TailRecord()
        self._successor: tuple[int, str] = (-1, "")  # (next offset, its segment's log path): see successor_exists
        self._loaded = False  # next_offset / max timestamp known

    # ------------------------------------------------------------------ opening

    @classmethod
    def create(cls, directory: str, base_offset: int, index_max_bytes: int, index_interval_bytes: int,
               suffix: str = "") -> "Segment":
        """A new empty, writable segment (fails if its log file exists)."""
        seg = cls(directory, base_offset, index_max_bytes, index_interval_bytes, suffix)
        if os.path.exists(seg.log_path):
            raise FileExistsError(seg.log_path)
        # Indexes first: readers discover segments by their .log, and must find the indexes there too.
        seg._idx.create()
        seg._wfd = os.open(seg.log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        seg._file.ino = os.fstat(seg._wfd).st_ino
        seg._loaded = True
        seg.trusted = True  # only a writer creates segments
        return seg

    @classmethod
    def open(cls, directory: str, base_offset: int, index_max_bytes: int, index_interval_bytes: int,
             suffix: str = "", generation: tuple[str, int] | None = None) -> "Segment":
        """An existing segment, read-only and lazily loaded; its visible size is the file size.

        ``generation``: the partition checkpoint and the swap generation read *before* this call; the file
        is opened lazily, and if the generation has moved by then, compaction may have renamed another
        file over this name (an inode number alone can be reused), so the open raises
        :class:`SegmentReplacedError` instead of reading new bytes with old sizes.
        """
        seg = cls(directory, base_offset, index_max_bytes, index_interval_bytes, suffix)
        seg.generation = generation
        st = os.stat(seg.log_path)
        seg.size = st.st_size
        seg._file.ino = st.st_ino
        return seg

    @property
    def generation(self) -> tuple[str, int] | None:
        """(checkpoint path, swap generation) under which this object was sized; None: no check needed."""
        return self._file.generation

    @generation.setter
    def generation(self, value: tuple[str, int] | None) -> None:
        self._file.generation = value

    @property
    def holds_files(self) -> bool:
        """True while this object holds a descriptor, a mapping of the log or an index (each a descriptor)."""
        f = self._file
        return f.fd is not None or self._wfd is not None or f.mm is not None or self._idx.holds_files

    def without_files(self) -> "Segment":
        """A new object for the same file, knowing what this one knows (sizes, offsets, timestamps, the inode
        and swap generation it was sized under) but holding no descriptor, mapping or index: it opens them
        again on first use, and raises :class:`SegmentReplacedError` then if the file was replaced meanwhile.
        For a partition letting go of its files (:mod:`pylog.storage.handles`); this object is left as it
        is, for the reads still using it. Not for the writer's active segment (it must not be writable)."""
        assert self._wfd is None, "the writer's active segment keeps its files"
        seg = Segment(self.directory, self.base_offset, self.index_max_bytes, self.index_interval_bytes, self.suffix)
        seg._file.ino, seg.generation, seg.trusted = self._file.ino, self.generation, self.trusted
        seg.size, seg.next_offset, seg._loaded = self.size, self.next_offset, self._loaded
        seg._max_timestamp, seg._first_timestamp = self._max_timestamp, self._first_timestamp
        seg._batch_hint, seg._successor = self._batch_hint, self._successor
        seg._immutable = self._immutable
        return seg

    def same_file(self) -> bool:
        """True while the path still names the file this object was opened on (False when gone or replaced)."""
        return self._file.same_file()

    def successor_exists(self) -> bool:
        """True when a segment file named for this one's next offset exists: the writer rolled (a roll
        starts the new segment at the old one's next offset). False while this segment is empty."""
        offset = self.next_offset
        if offset == self.base_offset:
            return False
        known = self._successor
        if known[0] != offset:
            known = self._successor = (offset, segment_path(self.directory, offset, LOG_SUFFIX))
        return os.path.exists(known[1])

    def file_size(self) -> int:
        return self._file.file_size()

    @property
    def is_open(self) -> bool:
        """True once this object opened its log file for reading (it then pins the file's inode)."""
        return self._file.fd is not None

    @property
    def inode(self) -> int | None:
        """The log file's inode when this object opened or created it (None before it did)."""
        return self._file.ino

    @property
    def writable(self) -> bool:
        return self._wfd is not None

    @property
    def immutable(self) -> bool:
        """Set by the partition for every segment but the last: no byte below ``size`` will change."""
        return self._immutable

    @immutable.setter
    def immutable(self, value: bool) -> None:
        if self._immutable and not value and self._wfd is None:
            # Last again (a reader that saw the segments after it go, after a writer's recovery cut it):
            # another writer may append to it, or has cut and rewritten it.
            self.forget_verified()
        self._immutable = value

    # ------------------------------------------------------------------ verified batches

    def verified(self) -> set[int] | None:
        """The batch starts of this segment's open file whose CRC-32C a read has checked, for reads to skip
        checking again; None while bytes below the visible size may change (a reader's view of the active
        segment, which a new writer's recovery may cut and rewrite): then every read checks.

        Read once per read and used for all of it: a memo dropped meanwhile (see the module docstring) is
        a new set, so marks made through the old one vouch for nothing any more.
        """
        return self._verified if self._immutable or self._wfd is not None else None

    def forget_verified(self) -> None:
        """Drop the memo of checked batches (and a reader's batch kept for a continuing read): every read
        checks again until it has checked a batch anew."""
        self._verified = set()
        self._cont = Continuation()

    # ------------------------------------------------------------------ indexes

    def indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """This segment's offset and time indexes, loaded (or rebuilt from the log) on first use."""
        idx = self._idx
        oi, ti = idx.offsets, idx.times
        if idx.stale and oi is not None and ti is not None:
            # A reader whose log grew: the mappings stay while the files do (see SegmentIndexes.caught_up).
            oi, ti = idx.caught_up(self.size, self.next_offset - self.base_offset)
        if oi is None or ti is None:
            try:
                oi, ti = idx.open_files()
                self._validate_indexes(oi, ti)
            except IndexError_ as exc:
                log.warning("rebuilding indexes of %s in memory: %s", self.log_path, exc)
                oi, ti = self._build_indexes(self.size, verify=False)[:2]
            idx.offsets, idx.times = oi, ti
        return oi, ti

    def _validate_indexes(self, oi: OffsetIndex, ti: TimeIndex) -> None:
        """Cheap checks that the indexes' last entries point inside the visible log at a batch with that
        offset (see :func:`~pylog.storage.segment_check.index_problem`).

        A live (unsealed) index of another process's writer may run ahead of what this reader has
        checked; entries past the visible size are ignored rather than distrusted.

        :raises IndexError_: when they do not (the caller rebuilds them from the log).
        """
        if not oi.sealed and not oi.writable:
            oi.limit_to(max(self.size - HEADER_SIZE + 1, 0))
        problem = segment_check.index_problem(oi.last_entry(), ti.last_entry(), self.size, self.base_offset,
                                              self._file)
        if problem is not None:
            raise IndexError_(problem.reason, ti.path if problem.time_index else oi.path)

    def _build_indexes(self, end: int, verify: bool) -> tuple[OffsetIndex, TimeIndex, Rebuilt]:
        """Scan the log up to ``end`` and build in-memory indexes; stops at the first bad batch if verifying."""
        found = segment_check.build_indexes(self._log(), self.base_offset, end, verify, self.index_interval_bytes)
        oi, ti = self._idx.in_memory(found.offset_rels, found.offset_positions, found.time_stamps, found.time_rels,
                                     found.max_ts)
        return oi, ti, found

    # ------------------------------------------------------------------ scanning

    def _mapping(self) -> mmap.mmap | None:
        """A read-only mapping of the log (see :meth:`LogFile.mapping`), for immutable segments and for the
        writer's own active segment: only the writer ever shortens a log, and it unmaps first."""
        return self._file.mapping(self.size, self._immutable)

    def scan(self, pos: int, end: int, chunk: int | list[int], tolerate_tail: bool
             ) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """Every whole batch in [pos, end): ``(file position, header, buffer, position in buffer)``, each
        buffer holding its whole batch; ``chunk`` sizes the reads. With ``tolerate_tail`` a bad or incomplete
        batch at the end stops the scan, else it raises; see :func:`~pylog.storage.segment_read.scan`."""
        return segment_read.scan(self._log(), pos, end, chunk, tolerate_tail)

    def _log(self) -> LogBytes:
        """The log as the helpers read it: the read descriptor, and a mapping for immutable segments and
        the writer's own active one (whose size the scans check before reading the mapping: only another
        hand cuts it); a reader's view of the active segment reads with ``pread`` (see the module docstring)."""
        writer = self._wfd is not None
        mm = self._mapping() if self._immutable or writer else None
        return LogBytes(self._file.read_fd(), mm, self.log_path, writer and not self._immutable)

    def position_for(self, offset: int) -> tuple[int, int]:
        """``(position, base offset)`` of an indexed batch at or before the one holding ``offset``."""
        if offset <= self.base_offset:
            return 0, self.base_offset
        oi, _ = self.indexes()
        rel, pos = oi.lookup(min(offset - self.base_offset, 0xFFFFFFFF))
        return pos, self.base_offset + rel

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, max_records: int, max_bytes: int, end: int | None = None,
             verify: bool = True) -> tuple[list[ReadSlice], int]:
        """Batches holding records with offsets >= ``offset``, up to the limits: ``(slices, bytes)``, at
        least one batch if any exists, even past ``max_bytes``; ``end`` is the visible size to read up to
        (default: :attr:`size`). A reader (another process than the writer) reads its latest batches
        through the record its refreshes keep (:meth:`_read_at_tail`); everyone else starts at the index
        entry at or before ``offset``.

        :raises CorruptRecordError: when a batch in the visible range does not check.
        """
        end = self.size if end is None else end
        if self._wfd is None and not self._immutable:
            continued = self._read_continued(offset, max_records, max_bytes, end, verify)
            if continued is not None:
                return continued
        offs, poss = self._tail.lists
        if offs and offset >= offs[0] and self._tail.end >= end:
            result = self._read_at_tail(offs, poss, offset, max_records, max_bytes, end, verify)
            if result is not None:
                return result
        pos, expect = self.position_for(offset)
        try:
            result = self._read_from(pos, expect, offset, max_records, max_bytes, end, verify)
        except CorruptRecordError:
            # An index entry may point into the middle of a batch (an index file that belongs to another
            # version of this segment, swapped in by compaction). If every entry points at a batch start,
            # the log itself is damaged there: report it; otherwise rebuild the index and read again.
            if pos == 0 or self._index_matches_log():
                raise
            result = None
        if result is None:
            # The batch at the indexed position does not carry the offset the index names, and its
            # checksum holds: the index is wrong (derived data): rebuild it and scan from the segment start
            # rather than skip records silently.
            log.warning("%s: offset index entry for offset %d points at the wrong batch; rebuilding",
                        self.log_path, expect)
            self._rebuild_indexes()
            result = self._read_from(0, self.base_offset, offset, max_records, max_bytes, end, verify)
            assert result is not None
        return result

    def _read_at_tail(self, offs: list[int], poss: list[int], offset: int, max_records: int, max_bytes: int,
                      end: int, verify: bool) -> tuple[list[ReadSlice], int] | None:
        """:meth:`read` for a reader from the batch start it recorded at or before ``offset``: the batches
        its last refresh kept as they are, then from the file (see
        :meth:`~pylog.storage.segment_tail.TailRecord.serve`). The record covers every batch up to
        ``_tail.end`` (>= ``end``, checked by the caller). None when the file does not have the recorded
        batch at the recorded position any more (it changed under this reader, which only a power loss
        or a foreign hand does): the record is dropped and the caller reads through the index."""
        out, nbytes, got, i = self._tail.serve(offs, poss, offset, max_records, max_bytes, end)
        if i < 0:
            return out, nbytes
        pos, expect = poss[i], offs[i]
        try:
            result = self._read_from(pos, expect, offset, max_records - got, max(max_bytes - nbytes, 1), end, verify)
        except CorruptRecordError:
            result = None
        if result is None:
            log.warning("%s: the batch recorded at byte %d for offset %d is not there any more; reading "
                        "through the index", self.log_path, pos, expect)
            self._tail.forget()
            return None if not out else (out, nbytes)
        return out + result[0], nbytes + result[1]

    def _read_continued(self, offset: int, max_records: int, max_bytes: int, end: int,
                        verify: bool) -> tuple[list[ReadSlice], int] | None:
        """:meth:`read` for a reader continuing where its last read stopped inside a batch: the rest of that
        batch as the last read checked it (:class:`~pylog.storage.segment_read.Continuation`), then the
        batches after it from the file; None when ``offset`` does not continue the kept batch."""
        got = self._cont.serve(offset, max_records, end)
        if got is None:
            return None
        first, pos, size = got
        out, nbytes, n = [first], size, first[2] - first[1]
        if n >= max_records or nbytes >= max_bytes or pos >= end:
            return out, nbytes
        h = first[0].header
        nxt = h[0] + h[5] + 1
        try:
            rest = self._read_from(pos, nxt, nxt, max_records - n, max_bytes - nbytes, end, verify)
        except CorruptRecordError:
            return out, nbytes  # the records before the damage; the next read starts there and raises
        return (out, nbytes) if rest is None else (out + rest[0], nbytes + rest[1])

    def _read_from(self, pos: int, expect: int, offset: int, max_records: int, max_bytes: int, end: int,
                   verify: bool) -> tuple[list[ReadSlice], int] | None:
        """:func:`~pylog.storage.segment_read.read_from` with this segment's memo of verified batches (taken
        once, before any byte is looked at: a memo dropped during the read is not written to) and read size
        hint; None when another batch than the one with base offset ``expect`` is at ``pos``."""
        memo = self.verified() if verify else None
        room = max(_VERIFIED_MIN, self.size // _VERIFIED_BYTES)  # the memo's bound (see _VERIFIED_BYTES)
        lb = self._log()
        cont = self._cont if lb.mm is None and self._wfd is None and not self._immutable else None
        if cont is not None:
            cont.slot = None  # this read stops elsewhere, or keeps its own batch (see Continuation)
        result = segment_read.read_from(lb, pos, expect, offset, max_records, max_bytes, end, verify, memo,
                                        room, min(self._batch_hint, max_bytes), cont)
        if result is None:
            return None
        out, nbytes, self._batch_hint = result
        return out, nbytes

    def _index_matches_log(self) -> bool:
        """True when every offset index entry points at a batch start (a header walk; a damaged header
        raises). An entry at a batch start naming another offset is left to :meth:`_read_from`, which
        tells a wrong index (the batch checks) from a damaged batch."""
        oi, _ = self.indexes()
        starts = {fpos for fpos, _ in self.batch_headers()}
        return all(p in starts for p in oi.entries()[1].tolist())

    def offset_for_timestamp(self, timestamp: int, end: int | None = None, min_offset: int = 0) -> int | None:
        """First offset >= ``min_offset`` in this segment whose record timestamp is >= ``timestamp``, or None."""
        end = self.size if end is None else end
        oi, ti = self.indexes()
        rel = ti.lookup(timestamp)
        pos = oi.lookup(rel)[1]
        start = max(self.base_offset + rel, min_offset)
        return segment_read.offset_for_timestamp(self._log(), pos, start, timestamp, end)

    def _rebuild_indexes(self) -> None:
        """Rebuild both indexes from the log up to the visible size, when one was found wrong (derived
        data): written back by the writer, kept in memory by a reader."""
        if self.writable:
            self._write_rebuilt_indexes(self.size)
        else:
            self._idx.offsets, self._idx.times = self._build_indexes(self.size, verify=False)[:2]

    def batch_headers(self, end: int | None = None, tolerate_tail: bool = False,
                      start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch from byte ``start`` (a batch's position) up to ``end``."""
        end = self.size if end is None else end
        for fpos, h, _, _ in self.scan(start, end, _MAX_CHUNK, tolerate_tail):
            yield fpos, h

    # ------------------------------------------------------------------ state

    def load(self, tolerate_tail: bool) -> None:
        """Learn ``next_offset``, the max timestamp and the visible ``size`` from the log's tail.

        Scans from the last index entry. With ``tolerate_tail`` (a reader) an incomplete or unchecked
        last batch just ends the visible part; otherwise it raises :class:`CorruptRecordError`.
        """
        end = self.file_size()
        last = None
        if not self.writable:
            # Whatever this reader mapped before may describe a log that recovery has cut and rewritten
            # since (recovery rewrites the indexes, so their inodes tell).
            self._idx.stale = True
        try:
            oi, ti = self.indexes()
            last = oi.last_entry()
            tl = ti.last_entry()
            if ti.sealed and ti.max_timestamp >= 0:
                # A sealed time index knows the segment's max timestamp: scan only past the last offset entry.
                rel, pos = last if last is not None else (0, 0)
                max_ts = ti.max_timestamp
            else:
                # Otherwise the max timestamp of the batches after the last time entry must be seen too.
                rel, pos = oi.lookup(tl[1] if tl is not None else 0)
                max_ts = tl[0] if tl is not None else -1
        except CorruptRecordError:
            rel, pos, max_ts = 0, 0, -1
        # The batch at pos starts at base + rel: that is the next offset even when no whole batch follows
        # it (a reader of a torn tail), not the segment's base offset.
        next_offset, max_ts, valid_end, since, offs, poss = segment_check.walk_end(
            self._log(), pos, end, tolerate_tail, self.base_offset + rel, max_ts, last[1] if last is not None else -1)
        if pos == 0 and valid_end == 0:
            next_offset = self.base_offset
        self.size = valid_end
        self.next_offset = max(next_offset, self.next_offset)
        self._max_timestamp = max_ts
        self._bytes_since_index = since
        self._loaded = True
        if tolerate_tail:  # a reader: it refreshes the record as the log grows (the writer does not)
            self._tail.start(offs, poss, valid_end)
        if not self.writable:
            # A reader validated a live index against the file size; entries past the whole batches (a
            # torn tail after a power loss: the index page was written back, the log page was not) are
            # not visible yet, and would make check() and lookups point past the visible log.
            self._idx.limit_live(valid_end, self.next_offset - self.base_offset)

    def refresh(self) -> bool:
        """For readers in another process than the writer: take in batches appended since the last look.

        Each new batch is read once and checked whole (CRC, sections) before it counts; it is recorded
        for reads at the log end (see :attr:`tail`). A log that got shorter, or whose next batch
        does not continue at this reader's next offset, was cut (and maybe rewritten) under the reader:
        it starts over from the indexes. Returns True when the visible size grew.
        """
        if self.writable:
            return False
        end = self.file_size()
        if end < self.size:
            # The log got shorter under us (a new writer's recovery cut a tail this reader had not yet
            # validated, e.g. after a power loss on a shared filesystem): start over from the indexes.
            self._start_over(end)
            return False
        if end == self.size:
            return False
        taken = self._tail.take_in(self._log(), self.size, end, self.next_offset)
        if taken is None:
            # A batch that does not continue what this reader has seen: the file was cut and written again
            # under it (as in the branch above, but regrown past the old size before this look).
            self._start_over(end)
            return False
        size, next_offset, max_ts = taken
        if size == self.size:
            return False
        # Size before next offset: a reader that sees the new log end must also find its bytes visible.
        self.size = size
        self.next_offset = next_offset
        self._max_timestamp = max(self._max_timestamp, max_ts)
        # The writer appended index entries, or replaced the files (sealed them at a roll, re-grew them
        # after reopening): the next lookup looks (see SegmentIndexes.caught_up).
        self._idx.stale = True
        return True

    def _start_over(self, end: int) -> None:
        """A reader whose log is no longer what it checked: forget the record of its end and its
        indexes, and load again from the indexes up to ``end``."""
        self._idx.drop(force=True)
        self._file.mm = None  # dropped, not closed: another thread may be scanning it
        self.forget_verified()
        self._tail.forget()
        self.size = end
        self.next_offset = self.base_offset
        self.load(tolerate_tail=True)

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp in the segment (-1 when empty)."""
        if not self._loaded:
            _, ti = self.indexes()
            if ti.sealed and ti.max_timestamp >= 0:
                return ti.max_timestamp
            self.load(tolerate_tail=not self.writable)
        return self._max_timestamp

    @property
    def first_timestamp(self) -> int | None:
        """Max timestamp of the first batch (Kafka rolls segment.ms from it), None when empty."""
        if self._first_timestamp is None and self.size >= HEADER_SIZE:
            h = parse_header(os.pread(self._file.read_fd(), HEADER_SIZE, 0))
            check_header(h, self.log_path, 0)
            self._first_timestamp = h.max_timestamp
        return self._first_timestamp

    @property
    def index_full(self) -> bool:
        oi, ti = self.indexes()
        return oi.is_full or ti.is_full

    def index_room(self) -> int:
        """How many more entries both indexes take."""
        oi, ti = self.indexes()
        return min(oi.capacity - oi.count, ti.capacity - ti.count)

    # ------------------------------------------------------------------ writing (writer lock held)

    def open_for_append(self) -> None:
        """Make a clean, loaded segment writable again (after reopening the store)."""
        if self._wfd is not None:
            return
        # Load through the sealed indexes first: their header holds the max timestamp, so only the bytes
        # after the last offset entry are scanned (a re-grown index no longer carries it).
        self.load(tolerate_tail=False)
        self.forget_verified()  # checked while another writer could have cut the file, or never: start afresh
        try:
            self._validate_indexes(*self._idx.open_writable())
        except IndexError_ as exc:
            log.warning("rebuilding indexes of %s: %s", self.log_path, exc)
            self._write_rebuilt_indexes(self.size)
        self._wfd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._reservation.off()

    def _write_rebuilt_indexes(self, end: int, verify: bool = False) -> Rebuilt:
        self._idx.close()
        oi, ti, state = self._build_indexes(end, verify)
        self._idx.write_live(oi, ti)
        return state

    def recover(self) -> int:
        """Validate every batch (length, magic, CRC, sections, increasing offsets), truncate any torn or
        corrupt tail, rebuild both indexes, and make the segment writable.

        :return: the number of bytes dropped from the tail (0 for an intact segment).
        """
        self.close()
        file_size = os.stat(self.log_path).st_size
        self.size = file_size
        state = self._write_rebuilt_indexes(file_size, verify=True)
        valid_end = state.valid_end
        dropped = file_size - valid_end
        if dropped:
            err = state.error
            log.warning("recovery of %s: dropping %d bytes after byte %d (%s)", self.log_path, dropped, valid_end,
                        err.reason if err is not None else "torn tail")
            truncate_durably(self.log_path, valid_end)
        self.size = valid_end
        self.next_offset = state.next_offset
        self._max_timestamp = state.max_ts
        self._bytes_since_index = state.since
        self._first_timestamp = state.first_ts
        self._loaded = True
        self._wfd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._reservation.off()
        return dropped

    def append(self, header: BatchHeader, parts: Sequence[Data], max_timestamp: int) -> int:
        """Write one encoded batch at the end; index it; return its position (see
        :func:`~pylog.storage.segment_append.write_batch`).

        On a failed write the file is cut back to its previous size and the error re-raised.
        :raises CorruptRecordError: when the file is not the size this writer left it (cut or written by
            another hand); nothing is written.
        """
        fd, pos = append_position(self._wfd, self.size, self.log_path)
        self._reservation.before_write(fd, pos, header.size)
        self._appended(write_batch(fd, header, parts, max_timestamp, self._end(), self._idx.offsets,
                                   self._idx.times, self.base_offset, self.index_interval_bytes), header)
        return pos

    def append_batches(self, headers: Sequence[BatchHeader], parts: Sequence[Data]) -> None:
        """Write consecutive encoded batches (``parts``: all their bytes, in order) at the end, a ``writev``
        per :data:`~pylog.storage.segment_append.WRITE_CHUNK` bytes; index each as :meth:`append` would have,
        one after the other (see :func:`~pylog.storage.segment_append.write_batches`).

        On a failed write the file is cut back to its previous size (none of them written) and the error
        re-raised. :raises CorruptRecordError: as :meth:`append`.
        """
        fd, pos = append_position(self._wfd, self.size, self.log_path)
        self._reservation.before_write(fd, pos, sum(h.size for h in headers))
        self._appended(write_batches(fd, headers, parts, self._end(), self._idx.offsets, self._idx.times,
                                     self.base_offset, self.index_interval_bytes), headers[-1])

    def _end(self) -> End:
        return End(self.size, self._bytes_since_index, self._max_timestamp, self._first_timestamp)

    def _appended(self, end: End, last: BatchHeader) -> None:
        """Take in the state after an append whose last batch is ``last``."""
        self._bytes_since_index = end.since
        self._first_timestamp, self._max_timestamp = end.first_ts, end.max_ts
        # Size before next offset: a reader that sees the new log end must also find its bytes visible.
        self.size = end.size
        self.next_offset = last.next_offset

    def flush(self) -> None:
        """fsync the log (indexes are derived data and rebuilt after a crash)."""
        if self._wfd is not None:
            os.fdatasync(self._wfd)
            self._reservation.arm()  # made durable while active: its appends reserve blocks ahead from now on

    def sync_descriptor(self) -> int | None:
        """A new descriptor of the log being appended to (None when it is not), for an fdatasync run without
        the partition's lock; the caller closes it. It stays valid whatever happens to the segment meanwhile
        (a roll, a close, retention unlinking the file)."""
        if self._wfd is None:
            return None
        self._reservation.arm()  # as in flush()
        return os.dup(self._wfd)

    def seal(self, durable: bool = True) -> None:
        """Finish the segment: fsync the log, write trimmed checksummed indexes, close for writing."""
        if self._wfd is None:
            return
        self._reservation.give_back(self._wfd, self.size)  # before the fsync: sealed, it holds no more
        if durable:
            os.fdatasync(self._wfd)
        os.close(self._wfd)
        self._wfd = None
        self._idx.seal(self._max_timestamp, durable)

    def sync_files(self) -> bool:
        """fsync the log and index files by name (for a segment sealed without ``durable``), from any
        thread; the caller fsyncs the directory. False when the segment's files are gone (deleted by
        retention, or the partition with them): nothing is left to make durable."""
        return fsync_files((self.log_path, self.index_path, self.timeindex_path))

    def first_damage(self, start: int = 0, start_offset: int | None = None) -> CorruptRecordError | None:
        """The first batch in ``[start, size)`` whose header, checksum or offset order does not check, as
        the error a read of it raises; None when every batch there checks (a writer's check of the active
        segment after a clean close; see :func:`~pylog.storage.segment_check.first_damage`)."""
        end = self.size
        if start == end or end == 0:  # nothing to check (and no file to open for it)
            return None
        return segment_check.first_damage(self._log(), self._mapping(), self.base_offset, end, start, start_offset)

    def damage_is_at_tail(self) -> bool:
        """True when what follows the file's valid batches looks like an interrupted write, and nothing
        else (see :func:`~pylog.storage.segment_check.damage_is_at_tail`): recovery may cut it."""
        return segment_check.damage_is_at_tail(self._log())

    def stop_appending(self) -> None:
        """Close the log for writing but leave the indexes live (unsealed, preallocated), as a writer leaves
        them while it runs: for a partition handed to another writer, which continues them as they are.

        Sealing instead would rewrite both index files (and the next writer would re-grow them), renames
        that make the filesystem start writing the new files back, so the first touch of their mappings
        waits for the disk. Nothing is fsynced here.
        """
        if self._wfd is None:
            return
        # Before the lock goes: the next writer may cut this file (recovery) and write other batches there.
        self.forget_verified()
        os.close(self._wfd)
        self._wfd = None
        self._idx.stop_writing()  # this object's readers may keep using the mappings; nobody appends

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Release file descriptors and mappings (a writable segment is NOT sealed; see :meth:`seal`)."""
        self._tail.recent = {}
        self.forget_verified()  # the memo is the open file's: the next open may find another file or bytes
        wfd, self._wfd = self._wfd, None
        if wfd is not None:
            os.close(wfd)
        self._idx.close()
        self._file.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release properly
            pass

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.close()
        self.unlink()

    def unlink(self) -> None:
        """Remove the segment's files (log first: readers discover segments by it) without closing.

        Retention and compaction use this while other threads may still be reading through this object:
        its descriptors and mappings stay valid (POSIX keeps unlinked files readable) and are released
        when the last snapshot holding it goes.
        """
        for path in (self.log_path, self.index_path, self.timeindex_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def cut_below_index(self) -> str | None:
        """A problem when the log file is shorter than its offset index file says it was written (see
        :func:`~pylog.storage.segment_check.cut_below_index`), else None."""
        # Unmapped: the check reads the file's size, never its bytes.
        lb = LogBytes(self._file.read_fd(), None, self.log_path, False)
        # The index file as it is on disk, not as a reader rebuilt it in memory; a damaged one is reported
        # (and repaired) as such.
        last = self._idx.last_offset_entry_on_disk()
        return segment_check.cut_below_index(lb, self.base_offset, self.index_path, last)

    def check(self, end: int | None = None, partial_tail_ok: bool = False) -> list[str]:
        """Full consistency check of the bytes up to ``end`` (default: the visible size): every batch
        validates, offsets increase, index entries point at batches with their offsets. Returns a list of
        problems (empty when consistent); see :func:`~pylog.storage.segment_check.check`."""
        lb = self._log()
        try:
            entries, index_error = self.indexes()[0].entries(), ""
        except CorruptRecordError as exc:
            entries, index_error = None, str(exc)
        return segment_check.check(lb, self.base_offset, self.size if end is None else end, partial_tail_ok, entries,
                                   self.index_path, index_error, self.next_offset if self.writable else None)

    def __repr__(self) -> str:
        return f"Segment({self.log_path!r}, size={self.size})"
