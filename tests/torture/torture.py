"""Kill torture: real processes SIGKILLed at random points inside pylog's crash-sensitive paths, over and over.

Run before a release with ``python tests/torture/torture.py --full`` (at least 1,000 kills, counts per path,
a final summary line); CI runs ``--short`` (a few dozen kills, well under two minutes) through
``test_torture_short.py``. ``run(mode, workdir, seed)`` is the entry point of both.

Scenarios, each on its own store, each a child process forked over and over and killed:

========== ================================================================ ==============================
scenario   what the child does in a loop                                     paths it is killed inside
========== ================================================================ ==============================
log        appends (tiny segment.bytes: a roll every few batches), flushes,  segment_roll, retention
           enforces size retention, deletes records
compact    appends keyed records with tombstones, flushes, compacts          compaction, swap
produce    a Producer with acks="all" sends bursts to 3 partitions           group_commit
handover   TWO producer processes share one partition (writer handovers)     handover
groups     consumers of one group join, leave, poll and commit offsets       rebalance, offset_commit
topics     creates topics (and fills them) and deletes them                  topic_create, topic_delete
open       opens a store left unclean and recovers every partition, then     store_open
           appends and compacts (which leaves it unclean for the next one)
========== ================================================================ ==============================

How a kill lands *inside* a path: the child wraps the path's internal functions (``MARKERS``; only in the
child, by monkeypatching) so that it knows, per thread, when it is inside one, and keeps a count per path
of the threads inside it in memory shared with the parent. Half the kills are made by the child itself:
it wraps the file operations (``os.writev``, ``os.fsync``, ``os.replace``, ``os.unlink``, ...) and sends
itself SIGKILL just before or just after the k-th one made inside the chosen path, or after writing a
random part of the k-th write (a write cut short, as a kill during a large write leaves it). The other
half are made by the parent after a random delay. Either way, after the kill the parent reads the shared
counts: the per-path numbers printed are the kills that landed while the child was inside that path
(one kill may be inside several, e.g. a roll inside a group commit).

What the child reports: before the parent could kill it past a point, the child replaces a small report
file (write + rename: a SIGKILL loses no page cache, so no fsync is needed for this file) with what is
flushed or acknowledged: flushed log end offsets, the log start after a retention pass, the records each
producer's futures acknowledged, the offsets a consumer processed (before committing them) and committed
(after the commit returned), the topics whose creation or deletion returned.

What the parent checks after every kill, first as a lock-free reader of the crashed store and then (half
the time; otherwise the next child recovers it, and may be killed doing so) after a writer has recovered
every partition:

* every flushed or acknowledged record is there, byte-identical (content is a pure function of the record's
  identity, see :func:`content`), and nothing is there that was never produced (each record must be the
  generator's record for its offset, or for its producer and sequence number; a producer's records on a
  partition are its sequence 0, 1, 2, ... in offset order: nothing twice, nothing skipped);
* offsets are dense from the log start to the log end, except in compacted topics, where they are
  strictly increasing, the active segment is dense and every key's latest record below the log end is
  still there (tombstones never expire here);
* the log start never goes below what a finished retention pass reported;
* ``check()`` finds nothing after recovery, and no compaction leftovers (``.cleaned``/``.swap``) remain;
* a group's committed offset lies between the last commit that returned and the largest offset the
  consumer reported processed; a new member joining after the kill gets every partition and resumes at
  the committed offsets;
* a topic whose create or delete was under way is wholly there or not at all; one whose create returned
  is there with its records, one whose delete returned is gone, and the name can be created again;
* a store whose open (recovery) was killed opens and recovers.

Any violation raises AssertionError naming the seed, the scenario, the kill, where the kill landed and
what differed. The child's own errors (an exception, a record it read that differs) end it with exit code
3 and its traceback: also a violation.

Two producer processes that share *several* partitions can wait on each other (a known stall being fixed
separately); the handover scenario shares one partition, which does not stall.
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import hashlib
import json
import logging
import multiprocessing
import os
import random
import select
import shutil
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: storetools

import pylog  # noqa: E402
from pylog.structs import OffsetAndMetadata, TopicPartition  # noqa: E402
from storetools import read_all  # noqa: E402

NKEYS = 61
DAY_MS = 86_400_000

PATHS = ("segment_roll", "retention", "compaction", "swap", "group_commit", "offset_commit", "rebalance",
         "handover", "topic_create", "topic_delete", "store_open")
_PIDX = {name: i for i, name in enumerate(PATHS)}

#: The internal functions that make up each path: (module, class or None, function).
MARKERS: dict[str, list[tuple[str, str | None, str]]] = {
    "segment_roll": [("pylog.partition", "Partition", "_roll")],
    "retention": [("pylog.partition", "Partition", "enforce_retention"),
                  ("pylog.partition", "Partition", "delete_records")],
    "compaction": [("pylog.maintenance.compaction", None, "clean_partition"), ("pylog.store", None, "clean_partition")],
    "swap": [("pylog.partition", "PartitionInternals", "swap_in"), ("pylog.storage.swap", None, "roll_forward")],
    "group_commit": [("pylog.clients.drain", "Drainer", "append")],  # appends of one drain + one fsync
    "offset_commit": [("pylog.clients.offsets", "CommittedOffsets", "commit")],
    "rebalance": [("pylog.clients.groups", "GroupMember", "join"), ("pylog.clients.groups", "GroupMember", "leave"),
                  ("pylog.clients.groups", "GroupMember", "_rebalance_locked")],
    "handover": [("pylog.partition", "Partition", "_take_turn"), ("pylog.partition", "Partition", "release_writer")],
    "topic_create": [("pylog.store", "Store", "create_topic")],
    "topic_delete": [("pylog.store", "Store", "delete_topic")],
    "store_open": [("pylog.store", "Store", "__init__"), ("pylog.partition", "Partition", "_open_as_writer")],
}

#: The file operations a self-kill counts (the k-th one made inside the target path).
_FILE_OPS = ("write", "writev", "pwrite", "fsync", "fdatasync", "ftruncate", "truncate", "replace", "rename",
             "unlink", "rmdir", "mkdir")
_WRITES = ("write", "writev", "pwrite")


#: The real functions, taken before any child wraps them (the reports a child writes are not counted).
_REAL_WRITE = os.write
_REAL_RENAME = os.rename


def _open(root: str) -> pylog.Store:
    # The background cleaner is off: maintenance runs where the children call it, so kills land in it there.
    return pylog.open(root, log_cleaner_enable=False)


# ----------------------------------------------------------------------------- deterministic content


@functools.lru_cache(maxsize=1 << 18)
def content(n: int, stream: int = 0, tomb: bool = False) -> tuple[bytes, bytes | None]:
    """(key, value) of record ``n`` of ``stream``; value None is a tombstone (only with ``tomb``).

    Stream 0 is a partition written by direct appends: ``n`` is the offset. Producer records use
    ``stream = generation << 8 | partition`` and ``n`` = the producer's sequence number on that partition.
    The value starts with ``b"<stream>.<n>:"``, so any record says which one it claims to be."""
    d = hashlib.blake2b(struct.pack("<QQ", stream, n), digest_size=16).digest()
    key = b"k%02d" % (int.from_bytes(d[:4], "little") % NKEYS)
    if tomb and d[4] % 8 == 0:
        return key, None
    return key, b"%d.%d:" % (stream, n) + d[5:5 + d[6] % 12] * (1 + d[7] % 4)


def append_expected(p: pylog.Partition, first: int, n: int, tomb: bool = False,
                    producer: tuple[int, int, int] | None = None) -> int:
    """Append stream 0's records [first, first + n) (as idempotent producer ``(id, epoch, first sequence)``
    when given); returns the offset after them."""
    recs = [content(o, 0, tomb) for o in range(first, first + n)]
    got = p.append_values([v for _, v in recs], keys=[k for k, _ in recs], producer=producer)
    assert got == first, f"append at {first} landed at {got}"
    return first + n


# ----------------------------------------------------------------------------- child-side instrumentation


class _Probe:
    """In a child: per-thread depth inside each path, a shared count of threads inside each path, and the
    self-kill switch (target path, k, how)."""

    def __init__(self, inside: Any, target: str | None, k: int, how: str, seed: int) -> None:
        self.inside = inside
        self.target = _PIDX[target] if target else -1
        self.left = k
        self.how = how
        self.rng = random.Random(seed)
        self.local = threading.local()
        self.lock = threading.Lock()

    def depth(self) -> list[int]:
        d = getattr(self.local, "d", None)
        if d is None:
            d = self.local.d = [0] * len(PATHS)
        return d

    def enter(self, i: int) -> None:
        self.depth()[i] += 1
        with self.lock:
            self.inside[i] += 1

    def leave(self, i: int) -> None:
        self.depth()[i] -= 1
        with self.lock:
            self.inside[i] -= 1

    def counted(self) -> bool:
        """This file operation is inside the target path (in this thread) and is the k-th such: kill."""
        if self.target < 0 or self.depth()[self.target] <= 0:
            return False
        with self.lock:
            self.left -= 1
            return self.left == 0


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _install(probe: _Probe) -> None:
    import importlib

    def marked(fn: Callable, i: int) -> Callable:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            probe.enter(i)
            try:
                return fn(*args, **kwargs)
            finally:
                probe.leave(i)
        return call

    for path, places in MARKERS.items():
        for modname, clsname, fname in places:
            owner = importlib.import_module(modname)
            if clsname is not None:
                owner = getattr(owner, clsname)
            setattr(owner, fname, marked(getattr(owner, fname), _PIDX[path]))
    if probe.target < 0:
        return

    def op(name: str, real: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not probe.counted():
                return real(*args, **kwargs)
            how = probe.how
            if how == "torn" and name in _WRITES:
                data = args[1]
                whole = b"".join(data) if name == "writev" else bytes(data)
                if len(whole) > 1:
                    cut = probe.rng.randrange(1, len(whole))
                    if name == "pwrite":
                        real(args[0], whole[:cut], args[2])
                    else:
                        _REAL_WRITE(args[0], whole[:cut])
                _die()
            if how != "after":
                _die()
            try:
                return real(*args, **kwargs)
            finally:  # also when it failed (mkdir of a directory that exists)
                _die()
        call.__wrapped__ = real  # type: ignore[attr-defined]
        return call

    for name in _FILE_OPS:
        setattr(os, name, op(name, getattr(os, name)))


# ----------------------------------------------------------------------------- reports (child -> parent)


def write_report(path: str, doc: Any) -> None:
    """Replace ``path`` with ``doc`` as JSON (write + rename: whole or not at all after a SIGKILL)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = json.dumps(doc).encode()
        _REAL_WRITE(fd, data)
    finally:
        os.close(fd)
    _REAL_RENAME(tmp, path)


