"""``pylog serve`` against hostile clients (issue 19): bad input gets Kafka's error code or a closed connection,
never a crash of the server or a record written half. Frame size cap (no allocation of what a size prefix
claims), negative sizes, disconnects mid-frame and mid-produce, garbage after a valid request, unknown api
keys, ApiVersions in a version not served, requests before SASL authentication, 1,000 dropped connections.
The fuzzer (tests/torture/fuzz_server.py) covers the same ground with mutated input; these are the cases
by name. Everything binds 127.0.0.1 and writes under tmp_path."""

from __future__ import annotations

import socket
import struct
import threading
import time
import tracemalloc

import pytest

import pylog
from pylog.server import protocol
from pylog.server.auth import Credentials
from pylog.server.protocol import ErrorCode, encode_request, parse_response


MAX_REQUEST = 64 * 1024


@pytest.fixture
def store(tmp_path):
    s = pylog.open(tmp_path / "store")
    s.create_topic("t", partitions=1)
    yield s
    s.close()


@pytest.fixture
def server(store):
    with pylog.serve(store, port=0, max_request_bytes=MAX_REQUEST, auto_create_topics=False) as srv:
        yield srv


def _addr(srv):
    return srv.host, srv.port


from serverutil import kafka_batch as _batch, recv_frame as _recv_frame  # noqa: E402


def _closed_by_server(sock, timeout=10.0):
    """True when the server closes the connection (EOF or reset) within ``timeout`` without answering."""
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _api_versions(corr=1, version=3):
    return encode_request(18, version, corr, "hostile", {"client_software_name": "t", "client_software_version": "1"})


def _healthy(srv):
    """A fresh connection gets ApiVersions and Metadata answered."""
    with socket.create_connection(_addr(srv), timeout=10) as s:
        s.sendall(_api_versions(1) + encode_request(3, 1, 2, "hostile", {"topics": [{"name": "t"}]}))
        av = _recv_frame(s)
        md = _recv_frame(s)
    assert av is not None and md is not None
    assert parse_response(18, 3, av)[1]["error_code"] == 0
    corr, body = parse_response(3, 1, md)
    assert corr == 2 and body["topics"][0]["error_code"] == 0
    return True


def _produce(values, corr=7, acks=1):
    return encode_request(0, 7, corr, "hostile", {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
                                                  "topic_data": [{"name": "t", "partition_data": [
                                                      {"index": 0, "records": _batch(values)}]}]})


def _stored_values(store):
    part = store.topic("t").partition(0)
    return [bytes(r.value) for r in part.read(part.log_start_offset, max_records=100_000)]


def _connections(srv):
    return len(srv._state.connections)


