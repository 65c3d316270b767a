"""The transactional producer (pylog/clients/producer.py, txn_manager.py) with kafka-python's names, and
pylog.aio's with aiokafka's: records of several partitions and a group's offsets visible together or never."""

from __future__ import annotations

import asyncio
import types

import pytest

import pylog
from pylog.aio import AIOKafkaProducer
from pylog.clients.transactions import TxnState
from pylog.errors import InvalidConfigError, InvalidTxnStateError, ProducerFencedError
from pylog.store import transaction_coordinator
from pylog.structs import OffsetAndMetadata
from pylog.structs import TopicPartition as TP


@pytest.fixture
def store(txn_store):
    return txn_store


def _visible(store, level="read_committed"):
    out = []
    for n in range(3):
        out += [r.value for r in store.topic("t").partition(n).read(0, isolation_level=level)]
    return sorted(out)


def test_a_committed_transaction_shows_its_records_and_offsets_together(store):
    with store.producer(transactional_id="app") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            p.send("t", b"%d" % i, key=b"%d" % i)
        p.send_offsets_to_transaction({TP("in", 0): OffsetAndMetadata(41, "m")}, "g")
        p.flush()
        assert _visible(store) == [] and len(_visible(store, "read_uncommitted")) == 30
        assert store.committed_offsets("g") == {}
        p.commit_transaction()
        assert _visible(store) == sorted(b"%d" % i for i in range(30))
        assert store.committed_offsets("g")[TP("in", 0)] == OffsetAndMetadata(41, "m")
        meta = transaction_coordinator(store).describe("app")
        assert meta.state == TxnState.COMPLETE_COMMIT
        assert {tp for tp in meta.partitions if tp.topic == "t"} == {TP("t", n) for n in range(3)}


def test_an_aborted_transaction_shows_nothing_and_the_next_one_commits(store):
    store.commit_offsets("g", {TP("in", 0): 2})
    with store.producer(transactional_id="app") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"gone", partition=1)
        p.send_offsets_to_transaction({TP("in", 0): 9}, types.SimpleNamespace(group_id="g", generation_id=3,
                                                                               member_id="m-1"))
        p.abort_transaction()
        p.begin_transaction()
        p.send("t", b"kept", partition=1)
        p.commit_transaction()
    assert _visible(store) == [b"kept"]
    assert _visible(store, "read_uncommitted") == [b"gone", b"kept"]
    assert store.committed_offsets("g")[TP("in", 0)].offset == 2


def test_a_read_committed_consumer_sees_committed_records_once_and_aborted_never(store):
    consumer = store.consumer("t", isolation_level="read_committed", auto_offset_reset="earliest")
    with store.producer(transactional_id="app") as p:
        p.init_transactions()
        for round_ in range(4):
            p.begin_transaction()
            p.send("t", b"r%d" % round_, partition=round_ % 3)
            if round_ % 2:
                p.abort_transaction()
            else:
                p.commit_transaction()
    got = []
    for _ in range(20):
        got += [r.value for recs in consumer.poll(timeout_ms=100).values() for r in recs]
    consumer.close()
    assert sorted(got) == [b"r0", b"r2"]


def test_a_second_instance_fences_the_first_on_send_and_commit(store):
    first = store.producer(transactional_id="app")
    first.init_transactions()
    first.begin_transaction()
    first.send("t", b"old", partition=0).get(5)
    second = store.producer(transactional_id="app")
    second.init_transactions()  # aborts the first one's open transaction
    with pytest.raises(ProducerFencedError):
        first.send("t", b"zombie", partition=0).get(5)
    with pytest.raises(ProducerFencedError):
        first.commit_transaction()
    with pytest.raises(ProducerFencedError):
        first.send("t", b"again")
    second.begin_transaction()
    second.send("t", b"new", partition=0)
    second.commit_transaction()
    first.close()
    second.close()
    assert _visible(store) == [b"new"]


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(store):
    p = store.producer(transactional_id="slow", transaction_timeout_ms=1)
    p.init_transactions()
    p.begin_transaction()
    p.send("t", b"late", partition=2).get(5)
    coordinator = transaction_coordinator(store)
    started = coordinator.describe("slow").start_ms
    while pylog.storage.records.now_ms() <= started + 1:
        pass
    assert coordinator.abort_timed_out() == ["slow"]
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    p.close()
    assert _visible(store) == []