def read_report(path: str, default: Any) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return default


# ----------------------------------------------------------------------------- verification helpers


def cleaner_leftovers(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ".cleaned" in n or ".swap" in n)


def verify_log(p: pylog.Partition, flushed: int, min_start: int = 0) -> tuple[int, int]:
    """Stream 0, not compacted: log end >= flushed, log start >= min_start, dense and byte-identical."""
    leo, start = p.log_end_offset, p.log_start_offset
    assert leo >= flushed, f"{p.topic}-{p.number}: flushed records lost: log end {leo} < flushed {flushed}"
    assert min_start <= start <= leo, f"{p.topic}-{p.number}: log start {start} outside [{min_start}, {leo}]"
    recs = read_all(p, start)
    offs = [r.offset for r in recs]
    assert offs == list(range(start, leo)), (
        f"{p.topic}-{p.number}: offsets not dense in [{start}, {leo}): got {len(offs)} records, "
        f"first differences {[(i + start, o) for i, o in enumerate(offs) if o != i + start][:5]}")
    for r in recs:
        k, v = content(r.offset)
        assert r.key == k and r.value == v, f"{p.topic}-{p.number}: record at {r.offset} is {(r.key, r.value)!r}, " \
                                            f"produced {(k, v)!r}"
    return start, leo


