"""Review of ``pylog serve``: each test here shows one problem found in the review (it fails until fixed).

Everything binds 127.0.0.1, writes under tmp_path and has bounded timeouts.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

import pylog
from pylog.server.protocol import encode_request, parse_response



from serverutil import kafka_batch as _batch, recv_exact as _recv_exact, recv_frame as _recv_frame  # noqa: E402


def _call(srv, api_key, version, body, timeout=10.0, corr=1):
    with socket.create_connection((srv.host, srv.port), timeout=timeout) as s:
        s.sendall(encode_request(api_key, version, corr, "review", body))
        frame = _recv_frame(s)
    assert frame is not None, "the server closed the connection"
    got_corr, out = parse_response(api_key, version, frame)
    assert got_corr == corr
    return out


def _produce_body(topic, values, acks=1, **producer):
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": _batch(values, **producer)}]}]}


def _fetch_body(topic, offset, *, max_wait_ms, min_bytes, partition_max_bytes=1 << 20, max_bytes=50 << 20):
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                          "log_start_offset": -1,
                                                          "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


@pytest.fixture
def store(tmp_path):
    s = pylog.open(tmp_path / "store")
    s.create_topic("t", partitions=1)
    yield s
    s.close()


@pytest.fixture
def server(store):
    with pylog.serve(store, port=0, auto_create_topics=False, shutdown_timeout_s=5) as srv:
        yield srv


# ------------------------------------------------------------------------------------------ Fetch


def test_a_fetch_with_partition_max_bytes_0_does_not_freeze_the_event_loop(server, store):
    """A partition with data but a zero byte budget is put in ``wants`` at an offset below its log end, so
    FetchWaiters.wait returns True at once (without awaiting) and DataHandlers.fetch spins synchronously on the
    event loop until max_wait_ms: every other connection of the server is frozen meanwhile."""
    assert _call(server, 0, 7, _produce_body("t", [b"x" * 100]))["responses"][0]["partition_responses"][0][
        "error_code"] == 0
    hog = socket.create_connection((server.host, server.port), timeout=10)
    try:
        hog.sendall(encode_request(1, 11, 5, "hog", _fetch_body("t", 0, max_wait_ms=4000, min_bytes=1,
                                                               partition_max_bytes=0)))
        time.sleep(0.3)  # the fetch is being handled now
        t0 = time.monotonic()
        out = _call(server, 18, 3, {"client_software_name": "t", "client_software_version": "1"}, timeout=10)
        elapsed = time.monotonic() - t0
        assert out["error_code"] == 0
        assert elapsed < 1.0, f"an ApiVersions on another connection took {elapsed:.1f} s: the loop was blocked"
    finally:
        hog.close()


def test_a_fetch_waits_for_min_bytes_even_when_every_partition_has_a_little(server, store):
    """Kafka answers a Fetch when min_bytes are available or max_wait_ms passed. pylog answers at once when
    every partition returned *something*, however far below min_bytes (``wants`` is empty), so a consumer with
    ``fetch.min.bytes`` set for batching polls in a tight loop on a trickle of records."""
    _call(server, 0, 7, _produce_body("t", [b"small"]))
    t0 = time.monotonic()
    out = _call(server, 1, 11, _fetch_body("t", 0, max_wait_ms=1500, min_bytes=1 << 20))
    elapsed = time.monotonic() - t0
    assert out["responses"][0]["partitions"][0]["error_code"] == 0
    assert elapsed >= 1.2, f"answered after {elapsed:.2f} s with far less than min_bytes (max_wait_ms 1500)"


def test_a_clean_stop_does_not_wait_for_a_long_poll_fetch(store):
    """Server.close() lets connections finish their request, but a long-poll Fetch is not woken: the stop
    takes the fetch's whole max_wait_ms (capped by shutdown_timeout_s, 10 s by default: Ctrl-C on `pylog
    serve` with a consumer attached hangs that long). Kafka answers or drops delayed fetches on shutdown."""
    srv = pylog.serve(store, port=0, shutdown_timeout_s=8)
    sock = socket.create_connection((srv.host, srv.port), timeout=15)
    try:
        sock.sendall(encode_request(1, 11, 3, "lp", _fetch_body("t", 0, max_wait_ms=30000, min_bytes=1)))
        time.sleep(0.3)
        t0 = time.monotonic()
        srv.close()
        elapsed = time.monotonic() - t0
        assert elapsed < 2.0, f"close() took {elapsed:.1f} s waiting for a long-poll fetch"
    finally:
        sock.close()
        srv.close()


# ------------------------------------------------------------------------------------------ AlterConfigs


def test_alter_configs_returns_omitted_keys_to_the_stores_defaults(tmp_path):
    """AlterConfigs (non-incremental) removes the overrides it does not name. pylog 'resets' them by writing
    SETTINGS[k].default as a new *override*: the topic gets the library's default instead of the store's
    default, and DescribeConfigs keeps reporting the key as a topic override."""
    store = pylog.open(tmp_path / "store", retention_ms=3_600_000)
    try:
        store.create_topic("t", partitions=1, config={"retention.ms": 1000})
        with pylog.serve(store, port=0) as srv:
            out = _call(srv, 33, 1, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
                {"name": "cleanup.policy", "value": "delete"}]}], "validate_only": False})
            assert out["responses"][0]["error_code"] == 0
            cfg = store.topic("t").config
            assert cfg["retention.ms"] == 3_600_000, "retention.ms should fall back to the store's default"
            assert not cfg.is_override("retention.ms")
    finally:
        store.close()


# ------------------------------------------------------------------------------------------ InitProducerId


def test_init_producer_id_does_not_hand_out_an_id_it_never_issued(server, store):
    """For a non-transactional InitProducerId, Kafka always issues a new producer id. pylog echoes whatever
    (producer_id, epoch) the client sends, epoch + 1, without checking the id was ever issued: a client (a
    stale one after the store was replaced, or any buggy one) takes an id that new_producer_id() hands to
    the next producer, which is then fenced (INVALID_PRODUCER_EPOCH) on its first send."""
    first = _call(server, 22, 3, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert first["error_code"] == 0
    claimed = first["producer_id"] + 1000  # not issued yet (ids are handed out in order: the next is first + 1)
    grabbed = _call(server, 22, 3, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                    "producer_id": claimed, "producer_epoch": 4})
    assert grabbed["error_code"] == 0
    assert grabbed["producer_id"] != claimed, "an id never issued by the store was accepted"
    # The consequence, if it was accepted: the rightful owner of that id is fenced.
    out = _call(server, 0, 7, _produce_body("t", [b"a"], producer_id=grabbed["producer_id"],
                                            epoch=grabbed["producer_epoch"], base_sequence=0))
    assert out["responses"][0]["partition_responses"][0]["error_code"] == 0
    fresh = _call(server, 22, 3, {"transactional_id": None, "transaction_timeout_ms": 60000})
    out = _call(server, 0, 7, _produce_body("t", [b"b"], producer_id=fresh["producer_id"],
                                            epoch=fresh["producer_epoch"], base_sequence=0))
    assert out["responses"][0]["partition_responses"][0]["error_code"] == 0


def test_a_fetch_response_is_capped_by_a_server_side_limit(tmp_path):
    """Kafka caps every Fetch response with the broker's ``fetch.max.bytes`` (55 MiB by default, KIP-541),
    whatever max_bytes / partition_max_bytes the client asks for. pylog has no such cap: one request with
    max_bytes = partition_max_bytes = 2**31-1 makes the server build (on the event loop) and buffer in the
    transport a response as large as the partition, up to 2 GiB per connection. The documented bound on a
    connection's memory ("frame limit + 16 MiB + the socket buffer") does not hold."""
    store = pylog.open(tmp_path / "store")
    try:
        store.create_topic("big", partitions=1)
        with store.producer(linger_ms=0) as p:
            for _ in range(140):
                p.send("big", b"x" * 500_000)
            p.flush()
        with pylog.serve(store, port=0) as srv:
            with socket.create_connection((srv.host, srv.port), timeout=30) as s:
                s.sendall(encode_request(1, 11, 1, "big", _fetch_body("big", 0, max_wait_ms=0, min_bytes=1,
                                                                      partition_max_bytes=0x7FFFFFFF,
                                                                      max_bytes=0x7FFFFFFF)))
                head = _recv_exact(s, 4)
                size = struct.unpack(">i", head)[0]
        assert size <= 57_671_680 + (1 << 20), f"a single fetch response of {size / 2**20:.0f} MiB"
    finally:
        store.close()


def test_a_clean_stop_does_not_wait_for_a_pending_join_group(store):
    """Same ordering problem as the long-poll fetch: _shutdown waits for every connection's request *before*
    coordinator.close(), the call that answers waiting JoinGroups/SyncGroups with NOT_COORDINATOR; a JoinGroup
    parked in a rebalance (up to the client's rebalance timeout, 5 min for the Java client) holds the stop for
    all of shutdown_timeout_s."""
    srv = pylog.serve(store, port=0, shutdown_timeout_s=8, group_initial_rebalance_delay_ms=30000)
    sock = socket.create_connection((srv.host, srv.port), timeout=15)
    try:
        sock.sendall(encode_request(11, 3, 4, "j", {
            "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 60000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}))
        time.sleep(0.3)
        t0 = time.monotonic()
        srv.close()
        elapsed = time.monotonic() - t0
        assert elapsed < 2.0, f"close() took {elapsed:.1f} s waiting for a JoinGroup in a rebalance"
    finally:
        sock.close()
        srv.close()


def test_an_acks_0_produce_that_fails_closes_the_connection(server, store):
    """Kafka (KafkaApis.handleProduceRequest): with acks=0 there is no response, so when any partition failed
    the broker closes the connection: the producer notices, refreshes its metadata and its later sends fail
    instead of vanishing. pylog drops the error silently and keeps the connection: an acks=0 producer
    writing to a deleted or mistyped topic loses every record without any sign."""
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(encode_request(0, 7, 1, "a0", _produce_body("no-such-topic", [b"lost"], acks=0)))
        s.settimeout(3)
        try:
            got = s.recv(65536)
        except socket.timeout:
            got = None
        except ConnectionResetError:
            got = b""
        assert got == b"", "the connection stayed open after a failed acks=0 produce"


def test_a_produce_with_two_batches_for_one_partition_is_refused_whole(server, store):
    """Kafka's rule for Produce v3+: exactly one record batch per partition. Two appended in turn could not be
    answered truthfully when the second failed after the first landed (a retry would duplicate the first)."""
    body = _produce_body("t", [b"a"])
    body["topic_data"][0]["partition_data"][0]["records"] = _batch([b"a"]) + _batch([b"b"])
    out = _call(server, 0, 7, body)
    assert out["responses"][0]["partition_responses"][0]["error_code"] == 87  # INVALID_RECORD
    assert store.topic("t").partition(0).log_end_offset == 0


def test_create_partitions_validate_only_refuses_internal_topics_as_the_real_call_does(server, store):
    store.commit_offsets("g", {pylog.TopicPartition("t", 0): 0})  # makes __consumer_offsets
    body = {"topics": [{"name": "__consumer_offsets", "count": 99, "assignments": None}], "timeout_ms": 5000}
    for validate_only in (True, False):
        out = _call(server, 37, 3, {**body, "validate_only": validate_only})
        assert out["results"][0]["error_code"] == 17  # INVALID_TOPIC_EXCEPTION
