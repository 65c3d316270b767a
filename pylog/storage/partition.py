"""A partition: an ordered list of segments, one of them active, plus the writer lock and recovery.

Invariants:
1. Offsets are dense (as written), strictly increasing and never reused: the next offset only grows, and
   a new segment starts at the offset after the last one written.
2. A reader never sees part of a batch: readers in this process read up to sizes published after each
   write completes; readers in other processes only count a batch once it is whole and its CRC checks.
3. After a crash the writer re-validates the segments from the checkpointed recovery point on, truncates a
   torn tail and rebuilds their indexes; whatever was flushed (fsync) is kept.
4. Exactly one writer per partition across threads and processes at any moment: an ``flock`` on ``.lock``
   taken on the first write and held until :meth:`Partition.close` or :meth:`Partition.release_writer`.
   Writers that take turns (producers of several processes sharing a partition) ask the holder for it
   through a shared ``flock`` on ``.want`` while they wait; the holder looks with
   :meth:`Partition.handover_wanted` and hands over by releasing. Readers take no lock.
5. Retention removes whole segments from the head only, after the checkpoint has recorded the new log
   start offset (so a crash mid-way leaves only segments that the next open deletes); the active segment
   goes only after a roll has put an empty one after it. Segments before the recovery point are sealed
   and fsynced. A roll leaves the fsync of the segment it sealed to the background sync thread
   (:mod:`pylog.storage.syncer`), which moves the recovery point past it once done; ``flush``, ``close`` and
   handing the writer lock over sync whatever is still pending first. Handing over does not fsync the
   active segment: a handle's ``flush`` and ``close`` fsync every file it appended to and has not
   fsynced, whether or not it is still the writer.
6. Maintenance (retention, delete-records, compaction) runs one at a time per partition and only in the
   writer. It never closes a segment another thread may be reading: removed segments are unlinked and
   released when the last snapshot holding them goes; a reader whose segment vanished or was replaced
   under it takes a new snapshot and retries, so it sees the records or ``OffsetOutOfRangeError``.
7. Reads never go backwards: records come out in strictly increasing offset order even while another
   process is half-way through swapping compacted segments in.

Thread-safety: every public method may be called from any thread. Appends serialise on a lock; reads
take a snapshot of the segment list and sizes and run concurrently with appends and maintenance.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import math
import os
import threading
import time
from typing import Any, Callable, Iterable, Sequence, TypeVar

import numpy as np

from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from ..config import TopicConfig
from ..errors import (CorruptRecordError, InvalidArgumentError, InvalidRecordError, LogFailedError, OffsetOutOfRangeError,
                     PartitionLockedError, ReadOnlyStoreError, RecordTooLargeError, StoreClosedError,
                     UnknownTopicError)
from .fileio import fault, fsync_dir, try_flock
from .filenames import (CHECKPOINT_FILE, CLEANER_CHECKPOINT_FILE, LOCK_FILE, SWAP_MANIFEST_FILE, WANT_FILE,
                        list_segment_bases)
from .notify import Notifier
from .records import (CODEC_LZ4, CODEC_NONE, HEADER_SIZE, Record, RecordColumns, column_parts as _column, encode_parts,
                      gc_paused, now_ms)
from .producer_state import ProducerState
from .retention import RetentionResult, deletable_prefix
from .segment import ReadSlice, Segment
from .swap import finish_interrupted_swap
from . import syncer

__all__ = ["Partition", "DEFAULT_MAX_BYTES"]

log = logging.getLogger("pylog.partition")

#: Default byte limit of one read (Kafka's fetch.max.bytes); a read returns at least one batch regardless.
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
#: Per-record bytes in a batch body besides key and value: value length, key length, timestamp delta.
_RECORD_OVERHEAD = 16
_MAX_RELATIVE = 0xFFFFFFFF
#: How often a read retries after segments vanished under it before giving up.
_READ_RETRIES = 8
_T = TypeVar("_T")
_SEQ_MOD = 1 << 31
#: How many segment files holding appends not fsynced before a handover a handle remembers (see
#: release_writer) before it fsyncs them.
_HANDED_OVER_MAX = 16
#: Polling interval bounds of a reader waiting for another process's appends when it gets no wake-ups from
#: them (see pylog.storage.notify), in seconds.
_POLL_MIN, _POLL_MAX = 0.0002, 0.005
#: A reader at the log end looks at the checkpoints' stamp at most, and lists the partition's directory at
#: least, this often (seconds); see Partition._refresh_locked.
_STAMP_INTERVAL, _LIST_INTERVAL = 0.01, 1.0


class Partition:
    """One partition of a topic, stored in ``directory``. Obtain it with ``store.topic(name).partition(i)``."""

    def __init__(self, topic: str, number: int, directory: str, config: TopicConfig,
                 lock_timeout_ms: int = 0, read_only: bool = False) -> None:
        self.topic = topic
        self.number = number
        self.directory = directory
        self.config = config
        self.lock_timeout_ms = lock_timeout_ms
        #: Written by many handles in turn (take the lock, append, :meth:`release_writer`): the background
        #: cleaner maintains it whenever it can take the lock, not only while this handle writes.
        self.transient = False
        #: Opened through a read-only store: never becomes the writer, creates and maps no file.
        self.read_only = read_only
        #: This handle has handed the lock over (release_writer) before: it takes turns with other writers,
        #: so its opens as writer do not fsync the checkpoint either (see _open_as_writer).
        self._takes_turns = False
        #: The lock is held for a turn (taken by wait_to_write, used only by producers' appends since): it
        #: may be handed over (hand_over). A direct append pins it: cleared until the lock is let go.
        self._in_turns = False
        self._repairing = False  # see repair()
        #: (base offset, inode, byte position, offset there) of the active segment as this handle last
        #: wrote it: the bytes before the position were checked or written by this handle as the writer,
        #: so its next open after a clean checkpoint (its next turn) checks only those after them.
        self._active_checked: tuple[int, int | None, int, int] | None = None
        self._lock = threading.RLock()
        #: Serialises maintenance (retention, delete-records, compaction); taken before ``_lock``, never after.
        self.maintenance_lock = threading.RLock()
        self._meta: tuple = ()  # identity of the checkpoint files when a reader last looked
        self._appended = threading.Condition(threading.Lock())
        #: Wakes readers in other processes after appends (a shared counter + futex; see pylog.storage.notify).
        self._notify = Notifier(directory, read_only=read_only)
        self._lock_fd: int | None = None
        self._want_fd: int | None = None  # for handover_wanted's probe, opened on first use
        self._closed = False
        self._failed: str | None = None
        self._log_start = 0
        self._recovery_point = 0
        #: Segments rolled (sealed) but not yet fsynced, oldest first: the background sync's work list.
        self._unsynced: list[Segment] = []
        #: The checkpoint on disk is dirty, durably: a power cut cannot bring back a clean one (see _roll).
        self._cp_durably_dirty = False
        self._swap_gen = 0  # see Checkpoint.swap_generation
        self._producers: ProducerState | None = None  # loaded on the first idempotent append
        self._unflushed = 0  # records appended through this handle and not fsynced yet, writer or not
        #: Log files of segments holding appends through this handle that were not fsynced when it let the
        #: writer lock go (release_writer does not fsync the active segment): flush and close fsync them by
        #: name, so that what this handle appended becomes durable whoever writes the partition by then.
        #: At most _HANDED_OVER_MAX (release_writer fsyncs them when there are more).
        self._handed_over: set[str] = set()
        self._last_flush = time.monotonic()
        self._final_end = 0  # log end offset at close
        #: What the last crash recovery did: segments re-validated, bytes dropped, seconds (None: none ran).
        self.last_recovery: dict[str, Any] | None = None
        if not read_only:
            os.makedirs(directory, exist_ok=True)
        self._checkpoint_path = os.path.join(directory, CHECKPOINT_FILE)
        try:
            self._dir_ino = os.stat(directory).st_ino  # see _sealed_segments
        except FileNotFoundError:
            raise UnknownTopicError(f"partition {topic}-{number} was deleted ({directory})") from None
        # (segments oldest first, their base offsets): one tuple, swapped whole, so a reader's snapshot
        # of both always agrees.
        self._view: tuple[list[Segment], list[int]] = ([], [])
        self._load_readonly()

    # ------------------------------------------------------------------ opening

    def _new_segment_args(self) -> tuple[int, int]:
        return self.config["segment.index.bytes"], self.config["index.interval.bytes"]

    def _load_readonly(self) -> None:
        """Open the segments as a reader: no lock, no recovery, tolerate a torn tail."""
        for _ in range(_READ_RETRIES):
            try:
                return self._load_readonly_once()
            except FileNotFoundError:  # a writer deleted or swapped a segment while we listed them
                continue
        raise LogFailedError(f"{self.topic}-{self.number}: segments kept changing while being listed")

    def _load_readonly_once(self) -> None:
        self._start_reader_clock()
        cp = read_checkpoint(self._checkpoint_path)
        self._swap_gen = cp.swap_generation if cp else 0
        bases = list_segment_bases(self.directory)
        reuse = self._sealed_segments()
        segs = []
        for b in bases:
            try:
                segs.append((reuse.get(b) if b != bases[-1] else None) or self._open_segment(b))
            except FileNotFoundError:  # deleted by the writer's retention since the listing
                continue
        if segs:
            segs[-1].load(tolerate_tail=True)
        self._set_segments(segs)
        self._log_start = self._start_from(cp, segs)

    def _sealed_segments(self) -> dict[int, Segment]:
        """Sealed segments of the current view that a new view may keep, by base offset: a handle that
        switches between reading and writing (taking turns) then does not reopen every segment.

        Only segments this handle sealed or opened *as the writer* (``trusted``, under the lock, so no
        swap was half-way), made under the swap generation just read (``self._swap_gen``), and only while
        the partition directory is the one this handle opened (a deleted and re-created topic starts
        again at generation 0). A sealed segment's file never changes otherwise: compaction renames
        another over its name only after bumping the generation; retention only deletes, and the new
        listing drops those.
        """
        view = getattr(self, "_view", None)  # None while the handle is first being opened
        segs = view[0] if view else []
        if not segs:
            return {}
        try:
            if os.stat(self.directory).st_ino != self._dir_ino:
                return {}
        except FileNotFoundError:
            return {}
        generation = (self._checkpoint_path, self._swap_gen)
        return {seg.base_offset: seg for seg in segs[:-1]
                if seg.immutable and seg.trusted and seg.generation == generation}

    def _start_reader_clock(self) -> None:
        """A reader's view was just taken: note the checkpoints' identity and when to look again."""
        self._meta = self._meta_stamp()
        self._next_listing = time.monotonic() + _LIST_INTERVAL
        self._next_stamp = 0.0

    def _open_segment(self, base: int) -> Segment:
        """An existing segment, sized under the current swap generation (see :meth:`Segment.open`)."""
        return Segment.open(self.directory, base, *self._new_segment_args(),
                            generation=(self._checkpoint_path, self._swap_gen))

    @staticmethod
    def _start_from(cp: Checkpoint | None, segs: list[Segment]) -> int:
        """The log start offset: the checkpoint's, or the first segment's base when there is none.

        Not raised to the first segment's base: compaction may empty and drop the first segments, and the
        offsets in between are still readable (as the next surviving record).
        """
        if cp is not None:
            return cp.log_start_offset
        return segs[0].base_offset if segs else 0

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

    def _set_segments(self, segs: list[Segment]) -> None:
        # New lists, never mutated in place: readers iterate over the snapshot they took.
        for seg in segs[:-1]:
            seg.immutable = True
        if segs:
            segs[-1].immutable = False
        self._view = (segs, [s.base_offset for s in segs])

    @property
    def _segments(self) -> list[Segment]:
        return self._view[0]

    @property
    def is_writer(self) -> bool:
        """True once this handle holds the partition's exclusive writer lock."""
        return self._lock_fd is not None

    def _open_in_partition(self, name: str) -> int:
        if self.read_only:
            raise ReadOnlyStoreError(f"partition {self.topic}-{self.number} belongs to a store opened with "
                                     "read_only=True, which takes no locks")
        try:
            return os.open(os.path.join(self.directory, name), os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise UnknownTopicError(f"partition {self.topic}-{self.number} was deleted ({self.directory})") from None

    def _acquire_lock(self) -> int:
        fd = self._open_in_partition(LOCK_FILE)
        try:
            got = _retry(lambda: try_flock(fd), time.monotonic() + self.lock_timeout_ms / 1000, 0.001, 0.05)
        except OSError:
            os.close(fd)
            raise
        if not got:
            os.close(fd)
            raise PartitionLockedError(
                f"partition {self.topic}-{self.number} is locked by another writer ({self.directory})")
        return fd

    def _ask_for_handover(self) -> int:
        """Hold a shared ``flock`` on ``.want`` (until the returned descriptor is closed): tells the writer,
        if it takes turns, that another handle waits for the partition."""
        fd = self._open_in_partition(WANT_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a holder's probe has it (microseconds)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def handover_wanted(self) -> bool:
        """True while another handle, in any process, waits for this partition's writer lock in
        :meth:`wait_to_write`. Two system calls."""
        fd = self._want_fd
        if fd is None:
            with self._lock:
                if self._closed:
                    raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
                fd = self._want_fd
                if fd is None:
                    fd = self._want_fd = self._open_in_partition(WANT_FILE)
        if try_flock(fd):  # nobody holds it shared
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        return True

    def wait_to_write(self, timeout_ms: float, between: Callable[[], object] | None = None) -> None:
        """Become the partition's writer for a turn, waiting up to ``timeout_ms`` for a writer that takes
        turns (a producer, here or in another process) to hand it over, and asking it to (``.want``). The
        lock then stays free to be handed over in turn (:meth:`hand_over`) until a direct append pins
        it. Unlike an append with ``lock.timeout.ms``, this does not hold the partition's append lock
        while it waits, so this handle's readers go on. A no-op for the writer. ``between``, when given,
        is called after each attempt that failed while waiting (a producer lets go there of the
        partitions it could not let go of before: see :meth:`release_turn`); it must not block.

        :raises PartitionLockedError: when the lock did not come within ``timeout_ms`` (a writer that
            does not take turns, such as a store appending directly, keeps it until it closes).
        :raises UnknownTopicError: when the partition was deleted.
        """
        if self.is_writer:
            return
        if self._take_turn():
            return
        deadline = time.monotonic() + timeout_ms / 1000
        want = self._ask_for_handover()

        def attempt() -> bool:
            if self._take_turn():
                return True
            if between is not None:
                between()
            return False

        try:
            if not _retry(attempt, deadline, 0.0002, 0.005):
                raise PartitionLockedError(f"partition {self.topic}-{self.number} is locked by another writer "
                                           f"({self.directory}), which did not hand it over within {timeout_ms} ms")
        finally:
            os.close(want)

    def _take_turn(self) -> bool:
        with self._lock:
            if self._lock_fd is not None:
                return True
            if not self.try_become_writer():
                return False
            self._in_turns = True
            return True

    def hand_over(self) -> bool:
        """For a writer taking turns, between its appends: release the lock when another handle waits for
        it in :meth:`wait_to_write`; True when released. Never a lock a direct append pinned, nor while
        retention or compaction of the partition is under way in this handle (it is tried again on the
        writer's next append or idle look, instead of blocking behind a long pass)."""
        if not self._in_turns or self._lock_fd is None or not self.handover_wanted():
            return False
        if not self.maintenance_lock.acquire(blocking=False):
            return False
        try:
            with self._lock:
                if not self._in_turns or self._lock_fd is None:
                    return False
                self.release_writer()
                return True
        finally:
            self.maintenance_lock.release()

    def release_turn(self, blocking: bool = True) -> bool:
        """Let go of a writer lock held for a turn (:meth:`wait_to_write`), whether or not anyone waits for
        it; a lock a direct append pinned stays. True when released. For a writer taking turns that stops
        writing (a producer closing), or that is about to wait for another partition. Waits for retention
        or compaction of the partition under way in this handle to finish; with ``blocking`` False it
        leaves the lock held instead (False: the caller tries again later, as :meth:`hand_over` does)."""
        if not self.maintenance_lock.acquire(blocking=blocking):
            return False
        try:
            with self._lock:
                if not self._in_turns or self._lock_fd is None:
                    return False
                self.release_writer()
                return True
        finally:
            self.maintenance_lock.release()

    def _ensure_writer(self) -> None:
        """Become the partition's writer: lock, recover if the last shutdown was not clean, open for append."""
        with self._lock:
            self._ensure_writer_locked()

    def _ensure_writer_locked(self) -> None:
        if self._closed:
            raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
        if self._failed is not None:
            raise LogFailedError(f"partition {self.topic}-{self.number} failed earlier ({self._failed}); reopen the store")
        if self._lock_fd is not None:
            return
        if self.read_only:
            raise ReadOnlyStoreError(f"partition {self.topic}-{self.number} belongs to a store opened with "
                                     "read_only=True, which never writes; open the store without read_only to write")
        try:
            fd = self._acquire_lock()
            try:
                self._open_as_writer()
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                raise
        except OSError as exc:
            raise fault(exc, f"opening {self.topic}-{self.number} for writing",
                        "nothing was written through this handle (the next writer recovers whatever the open left)")
        self._lock_fd = fd

    def _open_as_writer(self) -> None:
        cp = read_checkpoint(self._checkpoint_path) or Checkpoint(0, self._log_start, clean=False)
        self._swap_gen = cp.swap_generation
        interrupted = os.path.exists(os.path.join(self.directory, SWAP_MANIFEST_FILE))
        if interrupted:
            # A crash interrupted a compaction swap: tell readers before files are renamed over names.
            self._swap_gen += 1
            cp = Checkpoint(cp.recovery_point, cp.log_start_offset, cp.clean, self._swap_gen)
            write_checkpoint(self._checkpoint_path, cp)
            self._cp_durably_dirty = not cp.clean
        if interrupted or not (self._takes_turns and cp.clean):
            # After a clean handover nothing was left half-done (release_writer waits for maintenance):
            # a writer taking its turn skips this look at every file of the directory.
            finish_interrupted_swap(self.directory)
        # The reader-mode segments are not closed here: another thread may be reading through them right
        # now, and closing a descriptor it is about to pread would let the number be reused for another
        # file. They close themselves (Segment.__del__) when the last snapshot holding them goes.
        bases = list_segment_bases(self.directory)
        # Only on a clean checkpoint: recovery closes and cuts the segments it validates, and objects of
        # the reader view may be in use by other threads' reads right now.
        reuse = self._sealed_segments() if cp.clean and not self._repairing else {}
        segs = [(reuse.get(b) if b != bases[-1] else None) or self._open_segment(b) for b in bases]
        for seg in segs:
            seg.trusted = True  # opened under the lock
        if not segs:
            start = max(cp.log_start_offset, cp.recovery_point)
            segs = [Segment.create(self.directory, start, *self._new_segment_args())]
            cp = Checkpoint(start, start, clean=False, swap_generation=self._swap_gen)
        elif cp.clean and not self._repairing:
            active = segs[-1]
            try:
                active.open_for_append()
            except CorruptRecordError as exc:
                segs[-1] = self._open_segment(segs[-1].base_offset)
                if not segs[-1].damage_is_at_tail():
                    # Not a torn write: whole batches follow the damage, and readers may have read them and
                    # their offsets. Cutting them would lose records silently and hand their offsets out
                    # again: refuse to write until someone decides (repair()).
                    raise self._damaged_in_the_middle(exc) from None
                # The last batch is cut short or bad with nothing after it: what a writer that died during
                # an append leaves (a writer taking turns leaves the checkpoint clean): recover it.
                log.warning("%s: active segment's last batch fails its check after a clean close (%s); "
                            "recovering", self.directory, exc)
                segs = self._recover(segs, segs[-1].base_offset)
            else:
                # open_for_append checked the batches after the last index entry only. Bit rot before it
                # is damage in the middle too (whole batches follow): check those bytes, once per handle.
                memo = self._active_checked
                fresh = memo is None or memo[:2] != (active.base_offset, active.inode)
                damage = active.first_damage(*((0, None) if fresh else memo[2:]))
                if damage is not None:
                    active.close()
                    raise self._damaged_in_the_middle(damage)
        elif cp.clean:  # repair(): re-validate the active segment and cut it at its first damage
            segs = self._recover(segs, segs[-1].base_offset)
        else:
            segs = self._recover(segs, cp.recovery_point)
        self._log_start = cp.log_start_offset
        # Segments wholly below the log start: a retention pass or delete-records that crashed after
        # recording the new log start and before unlinking them.
        k = 0
        while k < len(segs) - 1 and segs[k + 1].base_offset <= self._log_start:
            k += 1
        for seg in segs[:k]:
            log.info("deleting %s: below the log start offset %d", seg.log_path, self._log_start)
            # A fresh object: the one in the list may be shared with reads under way (see above).
            self._open_segment(seg.base_offset).delete()
        segs = segs[k:]
        self._set_segments(segs)
        self._note_active_checked()
        self._recovery_point = min(cp.recovery_point, segs[-1].base_offset) if not cp.clean else cp.recovery_point
        if self._takes_turns and cp.clean:
            # A writer taking turns (see release_writer) opens for every turn, after a holder that left
            # the checkpoint clean. It leaves it so rather than mark it dirty, a file replaced per turn:
            # if this process dies, the next opener's check of the active segment's tail
            # (open_for_append) finds what it left half-written, and a roll writes a dirty checkpoint.
            return
        # Not fsynced for a writer taking turns: losing this write to a power cut only means the next
        # opener recovers from an older point (the active segment is checked on every open anyway).
        self._write_checkpoint(durable=not (self.transient or self._takes_turns))

    def _damaged_in_the_middle(self, exc: CorruptRecordError) -> CorruptRecordError:
        """The error that refuses a writer open after a clean close over damage with whole batches after it."""
        return CorruptRecordError(
            f"{self.topic}-{self.number}: the active segment is damaged in the middle after a clean "
            f"close ({exc.reason}); appends are refused so that the whole batches after the damage "
            f"are not cut. `pylog verify` shows the damage; `pylog repair STORE {self.topic} "
            f"{self.number}` (Partition.repair()) cuts the log there", exc.path, exc.position)

    def _note_active_checked(self) -> None:
        """Record that this handle, as the writer, has checked or written the active segment to its end."""
        active = self._segments[-1]
        self._active_checked = (active.base_offset, active.inode, active.size, active.next_offset)

    def _write_checkpoint(self, clean: bool = False, durable: bool = True) -> None:
        write_checkpoint(self._checkpoint_path,
                         Checkpoint(self._recovery_point, self._log_start, clean=clean, swap_generation=self._swap_gen),
                         durable=durable)
        # A power cut leaves the last durable version or a later one: all dirty once a dirty one was durable.
        if clean:
            self._cp_durably_dirty = False
        elif durable:
            self._cp_durably_dirty = True

    def bump_swap_generation(self, replaced: Sequence[Segment]) -> tuple[str, int]:
        """Before compaction renames files over segment names: record a new swap generation (durably).

        The segments of the view that are not ``replaced`` keep their files, so they move to the new
        generation; only the replaced ones (still in readers' snapshots) keep the old one. Returns the
        generation new segment objects are made under. Writer only, under the append lock.
        """
        self._swap_gen += 1
        self._write_checkpoint()
        generation = (self._checkpoint_path, self._swap_gen)
        gone = {id(s) for s in replaced}
        for seg in self._segments:
            if id(seg) not in gone and seg.generation is not None:
                seg.generation = generation
        return generation

    def _recover(self, segs: list[Segment], recovery_point: int) -> list[Segment]:
        """Re-validate segments from the one holding ``recovery_point``; cut everything after a bad batch."""
        i = max(0, bisect.bisect_right([s.base_offset for s in segs], recovery_point) - 1)
        log.info("recovering %s from offset %d (%d segments)", self.directory, recovery_point, len(segs) - i)
        t0 = time.monotonic()
        stats = {"segments_validated": 0, "bytes_dropped": 0, "segments_deleted": 0, "seconds": 0.0}
        self.last_recovery = stats
        prev_next = None
        for j in range(i, len(segs)):
            seg = segs[j]
            dropped = seg.recover()
            stats["segments_validated"] += 1
            stats["bytes_dropped"] += dropped
            if prev_next is not None and seg.size and seg.base_offset < prev_next:
                raise CorruptRecordError(f"segment base {seg.base_offset} overlaps the previous segment",
                                         seg.log_path, 0)
            prev_next = seg.next_offset
            if j < len(segs) - 1:
                if dropped or seg.size == 0:
                    # Offsets must stay contiguous: whatever follows a damaged segment cannot be trusted.
                    for later in segs[j + 1:]:
                        log.warning("recovery: deleting %s after a truncated segment", later.log_path)
                        stats["bytes_dropped"] += later.size
                        stats["segments_deleted"] += 1
                        later.delete()
                    segs = segs[:j + 1]
                    break
                seg.seal()
        stats["seconds"] = time.monotonic() - t0
        return segs

    # ------------------------------------------------------------------ offsets

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may read. A reader in another process than the writer looks for it as
        :attr:`log_end_offset` does (see :meth:`_refresh_locked`): a start that the writer's retention or
        ``delete_records`` raised is seen by a reader that only asks for the start, not only by one that reads."""
        self._refresh()
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get (one past the last visible record)."""
        if self._closed:
            return self._final_end
        self._refresh()
        return self._segments[-1].next_offset if self._segments else self._log_start

    @property
    def segments(self) -> list[Segment]:
        """A snapshot of the segment list, oldest first."""
        return list(self._segments)

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _refresh(self, force: bool = False) -> bool:
        """As a reader of another process's writes, take in new batches and segments. True if anything grew.

        With ``force`` (a segment of the snapshot vanished or was replaced) every segment's file identity
        is checked. Runs under the partition lock, so reader threads do not race each other (sizes never
        move back) nor a thread of this process that is becoming the writer (its segments are never
        replaced).
        """
        if self._lock_fd is not None or self._closed:
            return False
        with self._lock:
            for _ in range(_READ_RETRIES):
                if self._lock_fd is not None or self._closed:
                    return False
                try:
                    return self._refresh_locked(force)
                except FileNotFoundError:  # a segment went or was replaced while we looked: look again
                    force = True
            raise LogFailedError(f"{self.topic}-{self.number}: segments kept changing while being listed")

    def _refresh_locked(self, force: bool = False) -> bool:
        """:meth:`_refresh` under the lock. Usually the active segment's growth only: the directory is
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
        segs = self._segments
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
        check_identity = force or meta != self._meta or not set(self._view[1]) <= set(bases)
        if bases != self._view[1] or check_identity:
            self._meta = meta
            try:
                cp = read_checkpoint(self._checkpoint_path)
            except CorruptRecordError:
                cp = None
            gen = cp.swap_generation if cp is not None else self._swap_gen
            self._swap_gen = gen
            by_base = {s.base_offset: s for s in segs}
            old_last = segs[-1] if segs else None
            new = []
            for b in bases:
                s = by_base.pop(b, None)
                # An opened segment pins its inode, so comparing inodes is exact; one not opened yet is
                # remade whenever files may have been swapped (its inode number may have been reused).
                if s is None or (check_identity and not s.same_file()) or (
                        s._rfd is None and s.generation is not None and s.generation[1] != gen):
                    try:
                        s = self._open_segment(b)
                    except FileNotFoundError:
                        continue
                    grown = True
                new.append(s)
            # Segments gone from the directory (deleted by the writer) are dropped, not closed: see
            # _open_as_writer on descriptors that another thread may still be using.
            if old_last is not None and old_last in new[:-1]:
                try:
                    old_last.refresh()  # its last batches, written before the roll
                except FileNotFoundError:
                    new.remove(old_last)
            if new:
                new[-1].load(tolerate_tail=True)
            self._set_segments(new)
            if cp is not None:
                self._log_start = cp.log_start_offset
            elif new:
                self._log_start = max(self._log_start, new[0].base_offset)
        return grown

    # ------------------------------------------------------------------ appending

    def append(self, records: Iterable[Record]) -> int:
        """Append records (``pylog.Record``); returns the offset of the first one.

        Timestamps left as None get the append time.
        :raises RecordTooLargeError, InvalidRecordError, PartitionLockedError:
        """
        recs = list(records)
        if not recs:
            raise InvalidRecordError("nothing to append")
        for r in recs:
            if not isinstance(r, Record):
                raise InvalidRecordError(f"append takes pylog.Record objects, got {type(r).__name__}")
        _, ts, keys, values, headers = list(zip(*recs))[:5]
        timestamps = None if all(t is None for t in ts) else list(ts)
        return self.append_values(list(values), keys=list(keys), timestamps=timestamps,
                                  headers=headers if any(headers) else None)

    def append_values(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                      timestamps: Sequence[int | None] | None = None,
                      headers: Sequence[Any] | None = None, *, producer: tuple[int, int, int] | None = None,
                      compression: str | None = None) -> int:
        """Fast path: append parallel lists of values (and keys, timestamps, headers); return the first offset.

        Large lists are split into batches that fit ``max.message.bytes``. ``producer`` is an idempotent
        producer's ``(producer id, epoch, first sequence number)``: a call that repeats a recent one (a
        retry) is not appended again, and the offset the first call got is returned (see
        :mod:`pylog.storage.producer_state`). ``compression`` ("lz4" or None) is the writer's choice, used when
        the topic's ``compression.type`` is ``producer``.
        :raises RecordTooLargeError: when one record alone exceeds ``max.message.bytes``.
        :raises ProducerFencedError, OutOfOrderSequenceError: for a producer batch out of turn.
        """
        return self._append_lists(values, keys, timestamps, headers, producer, compression, in_turn=False)

    def _append_values_in_turn(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                               timestamps: Any, headers: Sequence[Any] | None,
                               producer: tuple[int, int, int] | None, compression: str | None) -> int:
        """:meth:`append_values` for a writer taking turns (the producer): unlike a direct append it leaves
        the lock free to be handed over (:meth:`hand_over`)."""
        return self._append_lists(values, keys, timestamps, headers, producer, compression, in_turn=True)

    def _append_lists(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None, timestamps: Any,
                      headers: Sequence[Any] | None, producer: tuple[int, int, int] | None, compression: str | None,
                      in_turn: bool) -> int:
        n = len(values)
        if n == 0:
            raise InvalidRecordError("nothing to append")
        vlens, vparts = _column(values, n, "values")
        klens, kparts = _column(keys, n, "keys")
        assert vlens is not None
        return self._append_columns(n, vlens, vparts, klens, kparts, timestamps, headers, producer=producer,
                                    compression=compression, in_turn=in_turn)

    def append_columns(self, value_lengths: np.ndarray, value_data: Any, key_lengths: np.ndarray | None = None,
                       key_data: Any = None, timestamps: np.ndarray | None = None, *,
                       producer: tuple[int, int, int] | None = None) -> int:
        """Columnar fast path: int32 lengths (-1 for null) plus the concatenated non-null bytes.

        From Arrow binary arrays: ``lengths = np.diff(offsets)`` with -1 where the validity bit is 0.
        ``producer`` as for :meth:`append_values`.
        """
        vlens = np.ascontiguousarray(value_lengths, dtype=np.int32)
        n = len(vlens)
        if n == 0:
            raise InvalidRecordError("nothing to append")
        klens = None if key_lengths is None else np.ascontiguousarray(key_lengths, dtype=np.int32)
        if klens is not None and len(klens) != n:
            raise InvalidRecordError(f"{len(klens)} key lengths for {n} values")
        ts = None if timestamps is None else np.ascontiguousarray(timestamps, dtype=np.int64)
        return self._append_columns(n, vlens, [value_data] if value_data is not None else [],
                                    klens, [key_data] if key_data is not None else [], ts, None, contiguous=True,
                                    producer=producer)

    def _codec(self, requested: str | None = None) -> int:
        setting = self.config["compression.type"]
        if setting == "producer":
            setting = requested or "none"
        if setting not in ("lz4", "none", "uncompressed"):
            raise InvalidRecordError(f"compression {setting!r} is not supported (lz4 or none)")
        return CODEC_LZ4 if setting == "lz4" else CODEC_NONE

    def _batch_bounds(self, n: int, vlens: np.ndarray, klens: np.ndarray | None,
                      headers: Sequence[Any] | None, data_bytes: int | None = None) -> list[tuple[int, int]]:
        """Split records [0, n) into runs whose encoded size stays within max.message.bytes.

        ``data_bytes``, when the caller knows it (columnar appends), is the key + value bytes.
        """
        limit = self.config["max.message.bytes"] - HEADER_SIZE
        if headers is None:  # cheap upper bound first: most appends fit in one batch
            if data_bytes is None:
                data_bytes = int(vlens.sum()) + (int(klens.sum()) if klens is not None else 0) + 2 * n
            if data_bytes + _RECORD_OVERHEAD * n <= limit:
                return [(0, n)]
        sizes = np.maximum(vlens, 0).astype(np.int64) + _RECORD_OVERHEAD
        if klens is not None:
            sizes += np.maximum(klens, 0)
        if headers is not None:
            # An estimate (UTF-8 keys, msgpack's worst-case prefixes); encoded batches are checked exactly.
            sizes += np.fromiter((sum(len(k.encode()) + len(v or b"") + 11 for k, v in h) + 5 if h else 1
                                  for h in headers), np.int64, n)
        total = int(sizes.sum())
        if total <= limit:
            return [(0, n)]
        cum = np.cumsum(sizes)
        bounds = []
        start = 0
        base = 0
        while start < n:
            stop = int(np.searchsorted(cum, base + limit, side="right"))
            stop = max(stop, start + 1)
            bounds.append((start, stop))
            base = int(cum[stop - 1])
            start = stop
        return bounds

    def _append_columns(self, n: int, vlens: np.ndarray, vparts: list, klens: np.ndarray | None, kparts: list,
                        timestamps: Any, headers: Sequence[Any] | None, contiguous: bool = False,
                        producer: tuple[int, int, int] | None = None, compression: str | None = None,
                        in_turn: bool = False) -> int:
        if self.config.compact and (klens is None or int(klens.min()) < 0):
            raise InvalidRecordError(f"{self.topic} is compacted: every record needs a key")
        data_bytes = None
        if contiguous:
            data_bytes = sum(memoryview(part).nbytes for part in vparts) + sum(memoryview(part).nbytes for part in kparts)
        bounds = self._batch_bounds(n, vlens, klens, headers, data_bytes)
        if producer is not None and (producer[0] < 0 or not 0 <= producer[2] < _SEQ_MOD):
            raise InvalidArgumentError(f"producer must be (id >= 0, epoch, 0 <= sequence < 2**31), got {producer!r}")
        with self._lock:
            if self._lock_fd is None:
                self._ensure_writer()
                self._in_turns = in_turn
            elif not in_turn:
                self._in_turns = False  # a direct append: this handle keeps the lock (see hand_over)
            skip, earlier = 0, None
            if producer is not None:
                state = self._producer_state()
                skip, earlier = state.check(producer[0], producer[1], producer[2], n)
                if skip == n:
                    assert earlier is not None
                    return earlier  # a retry of a call that landed
                if skip:
                    # A retry of a call that failed part-way: its first batches landed; append the rest.
                    vlens, vparts = _slice_parts(vlens, vparts, skip, n, contiguous)
                    if klens is not None:
                        klens, kparts = _slice_parts(klens, kparts, skip, n, contiguous)
                    timestamps = None if timestamps is None else timestamps[skip:]
                    headers = None if headers is None else headers[skip:]
                    n -= skip
                    producer = (producer[0], producer[1], (producer[2] + skip) % _SEQ_MOD)
                    bounds = self._batch_bounds(n, vlens, klens, headers, None if not contiguous else (
                        sum(memoryview(p).nbytes for p in vparts) + sum(memoryview(p).nbytes for p in kparts)))
            first = self._segments[-1].next_offset
            # Every batch is encoded and checked against max.message.bytes before any is written, so a
            # call that fails validation appends nothing. An I/O error part-way leaves the batches written
            # before it; for an idempotent producer they are recorded one by one, so its retry appends
            # only the rest.
            encoded = self._encode_runs(first, bounds, n, vlens, vparts, klens, kparts, timestamps, headers,
                                        contiguous, producer, compression)
            written = 0
            try:
                for parts, h in encoded:
                    self._write_batch(parts, h)
                    written += h.record_count
                    if producer is not None:
                        state.rebuild([h])
            except BaseException:
                # Batches that landed before the error still count and wake readers; no flush now, whose
                # own error would replace the one that stopped the call.
                if written:
                    self._after_append(written, flush=False)
                raise
            self._after_append(written)
        return first if earlier is None else earlier

    def _producer_state(self) -> ProducerState:
        """The idempotent-producer table, loaded on first use: the snapshot, then the batch headers after it."""
        state = self._producers
        if state is None:
            try:
                snap = ProducerState.read_snapshot(self.directory)
            except CorruptRecordError as exc:
                log.warning("%s: ignoring the producer snapshot (%s); rebuilding from the log", self.directory, exc)
                snap = None
            end = self._segments[-1].next_offset
            state, start = snap if snap is not None and snap[1] <= end else (ProducerState(), 0)
            segs, bases = self._view
            for seg in segs[max(0, bisect.bisect_right(bases, start) - 1):]:
                state.rebuild(h for _, h in seg.batch_headers() if h.last_offset >= start)
            self._producers = state
        return state

    def _snapshot_producers(self, durable: bool = True) -> None:
        if self._producers is not None:
            self._producers.expire(now_ms(), self.config["producer.id.expiration.ms"])
            self._producers.write_snapshot(self.directory, self._segments[-1].next_offset, durable=durable)

    def _encode_runs(self, first: int, bounds: list[tuple[int, int]], n: int, vlens: np.ndarray, vparts: list,
                     klens: np.ndarray | None, kparts: list, timestamps: Any, headers: Sequence[Any] | None,
                     contiguous: bool, producer: tuple[int, int, int] | None = None,
                     compression: str | None = None) -> list[tuple[list, Any]]:
        """Encode records [start, stop) of each bound as one batch, halving any batch that comes out over
        max.message.bytes; a single record that does not fit raises RecordTooLargeError."""
        codec = self._codec(compression)
        log_append = self.config.log_append_time
        max_bytes = self.config["max.message.bytes"]
        now = now_ms()
        pid, epoch, seq = producer if producer is not None else (-1, -1, -1)
        out: list[tuple[list, Any]] = []
        todo = list(reversed(bounds))
        base = first
        while todo:
            start, stop = todo.pop()
            if start == 0 and stop == n:
                vl, vp, kl, kp = vlens, vparts, klens, kparts
            else:
                vl, vp = _slice_parts(vlens, vparts, start, stop, contiguous)
                kl, kp = (None, []) if klens is None else _slice_parts(klens, kparts, start, stop, contiguous)
            parts, h = encode_parts(
                value_lengths=vl, value_data=vp, key_lengths=kl, key_data=kp,
                timestamps=None if timestamps is None else timestamps[start:stop],
                headers=None if headers is None else headers[start:stop],
                base_offset=base, default_timestamp=now, codec=codec, log_append_time=log_append,
                producer_id=pid, producer_epoch=epoch, base_sequence=-1 if pid < 0 else (seq + start) % _SEQ_MOD)
            if h.size > max_bytes:
                if stop - start == 1:
                    raise RecordTooLargeError(
                        f"record {start} needs {h.size} bytes, over max.message.bytes ({max_bytes}) of "
                        f"{self.topic}-{self.number}")
                mid = (start + stop) // 2
                todo.extend([(mid, stop), (start, mid)])
                continue
            out.append((parts, h))
            base = h.next_offset
        return out

    def _write_batch(self, parts: list, h: Any) -> None:
        if self._failed is not None:
            raise LogFailedError(f"{self.topic}-{self.number} failed earlier ({self._failed}); reopen the store")
        seg = self._segments[-1]
        if seg.size and self._should_roll(seg, h):
            seg = self._roll()  # starts at seg.next_offset, the base offset already in the header
        try:
            seg.append(h, parts, h.max_timestamp)
        except OSError as exc:
            if seg.size != os.stat(seg.log_path).st_size:
                self._failed = f"write failed and could not be rolled back: {exc}"
                state, then = "the partition refuses work until the store is reopened", "reopen the store"
            else:
                state, then = "the partition is unchanged and takes appends again", "retry"
            raise fault(exc, f"appending to {self.topic}-{self.number}",
                        f"nothing from offset {h.base_offset} on was appended (earlier batches of the same call "
                        f"were); {state}", then)

    def _should_roll(self, seg: Segment, h: Any) -> bool:
        cfg = self.config
        if seg.size + h.size > cfg["segment.bytes"]:
            return True
        first = seg.first_timestamp
        # A compacted topic also rolls by max.compaction.lag.ms: the cleaner never touches the active
        # segment, so a record could otherwise wait longer than promised (Kafka does the same).
        limit = min(cfg["segment.ms"], cfg["max.compaction.lag.ms"]) if cfg.compact else cfg["segment.ms"]
        if first is not None and h.max_timestamp - first > limit:
            return True
        if h.last_offset - seg.base_offset > _MAX_RELATIVE:
            return True
        return seg.index_full

    def _roll(self) -> Segment:
        """Seal the active segment (trimmed indexes) and start a new one at the next offset. The sealed
        segment is fsynced in the background (see :meth:`_sync_rolled`): the recovery point stays before
        it until then."""
        old = self._segments[-1]
        try:
            old.seal(durable=False)
            new = Segment.create(self.directory, old.next_offset, *self._new_segment_args())
            new.generation = (self._checkpoint_path, self._swap_gen)  # moved on by bump_swap_generation
        except OSError as exc:
            # The old segment is no longer writable and no new one exists: refuse work until reopened
            # (recovery then finishes the roll or rolls it back).
            self._failed = f"roll at offset {old.next_offset} failed: {exc}"
            cause = fault(exc, f"rolling {self.topic}-{self.number} at offset {old.next_offset}",
                          "nothing was appended from there on; the partition refuses work until the store is "
                          "reopened (its next writer finishes or undoes the roll)", "reopen the store")
            raise LogFailedError(f"{self.topic}-{self.number}: {self._failed if cause is exc else cause}") from cause
        self._set_segments(self._segments + [new])
        self._unsynced.append(old)
        # Until the background sync is done, a power cut may damage the sealed segment, and only a dirty
        # checkpoint makes the next writer re-validate it: a writer taking turns may have left a clean one,
        # or a dirty one not fsynced (see _open_as_writer). The recovery point stays where it was.
        if not self._cp_durably_dirty:
            self._write_checkpoint()
        # Not fsynced: the data it describes is not durable yet either. A snapshot that outlives the data
        # names an offset past the log's end after a power cut, and is then rebuilt from batch headers.
        self._snapshot_producers(durable=False)
        try:
            syncer.submit(self._sync_rolled)
        except RuntimeError as exc:  # no new thread at interpreter shutdown: flush and close sync it instead
            log.warning("%s-%d: no background sync of the rolled segment (%s)", self.topic, self.number, exc)
        log.debug("rolled %s-%d at offset %d", self.topic, self.number, new.base_offset)
        return new

    def _sync_rolled(self) -> None:
        """(The background sync thread.) fsync the segments rolled since the last sync, without the
        partition lock, so appends go on meanwhile; then move the recovery point past them."""
        with self._lock:
            pending = list(self._unsynced)
        if not pending:
            return
        try:
            for seg in pending:
                seg.sync_files()
            fsync_dir(self.directory)
        except FileNotFoundError:
            return  # the partition was deleted (or is being deleted) under the job: nothing is left to sync
        except OSError as exc:
            with self._lock:
                self._sync_failed(exc)
            return
        with self._lock:
            done = 0
            while done < len(self._unsynced) and done < len(pending) and self._unsynced[done] is pending[done]:
                done += 1
            if not done:
                return  # a flush, close or handover synced them first
            del self._unsynced[:done]
            if self._lock_fd is None or self._closed or self._failed is not None:
                return
            self._advance_recovery_point()

    def _sync_rolled_now(self) -> None:
        """Under the lock: fsync what the background sync has not done yet (cheap if it has)."""
        if not self._unsynced:
            return
        if self._failed is not None:
            # Linux reports a failed writeback once, to one fsync: a later fsync through a new descriptor
            # succeeds although the pages may be gone. Never call such a segment durable.
            raise LogFailedError(f"{self.topic}-{self.number} failed earlier ({self._failed}); reopen the store")
        try:
            for seg in self._unsynced:
                seg.sync_files()
            fsync_dir(self.directory)
        except OSError as exc:
            self._sync_failed(exc)
            raise fault(exc, f"syncing {self.topic}-{self.number}", "the segments rolled since the last sync may "
                        "not be durable; the partition refuses work until the store is reopened", "reopen the store")
        self._unsynced.clear()

    def _sync_failed(self, exc: OSError) -> None:
        """Under the lock: an fsync of rolled segments failed. The kernel may have dropped the pages it
        could not write, so appending on would build on a log with a hole after the next crash: refuse
        work until reopened (recovery then re-validates from the recovery point, which never moved past
        them)."""
        if self._failed is None:
            self._failed = f"fsync of a rolled segment failed: {exc}"
        log.error("%s-%d: fsync of a rolled segment failed: %s", self.topic, self.number, exc)

    def sync_rolled(self) -> None:
        """fsync the segments rolls sealed that the background sync thread has not got to yet, and move
        the recovery point past them: for maintenance that must not run ahead of durable data (the
        compactor's first-dirty offset). A no-op for a handle that is not the writer.

        :raises LogFailedError: when an fsync of rolled segments failed, now or before.
        """
        with self._lock:
            if self._lock_fd is None or self._closed:
                return
            if self._unsynced:
                self._sync_rolled_now()
                self._advance_recovery_point()

    @property
    def synced_through(self) -> int:
        """Offsets below this lie in segments that are sealed and fsynced (the active segment's base when
        no roll waits for its background sync): what maintenance may treat as settled for good."""
        with self._lock:
            if self._unsynced:
                return self._unsynced[0].base_offset
            segs = self._segments
            return segs[-1].base_offset if segs else self._log_start

    def _advance_recovery_point(self) -> None:
        """Under the lock: move the recovery point to the oldest segment still unsynced, or else to the
        active one, and record it in the checkpoint. Not on a failed partition: what it wrote is suspect."""
        if self._failed is not None:
            return
        target = self._unsynced[0].base_offset if self._unsynced else self._segments[-1].base_offset
        if target > self._recovery_point:
            self._recovery_point = target
            # Not fsynced: a power cut that loses this write leaves the older, also dirty, checkpoint, and
            # the next writer re-validates a little more.
            self._write_checkpoint(durable=False)

    def roll(self) -> None:
        """Force a new active segment (no-op when the active one is empty)."""
        with self._lock:
            self._ensure_writer()
            if self._segments[-1].size:
                self._roll()

    def _after_append(self, n: int, flush: bool = True) -> None:
        # Readers in other processes: the batches are visible from here on (they read up to the file size),
        # whether or not the flush below succeeds.
        self._notify.publish()
        self._unflushed += n
        cfg = self.config
        try:
            if flush and self._failed is None and (self._unflushed >= cfg["flush.messages"] or (
                    cfg["flush.ms"] < (1 << 62) and (time.monotonic() - self._last_flush) * 1000 >= cfg["flush.ms"])):
                self._flush_locked()
        finally:
            # Waiters in this process, whatever the flush did: the records are there to read.
            with self._appended:
                self._appended.notify_all()

    def flush(self) -> None:
        """fsync everything appended through this handle so far: after this returns it survives a crash or
        power loss. Also after this handle let the writer lock go (a producer of this process may have
        handed the partition over between another's append and its flush): then it fsyncs the segment
        files that hold its appends not yet fsynced (see :meth:`release_writer`).

        :raises LogFailedError: when an fsync failed, now or before (reopen the store).
        """
        with self._lock:
            if self._lock_fd is not None:
                self._flush_locked()
            elif self._handed_over:
                self._sync_handed_over()

    def flush_if_due(self) -> float:
        """fsync when ``flush.ms`` has passed since the last fsync and records wait; for the store's
        background thread. Returns the ``time.monotonic()`` at which to look again (inf: never)."""
        ms = self.config["flush.ms"]
        if ms >= (1 << 62) or (self._lock_fd is None and not self._handed_over):
            return math.inf
        if self._unflushed and time.monotonic() - self._last_flush >= ms / 1000:
            with self._lock:
                if not self._closed and self._failed is None and self._unflushed:
                    if self._lock_fd is not None:
                        self._flush_locked()
                    elif self._handed_over:
                        self._sync_handed_over()
        return self._last_flush + ms / 1000 if self._unflushed else time.monotonic() + ms / 1000

    def _flush_locked(self) -> None:
        if self._failed is not None:
            raise LogFailedError(f"{self.topic}-{self.number} failed earlier ({self._failed}); reopen the store")
        if self._handed_over:
            self._sync_handed_over()
        if self._unsynced:
            self._sync_rolled_now()
            self._advance_recovery_point()
        try:
            self._segments[-1].flush()
        except OSError as exc:
            # As for a rolled segment (_sync_failed): the kernel may have dropped the pages it could not
            # write, and a later fsync would succeed without them. Never call this log durable again.
            self._failed = f"fsync of the active segment failed: {exc}"
            raise fault(exc, f"flushing {self.topic}-{self.number}",
                        "what was appended since the last flush may not be durable; the partition refuses work "
                        "until the store is reopened", "reopen the store")
        self._unflushed = 0
        self._last_flush = time.monotonic()

    def _sync_handed_over(self) -> None:
        """Under the lock: fsync the segment files that hold appends through this handle not fsynced when
        it let the writer lock go (see :meth:`release_writer`), writer again or not. A file retention or
        compaction removed needs nothing: retention dropped its records, and a compaction swap fsyncs the
        files it puts in place (nor does it touch a segment before its roller synced it). As a reader the
        handle's appends are then all durable."""
        if self._failed is not None:
            raise LogFailedError(f"{self.topic}-{self.number} failed earlier ({self._failed}); reopen the store")
        for path in sorted(self._handed_over):
            try:
                fd = os.open(path, os.O_RDONLY)  # Linux syncs a file's dirty pages through any descriptor
            except FileNotFoundError:
                fd = None
            except OSError as exc:  # nothing was fsynced: a later flush may try again
                raise fault(exc, f"flushing {self.topic}-{self.number}", "what this handle appended before it "
                            "handed the partition over may not be durable yet")
            if fd is not None:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    # As for the active segment (_flush_locked): the pages may be gone and a later fsync
                    # would succeed without them. Never call this log durable again.
                    self._failed = f"fsync of a segment appended to before a handover failed: {exc}"
                    raise fault(exc, f"flushing {self.topic}-{self.number}",
                                "what this handle appended before it handed the partition over may not be durable; "
                                "the partition refuses work until the store is reopened", "reopen the store")
                finally:
                    os.close(fd)
            self._handed_over.discard(path)
        if self._lock_fd is None:
            self._unflushed = 0
            self._last_flush = time.monotonic()

    def wait_for_data(self, offset: int, timeout: float | None) -> bool:
        """Block until ``log_end_offset > offset`` or ``timeout`` seconds pass; True when data is there.

        Appends through this handle wake waiters at once (a condition variable). Appends by another process
        (or another handle) wake them through the partition's ``notify`` file (:mod:`pylog.storage.notify`): a futex
        on a shared counter, so an idle wait costs no CPU; the log end is re-checked after each wake-up and
        at least every :data:`pylog.storage.notify.SLICE` seconds, so a lost wake-up or a dead writer costs a bounded
        delay. Where that is unavailable the log end is polled, every 0.2 ms at first and backing off to
        every 5 ms while nothing comes. Never blocks past ``timeout``; returns False at once after
        :meth:`close`.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = _POLL_MIN
        watch = None if self._lock_fd is not None or self._closed else self._notify.watch()
        try:
            while True:
                seq = watch.sequence() if watch is not None else 0  # before the log end: see pylog.storage.notify
                if self.log_end_offset > offset:
                    if watch is not None:
                        watch.found(seq)
                    return True
                if self._closed:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if watch is not None and self._lock_fd is None and watch.sleep(seq, remaining):
                    continue
                # The writer's own appends notify the condition; without wake-ups from another process, poll.
                if self._lock_fd is not None:
                    step = remaining
                else:
                    step = poll if remaining is None else min(poll, remaining)
                poll = min(poll * 2, _POLL_MAX)
                with self._appended:
                    segs = self._segments  # empty for a reader opened before the writer created any segment
                    if not segs or segs[-1].next_offset <= offset:
                        self._appended.wait(step)
        finally:
            if watch is not None:
                watch.close()

    # ------------------------------------------------------------------ maintenance (writer only)

    def enforce_retention(self, now: int | None = None) -> RetentionResult:
        """Delete the oldest segments that ``retention.ms`` / ``retention.bytes`` / the log start allow.

        Makes this handle the partition's writer (like an append). Topics whose ``cleanup.policy`` lacks
        ``delete`` only lose segments below the log start offset. ``now`` (ms) is for tests.
        """
        now = now_ms() if now is None else now
        cfg = self.config
        timed = "delete" in cfg["cleanup.policy"]
        with self.maintenance_lock, self._lock:
            self._ensure_writer_locked()
            segs = self._segments
            count, reasons = deletable_prefix(segs, self._log_start, now,
                                              cfg["retention.ms"] if timed else -1,
                                              cfg["retention.bytes"] if timed else -1)
            result = RetentionResult(self.topic, self.number, reasons=reasons, log_start_offset=self._log_start)
            if count == 0:
                return result
            if count == len(segs):
                self._roll()  # every segment, the active one too: keep an empty one to append to
                result.rolled = True
            self._delete_head(count, result)
            return result

    def delete_records(self, before_offset: int) -> int:
        """Kafka's DeleteRecords: make ``before_offset`` the log start offset; returns the new log start.

        Reads below it raise :class:`OffsetOutOfRangeError` from then on (also after a restart); segments
        wholly below it are deleted. An offset at or below the current log start changes nothing.
        :raises OffsetOutOfRangeError: when ``before_offset`` is past the log end offset.
        """
        if not isinstance(before_offset, int) or isinstance(before_offset, bool):
            raise InvalidArgumentError(f"before_offset must be an int, got {type(before_offset).__name__}")
        if before_offset < 0:
            raise InvalidArgumentError(f"before_offset must be >= 0, got {before_offset}")
        with self.maintenance_lock, self._lock:
            self._ensure_writer_locked()
            end = self._segments[-1].next_offset
            if before_offset > end:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before_offset}: the log of {self.topic}-{self.number} ends "
                    f"at {end}", before_offset, self._log_start, end)
            if before_offset <= self._log_start:
                return self._log_start
            self._log_start = before_offset
            self._write_checkpoint()
            segs = self._segments
            k = 0
            while k < len(segs) - 1 and segs[k + 1].base_offset <= before_offset:
                k += 1
            if k:
                self._delete_head(k, RetentionResult(self.topic, self.number))
            return self._log_start

    def _delete_head(self, count: int, result: RetentionResult) -> None:
        """Delete the ``count`` oldest segments (never all): record the new log start first, then unlink."""
        segs = self._segments
        assert 0 < count < len(segs)
        doomed, kept = segs[:count], segs[count:]
        self._log_start = max(self._log_start, kept[0].base_offset)
        self._write_checkpoint()
        self._set_segments(kept)
        for seg in doomed:
            result.deleted_segments.append(seg.base_offset)
            result.bytes_deleted += seg.size
            seg.unlink()  # not closed: readers holding a snapshot may be using it (invariant 6)
        fsync_dir(self.directory)
        result.log_start_offset = self._log_start
        log.info("%s-%d: deleted %d segment(s) below offset %d (%s)", self.topic, self.number, count,
                 self._log_start, ",".join(result.reasons) or "log_start")

    def replace_segments(self, old: list[Segment], new: Segment | None) -> None:
        """Swap the consecutive segments ``old`` for ``new`` (or nothing) in the view; for the compactor,
        which holds :attr:`maintenance_lock` and has already renamed the files in place."""
        with self._lock:
            segs = self._segments
            i = next((j for j, s in enumerate(segs) if s is old[0]), -1)
            if i < 0 or any(a is not b for a, b in zip(segs[i:i + len(old)], old)) or i + len(old) >= len(segs):
                raise AssertionError("compaction swap does not match the segment list")
            self._set_segments(segs[:i] + ([new] if new is not None else []) + segs[i + len(old):])

    # ------------------------------------------------------------------ reading

    def _slices(self, offset: int, max_records: int, max_bytes: int, verify: bool) -> list[ReadSlice]:
        if self._closed:
            raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
        if max_records <= 0:
            return []
        return self._on_current_view(f"a read at offset {offset}", self._slices_once, offset, max_records,
                                     max_bytes, verify)

    def _on_current_view(self, what: str, read: Callable[..., _T], *args: Any) -> _T:
        """Run ``read`` over the current segment view; when retention or compaction deleted or replaced a
        segment of it before it was opened, take a new view and run it again."""
        for _ in range(_READ_RETRIES):
            try:
                return read(*args)
            except FileNotFoundError as exc:
                last = exc
                self._retry_wait()
        raise LogFailedError(f"{self.topic}-{self.number}: segments kept changing under {what} ({last})")

    def _slices_once(self, offset: int, max_records: int, max_bytes: int, verify: bool) -> list[ReadSlice]:
        segs, bases = self._view
        end_offset = segs[-1].next_offset if segs else self._log_start
        if offset >= end_offset and self._refresh():
            segs, bases = self._view
            end_offset = segs[-1].next_offset
        if offset < self._log_start or offset > end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self._log_start}, {end_offset}] of {self.topic}-{self.number}",
                offset, self._log_start, end_offset)
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
            try:
                part, b = seg.read(first, max_records - got, max(max_bytes - nbytes, 1), size, verify)
            except CorruptRecordError as exc:
                # Hand out the records before the bad batch, as a read that ends at a torn tail does; the
                # next read starts at the bad batch and raises. Nothing after it: no offset is skipped.
                part = self._before_damage(seg, exc, first, max_records - got, max(max_bytes - nbytes, 1),
                                           verify)
                if not out and not part:
                    raise
                return out + part
            if part:
                out.extend(part)
                got += sum(stop - start for _, start, stop in part)
                view, _, stop = part[-1]
                h = view.header
                want = h.base_offset + (stop - 1 if view.offset_deltas is None else int(view.offset_deltas[stop - 1])) + 1
            nbytes += b
            if got >= max_records or nbytes >= max_bytes:
                break
        return out

    @staticmethod
    def _before_damage(seg: Segment, exc: CorruptRecordError, offset: int, max_records: int, max_bytes: int,
                       verify: bool) -> list[ReadSlice]:
        """The batches of ``seg`` from ``offset`` up to the bad batch a read of it raised ``exc`` at (every
        position a scan reports is a batch start); [] when none, or when ``exc`` is not at one."""
        if exc.path != seg.log_path or not exc.position:
            return []
        try:
            return seg.read(offset, max_records, max_bytes, exc.position, verify)[0]
        except CorruptRecordError:
            return []

    def read(self, offset: int, max_records: int = 500, max_bytes: int = DEFAULT_MAX_BYTES,
             verify: bool = True) -> list[Record]:
        """Records with offsets >= ``offset``, at most ``max_records`` (and about ``max_bytes``).

        Reading at :attr:`log_end_offset` returns ``[]``. With ``verify`` (default) every batch's CRC is checked.
        :raises OffsetOutOfRangeError: below :attr:`log_start_offset` or above :attr:`log_end_offset`.
        :raises CorruptRecordError: when the batch at ``offset`` does not check (names the file and position);
            a read that runs into a bad batch further on returns the records before it, and the next read,
            which starts at it, raises.
        """
        slices = self._slices(offset, max_records, max_bytes, verify)
        if len(slices) == 1:  # a small read: not worth pausing the collector
            view, a, b = slices[0]
            if b - a < 256:
                return view.records(self.topic, self.number, a, b)
        out: list[Record] = []
        with gc_paused():
            for view, a, b in slices:
                out.extend(view.records(self.topic, self.number, a, b))
        return out

    def read_columns(self, offset: int, max_records: int = 100_000, max_bytes: int = DEFAULT_MAX_BYTES,
                     verify: bool = True) -> RecordColumns:
        """Like :meth:`read` but as :class:`~pylog.storage.records.RecordColumns` (numpy arrays + byte buffers)."""
        return RecordColumns.concat_views(self._slices(offset, max_records, max_bytes, verify), self.topic,
                                          self.number)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp``, or None if there is none."""
        return self._on_current_view("a time lookup", self._offset_for_timestamp_once, timestamp)

    def _retry_wait(self) -> None:
        """A new view: a writer's is already swapped (wait out a swap in progress); a reader re-lists."""
        if self._closed:
            raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
        if self._lock_fd is not None:
            with self._lock:  # a writer's view changes under this lock: wait out a swap in progress
                pass
        else:
            self._refresh(force=True)

    def _offset_for_timestamp_once(self, timestamp: int) -> int | None:
        self._refresh()
        segs = self._segments
        for i, seg in enumerate(segs):
            # A segment opened lazily (read-only, not loaded) has next_offset == base_offset until loaded,
            # so bound it by the next segment's base instead.
            end = segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset
            if seg.size == 0 or end <= self._log_start:
                continue
            if seg.max_timestamp < timestamp:
                continue
            # Only offsets from the log start count: one below it may have the earliest matching timestamp.
            found = seg.offset_for_timestamp(timestamp, seg.size, self._log_start)
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------------ checks and lifecycle

    def check(self, writer_active: bool | None = None) -> list[str]:
        """Full consistency check of every segment and index, up to the end of every file (not only what
        a reader counts as visible: a reader stops at the first damaged batch of the active segment, as
        if it were still being written); returns the problems found (empty if none).

        ``writer_active``: whether another process may be appending right now (None: unknown, assume so);
        then a batch the active file does not wholly hold yet is not reported.
        """
        problems: list[str] = []
        prev_next = None
        segs = self._segments
        for seg in segs:
            if seg is segs[-1] and not self.is_writer:
                problems.extend(seg.check(seg.file_size(), partial_tail_ok=writer_active is not False))
            else:
                problems.extend(seg.check())
            if prev_next is not None and seg.base_offset < prev_next:
                problems.append(f"{seg.log_path}: base offset {seg.base_offset} below previous end {prev_next}")
            if seg.size:
                prev_next = seg.next_offset
        if self._segments and self._segments[-1].base_offset > self.log_end_offset:
            problems.append("active segment starts after the log end offset")
        return problems

    def repair(self) -> dict[str, Any]:
        """Become the writer and cut the log at its first damaged batch: the active segment (or, after an
        unclean stop, every segment from the recovery point) is re-validated batch by batch, and
        everything from the first batch that fails its checks on is dropped; the offsets of dropped
        records are given to the next appends.

        For a partition whose writer open is refused because its active segment is damaged in the middle
        after a clean close (:class:`CorruptRecordError`); check with ``pylog verify`` first, and copy
        the partition directory if the records after the damage matter. Returns :attr:`last_recovery`
        (bytes dropped, segments validated and deleted); a handle that already writes the partition
        repairs nothing and returns ``{}``.

        :raises PartitionLockedError: when another handle writes the partition.
        """
        with self._lock:
            if self._lock_fd is not None:
                return {}
            self._repairing = True
            try:
                self._ensure_writer_locked()
            finally:
                self._repairing = False
            return dict(self.last_recovery or {})

    def release_writer(self) -> None:
        """Give up the writer lock and go back to reading, so that another handle may write next.

        For partitions that many handles append to in turn (the committed offsets topic, producers of
        several processes sharing a partition): writes a clean checkpoint, so the next writer opens
        without re-validating anything but the active segment's tail. Unlike :meth:`close` it leaves the
        active segment's indexes live (unsealed), as a running writer does, so handing over rewrites no
        index file. The log is not fsynced here; the topic's flush policy decides that, as for any
        append: the active segment's file is remembered when it holds appends not fsynced yet, and this
        handle's next :meth:`flush` (or :meth:`close`) fsyncs it, writer again or not. A no-op for a handle
        that is not the writer.
        """
        with self.maintenance_lock, self._lock:
            if self._lock_fd is None or self._closed:
                return
            segs = self._segments
            # Rolled segments are synced below (_sync_rolled_now); a failure there fails the partition, and
            # this handle's next flush then raises.
            if self._unflushed and segs and segs[-1].log_path not in self._handed_over:
                if len(self._handed_over) >= _HANDED_OVER_MAX and self._failed is None:
                    # A writer taking turns with acks=1 and no flush policy would remember one file per
                    # segment for its life: fsync them now. Mostly rolled segments that their roller's
                    # sync has made clean already: cheap. A failure leaves them (and, for an fsync, fails
                    # the partition): the next flush raises.
                    try:
                        self._sync_handed_over()
                    except Exception:
                        log.debug("pylog: fsync of %s-%d's handed-over segments failed", self.topic, self.number,
                                  exc_info=True)
                self._handed_over.add(segs[-1].log_path)
            try:
                if self._failed is None and segs:
                    active = segs[-1]
                    # A rolled segment is not checked by the next writer (only the active one is): it must
                    # be durable before a clean checkpoint names offsets past it.
                    self._sync_rolled_now()
                    try:
                        # Not fsynced: a snapshot lost to a power cut, or naming an offset past the log's
                        # end after one, is rebuilt from the batch headers (see _producer_state).
                        self._snapshot_producers(durable=False)
                    finally:
                        # The indexes stay live: the next writer continues them without rewriting them.
                        active.stop_appending()
                    self._note_active_checked()
                    self._recovery_point = active.next_offset
                    # Not fsynced either: if a power cut loses the log's tail, the next writer's check of the
                    # active segment finds it and recovers (as after any unclean stop).
                    self._write_checkpoint(clean=True, durable=False)
            except OSError as exc:
                raise fault(exc, f"handing over {self.topic}-{self.number}", "the writer lock was released all the "
                            "same; the next writer recovers the partition from its last checkpoint", "go on")
            finally:
                # Whatever failed above (a full disk), the lock goes and this handle reads on: the next
                # writer recovers from the checkpoint as it is.
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
                self._lock_fd = None
                self._in_turns = False
                self._producers = None  # another writer may append idempotent batches before we write again
                self._takes_turns = True
                self._reader_view_of_own()

    def _reader_view_of_own(self) -> None:
        """After :meth:`release_writer`: go on reading through the segment list this handle just wrote,
        exact at the moment it let go, instead of listing the directory; only the active segment is
        reopened, as a reader's."""
        segs = list(self._segments)
        if not segs:
            self._load_readonly()
            return
        self._start_reader_clock()
        try:
            active = self._open_segment(segs[-1].base_offset)
        except FileNotFoundError:  # not for want of our own files, but never fail a release over it
            self._load_readonly()
            return
        active.load(tolerate_tail=True)
        segs[-1] = active
        self._set_segments(segs)

    def try_become_writer(self) -> bool:
        """Take the writer lock if it is free right now (no waiting); True when this handle is the writer."""
        with self._lock:
            if self._lock_fd is not None:
                return True
            saved, self.lock_timeout_ms = self.lock_timeout_ms, 0
            try:
                self._ensure_writer_locked()
            except PartitionLockedError:
                return False
            finally:
                self.lock_timeout_ms = saved
            return True

    def _lock_for_discard(self) -> bool:
        """Take the writer lock of a partition whose files are about to be deleted (a topic deletion),
        without opening it for writing: no recovery and no check of the active segment, which a partition
        damaged in the middle would fail (the data goes away anyway). Appends through this handle are
        refused from then on. False when this handle is the writer already; True when the lock was taken
        here, to be let go by :meth:`_unlock_discard` if the deletion fails."""
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
            if self._lock_fd is not None:
                return False
            try:
                fd = self._acquire_lock()
            except OSError as exc:
                raise fault(exc, f"locking {self.topic}-{self.number} to delete it", "nothing was deleted")
            self._lock_fd = fd
            self._failed = "its topic is being deleted"  # the segments are not open for appending
            return True

    def _unlock_discard(self) -> None:
        """Undo :meth:`_lock_for_discard` after a deletion that failed: the partition is as it was."""
        with self._lock:
            fd, self._lock_fd, self._failed = self._lock_fd, None, None
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def close(self, discard: bool = False) -> None:
        """Flush, seal the active segment's indexes, write a clean checkpoint and release the writer lock.

        With ``discard`` (the partition's files are being deleted) nothing is written, only released.
        Not to be called while other threads are still reading this partition. Waits for maintenance
        under way (a compaction or retention pass) to finish.
        """
        with self.maintenance_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            segs = self._segments
            if discard:
                self._failed = "discarded"
            error: Exception | None = None
            if self._lock_fd is None and self._handed_over and self._failed is None:
                try:
                    self._sync_handed_over()  # what it appended before it let the writer lock go
                except Exception as exc:  # closed all the same; raised once closed
                    error = exc
            if self._lock_fd is not None:
                try:
                    if self._failed is None and segs:
                        active = segs[-1]
                        self._snapshot_producers()
                        self._sync_handed_over()
                        self._sync_rolled_now()
                        active.seal(durable=True)
                        self._recovery_point = active.next_offset
                        self._write_checkpoint(clean=True)
                except OSError as exc:
                    raise fault(exc, f"closing {self.topic}-{self.number}", "it was closed and its writer lock "
                                "released, but not cleanly: its next writer re-validates it", "open it again")
                finally:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    os.close(self._lock_fd)
                    self._lock_fd = None
            # Closing releases descriptors and mappings now (a store opened and closed in a loop must not
            # pile them up); calls made after close raise StoreClosedError, and close() must not race
            # with reads still running in other threads, like closing a file under a reader.
            self._final_end = segs[-1].next_offset if segs else self._log_start
            self._set_segments([])
            for seg in segs:
                seg.close()
            if self._want_fd is not None:
                os.close(self._want_fd)
                self._want_fd = None
            self._notify.close()  # wakes this handle's waiters sleeping on the notify file
            with self._appended:
                self._appended.notify_all()
            if error is not None:
                raise error

    def __repr__(self) -> str:
        return f"Partition({self.topic!r}, {self.number}, segments={len(self._segments)})"


def _retry(attempt: Callable[[], bool], deadline: float, delay: float, cap: float) -> bool:
    """Call ``attempt`` until it returns True (True) or ``time.monotonic()`` passes ``deadline`` after a
    failed attempt (False), sleeping ``delay`` seconds between attempts, doubled each time up to ``cap``."""
    while not attempt():
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, cap)
    return True


def _slice_parts(lengths: np.ndarray, parts: list, start: int, stop: int, contiguous: bool) -> tuple[np.ndarray, list]:
    """Lengths and data parts of records [start, stop) of a column whose null items have no part."""
    lens = lengths[start:stop]
    if contiguous:
        clipped = np.maximum(lengths, 0)
        lo = int(clipped[:start].sum())
        hi = lo + int(clipped[start:stop].sum())
        return lens, [memoryview(parts[0])[lo:hi]] if parts else []
    present = lengths >= 0
    lo = int(present[:start].sum())
    hi = lo + int(present[start:stop].sum())
    return lens, parts[lo:hi]
