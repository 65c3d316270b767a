"""Helpers the tests share: reading a partition to its end, a log file's batches, flipping a byte on disk,
waiting for a condition, crash images, a process that died with its cleaner published.

``crash_copy`` copies a store directory while it is open: the files a crash at this moment would leave. The
store's background sync thread may replace a checkpoint during the copy: either version is what a crash at
that moment leaves, and a temp file that vanishes mid-copy is one the crash did not leave.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pylog
from pylog.partition import internals
from pylog.storage.records import HEADER_SIZE, BatchHeader, EncodeOptions, encode_parts, parse_header


def _copy_if_there(src: str, dst: str) -> None:
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        pass


def crash_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    shutil.copytree(src, dst, copy_function=_copy_if_there)


def read_all(p: pylog.Partition, start: int | None = None, chunk: int = 1000) -> list[pylog.Record]:
    """Every record of ``p`` from ``start`` (default: its log start) to its end, ``chunk`` per read (a
    reader sees another handle's appends once it reads at its end)."""
    out: list[pylog.Record] = []
    pos = p.log_start_offset if start is None else start
    while recs := p.read(pos, max_records=chunk):
        out.extend(recs)
        pos = recs[-1].offset + 1
    return out


def log_batches(log_path: str | os.PathLike[str]) -> list[tuple[int, BatchHeader]]:
    """``[(position, header)]`` of every whole batch of a ``.log`` file, walking its raw bytes by the length
    fields; it stops at a torn last batch or a length too short to be one (a damaged file)."""
    with open(log_path, "rb") as f:
        raw = f.read()
    out, pos = [], 0
    while pos + HEADER_SIZE <= len(raw):
        h = parse_header(raw, pos)
        if h.size < HEADER_SIZE or pos + h.size > len(raw):
            break
        out.append((pos, h))
        pos += h.size
    return out


def abandon(p: pylog.Partition) -> None:
    """Drop ``p`` as a crashed process would: nothing written at close (no clean checkpoint, no producer
    snapshot) and the writer lock's descriptor closed without a word; the handle is unusable afterwards.
    Reaches into the handle's private state, which only a test may do (the library has no such hook)."""
    p._closed = True
    writer = internals(p)._writer
    fd, writer.fd = writer.fd, None
    if fd is not None:
        os.close(fd)


def append_foreign_control(p: pylog.Partition, producer_id: int, value: bytes = b"\x00\x00\x00\x01") -> int:
    """Append, straight into ``p``'s active segment (its writer must be this handle, which is then unusable:
    :func:`abandon` it), a control batch of ``producer_id`` that is not a transaction marker, as pylog before
    transactions let a caller write. Returns its offset."""
    offset = p.log_end_offset
    parts, h = encode_parts(values=[value], keys=[b"\x00\x00\x00\x00"], options=EncodeOptions(
        base_offset=offset, producer_id=producer_id, producer_epoch=0, control=True, transactional=True))
    internals(p).local_log.segments[-1].append(h, parts, h.max_timestamp)
    return offset


def flip_byte(path: str | os.PathLike[str], at: int, mask: int) -> None:
    """XOR the byte at ``at`` of the file with ``mask``, through the file (as bit rot or a foreign hand
    would, under any open mapping)."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ mask]))


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, step: float = 0.01) -> Any:
    """Poll ``predicate`` every ``step`` seconds until it returns something true or ``timeout`` passes;
    returns its last value (a hang guard for tests, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def blocked_in(thread: threading.Thread, *functions: str) -> bool:
    """True while ``thread``'s innermost Python frame is one of ``functions`` (by name): the thread sits in
    that call, e.g. ``wait`` (a condition variable), ``futex`` or ``wait_any`` (pylog.storage.notify's sleeps). A
    hand-shake for tests that must act only once another thread is waiting."""
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_name in functions


_DYING_CLEANER = """
import sys, time, pylog
store = pylog.open(sys.argv[1])  # its cleaner enabled: published under __cleaners/
while not store.cleaners():
    time.sleep(0.05)
print("published", flush=True)
time.sleep(600)  # SIGKILLed long before
"""


def kill_with_cleaner_published(path: str | os.PathLike[str]) -> int:
    """Open the store at ``path`` with its cleaner in a child process, SIGKILL the child once its cleaner is
    published under ``__cleaners/``, and return its pid: the entry of a process that died without closing the
    store stays until a store next opens there with its cleaner."""
    child = subprocess.Popen([sys.executable, "-c", _DYING_CLEANER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "published\n"
    finally:
        child.kill()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    return child.pid
