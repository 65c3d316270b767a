"""The partition's segment list (its *view*), the log start offset, and the reads over a snapshot of them.

Invariants (numbered as in :mod:`pylog.partition`):
1. Offsets are dense (as written), strictly increasing and never reused: a new segment starts at the offset
   after the last one written.
2. A reader never sees part of a batch: readers in this process read up to sizes published after each
   write completes; readers in other processes only count a batch once it is whole and its CRC checks.
7. Reads never go backwards: records come out in strictly increasing offset order even while another
   process is half-way through swapping compacted segments in.

The view is one tuple ``(segments oldest first, their base offsets)``, swapped whole and never mutated in
place, so a reader's snapshot of both always agrees and reads run without a lock. Every change of the view
(:meth:`LocalLog.set_segments`, :meth:`LocalLog.refresh_locked`) happens under the partition's append lock,
taken by the caller or, for a reader's refresh, by :meth:`LocalLog.refresh`. Segments dropped from the view are
never closed here: another thread may be reading through them (they close themselves when the last snapshot
holding them goes).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from typing import Any, Callable, Generic, Sequence, TypeVar

from ...config import TopicConfig
from ...errors import CorruptRecordError, LogFailedError, OffsetOutOfRangeError, StoreClosedError, UnknownTopicError
from ..checkpoint import Checkpoint, read_checkpoint
from ..filenames import CHECKPOINT_FILE, CLEANER_CHECKPOINT_FILE, list_segment_bases
from ..handles import descriptor_limit
from ..segment_read import ReadSlice
from .segments import S, SegmentFiles, SegmentLike

__all__ = ["LocalLog", "READ_RETRIES"]

#: How often a read retries after segments vanished under it before giving up.
READ_RETRIES = 8
#: A reader at the log end looks at the checkpoints' stamp at most, and lists the partition's directory at
#: least, this often (seconds); see LocalLog.refresh_locked.
_STAMP_INTERVAL, _LIST_INTERVAL = 0.01, 1.0
#: Sealed segments whose files a handle keeps open after reading them (each holds up to four descriptors:
#: the log, its mapping and the two index mappings); reads of older ones are let go of (see
#: LocalLog.let_go_of_sealed), so reading a long partition from its start holds a bounded number. 32 (32 GiB
#: of 1 GiB segments: random reads over 10^8 100-byte records, 12 segments, never reopen one; with 8 a fifth
#: of them reopened their segment, index checksums included, 19.7 against 10.2 us) where the process may open
#: 4,096 descriptors or more; 8 below that, where a few such partitions would otherwise run it out of them
#: (the store's budget, pylog.storage.handles, lets whole partitions go, but not the last few used).
OPEN_SEALED = 32 if descriptor_limit() >= 4096 else 8
_T = TypeVar("_T")


class LocalLog(Generic[S]):
    """The segments of one partition directory as this handle sees them, and the log start offset."""

    def __init__(self, files: SegmentFiles[S], directory: str, topic: str, number: int, config: TopicConfig,
                 lock: threading.RLock, is_writer: Callable[[], bool], is_closed: Callable[[], bool]) -> None:
        self.directory = directory
        self._files = files  # opens and creates this partition's segment objects (the Segment class)
        self._lock = lock  # the partition's append lock, shared: the view changes under it
        self._is_writer = is_writer  # this handle holds the writer lock: its view is exact, never refreshed
        self._is_closed = is_closed
        self.topic = topic
        self.number = number
        self.name = name = f"{topic}-{number}"  # for messages
        self.config = config
        self.checkpoint_path = os.path.join(directory, CHECKPOINT_FILE)
        try:
            self._dir_ino = os.stat(directory).st_ino  # see sealed_segments
        except FileNotFoundError:
            raise UnknownTopicError(f"partition {name} was deleted ({directory})") from None
        #: (segments oldest first, their base offsets): one tuple, swapped whole.
        self.view: tuple[list[S], list[int]] = ([], [])
        #: The first offset a reader may read.
        self.log_start = 0
        #: See Checkpoint.swap_generation.
        self.swap_gen = 0
        #: Tiered storage (remote.storage.enable): the remote log's (start, end) as the upload thread last
        #: noted them (PartitionInternals.note_remote), None before it did. Local retention deletes only
        #: segments that end at or below the end (shipped and committed).
        self.remote: tuple[int, int] | None = None
        #: Base offsets of the sealed segments reads used, least recently first (a dict used as an ordered
        #: set; changed by reader threads without a lock: only single dict operations, atomic in CPython).
        self._read_sealed: dict[int, None] = {}
        self._meta: tuple = ()  # identity of the checkpoint files when a reader last looked
        self._next_listing = 0.0
        self._next_stamp = 0.0

    # ------------------------------------------------------------------ the view

    @property
    def segments(self) -> list[S]:
        """The current segment list, oldest first (not to be mutated)."""
        return self.view[0]

    @property
    def end_offset(self) -> int:
        """The offset after the last record of the view (the log start while there is no segment)."""
        segs = self.view[0]
        return segs[-1].next_offset if segs else self.log_start

    def segment_index_args(self) -> tuple[int, int]:
        """``(segment.index.bytes, index.interval.bytes)``: the index arguments of a new Segment object."""
        return self.config["segment.index.bytes"], self.config["index.interval.bytes"]

    def generation(self) -> tuple[str, int]:
        """The swap generation segment objects made now are sized under (see :meth:`Segment.open`)."""
        return (self.checkpoint_path, self.swap_gen)

    def open_segment(self, base: int) -> S:
        """An existing segment, sized under the current swap generation (see :meth:`Segment.open`)."""
        return self._files.open(self.directory, base, *self.segment_index_args(), generation=self.generation())

    def create_segment(self, base: int) -> S:
        """A new, empty segment at ``base`` (the writer's)."""
        return self._files.create(self.directory, base, *self.segment_index_args())

    def set_segments(self, segs: list[S]) -> None:
        """Make ``segs`` the view: all sealed but the last. Under the append lock."""
        # New lists, never mutated in place: readers iterate over the snapshot they took.
        for seg in segs[:-1]:
            seg.immutable = True
        if segs:
            segs[-1].immutable = False
        self.view = (segs, [s.base_offset for s in segs])

    def sealed_segments(self) -> dict[int, S]:
        """Sealed segments of the current view that a new view may keep, by base offset: a handle that
        switches between reading and writing (taking turns) then does not reopen every segment.

        Only segments this handle sealed or opened *as the writer* (``trusted``, under the lock, so no
        swap was half-way), made under the swap generation just read (:attr:`swap_gen`), and only while
        the partition directory is the one this handle opened (a deleted and re-created topic starts
        again at generation 0). A sealed segment's file never changes otherwise: compaction renames
        another over its name only after bumping the generation; retention only deletes, and the new
        listing drops those.
        """
        segs = self.view[0]
        if not segs:
            return {}
        try:
            if os.stat(self.directory).st_ino != self._dir_ino:
                return {}
        except FileNotFoundError:
            return {}
        generation = self.generation()
        return {seg.base_offset: seg for seg in segs[:-1]
                if seg.immutable and seg.trusted and seg.generation == generation}

    # ------------------------------------------------------------------ as a reader

    def load_readonly(self) -> None:
        """Open the segments as a reader: no lock, no recovery, tolerate a torn tail."""
        for _ in range(READ_RETRIES):
            try:
                return self._load_readonly_once()
            except FileNotFoundError:  # a writer deleted or swapped a segment while we listed them
                continue
        raise LogFailedError(f"{self.name}: segments kept changing while being listed")

    def _load_readonly_once(self) -> None:
        self.start_reader_clock()
        cp = read_checkpoint(self.checkpoint_path)
        self.swap_gen = cp.swap_generation if cp else 0
        bases = list_segment_bases(self.directory)
        reuse = self.sealed_segments()
        segs = []
        for b in bases:
            try:
                segs.append((reuse.get(b) if b != bases[-1] else None) or self.open_segment(b))
            except FileNotFoundError:  # deleted by the writer's retention since the listing
                continue
        if segs:
            segs[-1].load(tolerate_tail=True)
        self.set_segments(segs)
        self.log_start = start_from(cp, segs)

    def reader_view_of_own(self) -> None:
        """After the writer lock was let go: go on reading through the segment list this handle just
        wrote, exact at the moment it let go, instead of listing the directory; only the active segment is
        reopened, as a reader's."""
        segs = list(self.view[0])
        if not segs:
            self.load_readonly()
            return
        self.start_reader_clock()
        try:
            active = self.open_segment(segs[-1].base_offset)
        except FileNotFoundError:  # not for want of our own files, but never fail a release over it
            self.load_readonly()
            return
        active.load(tolerate_tail=True)
        segs[-1] = active
        self.set_segments(segs)

    @property
    def sealed_open(self) -> int:
        """Sealed segments reads used (and may keep open) since the last let-go, at most :data:`OPEN_SEALED`
        after each read."""
        return len(self._read_sealed)

    @property
    def too_many_sealed_open(self) -> bool:
        """True when reads used more than :data:`OPEN_SEALED` sealed segments since the last
        :meth:`let_go_of_sealed`."""
        return len(self._read_sealed) > OPEN_SEALED

    def let_go_of_sealed(self) -> None:
        """Make the sealed segments that reads used least recently, beyond :data:`OPEN_SEALED`, objects
        holding no file (see :meth:`Segment.without_files`). Under the append lock and the partition's
        maintenance lock (maintenance finds its segments by identity). Dropped, not closed, as in
        :meth:`drop_files`."""
        read_sealed = self._read_sealed
        order = list(read_sealed)  # one C-level copy: reader threads may add to it meanwhile
        drop = set(order[:-OPEN_SEALED])
        for base in drop:
            read_sealed.pop(base, None)
        segs = self.view[0]
        if any(s.base_offset in drop and s.holds_files and not s.writable for s in segs[:-1]):
            self.set_segments([s.without_files() if s.base_offset in drop and s.holds_files and not s.writable
                               and s is not segs[-1] else s for s in segs])

    def drop_files(self) -> None:
        """Make every segment of the view that holds descriptors or mappings one that holds none (the same
        file, sizes and offsets; see :meth:`Segment.without_files`), for a handle letting go of its files.
        A reader only (the writer lock let go first), under the append lock. The old objects are dropped,
        not closed: a read under way keeps using them, and they close when the last snapshot goes."""
        assert not self._is_writer()
        self._read_sealed.clear()
        segs = self.view[0]
        if any(s.holds_files for s in segs):
            self.set_segments([s.without_files() if s.holds_files else s for s in segs])

    def start_reader_clock(self) -> None:
        """A reader's view was just taken: note the checkpoints' identity and when to look again."""
        self._meta = self._meta_stamp()
        self._next_listing = time.monotonic() + _LIST_INTERVAL
        self._next_stamp = 0.0

    def list_on_next_refresh(self) -> None:
        """Make the next :meth:`refresh` list the directory, as if :data:`_LIST_INTERVAL` had passed (for
        benchmarks comparing the reader's paths)."""
        self._next_listing = 0.0

    def _meta_stamp(self) -> tuple:
        """Identity of the files a writer replaces when it deletes or swaps segments (checkpoints)."""
        out: list[Any] = []
        for name in (CHECKPOINT_FILE, CLEANER_CHECKPOINT_FILE):
            try:
                st = os.stat(os.path.join(self.directory, name))
                out.append((st.st_ino, st.st_mtime_ns))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    def refresh(self, force: bool = False) -> bool:
        """As a reader of another process's writes, take in new batches and segments. True if anything grew.

        With ``force`` (a segment of the snapshot vanished or was replaced) every segment's file identity
        is checked. Runs under the partition lock, so reader threads do not race each other (sizes never
        move back) nor a thread of this process that is becoming the writer (its segments are never
        replaced). A no-op for the writer and once closed.
        """
        if self._is_writer() or self._is_closed():
            return False
        with self._lock:
            for _ in range(READ_RETRIES):
                if self._is_writer() or self._is_closed():
                    return False
                try:
                    return self.refresh_locked(force)
                except FileNotFoundError:  # a segment went or was replaced while we looked: look again
                    force = True
            raise LogFailedError(f"{self.name}: segments kept changing while being listed")

    def refresh_locked(self, force: bool = False) -> bool:
        """:meth:`refresh` under the append lock: take in new batches and segments; True if anything
        grew. Usually the active segment's growth only: the directory is
        listed (and the segments' identities checked) when something else may have changed, that is when

        - a file named for the active segment's next offset exists: the writer rolled (one ``stat``;
          the only change a reader at the log end must see at once);
        - the checkpoints' stamp moved (looked at when the active segment did not grow, at most every
          :data:`_STAMP_INTERVAL`): the writer rewrites ``partition.checkpoint`` after creating the
          segment of a roll, before retention or delete-records unlink segments (with the new log
          start), before compaction renames files over segment names, and when it opens (after a
          recovery that cut the active segment or deleted segments after it). None of these needs
          noticing at once for correctness: a read that finds a segment gone or replaced raises
          FileNotFoundError and comes back with ``force``;
        - ``force``, no segment is known yet, or :data:`_LIST_INTERVAL` passed since the last listing
          (which also lets go of deleted segments if a checkpoint stamp was ever missed: one rewritten
          twice within a tick of the file system's clock may get its old inode number back).

        The stamp is taken before the directory is listed, so a listing is never older than the stamp
        recorded with it.
        """
        segs = self.view[0]
        now = time.monotonic()
        look = force or not segs or now >= self._next_listing
        grown = False
        if segs:
            active = segs[-1]
            try:
                grown = active.refresh()
            except FileNotFoundError:  # the active segment was rolled and deleted by retention
                look = force = True
            if not look:
                if active.successor_exists():
                    look = True
                elif grown or now < self._next_stamp:
                    return grown
        meta = self._meta_stamp()
        self._next_stamp = now + _STAMP_INTERVAL
        if not look and meta == self._meta:
            return grown
        self._next_listing = now + _LIST_INTERVAL
        bases = list_segment_bases(self.directory)
        # The writer rewrites a checkpoint whenever it deletes or swaps segments: only then can a segment
        # that kept its name have been replaced, so only then are identities checked.
        # A base gone from the listing may mean a swap whose checkpoint write this reader saw on an
        # earlier look: the segments that stayed may have been replaced too.
        check_identity = force or meta != self._meta or not set(self.view[1]) <= set(bases)
        if bases != self.view[1] or check_identity:
            self._meta = meta
            grown = self._relist(bases, check_identity) or grown
        return grown

    def _relist(self, bases: list[int], check_identity: bool) -> bool:
        """:meth:`refresh_locked` after a listing that changed (or when identities are checked): make the
        view the listed segments, reopening those that are new or were replaced. True if any was."""
        try:
            cp = read_checkpoint(self.checkpoint_path)
        except CorruptRecordError:
            cp = None
        gen = cp.swap_generation if cp is not None else self.swap_gen
        self.swap_gen = gen
        segs = self.view[0]
        by_base = {s.base_offset: s for s in segs}
        old_last = segs[-1] if segs else None
        grown = False
        new = []
        for b in bases:
            s = by_base.pop(b, None)
            # An opened segment pins its inode, so comparing inodes is exact; one not opened yet is
            # remade whenever files may have been swapped (its inode number may have been reused).
            if s is None or (check_identity and not s.same_file()) or (
                    not s.is_open and s.generation is not None and s.generation[1] != gen):
                try:
                    s = self.open_segment(b)
                except FileNotFoundError:
                    continue
                grown = True
            new.append(s)
        # Segments gone from the directory (deleted by the writer) are dropped, not closed: see the module
        # docstring on descriptors that another thread may still be using.
        if old_last is not None and old_last in new[:-1]:
            try:
                old_last.refresh()  # its last batches, written before the roll
            except FileNotFoundError:
                new.remove(old_last)
        if new:
            new[-1].load(tolerate_tail=True)
        self.set_segments(new)
        if cp is not None:
            self.log_start = cp.log_start_offset
        elif new:
            self.log_start = max(self.log_start, new[0].base_offset)
        return grown

    # ------------------------------------------------------------------ reading a snapshot

    def on_current_view(self, what: str, read: Callable[..., _T], *args: Any) -> _T:
        """Run ``read`` over the current segment view; when retention or compaction deleted or replaced a
        segment of it before it was opened, take a new view and run it again."""
        for _ in range(READ_RETRIES):
            try:
                return read(*args)
            except FileNotFoundError as exc:
                last = exc
                self._retry_wait()
        raise LogFailedError(f"{self.name}: segments kept changing under {what} ({last})")

    def _retry_wait(self) -> None:
        """A new view: a writer's is already swapped (wait out a swap in progress); a reader re-lists."""
        if self._is_closed():
            raise StoreClosedError(f"partition {self.name} is closed")
        if self._is_writer():
            with self._lock:  # a writer's view changes under this lock: wait out a swap in progress
                pass
        else:
            self.refresh(force=True)

    def slices(self, offset: int, max_records: int, max_bytes: int, verify: bool) -> list[ReadSlice]:
        """The batches holding records from ``offset`` on, at most ``max_records`` (about ``max_bytes``),
        from a snapshot of the view, taking in another process's appends when the read is at the end.
        Raises FileNotFoundError when a segment vanished under the read (see :meth:`on_current_view`)."""
        segs, bases = self.view
        end_offset = segs[-1].next_offset if segs else self.log_start
        if offset >= end_offset and self.refresh():
            segs, bases = self.view
            end_offset = segs[-1].next_offset
        if offset < self.log_start or offset > end_offset:
            raise OffsetOutOfRangeError(f"offset {offset} outside [{self.log_start}, {end_offset}] of {self.name}",
                                        offset, self.log_start, end_offset)
        if offset == end_offset:
            return []
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        out: list[ReadSlice] = []
        got = 0
        nbytes = 0
        want = offset  # the next offset a record may have: never go back
        for seg in segs[i:]:
            size = seg.size
            if size == 0:
                continue
            first = max(want, seg.base_offset)
            if seg.immutable:
                read_sealed = self._read_sealed
                read_sealed.pop(seg.base_offset, None)
                read_sealed[seg.base_offset] = None  # the most recently used now
            try:
                part, b = seg.read(first, max_records - got, max(max_bytes - nbytes, 1), size, verify)
            except CorruptRecordError as exc:
                # Hand out the records before the bad batch, as a read that ends at a torn tail does; the
                # next read starts at the bad batch and raises. Nothing after it: no offset is skipped.
                part = _before_damage(seg, exc, first, max_records - got, max(max_bytes - nbytes, 1), verify)
                if not out and not part:
                    raise
                return out + part
            if part:
                out.extend(part)
                got += sum(stop - start for _, start, stop in part)
                view, _, stop = part[-1]
                h = view.header
                last_delta = stop - 1 if view.offset_deltas is None else int(view.offset_deltas[stop - 1])
                want = h.base_offset + last_delta + 1
            nbytes += b
            if got >= max_records or nbytes >= max_bytes:
                break
        return out

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset from the log start whose record timestamp is >= ``timestamp`` (after a refresh).
        Raises FileNotFoundError when a segment vanished under it (see :meth:`on_current_view`)."""
        self.refresh()
        segs = self.view[0]
        for i, seg in enumerate(segs):
            # A segment opened lazily (read-only, not loaded) has next_offset == base_offset until loaded,
            # so bound it by the next segment's base instead.
            end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
            if seg.size == 0 or end <= self.log_start:
                continue
            if seg.max_timestamp < timestamp:
                continue
            # Only offsets from the log start count: one below it may have the earliest matching timestamp.
            found = seg.offset_for_timestamp(timestamp, seg.size, self.log_start)
            if found is not None:
                return found
        return None


def start_from(cp: Checkpoint | None, segs: Sequence[SegmentLike]) -> int:
    """The log start offset: the checkpoint's, or the first segment's base when there is none.

    Not raised to the first segment's base: compaction may empty and drop the first segments, and the
    offsets in between are still readable (as the next surviving record).
    """
    if cp is not None:
        return cp.log_start_offset
    return segs[0].base_offset if segs else 0


def _before_damage(seg: SegmentLike, exc: CorruptRecordError, offset: int, max_records: int, max_bytes: int,
                   verify: bool) -> list[ReadSlice]:
    """The batches of ``seg`` from ``offset`` up to the bad batch a read of it raised ``exc`` at (every
    position a scan reports is a batch start); [] when none, or when ``exc`` is not at one."""
    if exc.path != seg.log_path or not exc.position:
        return []
    try:
        return seg.read(offset, max_records, max_bytes, exc.position, verify)[0]
    except CorruptRecordError:
        return []
