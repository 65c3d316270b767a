"""Small crash-safe file primitives shared by every on-disk structure.

Invariant: a file replaced with :func:`atomic_write` is, after a crash at any moment, either wholly the
old content or wholly the new one (write temp, fsync, rename, fsync the directory).

File-system refusals of a write become PylogErrors in one way everywhere: :func:`fault` maps ``ENOSPC`` /
``EDQUOT`` to :class:`~pylog.errors.DiskFullError`, ``EROFS`` to :class:`~pylog.errors.ReadOnlyStoreError`
and ``EACCES`` / ``EPERM`` to :class:`~pylog.errors.StorePermissionError`, and a device's I/O error
(``EIO``) and a file over the file system's or the process's size limit (``EFBIG``) to
:class:`~pylog.errors.StorageError`, running out of file descriptors (``EMFILE`` / ``ENFILE``) to its subclass
:class:`~pylog.errors.TooManyOpenFilesError` (also when a read opens a file: :func:`descriptor_faults`),
with a message that says what was being done, what state that left and what to do. Each kind of write
converts once, where that state is known: :func:`atomic_write` for every small file it replaces, the
partition for appends, rolls, flushes and becoming the writer, the store for creating and deleting topics
(through :func:`write_faults`).
``ENOENT`` and other ``OSError`` s are left as they are: callers tell a file that vanished (a segment
deleted by retention, a topic deleted by another process) by its type.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from contextlib import contextmanager
from typing import Any, Iterator, NoReturn, Sequence, TypeAlias, cast

import msgpack
import numpy as np

from ..errors import (DESCRIPTOR_ERRNOS, CorruptRecordError, DiskFullError, PylogError, ReadOnlyStoreError,
                     StorePermissionError, StorageError, TooManyOpenFilesError)
from .filenames import TMP_SUFFIX
from .records import crc32c

__all__ = ["fsync_dir", "fsync_files", "truncate_durably", "atomic_write", "write_all", "checked", "unchecked",
           "write_checked", "read_checked", "encode_doc", "decode_doc", "try_flock", "fault", "raise_fault",
           "write_faults", "descriptor_faults", "check_descriptors", "DESCRIPTOR_ERRNOS", "raise_if_gone", "Data",
           "nbytes"]

#: A bytes-like buffer, as ``os.writev`` and ``memoryview`` take it (a numpy array as a buffer of its bytes): a
#: part of an encoded batch, a column's data, one record's key or value.
Data: TypeAlias = bytes | bytearray | memoryview | np.ndarray


def nbytes(part: Data) -> int:
    """The byte count of a :data:`Data` buffer."""
    return len(part) if isinstance(part, (bytes, bytearray)) else part.nbytes


#: The most buffers one ``writev`` takes (Linux: 1024; POSIX guarantees at least 16).
IOV_MAX: int = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16
_READ_ONLY_HINT = "to read the store open it with pylog.open(path, read_only=True); to write, "
_WRITE_ACCESS_HINT = "give this user write access to the store directory and everything in it"
#: errno -> (error class, what happened, what to do before trying again).
_FAULTS: dict[int, tuple[type[OSError], str, str]] = {
    errno.ENOSPC: (DiskFullError, "the file system is full",
                   "free space on that file system (`pylog retention`, `pylog delete-records`, or other files)"),
    errno.EDQUOT: (DiskFullError, "the disk quota is used up",
                   "free space within the quota or raise it"),
    errno.EROFS: (ReadOnlyStoreError, "the file system is mounted read-only",
                  _READ_ONLY_HINT + "remount it read-write"),
    errno.EACCES: (StorePermissionError, "permission denied",
                   _READ_ONLY_HINT + _WRITE_ACCESS_HINT),
    errno.EPERM: (StorePermissionError, "operation not permitted",
                  _READ_ONLY_HINT + _WRITE_ACCESS_HINT + " (and no immutable flags)"),
    errno.EIO: (StorageError, "the device reported an I/O error",
                "check the device and the file system (the kernel log, `dmesg`, says more); data written since "
                "the last successful flush may be lost: reopen the store, which re-validates it,"),
    errno.EFBIG: (StorageError, "the file is larger than the file system or the process (ulimit -f) allows",
                  "lower the topic's segment.bytes or raise the limit"),
    errno.EMFILE: (TooManyOpenFilesError, "this process has too many open files",
                   "raise the limit (ulimit -n), lower the store's max.open.descriptors, or close stores and "
                   "consumers this process no longer needs"),
    errno.ENFILE: (TooManyOpenFilesError, "the system has too many open files",
                   "raise the system's limit (fs.file-max) or close files elsewhere"),
}


def fault(exc: BaseException, doing: str, state: str, then: str = "retry") -> BaseException:
    """The PylogError that ``exc`` means when it is a file system's refusal of a write (see the module
    docstring), with ``exc`` as its ``__cause__``; else ``exc`` itself (also any other PylogError). Made
    to be raised, through :func:`raise_fault`. One converted by an inner write
    (:func:`atomic_write` of a file the caller creates) is converted again from its cause: the outer
    caller knows better what the failure left.

    ``doing`` says what was being done ("appending to t-0"), ``state`` what that left ("nothing was
    appended"), ``then`` what to do once the cause is fixed ("retry", "reopen the store").
    """
    if isinstance(exc, StorageError) and isinstance(exc.__cause__, OSError) \
            and not isinstance(exc.__cause__, PylogError):
        exc = exc.__cause__
    if isinstance(exc, PylogError) or not isinstance(exc, OSError) or exc.errno not in _FAULTS:
        return exc
    cls, what, todo = _FAULTS[exc.errno]
    where = f" ({exc.filename})" if exc.filename else ""
    err = cls(f"{doing}: {what} [Errno {exc.errno}]{where}; {state}. To go on: {todo}, then {then}.")
    err.errno, err.strerror, err.filename = exc.errno, exc.strerror, exc.filename
    err.__cause__ = exc  # kept by a plain ``raise err``
    return err


def raise_fault(exc: BaseException, doing: str, state: str, then: str = "retry") -> NoReturn:
    """Raise what :func:`fault` makes of ``exc``: the PylogError with the file system's refusal as its
    ``__cause__``, or ``exc`` itself, unchanged, when it is no such refusal (its own cause kept). For
    ``except OSError as exc: raise_fault(exc, ...)``."""
    err = fault(exc, doing, state, then)
    if err is exc:
        raise exc
    raise err from err.__cause__


def raise_if_gone(exc: OSError, doing: str, directory: str, state: str) -> None:
    """Raise a :class:`StorageError` (with ``exc``'s errno, as its cause) when ``exc`` is a missing file
    because ``directory`` itself was deleted or moved under the open store (by hand, another process):
    ``doing`` says what was being done, ``state`` what that left. Returns when the directory is there."""
    if not isinstance(exc, FileNotFoundError) or os.path.isdir(directory):
        return
    err = StorageError(f"{doing}: its directory {directory} is gone (deleted or moved while the store was open); "
                       f"{state}")
    err.errno, err.strerror, err.filename = exc.errno, exc.strerror, exc.filename
    raise err from exc


@contextmanager
def write_faults(doing: str, state: str, then: str = "retry") -> Iterator[None]:
    """Raise a file system's refusal of a write inside the block as its PylogError (see :func:`fault`)."""
    try:
        yield
    except OSError as exc:
        raise_fault(exc, doing, state, then)


@contextmanager
def descriptor_faults(doing: str, state: str = "nothing was changed") -> Iterator[None]:
    """Raise running out of file descriptors inside the block (a read or a lookup opening a file) as
    :class:`~pylog.errors.TooManyOpenFilesError`; every other ``OSError`` passes unchanged (a read tells a
    segment that vanished by its type)."""
    try:
        yield
    except OSError as exc:
        check_descriptors(exc, doing, state)
        raise


def check_descriptors(exc: OSError, doing: str, state: str = "nothing was changed") -> None:
    """Raise ``exc`` as :class:`~pylog.errors.TooManyOpenFilesError` when it is running out of file
    descriptors; else return (the caller re-raises it). :func:`descriptor_faults` without a context
    manager, for hot paths (a read)."""
    if exc.errno in DESCRIPTOR_ERRNOS and not isinstance(exc, PylogError):
        raise_fault(exc, doing, state)


def truncate_durably(path: str, size: int) -> None:
    """Cut the file at ``path`` to ``size`` bytes and fsync it, so the cut survives a power loss."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    """fsync a directory so that renames and creations in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(paths: tuple[str, ...]) -> bool:
    """fsync each file by name, from any thread (Linux syncs a file's dirty pages through any descriptor,
    read-only too); False, stopping there, when one of them is gone."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return True


def write_all(fd: int, parts: Sequence[Data], chunk: int = 0) -> int:
    """``writev`` every byte of ``parts`` (retrying short writes; more parts than one ``writev`` takes are
    written by several); returns the byte count. ``chunk``: a ``writev`` per about that many bytes, of whole
    parts (each ends with the part that reaches ``chunk``)."""
    if chunk:
        done = start = size = 0
        for i, part in enumerate(parts):
            size += nbytes(part)
            if size >= chunk or i == len(parts) - 1:
                done += write_all(fd, parts[start:i + 1])
                start, size = i + 1, 0
        return done
    if len(parts) > IOV_MAX:
        return sum(write_all(fd, parts[i:i + IOV_MAX]) for i in range(0, len(parts), IOV_MAX))
    total = sum(map(nbytes, parts))
    # numpy arrays are buffers, but numpy's stubs say so only from Python 3.12 on (__buffer__).
    buffers = cast("Sequence[bytes]", parts)
    done = os.writev(fd, buffers)
    if done == total:
        return total
    joined = memoryview(b"".join(buffers))
    while done < total:
        done += os.write(fd, joined[done:])
    return total


def atomic_write(path: str, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; with ``durable`` also survive power loss.

    :raises DiskFullError, ReadOnlyStoreError: when the file system refuses (``path`` is then unchanged).
    :raises StorageError: when the directory's fsync fails after the rename (``path`` then has the new
        content, which a power loss may still undo).
    """
    # A name of its own: two processes may replace the same file at once (e.g. creating one store).
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}{TMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, [data])
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)  # on a full disk, the space it took is what the retry needs
        except OSError:
            pass
        raise_fault(exc, f"replacing {path}", "it keeps its previous content")
    if durable:
        try:
            fsync_dir(os.path.dirname(path) or ".")
        except OSError as exc:
            raise_fault(exc, f"replacing {path}",
                        "it has its new content, which may not survive a power loss")


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


def in_range(value: Any, hi: int, lo: int = 0) -> bool:
    """``value`` is an int, not a bool (msgpack decodes ``true`` as one, which ``isinstance(.., int)``
    accepts), in ``[lo, hi]``: a field check of a document read from disk (see :func:`decode_doc`)."""
    return type(value) is int and lo <= value <= hi


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
