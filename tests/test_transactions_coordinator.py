"""The transaction coordinator (pylog/clients/transactions.py): Kafka's transaction requests as library calls,
their state in __transaction_state, fencing, timeouts and recovery of a half-ended transaction."""

from __future__ import annotations

import fcntl
import os
from dataclasses import replace

import pytest

import pylog
from pylog.clients.transactions import TxnState
from pylog.errors import (ConcurrentTransactionsError, CorruptRecordError, InvalidArgumentError, InvalidGroupError,
                          InvalidProducerEpochError, InvalidProducerIdMappingError, InvalidTopicError,
                          InvalidTransactionTimeoutError, InvalidTxnStateError, ProducerFencedError,
                          TransactionalIdNotFoundError, UnknownTopicError)
from pylog.partition import internals
from pylog.storage.txn_state import TransactionMetadata, decode_state, state_key, state_value
from pylog.store import transaction_coordinator
from pylog.structs import TopicPartition as TP


@pytest.fixture
def store(txn_store):
    return txn_store


def _send(store, pid, epoch, partition, values, seq=0):
    return store.topic("t").partition(partition).append_values(values, producer=(pid, epoch, seq), transactional=True)


def _committed_values(store, partition):
    return [r.value for r in store.topic("t").partition(partition).read(0, isolation_level="read_committed")]