def verify_compacted(p: pylog.Partition, flushed: int) -> int:
    """Stream 0 with tombstones, compacted: offsets strictly increasing and byte-identical, the active segment
    dense, each key's latest record below the log end present (tombstones never expire here)."""
    leo = p.log_end_offset
    assert leo >= flushed, f"{p.topic}-{p.number}: flushed records lost: log end {leo} < flushed {flushed}"
    assert p.log_start_offset == 0
    recs = read_all(p, 0)
    prev = -1
    for r in recs:
        assert prev < r.offset < leo, f"{p.topic}-{p.number}: offset {r.offset} after {prev} (log end {leo})"
        assert (r.key, r.value) == content(r.offset, 0, True), \
            f"{p.topic}-{p.number}: record at {r.offset} is {(r.key, r.value)!r}, produced {content(r.offset, 0, True)!r}"
        prev = r.offset
    active = p.segments[-1].base_offset if p.segments else leo
    assert [r.offset for r in recs if r.offset >= active] == list(range(active, leo)), \
        f"{p.topic}-{p.number}: active segment [{active}, {leo}) not dense"
    have = {r.offset for r in recs}
    latest: dict[bytes, int] = {}
    for o in range(leo - 1, -1, -1):
        latest.setdefault(content(o, 0, True)[0], o)
        if len(latest) == NKEYS:
            break
    for key, o in latest.items():
        assert o in have, f"{p.topic}-{p.number}: latest record of {key!r} (offset {o}) is gone; log end {leo}"
    return leo


def verify_streams(p: pylog.Partition, acked: dict[int, int], max_gen: int) -> dict[int, int]:
    """Producer records: offsets dense from 0; every record is the generator's for the stream and sequence
    its value names; per stream the sequences are 0, 1, 2, ... in offset order; each stream has at least its
    acknowledged count. Returns the count per stream."""
    leo = p.log_end_offset
    assert p.log_start_offset == 0
    recs = read_all(p, 0)
    assert [r.offset for r in recs] == list(range(leo)), f"{p.topic}-{p.number}: offsets not dense in [0, {leo})"
    seen: dict[int, int] = {}
    for r in recs:
        try:
            stream, n = (int(x) for x in r.value.split(b":", 1)[0].split(b"."))
        except (ValueError, AttributeError):
            raise AssertionError(f"{p.topic}-{p.number}: record at {r.offset} was never produced: {r.value!r}") from None
        assert stream & 0xFF == p.number and 1 <= stream >> 8 <= max_gen, \
            f"{p.topic}-{p.number}: record at {r.offset} names stream {stream}, never produced here"
        assert r.key is None and r.value == content(n, stream)[1], \
            f"{p.topic}-{p.number}: record at {r.offset} is {r.value!r}, produced {content(n, stream)[1]!r}"
        assert n == seen.get(stream, 0), (f"{p.topic}-{p.number}: record at {r.offset} is sequence {n} of "
                                          f"generation {stream >> 8}, expected {seen.get(stream, 0)}")
        seen[stream] = n + 1
    for stream, count in acked.items():
        assert seen.get(stream, 0) >= count, (f"{p.topic}-{p.number}: generation {stream >> 8} had {count} records "
                                              f"acknowledged, {seen.get(stream, 0)} are there")
    return seen


def recover_all(root: str) -> None:
    """Become the writer of every partition of every topic (recovery), then check each."""
    with _open(root) as store:
        for name in store.topics():
            for p in store.topic(name).partitions:
                assert p.try_become_writer(), f"{name}-{p.number}: could not become the writer"
                problems = p.check()
                assert problems == [], f"{name}-{p.number}: check() after recovery: {problems}"
                left = cleaner_leftovers(p.directory)
                assert left == [], f"{name}-{p.number}: compaction leftovers after recovery: {left}"


# ----------------------------------------------------------------------------- running a child


class ChildDied(AssertionError):
    pass


