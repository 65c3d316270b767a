"""``pylog serve``'s transaction APIs and DescribeProducers (issue 27), through the real clients: each client's
transactional producer in its own test (commit, abort, fencing, consume-transform-produce), read_committed and
read_uncommitted consumers of all three, and a server restart in the middle of a transaction. Raw requests
(``pylog.server.protocol.encode_request`` over a socket) for what no client does on purpose (KIP-890's refusal
of a produce to a partition not added to the transaction)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time

import pytest

import pylog
from pylog.errors import ProducerFencedError
from pylog.partition import internals
from pylog.store import transaction_coordinator
from pylog.server.protocol import ErrorCode, encode_request, parse_response

from serverutil import kafka_batch, start_cli_server, wait_until

pytest.importorskip("kafka")
ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("aiokafka")
import aiokafka  # noqa: E402
import kafka.errors as KErr  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.slow

# The store and server fixtures: tests/conftest.py.

TIMEOUT = 30  # seconds any one client call may take on a loaded machine


@pytest.fixture
def kp_admin(server):
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers, request_timeout_ms=10_000)
    yield a
    a.close()


def _call(server, api_key: int, version: int, body: dict, sock: socket.socket) -> dict:
    sock.sendall(encode_request(api_key, version, 41, "raw", body))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    corr, resp = parse_response(api_key, version, sock.recv(size, socket.MSG_WAITALL))
    assert corr == 41
    return resp


def _offsets(store, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as pylog's own consumers see them."""
    return {(tp.topic, tp.partition): om.offset for tp, om in store.committed_offsets(group).items()}


# --------------------------------------------------------------------------- readers of all three clients

def _confluent_values(bootstrap: str, topic: str, partitions: int, level: str, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{level}-{time.monotonic_ns()}",
                  "isolation.level": level, "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def _kafka_python_values(bootstrap: str, topic: str, partitions: int, level: str, count: int) -> list[bytes]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(r.value for r in recs)
        return out
    finally:
        c.close()


def _aiokafka_values(bootstrap: str, topic: str, partitions: int, level: str, count: int) -> list[bytes]:
    async def main() -> list[bytes]:
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level,
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            c.assign([aiokafka.TopicPartition(topic, p) for p in range(partitions)])
            out: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while len(out) < count and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in recs)
            return out
        finally:
            await c.stop()
    return asyncio.run(main())


READERS = {"confluent": _confluent_values, "kafka-python": _kafka_python_values, "aiokafka": _aiokafka_values}


def _check_isolation(bootstrap: str, topic: str, partitions: int, committed: set[bytes], aborted: set[bytes],
                     last: bytes) -> None:
    """Every client's read_committed consumer sees exactly ``committed`` (``last`` among them, committed after
    the aborted transaction, so reading up to it has passed the aborted records), its read_uncommitted consumer
    the aborted records too."""
    for name, read in READERS.items():
        got = read(bootstrap, topic, partitions, "read_committed", len(committed))
        assert sorted(got) == sorted(committed), name
        got = read(bootstrap, topic, partitions, "read_uncommitted", len(committed) + len(aborted))
        assert sorted(got) == sorted(committed | aborted), name


# --------------------------------------------------------------------------- confluent-kafka (librdkafka)

def _ck_producer(server, txn_id: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": server.bootstrap_servers, "transactional.id": txn_id, "linger.ms": 5,
                  "log_level": 0, **extra})
    p.init_transactions(TIMEOUT)
    return p


def test_confluent_transactional_producer_commits_and_aborts(server, store):
    store.create_topic("ck", partitions=3)
    p = _ck_producer(server, "ck-1")
    p.begin_transaction()
    for i in range(9):
        p.produce("ck", value=b"c%d" % i, partition=i % 3)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(6):
        p.produce("ck", value=b"a%d" % i, partition=i % 3)
    p.flush(TIMEOUT)  # on the server before the abort: read_uncommitted readers see them
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce("ck", value=b"last", partition=1)
    p.commit_transaction(TIMEOUT)
    committed = {b"c%d" % i for i in range(9)} | {b"last"}
    _check_isolation(server.bootstrap_servers, "ck", 3, committed, {b"a%d" % i for i in range(6)}, b"last")
    # pylog's own readers agree: markers in every partition, the LSO at the log end
    for n in range(3):
        part = store.topic("ck").partition(n)
        assert part.last_stable_offset == part.log_end_offset


