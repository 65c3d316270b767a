"""A consumer group of worker processes: they split a topic's partitions, one is killed with SIGKILL, the
survivors take its partitions over, and every job is processed at least once.

    python examples/consumer_group_processes.py [DIR]        (default: ./pylog-workers, recreated)

A job queue: the topic ``jobs`` has 6 partitions. Three worker processes (this script run with
``--worker``) join the consumer group ``workers``, with no server in between: membership, assignment and
partition ownership go through OS file locks in the store directory. Each worker polls, "processes" its
jobs (half a millisecond each) and writes one result per job to the topic ``results`` (partition = the
worker's slot), with the job's partition and offset in a header; then it commits the offsets it has
processed (commit *after* processing: at-least-once).

The script

1. starts the workers and waits until the group has split the partitions, then prints who owns what;
2. produces 3,000 jobs (keyed by customer, so each customer's jobs stay in order in one partition);
3. kills worker-0 with SIGKILL once it has done some work: no clean-up, no last commit, no goodbye;
4. waits until the survivors own every partition (the kernel released the dead worker's locks; the next
   member to notice rebalances) and the group's lag (``store.group_lag``) is 0 on every partition;
5. stops the survivors (SIGTERM: they finish the poll in hand, commit and leave), then counts results:

    summary: produced 3000 jobs, processed 3000 distinct, 3021 results (21 duplicates), 0 missing, final lag 0

Duplicates are the jobs worker-0 processed after its last commit: the survivors start from that commit
and do them again. That is at-least-once; see ``examples/delivery_semantics.py`` for exactly-once.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable

import pylog
from pylog import TopicPartition

JOBS = "jobs"
RESULTS = "results"
GROUP = "workers"
PARTITIONS = 6
N_WORKERS = 3
N_JOBS = 3000
#: Seconds of "work" per job: enough that worker-0 is killed in the middle of its share.
WORK_SECONDS = 0.0005
#: A dead member is noticed by the next heartbeat of a live one (its lock is free), so keep it short.
HEARTBEAT_MS = 200
SESSION_MS = 2000
#: Kill the victim once this many of its results are in the log: in the middle of its second poll (50
#: jobs a poll), after its first commit and before its second.
KILL_AFTER = 75
#: How long the script waits for the group to settle or catch up before giving up (seconds).
DEADLINE = 120


def say(text: str) -> None:
    """Print a message with one ``write``: the workers and this script share stdout, and a message written
    in pieces (``print`` writes the text and the newline apart when output is unbuffered) could be split
    by another process's line."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------------------ worker


class Announce(pylog.ConsumerRebalanceListener):
    """Prints the worker's side of each rebalance. With commit-after-process nothing needs saving here:
    every poll is committed before the next one, so a revoked partition's progress is already stored."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        owned = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(assigned)) or "nothing"
        say(f"    [{self.name}] assigned {owned}")


def worker(directory: str, name: str, slot: int) -> None:
    """Consume ``jobs`` as a member of ``workers`` until SIGTERM (or until the parent process is gone)."""
    stopping = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True  # finish the poll in hand, commit, leave the group

    signal.signal(signal.SIGTERM, on_sigterm)
    parent = os.getppid()
    with pylog.open(directory) as store:
        consumer = store.consumer(group_id=GROUP, client_id=name, enable_auto_commit=False,
                                  auto_offset_reset="earliest", max_poll_records=50,
                                  heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS)
        producer = store.producer(acks=1, linger_ms=0)
        consumer.subscribe([JOBS], listener=Announce(name))
        while not stopping and os.getppid() == parent:
            batch = consumer.poll(timeout_ms=100)
            for tp, records in batch.items():
                for rec in records:
                    job = json.loads(rec.value)
                    time.sleep(WORK_SECONDS)  # the work itself
                    result = {"job": job["id"], "customer": job["customer"], "worker": name}
                    producer.send(RESULTS, json.dumps(result).encode(), partition=slot,
                                  headers=[("source", b"%d:%d" % (tp.partition, rec.offset))])
            if batch:
                producer.flush()  # the results are in the log...
                consumer.commit()  # ...before the offsets say the jobs are done
        producer.close()
        consumer.close(autocommit=False)  # everything processed is committed already


# ------------------------------------------------------------------------------------------------ driver


def _wait(condition: Callable[[], bool], what: str, workers: dict[str, subprocess.Popen]) -> None:
    """Poll ``condition()`` until it holds; fail if a worker exits unexpectedly or the deadline passes."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        for name, proc in workers.items():
            if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                raise RuntimeError(f"{name} exited with code {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {DEADLINE} s")
        time.sleep(0.01)


