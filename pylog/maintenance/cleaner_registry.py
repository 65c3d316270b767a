"""Cleaner status files: each process's background cleaner publishes its health in the store directory, so
that another process (``pylog health``, a monitoring agent) can tell whether the cleaner of every process
using the store is alive, when it last ran and what it gave up on.

Seed 000's advice is to watch whether Kafka's log-cleaner thread is alive. pylog has no broker to ask: the
cleaner is a thread inside each application process. Its in-process status (``store.cleaner_status()``)
cannot be read from outside, so every store whose cleaner is enabled also keeps, under
``<store>/__cleaners/``:

- ``<pid>-<token>.lock``: an empty file on which the store holds an exclusive ``flock`` for as long as it is
  open. The kernel drops the lock when the process dies, however it dies, so a lock that can be taken
  means a dead process.
- ``<pid>-<token>.status``: the status document (magic ``PLCS``, version 1, msgpack, CRC-32C; see
  docs/FORMAT.md), rewritten in place, so that the directory's files only change when a store opens or
  closes (a copy of a live store does not race temporary files). A reader that meets a write half-way
  sees a bad checksum and reads again.

Invariants:

- A status file is rewritten at least every :data:`HEARTBEAT_S` seconds while its cleaner thread lives,
  including in the middle of a long cleaning; after a maintenance run (at most once a second); after
  every error; and once more when the thread dies (``alive: false`` with the error). Its ``heartbeat`` field
  is the time of that write, so a thread that hangs shows as a heartbeat growing old.
- The lock file is locked before it gets its final name, so no reader can take a live store's lock in the
  moment between creating the file and locking it.
- Publishing never raises into the cleaner thread: a full disk or a removed directory is logged once per
  failure streak, and the cleaner goes on.
- Reading never raises for one bad entry: an unreadable or corrupt status is reported in its entry.
  Entries of dead processes are removed only by a store that publishes (when it opens), never by readers
  such as ``pylog health``, which only report them.
- Status files are not durable (no fsync): they describe processes, which a power loss ends anyway.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from dataclasses import dataclass, fields
from typing import Callable

from .cleaner_status import CleanerStatus
from ..errors import CorruptRecordError
from ..storage.fileio import checked, decode_doc, encode_doc, read_checked, try_flock
from ..storage.filenames import CLEANERS_DIR

__all__ = ["CleanerPublisher", "PublishedCleaner", "published_cleaners", "HEARTBEAT_S"]

log = logging.getLogger("pylog.cleaner")

#: Longest time between two writes of a live cleaner's status file (seconds).
HEARTBEAT_S = 5.0

_MAGIC = b"PLCS"
_VERSION = 1
_LOCK = ".lock"
_STATUS = ".status"
#: A status file is a few KB; anything bigger is not one of ours (and is not read whole).
_MAX_BYTES = 1 << 20
#: Reads of a status file that fails its checksum before it counts as damaged (it is rewritten in place).
_READ_ATTEMPTS = 3
#: Tracebacks and per-partition errors are cut to this many characters in the file.
_MAX_TEXT = 4000
_STATUS_FIELDS = tuple(f.name for f in fields(CleanerStatus))
_INT64 = 1 << 63


def _number(v: object) -> bool:
    """A finite int or float (msgpack gives back whatever was written: NaN, inf, a bool, a str)."""
    return (type(v) is float and math.isfinite(v)) or (type(v) is int and -_INT64 <= v < _INT64)


#: A check per CleanerStatus field type (the annotations are strings here): a status file is data from
#: disk, read by other processes' ``pylog health``, so its content is checked before it is shown.
_TYPE_CHECKS: dict[str, Callable[[object], bool]] = {
    "bool": lambda v: type(v) is bool,
    "int": lambda v: type(v) is int and -_INT64 <= v < _INT64,
    "float | None": lambda v: v is None or _number(v),
    "str | None": lambda v: v is None or type(v) is str,
    "dict[str, str]": lambda v: type(v) is dict and all(type(k) is str and type(x) is str for k, x in v.items()),
    "dict[str, float]": lambda v: type(v) is dict and all(type(k) is str and _number(x) for k, x in v.items()),
}
_FIELD_CHECKS = {f.name: _TYPE_CHECKS[str(f.type)] for f in fields(CleanerStatus)}


@dataclass
class PublishedCleaner:
    """One process's cleaner, as its status file and lock show it to any other process.

    ``process_alive`` is False when the process died without closing its store: then ``status`` is the
    last thing it wrote. ``status`` is None and ``error`` says why when the file could not be read.
    """

    name: str
    pid: int
    process_alive: bool
    heartbeat: float | None = None  # time.time() of the last write
    status: CleanerStatus | None = None
    #: "topic-partition" of the partitions that process writes (and so maintains), at the last write.
    partitions: tuple[str, ...] = ()
    error: str | None = None

    def heartbeat_age(self, now: float | None = None) -> float | None:
        """Seconds since the last write, or None when unknown."""
        if self.heartbeat is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.heartbeat)


class CleanerPublisher:
    """Publishes one store's cleaner status under ``<store>/__cleaners/`` (see the module docstring).

    Made by the store when its cleaner is enabled; :meth:`publish` is called by the cleaner thread,
    :meth:`close` when the store closes.
    """

    def __init__(self, store_path: str) -> None:
        self.directory = os.path.join(store_path, CLEANERS_DIR)
        os.makedirs(self.directory, exist_ok=True)
        _remove_dead(self.directory)
        self.name = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._status_path = os.path.join(self.directory, self.name + _STATUS)
        lock_path = os.path.join(self.directory, self.name + _LOCK)
        tmp = lock_path + ".new"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if not try_flock(fd):  # a fresh file of our own name: nobody else can hold it
                raise OSError(f"cannot lock {tmp}")
            os.rename(tmp, lock_path)  # flock follows the inode through the rename
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self._lock_path = lock_path
        try:
            self._status_fd: int | None = os.open(self._status_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except BaseException:
            self.close()
            raise
        self._failing = False
        self.last_write = 0.0

    def due(self, within: float | None = None) -> bool:
        """True when ``within`` seconds (default: the heartbeat interval) have passed since the last write."""
        return time.time() - self.last_write >= (HEARTBEAT_S if within is None else within)

    def publish(self, status: CleanerStatus, partitions: list[str]) -> None:
        """Rewrite the status file with ``status``, in place. Never raises (see the module docstring)."""
        fd = self._status_fd
        if fd is None:
            return
        now = time.time()
        doc = {name: getattr(status, name) for name in _STATUS_FIELDS}
        doc["last_error"] = _cut(doc["last_error"])
        doc["uncleanable"] = {k: _cut(v) for k, v in list(doc["uncleanable"].items())[:100]}
        body = {"pid": os.getpid(), "heartbeat": now, "partitions": sorted(partitions)[:10_000], "status": doc}
        data = checked(encode_doc(_MAGIC, _VERSION, body))
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))  # after the write: the file is never empty in between
        except OSError as exc:
            if not self._failing:
                log.warning("pylog cleaner: cannot write its status file %s: %s", self._status_path, exc)
            self._failing = True
            return
        self._failing = False
        self.last_write = now

    def close(self) -> None:
        """Remove this store's entry (the status first: an entry without a lock file is never read)."""
        status_fd, self._status_fd = getattr(self, "_status_fd", None), None
        fd, self._fd = self._fd, None
        if fd is None:
            return
        for path in (self._status_path, self._lock_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        if status_fd is not None:
            os.close(status_fd)
        os.close(fd)


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= _MAX_TEXT:
        return text
    return text[:_MAX_TEXT // 2] + "\n[...]\n" + text[-_MAX_TEXT // 2:]


def _names(directory: str) -> list[str]:
    try:
        entries = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(e[:-len(_LOCK)] for e in entries if e.endswith(_LOCK))


def _probe(directory: str, name: str, suffix: str = _LOCK) -> int | None:
    """An open fd holding ``name``'s lock when its process is dead; None while it lives (or is gone).

    :raises OSError: when the lock file cannot be opened or locked (not ours, not a file).
    """
    try:
        fd = os.open(os.path.join(directory, name + suffix), os.O_RDONLY)  # flock needs no write access
    except FileNotFoundError:
        return None
    try:
        if try_flock(fd):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # not a file of ours (a directory, another user's): leave it
        log.debug("pylog cleaner registry: leaving %s alone: %s", path, exc)


def _remove_dead(directory: str) -> None:
    """Remove the entries of processes that died without closing their store, lock files of stores that
    died while creating theirs, and status files without a lock file (a store writes its lock first)."""
    try:
        entries = set(os.listdir(directory))
    except FileNotFoundError:
        return
    for entry in sorted(entries):
        if entry.endswith(_LOCK):
            name, suffix = entry[:-len(_LOCK)], _LOCK
        elif entry.endswith(_LOCK + ".new"):
            name, suffix = entry[:-len(_LOCK + ".new")], _LOCK + ".new"
        elif entry.endswith(_STATUS) and entry[:-len(_STATUS)] + _LOCK not in entries:
            _unlink(os.path.join(directory, entry))
            continue
        else:
            continue
        try:
            fd = _probe(directory, name, suffix)
        except OSError:  # someone else's file: leave it
            continue
        if fd is None:
            continue
        try:  # while we hold its lock: a live store never has its files removed
            if suffix == _LOCK:
                _unlink(os.path.join(directory, name + _STATUS))
            _unlink(os.path.join(directory, name + suffix))
        finally:
            os.close(fd)


def _read_status(path: str, entry: PublishedCleaner) -> None:
    for attempt in range(_READ_ATTEMPTS):
        try:
            body = read_checked(path, _MAX_BYTES + 1, "cleaner status")
            break
        except CorruptRecordError as exc:
            # Rewritten in place: this read may have met a write half-way; a second look settles it.
            if attempt + 1 == _READ_ATTEMPTS:
                entry.error = str(exc)
                return
            time.sleep(0.002)
        except OSError as exc:
            entry.error = f"cannot read {path}: {exc}"
            return
    if body is None:
        entry.error = "no status written yet"
        return
    try:
        if len(body) + 4 > _MAX_BYTES:  # the body and its CRC
            raise CorruptRecordError(f"cleaner status file larger than {_MAX_BYTES} bytes", path, 0)
        doc = decode_doc(_MAGIC, _VERSION, body, path, "cleaner status")
        st = doc.get("status") if type(doc) is dict else None
        partitions = doc.get("partitions", []) if type(doc) is dict else None
        bad = [k for k in _STATUS_FIELDS if type(st) is dict and k in st and not _FIELD_CHECKS[k](st[k])]
        if (type(st) is not dict or bad or not _number(doc.get("heartbeat")) or type(partitions) is not list
                or not all(type(p) is str for p in partitions)):
            raise CorruptRecordError("cleaner status: unexpected content" + (f" in {bad}" if bad else ""), path, 0)
        entry.status = CleanerStatus(**{k: st[k] for k in _STATUS_FIELDS if k in st})
        entry.heartbeat = float(doc["heartbeat"])
        entry.partitions = tuple(partitions)
    except CorruptRecordError as exc:
        entry.error = str(exc)


def published_cleaners(store_path: str) -> list[PublishedCleaner]:
    """The cleaner entries under ``store_path``, live processes and dead ones, without changing any."""
    directory = os.path.join(store_path, CLEANERS_DIR)
    out = []
    for name in _names(directory):
        pid_text = name.split("-", 1)[0]
        entry = PublishedCleaner(name=name, pid=int(pid_text) if pid_text.isdigit() else -1, process_alive=True)
        try:
            fd = _probe(directory, name)
        except OSError as exc:
            entry.error = f"cannot check {name + _LOCK}: {exc}"
            out.append(entry)
            continue
        if fd is not None:
            entry.process_alive = False
            os.close(fd)
        _read_status(os.path.join(directory, name + _STATUS), entry)
        out.append(entry)
    return out