class Child:
    """A forked child running ``target(root, report, seed, signal_byte)``; hand-shakes through a pipe."""

    def __init__(self, target: Callable, root: str, report: str, seed: int, inside: Any, hook: tuple | None,
                 errfile: str, extra: tuple = ()) -> None:
        self.errfile = errfile
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                os.close(r)
                # A child that hangs shows where: the parent sends SIGUSR1 before giving up on it.
                errf = open(errfile, "a")
                faulthandler.register(signal.SIGUSR1, file=errf, all_threads=True)
                target_path, k, how = hook if hook else (None, 0, "before")
                _install(_Probe(inside, target_path, k, how, seed))

                def say(b: bytes) -> None:
                    try:
                        _REAL_WRITE(w, b)
                    except OSError:
                        pass
                target(root, report, seed, say, *extra)
            except BaseException:
                code = 3
                with open(errfile, "a") as f:
                    f.write(traceback.format_exc())
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self.fd = r
        self.pidfd = os.pidfd_open(pid)
        self.status: int | None = None

    def expect(self, byte: bytes, timeout: float = 60) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            self.dump_stacks()
            self.kill()
            raise ChildDied(f"child said nothing for {timeout}s (waiting for {byte!r}): {self.error()}")
        got = os.read(self.fd, 1)
        if got != byte:
            self.wait(10)
            raise ChildDied(f"child exited ({self.status}) before sending {byte!r}: {self.error()}")

    def drain(self) -> bytes:
        out = b""
        while select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, 4096)
            if not chunk:
                break
            out += chunk
        return out

    def alive(self) -> bool:
        return self.status is None and not select.select([self.pidfd], [], [], 0)[0]

    def wait(self, timeout: float) -> int | None:
        if self.status is None and select.select([self.pidfd], [], [], timeout)[0]:
            _, st = os.waitpid(self.pid, 0)
            self.status = os.waitstatus_to_exitcode(st)
        return self.status

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait(30)

    def killed_by_parent(self) -> None:
        """SIGKILL it; it must still have been running."""
        if not self.alive():
            self.wait(10)
            raise ChildDied(f"child died by itself (exit code {self.status}): {self.error()}")
        self.kill()
        if self.status != -signal.SIGKILL:
            raise ChildDied(f"child exit code {self.status}: {self.error()}")

    def killed_itself(self, timeout: float = 20) -> None:
        if self.wait(timeout) is None:
            self.dump_stacks()
            self.kill()
            raise ChildDied(f"child did not kill itself within {timeout}s (hook never fired): {self.error()}")
        if self.status != -signal.SIGKILL:
            raise ChildDied(f"child exit code {self.status} (expected its own SIGKILL): {self.error()}")

    def dump_stacks(self) -> None:
        """Have a hanging child write its threads' stacks to its error file (faulthandler)."""
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        select.select([self.pidfd], [], [], 2)  # give it a moment to write them

    def error(self) -> str:
        try:
            with open(self.errfile) as f:
                return f.read()[-3000:]
        except FileNotFoundError:
            return "(no traceback)"

    def close(self) -> None:
        self.kill()
        for fd in (self.fd, self.pidfd):
            try:
                os.close(fd)
            except OSError:
                pass


# ----------------------------------------------------------------------------- scenarios


class Scenario:
    """One store, one kind of child, its checks. Subclasses define ``setup``, ``child`` and ``verify``."""

    name = ""
    targets: tuple[str, ...] = ()
    #: upper bound of k for a self-kill: about the file operations of a couple of passes of the path
    max_k = 30
    #: upper bound of the parent's random kill delay (seconds), after the child's "A"
    max_delay = 0.1
    children_per_cycle = 1

    def __init__(self, workdir: str, rng: random.Random) -> None:
        self.dir = os.path.join(workdir, self.name)
        self.root = os.path.join(self.dir, "store")
        self.report = os.path.join(self.dir, "report")
        self.errfile = os.path.join(self.dir, "child-errors")
        self.rng = rng
        os.makedirs(self.dir, exist_ok=True)
        self.setup()

    def setup(self) -> None:
        raise NotImplementedError

    def child(self, root: str, report: str, seed: int, say: Callable[[bytes], None], *extra: Any) -> None:
        raise NotImplementedError

    def verify(self, recover: bool) -> None:
        raise NotImplementedError

    def spawn(self, inside: Any, hook: tuple | None, extra: tuple = ()) -> Child:
        return Child(self.child, self.root, self.report, self.rng.randrange(1 << 30), inside, hook, self.errfile, extra)

    def cycle(self, inside: Any, hook: tuple | None) -> int:
        """Start the child, get it killed (by the hook or after a delay); returns the number of kills."""
        c = self.spawn(inside, hook)
        try:
            if hook:
                c.killed_itself()
            else:
                c.expect(b"R")
                if self.rng.random() < 0.8:
                    c.expect(b"A")
                    time.sleep(self.rng.uniform(0, self.max_delay))  # the kill's random moment, not a hand-shake
                else:
                    time.sleep(self.rng.uniform(0, 0.02))  # close to the start: its recovery of the last kill
                c.killed_by_parent()
        finally:
            c.close()
        return 1


class LogScenario(Scenario):
    """Appends with rolls every few batches; size retention and delete-records."""

    name = "log"
    targets = ("segment_roll", "retention")
    config = {"cleanup.policy": "delete", "segment.bytes": 2048, "retention.bytes": 5 * 2048,
              "retention.ms": 7 * DAY_MS, "segment.index.bytes": 4096, "index.interval.bytes": 256}

    def setup(self) -> None:
        with _open(self.root) as store:
            store.create_topic("log", 1, self.config)
        self.flushed = self.min_start = 0

    def child(self, root, report, seed, say) -> None:
        rng = random.Random(seed)
        rep = read_report(report, {"flushed": 0, "start": 0})
        store = _open(root)
        p = store.topic("log").partition(0)
        say(b"R")
        nxt = append_expected(p, p.log_end_offset, 1)  # becomes the writer: recovers the last kill
        say(b"A")
        while True:
            nxt = append_expected(p, nxt, rng.randint(1, 30))
            if rng.random() < 0.5:
                p.flush()
                rep["flushed"] = nxt
                write_report(report, rep)
            x = rng.random()
            if x < 0.25:
                store.enforce_retention("log")
            elif x < 0.33:
                store.delete_records("log", 0, rng.randint(p.log_start_offset, nxt))
            else:
                continue
            rep["start"] = p.log_start_offset
            write_report(report, rep)

    def verify(self, recover: bool) -> None:
        rep = read_report(self.report, {"flushed": 0, "start": 0})
        assert rep["flushed"] >= self.flushed, f"reported flushed offset went back: {rep['flushed']} < {self.flushed}"
        self.flushed, self.min_start = rep["flushed"], max(self.min_start, rep["start"])
        with _open(self.root) as store:
            p = store.topic("log").partition(0)
            verify_log(p, self.flushed, self.min_start)
            problems = p.check()
            assert problems == [], f"{p.topic}-{p.number}: check() as a reader after the kill: {problems}"
        if recover:
            recover_all(self.root)
            with _open(self.root) as store:
                start, leo = verify_log(store.topic("log").partition(0), self.flushed, self.min_start)
            self.flushed, self.min_start = leo, start  # close() flushed it
            write_report(self.report, {"flushed": leo, "start": start})


