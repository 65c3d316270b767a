"""Store-wide counters shared by every process: the producer id counter (``producer.ids``) and the transaction
coordinator epoch (``__transactions/coordinator.epoch``).

A counter file holds the next value, an int64 framed by :func:`~pylog.storage.fileio.checked` (12 bytes:
the value little-endian, then its CRC-32C; docs/FORMAT.md, "Producer ids"). :func:`take_next` returns it and
stores the value after it, fsynced, under an exclusive ``flock`` of the file.

Invariants:
- No value is returned twice, across threads and processes: the read, the write and the fsync happen under
  the ``flock``, and the new value is durable before the old one is handed out.
- A damaged file is never taken for a smaller value: :class:`~pylog.errors.CorruptRecordError`.
"""

from __future__ import annotations

import fcntl
import os
import struct

from ..errors import CorruptRecordError
from .fileio import checked, unchecked

__all__ = ["take_next"]

_INT64_MAX = (1 << 63) - 1


def take_next(path: str, what: str) -> int:
    """The counter's next value (0 for a new file), leaving the one after it in the file.

    :raises CorruptRecordError: when the file is damaged or holds a value out of range.
    :raises OSError: when the file cannot be created, locked or written (callers wrap it, see
        :func:`pylog.storage.fileio.write_faults`).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 16, 0)
        if not raw:
            nxt = 0
        else:
            body = unchecked(raw, path, what)
            if len(body) != 8:
                raise CorruptRecordError(f"{what} is damaged", path, 0)
            nxt = struct.unpack("<q", body)[0]
            if not 0 <= nxt < _INT64_MAX:  # nxt + 1 must pack as an int64 below
                raise CorruptRecordError(f"{what} holds {nxt}", path, 0)
        os.pwrite(fd, checked(struct.pack("<q", nxt + 1)), 0)
        os.fsync(fd)
        return nxt
    finally:
        os.close(fd)  # releases the flock
