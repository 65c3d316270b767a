"""Disk blocks for an active segment's log reserved ahead of its writer (``fallocate(2)`` with
``FALLOC_FL_KEEP_SIZE``), so that the fdatasync after an append does not also allocate them.

Why: an append to a file whose blocks are not yet allocated leaves the allocation to writeback (delayed
allocation), and the fdatasync that makes the append durable then also writes the file system's allocation
metadata (block bitmap, group descriptor, extent) and waits for that write. With the blocks reserved ahead,
the fdatasync writes the data, the inode (its size changed) and flushes the cache. Measured on the project's VM
(ext4, 16,500 bytes appended to each of 100 or 500 files per round, ``benchmarks/bench_fsync.py --prealloc``):
12-23% less CPU and 0.5-0.7 fewer waits for the disk per fdatasync one file after another, 4-34% less CPU and
21-60% less wall time from 16 threads (the group commit's pattern). The fdatasync is the largest single item of
an ``acks=all`` Produce request at 500 partitions (docs/PERFORMANCE.md, "Where acks=all at 500 partitions
stands").

Invariants:
1. Nothing a reader sees changes: ``FALLOC_FL_KEEP_SIZE`` leaves the file's size, and the bytes up to it, as
   they are (the blocks past the end read as nothing: they are beyond the size). Readers read up to the size.
2. Only for a segment that is made durable while it is active (:class:`~pylog.segment.Segment` reserves once
   its log was fdatasynced: ``acks=all``, a flush policy, ``flush()`` calls; a writer that never syncs before
   the roll gains nothing from it). At most :data:`AHEAD_MAX` bytes, and at most what the segment already holds
   or :data:`AHEAD_MIN`, are reserved past what is written (:func:`reserve_ahead`). A sealed
   segment gives its reserved blocks back (:func:`give_back`: a truncation to its own size); so does
   recovery's truncation. A crash or a writer that stops without sealing leaves at most that much reserved
   in an active segment, which its next writer appends into and gives back when it seals the segment, whether
   or not it reserves itself (:meth:`Reservation.off`: a segment opened again may hold a predecessor's).
3. A best effort, never an error: where the call is missing or refused (not Linux, a file system without it,
   a full disk) nothing is reserved, and the append itself reports what it must (a full disk:
   :class:`~pylog.errors.DiskFullError` from the write, as before).
"""

from __future__ import annotations

import ctypes
import errno
import os

from . import libc

__all__ = ["AVAILABLE", "AHEAD_MAX", "AHEAD_MIN", "NEVER", "Reservation", "reserve_ahead", "give_back"]

#: ``fallocate(2)``'s flag: allocate without changing the file's size.
_FALLOC_FL_KEEP_SIZE = 1
#: The most reserved past what a segment's writer has written: one call per MiB appended once a segment
#: holds that much (the reservation grows with the segment, invariant 2).
AHEAD_MAX = 1 << 20
#: The least reserved past an append that needs a reservation: a partition made durable after each request
#: of ~100 records (~16 KB, librdkafka at 500 partitions) would otherwise reserve anew at nearly every one
#: while its segment is small, and each new reservation is allocation metadata for the next fdatasync again.
AHEAD_MIN = 64 << 10
#: A reservation position that no append reaches: reserving failed for this file, do not try again.
NEVER = 1 << 62


_FALLOCATE = libc.function("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])
_TRY_AGAIN = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EINTR))
#: True where blocks can be reserved without changing a file's size (Linux with a C library that has it).
AVAILABLE = _FALLOCATE is not None


def reserve_ahead(fd: int, reserved: int, pos: int, size: int) -> int:
    """Before writing ``size`` bytes at ``pos`` (the file's end) through ``fd``: when they reach past ``reserved``
    (where this writer's reservation ends), reserve from ``pos`` for them and as much again as the file holds
    once they are written, at least :data:`AHEAD_MIN` and at most :data:`AHEAD_MAX` more (invariant 2). Returns
    where the reservation now ends: :data:`NEVER` when reserving is not possible for this file (invariant 3),
    ``reserved`` when nothing was due."""
    end = pos + size
    if end <= reserved:
        return reserved
    if _FALLOCATE is None:
        return NEVER
    length = size + max(AHEAD_MIN, min(AHEAD_MAX, end))
    if _FALLOCATE(fd, _FALLOC_FL_KEEP_SIZE, pos, length) != 0:
        # A full or failing disk: the write says so, and the next append tries again. Anything else (a file
        # system without it, EOPNOTSUPP; not a file, ESPIPE / ENODEV): never for this file.
        return pos if ctypes.get_errno() in _TRY_AGAIN else NEVER
    return pos + length


def give_back(fd: int, reserved: int, size: int) -> None:
    """A segment sealed at ``size``: free its blocks reserved past that (a truncation to its own size changes
    no byte and no size). A failure only leaves them reserved (invariant 3)."""
    if size < reserved < NEVER:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass


class Reservation:
    """An active segment's blocks reserved ahead of its writer: off until the segment is made durable while
    active (:meth:`arm`), then :func:`reserve_ahead` before each write, :func:`give_back` at the seal. Held by
    the segment and used under its writer's lock only. A write that fails cuts the file back, freeing what was
    reserved past it: the end kept here is then ahead of the blocks, which costs the next appends up to it
    their reservation only (invariant 3)."""

    __slots__ = ("end", "inherited")

    def __init__(self) -> None:
        #: Where the reservation ends; None while off.
        self.end: int | None = None
        #: The writer opened an existing segment (after a crash, or handed over): blocks its previous writer
        #: reserved may lie past the end, unknown to this object, and the seal gives them back too.
        self.inherited = False

    def arm(self) -> None:
        """The segment was fsynced while active: reserve from its next append on."""
        if self.end is None:
            self.end = 0

    def off(self) -> None:
        """A new write descriptor (a writer opening the segment again): off until fsynced again, and what a
        previous writer reserved is given back at the seal (invariant 2)."""
        self.end = None
        self.inherited = True

    def before_write(self, fd: int, pos: int, size: int) -> None:
        if self.end is not None:
            self.end = reserve_ahead(fd, self.end, pos, size)

    def give_back(self, fd: int, size: int) -> None:
        """The segment is sealed at ``size``: free what is reserved past it, and stop. A segment opened again
        may hold a previous writer's reservation whatever this one did: its seal always cuts (one call)."""
        end = self.end
        if self.inherited and end != NEVER:
            end = NEVER - 1  # past any size: give_back cuts
        if end is not None:
            give_back(fd, end, size)
        self.end, self.inherited = None, False
