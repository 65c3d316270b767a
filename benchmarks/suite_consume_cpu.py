"""The benchmark suite's produce-then-consume rounds (suite_workloads.py) with each peer's consumer CPU time per record.

Usage::

    python benchmarks/suite_consume_cpu.py                       # 3 consumer processes: pylog, pylog-client, lmdb
    python benchmarks/suite_consume_cpu.py --processes 1 --rounds 5 --peers pylog-client,lmdb

The suite's "3 consumer processes" row is an aggregate wall-clock rate (all records over last end - first
start) of three processes on this project's 2-core machine: three processes share two cores, so the row
measures the scheduler as much as the reader, and other jobs on the machine move it 2-5x. This script runs the
same rounds (the suite's full plan: 2,000,000 100-byte records per stream, reads of up to 500) and also reports
the consumers' CPU time per record (user + system of the consumer processes, ``RUSAGE_CHILDREN`` around their
round), which contention moves far less. Peers alternate within each round. Nothing asserts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import statistics
import sys
import tempfile

# benchmarks/ is not a package: on sys.path when run as a script, unless Python runs with a safe path (-P,
# PYTHONSAFEPATH, as the test suite's children do).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite_peers  # noqa: E402
import suite_workloads as W  # noqa: E402


def consume_round(peer: suite_peers.Peer, processes: int, records: int) -> tuple[float, float]:
    """One round: producers write, then consumers read back; (aggregate records/s, consumer CPU ns per record)."""
    plan = dataclasses.replace(W.FULL, records=records)
    peer.create(processes)
    try:
        written = W._run([(W._produce, (peer, s, plan.records, plan.value_size, plan.batch, plan.cap, None))
                          for s in range(processes)], W._timeout(plan.cap))
        totals = [W._CTX.Value("q", w["records"], lock=False) for w in written]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        read = W._run([(W._consume, (peer, s, totals[s], plan.value_size, plan.read_batch, plan.cap * 3))
                       for s in range(processes)], W._timeout(plan.cap * 3))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        peer.destroy()
    agg = W._aggregate(read)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return agg["records_s"], cpu / agg["records"] * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", default="pylog,pylog-client,lmdb")
    ap.add_argument("--records", type=int, default=W.FULL.records, help="per stream and round")
    ap.add_argument("--dir", help="scratch directory (default: the system temporary directory)")
    args = ap.parse_args(argv)
    names = [n for n in args.peers.split(",") if n]
    classes = {c.name: c for c in suite_peers.PEERS}
    root = tempfile.mkdtemp(prefix="pylog-consume-cpu-", dir=args.dir)
    got: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    try:
        for r in range(args.rounds):
            for name in names:
                rate, cpu = consume_round(classes[name](os.path.join(root, f"{name}-{r}")), args.processes,
                                          args.records)
                load = os.getloadavg()[0]
                got[name].append((rate, cpu, load))
                print(f"round {r + 1}: {name:<14} {rate / 1e6:6.2f} M rec/s  consumer CPU {cpu:5.0f} ns/record  "
                      f"load {load:.1f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.processes} consumer process(es), medians over {args.rounds} rounds [range]:")
    for name, xs in got.items():
        rates, cpus = [x[0] / 1e6 for x in xs], [x[1] for x in xs]
        print(f"{name:<14} {statistics.median(rates):6.2f} M rec/s [{min(rates):.2f}-{max(rates):.2f}]  "
              f"CPU {statistics.median(cpus):5.0f} ns/record [{min(cpus):.0f}-{max(cpus):.0f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
