"""``pylog serve --authorizer``: Kafka's ACLs kept in the store and enforced on every request.

The decision rules (deny wins, prefixed patterns, implied operations, wildcards, super users,
``allow.everyone.if.no.acl.found``) against a real store's ACL file; ACLs managed through kafka-python's and
confluent-kafka's admin clients (aiokafka's admin client has no ACL calls); a second SASL user refused each
operation it has no ACL for, with Kafka's error codes, and allowed once granted; the ACLs surviving a restart;
a damaged ACL file stopping the start; producer ids bound to the user who got them."""

from __future__ import annotations

import socket
import time

import pytest

import pylog
from pylog.errors import CorruptRecordError, InvalidArgumentError
from pylog.server.access import UNCHECKED, Access
from pylog.server.auth import Credentials
from pylog.server.authorizer import Authorizer
from pylog.server.protocol import encode_request, parse_response, supported_versions
from pylog.server.protocol import codes as E
from pylog.storage.acl_file import AclEntry
from serverutil import kafka_batch, recv_frame

pytestmark = pytest.mark.slow

USERS = {"admin": "admin-secret", "bob": "bob-secret", "alice": "alice-secret"}
TOPIC, GROUP, CLUSTER = 2, 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 10, 11, 12
DENY, ALLOW = 2, 3
LITERAL, PREFIXED = 3, 4


def acl(rtype, name, op, principal="User:bob", perm=ALLOW, pattern=LITERAL, host="*"):
    return AclEntry(rtype, name, pattern, principal, host, op, perm)


# --------------------------------------------------------------------------- decisions (no server)

@pytest.fixture
def store(tmp_path):
    s = pylog.open(tmp_path / "store")
    yield s
    s.close()


def test_deny_wins_over_allow_and_implied_operations_follow_kafka(store):
    store.replace_acls([acl(TOPIC, "orders", WRITE), acl(TOPIC, "orders", ALL, principal="User:*", perm=DENY,
                                                         host="10.0.0.9"),
                        acl(TOPIC, "cfg", ALTER_CONFIGS), acl(TOPIC, "blocked", READ),
                        acl(TOPIC, "blocked", READ, perm=DENY)])
    a = Authorizer(store)
    assert a.authorize("User:bob", "127.0.0.1", WRITE, TOPIC, "orders")
    assert a.authorize("User:bob", "127.0.0.1", DESCRIBE, TOPIC, "orders")  # WRITE implies DESCRIBE
    assert not a.authorize("User:bob", "127.0.0.1", READ, TOPIC, "orders")
    assert not a.authorize("User:bob", "10.0.0.9", WRITE, TOPIC, "orders")  # the DENY for that host wins
    assert not a.authorize("User:bob", "127.0.0.1", READ, TOPIC, "blocked")
    assert a.authorize("User:bob", "127.0.0.1", DESCRIBE_CONFIGS, TOPIC, "cfg")  # ALTER_CONFIGS implies it
    assert not a.authorize("User:bob", "127.0.0.1", DESCRIBE, TOPIC, "cfg")
    assert not a.authorize("User:alice", "127.0.0.1", WRITE, TOPIC, "orders")


def test_prefixed_and_wildcard_patterns_match_as_in_kafka(store):
    store.replace_acls([acl(TOPIC, "team-a.", READ, pattern=PREFIXED), acl(GROUP, "*", READ, principal="User:*")])
    a = Authorizer(store)
    assert a.authorize("User:bob", "h", READ, TOPIC, "team-a.events")
    assert a.authorize("User:bob", "h", READ, TOPIC, "team-a.")
    assert not a.authorize("User:bob", "h", READ, TOPIC, "team-b.events")
    assert not a.authorize("User:bob", "h", READ, TOPIC, "team-a")
    assert a.authorize("User:alice", "h", READ, GROUP, "any-group")


