"""Making a whole file system durable at once (``syncfs(2)``), and learning afterwards, file by file, whether
the writeback of a file's pages failed (``sync_file_range(2)``): the store-wide half of the group commit
(:mod:`pylog.storage.group_commit`).

Why: fdatasync costs each file its own journal commit wait and about 40-50 us of kernel CPU even when ext4
joins concurrent calls into one commit; ``syncfs`` writes back every dirty page of the file system, makes one
journal commit and one cache flush, for all of them. Measured here (``benchmarks/bench_fsync.py``, 2 KiB
appended to each of 500 files): 500 fdatasyncs from 16 threads 21 ms wall and 21 ms CPU, one ``syncfs`` then
a check of each file 2.6 ms wall and 0.6 ms CPU.

Invariants:
1. :func:`syncfs` returns only once every page of the file system dirtied before the call is on stable
   storage with the metadata that finds it (``sync_filesystem``: writeback of every dirty inode, waited for,
   then ``->sync_fs(wait=1)``: ext4 and xfs force a journal commit and a cache flush). It raises ``OSError``
   when that failed, or when a writeback error of any file of the file system was recorded since the descriptor
   it was given was opened (or last reported one): the caller cannot tell whose, so it treats it as its own.
2. :func:`check_written` reports (once per open file description, as fdatasync does) a writeback error of that
   file recorded since the description was opened or last reported one, after waiting for any writeback of
   the file under way. It writes nothing and commits nothing: it is the per-file error half of an fdatasync,
   valid after a :func:`syncfs` that started after the file's pages were written.
3. :data:`AVAILABLE` is True only where both hold: Linux 5.8 or later (before 5.8 ``syncfs`` did not report
   writeback errors at all: a failed write would have been acknowledged as durable) with a C library that has
   both calls. Elsewhere callers fdatasync each file.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from . import libc

__all__ = ["AVAILABLE", "syncfs", "check_written", "kernel_reports_syncfs_errors"]

#: sync_file_range(2)'s flag: wait for the writeback of the range under way, then report the file's errors.
_SYNC_FILE_RANGE_WAIT_AFTER = 4


def kernel_reports_syncfs_errors(release: str) -> bool:
    """Whether a Linux kernel of ``release`` (``uname -r``) has ``syncfs`` report writeback errors (5.8+)."""
    try:
        major, minor = (int(part) for part in release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


def _functions() -> tuple[Any, Any]:
    """``syncfs`` and ``sync_file_range``, or (None, None) unless both are here and the kernel is 5.8+."""
    if not sys.platform.startswith("linux") or not kernel_reports_syncfs_errors(os.uname().release):
        return None, None
    syncfs = libc.function("syncfs", [ctypes.c_int])
    sync_file_range = libc.function("sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])
    if syncfs is None or sync_file_range is None:
        return None, None
    return syncfs, sync_file_range


_SYNCFS, _SYNC_FILE_RANGE = _functions()
AVAILABLE = _SYNCFS is not None


def _raise_errno() -> None:
    err = ctypes.get_errno()
    raise OSError(err, os.strerror(err))


def syncfs(fd: int) -> None:
    """Make every page of the file system of ``fd`` dirtied before this call durable (invariant 1); the GIL is
    released meanwhile. :raises OSError: when that failed or a writeback error was recorded (EIO mostly)."""
    assert _SYNCFS is not None, "syncfs is not available here (fs_sync.AVAILABLE)"
    if _SYNCFS(fd) != 0:
        _raise_errno()


def check_written(fd: int) -> None:
    """Report a writeback error of the file of ``fd`` (invariant 2). :raises OSError: EIO, ENOSPC..."""
    assert _SYNC_FILE_RANGE is not None, "sync_file_range is not available here (fs_sync.AVAILABLE)"
    if _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WAIT_AFTER) != 0:
        _raise_errno()