class CompactScenario(Scenario):
    """Keyed appends with tombstones; forced compactions (kills in the cleaning and in the swap)."""

    name = "compact"
    targets = ("compaction", "swap")
    max_k = 25
    max_delay = 0.15
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": DAY_MS,
              "segment.bytes": 2048, "segment.index.bytes": 4096, "index.interval.bytes": 256}

    def setup(self) -> None:
        with _open(self.root) as store:
            store.create_topic("cmp", 1, self.config)
        self.flushed = 0

    def child(self, root, report, seed, say) -> None:
        rng = random.Random(seed)
        store = _open(root)
        p = store.topic("cmp").partition(0)
        say(b"R")
        nxt = append_expected(p, p.log_end_offset, 1, tomb=True)
        say(b"A")
        while True:
            nxt = append_expected(p, nxt, rng.randint(1, 40), tomb=True)
            p.flush()
            write_report(report, {"flushed": nxt})
            if rng.random() < 0.6:
                store.compact("cmp")

    def verify(self, recover: bool) -> None:
        rep = read_report(self.report, {"flushed": 0})
        assert rep["flushed"] >= self.flushed, f"reported flushed offset went back: {rep['flushed']} < {self.flushed}"
        self.flushed = rep["flushed"]
        with _open(self.root) as store:
            verify_compacted(store.topic("cmp").partition(0), self.flushed)
        if recover:
            recover_all(self.root)
            with _open(self.root) as store:
                p = store.topic("cmp").partition(0)
                leo = verify_compacted(p, self.flushed)
                store.compact("cmp")  # a whole pass after the recovery must work and keep the contract
                problems, left = p.check(), cleaner_leftovers(p.directory)
                assert problems == [] and left == [], \
                    f"after a compaction pass following the recovery: check() {problems}, leftovers {left}"
                verify_compacted(p, self.flushed)
            self.flushed = leo
            write_report(self.report, {"flushed": leo})


class ProduceScenario(Scenario):
    """A Producer with acks="all": every drain appends and fsyncs once (the group commit)."""

    name = "produce"
    targets = ("group_commit",)
    max_k = 20
    max_delay = 0.15
    partitions = 3
    topic = "prod"

    def setup(self) -> None:
        with _open(self.root) as store:
            store.create_topic(self.topic, self.partitions, {"segment.bytes": 4096, "segment.index.bytes": 4096})
        self.gen = 0
        self.acked: dict[int, dict[int, int]] = {}  # partition -> stream -> acknowledged count

    def spawn(self, inside, hook, extra=()):
        self.gen += 1
        return Child(self.child, self.root, f"{self.report}.{self.gen}", self.rng.randrange(1 << 30), inside, hook,
                     self.errfile, (self.gen,))

    def child(self, root, report, seed, say, gen) -> None:
        rng = random.Random(seed)
        store = _open(root)
        acks = "all" if self.name == "produce" or rng.random() < 0.5 else 1
        prod = store.producer(acks=acks, linger_ms=rng.choice((0, 1, 5)), batch_size=rng.choice((512, 4096)))
        say(b"R")
        parts = list(range(self.partitions))
        seq = [0] * self.partitions
        first = True
        while True:
            futures = []
            for _ in range(rng.randint(1, 40)):
                part = rng.choice(parts)
                futures.append(prod.send(self.topic, content(seq[part], gen << 8 | part)[1], partition=part))
                seq[part] += 1
            if rng.random() < 0.3:
                prod.flush()
            for f in futures:
                f.get(timeout=120)
            write_report(report, {"gen": gen, "acked": seq})
            if first:
                say(b"A")
                first = False

    def collect(self, gen: int) -> None:
        rep = read_report(f"{self.report}.{gen}", None)
        if rep is not None:
            for part, n in enumerate(rep["acked"]):
                self.acked.setdefault(part, {})[gen << 8 | part] = n

    def verify(self, recover: bool) -> None:
        for g in range(max(1, self.gen - self.children_per_cycle + 1), self.gen + 1):
            self.collect(g)
        with _open(self.root) as store:
            for p in store.topic(self.topic).partitions:
                verify_streams(p, self.acked.get(p.number, {}), self.gen)
                problems = p.check()
                assert problems == [], f"{p.topic}-{p.number}: check() as a reader after the kill: {problems}"
        if recover:
            recover_all(self.root)
            with _open(self.root) as store:
                for p in store.topic(self.topic).partitions:
                    verify_streams(p, self.acked.get(p.number, {}), self.gen)


class HandoverScenario(ProduceScenario):
    """Two producer processes share one partition and hand its writer lock to each other between drains.

    Both are killed each cycle: one by its hook inside a handover (or after a delay), then the other, which
    may be taking over from the first at that moment, after a delay."""

    name = "handover"
    targets = ("handover",)
    partitions = 1
    topic = "shared"
    max_k = 40
    max_delay = 0.08
    children_per_cycle = 2

    def cycle(self, inside, hook) -> int:
        first = self.spawn(inside, hook if hook else None)
        second = self.spawn(inside, None)
        try:
            if hook:
                second.expect(b"R")
                first.killed_itself()
                second.expect(b"A")
            else:
                for c in (first, second):
                    c.expect(b"R")
                for c in (first, second):
                    c.expect(b"A")
                time.sleep(self.rng.uniform(0, self.max_delay))
                first.killed_by_parent()
            time.sleep(self.rng.uniform(0, self.max_delay))
            second.killed_by_parent()
        finally:
            first.close()
            second.close()
        return 2


