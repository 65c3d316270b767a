"""Storage-core benchmark: every figure the storage issue asks for, with baselines measured in the same run.

Usage::

    python benchmarks/bench_storage.py                     # full run: ~11 GB written under --dir, a few minutes
    python benchmarks/bench_storage.py --quick             # small sizes, ~30 s (what the test suite runs)
    python benchmarks/bench_storage.py --dir /mnt/fast --stored-gb 10 --json results.json

Workload (the issue's): 100-byte values, 8-byte keys, batches of 1,000 records, no compression, page cache
(no fsync) unless stated, one process. Each timed section runs ``--repeat`` times and keeps the best, and
every ratio is against a baseline timed in the same process on the same files system:

- ``plain f.write / record``: a buffered ``open(..., "wb")`` file, ``f.write(key); f.write(value)`` per record
  (what a Python user writes instead of a log library).
- ``plain f.write / batch``: one ``f.write(b"".join(keys + values))`` per batch (the physical ceiling).
- reads compare with reading the same payload back from the plain file (per record slices / one ``read``).

Targets are printed next to the figures; nothing here asserts (timed assertions do not belong in tests).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import importlib.util
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

import pylog
from pylog import accel
from pylog.storage.records import crc32c as records_crc32c
from pylog.storage.checkpoint import read_checkpoint
from pylog.storage.filenames import CHECKPOINT_FILE, list_segment_bases
from pylog.partition import internals

ROWS: list[dict[str, Any]] = []


def row(name: str, value: float, unit: str, target: str = "", baseline: str = "", ratio: float | None = None,
        ok: bool | None = None) -> None:
    ROWS.append({"name": name, "value": value, "unit": unit, "target": target, "baseline": baseline,
                 "ratio": ratio, "ok": ok})
    r = f"{ratio:6.2f}x" if ratio is not None else "       "
    mark = {True: "PASS", False: "MISS", None: "    "}[ok]
    print(f"{mark}  {name:<46} {value:>14,.2f} {unit:<10} {r}  {baseline:<28} {target}", flush=True)


def best_of(repeat: int, fn: Callable[[], float]) -> float:
    """Run ``fn`` (which returns seconds) ``repeat`` times; keep the fastest.

    Each run starts after ``os.sync()``: dirty pages left by the previous run would otherwise be written
    back during this one and charge the disk's speed to whichever run comes second.
    """
    times = []
    for _ in range(repeat):
        os.sync()
        times.append(fn())
    return min(times)


def warm_memory(directory: str, gib: float) -> None:
    """Touch page-cache memory once so the first timed writes do not pay the VM's first-touch cost."""
    path = os.path.join(directory, "warm.bin")
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(int(gib * 1024)):
            f.write(block)
    os.unlink(path)


def make_data(n: int, seed: int = 1) -> tuple[list[bytes], list[bytes]]:
    rnd = random.Random(seed)
    values = [rnd.randbytes(100) for _ in range(n)]
    keys = [rnd.randbytes(8) for _ in range(n)]
    return values, keys


def text_values(n: int) -> list[bytes]:
    rnd = random.Random(7)
    users = ["alice", "bob", "carol", "dave", "erin"]
    paths = ["/api/v1/items", "/api/v1/orders", "/login", "/static/app.js", "/health"]
    out = []
    for i in range(n):
        line = (f'{{"ts":{1700000000000 + i},"user":"{rnd.choice(users)}","path":"{rnd.choice(paths)}",'
                f'"status":{rnd.choice([200, 200, 200, 304, 404, 500])},"ms":{rnd.randint(1, 999)}}}')
        out.append(line.encode()[:100].ljust(100, b" "))
    return out