def test_a_cached_user_decision_follows_every_acl_change(store):
    a = Authorizer(store)
    assert not a.authorize_user("bob", "h", WRITE, TOPIC, "orders")  # decided and cached: refused
    a.create([{"resource_type": TOPIC, "resource_name": "orders", "resource_pattern_type": LITERAL,
               "principal": "User:bob", "host": "*", "operation": WRITE, "permission_type": ALLOW}])
    assert a.authorize_user("bob", "h", WRITE, TOPIC, "orders")  # the creation replaced the cache
    a.delete([{"resource_type_filter": TOPIC, "resource_name_filter": "orders", "pattern_type_filter": LITERAL,
               "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}])
    assert not a.authorize_user("bob", "h", WRITE, TOPIC, "orders")  # and so did the deletion


def test_a_user_decision_is_never_taken_for_a_principal_of_the_same_text(store):
    store.replace_acls([acl(TOPIC, "orders", WRITE, principal="User:User:bob")])
    a = Authorizer(store)
    # The user named "User:bob" is the principal "User:User:bob"; the principal "User:bob" is the user "bob".
    assert not a.authorize("User:bob", "h", WRITE, TOPIC, "orders")
    assert a.authorize_user("User:bob", "h", WRITE, TOPIC, "orders")
    assert not a.authorize("User:bob", "h", WRITE, TOPIC, "orders")
    assert not a.authorize_user("bob", "h", WRITE, TOPIC, "orders")
    assert not a.authorize_user(None, "h", WRITE, TOPIC, "orders")  # unauthenticated: User:ANONYMOUS


def test_super_users_and_allow_everyone_if_no_acl_found(store):
    store.replace_acls([acl(TOPIC, "named", READ)])
    strict = Authorizer(store, super_users=frozenset({"User:admin"}))
    assert strict.authorize("User:admin", "h", DELETE, TOPIC, "named")
    assert not strict.authorize("User:alice", "h", READ, TOPIC, "unnamed")
    open_ = Authorizer(store, allow_everyone_if_no_acl_found=True)
    assert open_.authorize("User:alice", "h", READ, TOPIC, "unnamed")  # no ACL names it
    assert not open_.authorize("User:alice", "h", READ, TOPIC, "named")  # an ACL names it, not for alice


def test_the_acl_file_round_trips_and_a_damaged_one_is_refused(store):
    entries = [acl(TOPIC, "t", READ), acl(CLUSTER, "kafka-cluster", ALTER, principal="User:ops")]
    store.replace_acls(entries)
    assert store.acls() == entries
    with pytest.raises(InvalidArgumentError):
        store.replace_acls([acl(9, "t", READ)])
    assert store.acls() == entries  # a refused replace changes nothing
    path = f"{store.path}/__acls"
    raw = bytearray(open(path, "rb").read())
    raw[10] ^= 1
    open(path, "wb").write(raw)
    with pytest.raises(CorruptRecordError):
        store.acls()
    with pytest.raises(CorruptRecordError):
        pylog.serve(store, port=0, authorizer=True)


def test_every_served_api_has_an_authorization_rule():
    rules = Access.__new__(Access)
    rules.s = rules.authorizer = None
    Access.__init__(rules, None, None)  # type: ignore[arg-type]
    missing = set(supported_versions()) - set(rules.rules) - UNCHECKED
    assert not missing


# --------------------------------------------------------------------------- through the server

class Raw:
    """A SASL/PLAIN client speaking raw requests: exact error codes, per item."""

    def __init__(self, server, user):
        self.sock = socket.create_connection((server.host, server.port), timeout=20)
        self.corr = 0
        assert self.call(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0" + user.encode() + b"\0" + USERS[user].encode()
        assert self.call(36, 0, {"auth_bytes": token})["error_code"] == 0

    def call(self, key, version, body):
        self.corr += 1
        self.sock.sendall(encode_request(key, version, self.corr, "acl-test", body))
        frame = recv_frame(self.sock)
        assert frame is not None, "the server closed the connection"
        return parse_response(key, version, frame)[1]

    def close(self):
        self.sock.close()


@pytest.fixture
def secured(tmp_path):
    st = pylog.open(tmp_path / "store")
    st.create_topic("orders", partitions=2)
    st.create_topic("team-a.events")
    server = pylog.serve(st, port=0, authorizer=True, super_users="User:admin",
                         sasl_credentials=Credentials(USERS), sasl_mechanisms=["PLAIN"])
    yield server, st
    server.close()
    st.close()


def grant(admin, *entries):
    out = admin.call(30, 1, {"creations": [
        {"resource_type": e.resource_type, "resource_name": e.resource_name, "resource_pattern_type": e.pattern_type,
         "principal": e.principal, "host": e.host, "operation": e.operation, "permission_type": e.permission}
        for e in entries]})
    assert [r["error_code"] for r in out["results"]] == [0] * len(entries)


def produce(c, topic, values=(b"v",), pid=-1, epoch=-1, seq=-1, version=7):
    out = c.call(0, version, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": kafka_batch(list(values), pid, epoch, seq)}]}]})
    return out["responses"][0]["partition_responses"][0]["error_code"]


def fetch(c, topic):
    out = c.call(1, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                         "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                         "rack_id": "", "topics": [{"topic": topic, "partitions": [
                             {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                              "partition_max_bytes": 1 << 20}]}]})
    assert out["error_code"] == 0
    return out["responses"][0]["partitions"][0]["error_code"]


def list_offsets(c, topic):
    out = c.call(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return out["topics"][0]["partitions"][0]["error_code"]


def metadata(c, names, create=False):
    out = c.call(3, 8, {"topics": None if names is None else [{"name": n} for n in names],
                        "allow_auto_topic_creation": create, "include_cluster_authorized_operations": False,
                        "include_topic_authorized_operations": False})
    assert out["brokers"], "the brokers are listed whatever the topics' ACLs"
    return {t["name"]: t["error_code"] for t in out["topics"]}


def commit(c, group, topic):
    out = c.call(8, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                        "group_instance_id": None, "topics": [
                            {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                            "committed_leader_epoch": -1,
                                                            "committed_metadata": None}]}]})
    return out["topics"][0]["partitions"][0]["error_code"]


