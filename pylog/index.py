"""Sparse, mmap-backed indexes of one segment: :class:`OffsetIndex` and :class:`TimeIndex`.

File layout (little-endian)::

    off size field
      0   4  magic         b"PLXO" (offset index) or b"PLXT" (time index)
      4   2  version       1
      6   2  flags         bit 0: sealed (count and entries_crc are valid)
      8   8  base_offset   the segment's base offset
     16   4  capacity      number of entry slots in the file
     20   4  count         entries in use (sealed files only; live files derive it, see below)
     24   4  entries_crc   CRC-32C of the used entries of column A then column B (sealed only)
     28   8  max_timestamp the segment's largest timestamp (time index, sealed only)
     36  24  reserved      zero
     60   4  header_crc    CRC-32C of bytes [0, 60)
     64      column A      capacity entries: OffsetIndex relative offset u32 / TimeIndex timestamp i64
       ...   column B      capacity entries: OffsetIndex file position u32 / TimeIndex relative offset u32

Each column is one contiguous numpy array over the mmap, so a lookup is one ``numpy.searchsorted``.

Invariants:
- Entries are strictly increasing in column A; an offset entry (rel, pos) means the batch whose base
  offset is ``base + rel`` starts at byte ``pos``; a time entry (T, rel) means every record before the
  batch at ``rel`` has a timestamp <= T. No entry is written for position 0 (the segment start needs
  none), so column B is non-zero for every used slot and zero for every free one: a reader in another
  process can count live entries without the writer's help.
- A file is never shrunk or rewritten in place: trimming (sealing) and re-growing write a new file and
  rename it over the old, so a reader's existing mmap stays valid (no SIGBUS) and sees the old inode.
- Indexes are derived data: :class:`IndexError_` from a failed sanity check means "rebuild from the log";
  the segment above does that.

Indexes know nothing about records; they map numbers to numbers. :class:`SegmentIndexes` holds one segment's
pair through its life (created, opened, caught up, rebuilt, sealed, dropped, closed); what goes into them, and
whether they fit the log, is the segment's to decide.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
import sys
from typing import Any, Self, TypeVar

import numpy as np

from .errors import CorruptRecordError
from .storage.fileio import fsync_dir, write_all
from .storage.filenames import TMP_SUFFIX
from .storage.records import crc32c

__all__ = ["OffsetIndex", "TimeIndex", "IndexError_", "SegmentIndexes"]

_HEADER = struct.Struct("<4sHHqIIIq24x")
_NATIVE_LITTLE = sys.byteorder == "little"
_HEADER_SIZE = 64
_CRC_AT = 60
_VERSION = 1
_SEALED = 1
#: Above any column B value (file positions, relative offsets): _prefix_end with no limit.
_NO_LIMIT = 1 << 32  # column B is uint32


class IndexError_(CorruptRecordError):
    """An index file failed its sanity check; callers rebuild it from the log."""


class _Index:
    """Shared machinery: mmap, header, append, search, seal. Subclasses set the column types."""

    MAGIC = b""
    A: np.dtype[Any] = np.dtype("<u4")
    B: np.dtype[Any] = np.dtype("<u4")

    def __init__(self, path: str, base_offset: int, mm: mmap.mmap | None, capacity: int, count: int,
                 sealed: bool, max_timestamp: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.capacity = capacity
        self.sealed = sealed
        self.max_timestamp = max_timestamp
        self.writable = writable
        #: Inode of the file this object maps (None in memory): files are replaced by rename, never in
        #: place, so a reader compares it with the name's inode to learn whether its mapping is current.
        self.ino: int | None = None
        self._mm = mm
        #: Start of the page of column A and of column B that reserve_next last gave blocks to in this
        #: mapping: when the count stops growing (a time index whose timestamps stop increasing), the
        #: next entry's page is reserved once, not on every append that finds an entry due.
        self._reserved = [-1, -1]
        if mm is not None:
            self._set_columns(np.frombuffer(mm, self.A, capacity, _HEADER_SIZE),
                              np.frombuffer(mm, self.B, capacity, _HEADER_SIZE + capacity * self.A.itemsize))
        else:
            self._set_columns(np.empty(0, self.A), np.empty(0, self.B))
        self.count = count

    def _set_columns(self, a: np.ndarray, b: np.ndarray) -> None:
        """Install the entry columns, and memoryviews of them for lookups: ``bisect`` on a memoryview
        costs well under a microsecond where ``numpy.searchsorted`` on a slice costs several."""
        self._a = a
        self._b = b
        if _NATIVE_LITTLE:
            self._av: Any = a.data  # a memoryview of the array
            self._bv: Any = b.data
        else:  # the file is little-endian: let numpy swap, at numpy's speed
            self._av = a
            self._bv = b

    @classmethod
    def in_memory(cls, path: str, base_offset: int, a: np.ndarray, b: np.ndarray, max_timestamp: int = -1) -> Self:
        """An index held only in memory (a reader's rebuild of a damaged file); read-only."""
        # Not "sealed": a reader drops it like a live index when the segment grows, and looks again.
        idx = cls(path, base_offset, None, 0, 0, False, max_timestamp, False)
        idx._set_columns(np.ascontiguousarray(a, cls.A), np.ascontiguousarray(b, cls.B))
        idx.count = idx.capacity = len(a)
        return idx

    # ------------------------------------------------------------------ sizes and files

    @classmethod
    def entry_size(cls) -> int:
        return cls.A.itemsize + cls.B.itemsize

    @classmethod
    def capacity_for(cls, max_bytes: int) -> int:
        return max(1, (max_bytes - _HEADER_SIZE) // cls.entry_size())

    @classmethod
    def _file_bytes(cls, capacity: int) -> int:
        return _HEADER_SIZE + capacity * cls.entry_size()

    @classmethod
    def _header(cls, base_offset: int, capacity: int, count: int, sealed: bool, entries_crc: int,
                max_timestamp: int) -> bytes:
        raw = bytearray(_HEADER.pack(cls.MAGIC, _VERSION, _SEALED if sealed else 0, base_offset, capacity, count,
                                     entries_crc, max_timestamp) + bytes(4))
        struct.pack_into("<I", raw, _CRC_AT, crc32c(memoryview(raw)[:_CRC_AT]))
        return bytes(raw)

    @classmethod
    def write_file(cls, path: str, base_offset: int, a: np.ndarray, b: np.ndarray, capacity: int,
                   sealed: bool, max_timestamp: int = -1, durable: bool = False) -> None:
        """Write an index file with entries ``a``/``b`` via a temp file and rename (never in place)."""
        count = len(a)
        capacity = max(capacity, count, 1)
        a = np.ascontiguousarray(a, cls.A)
        b = np.ascontiguousarray(b, cls.B)
        crc = crc32c(b.tobytes(), crc32c(a.tobytes())) if sealed else 0
        pad_a = (capacity - count) * cls.A.itemsize
        tmp = path + TMP_SUFFIX
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, [cls._header(base_offset, capacity, count, sealed, crc, max_timestamp), a.tobytes()])
            os.lseek(fd, pad_a, os.SEEK_CUR)
            write_all(fd, [b.tobytes()])
            os.ftruncate(fd, cls._file_bytes(capacity))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if durable:
            fsync_dir(os.path.dirname(path))

    @classmethod
    def create(cls, path: str, base_offset: int, max_bytes: int) -> Self:
        """A new, empty, writable index preallocated to ``max_bytes``."""
        cls.write_file(path, base_offset, np.empty(0, cls.A), np.empty(0, cls.B), cls.capacity_for(max_bytes),
                       sealed=False)
        return cls.open(path, base_offset, writable=True)

    @classmethod
    def open(cls, path: str, base_offset: int, writable: bool = False) -> Self:
        """Open and sanity-check an index file.

        Only an unsealed (live) file opens writable; :func:`open_writable` re-grows a sealed one.
        :raises IndexError_: when the file is missing or fails any check (the caller rebuilds it).
        """
        try:
            fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise IndexError_("index file missing", path) from None
        try:
            st = os.fstat(fd)
            size, ino = st.st_size, st.st_ino
            head = os.pread(fd, _HEADER_SIZE, 0)
            if len(head) < _HEADER_SIZE:
                raise IndexError_("index header truncated", path, 0)
            magic, version, flags, base, capacity, count, entries_crc, max_ts = _HEADER.unpack_from(head)
            if magic != cls.MAGIC or version != _VERSION:
                raise IndexError_(f"bad index magic/version {magic!r}/{version}", path, 0)
            if struct.unpack_from("<I", head, _CRC_AT)[0] != crc32c(head[:_CRC_AT]):
                raise IndexError_("index header checksum mismatch", path, 0)
            if base != base_offset:
                raise IndexError_(f"index base offset {base} != segment base {base_offset}", path, 8)
            if capacity < 1 or size != cls._file_bytes(capacity) or count > capacity:
                raise IndexError_(f"index size {size} does not match capacity {capacity}", path, 16)
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        finally:
            os.close(fd)
        sealed = bool(flags & _SEALED)
        if not sealed:
            # A live file is mostly a preallocated hole. By default the first fault in it reads around
            # (zero-fills) a whole readahead window: ~3 ms per new index, on every roll. Lookups and
            # appends touch single pages anyway.
            mm.madvise(mmap.MADV_RANDOM)
        idx = cls(path, base_offset, mm, capacity, count, sealed, max_ts, writable=False)
        idx.ino = ino
        if sealed:
            if crc32c(idx._b[:count].tobytes(), crc32c(idx._a[:count].tobytes())) != entries_crc:
                idx.close()
                raise IndexError_("index entries checksum mismatch", path, _HEADER_SIZE)
        else:
            idx.count = idx._live_count(count)
        idx._check_sorted()
        if writable:
            if sealed:
                idx.close()
                raise ValueError(f"{path} is sealed: open it with open_writable")
            idx.writable = True
        return idx

    def _live_count(self, known: int = 0) -> int:
        """Entries in use in an unsealed file: column B is non-zero exactly for used slots.

        ``known`` slots are known to be used (the header's count, written with the file: entries are never
        removed in place). The search gallops forward from there, so it touches the pages at the end of
        the used part, not a bisection's worth spread over the whole preallocated (mostly unwritten) file.
        """
        lo = min(max(known, 0), self.capacity)
        if lo and not self._bv[lo - 1]:
            lo = 0  # a count the slots do not bear out: search the whole prefix
        return self._prefix_end(lo, _NO_LIMIT)

    def _prefix_end(self, lo: int, limit: int) -> int:
        """The first slot at or after ``lo`` that is free (column B zero) or whose column B is at or above
        ``limit``, knowing every slot below ``lo`` is neither (used slots are a prefix, B never decreases).

        Gallops forward from ``lo``, then bisects, so only the pages at the end of the used part are
        touched, not a bisection's worth spread over the whole preallocated (mostly unwritten) file.
        """
        b = self._bv
        cap = self.capacity
        if lo >= cap or not b[lo] or b[lo] >= limit:
            return lo
        step = 1
        hi = lo + 1
        while hi < cap and b[hi] and b[hi] < limit:
            lo = hi
            step *= 2
            hi = min(lo + step, cap)
        lo += 1
        while lo < hi:
            mid = (lo + hi) // 2
            if b[mid] and b[mid] < limit:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def take_in_appended(self, limit: int) -> int:
        """A reader's live (unsealed) mapping of another process's index: count the entries appended since
        the last look whose column B is below ``limit`` (the reader's visible size for an offset index,
        its next relative offset for a time index). Returns the new count.

        Searches forward from the current count (see :meth:`_prefix_end`). The count never moves back here:
        entries are never removed from a file in place (see the module docstring).
        """
        if self.sealed or self.writable:
            return self.count
        self.count = self._prefix_end(self.count, limit)  # every slot below the count is used and below limit
        return self.count

    def _check_sorted(self) -> None:
        a = self._a[:self.count]
        b = self._b[:self.count]
        if self.count > 1 and not ((a[1:] > a[:-1]).all() and (b[1:] >= b[:-1]).all()):
            self.close()
            raise IndexError_("index entries are not in order", self.path, _HEADER_SIZE)

    # ------------------------------------------------------------------ entries

    @property
    def is_full(self) -> bool:
        return self.count >= self.capacity

    def last_entry(self) -> tuple[int, int] | None:
        if self.count == 0:
            return None
        return self._av[self.count - 1], self._bv[self.count - 1]

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the used entries (columns A and B)."""
        return self._a[:self.count].copy(), self._b[:self.count].copy()

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """The used entries (columns A and B) as views, not copies: valid while the index is open (for
        writing them to a file, e.g. with :meth:`write_file`; :meth:`entries` gives copies to keep)."""
        return self._a[:self.count], self._b[:self.count]

    def limit_to(self, limit: int) -> int:
        """Forget, in this object only, the used entries whose column B is at or above ``limit`` (column B
        never decreases): a reader's live mapping of another process's index may run ahead of the log the
        reader has checked (offset index: B is a position; time index: a relative offset). The file is
        not touched. Returns the new count."""
        self.count = int(np.searchsorted(self._b[:self.count], limit, "left"))
        return self.count

    def _append(self, a: int, b: int) -> None:
        if not self.writable:
            raise ValueError("index opened read-only")
        if self.count >= self.capacity:
            raise ValueError("index is full")
        if b <= 0:
            raise ValueError("column B must be positive")
        if self.count and a <= self._av[self.count - 1]:
            raise ValueError(f"index entry {a} not above the last one {self._av[self.count - 1]}")
        # B last: a concurrent reader counts the entry only once B is non-zero.
        self._a[self.count] = a
        self._b[self.count] = b
        self.count += 1

    def reserve_next(self, ahead: int = 1) -> None:
        """Give the file blocks for the next entry now when it is the first of its column or of a page
        (with ``ahead``, for the next ``ahead`` entries: those of a writer's several batches written at once).

        A live file is mostly a preallocated hole, and storing into a mapped page that has no blocks on a
        full file system kills the process with SIGBUS; ``posix_fallocate`` of that page raises OSError
        (``ENOSPC``) instead, which the writer calls before it writes the batch, so a full disk fails the
        append cleanly. A system call per page of entries (1024 of them at most), none otherwise: a page
        once reserved is not reserved again through this mapping, however often its first entry is due
        without being written (a time index skips timestamps that do not increase).

        This holds where a page that has blocks can be written without allocating more (ext4, XFS, tmpfs):
        on a copy-on-write file system (btrfs, ZFS) rewriting an allocated page may need new space, and a
        full disk can still fault a store into the mapping there.
        """
        mm, n = self._mm, self.count
        if mm is None or not self.writable or n >= self.capacity:
            return
        a, b = self.A.itemsize, self.B.itemsize
        page = mmap.PAGESIZE
        last = min(n + ahead, self.capacity) - 1
        if last == n and n and (_HEADER_SIZE + n * a) % page >= a and \
                (_HEADER_SIZE + self.capacity * a + n * b) % page >= b:
            return  # neither entry starts a page (the common case: this runs for every indexed batch)
        pages = []
        for col, column_start, size in ((0, _HEADER_SIZE, a), (1, _HEADER_SIZE + self.capacity * a, b)):
            lo, hi = column_start + n * size, column_start + last * size
            # The page of entry n when that entry starts it (or starts the column), and every page an entry
            # after it starts; pages before were reserved when their first entry was due.
            first = lo - lo % page if n == 0 or lo % page < size else lo - lo % page + page
            pages += [(col, start) for start in range(first, hi - hi % page + 1, page)]
        pages = [(col, start) for col, start in pages if self._reserved[col] != start]
        if not pages:
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            for col, start in pages:
                os.posix_fallocate(fd, start, min(mmap.PAGESIZE, len(mm) - start))  # never past the end
                self._reserved[col] = start  # only once it has its blocks: a failure is tried again
        finally:
            os.close(fd)

    def seal(self, max_timestamp: int = -1, durable: bool = True) -> Self:
        """Write a trimmed, checksummed copy and return it opened read-only.

        This object is left as it is, not closed: a reader thread may be searching it right now, and its
        mapping of the replaced file stays valid until the last reference goes.
        """
        a, b = self.entries()
        self.writable = False
        self.write_file(self.path, self.base_offset, a, b, len(a), sealed=True, max_timestamp=max_timestamp,
                        durable=durable)
        return type(self).open(self.path, self.base_offset)

    def flush(self) -> None:
        if self._mm is not None and self.writable:
            self._mm.flush()

    def close(self) -> None:
        mm, self._mm = self._mm, None
        for view in (self._av, self._bv):
            if isinstance(view, memoryview):
                view.release()
        self._set_columns(np.empty(0, self.A), np.empty(0, self.B))
        self.count = 0
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes when that view does

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, count={self.count}, capacity={self.capacity})"


_I = TypeVar("_I", bound=_Index)


def open_writable(cls: type[_I], path: str, base_offset: int, max_bytes: int) -> _I:
    """Open an index for appending, re-growing a sealed (trimmed) file to ``max_bytes`` first.

    The re-grown file is written anew and renamed over the sealed one, so readers keep their view of it.
    """
    current = cls.open(path, base_offset)
    if current.sealed:
        a, b = current.entries()
        current.close()
        cls.write_file(path, base_offset, a, b, cls.capacity_for(max_bytes), sealed=False)
    else:
        current.close()
    return cls.open(path, base_offset, writable=True)


class OffsetIndex(_Index):
    """Relative offset (u32) -> file position (u32) of a batch start."""

    MAGIC = b"PLXO"
    A: np.dtype[Any] = np.dtype("<u4")
    B: np.dtype[Any] = np.dtype("<u4")

    def append(self, relative_offset: int, position: int) -> None:
        """Add an entry; offsets and positions must exceed the last entry's. Caller holds the writer lock."""
        if self.count and position <= self._bv[self.count - 1]:
            raise ValueError("index positions must increase")
        self._append(relative_offset, position)

    def lookup(self, relative_offset: int) -> tuple[int, int]:
        """The greatest entry with relative offset <= ``relative_offset`` as (rel, position); (0, 0) if none.

        Lookup on an empty index returns (0, 0): scan from the segment start.
        """
        i = bisect.bisect_right(self._av, relative_offset, 0, self.count) - 1
        if i < 0:
            return 0, 0
        return int(self._av[i]), int(self._bv[i])


class TimeIndex(_Index):
    """Max timestamp so far (i64) -> relative offset (u32) of the batch after which it holds."""

    MAGIC = b"PLXT"
    A: np.dtype[Any] = np.dtype("<i8")
    B: np.dtype[Any] = np.dtype("<u4")

    def append(self, timestamp: int, relative_offset: int) -> None:
        """Add (T, rel) when T exceeds the last entry's timestamp; otherwise do nothing."""
        if self.count and timestamp <= self._av[self.count - 1]:
            return
        if self.count and relative_offset <= self._bv[self.count - 1]:
            return
        self._append(timestamp, relative_offset)

    def lookup(self, timestamp: int) -> int:
        """A relative offset from which a scan finds the first record with timestamp >= ``timestamp``.

        That is the rel of the greatest entry with T < ``timestamp`` (every earlier record is older), or 0.
        """
        i = bisect.bisect_left(self._av, timestamp, 0, self.count) - 1
        return 0 if i < 0 else int(self._bv[i])


class SegmentIndexes:
    """One segment's offset and time index (:attr:`offsets`, :attr:`times`) through their life, as one.

    The segment decides what goes in them and checks them against its log; this class handles the files and
    mappings. Both are None until opened (lazily, by the segment's first lookup) and after being dropped.
    Indexes are dropped, never closed, while another thread may be searching them (a reader's): they unmap
    when the last reference goes. Only the segment's writer calls the methods that write files.
    """

    def __init__(self, index_path: str, timeindex_path: str, base_offset: int, max_bytes: int) -> None:
        self.index_path = index_path
        self.timeindex_path = timeindex_path
        self.base_offset = base_offset
        self.max_bytes = max_bytes  # segment.index.bytes: the capacity of live (writable) files
        self.offsets: OffsetIndex | None = None
        self.times: TimeIndex | None = None
        #: A reader's indexes may lag the writer's (set when the log grew): look at the files before use.
        self.stale = False

    @property
    def holds_files(self) -> bool:
        """True while either index is held (each maps its file: a descriptor's worth)."""
        return self.offsets is not None or self.times is not None

    def create(self) -> None:
        """New, empty, writable files (the writer's new segment)."""
        self.offsets = OffsetIndex.create(self.index_path, self.base_offset, self.max_bytes)
        self.times = TimeIndex.create(self.timeindex_path, self.base_offset, self.max_bytes)

    def open_files(self) -> tuple[OffsetIndex, TimeIndex]:
        """Both files opened read-only (not made these indexes yet: the segment checks them first).

        :raises IndexError_: when a file is missing or fails its checks.
        """
        return (OffsetIndex.open(self.index_path, self.base_offset),
                TimeIndex.open(self.timeindex_path, self.base_offset))

    def open_writable(self) -> tuple[OffsetIndex, TimeIndex]:
        """Make both files writable again (see :func:`open_writable`) and these indexes; returns them.

        :raises IndexError_: when a file is missing or fails its checks (what was opened stays held).
        """
        self.offsets = self.times = None
        self.offsets = open_writable(OffsetIndex, self.index_path, self.base_offset, self.max_bytes)
        self.times = open_writable(TimeIndex, self.timeindex_path, self.base_offset, self.max_bytes)
        return self.offsets, self.times

    def in_memory(self, offset_rels: list[int], positions: list[int], timestamps: list[int], time_rels: list[int],
                  max_timestamp: int) -> tuple[OffsetIndex, TimeIndex]:
        """In-memory indexes holding these entries (rebuilt from the log), for the files' paths; not made
        these indexes (the caller decides)."""
        return (OffsetIndex.in_memory(self.index_path, self.base_offset, np.array(offset_rels, OffsetIndex.A),
                                      np.array(positions, OffsetIndex.B)),
                TimeIndex.in_memory(self.timeindex_path, self.base_offset, np.array(timestamps, TimeIndex.A),
                                    np.array(time_rels, TimeIndex.B), max_timestamp))

    def write_live(self, oi: OffsetIndex, ti: TimeIndex) -> None:
        """Replace both files by live (unsealed, preallocated) ones holding ``oi``'s and ``ti``'s entries
        (rebuilt in memory), and open them writable as these indexes. The writer's."""
        self.close()
        for cls, idx, path in ((OffsetIndex, oi, self.index_path), (TimeIndex, ti, self.timeindex_path)):
            cls.write_file(path, self.base_offset, *idx.columns(), cls.capacity_for(self.max_bytes), sealed=False)
        self.offsets = OffsetIndex.open(self.index_path, self.base_offset, writable=True)
        self.times = TimeIndex.open(self.timeindex_path, self.base_offset, writable=True)

    def caught_up(self, log_size: int, next_rel: int) -> tuple[OffsetIndex | None, TimeIndex | None]:
        """A reader's indexes after its log grew: kept when both files are the ones mapped (same inode:
        index files are only ever replaced by rename, so the mapping is current), taking in the entries the
        writer appended since, up to ``log_size`` bytes of log and relative offset ``next_rel``; (None,
        None), dropped, when a file was replaced (sealed at a roll, re-grown by a reopened writer, rebuilt by
        recovery). Two ``stat`` calls instead of two opens, mappings and sanity checks."""
        self.stale = False  # before looking: growth noticed meanwhile marks them again
        oi, ti = self.offsets, self.times
        if oi is None or ti is None or not all(self._file_kept(idx) for idx in (oi, ti)):
            self.offsets = self.times = None
            return None, None
        oi.take_in_appended(log_size)
        ti.take_in_appended(next_rel)
        return oi, ti

    @staticmethod
    def _file_kept(idx: _Index) -> bool:
        try:
            return idx.ino is not None and os.stat(idx.path).st_ino == idx.ino
        except FileNotFoundError:
            return False

    def limit_live(self, log_size: int, next_rel: int) -> None:
        """A reader's live indexes (another process's writer's) limited to ``log_size`` bytes of log and
        relative offset ``next_rel``: entries past what the reader found whole are not visible yet."""
        for idx, limit in ((self.offsets, log_size), (self.times, next_rel)):
            if idx is not None and not idx.sealed and not idx.writable and idx.count:
                idx.limit_to(limit)

    def drop(self, force: bool = False) -> None:
        """Forget the unsealed (with ``force``, all) indexes, so the next lookup opens them afresh."""
        if self.offsets is not None and (force or not self.offsets.sealed):
            self.offsets = None
        if self.times is not None and (force or not self.times.sealed):
            self.times = None

    def seal(self, max_timestamp: int, durable: bool) -> None:
        """Trimmed, checksummed, read-only files in place of the live ones (see :meth:`_Index.seal`)."""
        oi, ti = self.offsets, self.times
        assert oi is not None and ti is not None
        self.offsets = oi.seal(durable=durable)
        self.times = ti.seal(max_timestamp=max_timestamp, durable=durable)

    def stop_writing(self) -> None:
        """Nobody appends to them any more; this object's readers may keep using the mappings."""
        for idx in (self.offsets, self.times):
            if idx is not None:
                idx.writable = False

    def close(self) -> None:
        """Unmap both (the segment is being closed: no reader uses them)."""
        for idx in (self.offsets, self.times):
            if idx is not None:
                idx.close()
        self.offsets = self.times = None

    def last_offset_entry_on_disk(self) -> tuple[int, int] | None:
        """The last entry of the offset index file as it is on disk, not as a reader rebuilt it in memory;
        None when it has none, or is missing or damaged."""
        try:
            oi = OffsetIndex.open(self.index_path, self.base_offset)
        except CorruptRecordError:
            return None
        try:
            return oi.last_entry()
        finally:
            oi.close()
