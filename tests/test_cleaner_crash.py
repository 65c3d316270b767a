"""Crash and concurrency tests of compaction and retention with real processes.

Like ``test_crash.py``: children are forked, report their progress through small files replaced
atomically, and are SIGKILLed at staggered moments or kill themselves at a drawn file operation; every
fourth kill is scripted to leave a chosen state, so that each state is met a known number of times
whatever the machine's speed. The parent then reopens the store and checks it.

Content is a pure function of the offset (:func:`content`): the record at offset ``o`` has a key drawn
from ``NKEYS`` keys, a value of ``f"{o}:"`` plus bytes hashed from ``o``, and one record in eight is a
tombstone. So whatever a reader gets can be checked without knowing which process wrote what, batch
boundaries do not matter, and "nothing that was not written appears" is a per-record comparison.

* :func:`test_sigkill_during_compaction`: a child appends and compacts in a loop (sometimes expiring
  tombstones with a far-future ``now``) and is killed mid-way, over and over; the crashed state is
  checked as a lock-free reader, then recovered by a writer (sometimes on a copy, so that the next
  child has to recover the crash itself and may be killed in the middle of that), checked, compacted
  again and checked against the full compaction contract.
* :func:`test_sigkill_during_retention`: the same with size/time retention and delete-records.
* :func:`test_reader_process_during_compaction_and_deletion`: a reader process follows the log while
  a writer process appends, compacts, enforces retention and deletes records for a fixed number of
  steps, now and then stopping the reader and raising the log start past it.
* :func:`test_consumer_at_head_sees_every_record`: a consumer that reads to the head before each
  cleaning sees every record ever written.
* :func:`test_reader_handle_opened_before_repeated_compactions`: a reader handle that listed the segments
  before several compactions replaced them (with files that may reuse the old inode numbers) still reads
  every record.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import select
import shutil
import signal
import struct
import time
from typing import Any, Callable
import traceback

import pytest

import pylog

from storetools import read_all

TOPIC = "t"
NKEYS = 97
SEGMENT_BYTES = 4096
DAY_MS = 86_400_000
FAR_FUTURE = 10 * DAY_MS  # added to the wall clock: every tombstone is past delete.retention.ms
#: Kills per crash test: half by the parent after a staggered delay, half by the child itself at an exact
#: file operation (rename or unlink) of the maintenance it is doing (see KillSwitch).
COMPACT_KILLS = 60
RETENTION_KILLS = 60
#: Kill i with i % SCRIPT_EVERY == SCRIPT_AT is scripted instead: the child appends past a few rolls (so it
#: has something to clean or delete), then kills itself at a chosen file operation of its maintenance, so
#: that each state a crash can leave is met a known number of times whatever the machine's speed.
SCRIPT_EVERY = 4
SCRIPT_AT = 3

COMPACT_CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": DAY_MS,
                  "segment.bytes": SEGMENT_BYTES}
RETENTION_CONFIG = {"cleanup.policy": "delete", "retention.bytes": 3 * SEGMENT_BYTES,
                    "retention.ms": 7 * DAY_MS, "segment.bytes": SEGMENT_BYTES}

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")]


def _open(root: str) -> pylog.Store:
    return pylog.open(root, log_cleaner_enable=False)


# ----------------------------------------------------------------------------- deterministic content


def content(o: int) -> tuple[bytes, bytes | None]:
    """(key, value) of the record at offset ``o``; value None is a tombstone."""
    d = hashlib.blake2b(struct.pack("<Q", o), digest_size=16).digest()
    key = b"k%02d" % (int.from_bytes(d[:4], "little") % NKEYS)
    if d[4] % 8 == 0:
        return key, None
    return key, b"%d:" % o + d[5:5 + d[6] % 12] * (1 + d[7] % 4)


class Expected:
    """The generator's keys and values, extended lazily."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []

    def extend_to(self, n: int) -> None:
        while len(self.keys) < n:
            k, v = content(len(self.keys))
            self.keys.append(k)
            self.values.append(v)

    def latest(self, end: int) -> dict[bytes, int]:
        """Each key's latest offset below ``end``."""
        self.extend_to(end)
        found: dict[bytes, int] = {}
        for o in range(end - 1, -1, -1):
            found.setdefault(self.keys[o], o)
            if len(found) == NKEYS:
                break
        return found


def append_expected(p: pylog.Partition, first: int, n: int) -> int:
    """Append the generator's records [first, first + n); returns the offset after them."""
    recs = [content(o) for o in range(first, first + n)]
    got = p.append_values([v for _, v in recs], keys=[k for k, _ in recs])
    assert got == first, f"append at {first} landed at {got}"
    return first + n


def check_content(recs: list, exp: Expected, leo: int) -> None:
    """Offsets strictly increasing (so none twice), below the log end, each with the generator's record."""
    exp.extend_to(leo)
    prev = -1
    for r in recs:
        assert r.offset > prev, f"offset {r.offset} after {prev}: not strictly increasing"
        assert r.offset < leo, f"offset {r.offset} at or past the log end {leo}"
        assert r.key == exp.keys[r.offset], f"key at {r.offset}: {r.key!r} != {exp.keys[r.offset]!r}"
        assert r.value == exp.values[r.offset], f"value at {r.offset}: {r.value!r} != {exp.values[r.offset]!r}"
        prev = r.offset


