"""The compiled accelerator's targets (issue 16), both paths side by side, each against its baseline.

Usage::

    python benchmarks/bench_accel.py                # 1,000,000 records, 3 rounds: a few minutes
    python benchmarks/bench_accel.py --quick        # 200,000 records, 1 round: ~1 minute
    python benchmarks/bench_accel.py --big 10000000 # also random reads over 10^7 records (~1.2 GB written)
    python benchmarks/bench_accel.py --workloads realistic  # only the realistic workload (see below)
    python benchmarks/bench_accel.py --workloads realistic --paths accelerated --big 100000000 --dir /tmp
        # also the realistic workload's random read over 10^8 records (~12 GB written under --dir)

Every figure is measured in a child process per path and round: one with the compiled extension (the
default when it is built) and one with ``PYLOG_PURE_PYTHON=1``, alternating, so both paths see the same
machine. Each child also measures the figure's baseline in the same process (an LMDB cursor, one
``f.write`` of a joined batch, one ``bytes.join``...), and the table gives, over the rounds, the range of
each path's figure, the baseline's range and the accelerated path's ratio against the baseline (per
round, then its range). The 1-minute load average is printed at each round: this machine is shared.

Two workloads, each figure against the baseline of the same child process:

- ``current`` (issue 16's): 100-byte values, 8-byte keys, the same 1,000 of each appended over and over in
  batches of 1,000 records with ``append_values``, the segment rolled before reading, a consumer with
  ``max_poll_records=5000``; ``send()`` of one value object (and 1,000 keys) in turn.
- ``realistic`` (issue 26's): what a program does with the settings users copy from the docs: distinct
  random 100-byte values (and distinct 8-byte keys for the keyed send), sent one by one with
  ``store.producer(acks=1, linger_ms=5)``, then read back in the same process from the partition as the
  producer left it (not rolled: the producer's close hands the writer lock back, so reads go through the
  active segment as any reader's do), by ``read()`` and by a consumer with the default settings, each
  loop touching every record's value (``len``) as the LMDB baseline's loop does.

Page cache, no fsync. Nothing asserts: timed assertions do not belong in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
VALUE = 100
KEY = 8
BATCH = 1000


def _records(n: int) -> tuple[list[bytes], list[bytes]]:
    rnd = random.Random(7)
    keys = [rnd.randbytes(KEY) for _ in range(BATCH)]
    values = [rnd.randbytes(VALUE) for _ in range(BATCH)]
    return keys, values


def send_all(producer: Any, topic: str, values: list[bytes], keys: list[bytes] | None) -> None:
    """``send()`` every value one at a time (with its key when ``keys`` are given), then ``flush()``."""
    send = producer.send
    if keys is not None:
        for i in range(len(values)):
            send(topic, values[i], key=keys[i])
    else:
        for v in values:
            send(topic, v)
    producer.flush()


def _best(repeat: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeat))


# ------------------------------------------------------------------------------------------- figures
# Each returns {figure name: (value, baseline value)}; rates in M rec/s, latencies in us or ms.


def _lmdb_env(path: str) -> Any:
    import lmdb
    return lmdb.open(path, map_size=16 << 30, sync=False, metasync=False, max_dbs=0, lock=True)


def figure_reads(root: str, n: int, repeat: int) -> dict[str, tuple[float, float]]:
    """read() of 1,000 per call and consumer iteration, both against an LMDB cursor over the same records;
    read_columns against one bytes.join of the same payload."""
    import pylog
    keys, values = _records(n)
    out: dict[str, tuple[float, float]] = {}
    with pylog.open(os.path.join(root, "reads"), log_cleaner_enable=False) as store:
        store.create_topic("t")
        p = store.topic("t").partition(0)
        for _ in range(n // BATCH):
            p.append_values(values, keys=keys)
        p.roll()  # sealed segments, as a consumer behind the writer reads them
        env = _lmdb_env(os.path.join(root, "reads.lmdb"))
        pack = struct.Struct(">Q").pack
        for b in range(n // BATCH):
            with env.begin(write=True) as txn:
                # the record's key and value, under an 8-byte sequence number (LMDB's key)
                txn.cursor().putmulti([(pack(b * BATCH + i), keys[i] + values[i]) for i in range(BATCH)],
                                      append=True)

        def lmdb_cursor() -> float:
            t = time.perf_counter()
            got = 0
            with env.begin() as txn:
                for _k, _v in txn.cursor().iternext():
                    got += 1
            assert got == n
            return n / (time.perf_counter() - t)

        def read_1000() -> float:
            t = time.perf_counter()
            off = 0
            while off < n:
                off = p.read(off, max_records=1000)[-1].offset + 1
            return n / (time.perf_counter() - t)

        def consume() -> float:
            c = store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0, max_poll_records=5000,
                               enable_auto_commit=False)
            t = time.perf_counter()
            got = sum(1 for _ in c)
            rate = got / (time.perf_counter() - t)
            c.close()
            assert got == n
            return rate

        def read_columns() -> float:
            t = time.perf_counter()
            off = 0
            while off < n:
                off = int(p.read_columns(off, max_records=100_000).offsets[-1]) + 1
            return n / (time.perf_counter() - t)

        # The memcpy ceiling: the bytes read_columns returns for 100,000 records (their keys and values), as
        # one join of 100 contiguous 108 KB blocks, the size of a batch's data.
        payload = [b"".join([*keys, *values]) for _ in range(100)]

        def join() -> float:
            t = time.perf_counter()
            for _ in range(n // 100_000):
                b"".join(payload)
            return n / (time.perf_counter() - t)

        lm = _best(repeat, lmdb_cursor)
        out["read() as records, 1,000 per call"] = (_best(repeat, read_1000) / 1e6, lm / 1e6)
        out["consumer iteration, max_poll_records=5000"] = (_best(repeat, consume) / 1e6, lm / 1e6)
        out["read_columns, 100,000 per call"] = (_best(repeat, read_columns) / 1e6, _best(repeat, join) / 1e6)
        env.close()
    return out


def figure_appends(root: str, n: int, repeat: int) -> dict[str, tuple[float, float]]:
    """append_values of batches of 1,000 against one f.write(b"".join(batch)) per batch and against LMDB
    putmulti of the same records (page cache both)."""
    import pylog
    keys, values = _records(n)
    batches = n // BATCH
    out: dict[str, tuple[float, float]] = {}
    with pylog.open(os.path.join(root, "appends"), log_cleaner_enable=False) as store:
        runs = iter(range(10_000))

        def append() -> float:
            name = f"a{next(runs)}"
            store.create_topic(name)
            p = store.topic(name).partition(0)
            os.sync()
            t = time.perf_counter()
            for _ in range(batches):
                p.append_values(values, keys=keys)
            rate = n / (time.perf_counter() - t)
            store.delete_topic(name)
            return rate

        def plain() -> float:
            path = os.path.join(root, "plain.bin")
            os.sync()
            t = time.perf_counter()
            with open(path, "wb") as f:
                for _ in range(batches):
                    f.write(b"".join([*keys, *values]))
            rate = n / (time.perf_counter() - t)
            os.unlink(path)
            return rate

        def lmdb_putmulti() -> float:
            path = os.path.join(root, f"put{next(runs)}.lmdb")
            env = _lmdb_env(path)
            pack = struct.Struct(">Q").pack
            os.sync()
            t = time.perf_counter()
            for b in range(batches):
                with env.begin(write=True) as txn:
                    txn.cursor().putmulti([(pack(b * BATCH + i), keys[i] + values[i]) for i in range(BATCH)],
                                          append=True)
            rate = n / (time.perf_counter() - t)
            env.close()
            shutil.rmtree(path)
            return rate

        a = _best(repeat, append)
        out["append_values, batches of 1,000 (vs f.write of the joined batch)"] = (a / 1e6, _best(repeat, plain) / 1e6)
        out["append_values, batches of 1,000 (vs LMDB putmulti)"] = (a / 1e6, _best(repeat, lmdb_putmulti) / 1e6)
    return out


def figure_random(root: str, sizes: list[int], samples: int) -> dict[str, tuple[float, float]]:
    """Median of a one-record read at a random offset, CRC verified, against the same read without CRC
    verification (``verify=False``, what checking costs on top of finding and decoding the record); the two
    kinds interleaved over distinct offsets (``Bench.random_read_medians``), so both see the same page cache."""
    import pylog
    sys.path.insert(0, HERE)
    from bench_storage import Bench  # the same measurement bench_storage.py prints
    keys, values = _records(BATCH)
    out: dict[str, tuple[float, float]] = {}
    with pylog.open(os.path.join(root, "random"), log_cleaner_enable=False) as store:
        for size in sizes:
            name = f"r{size}"
            store.create_topic(name)
            p = store.topic(name).partition(0)
            for _ in range(max(1, size // BATCH)):
                p.append_values(values, keys=keys)
            os.sync()
            out[f"random read of one record, {size:.0e} records (us, median)"] = Bench.random_read_medians(p, samples)
    return out


def figure_send(root: str, n: int) -> dict[str, tuple[float, float]]:
    """send() one at a time, and with a key over 4 partitions, against a lock + list.append per call (the
    floor of any thread-safe in-process send)."""
    import pylog
    sys.path.insert(0, HERE)
    from bench_clients import send_floor, send_rate  # the figures bench_clients.py prints

    value = b"x" * VALUE
    floor = send_floor(n, value) / 1e6
    out: dict[str, tuple[float, float]] = {}
    with pylog.open(os.path.join(root, "send"), log_cleaner_enable=False) as store:
        store.create_topic("u")
        out["send() one at a time"] = (send_rate(store, "u", n, value) / 1e6, floor)
        store.create_topic("k", partitions=4)
        keys = [random.Random(i).randbytes(KEY) for i in range(1000)]
        out["send() with a key, 4 partitions"] = (send_rate(store, "k", n // 2, value, keys) / 1e6, floor)
    return out


def figure_latency(root: str, n: int) -> dict[str, tuple[float, float]]:
    """End-to-end latency p50, send to a consumer in another process (ms), against the same with the
    polling fallback instead of wake-ups."""
    sys.path.insert(0, HERE)
    import bench_clients  # noqa: E402 (the benchmark's own helpers: the producer/consumer processes)

    import pylog.storage.notify
    lat = {}
    saved = pylog.storage.notify.ENABLED
    try:
        for use_notify in (False, True):
            pylog.storage.notify.ENABLED = use_notify
            lat[use_notify] = bench_clients._latency_once(root, n, use_notify)
    finally:
        pylog.storage.notify.ENABLED = saved
    return {"end-to-end latency p50, another process (ms)": (statistics.median(lat[True]) / 1e6,
                                                              statistics.median(lat[False]) / 1e6)}


def figure_realistic(root: str, n: int, repeat: int, samples: int,
                     batch_size: int | None = None) -> dict[str, tuple[float, float]]:
    """Issue 26's workload (see the module docstring): send, keyed send, read(), consumer iteration and a
    random read, each against its baseline in this process. ``batch_size``: the producers' (None: the
    default, what users get)."""
    import pylog
    sys.path.insert(0, HERE)
    from bench_clients import send_floor
    from bench_storage import Bench
    rnd = random.Random(26)
    values = [rnd.randbytes(VALUE) for _ in range(n)]
    keys = [struct.pack(">Q", i) for i in range(n)]
    out: dict[str, tuple[float, float]] = {}
    settings: dict[str, Any] = {"acks": 1, "linger_ms": 5}  # docs/CLIENTS.md's settings
    if batch_size is not None:
        settings["batch_size"] = batch_size
    floor = send_floor(n, values[0]) / 1e6
    with pylog.open(os.path.join(root, "realistic"), log_cleaner_enable=False) as store:
        runs = iter(range(10_000))

        def send(keyed: bool) -> float:
            name = f"{'k' if keyed else 'u'}{next(runs)}"
            store.create_topic(name, partitions=4 if keyed else 1)
            with store.producer(**settings) as producer:
                t = time.perf_counter()
                send_all(producer, name, values, keys if keyed else None)
                rate = n / (time.perf_counter() - t)
            return rate

        out["realistic: send() one at a time"] = (_best(repeat, lambda: send(False)) / 1e6, floor)
        out["realistic: send() with a key, 4 partitions"] = (_best(repeat, lambda: send(True)) / 1e6, floor)
        # Random reads of a small partition written the same way (10^4 records).
        store.create_topic("small")
        with store.producer(**settings) as producer:
            for v in values[:10_000]:
                producer.send("small", v)
        small = store.topic("small").partition(0)
        # What is read: the first send's partition, as its producer left it.
        p = store.topic("u0").partition(0)
        assert p.log_end_offset == n
        env = _lmdb_env(os.path.join(root, "realistic.lmdb"))
        pack = struct.Struct(">Q").pack
        for b in range(0, n, BATCH):
            with env.begin(write=True) as txn:
                txn.cursor().putmulti([(pack(i), keys[i] + values[i]) for i in range(b, min(n, b + BATCH))],
                                      append=True)
        values.clear()  # what a program keeps of what it sent: nothing
        keys.clear()

        def lmdb_cursor() -> float:
            t = time.perf_counter()
            got = 0
            with env.begin() as txn:
                for _k, v in txn.cursor().iternext():
                    got += len(v)
            rate = n / (time.perf_counter() - t)
            assert got == n * (KEY + VALUE)
            return rate

        def read_1000() -> float:
            t = time.perf_counter()
            off = got = 0
            while off < n:
                recs = p.read(off, max_records=1000)
                for r in recs:
                    got += len(r.value)
                off = recs[-1].offset + 1
            rate = n / (time.perf_counter() - t)
            assert got == n * VALUE
            return rate

        def consume() -> float:
            c = store.consumer("u0", auto_offset_reset="earliest", consumer_timeout_ms=0, enable_auto_commit=False)
            t = time.perf_counter()
            got = 0
            for r in c:
                got += len(r.value)
            rate = n / (time.perf_counter() - t)
            c.close()
            assert got == n * VALUE
            return rate

        lm = _best(repeat, lmdb_cursor)
        out["realistic: read() as records, 1,000 per call"] = (_best(repeat, read_1000) / 1e6, lm / 1e6)
        out["realistic: consumer iteration, default settings"] = (_best(repeat, consume) / 1e6, lm / 1e6)
        out["realistic: random read of one record, 1e+04 records (us, median)"] = (
            Bench.random_read_medians(small, samples))
        out[f"realistic: random read of one record, {n:.0e} records (us, median)"] = (
            Bench.random_read_medians(p, samples))
        env.close()
    return out


def figure_realistic_big(root: str, n: int, samples: int,
                         batch_size: int | None = None) -> dict[str, tuple[float, float]]:
    """The realistic workload's random read over ``n`` records (``--big`` with the realistic workload): sent
    one by one with the same producer settings (values cycled from 1,000,000 distinct ones: ``n`` distinct
    values would not fit in memory at 10^8), so the partition holds the producer's batches (cut at
    ``batch_size``) in segments of 1 GiB, all sealed but the last; against ``verify=False``. Reads by a handle
    that is not the writer, as in :func:`figure_realistic`."""
    import pylog
    sys.path.insert(0, HERE)
    from bench_storage import Bench
    rnd = random.Random(26)
    pool = [rnd.randbytes(VALUE) for _ in range(min(n, 1_000_000))]
    settings: dict[str, Any] = {"acks": 1, "linger_ms": 5}
    if batch_size is not None:
        settings["batch_size"] = batch_size
    with pylog.open(os.path.join(root, "realistic-big"), log_cleaner_enable=False) as store:
        store.create_topic("big")
        with store.producer(**settings) as producer:
            send = producer.send
            left = n
            while left:
                for v in pool[:left]:
                    send("big", v)
                left -= min(left, len(pool))
        p = store.topic("big").partition(0)
        assert p.log_end_offset == n
        return {f"realistic: random read of one record, {n:.0e} records (us, median)": (
            Bench.random_read_medians(p, samples))}


# ---------------------------------------------------------------------------------------------- table

#: figure -> (target on the accelerated figure, how to read the ratio, the baseline's name, higher is better)
TARGETS: dict[str, tuple[str, Callable[[float, float], bool], str, bool]] = {
    "read() as records, 1,000 per call": (">= 1.2x LMDB", lambda v, b: v / b >= 1.2, "LMDB cursor", True),
    "consumer iteration, max_poll_records=5000": (">= 3.5 M/s and >= 1.0x LMDB",
                                                  lambda v, b: v >= 3.5 and v / b >= 1.0, "LMDB cursor", True),
    "append_values, batches of 1,000 (vs f.write of the joined batch)": (
        ">= 0.6x", lambda v, b: v / b >= 0.6, "f.write(join) per batch", True),
    "append_values, batches of 1,000 (vs LMDB putmulti)": (">= 3x", lambda v, b: v / b >= 3, "LMDB putmulti", True),
    "read_columns, 100,000 per call": (">= 0.6x", lambda v, b: v / b >= 0.6, "bytes.join, same payload", True),
    "send() one at a time": (">= 2 M/s", lambda v, b: v >= 2, "lock + list.append", True),
    "send() with a key, 4 partitions": (">= 1.5 M/s", lambda v, b: v >= 1.5, "lock + list.append", True),
    "end-to-end latency p50, another process (ms)": ("<= 0.3 ms", lambda v, b: v <= 0.3, "polling fallback", False),
    "realistic: send() one at a time": (">= 2 M/s or >= 1.0x", lambda v, b: v >= 2 or v / b >= 1.0,
                                        "lock + list.append", True),
    "realistic: send() with a key, 4 partitions": (">= 1.5 M/s", lambda v, b: v >= 1.5, "lock + list.append", True),
    "realistic: read() as records, 1,000 per call": (">= 1.2x LMDB", lambda v, b: v / b >= 1.2, "LMDB cursor", True),
    "realistic: consumer iteration, default settings": (
        ">= 3.5 M/s and >= 1.2x LMDB", lambda v, b: v >= 3.5 and v / b >= 1.2, "LMDB cursor", True),
}


def _child(args: argparse.Namespace) -> int:
    import pylog
    root = tempfile.mkdtemp(prefix="pylog-accel-", dir=args.dir)
    try:
        res: dict[str, Any] = {"accelerated": pylog.ACCELERATED}
        if "current" in args.workloads:
            res.update(figure_reads(root, args.records, args.repeat))
            res.update(figure_appends(root, args.records, args.repeat))
            res.update(figure_random(root, [10_000] + ([args.big] if args.big else []), args.samples))
            res.update(figure_send(root, args.records))
            res.update(figure_latency(root, args.latency_records))
        if "realistic" in args.workloads:
            res.update(figure_realistic(root, args.records, args.repeat, args.samples, args.batch_size))
            if args.big:
                res.update(figure_realistic_big(root, args.big, args.samples, args.batch_size))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(res))
    return 0


def fmt_range(xs: list[float]) -> str:
    """``lo-hi`` of a figure over rounds (3 significant digits), or the one value when they agree."""
    lo, hi = min(xs), max(xs)
    return f"{lo:.3g}" if len(xs) == 1 or f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"


def fmt_median(xs: list[float], unit: str = "") -> str:
    """``median[lo-hi]`` of a figure over rounds (3 significant digits); empty when not measured."""
    if not xs:
        return "-"
    med = f"{statistics.median(xs):.3g}{unit}"
    return med if len(xs) == 1 else f"{med} [{fmt_range(xs)}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200,000 records, one round")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs both paths")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per figure in a round (best kept)")
    ap.add_argument("--samples", type=int, default=20_000, help="random reads per latency figure")
    ap.add_argument("--big", type=int, default=0, help="also random reads over this many records")
    ap.add_argument("--latency-records", type=int, default=2000)
    ap.add_argument("--workloads", default="current,realistic",
                    help="comma-separated: current, realistic (default: both)")
    ap.add_argument("--paths", default="accelerated,pure",
                    help="comma-separated: accelerated, pure (default: both, alternating)")
    ap.add_argument("--dir", help="where the children write (default: the system temporary directory)")
    ap.add_argument("--json", help="also write every round's figures as JSON to this file")
    ap.add_argument("--batch-size", type=int, help="the realistic workload's producer batch_size (default: "
                    "the producer's default)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.rounds, args.repeat, args.samples, args.latency_records = 200_000, 1, 1, 2000, 500
    args.workloads = [w for w in args.workloads.split(",") if w]
    if set(args.workloads) - {"current", "realistic"}:
        ap.error(f"--workloads: unknown {sorted(set(args.workloads) - {'current', 'realistic'})}")
    paths = [p for p in args.paths.split(",") if p]
    if not paths or set(paths) - {"accelerated", "pure"}:
        ap.error("--paths: accelerated and/or pure")
    if args.child:
        return _child(args)
    rounds: dict[str, list[dict[str, Any]]] = {"pure": [], "accelerated": []}
    passthrough = [f"--records={args.records}", f"--repeat={args.repeat}", f"--samples={args.samples}",
                   f"--big={args.big}", f"--latency-records={args.latency_records}",
                   f"--workloads={','.join(args.workloads)}"] + (
                       [f"--dir={args.dir}"] if args.dir else []) + (
                       [f"--batch-size={args.batch_size}"] if args.batch_size else [])
    for r in range(args.rounds):
        for path in paths:
            env = dict(os.environ)
            env.pop("PYLOG_PURE_PYTHON", None)
            if path == "pure":
                env["PYLOG_PURE_PYTHON"] = "1"
            load = os.getloadavg()[0]
            print(f"round {r + 1}/{args.rounds}, {path}: load average {load:.2f}", flush=True)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *passthrough], env=env,
                                 capture_output=True, text=True)
            if out.returncode:
                sys.stderr.write(out.stderr)
                return out.returncode
            res = json.loads(out.stdout.strip().splitlines()[-1])
            if path == "accelerated" and not res.pop("accelerated"):
                print("error: the compiled extension is not live (pylog.ACCELERATED is False): build it first",
                      file=sys.stderr)
                return 1
            res.pop("accelerated", None)
            res["load"] = load
            rounds[path].append(res)
    import pylog
    print(f"\npylog {pylog.__version__}: {args.records:,} records, {args.rounds} round(s), best of {args.repeat} "
          f"per round; each column: median over rounds [range]; ratio: accelerated / baseline of the same child")
    head = (f"{'figure':<66} {'pure':>19} {'accelerated':>19} {'baseline':>19}  {'ratio':>19}  target")
    print(head)
    print("-" * len(head))
    acc_rounds = rounds["accelerated"] or rounds["pure"]  # the path whose ratios are judged
    for name in acc_rounds[0]:
        if name == "load":
            continue
        acc = [r[name][0] for r in rounds["accelerated"]]
        pure = [r[name][0] for r in rounds["pure"]]
        base = [r[name][1] for r in acc_rounds]
        ratios = [r[name][0] / r[name][1] for r in acc_rounds]
        target, met, base_name, _higher = TARGETS.get(name, ("<= 15 us at 10^4; <= 1.5x that at the big size",
                                                              None, "verify=False", False))
        verdict = ""
        if met is not None:
            verdict = "MET" if all(met(r[name][0], r[name][1]) for r in acc_rounds) else (
                "MISSED" if not any(met(r[name][0], r[name][1]) for r in acc_rounds) else "MIXED")
        print(f"{name:<66} {fmt_median(pure):>19} {fmt_median(acc):>19} {fmt_median(base):>19}  "
              f"{fmt_median(ratios, 'x'):>19}  {target} [{base_name}] {verdict}")
    loads = [r["load"] for p in rounds.values() for r in p]
    print(f"load average at child starts: {min(loads):.2f}-{max(loads):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rounds, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
