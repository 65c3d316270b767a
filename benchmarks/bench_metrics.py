"""Metrics overhead (issue 29): throughput with metrics on against off in the same run, and the cost of scraping
a store of 1,000 partitions every second.

Usage::

    python benchmarks/bench_metrics.py              # 15 interleaved rounds per figure: ~10 minutes
    python benchmarks/bench_metrics.py --quick      # 3 rounds, smaller sizes: ~1 minute

Figures (each round measures off, then on, then the next round on, then off: interleaved, so a load change
hits both; ratio = on / off, target >= 0.97: the ratio of the medians over rounds, and the median of the rounds'
ratios). Each figure is given as records per second of wall time, and records per second of CPU time of the
process doing the work (this one, or the server's, from /proc, scrapes included); the server's figures also
as a CPU-bound server would do them (``CPU-bound``, see below: the target's figure for them). On a machine
shared with other jobs the wall figures of one round vary several times over; the CPU figures say what the
metrics cost. Every scraper scrapes once before the timing (a long-running process was scraped long before:
the first scrape's one-time costs, such as the server's read-only view of its store, are no cost per record):

- ``append``: ``Partition.append_values`` of 100 records of 100 bytes per call, in this process; on = recording
  enabled (``pylog.metrics.enable``), with a registry scraped once a second by a thread.
- ``send``: pylog's ``Producer.send`` of 100-byte values and ``flush()``, acks=1, in this process; on and off
  as above.
- ``server produce`` / ``server fetch``: a ``python -m pylog serve`` child process per round, with
  ``--metrics-port`` (on: recording, and scraped once a second over HTTP from here) or without (off);
  confluent-kafka's producer (acks=1) sends N 100-byte values, then its consumer (group ``bench``) reads them
  back: records/s. ``CPU-bound``: the server's threads (event loop, pools) live as long as it does, and the
  only ones that end are the metrics endpoint's, one per scrape (it collects and formats the scrape), so the
  CPU of the threads alive at the end (``/proc/PID/task/*/schedstat``, exact) is what the records and their
  recording cost, and the process's total minus it (``/proc/PID/stat``) is what the scrapes cost. A scrape
  costs ~1 ms of CPU whatever the traffic, and a round has one a second of its wall time: on a machine shared
  with other jobs the server is on the CPU a tenth of a round, so its CPU per record charges the scrapes ten
  times the share they take of a server that has records to serve all the time. A CPU-bound server gives the
  scrapes their CPU per second of wall time (``share``) of each second and the rest to records: records per
  CPU second = records / (live threads' CPU) * (1 - share). (``ServerPhase``.)
- ``fetch assigned``: the Fetch path's recording alone: confluent-kafka's consumer assigned to one partition
  (no group join) reads N stored records (1,000 distinct 100-byte values) through a fresh server per round,
  with ``--metrics-port`` (never scraped) or without.
- ``scrape``: ``python -m pylog metrics STORE`` (the exporter) on a store of 1,000 partitions (10 topics of 100,
  each with a few records, and a group committed on every partition), scraped over HTTP once a second for
  ``--scrape-seconds``: the exporter's CPU time (utime + stime from /proc) over the wall time, in % of one
  core (target < 5%), and one scrape's wall time.

Also printed first: the hooks alone, microseconds of CPU per call with recording off and on (an append's count, a
request's, a poll's), against which an append of 100 records (~20 us here) or a request can be weighed. The
1-minute load average is printed with each figure. Nothing asserts.

Result (2 cores shared with ~8 other jobs, load average 5-10; accelerated; 2026-11-27). ``python
benchmarks/bench_metrics.py --server-records 1000000 --scrape-seconds 30`` (15 rounds) and, for the server
with longer rounds, ``--rounds 5 --server-records 3000000``. Ratios on / off: of the medians, [median of the
rounds' ratios]; the wall figures' rounds ranged 0.4-2.0x, the CPU figures' 0.74-1.28x:

==============================  ===================  ===================
figure                          wall records/s       records per CPU-s
==============================  ===================  ===================
append (100 x 100 B a call)     1.054x [1.106x]      0.995x [0.990x]
send (pylog producer)           0.880x [0.948x]      1.006x [1.019x]
server produce, 1 M records     0.941x [1.000x]      0.939x [0.935x]
server fetch, 1 M records       1.011x [0.978x]      0.944x [0.972x]
server produce, 3 M records     1.083x [1.174x]      0.981x [0.949x]
server fetch, 3 M records       1.292x [1.365x]      0.991x [1.019x]
==============================  ===================  ===================

Hooks alone, recording on (off): an append's count 0.19 us (0.03), a Produce request's 2.0 us (0.14), a poll's
0.43 us (0.03). Scrape of 1,000 partitions (7,036 series) once a second: the exporter's CPU 5.3-5.9% of one
core over 30 s at a load of 5-11 (target < 5%: not met here); its CPU per scrape is about 15 ms reading the
partitions' files, 8 ms making samples and 25 ms in prometheus_client's text formatting.

Later the same day, with the endpoints reusing the text of unchanged families (pylog.prometheus.Exposition), the
idle partitions read only when their files' stamp moved, and one latency observation per request (its count):
``--scrape-only --scrape-seconds 30``, interleaved with the previous code in the same minutes (load average
6-13): exporter CPU 1.73% / 1.83% of one core (17.3 / 18.3 ms of CPU a scrape), the previous code 5.76% /
5.70%. A Produce request's hook, recording on: 0.93 us, the previous code 1.38 us (best of 7 x 100,000 calls,
alternated). The server figures with 1 M records are ~0.3 s of server CPU, and /proc counts it in 10 ms ticks:
one tick is 3% of a round, so ratios of 0.93-1.06 come and go between runs of the same code (0.931x [1.000x]
with these changes, 1.059x [1.067x] for the previous code minutes later); use 4 M records or more. With
these changes, ``--server-only --rounds 5``, records per CPU-s on / off: 4 M records, produce 1.035x [1.035x],
fetch 0.961x [0.961x] (rounds 0.90-1.02), load 4-8; 6 M records, produce 1.028x [1.029x], fetch 0.989x
[0.984x] (rounds 0.95-1.00), load 7.

What ``server fetch``'s CPU ratio of 0.94-0.98 (rounds 0.82-1.04; ``fetch assigned`` ~1.00) was, bisected in
the fourth session of 2026-11-27 with the server's CPU per thread (``/proc/PID/task/*/schedstat``) and its
garbage collections (``gc.callbacks``, through a ``sitecustomize``) over alternating pairs of 2 M records,
scraped every second, load average 10-15:

1. A full collection of the cyclic GC, 15-26 ms of the event loop's CPU here: it walked the ~45,000 objects
   imported at start-up. One fell at the start of the fetch phase of the metrics-on server in 5 rounds of 6
   (and in its produce phase in the sixth), in no metrics-off round: by then the off server had made 8
   second-generation collections and the on server 9 (its endpoint's set-up), and the tenth is a full one.
   Where it falls depends on what the process allocated since it started, not on records: 3-5% of a 2 M fetch
   phase's CPU (~0.5 s), 1.5-2.5% of a 4 M one. ``pylog serve`` now freezes its start-up objects
   (``gc.freeze``): a full collection walks ~2,000 objects, and none fell in a fetch phase in 5 more pairs.
2. The scrapes: ~1 ms of the server's CPU each (0.6 ms on a quieter machine), 10-22 per fetch phase (one a
   second of its wall time): 12 ms a phase on average, 2.4% of a 2 M phase's CPU. The ``CPU-bound`` figure
   gives them their share of each second instead.
3. The first scrape opens the server's read-only view of its store; with ``--server-scrape-interval 15`` it
   fell in a fetch phase. The scraper's first scrape is now before the timing.
4. What is left is the recording, and it is within the noise: the event loop thread's CPU from the first
   record fetched to the last (exact), on / off, medians 0.996 (10 pairs) and 0.993 (5 pairs), rounds
   0.89-1.16; a request's hook costs 1.0 us of CPU (a 4 M fetch phase has ~460 Fetch requests: 0.5 ms of its
   ~1 s); an earlier py-spy profile of a pair showed no metrics frame.

With these changes, ``--server-only --rounds 15 --server-records 4000000`` at nice 19, two runs (on / off, of
the medians [median of the rounds' ratios]; the first at a load average of 14-19, ``main`` merged in while it
ran; the second at 14-13.5, 3.3 for its ``fetch assigned``):

- server produce, rec/CPU-s (all): 0.915x [0.913x], 0.985x [1.007x]; CPU-bound: 0.921x [0.924x], 0.994x [1.027x]
- server fetch, rec/CPU-s (all): 0.943x [0.939x], 1.000x [1.000x]; CPU-bound: 0.967x [0.952x], 1.016x [1.025x]
- fetch assigned, rec/CPU-s: 0.970x [0.970x], 0.957x [0.967x]; CPU-bound: 0.968x [0.970x], 0.963x [0.967x]

The rounds' ratios ranged 0.62-1.76 (fetch, second run): at these loads a 15-round median moves by +-4%
between runs of the same code (produce: 0.915x and 0.985x here, 1.065x in the previous session's run).
``fetch assigned`` (no scrape, no group) stayed at 0.96-0.97x in both (1.000x in the previous session's run):
not explained; the recording a 4 M fetch phase makes (~460 requests at ~1 us, a look per batch) is ~1 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.request
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pylog  # noqa: E402
from pylog import metrics, prometheus  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_server import ServerProcess  # noqa: E402

VALUE = b"v" * 100


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Scraper:
    """GET ``url`` once now, in the caller's thread, then every ``interval`` seconds (default once a second) from
    a daemon thread until :meth:`stop` (a Prometheus server's load). The first scrape is before the figures'
    timing, as a long-running process was scraped long before: its one-time costs (a server's read-only view
    of its store opened, the families' first texts) are no cost per record."""

    def __init__(self, url: str | Callable[[], bytes], interval: float = 1.0) -> None:
        self._url = url
        self._interval = interval
        self._stop = threading.Event()
        self.scrapes = 0
        self._scrape()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _scrape(self) -> None:
        if callable(self._url):
            self._url()
        else:
            with urllib.request.urlopen(self._url, timeout=10) as r:
                r.read()
        self.scrapes += 1

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._scrape()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------------------------------------ in this process

def append_rate(root: str, calls: int, on: bool) -> tuple[float, float]:
    """(records/s, records per CPU second of this process: the scraper thread's included)."""
    path = tempfile.mkdtemp(dir=root)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t")
        part = store.topic("t").partition(0)
        batch = [VALUE] * 100
        reg = prometheus.registry(store)
        metrics.enable(on)
        scraper = Scraper(lambda: prometheus.exposition(reg)) if on else None
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            part.append_values(batch)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if scraper:
            scraper.stop()
        metrics.enable(False)
    shutil.rmtree(path, ignore_errors=True)
    return calls * 100 / elapsed, calls * 100 / cpu


def send_rate(root: str, n: int, on: bool) -> tuple[float, float]:
    path = tempfile.mkdtemp(dir=root)
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=4)
        reg = prometheus.registry(store)
        metrics.enable(on)
        scraper = Scraper(lambda: prometheus.exposition(reg)) if on else None
        with store.producer(acks=1, client_id="bench") as producer:
            send = producer.send
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                send("t", VALUE)
            producer.flush()
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        if scraper:
            scraper.stop()
        metrics.enable(False)
    shutil.rmtree(path, ignore_errors=True)
    return n / elapsed, n / cpu


# ------------------------------------------------------------------------------------------ pylog serve

class Exporter(ServerProcess):
    """``python -m pylog metrics STORE --port 0`` in a child process (its URL read from its first line); the CPU
    time and the stop of bench_server's server process."""

    def __init__(self, store: str, log_path: str) -> None:  # noqa: D107 (not ServerProcess's: another command)
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "pylog", "metrics", store, "--port", "0"],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=_env())
        self.pid = self.proc.pid
        deadline = time.monotonic() + 60
        while True:
            with open(log_path) as f:
                m = re.search(r"serving (http://\S+/metrics)", f.read())
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("pylog metrics did not start")
            time.sleep(0.02)


