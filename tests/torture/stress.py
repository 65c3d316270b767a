"""Multi-process stress harness: producers of several processes sharing partitions, and a consumer group
whose members are SIGKILLed and restarted.

    python tests/torture/stress.py --full [--seed S] [--workdir DIR]   # release mode: minutes
    python tests/torture/stress.py --short                              # CI mode: well under a minute

N producer processes (2..4) send to one 4-partition topic with default producer settings, each record
keyed (one of 37 keys) or unkeyed at random, in bursts, flushing now and then. M consumer processes (2..3)
form one consumer group (manual commits, ``auto_offset_reset="earliest"``); the parent SIGKILLs a random
member every few seconds and starts a new one in its place. A consumer appends every record it processes
(partition, offset, value) to its own file and fsyncs it *before* committing the offsets after them.

What is checked (AssertionError naming the seed and what differed):
- no future fails: with default settings and every producer process alive, nothing is refused;
- every acknowledged record is stored exactly once, at the partition and offset its future gave, and
  nothing unacknowledged is stored; each producer's records of one key are stored in send order;
- every stored record is consumed at least once, with the stored value;
- committed offsets never pass processed ones: for a committed offset C of a partition (sampled at
  every kill and at the end), every offset below C is in some consumer's processed file;
- ``pylog verify`` finds nothing wrong with the store.

Children are this script run again (``--role producer|consumer``); they report through their stdout
(ready / done lines, see tests/childproc.py) and result files in the work directory.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import random
import signal
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: the shared helpers

import pylog  # noqa: E402
from pylog.__main__ import ExitCode, main as pylog_main  # noqa: E402
from pylog.structs import TopicPartition  # noqa: E402

from childproc import Child  # noqa: E402
from storetools import read_all, wait_for  # noqa: E402

TOPIC = "t"
GROUP = "g"
PARTITIONS = 4
KEYS = 37

MODES: dict[str, dict[str, Any]] = {
    # producers, consumers, seconds of producing, records per producer at most, pause between bursts (s, mean),
    # mean records per burst, seconds between kills (range)
    "short": dict(producers=3, consumers=2, seconds=8.0, max_records=40_000, pause=0.01, burst=150,
                  kill_every=(1.0, 2.5)),
    "full": dict(producers=4, consumers=3, seconds=240.0, max_records=2_000_000, pause=0.02, burst=200,
                 kill_every=(3.0, 10.0)),
}

_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import stress
stress.child_main(sys.argv[2:])
"""


# ------------------------------------------------------------------ children


def _producer(store_path: str, name: str, out: str, seed: int, seconds: float, max_records: int,
              pause: float, burst: int) -> None:
    rng = random.Random(seed)
    acked: list[tuple[int, int, int]] = []  # (seq, partition, offset)
    failed: list[str] = []
    pending: collections.deque = collections.deque()

    def collect(block: bool) -> None:
        while pending and (block or pending[0][1].is_done):
            seq, fut = pending.popleft()
            try:
                md = fut.get(900)  # a hang guard; max_block_ms (60 s) fails a stalled append long before
            except pylog.PylogError as exc:
                failed.append(f"{seq}: {exc!r}")
                continue
            acked.append((seq, md.partition, md.offset))

    with pylog.open(store_path) as store, store.producer() as producer:  # default settings
        print("ready", flush=True)
        sys.stdin.readline()  # "go"
        name_b = name.encode()
        seq = 0
        stop = time.monotonic() + seconds
        while seq < max_records and time.monotonic() < stop:
            for _ in range(min(rng.randint(1, 2 * burst), max_records - seq)):
                key = b"k%d" % rng.randrange(KEYS) if rng.random() < 0.5 else None
                pending.append((seq, producer.send(TOPIC, b"%s-%d" % (name_b, seq), key=key)))
                seq += 1
            if rng.random() < 0.05:
                producer.flush()
            collect(block=False)
            time.sleep(rng.expovariate(1 / pause))  # pacing, not synchronisation
        producer.flush()
        collect(block=True)
    with open(out + ".tmp", "w") as f:
        json.dump({"sent": seq, "acked": acked, "failed": failed}, f)
    os.replace(out + ".tmp", out)
    print("done", seq, len(acked), len(failed), flush=True)


