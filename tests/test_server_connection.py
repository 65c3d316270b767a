"""pylog.server.connection: how a connection writes the answers it owes (in order; those ready at once together)."""

from __future__ import annotations

import asyncio
import collections
import socket

import pylog
from pylog.server.connection import Connection
from pylog.server.protocol import RequestHeader, encode_request, parse_response

from serverutil import kafka_batch, recv_frame


class _Transport:
    """What a connection writes through: each call's bytes, in order."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: list) -> None:
        self.writes.append(b"".join(bytes(p) for p in parts))


def _connection() -> tuple[Connection, _Transport]:
    conn = Connection.__new__(Connection)  # only what _write_owed uses: the answers owed and the transport
    conn._owed = collections.deque()
    conn.transport = _Transport()  # type: ignore[assignment]
    return conn, conn.transport  # type: ignore[return-value]


def _produce_answer(corr: int, offset: int) -> tuple[RequestHeader, dict]:
    return RequestHeader(0, 7, corr, "c"), {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": offset, "log_append_time_ms": -1, "log_start_offset": 0}]}],
        "throttle_time_ms": 0}


def _answers(data: bytes) -> list[tuple[int, int]]:
    """(correlation id, base offset) of each Produce v7 answer in ``data``, a run of size-prefixed frames."""
    out = []
    while data:
        size = int.from_bytes(data[:4], "big")
        corr, body = parse_response(0, 7, data[4:4 + size])
        out.append((corr, body["responses"][0]["partition_responses"][0]["base_offset"]))
        data = data[4 + size:]
    return out


def test_answers_ready_together_leave_in_one_write_in_request_order() -> None:
    async def run() -> list[bytes]:
        conn, transport = _connection()
        loop = asyncio.get_running_loop()
        for corr in range(1, 6):
            header, body = _produce_answer(corr, corr * 10)
            fut = loop.create_future()
            fut.set_result(body)
            conn._owed.append((header, fut))
        await conn._write_owed(block=False)
        assert not conn._owed
        return transport.writes
    writes = asyncio.run(run())
    assert len(writes) == 1, "five answers ready at once were written one by one"
    assert _answers(writes[0]) == [(corr, corr * 10) for corr in range(1, 6)]


def test_answers_behind_one_not_ready_wait_for_it_and_keep_their_order() -> None:
    async def run() -> None:
        conn, transport = _connection()
        loop = asyncio.get_running_loop()
        futs = []
        for corr in range(1, 6):
            header, _ = _produce_answer(corr, corr)
            futs.append(loop.create_future())
            conn._owed.append((header, futs[-1]))
        for corr in (1, 2, 4, 5):  # the third answer waits (its fsync, say)
            futs[corr - 1].set_result(_produce_answer(corr, corr * 10)[1])
        await conn._write_owed(block=False)
        assert [_answers(w) for w in transport.writes] == [[(1, 10), (2, 20)]], "wrote past an answer not ready"
        assert len(conn._owed) == 3
        blocked = asyncio.ensure_future(conn._write_owed(block=True, every=True))
        await asyncio.sleep(0)
        assert len(transport.writes) == 1 and not blocked.done()
        futs[2].set_result(_produce_answer(3, 30)[1])
        await blocked
        assert [_answers(w) for w in transport.writes] == [[(1, 10), (2, 20)], [(3, 30), (4, 40), (5, 50)]]
    asyncio.run(run())


def test_pipelined_produce_requests_are_all_answered_in_order_over_a_socket(tmp_path) -> None:
    # Through a server: 40 acks=1 and acks=all requests sent at once; every answer arrives, in order.
    with pylog.open(tmp_path / "store", log_cleaner_enable=False) as store:
        store.create_topic("t")
        with pylog.serve(store, port=0, auto_create_topics=False, shutdown_timeout_s=5) as srv:
            with socket.create_connection((srv.host, srv.port), timeout=30) as s:
                s.sendall(b"".join(encode_request(0, 7, corr, "c", {
                    "transactional_id": None, "acks": -1 if corr % 3 else 1, "timeout_ms": 5000,
                    "topic_data": [{"name": "t", "partition_data": [{"index": 0,
                                                                     "records": kafka_batch([b"v%d" % corr])}]}]})
                    for corr in range(40)))
                got = []
                for _ in range(40):
                    frame = recv_frame(s)
                    assert frame is not None, "the server closed the connection"
                    corr, body = parse_response(0, 7, frame)
                    entry = body["responses"][0]["partition_responses"][0]
                    got.append((corr, entry["error_code"], entry["base_offset"]))
        assert got == [(corr, 0, corr) for corr in range(40)]
        assert [r.value for r in store.topic("t").partition(0).read(0, 40)] == [b"v%d" % c for c in range(40)]