def ownership(store: pylog.Store) -> dict[str, list[int]]:
    """``{client id: [partitions of jobs]}`` for the group's live members, from its current generation."""
    desc = store.describe_consumer_group(GROUP)
    return {m.client_id: sorted(tp.partition for tp in m.assignment if tp.topic == JOBS) for m in desc.members}


def _covers_all(owners: dict[str, list[int]], members: int) -> bool:
    owned = [p for ps in owners.values() for p in ps]
    return len(owners) == members and sorted(owned) == list(range(PARTITIONS)) and all(owners.values())


def _print_ownership(title: str, store: pylog.Store, workers: dict[str, subprocess.Popen]) -> None:
    lines = [title] + [f"  {name} (pid {workers[name].pid}) owns " + ", ".join(f"{JOBS}-{p}" for p in parts)
                       for name, parts in sorted(ownership(store).items())]
    say("\n".join(lines))


def run(directory: str) -> dict[str, int]:
    """Run the whole scenario in ``directory`` (recreated); returns the summary's numbers."""
    shutil.rmtree(directory, ignore_errors=True)
    with pylog.open(directory) as store:
        store.create_topic(JOBS, partitions=PARTITIONS)
        store.create_topic(RESULTS, partitions=N_WORKERS)  # one partition per worker: one writer each
        workers = {f"worker-{i}": subprocess.Popen([sys.executable, __file__, "--worker", directory,
                                                    f"worker-{i}", str(i)]) for i in range(N_WORKERS)}
        try:
            # 1. The workers join one by one; each join is a new generation, until the split is stable.
            _wait(lambda: _covers_all(ownership(store), N_WORKERS), "the group to form", workers)
            _print_ownership(f"group {GROUP!r}, {N_WORKERS} members:", store, workers)

            # 2. Work arrives.
            with store.producer(linger_ms=5) as producer:
                for i in range(N_JOBS):
                    customer = i % 97
                    producer.send(JOBS, json.dumps({"id": i, "customer": customer}).encode(),
                                  key=b"customer-%d" % customer)
            say(f"produced {N_JOBS} jobs")

            # 3. Kill worker-0 in the middle of its share.
            victim = "worker-0"
            done_by_victim = store.topic(RESULTS).partition(0)
            _wait(lambda: done_by_victim.log_end_offset >= KILL_AFTER, f"{victim} to do some work", workers)
            lost_partitions = ownership(store).get(victim, [])
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            say(f"killed {victim} (pid {workers[victim].pid}) with SIGKILL after {done_by_victim.log_end_offset} "
                f"results; it owned " + ", ".join(f"{JOBS}-{p}" for p in lost_partitions))

            # 4. The survivors rebalance, pick up from worker-0's last commit and catch up.
            def caught_up() -> bool:
                lag = store.group_lag(GROUP)
                return len(lag) == PARTITIONS and all(v.lag == 0 for v in lag.values())

            _wait(lambda: _covers_all(ownership(store), N_WORKERS - 1), "the survivors to take over", workers)
            _print_ownership(f"after the rebalance, {N_WORKERS - 1} members:", store, workers)
            _wait(caught_up, "the group's lag to drop to 0", workers)
            final_lag = sum(v.lag for v in store.group_lag(GROUP).values())

            # 5. A clean stop for the survivors (the last one to leave is briefly assigned everything).
            say("stopping the survivors (SIGTERM)")
            for name, proc in workers.items():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for name, proc in workers.items():
                if proc.wait(timeout=DEADLINE) not in (0, -signal.SIGKILL):
                    raise RuntimeError(f"{name} exited with code {proc.returncode}")
        finally:
            for proc in workers.values():  # only if something above failed
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

        # Count every result by the job (partition, offset) it came from.
        seen: collections.Counter[tuple[int, int]] = collections.Counter()
        for p in store.topic(RESULTS).partitions:
            for rec in p.read(0, max_records=10 * N_JOBS):
                part, offset = dict(rec.headers)["source"].split(b":")
                seen[(int(part), int(offset))] += 1
        jobs = {(p.number, o) for p in store.topic(JOBS).partitions for o in range(p.log_end_offset)}
    return {"produced": len(jobs), "processed": len(set(seen) & jobs), "results": sum(seen.values()),
            "duplicates": sum(n - 1 for n in seen.values()), "missing": len(jobs - set(seen)),
            "final_lag": final_lag}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    directory = sys.argv[1] if len(sys.argv) > 1 else "./pylog-workers"
    s = run(directory)
    say(f"summary: produced {s['produced']} jobs, processed {s['processed']} distinct, {s['results']} results "
        f"({s['duplicates']} duplicates), {s['missing']} missing, final lag {s['final_lag']}")


if __name__ == "__main__":
    main()