def _consumer(store_path: str, out: str, stop_file: str) -> None:
    processed = 0
    refused = 0
    with pylog.open(store_path) as store, open(out, "ab") as f:
        consumer = store.consumer(group_id=GROUP, enable_auto_commit=False, auto_offset_reset="earliest",
                                  heartbeat_interval_ms=200, session_timeout_ms=2000)
        consumer.subscribe([TOPIC])
        print("ready", flush=True)
        while not os.path.exists(stop_file):
            batch = consumer.poll(timeout_ms=50)
            if not batch:
                continue
            lines = []
            offsets = {}
            for tp, recs in batch.items():
                lines.extend(b"%d %d %s\n" % (tp.partition, r.offset, r.value) for r in recs)
                offsets[tp] = recs[-1].offset + 1
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())  # processed durably before the commit says so
            processed += len(lines)
            try:
                consumer.commit(offsets)
            except pylog.CommitFailedError:  # rebalanced away meanwhile: the next owner processes them again
                refused += 1
        consumer.close(autocommit=False)
    print("done", processed, refused, flush=True)


def child_main(argv: list[str]) -> None:
    role = argv[0]
    if role == "producer":
        store_path, name, out, seed, seconds, max_records, pause, burst = argv[1:]
        _producer(store_path, name, out, int(seed), float(seconds), int(max_records), float(pause), int(burst))
    elif role == "consumer":
        _consumer(*argv[1:4])
    else:
        raise SystemExit(f"unknown role {role!r}")


# ------------------------------------------------------------------ the parent


