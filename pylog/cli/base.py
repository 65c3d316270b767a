"""What every command shares: exit codes, the error that ends a command, opening a store, argument types,
and what can be learnt about a store from outside the processes that use it.

Invariants:
- A command never creates a store by looking at one: only ``topics create`` and ``bench`` (whose job is
  writing) may create the directory; every other command refuses a path without ``pylog.store``.
- The CLI's own :class:`~pylog.store.Store` runs no cleaner thread: a command does its work and exits, and
  maintenance stays the business of the processes that write the partitions.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
from enum import IntEnum
from typing import Iterable, Iterator

from ..errors import CommandError  # defined here before pylog.errors: importable from here too
from ..storage.filenames import LOCK_FILE, STORE_FILE
from ..storage.handles import descriptor_limit
from ..store import Store

__all__ = ["ExitCode", "CommandError", "open_store", "open_store_for_scans", "RESERVED_DESCRIPTORS", "check_store_path",
           "non_negative", "positive", "timestamp_ms", "key_value", "partition_writers"]


#: Descriptors a command reading a whole store keeps for everything but the partitions (an HTTP endpoint's
#: sockets, the interpreter's files).
RESERVED_DESCRIPTORS = 256


class ExitCode(IntEnum):
    """The exit status of every command."""

    OK = 0
    #: The command ran and found or left problems: damage (verify, dump), unhealthy (health), partitions
    #: locked by another writer (maintenance, topics delete), a group with live members (reset, delete).
    PROBLEMS = 1
    #: Bad arguments (argparse's own code).
    USAGE = 2
    #: The command could not run: not a store, unknown topic or group, a bad offset, an I/O error.
    ERROR = 3
    #: Interrupted (Ctrl-C) outside ``consume --follow``, whose normal end that is.
    INTERRUPTED = 130


@contextlib.contextmanager
def open_store(path: str, create: bool = False) -> Iterator[Store]:
    """The store at ``path``, without a cleaner thread; closed on exit.

    :param create: make the store when ``path`` holds none and is missing or an empty directory (only for
        commands whose job is writing; a directory with other files in it is never turned into a store).
    :raises CommandError: when ``path`` is not a store and may not become one.
    """
    check_store_path(path, create)
    with Store(path, log_cleaner_enable=False) as store:
        yield store


@contextlib.contextmanager
def open_store_for_scans(path: str) -> Iterator[Store]:
    """The store at ``path`` read-only (no cleaner, no lock, nothing written), for a command that looks at every
    partition again and again (``metrics``, ``top``): its descriptor budget is every descriptor but
    :data:`RESERVED_DESCRIPTORS`, since a budget smaller than the store would close and reopen the partitions
    at each look. :raises CommandError: when ``path`` is not a store."""
    check_store_path(path, create=False)
    budget = max(descriptor_limit() - RESERVED_DESCRIPTORS, RESERVED_DESCRIPTORS)
    with Store(path, read_only=True, max_open_descriptors=budget) as store:
        yield store


def check_store_path(path: str, create: bool) -> None:
    """Refuse ``path`` unless it holds a store or (with ``create``) is missing or an empty directory: a command
    never turns a directory holding other files into a store. :raises CommandError:"""
    if not os.path.isfile(os.path.join(path, STORE_FILE)):
        if not create:
            raise CommandError(f"{path} is not a pylog store (no {STORE_FILE})")
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise CommandError(f"{path} is not a pylog store, and not empty: it is left alone")


# ---------------------------------------------------------------------------------------- argument types

def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch, given as a number or as ISO 8601 (``2026-01-31T12:00``; a time
    without a zone is local time, as ``date`` prints it)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 "
                                         "time") from None
    return int(when.timestamp() * 1000)


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may be empty and may contain '=')."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


# ------------------------------------------------------------------------------- what the kernel knows

def partition_writers(directories: Iterable[str]) -> dict[str, int | None] | None:
    """For each partition directory, the pid of the process holding its writer lock (None: nobody writes
    it now), read from ``/proc/locks`` without touching the locks; None when the kernel does not say
    (not Linux, or ``/proc`` hidden).

    Only a reading: a writer may start or stop right after. A pid belongs to the reader's pid namespace
    (0 when the writer runs in another one).
    """
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    held: dict[tuple[int, int, int], int] = {}
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:5309264 0 EOF"; blocked waiters have "->" in field 1
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            held[(int(major, 16), int(minor, 16), int(inode))] = int(fields[4])
        except ValueError:
            continue
    out: dict[str, int | None] = {}
    for directory in directories:
        try:
            st = os.stat(os.path.join(directory, LOCK_FILE))
        except OSError:
            out[directory] = None
            continue
        out[directory] = held.get((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    return out