def test_confluent_second_instance_fences_the_first_and_aborts_its_transaction(server, store):
    store.create_topic("fence")
    first = _ck_producer(server, "fence-1")
    first.begin_transaction()
    first.produce("fence", value=b"zombie", partition=0)
    first.flush(TIMEOUT)
    second = _ck_producer(server, "fence-1")  # bumps the epoch: the first one's transaction is aborted
    with pytest.raises(KafkaException) as e:
        first.produce("fence", value=b"zombie-2", partition=0)
        first.commit_transaction(TIMEOUT)
    assert e.value.args[0].fatal() and e.value.args[0].code() == ck.KafkaError._FENCED
    second.begin_transaction()
    second.produce("fence", value=b"alive", partition=0)
    second.commit_transaction(TIMEOUT)
    assert _confluent_values(server.bootstrap_servers, "fence", 1, "read_committed", 1) == [b"alive"]
    assert b"zombie-2" not in _kafka_python_values(server.bootstrap_servers, "fence", 1, "read_uncommitted", 2)


def test_confluent_consume_transform_produce_commits_offsets_with_the_output(server, store):
    store.create_topic("in", partitions=2)
    store.create_topic("out", partitions=2)
    src = Producer({"bootstrap.servers": server.bootstrap_servers})
    for i in range(10):
        src.produce("in", value=b"%d" % i, partition=i % 2)
    src.flush(TIMEOUT)
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "ctp", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    p = _ck_producer(server, "ctp-1")
    try:
        c.subscribe(["in"])
        seen: list = []
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 10 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m)
        assert len(seen) == 10
        # an aborted round: neither its output nor its offsets count
        p.begin_transaction()
        for m in seen[:4]:
            p.produce("out", value=b"bad" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction([ck.TopicPartition("in", n, 3) for n in range(2)],
                                      c.consumer_group_metadata(), TIMEOUT)
        p.abort_transaction(TIMEOUT)
        assert [tp.offset for tp in c.committed([ck.TopicPartition("in", n) for n in range(2)], TIMEOUT)] == [-1001] * 2
        # the committed round
        p.begin_transaction()
        for m in seen:
            p.produce("out", value=b"x" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), TIMEOUT)
        p.commit_transaction(TIMEOUT)
        got = wait_until(lambda: c.committed([ck.TopicPartition("in", n) for n in range(2)], TIMEOUT), what="offsets")
        assert sorted(tp.offset for tp in got) == [5, 5]
    finally:
        c.close()
    # pylog's own view of the group's offsets agrees
    assert _offsets(store, "ctp") == {("in", 0): 5, ("in", 1): 5}
    assert sorted(_kafka_python_values(server.bootstrap_servers, "out", 2, "read_committed", 10)) == sorted(
        b"x%d" % i for i in range(10))


def test_confluent_producer_survives_a_server_restart_mid_transaction(tmp_path):
    path = tmp_path / "store"
    srv = pylog.serve(path, port=0)
    port = srv.port
    try:
        p = Producer({"bootstrap.servers": srv.bootstrap_servers, "transactional.id": "rs-1", "linger.ms": 5,
                      "message.timeout.ms": 60_000, "transaction.timeout.ms": 60_000})
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        for i in range(5):
            p.produce("rs", value=b"r%d" % i)
        p.flush(TIMEOUT)
    finally:
        srv.close()
    srv = pylog.serve(path, port=port)  # the same address: the client reconnects
    try:
        p.produce("rs", value=b"r5")
        p.commit_transaction(TIMEOUT)
        assert sorted(_kafka_python_values(srv.bootstrap_servers, "rs", 1, "read_committed", 6)) == sorted(
            b"r%d" % i for i in range(6))
    finally:
        srv.close()