class GroupsScenario(Scenario):
    """Consumers of one group join, leave, poll, check what they read and commit after each poll."""

    name = "groups"
    targets = ("rebalance", "offset_commit")
    max_k = 12
    max_delay = 0.3
    partitions = 4
    group = "g"

    def setup(self) -> None:
        with _open(self.root) as store:
            store.create_topic("in", self.partitions, {"segment.bytes": 4096})
        self.ends = [0] * self.partitions
        self.top_up(2000)
        self.processed = [0] * self.partitions  # the most any child reported processed
        self.committed = [0] * self.partitions  # the last commit that returned (a floor)
        self.on_disk = [0] * self.partitions

    def top_up(self, n: int) -> None:
        with _open(self.root) as store:
            for p in store.topic("in").partitions:
                self.ends[p.number] = append_expected(p, p.log_end_offset, n)

    def child(self, root, report, seed, say) -> None:
        rng = random.Random(seed)
        store = _open(root)
        tps = [TopicPartition("in", i) for i in range(self.partitions)]
        committed = store.committed_offsets(self.group)
        nexp = {tp: committed[tp].offset if tp in committed else 0 for tp in tps}
        rep = {"processed": [nexp[tp] for tp in tps], "committed": [nexp[tp] for tp in tps]}
        say(b"R")

        def new() -> pylog.Consumer:
            return store.consumer("in", group_id=self.group, enable_auto_commit=False,
                                  auto_offset_reset="earliest", heartbeat_interval_ms=50,
                                  client_id=f"c{rng.randrange(1000)}")
        consumers = [new()]
        first = True
        while True:
            x = rng.random()
            if x < 0.08 and len(consumers) < 3:
                consumers.append(new())
            elif x < 0.14 and len(consumers) > 1:
                consumers.pop(rng.randrange(len(consumers))).close(autocommit=False)
            for c in consumers:
                got = c.poll(timeout_ms=5, max_records=rng.randint(1, 60))
                if not got:
                    continue
                offsets = {}
                for tp, recs in got.items():
                    assert recs[0].offset == nexp[tp], (f"{tp}: read from {recs[0].offset}, but everything before "
                                                        f"{nexp[tp]} was processed and committed")
                    for i, r in enumerate(recs):
                        assert r.offset == recs[0].offset + i, f"{tp}: offsets not dense at {r.offset}"
                        assert (r.key, r.value) == content(r.offset), f"{tp}: record at {r.offset} differs"
                    nexp[tp] = recs[-1].offset + 1
                    offsets[tp] = OffsetAndMetadata(nexp[tp], "")
                    rep["processed"][tp.partition] = nexp[tp]
                write_report(report, rep)  # processed, before the commit
                c.commit(offsets)
                for tp, om in offsets.items():
                    rep["committed"][tp.partition] = om.offset
                write_report(report, rep)
                if first:
                    say(b"A")
                    first = False

    def verify(self, recover: bool) -> None:
        rep = read_report(self.report, None)
        if rep is not None:
            self.processed = [max(a, b) for a, b in zip(self.processed, rep["processed"])]
            self.committed = [max(a, b) for a, b in zip(self.committed, rep["committed"])]
        with _open(self.root) as store:
            got = store.committed_offsets(self.group)
            for i in range(self.partitions):
                tp = TopicPartition("in", i)
                c = got[tp].offset if tp in got else 0
                assert self.committed[i] <= c <= self.processed[i], (
                    f"{tp}: committed offset {c} outside [last commit that returned {self.committed[i]}, "
                    f"most processed {self.processed[i]}]")
                assert c >= self.on_disk[i], f"{tp}: committed offset went back from {self.on_disk[i]} to {c}"
                self.on_disk[i] = c
            offsets_topic = store.topic("__consumer_offsets").partitions if "__consumer_offsets" in store else []
            for p in offsets_topic:  # (not there before the first commit)
                problems = p.check()
                assert problems == [], f"{p.topic}-{p.number}: check() as a reader after the kill: {problems}"
        if recover:
            recover_all(self.root)
            # A member joining now gets every partition and resumes at the committed offsets.
            with _open(self.root) as store:
                c = store.consumer("in", group_id=self.group, enable_auto_commit=False, auto_offset_reset="earliest")
                try:
                    tps = [TopicPartition("in", i) for i in range(self.partitions)]
                    ends = c.end_offsets(tps)
                    # A partition consumed to its end has no record to resume at: only the others poll one.
                    expected = {i: off for i, off in enumerate(self.on_disk) if off < ends[tps[i]]}
                    seen: dict[int, int] = {}
                    for _ in range(2000):  # at least one poll: it joins the group and takes the assignment
                        for tp, recs in c.poll(timeout_ms=5, max_records=1).items():
                            seen.setdefault(tp.partition, recs[0].offset)
                        if len(seen) == len(expected):
                            break
                    assert {tp.partition for tp in c.assignment()} == set(range(self.partitions)), \
                        f"a new member after the kill got {sorted(c.assignment())}"
                    assert seen == expected, \
                        f"a new member resumed at {seen}, the committed offsets are {self.on_disk} (ends {ends})"
                finally:
                    c.close(autocommit=False)
        if min(self.ends[i] - self.on_disk[i] for i in range(self.partitions)) < 500:
            self.top_up(2000)