def cleaner_leftovers(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ".cleaned" in n or ".swap" in n)


def _write_report(path: str, *values: int) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack(f"<{len(values)}q", *values))
    os.replace(path + ".tmp", path)


def _read_report(path: str, n: int) -> tuple[int, ...]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return (0,) * n
    assert len(raw) == 8 * n, f"torn report file ({len(raw)} bytes)"
    return struct.unpack(f"<{n}q", raw)


def _wait_byte(fd: int, want: bytes, child: multiprocessing.Process) -> None:
    ready, _, _ = select.select([fd], [], [], 30)
    assert ready, f"child did not send {want!r} within 30 s"
    got = os.read(fd, 1)
    assert got == want, f"child failed before sending {want!r} (got {got!r}, exit code {child.exitcode})"


def run_and_kill(ctx, target, args: tuple, rng: random.Random, max_delay: float, self_kill: bool = False) -> None:
    """Fork ``target(*args, ready_fd, seed)``, wait until it has opened the store ("R") and mostly until it
    became the writer ("A", after its recovery), let it run 0..``max_delay`` s and SIGKILL it. With
    ``self_kill`` the child SIGKILLs itself (see :class:`KillSwitch`): just wait for that. ``rng`` is the
    round's own generator, so that what it draws does not shift the draws of later rounds."""
    r_fd, w_fd = os.pipe()
    child = ctx.Process(target=target, args=(*args, w_fd, rng.randrange(1 << 30)), daemon=True)
    try:
        child.start()
        os.close(w_fd)
        w_fd = -1
        if self_kill:
            child.join(60)  # a hang guard: the child kills itself at a file operation it is bound to reach
            assert child.exitcode == -signal.SIGKILL, f"child exit code {child.exitcode} (expected to kill itself)"
            return
        _wait_byte(r_fd, b"R", child)
        if rng.random() < 0.8:
            _wait_byte(r_fd, b"A", child)
        else:
            max_delay = 0.02  # land in (or close to) the recovery of the previous crash
        time.sleep(rng.uniform(0, max_delay))  # not synchronisation: a random moment to kill at is the point
        assert child.is_alive(), f"child died by itself (exit code {child.exitcode})"
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL, f"child exit code {child.exitcode}"
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)
        os.close(r_fd)
        if w_fd >= 0:
            os.close(w_fd)


class KillSwitch:
    """In a child: SIGKILL this very process just before (or just after) the ``countdown``-th counted
    ``os.replace`` or ``os.unlink`` made while armed, so that kills land exactly between the file operations
    of a compaction swap, a retention deletion or their recovery. ``countdown`` 0: never. Every unlink
    counts unless ``unlinks`` is false; a rename counts when ``renames(source, destination)`` says so
    (default: every one)."""

    def __init__(self, countdown: int, after: bool, renames=None, unlinks: bool = True) -> None:
        self.left = countdown
        self.after = after
        self.armed = False
        if countdown:
            os.replace = self._wrap(os.replace, renames)
            os.unlink = self._wrap(os.unlink, None if unlinks else (lambda *_: False))

    def _wrap(self, real, counts):
        def call(*args, **kwargs):
            if not self.armed or self.left <= 0 or (counts is not None and not counts(*map(str, args[:2]))):
                return real(*args, **kwargs)
            self.left -= 1
            if self.left == 0 and not self.after:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                return real(*args, **kwargs)
            finally:
                # Also after an operation that failed: removing a segment unlinks its .txnindex, which most
                # segments do not have (FileNotFoundError, expected); the kill must not be skipped for it.
                if self.left == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
        return call

    def __enter__(self) -> "KillSwitch":
        self.armed = True
        return self

    def __exit__(self, *exc) -> None:
        self.armed = False


# ----------------------------------------------------------------------------- 1. SIGKILL during compaction


def _swap_rename(src: str, dst: str) -> bool:
    """The renames of a compaction swap: .cleaned -> .swap, the manifest, .swap -> live (not index seals)."""
    return not src.endswith(".tmp") and (".cleaned" in src or ".swap" in src) or dst.endswith("cleaner.swap")


def _cleaned_to_swap(src: str, dst: str) -> bool:
    """A compaction swap's rename of a cleaned file to ``.swap`` (the first one ends "writing .cleaned")."""
    return ".cleaned" in src and not src.endswith(".tmp") and dst.endswith(".swap")


def _manifest_rename(src: str, dst: str) -> bool:
    """The commit of a compaction swap: its manifest put in place."""
    return os.path.basename(dst) == "cleaner.swap"


#: Scripted kills of a compacting child: the state its directory is then in (see _swap_state), and the
#: rename to kill at (before or after it).
COMPACT_SCRIPTS = {"writing .cleaned": (_cleaned_to_swap, False), "renamed to .swap": (_cleaned_to_swap, True),
                   "committed swap": (_manifest_rename, True)}


