"""Consumer groups of real Kafka clients in separate processes against ``pylog serve``: three members of a group
(kafka-python, aiokafka or confluent-kafka, one process each: tests/groupworker.py) share a 6-partition topic;
one is killed with SIGKILL mid-run; the coordinator expires it after its session timeout and the survivors
take its partitions over. Every record is consumed at least once, and no committed offset (read through
``store.committed_offsets``, pylog's group state) is ever ahead of what the members processed."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pylog

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("groupworker.py")
PARTITIONS = 6
UP_FRONT = 600
WHILE_RUNNING = 240


def _processed(path: Path) -> set[tuple[int, int]]:
    """The (partition, offset) pairs a worker wrote (a line cut by a kill is left out)."""
    if not path.exists():
        return set()
    text = path.read_text()
    out = set()
    for line in text.split("\n")[:-1] if not text.endswith("\n") else text.splitlines():
        p, o = line.split()
        out.add((int(p), int(o)))
    return out


def _check_commits(committed: dict[int, int], processed: set[tuple[int, int]]) -> None:
    """A committed offset c of partition p: every offset below c was processed by some member."""
    for p, c in committed.items():
        missing = [o for o in range(c) if (p, o) not in processed]
        assert not missing, f"partition {p} committed {c} but offsets {missing[:10]} were never processed"


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_group_of_three_processes_survives_a_killed_member(tmp_path, client):
    if client == "kafka-python":
        pytest.importorskip("kafka")
    elif client == "aiokafka":
        pytest.importorskip("aiokafka")
    else:
        pytest.importorskip("confluent_kafka")
    from kafka import KafkaProducer

    store = pylog.open(tmp_path / "store")
    topic, group = "work", f"g-{client}"
    store.create_topic(topic, partitions=PARTITIONS)
    with store.producer() as p:
        for i in range(UP_FRONT):
            p.send(topic, f"u{i}".encode(), partition=i % PARTITIONS)

    outs = [tmp_path / f"worker{i}.txt" for i in range(3)]
    stop_file = tmp_path / "stop"
    procs: list[subprocess.Popen] = []
    errs = []
    samples: list[dict[int, int]] = []
    sampling = threading.Event()
    server = pylog.serve(store, port=0, group_initial_rebalance_delay_ms=1500)
    try:
        for out in outs:
            errs.append(open(str(out) + ".err", "w"))  # the worker's complaints (failed commits), for debugging
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), client, server.bootstrap_servers, topic, group, str(out),
                 str(stop_file)], stdout=subprocess.DEVNULL, stderr=errs[-1], cwd=tmp_path))

        def committed() -> dict[int, int]:
            return {tp.partition: om.offset for tp, om in store.committed_offsets(group).items()
                    if tp.topic == topic}

        def sample() -> None:
            while not sampling.is_set():
                samples.append(committed())
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        # All three members consuming, then one is killed while its partitions still hold records.
        _wait(lambda: all(len(_processed(o)) >= 5 for o in outs), 25, "all three workers to consume")
        victim = 0
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(timeout=10)
        killed_at = {(p, o) for p, o in _processed(outs[victim])}
        victim_partitions = {p for p, _ in killed_at}

        producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks="all")
        try:
            for i in range(WHILE_RUNNING):
                producer.send(topic, f"r{i}".encode(), partition=i % PARTITIONS)
                if i % 40 == 39:
                    producer.flush(timeout=10)
                    time.sleep(0.2)
            producer.flush(timeout=10)
        finally:
            producer.close(timeout=5)
        total = UP_FRONT + WHILE_RUNNING
        ends = {p: store.topic(topic).partition(p).log_end_offset for p in range(PARTITIONS)}
        assert sum(ends.values()) == total

        everything = {(p, o) for p, end in ends.items() for o in range(end)}

        def union() -> set[tuple[int, int]]:
            return set().union(*(_processed(o) for o in outs))

        _wait(lambda: everything <= union(), 30, "every record to be processed")
        _wait(lambda: committed() == ends, 10, "the survivors to commit the end of every partition")
        sampling.set()
        sampler.join(timeout=5)
        samples.append(committed())

        processed = union()
        assert processed == everything
        for s in samples:  # read after every sample was taken: a commit follows the lines it covers
            _check_commits(s, processed)
        # The survivors took the killed member's partitions over: records it never got to, in partitions it
        # owned, were processed by another worker.
        survivors = _processed(outs[1]) | _processed(outs[2])
        for p in victim_partitions:
            after = {(q, o) for q, o in survivors if q == p and o > max(o2 for q2, o2 in killed_at if q2 == p)}
            assert after, f"nobody took over partition {p} after the killed member"
        assert all(pr.poll() is None for pr in procs[1:]), "a surviving worker died"
    finally:
        sampling.set()
        stop_file.touch()
        for pr in procs:
            try:
                pr.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait(timeout=5)
        for f in errs:
            f.close()
        server.close()
        store.close()


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
