"""A segment's log file as its readers hold it: the path, the file it was sized on, a descriptor and a mapping.

Compaction replaces a segment's files by renaming new ones over the names. A :class:`LogFile` pins the file
its segment object was sized on: the inode it saw, and the partition's swap generation under which it was
sized. It opens its read-only descriptor on first use and keeps it until :meth:`LogFile.close`; that open
raises :class:`SegmentReplacedError` when the name no longer holds that file, instead of reading new bytes
with old sizes. It never sees the :class:`~pylog.segment.Segment` that owns it: what it must know
of the segment (its visible size, whether it is immutable) comes as arguments.

Invariants:
- ``fd`` and ``mm`` belong to the file with inode ``ino``: an open that finds another inode, or the swap
  generation moved, closes what it opened and raises.
- A mapping is only ever dropped (left to the last reference) or closed whole: another thread may be
  scanning it; a mapping still exported to a reader is left to go with it.
"""

from __future__ import annotations

import mmap
import os

from ..errors import CorruptRecordError
from .checkpoint import read_checkpoint

__all__ = ["LogFile", "SegmentReplacedError"]


class SegmentReplacedError(FileNotFoundError):
    """The segment's file was deleted or replaced by retention or compaction after this object was made.

    A FileNotFoundError, so callers treat "deleted" and "replaced" alike: take a new snapshot and retry.
    """


class LogFile:
    """One segment's log file, as its readers hold it; see the module docstring for what it guarantees."""

    __slots__ = ("path", "ino", "generation", "fd", "mm")

    def __init__(self, path: str) -> None:
        self.path = path
        self.ino: int | None = None  # the file's inode when opened: compaction replaces files by name
        #: (checkpoint path, swap generation) under which the segment was sized; None: no check needed.
        self.generation: tuple[str, int] | None = None
        self.fd: int | None = None
        self.mm: mmap.mmap | None = None

    def read_fd(self) -> int:
        """The read-only descriptor of the log, opened on first use and kept until :meth:`close`.

        :raises SegmentReplacedError: when the name holds another file than the one this object pinned.
        """
        fd = self.fd
        if fd is None:
            fd = os.open(self.path, os.O_RDONLY)
            ino = os.fstat(fd).st_ino
            # Opened first, generation read second: compaction bumps the generation before it renames,
            # so an unchanged generation now means the file just opened is the one this object sized.
            if self.ino is not None and (ino != self.ino or not self._generation_holds()):
                # Compaction swapped a new file in under this name since this object was made: its size
                # and indexes describe the old one. The partition takes a fresh look and retries.
                os.close(fd)
                raise SegmentReplacedError(self.path)
            self.ino = ino
            self.fd = fd
        return fd

    def _generation_holds(self) -> bool:
        if self.generation is None:
            return True
        try:
            cp = read_checkpoint(self.generation[0])
        except CorruptRecordError:
            return False
        return (cp.swap_generation if cp is not None else 0) == self.generation[1]

    def same_file(self) -> bool:
        """True while the path still names the file this object pinned (False when gone or replaced)."""
        try:
            return os.stat(self.path).st_ino == self.ino
        except FileNotFoundError:
            return False

    def file_size(self) -> int:
        return os.fstat(self.read_fd()).st_size

    def mapping(self, size: int, immutable: bool) -> mmap.mmap | None:
        """A read-only mapping of the first ``size`` bytes (the visible size), for immutable segments and for
        the writer's own active segment.

        Only the writer ever shortens a log (recovery, truncation), and it unmaps first, so a mapping never
        outlives the bytes under it; a file cut by another hand under the writer is caught before the writer
        reads its mapping (:func:`~pylog.storage.segment_read.check_not_cut`). The writer's active segment
        grows: it is remapped when the mapping covers less than 3/4 of ``size``; reads past the mapping
        use ``pread``. None when the file is shorter than ``size`` (read it with ``pread``).
        """
        mm = self.mm
        if size and (mm is None or len(mm) < size and (immutable or len(mm) * 4 < size * 3)):
            # The old mapping is dropped, not closed: another thread may be scanning it right now; it is
            # unmapped when the last reference goes.
            try:
                mm = self.mm = mmap.mmap(self.read_fd(), size, access=mmap.ACCESS_READ)
            except (ValueError, OSError):  # the file is shorter than we believed: read it with pread
                return None
        return mm

    def close(self) -> None:
        """Close the descriptor and the mapping (a mapping a reader still holds a view of goes with it)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        mm, self.mm = self.mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # a reader still holds a view; the mapping goes with it