def _append_past_rolls(p: pylog.Partition, nxt: int, rolls: int) -> int:
    """Append the generator's records in small batches until the log has rolled ``rolls`` times more."""
    want = len(p.segments) + rolls
    while len(p.segments) < want:
        nxt = append_expected(p, nxt, 5)
    return nxt


def _compact_child(root: str, report: str, countdown: int, after: bool, script: str | None, ready_fd: int,
                   seed: int) -> None:
    """Append, flush, report, compact: forever. Report = (flushed end, expiry mark): the expiry mark is the
    log end before the latest compaction with a far-future ``now`` began (tombstones below it may go).
    ``script`` (a key of COMPACT_SCRIPTS): first append past three rolls (something to clean), then kill
    this process at the first compaction swap's rename that leaves the directory in that state."""
    code = 0
    try:
        rng = random.Random(seed)
        switch = KillSwitch(countdown, after, renames=_swap_rename)
        flushed, expiry = _read_report(report, 2)
        store = _open(root)
        p = store.topic(TOPIC).partition(0)
        os.write(ready_fd, b"R")
        with switch:
            p.enforce_retention()  # compact-only topic: just becomes the writer (finishing an interrupted swap)
        nxt = p.log_end_offset
        os.write(ready_fd, b"A")
        os.close(ready_fd)
        if script is not None:
            nxt = _append_past_rolls(p, nxt, 3)
            renames, kill_after = COMPACT_SCRIPTS[script]
            switch = KillSwitch(1, kill_after, renames=renames, unlinks=False)
        while True:
            nxt = append_expected(p, nxt, rng.randint(1, 60))
            p.flush()
            flushed = nxt
            _write_report(report, flushed, expiry)
            now = None
            if rng.random() < 0.15:
                expiry = nxt
                _write_report(report, flushed, expiry)
                now = int(time.time() * 1000) + FAR_FUTURE
            with switch:
                store.compact(TOPIC, now=now)
    except BaseException:
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def verify_compacted(p: pylog.Partition, exp: Expected, flushed: int, expiry: int, full: bool = False) -> list:
    """What must hold of a compacted partition at any moment (``full``: right after a complete forced
    compaction). Returns the records."""
    leo = p.log_end_offset
    assert leo >= flushed, f"flushed records lost: log end {leo} < flushed {flushed}"
    assert p.log_start_offset == 0
    recs = read_all(p, 0)
    check_content(recs, exp, leo)
    by_offset = {r.offset: r for r in recs}
    # The active segment is never cleaned: dense.
    active = p.segments[-1].base_offset if p.segments else leo  # no segments: killed before the first write
    assert [r.offset for r in recs if r.offset >= active] == list(range(active, leo)), "active segment not dense"
    for key, last in exp.latest(leo).items():
        if last in by_offset:
            continue
        # Only a tombstone past delete.retention.ms (reached by a far-future cleaning) may be gone, and
        # then no older record of its key may be left.
        assert exp.values[last] is None and last < expiry, (
            f"latest record of {key!r} (offset {last}, value {exp.values[last]!r}) is gone; log end {leo}, "
            f"flushed {flushed}, expiry mark {expiry}")
        older = [r.offset for r in recs if r.key == key and r.offset < last]
        assert not older, f"tombstone of {key!r} at {last} removed but older records remain at {older}"
    if full:
        # After a whole forced cleaning, below the active segment each key has exactly its latest record
        # (below the active segment), unless that is a tombstone that may have expired.
        below = [r for r in recs if r.offset < active]
        keys = [r.key for r in below]
        assert len(keys) == len(set(keys)), "a key has more than one record below the active segment"
        latest = exp.latest(active)
        for r in below:
            assert latest[r.key] == r.offset, f"{r.key!r} at {r.offset} survived, its latest is {latest[r.key]}"
        for key, last in latest.items():
            assert last in by_offset or (exp.values[last] is None and last < expiry), \
                f"{key!r}: its latest record below the active segment ({last}) is gone"
    return recs


def _swap_state(directory: str) -> str:
    names = os.listdir(directory)
    if "cleaner.swap" in names:
        return "committed swap"
    if any(n.endswith(".swap") for n in names):
        return "renamed to .swap"
    if any(".cleaned" in n for n in names):
        return "writing .cleaned"
    return "no cleaner files"


