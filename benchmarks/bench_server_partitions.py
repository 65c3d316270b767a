"""The Produce path's per-partition append, in process: does its cost grow with the partitions written?

``pylog serve`` at 500 partitions (acks=all, a librdkafka producer) serves ~0.4x of its 4-partition rate
(issue 25). This isolates the storage side of that: the call the server makes per partition of a Produce
request (``DataHandlers._append_one``'s core: ``decode_batches``, ``Partition.wait_to_write``,
``append_batch(in_turn=True, flush_policy=False)``, ``pass_turn``), for one Kafka batch of ``--records``
100-byte values, round-robin over 4 partitions and over ``--partitions`` partitions of one store. Each
partition is written twice before the timed calls (its index files mapped, its writer lock taken), so the
figure is the steady state. Prints the process CPU time per call (µs) of each, rounds alternating, and the
ratio many ÷ 4 per round (the figure that matters: it does not depend on the machine's load as much).

    PYTHONPATH=. python benchmarks/bench_server_partitions.py [--partitions 500] [--records 1 100] [--calls 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pylog  # noqa: E402
from pylog.partition import internals  # noqa: E402
from pylog.server import recordbatch as rb  # noqa: E402
from bench_server_records import kafka_batch  # noqa: E402 - the same Kafka batch of 100-byte values


def per_call_us(store: pylog.Store, topic: str, partitions: int, data: bytes, calls: int) -> float:
    """CPU µs per per-partition append of ``data``, round-robin over the topic's partitions."""
    parts = [store.topic(topic).partition(i) for i in range(partitions)]

    def one(part: pylog.Partition) -> None:
        batches = rb.decode_batches(data, 1 << 20)
        part.wait_to_write(1000)
        try:
            for b in batches:
                rb.append_batch(part, b, in_turn=True, flush_policy=False)
        finally:
            internals(part).pass_turn()

    for i in range(2 * partitions):
        one(parts[i % partitions])
    t = time.process_time()
    for i in range(calls):
        one(parts[i % partitions])
    return (time.process_time() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--records", type=int, nargs="+", default=[1, 100])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for n in args.records:
        data = kafka_batch(n)
        ratios = []
        for r in range(args.rounds):
            figures = {}
            for count in (4, args.partitions) if r % 2 == 0 else (args.partitions, 4):
                with tempfile.TemporaryDirectory() as d:
                    store = pylog.open(d)
                    try:
                        store.create_topic("t", partitions=count)
                        figures[count] = per_call_us(store, "t", count, data, args.calls)
                    finally:
                        store.close()
            ratios.append(figures[args.partitions] / figures[4])
            print(f"{n} records per batch, round {r + 1}: {figures[4]:.1f} µs per append at 4 partitions, "
                  f"{figures[args.partitions]:.1f} at {args.partitions} ({ratios[-1]:.2f}x)", flush=True)
        print(f"{n} records per batch: {args.partitions} ÷ 4 partitions, CPU per append: "
              f"{min(ratios):.2f}-{max(ratios):.2f}x (median {sorted(ratios)[len(ratios) // 2]:.2f}x)")


if __name__ == "__main__":
    main()
