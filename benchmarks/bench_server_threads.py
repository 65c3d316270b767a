"""Where ``pylog serve``'s CPU goes per Produce request, thread by thread (issue 25): a confluent-kafka producer
(``linger.ms=5``, as ``bench_server.py --acks-only``) sends N 100-byte records to P partitions of a fresh
server; around the timed run it reads each server thread's user and system CPU time and voluntary / involuntary
context switches (``/proc/PID/task``), the server's Produce request count (``--metrics-port``) and this
process's CPU (the client: Python and librdkafka threads). Prints, per server thread kind (the storage pool,
the group commit's workers, the event loop), CPU and switches per Produce request, and client and server CPU
per record.

Thread names come from ``py-spy dump`` when py-spy is installed (Python threads carry no OS name); without it
the rows are thread ids. Nothing asserts.

    python benchmarks/bench_server_threads.py [--records 600000] [--partitions 500 4] [--acks all 1] [--runs 1]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_server as B  # noqa: E402 - the server process and producer of the acks=all figures

_STATUS = re.compile(r"^(nonvoluntary|voluntary)_ctxt_switches:\s+(\d+)", re.M)


def threads(pid: int) -> dict[int, tuple[int, int, int, int]]:
    """tid -> (user ticks, system ticks, voluntary switches, involuntary switches) of each thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                switches = dict(_STATUS.findall(f.read()))
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (int(fields[11]), int(fields[12]), int(switches.get("voluntary", 0)),
                         int(switches.get("nonvoluntary", 0)))
    return out


def thread_names(pid: int) -> dict[int, str]:
    """tid -> Python thread name, from ``py-spy dump`` (empty without py-spy)."""
    if shutil.which("py-spy") is None:
        return {}
    dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60).stdout
    names = {}
    for tid, name in re.findall(r'^Thread (\S+) \([^)]*\): "([^"]*)"', dump, re.M):
        try:
            names[int(tid, 0)] = name
        except ValueError:
            pass
    return names


def one_run(root: str, records: int, partitions: int, acks: str) -> None:
    path = os.path.join(root, f"store-{partitions}-{acks}")
    B._fill_partitions(path, {"t": partitions})
    server = B.ServerProcess(path, os.path.join(root, "server.log"), args=["--metrics-port", "0"])
    start: dict[str, Any] = {}

    def started() -> None:
        start.update(server=threads(server.pid), client=os.times(), requests=server.produce_requests(),
                     cpu=server.cpu_seconds())
    try:
        rate = B.kafka_producer_rate(server.bootstrap, "t", records, partitions, started, **{"linger.ms": 5},
                                     acks=acks)
        after, client = threads(server.pid), os.times()
        requests = max(1.0, server.produce_requests() - start["requests"])
        cpu = server.cpu_seconds() - start["cpu"]
        names = thread_names(server.pid)
    finally:
        server.stop()
        shutil.rmtree(path, ignore_errors=True)
    ticks = os.sysconf("SC_CLK_TCK")
    rows: dict[str, list[float]] = {}
    for tid, (user, system, vol, invol) in after.items():
        u0, s0, v0, i0 = start["server"].get(tid, (0, 0, 0, 0))
        kind = re.sub(r"[_-]?\d+$", "", names.get(tid, str(tid)))  # pool threads are numbered
        row = rows.setdefault(kind, [0.0, 0.0, 0.0, 0.0, 0.0])
        for i, v in enumerate(((user - u0) / ticks, (system - s0) / ticks, vol - v0, invol - i0, 1)):
            row[i] += v
    c0 = start["client"]
    client_cpu = client.user - c0.user + client.system - c0.system
    print(f"P={partitions} acks={acks}: {rate / 1e3:.0f} k rec/s, {records / requests:.0f} records per Produce "
          f"request; server CPU {cpu * 1e6 / records:.2f} us/record ({cpu * 1e6 / requests:.0f} us/request); "
          f"client CPU {client_cpu * 1e6 / records:.2f} us/record; load {os.getloadavg()[0]:.2f}")
    for kind, (user, system, vol, invol, count) in sorted(rows.items(), key=lambda r: -r[1][0] - r[1][1]):
        if user + system > 0 or vol + invol > 0:  # switches are exact; CPU comes in clock ticks
            print(f"  {kind:28s} x{count:<3.0f} user {user * 1e6 / requests:6.1f}  sys {system * 1e6 / requests:6.1f} "
                  f"us/request; switches/request voluntary {vol / requests:.2f} involuntary {invol / requests:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--partitions", type=int, nargs="+", default=[500, 4])
    ap.add_argument("--acks", nargs="+", default=["all", "1"])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--dir", help="where the stores go (default: a temporary directory)")
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="pylog-bench-threads-", dir=args.dir)
    try:
        for _ in range(args.runs):
            for partitions in args.partitions:
                for acks in args.acks:
                    one_run(root, args.records, partitions, acks)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
