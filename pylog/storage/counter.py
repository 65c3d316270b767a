"""Store-wide counters shared by every process: the producer id counter (``producer.ids``) and the transaction
coordinator epoch (``__transactions/coordinator.epoch``).

A counter file holds the next value, an int64 framed by :func:`~pylog.storage.fileio.checked` (12 bytes:
the value little-endian, then its CRC-32C; docs/FORMAT.md, "Producer ids"). :func:`take_next` returns it and
stores the value after it, fsynced, under an exclusive ``flock`` of the file; :func:`advance_to` moves it
forward (a restored store's producer ids must not be handed out again).

Invariants:
- No value is returned twice, across threads and processes: the read, the write and the fsync happen under
  the ``flock``, and the new value is durable before the old one is handed out.
- A damaged file is never taken for a smaller value: :class:`~pylog.errors.CorruptRecordError`.
"""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Callable

from ..errors import CorruptRecordError
from .fileio import checked, unchecked

__all__ = ["take_next", "advance_to"]

_INT64_MAX = (1 << 63) - 1


def take_next(path: str, what: str) -> int:
    """The counter's next value (0 for a new file), leaving the one after it in the file.

    :raises CorruptRecordError: when the file is damaged or holds a value out of range.
    :raises OSError: when the file cannot be created, locked or written (callers wrap it, see
        :func:`pylog.storage.fileio.write_faults`).
    """
    return _update(path, what, lambda nxt: nxt + 1)


def advance_to(path: str, what: str, at_least: int) -> None:
    """Make the counter's next value at least ``at_least`` (unchanged when it already is). Raises as
    :func:`take_next`."""
    if not 0 <= at_least < _INT64_MAX:
        raise ValueError(f"{what}: cannot advance to {at_least}")
    _update(path, what, lambda nxt: max(nxt, at_least))


def _update(path: str, what: str, after: Callable[[int], int]) -> int:
    """Under the file's ``flock``: read the next value, store ``after(it)`` fsynced (when it differs), return it."""
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
        new = after(nxt)
        if new != nxt or not raw:
            os.pwrite(fd, checked(struct.pack("<q", new)), 0)
            os.fsync(fd)
        return nxt
    finally:
        os.close(fd)  # releases the flock
