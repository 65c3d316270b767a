"""Log-cleaner benchmark: compaction throughput and memory, and the cost of a retention check that deletes
nothing, with baselines measured in the same run.

Usage::

    python benchmarks/bench_cleaner.py                   # full run: 10M records (~1.2 GB per key order under
                                                         # --dir), 10,000 segments; several minutes
    python benchmarks/bench_cleaner.py --quick           # small sizes, same code paths, ~10 s (the test suite)
    python benchmarks/bench_cleaner.py --dir /work/bench --json cleaner.json

**Compaction** (the issue's workload): ``--records`` records (10,000,000) with 100-byte values and
``--keys`` distinct keys (100,000) ``b"key-%06d"``, written with ``append_values(values, keys=keys)`` in
calls of ``--per-call`` records (100,000) to a topic with ``cleanup.policy=compact`` and ``segment.bytes``
256 MiB, then ``roll()`` so that every record is cleanable. Key orders (``--key-orders``):

- ``random``: each record's key drawn uniformly (with replacement): the latest record of a key can be
  anywhere in the last few hundred thousand offsets, so the batches there are partly kept and re-encoded.
- ``shuffled``: every run of ``--keys`` records is a fresh permutation of all the keys: the latest records
  are exactly the last ``--keys`` records, so whole batches are dropped or copied byte for byte.
- ``sequential``: key ``i % keys`` (same kept/dropped shape as ``shuffled``).

Each value starts with its record's offset (8 bytes little endian), so the check after compaction is
exact and cheap: exactly one record per key remains, at that key's latest offset, with its own value.

The written partition is kept pristine; each timed cleaning runs on a fresh copy of its files (that copy
is one baseline) in a child process (``store.compact("t", 0)`` on a store opened with
``log_cleaner_enable=False`` and ``log_cleaner_dedupe_buffer_size``), after ``os.sync()``; the child first
becomes the partition's writer (``roll()`` of the empty active segment) so only the cleaning is timed.
Memory, from the child (a clean process, so nothing left over from writing the data hides or inflates it):

- ``RssAnon`` peak - before: anonymous resident memory, sampled from ``/proc/self/status`` every
  ``--sample-ms`` by a thread during the cleaning (a spike shorter than a sample, or while the cleaning
  holds the GIL, can be missed). File-backed pages are left out on purpose: sealed segments are read
  through an mmap, so ``VmHWM`` (also reported, after resetting it through ``/proc/self/clear_refs``)
  counts the segment files themselves.
- ``tracemalloc`` peak (numpy reports its buffers to tracemalloc): exact for heap allocations, from a
  separate, untimed cleaning of another copy (tracemalloc slows allocation down).

Both are compared with ``log.cleaner.dedupe.buffer.size``: ``--buffer-mb`` (128 MiB, the default) and a
tight one, the smallest whole MiB that still holds every key in one pass (``pylog.maintenance.compaction.map_capacity``:
64 bytes per key in three quarters of the buffer, the last quarter being chunk workspace).

Baselines (same data, same run): scanning every record with ``read_columns(offset, max_records=100_000)``,
and copying the partition's files (``shutil.copyfile``).

**Retention**: a partition of ``--segments`` (10,000) segments of 10 records each (built in a child
process that skips fsync, since the fixture's durability is irrelevant, and that reopens the store every
1,000 segments: a writer keeps two descriptors per sealed segment open, see the note in the report),
``retention.ms`` ten years and ``retention.bytes`` 2**50 so that both rules run and nothing is deletable.
Timed: ``store.enforce_retention("t")``, ``--retention-reps`` times (median and min; the first call after
opening, which makes the store the writer, is reported on its own). Baseline: ``os.listdir`` of the
partition directory plus an ``os.stat`` of every ``.log`` file.

Targets are printed next to the figures; nothing here asserts except the correctness checks.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

import pylog
from pylog.maintenance.compaction import map_capacity

ROWS: list[dict[str, Any]] = []
MiB = 1 << 20
VALUE_BYTES = 100


def row(name: str, value: float, unit: str, target: str = "", baseline: str = "", ratio: float | None = None,
        ok: bool | None = None, **extra: Any) -> None:
    ROWS.append({"name": name, "value": value, "unit": unit, "target": target, "baseline": baseline,
                 "ratio": ratio, "ok": ok, **({"extra": extra} if extra else {})})
    r = f"{ratio:7.2f}x" if ratio is not None else "        "
    mark = {True: "PASS", False: "MISS", None: "    "}[ok]
    print(f"{mark}  {name:<50} {value:>12,.2f} {unit:<9} {r}  {baseline:<34} {target}", flush=True)


def note(text: str) -> None:
    print(f"      {text}", flush=True)


# ---------------------------------------------------------------------------------------------- data

def key_ids(order: str, n: int, keys: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if order == "random":
        return rng.integers(0, keys, n, dtype=np.int64)
    if order == "sequential":
        return np.arange(n, dtype=np.int64) % keys
    if order == "shuffled":
        out = np.empty(n, np.int64)
        for a in range(0, n, keys):
            b = min(n, a + keys)
            out[a:b] = rng.permutation(keys)[:b - a]
        return out
    raise ValueError(order)


def latest_offsets(ids: np.ndarray, keys: int) -> np.ndarray:
    """Per key id, the offset of its last record (-1 for a key that never occurs)."""
    n = len(ids)
    uniq, first_in_reversed = np.unique(ids[::-1], return_index=True)
    latest = np.full(keys, -1, np.int64)
    latest[uniq] = n - 1 - first_in_reversed
    return latest


def key_width(keys: int) -> int:
    """Digits in ``b"key-%0Nd"``: 6 (the issue's ``key-000000``..``key-099999``) or more for more keys."""
    return max(6, len(str(keys - 1)))


def topic_config(segment_bytes: int) -> dict[str, Any]:
    return {"cleanup.policy": "compact", "segment.bytes": segment_bytes}


def write_dataset(path: str, ids: np.ndarray, keys: int, per_call: int, segment_bytes: int) -> float:
    """Write one record per id with ``append_values`` (lists of ``per_call``); return the seconds it took."""
    width = key_width(keys)
    key_table = [b"key-%0*d" % (width, k) for k in range(keys)]
    filler = np.random.default_rng(2).integers(0, 256, (per_call, VALUE_BYTES - 8), dtype=np.uint8)
    rows = np.empty((per_call, VALUE_BYTES), np.uint8)
    rows[:, 8:] = filler
    n = len(ids)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", config=topic_config(segment_bytes))
        p = store.topic("t").partition(0)
        t = time.perf_counter()
        for a in range(0, n, per_call):
            b = min(n, a + per_call)
            m = b - a
            rows[:m, :8] = np.arange(a, b, dtype="<i8").view(np.uint8).reshape(m, 8)
            raw = rows[:m].tobytes()
            values = [raw[i:i + VALUE_BYTES] for i in range(0, m * VALUE_BYTES, VALUE_BYTES)]
            keys_list = [key_table[k] for k in ids[a:b].tolist()]
            p.append_values(values, keys=keys_list)
        p.roll()  # compaction never touches the active segment: make every record cleanable
        took = time.perf_counter() - t
        assert p.log_end_offset == n
    return took


def partition_dir(store_dir: str) -> str:
    return os.path.join(store_dir, "t", "0")


def copy_store(src: str, dst: str) -> tuple[float, int]:
    """Copy a store's files (timed); returns (seconds, bytes)."""
    shutil.rmtree(dst, ignore_errors=True)
    t = time.perf_counter()
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    took = time.perf_counter() - t
    size = sum(e.stat().st_size for e in os.scandir(partition_dir(dst)))
    return took, size


def scan_columns(path: str) -> tuple[float, int]:
    """Read every record of the store at ``path`` as columns; returns (seconds, records)."""
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        end = p.log_end_offset
        t = time.perf_counter()
        off = 0
        n = 0
        while off < end:
            cols = p.read_columns(off, max_records=100_000)
            n += len(cols)
            off = int(cols.offsets[-1]) + 1
        return time.perf_counter() - t, n


def verify(path: str, ids: np.ndarray, latest: np.ndarray) -> str | None:
    """After compaction: one record per key, at the key's latest offset, holding that offset's value."""
    klen = 4 + key_width(len(latest))
    want = np.sort(latest[latest >= 0])
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        end = p.log_end_offset
        off = p.log_start_offset
        offs, kd, vd, kl, vl = [], [], [], [], []
        while off < end:
            c = p.read_columns(off, max_records=100_000)
            offs.append(c.offsets)
            kd.append(c.key_data)
            vd.append(c.value_data)
            kl.append(c.key_lengths)
            vl.append(c.value_lengths)
            off = int(c.offsets[-1]) + 1
    offsets = np.concatenate(offs) if offs else np.empty(0, np.int64)
    if len(offsets) != len(want):
        return f"{len(offsets):,} records remain, expected {len(want):,} (one per key)"
    if not np.array_equal(offsets, want):
        bad = int(np.flatnonzero(offsets != want)[0])
        return f"record {bad} has offset {int(offsets[bad])}, expected {int(want[bad])}"
    klens = np.concatenate(kl)
    vlens = np.concatenate(vl)
    if (klens != klen).any() or (vlens != VALUE_BYTES).any():
        return "unexpected key or value lengths"
    kmat = np.frombuffer(b"".join(kd), np.uint8).reshape(-1, klen)[:, 4:].astype(np.int64) - ord("0")
    kid = kmat @ (10 ** np.arange(klen - 5, -1, -1, dtype=np.int64))
    if not np.array_equal(kid, ids[offsets]):
        return "a record's key is not the key written at its offset"
    vpre = np.frombuffer(b"".join(vd), np.uint8).reshape(-1, VALUE_BYTES)[:, :8].copy().view("<i8").ravel()
    if not np.array_equal(vpre, offsets):
        return "a record's value is not the value written at its offset"
    return None


# ---------------------------------------------------------------------------------------------- child: one cleaning

def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024
    return out


class _Sampler(threading.Thread):
    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_anon = 0
        self.samples = 0
        self._stop_evt = threading.Event()

    def run(self) -> None:
        while not self._stop_evt.is_set():
            self.peak_anon = max(self.peak_anon, _status()["RssAnon"])
            self.samples += 1
            self._stop_evt.wait(self.interval)

    def stop(self) -> None:
        self._stop_evt.set()
        self.join()
        self.peak_anon = max(self.peak_anon, _status()["RssAnon"])


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def child_compact(path: str, buffer_bytes: int, sample_ms: float, trace: bool) -> dict[str, Any]:
    import tracemalloc
    store = pylog.open(path, log_cleaner_enable=False, log_cleaner_dedupe_buffer_size=buffer_bytes)
    p = store.topic("t").partition(0)
    p.roll()  # become the writer (the active segment is empty: nothing is rolled) so only the cleaning is timed
    records = p.log_end_offset - p.log_start_offset
    gc.collect()
    before = _status()
    hwm_reset = _reset_hwm()
    hwm_before = _status()["VmHWM"]
    sampler = _Sampler(sample_ms / 1000)
    if trace:
        tracemalloc.start()
    sampler.start()
    t = time.perf_counter()
    results = store.compact("t", 0)
    took = time.perf_counter() - t
    sampler.stop()
    traced = tracemalloc.get_traced_memory()[1] if trace else None
    if trace:
        tracemalloc.stop()
    after = _status()
    store.close()
    r = results[0]
    return {"seconds": took, "records": records, "result": {k: v for k, v in vars(r).items()},
            "anon_before": before["RssAnon"], "anon_peak": sampler.peak_anon, "samples": sampler.samples,
            "hwm_before": hwm_before if hwm_reset else None, "hwm_after": after["VmHWM"] if hwm_reset else None,
            "file_after": after["RssFile"], "tracemalloc_peak": traced}


def run_child_compact(path: str, buffer_bytes: int, sample_ms: float, trace: bool = False) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--_compact", path, "--_buffer", str(buffer_bytes),
           "--sample-ms", str(sample_ms)] + (["--_trace"] if trace else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compaction child failed ({proc.returncode}):\n{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


# ---------------------------------------------------------------------------------------------- child: segments fixture

RETENTION_CONFIG = {"segment.bytes": 1 << 20, "segment.index.bytes": 4096, "retention.ms": 3650 * 86_400_000,
                    "retention.bytes": 1 << 50}


def child_build_segments(path: str, segments: int) -> None:
    # Fixture only: durability of these files does not matter, and fsync-per-roll would make building
    # 10,000 segments take minutes. This child process is the only one patched.
    os.fsync = os.fdatasync = lambda fd: None  # type: ignore[assignment]
    values = [b"v" * VALUE_BYTES] * 10
    keys = [b"k%d" % i for i in range(10)]
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", config=RETENTION_CONFIG)
    made = 0
    while made < segments:
        # Reopen every 1,000 segments: the writer keeps each sealed segment's index and time index mapped
        # (two descriptors), so one writer handle rolling 10,000 times runs out of descriptors.
        with pylog.open(path, log_cleaner_enable=False) as store:
            p = store.topic("t").partition(0)
            for _ in range(min(1000, segments - made)):
                p.append_values(values, keys=keys)
                p.roll()
                made += 1
    os.sync()


# ---------------------------------------------------------------------------------------------- sections

class Bench:
    def __init__(self, root: str, args: argparse.Namespace) -> None:
        self.root = root
        self.args = args
        self.failures: list[str] = []

    def compaction(self, order: str, first: bool) -> None:
        a = self.args
        src = os.path.join(self.root, f"src-{order}")
        work = os.path.join(self.root, f"work-{order}")
        shutil.rmtree(src, ignore_errors=True)
        ids = key_ids(order, a.records, a.keys)
        latest = latest_offsets(ids, a.keys)
        distinct = int((latest >= 0).sum())
        t_write = write_dataset(src, ids, a.keys, a.per_call, a.segment_mb * MiB)
        n = a.records
        label = f"{n / 1e6:g}M recs, {distinct:,} keys, {order}"
        row(f"write ({label})", n / t_write / 1e6, "M rec/s", "", f"append_values, {a.per_call:,} per call")

        # -- baselines, same data
        scans = []
        for _ in range(a.repeat):
            os.sync()
            dt, got = scan_columns(src)
            assert got == n, (got, n)
            scans.append(dt)
        t_scan = min(scans)
        row("baseline: read_columns scan", n / t_scan / 1e6, "M rec/s", "", "every record, 100,000 per call")

        # -- timed cleanings at the configured buffer, each on a fresh copy
        buffer_bytes = a.buffer_mb * MiB
        copies, runs = [], []
        for _ in range(a.repeat):
            os.sync()
            dt, size = copy_store(src, work)
            copies.append(dt)
            os.sync()
            res = run_child_compact(work, buffer_bytes, a.sample_ms)
            err = self.check(res, work, ids, latest, distinct, label)
            runs.append(res)
            shutil.rmtree(work, ignore_errors=True)
            if err:
                break
        t_copy = min(copies)
        best = min(runs, key=lambda r: r["seconds"])
        rate = best["records"] / best["seconds"]
        row("baseline: copy the segment files", n / t_copy / 1e6, "M rec/s", "",
            f"shutil.copyfile, {size / MiB:,.0f} MiB")
        r = best["result"]
        row(f"compact ({label})", rate / 1e6, "M rec/s", ">= 1 M rec/s", "vs read_columns scan rate",
            rate / (n / t_scan), rate >= 1e6, runs=[x["seconds"] for x in runs], result=r)
        row("  compaction time vs copying the files", best["seconds"], "s", "report", "vs copy time",
            best["seconds"] / t_copy)
        row("  compaction time vs read_columns scan", best["seconds"], "s", "report", "vs scan time",
            best["seconds"] / t_scan)
        secs = ", ".join(f"{x['seconds']:.2f}" for x in runs)
        note(f"runs {secs} s; passes {r['passes']}, read "
             f"{r['records_read']:,}, written {r['records_written']:,}, map {r['map_keys']:,} keys / "
             f"{r['map_bytes'] / MiB:.1f} MiB, segments {r['segments_before']} -> {r['segments_after']}")
        self.memory_rows(best, buffer_bytes, f"{a.buffer_mb} MiB buffer")

        if first:
            # -- the tight buffer: the smallest whole MiB that holds every key in one pass
            tight = MiB
            while map_capacity(tight) < distinct:
                tight += MiB
            if tight < buffer_bytes:
                os.sync()
                copy_store(src, work)
                os.sync()
                res = run_child_compact(work, tight, a.sample_ms)
                self.check(res, work, ids, latest, distinct, label + f", {tight // MiB} MiB buffer")
                shutil.rmtree(work, ignore_errors=True)
                rt = res["result"]
                row(f"compact, tight {tight // MiB} MiB buffer", res["records"] / res["seconds"] / 1e6, "M rec/s",
                    ">= 1 M rec/s", f"{rt['passes']} pass(es), vs {a.buffer_mb} MiB run",
                    best["seconds"] / res["seconds"], res["records"] / res["seconds"] >= 1e6, result=rt)
                self.memory_rows(res, tight, f"{tight // MiB} MiB buffer")
            if a.tracemalloc:
                for buf in sorted({buffer_bytes, tight}):
                    copy_store(src, work)
                    os.sync()
                    res = run_child_compact(work, buf, a.sample_ms, trace=True)
                    self.check(res, work, ids, latest, distinct, label + " (tracemalloc)")
                    shutil.rmtree(work, ignore_errors=True)
                    peak = res["tracemalloc_peak"]
                    row(f"  tracemalloc peak, {buf // MiB} MiB buffer", peak / MiB, "MiB", "<= buffer",
                        "vs dedupe buffer size", peak / buf, peak <= buf,
                        seconds_under_tracemalloc=res["seconds"])
        shutil.rmtree(src, ignore_errors=True)

    def memory_rows(self, res: dict[str, Any], buffer_bytes: int, what: str) -> None:
        extra = res["anon_peak"] - res["anon_before"]
        row(f"  peak extra RssAnon, {what}", extra / MiB, "MiB", "<= buffer", "vs dedupe buffer size",
            extra / buffer_bytes, extra <= buffer_bytes, samples=res["samples"])
        if res["hwm_before"] is not None:
            hwm = res["hwm_after"] - res["hwm_before"]
            note(f"VmHWM delta {hwm / MiB:,.1f} MiB (includes the mmapped segment files; RssFile after: "
                 f"{res['file_after'] / MiB:,.1f} MiB); RssAnon sampled {res['samples']:,} times")

    def check(self, res: dict[str, Any], work: str, ids: np.ndarray, latest: np.ndarray, distinct: int,
              label: str) -> str | None:
        r = res["result"]
        err = None
        if r["skipped"]:
            err = f"cleaning skipped: {r['skipped']}"
        elif r["passes"] == 1 and r["records_written"] != distinct:
            err = f"records_written {r['records_written']:,}, expected {distinct:,}"
        else:
            err = verify(work, ids, latest)
        if err:
            self.failures.append(f"{label}: {err}")
            print(f"FAIL  correctness ({label}): {err}", flush=True)
        return err

    def retention(self) -> None:
        a = self.args
        path = os.path.join(self.root, "retention")
        shutil.rmtree(path, ignore_errors=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, os.path.abspath(__file__), "--_build-segments", path, "--segments",
                        str(a.segments)], check=True)
        built = time.perf_counter() - t
        pdir = partition_dir(path)
        os.sync()
        with pylog.open(path, log_cleaner_enable=False) as store:
            p = store.topic("t").partition(0)
            nseg = len(p.segments)
            t = time.perf_counter()
            res = store.enforce_retention("t")
            first = time.perf_counter() - t
            assert not res[0].deleted_segments, res
            times = []
            for _ in range(a.retention_reps):
                t = time.perf_counter()
                res = store.enforce_retention("t")
                times.append(time.perf_counter() - t)
                assert not res[0].deleted_segments, res
            fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1

        def listing() -> float:
            t = time.perf_counter()
            names = os.listdir(pdir)
            for name in names:
                if name.endswith(".log"):
                    os.stat(os.path.join(pdir, name))
            return time.perf_counter() - t

        base = [listing() for _ in range(a.retention_reps)]
        med, lo, bmed = statistics.median(times), min(times), statistics.median(base)
        row(f"baseline: listdir + stat of {nseg:,} .log files", bmed * 1e3, "ms", "", "median")
        row(f"enforce_retention, {nseg:,} segments, none due", med * 1e3, "ms", "< 100 ms",
            "median vs listdir + stat", med / bmed, med < 0.1, min_ms=lo * 1e3, runs=len(times))
        row("  same, fastest run", lo * 1e3, "ms", "< 100 ms", "min vs listdir + stat", lo / min(base), lo < 0.1)
        row("  first call after open (becomes the writer)", first * 1e3, "ms", "report", "vs median check",
            first / med)
        note(f"fixture built in {built:.1f} s; descriptors open after the checks: {fds}")
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--quick", action="store_true", help="small sizes, same code paths: a smoke run in seconds")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--records", type=int, default=10_000_000, help="records written before compaction")
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    ap.add_argument("--per-call", type=int, default=100_000, help="records per append_values call")
    ap.add_argument("--key-orders", default="random,shuffled",
                    help="comma-separated: random, shuffled, sequential (see above)")
    ap.add_argument("--segment-mb", type=int, default=256, help="segment.bytes of the compacted topic, MiB")
    ap.add_argument("--buffer-mb", type=int, default=128, help="log.cleaner.dedupe.buffer.size, MiB")
    ap.add_argument("--repeat", type=int, default=3, help="timed cleanings (and scans) per key order; best kept")
    ap.add_argument("--sample-ms", type=float, default=1.0, help="RssAnon sampling interval")
    ap.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false",
                    help="skip the untimed tracemalloc cleanings")
    ap.add_argument("--segments", type=int, default=10_000, help="segments for the retention check")
    ap.add_argument("--retention-reps", type=int, default=50, help="timed retention checks")
    ap.add_argument("--skip-compaction", action="store_true")
    ap.add_argument("--skip-retention", action="store_true")
    ap.add_argument("--_compact", help=argparse.SUPPRESS)
    ap.add_argument("--_buffer", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_trace", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_build-segments", dest="build_segments", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._compact:
        print("RESULT " + json.dumps(child_compact(args._compact, args._buffer, args.sample_ms, args._trace)))
        return 0
    if args.build_segments:
        child_build_segments(args.build_segments, args.segments)
        return 0
    if args.quick:
        args.records, args.keys, args.per_call, args.segment_mb = 200_000, 10_000, 20_000, 4
        args.repeat, args.segments, args.retention_reps = 1, 300, 10
    orders = [o.strip() for o in args.key_orders.split(",") if o.strip()]
    root = args.dir or tempfile.mkdtemp(prefix="pylog-bench-cleaner-")
    os.makedirs(root, exist_ok=True)
    print(f"pylog {pylog.__version__} cleaner benchmark in {root} (python {sys.version.split()[0]}, "
          f"numpy {np.__version__}, {os.cpu_count()} cpus)")
    print(f"{'':6}{'figure':<50} {'value':>12} {'unit':<9} {'ratio':>8}  {'baseline':<34} target")
    if args.quick:
        note("--quick: sizes far below the issue's; fixed costs dominate, so the targets do not apply")
    b = Bench(root, args)
    try:
        if not args.skip_compaction:
            for i, order in enumerate(orders):
                b.compaction(order, first=i == 0)
        if not args.skip_retention:
            b.retention()
    finally:
        for name in [*(f"src-{o}" for o in orders), *(f"work-{o}" for o in orders), "retention"]:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if not args.skip_compaction:
        row("correctness: one record per key, its latest", len(b.failures), "failures", "0", "checked after "
            "every cleaning", None, not b.failures, failures=b.failures)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(ROWS, f, indent=2)
    return 1 if b.failures else 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
