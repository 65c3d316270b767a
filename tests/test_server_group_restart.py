"""Kafka consumer groups across restarts, with real clients (confluent-kafka, i.e. librdkafka): the group
coordinator's membership survives a restart of ``pylog serve`` on the same store and port, and a static
member (``group.instance.id``) that restarts takes its place back without a rebalance (librdkafka's
test 0102). Servers bind to 127.0.0.1; every wait has a deadline."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import pylog

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ConsumerGroupState, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.slow

QUIET = {"log_level": 0}  # librdkafka logs the server's restart as errors


class Tracked:
    """A confluent-kafka consumer that counts its rebalance callbacks and keeps what it consumed."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: object) -> None:
        self.assigned: list[list[int]] = []
        self.revoked = 0
        self.records: list[tuple[int, int]] = []
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "session.timeout.ms": 15000,
                           "heartbeat.interval.ms": 500, "reconnect.backoff.max.ms": 500, **QUIET, **conf})
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: object, parts: list) -> None:
        self.assigned.append(sorted(p.partition for p in parts))

    def _on_revoke(self, consumer: object, parts: list) -> None:
        self.revoked += 1

    def poll_until(self, pred, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"timed out: {len(self.records)} records, assigned {self.assigned}"
            for m in self.c.consume(500, 0.2):
                assert m.error() is None, m.error()
                self.records.append((m.partition(), m.offset()))

    def close(self) -> None:
        self.c.close()


def _poll_all(consumers: list[Tracked], pred, timeout: float = 40.0) -> None:
    """Poll every consumer in turn (each must keep polling to stay in the group) until ``pred()``."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, [(c.assigned, len(c.records)) for c in consumers]
        for c in consumers:
            for m in c.c.consume(500, 0.1):
                assert m.error() is None, m.error()
                c.records.append((m.partition(), m.offset()))


def _describe(bootstrap: str, group: str):
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    return admin.describe_consumer_groups([group])[group].result(20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _produce(store: pylog.Store, topic: str, n: int, partitions: int) -> None:
    with store.producer() as p:
        for i in range(n):
            p.send(topic, b"%d" % i, partition=i % partitions).get()


def test_consumer_group_carries_on_across_a_server_restart_without_rejoining(tmp_path):
    """The server stops cleanly and starts again on the same store and port while a consumer of the group
    runs: it keeps its member id, generation and partitions (no revoke, no new assignment), its commit
    after the restart is accepted, and it reads the new records, none of the old ones again."""
    store = pylog.open(tmp_path / "store")
    store.create_topic("t", 2)
    port = _free_port()
    _produce(store, "t", 40, 2)
    srv = pylog.serve(store, port=port, group_initial_rebalance_delay_ms=50)
    c = Tracked(srv.bootstrap_servers, "g", "t")
    try:
        c.poll_until(lambda: len(c.records) >= 40)
        c.c.commit(asynchronous=False)
        srv.close()
        srv = pylog.serve(store, port=port, group_initial_rebalance_delay_ms=50)
        desc = _describe(srv.bootstrap_servers, "g")
        assert desc.state == ConsumerGroupState.STABLE and len(desc.members) == 1  # taken over, not rejoined
        _produce(store, "t", 20, 2)
        c.poll_until(lambda: len(c.records) >= 60)
        c.c.commit(asynchronous=False)  # raises if the member were unknown to the restarted server
        assert (c.assigned, c.revoked) == ([[0, 1]], 0)
        assert len(set(c.records)) == len(c.records) == 60
        committed = store.committed_offsets("g")
        assert sorted(om.offset for om in committed.values()) == [30, 30]
    finally:
        c.close()
        srv.close()
        store.close()


def test_static_member_restart_does_not_rebalance_the_group(tmp_path):
    """librdkafka's test 0102: with group.instance.id, a consumer that closes (a static member does not
    leave) and starts again within the session timeout gets its partitions back; the other member is never
    revoked and the group's generation stays."""
    store = pylog.open(tmp_path / "store")
    store.create_topic("t", 4)
    _produce(store, "t", 8, 4)
    with pylog.serve(store, port=0, group_initial_rebalance_delay_ms=1000) as srv:
        a = Tracked(srv.bootstrap_servers, "g", "t", **{"group.instance.id": "a"})
        b = Tracked(srv.bootstrap_servers, "g", "t", **{"group.instance.id": "b"})
        try:
            _poll_all([a, b], lambda: len(a.records) + len(b.records) >= 8)
            assert len(a.assigned) == len(b.assigned) == 1  # one generation with both
            first_b = b.assigned[-1]
            b.c.commit(asynchronous=False)
            b.close()
            b = Tracked(srv.bootstrap_servers, "g", "t", **{"group.instance.id": "b"})
            # In a rebalance, b's JoinGroup would complete only once a rejoined (revoking first, in its poll).
            _poll_all([a, b], lambda: bool(b.assigned))
            _produce(store, "t", 4, 4)
            _poll_all([a, b], lambda: len(a.records) == 6 and len(b.records) == 2)
            assert b.assigned == [first_b]
            assert (len(a.assigned), a.revoked) == (1, 0)
            desc = _describe(srv.bootstrap_servers, "g")
            assert desc.state == ConsumerGroupState.STABLE and len(desc.members) == 2
        finally:
            a.close()
            b.close()
    store.close()


def _serve_process(path, port: int) -> subprocess.Popen:
    """``pylog serve`` in a child process on 127.0.0.1:``port``, once it listens (its log drained by a thread)."""
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(path), "--port", str(port)],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if re.search(r"listening on ", line):
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc
    proc.wait(10)
    raise AssertionError("pylog serve did not start:\n" + "".join(lines))


def test_consumer_group_carries_on_across_a_server_crash(tmp_path):
    """The server process is SIGKILLed while a consumer group is stable: the group's last stable generation
    was saved when it formed, so the restarted server takes it over and the consumer goes on without a
    rebalance, reading what is produced after the crash."""
    path, port = tmp_path / "store", _free_port()
    proc = _serve_process(path, port)
    bootstrap = f"127.0.0.1:{port}"
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    c = None
    try:
        for i in range(10):
            producer.produce("t", b"%d" % i)
        assert producer.flush(30) == 0
        c = Tracked(bootstrap, "g", "t")
        c.poll_until(lambda: len(c.records) >= 10)
        c.c.commit(asynchronous=False)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc = _serve_process(path, port)
        for i in range(10, 15):
            producer.produce("t", b"%d" % i)
        assert producer.flush(30) == 0
        c.poll_until(lambda: len(c.records) >= 15)
        c.c.commit(asynchronous=False)
        assert (len(c.assigned), c.revoked) == (1, 0)
        assert sorted(o for _, o in c.records) == list(range(15))
    finally:
        if c is not None:
            c.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
