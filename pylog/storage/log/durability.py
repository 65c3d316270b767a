"""What of a partition is durable: the checkpoint and recovery point, rolls and their background fsync,
flushes, the clean checkpoint at the end of a writer's tenure (handing over, closing), and the failed state
that an fsync error leaves.

Invariants (numbered as in :mod:`pylog.partition`):
3. After a crash the writer re-validates the segments from the checkpointed recovery point on, truncates a
   torn tail and rebuilds their indexes; whatever was flushed (fsync) is kept. So the recovery point never
   moves past a segment that is not sealed and fsynced.
5. (The durability half.) Segments before the recovery point are sealed and fsynced. A roll leaves the
   fsync of the segment it sealed to the background sync thread (:mod:`pylog.storage.syncer`), which moves
   the recovery point past it once done; ``flush``, ``close`` and handing the writer lock over sync
   whatever is still pending first. Handing over does not fsync the active segment: a handle's ``flush``
   and ``close`` fsync every file it appended to and has not fsynced, whether or not it is still the writer.
8. Once an fsync failed (:attr:`Durability.failed`), nothing is called durable again: Linux reports a failed
   writeback once, and a later fsync may succeed without the lost pages. The partition refuses work until
   the store is reopened.

Every method runs under the partition's append lock (the partition's), which the caller holds,
except :meth:`Durability.sync_rolled_job` (the background sync thread), which takes it itself and fsyncs
without it, and :meth:`Durability.finish_flush` (``Partition.flush``'s fsync of the active segment, on a
descriptor of its own taken under the lock by :meth:`Durability.start_flush`): appends to the partition go
on while an ``acks=all`` fsync runs, and the next one covers them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Generic

from ... import metrics
from ...errors import LogFailedError
from ..checkpoint import Checkpoint, write_checkpoint
from ..fileio import DESCRIPTOR_ERRNOS, fault, raise_fault, fsync_dir
from ..handles import RateLimitedLog
from .. import syncer
from .local_log import LocalLog
from .txn import repair_before_roll
from .segments import S
from .writer_lock import WriterLock

__all__ = ["Durability", "HANDED_OVER_MAX"]

log = logging.getLogger("pylog.partition")
#: Out of descriptors, every partition's background sync may fail at once: one line per minute says so.
_put_off = RateLimitedLog(log, 60.0)

#: How many segment files holding appends not fsynced before a handover a handle remembers (see
#: Partition.release_writer) before it fsyncs them.
HANDED_OVER_MAX = 16


class Durability(Generic[S]):
    """The durable state of one partition handle: recovery point, unsynced rolls, pending flushes."""

    def __init__(self, local: LocalLog[S], lock: threading.RLock, writer: WriterLock,
                 is_closed: Callable[[], bool]) -> None:
        self.local = local
        self.name = local.name
        self._lock = lock  # the partition's append lock, shared
        self._writer = writer  # asked whether this handle is the writer
        self._is_closed = is_closed
        #: Why the partition refuses work (None: it does not). Set on an fsync or write failure, or a
        #: compaction swap that failed past its commit point; cleared only by reopening.
        self.failed: str | None = None
        self.recovery_point = 0
        #: Segments rolled (sealed) but not yet fsynced, oldest first: the background sync's work list.
        self.unsynced: list[S] = []
        #: The checkpoint on disk is dirty, durably: a power cut cannot bring back a clean one (see roll).
        self.cp_durably_dirty = False
        self.unflushed = 0  # records appended through this handle and not fsynced yet, writer or not
        self.last_flush = time.monotonic()
        #: Log files of segments holding appends through this handle that were not fsynced when it let the
        #: writer lock go (release_writer does not fsync the active segment): flush and close fsync them by
        #: name, so that what this handle appended becomes durable whoever writes the partition by then.
        #: At most HANDED_OVER_MAX (release_writer fsyncs them when there are more).
        self.handed_over: set[str] = set()

    def check_not_failed(self) -> None:
        """:raises LogFailedError: when the partition failed earlier."""
        if self.failed is not None:
            raise LogFailedError(f"{self.name} failed earlier ({self.failed}); reopen the store")

    def write_checkpoint(self, clean: bool = False, durable: bool = True) -> None:
        """Record the recovery point, log start and swap generation in ``partition.checkpoint``."""
        local = self.local
        write_checkpoint(local.checkpoint_path,
                         Checkpoint(self.recovery_point, local.log_start, clean=clean, swap_generation=local.swap_gen),
                         durable=durable)
        # A power cut leaves the last durable version or a later one: all dirty once a dirty one was durable.
        if clean:
            self.cp_durably_dirty = False
        elif durable:
            self.cp_durably_dirty = True

    # ------------------------------------------------------------------ rolls

    def roll(self, snapshot_producers: Callable[[], None]) -> S:
        """Seal the active segment (trimmed indexes) and start a new one at the next offset. The sealed
        segment is fsynced in the background (see :meth:`sync_rolled_job`): the recovery point stays
        before it until then. ``snapshot_producers`` writes the idempotence snapshot (not fsynced). A torn
        write at the end of its aborted-transaction index is dropped first (:func:`.txn.repair_before_roll`)."""
        local = self.local
        old = local.segments[-1]
        try:
            repair_before_roll(local)
            old.seal(durable=False)
            new = local.create_segment(old.next_offset)
            new.generation = local.generation()  # moved on by a compaction swap (maintenance.swap_in)
        except OSError as exc:
            # The old segment is no longer writable and no new one exists: refuse work until reopened
            # (recovery then finishes the roll or rolls it back).
            self.failed = f"roll at offset {old.next_offset} failed: {exc}"
            cause = fault(exc, f"rolling {self.name} at offset {old.next_offset}",
                          "nothing was appended from there on; the partition refuses work until the store is "
                          "reopened (its next writer finishes or undoes the roll)", "reopen the store")
            raise LogFailedError(f"{self.name}: {self.failed if cause is exc else cause}") from cause
        local.set_segments(local.segments + [new])
        self.unsynced.append(old)
        # Until the background sync is done, a power cut may damage the sealed segment, and only a dirty
        # checkpoint makes the next writer re-validate it: a writer taking turns may have left a clean one,
        # or a dirty one not fsynced (see loader.open_as_writer). The recovery point stays where it was.
        if not self.cp_durably_dirty:
            self.write_checkpoint()
        # Not fsynced: the data it describes is not durable yet either. A snapshot that outlives the data
        # names an offset past the log's end after a power cut, and is then rebuilt from batch headers.
        snapshot_producers()
        try:
            syncer.submit(self.sync_rolled_job)
        except RuntimeError as exc:  # no new thread at interpreter shutdown: flush and close sync it instead
            log.warning("%s: no background sync of the rolled segment (%s)", self.name, exc)
        log.debug("rolled %s at offset %d", self.name, new.base_offset)
        return new

    def sync_rolled_job(self) -> None:
        """(The background sync thread.) fsync the segments rolled since the last sync, without the
        partition lock, so appends go on meanwhile; then move the recovery point past them."""
        with self._lock:
            pending = list(self.unsynced)
        if not pending:
            return
        try:
            for seg in pending:
                began = time.perf_counter()
                seg.sync_files()
                if metrics.state.on:
                    metrics.fsynced(time.perf_counter() - began)
            fsync_dir(self.local.directory)
        except FileNotFoundError:
            return  # the partition was deleted (or is being deleted) under the job: nothing is left to sync
        except OSError as exc:
            if exc.errno in DESCRIPTOR_ERRNOS:
                # Opening a file failed, no writeback: nothing was lost and nothing is retried here (no
                # loop); the segments stay pending for the next roll's job, flush, handover or close.
                _put_off.log(logging.WARNING, "emfile", "%s: background fsync of rolled segments put off: %s",
                             self.name, exc)
                return
            with self._lock:
                self._sync_failed(exc)
            return
        with self._lock:
            done = 0
            while done < len(self.unsynced) and done < len(pending) and self.unsynced[done] is pending[done]:
                done += 1
            if not done:
                return  # a flush, close or handover synced them first
            del self.unsynced[:done]
            if not self._writer.held or self._is_closed() or self.failed is not None:
                return
            self.advance_recovery_point()

    def sync_rolled_now(self) -> None:
        """fsync what the background sync has not done yet (cheap if it has)."""
        if not self.unsynced:
            return
        # Linux reports a failed writeback once, to one fsync: a later fsync through a new descriptor
        # succeeds although the pages may be gone. Never call such a segment durable.
        self.check_not_failed()
        try:
            for seg in self.unsynced:
                seg.sync_files()
            fsync_dir(self.local.directory)
        except OSError as exc:
            if exc.errno in DESCRIPTOR_ERRNOS:  # an open failed, not a writeback: they stay pending
                raise_fault(exc, f"syncing {self.name}", "the segments rolled since the last sync are not fsynced "
                            "yet (nothing was lost)")
            self._sync_failed(exc)
            raise_fault(exc, f"syncing {self.name}", "the segments rolled since the last sync may not be "
                        "durable; the partition refuses work until the store is reopened", "reopen the store")
        self.unsynced.clear()

    def _sync_failed(self, exc: OSError) -> None:
        """An fsync of rolled segments failed. The kernel may have dropped the pages it could not write,
        so appending on would build on a log with a hole after the next crash: refuse work until reopened
        (recovery then re-validates from the recovery point, which never moved past them)."""
        if self.failed is None:
            self.failed = f"fsync of a rolled segment failed: {exc}"
        log.error("%s: fsync of a rolled segment failed: %s", self.name, exc)

    def synced_through(self) -> int:
        """Offsets below this lie in segments that are sealed and fsynced."""
        if self.unsynced:
            return self.unsynced[0].base_offset
        segs = self.local.segments
        return segs[-1].base_offset if segs else self.local.log_start

    def advance_recovery_point(self) -> None:
        """Move the recovery point to the oldest segment still unsynced, or else to the active one, and
        record it in the checkpoint. Not on a failed partition: what it wrote is suspect."""
        if self.failed is not None:
            return
        target = self.unsynced[0].base_offset if self.unsynced else self.local.segments[-1].base_offset
        if target > self.recovery_point:
            self.recovery_point = target
            # Not fsynced: a power cut that loses this write leaves the older, also dirty, checkpoint, and
            # the next writer re-validates a little more.
            self.write_checkpoint(durable=False)

    # ------------------------------------------------------------------ the end of a writer's tenure

    def hand_over(self, snapshot_producers: Callable[[], None]) -> S | None:
        """As the writer letting the lock go to another handle (``Partition.release_writer``), under both locks:
        the durable side. Remembers the active segment's file when it holds appends not fsynced (flush and
        close fsync it later, writer or not); fsyncs the rolled segments (the next writer checks only the
        active one, so they must be durable before a clean checkpoint names offsets past them); writes the
        producer snapshot with ``snapshot_producers`` (not fsynced: a lost or stale one is rebuilt from the
        batch headers); stops appending to the active segment, leaving its indexes live for the next writer;
        writes a clean checkpoint, not fsynced either (if a power cut loses the log's tail, the next writer's
        check of the active segment finds it and recovers). Returns the active segment (None when nothing was
        written: a failed partition, or no segment). The log itself is not fsynced: the flush policy decides.

        :raises OSError: the caller lets the lock go all the same; a failed sync fails the partition.
        """
        segs = self.local.segments
        if self.unflushed and segs:
            self.remember_handed_over(segs[-1].log_path)
        if self.failed is not None or not segs:
            return None
        active = segs[-1]
        self.sync_rolled_now()
        try:
            snapshot_producers()
        finally:
            active.stop_appending()
        self.recovery_point = active.next_offset
        self.write_checkpoint(clean=True, durable=False)
        return active

    def close_writer(self, snapshot_producers: Callable[[], None]) -> None:
        """As the writer closing (``Partition.close``), under both locks: write the producer snapshot, fsync
        what it handed over and the rolled segments, seal the active segment (fsynced, trimmed indexes) and
        write a clean, durable checkpoint. Nothing on a failed partition (the next writer recovers).

        :raises OSError: the caller lets the lock go all the same.
        """
        segs = self.local.segments
        if self.failed is not None or not segs:
            return
        active = segs[-1]
        snapshot_producers()
        self.sync_handed_over()
        self.sync_rolled_now()
        active.seal(durable=True)
        self.recovery_point = active.next_offset
        self.write_checkpoint(clean=True)

    # ------------------------------------------------------------------ flushes

    def flush_due(self, flush_messages: int, flush_ms: int) -> bool:
        """True when the topic's flush policy asks for an fsync after an append now."""
        return self.failed is None and (self.unflushed >= flush_messages or (
            flush_ms < (1 << 62) and (time.monotonic() - self.last_flush) * 1000 >= flush_ms))

    def _sync_up_to_active(self) -> None:
        """As the writer: what a flush does before the active segment's fsync (a handed-over writer's files,
        then the rolled segments and the recovery point); raises if the partition failed."""
        self.check_not_failed()
        if self.handed_over:
            self.sync_handed_over()
        if self.unsynced:
            self.sync_rolled_now()
            self.advance_recovery_point()

    def flush_writer(self) -> None:
        """As the writer: fsync everything appended through this handle, rolled segments first."""
        self._sync_up_to_active()
        try:
            began = time.perf_counter()
            self.local.segments[-1].flush()
            if metrics.state.on:
                metrics.fsynced(time.perf_counter() - began)
        except OSError as exc:
            # As for a rolled segment (_sync_failed): the kernel may have dropped the pages it could not
            # write, and a later fsync would succeed without them. Never call this log durable again.
            self.failed = f"fsync of the active segment failed: {exc}"
            raise_fault(exc, f"flushing {self.name}",
                        "what was appended since the last flush may not be durable; the partition refuses work "
                        "until the store is reopened", "reopen the store")
        self.unflushed = 0
        self.last_flush = time.monotonic()

    def start_flush(self) -> int | None:
        """As the writer, under the lock: :meth:`flush_writer` up to the fsync of the active segment, which
        :meth:`finish_flush` runs without the lock (appends go on meanwhile; what they add is left to the next
        flush): returns the descriptor to fsync (None: nothing to). Counted as flushed from here on, so a
        flush policy does not start a second fsync while this one runs; if it fails, the partition fails."""
        self._sync_up_to_active()
        try:
            fd = self.local.segments[-1].sync_descriptor()
        except OSError as exc:  # EMFILE: nothing was fsynced, nothing is lost
            raise_fault(exc, f"flushing {self.name}", "nothing was fsynced", "retry")
        self.unflushed = 0
        self.last_flush = time.monotonic()
        return fd

    def finish_flush(self, fd: int, sync: Callable[[int], None] | None = None) -> None:
        """Without the lock: fdatasync ``fd`` (from :meth:`start_flush`), or call ``sync(fd)`` instead (the group
        commit's :func:`pylog.storage.fs_sync.check_written` after a ``syncfs`` of the file system, or what raises
        the ``syncfs``'s error), and close it. A failure fails the partition, as in :meth:`flush_writer`; so does
        one of another flush that ran meanwhile.

        :raises LogFailedError: when the partition failed while this fsync ran: ``fd`` is a dup sharing the open
            file description (and Linux's record of a writeback error) with the writer's and any other flush's
            descriptor, so when a concurrent flush's fdatasync reported the error, this one returns 0 though
            the pages may be gone (invariant: an fsync failure is never forgotten)."""
        try:
            began = time.perf_counter()
            (sync or os.fdatasync)(fd)  # os.fdatasync looked up here: tests wrap it
            if sync is None and metrics.state.on:  # an fdatasync (a round's syncfs is not one partition's fsync)
                metrics.fsynced(time.perf_counter() - began)
        except OSError as exc:
            with self._lock:
                self.failed = f"fsync of the active segment failed: {exc}"
            raise_fault(exc, f"flushing {self.name}",
                        "what was appended before this flush may not be durable; the partition refuses work "
                        "until the store is reopened", "reopen the store")
        finally:
            os.close(fd)
        with self._lock:
            self.check_not_failed()

    def remember_handed_over(self, path: str) -> None:
        """At a handover with appends not fsynced: remember the active segment's file ``path`` for the next
        flush, fsyncing those remembered so far first when there are :data:`HANDED_OVER_MAX` of them."""
        if path in self.handed_over:
            return
        if len(self.handed_over) >= HANDED_OVER_MAX and self.failed is None:
            # A writer taking turns with acks=1 and no flush policy would remember one file per segment for
            # its life: fsync them now. Mostly rolled segments that their roller's sync has made clean
            # already: cheap. A failure leaves them (and, for an fsync, fails the partition): the next
            # flush raises.
            try:
                self.sync_handed_over()
            except Exception:
                log.debug("pylog: fsync of %s's handed-over segments failed", self.name, exc_info=True)
        self.handed_over.add(path)

    def sync_handed_over(self) -> None:
        """fsync the segment files that hold appends through this handle not fsynced when it let the
        writer lock go (see :meth:`Partition.release_writer`), writer again or not. A file retention or
        compaction removed needs nothing: retention dropped its records, and a compaction swap fsyncs the
        files it puts in place (nor does it touch a segment before its roller synced it). As a reader the
        handle's appends are then all durable."""
        self.check_not_failed()
        for path in sorted(self.handed_over):
            try:
                fd = os.open(path, os.O_RDONLY)  # Linux syncs a file's dirty pages through any descriptor
            except FileNotFoundError:
                fd = None
            except OSError as exc:  # nothing was fsynced: a later flush may try again
                raise_fault(exc, f"flushing {self.name}", "what this handle appended before it "
                            "handed the partition over may not be durable yet")
            if fd is not None:
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    # As for the active segment (flush_writer): the pages may be gone and a later fsync
                    # would succeed without them. Never call this log durable again.
                    self.failed = f"fsync of a segment appended to before a handover failed: {exc}"
                    raise_fault(exc, f"flushing {self.name}",
                                "what this handle appended before it handed the partition over may not be durable; "
                                "the partition refuses work until the store is reopened", "reopen the store")
                finally:
                    os.close(fd)
            self.handed_over.discard(path)
        if not self._writer.held:
            self.unflushed = 0
            self.last_flush = time.monotonic()
