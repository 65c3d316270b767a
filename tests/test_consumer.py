"""The consumer (without groups): kafka-python's KafkaConsumer API over a store.

Run: ``python -m pytest tests/test_consumer.py -q``
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time

import pytest

import pylog
from pylog import TopicPartition, metrics, prometheus
from pylog.store import quota_manager

from storetools import blocked_in, wait_for


@pytest.fixture
def store(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as s:
        yield s


def _fill(store, topic, partitions=1, n=10, ts0=1000):
    store.create_topic(topic, partitions=partitions)
    for p in range(partitions):
        store.topic(topic).partition(p).append_values(
            [b"%s-%d-%d" % (topic.encode(), p, i) for i in range(n)], keys=[b"k%d" % i for i in range(n)],
            timestamps=[ts0 + i for i in range(n)])


def test_poll_from_earliest_and_latest(store):
    _fill(store, "t", partitions=2)
    c = store.consumer("t", auto_offset_reset="earliest")
    got = c.poll(timeout_ms=0, max_records=100)
    assert set(got) == {TopicPartition("t", 0), TopicPartition("t", 1)}
    rec = got[TopicPartition("t", 0)][3]
    assert (rec.topic, rec.partition, rec.offset, rec.key, rec.value, rec.timestamp, rec.timestamp_type) == \
        ("t", 0, 3, b"k3", b"t-0-3", 1003, 0)
    assert rec.serialized_value_size == 5 and rec.headers == ()
    assert c.poll() == {}
    assert c.position(TopicPartition("t", 0)) == 10
    late = store.consumer("t")  # latest: only what comes after
    assert late.poll() == {}
    store.topic("t").partition(1).append_values([b"new"])
    assert [r.value for r in late.poll()[TopicPartition("t", 1)]] == [b"new"]


def test_max_poll_records_round_robin_and_iteration(store):
    _fill(store, "t", partitions=3, n=20)
    c = store.consumer("t", auto_offset_reset="earliest", max_poll_records=7, consumer_timeout_ms=100,
                       value_deserializer=bytes.decode, key_deserializer=bytes.decode)
    first = c.poll()
    assert sum(len(v) for v in first.values()) == 7
    rest = list(c)
    values = [r.value for recs in first.values() for r in recs] + [r.value for r in rest]
    assert sorted(values) == sorted(f"t-{p}-{i}" for p in range(3) for i in range(20))
    for p in range(3):
        offs = [r.offset for r in rest if r.partition == p]
        assert offs == sorted(offs)
    assert isinstance(rest[0].key, str)


def test_assign_seek_pause_resume_and_offsets_for_times(store):
    _fill(store, "t", partitions=2, n=10)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    c = store.consumer(auto_offset_reset="earliest")
    c.assign([tp0, tp1])
    assert c.assignment() == {tp0, tp1} and c.subscription() is None
    c.seek(tp0, 5)
    c.pause(tp1)
    got = c.poll(max_records=100)
    assert list(got) == [tp0] and [r.offset for r in got[tp0]] == [5, 6, 7, 8, 9]
    assert c.paused() == {tp1}
    c.resume(tp1)
    assert [r.offset for r in c.poll(max_records=100)[tp1]] == list(range(10))
    c.seek_to_beginning(tp0)
    assert c.position(tp0) == 0
    c.seek_to_end()
    assert c.position(tp1) == 10
    assert c.beginning_offsets([tp0]) == {tp0: 0} and c.end_offsets([tp0, tp1]) == {tp0: 10, tp1: 10}
    found = c.offsets_for_times({tp0: 1004, tp1: 99999})
    assert found[tp0] == pylog.OffsetAndTimestamp(4, 1004) and found[tp1] is None
    assert c.metrics()["consumer-fetch-manager-metrics"] == {"fetch-throttle-time-avg": 0.0,
                                                             "fetch-throttle-time-max": 0.0, "records-lag-max": 0}
    assert c.metrics()["consumer-coordinator-metrics"] == {"assigned-partitions": 2}
    assert c.metrics()["t-0"] == {"position": 10, "committed": None, "log_start_offset": 0, "log_end_offset": 10,
                                  "lag": 0, "lead": 10, "owned": True}
    with pytest.raises(pylog.InvalidConfigError):
        c.subscribe(["t"])
    with pytest.raises(pylog.UnknownTopicError):
        c.assign([TopicPartition("nope", 0)])
    with pytest.raises(pylog.InvalidConfigError):
        c.seek(TopicPartition("t", 5), 0)


def test_pattern_subscription_picks_up_topics_created_later(store):
    _fill(store, "orders-eu")
    c = store.consumer(auto_offset_reset="earliest", metadata_max_age_ms=0)
    c.subscribe(pattern=r"orders-.*")
    assert {tp.topic for tp in c.poll(max_records=100)} == {"orders-eu"}
    _fill(store, "orders-us")
    _fill(store, "other")
    assert {tp.topic for tp in c.poll(max_records=100)} == {"orders-us"}
    assert c.subscription() == {"orders-eu", "orders-us"}


def test_offset_removed_by_retention_resets_or_raises(store):
    _fill(store, "t", n=10)
    tp = TopicPartition("t", 0)
    c = store.consumer(auto_offset_reset="earliest")
    c.assign([tp])
    strict = store.consumer(auto_offset_reset="none")
    strict.assign([tp])
    with pytest.raises(pylog.NoOffsetForPartitionError):
        strict.poll()
    strict.seek(tp, 2)
    store.delete_records("t", 0, 6)
    assert [r.offset for r in c.poll(max_records=100)[tp]] == [6, 7, 8, 9]
    with pytest.raises(pylog.OffsetOutOfRangeError):
        strict.poll()


def test_poll_wakes_promptly_on_an_append_in_this_process(store):
    store.create_topic("t")
    c = store.consumer("t")
    c.poll()
    p = store.topic("t").partition(0)
    p.append_values([b"warm-up"])
    c.poll()

    # The poll may wait an hour; it must return as soon as the append comes, which is made only once the
    # poll sits in its wait (so it is the wake-up that ends it; the 60 s below only guard against a hang).
    got: list = []
    poller = threading.Thread(target=lambda: got.append(c.poll(timeout_ms=3_600_000)), daemon=True)
    poller.start()
    assert wait_for(lambda: blocked_in(poller, "wait"), 60), "the poll never waited"
    p.append_values([b"x"])
    poller.join(60)
    assert not poller.is_alive(), "the append did not wake the poll"
    assert [r.value for recs in got[0].values() for r in recs] == [b"x"]


def _produce_when_told(path, go):
    os.read(go, 1)
    with pylog.open(path, log_cleaner_enable=False) as s:
        s.topic("t").partition(0).append_values([b"from another process"])


def test_poll_sees_another_process_append(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        store.create_topic("t")
        c = store.consumer("t", auto_offset_reset="earliest")
        go_r, go_w = os.pipe()
        proc = multiprocessing.get_context("fork").Process(target=_produce_when_told, args=(str(tmp_path), go_r))
        proc.start()
        got: list = []
        poller = threading.Thread(target=lambda: got.append(c.poll(timeout_ms=3_600_000)), daemon=True)
        poller.start()
        try:
            # The other process appends once the poll sleeps (on the futex, or polling the log end).
            assert wait_for(lambda: blocked_in(poller, "futex", "wait", "sleep"), 60), "the poll never waited"
            os.write(go_w, b"g")
            poller.join(60)
            assert not poller.is_alive(), "another process's append did not wake the poll"
        finally:
            os.close(go_r)
            os.close(go_w)
            proc.join(30)
        assert [r.value for recs in got[0].values() for r in recs] == [b"from another process"]


def test_producer_to_consumer_round_trip_and_config_errors(store):
    store.create_topic("t", partitions=3)
    with store.producer(value_serializer=lambda v: json.dumps(v).encode()) as producer:
        for i in range(30):
            producer.send("t", {"i": i}, key=b"user-%d" % (i % 5))
    with store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=200,
                        value_deserializer=json.loads) as c:
        got = sorted(r.value["i"] for r in c)
    assert got == list(range(30))
    with pytest.raises(pylog.InvalidConfigError, match="group_id"):
        store.consumer("t", group_id="")
    with pytest.raises(pylog.InvalidConfigError, match="heartbeat"):
        store.consumer("t", group_id="g", session_timeout_ms=100, heartbeat_interval_ms=100)
    with pytest.raises(pylog.InvalidConfigError, match="strategy"):
        store.consumer("t", group_id="g", partition_assignment_strategy=["fastest"])
    with pytest.raises(pylog.InvalidConfigError):
        store.consumer("t", auto_offset_reset="sometimes")
    with pytest.raises(pylog.InvalidConfigError):
        store.consumer("t", bootstrap_servers="x")


def test_leaving_an_iteration_early_loses_nothing(store):
    _fill(store, "t", n=50)
    c = store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=100)
    taken = []
    for rec in c:
        taken.append(rec.offset)
        if len(taken) == 7:
            break
    assert next(c).offset == 7
    assert c.position(TopicPartition("t", 0)) == 8
    rest = [r.offset for recs in c.poll(max_records=100).values() for r in recs]
    assert rest == list(range(8, 50))


def _reads_while_iterating(store, client_id, pause_every=0):
    """Records taken by iterating topic "t" to its end, and how many reads of the store it took (the
    consumer's fetch-duration histogram counts one per read that returned records: public metrics)."""
    was = metrics.enabled()
    reg = prometheus.registry(store)  # turns recording on
    try:
        c = store.consumer("t", client_id=client_id, auto_offset_reset="earliest", consumer_timeout_ms=200,
                           enable_auto_commit=False)
        taken = []
        for rec in c:
            taken.append(rec.offset)
            if pause_every and len(taken) % pause_every == 0:
                time.sleep(0.02)
        reads = reg.get_sample_value("pylog_consumer_fetch_duration_seconds_count", {"client_id": client_id})
        c.close()
    finally:
        metrics.enable(was)
    return taken, reads


def test_a_fast_iteration_reads_more_than_max_poll_records_at_a_time(store):
    # Records taken quickly are read ahead in larger chunks (fewer per-poll costs): 40,000 records at the
    # default max_poll_records (500) take 80 reads one poll's worth at a time; taken at >= ~60 k/s, far fewer.
    _fill(store, "t", n=40_000)
    taken, reads = _reads_while_iterating(store, "fast-iterator")
    assert taken == list(range(40_000))
    assert reads < 60


def test_a_slow_iteration_reads_max_poll_records_at_a_time(store):
    # A caller that takes records slowly gets max_poll_records per read, as before: the group's state is
    # looked at between reads at least that often (a rebalance waits at most one chunk's time).
    _fill(store, "t", n=1_500)
    taken, reads = _reads_while_iterating(store, "slow-iterator", pause_every=25)
    assert taken == list(range(1_500))
    assert reads >= 3


def test_seek_pause_and_rescans_during_iteration(store):
    _fill(store, "t", n=10)
    tp = TopicPartition("t", 0)
    c = store.consumer("t", auto_offset_reset="earliest", consumer_timeout_ms=100, metadata_max_age_ms=0)
    seen = []
    for rec in c:  # metadata_max_age_ms=0: the subscription is rescanned on every poll
        seen.append(rec.offset)
        if rec.offset == 5 and seen.count(5) == 1:
            c.seek(tp, 0)
    assert seen == [0, 1, 2, 3, 4, 5] + list(range(10))
    c.seek(tp, 0)
    seen = []
    for rec in c:
        seen.append(rec.offset)
        if rec.offset == 2:
            c.pause(tp)
    assert seen == [0, 1, 2] and c.position(tp) == 3


def test_a_poll_that_fails_on_one_partition_moves_no_position(store):
    _fill(store, "t", partitions=2, n=10)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    c = store.consumer(auto_offset_reset="none")
    c.assign([tp0, tp1])
    c.seek(tp0, 0)
    c.seek(tp1, 0)
    store.delete_records("t", 1, 5)
    with pytest.raises(pylog.OffsetOutOfRangeError):
        c.poll(max_records=100)
    assert c.position(tp0) == 0


def test_a_deleted_topic_leaves_a_pattern_subscription(store):
    _fill(store, "ev-a", n=2)
    _fill(store, "ev-b", n=2)
    c = store.consumer(auto_offset_reset="earliest")
    c.subscribe(pattern="ev-.*")
    store.delete_topic("ev-b")
    assert {tp.topic for tp in c.poll(max_records=100)} == {"ev-a"}
    assert c.assignment() == {TopicPartition("ev-a", 0)}


def test_iteration_positions_commits_and_polls_mid_chunk(store):
    _fill(store, "t", n=100)
    tp = TopicPartition("t", 0)
    c = store.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=100)
    it = iter(c)
    assert [next(it).offset for _ in range(10)] == list(range(10))
    assert c.position(tp) == 10 and c.metrics()["t-0"]["position"] == 10
    c.commit()  # the position handed out so far, not the end of the poll being iterated
    assert c.committed(tp) == 10
    assert [r.offset for r in c.poll(max_records=5)[tp]] == [10, 11, 12, 13, 14]  # takes over
    assert next(it).offset == 15  # the old iterator goes on from there: nothing repeated or skipped
    assert [r.offset for r in it] == list(range(16, 100))
    c.close()


