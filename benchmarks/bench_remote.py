"""Tiered storage's remote layer against a local S3 API (moto's server), with baselines from the same run.

Usage::

    python benchmarks/bench_remote.py         # ship/read 64 MiB of 1 KiB records in 4 MiB segments;
                                              # append 5 x 1,024 MB of 100-byte records in 64 MiB segments
    python benchmarks/bench_remote.py --quick # 16 MB in 2 MiB segments, one append round (the test suite)

Needs the ``test`` extra (boto3, ``moto[server]``). The S3 server runs as a child process on 127.0.0.1
(``python -m moto.server``; not a thread of this process, so it does not share the GIL with the client), at
the lowest CPU priority (below), and is stopped at the end. What is measured, each against a baseline doing
the same bytes:

- **ship**: ``RemoteLog.ship_segment`` of every closed segment (local checks of every batch's CRC, the
  log and both sealed indexes PUT with ``If-None-Match``, the manifest committed with ``If-Match``) in MB/s
  of log, against plain ``put_object`` calls of the same three files per segment with a boto3 client made
  the same way (no checks, no manifest; botocore computes its default CRC32 of each body, where pylog
  sends the CRC-32C it computed while checking the segment). Ratio = ship / plain.
- **cold remote read**: a new ``RemoteLog`` (no cached index) reads every shipped offset range in
  ``max_bytes`` = 1 MiB steps (index fetch, ranged GETs, every batch's CRC), against reading the same byte
  ranges from the local segment files with the same CRC walk (``checked_prefix``). Ratio = remote / local.

- **append with shipping on / off** (``--append-rounds``, default 5; ``--append-mb``, default 1,024): the
  same MB appended as a user appends (records of ``--record-bytes``, default 100, 1,000 per call, then a
  flush) to a topic with ``remote.storage.enable`` in a store whose upload thread runs every 100 ms against
  the server, and to a topic without it in a store opened the same way; segments of ``--append-segment-mb``
  (default 64): 16 roll during a round. Rounds interleaved (the order alternating), each in a fresh store.
  Ratio = on / off MB/s of the medians (the issue's goal: >= 0.95x), with each round pair's ratio and the
  range. Shipping is shown, not assumed: per round the MB of segments closed by the round's end, the MB
  committed to the remote manifest by then, and how long after the round the rest took to be committed (the
  benchmark waits for it, outside the timing); the upload's CPU per MB shipped (the process's other threads
  beyond their CPU with shipping off) and the server's; and the ratio of the off round's time to the on
  round's time *plus* its catch-up (what appending and having it shipped costs, end to end). The store's
  defaults apply: upload passes at ``idle`` priority waiting for a pause in the appends up to
  ``remote.log.manager.copier.max.delay.ms`` (30 s, longer than a round: so the segments ship after it;
  ``--copier-max-delay-ms 500`` shows the bound at work, ``--copier-priority normal`` and
  ``--payload-signing`` what the defaults replaced). Also printed: where the appending thread's wall-clock
  went (``/proc/self/task/<tid>/schedstat``): *CPU*, *queued* (runnable, waiting for a core) and *off-CPU*
  (waiting for the GIL, or blocked in I/O).

Why these choices (earlier versions measured something else): 4 MiB segments made shipping's cost per
segment (four requests, ~1.5 ms of botocore's Python each) 256 times what a topic with the default
``segment.bytes`` (1 GiB, Kafka's) pays per MB; 1 KB records made the appends cheaper per MB than a typical
100-byte workload's; 256 MB rounds (0.4 s at load 8) ended before the first 64 MiB segment could be shipped.
The server (``--server``): by default a child in the benchmark's session under SCHED_IDLE, so with
sched_autogroup it takes only cycles the benchmark's own threads leave, as a bucket on other machines takes
none of pylog's; it still costs ~5 ms of CPU per MB stored (moto parses and keeps every body in Python), ten
times pylog's upload, which any CPU it gets on these two cores takes from someone. ``--server session`` runs
it at nice 19 in a session (CPU group) of its own instead: a process like the others on the machine.

The moto server keeps objects in memory and answers from Python: absolute figures are a lower bound of
what a real S3-compatible store gives; the ratios say what pylog's own work adds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import boto3  # noqa: E402
import botocore.config  # noqa: E402

import pylog  # noqa: E402
from pylog.storage.filenames import list_segment_bases  # noqa: E402
from pylog.storage.records.views import checked_prefix  # noqa: E402
from pylog.storage.remote import ObjectStore, RemoteLog  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _idle_child() -> None:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _start_moto(server: str) -> tuple[subprocess.Popen, str]:
    """The S3 server as a child process on a free port. ``server`` says where its CPU comes from: ``idle``
    (default): in the benchmark's session (so its CPU autogroup) under SCHED_IDLE, so it runs on cycles the
    benchmark's own threads leave (a bucket on other machines takes none of pylog's); ``session``: at nice
    19 in a session of its own, so with sched_autogroup a CPU group of its own that takes its share of the
    machine like any other process (what earlier versions ran, see the module docstring)."""
    port = _free_port()
    own = server == "session"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=own,
                            preexec_fn=(lambda: os.nice(19)) if own else _idle_child)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start within 60 s")


def _process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` so far, all its threads (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_sched(tid: int | None = None) -> tuple[float, float]:
    """Seconds thread ``tid`` (default: this one) ran on a core and waited in the run queue (Linux schedstat;
    zeros elsewhere)."""
    try:
        with open(f"/proc/self/task/{tid or threading.get_native_id()}/schedstat") as f:
            ran, queued, _ = f.read().split()
    except OSError:
        return 0.0, 0.0
    return int(ran) / 1e9, int(queued) / 1e9


def _write(root: str, mb: int, segment_mb: int) -> str:
    value = os.urandom(1000)
    with pylog.open(root, log_cleaner_enable=False) as store:
        store.create_topic("t", 1, config={"segment.bytes": segment_mb << 20, "retention.ms": -1})
        part = store.topic("t").partition(0)
        for _ in range(mb):
            part.append_values([value] * 1000)
        part.roll()
    return os.path.join(root, "t", "0")


def _empty(client, bucket: str, prefix: str) -> None:
    """Delete every object under ``prefix`` (the server keeps objects in memory: rounds would add up)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents") or []]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def _append_round(root: str, endpoint: str, server: int, client, bucket: str, args: argparse.Namespace,
                  ship: bool) -> dict[str, float]:
    """Append ``args.append_mb`` MB to a fresh topic (shipping on or off) with the store's upload thread running,
    then (shipping on) wait until every segment closed by then is committed to the remote log.

    Returned (seconds, MB): ``wall``, ``cpu`` of the appending thread (what the appends themselves cost),
    ``queued`` (its time waiting for a core; the rest of the wall-clock is off-CPU: GIL waits, I/O),
    ``upload_cpu`` (CPU of the process's other threads over the window: the upload passes), ``server_cpu``
    (the S3 server's CPU over the window and the catch-up), ``closed`` (MB of
    segments closed by the window's end), ``shipped`` (MB committed by then), ``catch_up`` (seconds after
    the window until the rest was committed) and ``catch_up_cpu`` (the other threads' CPU over that)."""
    value = os.urandom(args.record_bytes)
    calls = max(1, args.append_mb * 1_000_000 // (args.record_bytes * 1000))
    prefix = uuid.uuid4().hex[:8]
    out: dict[str, float] = {}
    with pylog.open(root, log_cleaner_enable=False, remote_storage_location=f"s3://{bucket}/{prefix}",
                    remote_storage_endpoint_url=endpoint, remote_log_manager_task_interval_ms=100,
                    remote_log_manager_copier_priority=args.copier_priority,
                    remote_log_manager_copier_max_delay_ms=args.copier_max_delay_ms,
                    remote_storage_payload_signing_enabled=args.payload_signing) as store:
        store.create_topic("t", 1, config={"segment.bytes": args.append_segment_mb << 20, "retention.ms": -1,
                                           "remote.storage.enable": ship})
        part = store.topic("t").partition(0)
        values = [value] * 1000
        _, q0 = _thread_sched()
        t0, c0, p0, s0 = time.perf_counter(), time.thread_time(), time.process_time(), _process_cpu(server)
        for _ in range(calls):
            part.append_values(values)
        part.flush()
        out["wall"], out["cpu"] = time.perf_counter() - t0, time.thread_time() - c0
        out["upload_cpu"] = time.process_time() - p0 - out["cpu"]
        out["queued"] = _thread_sched()[1] - q0
        segments = part.segments
        out["closed"] = sum(seg.size for seg in segments[:-1]) / 1e6
        remote = store.remote_log("t", 0)
        out["shipped"] = remote.manifest(refresh=True).size / 1e6 if ship else 0.0
        out["catch_up"] = out["catch_up_cpu"] = 0.0
        if ship:
            t1, p1, c1 = time.perf_counter(), time.process_time(), time.thread_time()
            while remote.manifest(refresh=True).end_offset < segments[-1].base_offset:
                if time.perf_counter() - t1 > 600:
                    raise SystemExit("shipping did not catch up within 600 s of the round's end")
                time.sleep(0.05)
            # the other threads' CPU: this thread's polling (a manifest GET every 50 ms) is not the upload's
            out["catch_up"] = time.perf_counter() - t1
            out["catch_up_cpu"] = time.process_time() - p1 - (time.thread_time() - c1)
    out["server_cpu"] = _process_cpu(server) - s0
    _empty(client, bucket, prefix)
    return out


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}, range {min(values):.2f}-{max(values):.2f}"