def join(c, group):
    return c.call(11, 5, {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                          "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                          "protocols": [{"name": "range", "metadata": b""}]})["error_code"]


def find_coordinator(c, group):
    return c.call(10, 2, {"key": group, "key_type": 0})["error_code"]


def create_topic(c, name):
    out = c.call(19, 4, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                     "assignments": [], "configs": []}], "timeout_ms": 5000,
                         "validate_only": False})
    return out["topics"][0]["error_code"]


def delete_topic(c, name):
    return c.call(20, 3, {"topic_names": [name], "timeout_ms": 5000})["responses"][0]["error_code"]


def delete_records(c, topic):
    out = c.call(21, 1, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
                         "timeout_ms": 5000})
    return out["topics"][0]["partitions"][0]["error_code"]


def create_partitions(c, topic, count):
    out = c.call(37, 1, {"topics": [{"name": topic, "count": count, "assignments": None}], "timeout_ms": 5000,
                         "validate_only": False})
    return out["results"][0]["error_code"]


def describe_configs(c, topic):
    out = c.call(32, 2, {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
                         "include_synonyms": False})
    return out["results"][0]["error_code"]


def alter_configs(c, topic):
    out = c.call(44, 0, {"resources": [{"resource_type": 2, "resource_name": topic, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}], "validate_only": False})
    return out["responses"][0]["error_code"]