def test_confluent_producer_commits_after_the_server_was_killed_mid_transaction(tmp_path):
    # SIGKILL of a `pylog serve` process while a transaction is open: the restarted server (same port) knows
    # the transaction from the store's __transaction_state, and the producer commits it.
    path = tmp_path / "store"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, bootstrap, _ = start_cli_server(path, "--port", str(port))
    try:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kill-1", "linger.ms": 5,
                      "log_level": 0, "message.timeout.ms": 60_000})
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        for i in range(5):
            p.produce("killed", value=b"k%d" % i)
        p.flush(TIMEOUT)
    finally:
        proc.kill()
        proc.wait(TIMEOUT)
    proc, bootstrap, _ = start_cli_server(path, "--port", str(port))
    try:
        p.produce("killed", value=b"k5")
        p.commit_transaction(TIMEOUT)
        assert sorted(_kafka_python_values(bootstrap, "killed", 1, "read_committed", 6)) == sorted(
            b"k%d" % i for i in range(6))
    finally:
        proc.terminate()
        proc.wait(TIMEOUT)


def test_a_kafka_client_and_pylogs_own_producer_share_a_transactional_id(server, store):
    # The server's coordinator is the library's: a confluent producer's InitProducerId fences pylog's own
    # producer of the same transactional id and aborts the transaction it left open, and the reverse.
    store.create_topic("mix")
    own = store.producer(transactional_id="mix-1")
    try:
        own.init_transactions()
        own.begin_transaction()
        own.send("mix", b"own-zombie", partition=0)
        own.flush()
        p = _ck_producer(server, "mix-1")
        with pytest.raises(ProducerFencedError):
            own.commit_transaction()
    finally:
        own.close()
    p.begin_transaction()
    p.produce("mix", value=b"kafka", partition=0)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce("mix", value=b"kafka-zombie", partition=0)
    p.flush(TIMEOUT)
    again = store.producer(transactional_id="mix-1")
    try:
        again.init_transactions()  # fences the confluent producer, aborting its open transaction
        with pytest.raises(KafkaException) as e:
            p.commit_transaction(TIMEOUT)
        assert e.value.args[0].fatal()
        again.begin_transaction()
        again.send("mix", b"own", partition=0)
        again.commit_transaction()
    finally:
        again.close()
    assert _confluent_values(server.bootstrap_servers, "mix", 1, "read_committed", 2) == [b"kafka", b"own"]


# --------------------------------------------------------------------------- kafka-python

