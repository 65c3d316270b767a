"""pylog.aio: the asyncio producer and consumer (aiokafka's shape), under pytest-asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import pylog
from pylog.aio import AIOKafkaConsumer, AIOKafkaProducer
from pylog.structs import TopicPartition

pytestmark = pytest.mark.asyncio


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "store")
    with pylog.open(p, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=2)
    return p


async def test_send_returns_a_future_and_send_and_wait_the_metadata(path):
    async with AIOKafkaProducer(bootstrap_servers=path, max_batch_size=1 << 16, loop=None) as producer:
        futs = [await producer.send("t", b"v%d" % i, partition=i % 2) for i in range(100)]
        assert all(isinstance(f, asyncio.Future) for f in futs)
        metas = await asyncio.gather(*futs)
        assert sorted((m.partition, m.offset) for m in metas) == sorted((i % 2, i // 2) for i in range(100))
        meta = await producer.send_and_wait("t", b"last", key=b"k", headers=[("h", b"x")])
        assert meta.topic == "t" and await producer.partitions_for("t") == {0, 1}
    async with AIOKafkaProducer(bootstrap_servers=path, allow_auto_create_topics=False) as strict:
        with pytest.raises(pylog.UnknownTopicError, match="create_topic"):  # raised by send() itself
            await strict.send("nope", b"x")
    with pylog.open(path) as store:
        p = store.topic("t").partition(meta.partition)
        assert p.read(meta.offset)[0].headers == (("h", b"x"),)


async def test_a_failed_append_fails_its_future(path):
    async with AIOKafkaProducer(bootstrap_servers=path, max_block_ms=50) as producer:
        with pylog.open(path) as other:
            other.topic("t").partition(0).append_values([b"x"])  # another handle holds partition 0's lock
            fut = await producer.send("t", b"y", partition=0)
            with pytest.raises(pylog.PartitionLockedError):
                await asyncio.wait_for(fut, 30)


async def test_async_for_getone_and_getmany(path):
    async with AIOKafkaProducer(bootstrap_servers=path) as producer:
        for i in range(30):
            await producer.send("t", b"%d" % i, partition=i % 2)
        await producer.flush()
    async with AIOKafkaConsumer("t", bootstrap_servers=path, auto_offset_reset="earliest",
                                consumer_timeout_ms=200) as consumer:
        first = await consumer.getone()
        got = await consumer.getmany(timeout_ms=1000, max_records=7)
        assert sum(map(len, got.values())) <= 7
        seen = [first] + [r for recs in got.values() for r in recs]
        async for msg in consumer:
            seen.append(msg)
            if len(seen) == 30:
                break
        assert sorted(int(r.value) for r in seen) == list(range(30))
        for tp in (TopicPartition("t", 0), TopicPartition("t", 1)):
            assert await consumer.position(tp) == 15 and consumer.highwater(tp) == 15
        assert await consumer.getmany(timeout_ms=50) == {}
        await consumer.seek_to_beginning(TopicPartition("t", 1))
        again = await consumer.getmany(TopicPartition("t", 1), timeout_ms=1000, max_records=3)
        assert [r.offset for r in again[TopicPartition("t", 1)]] == [0, 1, 2]
        assert await consumer.position(TopicPartition("t", 1)) == 3
    with pytest.raises(pylog.ConsumerStoppedError):
        await consumer.getone()
    assert not consumer.bootstrap_connected()


async def test_a_waiting_consumer_wakes_on_an_append_from_a_thread(path):
    """getone() sleeps in pylog's wake-ups (no records yet) and returns the record another thread appends."""
    async with AIOKafkaConsumer("t", bootstrap_servers=path, auto_offset_reset="latest") as consumer:
        assert await consumer.getmany(timeout_ms=0) == {}
        waiting = asyncio.ensure_future(consumer.getone())
        await asyncio.sleep(0)

        def append():
            with pylog.open(path) as store:
                store.topic("t").partition(1).append_values([b"hello"])
        t = threading.Thread(target=append)
        t.start()
        msg = await asyncio.wait_for(waiting, 30)
        t.join()
        assert (msg.partition, msg.offset, msg.value) == (1, 0, b"hello")