def init_producer_id(c):
    out = c.call(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
    return out["error_code"], out["producer_id"]


def delete_group(c, group):
    return c.call(42, 1, {"groups_names": [group]})["results"][0]["error_code"]


def describe_acls(c):
    return c.call(29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                          "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})


def test_a_second_user_is_refused_each_operation_until_granted(secured):
    server, st = secured
    admin, bob = Raw(server, "admin"), Raw(server, "bob")
    try:
        assert produce(admin, "orders") == 0  # the super user may do anything
        failed_topic, failed_group, failed_cluster = (E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED,
                                                      E.CLUSTER_AUTHORIZATION_FAILED)
        # Refused, item by item, with Kafka's codes; nothing changed in the store.
        assert produce(bob, "orders") == failed_topic
        assert fetch(bob, "orders") == failed_topic
        assert list_offsets(bob, "orders") == failed_topic
        assert metadata(bob, None) == {}  # every topic: those bob may not describe are left out
        assert metadata(bob, ["orders"]) == {"orders": failed_topic}
        assert metadata(bob, ["fresh"], create=True) == {"fresh": failed_topic} and "fresh" not in st
        assert find_coordinator(bob, "g") == failed_group
        assert join(bob, "g") == failed_group
        assert commit(bob, "g", "orders") == failed_group
        assert create_topic(bob, "bobs") == failed_topic and "bobs" not in st
        assert delete_topic(bob, "orders") == failed_topic and "orders" in st
        assert delete_records(bob, "orders") == failed_topic
        assert create_partitions(bob, "orders", 3) == failed_topic
        assert describe_configs(bob, "orders") == failed_topic
        assert alter_configs(bob, "orders") == failed_topic
        assert init_producer_id(bob)[0] == failed_cluster
        assert delete_group(bob, "g") == failed_group
        assert describe_acls(bob)["error_code"] == failed_cluster
        assert st.topic("orders").partition(0).log_end_offset == 1
        assert st.topic("orders").num_partitions == 2

        # Granted one by one: each operation goes through.
        grant(admin, acl(TOPIC, "orders", WRITE))
        assert produce(bob, "orders") == 0
        assert metadata(bob, None) == {"orders": 0}  # WRITE implies DESCRIBE
        assert list_offsets(bob, "orders") == 0
        assert fetch(bob, "orders") == failed_topic  # but not READ
        assert init_producer_id(bob)[0] == 0  # WRITE on some topic lets a producer be idempotent
        grant(admin, acl(TOPIC, "orders", READ), acl(GROUP, "g", READ))
        assert fetch(bob, "orders") == 0
        assert find_coordinator(bob, "g") == 0
        assert commit(bob, "g", "orders") == 0
        grant(admin, acl(TOPIC, "bobs", CREATE), acl(TOPIC, "orders", ALTER), acl(TOPIC, "orders", ALTER_CONFIGS),
              acl(TOPIC, "orders", DELETE), acl(GROUP, "g", DELETE))
        assert create_topic(bob, "bobs") == 0 and "bobs" in st
        assert create_partitions(bob, "orders", 3) == 0 and st.topic("orders").num_partitions == 3
        assert describe_configs(bob, "orders") == 0 and alter_configs(bob, "orders") == 0
        assert delete_records(bob, "orders") == 0
        assert delete_group(bob, "g") in (0, E.GROUP_ID_NOT_FOUND)
        assert delete_topic(bob, "orders") == 0 and "orders" not in st
        # A DENY wins over the ALLOW for the same operation.
        grant(admin, acl(TOPIC, "bobs", DESCRIBE), acl(TOPIC, "bobs", DESCRIBE, perm=DENY))
        assert metadata(bob, ["bobs"]) == {"bobs": failed_topic}
        # Prefixed: every topic with the prefix.
        grant(admin, acl(TOPIC, "team-a.", READ, pattern=PREFIXED))
        assert fetch(bob, "team-a.events") == 0
    finally:
        admin.close()
        bob.close()


def test_producer_ids_are_bound_to_the_user_who_got_them(secured):
    server, st = secured
    admin = Raw(server, "admin")
    grant(admin, acl(TOPIC, "orders", WRITE, principal="User:alice"), acl(TOPIC, "orders", WRITE))
    alice, bob = Raw(server, "alice"), Raw(server, "bob")
    try:
        code, pid = init_producer_id(alice)
        assert code == 0 and pid >= 0
        assert produce(alice, "orders", [b"a0"], pid, 0, 0) == 0
        # bob names alice's id with a higher epoch (what fenced her producer before): refused, nothing appended
        assert produce(bob, "orders", [b"evil"], pid, 5, 0) == E.INVALID_PRODUCER_ID_MAPPING
        assert produce(alice, "orders", [b"a1"], pid, 0, 1) == 0  # alice is not fenced
        assert [r.value for r in st.topic("orders").partition(0).read(0)] == [b"a0", b"a1"]
    finally:
        for c in (admin, alice, bob):
            c.close()


def test_describe_log_dirs_shows_the_store_path_to_super_users_only(secured):
    server, st = secured
    admin = Raw(server, "admin")
    grant(admin, acl(CLUSTER, "kafka-cluster", DESCRIBE))
    bob = Raw(server, "bob")
    try:
        import os
        full = os.path.realpath(st.path)
        assert admin.call(35, 1, {"topics": None})["results"][0]["log_dir"] == full
        seen = bob.call(35, 1, {"topics": None})["results"][0]["log_dir"]
        assert seen == os.path.basename(full) and "/" not in seen
    finally:
        admin.close()
        bob.close()


# --------------------------------------------------------------------------- the admin clients

def _plain(user):
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username=user,
                sasl_plain_password=USERS[user])


def test_kafka_python_admin_creates_describes_and_deletes_acls_that_survive_a_restart(tmp_path):
    from kafka import KafkaProducer
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient, ResourcePattern,
                             ResourcePatternFilter, ResourceType)
    from kafka.admin import ACLResourcePatternType as PT
    from kafka.errors import KafkaError

    st = pylog.open(tmp_path / "store")
    st.create_topic("orders")
    opts = dict(port=0, authorizer=True, super_users="User:admin", sasl_credentials=Credentials(USERS),
                sasl_mechanisms=["PLAIN"])
    with pylog.serve(st, **opts) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, **_plain("admin"))
        write = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.TOPIC, "orders", PT.LITERAL))
        read = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                   ResourcePattern(ResourceType.TOPIC, "team-", PT.PREFIXED))
        result = admin.create_acls([write, read])
        assert not result["failed"] and len(result["succeeded"]) == 2
        flt = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.ANY, None, PT.ANY))
        acls, err = admin.describe_acls(flt)
        assert {(a.operation, a.resource_pattern.resource_name) for a in acls} == {
            (ACLOperation.WRITE, "orders"), (ACLOperation.READ, "team-")}
        admin.close()
        # bob's real producer writes to orders (WRITE there gives it an idempotent producer id too)
        p = KafkaProducer(bootstrap_servers=server.bootstrap_servers, enable_idempotence=True, **_plain("bob"))
        p.send("orders", b"by-bob").get(timeout=20)
        with pytest.raises(KafkaError) as info:
            p.send("other", b"x").get(timeout=20)
        assert "Authorization" in type(info.value).__name__ or "AUTHORIZATION" in repr(info.value).upper()
        p.close(timeout=5)
    assert [r.value for r in st.topic("orders").partition(0).read(0)] == [b"by-bob"]
    with pylog.serve(st, **opts) as server:  # the ACLs are read back from the store
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, **_plain("admin"))
        acls, err = admin.describe_acls(flt)
        assert len(acls) == 2
        deleted = admin.delete_acls([ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                               ResourcePatternFilter(ResourceType.TOPIC, "orders", PT.LITERAL))])
        assert len(deleted[0][1]) == 1
        assert len(admin.describe_acls(flt)[0]) == 1
        admin.close()
    st.close()


