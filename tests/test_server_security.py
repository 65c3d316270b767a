"""``pylog serve`` with TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), end to end with the three real
clients: the right password produces and consumes over SASL_SSL; a wrong one, or no SASL at all, gets
nothing from the store."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

import pylog
from pylog.server.auth import Credentials, make_server_ssl_context, scram_entry
from serverutil import recv_frame, wait_until
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


# ------------------------------------------------------------------------------------------------- logins

def _frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    msg = struct.pack(">hhih", api_key, version, correlation, 4) + b"test" + body
    return struct.pack(">i", len(msg)) + msg


def _plain_login(port: int, user: bytes, password: bytes, source: str = "127.0.0.1") -> int:
    """One PLAIN login over a fresh plaintext connection from ``source``: SaslAuthenticate's error code."""
    with socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0)) as sock:
        sock.sendall(_frame(17, 1, struct.pack(">h", 5) + b"PLAIN"))
        answer = recv_frame(sock)
        assert answer is not None and answer[4:6] == b"\0\0"
        token = b"\0" + user + b"\0" + password
        sock.sendall(_frame(36, 1, struct.pack(">i", len(token)) + token, correlation=2))
        answer = recv_frame(sock)
        assert answer is not None
        return struct.unpack(">h", answer[4:6])[0]


@pytest.fixture
def presalted(tmp_path):
    """A plaintext SASL server on 127.0.0.1 whose only user is pre-salted (SCRAM-SHA-512, 16,384 rounds): every
    PLAIN login costs the server a PBKDF2 run, the most expensive one the credentials file allows."""
    creds = Credentials({USER: scram_entry(PASSWORD, ["SCRAM-SHA-512"], iterations=16384)})
    with pylog.serve(tmp_path / "store", port=0, sasl_credentials=creds,
                     connection_failed_authentication_delay_max_ms=800) as srv:
        yield srv


def test_plain_logins_run_pbkdf2_off_the_event_loop(presalted, monkeypatch):
    threads = []
    real = hashlib.pbkdf2_hmac

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", recording)
    assert _plain_login(presalted.port, USER.encode(), b"wrong") == 58
    assert _plain_login(presalted.port, b"nobody", b"wrong") == 58
    assert _plain_login(presalted.port, USER.encode(), PASSWORD.encode()) == 0
    assert len(threads) == 3 and all(name.startswith("pylog-serve-login") for name in threads), threads


def test_login_flood_is_throttled_and_leaves_other_clients_served(presalted):
    # Six connections from 127.0.0.2 guessing passwords as fast as the server answers, for 3 s. Unthrottled,
    # each guess costs a PBKDF2 run and they made about a thousand a second; with the back-off (100 ms doubling
    # up to 800 ms here), one address gets about six answers in 3 s. Meanwhile a client on 127.0.0.1 is served ApiVersions
    # (generous bound: the exact latencies are benchmarks/bench_auth.py's) and logs in.
    port, stop, guesses = presalted.port, threading.Event(), []

    def flood():
        while not stop.is_set():
            guesses.append(_plain_login(port, USER.encode(), b"guess%d" % len(guesses), source="127.0.0.2"))

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(6)]
    for t in flooders:
        t.start()
    latencies = []
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            sock.sendall(_frame(18, 0, b""))
            assert recv_frame(sock) is not None
            latencies.append(time.monotonic() - t0)
            time.sleep(0.01)
    assert _plain_login(port, USER.encode(), PASSWORD.encode()) == 0
    stop.set()
    for t in flooders:
        t.join(timeout=60)
    assert set(guesses) <= {58} and 1 <= len(guesses) <= 12, len(guesses)
    latencies.sort()
    assert latencies[len(latencies) // 2] < 0.5, latencies


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs Debian's)")
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_with_librdkafka_before_2_6_1_logs_in_with_scram(tmp_path, mechanism):
    # Debian 12's kcat 1.7.1 is built on librdkafka 2.0.2, which repeats its client nonce in SCRAM's final
    # message (fixed in librdkafka 2.6.1); Kafka 3.x let it in, pylog did not ("nonce mismatch").
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=60).stdout
    store = pylog.open(tmp_path / "store")
    store.create_topic("s", partitions=1)
    with pylog.serve(store, port=0, sasl_credentials=Credentials({USER: PASSWORD})) as srv:
        common = ["kcat", "-b", srv.bootstrap_servers, "-X", "security.protocol=SASL_PLAINTEXT", "-X",
                  f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}",
                  "-m", "20"]
        produced = subprocess.run([*common, "-P", "-t", "s"], input=b"one\ntwo\n", capture_output=True,
                                  timeout=120)
        assert produced.returncode == 0, (version, produced.stderr)
        consumed = subprocess.run([*common, "-C", "-t", "s", "-o", "beginning", "-e"], capture_output=True,
                                  timeout=120)
        assert consumed.returncode == 0 and consumed.stdout == b"one\ntwo\n", (version, consumed.stderr)
    assert [r.value for r in store.topic("s").partition(0).read(0)] == [b"one", b"two"]
    store.close()


def test_a_clean_stop_does_not_wait_for_logins_held_back_by_the_failure_delay(tmp_path):
    # Five wrong passwords at once from one address, each failure held 2 s: once the first is answered, four
    # wait their turn (8 s more). A stop closes connections not logged in at once instead of waiting for them.
    creds = Credentials({USER: PASSWORD})
    srv = pylog.serve(tmp_path / "store", port=0, sasl_credentials=creds, shutdown_timeout_s=60,
                      connection_failed_authentication_delay_ms=2000,
                      connection_failed_authentication_delay_max_ms=2000)
    answers = []

    def guess():
        try:
            answers.append(_plain_login(srv.port, USER.encode(), b"wrong"))
        except (OSError, AssertionError):
            answers.append("closed")

    threads = [threading.Thread(target=guess, daemon=True) for _ in range(5)]
    try:
        for t in threads:
            t.start()
        wait_until(lambda: answers, timeout=30, what="the first failed login's answer")
    finally:
        t0 = time.monotonic()
        srv.close()
        took = time.monotonic() - t0
    for t in threads:
        t.join(timeout=30)
    assert answers[0] == 58 and answers.count("closed") >= 3, answers
    assert took < 4, took