async def test_cancelled_fetch_loses_nothing_and_seek_drops_what_it_fetched(path):
    with pylog.open(path) as store:
        store.topic("t").partition(0).append_values([b"a", b"b", b"c"])
    async with AIOKafkaConsumer(bootstrap_servers=path, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        task = asyncio.ensure_future(consumer.getmany(timeout_ms=5000))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        got = await consumer.getmany(timeout_ms=5000)
        assert [r.value for r in got[tp]] == [b"a", b"b", b"c"]
        consumer.seek(tp, 1)
        assert [r.value for r in (await consumer.getmany(timeout_ms=5000))[tp]] == [b"b", b"c"]
        consumer.seek(tp, 0)
        one = await consumer.getone()
        consumer.seek(tp, 2)  # the fetch buffered b and c from offset 0: dropped
        assert one.value == b"a" and (await consumer.getone()).value == b"c"


async def test_a_fetch_that_ended_before_its_records_were_taken_in_is_not_fetched_again(path):
    """A cancelled getmany's fetch goes on in the worker. When it has ended but the loop has not yet run its
    completion (the records not buffered yet), the next getmany must take those records, not fetch the same
    offsets again (they were handed out twice). Whether the fetch ends before or after the loop resumes this
    task depends on thread scheduling, so the scenario runs 30 times: both orders come up."""
    with pylog.open(path) as store:
        store.topic("t").partition(0).append_values([b"a", b"b", b"c"])
    async with AIOKafkaConsumer(bootstrap_servers=path, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        for _ in range(30):
            consumer.seek(tp, 0)
            task = asyncio.ensure_future(consumer.getmany(timeout_ms=5000))
            await asyncio.sleep(0)  # the fetch starts in the worker
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Hold the loop while the worker's fetch ends (the records are there: it returns at once): its
            # result may then be queued on the loop ahead of this task's next step, and its completion
            # callbacks behind it.
            time.sleep(0.02)
            await asyncio.sleep(0)
            got = await consumer.getmany(timeout_ms=5000)
            assert [r.value for r in got[tp]] == [b"a", b"b", b"c"]
            assert await consumer.getmany(timeout_ms=0) == {}


async def test_group_commit_and_async_rebalance_listener(path):
    with pylog.open(path) as store:
        for p in range(2):
            store.topic("t").partition(p).append_values([b"x"] * 5)
    events = []

    class Listener(pylog.ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            await asyncio.sleep(0)
            events.append(("revoked", sorted(revoked)))

        async def on_partitions_assigned(self, assigned):
            await asyncio.sleep(0)
            events.append(("assigned", sorted(assigned)))

    consumer = AIOKafkaConsumer(bootstrap_servers=path, group_id="g", auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    consumer.subscribe(["t"], listener=Listener())
    got = {}
    while sum(map(len, got.values())) < 10:
        for tp, recs in (await consumer.getmany(timeout_ms=2000)).items():
            got.setdefault(tp, []).extend(recs)
    assert events[0] == ("revoked", []) and events[1] == ("assigned", [TopicPartition("t", 0), TopicPartition("t", 1)])
    await consumer.commit()
    assert await consumer.committed(TopicPartition("t", 0)) == 5
    await consumer.seek_to_beginning()
    assert await consumer.seek_to_committed() == {TopicPartition("t", 0): 5, TopicPartition("t", 1): 5}
    await consumer.stop()
    assert events[-1][0] == "revoked"
    with pylog.open(path) as store:
        assert {tp.partition: om.offset for tp, om in store.committed_offsets("g").items()} == {0: 5, 1: 5}


async def test_commit_covers_only_what_was_handed_out(path):
    with pylog.open(path) as store:
        store.topic("t").partition(0).append_values([b"%d" % i for i in range(10)])
    async with AIOKafkaConsumer(bootstrap_servers=path, group_id="h", auto_offset_reset="earliest",
                                enable_auto_commit=False) as consumer:
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        await consumer.getone()
        await consumer.getone()  # the fetch buffered all ten; two were handed out
        await consumer.commit()
        assert await consumer.committed(tp) == 2