class TopicsScenario(Scenario):
    """Creates topics (1-3 partitions, tiny segments, filled and flushed) and deletes them."""

    name = "topics"
    targets = ("topic_create", "topic_delete")
    max_k = 20
    max_delay = 0.1
    names = tuple(f"t{i}" for i in range(6))

    def setup(self) -> None:
        _open(self.root).close()
        self.state: dict[str, list] = {n: ["absent"] for n in self.names}  # the parent's view after each check

    def child(self, root, report, seed, say) -> None:
        rng = random.Random(seed)
        rep = read_report(report, {n: ["absent"] for n in self.names})
        store = _open(root)
        say(b"R")
        first = True
        while True:
            name = rng.choice(self.names)
            if rep[name][0] == "present":
                rep[name] = ["deleting"] + rep[name][1:]
                write_report(report, rep)
                store.delete_topic(name)
                rep[name] = ["absent"]
            else:
                nparts = rng.randint(1, 3)
                rep[name] = ["creating", nparts, []]
                write_report(report, rep)
                t = store.create_topic(name, nparts, {"segment.bytes": 1024, "segment.index.bytes": 4096})
                counts = [append_expected(p, 0, rng.randint(1, 40)) for p in t.partitions]
                for p in t.partitions:
                    p.flush()
                rep[name] = ["present", nparts, counts]
            write_report(report, rep)
            if first:
                say(b"A")
                first = False

    def verify(self, recover: bool) -> None:
        rep = read_report(self.report, self.state)
        with _open(self.root) as store:
            listed = set(store.topics())
            for name in self.names:
                st = rep[name]
                there = name in listed
                if st[0] == "present":
                    assert there, f"topic {name}: its creation returned ({st}), now it is gone"
                elif st[0] == "absent":
                    assert not there, f"topic {name}: its deletion returned (or it was never created), now it is there"
                if there:
                    t = store.topic(name)
                    if st[0] in ("present", "deleting"):
                        assert t.num_partitions == st[1], f"topic {name}: {t.num_partitions} partitions, created {st[1]}"
                    for p in t.partitions:
                        assert os.path.isdir(p.directory), f"topic {name} is listed, its partition {p.number} is not there"
                        flushed = st[2][p.number] if st[0] in ("present", "deleting") else 0
                        verify_log(p, flushed)
                        problems = p.check()
                        assert problems == [], f"topic {name}: check() as a reader after the kill: {problems}"
                    self.state[name] = ["present", t.num_partitions,
                                        [p.log_end_offset for p in t.partitions]]
                else:
                    try:
                        store.topic(name)
                    except pylog.UnknownTopicError:
                        pass
                    else:
                        raise AssertionError(f"topic {name}: not listed, yet it opens")
                    self.state[name] = ["absent"]
            leftovers = [n for n in os.listdir(self.root) if n.startswith(".deleting-")]
            assert leftovers == [], f"deleted topics' directories left after an open: {leftovers}"
        if recover:
            recover_all(self.root)
            # Names whose create or delete was cut short can be created (and deleted) again.
            with _open(self.root) as store:
                for name in self.names:
                    if rep[name][0] in ("creating", "deleting") and self.state[name][0] == "absent":
                        t = store.create_topic(name, 2)
                        append_expected(t.partition(1), 0, 3)
                        store.delete_topic(name)
                        assert name not in store.topics()
        write_report(self.report, self.state)


class OpenScenario(Scenario):
    """Opens a store that a killed writer left unclean and recovers every partition (the kill lands in that
    open), then writes on until killed, which leaves it unclean again."""

    name = "open"
    targets = ("store_open",)
    max_k = 40
    max_delay = 0.1

    def setup(self) -> None:
        with _open(self.root) as store:
            store.create_topic("a", 3, {"segment.bytes": 2048, "segment.index.bytes": 4096,
                                        "index.interval.bytes": 256})
            store.create_topic("c", 1, CompactScenario.config)
        self.flushed = {"a0": 0, "a1": 0, "a2": 0, "c0": 0}
        self.open_time = 0.05

    def child(self, root, report, seed, say) -> None:
        rng = random.Random(seed)
        say(b"R")
        t0 = time.monotonic()
        store = _open(root)
        parts = {f"a{i}": store.topic("a").partition(i) for i in range(3)}
        parts["c0"] = store.topic("c").partition(0)
        for p in parts.values():
            assert p.try_become_writer()  # recovery of what the last kill left
        rep = dict(self.flushed)
        rep["open_time"] = time.monotonic() - t0
        nxt = {k: p.log_end_offset for k, p in parts.items()}
        write_report(report, rep)
        say(b"A")
        while True:
            k = rng.choice(sorted(parts))
            nxt[k] = append_expected(parts[k], nxt[k], rng.randint(1, 40), tomb=k == "c0")
            if rng.random() < 0.3:
                parts[k].flush()
                rep[k] = nxt[k]
                write_report(report, rep)
            if k == "c0" and rng.random() < 0.2:
                store.compact("c")

    def cycle(self, inside, hook) -> int:
        if hook:
            return super().cycle(inside, hook)
        c = self.spawn(inside, None)
        try:
            c.expect(b"R")
            # Mostly in the open itself (as long as the last opens took), sometimes in the writing after it.
            time.sleep(self.rng.uniform(0, self.open_time * (1.2 if self.rng.random() < 0.7 else 3)))
            c.killed_by_parent()
        finally:
            c.close()
        return 1

    def verify(self, recover: bool) -> None:
        rep = read_report(self.report, dict(self.flushed))
        if "open_time" in rep:
            self.open_time = 0.7 * self.open_time + 0.3 * rep.pop("open_time")
        for k, v in rep.items():
            assert v >= self.flushed[k], f"{k}: reported flushed offset went back: {v} < {self.flushed[k]}"
            self.flushed[k] = v
        with _open(self.root) as store:
            for i in range(3):
                verify_log(store.topic("a").partition(i), self.flushed[f"a{i}"])
            verify_compacted(store.topic("c").partition(0), self.flushed["c0"])
        if recover:
            recover_all(self.root)
            with _open(self.root) as store:
                for i in range(3):
                    self.flushed[f"a{i}"] = verify_log(store.topic("a").partition(i), self.flushed[f"a{i}"])[1]
                self.flushed["c0"] = verify_compacted(store.topic("c").partition(0), self.flushed["c0"])
        write_report(self.report, self.flushed)


