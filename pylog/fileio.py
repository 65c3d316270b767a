"""Small crash-safe file primitives shared by every on-disk structure.

Invariant: a file replaced with :func:`atomic_write` is, after a crash at any moment, either wholly the
old content or wholly the new one (write temp, fsync, rename, fsync the directory).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from typing import Any

import msgpack

from .errors import CorruptRecordError
from .filenames import TMP_SUFFIX
from .records import crc32c

__all__ = ["fsync_dir", "atomic_write", "write_all", "checked", "unchecked", "write_checked", "read_checked",
           "encode_doc", "decode_doc", "try_flock"]


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


def checked(body: bytes) -> bytes:
    """``body`` followed by its CRC-32C (little-endian uint32): the framing of every small metadata file
    (checkpoints, manifests, snapshots, group state)."""
    return body + struct.pack("<I", crc32c(body))


def unchecked(raw: bytes, path: str, what: str) -> bytes:
    """The body of ``raw`` framed by :func:`checked`. :raises CorruptRecordError: on a checksum mismatch."""
    if len(raw) < 4 or struct.unpack_from("<I", raw, len(raw) - 4)[0] != crc32c(raw[:-4]):
        raise CorruptRecordError(f"{what} checksum mismatch", path, 0)
    return raw[:-4]


def write_checked(path: str, body: bytes, durable: bool = True) -> None:
    """:func:`atomic_write` ``body`` framed by :func:`checked`."""
    atomic_write(path, checked(body), durable=durable)


def read_checked(path: str, limit: int, what: str) -> bytes | None:
    """The body of a file written by :func:`write_checked` (at most ``limit`` bytes read), or None when
    there is no file. :raises CorruptRecordError: when its checksum does not match."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit)
    except FileNotFoundError:
        return None
    return unchecked(raw, path, what)


def encode_doc(magic: bytes, version: int, doc: Any) -> bytes:
    """A small metadata document (group state, member and cleaner status files): 4-byte ``magic``, one
    version byte, msgpack. Framed by :func:`checked` on disk."""
    return magic + bytes([version]) + msgpack.packb(doc, use_bin_type=True)


def decode_doc(magic: bytes, version: int, body: bytes, path: str, what: str) -> Any:
    """The document of :func:`encode_doc`. :raises CorruptRecordError: on a bad magic, version or msgpack,
    or a map key that is not a str/bytes. The caller checks the document's shape (types, ranges)."""
    if len(body) < 5 or body[:4] != magic:
        raise CorruptRecordError(f"{what}: bad magic", path, 0)
    if body[4] != version:
        raise CorruptRecordError(f"{what}: format version {body[4]} is not supported", path, 4)
    try:
        # strict_map_key: every document's map keys are strings; a key that is itself a map or an array
        # would otherwise raise TypeError (unhashable) out of here.
        return msgpack.unpackb(body[5:], raw=False, strict_map_key=True)
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"{what}: {exc}"[:300], path, 5) from None


def try_flock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` without waiting; False when another open file holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
