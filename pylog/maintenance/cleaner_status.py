"""The background cleaner's status: what ``store.cleaner_status()`` returns and status files publish.

Shared by the cleaner thread (:mod:`pylog.maintenance.cleaner`, which fills it in) and the status files
(:mod:`pylog.maintenance.cleaner_registry`, which writes and reads it for other processes), so that neither
of the two imports the other's module for it.

Invariants: a :class:`CleanerStatus` is a plain snapshot (a copy, never the thread's live object); its
fields are what the status file format stores (docs/FORMAT.md), so adding one is a format change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CleanerStatus", "error_summary"]


def error_summary(text: str | None) -> str:
    """The exception line of a recorded traceback (its last line), e.g. ``OSError: [Errno 28] ...``."""
    lines = (text or "").strip().splitlines()
    return lines[-1].strip() if lines else "no error recorded"


@dataclass
class CleanerStatus:
    """A snapshot of the background cleaner's health and totals since the store opened."""

    enabled: bool = True
    alive: bool = False
    started_at: float | None = None  # time.time()
    last_run_start: float | None = None
    last_run_end: float | None = None
    runs: int = 0
    last_error: str | None = None  # message and traceback
    last_error_at: float | None = None
    #: "topic-partition" -> the error that made the cleaner give up on it.
    uncleanable: dict[str, str] = field(default_factory=dict)
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    #: Records of aborted transactions and transaction markers that compaction removed (docs/RETENTION.md).
    aborted_removed: int = 0
    markers_removed: int = 0
    cleanings: int = 0
    segments_deleted: int = 0
    bytes_deleted: int = 0
    #: "topic-partition" -> dirty ratio at the last look, for compacted partitions this store writes.
    dirty_ratios: dict[str, float] = field(default_factory=dict)
    #: Tiered storage: the store was opened with ``remote.storage.location`` (an upload thread runs).
    remote_enabled: bool = False
    remote_segments_shipped: int = 0
    remote_bytes_shipped: int = 0
    #: Partition upload passes that failed (each retried after a back-off).
    remote_failures: int = 0
    remote_last_error: str | None = None
    remote_last_error_at: float | None = None
    #: "topic-partition" -> closed segments not shipped yet after its last pass (what a lost disk costs,
    #: beside the active segment).
    remote_lag: dict[str, float] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return (not self.enabled or self.alive) and not self.uncleanable
