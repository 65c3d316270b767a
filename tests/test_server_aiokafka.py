"""aiokafka (from the package registry) against ``pylog serve``: produce with and without keys, headers, every
codec, idempotent producer, consume from earliest / latest / a timestamp, group commits in pylog's state."""

from __future__ import annotations

import asyncio
import time

import pytest

from pylog.clients.partitioner import partition_for_key

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.slow


# The store and server fixtures: tests/conftest.py.


async def _consume(bs, topic, n, timeout=20.0, **kw):
    c = AIOKafkaConsumer(topic, bootstrap_servers=bs, auto_offset_reset="earliest", **kw)
    await c.start()
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=500)).values():
                got.extend(msgs)
    finally:
        if "group_id" not in kw:
            await c.stop()
    return got, c


def test_keys_headers_idempotent_and_consume(server, store):
    store.create_topic("orders", partitions=4)

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers, enable_idempotence=True, linger_ms=5)
        await p.start()
        sent = []
        try:
            futs = []
            for i in range(300):
                key = None if i % 3 == 0 else f"user-{i % 13}".encode()
                headers = [("trace", str(i).encode())] if i % 4 == 0 else []
                futs.append((key, f"v{i}".encode(), headers,
                             await p.send("orders", f"v{i}".encode(), key=key, headers=headers)))
            for key, value, headers, fut in futs:
                meta = await fut
                if key is not None:
                    assert meta.partition == partition_for_key(key, 4)
                sent.append((meta.partition, meta.offset, key, value, headers))
        finally:
            await p.stop()
        got, _ = await _consume(server.bootstrap_servers, "orders", 300)
        return sent, got

    sent, got = asyncio.run(main())
    assert sorted((m.partition, m.offset, m.key, m.value, list(m.headers)) for m in got) == sorted(sent)
    for p, o, key, value, headers in sent:
        rec = store.topic("orders").partition(p).read(o, max_records=1)[0]
        assert (rec.key, rec.value, list(rec.headers)) == (key, value, headers)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_each_compression_codec(server, store, codec):
    store.create_topic("c", partitions=1)
    values = [(b"z" * (i % 70)) + str(i).encode() for i in range(2000)]

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers, compression_type=codec, linger_ms=20)
        await p.start()
        try:
            futs = [await p.send("c", v) for v in values]
            offsets = [(await f).offset for f in futs]
        finally:
            await p.stop()
        got, _ = await _consume(server.bootstrap_servers, "c", 2000)
        return offsets, got

    offsets, got = asyncio.run(main())
    assert offsets == list(range(2000))
    assert [m.value for m in got] == values
    assert [r.value for r in store.topic("c").partition(0).read(0, max_records=5000)] == values


def test_timestamps_latest_and_group_commit(server, store):
    store.create_topic("t", partitions=1)
    base = int(time.time() * 1000) - 60_000

    async def main():
        bs = server.bootstrap_servers
        p = AIOKafkaProducer(bootstrap_servers=bs)
        await p.start()
        try:
            for i in range(100):
                await p.send("t", str(i).encode(), timestamp_ms=base + 10 * i)
            await p.flush()
            c = AIOKafkaConsumer(bootstrap_servers=bs)
            await c.start()
            tp = TopicPartition("t", 0)
            c.assign([tp])
            found = await c.offsets_for_times({tp: base + 505})
            assert (found[tp].offset, found[tp].timestamp) == (51, base + 510)
            assert await c.end_offsets([tp]) == {tp: 100}
            assert await c.beginning_offsets([tp]) == {tp: 0}
            c.seek(tp, 51)
            batch = (await c.getmany(tp, timeout_ms=3000, max_records=10))[tp]
            assert [(m.offset, m.timestamp) for m in batch] == [(i, base + 10 * i) for i in range(51, 61)]
            await c.seek_to_end(tp)
            assert await c.position(tp) == 100
            await p.send_and_wait("t", b"late")
            late = (await c.getmany(tp, timeout_ms=5000))[tp]
            assert [(m.offset, m.value) for m in late] == [(100, b"late")]
            await c.stop()
            # A group member commits; the commit is pylog's committed offset for the group.
            got, g = await _consume(bs, "t", 101, group_id="aio-group", enable_auto_commit=False)
            assert len(got) == 101
            await g.commit()
            await g.stop()
        finally:
            await p.stop()

    asyncio.run(main())
    committed = store.committed_offsets("aio-group")
    assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 101}