def _kill_round(ctx: Any, child: Callable[..., None], root: str, report: str, rng: random.Random, kills: int,
                scripts: list[str], max_countdown: int, delays: tuple[float, ...]) -> tuple[str | None, float]:
    """One child run and killed: every ``SCRIPT_EVERY``-th round scripted to die at one of ``scripts``, the
    others in turn at the n-th file operation of its pass (``n`` up to ``max_countdown``, before or after
    it) or after a random delay (one of ``delays`` at most). Every choice of the round is drawn here,
    whatever happens then: the kinds of kills, their countdowns and the recoveries on a copy follow from
    the seed alone, not from timing. Returns the script (or None) and the roll for recovering on a copy."""
    script = None
    if kills % SCRIPT_EVERY == SCRIPT_AT:
        script = scripts[kills // SCRIPT_EVERY % len(scripts)]
    countdown, after = rng.randint(1, max_countdown), rng.random() < 0.5
    max_delay = rng.choice(delays)
    on_copy_roll = rng.random()
    round_rng = random.Random(rng.randrange(1 << 30))
    if script is not None:
        run_and_kill(ctx, child, (root, report, 0, False, script), round_rng, 0, self_kill=True)
    elif kills % 2:
        run_and_kill(ctx, child, (root, report, countdown, after, None), round_rng, 0, self_kill=True)
    else:
        run_and_kill(ctx, child, (root, report, 0, False, None), round_rng, max_delay=max_delay)
    return script, on_copy_roll


def _recovery_target(root: str, tmp_path: Any, kills: int, on_copy_roll: float) -> str:
    """Where a round's crash is recovered: the store itself, or (30% of rounds) a copy of it, after which
    the next child recovers the crash itself."""
    if on_copy_roll < 0.3:
        target = str(tmp_path / f"copy{kills}")
        shutil.copytree(root, target)
        return target
    return root


def test_sigkill_during_compaction(tmp_path):
    root = str(tmp_path / "store")
    report = str(tmp_path / "report")
    with _open(root) as store:
        store.create_topic(TOPIC, partitions=1, config=COMPACT_CONFIG)
        pdir = store.topic(TOPIC).partition(0).directory
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(20240711)
    exp = Expected()
    flushed = expiry = 0
    kills = 0
    states: dict[str, int] = {}
    scripted: dict[str, int] = {}
    on_copy = 0
    removed_by_parent = 0
    t0 = time.monotonic()
    while kills < COMPACT_KILLS:
        # Staggered delays: most land in the map / rewrite phases, some in the swap; the countdown kills at
        # the n-th swap rename/unlink of its compactions (or of its recovery of the last crash).
        script, on_copy_roll = _kill_round(ctx, _compact_child, root, report, rng, kills, list(COMPACT_SCRIPTS),
                                           30, (0.03, 0.08, 0.15))
        kills += 1
        rep_flushed, rep_expiry = _read_report(report, 2)
        assert rep_flushed >= flushed, f"reported flushed offset went back: {rep_flushed} < {flushed}"
        flushed, expiry = rep_flushed, max(expiry, rep_expiry)
        state = _swap_state(pdir)
        states[state] = states.get(state, 0) + 1
        if script is not None:
            assert state == script, f"a child scripted to die in state '{script}' left '{state}'"
            scripted[state] = scripted.get(state, 0) + 1

        # 1. A lock-free reader of the crashed state, before anyone recovers it.
        with _open(root) as store:
            p = store.topic(TOPIC).partition(0)
            verify_compacted(p, exp, flushed, expiry)
            assert not p.is_writer

        # 2. A writer recovers it: on the store itself, or on a copy (the next child then recovers the crash).
        target = _recovery_target(root, tmp_path, kills, on_copy_roll)
        on_copy += target != root
        with _open(target) as store:
            p = store.topic(TOPIC).partition(0)
            leo = p.log_end_offset
            end = append_expected(p, leo, 1)  # takes the writer lock: rolls the swap forward or back
            assert p.is_writer and p.log_end_offset == end
            assert cleaner_leftovers(p.directory) == [], f"after recovery from '{state}'"
            assert p.check() == []
            verify_compacted(p, exp, end, expiry)
            res = store.compact(TOPIC)
            removed_by_parent += res[0].records_removed
            assert cleaner_leftovers(p.directory) == []
            assert p.check() == []
            verify_compacted(p, exp, end, expiry, full=True)
        # The same through a fresh handle (what was renamed and fsynced is what a new process sees).
        with _open(target) as store:
            p = store.topic(TOPIC).partition(0)
            assert p.log_end_offset == end
            assert p.check() == []
            verify_compacted(p, exp, end, expiry, full=True)
        if target == root:
            flushed = end  # close() flushed it
            _write_report(report, flushed, expiry)
        else:
            shutil.rmtree(target)

    elapsed = time.monotonic() - t0
    with _open(root) as store:
        p = store.topic(TOPIC).partition(0)
        nsegs = len(p.segments)
        final = p.log_end_offset
    print(f"\ncompaction crash test: {kills} kills in {elapsed:.1f}s, states at kill {states} ({scripted} "
          f"scripted), {on_copy} recovered on a copy, log end {final}, {nsegs} segments, {removed_by_parent} "
          f"records removed by the parent")
    assert kills == COMPACT_KILLS
    # Each scripted child appended past three rolls of small batches (over two segments of records).
    assert final > 1000, "children wrote too little"
    # Every state a crash mid-swap can leave was met (and recovered from) a known number of times.
    n_scripted = len(range(SCRIPT_AT, COMPACT_KILLS, SCRIPT_EVERY))
    assert sum(scripted.values()) == n_scripted and set(scripted) == set(COMPACT_SCRIPTS), scripted
    assert min(scripted.values()) >= n_scripted // len(COMPACT_SCRIPTS), scripted


# ----------------------------------------------------------------------------- 2. SIGKILL during retention


def _checkpoint_rename(src: str, dst: str) -> bool:
    return os.path.basename(dst) == "partition.checkpoint"


def _retention_child(root: str, report: str, countdown: int, after: bool, script: str | None, ready_fd: int,
                     seed: int) -> None:
    """Append, flush, report; enforce retention or delete records; report: forever.
    Report = (flushed end, log start offset after the last completed maintenance call).
    ``script`` ("retention" or "delete_records"): first append past six rolls, flush and report, then do
    that, which deletes segments, and kill this process just after it recorded the new log start (the
    checkpoint's rename), before it unlinked any segment."""
    code = 0
    try:
        rng = random.Random(seed)
        switch = KillSwitch(countdown, after, renames=_checkpoint_rename)
        flushed, start = _read_report(report, 2)
        store = _open(root)
        p = store.topic(TOPIC).partition(0)
        nxt = p.log_end_offset
        os.write(ready_fd, b"R")
        with switch:
            nxt = append_expected(p, nxt, 1)  # becomes the writer: recovery, deletes segments below log start
        os.write(ready_fd, b"A")
        os.close(ready_fd)
        if script is not None:
            nxt = _append_past_rolls(p, nxt, 6)
            p.flush()
            _write_report(report, nxt, start)
            with KillSwitch(1, True, renames=_checkpoint_rename, unlinks=False):
                if script == "retention":
                    store.enforce_retention(TOPIC)
                else:
                    store.delete_records(TOPIC, 0, nxt)
            raise AssertionError(f"scripted {script} recorded no new log start")
        while True:
            nxt = append_expected(p, nxt, rng.randint(1, 40))
            p.flush()
            flushed = nxt
            _write_report(report, flushed, start)
            x = rng.random()
            with switch:
                if x < 0.45:
                    store.enforce_retention(TOPIC)
                elif x < 0.55:
                    store.enforce_retention(TOPIC, now=int(time.time() * 1000) + FAR_FUTURE)  # everything expires
                elif x < 0.85:
                    store.delete_records(TOPIC, 0, rng.randint(p.log_start_offset, nxt))
            start = p.log_start_offset
            _write_report(report, flushed, start)
    except BaseException:
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def verify_retained(p: pylog.Partition, exp: Expected, flushed: int, min_start: int) -> tuple[int, int]:
    """Returns (log start, log end)."""
    leo = p.log_end_offset
    start = p.log_start_offset
    assert leo >= flushed, f"flushed records lost: log end {leo} < flushed {flushed}"
    assert min_start <= start <= leo, f"log start {start} outside [{min_start}, {leo}]"
    recs = read_all(p, start)
    check_content(recs, exp, leo)
    assert [r.offset for r in recs] == list(range(start, leo)), \
        f"records from the log start {start} to the log end {leo} are not dense"
    if start > 0:
        for below in (start - 1, 0):
            with pytest.raises(pylog.OffsetOutOfRangeError):
                p.read(below)
    return start, leo


def wholly_below(directory: str, start: int) -> list[int]:
    """Base offsets of segment files whose successor starts at or below ``start``."""
    bases = sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
    return [b for b, nxt in zip(bases, bases[1:]) if nxt <= start]


def test_sigkill_during_retention(tmp_path):
    root = str(tmp_path / "store")
    report = str(tmp_path / "report")
    with _open(root) as store:
        store.create_topic(TOPIC, partitions=1, config=RETENTION_CONFIG)
        pdir = store.topic(TOPIC).partition(0).directory
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(20240712)
    exp = Expected()
    flushed = min_start = 0
    kills = 0
    mid_delete = 0
    scripted: dict[str, int] = {}
    on_copy = 0
    t0 = time.monotonic()
    while kills < RETENTION_KILLS:
        script, on_copy_roll = _kill_round(ctx, _retention_child, root, report, rng, kills,
                                           ["retention", "delete_records"], 8, (0.02, 0.05, 0.1))
        kills += 1
        rep_flushed, rep_start = _read_report(report, 2)
        assert rep_flushed >= flushed, f"reported flushed offset went back: {rep_flushed} < {flushed}"
        flushed, min_start = rep_flushed, max(min_start, rep_start)

        # 1. A lock-free reader of the crashed state.
        with _open(root) as store:
            p = store.topic(TOPIC).partition(0)
            start, _ = verify_retained(p, exp, flushed, min_start)
            if wholly_below(pdir, start):
                mid_delete += 1  # killed after recording the new log start, before unlinking everything
            if script is not None:
                assert start > 0 and wholly_below(pdir, start), \
                    f"a child scripted to die mid-{script} left log start {start} and no segment below it"
                scripted[script] = scripted.get(script, 0) + 1

        # 2. A writer recovers it (sometimes on a copy: then the next child recovers the crash itself).
        target = _recovery_target(root, tmp_path, kills, on_copy_roll)
        on_copy += target != root
        with _open(target) as store:
            p = store.topic(TOPIC).partition(0)
            leo = p.log_end_offset
            end = append_expected(p, leo, 1)
            assert p.is_writer and p.log_end_offset == end
            assert p.check() == []
            start, _ = verify_retained(p, exp, end, min_start)
            assert wholly_below(p.directory, start) == [], "segments wholly below the log start survived the open"
            assert [s.base_offset for s in p.segments] == sorted(
                int(n[:-4]) for n in os.listdir(p.directory) if n.endswith(".log"))
        with _open(target) as store:
            p = store.topic(TOPIC).partition(0)
            assert p.check() == []
            assert verify_retained(p, exp, end, min_start) == (start, end)
        if target == root:
            flushed = end
            min_start = start
            _write_report(report, flushed, min_start)
        else:
            shutil.rmtree(target)

    elapsed = time.monotonic() - t0
    with _open(root) as store:
        p = store.topic(TOPIC).partition(0)
        final = p.log_end_offset
        start = p.log_start_offset
    print(f"\nretention crash test: {kills} kills in {elapsed:.1f}s, {mid_delete} between recording the log start "
          f"and unlinking ({scripted} scripted), {on_copy} recovered on a copy, log [{start}, {final})")
    assert kills == RETENTION_KILLS
    assert final > 1000, "children wrote too little"  # each scripted child appended past six rolls
    assert start > 0
    # Kills between recording the log start and unlinking the segments below it, by both ways of raising
    # it, a known number of times (and each recovered from, checked above).
    n_scripted = len(range(SCRIPT_AT, RETENTION_KILLS, SCRIPT_EVERY))
    assert sum(scripted.values()) == n_scripted and set(scripted) == {"retention", "delete_records"}, scripted
    assert mid_delete >= n_scripted


# ----------------------------------------------------------------------------- 3. a reader process vs maintenance


CONCURRENT_CONFIG = {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0.01,
                     "delete.retention.ms": DAY_MS, "segment.bytes": SEGMENT_BYTES,
                     "retention.bytes": SEGMENT_BYTES, "retention.ms": 7 * DAY_MS}
WRITER_STEPS = 1200
#: Steps at which the writer stops the reader, raises the log start past the reader's position and lets
#: it go on: the reader then must get OffsetOutOfRangeError and jump to the log start.
STOP_READER_AT = (200, 500, 800, 1100)


def _handshake(fd_out: int, fd_in: int, send: bytes, n: int) -> bytes:
    os.write(fd_out, send)
    ready, _, _ = select.select([fd_in], [], [], 60)
    assert ready, f"no answer within 60 s to {send!r}"
    got = os.read(fd_in, n)
    assert len(got) == n, f"short answer {got!r} to {send!r}"
    return got


def _writer_proc(root: str, result: str, seed: int, to_reader: int, from_reader: int) -> None:
    """Append and maintain for WRITER_STEPS steps; at STOP_READER_AT, stop the reader ("P": it answers its
    position), append and delete records past that position, and let it go on ("G", it answers "K")."""
    code = 0
    try:
        rng = random.Random(seed)
        stats = {"compactions": 0, "removed": 0, "retention_deleted": 0, "delete_records": 0, "stopped": 0}
        with _open(root) as store:
            p = store.topic(TOPIC).partition(0)
            nxt = p.log_end_offset
            for step in range(WRITER_STEPS):
                if step in STOP_READER_AT:
                    pos = struct.unpack("<q", _handshake(to_reader, from_reader, b"P", 8))[0]
                    nxt = append_expected(p, nxt, 20)
                    low = max(pos + 1, p.log_start_offset)  # (where the reader is is up to timing)
                    p.delete_records(low + int(rng.random() * (nxt - low + 1)))
                    assert p.log_start_offset > pos
                    stats["stopped"] += 1
                    assert _handshake(to_reader, from_reader, b"G", 1) == b"K"
                nxt = append_expected(p, nxt, rng.randint(1, 50))
                x = rng.random()
                if x < 0.3:
                    r = store.compact(TOPIC)[0]
                    stats["compactions"] += 1
                    stats["removed"] += r.records_removed
                elif x < 0.4:
                    stats["retention_deleted"] += len(store.enforce_retention(TOPIC)[0].deleted_segments)
                elif x < 0.45:
                    # One draw whatever the range, so that the writer's choices follow from the seed alone.
                    start = p.log_start_offset
                    p.delete_records(start + int(rng.random() * (min(nxt, start + 1000) - start + 1)))
                    stats["delete_records"] += 1
                if rng.random() < 0.3:
                    p.flush()
                time.sleep(rng.uniform(0, 0.002))
            stats["end"] = p.log_end_offset
        with open(result + ".tmp", "w") as f:
            json.dump(stats, f)
        os.replace(result + ".tmp", result)
    except BaseException:
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def _reader_proc(root: str, result: str, stop: str, seed: int, from_writer: int, to_writer: int) -> None:
    """Follow the log from offset 0 (pausing now and then to fall behind); on OffsetOutOfRangeError jump to
    the log start. Stops at the log end the parent names in ``stop`` once the writer has finished.

    When the writer says "P", answer the position and wait for "G": the log start is then past it. Every
    other time go on with a new handle (a consumer process restarting from its committed offset), else with
    the same one, once it sees the new log start (asking for it, as a consumer resetting to earliest does)."""
    code = 0
    out = {"seen": 0, "resets": 0, "reads": 0, "errors": [], "pos": 0, "stopped": 0}
    try:
        rng = random.Random(seed)
        exp = Expected()
        store = _open(root)
        try:
            p = store.topic(TOPIC).partition(0)
            pos = 0
            last = -1
            final = None
            next_pause = time.monotonic() + 0.5
            pauses = 0
            while len(out["errors"]) < 20:
                if final is None and time.monotonic() > next_pause:
                    # Fall behind now and then, so that compaction and retention remove records under us;
                    # every other time also restart (a new handle, keeping the position), like a consumer
                    # process restarting from its committed offset.
                    time.sleep(0.5)
                    pauses += 1
                    if pauses % 2 == 0:
                        store.close()
                        store = _open(root)
                        p = store.topic(TOPIC).partition(0)
                    next_pause = time.monotonic() + 0.5
                if select.select([from_writer], [], [], 0)[0]:
                    assert os.read(from_writer, 1) == b"P"
                    assert _handshake(to_writer, from_writer, struct.pack("<q", pos), 1) == b"G"
                    out["stopped"] += 1
                    if out["stopped"] % 2:
                        store.close()
                        store = _open(root)
                        p = store.topic(TOPIC).partition(0)
                    else:
                        deadline = time.monotonic() + 60  # a hang guard
                        while p.log_start_offset <= pos:
                            assert time.monotonic() < deadline, "the reader never saw the raised log start"
                            time.sleep(0.001)
                    os.write(to_writer, b"K")
                    try:
                        p.read(pos)
                        out["errors"].append(f"read at {pos}, below the log start {p.log_start_offset}, succeeded")
                    except pylog.OffsetOutOfRangeError:
                        pass
                try:
                    recs = p.read(pos, max_records=rng.choice((1, 7, 50, 500)))
                except pylog.OffsetOutOfRangeError as exc:
                    start = p.log_start_offset
                    if start > pos:
                        pos = start
                        out["resets"] += 1
                    else:
                        out["errors"].append(f"OffsetOutOfRangeError at {pos} but the log start is {start}: {exc}")
                        time.sleep(0.01)
                    continue
                except Exception:
                    out["errors"].append(traceback.format_exc())
                    break
                out["reads"] += 1
                if recs:
                    exp.extend_to(recs[-1].offset + 1)
                for r in recs:
                    if r.offset <= last:
                        out["errors"].append(f"offset {r.offset} after {last} (read at {pos})")
                    elif r.offset < pos:
                        out["errors"].append(f"offset {r.offset} below the read position {pos}")
                    elif (r.key, r.value) != (exp.keys[r.offset], exp.values[r.offset]):
                        out["errors"].append(f"record at {r.offset} is {(r.key, r.value)!r}, written "
                                             f"{(exp.keys[r.offset], exp.values[r.offset])!r}")
                    last = max(last, r.offset)
                    out["seen"] += 1
                if recs:
                    pos = max(pos, recs[-1].offset + 1)
                    continue
                if final is None and os.path.exists(stop):
                    with open(stop) as f:
                        final = int(f.read())
                if final is not None and pos >= final:
                    break
                time.sleep(0.001)
            out["pos"] = pos
        finally:
            store.close()
    except BaseException:
        out["errors"].append(traceback.format_exc())
        code = 3
    finally:
        try:
            with open(result + ".tmp", "w") as f:
                json.dump(out, f)
            os.replace(result + ".tmp", result)
        finally:
            os._exit(code)


def test_reader_process_during_compaction_and_deletion(tmp_path):
    root = str(tmp_path / "store")
    with _open(root) as store:
        store.create_topic(TOPIC, partitions=1, config=CONCURRENT_CONFIG)
    ctx = multiprocessing.get_context("fork")
    wres, rres, stop = (str(tmp_path / n) for n in ("writer.json", "reader.json", "stop"))
    w2r_r, w2r_w = os.pipe()
    r2w_r, r2w_w = os.pipe()
    reader = ctx.Process(target=_reader_proc, args=(root, rres, stop, 7, w2r_r, r2w_w), daemon=True)
    writer = ctx.Process(target=_writer_proc, args=(root, wres, 11, w2r_w, r2w_r), daemon=True)
    try:
        reader.start()
        writer.start()
        for fd in (w2r_r, w2r_w, r2w_r, r2w_w):
            os.close(fd)
        writer.join(300)  # a hang guard
        assert writer.exitcode == 0, f"writer exit code {writer.exitcode}"
        with open(wres) as f:
            wstats = json.load(f)
        with open(stop + ".tmp", "w") as f:
            f.write(str(wstats["end"]))
        os.replace(stop + ".tmp", stop)
        reader.join(30)
        assert reader.exitcode is not None, "reader did not reach the log end within 30 s of the writer stopping"
    finally:
        for proc in (reader, writer):
            if proc.is_alive():
                proc.kill()
                proc.join(10)
    with open(rres) as f:
        rstats = json.load(f)
    print(f"\nwriter: {wstats}\nreader: { {k: v for k, v in rstats.items() if k != 'errors'} }")
    for err in rstats["errors"][:5]:
        print(f"reader error: {err}")
    assert rstats["errors"] == [], "\n".join(rstats["errors"][:5])
    assert reader.exitcode == 0
    assert rstats["pos"] == wstats["end"]
    assert rstats["seen"] > 1000
    # Each stop raised the log start past the reader, whose next read then reset it (more resets come from
    # its own pauses, as timing has it).
    assert wstats["stopped"] == rstats["stopped"] == len(STOP_READER_AT)
    assert rstats["resets"] >= len(STOP_READER_AT), "the reader did not reset after falling behind the log start"
    assert wstats["compactions"] > 10 and wstats["removed"] > 0, wstats
    assert wstats["retention_deleted"] > 0 and wstats["delete_records"] > 0, wstats
    with _open(root) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.check() == []
        assert p.log_end_offset == wstats["end"]
        exp = Expected()
        recs = read_all(p, p.log_start_offset)
        check_content(recs, exp, wstats["end"])
        assert cleaner_leftovers(p.directory) == []


# ----------------------------------------------------------------------------- 4. a consumer at the head


def test_consumer_at_head_sees_every_record(tmp_path):
    """Write some, read to the end, compact: a consumer that is at the head before every cleaning sees
    every record ever written, dense, through the writer's handle and through a reader-only handle."""
    root = str(tmp_path / "store")
    rng = random.Random(5)
    exp = Expected()
    with _open(root) as wstore, _open(root) as rstore:
        wstore.create_topic(TOPIC, partitions=1, config=COMPACT_CONFIG)
        wp = wstore.topic(TOPIC).partition(0)
        rp = rstore.topic(TOPIC).partition(0)
        consumers = {"writer handle": [wp, 0], "reader handle": [rp, 0]}
        nxt = 0
        removed = 0
        for i in range(150):
            nxt = append_expected(wp, nxt, rng.randint(1, 60))
            exp.extend_to(nxt)
            for name, c in consumers.items():
                p, pos = c
                while True:
                    recs = p.read(pos, max_records=rng.choice((3, 40, 500)))
                    if not recs:
                        break
                    for r in recs:
                        assert r.offset == pos, f"{name}: offset {r.offset}, expected {pos} (iteration {i})"
                        assert (r.key, r.value) == (exp.keys[pos], exp.values[pos]), f"{name}: record at {pos}"
                        pos += 1
                assert pos == nxt, f"{name} stopped at {pos}, log end {nxt}"
                c[1] = pos
            now = int(time.time() * 1000) + FAR_FUTURE if rng.random() < 0.15 else None
            removed += wstore.compact(TOPIC, now=now)[0].records_removed
        assert removed > nxt // 2, "compaction removed too little to mean anything"
        assert wp.check() == []
        for name, (p, pos) in consumers.items():
            assert pos == nxt, name


# ----------------------------------------------------------------------------- 5. a reader handle older than the files


def test_reader_handle_opened_before_repeated_compactions(tmp_path):
    """A reader handle opened (segments listed, nothing read yet), then compactions that replace segments
    under their names, then one read of the whole log: it must succeed and include every record the writer
    reads (it may also show superseded records of files it still holds, with their written values).

    Compaction frees the inode of each file it replaces, and file systems hand freed inode numbers out
    again at once (ext4 does), so a replaced segment's new file often has the inode number of the file the
    handle listed a few compactions ago. Before every compaction, handles are opened that read after the
    2nd, 3rd and 4th compaction from then."""
    root = str(tmp_path / "store")
    rng = random.Random(3)
    exp = Expected()
    with _open(root) as wstore:
        wstore.create_topic(TOPIC, partitions=1, config=COMPACT_CONFIG)
        wp = wstore.topic(TOPIC).partition(0)
        nxt = 0
        for _ in range(40):
            nxt = append_expected(wp, nxt, 50)
        wstore.compact(TOPIC)
        handles: list = []  # (compaction count at which to read, store, partition, what it listed)
        try:
            for step in range(80):
                for age in (2, 3, 4):
                    rstore = _open(root)
                    rp = rstore.topic(TOPIC).partition(0)
                    listed = {s.base_offset: (s.size, os.stat(s.log_path).st_ino) for s in rp.segments}
                    handles.append((step + age, rstore, rp, listed))
                nxt = append_expected(wp, nxt, rng.randint(20, 200))
                wstore.compact(TOPIC)
                want = {r.offset for r in read_all(wp, 0)}
                due = [h for h in handles if h[0] == step + 1]
                handles = [h for h in handles if h[0] != step + 1]
                for _, rstore, rp, listed in due:
                    reused = [(s.base_offset, listed[s.base_offset][0], s.size) for s in wp.segments
                              if s.base_offset in listed and s.size != listed[s.base_offset][0]
                              and os.stat(s.log_path).st_ino == listed[s.base_offset][1]]
                    try:
                        got = read_all(rp, 0)
                    except pylog.CorruptRecordError as exc:
                        raise AssertionError(
                            f"step {step}: a reader handle's read failed; segments now held by a file with the "
                            f"inode number the handle listed (base, size listed, size now): {reused}") from exc
                    finally:
                        rstore.close()
                    check_content(got, exp, nxt)
                    missing = sorted(want - {r.offset for r in got})
                    assert not missing, (
                        f"step {step}: a reader handle missed {len(missing)} records of the log, e.g. {missing[:8]}; "
                        f"segments now held by a file with the inode number the handle listed (base, size listed, "
                        f"size now): {reused}")
        finally:
            for _, rstore, _, _ in handles:
                rstore.close()
