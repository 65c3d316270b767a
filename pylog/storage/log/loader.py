"""Opening a partition as its writer: interrupted compaction swaps, crash recovery, and the check of the
active segment after a clean close.

Invariants (numbered as in :mod:`pylog.partition`):
3. After a crash the writer re-validates the segments from the checkpointed recovery point on, truncates a
   torn tail and rebuilds their indexes; whatever was flushed (fsync) is kept. Offsets stay contiguous:
   whatever follows a segment that recovery cut is deleted.
5. (The opening half.) Segments wholly below the log start offset (a retention pass or delete-records that
   crashed after recording the new log start) are deleted on open.
10. Damage with whole batches after it in the active segment after a clean close is never cut silently:
   the open is refused (:class:`CorruptRecordError`) until :meth:`Partition.repair` asks for the cut.

Runs under the partition's append lock, with the writer lock taken, before the handle counts as the writer.
Segment objects of the reader view are never closed here: another thread may be reading through them.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from typing import Any, Callable, NamedTuple

from ...errors import CorruptRecordError
from ..checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from ..filenames import SWAP_MANIFEST_FILE, list_segment_bases
from ..swap import finish_interrupted_swap
from .local_log import LocalLog
from .segments import S

__all__ = ["Opened", "open_as_writer", "recover", "damaged_in_the_middle"]

log = logging.getLogger("pylog.partition")


class Opened(NamedTuple):
    """What :func:`open_as_writer` found: the checkpoint it opened on (clean or not), the recovery point
    to keep, whether the checkpoint it wrote (durably) to finish an interrupted swap is dirty (None: it
    wrote none), and the recovery's figures (None: none ran)."""
    checkpoint: Checkpoint
    recovery_point: int
    cp_durably_dirty: bool | None
    recovery: dict[str, Any] | None


def open_as_writer(local: LocalLog[S], takes_turns: bool, repairing: bool,
                   active_checked: tuple[int, int | None, int, int] | None,
                   on_recovery: Callable[[dict[str, Any]], None]) -> Opened:
    """Open ``local``'s segments for appending, recovering as needed; makes them ``local``'s view and sets
    its log start and swap generation. ``takes_turns``: the handle handed the lock over before (a clean
    checkpoint then skips the look for interrupted swaps). ``repairing``: re-validate the active segment
    even after a clean close (:meth:`Partition.repair`). ``active_checked``: see
    :meth:`Partition.note_active_checked`: bytes of the active segment this handle checked already.
    ``on_recovery`` is given the figures of a recovery as it starts (they fill in as it goes)."""
    cp, durably_dirty = _finish_swaps(local, takes_turns)
    # The reader-mode segments are not closed here: another thread may be reading through them right
    # now, and closing a descriptor it is about to pread would let the number be reused for another
    # file. They close themselves (Segment.__del__) when the last snapshot holding them goes.
    bases = list_segment_bases(local.directory)
    # Only on a clean checkpoint: recovery closes and cuts the segments it validates, and objects of
    # the reader view may be in use by other threads' reads right now.
    reuse = local.sealed_segments() if cp.clean and not repairing else {}
    segs = [(reuse.get(b) if b != bases[-1] else None) or local.open_segment(b) for b in bases]
    for seg in segs:
        seg.trusted = True  # opened under the lock
    recovery = None
    if not segs:
        start = max(cp.log_start_offset, cp.recovery_point)
        segs = [local.create_segment(start)]
        cp = Checkpoint(start, start, clean=False, swap_generation=local.swap_gen)
    elif cp.clean and not repairing:
        segs, recovery = _open_active(local, segs, active_checked, on_recovery)
    elif cp.clean:  # repair(): re-validate the active segment and cut it at its first damage
        segs, recovery = recover(local.directory, segs, segs[-1].base_offset, on_recovery)
    else:
        segs, recovery = recover(local.directory, segs, cp.recovery_point, on_recovery)
    local.log_start = cp.log_start_offset
    local.set_segments(_drop_below_start(local, segs))
    segs = local.segments
    recovery_point = min(cp.recovery_point, segs[-1].base_offset) if not cp.clean else cp.recovery_point
    return Opened(cp, recovery_point, durably_dirty, recovery)


