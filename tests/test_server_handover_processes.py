"""``pylog serve`` (the CLI, its own process) and pylog producers of other processes write the same partition in
turn: an idle server hands the partition's writer lock over to a producer that asks for it, and takes it back
(waiting for that producer's idle hand-over) when a Kafka client produces again. Nothing is lost, the order
is kept. Real processes; no timed assertion (``max_block_ms`` bounds each wait, the futures must succeed).
"""

from __future__ import annotations

import signal

import pytest

import pylog

from childproc import Child
from serverutil import start_cli_server

kafka = pytest.importorskip("kafka")

pytestmark = pytest.mark.slow

#: A pylog producer in its own process: "send N" sends N records to partition 0 and waits for them; it stays
#: open (idle, still able to hand over) until "close".
_PRODUCER = """
    import sys, pylog
    with pylog.open(sys.argv[1]) as store:
        producer = store.producer(max_block_ms=20_000)
        print("ready", flush=True)
        n = 0
        for line in sys.stdin:
            cmd = line.split()
            if cmd[0] == "close":
                producer.close()
                print("closed", flush=True)
                break
            offsets = []
            for _ in range(int(cmd[1])):
                offsets.append(producer.send("t", b"pylog-%d" % n, partition=0).get(60).offset)
                n += 1
            print("sent", *offsets, flush=True)
"""


def _kafka_send(producer, value: bytes) -> int:
    return producer.send("t", value, partition=0).get(timeout=60).offset


def test_idle_cli_server_hands_a_partition_over_to_another_process_and_takes_it_back(tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("t", partitions=1)
    proc, bootstrap, log_lines = start_cli_server(path)
    child = None
    try:
        kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=5)
        assert _kafka_send(kp, b"kafka-0") == 0  # the server now holds partition 0's writer lock, and goes idle
        child = Child(_PRODUCER, str(path), cwd=str(tmp_path))
        child.expect("ready")
        child.send("send 3")  # waits for the idle server to hand over (it failed after max_block_ms before)
        assert child.expect("sent") == "1 2 3"
        # The child's producer stays open and holds the lock; the server waits for its idle hand-over.
        assert _kafka_send(kp, b"kafka-1") == 4
        assert _kafka_send(kp, b"kafka-2") == 5
        child.send("send 2")  # and the other way again
        assert child.expect("sent") == "6 7"
        assert _kafka_send(kp, b"kafka-3") == 8
        child.send("close")
        child.expect("closed")
        assert child.wait(60) == 0, child.err()
        kp.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(log_lines)
    finally:
        if child is not None:
            child.kill()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pylog.open(path, read_only=True) as store:
        p = store.topic("t").partition(0)
        assert [r.value for r in p.read(0)] == [b"kafka-0", b"pylog-0", b"pylog-1", b"pylog-2", b"kafka-1",
                                               b"kafka-2", b"pylog-3", b"pylog-4", b"kafka-3"]
        assert p.check() == []
