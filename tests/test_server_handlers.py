"""Promises of ``pylog serve``'s Produce and Fetch handlers (pylog.server.handlers) and of its clean stop
(pylog.server.server), each checked through raw Kafka requests on 127.0.0.1 so that removing the code that
keeps the promise fails its test: acks=all answered only after the fsync; no produce to internal topics;
OFFSET_OUT_OF_RANGE for a fetch outside the log; LogAppendTime in produce answers; TOPIC_AUTHORIZATION_FAILED
for a read-only store; KAFKA_STORAGE_ERROR for a full disk (and for a write the kernel refuses past
RLIMIT_FSIZE, in a server process of its own); a clean stop fsyncs the store it was given.

File-system events are observed by wrapping ``os.fsync`` / ``os.fdatasync`` / ``os.writev`` in this process,
which the server (run in a thread here) calls for its store; the sync wrappers call the real functions.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import pylog
from pylog.server.protocol import encode_request, parse_response
from pylog.server.protocol import codes as E
from serverutil import kafka_batch, recv_frame, wait_until

PRODUCE_VERSION, FETCH_VERSION = 8, 11  # Produce v8: per-partition error_message


def _produce(topic: str, values: list[bytes], acks: int, corr: int = 1) -> bytes:
    return encode_request(0, PRODUCE_VERSION, corr, "promises", {
        "transactional_id": None, "acks": acks, "timeout_ms": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": kafka_batch(values)}]}]})


def _partition_answer(frame: bytes | None) -> dict:
    assert frame is not None, "the server closed the connection"
    _, body = parse_response(0, PRODUCE_VERSION, frame)
    return body["responses"][0]["partition_responses"][0]


def _fetch(sock: socket.socket, topic: str, offset: int) -> dict:
    sock.sendall(encode_request(1, FETCH_VERSION, 2, "promises", {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}))
    frame = recv_frame(sock)
    assert frame is not None
    return parse_response(1, FETCH_VERSION, frame)[1]["responses"][0]["partitions"][0]


def _connect(srv: pylog.server.Server) -> socket.socket:
    return socket.create_connection((srv.host, srv.port), timeout=30)


def _segment_of_t0(path: str) -> bool:
    return f"{os.sep}t{os.sep}0{os.sep}" in path and path.endswith(".log")


class SyncSpy:
    """Wraps ``os.fsync`` and ``os.fdatasync``: records the path of each file synced, and while :attr:`gate` is
    clear holds every sync of a segment of partition t-0 until it is set (so a test can see what the server
    does while that fsync is under way; other files, such as the checkpoint a first write makes, pass)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold: bool = False) -> None:
        self.synced: list[str] = []
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real))

    def _wrap(self, real):
        def sync(fd):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = "?"
            self.synced.append(path)
            if _segment_of_t0(path):
                assert self.gate.wait(60), "the test never released the fsync"
            return real(fd)
        return sync


@pytest.fixture
def store(tmp_path):
    s = pylog.open(tmp_path / "store")
    s.create_topic("t", partitions=1)
    yield s
    s.close()


# ------------------------------------------------------------------------------------------------- Produce

def test_acks_all_is_answered_only_after_the_fsync_of_its_records(store, monkeypatch):
    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        spy = SyncSpy(monkeypatch, hold=True)
        try:
            sock.sendall(_produce("t", [b"durable"], acks=-1))
            wait_until(lambda: any(map(_segment_of_t0, spy.synced)), timeout=20,
                       what="the fsync of partition t-0's segment for the acks=all produce")
            sock.settimeout(0.5)
            with pytest.raises(socket.timeout):  # the fsync is held: no answer may leave before it completes
                sock.recv(1)
            sock.settimeout(30)
        finally:
            spy.gate.set()
        answer = _partition_answer(recv_frame(sock))
    assert answer["error_code"] == E.NONE and answer["base_offset"] == 0


def test_a_produce_to_an_internal_topic_is_refused_and_appends_nothing(store):
    # Consumer-group offsets live in __consumer_offsets: a client's records there would be read as commits.
    with store.consumer(group_id="g") as consumer:
        consumer.assign([pylog.TopicPartition("t", 0)])
        consumer.commit({pylog.TopicPartition("t", 0): 0})
    assert "__consumer_offsets" in store
    internal = store.topic("__consumer_offsets").partition(0)
    end = internal.log_end_offset
    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        sock.sendall(_produce("__consumer_offsets", [b"junk"], acks=1))
        answer = _partition_answer(recv_frame(sock))
    assert answer["error_code"] == E.INVALID_TOPIC_EXCEPTION and answer["base_offset"] == -1
    assert "internal topic" in answer["error_message"]
    assert internal.log_end_offset == end


