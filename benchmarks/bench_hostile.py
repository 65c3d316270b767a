"""``pylog serve`` under hostile clients (issue 24): a well-behaved client's latency and the server's memory
while 8 hostile connections run each scenario, against an idle baseline from the same run.

Usage::

    python benchmarks/bench_hostile.py            # 15 s per scenario: ~2-3 minutes
    python benchmarks/bench_hostile.py --short    # 4 s per scenario, smaller payloads: ~1 minute (CI, .ci/run)

Each scenario starts a fresh ``python -m pylog serve STORE --port 0`` in a child process with the default
limits, except the deadlines (``--request-receive-timeout-ms`` and ``--response-send-timeout-ms`` 2,000, so
that they act within a scenario) and ``--max-connections 256``. The hostile clients run in another child
process (8 threads, one per connection, unless said otherwise); this process is the well-behaved client: one
connection, opened before the hostile clients start, sending ApiVersions every 10 ms and timing each answer.
Scenarios:

- ``idle``: no hostile client (the baseline).
- ``partial-frames``: each connection sends the size of a 100 MiB request (the default ``max_request_bytes``)
  and then 90 MiB of it, never the rest, and starts again when closed (``--short``: 30 MiB of 32).
- ``non-reading-fetchers``: a topic of 64 MiB (``--short``: 24 MiB); each connection has a 4 KiB receive
  buffer, pipelines 4 Fetch requests of 55 MiB and never reads; reconnects when closed.
- ``giant-metadata``: each connection sends a 10 MiB Metadata request naming 1.3 M topics (``--short``:
  2.5 MiB, 330,000), and again on a new connection when closed.
- ``auto-create-flood``: each connection sends Metadata requests naming 5,000 new topics each (~55 KB) with
  auto-creation allowed, one after the other.
- ``slowloris``: each connection sends a request's size and then one byte every 100 ms; reconnects when
  closed.
- ``connection-flood``: 8 threads open connections (sending one ApiVersions on each and keeping it) as fast as
  they can, up to 100 each at a time.
- ``pipelined-unread``: each connection sends ApiVersions requests back to back (bursts of 20,000) with a
  4 KiB receive buffer and never reads an answer.
- ``join-flood``: each connection sends JoinGroup requests (v7, 1 KiB of member metadata, the longest session
  timeout, 30 min) for a new group id each, in bursts of 500, reading the answers (MEMBER_ID_REQUIRED: a
  pending member held for the session timeout) and never joining again. The coordinator holds at most
  ``max_groups`` (10,000) groups; the others are answered GROUP_MAX_SIZE_REACHED.

Per scenario: the well-behaved client's ApiVersions p50 / p99 (ms) and errors, the server's peak VmRSS and
RssAnon (sampled every 20 ms: VmRSS includes the store's pages mapped from the page cache) and VmHWM (MiB) and
its open descriptors at the end. Asserted bounds (generous: the machine may be loaded): every ApiVersions
answered; p99 below 50 ms plus the idle baseline's p99 (with ``--short``, CI's mode, above it is a warning and
only a p99 above 1 s fails: on a 2-core machine the 8 hostile processes alone took pipelined-unread to 69 ms at
a load of 1.5-2.7, and connection-flood to 282 ms at 6.3, while a loop blocked as before these limits takes
seconds); the server's VmHWM below 300 MiB; in
``connection-flood`` at most 256 connections (the server's descriptors below 256 + 50 refused ones being
closed, the most accepted in one turn, + 64). The topics the auto-create flood made are printed (at
most 100 per request, 1,000 per second in bursts of 10,000). The 1-minute load average is printed with each
scenario.

Result (2 cores shared with other jobs, 1-minute load average 0.6-4.0; ``python benchmarks/bench_hostile.py``,
default limits but the two deadlines at 2 s and ``--max-connections 256``; all bounds held):

======================  ======  ======  =========  =========  =====
scenario                p50 ms  p99 ms  VmHWM MiB  anon MiB   fds
======================  ======  ======  =========  =========  =====
idle (baseline)         0.34    1.01    45         28         9
partial-frames          0.38    1.95    136        118        18
non-reading-fetchers    0.31    1.38    165        133        13
giant-metadata          3.27    14.43   137        115        9
auto-create-flood       0.51    30.47   68         50         18
slowloris               0.45    2.30    45         28         18
connection-flood        0.43    42.24   49         32         265
pipelined-unread        0.69    9.14    116        94         18
======================  ======  ======  =========  =========  =====

``join-flood`` (added later; ``--short``, load 1.4): p50 0.75 ms, p99 2.90 ms, VmHWM 58 MiB (idle: 0.31, 0.93,
45). Measured in-process with one connection pipelining 30,000 such JoinGroups: with ``max_groups`` 10,000 the
last 20,000 are refused (GROUP_MAX_SIZE_REACHED) at 12,800 JoinGroups/s and the process peaks at 58 MiB; with
no bound every one holds a group (about 0.7 KiB each: 77 MiB after 30,000, at 7,500/s).

The p99 figures follow the machine's load: at a load of 6.5-9.4 all bounds held too (giant-metadata 64 ms
against a baseline p99 of 23 ms), at 4.5-7.8 giant-metadata reached 69 ms against 3.8, over its bound. The
giant Metadata flood keeps the event loop reading 80 MiB per round from 8 sockets (p50 ~3 ms): the one
scenario where the loop itself is the limit.

Before the limits (issue 24's figures): partial frames took the server to 765 MB and held it, 16 non-reading
fetchers to 1.2 GB, a 10 MiB Metadata request 58 s and 749 MB with other clients waiting up to 8 s; 8 clients
pipelining ApiVersions they never read held the others' answers ~2 s (measured here before the fix).
VmHWM includes the store's pages mapped from the page cache (RssFile: the non-reading fetchers' 64 MiB topic).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import struct
import sys
import tempfile
import threading
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the sibling benchmarks, also under PYTHONSAFEPATH=1
from bench_server import ServerProcess  # noqa: E402 - the same server process harness
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from serverutil import recv_frame  # noqa: E402 - the tests' frame reader

#: The bounds asserted (see the docstring).
P99_BOUND_MS = 50.0
#: With --short (CI): the p99 that fails; P99_BOUND_MS + baseline is then a warning (see the docstring).
P99_HARD_MS = 1000.0
RSS_BOUND_MIB = 300
MAX_CONNECTIONS = 256
DEADLINE_MS = 2000
HOSTILE = 8


def _request(api_key: int, version: int, corr: int, body: dict) -> bytes:
    from pylog.server.protocol import encode_request
    return encode_request(api_key, version, corr, "hostile", body)


API_VERSIONS_BODY = {"client_software_name": "bench", "client_software_version": "1"}


def _metadata(names: list[str], create: bool) -> bytes:
    return _request(3, 9, 1, {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": create,
                              "include_cluster_authorized_operations": False,
                              "include_topic_authorized_operations": False})


# ------------------------------------------------------------------------------------------- hostile clients


def _forever(addr: tuple[str, int], stop: threading.Event, one: Callable[[socket.socket], None]) -> None:
    """Run ``one`` on a fresh connection, again and again (the server closes them), until ``stop``."""
    while not stop.is_set():
        try:
            with socket.create_connection(addr, timeout=5) as s:
                one(s)
        except OSError:
            time.sleep(0.01)


def _partial_frames(addr, stop, short):
    claim, send = (32 << 20, 30 << 20) if short else (100 << 20, 90 << 20)
    chunk = b"\0" * (1 << 20)

    def one(s):
        s.settimeout(None)
        s.sendall(struct.pack(">i", claim))
        sent = 0
        while sent < send and not stop.is_set():
            s.sendall(chunk)
            sent += len(chunk)
        while not stop.is_set():
            s.settimeout(0.2)
            try:
                if not s.recv(1):
                    return
            except socket.timeout:
                pass
    _forever(addr, stop, one)


def _non_reading_fetchers(addr, stop, short):
    fetch = _request(1, 11, 1, {
        "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 55 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "big", "partitions": [{"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                                                      "partition_max_bytes": 55 << 20}]}]})

    def one(s):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(fetch * 4)
        while not stop.is_set():  # never read: wait for the server to close (a send fails) or stop
            time.sleep(0.1)
            try:
                s.send(b"")
            except OSError:
                return
            if _peer_closed(s):
                return
    _forever(addr, stop, one)


def _peer_closed(s: socket.socket) -> bool:
    """True when the server reset or closed ``s`` (without reading what it sent: MSG_PEEK)."""
    try:
        s.setblocking(False)
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def _giant_metadata(addr, stop, short, frame):
    def one(s):
        s.settimeout(30)
        s.sendall(frame)
        try:
            s.recv(1 << 16)
        except OSError:
            pass
    _forever(addr, stop, one)


def _auto_create_flood(addr, stop, short, ident):
    seq = [0]

    def one(s):
        s.settimeout(60)
        while not stop.is_set():
            seq[0] += 1
            names = [f"flood-{ident}-{seq[0]}-{i}" for i in range(5000)]
            s.sendall(_metadata(names, True))
            if recv_frame(s) is None:
                return
    _forever(addr, stop, one)


def _slowloris(addr, stop, short):
    def one(s):
        s.sendall(struct.pack(">i", 1000))
        while not stop.is_set():
            time.sleep(0.1)
            s.sendall(b"\0")
    _forever(addr, stop, one)


def _connection_flood(addr, stop, short):
    hello = _request(18, 3, 1, API_VERSIONS_BODY)
    held: list[socket.socket] = []
    while not stop.is_set():
        try:
            s = socket.create_connection(addr, timeout=5)
            s.sendall(hello)
            held.append(s)
        except OSError:
            time.sleep(0.01)
        if len(held) >= 100:
            held.pop(0).close()
    for s in held:
        s.close()


def _pipelined_unread(addr, stop, short):
    burst = b"".join(_request(18, 3, i, API_VERSIONS_BODY) for i in range(20_000))

    def one(s):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(1.0)
        while not stop.is_set():
            try:
                s.sendall(burst)
            except socket.timeout:
                pass
            if _peer_closed(s):
                return
    _forever(addr, stop, one)


def _join_flood(addr, stop, short, ident):
    seq = [0]
    meta = b"m" * 1024

    def join(corr: int) -> bytes:
        seq[0] += 1
        return _request(11, 7, corr, {"group_id": f"flood-{ident}-{seq[0]}", "session_timeout_ms": 1_800_000,
                                      "rebalance_timeout_ms": 1_800_000, "member_id": "", "group_instance_id": None,
                                      "protocol_type": "consumer",
                                      "protocols": [{"name": "range", "metadata": meta}]})

    def one(s):
        s.settimeout(60)
        while not stop.is_set():
            s.sendall(b"".join(join(i) for i in range(500)))
            for _ in range(500):
                if recv_frame(s) is None:
                    return
    _forever(addr, stop, one)


def _hostile_main(scenario: str, addr: tuple[str, int], short: bool, seconds: float, ready) -> None:
    stop = threading.Event()
    extra: list = []
    if scenario == "giant-metadata":
        n = 330_000 if short else 1_300_000
        extra = [_metadata([f"t{i:07d}" for i in range(n)], False)]
    targets = {"partial-frames": _partial_frames, "non-reading-fetchers": _non_reading_fetchers,
               "giant-metadata": _giant_metadata, "auto-create-flood": _auto_create_flood,
               "slowloris": _slowloris, "connection-flood": _connection_flood,
               "pipelined-unread": _pipelined_unread, "join-flood": _join_flood}
    threads = []
    for i in range(HOSTILE):
        args = (addr, stop, short, *(extra or ([i] if scenario in ("auto-create-flood", "join-flood") else [])))
        threads.append(threading.Thread(target=targets[scenario], args=args, daemon=True))
    ready.set()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(10)


# ------------------------------------------------------------------------------------------- the measurement


def _probe(s: socket.socket, addr: tuple[str, int], seconds: float, server: ServerProcess) -> dict:
    """ApiVersions every 10 ms on ``s`` (opened before the hostile clients: a connection flood may take every
    connection the server allows) for ``seconds``; latencies (ms), errors, peak VmRSS (KiB)."""
    lat: list[float] = []
    errors = 0
    peak = [0, 0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                st = server.status()
            except OSError:
                return
            peak[0] = max(peak[0], st["VmRSS"])
            peak[1] = max(peak[1], st["RssAnon"])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    end = time.monotonic() + seconds
    corr = 0
    try:
        while time.monotonic() < end:
            corr += 1
            t0 = time.perf_counter()
            try:
                s.sendall(_request(18, 3, corr, API_VERSIONS_BODY))
                if recv_frame(s) is None:
                    raise OSError("closed")
                lat.append((time.perf_counter() - t0) * 1000)
            except OSError:
                errors += 1
                s.close()
                s = socket.create_connection(addr, timeout=10)
            time.sleep(0.01)
    finally:
        s.close()
        stop.set()
        sampler.join()
    return {"lat": lat, "errors": errors, "peak_rss_kib": peak[0], "peak_anon_kib": peak[1]}


def _prefill(path: str, mib: int) -> None:
    import pylog
    with pylog.open(path) as store:
        store.create_topic("big")
        with store.producer() as p:
            value = b"x" * (64 << 10)
            for _ in range(mib * 16):
                p.send("big", value)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def run_scenario(scenario: str, short: bool, seconds: float, workdir: str) -> dict:
    store = os.path.join(workdir, scenario)
    if scenario == "non-reading-fetchers":
        _prefill(store, 24 if short else 64)
    options = ["--request-receive-timeout-ms", str(DEADLINE_MS), "--response-send-timeout-ms", str(DEADLINE_MS),
               "--max-connections", str(MAX_CONNECTIONS)]
    server = ServerProcess(store, os.path.join(workdir, scenario + ".log"), args=options)
    addr = ("127.0.0.1", server.port)
    load = os.getloadavg()[0]
    child = None
    probe = socket.create_connection(addr, timeout=10)
    try:
        if scenario != "idle":
            ctx = multiprocessing.get_context("fork")
            ready = ctx.Event()
            child = ctx.Process(target=_hostile_main, args=(scenario, addr, short, seconds + 1.0, ready), daemon=True)
            child.start()
            ready.wait(120)
            time.sleep(1.0)  # the hostile connections under way before the first probe
        out = _probe(probe, addr, seconds, server)
        out["fds"] = _fds(server.pid)
        out["hwm_kib"] = server.status()["VmHWM"]
        if scenario == "auto-create-flood":
            out["topics"] = sum(1 for e in os.scandir(store) if e.is_dir() and e.name.startswith("flood-"))
    finally:
        if child is not None:
            child.join(60)
            if child.is_alive():
                child.kill()
        server.stop()
    out["load"] = load
    return out


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


SCENARIOS = ["idle", "partial-frames", "non-reading-fetchers", "giant-metadata", "auto-create-flood",
             "slowloris", "connection-flood", "pipelined-unread", "join-flood"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="4 s per scenario, smaller payloads (CI)")
    ap.add_argument("--only", choices=SCENARIOS, action="append", help="run these scenarios (and the baseline)")
    args = ap.parse_args(argv)
    seconds = 4.0 if args.short else 15.0
    wanted = ["idle"] + [s for s in SCENARIOS[1:] if not args.only or s in args.only]
    failures: list[str] = []
    warnings: list[str] = []
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as workdir:
        print(f"{'scenario':22} {'p50 ms':>7} {'p99 ms':>7} {'answered':>8} {'errors':>6} {'peak RSS':>9} "
              f"{'anon':>6} {'VmHWM':>7} {'fds':>5} {'load':>5}")
        for name in wanted:
            r = run_scenario(name, args.short, seconds, workdir)
            results[name] = r
            p50, p99 = _pct(r["lat"], 0.5), _pct(r["lat"], 0.99)
            print(f"{name:22} {p50:7.2f} {p99:7.2f} {len(r['lat']):8d} {r['errors']:6d} "
                  f"{r['peak_rss_kib'] / 1024:8.0f}M {r['peak_anon_kib'] / 1024:5.0f}M {r['hwm_kib'] / 1024:6.0f}M "
                  f"{r['fds']:5d} {r['load']:5.2f}"
                  + (f"  topics created: {r['topics']}" if "topics" in r else ""), flush=True)
            base_p99 = _pct(results["idle"]["lat"], 0.99)
            if r["errors"] or not r["lat"]:
                failures.append(f"{name}: {r['errors']} ApiVersions unanswered")
            if name != "idle" and p99 > P99_BOUND_MS + base_p99:
                over = f"{name}: ApiVersions p99 {p99:.1f} ms > {P99_BOUND_MS} ms + baseline {base_p99:.1f}"
                (warnings if args.short and p99 <= P99_HARD_MS else failures).append(over)
            if r["hwm_kib"] > RSS_BOUND_MIB * 1024:
                failures.append(f"{name}: server VmHWM {r['hwm_kib'] / 1024:.0f} MiB > {RSS_BOUND_MIB} MiB")
            if name == "connection-flood" and r["fds"] > MAX_CONNECTIONS + 50 + 64:
                failures.append(f"{name}: {r['fds']} descriptors open > {MAX_CONNECTIONS} connections + 50 "
                                "refused ones closing + 64")
    for w in warnings:
        print(f"WARN (a loaded machine? fails above {P99_HARD_MS:.0f} ms with --short):", w)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
