"""The workloads of the benchmark suite: Kafka's benchmark (seed 001), adapted to one machine and run per peer.

Each workload runs one *round* per peer at a time, in fresh streams, in worker processes forked from the
suite's process (which holds no open handle when it forks). A round's processes open their handles, then
wait on a shared start event, so opening is never timed; each process times itself with
``time.monotonic`` (CLOCK_MONOTONIC, which processes on Linux share). An aggregate rate is all records over
(last end - first start).

What a round checks, so that a fast figure cannot come from a broken adapter: every consumer reads back
exactly the number of records the producers wrote, and exactly their bytes (every value has the
workload's size); otherwise the round fails with :class:`SuiteError`. A round that reaches its time cap
stops early and is marked ``capped``: its rate covers what it did in the time, and its consumer is
checked against what it read.

Workloads (records of 100 bytes unless stated, batches of 1,000 records, reads of up to 500):

- ``produce``/``consume`` with 1 and 3 processes: N producer processes, one stream each, write; then N
  consumer processes read those streams from the start (the data is in the page cache, as the seed notes
  for a consumer reading what was just written).
- ``together``: one producer and one consumer process on one stream at the same time; the consumer tails.
- ``sizes``: one producer process, values of 10 B to 100 KB, batches of up to 1,000 records and 1 MiB.
- ``stored``: one producer process appends 1,000-byte values up to several GiB; throughput per chunk.
- ``latency``: a producer process appends one record every 0.5 ms stamped with the time; a consumer
  process tails the stream; percentiles of (time read - stamp), and the consumer's CPU time as a share
  of one core while records arrive and then while none do (what its way of waiting costs).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import resource
import signal
import struct
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import pylog

from suite_peers import Peer, RedisPeer


class SuiteError(pylog.PylogError):
    """The benchmark suite cannot run (no scratch space) or a round failed its checks."""


@dataclass(frozen=True)
class Plan:
    """How much every workload does. :data:`FULL` is the published run; :data:`QUICK` the tested smoke run."""

    records: int  # per producer process and round, throughput workloads
    cap: float  # seconds a producer process may run in one round (a consumer: 3 times as long)
    repeats: int  # rounds per peer (and message size); the report gives the median and the range
    size_bytes: int  # payload per round of the message-size workload
    size_cap: float
    stored_bytes: int  # how much the stored-data workload appends (payload bytes)
    stored_chunk: int  # one throughput point per this many payload bytes
    stored_cap: float  # seconds per peer
    redis_stored_bytes: int  # Redis keeps every stored byte in memory: a lower ceiling
    latency_records: int
    idle_seconds: float  # after the latency records, the consumer waits this long with nothing arriving
    scratch_bytes: int  # free space the plan needs under --dir
    batch: int = 1000
    read_batch: int = 500
    value_size: int = 100
    message_sizes: tuple[int, ...] = (10, 100, 1000, 10_000, 100_000)
    stored_value: int = 1000
    latency_interval: float = 0.0005


FULL = Plan(records=2_000_000, cap=5.0, repeats=3, size_bytes=200 << 20, size_cap=3.0, stored_bytes=4 << 30,
            stored_chunk=256 << 20, stored_cap=90.0, redis_stored_bytes=2 << 30, latency_records=5000, idle_seconds=2.0,
            scratch_bytes=12 << 30)
QUICK = Plan(records=10_000, cap=0.5, repeats=1, size_bytes=1 << 20, size_cap=0.3, stored_bytes=4 << 20,
             stored_chunk=1 << 20, stored_cap=3.0, redis_stored_bytes=4 << 20, latency_records=100, idle_seconds=0.3,
             scratch_bytes=1 << 30)

_CTX = mp.get_context("fork")
_STAMP = struct.Struct("<q")
_TAIL_WAIT = 0.05  # seconds a tailing consumer waits per poll before checking whether the producer is done


# ------------------------------------------------------------------------------------ worker processes


def _child(index: int, fn: Callable[..., Any], args: tuple, msgs: Any, start: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the suite's handler: terminate() ends a worker at once
    def gate() -> None:
        msgs.put(("ready", index, None))
        start.wait()
    try:
        msgs.put(("done", index, fn(*args, gate)))
    except BaseException:
        msgs.put(("error", index, traceback.format_exc()))


def _run(jobs: list[tuple[Callable[..., Any], tuple]], timeout: float) -> list[Any]:
    """Run each ``fn(*args, gate)`` in its own forked process; start them together; their results in order.

    ``gate()`` tells the parent the process is ready and waits until every process is.
    :raises SuiteError: when a process fails (with its traceback) or does not finish within ``timeout``.
    """
    msgs, start = _CTX.Queue(), _CTX.Event()
    procs = [_CTX.Process(target=_child, args=(i, fn, args, msgs, start), daemon=True)
             for i, (fn, args) in enumerate(jobs)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    ready = 0
    deadline = time.monotonic() + timeout
    try:
        while len(results) < len(procs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SuiteError(f"a benchmark process did not finish within {timeout:.0f} s")
            try:
                kind, index, value = msgs.get(timeout=min(remaining, 1.0))
            except queue.Empty:  # nothing yet: make sure no process died without a word
                dead = [p for i, p in enumerate(procs) if i not in results and p.exitcode not in (None, 0)]
                if dead:
                    raise SuiteError(f"a benchmark process died with exit code {dead[0].exitcode}") from None
                continue
            if kind == "error":
                raise SuiteError(f"a benchmark process failed:\n{value}")
            if kind == "ready":
                ready += 1
                if ready == len(procs):
                    start.set()
            else:
                results[index] = value
    finally:
        for p in procs:  # after a failure the others may wait on the start event forever: end them
            p.join(30 if len(results) == len(procs) else 0)
            if p.is_alive():
                p.terminate()
                p.join(5)
    return [results[i] for i in range(len(procs))]


def _produce(peer: Peer, stream: int, records: int, size: int, batch: int, cap: float, total: Any,
             gate: Callable[[], None]) -> dict[str, Any]:
    """Append ``records`` values of ``size`` bytes in batches of ``batch`` (or until ``cap`` seconds)."""
    values = [bytes([65 + stream % 26]) * size] * batch
    w = peer.writer(stream)
    try:
        gate()
        t0 = time.monotonic()
        count = 0
        while count < records:
            w.append(values)
            count += batch
            if time.monotonic() - t0 > cap:
                break
        w.flush()
        t1 = time.monotonic()
        if total is not None:
            total.value = count
    finally:
        w.close()
    return {"t0": t0, "t1": t1, "records": count, "bytes": count * size, "capped": count < records}


def _consume(peer: Peer, stream: int, total: Any, size: int, read_batch: int, cap: float,
             gate: Callable[[], None]) -> dict[str, Any]:
    """Read ``stream`` from the start until ``total.value`` records (set by the producer, or the parent)."""
    r = peer.reader(stream)
    try:
        gate()
        t0 = time.monotonic()
        got = nbytes = 0
        capped = False
        while True:
            expected = total.value
            if 0 <= expected <= got:
                break
            values = r.poll(read_batch, _TAIL_WAIT)
            got += len(values)
            nbytes += sum(map(len, values))
            if time.monotonic() - t0 > cap:
                capped = True
                break
        t1 = time.monotonic()
    finally:
        r.close()
    if nbytes != got * size or (not capped and got != total.value):
        raise SuiteError(f"{peer.name} stream {stream}: read {got} records and {nbytes} bytes, expected "
                         f"{total.value} records of {size} bytes")
    return {"t0": t0, "t1": t1, "records": got, "bytes": nbytes, "capped": capped}


def _aggregate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = max(p["t1"] for p in parts) - min(p["t0"] for p in parts)
    records = sum(p["records"] for p in parts)
    nbytes = sum(p["bytes"] for p in parts)
    return {"records_s": records / seconds, "mb_s": nbytes / seconds / 1e6, "records": records,
            "seconds": seconds, "capped": any(p["capped"] for p in parts)}


def _timeout(cap: float) -> float:
    """How long the parent waits for a round whose processes may each run for ``cap`` seconds."""
    return cap * 4 + 120


# ------------------------------------------------------------------------------------------- workloads


def produce_consume(peer: Peer, plan: Plan, processes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``processes`` producers write, then ``processes`` consumers read back: (produce, consume) figures."""
    peer.create(processes)
    try:
        size = plan.value_size
        written = _run([(_produce, (peer, s, plan.records, size, plan.batch, plan.cap, None))
                        for s in range(processes)], _timeout(plan.cap))
        totals = [_CTX.Value("q", w["records"], lock=False) for w in written]
        read = _run([(_consume, (peer, s, totals[s], size, plan.read_batch, plan.cap * 3))
                     for s in range(processes)], _timeout(plan.cap * 3))
    finally:
        peer.destroy()
    return _aggregate(written), _aggregate(read)


