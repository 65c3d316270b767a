"""``pylog serve`` with the authorizer and client quotas on, against the same server without them (issue 24):
confluent-kafka produce and fetch throughput, the ratio of the two in one run.

Usage::

    python benchmarks/bench_server_acl.py             # 500,000 records, 3 rounds of each setting
    python benchmarks/bench_server_acl.py --quick     # 30,000 records, 1 round (tested)

Both settings run ``python -m pylog serve`` in a child process with SASL/PLAIN (one user, ``bench``), so that
the only difference is what is measured:

- enabled: ``--authorizer`` with ACLs allowing ``User:bench`` WRITE and READ on the topic and READ on the
  group (every request is checked; decisions cached), and ``--quotas`` giving ``user=<default>`` a
  producer_byte_rate, consumer_byte_rate and request_percentage too large to throttle (every request is
  measured: the quota code runs, nothing is delayed);
- disabled: neither option.

Per round and setting, a fresh store: a confluent-kafka ``Producer`` (acks=1, default batching) sends N
100-byte values, then a ``Consumer`` reads them back (``fetch.queue.backoff.ms=10``, see bench_server.py):
records/s of each, and the server process's CPU seconds (user + system) per 1M records of each (less
sensitive to the machine's other load than the rates); then produce requests of one record each, 64 in
flight on one SASL connection (raw frames): requests/s and the server's CPU microseconds per request, the
figures where the per-request work shows. The
settings alternate (disabled, enabled, disabled, ...) so that the machine's load affects both alike; the
table gives each setting's median and range, the ratio of the medians (enabled / disabled; for CPU above 1
is more work) and the 1-minute load average at each round's start. Nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the sibling benchmarks, also under PYTHONSAFEPATH=1
from bench_server import QUEUE_BACKOFF_MS, ServerProcess, kafka_consumer_rate, kafka_producer_rate  # noqa: E402

USER, PASSWORD = "bench", "bench-secret"
SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": USER,
        "sasl.password": PASSWORD}
TOPIC, GROUP = "t", "bench"
VALUE = b"x" * 100
#: Rates no client here reaches: the quotas are measured on every request and never delay one.
UNREACHED = {"producer_byte_rate": 1e12, "consumer_byte_rate": 1e12, "request_percentage": 1e9}


def setting_args(root: str, enabled: bool) -> tuple[str, ...]:
    users = os.path.join(root, "users.json")
    with open(users, "w") as f:
        json.dump({"users": {USER: PASSWORD}}, f)
    os.chmod(users, 0o600)
    args: tuple[str, ...] = ("--sasl-users", users, "--sasl-mechanisms", "PLAIN")
    if enabled:
        quotas = os.path.join(root, "quotas.json")
        with open(quotas, "w") as f:
            json.dump({"user=<default>": UNREACHED}, f)
        args += ("--authorizer", "--quotas", quotas)
    return args


def prepare_store(path: str, enabled: bool) -> None:
    import pylog
    from pylog.storage.acl_file import AclEntry
    with pylog.open(path) as store:
        store.create_topic(TOPIC)
        if enabled:
            principal = f"User:{USER}"
            store.replace_acls([AclEntry(2, TOPIC, 3, principal, "*", 4, 3),   # WRITE on the topic
                                AclEntry(2, TOPIC, 3, principal, "*", 3, 3),   # READ on the topic
                                AclEntry(3, GROUP, 3, principal, "*", 3, 3)])  # READ on the group


def _varint(n: int) -> bytes:
    """Kafka's zigzag varint."""
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def one_record_batch(value: bytes) -> bytes:
    """A Kafka v2 record batch of one record (no key, no headers), uncompressed, CRC-32C computed."""
    import crc32c
    rec = b"\0" + _varint(0) + _varint(0) + _varint(-1) + _varint(len(value)) + value + _varint(0)
    tail = struct.pack(">hiqqqhii", 0, 0, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, 1) + \
        _varint(len(rec)) + rec
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


