"""``pylog serve`` (issue 19): Kafka clients against the server, each figure against pylog's own clients in the
same run.

Usage::

    python benchmarks/bench_server.py                 # 1,000,000 records, 3 rounds: a few minutes
    python benchmarks/bench_server.py --quick         # 50,000 records, 1 round: ~30 s (tested)
    python benchmarks/bench_server.py --profile DIR   # also: the server under cProfile, stats in DIR

Every round starts a fresh ``python -m pylog serve STORE --port 0`` in a child process (its port is read
from its ``listening on HOST:PORT`` log line) so the clients here do not share its GIL, and measures:

- confluent-kafka ``Producer`` (default batching, ``acks=1``) sending N 100-byte values to the server, then
  ``flush()``: records/s. Baseline: pylog's in-process ``store.producer(acks=1)``, ``send()`` loop and
  ``flush()`` of the same N values into a store of this process.
  Also ``produce()`` alone with no broker reachable (records into the client's queue only): the client's
  own ceiling, against the same baseline.
- confluent-kafka ``Consumer`` (default fetch settings, ``consume(num_messages=10000)``) reading those N
  records back from the server: records/s. Baseline: pylog's in-process ``store.consumer()`` iterating the
  baseline's N records.
  The same with ``fetch.queue.backoff.ms=10``: librdkafka's default (1,000 ms) postpones the next fetch
  whenever 100,000 records wait in the client's prefetch queue, which bounds the default figure by the client's
  own schedule (as against a Kafka broker), not by the server.
- End-to-end latency, 1,000 records/s: a confluent-kafka producer (``linger.ms=0``, ``acks=1``) in this
  process, the server in its own process, a confluent-kafka consumer (default ``fetch.wait.max.ms``) in a
  third process; the value is the send time (CLOCK_MONOTONIC, shared by the processes). p50 and p99.
  Baseline: pylog's producer to a pylog consumer in another process on the same store, one record every
  0.5 ms (bench_clients.py's figure).
- The server's memory, in a fresh server process with 1,000,000 records stored (100,000 in --quick): its
  VmRSS and RssAnon from ``/proc/PID/status`` idle with no connection (the baseline), then with 100 idle
  connections (each sent an ApiVersions and a Metadata request, then left open), then while a slow
  consumer pipelines 20 Fetch requests of 50 MiB each (``max_bytes`` and ``partition_max_bytes``) and reads
  its socket 64 KiB every 5 ms with a 64 KiB receive buffer for a few seconds (peak RssAnon sampled, and
  VmHWM at the end).

The table gives ranges over rounds (with more than one round, the medians of the value and of the ratio after
the target) and the 1-minute load average at each round's start. Nothing asserts.

``--acks-only --vs-fdatasync`` runs the acks=all figures twice per round, interleaved: as served by default, and
with the group commit's store-wide ``syncfs`` off (``--group-commit-syncfs-partitions 0``; figures marked
"[fdatasync each]"), the design before it.

The acks figures are rates: each producer run sends ``--acks-records`` (3,000,000 by default: 3-6 s at 500
partitions) and the rate includes its final ``flush()``. A burst of a few hundred thousand records lasts under a
second at 500 partitions, where librdkafka's final flush alone sends one last request per partition (0.13-0.16 s
here) and its pipeline is still filling when the run starts, and 0.25 s at 4 partitions, where it measures the
client's queue more than the server (1.28 M rec/s against 1.04 M over 3,000,000): such a run measures the burst's
start and end more than the rate (acks=all at 500 partitions / at 4: median 0.36x over 300,000 records, 0.57-0.59x
over 3,000,000 in the same session). The final flush of each run is reported beside the rates.

``--count-requests`` adds the records per Produce request of each acks=all / acks=1 figure, and the server's CPU
per Produce request at the many partitions (the server's
``pylog_server_requests_total{api="Produce"}``, read from its ``--metrics-port`` endpoint before and after each
timed run; metrics on cost the server ~1 us per request). librdkafka makes one request per partition and batch,
and batches only while earlier requests wait to be sent, so this is the figure the server's back-pressure moves.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # the sibling benchmarks, also under PYTHONSAFEPATH=1
from bench_accel import fmt_range  # noqa: E402 - the same figure formatting
ROOT = os.path.dirname(HERE)
VALUE = b"x" * 100
#: The consumer figure's second setting: librdkafka (2.x) postpones the next fetch by ``fetch.queue.backoff.ms``
#: (1,000 by default) whenever its prefetch queue holds ``queued.min.messages`` (100,000) or more, which a
#: consumer reading 100-byte records reaches many times a second.
QUEUE_BACKOFF_MS = 10
#: Ends the acks=all figures of the server run with ``--group-commit-syncfs-partitions 0`` (``--vs-fdatasync``).
FDATASYNC_EACH = " [fdatasync each]"


# ------------------------------------------------------------------------------------------- the server


class ServerProcess:
    """``python -m pylog serve STORE --port 0 [args]`` in a child process (optionally under cProfile)."""

    def __init__(self, store: str, log_path: str, profile: str | None = None, args: list[str] = ()) -> None:
        cmd = [sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += ["-m", "pylog", "serve", store, "--port", "0", "--log-level", "INFO", *args]
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 30
        while True:
            with open(log_path) as f:
                m = re.search(r"listening on ([\d.]+):(\d+)", f.read())
            if m:
                self.bootstrap = f"{m.group(1)}:{m.group(2)}"
                self.port = int(m.group(2))
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                with open(log_path) as f:
                    raise RuntimeError(f"pylog serve did not start:\n{f.read()}")
            time.sleep(0.02)

    def produce_requests(self) -> float:
        """Produce requests served so far (the server must run with ``--metrics-port``)."""
        import urllib.request
        with open(self.log.name) as f:
            url = re.findall(r"metrics on (http://\S+)", f.read())[-1]  # the endpoint's /metrics address
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        found = re.search(r'pylog_server_requests_total\{api="Produce"\} (\S+)', text)
        return float(found.group(1)) if found else 0.0

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM, RssAnon, RssFile of the server, in KiB."""
        out = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[k] = int(v.split()[0])
        return out

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ------------------------------------------------------------------------------------------- figures


