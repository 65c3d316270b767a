"""Retention rules: which of a partition's oldest segments may be deleted, and why.

Kafka's rules (``UnifiedLog.deleteOldSegments``), applied to a snapshot of the segment list:

- **time** (``retention.ms`` >= 0): a segment is deletable when ``now - its largest timestamp >
  retention.ms``; the walk starts at the oldest segment and stops at the first that does not qualify.
- **size** (``retention.bytes`` >= 0): walking from the oldest, a segment is deletable while the partition
  would still hold at least ``retention.bytes`` without it.
- **log start** (``delete_records``): a segment whose successor starts at or below ``log_start_offset``
  holds nothing a reader may see.

Invariants:
- What is deletable is always a prefix of the segment list (retention removes whole segments from the
  head only), and the three rules combine as the longest of their prefixes.
- The prefix may include the active (last) segment only when it is non-empty; the partition then rolls
  first so that a new, empty active segment remains. The only, empty segment is never deletable.
- These functions read segment metadata only; they never touch files. A check that deletes nothing
  looks at one segment for the time rule and at the sizes in memory for the size rule, so it stays cheap
  with thousands of segments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

__all__ = ["RetentionResult", "deletable_prefix"]


class _SegmentInfo(Protocol):
    base_offset: int
    size: int

    @property
    def max_timestamp(self) -> int: ...


@dataclass
class RetentionResult:
    """What one retention pass did to one partition."""

    topic: str
    partition: int
    #: Base offsets of the segments deleted, oldest first.
    deleted_segments: list[int] = field(default_factory=list)
    bytes_deleted: int = 0
    #: The rules that made segments deletable: any of "time", "size", "log_start".
    reasons: list[str] = field(default_factory=list)
    log_start_offset: int = 0
    #: True when the active segment was rolled so that it could be deleted too.
    rolled: bool = False


def deletable_prefix(segments: Sequence[_SegmentInfo], log_start_offset: int, now_ms: int, retention_ms: int,
                     retention_bytes: int) -> tuple[int, list[str]]:
    """How many of the oldest ``segments`` may go, and which rules said so.

    A result equal to ``len(segments)`` means every segment, the non-empty active one included: the
    caller must roll before deleting them.
    """
    n = len(segments)
    if n == 0:
        return 0, []

    def allowed(i: int) -> bool:  # never the last segment when it is empty
        return i < n - 1 or segments[i].size > 0

    reasons: list[str] = []
    best = 0
    k = 0
    while k < n - 1 and segments[k + 1].base_offset <= log_start_offset:
        k += 1
    if k:
        best = k
        reasons.append("log_start")
    if retention_ms >= 0:
        k = 0
        while k < n and allowed(k) and now_ms - segments[k].max_timestamp > retention_ms:
            k += 1
        if k:
            best = max(best, k)
            reasons.append("time")
    if retention_bytes >= 0:
        diff = sum(s.size for s in segments) - retention_bytes
        k = 0
        while k < n and allowed(k) and diff - segments[k].size >= 0:
            diff -= segments[k].size
            k += 1
        if k:
            best = max(best, k)
            reasons.append("size")
    return best, reasons