def _threads_cpu(pid: int) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds of each live thread of process ``pid``: (exact, from ``/proc/PID/task/TID/schedstat``; in the
    10 ms ticks of ``/proc/PID/task/TID/stat``, as the process's own total counts)."""
    exact, ticks = {}, {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                exact[tid] = int(f.read().split()[0]) / 1e9
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks[tid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:  # the thread ended meanwhile
            continue
    return exact, ticks


class ServerPhase:
    """The server's CPU over a timed phase, for three figures of ``n`` records (:meth:`rates`): records per second
    of wall time; per CPU second of the server, all of it (``/proc/PID/stat``: every thread, those that ended
    included); and per CPU second as a CPU-bound server would do them.

    The third: the server's threads are its event loop and its pools, which live as long as it does; the only
    threads that end are the metrics endpoint's, one per scrape (``http.server.ThreadingHTTPServer``), which
    collect and format that scrape. So the CPU of the threads alive at the end (exact, from ``schedstat``) is what
    the records cost with their recording, scrapes left out, and the CPU of the threads that ended (the process's
    total minus the live threads', both in ticks) is the scrapes'. A scrape costs the same CPU however busy the
    server is (~1 ms here), and its count grows with the phase's wall time, not with its records: on a machine
    shared with other jobs the server here is on the CPU a tenth of the time, so the second figure charges the
    scrapes ten times the share of the server's capacity they take from a server with records to serve all the
    time. A CPU-bound server gives them their CPU per second of wall time (``share``) of each second and the rest
    to records: records per CPU second = n / (live threads' CPU) * (1 - share)."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        self._exact, self._ticks = _threads_cpu(server.pid)
        self._t0, self._c0 = time.perf_counter(), server.cpu_seconds()

    def rates(self, n: int) -> tuple[float, float, float]:
        """The three figures of ``n`` records in the phase so far; also sets ``wall``, ``cpu`` (all the server's),
        ``live`` and ``ended`` (the CPU of the threads alive now, and of those that ended), in seconds."""
        self.cpu = self._server.cpu_seconds() - self._c0
        exact, ticks = _threads_cpu(self._server.pid)
        self.wall = wall = time.perf_counter() - self._t0
        self.live = sum(v - self._exact.get(tid, 0.0) for tid, v in exact.items())
        self.ended = max(0.0, self.cpu - sum(v - self._ticks.get(tid, 0.0) for tid, v in ticks.items()))
        return (n / wall, n / max(1e-9, self.cpu),
                n / max(1e-9, self.live) * (1.0 - min(1.0, self.ended / wall)))


def server_rates(root: str, n: int, on: bool,
                 interval: float = 1.0) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(produce, fetch) figures of confluent-kafka against a fresh pylog serve, scraped every ``interval`` seconds
    when ``on``: each (records/s, per server CPU second, per CPU second of a CPU-bound server: ServerPhase)."""
    from confluent_kafka import Consumer, Producer

    path = tempfile.mkdtemp(dir=root)
    log_path = os.path.join(root, "serve.log")
    server = ServerProcess(path, log_path, args=["--metrics-port", "0"] if on else [])
    scraper = None
    try:
        bootstrap = server.bootstrap
        if on:
            with open(log_path) as f:
                scraper = Scraper(re.search(r"metrics on (http://\S+)", f.read()).group(1), interval)
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
        p.produce("t", VALUE)  # creates the topic (auto-creation), outside the timing
        p.flush(30)
        phase = ServerPhase(server)
        for _ in range(n):
            while True:
                try:
                    p.produce("t", VALUE)
                    break
                except BufferError:
                    p.poll(0.01)
        p.flush(120)
        produce = phase.rates(n)
        del p  # librdkafka's connection closed now, not when the server stops under it
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
        c.subscribe(["t"])
        got, phase = 0, ServerPhase(server)
        deadline = time.monotonic() + 300
        while got < n + 1 and time.monotonic() < deadline:
            msgs = c.consume(num_messages=10000, timeout=1.0)
            got += sum(1 for m in msgs if m.error() is None)
        fetch = phase.rates(got)
        c.close()
        return produce, fetch
    finally:
        if scraper:
            scraper.stop()
        server.stop()
        shutil.rmtree(path, ignore_errors=True)


def assigned_fetch_rate(path: str, root: str, n: int, on: bool) -> tuple[float, float, float]:
    """(records/s, records per server CPU second, as CPU-bound: ServerPhase) of confluent-kafka's consumer
    assigned to partition 0 of the stored topic ``t`` (``n`` records) of ``path`` from offset 0, through a fresh
    pylog serve with recording on (``--metrics-port``, never scraped) or off: the Fetch path's recording alone,
    with no group join and no scrape in the server's CPU."""
    from confluent_kafka import Consumer, TopicPartition

    server = ServerProcess(path, os.path.join(root, "serve-assigned.log"),
                           args=["--metrics-port", "0"] if on else [])
    try:
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "unused", "enable.auto.commit": False})
        c.assign([TopicPartition("t", 0, 0)])
        got, phase = 0, ServerPhase(server)
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(num_messages=10000, timeout=1.0) if m.error() is None)
        rates = phase.rates(got)
        c.close()
        return rates
    finally:
        server.stop()


def stored_topic(root: str, n: int) -> str:
    """A store whose topic ``t`` (one partition) holds ``n`` records of 1,000 distinct 100-byte values."""
    path = tempfile.mkdtemp(dir=root)
    values = [os.urandom(len(VALUE)) for _ in range(1000)]
    with pylog.open(path) as store:
        store.create_topic("t", 1)
        with store.producer(linger_ms=5) as producer:
            for i in range(n):
                producer.send("t", values[i % 1000])
    return path


# ------------------------------------------------------------------------------------------ scraping

def scrape_cost(root: str, topics: int, partitions: int, seconds: float) -> tuple[float, float, float, int]:
    """(exporter CPU % of one core while scraped every second, its CPU ms per scrape, one scrape's wall ms,
    series count)."""
    path = os.path.join(root, "scraped")
    with pylog.open(path, log_cleaner_enable=False) as store:
        for t in range(topics):
            store.create_topic(f"topic-{t}", partitions=partitions)
            for p in store.topic(f"topic-{t}").partitions:
                p.append_values([VALUE] * 10)
        store.commit_offsets("readers", {pylog.TopicPartition(f"topic-{t}", p): 5
                                         for t in range(topics) for p in range(partitions)})
    exporter = Exporter(path, os.path.join(root, "exporter.log"))
    try:
        url = exporter.url
        with urllib.request.urlopen(url, timeout=30) as r:  # the first scrape opens the partitions
            series = sum(1 for line in r.read().splitlines() if not line.startswith(b"#"))
        walls = []
        cpu0, t0 = exporter.cpu_seconds(), time.monotonic()
        while time.monotonic() - t0 < seconds:
            began = time.perf_counter()
            with urllib.request.urlopen(url, timeout=30) as r:
                r.read()
            walls.append(time.perf_counter() - began)
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - began)))
        cpu = exporter.cpu_seconds() - cpu0
        wall = time.monotonic() - t0
        return 100 * cpu / wall, 1000 * cpu / len(walls), 1000 * statistics.median(walls), series
    finally:
        exporter.stop()


