"""Client quotas in ``pylog serve``: a client over its produce or fetch byte rate (per user, per client id) gets
its responses delayed and a ``throttle_time_ms`` saying by how much, as from a Kafka broker; clients without a
quota are not slowed; the entity precedence is Kafka's; bad quota settings are refused at start."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

import pylog
from pylog.errors import CorruptRecordError, InvalidConfigError
from pylog.server.auth import Credentials
from pylog.server.protocol import encode_request, parse_request, parse_response
from pylog.server.quotas import MAX_BUDGETS, ServerQuotas
from serverutil import kafka_batch, recv_frame

pytestmark = pytest.mark.slow

VALUE = b"x" * 10_000


class Raw:
    def __init__(self, server, client_id, user=None, password=None):
        self.sock = socket.create_connection((server.host, server.port), timeout=30)
        self.client_id = client_id
        self.corr = 0
        if user is not None:
            assert self.call(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            token = b"\0" + user.encode() + b"\0" + password.encode()
            assert self.call(36, 0, {"auth_bytes": token})["error_code"] == 0

    def call(self, key, version, body):
        self.corr += 1
        self.sock.sendall(encode_request(key, version, self.corr, self.client_id, body))
        frame = recv_frame(self.sock)
        assert frame is not None
        return parse_response(key, version, frame)[1]

    def produce(self, topic, n=5):
        out = self.call(0, 7, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": kafka_batch([VALUE] * n)}]}]})
        assert out["responses"][0]["partition_responses"][0]["error_code"] == 0
        return out["throttle_time_ms"]

    def fetch(self, topic, offset=0):
        out = self.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                "forgotten_topics_data": [], "rack_id": "", "topics": [{"topic": topic, "partitions": [
                                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
        assert out["responses"][0]["partitions"][0]["error_code"] == 0
        return out["throttle_time_ms"]

    def close(self):
        self.sock.close()


def test_a_producer_over_its_byte_rate_is_delayed_and_told_so(tmp_path):
    # 50 KB per request against 100 KB/s, over a window of 2 x 0.25 s (a burst allowance of 25 KB): ten
    # requests (500 KB) take at least ~4.5 s of throttling; an unthrottled client id is not slowed.
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("t")
        with pylog.serve(store, port=0, quotas={"client-id=slow": {"producer_byte_rate": 100_000}},
                         quota_window_num=2, quota_window_size_s=0.25) as server:
            slow, free = Raw(server, "slow"), Raw(server, "free")
            try:
                t0 = time.monotonic()
                throttles = [slow.produce("t") for _ in range(10)]
                elapsed = time.monotonic() - t0
                assert sum(throttles) > 0 and max(throttles) <= 500  # capped at the window (Kafka's cap)
                assert elapsed >= sum(throttles) / 1000 * 0.9  # the responses were held back that long
                assert elapsed >= 2.0  # 500 KB at 100 KB/s, minus the burst and the caps: well above 2 s
                assert [free.produce("t") for _ in range(10)] == [0] * 10
            finally:
                slow.close()
                free.close()
        assert store.topic("t").partition(0).log_end_offset == 100  # delayed, never refused


class _Peer:
    """What the quota wrapper reads of a connection: who logged in."""
    principal = "alice"


def test_a_pending_produce_answer_is_handed_on_unless_the_quota_delays_it():
    # A Produce answered once fsynced returns its answer pending; measured and not over its quota, it goes to the
    # connection still pending (which keeps reading requests: the appends group-commit); over the quota, the
    # wrapper waits for it, sets its throttle time and holds it (and the connection) back.
    frame = encode_request(0, 7, 1, "etl", {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": kafka_batch([b"x" * 1000])}]}]})
    req = parse_request(bytearray(frame[4:]))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pending: asyncio.Future[dict] = loop.create_future()

        async def produce(req, conn):
            return pending

        roomy = ServerQuotas({"user=alice": {"producer_byte_rate": 1e12, "request_percentage": 1e9}})
        handed = await asyncio.wait_for(roomy.wrap({0: produce})[0](req, _Peer()), 5)  # never waits for it
        assert handed is pending and not pending.done()
        assert roomy.manager.observed_rate("user=alice", "produce") > 0  # measured all the same

        tight = ServerQuotas({"user=alice": {"producer_byte_rate": 10.0}}, window_num=2, window_size_s=0.05)
        loop.call_soon(pending.set_result, {"throttle_time_ms": 0, "responses": []})
        t0 = time.monotonic()
        resp = await tight.wrap({0: produce})[0](req, _Peer())
        assert isinstance(resp, dict) and resp["throttle_time_ms"] == 100  # capped at the window (0.1 s)
        assert time.monotonic() - t0 >= 0.09
    asyncio.run(scenario())


def test_a_consumer_over_its_byte_rate_is_delayed_per_user(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("t")
        with store.producer() as p:
            for _ in range(50):
                p.send("t", VALUE)
        creds = Credentials({"alice": "a-secret", "bob": "b-secret"})
        with pylog.serve(store, port=0, sasl_credentials=creds, sasl_mechanisms=["PLAIN"],
                         quotas={"user=alice": {"consumer_byte_rate": 100_000}},
                         quota_window_num=2, quota_window_size_s=0.25) as server:
            alice, bob = Raw(server, "any", "alice", "a-secret"), Raw(server, "any", "bob", "b-secret")
            try:
                assert sum(alice.fetch("t") for _ in range(3)) > 0
                assert [bob.fetch("t") for _ in range(3)] == [0, 0, 0]
            finally:
                alice.close()
                bob.close()


def test_the_most_specific_entity_sets_each_quota_as_in_kafka():
    q = ServerQuotas({"user=<default>": {"producer_byte_rate": 1},
                      "user=alice": {"producer_byte_rate": 2},
                      "user=alice,client-id=etl": {"consumer_byte_rate": 3},
                      "client-id=<default>": {"request_percentage": 50}})
    assert q.key("alice", "etl", "produce") == "user=alice"
    assert q.key("alice", "etl", "consume") == "user=alice,client-id=etl"
    assert q.key("alice", "web", "consume") is None
    assert q.key("bob", "web", "produce") == "user=bob"  # a default gives each user a budget of their own
    assert q.key("bob", "web", "request") == "client-id=web"
    assert q.manager.quota("user=alice", "produce") == 2 and q.manager.quota("user=bob", "produce") == 1


def test_a_client_cycling_client_ids_under_a_default_quota_keeps_the_budgets_bounded():
    # A <default> client-id entity gives each client id a budget, and every request may name a new client id.
    q = ServerQuotas({"client-id=<default>": {"producer_byte_rate": 1e6}})
    for i in range(MAX_BUDGETS + MAX_BUDGETS // 2):
        key = q.key("ANONYMOUS", f"client-{i}", "produce")
        assert key == f"client-id=client-{i}"
        q.manager.record(key, "produce", 10)
    assert q.budgets() <= MAX_BUDGETS
    assert len(q.manager.quotas()) <= MAX_BUDGETS
    # The newest budgets are kept and still limit their clients; a forgotten one is set again when used.
    assert q.manager.quota(f"client-id=client-{MAX_BUDGETS + MAX_BUDGETS // 2 - 1}", "produce") == 1e6
    assert q.key("ANONYMOUS", "client-0", "produce") == "client-id=client-0"
    assert q.manager.quota("client-id=client-0", "produce") == 1e6


@pytest.mark.parametrize("quotas", [{"users=alice": {"producer_byte_rate": 1}},
                                    {"user=alice": {"producer_rate": 1}},
                                    {"user=alice": {"producer_byte_rate": -5}},
                                    {"user=alice,user=bob": {"producer_byte_rate": 1}}])
def test_malformed_quotas_are_refused_at_start(tmp_path, quotas):
    with pytest.raises(InvalidConfigError):
        pylog.serve(tmp_path / "s", port=0, quotas=quotas)


def _alter(c, entity, ops, validate_only=False):
    out = c.call(49, 1, {"entries": [{"entity": entity, "ops": ops}], "validate_only": validate_only})
    return out["entries"][0]["error_code"], out["entries"][0]["error_message"]


def _describe(c, components, strict=False):
    out = c.call(48, 1, {"components": components, "strict": strict})
    assert out["error_code"] == 0, out
    return sorted(((tuple((e["entity_type"], e["entity_name"]) for e in x["entity"]),
                    tuple(sorted((v["key"], v["value"]) for v in x["values"]))) for x in out["entries"]), key=repr)


def test_alter_and_describe_client_quotas_change_the_running_servers_quotas(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("t")
        with pylog.serve(store, port=0, quotas={"client-id=<default>": {"request_percentage": 1000}},
                         quota_window_num=2, quota_window_size_s=0.25) as server:
            c = Raw(server, "slow")
            try:
                assert [c.produce("t") for _ in range(3)] == [0, 0, 0]
                assert _alter(c, [{"entity_type": "client-id", "entity_name": "slow"}],
                              [{"key": "producer_byte_rate", "value": 100_000.0, "remove": False}]) == (0, None)
                assert _alter(c, [{"entity_type": "user", "entity_name": None}],  # the default user
                              [{"key": "consumer_byte_rate", "value": 5e6, "remove": False}], True) == (0, None)
                code, message = _alter(c, [{"entity_type": "ip", "entity_name": "1.2.3.4"}],
                                       [{"key": "connection_creation_rate", "value": 1.0, "remove": False}])
                assert code == 42 and "ip" in message
                assert _describe(c, []) == [
                    ((("client-id", "slow"),), (("producer_byte_rate", 100_000.0),)),
                    ((("client-id", None),), (("request_percentage", 1000.0),))]
                assert _describe(c, [{"entity_type": "client-id", "match_type": 2, "match": None}]) == [
                    ((("client-id", "slow"),), (("producer_byte_rate", 100_000.0),))]
                assert _describe(c, [{"entity_type": "user", "match_type": 1, "match": None}]) == []  # validate_only
                assert sum(c.produce("t") for _ in range(6)) > 0  # the new quota throttles at once
                assert _alter(c, [{"entity_type": "client-id", "entity_name": "slow"}],
                              [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]) == (0, None)
                assert [c.produce("t") for _ in range(3)] == [0, 0, 0]
            finally:
                c.close()


def test_altered_client_quotas_survive_a_restart_of_the_server(tmp_path):
    setting = {"client-id=<default>": {"request_percentage": 1000.0}, "user=bob": {"producer_byte_rate": 5e5}}
    slow = [{"entity_type": "client-id", "entity_name": "slow"}]
    default_client, bob = [{"entity_type": "client-id", "entity_name": None}], [{"entity_type": "user",
                                                                                   "entity_name": "bob"}]
    with pylog.open(tmp_path / "s") as store:
        with pylog.serve(store, port=0, quotas=setting) as server:
            c = Raw(server, "admin")
            try:
                assert _alter(c, slow, [{"key": "producer_byte_rate", "value": 1e5, "remove": False}]) == (0, None)
                assert _alter(c, default_client, [{"key": "request_percentage", "value": 0.0, "remove": True}]) \
                    == (0, None)
                assert _alter(c, bob, [{"key": "consumer_byte_rate", "value": 2e6, "remove": False}], True) \
                    == (0, None)  # validate_only: not saved either
            finally:
                c.close()
        assert store.client_quota_changes() == {(None, "slow"): {"producer_byte_rate": 1e5},
                                                (None, "<default>"): {"request_percentage": None}}
        # Started again with the same setting: the changes are applied over it (the removal too).
        with pylog.serve(store, port=0, quotas=setting) as server:
            c = Raw(server, "admin")
            try:
                assert _describe(c, []) == [
                    ((("client-id", "slow"),), (("producer_byte_rate", 100_000.0),)),
                    ((("user", "bob"),), (("producer_byte_rate", 500_000.0),))]
            finally:
                c.close()


def test_a_client_quota_change_that_cannot_be_saved_is_not_made(tmp_path):
    slow = [{"entity_type": "client-id", "entity_name": "s" * 1001}]  # longer than the quota file keeps
    with pylog.serve(tmp_path / "s", port=0) as server:
        c = Raw(server, "admin")
        try:
            code, message = _alter(c, slow, [{"key": "producer_byte_rate", "value": 1e5, "remove": False}])
            assert code == -1 and "not saved" in message
            assert _describe(c, []) == []
        finally:
            c.close()


def test_a_damaged_client_quota_file_stops_the_server_from_starting(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.replace_client_quota_changes({("alice", None): {"producer_byte_rate": 1e5}})
    path = tmp_path / "s" / "__quotas"
    raw = bytearray(path.read_bytes())
    raw[-6] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError):
        pylog.serve(tmp_path / "s", port=0)


def test_client_quota_apis_need_cluster_config_acls(tmp_path):
    creds = Credentials({"admin": "a-secret", "bob": "b-secret"})
    with pylog.serve(tmp_path / "s", port=0, sasl_credentials=creds, sasl_mechanisms=["PLAIN"], authorizer=True,
                     super_users="User:admin") as server:
        admin, bob = Raw(server, "x", "admin", "a-secret"), Raw(server, "x", "bob", "b-secret")
        try:
            entity = [{"entity_type": "user", "entity_name": "bob"}]
            op = [{"key": "producer_byte_rate", "value": 1e6, "remove": False}]
            assert _alter(bob, entity, op)[0] == 31  # CLUSTER_AUTHORIZATION_FAILED
            assert bob.call(48, 1, {"components": [], "strict": False})["error_code"] == 31
            assert _alter(admin, entity, op) == (0, None)
            assert _describe(admin, [{"entity_type": "user", "match_type": 0, "match": "bob"}], strict=True) == [
                ((("user", "bob"),), (("producer_byte_rate", 1e6),))]
        finally:
            admin.close()
            bob.close()