def test_consumer_byte_rate_quota_delays_fetches(store):
    _fill(store, "t", n=1000)
    sizes = sum(len(b"t-0-%d" % i) + len(b"k%d" % i) for i in range(1000))
    now = [0.0]
    slept: list[float] = []

    def sleep(d):
        slept.append(d)
        now[0] += d

    quotas = quota_manager(store)
    quotas.clock, quotas.sleep = (lambda: now[0]), sleep
    store.set_quota("slow", consumer_byte_rate=100)
    free = store.consumer("t", client_id="free", auto_offset_reset="earliest")
    assert sum(len(v) for v in free.poll(0, max_records=5000).values()) == 1000 and not slept
    c = store.consumer("t", client_id="slow", auto_offset_reset="earliest", max_poll_records=5)
    got = 0
    while True:
        batch = c.poll(0)
        if not batch:
            break
        got += sum(len(v) for v in batch.values())
    assert got == 1000
    # Held back until the byte rate over the window is the limit: ~sizes / 100 seconds of (fake) time in
    # all, less the window's head start.
    assert sizes / 100 - 12 <= now[0] <= sizes / 100 + 1, (now[0], sizes)
    m = c.metrics()["consumer-fetch-manager-metrics"]
    assert m["fetch-throttle-time-max"] > 0 and m["fetch-throttle-time-avg"] > 0