# ------------------------------------------------------------------------------------------ the hooks alone

def hook_costs(n: int = 200_000) -> dict[str, tuple[float, float]]:
    """Microseconds of CPU per call, (off, on), of what the hot paths call: an append's count, a Produce request's
    (its answer of one partition walked for errors, latency observed), a consumer read's."""
    from pylog.clients import client_metrics
    from pylog.server import metering

    answer = {"throttle_time_ms": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 0}]}]}
    label = client_metrics.label("bench")

    writer = types.SimpleNamespace(topic="t", name="t-0", metrics_row=None)  # what count_append reads

    def append_hook() -> None:
        if metrics.state.on:
            metrics.count_append(writer, 100, 10_900)

    def request_hook() -> None:
        began = time.perf_counter()
        if metrics.state.on:
            metering.answered(0, began, answer)

    def poll_hook() -> None:
        if metrics.state.on:
            client_metrics.polled(label, 0.0001)

    out = {}
    for name, fn in (("append", append_hook), ("request", request_hook), ("poll", poll_hook)):
        got = []
        for on in (False, True):
            metrics.enable(on)
            t0 = time.thread_time()  # CPU time: on a loaded machine the wall time of a loop is mostly others'
            for _ in range(n):
                fn()
            got.append((time.thread_time() - t0) / n * 1e6)
        out[name] = (got[0], got[1])
    metrics.enable(False)
    return out


