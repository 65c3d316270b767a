"""``pylog serve`` under a flood of failed SASL logins (issue 24, finding 6): how long a well-behaved client
waits for ApiVersions while others guess passwords.

Usage::

    python benchmarks/bench_auth.py            # 5 s per phase
    python benchmarks/bench_auth.py --quick    # 2 s per phase

A fresh ``python -m pylog serve STORE --port 0 --sasl-users USERS`` in a child process (its own GIL), whose
only user is pre-salted (SCRAM-SHA-512, 16,384 PBKDF2 rounds): every PLAIN login costs the server one PBKDF2
run, the most expensive the users file allows. One connection from 127.0.0.1 sends ApiVersions (v0) one at a
time, 10 ms apart, and times each answer, in three phases of the same run:

- ``no flood``: nothing else (the baseline);
- ``flood, one address``: 6 threads, each a loop of connect, SaslHandshake PLAIN, SaslAuthenticate with a wrong
  password, read the answer, close, all from 127.0.0.2 (the finding's scenario);
- ``flood, 6 addresses``: the same from 127.0.0.2 ... 127.0.0.7, one address each (each address has its own
  back-off: the login pool's size is what bounds the server's work then).

Printed: ApiVersions p50 and p99 per phase with their ratio to the baseline, the failed logins the flooders got
answered per second, the server's CPU seconds per phase, and the 1-minute load average. Nothing asserts.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_server import ServerProcess  # noqa: E402 - the same child-process server

from pylog.server.auth import scram_entry  # noqa: E402

USER, PASSWORD = "alice", "alice-secret"


def _frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    msg = struct.pack(">hhih", api_key, version, correlation, 5) + b"bench" + body
    return struct.pack(">i", len(msg)) + msg


def _recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)
    return exact(struct.unpack(">i", exact(4))[0])


def bad_login(port: int, source: str, n: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=120, source_address=(source, 0)) as sock:
        sock.sendall(_frame(17, 1, struct.pack(">h", 5) + b"PLAIN"))
        _recv_frame(sock)
        token = b"\0" + USER.encode() + b"\0" + b"guess%d" % n
        sock.sendall(_frame(36, 1, struct.pack(">i", len(token)) + token, correlation=2))
        _recv_frame(sock)


def api_versions_latencies(port: int, seconds: float) -> list[float]:
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            sock.sendall(_frame(18, 0, b""))
            _recv_frame(sock)
            out.append(time.perf_counter() - t0)
            time.sleep(0.01)
    return out


def phase(server: ServerProcess, seconds: float, sources: list[str]) -> tuple[list[float], float, float]:
    """ApiVersions latencies, failed logins answered per second, server CPU seconds, with ``sources`` flooding."""
    stop, answered = threading.Event(), [0]

    def flood(source: str) -> None:
        while not stop.is_set():
            try:
                bad_login(server.port, source, answered[0])
                answered[0] += 1
            except OSError:
                pass

    threads = [threading.Thread(target=flood, args=(s,), daemon=True) for s in sources]
    cpu0 = server.cpu_seconds()
    for t in threads:
        t.start()
    if threads:
        time.sleep(0.5)  # the flood under way
    t0 = time.monotonic()
    lat = api_versions_latencies(server.port, seconds)
    elapsed = time.monotonic() - t0
    rate = answered[0] / (elapsed + 0.5) if threads else 0.0
    cpu = server.cpu_seconds() - cpu0
    stop.set()
    for t in threads:
        t.join()
    return lat, rate, cpu


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    seconds = 2.0 if "--quick" in argv else 5.0
    with tempfile.TemporaryDirectory(prefix="bench_auth_") as tmp:
        users = os.path.join(tmp, "users.json")
        with open(users, "w") as f:
            json.dump({"users": {USER: scram_entry(PASSWORD, ["SCRAM-SHA-512"], iterations=16384)}}, f)
        os.chmod(users, 0o600)
        server = ServerProcess(os.path.join(tmp, "store"), os.path.join(tmp, "server.log"),
                               args=["--sasl-users", users])
        try:
            load = os.getloadavg()[0]
            results = [("no flood", *phase(server, seconds, [])),
                       ("flood, one address (6 connections)", *phase(server, seconds, ["127.0.0.2"] * 6)),
                       ("flood, 6 addresses", *phase(server, seconds, [f"127.0.0.{i}" for i in range(2, 8)]))]
        finally:
            server.stop()
    base50, base99 = pct(results[0][1], 0.5), pct(results[0][1], 0.99)
    print(f"pylog serve, ApiVersions from 127.0.0.1 while others fail PLAIN logins (pre-salted SCRAM-SHA-512 "
          f"user, 16384 rounds); {seconds:.0f} s per phase; load average {load:.2f}")
    print(f"{'phase':<38} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'p50 x':>7} {'p99 x':>7} {'fails/s':>8} "
          f"{'srv cpu s':>9}")
    for name, lat, rate, cpu in results:
        p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
        print(f"{name:<38} {len(lat):>5} {p50:>8.2f} {p99:>8.2f} {p50 / base50:>7.2f} {p99 / base99:>7.2f} "
              f"{rate:>8.1f} {cpu:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