def test_init_gives_a_new_id_epoch_zero_and_a_second_init_bumps_the_epoch(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    assert epoch == 0
    assert c.init_producer_id("app", 60_000) == (pid, 1)
    other, _ = c.init_producer_id("other", 60_000)
    assert other != pid
    meta = c.describe("app")
    assert (meta.producer_id, meta.producer_epoch, meta.state, meta.timeout_ms) == (pid, 1, TxnState.EMPTY, 60_000)


def test_commit_makes_records_of_several_partitions_and_offsets_visible_together(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_partitions("app", pid, epoch, [TP("t", 0), TP("t", 2)])
    _send(store, pid, epoch, 0, [b"a", b"b"])
    _send(store, pid, epoch, 2, [b"c"])
    c.add_offsets("app", pid, epoch, "g")
    c.txn_offset_commit("app", pid, epoch, "g", {TP("in", 0): 7})
    assert _committed_values(store, 0) == [] and _committed_values(store, 2) == []
    assert store.committed_offsets("g") == {}
    c.end_txn("app", pid, epoch, True)
    assert _committed_values(store, 0) == [b"a", b"b"] and _committed_values(store, 2) == [b"c"]
    assert store.committed_offsets("g")[TP("in", 0)].offset == 7
    assert c.describe("app").state == TxnState.COMPLETE_COMMIT
    assert store.topic("t").partition(1).log_end_offset == 0  # no marker where the transaction never went


def test_abort_hides_records_and_offsets_for_good(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    store.commit_offsets("g", {TP("in", 0): 3})
    c.add_partitions("app", pid, epoch, [TP("t", 0)])
    _send(store, pid, epoch, 0, [b"a"])
    c.add_offsets("app", pid, epoch, "g")
    c.txn_offset_commit("app", pid, epoch, "g", {TP("in", 0): 9})
    c.end_txn("app", pid, epoch, False)
    assert _committed_values(store, 0) == []
    assert store.committed_offsets("g")[TP("in", 0)].offset == 3
    # The next transaction of the same producer commits normally after the aborted one.
    c.add_partitions("app", pid, epoch, [TP("t", 0)])
    _send(store, pid, epoch, 0, [b"b"], seq=1)
    c.end_txn("app", pid, epoch, True)
    assert _committed_values(store, 0) == [b"b"]


def test_offsets_committed_outside_a_transaction_count_while_one_is_open(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_offsets("app", pid, epoch, "g")
    c.txn_offset_commit("app", pid, epoch, "g", {TP("in", 0): 9})
    store.commit_offsets("g", {TP("in", 1): 4})  # same offsets partition, not transactional
    assert store.committed_offsets("g") == {TP("in", 1): store.committed_offsets("g")[TP("in", 1)]}
    c.end_txn("app", pid, epoch, True)
    assert {tp: om.offset for tp, om in store.committed_offsets("g").items()} == {TP("in", 0): 9, TP("in", 1): 4}


def test_init_fences_the_previous_incarnation_and_aborts_the_transaction_it_left_open(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_partitions("app", pid, epoch, [TP("t", 1)])
    _send(store, pid, epoch, 1, [b"zombie"])
    assert c.init_producer_id("app", 60_000) == (pid, epoch + 1)
    assert c.describe("app").state == TxnState.EMPTY
    p = store.topic("t").partition(1)
    assert p.last_stable_offset == p.log_end_offset  # the open transaction was aborted: the LSO moved on
    assert _committed_values(store, 1) == []
    with pytest.raises(ProducerFencedError):
        _send(store, pid, epoch, 1, [b"late"], seq=1)  # the abort marker carried the bumped epoch
    with pytest.raises(ProducerFencedError):
        c.add_partitions("app", pid, epoch, [TP("t", 0)])
    with pytest.raises(ProducerFencedError):
        c.end_txn("app", pid, epoch, True)
    # The new incarnation writes with the bumped epoch from sequence 0.
    c.add_partitions("app", pid, epoch + 1, [TP("t", 1)])
    _send(store, pid, epoch + 1, 1, [b"new"])
    c.end_txn("app", pid, epoch + 1, True)
    assert _committed_values(store, 1) == [b"new"]


def test_producer_id_and_epoch_mismatches_raise_kafkas_errors(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("app", pid + 100, epoch, [TP("t", 0)])
    with pytest.raises(InvalidProducerEpochError):
        c.add_partitions("app", pid, epoch + 1, [TP("t", 0)])
    with pytest.raises(InvalidProducerIdMappingError, match="no state"):  # Kafka's answer for an unknown id
        c.add_partitions("never", pid, epoch, [TP("t", 0)])
    with pytest.raises(TransactionalIdNotFoundError):
        c.describe("never")
    with pytest.raises(InvalidProducerIdMappingError):
        c.init_producer_id("fresh", 60_000, producer_id=5, producer_epoch=0)
    assert c.init_producer_id("app", 60_000, producer_id=pid, producer_epoch=epoch) == (pid, epoch + 1)


def test_end_txn_retry_succeeds_and_ending_no_transaction_is_invalid_state(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    with pytest.raises(InvalidTxnStateError):
        c.end_txn("app", pid, epoch, True)
    c.add_partitions("app", pid, epoch, [TP("t", 0)])
    _send(store, pid, epoch, 0, [b"a"])
    c.end_txn("app", pid, epoch, True)
    end = store.topic("t").partition(0).log_end_offset
    c.end_txn("app", pid, epoch, True)  # a retry: nothing more written
    assert store.topic("t").partition(0).log_end_offset == end
    with pytest.raises(InvalidTxnStateError):
        c.end_txn("app", pid, epoch, False)


def test_offsets_of_a_group_not_added_are_refused(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    with pytest.raises(InvalidTxnStateError):
        c.txn_offset_commit("app", pid, epoch, "g", {TP("in", 0): 1})


def test_bad_arguments_raise_before_anything_is_written(store):
    c = transaction_coordinator(store)
    for bad in (0, -5, 900_001, "60000", True):
        with pytest.raises(InvalidTransactionTimeoutError):
            c.init_producer_id("app", bad)
    for bad in ("", None, 3, "lone\udc80surrogate"):
        with pytest.raises(InvalidArgumentError):
            c.init_producer_id(bad, 60_000)
    pid, epoch = c.init_producer_id("app", 60_000)
    with pytest.raises(UnknownTopicError):
        c.add_partitions("app", pid, epoch, [TP("nope", 0)])
    with pytest.raises(InvalidArgumentError):
        c.add_partitions("app", pid, epoch, [TP("t", 3)])
    for bad in ("", None, b"g"):
        with pytest.raises(InvalidGroupError):
            c.add_offsets("app", pid, epoch, bad)
    assert c.describe("app").state == TxnState.EMPTY


def test_a_transaction_past_its_timeout_is_aborted_by_the_sweep_and_its_producer_fenced(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("slow", 1)
    keep, kepoch = c.init_producer_id("fast", 60_000)
    c.add_partitions("slow", pid, epoch, [TP("t", 0)])
    _send(store, pid, epoch, 0, [b"never"])
    c.add_partitions("fast", keep, kepoch, [TP("t", 2)])
    meta = c.describe("slow")
    while c.describe("slow").start_ms + 1 >= pylog.storage.records.now_ms():  # past the 1 ms timeout
        pass
    assert c.abort_timed_out() == ["slow"]
    after = c.describe("slow")
    assert (after.state, after.producer_epoch) == (TxnState.COMPLETE_ABORT, meta.producer_epoch + 1)
    assert c.describe("fast").state == TxnState.ONGOING
    p = store.topic("t").partition(0)
    assert p.last_stable_offset == p.log_end_offset and _committed_values(store, 0) == []
    with pytest.raises(ProducerFencedError):
        c.end_txn("slow", pid, epoch, True)


def test_a_prepare_commit_left_by_a_dead_coordinator_is_completed_by_the_next_lock_holder(store, tmp_path):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_partitions("app", pid, epoch, [TP("t", 0), TP("t", 1)])
    _send(store, pid, epoch, 0, [b"a"])
    _send(store, pid, epoch, 1, [b"b"])
    # What a coordinator killed right after its commit point leaves: PrepareCommit, and one marker of two.
    prepared = replace(c.describe("app"), state=TxnState.PREPARE_COMMIT, coordinator_epoch=0)
    store._txn_log.append(prepared, True, 1000)
    internals(store.topic("t").partition(0)).append_marker(pid, epoch, True, 0)
    store.close()
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as again:
        c2 = transaction_coordinator(again)
        assert c2.describe("app").state == TxnState.PREPARE_COMMIT
        assert c2.abort_timed_out() == ["app"]  # the sweep takes the free lock and rolls the commit forward
        assert c2.describe("app").state == TxnState.COMPLETE_COMMIT
        assert _committed_values(again, 0) == [b"a"] and _committed_values(again, 1) == [b"b"]


def test_a_prepare_abort_left_behind_is_completed_before_init_returns(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_partitions("app", pid, epoch, [TP("t", 0)])
    _send(store, pid, epoch, 0, [b"a"])
    store._txn_log.append(replace(c.describe("app"), state=TxnState.PREPARE_ABORT), True, 1000)
    assert c.init_producer_id("app", 60_000) == (pid, epoch + 1)
    p = store.topic("t").partition(0)
    assert p.last_stable_offset == p.log_end_offset and _committed_values(store, 0) == []


def test_the_state_survives_a_reopen_of_the_store(store, tmp_path):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_partitions("app", pid, epoch, [TP("t", 2)])
    store.close()
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as again:
        meta = transaction_coordinator(again).describe("app")
        assert (meta.state, meta.partitions) == (TxnState.ONGOING, frozenset([TP("t", 2)]))
        assert [m.transactional_id for m in again.list_transactions()] == ["app"]


def test_a_lock_held_elsewhere_is_concurrent_transactions(store):
    c = transaction_coordinator(store)
    c.init_producer_id("app", 60_000)
    c.lock_wait_ms = 50
    path = os.path.join(store.path, "__transactions", "app.lock")
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(ConcurrentTransactionsError):
            c.init_producer_id("app", 60_000)
        assert c.abort_timed_out() == []
    finally:
        os.close(fd)
    assert c.init_producer_id("app", 60_000).epoch == 1  # the refused call changed nothing


def test_list_transactions_filters_by_state_and_producer_id(store):
    c = transaction_coordinator(store)
    a, ae = c.init_producer_id("a", 60_000)
    b, _ = c.init_producer_id("b", 60_000)
    c.add_partitions("a", a, ae, [TP("t", 0)])
    assert [m.transactional_id for m in c.list_transactions([TxnState.ONGOING])] == ["a"]
    assert [m.transactional_id for m in c.list_transactions(producer_ids=[b])] == ["b"]
    assert TxnState.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"


def test_state_records_decode_to_what_was_encoded_and_damage_is_corrupt_record():
    meta = TransactionMetadata("app", 12, 3, 60_000, TxnState.ONGOING, frozenset([TP("t", 1), TP("t", 0)]),
                               frozenset(["g"]), 1_700_000_000_000, 1_700_000_000_005, 4)
    key, value = state_key("app"), state_value(meta)
    assert decode_state(key, value) == ("app", meta)
    assert decode_state(key, None) == ("app", None)
    for bad in (value[:-1] + bytes([value[-1] ^ 1]), b"PLTX\x02" + value[5:], value[:8], b"XXXX" + value[4:]):
        with pytest.raises(CorruptRecordError):
            decode_state(key, bad)
    for bad_key in (None, b"\xc1", b"\x92\x01\xa0", b"\x92\x02\xa3app"):
        with pytest.raises(CorruptRecordError):
            decode_state(bad_key, value)


def test_a_state_partition_kept_between_appends_is_handed_to_another_store_and_let_go_when_idle(tmp_path):
    from storetools import wait_for
    with pylog.open(tmp_path / "s") as first, pylog.open(tmp_path / "s") as second:  # cleaner threads on
        c1, c2 = transaction_coordinator(first), transaction_coordinator(second)
        pid, _ = c1.init_producer_id("app", 60_000)
        held = first._txn_log.partition_for("app")
        assert held.is_writer  # kept for the next transition
        c2.lock_wait_ms = 20_000
        assert c2.init_producer_id("app", 60_000) == (pid, 1)  # handed over by first's thread
        assert not held.is_writer
        assert wait_for(lambda: not second._txn_log.partition_for("app").is_writer, timeout=30)  # idle: let go


def test_describe_producers_shows_the_open_transaction_from_any_handle(store, tmp_path):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("app", 60_000)
    c.add_partitions("app", pid, epoch, [TP("t", 1)])
    _send(store, pid, epoch, 1, [b"a", b"b"])
    with pylog.open(tmp_path / "s", read_only=True) as reader:  # not the writer: computed from the files
        (desc,) = internals(reader.topic("t").partition(1)).describe_producers()
        assert (desc.producer_id, desc.producer_epoch, desc.last_sequence, desc.current_txn_start_offset) == \
            (pid, epoch, 1, 0)
        c.end_txn("app", pid, epoch, True)
        (desc,) = internals(reader.topic("t").partition(1)).describe_producers()
        assert (desc.current_txn_start_offset, desc.last_sequence) == (-1, 1)


def _unflushed(store, topic):
    return sum(internals(p).durability.unflushed for p in store.topic(topic).partitions)


def _commit_one(store, tid, partition):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id(tid, 60_000)
    c.add_partitions(tid, pid, epoch, [TP("t", partition)])
    _send(store, pid, epoch, partition, [b"v"])
    c.end_txn(tid, pid, epoch, True)


def test_commit_points_and_markers_are_fsynced_unless_transaction_state_has_a_flush_policy(store, tmp_path):
    _commit_one(store, "app", 0)
    assert _unflushed(store, "__transaction_state") == 1  # Ongoing, PrepareCommit fsynced; Complete not
    assert _unflushed(store, "t") == 0  # the records and the marker: the markers' fsync covers them
    cfg = store.alter_topic_config("__transaction_state", {"flush.messages": 1_000_000})
    assert cfg["flush.messages"] == 1_000_000
    _commit_one(store, "app", 1)
    assert _unflushed(store, "__transaction_state") >= 4  # Empty, Ongoing, PrepareCommit, CompleteCommit
    assert internals(store.topic("t").partition(1)).durability.unflushed == 2  # the record and its marker
    assert _committed_values(store, 1) == [b"v"]
    store.close()
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as again:  # the policy is the topic's, kept
        _commit_one(again, "app", 2)
        assert internals(again.topic("t").partition(2)).durability.unflushed == 2
        again.alter_topic_config("__transaction_state", {}, remove=["flush.messages"])
        _commit_one(again, "app", 0)
        assert internals(again.topic("t").partition(0)).durability.unflushed == 0


def test_of_the_internal_topics_only_transaction_state_flush_settings_can_be_altered(tmp_path):
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as s:
        assert "__transaction_state" not in s  # set before the first transaction: the topic is created
        s.alter_topic_config("__transaction_state", {"flush.ms": 1000})
        assert s.topic("__transaction_state").config.overrides["flush.ms"] == 1000
        with pytest.raises(InvalidTopicError, match="only its flush.messages and flush.ms"):
            s.alter_topic_config("__transaction_state", {"flush.ms": 5, "cleanup.policy": "delete"})
        with pytest.raises(InvalidTopicError, match="only its flush.messages and flush.ms"):
            s.alter_topic_config("__transaction_state", {}, remove=["cleanup.policy"])
        assert s.topic("__transaction_state").config.overrides["flush.ms"] == 1000
        with pytest.raises(InvalidTopicError, match="internal topic"):
            s.alter_topic_config("__consumer_offsets", {"flush.ms": 5})
