"""The partition checkpoint: recovery point, log start offset and the clean-shutdown flag, in one file.

Layout (little-endian, 40 bytes)::

    0  4  magic "PLCK"     4  2 version (1)     6  2 flags (bit 0: clean shutdown)
    8  8  recovery_point   offset below which every batch is fsynced and its segment sealed
   16  8  log_start_offset first offset a reader may see
   24  8  swap_generation  incremented before compaction renames a new file over a segment's name
   32  4  reserved         36 4 CRC-32C of bytes [0, 36)

Invariant: the file is only ever replaced with :func:`pylog.storage.fileio.atomic_write`, so it is always either
the old or the new checkpoint; a damaged one raises :class:`~pylog.errors.CorruptRecordError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CorruptRecordError
from .fileio import read_checked, write_checked

__all__ = ["Checkpoint", "read_checkpoint", "write_checkpoint"]

_LAYOUT = struct.Struct("<4sHHqqq4x")
_MAGIC = b"PLCK"
_VERSION = 1
_CLEAN = 1


@dataclass(frozen=True)
class Checkpoint:
    recovery_point: int = 0
    log_start_offset: int = 0
    clean: bool = False
    #: Bumped (and written) before any segment file is replaced by name, so a reader that made a segment
    #: object under an older generation knows the file it is about to open may not be the one it sized.
    swap_generation: int = 0


def read_checkpoint(path: str) -> Checkpoint | None:
    """The checkpoint at ``path``, or None when there is none yet."""
    raw = read_checked(path, 64, "checkpoint")
    if raw is None:
        return None
    if len(raw) != _LAYOUT.size:
        raise CorruptRecordError(f"checkpoint has {len(raw) + 4} bytes", path, 0)
    magic, version, flags, recovery_point, log_start, generation = _LAYOUT.unpack_from(raw)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptRecordError(f"bad checkpoint magic/version {magic!r}/{version}", path, 0)
    if recovery_point < 0 or log_start < 0 or generation < 0:
        raise CorruptRecordError("negative offsets in checkpoint", path, 8)
    return Checkpoint(recovery_point, log_start, bool(flags & _CLEAN), generation)


def write_checkpoint(path: str, cp: Checkpoint, durable: bool = True) -> None:
    raw = _LAYOUT.pack(_MAGIC, _VERSION, _CLEAN if cp.clean else 0, cp.recovery_point, cp.log_start_offset,
                       cp.swap_generation)
    write_checked(path, raw, durable=durable)


