"""The partition's full consistency check (``Partition.check``, ``pylog verify``): every segment and index (the
aborted-transaction indexes too), the order of the segments, and logs cut below what was written into them.

Invariants: nothing here writes or changes the view; a check reads every batch up to the end of every file
(a reader's check of the active segment too, past what reads count as visible), and reports problems as
strings instead of raising them, so one damaged segment does not hide the others. It runs over one view
(``LocalLog.on_current_view`` starts it again over a new one when maintenance replaced a segment under it).
"""

from __future__ import annotations

from typing import Callable, Sequence

from ...errors import CorruptRecordError
from ..checkpoint import read_checkpoint
from .local_log import LocalLog
from .segments import S, SegmentLike
from .txn import active_entries, missing_entries

__all__ = ["check_view"]


def check_view(local: LocalLog[S], is_writer: Callable[[], bool], log_end: Callable[[], int],
               writer_active: bool | None) -> list[str]:
    """The problems of ``local``'s current view (empty if none). ``is_writer``: whether this handle holds
    the writer lock; ``log_end``: the partition's log end offset as its readers see it; ``writer_active``:
    whether another process may be appending right now (None: unknown, assume so), when a batch the active
    file does not wholly hold yet is not reported."""
    problems: list[str] = []
    prev_next = None
    segs = local.segments
    for seg in segs:
        if seg is segs[-1] and not is_writer():
            problems.extend(seg.check(seg.file_size(), partial_tail_ok=writer_active is not False))
        else:
            problems.extend(seg.check())
        try:  # the aborted-transaction index: damage there turns aborted records into committed ones
            active_entries(segs, seg, local.directory)
        except CorruptRecordError as exc:
            problems.append(str(exc))
        if prev_next is not None and seg.base_offset < prev_next:
            problems.append(f"{seg.log_path}: base offset {seg.base_offset} below previous end {prev_next}")
        if seg.size:
            prev_next = seg.next_offset
    problems.extend(missing_entries(segs, local.directory))
    segs = local.segments
    if segs and segs[-1].base_offset > log_end():
        problems.append("active segment starts after the log end offset")
    problems.extend(_not_cut(local, segs, is_writer() or writer_active is True, log_end))
    return problems


def _not_cut(local: LocalLog[S], segs: Sequence[SegmentLike], writing: bool, log_end: Callable[[], int]) -> list[str]:
    """Logs shorter than what was written into them: a file cut by another hand loses offsets silently
    unless someone compares. While a writer runs (``writing``: this handle, or one another process is known
    to run) or after a clean close, an offset index entry past its log's end is such a cut (after a crash it
    can be a torn write recovery cuts); after a clean close the log must also reach the checkpoint's
    recovery point, below which everything was fsynced."""
    try:
        cp = read_checkpoint(local.checkpoint_path)
    except CorruptRecordError as exc:
        return [str(exc)]
    clean = cp is not None and cp.clean
    problems: list[str] = []
    if writing or clean:
        problems.extend(p for p in (seg.cut_below_index() for seg in segs) if p is not None)
    end = log_end()
    if clean and cp is not None and cp.recovery_point > end:
        problems.append(f"{local.checkpoint_path}: recovery point {cp.recovery_point} is past the log's end "
                        f"{end} after a clean close: records [{end}, {cp.recovery_point}) were flushed and are "
                        f"gone (a log file cut or removed by hand?)")
    return problems