# ------------------------------------------------------------------------------------------------------
# The rest of a batch a poll read is handed to the next poll (the segment's Continuation), not read and
# checked again.


def _one_big_batch(store, topic="big", n=2000):
    store.create_topic(topic)
    store.topic(topic).partition(0).append_values([b"v%d" % i for i in range(n)], keys=[b"k%d" % i for i in range(n)])
    store.topic(topic).partition(0).append_values([b"after"])  # a second batch behind it


def test_polls_through_a_large_batch_hand_out_each_record_once_in_order(store):
    _one_big_batch(store)
    c = store.consumer("big", auto_offset_reset="earliest", max_poll_records=300)
    tp = TopicPartition("big", 0)
    offsets = []
    while True:
        got = c.poll(max_records=300)
        if not got:
            break
        recs = got[tp]
        assert len(recs) <= 300
        offsets += [r.offset for r in recs]
        assert c.position(tp) == offsets[-1] + 1
    assert offsets == list(range(2001))
    # Iterating does the same, handing rows out one at a time.
    c.seek(tp, 0)
    it = iter(c)
    assert [next(it).offset for _ in range(1500)] == list(range(1500))
    assert c.position(tp) == 1500
    c.seek(tp, 1234)  # into the batch a poll held: read again from there
    assert [r.offset for r in c.poll(max_records=5)[tp]] == [1234, 1235, 1236, 1237, 1238]
    c.close()