def _wait(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------ frame sizes

@pytest.mark.parametrize("size", [0x7FFFFFFF, MAX_REQUEST + 1, 1 << 30])
def test_a_size_prefix_above_the_limit_closes_the_connection_without_allocating_it(server, size):
    tracemalloc.start()
    try:
        with socket.create_connection(_addr(server), timeout=10) as s:
            s.sendall(struct.pack(">i", size) + b"\x00\x12\x00\x03" + b"x" * 100)
            assert _closed_by_server(s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"the server allocated {peak} bytes for a {size}-byte size prefix"
    assert _healthy(server)


def test_a_frame_at_the_limit_is_read_whole(server):
    # MAX_REQUEST bytes: an ApiVersions request padded with an unknown tagged field is still decoded.
    req = bytearray(_api_versions(5))
    assert req[-1] == 0  # the body's (empty) tagged fields
    pad = MAX_REQUEST - len(req)  # the frame drops the prefix and the tags byte, adds count, tag, 3-byte size
    tag = bytearray(b"\x01\x63")  # one tagged field, tag 99 (unknown: skipped)
    _put_uvarint = protocol.api.P.write_uvarint
    _put_uvarint(tag, pad)
    frame = bytes(req[4:-1]) + bytes(tag) + b"\x00" * pad
    assert len(frame) == MAX_REQUEST
    with socket.create_connection(_addr(server), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        resp = _recv_frame(s)
    assert resp is not None
    corr, body = parse_response(18, 3, resp)
    assert corr == 5 and body["error_code"] == 0


@pytest.mark.parametrize("size", [-1, -2, -0x80000000])
def test_a_negative_size_closes_the_connection(server, size):
    with socket.create_connection(_addr(server), timeout=10) as s:
        s.sendall(struct.pack(">i", size) + b"\x00" * 16)
        assert _closed_by_server(s)
    assert _healthy(server)


# ------------------------------------------------------------------------------------------ disconnects

@pytest.mark.parametrize("cut", [1, 3, 4, 10, "half", "all-but-one"])
@pytest.mark.parametrize("reset", [False, True])
def test_a_client_that_disconnects_mid_produce_appends_nothing(server, store, cut, reset):
    frame = _produce([b"partial-%d" % i for i in range(5)])
    n = {"half": len(frame) // 2, "all-but-one": len(frame) - 1}.get(cut, cut)
    s = socket.create_connection(_addr(server), timeout=10)
    s.sendall(frame[:n])
    if reset:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
    s.close()
    _wait(lambda: _connections(server) == 0)
    assert _healthy(server)
    # A whole produce afterwards is appended and answered; nothing of the cut one is stored.
    with socket.create_connection(_addr(server), timeout=10) as s2:
        s2.sendall(_produce([b"whole-0", b"whole-1"]))
        resp = _recv_frame(s2)
    body = parse_response(0, 7, resp)[1]
    assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert _stored_values(store) == [b"whole-0", b"whole-1"]
    assert store.topic("t").partition(0).check() == []


def test_a_client_that_disconnects_before_its_answer_loses_only_the_answer(server, store):
    # The whole produce arrived: it is appended whole (or not at all) even though nobody reads the answer.
    s = socket.create_connection(_addr(server), timeout=10)
    s.sendall(_produce([b"a", b"b", b"c"], acks=-1))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    _wait(lambda: _connections(server) == 0)
    assert _healthy(server)
    assert _stored_values(store) in ([], [b"a", b"b", b"c"])
    assert store.topic("t").partition(0).check() == []


def test_a_thousand_connections_opened_and_dropped_mid_request(server, store):
    frame = _produce([b"dropped"])
    errors = []

    def client(k):
        try:
            for i in range(k, 1000, 8):
                s = socket.create_connection(_addr(server), timeout=10)
                if i % 3:
                    s.sendall(frame[:i % len(frame)] if i % 3 == 1 else struct.pack(">i", 100) + b"\x00" * (i % 50))
                if i % 2:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
        except OSError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    _wait(lambda: _connections(server) == 0)
    assert _healthy(server)
    assert _stored_values(store) == []


# ------------------------------------------------------------------------------------------ bad requests

def test_garbage_after_a_valid_request_gets_the_answer_then_a_closed_connection(server, store):
    with socket.create_connection(_addr(server), timeout=10) as s:
        s.sendall(_produce([b"kept"], corr=42) + struct.pack(">i", 12) + b"\xde\xad\xbe\xef" * 3)
        resp = _recv_frame(s)
        assert resp is not None and parse_response(0, 7, resp)[0] == 42
        assert _closed_by_server(s)
    assert _stored_values(store) == [b"kept"]
    assert _healthy(server)


@pytest.mark.parametrize("api_key", [-1, 4, 57, 1000, 0x7FFF])
def test_an_unknown_api_key_closes_the_connection(server, api_key):
    with socket.create_connection(_addr(server), timeout=10) as s:
        frame = struct.pack(">hhih", api_key, 0, 9, -1) + b"\x00" * 8
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert _closed_by_server(s)
    assert _healthy(server)


def test_an_unserved_version_of_another_api_closes_the_connection(server):
    with socket.create_connection(_addr(server), timeout=10) as s:
        frame = struct.pack(">hhih", 3, 99, 9, -1) + b"\x00" * 8  # Metadata v99
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert _closed_by_server(s)
    assert _healthy(server)


@pytest.mark.parametrize("version", [5, 99, 0x7FFF, -1])
def test_api_versions_in_a_version_not_served_is_answered_with_unsupported_version(server, version):
    # Kafka answers with ApiVersions v0 holding UNSUPPORTED_VERSION and its versions; the client retries.
    with socket.create_connection(_addr(server), timeout=10) as s:
        frame = struct.pack(">hhih", 18, version, 77, 6) + b"client" + b"\x00" * 5
        s.sendall(struct.pack(">i", len(frame)) + frame)
        resp = _recv_frame(s)
        assert resp is not None
        corr, body = parse_response(18, 0, resp)
        assert corr == 77
        assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert keys[18] == protocol.supported_versions()[18]
        assert keys == protocol.supported_versions()
        # The connection stays open: the retry in a served version is answered on it.
        s.sendall(_api_versions(78))
        resp = _recv_frame(s)
        assert parse_response(18, 3, resp)[0] == 78


def test_a_truncated_request_body_closes_the_connection(server):
    frame = _produce([b"x"])[4:]
    for cut in (3, 8, 12, len(frame) - 1):
        with socket.create_connection(_addr(server), timeout=10) as s:
            s.sendall(struct.pack(">i", cut) + frame[:cut])
            assert _closed_by_server(s)
    assert _healthy(server)


# ------------------------------------------------------------------------------------------ SASL

@pytest.fixture
def sasl_server(store):
    creds = Credentials({"alice": "alice-secret"}, iterations=4096)
    with pylog.serve(store, port=0, sasl_credentials=creds, sasl_mechanisms=["PLAIN"],
                     auto_create_topics=False) as srv:
        yield srv


def test_a_request_before_sasl_authentication_closes_the_connection(sasl_server, store):
    with socket.create_connection(_addr(sasl_server), timeout=10) as s:
        s.sendall(_api_versions(1))  # allowed before authentication
        assert parse_response(18, 3, _recv_frame(s))[1]["error_code"] == 0
        s.sendall(_produce([b"unauthenticated"]))
        assert _closed_by_server(s)
    with socket.create_connection(_addr(sasl_server), timeout=10) as s:
        s.sendall(encode_request(3, 1, 2, "hostile", {"topics": None}))
        assert _closed_by_server(s)
    assert _stored_values(store) == []


def test_before_sasl_authentication_frames_are_capped_at_512_kib(sasl_server):
    with socket.create_connection(_addr(sasl_server), timeout=10) as s:
        s.sendall(struct.pack(">i", 512 * 1024 + 1) + b"\x00" * 64)
        assert _closed_by_server(s)


def test_a_plain_login_then_requests_are_served(sasl_server):
    with socket.create_connection(_addr(sasl_server), timeout=10) as s:
        s.sendall(encode_request(17, 1, 1, "hostile", {"mechanism": "PLAIN"}))
        assert parse_response(17, 1, _recv_frame(s))[1]["error_code"] == 0
        s.sendall(encode_request(36, 1, 2, "hostile", {"auth_bytes": b"\x00alice\x00alice-secret"}))
        assert parse_response(36, 1, _recv_frame(s))[1]["error_code"] == 0
        s.sendall(encode_request(3, 1, 3, "hostile", {"topics": [{"name": "t"}]}))
        assert parse_response(3, 1, _recv_frame(s))[1]["topics"][0]["error_code"] == 0


# ------------------------------------------------------------------------------------------ amplification

def test_decoding_costs_at_most_about_thirty_times_the_frame_plus_a_megabyte():
    # The worst shape: a compact array of 3-byte structs (Produce v9 topic_data entries with an empty name and no
    # partitions) decodes to a dict each, ~83 bytes of Python objects per byte. parse_request allows 4,096
    # structures plus one per 8 bytes of frame (schema.struct_budget): the most a request can cost is then
    # about 31 times its size plus ~1 MB. Here a 1 MiB records blob pads the frame so the budget allows the most
    # structures it ever does; more than that is refused before they are decoded.
    from pylog.errors import ProtocolError
    from pylog.server.protocol import parse_request
    from pylog.server.protocol import primitives as P

    pad = {"name": "t", "partition_data": [{"index": 0, "records": b"\0" * (1 << 20)}]}

    # Build: [header][tx id][acks][timeout][topic_data count][padded topic][n tiny topics][tags]
    base = bytearray(encode_request(0, 9, 1, None, {"transactional_id": None, "acks": 1, "timeout_ms": 1,
                                                     "topic_data": []})[4:-2])
    padded = bytearray(encode_request(0, 9, 1, None, {"transactional_id": None, "acks": 1, "timeout_ms": 1,
                                                       "topic_data": [pad]})[4:])
    padded_topic = padded[len(base) + 1:-1]  # between the count (1 byte: 2) and the body's tags

    def build(n):
        frame = bytearray(base)
        P.write_uvarint(frame, n + 2)
        frame += padded_topic + b"\x01\x01\x00" * n + b"\x00"
        return frame

    size = len(build(0))
    most = int((4096 + size / 8) / (1 - 3 / 8))  # solves n + 1 <= 4096 + (size + 3n) / 8
    ok = build(most - 50)
    tracemalloc.start()
    try:
        req = parse_request(ok)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(req.body["topic_data"]) == most - 50 + 1
    assert peak < 35 * len(ok) + (2 << 20), f"{peak} bytes traced decoding a {len(ok)}-byte frame"
    with pytest.raises(ProtocolError, match="structures"):
        parse_request(build(most + 50))
