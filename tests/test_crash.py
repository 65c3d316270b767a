"""Crash test with real processes: a writer child is SIGKILLed at random moments, over and over.

Every child opens the same store, continues appending where the log ends (recovering it first when the
previous child died), and after each ``flush()`` reports the flushed log end offset through a small file
replaced atomically. Most children run freely and the parent kills one 0-50 ms after it says it is ready
(the random moment is the point: the kill lands anywhere among appends, flushes, rolls and recovery).
Every fifth child is scripted instead, so that each branch below runs a known number of times whatever
the machine's speed: it appends past a roll and a flush, then a few batches more without flushing, says
so and waits to be killed (a power loss then tears those batches); the child after it is killed before
its first append (which would recover the torn tail), so a reader meets the torn tail. The parent then
reopens the store and checks that

* every record below the last reported flushed offset is there, byte-identical to the generator's,
* offsets are dense from 0 and batches are exactly the generator's batches (no partial batch),
* records past the flushed offset (the kernel keeps unflushed writes when only the process dies) are
  exactly the expected ones as well,
* ``check()`` finds nothing, both as a lock-free reader and after recovery as the writer,
* a reader opened at the very start keeps up across every kill, recovery and roll,
* at the end, a last writer recovers whatever the last kill left (maybe a torn tail) and ``check()`` then
  finds nothing, as that writer and as a reader after its clean close.

Sometimes a kill is turned into a simulated power loss: the unflushed end of the active segment is cut
at a random byte and maybe followed by zeros or garbage (the index pages may survive when the log's do
not); readers must then stop at the last whole batch and the next writer must recover from there. Until a
writer has, ``check()`` as a lock-free reader reports that tail (as ``pylog verify`` does), and nothing else.

The random choices come from one seed (``PYLOG_CRASH_SEED``, printed with ``-s``); replaying it repeats
every choice, not the kill moments, which depend on timing.

Content is a pure function of offsets: a batch starting at offset ``o`` has a size (1..200), a key mode and
a header mode drawn from ``random.Random(o)``; a record's value is ``f"{offset}:"`` plus bytes hashed from
the offset. Because recovery only ever cuts whole batches, the log end is always a batch start, so the
whole batch sequence follows from offset 0.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import select
import signal
import struct
import time

import numpy as np
import pytest

import pylog
from pylog.index import IndexError_, OffsetIndex

TOPIC = "events"
SEGMENT_BYTES = 64 * 1024
KILLS = 60
SCRIPT_EVERY = 5  # kill i with i % SCRIPT_EVERY == HOLD_AT: "hold" child, then a "stop" child
HOLD_AT = 2
SEED = int(os.environ.get("PYLOG_CRASH_SEED", "20240601"))

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")]


def _readable(fd: int, timeout_s: float) -> list[int]:
    """``[fd]`` once ``fd`` can be read (or is closed), ``[]`` after ``timeout_s``: poll, not select, which
    refuses descriptors numbered 1024 and above (the suite's process may hold that many)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return [fd] if poller.poll(timeout_s * 1000) else []


# ----------------------------------------------------------------------------- deterministic content


def _record(o: int, key_mode: int, hdr_mode: int) -> tuple[bytes, bytes | None, tuple]:
    d = hashlib.blake2b(struct.pack("<Q", o), digest_size=64).digest()
    value = f"{o}:".encode() + (d * 2)[: d[0] % 120]
    if key_mode == 0:
        key = None
    elif key_mode == 1:
        key = b"k%d" % (o % 1000)
    else:  # mixed: some null keys, some empty keys
        key = None if d[1] % 3 == 0 else (b"" if d[1] % 3 == 1 else d[2:2 + d[3] % 20])
    if hdr_mode == 0 or (hdr_mode == 2 and d[4] % 2):
        headers: tuple = ()
    else:
        headers = (("o", str(o).encode()), ("h", d[5:5 + d[6] % 10]), ("null", None))
    return value, key, headers


def expected_batch(first: int) -> tuple[list[bytes], list[bytes | None] | None, list | None]:
    """values, keys (None: no keys), headers (None: none) of the batch the generator puts at ``first``."""
    rng = random.Random(first * 1_000_003 + 17)
    n = rng.randint(1, 200)
    key_mode = rng.choice((0, 0, 1, 2))
    hdr_mode = rng.choice((0, 0, 0, 1, 2))
    recs = [_record(o, key_mode, hdr_mode) for o in range(first, first + n)]
    values = [r[0] for r in recs]
    keys = None if key_mode == 0 else [r[1] for r in recs]
    headers = None if hdr_mode == 0 else [list(r[2]) if r[2] else None for r in recs]
    return values, keys, headers


def append_expected(p: pylog.Partition, first: int) -> int:
    """Append the generator's batch for ``first``; returns the offset after it."""
    values, keys, headers = expected_batch(first)
    got = p.append_values(values, keys=keys, headers=headers)
    assert got == first, f"append at {first} landed at {got}"
    return first + len(values)


class Expected:
    """The generator's records as flat columns, extended lazily, for fast whole-prefix comparisons."""

    def __init__(self) -> None:
        self.starts = [0]  # batch starts; starts[-1] is the end of what is generated
        self.start_set = {0}
        self.vlens: list[int] = []
        self.klens: list[int] = []
        self.vpos = [0]
        self.kpos = [0]
        self.vdata = bytearray()
        self.kdata = bytearray()
        self.headers: list[tuple] = []
        self.values: list[bytes] = []
        self.keys: list[bytes | None] = []

    def extend_to(self, offset: int) -> None:
        while self.starts[-1] < offset:
            first = self.starts[-1]
            values, keys, headers = expected_batch(first)
            for i, v in enumerate(values):
                k = None if keys is None else keys[i]
                h = () if headers is None or not headers[i] else tuple(headers[i])
                self.values.append(v)
                self.keys.append(k)
                self.headers.append(h)
                self.vlens.append(len(v))
                self.vdata += v
                self.vpos.append(len(self.vdata))
                self.klens.append(-1 if k is None else len(k))
                if k:
                    self.kdata += k
                self.kpos.append(len(self.kdata))
            nxt = first + len(values)
            self.starts.append(nxt)
            self.start_set.add(nxt)


# ----------------------------------------------------------------------------- the child


def _crash_child(root: str, report: str, ready_fd: int, cmd_fd: int, seed: int) -> None:
    """Say "R", read the parent's command, then: ``g`` append the generator's batches forever, flushing now
    and then and reporting each flushed end; ``h`` append past a roll, flush and report, append 1-3 batches
    more without flushing, say "H" and wait to be killed; ``s`` wait to be killed before any append."""
    code = 0
    try:
        rng = random.Random(seed)
        store = pylog.open(root)
        p = store.topic(TOPIC).partition(0)
        nxt = p.log_end_offset  # as a reader; the first append recovers as the writer and must agree
        tmp = report + ".tmp"

        def flush_and_report() -> None:
            p.flush()
            with open(tmp, "wb") as f:
                f.write(struct.pack("<Q", nxt))
            os.replace(tmp, report)

        os.write(ready_fd, b"R")
        cmd = os.read(cmd_fd, 1)
        if cmd == b"s":
            os.read(cmd_fd, 1)  # never comes: the parent kills us here
        nxt = append_expected(p, nxt)  # took the writer lock and recovered
        os.write(ready_fd, b"A")
        if cmd == b"h":
            segments = len(p.segments)
            while len(p.segments) == segments:
                nxt = append_expected(p, nxt)
            flush_and_report()
            for _ in range(rng.randint(1, 3)):
                nxt = append_expected(p, nxt)
            os.write(ready_fd, b"H")
            os.read(cmd_fd, 1)  # never comes: the parent kills us here
        os.close(ready_fd)
        while True:
            if rng.random() < 0.4:
                flush_and_report()
            nxt = append_expected(p, nxt)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def _read_report(report: str) -> int:
    try:
        with open(report, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return 0
    assert len(raw) == 8, f"torn report file ({len(raw)} bytes)"
    return struct.unpack("<Q", raw)[0]


# ----------------------------------------------------------------------------- verification


def verify(p: pylog.Partition, exp: Expected, flushed: int, reread_from: int, power_loss: bool = False) -> int:
    """Check the whole partition against the generator; returns its log end offset.

    ``power_loss``: the active segment's tail was cut and maybe followed by zeros or garbage (see
    _tear_tail) and no writer has recovered it yet: check() reports that tail, and nothing else.
    """
    leo = p.log_end_offset
    assert p.log_start_offset == 0
    assert leo >= flushed, f"flushed records lost: log end {leo} < flushed {flushed}"
    exp.extend_to(leo)
    assert leo in exp.start_set, f"log end {leo} is not a batch boundary of the generator"
    problems = p.check()
    if power_loss:
        active = p.segments[-1].log_path if p.segments else None
        problems = [m for m in problems if not (m.startswith(f"{active}@") and "after the last valid batch" in m)]
    assert problems == [], problems

    # Batch structure: exactly the generator's batches, dense from 0, segments contiguous.
    bounds = []
    prev_end = 0
    for seg in p.segments:
        if seg.size == 0:
            continue
        assert seg.base_offset == prev_end, f"segment {seg.base_offset} does not start at {prev_end}"
        for _, h in seg.batch_headers():
            assert h.base_offset == prev_end, f"batch at {h.base_offset}, expected {prev_end}"
            bounds.append(h.base_offset)
            prev_end = h.last_offset + 1
    assert prev_end == leo
    assert bounds == exp.starts[:len(bounds)] and (not bounds or exp.starts[len(bounds)] == leo)

    # Every byte of every record, in columns (one comparison per column).
    got_n = 0
    chunk = 60_000
    while got_n < leo:
        cols = p.read_columns(got_n, max_records=chunk)
        n = len(cols)
        assert n > 0, f"read_columns({got_n}) returned nothing below log end {leo}"
        lo, hi = got_n, got_n + n
        assert hi <= leo
        assert np.array_equal(cols.offsets, np.arange(lo, hi)), f"offsets not dense in [{lo}, {hi})"
        assert cols.value_lengths.tolist() == exp.vlens[lo:hi]
        assert cols.value_data == bytes(exp.vdata[exp.vpos[lo]:exp.vpos[hi]]), f"values differ in [{lo}, {hi})"
        assert cols.key_lengths.tolist() == exp.klens[lo:hi]
        assert cols.key_data == bytes(exp.kdata[exp.kpos[lo]:exp.kpos[hi]]), f"keys differ in [{lo}, {hi})"
        hdrs = [tuple(h) if h else () for h in cols.headers] if cols.headers is not None else [()] * n
        assert hdrs == exp.headers[lo:hi], f"headers differ in [{lo}, {hi})"
        got_n = hi
    assert p.read_columns(leo).offsets.size == 0

    # The row API over the part not re-read before (plus a little before it).
    start = max(0, min(reread_from, leo) - 50)
    off = start
    while off < leo:
        recs = p.read(off, max_records=2000)
        assert recs, f"read({off}) returned nothing below log end {leo}"
        for r in recs:
            assert r.offset == off
            assert r.value == exp.values[off], f"value at {off}"
            assert r.key == exp.keys[off], f"key at {off}"
            assert tuple(r.headers) == exp.headers[off], f"headers at {off}"
            off += 1
    assert off == leo
    return leo


def _tear_tail(root: str, flushed: int, rng: random.Random, mid_batch: bool = False) -> int | None:
    """Cut the active segment's log at a random byte past the flushed data, maybe add zeros or garbage.

    ``mid_batch``: cut strictly inside the last batch, so that part of a batch is left on disk.

    Returns the log end offset a reader must then see: the start of the first batch that was cut; None
    (and nothing done) when the active segment holds no unflushed bytes, or when its offset index is
    already sealed (the kill came in the middle of a roll). Only the active segment is torn here: a roll's
    background fsync may not have finished either, and a power cut taking that segment's tail is tested in
    tests/test_background_sync.py.
    """
    with pylog.open(root) as store:
        seg = store.topic(TOPIC).partition(0).segments[-1]
        batches = [(pos + h.size, h.base_offset, h.last_offset + 1) for pos, h in seg.batch_headers()]
        path, base = seg.log_path, seg.base_offset
    try:
        index = OffsetIndex.open(seg.index_path, base)
    except IndexError_:
        pass  # killed while creating the segment: no index yet
    else:
        sealed = index.sealed
        index.close()
        if sealed:
            return None  # killed in the middle of a roll: sealing fsyncs the log before the index
    size = os.path.getsize(path)
    keep = max([end for end, first, _ in batches if first < flushed], default=0)  # the flushed bytes
    if keep >= size:
        return None
    if mid_batch:
        last_start = max([end for end, _, _ in batches[:-1]], default=0)
        assert batches and batches[-1][0] == size and last_start >= keep, "the last batch is not unflushed"
        cut = rng.randrange(last_start + 1, size)
    else:
        cut = rng.randrange(keep, size)
    os.truncate(path, cut)
    junk = rng.choice((0, 0, 1, 2))
    if junk:
        with open(path, "ab") as f:
            n = rng.randint(1, 9000)
            f.write(bytes(n) if junk == 1 else rng.randbytes(n))
    leo = base
    for end, _, nxt in batches:
        if end > cut:
            break
        leo = nxt
    return leo


# ----------------------------------------------------------------------------- the test


def test_sigkill_writer_repeatedly(tmp_path):
    root = str(tmp_path / "store")
    report = str(tmp_path / "flushed")
    with pylog.open(root) as store:
        store.create_topic(TOPIC, partitions=1, config={"segment.bytes": SEGMENT_BYTES,
                                                         "segment.index.bytes": 64 * 1024,
                                                         "index.interval.bytes": 1024})
    ctx = multiprocessing.get_context("fork")
    print(f"\ncrash test seed {SEED} (replay the choices with PYLOG_CRASH_SEED={SEED})")
    rng = random.Random(SEED)
    exp = Expected()
    flushed = 0
    verified_to = 0
    kills = 0
    advanced = 0
    appended = 0  # kills after the child said it had appended: each must have advanced the log
    writer_recoveries = 0
    torn_or_unflushed = 0
    torn = 0
    simulated = 0
    # A reader that stays open across every kill, recovery and roll: it must keep up with all of them.
    long_reader = pylog.open(root)
    lr = long_reader.topic(TOPIC).partition(0)
    lr_verified = 0
    # A simulated power loss left a torn tail that no writer has recovered yet: a child killed before its
    # first append (which recovers) leaves it there for the next look.
    unrecovered_tail = False
    t0 = time.monotonic()
    try:
        while kills < KILLS:
            # Every random choice of this round is drawn here, whatever happens below: the sequence of
            # choices (and so the number of scripted kills, waits for the first append, parent recoveries)
            # does not depend on timing.
            mode = {HOLD_AT: b"h", HOLD_AT + 1: b"s"}.get(kills % SCRIPT_EVERY, b"g")
            child_seed = rng.randrange(1 << 30)
            wait_first_append = rng.random() < 0.7
            delay = rng.uniform(0, 0.05)
            tear_roll = rng.random()
            tear_rng = random.Random(rng.randrange(1 << 30))
            recover_roll = rng.random()

            r_fd, w_fd = os.pipe()
            cmd_r, cmd_w = os.pipe()
            child = ctx.Process(target=_crash_child, args=(root, report, w_fd, cmd_r, child_seed), daemon=True)
            try:
                child.start()
                os.close(w_fd)
                os.close(cmd_r)
                w_fd = cmd_r = -1
                ready = _readable(r_fd, 60)
                assert ready, "child did not get ready within 60 s"
                assert os.read(r_fd, 1) == b"R", f"child failed before getting ready (exit code {child.exitcode})"
                os.write(cmd_w, mode)
                if mode == b"h":
                    for want in (b"A", b"H"):
                        ready = _readable(r_fd, 60)
                        assert ready and os.read(r_fd, 1) == want, f"scripted child failed ({child.exitcode})"
                    unrecovered_tail = False
                    appended += 1
                elif mode == b"g":
                    if wait_first_append:
                        # Mostly count from the first append, which recovers the log and can take tens of ms:
                        # then the kill lands among appends, flushes and rolls. Otherwise it may hit recovery.
                        ready = _readable(r_fd, 60)
                        assert ready and os.read(r_fd, 1) == b"A", \
                            f"child failed in its first append ({child.exitcode})"
                        unrecovered_tail = False
                        appended += 1
                    # Not synchronisation: a random moment to kill at is what this test is about.
                    time.sleep(delay)
                assert child.is_alive(), f"child died by itself (exit code {child.exitcode})"
                os.kill(child.pid, signal.SIGKILL)
                child.join(30)
                assert child.exitcode == -signal.SIGKILL, f"child exit code {child.exitcode}"
                if unrecovered_tail and _readable(r_fd, 0) and os.read(r_fd, 1) == b"A":
                    unrecovered_tail = False  # it got through its first append, which recovered the tail
            finally:
                if child.is_alive():
                    child.kill()
                    child.join(10)
                for fd in (r_fd, w_fd, cmd_r, cmd_w):
                    if fd >= 0:
                        os.close(fd)
            kills += 1

            reported = _read_report(report)
            assert reported >= flushed, f"reported flushed offset went back: {reported} < {flushed}"
            flushed = reported

            # 1. A lock-free reader, before anyone recovers the log.
            with pylog.open(root) as store:
                p = store.topic(TOPIC).partition(0)
                leo = verify(p, exp, flushed, verified_to, power_loss=unrecovered_tail)
                assert not p.is_writer
                last = p.segments[-1] if p.segments else None
                if last is not None and os.path.getsize(last.log_path) > last.size:
                    torn += 1  # a partly written batch at the end, which the reader rightly ignored
                elif mode == b"s":
                    pytest.fail("the torn tail of the previous (simulated) power loss is gone before recovery")
            if leo > verified_to:
                advanced += 1
            if leo > flushed:
                torn_or_unflushed += 1
            elif mode == b"h":
                pytest.fail(f"a child killed with unflushed batches left none: log end {leo}, flushed {flushed}")
            verified_to = leo
            # The same, through the reader opened before everything (it saw the previous log, mid-write).
            assert verify(lr, exp, flushed, lr_verified, power_loss=unrecovered_tail) == leo, \
                "the long-lived reader disagrees on the log end"
            lr_verified = leo

            # 1b. Sometimes make it a power loss instead (always after a "hold" child): unflushed bytes at the
            #     end of the active segment are partly lost (cut at a random byte) and maybe followed by
            #     zeros or garbage. Nothing flushed is touched. No process survives a power loss, so the
            #     long-lived reader restarts.
            if mode == b"h":
                torn_end = _tear_tail(root, flushed, tear_rng, mid_batch=True)
                assert torn_end is not None, "the scripted power loss found nothing to tear"
            elif leo > flushed and tear_roll < 0.3:
                torn_end = _tear_tail(root, flushed, tear_rng)
            else:
                torn_end = None
            if torn_end is not None:
                leo = torn_end
                simulated += 1
                unrecovered_tail = True
                with pylog.open(root) as store:
                    assert verify(store.topic(TOPIC).partition(0), exp, flushed, 0, power_loss=True) == leo
                verified_to = leo
                long_reader.close()
                long_reader = pylog.open(root)
                lr = long_reader.topic(TOPIC).partition(0)
                lr_verified = 0

            # 2. Sometimes recover as the writer here (the next child then opens a clean log), otherwise the
            #    next child recovers the unclean log itself, and what it recovered is checked after its death.
            #    Never after a "hold" child: the "stop" child after it must meet its torn tail.
            if mode != b"h" and recover_roll < 0.3:
                with pylog.open(root) as store:
                    p = store.topic(TOPIC).partition(0)
                    end = append_expected(p, leo)  # takes the lock, recovers, must continue exactly at leo
                    unrecovered_tail = False
                    assert p.is_writer
                    assert p.log_end_offset == end
                    verify(p, exp, flushed, verified_to)
                flushed = end  # close() flushed it; record that where the children report theirs
                with open(report + ".tmp", "wb") as f:
                    f.write(struct.pack("<Q", end))
                os.replace(report + ".tmp", report)
                writer_recoveries += 1
                with pylog.open(root) as store:
                    verified_to = verify(store.topic(TOPIC).partition(0), exp, flushed, verified_to)
                    assert verified_to == end
    finally:
        long_reader.close()

    elapsed = time.monotonic() - t0
    # The whole log once more as a lock-free reader. The last round may have ended in a simulated power
    # loss that no writer has recovered since (its torn tail, maybe followed by garbage, is still there):
    # check() rightly reports that tail then, as it does in the loop.
    last_round_torn = unrecovered_tail
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        nsegs = len(p.segments)
        final = verify(p, exp, flushed, 0, power_loss=unrecovered_tail)
    # A last writer recovers whatever the last kill left and must continue exactly at the log end; then
    # check() finds nothing, as that writer and as a reader after its clean close.
    with pylog.open(root) as store:
        p = store.topic(TOPIC).partition(0)
        end = append_expected(p, final)
        assert p.is_writer
        assert p.log_end_offset == end
        verify(p, exp, flushed, final)
    with pylog.open(root) as store:
        assert verify(store.topic(TOPIC).partition(0), exp, end, 0) == end
    print(f"\ncrash test: {kills} kills in {elapsed:.1f}s, {final} records, {nsegs} segments, "
          f"{advanced} kills after progress ({appended} after a reported append), {torn_or_unflushed} with "
          f"unflushed records present, {torn} torn tails, {simulated} simulated power losses, "
          f"{writer_recoveries} recoveries by the parent; the last kill left "
          f"{'a torn tail (simulated power loss)' if last_round_torn else 'no simulated power loss'}")
    # Every branch ran: the scripted kills guarantee these whatever the timing (the seeded choices fix how
    # many scripted kills, waits for the first append and parent recoveries there are).
    scripted = sum(1 for i in range(KILLS) if i % SCRIPT_EVERY == HOLD_AT)
    assert kills == KILLS
    assert appended >= KILLS // 2, "most children were killed before writing anything"
    assert advanced >= appended, "a child that appended was killed without advancing the log"
    assert torn_or_unflushed >= scripted, "kills with unflushed records present"
    assert simulated >= scripted, "simulated power losses"
    assert torn >= scripted, "torn tails met by a reader before recovery"
    assert writer_recoveries > 0, "recoveries by the parent"
    assert nsegs >= scripted, "too few segment rolls to exercise kills around rolls"