def together(peer: Peer, plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """One producer and one tailing consumer on one stream at the same time: (produce, consume) figures."""
    peer.create(1)
    try:
        total = _CTX.Value("q", -1, lock=False)
        size = plan.value_size
        w, r = _run([(_produce, (peer, 0, plan.records, size, plan.batch, plan.cap, total)),
                     (_consume, (peer, 0, total, size, plan.read_batch, plan.cap * 3))], _timeout(plan.cap * 3))
    finally:
        peer.destroy()
    return _aggregate([w]), _aggregate([r])


def size_batch(size: int) -> int:
    """Records per batch for values of ``size`` bytes: 1,000, or fewer so a batch stays within 1 MiB."""
    return max(1, min(1000, (1 << 20) // size))


def message_size(peer: Peer, plan: Plan, size: int) -> dict[str, Any]:
    """One producer process writing values of ``size`` bytes."""
    batch = size_batch(size)
    records = max(batch, plan.size_bytes // size // batch * batch)
    records = min(records, max(plan.records, batch))
    peer.create(1)
    try:
        (w,) = _run([(_produce, (peer, 0, records, size, batch, plan.size_cap, None))], _timeout(plan.size_cap))
    finally:
        peer.destroy()
    return _aggregate([w])


def _fill(peer: Peer, target: int, chunk: int, size: int, batch: int, cap: float,
          gate: Callable[[], None]) -> dict[str, Any]:
    values = [b"s" * size] * batch
    per_chunk = max(1, chunk // (size * batch))
    w = peer.writer(0)
    series: list[tuple[float, float, float]] = []  # (GiB stored before the chunk, MB/s, records/s)
    stored = 0
    try:
        gate()
        start = time.monotonic()
        while stored < target and time.monotonic() - start < cap:
            t0 = time.monotonic()
            for _ in range(per_chunk):
                w.append(values)
            w.flush()
            dt = time.monotonic() - t0
            n = per_chunk * batch
            series.append((stored / (1 << 30), n * size / dt / 1e6, n / dt))
            stored += n * size
        seconds = time.monotonic() - start
    finally:
        w.close()
    return {"series": series, "stored": stored, "seconds": seconds, "capped": stored < target}


def stored_data(peer: Peer, plan: Plan) -> dict[str, Any]:
    """Throughput of one producer process against the payload already stored, up to ``plan.stored_bytes``."""
    target = plan.redis_stored_bytes if isinstance(peer, RedisPeer) else plan.stored_bytes
    peer.create(1)
    try:
        (out,) = _run([(_fill, (peer, target, plan.stored_chunk, plan.stored_value, plan.batch, plan.stored_cap))],
                      _timeout(plan.stored_cap))
        out["footprint"] = peer.footprint()
        out["target"] = target
    finally:
        peer.destroy()
    return out


def _cpu(usage: Any) -> float:
    return usage.ru_utime + usage.ru_stime


def _tail(peer: Peer, count: int, read_batch: int, cap: float, idle: float, gate: Callable[[], None]) -> dict[str, Any]:
    r = peer.reader(0)
    lat: list[int] = []
    try:
        gate()
        c0, w0 = _cpu(resource.getrusage(resource.RUSAGE_SELF)), time.monotonic()
        deadline = w0 + cap
        while len(lat) < count and time.monotonic() < deadline:
            for v in r.poll(read_batch, _TAIL_WAIT):
                lat.append(time.monotonic_ns() - _STAMP.unpack_from(v)[0])
        c1, w1 = _cpu(resource.getrusage(resource.RUSAGE_SELF)), time.monotonic()
        # Then nothing arrives (the producer is done): what waiting alone costs.
        while time.monotonic() - w1 < idle:
            if r.poll(read_batch, _TAIL_WAIT):
                raise SuiteError(f"{peer.name}: a record after the last one")
        c2, w2 = _cpu(resource.getrusage(resource.RUSAGE_SELF)), time.monotonic()
    finally:
        r.close()
    # What tailing costs, as a share of one core: a poller finds records sooner the more often it looks.
    return {"lat": lat, "cpu": (c1 - c0) / (w1 - w0), "idle_cpu": (c2 - c1) / (w2 - w1)}


def _stamped(peer: Peer, count: int, size: int, interval: float, gate: Callable[[], None]) -> int:
    w = peer.writer(0)
    pad = b"l" * (size - _STAMP.size)
    try:
        gate()
        time.sleep(0.05)  # let the consumer reach its first wait
        for _ in range(count):
            w.append([_STAMP.pack(time.monotonic_ns()) + pad])
            time.sleep(interval)
        w.flush()
    finally:
        w.close()
    return count


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ascending ``sorted_values``, nearest rank."""
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def latency(peer: Peer, plan: Plan) -> dict[str, Any]:
    """End-to-end latency, producer process to consumer process: percentiles in milliseconds."""
    n = plan.latency_records
    cap = n * plan.latency_interval * 4 + 30
    peer.create(1)
    try:
        tail, _ = _run([(_tail, (peer, n, plan.read_batch, cap, plan.idle_seconds)),
                       (_stamped, (peer, n, plan.value_size, plan.latency_interval))], _timeout(cap))
    finally:
        peer.destroy()
    lat = tail["lat"]
    if len(lat) != n:
        raise SuiteError(f"{peer.name}: the consumer saw {len(lat)} of {n} stamped records")
    ms = sorted(x / 1e6 for x in lat)
    return {"p50": percentile(ms, 0.5), "p99": percentile(ms, 0.99), "p99.9": percentile(ms, 0.999),
            "max": ms[-1], "records": n, "consumer_cpu": tail["cpu"] * 100, "idle_cpu": tail["idle_cpu"] * 100}
