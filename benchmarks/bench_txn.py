"""Transactions' storage costs (issue 27): read_committed against read_uncommitted, transactional appends
against idempotent ones, all in one run on the same data.

Usage::

    python benchmarks/bench_txn.py            # 1,000,000 records of 100 bytes, 3 rounds
    python benchmarks/bench_txn.py --quick    # 200,000 records, 1 round

The log read holds transactions of 1,000 records (``append_values(..., transactional=True)`` then a marker
through the partition's internal API; every tenth transaction aborted), rolled before reading. The append
figures write committed transactions only (an abort adds an fsync of the aborted-transaction index). Each round
reads it whole with a consumer (``max_poll_records=5000``, every record's value touched) at each level, in
alternating order, and appends the same calls as idempotent and as transactional batches into two fresh
partitions. The table gives each figure's range and the ratios per round. The coordinator and a
transactional producer are not built yet, so the append figure is the storage's share of a transaction's
cost (a batch check and a marker per transaction), not the producer's. Page cache, no fsync; nothing asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import pylog  # noqa: E402
from pylog.partition import internals  # noqa: E402

TXN = 1000


def _fill(p: pylog.Partition, pid: int, n: int, transactional: bool, values: list[bytes],
          abort_every: int = 0) -> float:
    began = time.perf_counter()
    seq = 0
    for i in range(n // TXN):
        p.append_values(values, producer=(pid, 0, seq), transactional=transactional)
        seq += TXN
        if transactional:
            internals(p).append_marker(pid, 0, commit=not abort_every or i % abort_every != abort_every - 1)
    return n / (time.perf_counter() - began)


def _consume(store: pylog.Store, topic: str, level: str, expected: int) -> float:
    """Records per second of a consumer iterating the ``expected`` records of the partition (values touched)."""
    total = count = 0
    with store.consumer(topic, auto_offset_reset="earliest", max_poll_records=5000, isolation_level=level) as c:
        began = time.perf_counter()
        for rec in c:
            total += len(rec.value)
            count += 1
            if count == expected:
                break
        elapsed = time.perf_counter() - began
    return count / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n, rounds = (200_000, 1) if args.quick else (1_000_000, 3)
    values = [os.urandom(100) for _ in range(TXN)]
    figures: dict[str, list[float]] = {k: [] for k in ("committed", "uncommitted", "txn_append", "idem_append")}
    with tempfile.TemporaryDirectory() as tmp:
        with pylog.open(tmp, log_cleaner_enable=False) as store:
            store.create_topic("data")
            p = store.topic("data").partition(0)
            _fill(p, store.new_producer_id(), n, True, values, abort_every=10)
            p.roll()
            _consume(store, "data", "read_uncommitted", n)  # warms the page cache
            for r in range(rounds):
                order = ("read_committed", "read_uncommitted") if r % 2 == 0 else ("read_uncommitted",
                                                                                  "read_committed")
                for level in order:
                    figures["committed" if level == "read_committed" else "uncommitted"].append(
                        _consume(store, "data", level, n if level == "read_uncommitted" else n * 9 // 10))
                for kind in ("idem", "txn"):
                    name = f"{kind}-{r}"
                    store.create_topic(name)
                    figures[f"{kind}_append"].append(_fill(store.topic(name).partition(0), store.new_producer_id(),
                                                           n, kind == "txn", values))
                print(f"round {r + 1}: load {os.getloadavg()[0]:.2f}", flush=True)
    for key, vals in figures.items():
        print(f"{key:12s} {min(vals) / 1e6:.2f}-{max(vals) / 1e6:.2f} M rec/s")
    for label, num, den, target in (("read_committed / read_uncommitted", "committed", "uncommitted", 0.9),
                                    ("transactional / idempotent appends", "txn_append", "idem_append", 0.5)):
        ratios = [x / y for x, y in zip(figures[num], figures[den], strict=True)]
        print(f"{label}: {min(ratios):.2f}-{max(ratios):.2f}x (target >= {target}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