# ------------------------------------------------------------------------------------------ main

def interleaved(rounds: int, measure: Callable[[bool], Any]) -> list[tuple]:
    """``rounds`` pairs of (off, on) figures, measured off-on, then on-off, alternately."""
    out = []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {on: measure(on) for on in order}
        out.append((got[False], got[True]))
    return out


#: The measures of a figure, in the order of its tuples: records/s of wall time, records per CPU second (of this
#: process, or all of the server's), and for the server, records per CPU second as a CPU-bound server would do
#: them (ServerPhase).
UNITS = ("records/s", "rec/CPU-s", "CPU-bound")


def report(name: str, pairs: list[tuple[tuple[float, ...], tuple[float, ...]]]) -> None:
    """One line per measure (:data:`UNITS`), each (off, on) pair a round."""
    for i, unit in enumerate(UNITS[:len(pairs[0][0])]):
        off = statistics.median(p[0][i] for p in pairs)
        on = statistics.median(p[1][i] for p in pairs)
        ratios = sorted(p[1][i] / p[0][i] for p in pairs)
        print(f"{name:<15} {unit:<9} off {off:>11,.0f}  on {on:>11,.0f}  ratio of medians {on / off:.3f}x, median "
              f"of round ratios {statistics.median(ratios):.3f}x (rounds {ratios[0]:.2f}-{ratios[-1]:.2f})  load "
              f"{os.getloadavg()[0]:.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds, smaller sizes")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--append-calls", type=int, default=10_000)
    ap.add_argument("--send-records", type=int, default=300_000)
    ap.add_argument("--server-records", type=int, default=300_000)
    ap.add_argument("--scrape-seconds", type=float, default=20.0)
    ap.add_argument("--server-scrape-interval", type=float, default=1.0,
                    help="seconds between scrapes of the server when on (default 1; Prometheus' example config: 15)")
    ap.add_argument("--skip-server", action="store_true", help="leave out the server figures")
    ap.add_argument("--scrape-only", action="store_true", help="only the scrape figure")
    ap.add_argument("--server-only", action="store_true", help="only the server figures")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.append_calls, args.send_records = 3, 5_000, 100_000
        args.server_records, args.scrape_seconds = 50_000, 8.0
    root = tempfile.mkdtemp(prefix="pylog-bench-metrics-")
    print(f"pylog {pylog.__version__}, accelerated={pylog.ACCELERATED}, {args.rounds} interleaved rounds; "
          f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    try:
        for name, (off, on) in hook_costs().items():
            print(f"hook {name:<10} {off:.2f} us a call off, {on:.2f} us on", flush=True)
        if not args.scrape_only and not args.server_only:
            report("append", interleaved(args.rounds, lambda on: append_rate(root, args.append_calls, on)))
            report("send", interleaved(args.rounds, lambda on: send_rate(root, args.send_records, on)))
        if not args.skip_server and not args.scrape_only:
            # A scrape costs the server ~1 ms of CPU whatever the traffic, and a round's scrapes grow with its wall
            # time: the CPU-bound figure gives them their share of each second (ServerPhase).
            print(f"server scraped every {args.server_scrape_interval:g} s when on", flush=True)
            both = interleaved(args.rounds, lambda on: server_rates(root, args.server_records, on,
                                                                    args.server_scrape_interval))
            report("server produce", [(off[0], on[0]) for off, on in both])
            report("server fetch", [(off[1], on[1]) for off, on in both])
            stored = stored_topic(root, args.server_records)
            report("fetch assigned", interleaved(args.rounds, lambda on: assigned_fetch_rate(stored, root,
                                                                                             args.server_records, on)))
        if args.server_only:
            return 0
        cpu, per_scrape, wall, series = scrape_cost(root, 10, 100, args.scrape_seconds)
        print(f"scrape          1,000 partitions ({series:,} series), once a second for {args.scrape_seconds:.0f} s: "
              f"exporter CPU {cpu:.2f}% of one core (target < 5%), {per_scrape:.1f} ms CPU a scrape, one scrape "
              f"{wall:.1f} ms wall; load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