class _Processed:
    """The union of the consumers' processed files, read incrementally (complete lines only: a consumer
    killed mid-write leaves a torn last line, whose records were not committed)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.read_upto: dict[str, int] = {}
        self.values: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
        self.lines = 0
        self.prefixes: dict[int, int] = {}

    def refresh(self) -> None:
        for name in sorted(os.listdir(self.directory)):
            if not name.startswith("consumed-"):
                continue
            path = os.path.join(self.directory, name)
            with open(path, "rb") as f:
                f.seek(self.read_upto.get(name, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.read_upto[name] = self.read_upto.get(name, 0) + end
            for line in data[:end].splitlines():
                p, o, v = line.split(b" ")
                key = (int(p), int(o))
                old = self.values.setdefault(key, v)
                if old != v:
                    raise AssertionError(f"{name}: {key} was consumed as {v!r} and elsewhere as {old!r}")
                self.lines += 1

    def prefix(self, partition: int) -> int:
        """How many offsets from 0 on of ``partition`` are all processed (after a refresh)."""
        n = self.prefixes.get(partition, 0)
        while (partition, n) in self.values:
            n += 1
        self.prefixes[partition] = n
        return n

    def covers(self, ends: list[int]) -> bool:
        self.refresh()
        return all(self.prefix(p) >= end for p, end in enumerate(ends))


def _committed(store: pylog.Store) -> dict[int, int | None]:
    reader = store.consumer(group_id=GROUP, enable_auto_commit=False)
    try:
        return {p: reader.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
    finally:
        reader.close(autocommit=False)


def _check_committed(store: pylog.Store, processed: _Processed, where: str, fail: Any) -> None:
    committed = _committed(store)  # first: whatever it names was fsynced into a file before it was committed
    processed.refresh()
    for p, c in committed.items():
        if c is None:
            continue
        if c > processed.prefix(p):
            fail(f"{where}: partition {p} committed offset {c} but offset {processed.prefix(p)} was never "
                 "processed")


def run(mode: str, workdir: str, seed: int | None = None, **overrides: Any) -> dict:
    """Run the harness in ``mode`` ("short" or "full") under ``workdir``; returns the counts.
    ``overrides`` replace the mode's settings (``producers``, ``consumers``, ``seconds``, ...).

    :raises AssertionError: on any violation (the message names the seed).
    """
    cfg = dict(MODES[mode], **overrides)
    if not 2 <= cfg["producers"] <= 4 or cfg["consumers"] < 1:
        raise ValueError(f"2..4 producers and at least one consumer, got {cfg}")
    seed = random.randrange(1 << 31) if seed is None else seed
    rng = random.Random(seed)

    def fail(what: str) -> None:
        raise AssertionError(f"stress {mode} seed={seed}: {what}")

    store_path = os.path.join(workdir, "store")
    files = os.path.join(workdir, "files")
    os.makedirs(files, exist_ok=True)
    stop_file = os.path.join(files, "stop")
    with pylog.open(store_path, log_cleaner_enable=False) as store:
        # Small segments: appends roll segments while the partitions change hands.
        store.create_topic(TOPIC, partitions=PARTITIONS, config={"segment.bytes": 256 * 1024})
    started = time.monotonic()
    n_prod, n_cons = cfg["producers"], cfg["consumers"]
    producers: list[Child] = []
    consumers: dict[str, Child] = {}
    incarnation = collections.Counter()
    counts: dict[str, Any] = {"mode": mode, "seed": seed, "producers": n_prod, "consumers": n_cons, "kills": 0}

    def start_consumer(slot: str) -> None:
        incarnation[slot] += 1
        out = os.path.join(files, f"consumed-{slot}-{incarnation[slot]}")
        child = Child(_CHILD, HERE, "consumer", store_path, out, stop_file, cwd=workdir)
        child.expect("ready", timeout=120)
        consumers[slot] = child

    try:
        for i in range(n_prod):
            producers.append(Child(_CHILD, HERE, "producer", store_path, f"P{i}", os.path.join(files, f"P{i}.json"),
                                   str(rng.randrange(1 << 31)), str(cfg["seconds"]), str(cfg["max_records"]),
                                   str(cfg["pause"]), str(cfg["burst"]), cwd=workdir))
        for p in producers:
            p.expect("ready", timeout=120)
        for i in range(n_cons):
            start_consumer(f"C{i}")
        for p in producers:
            p.send("go")
        processed = _Processed(files)
        with pylog.open(store_path, log_cleaner_enable=False) as store:
            # Kill and restart group members while the producers run.
            while any(p.proc.poll() is None for p in producers):
                time.sleep(rng.uniform(*cfg["kill_every"]))  # pacing the kills, not synchronisation
                if not any(p.proc.poll() is None for p in producers):
                    break
                slot = rng.choice(sorted(consumers))
                victim = consumers.pop(slot)
                os.kill(victim.proc.pid, signal.SIGKILL)
                victim.wait(60)
                victim.kill()  # closes its pipes
                counts["kills"] += 1
                _check_committed(store, processed, f"after kill {counts['kills']}", fail)
                start_consumer(slot)
            results = {}
            for i, p in enumerate(producers):
                line = p.expect("done", timeout=900)
                if p.wait(120) != 0:
                    fail(f"producer P{i} exited with {p.proc.returncode}: {p.err()}")
                with open(os.path.join(files, f"P{i}.json")) as f:
                    results[f"P{i}"] = json.load(f)
                print(f"  producer P{i}: sent/acked/failed {line}", flush=True)
            produced_at = time.monotonic()
            topic = store.topic(TOPIC)
            ends = [topic.partition(p).log_end_offset for p in range(PARTITIONS)]
            # Every stored record consumed at least once (a hang guard only: the group keeps consuming).
            if not wait_for(lambda: processed.covers(ends), timeout=600, step=0.2):
                got = [processed.prefix(p) for p in range(PARTITIONS)]
                fail(f"consumers processed offsets up to {got} of the stored {ends} per partition within 10 min")
            with open(stop_file, "w"):
                pass
            for slot, c in sorted(consumers.items()):
                c.expect("done", timeout=120)
                if c.wait(60) != 0:
                    fail(f"consumer {slot} exited with {c.proc.returncode}: {c.err()}")
            consumers.clear()
            _check_committed(store, processed, "at the end", fail)
            stored = {p: read_all(topic.partition(p), chunk=50_000) for p in range(PARTITIONS)}
    finally:
        for c in [*producers, *consumers.values()]:
            c.kill()

    # ---------------------------------------------------------------- checks
    failed = {name: r["failed"] for name, r in results.items() if r["failed"]}
    if failed:
        fail(f"futures failed with default settings and every process alive: "
             f"{ {k: (len(v), v[:2]) for k, v in failed.items()} }")
    where: dict[tuple[str, int], list[tuple[int, int]]] = collections.defaultdict(list)
    order: dict[tuple[str, bytes], list[int]] = collections.defaultdict(list)
    for p, records in stored.items():
        if [r.offset for r in records] != list(range(len(records))):
            fail(f"partition {p}: offsets not dense from 0")
        for r in records:
            name, seq = r.value.decode().split("-")
            where[(name, int(seq))].append((p, r.offset))
            if r.key is not None:
                order[(name, r.key)].append(int(seq))
            if processed.values.get((p, r.offset)) != r.value:
                fail(f"partition {p} offset {r.offset}: stored {r.value!r}, consumed "
                     f"{processed.values.get((p, r.offset))!r}")
    duplicates = {k: v for k, v in where.items() if len(v) > 1}
    if duplicates:
        fail(f"{len(duplicates)} records stored more than once, e.g. {list(duplicates.items())[:3]}")
    acked_total = 0
    for name, r in results.items():
        acked_total += len(r["acked"])
        if len(r["acked"]) != r["sent"]:
            fail(f"producer {name}: {r['sent']} sent, {len(r['acked'])} acknowledged")
        for seq, p, o in r["acked"]:
            if where.get((name, seq)) != [(p, o)]:
                fail(f"producer {name} record {seq}: acknowledged at {p}/{o}, stored at {where.get((name, seq))}")
    if len(where) != acked_total:
        fail(f"{len(where)} records stored, {acked_total} acknowledged")
    for (name, key), seqs in order.items():
        if seqs != sorted(seqs):
            fail(f"producer {name} key {key!r}: stored out of send order")
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        verdict = pylog_main(["verify", store_path])
    if verdict != ExitCode.OK:
        fail(f"pylog verify reported problems: {report.getvalue()[-2000:]}")
    counts.update({
        "acked": acked_total, "stored": sum(len(v) for v in stored.values()), "consumed": len(processed.values),
        "consumed_lines": processed.lines, "redelivered": processed.lines - len(processed.values),
        "duplicates": len(duplicates), "refused": sum(len(r["failed"]) for r in results.values()),
        "consumer_incarnations": sum(incarnation.values()),
        "produce_seconds": round(produced_at - started, 1), "seconds": round(time.monotonic() - started, 1),
        "per_partition": [len(stored[p]) for p in range(PARTITIONS)],
    })
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--full", action="store_const", const="full", dest="mode")
    group.add_argument("--short", action="store_const", const="short", dest="mode")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--workdir", help="default: a new temporary directory, removed afterwards")
    ap.add_argument("--producers", type=int, help="producer processes (2..4; default: short 3, full 4)")
    ap.add_argument("--consumers", type=int, help="consumer processes (default: short 2, full 3)")
    ap.add_argument("--seconds", type=float, help="how long the producers send (default: short 8, full 240)")
    args = ap.parse_args(argv)
    mode = args.mode or "short"
    overrides = {k: v for k in ("producers", "consumers", "seconds") if (v := getattr(args, k)) is not None}
    if args.workdir:
        counts = run(mode, args.workdir, args.seed, **overrides)
    else:
        with tempfile.TemporaryDirectory(prefix="pylog-stress-") as d:
            counts = run(mode, d, args.seed, **overrides)
    for k, v in counts.items():
        print(f"  {k}: {v}")
    print("stress " + " ".join(f"{k}={counts[k]}" for k in (
        "mode", "seed", "producers", "consumers", "acked", "stored", "consumed", "redelivered", "duplicates",
        "refused", "kills", "seconds")) + " OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
