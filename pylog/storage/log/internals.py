"""The partition's internal API (:class:`PartitionInternals`): what pylog's own layers need of a partition beyond
the public API of :class:`~pylog.partition.Partition`.

A part like the others in this package: :class:`~pylog.partition.Partition` builds it from the parts it wires
(the segment view, durability, the writer lock, the waiters, its two locks) and the few operations it owns
itself (:class:`OwnerOps`: becoming the writer, handing the lock back, appending), and
:func:`pylog.partition.internals` hands it to the layers above: the producer and ``pylog serve`` (turns,
appends in turn, flushes due), the log cleaner (passes, the compaction swap), the store (topic deletion,
writer turns, the descriptor budget), the consumer and the server (wake-ups). It is generic in the segment
type like the other parts and never imports :mod:`pylog.partition` or :mod:`pylog.segment`.

Invariants (numbered as in :mod:`pylog.partition`): the locks are the partition's own, taken in its order
(maintenance, then append, never the reverse); each method states which layer calls it and what it holds.
4. Handing the writer lock over (:meth:`PartitionInternals.hand_over`, :meth:`PartitionInternals.release_turn`)
   never releases a lock a direct append pinned, and never while maintenance of this handle is under way.
6. Maintenance from outside storage runs inside :meth:`PartitionInternals.maintenance_pass` and changes the
   segment list only through :meth:`PartitionInternals.swap_in` (steps 1-6 of :mod:`pylog.storage.swap`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Generic, Iterator, NamedTuple, Sequence, TypeVar

import numpy as np

from ...errors import OffsetOutOfRangeError, PylogError, StoreClosedError
from ..fileio import Data, raise_fault
from ..notify import Notifier
from ..producer_state import ProducerDescription, ProducerEntry
from ..remote import RemoteLog
from ..segment_read import ReadSlice
from .. import swap
from . import maintenance
from .batches import Headers, Timestamps
from .durability import Durability
from .local_log import LocalLog
from .remote_reads import RemoteReads
from .txn import View, check_unreplaced
from .segments import S
from .waiting import Waiters
from .writer_lock import WriterLock

__all__ = ["PartitionInternals", "OwnerOps"]

_T = TypeVar("_T")

log = logging.getLogger("pylog.partition")


class OwnerOps(NamedTuple):
    """What the partition does itself for its internal API (its own methods, bound)."""
    #: True once the handle is closed.
    is_closed: Callable[[], bool]
    #: Become the writer (lock, recover, open for append); a no-op for the writer. Under the append lock.
    become_writer: Callable[[], None]
    #: :meth:`Partition.release_writer`.
    release_writer: Callable[[], None]
    #: The handle's ``lock.timeout.ms``.
    lock_timeout_ms: Callable[[], int]
    #: The handle let go of its files: its next use counts against the descriptor budget afresh.
    forget_budget: Callable[[], None]
    #: An append of value/key lists: (values, keys, timestamps, headers, producer, compression, in turn,
    #: batch size or None, transactional).
    append_lists: Callable[[Sequence[bytes | None], Sequence[bytes | None] | None, Timestamps | None,
                            Headers | None, tuple[int, int, int] | None, str | None, bool, int | None, bool], int]
    #: An append of columns: (value lengths, value data, key lengths, key data, timestamps, headers,
    #: producer, compression, in turn, flush policy, transactional).
    append_columns: Callable[[np.ndarray, Data | None, np.ndarray | None, Data | None, np.ndarray | None,
                              Headers | None, tuple[int, int, int] | None, str | None, bool, bool, bool], int]
    #: A transaction marker: (producer id, epoch, commit, coordinator epoch) -> its offset.
    append_marker: Callable[[int, int, bool, int], int]
    #: The sequence a producer's next append must carry: (producer id, epoch) -> sequence. As the writer.
    next_sequence: Callable[[int, int], int]
    #: A read filtered by isolation level: (offset, max records, max bytes, verify, level) -> (slices, next).
    read_isolated: Callable[[int, int, int, bool, Any], tuple[list[ReadSlice], int]]
    #: A read of every batch, control batches included: (offset, max records, max bytes, verify).
    read_all: Callable[[int, int, int, bool], list[ReadSlice]]
    #: The aborted transactions covering offsets in [start, end): {producer id: [(first, last offset)]}.
    aborted: Callable[[int, int], dict[int, list[tuple[int, int]]]]
    #: The producer table as of the log end, from the files (a copy).
    producers: Callable[[], dict[int, ProducerEntry]]


class PartitionInternals(Generic[S]):
    """The partition's internal API: what pylog's own layers need of a partition beyond its public API.

    Not exported from :mod:`pylog` and not part of the API users are told about (docs/CLIENTS.md): the
    producer and ``pylog serve`` take turns at the writer lock and append in turn through it; the log
    cleaner runs its passes and swaps cleaned segments in; the store deletes topics and hands partitions
    written in turn (committed offsets, Spark's writer) their turns; the consumer and the server watch
    several partitions' wake-ups at once; the store's descriptor budget lets go of the handle's files.
    Reached through :func:`pylog.partition.internals`; one object per :class:`~pylog.partition.Partition`,
    which builds it from its parts and the operations it owns itself (:class:`OwnerOps`). Each
    method states which layer calls it and under which of the partition's locks it runs (the partition's
    docstring lists who touches its files under which lock).
    """

    def __init__(self, name: str, local: LocalLog[S], durability: Durability[S], writer: WriterLock,
                 waiters: Waiters, append_lock: threading.RLock, maintenance_lock: threading.RLock,
                 ops: OwnerOps) -> None:
        self.name = name  # "topic-number", for messages
        self._local = local
        #: (the partition's parts, tests) Recovery point, unsynced rolls, pending flushes and the failed
        #: state; see :class:`~pylog.storage.log.durability.Durability`.
        self.durability = durability
        self._writer = writer
        self._waiters = waiters
        self._append_lock = append_lock
        self._maintenance_lock = maintenance_lock
        self._ops = ops
        #: Written by many handles in turn (take the lock, append, :meth:`Partition.release_writer`): the
        #: committed offsets, Spark's writer. Taking the writer lock then writes the checkpoint without an
        #: fsync, and the background cleaner maintains the partition whenever it can take the lock, not only
        #: while this handle writes.
        self.transient = False
        #: Tiered storage: reads below the local log start fall through to this (None: they do not).
        #: Set by the layer that opens the partition (:meth:`attach_remote`); read without a lock.
        self.remote_reads: RemoteReads | None = None

    def segment_index_args(self) -> tuple[int, int]:
        """``(segment.index.bytes, index.interval.bytes)`` for new Segment objects of this
        partition (the compactor's cleaned segments)."""
        return self._local.segment_index_args()

    def ensure_writer(self) -> None:
        """(the compactor) Become the partition's writer (lock, recover if the last shutdown was not clean,
        open for append); a no-op for the writer. For maintenance that needs the lock.

        :raises PartitionLockedError, StoreClosedError, LogFailedError, ReadOnlyStoreError:
        """
        with self._append_lock:
            self._ops.become_writer()

    @property
    def local_log(self) -> LocalLog[S]:
        """(the partition's modules, benchmarks and tests): the segment view and log start as
        this handle sees them; see :class:`~pylog.storage.log.local_log.LocalLog`."""
        return self._local

    @property
    def notifier(self) -> Notifier:
        """(the consumer, ``pylog serve``'s fetches) The partition's cross-process wake-up
        (:mod:`pylog.storage.notify`), which they watch across several partitions at once."""
        return self._waiters.notifier

    def release_handles(self) -> bool:
        """(the store's descriptor budget, :mod:`pylog.storage.handles`): let go of every file
        descriptor and mapping this handle holds; its next use opens what it needs again. A writer lets go
        of its lock first, exactly as :meth:`Partition.release_writer` does (a direct append takes it again, waiting
        ``lock.timeout.ms`` if another writer took it meanwhile). Never blocks: False, changing nothing,
        while maintenance or an append of the partition is under way in another thread."""
        if not self._maintenance_lock.acquire(blocking=False):
            return False
        try:
            if not self._append_lock.acquire(blocking=False):
                return False
            try:
                if self._ops.is_closed():
                    return True
                try:
                    if self._writer.held:
                        self._ops.release_writer()  # lets the lock go whatever fails (raised after the rest here)
                finally:
                    self._writer.close()
                    if not self._writer.held:
                        self._local.drop_files()
                    self._ops.forget_budget()
                    self._waiters.notifier.release()
                return True
            finally:
                self._append_lock.release()
        finally:
            self._maintenance_lock.release()

    def handover_wanted(self) -> bool:
        """True while another handle, in any process, waits for this partition's writer lock in
        :meth:`Partition.wait_to_write`. Two system calls."""
        if self._writer.want_fd is None:
            with self._append_lock:
                if self._ops.is_closed():
                    raise StoreClosedError(f"partition {self.name} is closed")
                self._writer.open_probe()
        return self._writer.handover_wanted()

    def hand_over(self) -> bool:
        """For a writer taking turns, between its appends: release the lock when another handle waits for
        it in :meth:`Partition.wait_to_write`; True when released. Never a lock a direct append pinned, nor while
        retention or compaction of the partition is under way in this handle (it is tried again on the
        writer's next append or idle look, instead of blocking behind a long pass)."""
        if not self._writer.in_turns or not self._writer.held or not self.handover_wanted():
            return False
        return self._release_turn(blocking=False)

    def release_turn(self, blocking: bool = True) -> bool:
        """Let go of a writer lock held for a turn (:meth:`Partition.wait_to_write`), whether or not anyone waits for
        it; a lock a direct append pinned stays. True when released. For a writer taking turns that stops
        writing (a producer closing), or that is about to wait for another partition. Waits for retention
        or compaction of the partition under way in this handle to finish; with ``blocking`` False it
        leaves the lock held instead (False: the caller tries again later, as :meth:`hand_over` does)."""
        return self._release_turn(blocking)

    def pass_turn(self, wanted_only: bool = True, blocking: bool = True) -> bool:
        """After appends whose outcome is decided (acknowledged, or about to be): let the writer lock go to the
        next writer, :meth:`hand_over` (only if another handle waits for it) or, with ``wanted_only`` False,
        :meth:`release_turn` (whether or not; with ``blocking`` False never behind maintenance under way).
        The one hand-over the library's producer and ``pylog serve`` make after their appends.

        Never raises: what can fail here cannot undo the appends, so it is logged (debug) and reported as False:
        a store closing under the call or a deleted topic (a PylogError: nothing left to hand over), a full disk
        or no descriptor left for the hand-over probe (an OSError: the lock stays held and the caller's next
        look, or the next append, tries again). True when the call went through, whether or not the lock went.
        """
        try:
            if wanted_only:
                self.hand_over()
            else:
                self.release_turn(blocking)
            return True
        except (PylogError, OSError):
            log.debug("handing over %s failed", self.name, exc_info=True)
            return False

    def _release_turn(self, blocking: bool) -> bool:
        if not self._maintenance_lock.acquire(blocking=blocking):
            return False
        try:
            with self._append_lock:
                if not self._writer.in_turns or not self._writer.held:
                    return False
                self._ops.release_writer()
                return True
        finally:
            self._maintenance_lock.release()

    @contextmanager
    def maintenance_pass(self) -> Iterator[None]:
        """(the log cleaner): hold the partition's maintenance lock for a maintenance pass run
        from outside storage. Protects the segment list and files the pass reads against every other
        maintenance of this handle (retention, delete-records, another pass) and against this handle letting
        go of its writer lock (:meth:`release_turn`, :meth:`Partition.release_writer`, :meth:`hand_over`) or its
        descriptors; appends go on. The pass changes the segment list only through :meth:`swap_in`."""
        with self._maintenance_lock:
            yield

    @contextmanager
    def writer_turn(self) -> Iterator[None]:
        """(layers that append to a partition written in turn by many handles: the committed
        offsets, the background cleaner's passes over such partitions): hold the maintenance lock for a
        whole turn that the caller takes and ends (:meth:`Partition.wait_to_write` or
        :meth:`Partition.try_become_writer`, its appends or maintenance, then :meth:`Partition.release_writer`).
        Protects the turn against this handle's other maintenance and turns: no pass, hand-over or release of
        handles interleaves with it, so its writes and its release are not split by another thread of this
        handle."""
        with self._maintenance_lock:
            yield

    @contextmanager
    def held_for_discard(self) -> Iterator[bool]:
        """(topic deletion): the partition's files are about to be deleted. Holds the
        maintenance lock for the body (a pass under way finishes first; none starts) and takes the writer
        lock without opening for writing (no recovery, no check: a damaged partition is deleted too);
        appends through this handle are refused from then on. Yields True when the writer lock was taken
        here (to be let go by :meth:`unlock_discard` if the deletion fails), False when this handle was the
        writer already. The writer lock stays held after the body: :meth:`Partition.close` with ``discard`` lets it
        go."""
        with self._maintenance_lock:
            yield self._lock_for_discard()

    def _lock_for_discard(self) -> bool:
        """See :meth:`held_for_discard`: take the writer lock without opening for writing (the data goes
        away anyway); True when taken here."""
        with self._append_lock:
            if self._ops.is_closed():
                raise StoreClosedError(f"partition {self.name} is closed")
            if self._writer.held:
                return False
            try:
                fd = self._writer.acquire(self._ops.lock_timeout_ms())
            except OSError as exc:
                raise_fault(exc, f"locking {self.name} to delete it", "nothing was deleted")
            self._writer.adopt(fd)
            self.durability.failed = "its topic is being deleted"  # the segments are not open for appending
            return True

    def unlock_discard(self) -> None:
        """(the store) Undo :meth:`held_for_discard` after a deletion that failed: the partition is as it was."""
        with self._append_lock:
            self.durability.failed = None
            self._writer.let_go()

    def append_values_in_turn(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                              timestamps: Timestamps | None, headers: Headers | None,
                              producer: tuple[int, int, int] | None, compression: str | None,
                              batch_size: int | None = None, transactional: bool = False) -> int:
        """:meth:`Partition.append_values` for a writer taking turns (the producer): unlike a direct
        append it leaves the lock free to be handed over (:meth:`hand_over`). ``batch_size`` (the producer's,
        Kafka's ``batch.size``) cuts the records into batches of at most that many bytes, one record at
        least each, all written by this one call (see :meth:`Appender.batch_bounds
        <pylog.storage.log.append.Appender.batch_bounds>`); None: batches as large as ``max.message.bytes``.
        ``transactional`` as for :meth:`Partition.append_values`."""
        return self._ops.append_lists(values, keys, timestamps, headers, producer, compression, True, batch_size,
                                      transactional)

    def append_columns(self, value_lengths: np.ndarray, value_data: Data | None,
                       key_lengths: np.ndarray | None = None, key_data: Data | None = None,
                       timestamps: np.ndarray | None = None, *, headers: Headers | None = None,
                       producer: tuple[int, int, int] | None = None,
                       compression: str | None = None, in_turn: bool = False, flush_policy: bool = True,
                       transactional: bool = False) -> int:
        """(``pylog serve``'s Produce) :meth:`Partition.append_columns`, and: ``in_turn``, append as a writer
        taking turns (see :meth:`append_values_in_turn`), leaving the lock free to be handed over
        (:meth:`hand_over`); ``flush_policy=False``, do not fsync here when ``flush.messages`` / ``flush.ms``
        ask for it: the caller asks :meth:`flush_due` and flushes (through the group commit);
        ``transactional`` as for :meth:`Partition.append_values` (a Kafka client's transactional batch)."""
        return self._ops.append_columns(value_lengths, value_data, key_lengths, key_data, timestamps, headers,
                                        producer, compression, in_turn, flush_policy, transactional)

    def append_marker(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
        """(the transaction coordinator, :mod:`pylog.clients.transactions`; tests) Append a commit or abort
        marker ending ``producer_id``'s transaction in this partition; returns the marker's offset. Becomes the writer
        like an append in turn. An abort is recorded in the aborted-transaction index first
        (:mod:`pylog.storage.txn_index`).

        :raises ProducerFencedError: ``epoch`` older than the producer's.
        :raises TransactionCoordinatorFencedError: ``coordinator_epoch`` older than the last marker's.
        """
        return self._ops.append_marker(producer_id, epoch, commit, coordinator_epoch)

    def next_sequence(self, producer_id: int, epoch: int) -> int:
        """(the transaction coordinator, writing a transaction's offsets to ``__consumer_offsets`` for a
        producer that keeps no sequence of its own there) The sequence ``producer_id``'s next append with
        ``epoch`` must carry: 0 for a producer the partition does not know or a new epoch. Call as the writer
        (:meth:`Partition.wait_to_write`) and append before handing the lock over.

        :raises ProducerFencedError: ``epoch`` older than the producer's."""
        return self._ops.next_sequence(producer_id, epoch)

    def read_isolated(self, offset: int, max_records: int, max_bytes: int,
                      isolation_level: str) -> tuple[list[ReadSlice], int]:
        """(the consumer) :meth:`Partition.read_slices` and where the next read starts when no slice is
        returned: past control batches and aborted transactions that the read skipped (see
        :func:`pylog.storage.log.txn.isolated_read`), so a reader never reads them again forever."""
        return self._ops.read_isolated(offset, max_records, max_bytes, True, isolation_level)

    def read_with_markers(self, offset: int, max_records: int, max_bytes: int) -> list[ReadSlice]:
        """(``pylog serve``'s Fetch) :meth:`Partition.read_slices` with control batches too: Kafka clients
        get transaction markers in fetched data (they move past them and use them to end transactions)."""
        return self._ops.read_all(offset, max_records, max_bytes, True)

    def aborted(self, start: int, end: int) -> dict[int, list[tuple[int, int]]]:
        """``{producer id: [(first offset, last offset), ...]}`` of the aborted transactions covering offsets
        in ``[start, end)``: the local aborted-transaction indexes', and below the local log start (tiered
        storage) the shipped ones' too. Lock-free but for a retry.

        The caller read the records of ``[start, end)`` before asking, perhaps from segments that maintenance
        deleted or replaced since, with their indexes: then the answer may lack their aborts. So it raises
        rather than answer, and the caller reads again on the current view (:meth:`on_current_view`): a read
        never takes an aborted record for a committed one.

        :raises OffsetOutOfRangeError: when ``start`` is below the log start now (the writer raises it before it
            unlinks anything) and no shipped index covers it (tiered storage).
        :raises FileNotFoundError: when a segment of the view is gone (a reader's view older than a deletion or
            a swap by the writer in another process): read again on the current view.
        :raises RemoteStorageError: when the shipped indexes cannot be read."""
        remote = self.remote_reads
        out = self._ops.aborted(start, end)
        if start < self._local.log_start and remote is None:
            local = self._local
            end_offset = local.view[0][-1].next_offset if local.view[0] else local.log_start
            raise OffsetOutOfRangeError(f"offset {start} of {self.name} was deleted under a read_committed read",
                                        start, local.log_start, end_offset)
        if remote is not None and start < self._local.log_start:
            for pid, ranges in remote.aborted(start, end).items():
                out.setdefault(pid, []).extend(r for r in ranges if r not in out[pid])
        return out

    def on_current_view(self, what: str, read: Callable[[], _T]) -> _T:
        """(``pylog serve``'s read_committed Fetch) Run ``read`` (records, then their :meth:`aborted`
        transactions); when it raises FileNotFoundError (a segment deleted or replaced under it), take the
        current segment view and run it again (:meth:`LocalLog.on_current_view`)."""
        return self._local.on_current_view(what, read)

    def view(self) -> View:
        """The partition's segment view now: give it to :meth:`aborted_transactions` as ``before`` a read."""
        return self._local.view

    def aborted_transactions(self, start: int, end: int, before: View | None = None) -> list[tuple[int, int]]:
        """(``pylog serve``'s read_committed Fetch) ``(producer id, first offset)`` of each aborted transaction
        with records in ``[start, end)``, first offsets ascending: what a Kafka client drops. With ``before``
        (:meth:`view` taken before the records were read), raises FileNotFoundError when a segment the read
        went through was replaced since (:func:`~pylog.storage.log.txn.check_unreplaced`): read again."""
        out = sorted(((pid, first) for pid, ranges in self.aborted(start, end).items() for first, _ in ranges),
                     key=lambda t: t[1])
        if before is not None:
            check_unreplaced(self._local, before, start, end)
        return out

    def describe_producers(self) -> list[ProducerDescription]:
        """(``pylog serve``'s DescribeProducers, tools) The producers the partition remembers, as of its log
        end, from its files (any handle, writer or not): id, epoch, last sequence and timestamp, the coordinator
        epoch of its last marker as of the producer snapshot (markers after it are replayed from their headers,
        which do not carry it: -1 when none is known), and the first offset of its open transaction (-1: none);
        by producer id."""
        out = []
        for pid, e in sorted(self._ops.producers().items()):
            last_seq = e.batches[-1][1] if e.batches else -1
            out.append(ProducerDescription(pid, e.epoch, last_seq, e.last_timestamp, e.coordinator_epoch,
                                           e.txn_first_offset))
        return out

    def sync_rolled(self) -> None:
        """fsync the segments rolls sealed that the background sync thread has not got to yet, and move
        the recovery point past them: for maintenance that must not run ahead of durable data (the
        compactor's first-dirty offset). A no-op for a handle that is not the writer.

        :raises LogFailedError: when an fsync of rolled segments failed, now or before.
        """
        with self._append_lock:
            if not self._writer.held or self._ops.is_closed():
                return
            if self.durability.unsynced:
                self.durability.sync_rolled_now()
                self.durability.advance_recovery_point()

    @property
    def synced_through(self) -> int:
        """Offsets below this lie in segments that are sealed and fsynced (the active segment's base when
        no roll waits for its background sync): what maintenance may treat as settled for good."""
        with self._append_lock:
            return self.durability.synced_through()

    def attach_remote(self, remote: "RemoteLog") -> None:
        """Serve reads below the local log start from ``remote`` (the store's RemoteLog of this partition,
        for a topic with ``remote.storage.enable``). By the topic when it opens the partition and by the
        upload thread; an assignment, read by readers without a lock."""
        if self.remote_reads is None or self.remote_reads.remote is not remote:
            self.remote_reads = RemoteReads(remote)

    def log_start_seen(self, local_start: int) -> int:
        """The log start readers see: with tiered storage the remote one below ``local_start`` (Kafka's
        logStartOffset), else ``local_start``. Lock-free."""
        remote = self.remote_reads
        return local_start if remote is None else remote.log_start_with(local_start)

    def delete_remote_records(self, before_offset: int, end_offset: int) -> None:
        """Tiered storage: before :meth:`Partition.delete_records` moves the local log start (with no lock
        held), raise the remote one to ``before_offset`` when it is at most ``end_offset``; nothing without
        a remote log attached. :raises RemoteStorageError:"""
        if self.remote_reads is not None and before_offset <= end_offset:
            self.remote_reads.delete_records(before_offset)

    def shippable_segments(self) -> list[tuple[int, int, int]]:
        """``(base offset, end offset, size)`` of the segments below :attr:`synced_through` (rolled, sealed
        and fsynced: never written again), oldest first, from a snapshot of the segment list: what the
        tiered-storage upload thread may ship. Writer only (empty otherwise); takes the append lock only to
        read :attr:`synced_through`, never while shipping."""
        if not self._writer.held or self._ops.is_closed():
            return []
        through = self.synced_through
        segs = self._local.segments
        # A closed segment ends where the next begins (a sealed segment opened lazily has not read its
        # last offset yet); offsets are dense here, since compacted topics are never shipped.
        return [(s.base_offset, after.base_offset, s.size) for s, after in zip(segs[:-1], segs[1:], strict=True)
                if after.base_offset <= through]

    def note_remote(self, log_start: int, end: int) -> None:
        """The upload thread committed the remote log up to ``end`` (its start ``log_start``): local
        retention may now delete the local copies of segments ending at or below ``end``. Under the
        append lock (an assignment readers may see at once)."""
        with self._append_lock:
            self._local.remote = (log_start, end)

    @property
    def remote(self) -> tuple[int, int] | None:
        """``(start, end)`` of the remote log as last noted (:meth:`note_remote`), None before."""
        return self._local.remote

    def flush(self) -> None:
        """:meth:`Partition.flush <pylog.partition.Partition.flush>` (the group commit's single-partition path)."""
        fd = self.begin_flush()
        if fd is not None:
            self.end_flush(fd)

    def begin_flush(self) -> int | None:
        """(the group commit, :mod:`pylog.storage.group_commit`, which makes many partitions durable at once) The
        first half of a flush, under the append lock: everything before the active segment's fsync (a
        handed-over writer's files, rolled segments, the recovery point). Returns a new descriptor of the active
        log, whose appends through this handle so far are durable once :meth:`end_flush` of it returned; None
        when nothing is left to do.

        :raises LogFailedError: when an fsync failed, now or before (reopen the store).
        """
        with self._append_lock:
            if self._writer.held:
                return self.durability.start_flush()
            if self.durability.handed_over:
                self.durability.sync_handed_over()
        return None

    def end_flush(self, fd: int, sync: Callable[[int], None] | None = None) -> None:
        """The second half of a flush, without the lock (appends go on meanwhile; the next flush covers them):
        fdatasync ``fd`` from :meth:`begin_flush`, or ``sync(fd)`` instead when the caller made the whole file
        system durable after :meth:`begin_flush` (``syncfs``: then ``sync`` checks the file's writeback errors,
        :func:`pylog.storage.fs_sync.check_written`, or raises the ``syncfs``'s); closes ``fd``. A failure fails
        the partition (it refuses work until the store is reopened).

        :raises LogFailedError: as :meth:`begin_flush`.
        """
        self.durability.finish_flush(fd, sync)

    def flush_due(self) -> bool:
        """Whether the topic's ``flush.messages`` / ``flush.ms`` ask for an fsync of what this handle appended
        (for appends made with ``flush_policy=False``)."""
        with self._append_lock:
            return self.durability.flush_due(self._local.config["flush.messages"], self._local.config["flush.ms"])

    def flush_if_due(self) -> float:
        """fsync when ``flush.ms`` has passed since the last fsync and records wait; for the store's
        background thread. Returns the ``time.monotonic()`` at which to look again (inf: never)."""
        ms = self._local.config["flush.ms"]
        dur = self.durability
        if ms >= (1 << 62) or (not self._writer.held and not dur.handed_over):
            return math.inf
        if dur.unflushed and time.monotonic() - dur.last_flush >= ms / 1000:
            with self._append_lock:
                if not self._ops.is_closed() and dur.failed is None and dur.unflushed:
                    if self._writer.held:
                        dur.flush_writer()
                    elif dur.handed_over:
                        dur.sync_handed_over()
        return dur.last_flush + ms / 1000 if dur.unflushed else time.monotonic() + ms / 1000

    def swap_in(self, cleaned: Sequence[tuple[Sequence[S], bool]]) -> None:
        """(the log cleaner; Kafka's ``replaceSegments``): swap cleaned segments in, crash-safely.

        ``cleaned`` holds, per group of consecutive segments of the view, the segments it replaces and
        whether its output is empty; a non-empty group's cleaned segment is already written and its log
        fsynced as ``.cleaned`` files at the group's first base offset. Runs steps 1-6 of
        :mod:`pylog.storage.swap` with one commit for all groups, under the maintenance lock and then the
        append lock (readers go on). A failure past the commit point marks the partition failed until
        the store is reopened (whose writer open rolls the swap forward). Writer only.
        """
        with self._maintenance_lock:
            maintenance.swap_in(self._local, self.durability, self._append_lock, cleaned)

    def remove_swap_leftovers(self) -> None:
        """(the log cleaner, at the start of a pass and after one that failed before its commit
        point): delete unfinished compaction output (``.cleaned``, uncommitted ``.swap``) and ``.deleted``
        files; a committed swap's manifest stays (the writer open rolls it forward). Under the maintenance
        lock, so no :meth:`swap_in` of this handle is under way."""
        with self._maintenance_lock:
            swap.remove_leftovers(self._local.directory)