def test_transaction_calls_out_of_order_raise_invalid_txn_state(store):
    with store.producer(transactional_id="app") as p:
        with pytest.raises(InvalidTxnStateError):
            p.begin_transaction()  # before init_transactions
        p.init_transactions()
        with pytest.raises(InvalidTxnStateError):
            p.send("t", b"x")  # outside a transaction
        with pytest.raises(InvalidTxnStateError):
            p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(InvalidTxnStateError):
            p.begin_transaction()
        p.commit_transaction()  # an empty transaction ends locally
    with store.producer() as plain, pytest.raises(InvalidTxnStateError):
        plain.init_transactions()


def test_transactional_options_follow_kafkas_rules(store, tmp_path):
    with pytest.raises(InvalidConfigError):
        store.producer(transactional_id="app", acks=1)
    with pytest.raises(InvalidConfigError):
        store.producer(transactional_id="app", enable_idempotence=False)
    with pytest.raises(InvalidConfigError):
        store.producer(transactional_id="app", transaction_timeout_ms=0)
    with store.producer(transactional_id="app") as p:
        assert p.config["acks"] == "all"
    with pylog.KafkaProducer(bootstrap_servers=store, transactional_id="kp", transaction_timeout_ms=5000) as kp:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send("t", b"kafka-python", partition=0)
        kp.commit_transaction()
    assert _visible(store) == [b"kafka-python"]


def test_aiokafka_transaction_context_commits_and_aborts(store):
    async def main():
        async with AIOKafkaProducer(bootstrap_servers=store, transactional_id="aio") as p:
            async with p.transaction():
                await p.send("t", b"committed", partition=0)
                await p.send_offsets_to_transaction({TP("in", 1): 5}, "g")
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send("t", b"aborted", partition=0)
                    raise RuntimeError("application error")
    asyncio.run(main())
    assert _visible(store) == [b"committed"]
    assert _visible(store, "read_uncommitted") == [b"aborted", b"committed"]
    assert store.committed_offsets("g")[TP("in", 1)].offset == 5


def test_send_offsets_takes_kafka_pythons_offset_and_metadata_and_refuses_garbage(store):
    """Code ported from kafka-python passes ``kafka.structs`` tuples: their offsets commit with the transaction
    (they were written as a record no lookup could read, the offsets silently lost); a value that is no offset
    is refused before anything is written, and the transaction can still commit."""
    kafka_structs = pytest.importorskip("kafka.structs")
    with store.producer(transactional_id="ported") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"v")
        p.send_offsets_to_transaction({kafka_structs.TopicPartition("in", 0): kafka_structs.OffsetAndMetadata(7, "m", -1)},
                                      "g")
        for bad in ({"in": 1}, {TP("in", 0): -5}, {TP("in", 0): OffsetAndMetadata("7", "")},
                    {TP("in", -1): 3}, {TP("in", 0): OffsetAndMetadata(3, 5)}, [(TP("in", 0), 3)]):
            with pytest.raises(pylog.errors.InvalidArgumentError):
                p.send_offsets_to_transaction(bad, "g")
        p.commit_transaction()
    assert store.committed_offsets("g") == {TP("in", 0): OffsetAndMetadata(7, "m")}


def test_consume_transform_produce_with_the_consumers_group_metadata_as_kafka_python_writes_it(store):
    """kafka-python's loop passes ``consumer.group_metadata()`` (KIP-447) to send_offsets_to_transaction; pylog's
    consumer had no such method (AttributeError). Its generation and member id are the group member's."""
    with store.producer() as p:
        for i in range(6):
            p.send("t", b"in-%d" % i, partition=0)
    consumer = store.consumer("t", group_id="ctp", enable_auto_commit=False, auto_offset_reset="earliest",
                              isolation_level="read_committed")
    with store.consumer("t") as lone:
        assert lone.group_metadata() == (None, -1, "", None)  # no group: no membership
    with consumer, store.producer(transactional_id="ctp-app") as p:
        p.init_transactions()
        records = []
        for _ in range(50):
            records += [r for recs in consumer.poll(timeout_ms=100).values() for r in recs]
            if len(records) >= 6:
                break
        meta = consumer.group_metadata()
        assert meta.group_id == "ctp" and meta.generation_id >= 0 and meta.member_id
        p.begin_transaction()
        for r in records:
            p.send("t", r.value.upper(), partition=1)
        p.send_offsets_to_transaction({TP("t", 0): OffsetAndMetadata(records[-1].offset + 1, "")}, meta)
        p.commit_transaction()
    assert store.committed_offsets("ctp")[TP("t", 0)].offset == 6
    assert [r.value for r in store.topic("t").partition(1).read(0, isolation_level="read_committed")] == \
        [b"IN-%d" % i for i in range(6)]