def pylog_producer_rate(path: str, n: int) -> float:
    """pylog's in-process producer: ``send()`` of ``n`` values one at a time, acks=1, then ``flush()``."""
    import pylog
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t")
        with store.producer(acks=1) as producer:
            send = producer.send
            t0 = time.perf_counter()
            for _ in range(n):
                send("t", VALUE)
            producer.flush()
            return n / (time.perf_counter() - t0)


def pylog_consumer_rate(path: str, n: int) -> float:
    """pylog's in-process consumer iterating the ``n`` records :func:`pylog_producer_rate` wrote."""
    import pylog
    with pylog.open(path, log_cleaner_enable=False) as store:
        c = store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=0, enable_auto_commit=False)
        t0 = time.perf_counter()
        got = sum(1 for _ in c)
        rate = got / (time.perf_counter() - t0)
        c.close()
    assert got == n, (got, n)
    return rate


def kafka_producer_rate(bootstrap: str, topic: str, n: int, partitions: int = 0,
                        started: Callable[[], None] | None = None, flushed: list[float] | None = None,
                        **config: Any) -> float:
    """confluent-kafka's producer, default batching, acks=1 (or ``config``'s): ``n`` values then ``flush()``
    (after one record produced and flushed, so connecting and the topic's creation are not timed). With
    ``partitions``, record ``i`` goes to partition ``i % partitions`` (librdkafka sends one Produce request per
    partition and batch, pipelined), and one record to each partition is flushed before timing. ``started`` is
    called as the timing starts; the final ``flush()``'s seconds are appended to ``flushed``."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, **config})
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
    for i in range(max(1, partitions)):  # every partition opened (its writer lock, its files) before timing
        if partitions:
            p.produce(topic, VALUE, partition=i, on_delivery=report)
        else:
            p.produce(topic, VALUE, on_delivery=report)
    p.flush(60)
    produce, poll = p.produce, p.poll
    if started is not None:
        started()
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                if partitions:
                    produce(topic, VALUE, partition=i % partitions)
                else:
                    produce(topic, VALUE)
                break
            except BufferError:  # the client's queue is full: serve delivery reports until it drains a little
                poll(0.001)
    t1 = time.perf_counter()
    left = p.flush(120)
    t2 = time.perf_counter()
    rate = n / (t2 - t0)
    if flushed is not None:
        flushed.append(t2 - t1)
    assert left == 0 and not errors, (left, errors[:3])
    return rate


def kafka_produce_floor(n: int) -> float:
    """confluent-kafka's ``produce()`` alone: ``n`` values into the client's queue, no broker reachable (what
    the Python client can do with nothing to send to; the producer figure cannot pass it)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0, "queue.buffering.max.messages": n + 10,
                  "queue.buffering.max.kbytes": 2 * n * len(VALUE) // 1024 + 1024})
    produce = p.produce
    t0 = time.perf_counter()
    for _ in range(n):
        produce("t", VALUE)
    rate = n / (time.perf_counter() - t0)
    p.purge()
    p.flush(1)
    return rate


