"""The log cleaner's per-partition state (``cleaner.checkpoint``): when each cleaned range was first reached,
and when cleanings last removed transactions' records.

Two lists, both bounded, both only ever making the cleaner keep things longer when they are merged or lost:

- ``horizons``: ``(end_offset, time_ms)`` with increasing end offsets: offsets below ``end_offset`` (and at
  or above the previous entry's) were first reached by a cleaning at ``time_ms``. The first dirty offset is
  the last entry's end. Tombstones and transaction markers live ``delete.retention.ms`` from there.
- ``txn_horizons``: ``(first_marker, last_marker, time_ms)``: a cleaning at ``time_ms`` met records of
  transactions whose markers are at offsets in ``[first_marker, last_marker]`` (it removed some of them, or
  could have). A marker inside such a range is kept until ``delete.retention.ms`` after that cleaning
  (Kafka keeps a marker ``delete.retention.ms`` after its transaction's records are gone). Ranges older than
  ``delete.retention.ms`` are dropped when a cleaning records its own; beyond :data:`MAX_HORIZONS` the two
  oldest merge (their union, the later time).

A missing or damaged file reads as empty: the next cleaning starts over, tombstones live longer, and
markers too (an empty ``txn_horizons`` cannot release a marker early: a marker also waits for its own
offset's first-reached time, which restarts with the horizons). Format: docs/FORMAT.md, "Cleaner
checkpoint"; version 1 when ``txn_horizons`` is empty (the layout from before transactions), else 2.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ..errors import CorruptRecordError
from ..storage.fileio import read_checked, write_checked
from ..storage.filenames import CLEANER_CHECKPOINT_FILE

__all__ = ["CleanerCheckpoint", "read_cleaner_checkpoint", "write_cleaner_checkpoint", "MAX_HORIZONS"]

log = logging.getLogger("pylog.compaction")

#: Entries kept in each list of the checkpoint; older ones merge (keeping the later time).
MAX_HORIZONS = 64
_HEAD = struct.Struct("<4sHHq")  # magic, version, horizon count, reserved (v1) / txn horizon count (v2)
_MAGIC = b"PLCC"
_HORIZON = struct.Struct("<qq")
_TXN_HORIZON = struct.Struct("<qqq")
_MAX_SIZE = _HEAD.size + (_HORIZON.size + _TXN_HORIZON.size) * MAX_HORIZONS + 4


@dataclass
class CleanerCheckpoint:
    """Per-partition cleaner state (see the module docstring)."""

    horizons: list[tuple[int, int]] = field(default_factory=list)
    txn_horizons: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def first_dirty(self) -> int:
        return self.horizons[-1][0] if self.horizons else 0

    def first_reached(self, offsets: np.ndarray, now: int) -> np.ndarray:
        """When the cleaning that first reached each offset ran (``now`` for offsets not reached yet)."""
        if not self.horizons:
            return np.full(len(offsets), now, np.int64)
        ends = np.array([e for e, _ in self.horizons], np.int64)
        times = np.array([t for _, t in self.horizons] + [now], np.int64)
        return times[np.searchsorted(ends, offsets, side="right")]

    def reached(self, end: int, when: int, log_start: int) -> None:
        """Record a cleaning at ``when`` that covered everything below ``end``."""
        hz = [(e, t) for e, t in self.horizons if e > log_start]
        if not hz or end > hz[-1][0]:
            hz.append((end, when))
        while len(hz) > MAX_HORIZONS:
            # Merge the two oldest ranges under the later time: tombstones there live longer, never shorter.
            hz[0:2] = [(hz[1][0], hz[1][1])]
        self.horizons = hz

    def marker_held(self, marker: int, now: int, retention_ms: int) -> bool:
        """Whether a cleaning less than ``retention_ms`` ago met records of the transaction a marker at
        offset ``marker`` ends (or may end: ranges are unions)."""
        return any(a <= marker <= b and now - t <= retention_ms for a, b, t in self.txn_horizons)

    def met_transactions(self, first_marker: int, last_marker: int, when: int, retention_ms: int) -> None:
        """Record a cleaning at ``when`` that met records of transactions whose markers are in
        ``[first_marker, last_marker]``; forget ranges older than ``retention_ms``."""
        self.expire_transactions(when, retention_ms)
        th = self.txn_horizons + [(first_marker, last_marker, when)]
        while len(th) > MAX_HORIZONS:
            (a0, b0, t0), (a1, b1, t1) = th[0], th[1]
            th[0:2] = [(min(a0, a1), max(b0, b1), max(t0, t1))]
        self.txn_horizons = th

    def expire_transactions(self, now: int, retention_ms: int) -> None:
        """Forget the transaction ranges of cleanings more than ``retention_ms`` before ``now``: they hold
        no marker any more."""
        self.txn_horizons = [h for h in self.txn_horizons if now - h[2] <= retention_ms]

    def encode(self) -> bytes:
        """The file's body (:func:`~pylog.storage.fileio.write_checked` adds the CRC)."""
        version, extra = (2, len(self.txn_horizons)) if self.txn_horizons else (1, 0)
        return _HEAD.pack(_MAGIC, version, len(self.horizons), extra) + b"".join(
            _HORIZON.pack(e, t) for e, t in self.horizons) + b"".join(_TXN_HORIZON.pack(*h) for h in self.txn_horizons)


def read_cleaner_checkpoint(directory: str) -> CleanerCheckpoint:
    """The partition's cleaner checkpoint; a missing or damaged one reads as empty (see the module
    docstring: it only makes the cleaner keep things longer, never lose data)."""
    path = os.path.join(directory, CLEANER_CHECKPOINT_FILE)
    try:
        raw = read_checked(path, _MAX_SIZE + 1, "cleaner checkpoint")
        if raw is None:
            return CleanerCheckpoint()
        return _decode(raw)
    except (ValueError, struct.error, CorruptRecordError) as exc:
        log.warning("%s: ignoring damaged cleaner checkpoint (%s); the next cleaning starts over", path, exc)
        return CleanerCheckpoint()


def _decode(raw: bytes) -> CleanerCheckpoint:
    if len(raw) < _HEAD.size:
        raise ValueError("truncated")
    magic, version, count, extra = _HEAD.unpack_from(raw)
    if magic != _MAGIC or version not in (1, 2) or count > MAX_HORIZONS:
        raise ValueError("bad magic/version/count")
    n_txn = extra if version == 2 else 0
    if not 0 <= n_txn <= MAX_HORIZONS or (version == 2 and n_txn == 0):
        raise ValueError("bad transaction horizon count")
    if len(raw) != _HEAD.size + _HORIZON.size * count + _TXN_HORIZON.size * n_txn:
        raise ValueError("bad length")
    hz = [_HORIZON.unpack_from(raw, _HEAD.size + _HORIZON.size * i) for i in range(count)]
    if any(hz[i][0] >= hz[i + 1][0] for i in range(len(hz) - 1)) or any(e < 0 for e, _ in hz):
        raise ValueError("horizons out of order")
    at = _HEAD.size + _HORIZON.size * count
    th = [_TXN_HORIZON.unpack_from(raw, at + _TXN_HORIZON.size * i) for i in range(n_txn)]
    if any(a < 0 or b < a for a, b, _ in th):
        raise ValueError("transaction horizon with a bad range")
    return CleanerCheckpoint([(int(e), int(t)) for e, t in hz], [(int(a), int(b), int(t)) for a, b, t in th])


def write_cleaner_checkpoint(directory: str, cp: CleanerCheckpoint) -> None:
    write_checked(os.path.join(directory, CLEANER_CHECKPOINT_FILE), cp.encode())
