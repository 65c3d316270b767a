"""Idempotent producers of real Kafka clients (kafka-python, aiokafka, confluent-kafka) against ``pylog serve``
through a proxy that resets every connection every 100-300 ms (tests/serverutil.py's CuttingProxy): requests
are lost in flight, some after the server appended them, and the clients retry. At the end every value sent is
in the topic exactly once, each partition in send order.

The retries are observed at the server: pylog's producer table (``ProducerState.check``, run by the server's
appends in this process) is wrapped to count the batches it found already appended (duplicates it did not
append again)."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

import pylog
from pylog.server.handlers import DataHandlers
from pylog.storage import producer_state

from serverutil import CuttingProxy

pytestmark = pytest.mark.slow

PARTITIONS = 3
N = 3000
TOPIC = "idem"


class Cutter:
    """Cuts every proxied connection every 100-300 ms (random, seeded) until stopped; counts the cuts that reset
    at least one live connection."""

    def __init__(self, proxy: CuttingProxy, seed: int) -> None:
        self.proxy = proxy
        self.rng = random.Random(seed)
        self.effective = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.rng.uniform(0.1, 0.3)):
            with self.proxy._lock:
                live = len(self.proxy._conns)
            self.proxy.cut()
            if live:
                self.effective += 1

    def __enter__(self) -> "Cutter":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """(store, server, proxy, duplicates): the server advertises the proxy, so every client connection (bootstrap
    and the broker's) goes through it. ``duplicates`` lists the (producer id, first sequence) of each batch the
    server's producer table found already appended."""
    duplicates: list[tuple[int, int]] = []
    original = producer_state.ProducerState.check

    def check(self, producer_id, epoch, first_seq, count, transactional=False):
        skip, first_offset = original(self, producer_id, epoch, first_seq, count, transactional)
        if skip:
            duplicates.append((producer_id, first_seq))
        return skip, first_offset

    monkeypatch.setattr(producer_state.ProducerState, "check", check)
    # A slow disk: each produce request is answered 20 ms after its appends, so many cuts fall between an append
    # and its answer (the case idempotence is for) rather than before the request arrived.
    # (Requests a connection pipelined are appended together: one such pause for all of them.)
    append_requests = DataHandlers.append_requests

    def slow_append_requests(self, *args):
        result = append_requests(self, *args)
        time.sleep(0.02)
        return result

    monkeypatch.setattr(DataHandlers, "append_requests", slow_append_requests)
    store = pylog.open(tmp_path / "store")
    store.create_topic(TOPIC, partitions=PARTITIONS)
    proxy = CuttingProxy(("127.0.0.1", 1))  # its target is the server, known once it is bound
    try:
        with pylog.serve(store, port=0, advertised_port=proxy.port) as server:
            proxy.target = ("127.0.0.1", server.port)
            assert server.bootstrap_servers == f"127.0.0.1:{proxy.port}"
            yield store, server, proxy, duplicates
    finally:
        proxy.close()
        store.close()


def _values() -> list[bytes]:
    return [f"value-{i:05d}".encode() for i in range(N)]


def _check_exactly_once_in_order(store, values: list[bytes]) -> None:
    for p in range(PARTITIONS):
        got = [r.value for r in store.topic(TOPIC).partition(p).read(0, max_records=10 * N)]
        expected = [v for i, v in enumerate(values) if i % PARTITIONS == p]
        if got != expected:
            dup = len(got) - len(set(got))
            missing = len(set(expected) - set(got))
            first = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
            raise AssertionError(f"partition {p}: {len(got)} records ({dup} duplicated, {missing} missing), "
                                 f"expected {len(expected)} in send order; first difference at {first}")


def _check_retries(cutter: Cutter, duplicates: list) -> None:
    assert cutter.effective >= 3, f"only {cutter.effective} cuts reset live connections"
    assert duplicates, "no retried batch reached the server after it had appended the original"


def _send_paced(send, values: list[bytes]) -> None:
    """Send in bursts of 50 with short pauses, so sending spans many cuts (~3 s)."""
    for i, v in enumerate(values):
        send(i, v)
        if i % 50 == 49:
            time.sleep(0.05)


def test_kafka_python_idempotent_producer_through_cut_connections(setup):
    pytest.importorskip("kafka")
    from kafka import KafkaProducer

    store, server, proxy, duplicates = setup
    values = _values()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, enable_idempotence=True, acks="all",
                             linger_ms=2, batch_size=1024, max_in_flight_requests_per_connection=5,
                             request_timeout_ms=5000, retry_backoff_ms=20, reconnect_backoff_ms=20,
                             reconnect_backoff_max_ms=200, delivery_timeout_ms=60_000)
    try:
        futures = []
        with Cutter(proxy, seed=1) as cutter:
            _send_paced(lambda i, v: futures.append(producer.send(TOPIC, v, partition=i % PARTITIONS)), values)
            producer.flush(timeout=30)
        producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close(timeout=5)
    _check_exactly_once_in_order(store, values)
    _check_retries(cutter, duplicates)


def test_aiokafka_idempotent_producer_through_cut_connections(setup):
    pytest.importorskip("aiokafka")
    from aiokafka import AIOKafkaProducer

    store, server, proxy, duplicates = setup
    values = _values()

    async def main() -> Cutter:
        producer = AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers, enable_idempotence=True,
                                    acks="all", linger_ms=2, max_batch_size=1024, request_timeout_ms=5000,
                                    retry_backoff_ms=20)
        await producer.start()
        try:
            futures = []
            with Cutter(proxy, seed=2) as cutter:
                for i, v in enumerate(values):
                    futures.append(await producer.send(TOPIC, v, partition=i % PARTITIONS))
                    if i % 50 == 49:
                        await asyncio.sleep(0.05)
                await asyncio.wait_for(asyncio.gather(*futures), 60)
        finally:
            await asyncio.wait_for(producer.stop(), 10)
        return cutter

    cutter = asyncio.run(main())
    _check_exactly_once_in_order(store, values)
    _check_retries(cutter, duplicates)


def test_confluent_kafka_idempotent_producer_through_cut_connections(setup):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Producer

    store, server, proxy, duplicates = setup
    values = _values()
    errors: list = []
    delivered: list[int] = []
    producer = Producer({"bootstrap.servers": server.bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 2, "batch.size": 1024, "message.timeout.ms": 60_000,
                         "request.timeout.ms": 5000, "retry.backoff.ms": 20, "reconnect.backoff.ms": 20,
                         "reconnect.backoff.max.ms": 200,
                         # librdkafka >= 2.10 re-bootstraps when every broker connection is down (KIP-899): it
                         # forgets the broker and reconnects on its next 1 s metadata tick, so under cuts every
                         # 100-300 ms it would hardly send at all. The broker's address is stable here.
                         "metadata.recovery.strategy": "none"})

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg.offset())

    with Cutter(proxy, seed=3) as cutter:
        def send(i: int, v: bytes) -> None:
            producer.produce(TOPIC, v, partition=i % PARTITIONS, on_delivery=on_delivery)
            producer.poll(0)
        _send_paced(send, values)
        producer.flush(30)
    assert producer.flush(30) == 0
    assert not errors, errors[:5]
    assert len(delivered) == N
    _check_exactly_once_in_order(store, values)
    _check_retries(cutter, duplicates)