def test_log_append_time_is_reported_in_the_produce_answer(store):
    store.create_topic("stamped", partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        before = int(time.time() * 1000)
        sock.sendall(_produce("stamped", [b"a", b"b"], acks=1))
        answer = _partition_answer(recv_frame(sock))
        after = int(time.time() * 1000)
        sock.sendall(_produce("t", [b"c"], acks=1, corr=2))
        create_time = _partition_answer(recv_frame(sock))
    assert answer["error_code"] == E.NONE
    assert before <= answer["log_append_time_ms"] <= after  # kafka_batch's own timestamps are from 2023
    stored = [r.timestamp for r in store.topic("stamped").partition(0).read(0)]
    assert stored == [answer["log_append_time_ms"]] * 2
    assert create_time["log_append_time_ms"] == -1  # CreateTime topics answer -1, as Kafka does


def test_a_read_only_store_answers_produce_with_topic_authorization_failed(store, tmp_path):
    store.close()
    read_only = pylog.open(tmp_path / "store", read_only=True)
    try:
        with pylog.serve(read_only, port=0) as srv, _connect(srv) as sock:
            sock.sendall(_produce("t", [b"x"], acks=1))
            answer = _partition_answer(recv_frame(sock))
            fetched = _fetch(sock, "t", 0)
    finally:
        read_only.close()
    assert answer["error_code"] == E.TOPIC_AUTHORIZATION_FAILED and answer["base_offset"] == -1
    assert fetched["error_code"] == E.NONE  # reading is what a read-only store is for
    assert pylog.open(tmp_path / "store", read_only=True).topic("t").partition(0).log_end_offset == 0


def test_a_full_disk_answers_produce_with_kafka_storage_error_and_the_server_goes_on(store, monkeypatch):
    real = os.writev

    def full(fd, parts):
        if threading.current_thread().name.startswith("pylog-serve-storage"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, parts)

    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        monkeypatch.setattr(os, "writev", full)
        sock.sendall(_produce("t", [b"lost"], acks=1))
        answer = _partition_answer(recv_frame(sock))
        monkeypatch.undo()
        sock.sendall(_produce("t", [b"kept"], acks=1, corr=2))
        after = _partition_answer(recv_frame(sock))
    assert answer["error_code"] == E.KAFKA_STORAGE_ERROR and "file system is full" in answer["error_message"]
    assert after["error_code"] == E.NONE and after["base_offset"] == 0
    assert [r.value for r in store.topic("t").partition(0).read(0)] == [b"kept"]


def test_out_of_descriptors_after_the_append_answers_what_was_appended_and_fsyncs_it(store, monkeypatch):
    # After a partition's append the server looks whether a writer of another process waits for it (the hand-over
    # probe, ``.want``, opened on first use). Out of descriptors there, the append has happened all the same: the
    # request must not be answered with an error (a client would send the records again) and acks=all must still
    # fsync them. Before, the OSError escaped and every partition of every request appended in that hop was
    # answered KAFKA_STORAGE_ERROR, unfsynced.
    store.create_topic("u", partitions=3)
    real = os.open

    def no_probe(path, *args, **kwargs):
        if str(path).endswith(os.sep + ".want"):
            raise OSError(errno.EMFILE, "Too many open files", path)
        return real(path, *args, **kwargs)

    spy = SyncSpy(monkeypatch)
    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        monkeypatch.setattr(os, "open", no_probe)
        sock.sendall(encode_request(0, PRODUCE_VERSION, 1, "promises", {
            "transactional_id": None, "acks": -1, "timeout_ms": 10_000,
            "topic_data": [{"name": "u", "partition_data": [{"index": i, "records": kafka_batch([b"v%d" % i])}
                                                            for i in range(3)]}]}))
        frame = recv_frame(sock)
        assert frame is not None
        answers = parse_response(0, PRODUCE_VERSION, frame)[1]["responses"][0]["partition_responses"]
        synced = list(spy.synced)
        monkeypatch.undo()
    assert [(a["index"], a["error_code"], a["base_offset"]) for a in answers] == [(i, E.NONE, 0) for i in range(3)]
    for i in range(3):
        assert [r.value for r in store.topic("u").partition(i).read(0)] == [b"v%d" % i]
        assert any(f"{os.sep}u{os.sep}{i}{os.sep}" in path and path.endswith(".log") for path in synced), i


def test_the_idle_hand_over_goes_on_after_its_probe_ran_out_of_descriptors(store, monkeypatch, tmp_path):
    # The server's sweep hands the partitions it holds over to writers of other processes, also while idle. Out of
    # descriptors for a partition's ``.want`` probe, the sweep raised an OSError that ended it for the server's life:
    # another writer then waited in vain for every partition the server had appended to.
    real = os.open
    refused = []

    def no_probe(path, *args, **kwargs):
        if str(path).endswith(os.sep + ".want"):
            refused.append(threading.current_thread().name)
            raise OSError(errno.EMFILE, "Too many open files", path)
        return real(path, *args, **kwargs)

    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        monkeypatch.setattr(os, "open", no_probe)
        sock.sendall(_produce("t", [b"held"], acks=1))
        assert _partition_answer(recv_frame(sock))["error_code"] == E.NONE
        # Once after the append, then by the sweep (every 10 ms while the server holds the partition).
        wait_until(lambda: len(refused) >= 3, timeout=20, what="the sweep to meet the shortage")
        monkeypatch.undo()
        with pylog.open(store.path) as other:
            part = other.topic("t").partition(0)
            part.wait_to_write(20_000)  # handed over by the sweep (it asks through .want)
            assert part.is_writer
            part.append_values([b"from another writer"])
            assert [r.value for r in part.read(0)] == [b"held", b"from another writer"]


def test_a_file_size_limit_answers_produce_with_kafka_storage_error(store, tmp_path):
    # A real refusal by the kernel: the server process runs under RLIMIT_FSIZE with SIGXFSZ ignored, so a write
    # past 64 KiB fails with EFBIG (a half-written batch cut back), as one on a full disk fails with ENOSPC.
    # (segment.index.bytes is lowered so that the indexes, sized for it when a segment opens, fit the limit.)
    store.create_topic("limited", partitions=1, config={"segment.index.bytes": 8192})
    store.close()
    log_path = tmp_path / "server.log"

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(tmp_path / "store"), "--port", "0"],
                                stdout=subprocess.DEVNULL, stderr=log, preexec_fn=limit)
    try:
        port = int(wait_until(lambda: re.search(r"listening on [\d.]+:(\d+)", log_path.read_text()), timeout=60,
                              what="the server's start").group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(_produce("limited", [b"x" * (100 << 10)], acks=1))
            too_big = _partition_answer(recv_frame(sock))
            sock.sendall(_produce("limited", [b"small"], acks=1, corr=2))
            small = _partition_answer(recv_frame(sock))
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
    assert too_big["error_code"] == E.KAFKA_STORAGE_ERROR and too_big["base_offset"] == -1, too_big
    assert too_big["error_message"].startswith("appending to limited-0") and "[Errno 27]" in too_big["error_message"]
    assert small["error_code"] == E.NONE and small["base_offset"] == 0, (too_big, small)
    with pylog.open(tmp_path / "store", read_only=True) as reopened:
        assert [r.value for r in reopened.topic("limited").partition(0).read(0)] == [b"small"]


# --------------------------------------------------------------------------------------------------- Fetch

@pytest.mark.parametrize("where", ["past the end", "far past the end", "before the start"])
def test_a_fetch_outside_the_log_is_answered_offset_out_of_range(store, where):
    part = store.topic("t").partition(0)
    part.append_values([b"%d" % i for i in range(10)])
    store.delete_records("t", 0, 4)
    offset = {"past the end": 11, "far past the end": 1 << 40, "before the start": 2}[where]
    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        answer = _fetch(sock, "t", offset)
        inside = _fetch(sock, "t", 4)
    assert answer["error_code"] == E.OFFSET_OUT_OF_RANGE and answer["records"] in (b"", None, [])
    assert answer["log_start_offset"] == 4 and answer["high_watermark"] == 10
    assert inside["error_code"] == E.NONE and inside["records"]


def _list_offsets(sock: socket.socket, topic: str, timestamp: int) -> dict:
    sock.sendall(encode_request(2, 7, 3, "promises", {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}))
    frame = recv_frame(sock)
    assert frame is not None
    return parse_response(2, 7, frame)[1]["topics"][0]["partitions"][0]


def test_list_offsets_max_timestamp_names_the_first_record_with_the_largest_timestamp(store):
    # ListOffsets v7's MAX_TIMESTAMP (-3), from Partition.max_timestamp and the time index, across segments.
    store.create_topic("stamps", config={"segment.bytes": 1024})
    part = store.topic("stamps").partition(0)
    t0 = 1_700_000_000_000
    stamps = [t0 + 5, t0 + 2, t0 + 9, t0 + 1, t0 + 9, t0 + 3] * 20
    for i, ts in enumerate(stamps):
        part.append_values([b"%04d" % i * 20], timestamps=[ts])
    assert len(part.segments) > 1
    empty = store.create_topic("empty").partition(0)
    with pylog.serve(store, port=0) as srv, _connect(srv) as sock:
        answer = _list_offsets(sock, "stamps", -3)
        none = _list_offsets(sock, "empty", -3)
    assert answer["error_code"] == E.NONE and (answer["offset"], answer["timestamp"]) == (2, t0 + 9)
    assert none["error_code"] == E.NONE and (none["offset"], none["timestamp"]) == (-1, -1)
    assert empty.max_timestamp() == -1


# ---------------------------------------------------------------------------------------------------- stop

def test_a_clean_stop_fsyncs_the_store_it_was_given(store, monkeypatch):
    # acks=1 with the default flush settings: appended, not fsynced. The store is the caller's (left open),
    # and the stop must still make what it acknowledged durable.
    srv = pylog.serve(store, port=0)
    try:
        with _connect(srv) as sock:
            sock.sendall(_produce("t", [b"acknowledged"], acks=1))
            assert _partition_answer(recv_frame(sock))["error_code"] == E.NONE
        spy = SyncSpy(monkeypatch)
    finally:
        srv.close()
    assert not store.closed
    assert any(map(_segment_of_t0, spy.synced)), spy.synced
