"""pylog's own clients and real Kafka clients on one store at the same time: a pylog producer writing while a
confluent-kafka consumer reads through ``pylog serve``, a confluent-kafka producer writing through the server
while a pylog consumer (in this process, or in another process that opened the store itself) reads; and the
``pylog`` CLI showing the topics and the group commits Kafka clients made."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest


from childproc import Child

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402

pytestmark = pytest.mark.slow

PARTITIONS = 3
N = 3000


# The store and server fixtures: tests/conftest.py.


def _expected() -> dict[int, list[bytes]]:
    """Record i goes to partition i % 3: each partition's values in send order."""
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(N):
        out[i % PARTITIONS].append(f"m{i:05d}".encode())
    return out


def _paced(send, flush) -> None:
    """All N records in bursts of 100 with short pauses (~1.5 s), so producing overlaps consuming."""
    for i in range(N):
        send(i, f"m{i:05d}".encode())
        if i % 100 == 99:
            flush()
            time.sleep(0.05)
    flush()


def _confluent_consume(server, topic: str, group: str, n: int, timeout: float = 30,
                       started: threading.Event | None = None) -> dict[int, list[tuple[int, bytes]]]:
    """n records of topic (a group member, from the earliest offset, commit at the end): per partition
    (offset, value) in the order received."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "topic.metadata.refresh.interval.ms": 1000})
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    count = 0
    try:
        consumer.subscribe([topic], on_assign=lambda c, ps: started.set() if started else None)
        deadline = time.monotonic() + timeout
        while count < n and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.2):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.value()))
                count += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_pylog_producer_while_a_confluent_consumer_reads(server, store):
    store.create_topic("p2k", partitions=PARTITIONS)
    assigned = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            assert assigned.wait(20), "the consumer was never assigned its partitions"
            with store.producer(linger_ms=1) as p:
                _paced(lambda i, v: p.send("p2k", v, partition=i % PARTITIONS), p.flush)
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    producing = threading.Thread(target=produce, daemon=True)
    producing.start()
    got = _confluent_consume(server, "p2k", "mixed-a", N, started=assigned)
    producing.join(timeout=30)
    assert not failure, failure
    expected = _expected()
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(len(expected[p]))), f"partition {p}: offsets out of order"
        assert [v for _, v in got[p]] == expected[p]
    assert {tp.partition: om.offset for tp, om in store.committed_offsets("mixed-a").items()} == \
        {p: len(expected[p]) for p in range(PARTITIONS)}


def _confluent_produce(server, topic: str, failures: list) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 2, "acks": "all"})

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(err)

    def send(i: int, v: bytes) -> None:
        producer.produce(topic, v, partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)

    _paced(send, lambda: producer.flush(10))
    remaining = producer.flush(20)
    if remaining:
        failures.append(f"{remaining} records not delivered")


def test_confluent_producer_while_a_pylog_consumer_reads_in_this_process(server, store):
    store.create_topic("k2p", partitions=PARTITIONS)
    failures: list = []
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    with store.consumer("k2p", group_id="mixed-b", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.poll(timeout_ms=100)  # joined and positioned before the first record is produced
        producing = threading.Thread(target=_confluent_produce, args=(server, "k2p", failures), daemon=True)
        producing.start()
        deadline = time.monotonic() + 30
        count = 0
        while count < N and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=200).items():
                got[tp.partition].extend((r.offset, r.value) for r in recs)
                count += len(recs)
        producing.join(timeout=30)
        c.commit()
    assert not failures, failures[:5]
    expected = _expected()
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(len(expected[p])))
        assert [v for _, v in got[p]] == expected[p]


CONSUMER_CHILD = """
import sys, time
import pylog
store_path, n = sys.argv[1], int(sys.argv[2])
with pylog.open(store_path) as store:
    with store.consumer("k2p", group_id="mixed-c", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.poll(timeout_ms=100)
        print("ready", flush=True)
        deadline = time.monotonic() + 30
        count = 0
        while count < n and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=200).items():
                for r in recs:
                    print("rec", tp.partition, r.offset, r.value.decode(), flush=False)
                count += len(recs)
        c.commit()
    print("done", count, flush=True)
"""


def test_confluent_producer_while_a_pylog_consumer_in_another_process_reads(server, store, tmp_path):
    store.create_topic("k2p", partitions=PARTITIONS)
    child = Child(CONSUMER_CHILD, store.path, str(N), cwd=str(tmp_path))
    try:
        child.expect("ready", timeout=30)
        failures: list = []
        _confluent_produce(server, "k2p", failures)
        assert not failures, failures[:5]
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        while True:
            line = child.lines.get(timeout=40)
            assert line is not None, f"the child exited early: {child.err()}"
            if line.startswith("done"):
                break
            _, p, o, v = line.split()
            got[int(p)].append((int(o), v.encode()))
        assert child.wait(10) == 0
    finally:
        child.kill()
    expected = _expected()
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(len(expected[p])))
        assert [v for _, v in got[p]] == expected[p]
    assert {tp.partition: om.offset for tp, om in store.committed_offsets("mixed-c").items()} == \
        {p: len(expected[p]) for p in range(PARTITIONS)}


def _cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pylog", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc.stdout


def test_cli_shows_what_kafka_clients_wrote_and_committed(server, store):
    failures: list = []
    store.create_topic("k2p", partitions=PARTITIONS)
    _confluent_produce(server, "k2p", failures)
    assert not failures, failures[:5]
    got = _confluent_consume(server, "k2p", "cli-group", N - 10)  # commits N - 10 in total: lag 10
    committed = {p: len(recs) for p, recs in got.items()}
    assert sum(committed.values()) >= N - 10
    lag = N - sum(committed.values())

    # While the server still has the store open: the CLI is one more process on it.
    topics = _cli("topics", "list", store.path)
    assert f"k2p  partitions={PARTITIONS}" in topics
    for p in range(PARTITIONS):
        assert f"  {p}: offsets [0, {N // PARTITIONS})" in topics
    groups = _cli("groups", "describe", store.path, "cli-group")
    assert groups.startswith("cli-group")
    rows = {}
    for line in groups.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == "k2p":
            rows[int(cells[1])] = [int(x) for x in cells[2:6]]  # committed, log start, log end, lag
    assert rows == {p: [committed[p], 0, N // PARTITIONS, N // PARTITIONS - committed[p]] for p in range(PARTITIONS)}
    assert f"total lag {lag}" in groups
    assert "cli-group" in _cli("groups", "list", store.path)
