"""``pylog serve`` with TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), end to end with the three real
clients: the right password produces and consumes over SASL_SSL; a wrong one, or no SASL at all, gets
nothing from the store."""

from __future__ import annotations

import asyncio
import ssl
import time

import pytest

import pylog
from pylog.server.auth import Credentials, make_server_ssl_context
from test_server_auth import pki  # noqa: F401 - the test CA and certificates, a fixture

pytestmark = pytest.mark.slow

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
USER, PASSWORD = "alice", "alice-secret"


@pytest.fixture
def secure(tmp_path, pki):  # noqa: F811
    store = pylog.open(tmp_path / "store")
    store.create_topic("s", partitions=1)
    ctx = make_server_ssl_context(pki["cert"], pki["key"])
    creds = Credentials({USER: PASSWORD})
    with pylog.serve(store, port=0, ssl_context=ctx, sasl_credentials=creds, advertised_host="localhost") as srv:
        yield srv, store, pki["ca"]
    store.close()


def _kafka_python(bs, ca, mechanism, password):
    from kafka import KafkaConsumer, KafkaProducer
    common = dict(bootstrap_servers=bs, security_protocol="SASL_SSL", ssl_cafile=ca, sasl_mechanism=mechanism,
                  sasl_plain_username=USER, sasl_plain_password=password)
    p = KafkaProducer(max_block_ms=3000, bootstrap_timeout_ms=3000, **common)
    for i in range(10):
        p.send("s", str(i).encode())
    p.flush(timeout=10)
    p.close()
    c = KafkaConsumer("s", auto_offset_reset="earliest", consumer_timeout_ms=5000, **common)
    got = []
    for r in c:
        got.append(r.value)
        if len(got) == 10:
            break
    c.close()
    return got


def _aiokafka(bs, ca, mechanism, password):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main():
        ctx = ssl.create_default_context(cafile=ca)
        common = dict(bootstrap_servers=bs, security_protocol="SASL_SSL", ssl_context=ctx,
                      sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=password)
        p = AIOKafkaProducer(**common)
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait("s", str(i).encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer("s", auto_offset_reset="earliest", **common)
        await c.start()
        got = []
        try:
            deadline = time.monotonic() + 10
            while len(got) < 10 and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
        finally:
            await c.stop()
        return got

    return asyncio.run(main())


def _confluent(bs, ca, mechanism, password):
    from confluent_kafka import Consumer, KafkaException, Producer
    common = {"bootstrap.servers": bs, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
              "sasl.mechanisms": mechanism, "sasl.username": USER, "sasl.password": password, "log_level": 0}
    errors = []
    p = Producer({**common, "message.timeout.ms": 5000, "error_cb": errors.append})
    for i in range(10):
        p.produce("s", str(i).encode(), on_delivery=lambda err, msg: errors.append(err) if err else None)
    p.flush(10)
    if errors:
        raise KafkaException(errors[0])
    c = Consumer({**common, "group.id": "sec", "auto.offset.reset": "earliest"})
    c.subscribe(["s"])
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 10 and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(10, 0.5) if m.error() is None]
    c.close()
    return got


CLIENTS = {"kafka-python": _kafka_python, "aiokafka": _aiokafka, "confluent-kafka": _confluent}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_sasl_ssl_round_trip(secure, client, mechanism):
    srv, store, ca = secure
    got = CLIENTS[client](srv.bootstrap_servers, ca, mechanism, PASSWORD)
    assert got == [str(i).encode() for i in range(10)]
    assert [r.value for r in store.topic("s").partition(0).read(0)] == got


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_wrong_password_gets_nothing(secure, client):
    srv, store, ca = secure
    with pytest.raises(Exception) as info:
        CLIENTS[client](srv.bootstrap_servers, ca, "SCRAM-SHA-256", "wrong")
    assert "auth" in repr(info.value).lower() or "sasl" in repr(info.value).lower() or \
        "timed out" in repr(info.value).lower() or "Unable to bootstrap" in repr(info.value)
    assert store.topic("s").partition(0).log_end_offset == 0


def test_plaintext_client_cannot_read_or_write(secure):
    srv, store, ca = secure
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    with pytest.raises(KafkaError):
        p = KafkaProducer(bootstrap_servers=srv.bootstrap_servers, security_protocol="SSL", ssl_cafile=ca,
                          max_block_ms=3000, request_timeout_ms=3000, bootstrap_timeout_ms=3000)
        p.send("s", b"x").get(timeout=5)
    assert store.topic("s").partition(0).log_end_offset == 0
