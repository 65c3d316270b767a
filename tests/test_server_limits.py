"""``pylog serve``'s limits for a server others can reach: idle connections are closed after
``connections_max_idle_ms`` (Kafka's ``connections.max.idle.ms``), but never in the middle of a long poll;
CreateTopics and CreatePartitions give a topic at most ``max_partitions_per_topic`` partitions."""

from __future__ import annotations

import socket
import time

import pytest

import pylog
from pylog.server.protocol import encode_request, parse_response
from serverutil import recv_frame

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