SCENARIOS: tuple[type[Scenario], ...] = (LogScenario, CompactScenario, ProduceScenario, HandoverScenario,
                                         GroupsScenario, TopicsScenario, OpenScenario)
#: Kills per scenario: full mode (>= 1,000 in all), short mode (a few dozen).
FULL_KILLS = {"log": 150, "compact": 150, "produce": 100, "handover": 150, "groups": 150, "topics": 150,
              "open": 150}
SHORT_KILLS = {"log": 8, "compact": 8, "produce": 6, "handover": 8, "groups": 8, "topics": 8, "open": 8}


# ----------------------------------------------------------------------------- the driver


def run(mode: str, workdir: str, seed: int | None = None, only: tuple[str, ...] = (),
        log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the torture in ``mode`` ("full" or "short") under ``workdir``. Returns counts: ``kills`` (total),
    ``by_scenario``, ``inside`` (kills that landed inside each path), ``self_kills``, ``parent_kills``,
    ``seconds``, ``seed``. Raises AssertionError (seed, scenario, kill, where it landed, what differed) on
    any violation."""
    if mode not in ("full", "short"):
        raise ValueError(f"mode must be 'full' or 'short', got {mode!r}")
    seed = random.randrange(1 << 31) if seed is None else seed
    plan = FULL_KILLS if mode == "full" else SHORT_KILLS
    inside = multiprocessing.RawArray("i", len(PATHS))  # shared with every forked child
    counts = {"kills": 0, "by_scenario": {}, "inside": {p: 0 for p in PATHS}, "self_kills": 0, "parent_kills": 0,
              "recoveries_by_parent": 0, "seed": seed}
    t0 = time.monotonic()
    for cls in SCENARIOS:
        if only and cls.name not in only:
            continue
        rng = random.Random(f"{seed}-{cls.name}")
        scn = cls(workdir, rng)
        done = 0
        while done < plan[cls.name]:
            for i in range(len(PATHS)):
                inside[i] = 0
            if rng.random() < 0.5:
                target = cls.targets[done % len(cls.targets)]
                hook = (target, rng.randint(1, cls.max_k), rng.choice(("before", "after", "torn")))
            else:
                hook = None
            recover = rng.random() < 0.5
            where = "?"
            try:
                n = scn.cycle(inside, hook)
                where = ",".join(p for i, p in enumerate(PATHS) if inside[i] > 0) or "outside every path"
                scn.verify(recover)
            except Exception as exc:  # a check that failed, or an error reading the store back: both violations
                raise AssertionError(
                    f"torture seed={seed} scenario={cls.name} kill #{done + 1} "
                    f"({'self-kill at ' + repr(hook) if hook else 'killed by the parent'}; landed inside: "
                    f"{where}; {'recovered by the parent' if recover else 'left for the next child'}): "
                    f"{exc if isinstance(exc, AssertionError) else repr(exc)}\n"
                    f"rerun: python {os.path.abspath(__file__)} --{mode} --seed {seed} --only {cls.name}") from exc
            for i, p in enumerate(PATHS):
                if inside[i] > 0:
                    counts["inside"][p] += 1
            done += n
            counts["self_kills" if hook else "parent_kills"] += 1 if hook else n
            if hook:
                counts["parent_kills"] += n - 1
            counts["recoveries_by_parent"] += recover
            if done % 25 < n:
                log(f"  {cls.name}: {done} kills ({time.monotonic() - t0:.0f}s)")
        counts["by_scenario"][cls.name] = done
        counts["kills"] += done
        log(f"{cls.name}: {done} kills, checked ({time.monotonic() - t0:.0f}s)")
    counts["seconds"] = round(time.monotonic() - t0, 1)
    return counts


def mode_parser(doc: str, full_help: str, short_help: str) -> argparse.ArgumentParser:
    """A torture script's command line: ``--full`` or ``--short``, ``--seed``, ``--workdir``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--full", action="store_true", help=full_help)
    g.add_argument("--short", action="store_true", help=short_help)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory, removed afterwards")
    return ap


def in_workdir(workdir: str | None, prefix: str, body: Callable[[str], dict]) -> dict:
    """``body(directory)`` in ``workdir``, or in a new temporary directory removed afterwards."""
    import tempfile
    directory = workdir or tempfile.mkdtemp(prefix=prefix)
    try:
        return body(directory)
    finally:
        if workdir is None:
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = mode_parser(__doc__, "release mode: >= 1,000 kills", "CI mode: a few dozen kills")
    ap.add_argument("--only", nargs="*", default=(), help="scenarios to run (default: all)")
    args = ap.parse_args(argv)
    # Recoveries log a warning each (a swap finished, a torn tail cut): expected here by the hundred.
    logging.getLogger("pylog").setLevel(logging.ERROR)
    counts = in_workdir(args.workdir, "pylog-torture-", lambda workdir: run(
        "full" if args.full else "short", workdir, args.seed, tuple(args.only), log=lambda s: print(s, flush=True)))
    print("kills that landed inside each path:")
    for p in PATHS:
        print(f"  {p:14s} {counts['inside'][p]}")
    print("kills per scenario: " + ", ".join(f"{k} {v}" for k, v in counts["by_scenario"].items()))
    print(f"torture: {counts['kills']} kills ({counts['self_kills']} self-kills at a file operation inside a "
          f"path, {counts['parent_kills']} by the parent after a random delay), "
          f"{counts['recoveries_by_parent']} recoveries by the parent, in {counts['seconds']}s, seed "
          f"{counts['seed']}: 0 lost, 0 garbage, every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