def small_produce_rate(port: int, n: int, depth: int = 64) -> float:
    """Produce requests of one 100-byte record each, ``depth`` in flight on one SASL connection (raw frames):
    requests/s. Each request pays the per-request work (the ACL check, the quota measurement) for one record,
    where the confluent figures spread it over batches of thousands."""
    from bench_server import _frame
    from pylog.server.protocol import encode_request, parse_response
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        def call(key: int, version: int, body: dict) -> dict:
            sock.sendall(encode_request(key, version, 1, "bench", body))
            return parse_response(key, version, _frame(sock))[1]
        assert call(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0" + USER.encode() + b"\0" + PASSWORD.encode()
        assert call(36, 0, {"auth_bytes": token})["error_code"] == 0
        frame = encode_request(0, 7, 2, "bench", {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                                  "topic_data": [{"name": TOPIC, "partition_data": [
                                                      {"index": 0, "records": one_record_batch(VALUE)}]}]})
        sent = done = 0
        t0 = time.perf_counter()
        while done < n:
            while sent < n and sent - done < depth:
                sock.sendall(frame)
                sent += 1
            body = parse_response(0, 7, _frame(sock))[1]
            assert body["responses"][0]["partition_responses"][0]["error_code"] == 0, body
            done += 1
        return n / (time.perf_counter() - t0)
    finally:
        sock.close()


def one_round(root: str, enabled: bool, n: int, r: int) -> dict[str, float]:
    name = "enabled" if enabled else "disabled"
    store = os.path.join(root, f"store-{name}-{r}")
    prepare_store(store, enabled)
    server = ServerProcess(store, os.path.join(root, f"server-{name}-{r}.log"), args=list(setting_args(root, enabled)))
    try:
        load = os.getloadavg()[0]
        cpu0 = server.cpu_seconds()
        produce = kafka_producer_rate(server.bootstrap, TOPIC, n, **SASL)
        cpu1 = server.cpu_seconds()
        fetch = kafka_consumer_rate(server.bootstrap, TOPIC, n, **SASL, **{"group.id": GROUP},
                                    **{"fetch.queue.backoff.ms": QUEUE_BACKOFF_MS})
        cpu2 = server.cpu_seconds()
        small_n = max(1000, n // 20)
        cpu3 = server.cpu_seconds()
        small = small_produce_rate(server.port, small_n)
        cpu4 = server.cpu_seconds()
    finally:
        server.stop()
    shutil.rmtree(store, ignore_errors=True)
    # Server CPU seconds per 1M records: less sensitive than the rates to what else the machine runs.
    return {"produce": produce, "fetch": fetch, "produce_cpu": (cpu1 - cpu0) * 1e6 / n,
            "fetch_cpu": (cpu2 - cpu1) * 1e6 / n, "small": small,
            "small_cpu": (cpu4 - cpu3) * 1e6 / small_n, "load": load}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="30,000 records, one round of each setting")
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.rounds = min(args.records, 30_000), 1
    root = args.dir or tempfile.mkdtemp(prefix="pylog-bench-acl-")
    figures: dict[str, list[dict[str, float]]] = {"disabled": [], "enabled": []}
    try:
        for r in range(args.rounds):
            for enabled in (False, True):
                figures["enabled" if enabled else "disabled"].append(one_round(root, enabled, args.records, r))
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(f"pylog serve, SASL/PLAIN, {args.records:,} records of 100 bytes, {args.rounds} round(s) of each setting")
    print(f"{'figure':<34}{'disabled (median, range)':>30}{'enabled (median, range)':>30}{'ratio':>8}")
    labels = {"produce": "confluent-kafka produce rec/s", "fetch": "confluent-kafka fetch rec/s",
              "produce_cpu": "server CPU s per 1M produced", "fetch_cpu": "server CPU s per 1M fetched",
              "small": "1-record produce requests/s", "small_cpu": "server CPU us per 1-record produce"}
    for what, label in labels.items():
        cells = []
        medians = []
        for setting in ("disabled", "enabled"):
            values = [f[what] for f in figures[setting]]
            m = statistics.median(values)
            medians.append(m)
            fmt = ",.0f" if m >= 100 else ".2f"
            cells.append(f"{m:>12{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})")
        print(f"{label:<34}{cells[0]:>30}{cells[1]:>30}{medians[1] / medians[0]:>7.2f}x")
    loads: list[Any] = [f"{f['load']:.1f}" for s in ("disabled", "enabled") for f in figures[s]]
    print(f"load average at round starts: {', '.join(loads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
