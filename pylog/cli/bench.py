"""``pylog bench producer|consumer|latency STORE``: Kafka's perf-test scripts against a store.

- ``producer`` (kafka-producer-perf-test): ``--records`` records of ``--record-size`` bytes (a random
  A-Z payload, as Kafka's) sent through :class:`~pylog.clients.producer.Producer`, optionally capped at
  ``--throughput`` records/s; records/s, MB/s and send-to-acknowledgement latency percentiles (measured
  on a sample of up to :data:`_LATENCY_SAMPLES` records).
- ``consumer`` (kafka-consumer-perf-test): reads ``--records`` records from the start of the topic
  through :class:`~pylog.clients.consumer.Consumer`; records/s, MB/s and poll latency percentiles. A topic that
  does not exist yet is created and filled first (not timed).
- ``latency`` (kafka's EndToEndLatency): one record at a time, from ``send()`` until a consumer in the
  same process has polled it; percentiles of that round trip.

MB is 2^20 bytes, as in Kafka's tools. Without ``--topic``, a run writes to a temporary topic
(``pylog-bench-<random>``) that it deletes afterwards unless ``--keep``; it says which on stderr. A topic
named with ``--topic`` is created when missing (and then deleted afterwards unless ``--keep``); an existing
one is used and kept. Every run prints one line like Kafka's, or a JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
import uuid
from typing import Any, Iterator, TextIO

import numpy as np

from ..structs import TopicPartition
from .base import CommandError, ExitCode, non_negative, open_store, positive
from .output import Progress

__all__ = ["register"]

#: At most this many records of a producer run have their latency measured (a callback each).
_LATENCY_SAMPLES = 50_000
#: Records appended per call while filling a topic for the consumer benchmark.
_FILL_CHUNK = 10_000
#: A poll of the latency benchmark that waits longer than this means the record is lost (seconds).
_ROUND_TRIP_TIMEOUT = 30.0
_MB = 1 << 20


def register(sub: Any) -> None:
    b = sub.add_parser("bench", help="producer, consumer and end-to-end latency benchmarks (Kafka's perf tests)",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = b.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, run, records, what in (("producer", _producer, 100_000, "records to send"),
                                     ("consumer", _consumer, 100_000, "records to read"),
                                     ("latency", _latency, 1_000, "round trips")):
        k = kinds.add_parser(kind, help=f"{kind} benchmark")
        k.add_argument("store", help="the store (created if missing)")
        k.add_argument("--topic", help="write to / read this topic (default: a temporary topic, deleted afterwards)")
        k.add_argument("--keep", action="store_true", help="keep the topic this run created")
        k.add_argument("--records", type=positive, default=records, help=f"{what} (default {records:,})")
        k.add_argument("--record-size", type=non_negative, default=100, help="value bytes (default 100)")
        k.add_argument("--partitions", type=positive, default=1, help="partitions of a topic created here")
        k.add_argument("--json", action="store_true", help="print the result as one JSON object")
        if kind != "consumer":
            k.add_argument("--acks", choices=("0", "1", "all"), default="1")
        if kind == "producer":
            k.add_argument("--throughput", type=float, default=-1, metavar="R",
                           help="at most R records/s (default: as fast as possible)")
            k.add_argument("--linger-ms", type=non_negative, default=0)
            k.add_argument("--compression", choices=("none", "lz4"), default="none")
        k.set_defaults(run=run)


def _payload(size: int) -> bytes:
    rng = random.Random(0)
    return bytes(rng.choices(range(ord("A"), ord("Z") + 1), k=size))


def _acks(text: str) -> int | str:
    return "all" if text == "all" else int(text)


def _percentiles(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"avg": None, "p50": None, "p95": None, "p99": None, "p99.9": None, "max": None}
    ms = np.asarray(seconds) * 1000
    p50, p95, p99, p999 = np.percentile(ms, [50, 95, 99, 99.9]).tolist()
    return {"avg": float(ms.mean()), "p50": p50, "p95": p95, "p99": p99, "p99.9": p999, "max": float(ms.max())}


def _latency_text(lat: dict[str, float | None], label: str = "latency") -> str:
    if lat["avg"] is None:
        return f"no {label} measured"
    return (f"{lat['avg']:.2f} ms avg {label}, {lat['max']:.2f} ms max {label}, {lat['p50']:.2f} ms 50th, "
            f"{lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, {lat['p99.9']:.2f} ms 99.9th")


def _report(args: argparse.Namespace, out: TextIO, records: int, nbytes: int, seconds: float,
            lat: dict[str, float | None], text: str) -> ExitCode:
    rps = records / seconds if seconds > 0 else 0.0
    mbps = nbytes / _MB / seconds if seconds > 0 else 0.0
    if args.json:
        print(json.dumps({"benchmark": args.kind, "topic": args.topic, "records": records, "bytes": nbytes,
                          "seconds": seconds, "records_per_sec": rps, "mb_per_sec": mbps, "latency_ms": lat}),
              file=out)
    else:
        print(text.format(records=records, rps=rps, mbps=mbps, seconds=seconds), file=out)
    return ExitCode.OK


@contextlib.contextmanager
def _bench_topic(store: Any, args: argparse.Namespace, partitions: int | None = None) -> Iterator[bool]:
    """Sets ``args.topic`` (a temporary name without ``--topic``) and creates it when missing; yields whether
    it was created here. A topic created here is deleted at the end unless ``--keep``; stderr says which."""
    if args.topic is None:
        args.topic = f"pylog-bench-{uuid.uuid4().hex[:8]}"
    created = args.topic not in store
    if created:
        store.create_topic(args.topic, partitions or args.partitions)
        fate = "kept (--keep)" if args.keep else "deleted afterwards; --keep keeps it"
        print(f"pylog: benchmark topic {args.topic} in {store.path} ({fate})", file=sys.stderr)
    try:
        yield created
    finally:
        if created and not args.keep:
            store.delete_topic(args.topic)


def _producer(args: argparse.Namespace, out: TextIO) -> ExitCode:
    n, payload = args.records, _payload(args.record_size)
    every = max(1, n // _LATENCY_SAMPLES)
    latencies: list[float] = []
    clock = time.perf_counter

    def acked(_meta: Any, sent_at: float) -> None:  # on the producer's sender thread
        latencies.append(clock() - sent_at)

    with open_store(args.store, create=True) as store, _bench_topic(store, args):
        producer = store.producer(acks=_acks(args.acks), linger_ms=args.linger_ms,
                                  compression_type=None if args.compression == "none" else args.compression)
        sent = 0
        with producer, Progress("producer", n, " records") as bar:
            send, topic, rate = producer.send, args.topic, args.throughput
            start = clock()
            try:
                for i in range(n):
                    if i % every == 0:
                        send(topic, payload).add_callback(acked, clock())
                    else:
                        send(topic, payload)
                    sent = i + 1
                    if rate > 0 and sent > rate * (clock() - start):  # ahead of the cap: wait (Kafka's throttler)
                        time.sleep(max(0.0, sent / rate - (clock() - start)))
                    if sent % 1000 == 0:
                        bar.advance(1000)
            except KeyboardInterrupt:
                print(f"pylog: interrupted after {sent} records", file=sys.stderr)
            producer.flush()
            seconds = clock() - start
    lat = _percentiles(latencies)
    return _report(args, out, sent, sent * args.record_size, seconds, lat,
                   "{records} records sent, {rps:.1f} records/sec ({mbps:.2f} MB/sec), " + _latency_text(lat) + ".")


def _fill(topic: Any, n: int, payload: bytes) -> None:
    """Append ``n`` records spread over the topic's partitions (the consumer benchmark's input)."""
    parts = topic.partitions
    done = 0
    with Progress("preparing", n, " records") as bar:
        while done < n:
            k = min(_FILL_CHUNK, n - done)
            parts[(done // _FILL_CHUNK) % len(parts)].append_values([payload] * k)
            done += k
            bar.advance(k)


def _consumer(args: argparse.Namespace, out: TextIO) -> ExitCode:
    clock = time.perf_counter
    with open_store(args.store, create=True) as store, _bench_topic(store, args) as created:
        if created:
            _fill(store.topic(args.topic), args.records, _payload(args.record_size))
            print(f"pylog: filled {args.topic} with {args.records} records (not timed)", file=sys.stderr)
        topic = store.topic(args.topic)
        tps = [TopicPartition(args.topic, p.number) for p in topic.partitions]
        available = sum(p.log_end_offset - p.log_start_offset for p in topic.partitions)
        target = min(args.records, available)
        if target < args.records:
            print(f"pylog: {args.topic} holds only {available} records", file=sys.stderr)
        polls: list[float] = []
        got = nbytes = 0
        with store.consumer(auto_offset_reset="earliest", enable_auto_commit=False) as consumer, \
                Progress("consumer", target, " records") as bar:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            start = clock()
            try:
                while got < target:
                    t0 = clock()
                    batch = consumer.poll(timeout_ms=1000, max_records=min(500, target - got))
                    polls.append(clock() - t0)
                    if not batch:
                        break  # fewer records than counted (compaction left gaps)
                    for recs in batch.values():
                        got += len(recs)
                        nbytes += sum(max(r.serialized_value_size, 0) + max(r.serialized_key_size, 0) for r in recs)
                    bar.advance(sum(map(len, batch.values())))
            except KeyboardInterrupt:
                print(f"pylog: interrupted after {got} records", file=sys.stderr)
            seconds = clock() - start
    lat = _percentiles(polls)
    return _report(args, out, got, nbytes, seconds, lat, "{records} records consumed in {seconds:.2f} s, "
                   "{rps:.1f} records/sec ({mbps:.2f} MB/sec), " + _latency_text(lat, "poll latency") + ".")


def _latency(args: argparse.Namespace, out: TextIO) -> ExitCode:
    clock = time.perf_counter
    payload = _payload(args.record_size)
    trips: list[float] = []
    with open_store(args.store, create=True) as store, _bench_topic(store, args, partitions=1):
        tp = TopicPartition(args.topic, 0)
        with store.producer(acks=_acks(args.acks), linger_ms=0) as producer, \
                store.consumer(enable_auto_commit=False) as consumer, \
                Progress("latency", args.records, " round trips") as bar:
            consumer.assign([tp])
            consumer.seek_to_end(tp)
            try:
                for _ in range(args.records):
                    t0 = clock()
                    producer.send(args.topic, payload, partition=0)
                    while not consumer.poll(timeout_ms=1000, max_records=1):
                        if clock() - t0 > _ROUND_TRIP_TIMEOUT:
                            raise CommandError(f"a record sent to {args.topic}-0 did not arrive within "
                                               f"{_ROUND_TRIP_TIMEOUT:.0f} s")
                    trips.append(clock() - t0)
                    bar.advance()
            except KeyboardInterrupt:
                print(f"pylog: interrupted after {len(trips)} round trips", file=sys.stderr)
    lat = _percentiles(trips)
    seconds = sum(trips)
    return _report(args, out, len(trips), len(trips) * args.record_size, seconds, lat,
                   "{records} round trips, " + _latency_text(lat, "end-to-end latency") + ".")
