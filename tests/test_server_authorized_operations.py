"""Authorized operations (KIP-430) from ``pylog serve``: DescribeTopics, DescribeCluster and DescribeGroups
with ``include_authorized_operations`` answer what the client may do (everything Kafka supports on the
resource type without the authorizer, what its ACLs allow with it; reads only on a read-only store), as
librdkafka's 0081 expects."""

from __future__ import annotations

import time

import pytest

import pylog

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicCollection  # noqa: E402
from confluent_kafka.admin import AclOperation, AdminClient  # noqa: E402

QUIET = {"log_level": 3}
TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
             AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
               AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
GROUP_OPS = {AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}
READS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS}


def _admin(server) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap_servers, **QUIET})


def _ops(found) -> set:
    return set(found) if found is not None else set()


def test_describe_topics_and_cluster_report_every_operation_without_an_authorizer(server):
    server.store.create_topic("described", partitions=2)
    admin = _admin(server)
    desc = admin.describe_topics(TopicCollection(["described"]), include_authorized_operations=True)
    assert _ops(desc["described"].result(30).authorized_operations) == TOPIC_OPS
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert _ops(cluster.authorized_operations) == CLUSTER_OPS


def test_authorized_operations_are_absent_unless_asked_for(server):
    server.store.create_topic("plain")
    admin = _admin(server)
    assert admin.describe_topics(TopicCollection(["plain"]))["plain"].result(30).authorized_operations is None
    assert admin.describe_cluster().result(30).authorized_operations is None


def test_describe_consumer_group_reports_its_operations(server):
    server.store.create_topic("grouped")
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "described-group", **QUIET})
    try:
        c.subscribe(["grouped"])
        admin = _admin(server)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            c.poll(0.2)
            desc = admin.describe_consumer_groups(["described-group"], include_authorized_operations=True)
            group = desc["described-group"].result(30)
            if group.members:
                break
        assert _ops(group.authorized_operations) == GROUP_OPS
    finally:
        c.close()


def test_a_read_only_store_reports_only_the_operations_that_read(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("frozen")
    with pylog.open(tmp_path / "s", read_only=True) as store, pylog.serve(store, port=0) as server:
        admin = _admin(server)
        desc = admin.describe_topics(TopicCollection(["frozen"]), include_authorized_operations=True)
        assert _ops(desc["frozen"].result(30).authorized_operations) == READS
        cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
        assert _ops(cluster.authorized_operations) == {AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS}


def test_with_the_authorizer_a_user_is_told_the_operations_its_acls_allow(tmp_path):
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourcePatternType, ResourceType

    from pylog.server.auth import Credentials

    users = {"admin": "admin-secret", "bob": "bob-secret"}
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("orders")
        with pylog.serve(store, port=0, authorizer=True, super_users="User:admin",
                         sasl_credentials=Credentials(users), sasl_mechanisms=["PLAIN"]) as server:
            def client(user: str) -> AdminClient:
                return AdminClient({"bootstrap.servers": server.bootstrap_servers,
                                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                    "sasl.username": user, "sasl.password": users[user], **QUIET})

            admin = client("admin")
            grants = [AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", "*", op,
                                 AclPermissionType.ALLOW) for op in (AclOperation.READ, AclOperation.WRITE)]
            for f in admin.create_acls(grants).values():
                f.result(30)
            bob = client("bob")
            desc = bob.describe_topics(TopicCollection(["orders"]), include_authorized_operations=True)
            # READ and WRITE imply DESCRIBE (Kafka's rule, as the authorizer decides)
            assert _ops(desc["orders"].result(30).authorized_operations) == {
                AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE}
            desc = admin.describe_topics(TopicCollection(["orders"]), include_authorized_operations=True)
            assert _ops(desc["orders"].result(30).authorized_operations) == TOPIC_OPS  # a super user