def test_a_poll_hands_out_the_rest_of_the_batch_the_last_read_checked_without_reading_it_again(tmp_path):
    """A reader's view of the active segment checks every read (GUARANTEES.md), so polls of 500 through a
    batch of 2,000 would read and check the whole batch four times; a poll continuing where the last one
    stopped is handed the rest of the batch as that read checked it instead, as Kafka's consumer hands out what
    it fetched. A read elsewhere (another consumer, from the start) checks the file again and finds what
    changed there since."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as writer:
        _one_big_batch(writer)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            c = reader.consumer("big", auto_offset_reset="earliest", max_poll_records=500)
            tp = TopicPartition("big", 0)
            first = c.poll()[tp]
            seg = reader.topic("big").partition(0).segments[-1]
            with open(seg.log_path, "r+b") as f:  # a byte of the big batch's last value changes on disk
                f.seek(os.path.getsize(seg.log_path) - 200)
                b = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([b[0] ^ 0xFF]))
            rest = [r.offset for _ in range(3) for r in c.poll()[tp]]
            assert [r.offset for r in first] + rest == list(range(2000))
            with pytest.raises(pylog.CorruptRecordError):
                reader.consumer("big", auto_offset_reset="earliest").poll()


def test_leaving_an_iteration_mid_batch_then_polling_resumes_at_the_next_record(store):
    _one_big_batch(store)
    c = store.consumer("big", auto_offset_reset="earliest", max_poll_records=700, consumer_timeout_ms=0)
    tp = TopicPartition("big", 0)
    for rec in c:
        if rec.offset == 999:
            break
    assert c.position(tp) == 1000
    assert c.poll(max_records=2)[tp][0].offset == 1000
    assert [r.offset for r in c] == list(range(1002, 2001))
