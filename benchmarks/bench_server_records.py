"""Kafka v2 batches <-> pylog: the per-record cost of a Produce and a Fetch in pylog serve, without the network.

For 100-byte values in Kafka batches of 16 KB to 1 MB:

- produce: ``decode_batches`` + ``append_batch`` (a real partition) against a same-run baseline, pylog's own
  ``append_columns`` of the same (already decoded) columns, and ``decode_batches`` alone;
- fetch: ``read_slices`` + ``encode_slices`` against the baseline ``read_columns`` of the same ranges;

each compiled (native/kafka.c) and pure Python (the reference, swapped in within this process), with the
ratios to the baseline. The server needs both directions comfortably above 1M records/s compiled.

    PYTHONPATH=. python benchmarks/bench_server_records.py [--records 1000000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pylog  # noqa: E402
from pylog.accel import native  # noqa: E402
from pylog.server import recordbatch as rb  # noqa: E402

VALUE = 100


def kafka_batch(n: int, base_ts: int = 1_700_000_000_000) -> bytes:
    """One uncompressed v2 batch of n 100-byte values, null keys, built with our encoder via a pylog batch."""
    from pylog.storage.records import BatchView, encode_batch
    values = [os.urandom(VALUE) for _ in range(n)]
    view = BatchView.from_buffer(encode_batch(values, None, [base_ts + i for i in range(n)]))
    return rb.encode_slice_pure(view, 0, n)


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def run(batch_bytes: int, total: int, reps: int, compiled: bool) -> dict[str, float]:
    per = max(1, batch_bytes // (VALUE + 10))
    nb = max(1, total // per)
    data = kafka_batch(per)
    n = per * nb
    if compiled:
        rb._parse_records = native.kafka_parse_records
        rb.encode_slice = rb.encode_slice_native
    else:
        rb._parse_records = rb.parse_records_pure
        rb.encode_slice = rb.encode_slice_pure
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        store = pylog.open(d)
        try:
            store.create_topic("t", partitions=3, config={"max.message.bytes": 8 << 20, "segment.bytes": 1 << 30})
            state = {"i": 0}

            def decode_only():
                for _ in range(nb):
                    rb.decode_batches(data, 8 << 20)

            def produce():
                p = store.topic("t").partition(state["i"] % 2)
                state["i"] += 1
                for _ in range(nb):
                    for kb in rb.decode_batches(data, 8 << 20):
                        rb.append_batch(p, kb, in_turn=False)

            [kb] = rb.decode_batches(data, 8 << 20)
            base = store.topic("t").partition(2)

            def baseline_append():
                for _ in range(nb):
                    base.append_columns(kb.value_lengths, kb.value_data, kb.key_lengths, kb.key_data, kb.timestamps)

            out["decode"] = n / best(decode_only, reps)
            out["produce"] = n / best(produce, reps)
            out["append_columns"] = n / best(baseline_append, reps)
            p = store.topic("t").partition(0)

            def fetch():
                off = 0
                while off < n:
                    sl = p.read_slices(off, per, batch_bytes)
                    rb.encode_slices(sl)
                    off = sl[-1][0].header.base_offset + sl[-1][2]

            def baseline_read():
                off = 0
                while off < n:
                    cols = p.read_columns(off, per, batch_bytes)
                    off = int(cols.offsets[-1]) + 1

            out["fetch"] = n / best(fetch, reps)
            out["read_columns"] = n / best(baseline_read, reps)
        finally:
            store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="16384,262144,1048576")
    args = ap.parse_args()
    print(f"100-byte values, {args.records:,} records per run, best of {args.reps}; rates in records/s")
    print(f"{'batch':>8} {'path':>8} {'decode':>11} {'produce':>11} {'append_col':>11} {'prod/base':>9} "
          f"{'fetch':>11} {'read_cols':>11} {'fetch/base':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        for compiled in ([True, False] if native is not None else [False]):
            total = args.records if compiled else max(args.records // 10, 1)
            r = run(size, total, args.reps, compiled)
            print(f"{size // 1024:>6}KB {'C' if compiled else 'pure':>8} {r['decode']:>11,.0f} {r['produce']:>11,.0f} "
                  f"{r['append_columns']:>11,.0f} {r['produce'] / r['append_columns']:>9.2f} {r['fetch']:>11,.0f} "
                  f"{r['read_columns']:>11,.0f} {r['fetch'] / r['read_columns']:>10.2f}")


if __name__ == "__main__":
    main()
