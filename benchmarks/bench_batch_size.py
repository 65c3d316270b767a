"""What the producer's ``batch_size`` costs the writer: CPU time per record at several batch sizes.

Usage::

    python benchmarks/bench_batch_size.py                         # 16 KiB, 64 KiB and one batch per drain
    python benchmarks/bench_batch_size.py --sizes 16384,65536 --records 300000

For each batch size, in one process: ``send()`` of distinct random 100-byte values one at a time with
``store.producer(acks=1, linger_ms=5, batch_size=N)`` (docs/CLIENTS.md's settings), the same with a distinct
8-byte key over 4 partitions, and a drain's append alone (``internals(p).append_values_in_turn`` of 100,000
records with one timestamp, as a drain passes them; 9 calls). Figures are CPU time per record
(``resource.getrusage``: user + system, the sender thread included), not wall time: on a shared machine CPU time
moves far less than wall time. ``1073741824`` stands for one batch per drain (cut only at
``max.message.bytes``), what the producer did before it cut at ``batch_size``. To compare two trees, run this
script under each (``PYTHONPATH=...``), alternating. Page cache, no fsync. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import struct
import sys
import tempfile

import numpy as np

import pylog
from pylog.partition import internals

# benchmarks/ is not a package: on sys.path when run as a script, unless Python runs with a safe path (-P,
# PYTHONSAFEPATH, as the test suite's children do).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_accel import send_all  # noqa: E402  (the same send loop as the accelerator's realistic workload)

ONE_BATCH = 1 << 30


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(sizes: list[int], n: int, root: str) -> dict[str, float]:
    rnd = random.Random(26)
    values = [rnd.randbytes(100) for _ in range(n)]
    keys = [struct.pack(">Q", i) for i in range(n)]
    out: dict[str, float] = {}
    with pylog.open(root, log_cleaner_enable=False) as store:
        for bs in sizes:
            for keyed in (False, True):
                name = f"{'k' if keyed else 'u'}{bs}"
                store.create_topic(name, partitions=4 if keyed else 1)
                with store.producer(acks=1, linger_ms=5, batch_size=bs) as producer:
                    t = _cpu()
                    send_all(producer, name, values, keys if keyed else None)
                    out[f"{'keyed send()' if keyed else 'send()'}, batch_size={bs}"] = (_cpu() - t) / n * 1e9
            store.create_topic(f"a{bs}")
            ip = internals(store.topic(f"a{bs}").partition(0))
            m = min(n, 100_000)
            ts = np.full(m, 1_700_000_000_000, np.int64)
            t = _cpu()
            for _ in range(9):
                ip.append_values_in_turn(values[:m], None, ts, None, None, None, bs)
            out[f"a drain's append alone, batch_size={bs}"] = (_cpu() - t) / (9 * m) * 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=f"16384,65536,{ONE_BATCH}", help="comma-separated batch sizes (bytes)")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--dir", help="where to write (default: the system temporary directory)")
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    root = tempfile.mkdtemp(prefix="pylog-batch-size-", dir=args.dir)
    try:
        load = os.getloadavg()[0]
        out = run(sizes, args.records, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps({"accelerated": pylog.ACCELERATED, "load": load, **out}))
        return 0
    print(f"pylog {pylog.__version__} ({'compiled' if pylog.ACCELERATED else 'pure Python'}), {args.records:,} "
          f"records, load average {load:.2f}: CPU ns per record (user + system)")
    for name, ns in out.items():
        print(f"{name:<50} {ns:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
