"""A partition (:class:`Partition`): an ordered list of segments, one of them active, plus the writer lock and recovery.

Its invariants (the parts in :mod:`pylog.storage.log` cite these numbers):

1. Offsets are dense (as written), strictly increasing and never reused: the next offset only grows, and a new
   segment starts at the offset after the last one written (:mod:`~pylog.storage.log.local_log`,
   :mod:`~pylog.storage.log.append`).
2. A reader never sees part of a batch: readers in this process read up to sizes published after each write
   completes; readers in other processes only count a batch once it is whole and its CRC checks
   (:mod:`~pylog.storage.log.local_log`).
3. After a crash the writer re-validates the segments from the checkpointed recovery point on, truncates a torn
   tail and rebuilds their indexes; whatever was flushed (fsync) is kept (:mod:`~pylog.storage.log.loader`,
   :mod:`~pylog.storage.log.durability`).
4. Exactly one writer per partition across threads and processes at any moment: an ``flock`` on ``.lock`` taken on
   the first write and held until :meth:`Partition.close` or :meth:`Partition.release_writer` (which the store's
   descriptor budget also calls, through :meth:`PartitionInternals.release_handles`, for a partition used least
   recently: see :mod:`pylog.storage.handles`). Writers that take turns (producers of several processes sharing a
   partition) ask the holder for it through a shared ``flock`` on ``.want`` while they wait; the holder looks with
   :meth:`PartitionInternals.handover_wanted` and hands over by releasing; that probe's descriptor is never closed
   under a probe in another thread (its number reused, the probe's unlock could release another file's lock).
   Readers take no lock (:mod:`~pylog.storage.log.writer_lock`).
5. Retention removes whole segments from the head only, after the checkpoint has recorded the new log start offset
   (so a crash mid-way leaves only segments that the next open deletes); the active segment goes only after a roll
   has put an empty one after it (:mod:`~pylog.storage.log.maintenance`, :mod:`~pylog.storage.log.loader`).
   Segments before the recovery point are sealed and fsynced. A roll leaves the fsync of the segment it sealed to
   the background sync thread (:mod:`pylog.storage.syncer`), which moves the recovery point past it once done;
   ``flush``, ``close`` and handing the writer lock over sync whatever is still pending first. Handing over does
   not fsync the active segment: a handle's ``flush`` and ``close`` fsync every file it appended to and has not
   fsynced, whether or not it is still the writer (:mod:`~pylog.storage.log.durability`).
6. Maintenance (retention, delete-records, compaction) runs one at a time per partition and only in the writer. It
   never closes a segment another thread may be reading: removed segments are unlinked and released when the last
   snapshot holding them goes; a reader whose segment vanished or was replaced under it takes a new snapshot and
   retries, so it sees the records or ``OffsetOutOfRangeError`` (:mod:`~pylog.storage.log.maintenance`).
7. Reads never go backwards: records come out in strictly increasing offset order even while another process is
   half-way through swapping compacted segments in (:mod:`~pylog.storage.log.local_log`).
8. Once an fsync failed, nothing is called durable again; the partition refuses work until the store is reopened
   (:mod:`~pylog.storage.log.durability`).
9. Every batch of an append call is encoded and checked before any is written; an idempotent producer's retry is
   not appended twice (:mod:`~pylog.storage.log.append`).
10. Damage in the middle of the active segment after a clean close is never cut silently
    (:mod:`~pylog.storage.log.loader`).

This module is the partition's public API (only what docs/CLIENTS.md and GUARANTEES.md tell users about) and wires
the parts, which live below it in :mod:`pylog.storage.log`, each owning one concern, generic in the segment type
(they see a segment through :class:`~pylog.storage.log.segments.SegmentLike` and never import :mod:`pylog.segment`):
the writer lock and turns, the segment list and reads, loading and recovery, durability, checking the public API's
arguments, batch bounds and encoding, writing a call's batches, transactions' state, maintenance, remote reads (tiered
storage), waking readers, the full check, and the internal API
(:class:`~pylog.storage.log.internals.PartitionInternals`, reached through :func:`internals`, not exported from
:mod:`pylog`); :mod:`pylog.storage.log`'s docstring lists which module owns which and the invariants each keeps.

Invariants kept here: the facade holds ONE append lock (an ``RLock``, private) that every part's
writer-side state changes under, and a maintenance lock (private), always taken before it, never after.
The parts never call each other's private names; the facade passes each what it needs. No layer above
storage takes either lock: it asks for what it needs by name. Who touches a partition's files, under which
lock:

- appends, rolls, flushes, checkpoints (:mod:`~pylog.storage.log.write`, :mod:`~pylog.storage.log.durability`):
  the append lock;
- retention and delete-records (:meth:`Partition.enforce_retention`, :meth:`Partition.delete_records`,
  :mod:`~pylog.storage.log.maintenance`): the maintenance lock, then the append lock;
- the compaction swap (:meth:`PartitionInternals.swap_in`, protocol in :mod:`pylog.storage.swap`) and removing
  unfinished compaction output (:meth:`PartitionInternals.remove_swap_leftovers`): the maintenance lock, then
  (for the swap) the append lock; the cleaner itself writes only its own ``.cleaned`` files and its cleaner
  checkpoint, inside :meth:`PartitionInternals.maintenance_pass`;
- opening as the writer, recovery, finishing an interrupted swap (:mod:`~pylog.storage.log.loader`): the append
  lock and the writer lock;
- handing the writer lock over, letting go of descriptors (:meth:`PartitionInternals.release_turn`,
  :meth:`PartitionInternals.release_handles`): the maintenance lock (not waited for by the latter), then the append
  lock; a turn of many appends by another layer holds it through :meth:`PartitionInternals.writer_turn`;
- deleting a topic's files (the store): :meth:`PartitionInternals.held_for_discard`, then ``close(discard=True)``.

Thread-safety: every public method may be called from any thread. Appends serialise on the append lock;
reads take a snapshot of the segment list and sizes and run concurrently with appends and maintenance.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .config import TopicConfig
from .errors import (LogFailedError, OffsetOutOfRangeError, PartitionLockedError, ReadOnlyStoreError,
                     StoreClosedError)
from .storage.fileio import check_descriptors, descriptor_faults, raise_fault, raise_if_gone
from .storage.handles import PER_PARTITION, SEGMENT_COST, HandleCache
from .storage.notify import AppendWatch
from .storage.records import Record, RecordColumns, now_ms, slices_records
from .storage.retention import RetentionResult
from .segment import ReadSlice, Segment
from .storage.log import checks, loader, maintenance
from .storage.log.append import Appender, Columns
from .storage.log.arguments import (array_columns, check_producer, int_argument, list_columns, offset_argument,
                                    record_lists, with_header_rows)
from .storage.log.batches import Data, EncodedBatch, Headers, RecordHeaders, Timestamps
from .storage.log.internals import OwnerOps, PartitionInternals
from .storage.log.txn import (ISOLATION_LEVELS, IsolationLevel, TxnTracker, aborted_in, check_isolation,
                              isolated_read)
from .storage.log.write import BatchWriter
from .storage.log.durability import Durability
from .storage.log.local_log import LocalLog
from .storage.log.waiting import Waiters
from .storage.log.writer_lock import WriterLock

__all__ = ["Partition", "DEFAULT_MAX_BYTES", "PartitionInternals", "internals", "watch_appends",
           # for the layers above: the write path's types (storage.log.batches), reads' isolation levels (.txn)
           "Data", "Headers", "RecordHeaders", "Timestamps", "EncodedBatch", "ISOLATION_LEVELS", "IsolationLevel"]

log = logging.getLogger("pylog.partition")

#: Default byte limit of one read (Kafka's fetch.max.bytes); a read returns at least one batch regardless.
DEFAULT_MAX_BYTES = 50 * 1024 * 1024


class Partition:
    """One partition of a topic, stored in ``directory``. Obtain it with ``store.topic(name).partition(i)``."""

    def __init__(self, topic: str, number: int, directory: str, config: TopicConfig,
                 lock_timeout_ms: int = 0, read_only: bool = False, handles: HandleCache | None = None) -> None:
        self.topic = topic
        self.number = number
        self.directory = directory
        self._config = config
        self.lock_timeout_ms = lock_timeout_ms
        #: Opened through a read-only store: never becomes the writer, creates and maps no file.
        self.read_only = read_only
        self._repairing = False  # see repair()
        #: The store's budget of descriptors (pylog.storage.handles): touched before each use of the files.
        self._handles = handles
        self._touched = (-(1 << 62), 0)  # (tick, weight) of the last touch of the budget
        #: (base offset, inode, byte position, offset there) of the active segment as this handle last
        #: wrote it: the bytes before the position were checked or written by this handle as the writer,
        #: so its next open after a clean checkpoint (its next turn) checks only those after them.
        self._active_checked: tuple[int, int | None, int, int] | None = None
        # Serialises appends, writer-side state and changes of the segment view (an RLock); swap_in
        # (PartitionInternals) holds it while it renames cleaned segments in and changes the view.
        self._append_lock = threading.RLock()
        # Serialises maintenance (retention, delete-records, compaction, handing the writer lock over,
        # letting go of descriptors) and the turns of maintenance_pass / writer_turn / held_for_discard;
        # taken before _append_lock, never after.
        self._maintenance_lock = threading.RLock()
        self._waiters = Waiters(directory, read_only)
        self._closed = False
        self._final_end = 0  # log end offset at close
        #: What the last crash recovery did: segments re-validated, bytes dropped, seconds (None: none ran).
        self.last_recovery: dict[str, Any] | None = None
        if not read_only:
            os.makedirs(directory, exist_ok=True)
        name = f"{topic}-{number}"
        self._writer = WriterLock(directory, name, read_only)
        self._local = LocalLog(Segment, directory, topic, number, config, self._append_lock,
                               lambda: self._writer.held, lambda: self._closed)
        # Recovery point, unsynced rolls, pending flushes and the failed state.
        self._durability = Durability(self._local, self._append_lock, self._writer, lambda: self._closed)
        self._appender = Appender(name, directory, config)
        self._txn = TxnTracker(directory)  # the last stable offset, from the files (storage/log/txn.py)
        self._batch_writer = BatchWriter(topic, name, self._local, self._durability, self._appender, self._waiters,
                                         self._roll)
        #: What pylog's own layers use beyond the public API (see :func:`internals`).
        self._internals = PartitionInternals(
            name, self._local, self._durability, self._writer, self._waiters, self._append_lock,
            self._maintenance_lock,
            OwnerOps(lambda: self._closed, self._ensure_writer_locked, self.release_writer,
                     lambda: self.lock_timeout_ms, self._forget_budget, self._append_lists,
                     self._append_column_args, self._append_marker, self._next_sequence, self._read_isolated,
                     self._slices,
                     lambda start, end: aborted_in(self._local, start, end, self._txn.sealed, self._txn.torn),
                     lambda: (self.last_stable_offset, self._txn.producers())[1]))
        self._touch()  # last: the budget may ask this handle to let go of its files from now on
        with descriptor_faults(f"opening {name}"):
            self._local.load_readonly()

    @property
    def config(self) -> TopicConfig:
        """The topic's configuration; the store sets a new one when the topic's config is altered."""
        return self._config

    @config.setter
    def config(self, config: TopicConfig) -> None:
        self._config = self._local.config = self._appender.config = config

    def _forget_budget(self) -> None:
        self._touched = (-(1 << 62), 0)

    def _touch(self) -> None:
        """About to open or use this handle's files: tell the store's descriptor budget (before any lock)."""
        handles = self._handles
        if handles is not None:
            weight = PER_PARTITION + SEGMENT_COST * self._local.sealed_open
            tick, counted = self._touched
            if counted != weight or not handles.fresh(tick):
                self._touched = (handles.touch(self._internals, weight), weight)

    # ------------------------------------------------------------------ the writer lock

    @property
    def is_writer(self) -> bool:
        """True once this handle holds the partition's exclusive writer lock."""
        return self._writer.held

    def wait_to_write(self, timeout_ms: float, between: Callable[[], object] | None = None) -> None:
        """Become the partition's writer for a turn, waiting up to ``timeout_ms`` for a writer that takes
        turns (a producer, here or in another process) to hand it over, and asking it to (``.want``). The
        lock then stays free to be handed over in turn (:meth:`PartitionInternals.hand_over`) until a direct append pins
        it. Unlike an append with ``lock.timeout.ms``, this does not hold the partition's append lock
        while it waits, so this handle's readers go on. A no-op for the writer. ``between``, when given,
        is called after each attempt that failed while waiting (a producer lets go there of the
        partitions it could not let go of before: see :meth:`PartitionInternals.release_turn`); it must not block.

        :raises PartitionLockedError: when the lock did not come within ``timeout_ms`` (a writer that
            does not take turns, such as a store appending directly, keeps it until it closes).
        :raises UnknownTopicError: when the partition was deleted.
        """
        if self.is_writer:
            return
        self._touch()
        if not self._writer.wait_for_turn(self._take_turn, timeout_ms, between):
            raise PartitionLockedError(f"partition {self.topic}-{self.number} is locked by another writer "
                                       f"({self.directory}), which did not hand it over within {timeout_ms} ms")

    def _take_turn(self) -> bool:
        with self._append_lock:
            if self._writer.held:
                return True
            if not self.try_become_writer():
                return False
            self._writer.in_turns = True
            return True

    def _ensure_writer_locked(self) -> None:
        if self._closed:
            raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
        failed = self._durability.failed
        if failed is not None:
            raise LogFailedError(f"partition {self.topic}-{self.number} failed earlier ({failed}); reopen the store")
        if self._writer.held:
            return
        if self.read_only:
            raise ReadOnlyStoreError(f"partition {self.topic}-{self.number} belongs to a store opened with "
                                     "read_only=True, which never writes; open the store without read_only to write")
        try:
            fd = self._writer.acquire(self.lock_timeout_ms)
            try:
                self._open_as_writer()
            except BaseException:
                self._writer.unlock(fd)
                raise
        except OSError as exc:
            raise_fault(exc, f"opening {self.topic}-{self.number} for writing",
                        "nothing was written through this handle (the next writer recovers whatever the open "
                        "left)")
        self._writer.adopt(fd)

    def _open_as_writer(self) -> None:
        dur = self._durability
        takes_turns = self._writer.takes_turns
        opened = loader.open_as_writer(self._local, takes_turns, self._repairing, self._active_checked,
                                       self._note_recovery)
        if opened.cp_durably_dirty is not None:  # it wrote a checkpoint to finish an interrupted swap
            dur.cp_durably_dirty = opened.cp_durably_dirty
        self._note_active_checked()
        dur.recovery_point = opened.recovery_point
        if takes_turns and opened.checkpoint.clean:
            # A writer taking turns (see release_writer) opens for every turn, after a holder that left
            # the checkpoint clean. It leaves it so rather than mark it dirty, a file replaced per turn:
            # if this process dies, the next opener's check of the active segment's tail
            # (open_for_append) finds what it left half-written, and a roll writes a dirty checkpoint.
            return
        # Not fsynced for a writer taking turns: losing this write to a power cut only means the next
        # opener recovers from an older point (the active segment is checked on every open anyway).
        dur.write_checkpoint(durable=not (self._internals.transient or takes_turns))

    def _note_recovery(self, stats: dict[str, Any]) -> None:
        self.last_recovery = stats

    def _note_active_checked(self) -> None:
        """Record that this handle, as the writer, has checked or written the active segment to its end."""
        active = self._local.segments[-1]
        self._active_checked = (active.base_offset, active.inode, active.size, active.next_offset)

    # ------------------------------------------------------------------ offsets

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may read. A reader in another process than the writer looks for it as
        :attr:`log_end_offset` does (see :meth:`LocalLog.refresh`): a start that the writer's retention
        or ``delete_records`` raised is seen by a reader that only asks for the start, not only by one that reads."""
        self._refresh()
        return self._internals.log_start_seen(self._local.log_start)

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get (one past the last visible record)."""
        if self._closed:
            return self._final_end
        self._refresh()
        return self._local.end_offset

    def offsets(self) -> tuple[int, int]:
        """(:attr:`log_start_offset`, :attr:`log_end_offset`) after one look at the files (a reader's: one
        ``fstat`` of the active log, mostly), where asking for both looks twice; for the metrics' scrapes."""
        if self._closed:
            return self._local.log_start, self._final_end
        self._refresh()
        return self._internals.log_start_seen(self._local.log_start), self._local.end_offset

    def _refresh(self) -> None:
        if not self._writer.held:  # a reader looks at its files; the writer's view is exact
            self._touch()
            try:
                self._local.refresh()
            except OSError as exc:
                check_descriptors(exc, f"looking for new records in {self.topic}-{self.number}")
                raise

    @property
    def segments(self) -> list[Segment]:
        """A snapshot of the segment list, oldest first."""
        return list(self._local.segments)

    def max_timestamp(self) -> int:
        """The largest record timestamp in the partition (each segment's, kept with its time index), -1 when it
        holds no record: with :meth:`offset_for_timestamp`, the record Kafka's ListOffsets MAX_TIMESTAMP names."""
        return max((s.max_timestamp for s in list(self._local.segments)), default=-1)

    def size_bytes(self) -> int:
        return sum(s.size for s in self._local.segments)

    # ------------------------------------------------------------------ appending

    def append(self, records: Iterable[Record]) -> int:
        """Append records (``pylog.Record``); returns the offset of the first one.

        Timestamps left as None get the append time.
        :raises RecordTooLargeError, InvalidRecordError, PartitionLockedError:
        """
        values, keys, timestamps, headers = record_lists(records)
        return self.append_values(values, keys=keys, timestamps=timestamps, headers=headers)

    def append_values(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                      timestamps: Timestamps | None = None, headers: Headers | None = None, *,
                      producer: tuple[int, int, int] | None = None,
                      compression: str | None = None, transactional: bool = False) -> int:
        """Fast path: append parallel lists of values (and keys, timestamps, headers); return the first offset.

        ``timestamps`` are milliseconds since the epoch, one per value: a sequence (a None item takes the
        append time) or an integer numpy array (what the Spark writer passes); None for all at the append time.
        Large lists are split into batches that fit ``max.message.bytes``. ``producer`` is an idempotent
        producer's ``(producer id, epoch, first sequence number)``: a call that repeats a recent one (a
        retry) is not appended again, and the offset the first call got is returned (see
        :mod:`pylog.storage.producer_state`). ``compression`` ("lz4" or None) is the writer's choice, used when
        the topic's ``compression.type`` is ``producer``. ``transactional``: the records belong to the
        producer's open transaction (one is opened by the first such call), visible to ``read_committed``
        readers once a commit marker ends it (docs/FORMAT.md, "Transactions"); needs ``producer``.
        :raises RecordTooLargeError: when one record alone exceeds ``max.message.bytes``.
        :raises ProducerFencedError, OutOfOrderSequenceError: for a producer batch out of turn.
        :raises InvalidTxnStateError: a transactional call without ``producer``, or a non-transactional one
            while the producer's transaction is open.
        """
        return self._append_columns(list_columns(values, keys, timestamps, headers), producer, compression,
                                    in_turn=False, transactional=transactional)

    def _append_lists(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                      timestamps: Timestamps | None, headers: Headers | None, producer: tuple[int, int, int] | None,
                      compression: str | None, in_turn: bool, batch_size: int | None = None,
                      transactional: bool = False) -> int:
        return self._append_columns(list_columns(values, keys, timestamps, headers), producer, compression,
                                    in_turn, batch_size=batch_size,
                                    transactional=transactional)

    def append_columns(self, value_lengths: np.ndarray, value_data: Data | None,
                       key_lengths: np.ndarray | None = None, key_data: Data | None = None,
                       timestamps: np.ndarray | None = None, *, headers: Headers | None = None,
                       producer: tuple[int, int, int] | None = None,
                       compression: str | None = None, transactional: bool = False) -> int:
        """Columnar fast path: int32 lengths (-1 for null) plus the concatenated non-null bytes.

        From Arrow binary arrays: ``lengths = np.diff(offsets)`` with -1 where the validity bit is 0.
        ``headers`` (one sequence of ``(str, bytes | None)`` pairs per record), ``producer`` and
        ``compression`` and ``transactional`` as for :meth:`append_values`.
        """
        cols = array_columns(value_lengths, value_data, key_lengths, key_data, timestamps, headers)
        return self._append_columns(cols, producer, compression, in_turn=False, transactional=transactional)

    def _append_column_args(self, value_lengths: np.ndarray, value_data: Data | None, key_lengths: np.ndarray | None,
                            key_data: Data | None, timestamps: np.ndarray | None, headers: Headers | None,
                            producer: tuple[int, int, int] | None, compression: str | None, in_turn: bool,
                            flush_policy: bool, transactional: bool) -> int:
        cols = array_columns(value_lengths, value_data, key_lengths, key_data, timestamps, headers)
        return self._append_columns(cols, producer, compression, in_turn, flush_policy, transactional=transactional)

    def _append_columns(self, cols: Columns, producer: tuple[int, int, int] | None, compression: str | None,
                        in_turn: bool, flush_policy: bool = True, batch_size: int | None = None,
                        transactional: bool = False) -> int:
        appender = self._appender
        if cols.headers is not None:
            cols = with_header_rows(cols)  # checked once, up front (sizing the batches reads them)
        appender.check_keys(cols, self.topic)
        bounds = appender.batch_bounds(cols, batch_size)
        if producer is not None or transactional:
            check_producer(producer, transactional)
        self._touch()
        with self._append_lock:
            if not self._writer.held:
                self._ensure_writer_locked()
                self._writer.in_turns = in_turn
            elif not in_turn:
                self._writer.in_turns = False  # a direct append: this handle keeps the lock (see hand_over)
            return self._batch_writer.write(cols, bounds, producer, compression, flush_policy, batch_size,
                                            transactional)

    def _append_marker(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int) -> int:
        self._touch()
        with self._append_lock:
            if not self._writer.held:
                self._ensure_writer_locked()
                self._writer.in_turns = True
            return self._batch_writer.write_marker(producer_id, epoch, commit, coordinator_epoch)

    def _next_sequence(self, producer_id: int, epoch: int) -> int:
        with self._append_lock:
            self._ensure_writer_locked()
            return self._appender.producer_state(self._local).next_sequence(producer_id, epoch)

    def _roll(self) -> Segment:
        return self._durability.roll(lambda: self._snapshot_producers(durable=False, rolled=True))

    def _snapshot_producers(self, durable: bool = True, rolled: bool = False) -> None:
        # Shipping: the store has a remote location (its remote log is attached), whose upload thread removes
        # the copies kept at rolls once their segments are shipped.
        self._appender.snapshot_producers(self._local.segments[-1].next_offset, durable=durable, rolled=rolled,
                                          shipping=self._internals.remote_reads is not None)

    # ------------------------------------------------------------------ rolls and flushes

    def roll(self) -> None:
        """Force a new active segment (no-op when the active one is empty)."""
        with self._append_lock:
            self._ensure_writer_locked()
            if self._local.segments[-1].size:
                self._roll()

    def flush(self) -> None:
        """fsync everything appended through this handle so far: after this returns it survives a crash or
        power loss. Also after this handle let the writer lock go (a producer of this process may have
        handed the partition over between another's append and its flush): then it fsyncs the segment
        files that hold its appends not yet fsynced (see :meth:`release_writer`).

        :raises LogFailedError: when an fsync failed, now or before (reopen the store).
        """
        self._internals.flush()  # the same two halves the group commit runs for many partitions at once

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
        return self._waiters.wait_for_data(offset, timeout, self._local, lambda: self.log_end_offset,
                                           lambda: self._writer.held, lambda: self._closed)

    # ------------------------------------------------------------------ maintenance (writer only)

    def enforce_retention(self, now: int | None = None) -> RetentionResult:
        """Delete the oldest segments that ``retention.ms`` / ``retention.bytes`` / the log start allow.

        Makes this handle the partition's writer (like an append). Topics whose ``cleanup.policy`` lacks
        ``delete`` only lose segments below the log start offset. ``now`` (ms) is for tests.
        """
        now = now_ms() if now is None else now
        with self._maintenance_lock, self._append_lock:
            self._ensure_writer_locked()
            return maintenance.enforce_retention(self._local, self._durability, self.config, now, self._roll)

    def delete_records(self, before_offset: int) -> int:
        """Kafka's DeleteRecords: make ``before_offset`` the log start offset; returns the new log start.

        Reads below it raise :class:`OffsetOutOfRangeError` from then on (also after a restart); segments
        wholly below it are deleted. An offset at or below the current log start changes nothing.
        :raises OffsetOutOfRangeError: when ``before_offset`` is past the log end offset.
        """
        before_offset = offset_argument("before_offset", before_offset)
        self._internals.delete_remote_records(before_offset, self.log_end_offset)  # tiered: first, no lock held
        with self._maintenance_lock, self._append_lock:
            self._ensure_writer_locked()
            return maintenance.delete_records(self._local, self._durability, before_offset)

    # ------------------------------------------------------------------ reading

    def _slices(self, offset: int, max_records: int, max_bytes: int, verify: bool) -> list[ReadSlice]:
        if self._closed:
            raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
        offset = int_argument("offset", offset)
        max_records = int_argument("max_records", max_records)
        max_bytes = int_argument("max_bytes", max_bytes)
        if max_records <= 0:
            return []
        self._touch()
        local = self._local
        try:
            out = local.on_current_view(f"a read at offset {offset}", local.slices, offset, max_records, max_bytes,
                                        verify)
        except OffsetOutOfRangeError:
            if (remote := self._internals.remote_reads) is not None and offset < local.log_start:  # tiered storage
                return remote.slices(offset, max_records, max_bytes)
            raise
        except OSError as exc:
            check_descriptors(exc, f"reading {self.topic}-{self.number} at offset {offset}")
            raise
        if local.too_many_sealed_open:
            self._let_go_of_sealed()
        return out

    def _let_go_of_sealed(self) -> None:
        """Reads used more sealed segments than a handle keeps open: let go of the files of the least recently
        used (see LocalLog.let_go_of_sealed). Never waits: tried again after a later read when maintenance or
        an append holds the partition now."""
        if not self._maintenance_lock.acquire(blocking=False):
            return
        try:
            if self._append_lock.acquire(blocking=False):
                try:
                    if not self._closed:
                        self._local.let_go_of_sealed()
                finally:
                    self._append_lock.release()
        finally:
            self._maintenance_lock.release()

    def _read_isolated(self, offset: int, max_records: int, max_bytes: int, verify: bool,
                       isolation_level: IsolationLevel) -> tuple[list[ReadSlice], int]:
        committed = check_isolation(isolation_level)
        if committed:
            self._refresh()  # the LSO from the latest files: a marker past this handle's view ends a wait
        # Again from the start on the current view when a segment went under it (PartitionInternals.aborted).
        return self._local.on_current_view(
            f"a read at offset {offset}", isolated_read, lambda pos: self._slices(pos, max_records, max_bytes, verify),
            self._local, self._txn, offset, committed, self._internals.aborted)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the earliest open transaction, else :attr:`log_end_offset`;
        ``read_committed`` reads stop there."""
        if self._closed:
            raise StoreClosedError(f"partition {self.topic}-{self.number} is closed")
        self._refresh()
        return self._local.on_current_view("the last stable offset", self._txn.last_stable_offset, self._local)

    def read_slices(self, offset: int, max_records: int = 500, max_bytes: int = DEFAULT_MAX_BYTES,
                    verify: bool = True, isolation_level: IsolationLevel = "read_uncommitted") -> list[ReadSlice]:
        """What :meth:`read` decodes: ``(BatchView, start, stop)`` slices of the batches holding records from
        ``offset`` on, at most ``max_records`` (and about ``max_bytes``), each batch checked as :meth:`read`
        checks it. For readers that build their own rows (the consumer); same errors as :meth:`read`."""
        return self._read_isolated(offset, max_records, max_bytes, verify, isolation_level)[0]

    def read(self, offset: int, max_records: int = 500, max_bytes: int = DEFAULT_MAX_BYTES,
             verify: bool = True, isolation_level: IsolationLevel = "read_uncommitted") -> list[Record]:
        """Records with offsets >= ``offset``, at most ``max_records`` (and about ``max_bytes``, counted as the
        batches are decompressed: a read holds about that much in memory whatever the compression ratio).

        ``isolation_level`` is Kafka's: ``read_uncommitted`` (default) returns every record but transaction
        markers (control batches are never returned as records); ``read_committed`` returns records below
        :attr:`last_stable_offset` only and none of an aborted transaction. A read that meets only records
        it does not return goes on past them, up to the log end (or the LSO); so ``[]`` at an offset below
        the log end means nothing readable lies between.
        Reading at :attr:`log_end_offset` returns ``[]``. With ``verify`` (default) every batch's CRC is checked.
        :raises OffsetOutOfRangeError: below :attr:`log_start_offset` or above :attr:`log_end_offset`.
        :raises CorruptRecordError: when the batch at ``offset`` does not check (names the file and position);
            a read that runs into a bad batch further on returns the records before it, and the next read,
            which starts at it, raises.
        """
        return slices_records(self._read_isolated(offset, max_records, max_bytes, verify, isolation_level)[0],
                              self.topic, self.number)

    def read_columns(self, offset: int, max_records: int = 100_000, max_bytes: int = DEFAULT_MAX_BYTES,
                     verify: bool = True, isolation_level: IsolationLevel = "read_uncommitted") -> RecordColumns:
        """Like :meth:`read` but as :class:`~pylog.storage.records.RecordColumns` (numpy arrays + byte buffers)."""
        return RecordColumns.concat_views(
            self._read_isolated(offset, max_records, max_bytes, verify, isolation_level)[0], self.topic, self.number)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp``, or None if there is none."""
        timestamp = int_argument("timestamp", timestamp)
        self._touch()
        with descriptor_faults(f"looking up a timestamp in {self.topic}-{self.number}"):
            return self._local.on_current_view("a time lookup", self._local.offset_for_timestamp, timestamp)

    # ------------------------------------------------------------------ checks and lifecycle

    def check(self, writer_active: bool | None = None) -> list[str]:
        """Full consistency check of every segment and index, up to the end of every file (not only what
        a reader counts as visible: a reader stops at the first damaged batch of the active segment, as
        if it were still being written); returns the problems found (empty if none).

        ``writer_active``: whether another process may be appending right now (None: unknown, assume so);
        then a batch the active file does not wholly hold yet is not reported. A segment replaced or deleted
        under the check (by the writer's maintenance) makes it start again over a new view, as a read does.
        """
        self._touch()
        return self._local.on_current_view("a check", checks.check_view, self._local, lambda: self.is_writer,
                                           lambda: self.log_end_offset, writer_active)

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
        with self._append_lock:
            if self._writer.held:
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
        with self._maintenance_lock, self._append_lock:
            if not self._writer.held or self._closed:
                return
            try:
                # A failed sync of rolled segments fails the partition: this handle's next flush raises.
                if self._durability.hand_over(lambda: self._snapshot_producers(durable=False)) is not None:
                    self._note_active_checked()
            except OSError as exc:
                raise_fault(exc, f"handing over {self.topic}-{self.number}", "the writer lock was released all the "
                            "same; the next writer recovers the partition from its last checkpoint", "go on")
            finally:
                # Whatever failed above (a full disk), the lock goes and this handle reads on: the next
                # writer recovers from the checkpoint as it is.
                self._writer.let_go()
                self._appender.forget_producers()  # another writer may append idempotent batches meanwhile
                self._writer.takes_turns = True
                self._local.reader_view_of_own()

    def try_become_writer(self) -> bool:
        """Take the writer lock if it is free right now (no waiting); True when this handle is the writer."""
        with self._append_lock:
            if self._writer.held:
                return True
            saved, self.lock_timeout_ms = self.lock_timeout_ms, 0
            try:
                self._ensure_writer_locked()
            except PartitionLockedError:
                return False
            finally:
                self.lock_timeout_ms = saved
            return True

    def close(self, discard: bool = False) -> None:
        """Flush, seal the active segment's indexes, write a clean checkpoint and release the writer lock.

        With ``discard`` (the partition's files are being deleted) nothing is written, only released.
        Not to be called while other threads are still reading this partition. Waits for maintenance
        under way (a compaction or retention pass) to finish.
        """
        with self._maintenance_lock, self._append_lock:
            if self._closed:
                return
            self._closed = True
            dur = self._durability
            segs = self._local.segments
            if discard:
                dur.failed = "discarded"
            error: Exception | None = None
            if not self._writer.held and dur.handed_over and dur.failed is None:
                try:
                    dur.sync_handed_over()  # what it appended before it let the writer lock go
                except Exception as exc:  # closed all the same; raised once closed
                    error = exc
            if self._writer.held:
                self._close_writer()
            # Closing releases descriptors and mappings now (a store opened and closed in a loop must not
            # pile them up); calls made after close raise StoreClosedError, and close() must not race
            # with reads still running in other threads, like closing a file under a reader.
            self._final_end = segs[-1].next_offset if segs else self._local.log_start
            self._local.set_segments([])
            for seg in segs:
                seg.close()
            self._writer.close()
            self._waiters.close()  # wakes this handle's waiters, here and on the notify file
            if self._handles is not None:
                self._handles.forget(self._internals)
            if error is not None:
                raise error

    def _close_writer(self) -> None:
        """:meth:`close` as the writer: seal and sync everything, write a clean checkpoint, let go of the lock."""
        try:
            self._durability.close_writer(self._snapshot_producers)
        except OSError as exc:
            raise_if_gone(exc, f"closing {self.topic}-{self.number}", self.directory, "it was closed and its writer "
                          "lock released, and what it held is wherever the directory went")
            raise_fault(exc, f"closing {self.topic}-{self.number}", "it was closed and its writer lock "
                        "released, but not cleanly: its next writer re-validates it", "open it again")
        finally:
            self._writer.let_go()

    def __repr__(self) -> str:
        return f"Partition({self.topic!r}, {self.number}, segments={len(self._local.segments)})"