def kafka_consumer_rate(bootstrap: str, topic: str, n: int, **config: Any) -> float:
    """confluent-kafka's consumer, default fetch settings (or ``config``'s), reading the ``n`` records after the
    first one (the first is read before the clock starts: connecting is not timed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "enable.partition.eof": False, **config})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    first = None
    deadline = time.monotonic() + 30
    while first is None:
        first = c.poll(1.0)
        assert time.monotonic() < deadline, "no first record"
        assert first is None or first.error() is None, first.error()
    got = 0
    t0 = time.perf_counter()
    consume = c.consume
    while got < n:
        msgs = consume(10_000, 5.0)
        if not msgs:
            raise AssertionError(f"consumer stalled after {got} of {n} records")
        got += len(msgs)
    rate = got / (time.perf_counter() - t0)
    c.close()
    assert got == n, (got, n)
    return rate


def _latency_consumer(bootstrap: str, topic: str, n: int) -> None:
    """Child process: print "ready" once the warm-up record arrived, then the latencies (ns) of ``n`` records
    as JSON."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    while True:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            break
    print("ready", flush=True)
    lat: list[int] = []
    deadline = time.monotonic() + 60 + n / 500
    while len(lat) < n and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None or m.error() is not None:
            continue
        lat.append(time.monotonic_ns() - int(m.value()))
    c.close()
    print(json.dumps(lat), flush=True)


def kafka_latency(bootstrap: str, topic: str, n: int, rate: float = 1000.0, acks: int | str = 1) -> list[int]:
    """End-to-end latencies (ns, sorted) of ``n`` records sent at ``rate`` records/s by a confluent-kafka
    producer here (linger.ms=0, ``acks``) to a confluent-kafka consumer in another process, through the server."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    p.produce(topic, b"%d" % time.monotonic_ns())
    p.flush(30)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--latency-consumer", bootstrap, topic,
                              str(n)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        period = 1.0 / rate
        t_next = time.perf_counter()
        for _ in range(n):
            t_next += period
            p.produce(topic, b"%d" % time.monotonic_ns())
            p.poll(0)
            delay = t_next - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        p.flush(30)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    lat = sorted(json.loads(out.strip().splitlines()[-1]))
    assert len(lat) == n, (len(lat), n)
    return lat


def pylog_latency(root: str, n: int) -> list[int]:
    """The baseline: pylog's producer here to a pylog consumer in another process (bench_clients.py)."""
    sys.path.insert(0, HERE)
    import bench_clients
    return bench_clients._latency_once(root, n, True)


def pct(lat: list[int], q: float) -> float:
    """The ``q`` quantile of sorted nanoseconds, in ms."""
    return lat[min(len(lat) - 1, int(q * len(lat)))] / 1e6


# ------------------------------------------------------------------------------------------- memory


def _frame(sock: socket.socket) -> bytes:
    size = int.from_bytes(_recv_exactly(sock, 4), "big")
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        buf += chunk
    return bytes(buf)


