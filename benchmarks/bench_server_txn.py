"""Transactions through ``pylog serve`` (issue 27): confluent-kafka's transactional producer against its
idempotent one, and a read_committed consumer against a read_uncommitted one, in one run on one server.

Usage::

    python benchmarks/bench_server_txn.py            # 200,000 records of 100 bytes, 3 rounds
    python benchmarks/bench_server_txn.py --quick    # 50,000 records, 1 round

Each round produces the records into a fresh one-partition topic with an idempotent producer
(``enable.idempotence``, acks=all) and into another as transactions of 1,000 records (``transactional.id``, commit
after each 1,000), then reads the transactional topic whole with a confluent consumer at each isolation level
(after a warm-up read, in alternating order); then it times the commit of 200 one-record transactions to one
partition (``commit_transaction`` returning: the producer's flush, EndTxn, the markers and their fsync). The table
gives each figure per round and the ratios. ``kafka-flush/s`` is the transactional producer against a second server
whose store has ``flush.messages`` set on ``__transaction_state`` (opt-in, Kafka's behaviour: the coordinator
fsyncs neither its state nor its markers, all-or-nothing across a process crash only); its ratio is against the
same round's idempotent producer. The store is on the page cache's file system of the temporary directory; nothing
asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import pylog  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

TXN = 1000
VALUE = b"x" * 100


def _produce(bootstrap: str, topic: str, n: int, transactional: bool) -> float:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10_000, "acks": "all",
            "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000}
    if transactional:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    if transactional:
        p.init_transactions(30)
    began = time.perf_counter()
    for _ in range(0, n, TXN):
        if transactional:
            p.begin_transaction()
        for _ in range(TXN):
            p.produce(topic, VALUE, partition=0)
        p.poll(0)
        if transactional:
            p.commit_transaction(60)
    p.flush(60)
    return n / (time.perf_counter() - began)


def _consume(bootstrap: str, topic: str, level: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}-{level}", "isolation.level": level,
                  "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    count = 0
    began = time.perf_counter()
    while count < n:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                count += 1
    elapsed = time.perf_counter() - began
    c.close()
    return count / elapsed


def _commit_latencies(bootstrap: str, topic: str, rounds: int) -> list[float]:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"lat-{topic}", "linger.ms": 0})
    p.init_transactions(30)
    out = []
    for _ in range(rounds):
        p.begin_transaction()
        p.produce(topic, VALUE, partition=0)
        began = time.perf_counter()
        p.commit_transaction(30)
        out.append((time.perf_counter() - began) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds = (50_000, 1) if args.quick else (200_000, 3)
    with tempfile.TemporaryDirectory() as tmp:
        with pylog.open(os.path.join(tmp, "kafka-flush")) as store:
            store.alter_topic_config("__transaction_state", {"flush.messages": 1 << 62})
        with pylog.serve(os.path.join(tmp, "store"), port=0) as server, \
                pylog.serve(os.path.join(tmp, "kafka-flush"), port=0) as kafka_flush:
            _rounds(server.bootstrap_servers, kafka_flush.bootstrap_servers, n, rounds)


def _rounds(b: str, kafka_flush: str, n: int, rounds: int) -> None:
    print(f"{n:,} records of {len(VALUE)} bytes, transactions of {TXN:,}; load {os.getloadavg()[0]:.2f}")
    print("round  idempotent/s  transactional/s  ratio   uncommitted/s  committed/s  ratio   kafka-flush/s  ratio")
    for r in range(rounds):
        idem = _produce(b, f"idem{r}", n, False)
        txn = _produce(b, f"txn{r}", n, True)
        txn_kafka = _produce(kafka_flush, f"txn{r}", n, True)
        _consume(b, f"txn{r}", "read_uncommitted", n)  # warm-up: the first read pays for the page cache
        levels = ["read_uncommitted", "read_committed"][::1 if r % 2 == 0 else -1]
        got = {level: _consume(b, f"txn{r}", level, n) for level in levels}
        unc, com = got["read_uncommitted"], got["read_committed"]
        print(f"{r:5d}  {idem:12,.0f}  {txn:15,.0f}  {txn / idem:5.2f}   {unc:13,.0f}  {com:11,.0f}  "
              f"{com / unc:5.2f}   {txn_kafka:13,.0f}  {txn_kafka / idem:5.2f}  load {os.getloadavg()[0]:.1f}",
              flush=True)
    lat = sorted(_commit_latencies(b, "latency", 200))
    print(f"one-record commit latency: p50 {statistics.median(lat):.1f} ms, "
          f"p99 {lat[int(len(lat) * 0.99) - 1]:.1f} ms (200 commits)")


if __name__ == "__main__":
    main()
