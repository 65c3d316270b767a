"""pylog against real peers: Kafka's benchmark (seed 001) on this machine, with plots and a report (issue 6).

    python benchmarks/suite.py [--quick] [--dir SCRATCH] [--out benchmarks/results] [--peers pylog,file,...]

Runs the seed's workloads (1 producer, 3 producer processes, 1 consumer, 3 consumer processes, producer
and consumer together, throughput against message size and against data stored, end-to-end latency)
against pylog and, side by side in the same run, the peers of ``suite_peers.py``: pylog's Kafka-style
clients, a plain file writer (the physical baseline), LMDB, a SQLite queue (persist-queue) and Redis
Streams on a private ``redis-server`` (skipped, with a note, when that program is not installed). Writes
``REPORT.md``, ``results.json`` and PNG plots into ``--out``.

The full run takes 10 to 15 minutes and needs 12 GB free under ``--dir`` (default: the system's temporary
directory); ``--quick`` is a smoke run of well under a minute that needs 1 GB (the test suite runs it). The
suite refuses to start, with exit code 3, when the scratch directory is missing or too small. Every round
checks that its consumers read back exactly what its producers wrote (see ``suite_workloads.py``).

Modules: ``suite_peers.py`` (the adapters), ``suite_workloads.py`` (the workloads), ``suite_report.py``
(plots and REPORT.md); this one parses the command line, checks the scratch space and runs the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

# benchmarks/ is not a package: when run as a script its directory is on sys.path; make it so when
# this module is imported from elsewhere (tests) too.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import suite_peers  # noqa: E402
import suite_report  # noqa: E402
import suite_workloads as wl  # noqa: E402
from suite_workloads import SuiteError  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


class ExitCode(enum.IntEnum):
    """The suite's exit status (the same meanings as the ``pylog`` command's)."""

    OK = 0
    FAILED = 1  # a round failed its checks or a process died
    USAGE = 2  # bad arguments (argparse's own exit status)
    CANNOT_RUN = 3  # no usable scratch space


def check_scratch(path: str, need: int) -> None:
    """Refuse to run unless ``path`` is an existing, writable directory with ``need`` bytes free.

    :raises SuiteError: naming the path and what is missing.
    """
    if not os.path.isdir(path):
        raise SuiteError(f"scratch directory {path!r} does not exist: create it, or pass --dir with a directory "
                         f"that has {need / 1e9:.1f} GB free")
    if not os.access(path, os.W_OK | os.X_OK):
        raise SuiteError(f"scratch directory {path!r} is not writable")
    free = shutil.disk_usage(path).free
    if free < need:
        raise SuiteError(f"scratch directory {path!r} has {free / 1e9:.1f} GB free; this run needs "
                         f"{need / 1e9:.1f} GB (--quick needs {wl.QUICK.scratch_bytes / 1e9:.1f} GB)")


def _machine(scratch: str) -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(line.split()[1] for line in f if line.startswith("MemTotal"))) * 1024
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "kernel": platform.release(),
            "python": sys.version.split()[0], "scratch": scratch,
            "scratch_free_bytes": shutil.disk_usage(scratch).free}


def _versions(peers: list[suite_peers.Peer]) -> dict[str, str]:
    import matplotlib
    import numpy
    out = {"numpy": numpy.__version__, "matplotlib": matplotlib.__version__}
    for p in peers:
        out.update(p.versions())
    return out


def _say(text: str) -> None:
    print(text, flush=True)


def run(plan: wl.Plan, peers: list[suite_peers.Peer]) -> dict[str, Any]:
    """Every workload, ``plan.repeats`` rounds per peer, peers interleaved within each repeat."""
    tp: dict[str, dict[str, list[dict[str, Any]]]] = {w: {p.name: [] for p in peers} for w in suite_report.THROUGHPUT}
    sizes: dict[str, dict[int, list[dict[str, Any]]]] = {p.name: {s: [] for s in plan.message_sizes} for p in peers}
    lat: dict[str, list[dict[str, Any]]] = {p.name: [] for p in peers}
    stored: dict[str, dict[str, Any]] = {}

    def show(what: str, peer: str, r: dict[str, Any]) -> None:
        _say(f"  {what:<28} {peer:<13} {r['records_s']:>13,.0f} rec/s {r['mb_s']:>9.1f} MB/s"
             + ("  (capped)" if r["capped"] else ""))

    for rep in range(plan.repeats):
        _say(f"round {rep + 1} of {plan.repeats}")
        for n in (1, 3):
            for p in peers:
                prod, cons = wl.produce_consume(p, plan, n)
                tp[f"produce{n}"][p.name].append(prod)
                tp[f"consume{n}"][p.name].append(cons)
                show(f"{n} producer(s)", p.name, prod)
                show(f"{n} consumer(s)", p.name, cons)
        for p in peers:
            prod, cons = wl.together(p, plan)
            tp["together_produce"][p.name].append(prod)
            tp["together_consume"][p.name].append(cons)
            show("together: producer", p.name, prod)
            show("together: consumer", p.name, cons)
        for size in plan.message_sizes:
            for p in peers:
                r = wl.message_size(p, plan, size)
                sizes[p.name][size].append(r)
                show(f"{size:,}-byte values", p.name, r)
        for p in peers:
            r = wl.latency(p, plan)
            lat[p.name].append(r)
            _say(f"  {'latency':<28} {p.name:<13} p50 {r['p50']:.3f} ms  p99 {r['p99']:.3f} ms  "
                 f"p99.9 {r['p99.9']:.3f} ms")
    for p in peers:
        r = wl.stored_data(p, plan)
        stored[p.name] = r
        _say(f"  {'stored data':<28} {p.name:<13} {r['stored'] / (1 << 30):.2f} GiB in {r['seconds']:.1f} s, "
             f"footprint {r['footprint'] / max(r['stored'], 1):.2f}x the payload")
    return {"throughput": tp, "sizes": sizes, "latency": lat, "stored": stored}


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: small sizes, one round, same code paths")
    ap.add_argument("--dir", help="scratch directory for the data (must exist; default: the system temp dir)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where REPORT.md, results.json and the plots go "
                    "(default: benchmarks/results)")
    ap.add_argument("--peers", help="comma-separated subset of: " + ", ".join(c.name for c in suite_peers.PEERS))
    args = ap.parse_args(argv)
    plan = wl.QUICK if args.quick else wl.FULL
    names = [c.name for c in suite_peers.PEERS]
    wanted = names if not args.peers else [n.strip() for n in args.peers.split(",") if n.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        ap.error(f"unknown peer(s): {', '.join(unknown)}")
    base = args.dir or tempfile.gettempdir()
    try:
        check_scratch(base, plan.scratch_bytes)
    except SuiteError as e:
        print(f"suite: refusing to run: {e}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    scratch = tempfile.mkdtemp(prefix="pylog-suite-", dir=base)
    # SIGTERM (kill, a CI timeout) ends the run through the finally below: the Redis server is stopped and
    # the scratch data removed, instead of being left behind.
    signal.signal(signal.SIGTERM, _terminated)
    started = time.monotonic()
    load_before = os.getloadavg()
    skipped: dict[str, str] = {}
    redis_server: suite_peers.RedisServer | None = None
    try:
        peers: list[suite_peers.Peer] = []
        for cls in suite_peers.PEERS:
            if cls.name not in wanted:
                continue
            reason = cls.unavailable()
            if reason is None and cls is suite_peers.RedisPeer:
                try:
                    redis_server = suite_peers.RedisServer(scratch).__enter__()
                except (OSError, RuntimeError) as e:
                    reason = f"redis-server could not be started: {e}"
            if reason is not None:
                skipped[cls.name] = reason
                _say(f"skipping {cls.name}: {reason}")
                continue
            peers.append(cls(scratch, redis_server) if cls is suite_peers.RedisPeer else cls(scratch))
        if not peers:
            print("suite: no peer can run", file=sys.stderr)
            return ExitCode.CANNOT_RUN
        meta: dict[str, Any] = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "command": " ".join(["python", "benchmarks/suite.py", *(argv if argv is not None else sys.argv[1:])]),
                "mode": "quick" if args.quick else "full", "plan": dataclasses.asdict(plan), "machine": _machine(base),
                "versions": _versions(peers), "peers": {p.name: p.how for p in peers}, "skipped": skipped,
                "load_before": load_before}
        _say(f"pylog benchmark suite ({meta['mode']}) in {scratch}: " + ", ".join(p.name for p in peers))
        try:
            results = run(plan, peers)
        except SuiteError as e:
            print(f"suite: {e}", file=sys.stderr)
            return ExitCode.FAILED
        meta["load_after"] = os.getloadavg()
        meta["seconds"] = time.monotonic() - started
        written = suite_report.write(meta, results, args.out)
        _say(f"wrote {', '.join(written)} in {meta['seconds']:.0f} s")
    finally:
        if redis_server is not None:
            redis_server.__exit__(None, None, None)
        shutil.rmtree(scratch, ignore_errors=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