def test_confluent_admin_creates_describes_and_deletes_acls(secured):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)
    server, st = secured
    common = {"bootstrap.servers": server.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanisms": "PLAIN", "log_level": 0}
    admin = AdminClient({**common, "sasl.username": "admin", "sasl.password": USERS["admin"]})
    binding = AclBinding(ResourceType.GROUP, "g-", ResourcePatternType.PREFIXED, "User:bob", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(20)
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    assert admin.describe_acls(flt).result(20) == [binding]
    # bob may not manage ACLs: CLUSTER_AUTHORIZATION_FAILED
    bob = AdminClient({**common, "sasl.username": "bob", "sasl.password": USERS["bob"]})
    with pytest.raises(KafkaException) as info:
        bob.create_acls([binding])[binding].result(20)
    assert info.value.args[0].code() == E.CLUSTER_AUTHORIZATION_FAILED
    # (librdkafka reports a refused DescribeAcls as no ACLs rather than the error)
    assert admin.delete_acls([flt])[flt].result(20) == [binding]
    assert admin.describe_acls(flt).result(20) == []
    assert st.acls() == []


def test_without_sasl_every_client_is_user_anonymous(tmp_path):
    st = pylog.open(tmp_path / "store")
    st.create_topic("open")
    st.create_topic("closed")
    st.replace_acls([acl(TOPIC, "open", ALL, principal="User:ANONYMOUS")])
    with pylog.serve(st, port=0, authorizer=True) as server:
        sock = socket.create_connection((server.host, server.port), timeout=20)
        raw = Raw.__new__(Raw)
        raw.sock, raw.corr = sock, 0
        try:
            assert produce(raw, "open") == 0
            assert produce(raw, "closed") == E.TOPIC_AUTHORIZATION_FAILED
            assert metadata(raw, None) == {"open": 0}
        finally:
            sock.close()
    st.close()


def test_real_clients_of_a_refused_user_get_kafkas_authorization_errors(secured):
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError
    from confluent_kafka import Consumer, KafkaError

    server, st = secured
    admin = Raw(server, "admin")
    grant(admin, acl(TOPIC, "orders", READ))  # bob may read orders, but has no ACL for any group
    admin.close()
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanisms": "PLAIN", "sasl.username": "bob", "sasl.password": USERS["bob"],
                  "group.id": "bobs-group", "log_level": 0})
    try:
        c.subscribe(["orders"])
        deadline = time.monotonic() + 20
        error = None
        while error is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                error = m.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()

    async def produce_as_bob():
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password=USERS["bob"])
        await p.start()
        try:
            await p.send_and_wait("orders", b"nope")
        finally:
            await p.stop()

    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(asyncio.wait_for(produce_as_bob(), 30))
    assert st.topic("orders").partition(0).log_end_offset == 0


