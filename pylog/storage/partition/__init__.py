"""A partition: an ordered list of segments, one of them active, plus the writer lock and recovery.

:class:`Partition` (:mod:`.facade`) is the public API; each concern lives in one module of this package,
which states the invariants it keeps (numbers as below):

1. Offsets are dense (as written), strictly increasing and never reused: the next offset only grows, and
   a new segment starts at the offset after the last one written (:mod:`.local_log`, :mod:`.append`).
2. A reader never sees part of a batch: readers in this process read up to sizes published after each
   write completes; readers in other processes only count a batch once it is whole and its CRC checks
   (:mod:`.local_log`).
3. After a crash the writer re-validates the segments from the checkpointed recovery point on, truncates a
   torn tail and rebuilds their indexes; whatever was flushed (fsync) is kept (:mod:`.loader`,
   :mod:`.durability`).
4. Exactly one writer per partition across threads and processes at any moment: an ``flock`` on ``.lock``
   taken on the first write and held until :meth:`Partition.close` or :meth:`Partition.release_writer`
   (which the store's descriptor budget also calls, through :meth:`Partition.release_handles`, for a
   partition used least recently: see :mod:`pylog.storage.handles`).
   Writers that take turns (producers of several processes sharing a partition) ask the holder for it
   through a shared ``flock`` on ``.want`` while they wait; the holder looks with
   :meth:`Partition.handover_wanted` and hands over by releasing; that probe's descriptor is never closed
   under a probe in another thread (its number reused, the probe's unlock could release another file's
   lock). Readers take no lock (:mod:`.writer_lock`).
5. Retention removes whole segments from the head only, after the checkpoint has recorded the new log
   start offset (so a crash mid-way leaves only segments that the next open deletes); the active segment
   goes only after a roll has put an empty one after it (:mod:`.maintenance`, :mod:`.loader`). Segments
   before the recovery point are sealed and fsynced. A roll leaves the fsync of the segment it sealed to
   the background sync thread (:mod:`pylog.storage.syncer`), which moves the recovery point past it once
   done; ``flush``, ``close`` and handing the writer lock over sync whatever is still pending first.
   Handing over does not fsync the active segment: a handle's ``flush`` and ``close`` fsync every file it
   appended to and has not fsynced, whether or not it is still the writer (:mod:`.durability`).
6. Maintenance (retention, delete-records, compaction) runs one at a time per partition and only in the
   writer. It never closes a segment another thread may be reading: removed segments are unlinked and
   released when the last snapshot holding them goes; a reader whose segment vanished or was replaced
   under it takes a new snapshot and retries, so it sees the records or ``OffsetOutOfRangeError``
   (:mod:`.maintenance`).
7. Reads never go backwards: records come out in strictly increasing offset order even while another
   process is half-way through swapping compacted segments in (:mod:`.local_log`).
8. Once an fsync failed, nothing is called durable again; the partition refuses work until the store is
   reopened (:mod:`.durability`).
9. Every batch of an append call is encoded and checked before any is written; an idempotent producer's
   retry is not appended twice (:mod:`.append`).
10. Damage in the middle of the active segment after a clean close is never cut silently (:mod:`.loader`).

Thread-safety: every public method may be called from any thread. Appends serialise on one lock
(``Partition._append_lock``); reads take a snapshot of the segment list and sizes and run concurrently with
appends and maintenance. Lock order: ``_maintenance_lock`` before ``_append_lock``, never after; which
operation touches the files under which lock is listed in :mod:`.facade`.
"""

from .facade import DEFAULT_MAX_BYTES, Partition

__all__ = ["Partition", "DEFAULT_MAX_BYTES"]
