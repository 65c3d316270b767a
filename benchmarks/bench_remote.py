"""Tiered storage's remote layer against a local S3 API (moto's server), with baselines from the same run.

Usage::

    python benchmarks/bench_remote.py                 # 64 MiB of 1 KiB records in 4 MiB segments
    python benchmarks/bench_remote.py --quick         # 16 MB in 2 MiB segments (the test suite)

Needs the ``test`` extra (boto3, ``moto[server]``). The S3 server runs as a child process on 127.0.0.1
(``python -m moto.server``; not a thread of this process, so it does not share the GIL with the client), at
nice 19, and is stopped at the end. What is measured, each against a baseline doing the same bytes:

- **ship**: ``RemoteLog.ship_segment`` of every closed segment (local checks of every batch's CRC, the
  log and both sealed indexes PUT with ``If-None-Match``, the manifest committed with ``If-Match``) in MB/s
  of log, against plain ``put_object`` calls of the same three files per segment with a boto3 client made
  the same way (no checks, no manifest; botocore computes its default CRC32 of each body, where pylog
  sends the CRC-32C it computed while checking the segment). Ratio = ship / plain.
- **cold remote read**: a new ``RemoteLog`` (no cached index) reads every shipped offset range in
  ``max_bytes`` = 1 MiB steps (index fetch, ranged GETs, every batch's CRC), against reading the same byte
  ranges from the local segment files with the same CRC walk (``checked_prefix``). Ratio = remote / local.

- **append with shipping on / off** (``--append-rounds``, default 3; ``--append-mb``, default ``--mb``): the
  same MB appended (1,000 x 1 KB per call, then a flush) to a topic with ``remote.storage.enable`` in a store
  whose upload thread runs every 100 ms against the server, and to a topic without it in a store opened the
  same way; rounds interleaved, medians compared. Ratio = on / off MB/s (the issue's goal: >= 0.95x). Also
  printed: each round pair's ratio, and the appending thread's own CPU time (``time.thread_time``) on / off:
  wall-clock on a 2-core machine also counts the cores the S3 server (here, on the same machine) and the
  upload thread take, thread CPU only what the appends cost.

The moto server keeps objects in memory and answers from Python: absolute figures are a lower bound of
what a real S3-compatible store gives; the ratios say what pylog's own work adds.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import boto3  # noqa: E402

import pylog  # noqa: E402
from pylog.storage.filenames import list_segment_bases  # noqa: E402
from pylog.storage.records.views import checked_prefix  # noqa: E402
from pylog.storage.remote import ObjectStore, RemoteLog  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    # At nice 19: the server takes the cores only when pylog does not, as a bucket on other machines would
    # (the append figures compare pylog with and without its upload thread, not with and without a server).
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=lambda: os.nice(19))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start within 60 s")


def _write(root: str, mb: int, segment_mb: int) -> str:
    value = os.urandom(1000)
    with pylog.open(root, log_cleaner_enable=False) as store:
        store.create_topic("t", 1, config={"segment.bytes": segment_mb << 20, "retention.ms": -1})
        part = store.topic("t").partition(0)
        for _ in range(mb):
            part.append_values([value] * 1000)
        part.roll()
    return os.path.join(root, "t", "0")


def _append_round(root: str, endpoint: str, bucket: str, mb: int, segment_mb: int,
                  ship: bool) -> tuple[float, float]:
    """Seconds to append ``mb`` MB to a fresh topic (shipping on or off), the store's upload thread running:
    wall-clock, and CPU of the appending thread (what the appends themselves cost, without the waits for the
    GIL and the cores that the upload thread and the S3 server take)."""
    value = os.urandom(1000)
    with pylog.open(root, log_cleaner_enable=False, remote_storage_location=f"s3://{bucket}/{uuid.uuid4().hex[:8]}",
                    remote_storage_endpoint_url=endpoint, remote_log_manager_task_interval_ms=100) as store:
        store.create_topic("t", 1, config={"segment.bytes": segment_mb << 20, "retention.ms": -1,
                                           "remote.storage.enable": ship})
        part = store.topic("t").partition(0)
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(mb):
            part.append_values([value] * 1000)
        part.flush()
        return time.perf_counter() - t0, time.thread_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="MB of records (1,000 x 1 KB per MB)")
    ap.add_argument("--segment-mb", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="16 MB in 2 MiB segments")
    ap.add_argument("--dir", default=None, help="where the store is written (a temporary directory in it)")
    ap.add_argument("--append-rounds", type=int, default=3, help="rounds of appends with shipping on and off")
    ap.add_argument("--append-mb", type=int, default=None, help="MB appended per round (default: --mb)")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.segment_mb = 16, 2
    args.append_mb = args.append_mb or args.mb
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    proc, endpoint = _start_moto()
    try:
        with tempfile.TemporaryDirectory(prefix="pylog-bench-remote-", dir=args.dir) as tmp:
            part = _write(os.path.join(tmp, "store"), args.mb, args.segment_mb)
            bases = list_segment_bases(part)[:-1]
            log_bytes = sum(os.path.getsize(os.path.join(part, f"{b:020d}.log")) for b in bases)
            client = boto3.client("s3", endpoint_url=endpoint)
            results = {}
            # plain upload baseline, then ship, each into its own bucket
            plain_bucket, ship_bucket = f"plain-{uuid.uuid4().hex[:8]}", f"ship-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=plain_bucket)
            client.create_bucket(Bucket=ship_bucket)
            objects = ObjectStore.from_settings({"remote.storage.location": f"s3://{ship_bucket}/store",
                                                 "remote.storage.endpoint.url": endpoint})
            client.put_object(Bucket=plain_bucket, Key="warm-up", Body=b"x")  # connections and credentials
            objects.put_new("warm-up", b"x", 1)  # resolved before timing, for both clients
            t0 = time.perf_counter()
            for b in bases:
                for suffix in (".log", ".index", ".timeindex"):
                    with open(os.path.join(part, f"{b:020d}{suffix}"), "rb") as f:
                        client.put_object(Bucket=plain_bucket, Key=f"p/{b:020d}{suffix}", Body=f)
            results["plain upload"] = time.perf_counter() - t0
            remote = RemoteLog(objects, "t", 0)
            t0 = time.perf_counter()
            for b in bases:
                remote.ship_segment(part, b)
            results["ship"] = time.perf_counter() - t0
            m = remote.manifest(refresh=True)
            # cold remote read vs local read of the same ranges with the same CRC walk
            reader = RemoteLog(ObjectStore.from_settings({"remote.storage.location": f"s3://{ship_bucket}/store",
                                                          "remote.storage.endpoint.url": endpoint}), "t", 0)
            ranges = []
            t0 = time.perf_counter()
            offset = m.log_start_offset
            while offset < m.end_offset:
                got = reader.read(offset, 1 << 20)
                ranges.append((got.segment.base_offset, got.position, len(got.data)))
                offset = got.next_offset
            results["remote read"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            for base, pos, length in ranges:
                with open(os.path.join(part, f"{base:020d}.log"), "rb") as f:
                    f.seek(pos)
                    data = f.read(length)
                end, _ = checked_prefix(data, 0, len(data), -1)
                assert end == len(data)
            results["local read"] = time.perf_counter() - t0
            appends: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            append_bucket = f"append-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=append_bucket)
            for r in range(args.append_rounds):
                for ship in (r % 2 == 0, r % 2 != 0):  # interleaved, the order alternating per round
                    root = os.path.join(tmp, f"append-{r}-{ship}")
                    appends[ship].append(_append_round(root, endpoint, append_bucket, args.append_mb, args.segment_mb,
                                                       ship))
    finally:
        proc.kill()
        proc.wait(timeout=30)
    mb = log_bytes / 1e6
    print(f"{len(bases)} segments, {mb:.1f} MB of log; load average {os.getloadavg()[0]:.2f}")
    for name, secs in results.items():
        print(f"  {name:14s} {secs:7.3f} s  {mb / secs:8.1f} MB/s")
    print(f"  ship / plain upload MB/s:      {results['plain upload'] / results['ship']:.2f}x")
    print(f"  cold remote / local read MB/s: {results['local read'] / results['remote read']:.3f}x")
    if args.append_rounds:
        on, off = (statistics.median(w for w, _ in appends[s]) for s in (True, False))
        cpu_on, cpu_off = (statistics.median(c for _, c in appends[s]) for s in (True, False))
        n = len(appends[True])
        print(f"  append, shipping on  {on:7.3f} s  {args.append_mb / on:8.1f} MB/s (median of {n}); "
              f"appending thread's CPU {cpu_on:.3f} s")
        print(f"  append, shipping off {off:7.3f} s  {args.append_mb / off:8.1f} MB/s (median of "
              f"{len(appends[False])}); appending thread's CPU {cpu_off:.3f} s")
        print(f"  append on / off MB/s:          {off / on:.2f}x (per round pair: "
              f"{', '.join(f'{f[0] / o[0]:.2f}' for o, f in zip(appends[True], appends[False], strict=True))})")
        print(f"  appending thread CPU off / on: {cpu_off / cpu_on:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