def test_kafka_python_transactional_producer_commits_and_aborts(server, store):
    store.create_topic("kp", partitions=2)
    p = KafkaProducer(bootstrap_servers=server.bootstrap_servers, transactional_id="kp-1")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(6):
            p.send("kp", value=b"c%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(4):
            p.send("kp", value=b"a%d" % i, partition=i % 2)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("kp", value=b"last", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=TIMEOUT)
    _check_isolation(server.bootstrap_servers, "kp", 2, {b"c%d" % i for i in range(6)} | {b"last"},
                     {b"a%d" % i for i in range(4)}, b"last")


def test_kafka_python_second_instance_fences_the_first(server, store):
    store.create_topic("kpf")
    first = KafkaProducer(bootstrap_servers=server.bootstrap_servers, transactional_id="kpf-1")
    second = KafkaProducer(bootstrap_servers=server.bootstrap_servers, transactional_id="kpf-1")
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send("kpf", value=b"zombie", partition=0).get(timeout=TIMEOUT)
        second.init_transactions()
        with pytest.raises(KErr.ProducerFencedError):
            first.commit_transaction()
        second.begin_transaction()
        second.send("kpf", value=b"alive", partition=0)
        second.commit_transaction()
    finally:
        first.close(timeout=1)
        second.close(timeout=TIMEOUT)
    assert _kafka_python_values(server.bootstrap_servers, "kpf", 1, "read_committed", 1) == [b"alive"]


def test_kafka_python_send_offsets_to_transaction(server, store):
    store.create_topic("kin")
    store.topic("kin").partition(0).append_values([b"%d" % i for i in range(5)])
    p = KafkaProducer(bootstrap_servers=server.bootstrap_servers, transactional_id="kctp-1")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("kout", value=b"done", partition=0)
        from kafka.structs import OffsetAndMetadata
        p.send_offsets_to_transaction({TopicPartition("kin", 0): OffsetAndMetadata(5, "", -1)}, "kgroup")
        p.commit_transaction()
    finally:
        p.close(timeout=TIMEOUT)
    assert _offsets(store, "kgroup") == {("kin", 0): 5}


# --------------------------------------------------------------------------- aiokafka

def test_aiokafka_transactional_producer_commits_and_aborts(server, store):
    store.create_topic("ak", partitions=2)

    async def main() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=server.bootstrap_servers, transactional_id="ak-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(6):
                    await p.send("ak", value=b"c%d" % i, partition=i % 2)
            await p.begin_transaction()
            for i in range(4):
                await (await p.send("ak", value=b"a%d" % i, partition=i % 2))
            await p.abort_transaction()
            async with p.transaction():
                await p.send("ak", value=b"last", partition=0)
                await p.send_offsets_to_transaction({aiokafka.TopicPartition("ak", 0): 2}, "agroup")
        finally:
            await p.stop()
    asyncio.run(asyncio.wait_for(main(), TIMEOUT * 2))
    _check_isolation(server.bootstrap_servers, "ak", 2, {b"c%d" % i for i in range(6)} | {b"last"},
                     {b"a%d" % i for i in range(4)}, b"last")
    assert _offsets(store, "agroup") == {("ak", 0): 2}


# --------------------------------------------------------------------------- the server's checks and state

def test_transactional_produce_to_a_partition_not_added_is_refused(server, store):
    store.create_topic("k890", partitions=2)
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        assert _call(server, 10, 1, {"key": "k890-1", "key_type": 1}, s)["error_code"] == 0
        init = _call(server, 22, 1, {"transactional_id": "k890-1", "transaction_timeout_ms": 60_000}, s)
        assert init["error_code"] == 0
        pid, epoch = init["producer_id"], init["producer_epoch"]
        added = _call(server, 24, 1, {"v3_and_below_transactional_id": "k890-1", "v3_and_below_producer_id": pid,
                                      "v3_and_below_producer_epoch": epoch,
                                      "v3_and_below_topics": [{"name": "k890", "partitions": [0]}]}, s)
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0

        def produce(partition: int, seq: int) -> dict:
            resp = _call(server, 0, 7, {"transactional_id": "k890-1", "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": "k890", "partition_data": [{"index": partition, "records": kafka_batch(
                    [b"v"], pid, epoch, seq, transactional=True)}]}]}, s)
            return resp["responses"][0]["partition_responses"][0]
        assert produce(1, 0)["error_code"] == ErrorCode.INVALID_TXN_STATE  # partition 1 was never added
        assert store.topic("k890").partition(1).log_end_offset == 0
        assert produce(0, 0)["error_code"] == 0
        ended = _call(server, 26, 1, {"transactional_id": "k890-1", "producer_id": pid, "producer_epoch": epoch,
                                      "committed": True}, s)
        assert ended["error_code"] == 0
        assert produce(0, 1)["error_code"] == ErrorCode.INVALID_TXN_STATE  # the transaction ended: add it again
    assert store.topic("k890").partition(0).read(0, isolation_level="read_committed")[0].value == b"v"