def internals(partition: Partition) -> PartitionInternals[Segment]:
    """The internal API of ``partition`` (:class:`~pylog.storage.log.internals.PartitionInternals`), for pylog's
    own layers: not exported from :mod:`pylog`, not part of the API users are told about."""
    return partition._internals


def watch_appends(partitions: Sequence[Partition]) -> AppendWatch:
    """The wake-up API: one wait for an append to any of ``partitions`` (by any handle, in any process on this
    kernel), for readers waiting on several partitions at once (a consumer's poll, ``pylog serve``'s long-poll
    fetches). :meth:`Partition.wait_for_data` is the same for one partition. Use::

        with watch_appends(parts) as watch:          # the sequences are read on entry,
            for i, p in enumerate(parts):             # then the log ends
                if p.log_end_offset > wanted[i]:
                    watch.found(i); return
            if not watch.sleep(timeout):              # at most min(timeout, notify.SLICE) seconds
                <poll the log ends>                   # False: wake-ups unavailable

    A wake-up is never lost between the caller's check and its sleep (:mod:`pylog.storage.notify`). The watch
    is unusable (``sleep`` returns False at once) when one of ``partitions`` is written through its own handle
    (its appends wake that handle's :meth:`Partition.wait_for_data`, not the shared futex) or where futexes
    are unavailable. Not shared between threads.
    """
    return AppendWatch([None if p.is_writer else internals(p).notifier for p in partitions])