def test_producer_owners_forget_the_oldest_ids_past_their_bound():
    from pylog.server.state import ProducerOwners
    owners = ProducerOwners(limit=2)
    owners.issued(1, "alice")
    owners.issued(2, "alice")
    assert not owners.claim(1, "bob") and owners.claim(1, "alice")
    owners.issued(3, "carol")  # 2 is now the oldest (1 was used last) and is forgotten
    assert owners.claim(2, "bob")  # an id nobody owns is claimed by its first producer
    assert not owners.claim(2, "alice") and not owners.claim(3, "bob")


@pytest.mark.parametrize("options", [{"super_users": "User:admin"}, {"allow_everyone_if_no_acl_found": True},
                                     {"authorizer": True, "super_users": "admin"}])
def test_authorizer_settings_are_checked_at_start(tmp_path, options):
    with pytest.raises(InvalidArgumentError):
        pylog.serve(tmp_path / "s", port=0, **options)


def test_group_listings_offsets_and_cluster_apis_follow_the_acls(secured):
    server, st = secured
    admin, bob = Raw(server, "admin"), Raw(server, "bob")
    try:
        for group in ("g1", "g2"):
            assert commit(admin, group, "orders") == 0
        grant(admin, acl(GROUP, "g1", DESCRIBE), acl(TOPIC, "orders", DESCRIBE))
        # ListGroups: only the groups bob may describe (every group with DESCRIBE on the cluster)
        listed = {g["group_id"] for g in bob.call(16, 3, {})["groups"]}
        assert listed == {"g1"}
        assert {"g1", "g2"} <= {g["group_id"] for g in admin.call(16, 3, {})["groups"]}
        described = bob.call(15, 5, {"groups": ["g1", "g2"], "include_authorized_operations": False})["groups"]
        assert {g["group_id"]: g["error_code"] for g in described} == {"g1": 0, "g2": E.GROUP_AUTHORIZATION_FAILED}
        # OffsetFetch: DESCRIBE on the group; every topic (null) leaves out those bob may not describe
        fetched = bob.call(9, 7, {"group_id": "g1", "topics": None, "require_stable": False})
        assert fetched["error_code"] == 0 and [t["name"] for t in fetched["topics"]] == ["orders"]
        assert bob.call(9, 7, {"group_id": "g2", "topics": None, "require_stable": False})["error_code"] == \
            E.GROUP_AUTHORIZATION_FAILED
        # Broker configs and cluster operations: the cluster resource
        out = bob.call(32, 2, {"resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None},
                                             {"resource_type": 2, "resource_name": "orders",
                                              "configuration_keys": None}], "include_synonyms": False})
        assert [r["error_code"] for r in out["results"]] == [E.CLUSTER_AUTHORIZATION_FAILED,
                                                             E.TOPIC_AUTHORIZATION_FAILED]
        assert bob.call(35, 2, {"topics": None})["results"] == []  # DescribeLogDirs needs DESCRIBE on the cluster
        elected = bob.call(43, 1, {"election_type": 0, "topic_partitions": [{"topic": "orders", "partitions": [0]}],
                                   "timeout_ms": 1000})
        assert elected["error_code"] == E.CLUSTER_AUTHORIZATION_FAILED
        # acks=0 to a refused topic: no answer can carry the error, so the connection is closed
        bob.sock.sendall(encode_request(0, 7, 99, "acl-test", {"transactional_id": None, "acks": 0, "timeout_ms": 1,
                                                               "topic_data": [{"name": "orders", "partition_data": [
                                                                   {"index": 0, "records": kafka_batch([b"z"])}]}]}))
        assert recv_frame(bob.sock) is None
        assert st.topic("orders").partition(0).log_end_offset == 0
    finally:
        admin.close()
        bob.close()


