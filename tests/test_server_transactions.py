"""``pylog serve``'s transaction APIs and DescribeProducers (issue 27), through the real clients: each client's
transactional producer in its own test, read_committed and read_uncommitted consumers of all three, fencing, a
consume-transform-produce loop, and a server restart in the middle of a transaction. Raw requests
(``pylog.server.protocol.encode_request`` over a socket) where no client has the call or the case."""

from __future__ import annotations

import pytest

import pylog
from pylog.partition import internals

pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition  # noqa: E402


# The store and server fixtures: tests/conftest.py.


@pytest.fixture
def kp_admin(server):
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
    yield a
    a.close()


def test_describe_producers_reports_idempotent_producers_of_clients_and_of_pylog(server, store, kp_admin):
    store.create_topic("dp", partitions=2)
    p = KafkaProducer(bootstrap_servers=server.bootstrap_servers, enable_idempotence=True, linger_ms=0)
    try:
        for i in range(3):
            p.send("dp", value=b"v%d" % i, partition=0).get(timeout=10)
    finally:
        p.close(timeout=10)
    # a pylog producer of this process appends to partition 1 as an idempotent producer too
    pid = store.new_producer_id()
    internals(store.topic("dp").partition(1)).append_values_in_turn([b"a", b"b"], None, None, None, (pid, 0, 0), None)
    found = kp_admin.describe_producers([TopicPartition("dp", 0), TopicPartition("dp", 1)])
    p0 = found[TopicPartition("dp", 0)].active_producers
    assert len(p0) == 1 and p0[0].producer_epoch == 0 and p0[0].last_sequence == 2
    assert p0[0].current_transaction_start_offset == -1 and p0[0].last_timestamp > 0
    p1 = found[TopicPartition("dp", 1)].active_producers
    assert [(x.producer_id, x.last_sequence) for x in p1] == [(pid, 1)]
