"""What one refresh of ``pylog top STORE`` costs on a store of many partitions, against the floor from the same run.

Usage::

    python benchmarks/bench_top.py                    # 10 topics of 100 partitions, 30 refreshes
    python benchmarks/bench_top.py --topics 2 --refreshes 10

The store: ``--topics`` topics of 100 partitions with 10 records each, and a group committed on every partition.
Figures, medians over ``--refreshes`` rounds, CPU time of this process (``time.process_time``):

- ``refresh``: what the live view does once a second: a sample of the store (every partition's log end and
  segments, every group's lag and members, the published cleaners) and the frame drawn (rich, 120x50, into
  memory), through a read-only store with the whole descriptor budget, as ``pylog top`` opens it.
- ``floor``: the least any sampler of these figures does, on the same handle: every partition's
  ``log_end_offset`` and ``store.group_lag`` of the group.

It prints both in ms, their ratio, and the share of one core at one refresh a second, with the 1-minute load
average. Nothing asserts.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from typing import Callable

# the pylog this interpreter imports (installed, or PYTHONPATH): the checkout is not put first, so that CI
# measures the installed copy it tests
import pylog
from pylog.cli.top_sources import StoreSource
from pylog.cli.top_view import History, render
from pylog.structs import TopicPartition
from rich.console import Console


def _make(path: str, topics: int) -> None:
    with pylog.open(path, log_cleaner_enable=False) as store:
        offsets = {}
        for t in range(topics):
            topic = store.create_topic(f"t{t}", partitions=100)
            for p in topic.partitions:
                p.append_values([b"x" * 100] * 10)
                offsets[TopicPartition(f"t{t}", p.number)] = 5
        store.commit_offsets("g", offsets)


def _median_cpu_ms(work: Callable[[], object], rounds: int) -> float:
    work()  # the first look opens every partition: not what each refresh costs
    times = []
    for _ in range(rounds):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10, help="topics of 100 partitions (default 10)")
    parser.add_argument("--refreshes", type=int, default=30, help="rounds measured (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-top-") as tmp:
        path = os.path.join(tmp, "store")
        _make(path, args.topics)
        with StoreSource(path) as source:
            store, history = source.store, History()
            console = Console(file=io.StringIO(), width=120, height=50)

            def refresh() -> None:
                history.add(source.sample())
                console.print(render(history, path, 1.0, width=120, height=50))

            partitions = [p for name in store.topics() for p in store.topic(name).partitions]

            def floor() -> None:
                for p in partitions:
                    p.log_end_offset  # noqa: B018 - the look at the files is the point
                store.group_lag("g")

            top_ms = _median_cpu_ms(refresh, args.refreshes)
            floor_ms = _median_cpu_ms(floor, args.refreshes)
    n = args.topics * 100
    print(f"pylog top, {n} partitions, a group committed on all: refresh {top_ms:.1f} ms CPU, floor {floor_ms:.1f} ms "
          f"(ratio {top_ms / floor_ms:.2f}); {top_ms / 10:.1f}% of a core at one refresh a second; "
          f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