def idle_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` connections, each having had an ApiVersions and a Metadata request answered, left open."""
    from pylog.server import protocol
    socks = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(protocol.encode_request(18, 3, 1, f"idle-{i}", {"client_software_name": "bench",
                                                                    "client_software_version": "1"}))
        _frame(s)
        s.sendall(protocol.encode_request(3, 9, 2, f"idle-{i}", {"topics": [{"name": "mem"}],
                                                                   "allow_auto_topic_creation": False}))
        _frame(s)
        socks.append(s)
    return socks


def slow_consumer(server: ServerProcess, topic: str, requests: int, seconds: float,
                  fetch_bytes: int = 50 << 20) -> dict[str, float]:
    """A client that pipelines ``requests`` Fetch requests of ``fetch_bytes`` each and reads its socket
    64 KiB every 5 ms for ``seconds``; the server's peak RssAnon / VmRSS (KiB) meanwhile."""
    from pylog.server import protocol
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    s.connect(("127.0.0.1", server.port))
    for i in range(requests):
        s.sendall(protocol.encode_request(1, 11, i, "slow", {
            "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": fetch_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                          "fetch_offset": 0, "log_start_offset": -1,
                                                          "partition_max_bytes": fetch_bytes}]}],
            "forgotten_topics_data": []}))
    peak_anon = peak_rss = 0
    got = 0
    t_end = time.monotonic() + seconds
    s.setblocking(False)
    while time.monotonic() < t_end:
        try:
            got += len(s.recv(64 << 10))
        except BlockingIOError:
            pass
        st = server.status()
        peak_anon, peak_rss = max(peak_anon, st["RssAnon"]), max(peak_rss, st["VmRSS"])
        time.sleep(0.005)
    s.close()
    return {"peak_anon": peak_anon, "peak_rss": peak_rss, "read_mb": got / 1e6}


def memory_figures(root: str, records: int, slow_seconds: float) -> dict[str, tuple[float, float]]:
    """RSS of a fresh server: idle, with 100 idle connections, under a slow consumer (MiB)."""
    import pylog
    path = os.path.join(root, "mem-store")
    shutil.rmtree(path, ignore_errors=True)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("mem")
        p = store.topic("mem").partition(0)
        chunk = [VALUE] * 10_000
        for _ in range(max(1, records // 10_000)):
            p.append_values(chunk)
    server = ServerProcess(path, os.path.join(root, "mem-server.log"))
    try:
        time.sleep(0.5)
        idle = server.status()
        socks = idle_connections(server.port, 100)
        time.sleep(0.5)
        with_conns = server.status()
        for s in socks:
            s.close()
        time.sleep(0.3)
        before = server.status()
        slow = slow_consumer(server, "mem", 20, slow_seconds)
        after = server.status()
    finally:
        server.stop()
    mib = 1024.0
    return {
        "server RSS, 100 idle connections (MiB)": (with_conns["VmRSS"] / mib, idle["VmRSS"] / mib),
        "server RssAnon, 100 idle connections (MiB)": (with_conns["RssAnon"] / mib, idle["RssAnon"] / mib),
        "server peak RssAnon, slow consumer of 20 x 50 MiB fetches (MiB)": (slow["peak_anon"] / mib,
                                                                             before["RssAnon"] / mib),
        "server peak VmRSS, slow consumer (MiB)": (slow["peak_rss"] / mib, before["VmRSS"] / mib),
        "server VmHWM after the slow consumer (MiB)": (after["VmHWM"] / mib, idle["VmRSS"] / mib),
    }


# ------------------------------------------------------------------------------------------- acks=all


def _fill_partitions(path: str, topics: dict[str, int]) -> None:
    """Create ``topics`` (name -> partition count) in a store at ``path`` before its server starts."""
    import pylog
    with pylog.open(path, log_cleaner_enable=False) as store:
        for name, count in topics.items():
            store.create_topic(name, partitions=count)


def _group_commit_line(log_path: str) -> tuple[int, int, int, int]:
    """The server's last ``group commit: F partition fsyncs for R acks=all requests ...; S disk syncs, W of them
    store-wide syncfs rounds ...`` log line (written at its stop): (F, R, S, W)."""
    with open(log_path) as f:
        found = re.findall(r"group commit: (\d+) partition fsyncs for (\d+) acks=all requests.*?; (\d+) disk syncs, "
                           r"(\d+) of them", f.read())
    return (int(found[-1][0]), int(found[-1][1]), int(found[-1][2]), int(found[-1][3])) if found else (0, 0, 0, 0)


def acks_all_figures(root: str, args: argparse.Namespace, r: int, server_args: list[str] = (),
                     suffix: str = "") -> dict[str, tuple[float, float]]:
    """acks=all against acks=1 (issue 25): a confluent-kafka producer (``linger.ms=5``) sending record ``i`` to
    partition ``i % P`` of a topic of P = 4, then ``args.many_partitions`` partitions; the fsyncs per
    acknowledged acks=all request (the server's count, logged at its stop); end-to-end latency with acks=all;
    acks=all at P partitions against acks=1 there; and how long the server takes to stop (SIGTERM to exit) after
    writing every partition of these topics. ``server_args`` go to ``pylog serve``; ``suffix`` ends each figure's
    name."""
    out: dict[str, tuple[float, float]] = {}
    n, many = args.acks_records, args.many_partitions
    path = os.path.join(root, f"acks-{r}")
    _fill_partitions(path, {"p4": 4, "p4all": 4, "pmany": many, "pmany1": many, "lat": 1, "lat1": 1})
    log_path = os.path.join(root, f"acks-server-{r}.log")
    count = getattr(args, "count_requests", False)
    server = ServerProcess(path, log_path, args=list(server_args) + (["--metrics-port", "0"] if count else []))
    stop_s = 0.0
    try:
        # Latency first, on the fresh server: after the throughput runs it still writes back and syncs their data.
        lat = kafka_latency(server.bootstrap, "lat", args.latency_records, acks="all")
        lat1 = kafka_latency(server.bootstrap, "lat1", args.latency_records, acks=1)
        linger = {"linger.ms": 5}
        cpu: dict[str, float] = {}  # server CPU per record of each run (us): a figure a loaded machine moves less
        per_request: dict[str, float] = {}  # records per Produce request (--count-requests)
        flushes: dict[str, float] = {}  # the final flush() of each run (s)

        def timed(name: str, topic: str, partitions: int, **config: Any) -> float:
            c0, r0 = [0.0], [0.0]

            def started() -> None:  # after the warm-up (a record to each partition: opening 500 takes a while)
                c0[0] = server.cpu_seconds()
                if count:
                    r0[0] = server.produce_requests()
            tail: list[float] = []
            rate = kafka_producer_rate(server.bootstrap, topic, n, partitions, started, tail, **linger,
                                       **config) / 1e3
            flushes[name] = tail[0]
            cpu[name] = (server.cpu_seconds() - c0[0]) * 1e6 / n
            if count:
                per_request[name] = n / max(1.0, server.produce_requests() - r0[0])
            return rate
        # Each pair in both orders over the rounds (odd rounds reversed): neither acks setting always runs first
        # on the fresh server or after the other's data (writeback of earlier runs' dirty pages, caches).
        if r % 2 == 0:
            one = timed("one", "p4", 4)
            all4 = timed("all4", "p4all", 4, acks="all")
            allmany = timed("allmany", "pmany", many, acks="all")
            onemany = timed("onemany", "pmany1", many)
        else:
            all4 = timed("all4", "p4all", 4, acks="all")
            one = timed("one", "p4", 4)
            onemany = timed("onemany", "pmany1", many)
            allmany = timed("allmany", "pmany", many, acks="all")
        t0 = time.perf_counter()
        server.stop()
        stop_s = time.perf_counter() - t0
    finally:
        server.stop()
    fsyncs, requests, syncs, rounds = _group_commit_line(log_path)
    shutil.rmtree(path, ignore_errors=True)
    out["acks=all producer, 4 partitions, linger.ms=5 (k rec/s)"] = (all4, one)
    out[f"acks=all producer, {many} partitions (k rec/s)"] = (allmany, all4)
    out[f"same, against acks=1 at {many} partitions (k rec/s)"] = (allmany, onemany)
    # What acks=all at P partitions could reach if durability cost nothing: acks=1 there, against the same baseline.
    out[f"acks=1 producer, {many} partitions: the ceiling of the ratio above (k rec/s)"] = (onemany, all4)
    out["server CPU per record (us), acks=all, 4 partitions"] = (cpu["all4"], cpu["one"])
    out[f"server CPU per record (us), acks=all, {many} partitions"] = (cpu["allmany"], cpu["onemany"])
    if per_request:
        out["records per Produce request, acks=all, 4 partitions"] = (per_request["all4"], per_request["one"])
        out[f"records per Produce request, acks=all, {many} partitions"] = (per_request["allmany"],
                                                                           per_request["onemany"])
        # What a request costs the server, whatever its size: the figure the per-request work moves (the records
        # per request move with the back-pressure, and the CPU per record with them).
        out[f"server CPU per Produce request (us), acks=all, {many} partitions"] = (
            cpu["allmany"] * per_request["allmany"], cpu["onemany"] * per_request["onemany"])
    out[f"final flush() of the run (ms), acks=all, {many} partitions"] = (flushes["allmany"] * 1e3,
                                                                         flushes["all4"] * 1e3)
    out["end-to-end latency p50, 1,000 rec/s, acks=all (ms)"] = (pct(lat, 0.5), pct(lat1, 0.5))
    out["end-to-end latency p99, 1,000 rec/s, acks=all (ms)"] = (pct(lat, 0.99), pct(lat1, 0.99))
    out["partition fsyncs per acknowledged acks=all request"] = (fsyncs / max(1, requests), 0.0)
    out["disk syncs (fdatasync or syncfs) per acknowledged acks=all request"] = (syncs / max(1, requests), 0.0)
    out["store-wide syncfs rounds"] = (float(rounds), 0.0)
    out[f"server stop after writing {2 * many + 10} partitions (s)"] = (stop_s, 0.0)
    return {name + suffix: value for name, value in out.items()}


# ------------------------------------------------------------------------------------------- rounds


def one_round(root: str, args: argparse.Namespace, r: int) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    variants = [([], ""), (["--group-commit-syncfs-partitions", "0"], FDATASYNC_EACH)] if args.vs_fdatasync else [
        ([], "")]
    if r % 2:  # interleaved: neither variant always runs first
        variants.reverse()
    for server_args, suffix in variants:
        out.update(acks_all_figures(root, args, r, server_args, suffix))
    if args.acks_only:
        return out
    n = args.records
    local = os.path.join(root, f"local-{r}")
    base_p = pylog_producer_rate(local, n) / 1e6
    base_c = pylog_consumer_rate(local, n) / 1e6
    out["confluent-kafka produce() alone, no broker: the client's floor (M rec/s)"] = (kafka_produce_floor(n) / 1e6,
                                                                                      base_p)
    shutil.rmtree(local, ignore_errors=True)
    prof = os.path.join(args.profile, f"server-round{r}.prof") if args.profile else None
    server = ServerProcess(os.path.join(root, f"served-{r}"), os.path.join(root, f"server-{r}.log"), prof)
    try:
        cpu0 = server.cpu_seconds()
        out["confluent-kafka producer -> pylog serve (M rec/s)"] = (kafka_producer_rate(server.bootstrap, "t", n)
                                                                   / 1e6, base_p)
        cpu1 = server.cpu_seconds()
        out["confluent-kafka consumer <- pylog serve (M rec/s)"] = (kafka_consumer_rate(server.bootstrap, "t", n)
                                                                   / 1e6, base_c)
        cpu2 = server.cpu_seconds()
        out[f"same, fetch.queue.backoff.ms={QUEUE_BACKOFF_MS} (M rec/s)"] = (kafka_consumer_rate(
            server.bootstrap, "t", n, **{"fetch.queue.backoff.ms": QUEUE_BACKOFF_MS}) / 1e6, base_c)
        out["server CPU per 1M records produced (s)"] = ((cpu1 - cpu0) * 1e6 / n, 0.0)
        out["server CPU per 1M records fetched (s)"] = ((cpu2 - cpu1) * 1e6 / n, 0.0)
        lat = kafka_latency(server.bootstrap, "lat", args.latency_records)
    finally:
        server.stop()
        shutil.rmtree(os.path.join(root, f"served-{r}"), ignore_errors=True)
    base_lat = pylog_latency(os.path.join(root, f"pylat-{r}"), args.latency_records)
    shutil.rmtree(os.path.join(root, f"pylat-{r}"), ignore_errors=True)
    out["end-to-end latency p50, 1,000 rec/s (ms)"] = (pct(lat, 0.5), pct(base_lat, 0.5))
    out["end-to-end latency p99, 1,000 rec/s (ms)"] = (pct(lat, 0.99), pct(base_lat, 0.99))
    out.update(memory_figures(root, args.memory_records, args.slow_seconds))
    return out


#: figure -> (target, met(value, baseline), the baseline's name)
TARGETS: dict[str, tuple[str, Callable[[float, float], bool] | None, str]] = {
    "confluent-kafka producer -> pylog serve (M rec/s)": (
        ">= 0.5 M/s and >= 0.5x", lambda v, b: v >= 0.5 and v / b >= 0.5, "pylog Producer in-process"),
    "confluent-kafka consumer <- pylog serve (M rec/s)": (
        ">= 0.5 M/s and >= 0.5x", lambda v, b: v >= 0.5 and v / b >= 0.5, "pylog Consumer in-process"),
    "confluent-kafka produce() alone, no broker: the client's floor (M rec/s)": (
        "report", None, "pylog Producer in-process"),
    f"same, fetch.queue.backoff.ms={QUEUE_BACKOFF_MS} (M rec/s)": (
        ">= 0.5 M/s and >= 0.5x", lambda v, b: v >= 0.5 and v / b >= 0.5, "pylog Consumer in-process"),
    "server CPU per 1M records produced (s)": ("report", None, ""),
    "server CPU per 1M records fetched (s)": ("report", None, ""),
    "end-to-end latency p50, 1,000 rec/s (ms)": ("<= 1 ms", lambda v, b: v <= 1.0,
                                                 "pylog producer -> pylog consumer, another process"),
    "end-to-end latency p99, 1,000 rec/s (ms)": ("<= 5 ms", lambda v, b: v <= 5.0, "same"),
    "acks=all producer, 4 partitions, linger.ms=5 (k rec/s)": (
        ">= 0.9x", lambda v, b: v / b >= 0.9, "acks=1, same producer and partitions"),
    "acks=all producer, 500 partitions (k rec/s)": (
        ">= 0.5x", lambda v, b: v / b >= 0.5, "acks=all at 4 partitions"),
    "end-to-end latency p50, 1,000 rec/s, acks=all (ms)": ("report", None, "acks=1, same run"),
    "end-to-end latency p99, 1,000 rec/s, acks=all (ms)": ("<= 10 ms", lambda v, b: v <= 10.0, "acks=1, same run"),
    "same, against acks=1 at 500 partitions (k rec/s)": ("report", None, "acks=1 at 500 partitions"),
    "acks=1 producer, 500 partitions: the ceiling of the ratio above (k rec/s)": (
        "report", None, "acks=all at 4 partitions"),
    "server CPU per record (us), acks=all, 4 partitions": ("report", None, "acks=1, 4 partitions"),
    "server CPU per record (us), acks=all, 500 partitions": ("report", None, "acks=1, 500 partitions"),
    "final flush() of the run (ms), acks=all, 500 partitions": ("report", None, "at 4 partitions"),
    "partition fsyncs per acknowledged acks=all request": ("report", None, ""),
    "records per Produce request, acks=all, 4 partitions": ("report", None, "acks=1, 4 partitions"),
    "records per Produce request, acks=all, 500 partitions": ("report", None, "acks=1, 500 partitions"),
    "server RSS, 100 idle connections (MiB)": ("bounded", None, "idle server, no connection"),
    "server RssAnon, 100 idle connections (MiB)": ("bounded", None, "idle server, no connection"),
    "server peak RssAnon, slow consumer of 20 x 50 MiB fetches (MiB)": ("bounded", None,
                                                                         "before the slow consumer"),
    "server peak VmRSS, slow consumer (MiB)": ("bounded", None, "before the slow consumer"),
    "server VmHWM after the slow consumer (MiB)": ("report", None, "idle VmRSS"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="50,000 records, one round, short latency and memory runs")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-records", type=int, default=5000, help="records sent at 1,000/s for latency")
    ap.add_argument("--memory-records", type=int, default=1_000_000, help="records stored for the slow consumer")
    ap.add_argument("--slow-seconds", type=float, default=5.0)
    ap.add_argument("--acks-records", type=int, default=3_000_000, help="records per acks=all / acks=1 figure "
                    "(a rate: a run of a few hundred thousand records at 500 partitions measures its start and end)")
    ap.add_argument("--many-partitions", type=int, default=500, help="the acks=all figure's second partition count")
    ap.add_argument("--acks-only", action="store_true", help="only the acks=all figures (issue 25)")
    ap.add_argument("--vs-fdatasync", action="store_true", help="also the acks=all figures with the group commit's "
                    "store-wide syncfs off (--group-commit-syncfs-partitions 0), interleaved round by round")
    ap.add_argument("--count-requests", action="store_true", help="also the records per Produce request of the "
                    "acks=all figures (the server runs with --metrics-port)")
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed afterwards)")
    ap.add_argument("--json", help="also write every round's figures as JSON to this file")
    ap.add_argument("--profile", metavar="DIR", help="run the server under cProfile; stats files go to DIR")
    ap.add_argument("--latency-consumer", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.latency_consumer:
        bootstrap, topic, n = args.latency_consumer
        _latency_consumer(bootstrap, topic, int(n))
        return 0
    if args.quick:  # smaller sizes, unless given explicitly
        given = set(argv if argv is not None else sys.argv[1:])
        for flag, attr, value in (("--records", "records", 50_000), ("--rounds", "rounds", 1),
                                  ("--latency-records", "latency_records", 300),
                                  ("--acks-records", "acks_records", 20_000),
                                  ("--many-partitions", "many_partitions", 100),
                                  ("--memory-records", "memory_records", 100_000),
                                  ("--slow-seconds", "slow_seconds", 1.0)):
            if not any(g == flag or g.startswith(flag + "=") for g in given):
                setattr(args, attr, value)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    import pylog
    root = tempfile.mkdtemp(prefix="pylog-bench-server-", dir=args.dir)
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            load = os.getloadavg()[0]
            print(f"round {r + 1}/{args.rounds}: load average {load:.2f}", flush=True)
            res: dict[str, Any] = dict(one_round(root, args, r))
            res["load"] = load
            rounds.append(res)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    records = args.acks_records if args.acks_only else args.records
    print(f"\npylog {pylog.__version__} serve: {records:,} records of 100 bytes, {args.rounds} round(s), "
          f"accelerated={pylog.ACCELERATED}; ranges are over rounds")
    head = f"{'figure':<74} {'value':>11} {'baseline':>11}  {'ratio':>11}  target [baseline]"
    print(head)
    print("-" * len(head))
    for name in rounds[0]:
        if name == "load":
            continue
        vals = [r[name][0] for r in rounds]
        base = [r[name][1] for r in rounds]
        # The many-partitions figures are named with the count run (--many-partitions): targets are for 500.
        target, met, base_name = TARGETS.get(re.sub(r"\d+ partitions \(", "500 partitions (",
                                                    name.removesuffix(FDATASYNC_EACH)), ("report", None, ""))
        ratios = [v / b for v, b in zip(vals, base, strict=True) if b]
        verdict = ""
        if met is not None:
            ok = [met(*r[name]) for r in rounds]
            verdict = "MET" if all(ok) else ("MISSED" if not any(ok) else "MIXED")
        ratio = f"{fmt_range(ratios):>10}x" if ratios else f"{'':>11}"
        median = f" median {statistics.median(vals):.3g}" + (f" ({statistics.median(ratios):.3g}x)" if ratios
                                                              else "") if len(rounds) > 1 else ""
        print(f"{name:<74} {fmt_range(vals):>11} {fmt_range(base) if any(base) else '':>11}  {ratio}  {target} "
              f"[{base_name}] {verdict}{median}")
    loads = [r["load"] for r in rounds]
    print(f"load average at round starts: {min(loads):.2f}-{max(loads):.2f}; server in its own process "
          f"(python -m pylog serve), latency consumer in a third process")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rounds, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
