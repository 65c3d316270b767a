"""Transactions' costs (issue 27): read_committed against read_uncommitted consumption, transactional producers
against idempotent ones, transactional appends against idempotent ones, and the commit latency of a
one-partition transaction, all in one run.

Usage::

    python benchmarks/bench_txn.py            # 1,000,000 records of 100 bytes, 3 rounds
    python benchmarks/bench_txn.py --quick    # 200,000 records, 1 round

Producers (the store's cleaner thread on, as in an application): a transactional producer sends transactions of
1,000 records to one partition (``begin_transaction``, 1,000 ``send``, ``commit_transaction``: ``acks="all"``,
Kafka's rule); the baselines are the idempotent producer with ``acks="all"`` sending the same records without a
pause (``idem_send``) and flushing every 1,000 (``idem_flush``: the same durability points as the commits).
A commit fsyncs four times in order, each needed for all-or-nothing across a power loss: the transaction's
``Ongoing`` state before its first record may reach the disk, the records, ``PrepareCommit`` (the commit point),
the markers (before ``CompleteCommit``). The commit latency is ``commit_transaction()`` of a transaction of one
100-byte record (p50/p99 of 200 per round, 50 with ``--quick``). ``txn_kafka_flush`` is the transactional
producer on a second store whose ``__transaction_state`` has ``flush.messages`` set (Kafka's behaviour, opt-in:
the coordinator then fsyncs neither its state nor its markers; only the records' ``acks="all"`` fsync remains,
so all-or-nothing holds across a process crash, not a power loss).

The log read holds transactions of 1,000 records (``append_values(..., transactional=True)`` then a marker
through the partition's internal API; every tenth transaction aborted), rolled before reading. The append
figures write committed transactions only (an abort adds an fsync of the aborted-transaction index). Each round
reads it whole with a consumer (``max_poll_records=5000``, every record's value touched) at each level, in
alternating order, and appends the same calls as idempotent and as transactional batches into two fresh
partitions: the storage's share of a transaction's cost (a batch check and a marker per transaction; page
cache, no fsync). The table gives each figure's range and the ratios per round, and the load average
(``os.getloadavg``) after each round: fsync latency moves with the machine's load. Nothing asserts.
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
#: The figure each producer mode of _send_rate measures.
_FIGURE_OF = {"txn": "txn_send", "idem": "idem_send", "idem_flush": "idem_flush"}


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


def _send_rate(store: pylog.Store, topic: str, n: int, values: list[bytes], mode: str) -> float:
    """Records per second of a producer sending ``n`` records to ``topic``'s partition 0: ``txn`` in
    transactions of len(values) records, ``idem`` streaming (flushed at the end), ``idem_flush`` flushed after
    every len(values) records. All ``acks="all"``."""
    mode = "txn" if mode == "txn_kafka_flush" else mode
    extra = {"transactional_id": f"bench-{topic}"} if mode == "txn" else {}
    with store.producer(acks="all", **extra) as producer:
        if mode == "txn":
            producer.init_transactions()
        began = time.perf_counter()
        for _ in range(n // len(values)):
            if mode == "txn":
                producer.begin_transaction()
            for v in values:
                producer.send(topic, v, partition=0)
            if mode == "txn":
                producer.commit_transaction()
            elif mode == "idem_flush":
                producer.flush()
        producer.flush()
        return n / (time.perf_counter() - began)


def _commit_latencies(store: pylog.Store, topic: str, count: int) -> list[float]:
    """Seconds of ``commit_transaction()`` of ``count`` transactions of one 100-byte record each."""
    out = []
    with store.producer(transactional_id=f"latency-{topic}") as producer:
        producer.init_transactions()
        for _ in range(count):
            producer.begin_transaction()
            producer.send(topic, b"x" * 100, partition=0)
            began = time.perf_counter()
            producer.commit_transaction()
            out.append(time.perf_counter() - began)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n, rounds = (200_000, 1) if args.quick else (1_000_000, 3)
    values = [os.urandom(100) for _ in range(TXN)]
    figures: dict[str, list[float]] = {k: [] for k in ("committed", "uncommitted", "txn_append", "idem_append",
                                                        "txn_send", "idem_send", "idem_flush",
                                                        "txn_kafka_flush")}
    latencies: list[list[float]] = []
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
            print(f"round {r + 1} (reads, appends): load {os.getloadavg()[0]:.2f}", flush=True)
        with pylog.open(os.path.join(tmp, "producers")) as store, \
                pylog.open(os.path.join(tmp, "kafka-flush")) as kafka_store:  # the cleaner thread on, as in an app
            kafka_store.alter_topic_config("__transaction_state", {"flush.messages": 1 << 62})
            for r in range(rounds):
                modes = ("txn", "idem", "idem_flush", "txn_kafka_flush")
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    name = f"{mode}-{r}"
                    on = kafka_store if mode == "txn_kafka_flush" else store
                    on.create_topic(name)
                    figures[_FIGURE_OF.get(mode, mode)].append(_send_rate(on, name, n, values, mode))
                store.create_topic(f"latency-{r}")
                latencies.append(_commit_latencies(store, f"latency-{r}", 50 if args.quick else 200))
                print(f"round {r + 1} (producers): load {os.getloadavg()[0]:.2f}", flush=True)
    for key, vals in figures.items():
        print(f"{key:12s} {min(vals) / 1e6:.2f}-{max(vals) / 1e6:.2f} M rec/s")
    for label, num, den, target in (("read_committed / read_uncommitted", "committed", "uncommitted", 0.9),
                                    ("transactional / idempotent appends", "txn_append", "idem_append", 0.5),
                                    ("transactional / idempotent producer", "txn_send", "idem_send", 0.5),
                                    ("transactional / idempotent producer flushing every 1,000", "txn_send",
                                     "idem_flush", 0.5),
                                    ("transactional, __transaction_state flush.messages set / idempotent producer",
                                     "txn_kafka_flush", "idem_send", 0.5),
                                    ("the same / idempotent producer flushing every 1,000", "txn_kafka_flush",
                                     "idem_flush", 0.5)):
        ratios = [x / y for x, y in zip(figures[num], figures[den], strict=True)]
        print(f"{label}: {min(ratios):.2f}-{max(ratios):.2f}x (target >= {target}x)")
    for r, lat in enumerate(latencies):
        print(f"commit latency, one-partition transaction, round {r + 1}: p50 {lat[len(lat) // 2] * 1000:.2f} ms, "
              f"p99 {lat[min(len(lat) - 1, len(lat) * 99 // 100)] * 1000:.2f} ms ({len(lat)} commits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