def test_transaction_requests_get_kafkas_error_codes(server, store):
    store.create_topic("ec")
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        bad = _call(server, 22, 1, {"transactional_id": "ec-1", "transaction_timeout_ms": 0}, s)
        assert bad["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        first = _call(server, 22, 1, {"transactional_id": "ec-1", "transaction_timeout_ms": 60_000}, s)
        pid, epoch = first["producer_id"], first["producer_epoch"]
        second = _call(server, 22, 4, {"transactional_id": "ec-1", "transaction_timeout_ms": 60_000,
                                       "producer_id": -1, "producer_epoch": -1}, s)
        assert (second["producer_id"], second["producer_epoch"]) == (pid, epoch + 1)

        def add(version: int, ep: int, topics: list) -> dict:
            out = _call(server, 24, version, {"v3_and_below_transactional_id": "ec-1", "v3_and_below_producer_id": pid,
                                              "v3_and_below_producer_epoch": ep, "v3_and_below_topics": topics}, s)
            return {(t["name"], p["partition_index"]): p["partition_error_code"]
                    for t in out["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}
        # a missing topic or partition: nothing is added, the others are not attempted
        assert add(3, epoch + 1, [{"name": "ec", "partitions": [0, 7]}, {"name": "nope", "partitions": [0]}]) == {
            ("ec", 0): ErrorCode.OPERATION_NOT_ATTEMPTED, ("ec", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # the fenced first incarnation: INVALID_PRODUCER_EPOCH before KIP-588's versions, PRODUCER_FENCED after
        assert add(1, epoch, [{"name": "ec", "partitions": [0]}]) == {("ec", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert add(3, epoch, [{"name": "ec", "partitions": [0]}]) == {("ec", 0): ErrorCode.PRODUCER_FENCED}
        end = {"transactional_id": "ec-1", "producer_id": pid, "producer_epoch": epoch + 1, "committed": True}
        assert _call(server, 26, 3, end, s)["error_code"] == ErrorCode.INVALID_TXN_STATE  # nothing open
        assert _call(server, 26, 3, {**end, "producer_id": pid + 100}, s)["error_code"] == \
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert _call(server, 25, 3, {"transactional_id": "never", "producer_id": pid, "producer_epoch": 0,
                                     "group_id": "g"}, s)["error_code"] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        out = _call(server, 28, 3, {"transactional_id": "ec-1", "group_id": "g", "producer_id": pid,
                                    "producer_epoch": epoch + 1, "generation_id": 3, "member_id": "m",
                                    "group_instance_id": None, "topics": [{"name": "ec", "partitions": [
                                        {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                         "committed_metadata": ""}]}]}, s)
        assert out["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION  # KIP-447's check


def test_offsets_in_an_open_transaction_are_unstable_for_read_committed_offset_fetches(server, store):
    store.create_topic("uo")
    store.commit_offsets("ug", {pylog.TopicPartition("uo", 0): pylog.OffsetAndMetadata(1, "")})
    fetch = {"group_id": "ug", "topics": [{"name": "uo", "partition_indexes": [0]}]}

    def fetched(s: socket.socket, stable: bool) -> tuple[int, int]:
        p = _call(server, 9, 7, {**fetch, "require_stable": stable}, s)["topics"][0]["partitions"][0]
        return p["error_code"], p["committed_offset"]
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        init = _call(server, 22, 1, {"transactional_id": "uo-1", "transaction_timeout_ms": 60_000}, s)
        ids = {"transactional_id": "uo-1", "producer_id": init["producer_id"], "producer_epoch": init["producer_epoch"]}
        assert _call(server, 25, 1, {**ids, "group_id": "ug"}, s)["error_code"] == 0
        out = _call(server, 28, 2, {**ids, "group_id": "ug", "topics": [{"name": "uo", "partitions": [
            {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
            s)
        assert out["topics"][0]["partitions"][0]["error_code"] == 0
        # a read_committed consumer (require_stable) is told to ask again; others get the last committed offset
        assert fetched(s, True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        assert fetched(s, False) == (0, 1)
        assert _call(server, 26, 1, {**ids, "committed": True}, s)["error_code"] == 0
        assert fetched(s, True) == (0, 7)
    assert _offsets(store, "ug") == {("uo", 0): 7}


def test_list_offsets_under_read_committed_stops_at_the_last_stable_offset(server, store):
    store.create_topic("lo")
    part = store.topic("lo").partition(0)
    part.append_values([b"plain"], timestamps=[1_000])  # 0
    pid = store.new_producer_id()
    part.append_values([b"open"], timestamps=[2_000], producer=(pid, 0, 0), transactional=True)  # 1, left open

    def lookup(s: socket.socket, level: int, ts: int) -> tuple[int, int]:
        p = _call(server, 2, 7, {"replica_id": -1, "isolation_level": level, "topics": [
            {"name": "lo", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]},
            s)["topics"][0]["partitions"][0]
        assert p["error_code"] == 0
        return p["offset"], p["timestamp"]
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        assert lookup(s, 1, -1)[0] == 1 and lookup(s, 0, -1)[0] == 2  # latest: the LSO / the log end
        assert lookup(s, 1, 1_500) == (-1, -1) and lookup(s, 0, 1_500) == (1, 2_000)  # by time: not past the LSO
        assert lookup(s, 1, -3) == (-1, -1) and lookup(s, 0, -3) == (1, 2_000)  # max timestamp likewise
        assert lookup(s, 1, 500) == (0, 1_000)
        internals(part).append_marker(pid, 0, commit=True)
        assert lookup(s, 1, 1_500) == (1, 2_000) and lookup(s, 1, -1)[0] == 3


def test_describe_and_list_transactions_report_the_coordinators_state(server, store, kp_admin):
    store.create_topic("dt", partitions=2)
    p = _ck_producer(server, "dt-1")
    p.begin_transaction()
    p.produce("dt", value=b"x", partition=1)
    p.flush(TIMEOUT)
    listed = [t for t in kp_admin.list_transactions()[0] if t.transactional_id == "dt-1"]
    assert listed[0].state.value == "Ongoing"
    d = kp_admin.describe_transactions(["dt-1"])["dt-1"]
    assert d.state.value == "Ongoing" and d.transaction_timeout_ms > 0
    assert set(d.topic_partitions) == {TopicPartition("dt", 1)}
    producers = kp_admin.describe_producers([TopicPartition("dt", 1)])[TopicPartition("dt", 1)].active_producers
    assert [x.current_transaction_start_offset for x in producers] == [0]
    p.commit_transaction(TIMEOUT)
    assert kp_admin.describe_transactions(["dt-1"])["dt-1"].state.value == "CompleteCommit"
    with pytest.raises(KErr.TransactionalIdNotFoundError):
        kp_admin.describe_transactions(["nobody"])


@pytest.mark.parametrize("cleaner", [True, False], ids=["store-sweeps", "server-sweeps"])
def test_a_dead_producers_transaction_is_aborted_after_its_timeout(tmp_path, cleaner):
    # A client that opens a transaction and goes away (its connection closed, no EndTxn): raw requests, so
    # that no client library ends the transaction on its way out. A store with its cleaner on sweeps the
    # timeouts itself; with it off, the server does.
    with pylog.open(tmp_path / "store", transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
                    log_cleaner_enable=cleaner) as store, pylog.serve(store, port=0) as server:
        store.create_topic("dead")
        with socket.create_connection((server.host, server.port), timeout=10) as s:
            init = _call(server, 22, 1, {"transactional_id": "dead-1", "transaction_timeout_ms": 1000}, s)
            pid, epoch = init["producer_id"], init["producer_epoch"]
            _call(server, 24, 1, {"v3_and_below_transactional_id": "dead-1", "v3_and_below_producer_id": pid,
                                  "v3_and_below_producer_epoch": epoch,
                                  "v3_and_below_topics": [{"name": "dead", "partitions": [0]}]}, s)
            resp = _call(server, 0, 7, {"transactional_id": "dead-1", "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": "dead", "partition_data": [{"index": 0, "records": kafka_batch(
                    [b"lost"], pid, epoch, 0, transactional=True)}]}]}, s)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        part = store.topic("dead").partition(0)
        assert part.last_stable_offset == 0
        wait_until(lambda: part.last_stable_offset == part.log_end_offset, timeout=TIMEOUT, what="the timeout's abort")
        assert part.read(0, isolation_level="read_committed") == []
        assert transaction_coordinator(store).describe("dead-1").producer_epoch == epoch + 1  # fenced


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


@pytest.mark.parametrize("cleaner", [True, False], ids=["store-sweeps", "server-sweeps"])
def test_an_idle_transactional_id_expires_and_its_next_init_starts_afresh(tmp_path, cleaner):
    # transactional.id.expiration.ms: a client that initialised an id and went away leaves no state behind
    # once the setting has passed; whichever sweeps (the store's thread, or the server's task), the id's next
    # InitProducerId gets a new producer id at epoch 0 and DescribeTransactions no longer finds it meanwhile.
    with pylog.open(tmp_path / "store", transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
                    transactional_id_expiration_ms=1, log_cleaner_enable=cleaner) as store, \
            pylog.serve(store, port=0) as server:
        with socket.create_connection((server.host, server.port), timeout=10) as s:
            init = _call(server, 22, 1, {"transactional_id": "brief-1", "transaction_timeout_ms": 1000}, s)
            old_pid = init["producer_id"]
            # The lock file goes last, after the tombstone that ends the listing: wait for both.
            lock_file = os.path.join(store.path, "__transactions", "brief-1.lock")
            wait_until(lambda: not store.list_transactions() and not os.path.exists(lock_file), timeout=TIMEOUT,
                       what="the id's expiry")
            desc = _call(server, 65, 0, {"transactional_ids": ["brief-1"]}, s)
            assert desc["transaction_states"][0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            # The expired incarnation is answered as Kafka answers an id it has no state of.
            end = {"transactional_id": "brief-1", "producer_id": old_pid, "producer_epoch": 0, "committed": True}
            assert _call(server, 26, 3, end, s)["error_code"] == ErrorCode.INVALID_PRODUCER_ID_MAPPING
            again = _call(server, 22, 1, {"transactional_id": "brief-1", "transaction_timeout_ms": 1000}, s)
            assert again["error_code"] == 0 and again["producer_id"] != old_pid and again["producer_epoch"] == 0


def test_serve_sets_the_stores_transactional_id_expiration_when_it_opens_the_store(tmp_path):
    with pylog.serve(tmp_path / "store", port=0, transactional_id_expiration_ms=5000) as server:
        assert server.store.settings["transactional.id.expiration.ms"] == 5000
    with pytest.raises(pylog.InvalidArgumentError):
        pylog.serve(tmp_path / "store", port=0, transactional_id_expiration_ms=0)


@pytest.mark.parametrize("damage, message", [("flipped", "aborted-transaction index entry checksum mismatch"),
                                             ("cut", "aborted-transaction index ends in a torn entry")])
def test_a_damaged_aborted_transaction_index_gives_read_committed_clients_corrupt_message_and_the_log_its_file(
        server, store, caplog, damage, message):
    """A Fetch at READ_COMMITTED over a damaged .txnindex entry: librdkafka sees CORRUPT_MESSAGE (never the
    aborted records), the server logged the damage at debug only (the operator had no file to look at) and
    now warns once naming it, and serves on (read_uncommitted reads every record). An index cut inside its
    last entry, whose abort marker is in the log, handed the client that transaction's records instead."""
    import logging
    p = store.create_topic("dmg", partitions=1).partition(0)
    for n in range(2):
        pid = store.new_producer_id()
        p.append_values([b"aborted%d" % n] * 2, producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
    p.append_values([b"plain"])
    index = os.path.join(p.directory, "00000000000000000000.txnindex")
    with open(index, "r+b") as f:
        if damage == "cut":
            f.truncate(8 + 36 + 30)
        else:
            f.seek(8 + 20)
            f.write(b"\xff")
    caplog.set_level(logging.WARNING, logger="pylog.server")
    c = Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "dmg", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition("dmg", 0, 0)])
        errors, values = [], []
        deadline = time.monotonic() + 60
        while len(errors) < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error():
                errors.append(m.error().code())
            elif m is not None:
                values.append(m.value())
    finally:
        c.close()
    assert values == [] and errors[:3] == [ck.KafkaError.INVALID_MSG] * 3
    warned = [r.getMessage() for r in caplog.records if "txnindex" in r.getMessage()]
    assert len(warned) == 1 and message in warned[0], warned
    assert len(_confluent_values(server.bootstrap_servers, "dmg", 1, "read_uncommitted", 5)) == 5
