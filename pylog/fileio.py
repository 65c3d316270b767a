"""Small crash-safe file primitives shared by every on-disk structure.

Invariant: a file replaced with :func:`atomic_write` is, after a crash at any moment, either wholly the
old content or wholly the new one (write temp, fsync, rename, fsync the directory).
"""

from __future__ import annotations

import os
import threading

from .filenames import TMP_SUFFIX

__all__ = ["fsync_dir", "atomic_write", "write_all"]


def fsync_dir(directory: str) -> None:
    """fsync a directory so that renames and creations in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, parts: list) -> int:
    """``writev`` every byte of ``parts`` (retrying short writes); returns the byte count."""
    total = sum(memoryview(p).nbytes for p in parts)
    done = os.writev(fd, parts)
    if done == total:
        return total
    joined = memoryview(b"".join(parts))
    while done < total:
        done += os.write(fd, joined[done:])
    return total


def atomic_write(path: str, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; with ``durable`` also survive power loss."""
    # A name of its own: two processes may replace the same file at once (e.g. creating one store).
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [data])
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")