class Bench:
    def __init__(self, root: str, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.batches = args.batches
        self.values, self.keys = make_data(1000)
        self.vl = np.full(1000, 100, np.int32)
        self.kl = np.full(1000, 8, np.int32)
        self.vd = b"".join(self.values)
        self.kd = b"".join(self.keys)
        self.payload = self.batches * 1000 * 108

    def fresh(self, name: str, **config: Any) -> tuple[pylog.Store, Any]:
        path = os.path.join(self.root, name)
        shutil.rmtree(path, ignore_errors=True)
        store = pylog.open(path)
        store.create_topic("t", config=config or None)
        return store, store.topic("t").partition(0)

    # -------------------------------------------------------------- writes

    def plain_per_record(self) -> float:
        path = os.path.join(self.root, "plain.bin")
        keys, values = self.keys, self.values
        t = time.perf_counter()
        with open(path, "wb") as f:
            w = f.write
            for _ in range(self.batches):
                for k, v in zip(keys, values):
                    w(k)
                    w(v)
        dt = time.perf_counter() - t
        os.unlink(path)
        return dt

    def plain_per_batch(self) -> float:
        path = os.path.join(self.root, "plain.bin")
        parts = [*self.keys, *self.values]
        t = time.perf_counter()
        with open(path, "wb") as f:
            for _ in range(self.batches):
                f.write(b"".join(parts))
        dt = time.perf_counter() - t
        os.unlink(path)
        return dt

    def append_values_run(self) -> float:
        store, p = self.fresh("append_values")
        values, keys = self.values, self.keys
        t = time.perf_counter()
        for _ in range(self.batches):
            p.append_values(values, keys=keys)
        dt = time.perf_counter() - t
        store.close()
        return dt

    def append_columns_run(self, chunk: int = 1000) -> float:
        store, p = self.fresh("append_columns")
        reps = chunk // 1000
        vl, kl = np.tile(self.vl, reps), np.tile(self.kl, reps)
        vd, kd = self.vd * reps, self.kd * reps
        t = time.perf_counter()
        for _ in range(self.batches // reps):
            p.append_columns(vl, vd, kl, kd)
        dt = time.perf_counter() - t
        store.close()
        return dt

    def writes(self) -> tuple[float, float]:
        n = self.batches * 1000
        rep = self.args.repeat
        per_record = n / best_of(rep, self.plain_per_record)
        per_batch = n / best_of(rep, self.plain_per_batch)
        av = n / best_of(rep, self.append_values_run)
        ac = n / best_of(rep, self.append_columns_run)
        ac10 = n / best_of(rep, lambda: self.append_columns_run(10_000))
        row("baseline: plain f.write per record", per_record / 1e6, "M rec/s")
        row("baseline: plain f.write per batch", per_batch / 1e6, "M rec/s")
        row("append_values (batches of 1,000)", av / 1e6, "M rec/s", ">= 4 M/s", "vs f.write/record",
            av / per_record, av >= 4e6)
        row("append_values vs physical ceiling", av / 1e6, "M rec/s", ">= 0.5x", "vs f.write/batch",
            av / per_batch, av / per_batch >= 0.5)
        row("append_columns (1,000 per call)", ac / 1e6, "M rec/s", ">= 15 M/s", "vs f.write/batch",
            ac / per_batch, ac >= 15e6)
        row("append_columns (10,000 per call)", ac10 / 1e6, "M rec/s", ">= 15 M/s", "vs f.write/batch",
            ac10 / per_batch, ac10 >= 15e6)
        return av, per_batch

    # -------------------------------------------------------------- reads

    def reads(self) -> None:
        store, p = self.fresh("reads")
        for _ in range(self.batches):
            p.append_values(self.values, keys=self.keys)
        p.roll()  # reads of closed segments and of the active one both happen below
        for _ in range(self.batches // 10):
            p.append_values(self.values, keys=self.keys)
        end = p.log_end_offset
        plain = os.path.join(self.root, "plain_read.bin")
        with open(plain, "wb") as f:
            for _ in range(end // 1000):
                f.write(b"".join([*self.keys, *self.values]))

        def plain_records() -> float:
            t = time.perf_counter()
            with open(plain, "rb") as f:
                while True:
                    buf = f.read(108 * 10_000)
                    if not buf:
                        break
                    # the plain file has no framing: slice fixed-size keys and values as a user would
                    mv = buf
                    _ = [(mv[i:i + 8], mv[i + 8:i + 108]) for i in range(0, len(mv), 108)]
            return time.perf_counter() - t

        def plain_bulk() -> float:
            t = time.perf_counter()
            with open(plain, "rb") as f:
                while f.read(1 << 24):
                    pass
            return time.perf_counter() - t

        def read_records(per_call: int | None = None) -> float:
            kwargs = {} if per_call is None else {"max_records": per_call}
            t = time.perf_counter()
            off = 0
            while off < end:
                recs = p.read(off, **kwargs)
                off = recs[-1].offset + 1
            return time.perf_counter() - t

        def read_columns() -> float:
            t = time.perf_counter()
            off = 0
            while off < end:
                cols = p.read_columns(off, max_records=100_000)
                off = int(cols.offsets[-1]) + 1
            return time.perf_counter() - t

        rep = self.args.repeat
        pr = end / best_of(rep, plain_records)
        pb = end / best_of(rep, plain_bulk)
        rr = end / best_of(rep, read_records)
        rr10 = end / best_of(rep, lambda: read_records(10_000))
        rc = end / best_of(rep, read_columns)
        row("baseline: plain file, slice per record", pr / 1e6, "M rec/s")
        row("baseline: plain file, bulk read", pb / 1e6, "M rec/s")
        row("read as records (default 500 per call)", rr / 1e6, "M rec/s", ">= 2.5 M/s", "vs plain slices", rr / pr,
            rr >= 2.5e6)
        row("read as records (10,000 per call)", rr10 / 1e6, "M rec/s", ">= 2.5 M/s", "vs plain slices", rr10 / pr,
            rr10 >= 2.5e6)
        row("read_columns", rc / 1e6, "M rec/s", ">= 40 M/s", "vs plain bulk read", rc / pb, rc >= 40e6)
        store.close()
        os.unlink(plain)

    # -------------------------------------------------------------- random reads and stored data

    @staticmethod
    def random_read_medians(p: Any, samples: int) -> tuple[float, float]:
        """Median latency (µs) of one-record reads at random offsets, checked (``verify=True``) and not, the
        two kinds interleaved over distinct offsets: both see the same page cache and the same machine (run
        one after the other over the same offsets, the second would find the pages the first brought in)."""
        # Read latency, not read latency under a writeback storm: the gigabytes just appended (and the plain
        # baseline files) are written back first, as best_of does before each timed write.
        os.sync()
        end = p.log_end_offset
        rnd = random.Random(3)
        offsets = [rnd.randrange(end) for _ in range(2 * samples)]
        for o in offsets[:200]:
            p.read(o, max_records=1, verify=True)
        lat: tuple[list[float], list[float]] = ([], [])
        for i, o in enumerate(offsets):
            verify = i % 2 == 0
            t = time.perf_counter()
            recs = p.read(o, max_records=1, verify=verify)
            lat[0 if verify else 1].append(time.perf_counter() - t)
            assert recs[0].offset == o
        return statistics.median(lat[0]) * 1e6, statistics.median(lat[1]) * 1e6

    def stored(self, empty_rate: float, empty_plain: float) -> None:
        args = self.args
        store, small = self.fresh("small")
        for _ in range(10):
            small.append_values(self.values, keys=self.keys)
        small_us, small_nv = self.random_read_medians(small, args.samples)
        store.close()

        target_bytes = int(args.stored_gb * (1 << 30))
        store, big = self.fresh("big")
        chunk = 9_000
        vl, kl = np.tile(self.vl, 9), np.tile(self.kl, 9)
        vd, kd = self.vd * 9, self.kd * 9
        t = time.perf_counter()
        stored = 0
        while stored < target_bytes:
            big.append_columns(vl, vd, kl, kd)
            stored += chunk * 108
        fill = time.perf_counter() - t
        n_big = big.log_end_offset
        row(f"filled partition: {n_big:,} records", stored / fill / 1e6, "MB/s")

        def append_more() -> float:
            t = time.perf_counter()
            for _ in range(min(self.batches, 2000)):
                big.append_values(self.values, keys=self.keys)
            return time.perf_counter() - t

        full_rate = min(self.batches, 2000) * 1000 / best_of(args.repeat, append_more)
        # The machine itself writes slower once gigabytes sit in the page cache (fresh memory is slow to
        # back on this VM), so the figure that isolates pylog is its rate relative to a plain f.write that
        # also keeps what it wrote (a growing file, like the partition), against the same ratio when empty.
        grow = os.path.join(self.root, "plain_grow.bin")
        parts = [*self.keys, *self.values]

        def plain_growing() -> float:
            t = time.perf_counter()
            with open(grow, "ab") as f:
                for _ in range(min(self.batches, 2000)):
                    f.write(b"".join(parts))
            return time.perf_counter() - t

        full_plain = min(self.batches, 2000) * 1000 / best_of(args.repeat, plain_growing)
        os.unlink(grow)
        row(f"baseline: plain growing file, {stored / (1 << 30):.1f} GiB cached", full_plain / 1e6, "M rec/s",
            "", "vs plain f.write when empty", full_plain / empty_plain)
        row(f"append_values with {stored / (1 << 30):.1f} GiB stored", full_rate / 1e6, "M rec/s",
            "within 20% of empty", "vs empty partition", full_rate / empty_rate)
        normalised = (full_rate / full_plain) / (empty_rate / empty_plain)
        row("  same, each relative to plain f.write then", normalised, "x", "within 20% of empty",
            "(pylog/plain) full vs empty", normalised, normalised >= 0.8)
        big_us, big_nv = self.random_read_medians(big, args.samples)
        row("random read, 10^4 records (median)", small_us, "us", "<= 20 us", "", None, small_us <= 20)
        row(f"random read, {n_big:.1e} records (median)", big_us, "us", "<= 20 us, <= 1.5x",
            "vs 10^4 records", big_us / small_us, big_us <= 20 and big_us / small_us <= 1.5)
        row("random read, 10^4, verify=False (median)", small_nv, "us", "<= 20 us", "no CRC check", None,
            small_nv <= 20)
        row(f"random read, {n_big:.1e}, verify=False", big_nv, "us", "<= 20 us, <= 1.5x",
            "vs 10^4 records", big_nv / small_nv, big_nv <= 20 and big_nv / small_nv <= 1.5)
        store.close()
        shutil.rmtree(os.path.join(self.root, "big"), ignore_errors=True)

    # -------------------------------------------------------------- durability

    def durable(self) -> None:
        store, p = self.fresh("durable", **{"flush.messages": 1000})
        n = max(50, self.batches // 20)
        t = time.perf_counter()
        for _ in range(n):
            p.append_values(self.values, keys=self.keys)  # flush.messages=1000: fsync after every batch
        dt = time.perf_counter() - t
        row("durable append (fsync per 1,000-record batch)", n * 1000 / dt / 1e6, "M rec/s", "report",
            f"{dt / n * 1e3:.2f} ms per batch")
        store.close()

    def rolls(self) -> None:
        """The appends that roll a segment, against what a roll waited for when it fsynced the sealed
        segment in the appending thread: one ``fdatasync`` of a file just written with as many bytes,
        timed in the same run. Both start from a synced page cache; nothing else is fsynced."""
        seg_bytes = (4 if self.args.quick else 128) << 20
        rolls = 3 if self.args.quick else 6

        def plain_sync() -> float:
            path = os.path.join(self.root, "roll-plain")
            data = b"".join(self.keys + self.values)
            with open(path, "wb") as f:
                for _ in range(seg_bytes // len(data)):
                    f.write(data)
                f.flush()
                t = time.perf_counter()
                os.fdatasync(f.fileno())
                dt = time.perf_counter() - t
            os.unlink(path)
            return dt

        baseline = float(np.median([plain_sync() for _ in range(3)]))
        store, p = self.fresh("rolls", **{"segment.bytes": seg_bytes})
        os.sync()
        lat: list[float] = []
        rolled: list[float] = []
        while len(rolled) < rolls:
            before = len(p.segments)
            t = time.perf_counter()
            p.append_values(self.values, keys=self.keys)
            dt = time.perf_counter() - t
            lat.append(dt)
            if len(p.segments) != before:
                rolled.append(dt)
        store.close()
        worst = max(rolled)
        row(f"append that rolls a {seg_bytes >> 20} MiB segment (worst of {rolls})", worst * 1e3, "ms",
            "report", "fdatasync of as many bytes", worst / baseline)
        row("  fdatasync of a just-written file (median of 3)", baseline * 1e3, "ms", "report",
            "what each roll waited for")
        row("  any append in that run: p99.9 / max", float(np.percentile(lat, 99.9)) * 1e3, "ms", "report",
            f"max {max(lat) * 1e3:.1f} ms")

    def open_times(self) -> None:
        path = os.path.join(self.root, "many")
        shutil.rmtree(path, ignore_errors=True)
        segments = self.args.segments
        with pylog.open(path) as store:
            store.create_topic("t", config={"segment.bytes": 200_000})
            p = store.topic("t").partition(0)
            while len(p.segments) < segments:
                p.append_values(self.values, keys=self.keys)
        t = time.perf_counter()
        with pylog.open(path) as store:
            p = store.topic("t").partition(0)
            end = p.log_end_offset
            p.read(end - 1)
            opened = time.perf_counter() - t
            nseg = len(p.segments)
        row(f"open clean store, {nseg} segments", opened * 1e3, "ms", "< 1000 ms", "", None, opened < 1.0)

        # A writer killed with SIGKILL: reopening re-validates only what follows the recovery point.
        code = ("import pylog, os, signal, sys\n"
                "s = pylog.open(sys.argv[1]); p = s.topic('t').partition(0)\n"
                "v = [os.urandom(100) for _ in range(1000)]\n"
                "for _ in range(3): p.append_values(v)\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n")
        subprocess.run([sys.executable, "-c", code, path], check=False)
        # The segments from the one holding the checkpoint's recovery point on: the rolls the killed writer
        # made in its last moments, whose background fsync had not finished, are among them.
        pdir = os.path.join(path, "t", "0")
        rp = read_checkpoint(os.path.join(pdir, CHECKPOINT_FILE)).recovery_point
        bases = list_segment_bases(pdir)
        expected = len(bases) - max(0, bisect.bisect_right(bases, rp) - 1)
        t = time.perf_counter()
        with pylog.open(path) as store:
            p = store.topic("t").partition(0)
            p.append_values([b"after crash"])  # the first write takes the lock and recovers
            took = time.perf_counter() - t
            rec = p.last_recovery or {}
            nseg = len(p.segments)
        # The killed writer appended 3 batches of ~110 KB into 200 KB segments: at most 2 rolls, so at most
        # 4 segments (from the one before those rolls) may follow a recovery point that moves as it should.
        row(f"reopen after SIGKILL, {nseg} segments", took * 1e3, "ms", "only segments after recovery point",
            f"{rec.get('segments_validated')} of {expected} after it re-validated", None,
            rec.get("segments_validated") == expected <= 4)
        shutil.rmtree(path, ignore_errors=True)

    # -------------------------------------------------------------- compression

    def compression(self) -> None:
        values = text_values(1000)
        keys = self.keys
        results = {}
        for codec in ("none", "lz4"):
            store, p = self.fresh(f"codec_{codec}", **{"compression.type": codec})
            n = max(200, self.batches // 4)
            t = time.perf_counter()
            for _ in range(n):
                p.append_values(values, keys=keys)
            wt = time.perf_counter() - t
            size = p.size_bytes()
            end = p.log_end_offset
            t = time.perf_counter()
            off = 0
            while off < end:
                cols = p.read_columns(off, max_records=100_000)
                off = int(cols.offsets[-1]) + 1
            rt = time.perf_counter() - t
            results[codec] = (n * 1000 / wt, end / rt, size)
            store.close()
        (wn, rn, sn), (wl, rl, sl) = results["none"], results["lz4"]
        row("lz4 text-like values: stored size ratio", sn / sl, ":1", "report", "uncompressed / lz4 bytes")
        row("lz4 append", wl / 1e6, "M rec/s", "report", "vs uncompressed append", wl / wn)
        row("lz4 read_columns", rl / 1e6, "M rec/s", "report", "vs uncompressed read", rl / rn)


def tail_reader(root: str, n: int, repeat: int) -> None:
    """A reader at the log end of a partition that another handle writes (to the storage, a consumer in
    another process): CPU time per record to take in one new record and read it, i.e. ``log_end_offset``
    after a wake-up, ``read_columns`` of the record and the next poll's empty read; 100-byte values, one
    per append. Baseline: the same reader made to work as readers did before their tail path was cut down
    (directory listed on every look, the active segment's indexes reopened after it grew, reads started
    at the last index entry), emulated by resetting the reader's private state before each call.
    """
    path = os.path.join(root, "tail")
    shutil.rmtree(path, ignore_errors=True)
    value = [b"x" * 100]

    def run(previous: bool) -> float:
        with pylog.open(path) as ws, pylog.open(path) as rs:
            wp = ws.topic("t").partition(0)
            wp.append_values(value * 1000)
            rp = rs.topic("t").partition(0)
            pos = rp.log_end_offset
            spent = 0
            for _ in range(n):
                wp.append_values(value)
                t0 = time.thread_time_ns()
                if previous:
                    internals(rp).local_log.list_on_next_refresh()
                assert rp.log_end_offset == pos + 1
                if previous:
                    seg = rp.segments[-1]
                    seg._idx.drop(force=True)
                    seg._tail.forget()
                assert len(rp.read_columns(pos)) == 1
                pos += 1
                if previous:
                    internals(rp).local_log.list_on_next_refresh()
                assert not len(rp.read_columns(pos))
                spent += time.thread_time_ns() - t0
            return spent / n / 1e3

    with pylog.open(path) as store:
        store.create_topic("t")
    now = before = float("inf")
    for _ in range(repeat):
        before = min(before, run(previous=True))
        now = min(now, run(previous=False))
    row("baseline: tail read, previous reader path", before, "us/record", "", f"{n} records, best of {repeat}")
    row("tail read: log end + read + empty read", now, "us/record", "report", "vs previous reader path",
        before / now)


def lmdb_copy(path: str, n: int, keys: list[bytes], values: list[bytes]) -> Any:
    """An LMDB environment (opened as benchmarks/suite_peers.py opens one: page cache, no fsync) holding ``n``
    records cycling through ``keys``/``values``: 8-byte big-endian sequence numbers as LMDB keys, each record's
    key and value stored together as the LMDB value."""
    import lmdb
    env = lmdb.open(path, map_size=8 << 30, sync=False, metasync=False, max_dbs=0, lock=True)
    pack = struct.Struct(">Q").pack
    items = [k + v for k, v in zip(keys, values, strict=True)]
    with env.begin(write=True) as txn:
        txn.cursor().putmulti([(pack(i), items[i % len(items)]) for i in range(n)], append=True)
    return env


def interleaved_best(repeat: int, *fns: Callable[[], float]) -> list[float]:
    """Best seconds of each of ``fns`` over ``repeat`` rounds, each round running every fn once in turn: on a
    shared machine whose load moves, a baseline and its subject then see the same conditions."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], fn())
    return best


def lmdb_read_fns(env: Any, n: int) -> tuple[Callable[[], float], Callable[[], float]]:
    """Timed runs (seconds) of two LMDB baselines over ``n`` records:

    - per call a read transaction, ``set_range`` and ``list(islice(cursor.iternext(), 1000))``: what
      ``Partition.read(offset, 1000)`` does (a list of 1,000 records per call), at C speed;
    - one cursor over everything drained by ``deque(maxlen=0)``: each item made and dropped at once,
      nothing kept (the ceiling of LMDB's Python binding; "LMDB cursor iteration").
    """
    pack = struct.Struct(">Q").pack

    def calls() -> float:
        t = time.perf_counter()
        off = 0
        while off < n:
            with env.begin() as txn:
                cur = txn.cursor()
                cur.set_range(pack(off))
                got = list(itertools.islice(cur.iternext(), 1000))
            off += len(got)
        return time.perf_counter() - t

    def drain() -> float:
        t = time.perf_counter()
        with env.begin() as txn:
            cur = txn.cursor()
            cur.first()
            collections.deque(cur.iternext(), maxlen=0)
        return time.perf_counter() - t

    return calls, drain


def read_vs_lmdb(root: str, batches: int, repeat: int) -> None:
    """``Partition.read()`` as records, 1,000 per call, against LMDB over the same records (8-byte keys,
    100-byte values; :func:`lmdb_read_fns` says which baselines), on whichever path is live: run again
    with PYLOG_PURE_PYTHON=1 for the other. bench_clients.py has the consumer's row."""
    if importlib.util.find_spec("lmdb") is None:
        print("      (LMDB rows skipped: the lmdb package is not installed)")
        return
    path = "accelerated" if pylog.ACCELERATED else "pure Python"
    values, keys = make_data(1000)
    with pylog.open(os.path.join(root, "decode-read"), log_cleaner_enable=False) as store:
        store.create_topic("t")
        p = store.topic("t").partition(0)
        for _ in range(batches):
            p.append_values(values, keys=keys)
        end = p.log_end_offset
        env = lmdb_copy(os.path.join(root, "decode-lmdb"), end, keys, values)

        def read_records() -> float:
            t = time.perf_counter()
            off = 0
            while off < end:
                off = p.read(off, max_records=1000)[-1].offset + 1
            return time.perf_counter() - t

        calls, drain, rr = (end / t for t in interleaved_best(repeat, *lmdb_read_fns(env, end), read_records))
        env.close()
    row("baseline: LMDB read txn + cursor, 1,000 per call", calls / 1e6, "M rec/s")
    row("baseline: LMDB cursor iteration, one txn", drain / 1e6, "M rec/s")
    row(f"read as records, 1,000 per call ({path})", rr / 1e6, "M rec/s", ">= 1.2x LMDB", "vs LMDB 1,000 per call",
        rr / calls, rr >= 1.2 * calls)
    row(f"read as records, 1,000 per call ({path})", rr / 1e6, "M rec/s", "report", "vs LMDB one-txn iteration",
        rr / drain)


def random_reads_verified(root: str, sizes: list[int], samples: int, rounds: int) -> None:
    """One record read at a random offset (``Partition.read(offset, max_records=1)``, CRC verified), in
    partitions of ``sizes`` records: 100-byte values, 8-byte keys, batches of 1,000 (~109 KB), 1 GiB
    segments, page cache warm, read by the handle that holds the writer lock (its active segment is mapped,
    the sealed ones too). Per size and round, three medians over the same ``samples`` offsets, in order:

    - verify every time: the segments' memo of checked batches dropped before each read (outside the
      timer), so each read checksums its whole batch, as every read did before the memo (the baseline);
    - verified once: after one read per batch, every batch is in the memo: what a random-read workload
      settles at (the first read of each batch costs what the baseline does);
    - verify=False: no checksum at all (the floor).

    For the smallest size (all in the active segment) also a read-only handle's median: it cannot prove
    that segment's bytes stay as checked, so it checks every read.

    Rows give the range over ``rounds``; the accelerated and the pure-Python paths are two runs of this
    script (with and without ``PYLOG_PURE_PYTHON=1``). A partition already under ``root`` (``--dir``) with
    enough records is reused.
    """
    path_name = "accelerated" if pylog.ACCELERATED else "pure Python"
    figures: dict[int, dict[str, list[float]]] = {}
    for n in sizes:
        where = os.path.join(root, f"randread-{n}")
        store = pylog.open(where)
        if "t" not in store.topics():
            store.create_topic("t", config={"segment.bytes": 1 << 30})
        p = store.topic("t").partition(0)
        vl, kl = np.full(1000, 100, np.int32), np.full(1000, 8, np.int32)
        rnd = random.Random(1)
        vd = b"".join(rnd.randbytes(100) for _ in range(1000))
        kd = b"".join(rnd.randbytes(8) for _ in range(1000))
        t = time.perf_counter()
        built = p.log_end_offset
        while p.log_end_offset < n:
            p.append_columns(vl, vd, kl, kd)
        if p.log_end_offset > built:
            row(f"built {n:.0e} records ({p.size_bytes() / (1 << 30):.2f} GiB)", time.perf_counter() - t, "s",
                "report", f"{len(p.segments)} segments")
        else:
            assert p.try_become_writer()  # reused: read as the writer, as when just built
        os.sync()
        end = p.log_end_offset
        offsets = [random.Random(3).randrange(end) for _ in range(samples)]
        got = figures[n] = {"every": [], "once": [], "none": []}

        def timed(offset: int, verify: bool = True, p: Any = p) -> float:
            t0 = time.perf_counter()
            recs = p.read(offset, max_records=1, verify=verify)
            dt = time.perf_counter() - t0
            assert recs[0].offset == offset
            return dt

        for _ in range(rounds):
            lat = []
            for o in offsets:
                for seg in p.segments:
                    seg.forget_verified()
                lat.append(timed(o))
            got["every"].append(statistics.median(lat) * 1e6)
            for o in range(0, end, 1000):  # one read per batch: all of them in the memo
                p.read(o, max_records=1)
            got["once"].append(statistics.median([timed(o) for o in offsets]) * 1e6)
            got["none"].append(statistics.median([timed(o, False) for o in offsets]) * 1e6)
        store.close()
        if n == sizes[0]:  # all in the active segment: another handle checks it on every read
            with pylog.open(where, read_only=True) as other:
                q = other.topic("t").partition(0)
                got["other"] = [statistics.median([timed(o, True, q) for o in offsets]) * 1e6
                                for _ in range(rounds)]

    def span(xs: list[float]) -> str:
        return f"{min(xs):.1f}-{max(xs):.1f} us over {len(xs)}"

    small = sizes[0]
    for n in sizes:
        got = figures[n]
        every, once, none = (statistics.median(got[k]) for k in ("every", "once", "none"))
        row(f"baseline: random read, {n:.0e}, verify every time", every, "us", "", f"{path_name}; {span(got['every'])}")
        target = "<= 15 us" if n == small else "<= 1.5x 10^4"
        ratio = once / statistics.median(figures[small]["once"])
        row(f"random read, {n:.0e}, CRC verified once", once, "us", target,
            f"{span(got['once'])}; {ratio:.2f}x of {small:.0e}", every / once,
            once <= 15 if n == small else ratio <= 1.5)
        row(f"random read, {n:.0e}, verify=False", none, "us", "report", span(got["none"]), every / none)
        if "other" in got:
            row(f"random read, {n:.0e}, read-only handle", statistics.median(got["other"]), "us",
                "report", f"checked every read; {span(got['other'])}")


def full_run(root: str, args: argparse.Namespace) -> None:
    """Every figure, in order."""
    if args.warm_gb:
        warm_memory(root, args.warm_gb)
    b = Bench(root, args)
    empty_rate, empty_plain = b.writes()
    b.reads()
    read_vs_lmdb(root, args.batches, args.repeat)
    b.stored(empty_rate, empty_plain)
    b.durable()
    b.rolls()
    b.open_times()
    b.compression()
    accelerator_rows(root, args.batches, max(args.repeat, 3))
    tail_reader(root, 300 if args.quick else 5000, max(args.repeat, 3))
    random_reads_verified(root, [10_000, 100_000 if args.quick else 10 ** 7], args.samples, max(args.repeat, 3))


def accelerator_rows(root: str, batches: int, rounds: int) -> None:
    """The compiled accelerator's write and read_columns targets, each against its baselines in this run.

    ``append_values`` (batches of 1,000) against one ``f.write(b"".join(batch))`` per batch and against
    LMDB ``putmulti`` of the same records (one write transaction per batch, 8-byte big-endian sequence keys,
    ``sync=False``: page cache, as suite_peers.py's adapter); ``read_columns`` (100,000 per call) against
    one ``bytes.join`` of the same payload (the memcpy ceiling), with what bounds it measured alongside: the
    CRC-32C of the batches, the copy out of the segment's mapping, and the page faults per call. The three
    writers (and the read figures) alternate, ``rounds`` times each, best kept: on a loaded VM they see the
    same machine. Run once as is and once with ``PYLOG_PURE_PYTHON=1`` for the pure-Python path.
    """
    import mmap
    import resource
    import struct
    path_name = "accelerated" if pylog.ACCELERATED else "pure Python"
    values, keys = make_data(1000)
    n = batches * 1000

    def append_values() -> float:
        store, p = _fresh_store(root, "accel_append")
        t = time.perf_counter()
        for _ in range(batches):
            p.append_values(values, keys=keys)
        dt = time.perf_counter() - t
        store.close()
        return dt

    def plain_batch() -> float:
        path = os.path.join(root, "accel_plain.bin")
        parts = [*keys, *values]
        t = time.perf_counter()
        with open(path, "wb") as f:
            for _ in range(batches):
                f.write(b"".join(parts))
        dt = time.perf_counter() - t
        os.unlink(path)
        return dt

    lmdb: Any = None
    try:
        import lmdb
    except ImportError:
        print("      (no LMDB baseline: the lmdb package is not installed; pip install -e '.[bench]')")

    def lmdb_putmulti() -> float:
        path = os.path.join(root, "accel_lmdb")
        shutil.rmtree(path, ignore_errors=True)
        env = lmdb.open(path, map_size=64 << 30, sync=False, metasync=False, max_dbs=0, lock=True)
        pack = struct.Struct(">Q").pack
        first = 0
        t = time.perf_counter()
        for _ in range(batches):
            with env.begin(write=True) as txn:
                txn.cursor().putmulti([(pack(first + i), v) for i, v in enumerate(values)], append=True)
            first += 1000
        dt = time.perf_counter() - t
        env.close()
        shutil.rmtree(path, ignore_errors=True)
        return dt

    writers = [append_values, plain_batch] + ([lmdb_putmulti] if lmdb is not None else [])
    best = {fn.__name__: float("inf") for fn in writers}
    for _ in range(rounds):
        for fn in writers:
            os.sync()
            best[fn.__name__] = min(best[fn.__name__], fn())
    av, pb = n / best["append_values"], n / best["plain_batch"]
    row("baseline: plain f.write per batch", pb / 1e6, "M rec/s")
    row(f"append_values, {path_name}", av / 1e6, "M rec/s", ">= 0.6x", "vs f.write/batch", av / pb, av / pb >= 0.6)
    if lmdb is not None:
        lm = n / best["lmdb_putmulti"]
        row("baseline: LMDB putmulti per batch", lm / 1e6, "M rec/s")
        row(f"append_values vs LMDB, {path_name}", av / 1e6, "M rec/s", ">= 3x", "vs LMDB putmulti", av / lm,
            av / lm >= 3)

    # read_columns against the memcpy ceiling, and what lies between them.
    store, p = _fresh_store(root, "accel_read")
    for _ in range(batches):
        p.append_values(values, keys=keys)
    end = p.log_end_offset
    per_call = 100_000
    payload = [b"".join([*keys, *values]) for _ in range(per_call // 1000)]
    seg = p.segments[-1]
    with open(seg.log_path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mv = memoryview(mm)
    size = len(mm) // batches
    chunks = [mv[i * size:(i + 1) * size] for i in range(batches)]
    crc = accel.native.crc32c if accel.native is not None else records_crc32c

    def read_columns(verify: bool = True) -> float:
        t = time.perf_counter()
        off = 0
        while off < end:
            cols = p.read_columns(off, max_records=per_call, verify=verify)
            off = int(cols.offsets[-1]) + 1
        return time.perf_counter() - t

    def join_payload() -> float:
        t = time.perf_counter()
        for _ in range(end // per_call):
            len(b"".join(payload))  # dropped at once: the next join reuses the memory, as a ceiling should
        return time.perf_counter() - t

    def join_kept() -> float:
        t = time.perf_counter()
        prev = None
        for _ in range(end // per_call):
            new = b"".join(payload)
            prev = new  # held until the next join: as a reader holds its columns until its next read
        del prev
        return time.perf_counter() - t

    def join_mapping() -> float:
        t = time.perf_counter()
        for i in range(0, batches, per_call // 1000):
            len(b"".join(chunks[i:i + per_call // 1000]))
        return time.perf_counter() - t

    def crc_mapping() -> float:
        t = time.perf_counter()
        for c in chunks:
            crc(c)
        return time.perf_counter() - t

    def faults() -> float:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        read_columns()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    readers = [read_columns, lambda: read_columns(False), join_payload, join_mapping, crc_mapping, join_kept]
    times = [float("inf")] * len(readers)
    for _ in range(rounds):
        for i, fn in enumerate(readers):
            times[i] = min(times[i], fn())
    rc, rcnv, jp, jm, cm, jk = (end / t for t in times)
    row("baseline: one bytes.join of the payload", jp / 1e6, "M rec/s")
    row(f"read_columns, {path_name}", rc / 1e6, "M rec/s", ">= 0.6x", "vs bytes.join", rc / jp, rc / jp >= 0.6)
    row("  ceiling part: read_columns verify=False", rcnv / 1e6, "M rec/s", "report", "vs bytes.join", rcnv / jp)
    row("  ceiling part: CRC-32C of the batches", cm / 1e6, "M rec/s", "report", "vs bytes.join", cm / jp)
    row("  ceiling part: join out of the mapping", jm / 1e6, "M rec/s", "report", "vs bytes.join", jm / jp)
    row("  ceiling part: bytes.join, result kept", jk / 1e6, "M rec/s", "report", "vs bytes.join", jk / jp)
    row("  page faults per 100,000 records read", faults() / (end / per_call), "faults", "report")
    chunks.clear()  # the slices pin the mapping
    del mv
    mm.close()
    store.close()


def _fresh_store(root: str, name: str) -> tuple[pylog.Store, Any]:
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    store = pylog.open(path)
    store.create_topic("t")
    return store, store.topic("t").partition(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    ap.add_argument("--stored-gb", type=float, default=10.0, help="data stored before the 'with data' figures")
    ap.add_argument("--batches", type=int, default=2000, help="batches of 1,000 records per write/read run")
    ap.add_argument("--samples", type=int, default=20_000, help="random reads per latency figure")
    ap.add_argument("--segments", type=int, default=1000, help="segments for the open-time figure")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timed section (best is kept)")
    ap.add_argument("--warm-gb", type=float, default=2.0, help="page-cache memory to touch before timing")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--read-vs-lmdb", action="store_true",
                    help="only the decode rows: read() as records against LMDB")
    ap.add_argument("--accelerator", action="store_true",
                    help="only the compiled accelerator's rows (append vs f.write and LMDB, read_columns vs "
                         "bytes.join); run again with PYLOG_PURE_PYTHON=1 for the pure-Python path")
    ap.add_argument("--random-reads", type=float, metavar="N",
                    help="only the random-read figures of random_reads_verified, at 10^4 and N records")
    args = ap.parse_args(argv)
    if args.quick:
        args.stored_gb, args.batches, args.samples, args.segments, args.repeat, args.warm_gb = \
            0.05, 100, 500, 50, 1, 0.0
    root = args.dir or tempfile.mkdtemp(prefix="pylog-bench-")
    os.makedirs(root, exist_ok=True)
    print(f"pylog {pylog.__version__} storage benchmark in {root} (python {sys.version.split()[0]}, "
          f"numpy {np.__version__}, {os.cpu_count()} cpus)")
    print(f"{'':6}{'figure':<46} {'value':>14} {'unit':<10} {'ratio':>7}  {'baseline':<28} target")
    try:
        if args.read_vs_lmdb:
            read_vs_lmdb(root, args.batches, max(args.repeat, 5))
        elif args.accelerator:
            accelerator_rows(root, args.batches, max(args.repeat, 3))
        elif args.random_reads:  # these figures only
            random_reads_verified(root, [10_000, int(args.random_reads)], args.samples, args.repeat)
        else:
            full_run(root, args)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(ROWS, f, indent=2)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