def _print_appends(args: argparse.Namespace, appends: dict[bool, list[dict[str, float]]]) -> None:
    on, off = appends[True], appends[False]
    mbs = {s: [args.append_mb / r["wall"] for r in appends[s]] for s in (True, False)}
    print(f"  append: {args.append_mb} MB of {args.record_bytes}-byte records, 1,000 per call, "
          f"{args.append_segment_mb} MiB segments, {len(on)} rounds each way, interleaved; upload passes at "
          f"{args.copier_priority} priority, waiting for a pause in the appends at most {args.copier_max_delay_ms} ms, "
          f"payload signing {'on' if args.payload_signing else 'off'}")
    for s, name in ((True, "on "), (False, "off")):
        med = {k: statistics.median(r[k] for r in appends[s]) for k in ("cpu", "queued")}
        busy = statistics.median(r["wall"] - r["queued"] - r["cpu"] for r in appends[s])
        print(f"  append, shipping {name} MB/s {_spread(mbs[s])}; appending thread (medians): CPU {med['cpu']:.3f} s, "
              f"queued for a core {med['queued']:.3f} s, off-CPU {busy:.3f} s")
    closed, shipped = sum(r["closed"] for r in on), sum(r["shipped"] for r in on)
    # the other threads' CPU beyond what they spend with shipping off (the syncer's fsyncs, the idle passes)
    upload_cpu = sum(r["upload_cpu"] + r["catch_up_cpu"] for r in on) - sum(r["upload_cpu"] for r in off)
    per_round = ", ".join(f"{r['shipped']:.0f}/{r['closed']:.0f}" for r in on)
    print(f"  shipping on: {shipped:.0f} of {closed:.0f} MB closed were committed during the rounds "
          f"({per_round} MB), the rest after them in "
          f"{_spread([r['catch_up'] for r in on])} s; upload threads' CPU "
          f"{upload_cpu * 1000 / max(closed, 1e-9):.2f} ms per MB shipped "
          f"(the process's other threads' CPU during the rounds: shipping on {_spread([r['upload_cpu'] for r in on])}"
          f" s, off {_spread([r['upload_cpu'] for r in off])} s)")
    server = [(r["server_cpu"] - o["server_cpu"]) * 1000 / max(r["closed"], 1e-9) for r, o in zip(on, off, strict=True)]
    print(f"  the S3 server ({args.server}): CPU per MB shipped {_spread(server)} ms (beyond its CPU in the "
          "round with shipping off)")
    ratios = [f["wall"] / o["wall"] for o, f in zip(on, off, strict=True)]
    print(f"  append on / off MB/s: {statistics.median(mbs[True]) / statistics.median(mbs[False]):.2f}x "
          f"(medians; per round pair {', '.join(f'{r:.2f}' for r in ratios)}: {_spread(ratios)})")
    through = [f["wall"] / (o["wall"] + o["catch_up"]) for o, f in zip(on, off, strict=True)]
    print(f"  append until shipped (shipping on: the round plus its catch-up) / append (off): "
          f"{_spread(through)}x per round pair")
    cpu = {s: statistics.median(r["cpu"] for r in appends[s]) for s in (True, False)}
    busy_s = {s: statistics.median(r["wall"] - r["queued"] for r in appends[s]) for s in (True, False)}
    print(f"  appending thread CPU off / on: {cpu[False] / cpu[True]:.2f}x; CPU + off-CPU (not queued) off / on: "
          f"{busy_s[False] / busy_s[True]:.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="MB of records (1,000 x 1 KB per MB)")
    ap.add_argument("--segment-mb", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="16 MB in 2 MiB segments")
    ap.add_argument("--dir", default=None, help="where the store is written (a temporary directory in it)")
    ap.add_argument("--append-rounds", type=int, default=5, help="rounds of appends with shipping on and off")
    ap.add_argument("--append-mb", type=int, default=1024, help="MB appended per round")
    ap.add_argument("--append-segment-mb", type=int, default=64, help="segment.bytes (MiB) of the append rounds")
    ap.add_argument("--record-bytes", type=int, default=100, help="value size of the appended records")
    ap.add_argument("--copier-priority", choices=("idle", "normal"), default="idle",
                    help="remote.log.manager.copier.priority of the append rounds' stores")
    ap.add_argument("--copier-max-delay-ms", type=int, default=30_000,
                    help="remote.log.manager.copier.max.delay.ms of the append rounds' stores (its default)")
    ap.add_argument("--payload-signing", action="store_true",
                    help="remote.storage.payload.signing.enabled (SHA-256 of every body over http)")
    ap.add_argument("--server", choices=("idle", "session"), default="idle",
                    help="the S3 server's CPU: idle (SCHED_IDLE in this session) or session (nice 19, own session)")
    args = ap.parse_args(argv)
    if args.quick:
        args.mb, args.segment_mb, args.append_mb, args.append_segment_mb, args.append_rounds = 16, 2, 16, 2, 1
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    proc, endpoint = _start_moto(args.server)
    try:
        with tempfile.TemporaryDirectory(prefix="pylog-bench-remote-", dir=args.dir) as tmp:
            part = _write(os.path.join(tmp, "store"), args.mb, args.segment_mb)
            bases = list_segment_bases(part)[:-1]
            log_bytes = sum(os.path.getsize(os.path.join(part, f"{b:020d}.log")) for b in bases)
            # Made as ObjectStore makes its own: payload signing as the ObjectStores below have it
            client = boto3.client("s3", endpoint_url=endpoint, config=botocore.config.Config(
                s3={"payload_signing_enabled": args.payload_signing}))
            results = {}
            # plain upload baseline, then ship, each into its own bucket
            plain_bucket, ship_bucket = f"plain-{uuid.uuid4().hex[:8]}", f"ship-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=plain_bucket)
            client.create_bucket(Bucket=ship_bucket)
            objects = ObjectStore.from_settings({"remote.storage.location": f"s3://{ship_bucket}/store",
                                                 "remote.storage.endpoint.url": endpoint,
                                                 "remote.storage.payload.signing.enabled": args.payload_signing})
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
            load_before = os.getloadavg()[0]
            appends: dict[bool, list[dict[str, float]]] = {True: [], False: []}
            append_bucket = f"append-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=append_bucket)
            for r in range(args.append_rounds):
                for ship in (r % 2 == 0, r % 2 != 0):  # interleaved, the order alternating per round
                    root = os.path.join(tmp, f"append-{r}-{ship}")
                    appends[ship].append(_append_round(root, endpoint, proc.pid, client, append_bucket, args,
                                                       ship))
                    shutil.rmtree(root)
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
        print(f"  load average at the append rounds' start {load_before:.2f}, end {os.getloadavg()[0]:.2f}")
        _print_appends(args, appends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
