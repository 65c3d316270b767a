"""Maintenance of a partition's segment list by its writer: retention, delete-records, and the compaction
swap (:func:`swap_in`, whose numbered crash-safety protocol is documented in :mod:`pylog.storage.swap`).

Invariants (numbered as in :mod:`pylog.partition`):
5. Retention removes whole segments from the head only, after the checkpoint has recorded the new log
   start offset (so a crash mid-way leaves only segments that the next open deletes); the active segment
   goes only after a roll has put an empty one after it.
6. Maintenance (retention, delete-records, compaction) runs one at a time per partition and only in the
   writer: the facade holds the partition's maintenance lock and then its append lock around every
   function here (never the other way round); :func:`swap_in` takes the append lock itself, after the
   facade took the maintenance lock. It never closes a segment another thread may be reading: removed
   segments are unlinked and released when the last snapshot holding them goes; a reader whose segment
   vanished or was replaced under it takes a new snapshot and retries, so it sees the records or
   ``OffsetOutOfRangeError``. The log start moves before, and a segment's log goes before its
   aborted-transaction index, so a read that looks up the aborts of records it took from a deleted segment
   finds out (:meth:`PartitionInternals.aborted <pylog.storage.log.internals.PartitionInternals.aborted>`).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from ...config import TopicConfig, local_retention
from ...errors import OffsetOutOfRangeError
from ..fileio import fsync_dir
from ..filenames import remove_segment_snapshots
from ..retention import RetentionResult, deletable_prefix
from ..txn_index import remove_index
from .. import swap
from .durability import Durability
from .local_log import LocalLog
from .segments import S

__all__ = ["enforce_retention", "delete_records", "swap_in"]

log = logging.getLogger("pylog.partition")


def enforce_retention(local: LocalLog[S], durability: Durability[S], config: TopicConfig, now: int,
                      roll: Callable[[], object]) -> RetentionResult:
    """Delete the oldest segments that ``retention.ms`` / ``retention.bytes`` / the log start allow;
    ``roll`` rolls the active segment (when every segment goes). Topics whose ``cleanup.policy`` lacks
    ``delete`` only lose segments below the log start offset.

    With ``remote.storage.enable`` the rules run with ``local.retention.*`` and a segment goes by them only
    once shipped: its end at or below the remote end the upload thread noted (``local.remote``); the
    active segment is never shipped, so it never goes. Segments below the log start (delete_records) go
    as without remote storage."""
    timed = "delete" in config["cleanup.policy"]
    segs = local.segments
    ms, nbytes = local_retention(config)
    count, reasons = deletable_prefix(segs, local.log_start, now, ms if timed else -1, nbytes if timed else -1)
    if config["remote.storage.enable"] and count:
        shipped_end = local.remote[1] if local.remote is not None else -1
        shipped = 0
        while shipped < len(segs) - 1 and segs[shipped + 1].base_offset <= shipped_end:  # ends where the next begins
            shipped += 1
        below_start, _ = deletable_prefix(segs, local.log_start, now, -1, -1)
        capped = max(min(count, shipped), below_start)
        if capped < count:
            count, reasons = capped, (reasons if capped else [])
    result = RetentionResult(local.topic, local.number, reasons=reasons, log_start_offset=local.log_start)
    if count == 0:
        return result
    if count == len(segs):
        roll()  # every segment, the active one too: keep an empty one to append to
        result.rolled = True
    _delete_head(local, durability, count, result)
    return result


def delete_records(local: LocalLog[S], durability: Durability[S], before_offset: int) -> int:
    """Make ``before_offset`` the log start offset (recorded first) and delete the segments wholly below
    it; returns the new log start. See :meth:`Partition.delete_records`."""
    end = local.segments[-1].next_offset
    if before_offset > end:
        raise OffsetOutOfRangeError(
            f"cannot delete records before {before_offset}: the log of {local.name} ends "
            f"at {end}", before_offset, local.log_start, end)
    if before_offset <= local.log_start:
        return local.log_start
    local.log_start = before_offset
    durability.write_checkpoint()
    segs = local.segments
    k = 0
    while k < len(segs) - 1 and segs[k + 1].base_offset <= before_offset:
        k += 1
    if k:
        _delete_head(local, durability, k, RetentionResult(local.topic, local.number))
    return local.log_start


def _delete_head(local: LocalLog[S], durability: Durability[S], count: int, result: RetentionResult) -> None:
    """Delete the ``count`` oldest segments (never all): record the new log start first, then unlink."""
    segs = local.segments
    assert 0 < count < len(segs)
    doomed, kept = segs[:count], segs[count:]
    local.log_start = max(local.log_start, kept[0].base_offset)
    durability.write_checkpoint()
    local.set_segments(kept)
    for seg in doomed:
        result.deleted_segments.append(seg.base_offset)
        result.bytes_deleted += seg.size
        seg.unlink()  # not closed: readers holding a snapshot may be using it (invariant 6)
        # Its aborted transactions go with it, after its log: a reader that finds neither knows the segment
        # was deleted under it and looks again (txn.aborted_in), never reads its records as having none.
        remove_index(local.directory, seg.base_offset)
    remove_segment_snapshots(local.directory, local.log_start)  # producer snapshots kept for shipping them
    fsync_dir(local.directory)
    result.log_start_offset = local.log_start
    log.info("%s: deleted %d segment(s) below offset %d (%s)", local.name, count,
             local.log_start, ",".join(result.reasons) or "log_start")


def swap_in(local: LocalLog[S], durability: Durability[S], append_lock: threading.RLock,
            cleaned: Sequence[tuple[Sequence[S], bool]]) -> None:
    """Replace each group of consecutive segments of ``cleaned`` (``(replaced segments, output empty)``)
    by its cleaned segment, written as ``.cleaned`` files at the group's first base offset (or by
    nothing when the output is empty), with one commit for all groups: steps 1-6 of
    :mod:`pylog.storage.swap`. Takes ``append_lock`` for steps 3-5. A failure past the commit point
    marks the partition failed (until the store is reopened, whose writer open rolls the swap forward)
    and is re-raised."""
    directory = local.directory
    groups: swap.Swap = [(-1 if empty else old[0].base_offset, [s.base_offset for s in old]) for old, empty in cleaned]
    swap.commit(directory, groups)  # steps 1-2: past this, the swap happens (now or at the next writer open)
    try:
        with append_lock:
            _bump_swap_generation(local, durability, [s for old, _ in cleaned for s in old])
            swap.roll_forward(directory, groups)
            for (old, empty), (new_base, _) in zip(cleaned, groups, strict=True):
                # Sized under the new generation (local.generation() is it now): see Segment.open.
                _replace_segments(local, old, None if empty else local.open_segment(new_base))
        swap.finish(directory)
    except BaseException as exc:
        # Past the commit point the files and the in-memory view may disagree: refuse work until the
        # store is reopened, whose writer open rolls the swap forward from the manifest.
        durability.failed = f"compaction swap failed after its commit point: {exc!r}"
        raise


def _replace_segments(local: LocalLog[S], old: Sequence[S], new: S | None) -> None:
    """Swap the consecutive segments ``old`` for ``new`` (or nothing) in the view (under the append lock)."""
    segs = local.segments
    i = next((j for j, s in enumerate(segs) if s is old[0]), -1)
    # the length check first: past it the slice has exactly len(old) segments
    if i < 0 or i + len(old) >= len(segs) or any(a is not b for a, b in zip(segs[i:i + len(old)], old, strict=True)):
        raise AssertionError("compaction swap does not match the segment list")
    local.set_segments(segs[:i] + ([new] if new is not None else []) + segs[i + len(old):])


def _bump_swap_generation(local: LocalLog[S], durability: Durability[S], replaced: Sequence[S]) -> tuple[str, int]:
    """Step 3: record a new swap generation (durably) before any name points at a new file. The segments
    of the view not ``replaced`` keep their files, so they move to it; only the replaced ones (still in
    readers' snapshots) keep the old one. Returns the generation for new segment objects."""
    local.swap_gen += 1
    durability.write_checkpoint()
    generation = local.generation()
    gone = {id(s) for s in replaced}
    for seg in local.segments:
        if id(seg) not in gone and seg.generation is not None:
            seg.generation = generation
    return generation
