"""``pylog serve``'s limits for a server others can reach: idle connections are closed after
``connections_max_idle_ms`` (Kafka's ``connections.max.idle.ms``), but never in the middle of a long poll;
CreateTopics and CreatePartitions give a topic at most ``max_partitions_per_topic`` partitions; the memory
pool (``queued_max_request_bytes``), partial frames reaped (``request_receive_timeout_ms``), clients that do
not read their answers closed (``response_send_timeout_ms``), ``max_connections`` / ``max_connections_per_ip``,
``max_request_items``, the creation limits and the floors of topic configs set by clients (issue 24). The
latency and memory bounds under load are benchmarks/bench_hostile.py's."""

from __future__ import annotations

import socket
import struct
import time

import pytest

import pylog
from pylog.server.protocol import ErrorCode, encode_request, parse_response
from serverutil import recv_frame, wait_until

pytestmark = pytest.mark.slow


def _call(sock, api_key, version, body, corr=1):
    sock.sendall(encode_request(api_key, version, corr, "limits", body))
    frame = recv_frame(sock)
    assert frame is not None, "the server closed the connection"
    return parse_response(api_key, version, frame)[1]


def test_an_idle_connection_is_closed_but_not_during_a_long_poll(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("t")
        with pylog.serve(store, port=0, connections_max_idle_ms=300) as server:
            idle = socket.create_connection((server.host, server.port), timeout=10)
            polling = socket.create_connection((server.host, server.port), timeout=10)
            try:
                assert _call(idle, 18, 3, {"client_software_name": "t", "client_software_version": "1"})[
                    "error_code"] == 0
                # A fetch waiting 1.5 s at the log end: five idle limits long, answered, not cut.
                t0 = time.monotonic()
                out = _call(polling, 1, 11, {
                    "replica_id": -1, "max_wait_ms": 1500, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                    "rack_id": "", "topics": [{"topic": "t", "partitions": [
                        {"partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                         "partition_max_bytes": 1 << 20}]}]})
                assert time.monotonic() - t0 >= 1.4
                assert out["responses"][0]["partitions"][0]["error_code"] == 0
                # Meanwhile the idle one was closed (EOF).
                idle.settimeout(5)
                assert idle.recv(1) == b""
            finally:
                idle.close()
                polling.close()


def test_no_topic_gets_more_partitions_than_the_server_allows(tmp_path):
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions, NewTopic
    from kafka.errors import InvalidPartitionsError

    with pylog.open(tmp_path / "s") as store:
        with pylog.serve(store, port=0, max_partitions_per_topic=4) as server:
            admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
            try:
                with pytest.raises(InvalidPartitionsError):
                    admin.create_topics([NewTopic("big", num_partitions=5, replication_factor=1)])
                assert "big" not in store
                admin.create_topics([NewTopic("ok", num_partitions=4, replication_factor=1)])
                with pytest.raises(InvalidPartitionsError):
                    admin.create_partitions({"ok": NewPartitions(total_count=5)})
                assert store.topic("ok").num_partitions == 4
            finally:
                admin.close()
    with pytest.raises(pylog.InvalidArgumentError):
        pylog.serve(tmp_path / "s2", port=0, max_partitions_per_topic=0)


# ---------------------------------------------------------------------------------------------------- issue 24
# The memory pool (queued_max_request_bytes), the receive and send deadlines, the connection counts, the items a
# request may name, the creation limits and the floors of client-set topic configs. Raw sockets: what a hostile
# client sends, not what a client library would.

_API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


def _connect(server, timeout=10):
    return socket.create_connection((server.host, server.port), timeout=timeout)


def _closed_by_server(sock, timeout=10.0):
    """True when the server closes ``sock`` within ``timeout`` (EOF or reset), reading away what it sent."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(1 << 20):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


def _metadata(names, allow_create=True):
    return {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": allow_create,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}


def test_partial_frames_wait_for_the_memory_pool_and_small_requests_are_still_served(tmp_path):
    mib = 1 << 20
    with pylog.serve(tmp_path / "s", port=0, max_request_bytes=mib, queued_max_request_bytes=2 * mib,
                     request_receive_timeout_ms=0) as server:
        hostile = [_connect(server) for _ in range(6)]
        try:
            for s in hostile:  # each claims a 1 MiB request and sends 3/4 of it, never the rest
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
                s.setblocking(False)
                try:
                    s.send(struct.pack(">i", mib) + b"\0" * (3 * mib // 4))
                except BlockingIOError:
                    pass
            wait_until(lambda: server.resources()["pool_bytes_used"] >= mib, what="a frame in the pool")
            time.sleep(0.5)  # the bytes the others push meanwhile are not read (no handshake can show a non-read)
            res = server.resources()
            assert res["pool_bytes_used"] <= res["pool_bytes"] == 2 * mib
            with _connect(server) as ok:  # a small request fits in the pool's headroom
                assert _call(ok, 18, 3, _API_VERSIONS)["error_code"] == 0
        finally:
            for s in hostile:
                s.close()
        wait_until(lambda: server.resources()["pool_bytes_used"] == 0, what="the pool given back")


def test_a_request_not_received_whole_in_time_closes_the_connection(tmp_path):
    with pylog.serve(tmp_path / "s", port=0, request_receive_timeout_ms=300, connections_max_idle_ms=0) as server:
        with _connect(server) as partial, _connect(server) as slowloris, _connect(server) as idle:
            partial.sendall(struct.pack(">i", 100) + b"\0" * 10)
            slowloris.sendall(struct.pack(">i", 100))
            t0 = time.monotonic()
            closed = False
            while time.monotonic() - t0 < 10 and not closed:  # one byte per 50 ms: never whole in time
                try:
                    slowloris.sendall(b"\0")
                except OSError:
                    closed = True
                time.sleep(0.05)
            assert closed or _closed_by_server(slowloris)
            assert _closed_by_server(partial)
            # A connection with nothing under way is not affected by the deadline (only by the idle limit).
            assert _call(idle, 18, 3, _API_VERSIONS)["error_code"] == 0


def test_a_client_that_reads_none_of_its_fetch_answer_is_closed_and_its_bytes_given_back(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("t")
        with store.producer() as p:
            for _ in range(64):
                p.send("t", b"x" * (64 << 10))
        with pylog.serve(store, port=0, response_send_timeout_ms=500, connections_max_idle_ms=0) as server:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((server.host, server.port))
            fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": 0,
                     "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                     "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                               "log_start_offset": -1,
                                                               "partition_max_bytes": 8 << 20}]}]}
            try:
                for corr in range(3):
                    s.sendall(encode_request(1, 11, corr, "limits", fetch))
                wait_until(lambda: server.resources()["pool_bytes_used"] > 0, what="an answer in the pool")
                # Unread for 0.5 s: closed, and the answer's bytes are back in the pool.
                wait_until(lambda: server.resources()["connections"] == 0, what="the connection closed")
                wait_until(lambda: server.resources()["pool_bytes_used"] == 0, what="the pool given back")
                got = 0
                try:
                    s.settimeout(5)
                    while chunk := s.recv(1 << 20):
                        got += len(chunk)
                except OSError:
                    pass
                assert got < 3 * (4 << 20)  # not the three answers: the first was cut, the others never built
            finally:
                s.close()


@pytest.mark.parametrize("setting", ["max_connections", "max_connections_per_ip"])
def test_connections_beyond_the_limit_are_closed_at_accept(tmp_path, setting):
    with pylog.serve(tmp_path / "s", port=0, **{setting: 2}) as server:
        first, second = _connect(server), _connect(server)
        try:
            for s in (first, second):
                assert _call(s, 18, 3, _API_VERSIONS)["error_code"] == 0
            with _connect(server) as third:
                assert _closed_by_server(third)
            first.close()
            wait_until(lambda: server.resources()["connections"] == 1, what="the first connection gone")
            with _connect(server) as fourth:  # room again
                assert _call(fourth, 18, 3, _API_VERSIONS)["error_code"] == 0
        finally:
            first.close()
            second.close()


def test_a_request_naming_more_items_than_allowed_closes_the_connection(tmp_path):
    with pylog.serve(tmp_path / "s", port=0, max_request_items=100, auto_create_topics=False) as server:
        with _connect(server) as s:
            out = _call(s, 3, 9, _metadata([f"t{i}" for i in range(90)]))
            assert [t["error_code"] for t in out["topics"]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 90
            s.sendall(encode_request(3, 9, 2, "limits", _metadata([f"t{i}" for i in range(101)])))
            assert _closed_by_server(s)
        # A frame large enough to be decoded off the event loop: refused the same way.
        with _connect(server) as s:
            s.sendall(encode_request(3, 9, 3, "limits", _metadata([f"topic-{i:010d}" for i in range(20_000)])))
            assert _closed_by_server(s)


def test_auto_creation_is_bounded_per_request_and_in_total(tmp_path):
    with pylog.serve(tmp_path / "s", port=0, auto_create_topics_per_request=3, max_topics=5) as server:
        with _connect(server) as s:
            out = _call(s, 3, 9, _metadata([f"a{i}" for i in range(10)]))
            codes = [t["error_code"] for t in out["topics"]]
            assert codes == [0] * 3 + [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 7
            out = _call(s, 3, 9, _metadata([f"b{i}" for i in range(3)]), corr=2)
            codes = [t["error_code"] for t in out["topics"]]
            assert codes == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]  # five topics in all
            assert server.store.topics() == ["a0", "a1", "a2", "b0", "b1"]


def _create_topics(names, partitions, configs=()):
    return {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs]} for n in names],
            "timeout_ms": 1000, "validate_only": False}


def test_topic_and_partition_creation_is_rate_limited(tmp_path):
    # max_partitions_per_topic=4 and one partition per 100 s: a burst of 10 s worth, at least 4 partitions.
    with pylog.serve(tmp_path / "s", port=0, max_partitions_per_topic=4, controller_mutation_rate=0.01) as server:
        with _connect(server) as s:
            out = _call(s, 19, 5, _create_topics(["x", "y"], 2))
            assert [t["error_code"] for t in out["topics"]] == [0, 0]
            out = _call(s, 19, 5, _create_topics(["z"], 1), corr=2)
            assert out["topics"][0]["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            out = _call(s, 37, 1, {"topics": [{"name": "x", "count": 3, "assignments": None}], "timeout_ms": 1000,
                                   "validate_only": False}, corr=3)
            assert out["results"][0]["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            assert server.store.topics() == ["x", "y"]


def test_topic_deletion_is_rate_limited_like_creation(tmp_path):
    # KIP-599: DeleteTopics takes from the controller mutation quota too. A bucket of 4 partitions, one more per
    # 100 s: deleting a 4-partition topic empties it, so the next deletion is throttled and the topic kept.
    with pylog.serve(tmp_path / "s", port=0, max_partitions_per_topic=4, controller_mutation_rate=0.01) as server:
        server.store.create_topic("x", partitions=4)
        server.store.create_topic("y", partitions=1)
        with _connect(server) as s:
            out = _call(s, 20, 5, {"topic_names": ["x", "y"], "timeout_ms": 1000})
            assert [t["error_code"] for t in out["responses"]] == [0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
            assert "controller_mutation_rate" in out["responses"][1]["error_message"]
            assert server.store.topics() == ["y"]


def test_partitions_in_the_store_are_bounded(tmp_path):
    with pylog.serve(tmp_path / "s", port=0, max_partitions=5) as server:
        with _connect(server) as s:
            out = _call(s, 19, 5, _create_topics(["x", "y"], 3))
            assert [t["error_code"] for t in out["topics"]] == [0, ErrorCode.POLICY_VIOLATION]
            out = _call(s, 37, 1, {"topics": [{"name": "x", "count": 6, "assignments": None}], "timeout_ms": 1000,
                                   "validate_only": False}, corr=2)
            assert out["results"][0]["error_code"] == ErrorCode.POLICY_VIOLATION
            assert server.store.topic("x").num_partitions == 3


@pytest.mark.parametrize("key,low,ok", [("segment.bytes", "14", str(1 << 20)), ("segment.ms", "1", "60000"),
                                        ("segment.index.bytes", "4096", "65536"),
                                        ("max.compaction.lag.ms", "1", "60000")])
def test_topic_configs_from_clients_have_floors(tmp_path, key, low, ok):
    with pylog.serve(tmp_path / "s", port=0) as server:
        with _connect(server) as s:
            out = _call(s, 19, 5, _create_topics(["small"], 1, [(key, low)]))
            assert out["topics"][0]["error_code"] == ErrorCode.INVALID_CONFIG
            assert "small" not in server.store
            out = _call(s, 19, 5, _create_topics(["t"], 1, [(key, ok)]), corr=2)
            assert out["topics"][0]["error_code"] == 0
            alter = {"resources": [{"resource_type": 2, "resource_name": "t",
                                    "configs": [{"name": key, "value": low}]}], "validate_only": False}
            assert _call(s, 33, 1, alter, corr=3)["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
            inc = {"resources": [{"resource_type": 2, "resource_name": "t",
                                  "configs": [{"name": key, "config_operation": 0, "value": low}]}],
                   "validate_only": False}
            assert _call(s, 44, 1, inc, corr=4)["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
            assert server.store.topic("t").config[key] == int(ok)


def test_a_large_request_and_its_large_answer_go_through_the_decoder_thread_whole(tmp_path):
    # 6,000 names: a frame over 64 KiB (decoded off the event loop) and an answer of more than 5,000 items
    # (encoded off it): both whole and in order.
    names = [f"missing-{i:06d}" for i in range(6000)]
    with pylog.serve(tmp_path / "s", port=0, auto_create_topics=False) as server:
        with _connect(server) as s:
            out = _call(s, 3, 9, _metadata(names))
            assert [t["name"] for t in out["topics"]] == names
            assert {t["error_code"] for t in out["topics"]} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            assert _call(s, 18, 3, _API_VERSIONS, corr=2)["error_code"] == 0


def test_auto_creation_is_bounded_by_the_creation_rate(tmp_path):
    # A burst of 2 partitions (max_partitions_per_topic), then one per 100 s: the third topic waits.
    with pylog.serve(tmp_path / "s", port=0, max_partitions_per_topic=2, controller_mutation_rate=0.01) as server:
        with _connect(server) as s:
            out = _call(s, 3, 9, _metadata(["r0", "r1", "r2"]))
            assert [t["error_code"] for t in out["topics"]] == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            assert server.store.topics() == ["r0", "r1"]


def test_pipelined_requests_whose_answers_are_not_read_hold_a_bounded_part_of_the_pool(tmp_path):
    # Pool 2 MiB: a connection queues at most a 32nd of it (64 KiB) beyond what one socket read brings.
    mib = 1 << 20
    with pylog.serve(tmp_path / "s", port=0, max_request_bytes=mib, queued_max_request_bytes=2 * mib) as server:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((server.host, server.port))
        try:
            s.setblocking(False)
            burst = b"".join(encode_request(18, 3, i, "limits", _API_VERSIONS) for i in range(60_000))
            try:
                s.send(burst)  # ~2.6 MB of ApiVersions, never an answer read
            except BlockingIOError:
                pass
            wait_until(lambda: server.resources()["pool_bytes_used"] > 0, what="requests in the pool")
            time.sleep(0.5)  # let the server read all it will (no handshake can show that it stopped)
            assert server.resources()["pool_bytes_used"] <= 512 << 10
            with _connect(server) as ok:
                assert _call(ok, 18, 3, _API_VERSIONS)["error_code"] == 0
        finally:
            s.close()


def test_the_memory_pool_keeps_room_for_answers_and_small_requests():
    from pylog.server.limits import BytePool

    mib = 1 << 20
    pool = BytePool(128 * mib, largest=100 * mib)  # the defaults: large requests leave 28 MiB, answers 14 MiB
    assert pool.try_take(100 * mib)  # one request as large as allowed fits
    assert not pool.try_take(1 * mib)  # another large one does not: it waits
    woken = []
    pool.when_free(lambda: woken.append(True))
    assert pool.take_up_to(55 * mib, at_least=mib) == 14 * mib  # an answer gets the band requests leave
    assert pool.take_up_to(55 * mib, at_least=mib) == 0
    assert pool.try_take(64 << 10)  # small requests still fit
    pool.give(100 * mib)
    assert woken == [True] and pool.used == 14 * mib + (64 << 10)
    empty = BytePool(8 * mib)
    assert empty.try_take(8 * mib) and empty.used == 8 * mib  # an empty pool takes anything up to its size


def test_the_pool_is_given_back_once_pipelined_produce_answers_are_sent(tmp_path):
    # Produce answers owed until their appends and fsyncs are done keep their request's bytes in the pool
    # until then, and give them back after: nothing stays held.
    from kafka import KafkaProducer

    with pylog.serve(tmp_path / "s", port=0) as server:
        producer = KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks="all", linger_ms=5)
        try:
            futures = [producer.send(f"p{i % 4}", b"x" * 1000) for i in range(400)]
            producer.flush(60)
            assert all(f.get(timeout=60).offset >= 0 for f in futures)
        finally:
            producer.close()
        wait_until(lambda: server.resources()["pool_bytes_used"] == 0, what="the pool given back")


def _join_v3(group):
    return {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"m"}]}


def test_group_members_and_commit_metadata_are_bounded_by_the_server_settings(tmp_path):
    # Kafka's group.max.size and offset.metadata.max.bytes, given to pylog serve.
    with pylog.serve(tmp_path / "s", port=0, group_max_size=1, offset_metadata_max_bytes=8) as server:
        server.store.create_topic("t", partitions=1)
        with _connect(server) as first, _connect(server) as second:
            first.sendall(encode_request(11, 3, 1, "limits", _join_v3("g")))
            wait_until(lambda: _call(second, 15, 0, {"groups": ["g"]}, corr=9)["groups"][0]["group_state"]
                       == "PreparingRebalance")
            assert _call(second, 11, 3, _join_v3("g"))["error_code"] == ErrorCode.GROUP_MAX_SIZE_REACHED
            assert parse_response(11, 3, recv_frame(first))[1]["error_code"] == 0
            for corr, (metadata, code) in enumerate((("x" * 8, 0), ("x" * 9, ErrorCode.OFFSET_METADATA_TOO_LARGE))):
                commit = {"group_id": "s", "generation_id": -1, "member_id": "", "retention_time_ms": -1,
                          "topics": [{"name": "t", "partitions": [
                              {"partition_index": 0, "committed_offset": 0, "committed_metadata": metadata}]}]}
                assert _call(second, 8, 2, commit, corr=2 + corr)["topics"][0]["partitions"][0]["error_code"] == code


def test_a_kafka_python_consumer_refused_by_max_groups_reports_it_instead_of_retrying(tmp_path):
    kafka = pytest.importorskip("kafka")
    with pylog.serve(tmp_path / "s", port=0, max_groups=1) as server:
        server.store.create_topic("t", partitions=1)
        with _connect(server) as s:  # a pending member (never joining again) holds the one group
            held = dict(_join_v3("held"), group_instance_id=None)
            assert _call(s, 11, 5, held)["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
            consumer = kafka.KafkaConsumer("t", bootstrap_servers=f"{server.host}:{server.port}", group_id="other",
                                           api_version=(2, 5))
            try:
                with pytest.raises(kafka.errors.GroupMaxSizeReachedError):
                    consumer.poll(timeout_ms=10_000)
            finally:
                consumer.close()


def test_connections_get_the_configured_receive_buffer_and_large_produces_still_go_through(tmp_path):
    # Kafka's socket.receive.buffer.bytes: set on the listening socket, so each accepted one has it (the kernel
    # reports twice the value asked for); a 1 MiB acks=all batch from confluent-kafka arrives whole through it.
    import shutil
    import subprocess

    confluent_kafka = pytest.importorskip("confluent_kafka")
    with pytest.raises(pylog.errors.InvalidArgumentError):
        pylog.serve(tmp_path / "bad", port=0, socket_receive_buffer_bytes=10)
    with pylog.serve(tmp_path / "s", port=0, socket_receive_buffer_bytes=8192) as server:
        server.store.create_topic("t")
        producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers, "acks": "all",
                                             "linger.ms": 20, "message.max.bytes": 4 << 20})
        values = [bytes([i]) * 4000 for i in range(256)]  # ~1 MiB in one batch
        for value in values:
            producer.produce("t", value)
        assert producer.flush(60) == 0
        if shutil.which("ss"):
            with _connect(server):
                out = subprocess.run(["ss", "-tmn", f"sport = :{server.port}"], capture_output=True, text=True,
                                     timeout=30).stdout
            assert "rb16384" in out, out
        assert [r.value for r in server.store.topic("t").partition(0).read(0, 300)] == values