TXN_ID = 5


def test_transaction_apis_follow_the_transactional_id_topic_and_group_acls(secured):
    server, st = secured
    admin, bob, alice = Raw(server, "admin"), Raw(server, "bob"), Raw(server, "alice")
    try:
        refused = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert bob.call(10, 2, {"key": "bob-tx", "key_type": 1})["error_code"] == refused
        init = {"transactional_id": "bob-tx", "transaction_timeout_ms": 60000}
        assert bob.call(22, 1, init)["error_code"] == refused
        grant(admin, acl(TXN_ID, "bob-", WRITE, pattern=PREFIXED), acl(TOPIC, "orders", WRITE))
        assert bob.call(10, 2, {"key": "bob-tx", "key_type": 1})["error_code"] == 0  # WRITE implies DESCRIBE
        got = bob.call(22, 1, init)
        assert got["error_code"] == 0
        pid, epoch = got["producer_id"], got["producer_epoch"]
        ids = {"v3_and_below_transactional_id": "bob-tx", "v3_and_below_producer_id": pid,
               "v3_and_below_producer_epoch": epoch}
        out = bob.call(24, 1, {**ids, "v3_and_below_topics": [{"name": "orders", "partitions": [0]},
                                                              {"name": "team-a.events", "partitions": [0]}]})
        codes = {(t["name"], p["partition_index"]): p["partition_error_code"]
                 for t in out["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}
        assert codes == {("orders", 0): E.OPERATION_NOT_ATTEMPTED, ("team-a.events", 0): E.TOPIC_AUTHORIZATION_FAILED}
        out = bob.call(24, 1, {**ids, "v3_and_below_topics": [{"name": "orders", "partitions": [0]}]})
        assert out["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        offsets = {"transactional_id": "bob-tx", "producer_id": pid, "producer_epoch": epoch, "group_id": "g"}
        assert bob.call(25, 1, offsets)["error_code"] == E.GROUP_AUTHORIZATION_FAILED
        # a transactional produce of another principal to bob's transactional id is refused whole
        grant(admin, acl(TOPIC, "orders", WRITE, principal="User:alice"))
        out = alice.call(0, 7, {"transactional_id": "bob-tx", "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "orders", "partition_data": [{"index": 0, "records": kafka_batch([b"x"], pid, epoch, 0,
                                                                                      transactional=True)}]}]})
        assert out["responses"][0]["partition_responses"][0]["error_code"] == refused
        # listings: alice may describe no transactional id, admin every one
        assert alice.call(66, 0, {"state_filters": [], "producer_id_filters": []})["transaction_states"] == []
        listed = admin.call(66, 0, {"state_filters": [], "producer_id_filters": []})["transaction_states"]
        assert [(t["transactional_id"], t["transaction_state"]) for t in listed] == [("bob-tx", "Ongoing")]
        described = alice.call(65, 0, {"transactional_ids": ["bob-tx"]})["transaction_states"]
        assert [d["error_code"] for d in described] == [refused]
        assert bob.call(26, 1, {"transactional_id": "bob-tx", "producer_id": pid, "producer_epoch": epoch,
                                "committed": False})["error_code"] == 0
        assert alice.call(26, 1, {"transactional_id": "bob-tx", "producer_id": pid, "producer_epoch": epoch,
                                  "committed": False})["error_code"] == refused
    finally:
        for c in (admin, bob, alice):
            c.close()