def _finish_swaps(local: LocalLog[S], takes_turns: bool) -> tuple[Checkpoint, bool | None]:
    """Read the checkpoint and finish a compaction swap a crash interrupted; returns the checkpoint and,
    when it wrote one (durably), whether that is dirty."""
    cp = read_checkpoint(local.checkpoint_path) or Checkpoint(0, local.log_start, clean=False)
    local.swap_gen = cp.swap_generation
    durably_dirty = None
    interrupted = os.path.exists(os.path.join(local.directory, SWAP_MANIFEST_FILE))
    if interrupted:
        # A crash interrupted a compaction swap: tell readers before files are renamed over names.
        local.swap_gen += 1
        cp = Checkpoint(cp.recovery_point, cp.log_start_offset, cp.clean, local.swap_gen)
        write_checkpoint(local.checkpoint_path, cp)
        durably_dirty = not cp.clean
    if interrupted or not (takes_turns and cp.clean):
        # After a clean handover nothing was left half-done (release_writer waits for maintenance):
        # a writer taking its turn skips this look at every file of the directory.
        finish_interrupted_swap(local.directory)
    return cp, durably_dirty


def _open_active(local: LocalLog[S], segs: list[S], active_checked: tuple[int, int | None, int, int] | None,
                 on_recovery: Callable[[dict[str, Any]], None]) -> tuple[list[S], dict[str, Any] | None]:
    """After a clean close: open the active segment for appending, checking what this handle has not
    checked yet; recover a torn last batch, refuse damage in the middle."""
    active = segs[-1]
    try:
        active.open_for_append()
    except CorruptRecordError as exc:
        segs[-1] = local.open_segment(segs[-1].base_offset)
        if not segs[-1].damage_is_at_tail():
            # Not a torn write: whole batches follow the damage, and readers may have read them and
            # their offsets. Cutting them would lose records silently and hand their offsets out
            # again: refuse to write until someone decides (repair()).
            raise damaged_in_the_middle(local.topic, local.number, exc) from None
        # The last batch is cut short or bad with nothing after it: what a writer that died during
        # an append leaves (a writer taking turns leaves the checkpoint clean): recover it.
        log.warning("%s: active segment's last batch fails its check after a clean close (%s); "
                    "recovering", local.directory, exc)
        return recover(local.directory, segs, segs[-1].base_offset, on_recovery)
    # open_for_append checked the batches after the last index entry only. Bit rot before it
    # is damage in the middle too (whole batches follow): check those bytes, once per handle.
    memo = active_checked
    fresh = memo is None or memo[:2] != (active.base_offset, active.inode)
    damage = active.first_damage(*((0, None) if memo is None or fresh else memo[2:]))
    if damage is not None:
        active.close()
        raise damaged_in_the_middle(local.topic, local.number, damage)
    return segs, None


def _drop_below_start(local: LocalLog[S], segs: list[S]) -> list[S]:
    """Delete the segments wholly below the log start: a retention pass or delete-records that crashed
    after recording the new log start and before unlinking them. Returns the rest."""
    k = 0
    while k < len(segs) - 1 and segs[k + 1].base_offset <= local.log_start:
        k += 1
    for seg in segs[:k]:
        log.info("deleting %s: below the log start offset %d", seg.log_path, local.log_start)
        # A fresh object: the one in the list may be shared with reads under way (see above).
        local.open_segment(seg.base_offset).delete()
    return segs[k:]


def damaged_in_the_middle(topic: str, number: int, exc: CorruptRecordError) -> CorruptRecordError:
    """The error that refuses a writer open after a clean close over damage with whole batches after it."""
    return CorruptRecordError(
        f"{topic}-{number}: the active segment is damaged in the middle after a clean "
        f"close ({exc.reason}); appends are refused so that the whole batches after the damage "
        f"are not cut. `pylog verify` shows the damage; `pylog repair STORE {topic} "
        f"{number}` (Partition.repair()) cuts the log there", exc.path, exc.position)


def recover(directory: str, segs: list[S], recovery_point: int,
            on_recovery: Callable[[dict[str, Any]], None]) -> tuple[list[S], dict[str, Any]]:
    """Re-validate segments from the one holding ``recovery_point``; cut everything after a bad batch.
    Returns the segments left and the figures (segments validated and deleted, bytes dropped, seconds),
    which ``on_recovery`` is given as the recovery starts."""
    i = max(0, bisect.bisect_right([s.base_offset for s in segs], recovery_point) - 1)
    log.info("recovering %s from offset %d (%d segments)", directory, recovery_point, len(segs) - i)
    t0 = time.monotonic()
    stats: dict[str, Any] = {"segments_validated": 0, "bytes_dropped": 0, "segments_deleted": 0, "seconds": 0.0}
    on_recovery(stats)
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
    return segs, stats
