"""Group commit (:mod:`pylog.storage.group_commit`) and its users: ``pylog serve``'s acks=all produce, pylog's
producer with ``acks="all"``, and a store's close fsyncing its partitions in parallel.

The fsyncs are observed by wrapping ``os.fdatasync`` / ``os.fsync`` in this process (the partitions flush through
them): a gate holds the fsync of a chosen file until the test opens it, so "not answered before the fsync" is a
handshake, not a timing guess. Everything binds 127.0.0.1, writes under tmp_path and has bounded waits.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

import pylog
from pylog.errors import LogFailedError, StorageError
from pylog.server.protocol import encode_request, parse_response
from pylog.storage import fs_sync
from pylog.storage.group_commit import GroupCommit
from pylog.partition import internals

from serverutil import kafka_batch, recv_frame, wait_until


def _flushing(parts: list) -> list:
    """What the group commit takes: each partition's internal API (its flush halves)."""
    return [internals(p) for p in parts]

WAIT = 20.0  # seconds: the bound of every handshake here (a loaded machine)


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


class FsyncGate:
    """Wraps os.fdatasync and os.fsync: calls on a file whose path contains ``match`` are counted, and while the
    gate is closed they wait (``entered`` is set once one does); ``fail`` makes them raise EIO instead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, match: str, suffix: str = ".log", delay: float = 0.0) -> None:
        self.match = match
        self.suffix = suffix
        self.delay = delay
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()
        self.calls = 0
        self.inside = 0
        self.most_inside = 0
        self.fail = False
        self.barrier: threading.Barrier | None = None
        self._lock = threading.Lock()
        for name in ("fdatasync", "fsync"):
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name)))

    def _wrap(self, real):
        def wrapper(fd: int) -> None:
            path = _path_of(fd)
            if self.match not in path or not path.endswith(self.suffix):
                return real(fd)
            with self._lock:
                self.calls += 1
                self.inside += 1
                self.most_inside = max(self.most_inside, self.inside)
            try:
                self.entered.set()
                assert self.open.wait(WAIT), "the test never opened the fsync gate"
                if self.barrier is not None:
                    self.barrier.wait(WAIT)
                if self.delay:
                    time.sleep(self.delay)  # widens the window in which another fsync may run at once
                if self.fail:
                    raise OSError(errno.EIO, "injected fsync failure")
                return real(fd)
            finally:
                with self._lock:
                    self.inside -= 1
        return wrapper

    def close(self) -> None:
        self.entered.clear()
        self.open.clear()


@pytest.fixture
def store(tmp_path):
    s = pylog.open(tmp_path / "store", log_cleaner_enable=False)
    yield s
    s.close()


def _log_dir(store, topic: str, number: int) -> str:
    return os.path.join(str(store.path), topic, str(number)) + os.sep


# ------------------------------------------------------------------------------------------ the pool


def test_group_commit_callers_during_a_running_fsync_share_the_next_one(store, monkeypatch):
    store.create_topic("t")
    part = store.topic("t").partition(0)
    part.append_values([b"first"])
    gate = FsyncGate(monkeypatch, _log_dir(store, "t", 0))
    gate.close()
    gc = GroupCommit(threads=2)
    done: list[tuple[str, list]] = []
    first_done = threading.Event()
    gc.submit(_flushing([part]), lambda r: (done.append(("first", r)), first_done.set()))
    assert gate.entered.wait(WAIT)
    # The first flush is under way (held in its fsync): what is appended now is not covered by it.
    all_done = threading.Event()
    for i in range(10):
        part.append_values([b"v%d" % i])
        gc.submit(_flushing([part]), lambda r, i=i: (done.append((f"later-{i}", r)), len(done) == 11 and all_done.set()))
    assert not first_done.is_set()
    gate.open.set()
    assert all_done.wait(WAIT)
    assert done[0] == ("first", [None])
    assert sorted(name for name, _ in done[1:]) == sorted(f"later-{i}" for i in range(10))
    assert all(r == [None] for _, r in done)
    # Two flushes for eleven callers: the first, and one that started after the ten appends.
    assert gc.stats()["flushes"] == 2
    assert gc.stats()["requests"] == 11
    assert gc.wait_idle(WAIT)


def test_group_commit_caller_is_not_answered_by_a_flush_that_started_before_it(store, monkeypatch):
    store.create_topic("t")
    part = store.topic("t").partition(0)
    part.append_values([b"a"])
    gate = FsyncGate(monkeypatch, _log_dir(store, "t", 0))
    gate.close()
    gc = GroupCommit(threads=4)
    first, second = threading.Event(), threading.Event()
    gc.submit(_flushing([part]), lambda r: first.set())
    assert gate.entered.wait(WAIT)
    part.append_values([b"b"])
    gc.submit(_flushing([part]), lambda r: second.set())
    calls_before = gate.calls
    gate.open.set()
    assert first.wait(WAIT) and second.wait(WAIT)
    # The second caller needed an fsync of its own, started after its append (never one already under way).
    assert gate.calls > calls_before
    assert gc.stats()["flushes"] == 2


def test_group_commit_flushes_partitions_in_parallel(store, monkeypatch):
    store.create_topic("t", partitions=4)
    parts = [store.topic("t").partition(i) for i in range(4)]
    for p in parts:
        p.append_values([b"x"])
    gate = FsyncGate(monkeypatch, os.path.join(str(store.path), "t") + os.sep)
    # Every fsync waits until four are under way at once: flushes one after another would break the barrier.
    gate.barrier = threading.Barrier(4)
    results = GroupCommit(threads=4).sync(_flushing(parts), timeout=WAIT + 5)
    assert results == [None] * 4
    assert gate.most_inside == 4


def test_group_commit_failed_fsync_fails_only_that_partitions_callers(store, monkeypatch):
    store.create_topic("t", partitions=2)
    bad, good = store.topic("t").partition(0), store.topic("t").partition(1)
    bad.append_values([b"x"])
    good.append_values([b"y"])
    gate = FsyncGate(monkeypatch, _log_dir(store, "t", 0))
    gate.fail = True
    results = GroupCommit(threads=2).sync(_flushing([bad, good]), timeout=WAIT)
    assert isinstance(results[0], StorageError) and "I/O error" in str(results[0])
    assert results[1] is None
    # The partition refuses work from then on (an fsync failure is never forgotten), and says so to later callers.
    with pytest.raises(LogFailedError):
        bad.append_values([b"z"])
    assert isinstance(GroupCommit(threads=1).sync(_flushing([bad]), timeout=WAIT)[0], LogFailedError)


def test_flush_running_beside_a_failed_flush_of_the_same_partition_is_not_acknowledged(store, monkeypatch):
    # Partition.flush fsyncs a dup of the active log's descriptor without the partition's lock, so two flushes (the
    # group commit's and a direct one, a flush.ms flusher's) can run at once. A dup shares the open file description,
    # and with it Linux's record of a writeback error: the flush that reports EIO consumes it, and the other one's
    # fdatasync returns 0 though the pages may be gone. That one must not be answered as durable either.
    store.create_topic("t")
    part = store.topic("t").partition(0)
    part.append_values([b"x"])
    log_dir = _log_dir(store, "t", 0)
    both_inside = threading.Barrier(2, timeout=WAIT)
    calls: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        path = _path_of(fd)
        if log_dir not in path or not path.endswith(".log"):
            return real(fd)
        calls.append(fd)
        first = len(calls) == 1
        both_inside.wait()
        if first:
            raise OSError(errno.EIO, "injected fsync failure")
        # The other flush has consumed the error: this one returns 0, as Linux's would (after it failed the log).
        wait_until(lambda: internals(part).durability.failed is not None, WAIT,
                   what="the failed flush to record the failure")
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    outcomes: list[BaseException | None] = []

    def flush() -> None:
        try:
            part.flush()
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            outcomes.append(exc)
        else:
            outcomes.append(None)

    threads = [threading.Thread(target=flush) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert len(calls) == 2 and len(outcomes) == 2
    assert all(isinstance(o, (StorageError, LogFailedError)) for o in outcomes), outcomes


def test_group_commit_forgets_idle_partitions(store):
    store.create_topic("t", partitions=50)
    parts = [store.topic("t").partition(i) for i in range(50)]
    for p in parts:
        p.append_values([b"x"])
    gc = GroupCommit(threads=3)
    assert gc.sync(_flushing(parts), timeout=WAIT) == [None] * 50
    assert gc.wait_idle(WAIT)
    # No store-wide round unless asked for (syncfs_partitions=0): fifty fdatasyncs.
    assert gc.stats() == {"flushes": 50, "rounds": 0, "round_flushes": 0, "syncs": 50, "requests": 1,
                          "requested": 50}
    assert gc.sync([], timeout=WAIT) == []


# ------------------------------------------------------------------------------------------ store-wide rounds

needs_syncfs = pytest.mark.skipif(not fs_sync.AVAILABLE, reason="syncfs reports writeback errors on Linux 5.8+ only")


def _appended_partitions(store, count: int) -> list:
    store.create_topic("t", partitions=count)
    parts = [store.topic("t").partition(i) for i in range(count)]
    for i, p in enumerate(parts):
        p.append_values([b"v%d" % i])
    return parts


class SyncfsGate:
    """Wraps ``fs_sync.syncfs`` (the group commit calls it through the module): counts calls, holds them while
    closed (``entered`` set once one waits), raises EIO when ``fail``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()
        self.calls = 0
        self.fail = False
        real = fs_sync.syncfs

        def syncfs(fd: int) -> None:
            self.calls += 1
            self.entered.set()
            assert self.open.wait(WAIT), "the test never opened the syncfs gate"
            if self.fail:
                raise OSError(errno.EIO, "injected syncfs failure")
            real(fd)
        monkeypatch.setattr(fs_sync, "syncfs", syncfs)


@pytest.mark.parametrize("count, expected", [
    # 20 waiting, rounds from 4 on: one syncfs for the twenty, no fdatasync of their logs.
    pytest.param(20, {"syncfs": 1, "fdatasync": 0, "rounds": 1, "round_flushes": 20, "syncs": 1}, marks=needs_syncfs),
    # 3 waiting: below the threshold, an fdatasync each (no other file of the file system written back).
    (3, {"syncfs": 0, "fdatasync": 3, "rounds": 0, "round_flushes": 0, "syncs": 3}),
])
def test_group_commit_many_waiting_partitions_share_one_syncfs_few_are_fdatasynced(store, monkeypatch, count, expected):
    parts = _appended_partitions(store, count)
    fsyncs = FsyncGate(monkeypatch, os.path.join(str(store.path), "t") + os.sep)
    syncfs = SyncfsGate(monkeypatch)
    gc = GroupCommit(threads=2, syncfs_partitions=4 if count > 3 else 8)
    assert gc.sync(_flushing(parts), timeout=WAIT) == [None] * count
    st = gc.stats()
    assert {"syncfs": syncfs.calls, "fdatasync": fsyncs.calls, "rounds": st["rounds"],
            "round_flushes": st["round_flushes"], "syncs": st["syncs"]} == expected
    assert st["flushes"] == count
    # Flushed as by Partition.flush: nothing is left for a flush to do.
    assert all(internals(p).durability.unflushed == 0 for p in parts)


@needs_syncfs
def test_group_commit_round_answers_only_after_its_syncfs_and_later_callers_wait_for_the_next(store, monkeypatch):
    parts = _appended_partitions(store, 8)
    syncfs = SyncfsGate(monkeypatch)
    syncfs.open.clear()
    gc = GroupCommit(threads=4, syncfs_partitions=4)
    first = threading.Event()
    gc.submit(_flushing(parts), lambda r: first.set())
    assert syncfs.entered.wait(WAIT)
    # The round's syncfs is held: nobody is answered, and what is appended now is not covered by it.
    later = threading.Event()
    for p in parts:
        p.append_values([b"later"])
    gc.submit(_flushing(parts), lambda r: later.set())
    assert not first.wait(0.2), "a round was answered before its syncfs returned"
    assert not later.is_set()
    assert gc.stats()["rounds"] == 0
    syncfs.open.set()
    assert first.wait(WAIT) and later.wait(WAIT)
    # The later callers were covered by a second round, started after their appends.
    assert syncfs.calls == 2 and gc.stats()["rounds"] == 2
    assert gc.wait_idle(WAIT)


@needs_syncfs
def test_group_commit_failed_syncfs_fails_every_partition_of_its_round(store, monkeypatch):
    parts = _appended_partitions(store, 6)
    syncfs = SyncfsGate(monkeypatch)
    syncfs.fail = True
    results = GroupCommit(threads=2, syncfs_partitions=4).sync(_flushing(parts), timeout=WAIT)
    assert all(isinstance(r, StorageError) and "I/O error" in str(r) for r in results), results
    # Whose pages were lost cannot be told: every partition of the round refuses work until reopened.
    for p in parts:
        with pytest.raises(LogFailedError):
            p.append_values([b"after"])


@needs_syncfs
def test_group_commit_round_tells_a_partition_its_own_writeback_error(store, monkeypatch):
    parts = _appended_partitions(store, 6)
    bad_dir = _log_dir(store, "t", 2)
    real = fs_sync.check_written

    def check_written(fd: int) -> None:
        if bad_dir in _path_of(fd):  # as Linux reports a failed writeback of that file after a syncfs
            raise OSError(errno.EIO, "injected writeback failure")
        real(fd)
    monkeypatch.setattr(fs_sync, "check_written", check_written)
    results = GroupCommit(threads=2, syncfs_partitions=4).sync(_flushing(parts), timeout=WAIT)
    assert isinstance(results[2], StorageError)
    assert results[:2] + results[3:] == [None] * 5
    with pytest.raises(LogFailedError):
        parts[2].append_values([b"after"])
    parts[3].append_values([b"after"])


def test_fs_sync_kernel_release_gate():
    # syncfs reports writeback errors from Linux 5.8 on; before, a failed write would have looked durable.
    assert fs_sync.kernel_reports_syncfs_errors("6.18.44-fc-v669")
    assert fs_sync.kernel_reports_syncfs_errors("5.8.0")
    assert not fs_sync.kernel_reports_syncfs_errors("5.7.19-generic")
    assert not fs_sync.kernel_reports_syncfs_errors("4.19.0")
    assert not fs_sync.kernel_reports_syncfs_errors("weird")


# ------------------------------------------------------------------------------------------ pylog serve


def _produce(sock: socket.socket, corr: int, topic: str, values: list[bytes], acks: int = -1) -> None:
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": kafka_batch(values)}]}]}
    sock.sendall(encode_request(0, 7, corr, "group-commit", body))


def _answer(sock: socket.socket) -> tuple[int, dict]:
    frame = recv_frame(sock)
    assert frame is not None, "the server closed the connection"
    return parse_response(0, 7, frame)


@contextlib.contextmanager
def _warm_connection(store, monkeypatch, acks: int = -1):
    """A server on ``store`` and a connection that produced one record to ``t``-0 (so the partition is open, its
    files made, before the gate), then an :class:`FsyncGate` on that partition's log: (server, socket, gate)."""
    with pylog.serve(store, port=0, auto_create_topics=False, shutdown_timeout_s=5) as srv:
        with socket.create_connection((srv.host, srv.port), timeout=WAIT) as s:
            _produce(s, 1, "t", [b"warm-up"], acks=acks)
            assert _answer(s)[1]["responses"][0]["partition_responses"][0]["error_code"] == 0
            yield srv, s, FsyncGate(monkeypatch, _log_dir(store, "t", 0))


def test_group_commit_server_answers_acks_all_only_after_the_fsync(store, monkeypatch):
    store.create_topic("t")
    with _warm_connection(store, monkeypatch) as (srv, s, gate):
        gate.close()
        _produce(s, 2, "t", [b"must be durable"])
        assert gate.entered.wait(WAIT), "acks=all made no fsync of the partition"
        # The fsync is held: the answer must not have left (the appended record is readable meanwhile).
        assert select.select([s], [], [], 0.5)[0] == [], "acks=all was answered before its fsync returned"
        assert store.topic("t").partition(0).log_end_offset == 2
        gate.open.set()
        corr, body = _answer(s)
        entry = body["responses"][0]["partition_responses"][0]
        assert (corr, entry["error_code"], entry["base_offset"]) == (2, 0, 1)


def test_group_commit_server_pipelined_requests_see_earlier_appends_and_are_answered_in_order(store, monkeypatch):
    store.create_topic("t")
    with _warm_connection(store, monkeypatch) as (srv, s, gate):
        gate.close()
        _produce(s, 2, "t", [b"held", b"in its fsync"])  # acks=all: its answer waits for the fsync
        assert gate.entered.wait(WAIT)
        # Pipelined behind it: an acks=1 produce and a ListOffsets for the log end, on the same connection.
        _produce(s, 3, "t", [b"acks=1"], acks=1)
        s.sendall(encode_request(2, 5, 4, "group-commit", {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                       "timestamp": -1}]}]}))
        wait_until(lambda: store.topic("t").partition(0).log_end_offset == 4, timeout=WAIT,
                   what="the pipelined append")
        # Nothing may overtake the held answer.
        assert select.select([s], [], [], 0.5)[0] == [], "a later request was answered before the held one"
        gate.open.set()
        corr, body = _answer(s)
        assert (corr, body["responses"][0]["partition_responses"][0]["base_offset"]) == (2, 1)
        corr, body = _answer(s)
        assert (corr, body["responses"][0]["partition_responses"][0]["base_offset"]) == (3, 3)
        frame = recv_frame(s)
        assert frame is not None
        corr, body = parse_response(2, 5, frame)
        # The ListOffsets saw both appends before it (the log end after the acks=1 produce).
        assert (corr, body["topics"][0]["partitions"][0]["offset"]) == (4, 4)


def test_a_pipelining_producer_is_pushed_back_while_its_acks_all_answers_wait(store, monkeypatch):
    # 200 acks=all requests sent at once while the partition's fsync is held: the connection handles 32 (their
    # answers owed), queues at most 32 more and stops reading, so the producer feels it and batches (librdkafka
    # made requests of a few records each when the server read thousands ahead). Then all answered, in order.
    store.create_topic("t")
    with _warm_connection(store, monkeypatch) as (srv, s, gate):
        gate.close()
        requests = [encode_request(0, 7, corr, "group-commit", {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": kafka_batch([b"r%d" % corr])}]}]})
            for corr in range(2, 202)]
        sender = threading.Thread(target=s.sendall, args=(b"".join(requests),))
        sender.start()
        part = store.topic("t").partition(0)
        wait_until(lambda: part.log_end_offset == 1 + 32, timeout=WAIT, what="32 requests appended")
        assert select.select([s], [], [], 0.5)[0] == [], "answered before the fsync"
        assert part.log_end_offset == 1 + 32, "handled more requests than answers may be owed"
        frame = max(len(r) for r in requests) - 4
        # The pool holds the 32 handled (until answered) and the 32 queued, not the other 136.
        assert srv.resources()["pool_bytes_used"] <= 65 * (frame + 128), "queued more than 32 requests"
        gate.open.set()
        for corr in range(2, 202):
            got, body = _answer(s)
            entry = body["responses"][0]["partition_responses"][0]
            assert (got, entry["error_code"], entry["base_offset"]) == (corr, 0, corr - 1)
        sender.join(WAIT)
        assert [r.value for r in part.read(1, 200)] == [b"r%d" % corr for corr in range(2, 202)]


def test_group_commit_server_flush_messages_fsyncs_before_an_acks_1_answer(store, monkeypatch):
    store.create_topic("t", config={"flush.messages": 1})
    with _warm_connection(store, monkeypatch, acks=1) as (srv, s, gate):
        gate.close()
        _produce(s, 2, "t", [b"flushed per the topic"], acks=1)
        assert gate.entered.wait(WAIT), "flush.messages=1 made no fsync"
        assert select.select([s], [], [], 0.5)[0] == [], "answered before the fsync flush.messages asks for"
        gate.open.set()
        corr, body = _answer(s)
        assert (corr, body["responses"][0]["partition_responses"][0]["error_code"]) == (2, 0)
        # acks=1 requests are not counted as acks=all ones.
        assert srv.stats()["acks_all_requests"] == 0


def test_group_commit_server_answers_a_failed_fsync_with_an_error(store, monkeypatch):
    store.create_topic("t")
    with _warm_connection(store, monkeypatch) as (srv, s, gate):
        gate.fail = True
        _produce(s, 2, "t", [b"not durable"])
        entry = _answer(s)[1]["responses"][0]["partition_responses"][0]
        assert entry["error_code"] == 56  # KAFKA_STORAGE_ERROR: the record may be lost
        assert entry["base_offset"] == -1


def test_group_commit_server_shares_fsyncs_across_requests_and_connections(store, monkeypatch):
    store.create_topic("t")
    with pylog.serve(store, port=0, auto_create_topics=False, shutdown_timeout_s=5) as srv:
        socks = [socket.create_connection((srv.host, srv.port), timeout=WAIT) for _ in range(4)]
        try:
            for s in socks:
                _produce(s, 1, "t", [b"warm-up"])
                _answer(s)
            before = srv.stats()
            gate = FsyncGate(monkeypatch, _log_dir(store, "t", 0))
            gate.close()
            _produce(socks[0], 2, "t", [b"held"])
            assert gate.entered.wait(WAIT)
            # While that fsync is held: five pipelined requests on each connection, 20 in all.
            for s in socks:
                for corr in range(3, 8):
                    _produce(s, corr, "t", [b"c%d" % corr])
            # Appended while the fsync is held (appends do not wait for a partition's fsync).
            part = store.topic("t").partition(0)
            wait_until(lambda: part.log_end_offset == 4 + 1 + 20, timeout=WAIT, what="the 20 appends")
            gate.open.set()
            answers = [_answer(socks[0])] + [_answer(s) for s in socks for _ in range(5)]
            assert [c for c, _ in answers] == [2] + [c for _ in socks for c in range(3, 8)]
            assert all(b["responses"][0]["partition_responses"][0]["error_code"] == 0 for _, b in answers)
            after = srv.stats()
            calls = gate.calls
        finally:
            for s in socks:
                s.close()
    requests = after["acks_all_requests"] - before["acks_all_requests"]
    fsyncs = after["group_commit_fsyncs"] - before["group_commit_fsyncs"]
    assert requests == 21
    # One flush for the held request, then one (or a few, as the appends arrived) for the twenty behind it.
    assert 2 <= fsyncs < 21
    assert calls == fsyncs  # each one fsync of the partition's log


@needs_syncfs
def test_group_commit_server_produce_naming_many_partitions_is_answered_after_one_syncfs(store, monkeypatch):
    store.create_topic("m", partitions=16)
    with pylog.serve(store, port=0, auto_create_topics=False, shutdown_timeout_s=5,
                     group_commit_syncfs_partitions=8) as srv:
        with socket.create_connection((srv.host, srv.port), timeout=WAIT) as s:
            def produce(corr: int) -> None:
                body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                    {"name": "m", "partition_data": [{"index": i, "records": kafka_batch([b"p%d" % i])}
                                                     for i in range(16)]}]}
                s.sendall(encode_request(0, 7, corr, "group-commit", body))
            produce(1)  # every partition opened (its files made) before the gate
            assert all(p["error_code"] == 0 for p in _answer(s)[1]["responses"][0]["partition_responses"])
            before = srv.stats()
            syncfs = SyncfsGate(monkeypatch)
            syncfs.open.clear()
            produce(2)
            assert syncfs.entered.wait(WAIT), "sixteen partitions waiting made no store-wide round"
            assert select.select([s], [], [], 0.5)[0] == [], "acks=all was answered before its round's syncfs"
            syncfs.open.set()
            corr, body = _answer(s)
            after = srv.stats()
    entries = body["responses"][0]["partition_responses"]
    assert corr == 2 and [(e["index"], e["error_code"], e["base_offset"]) for e in entries] == [
        (i, 0, 1) for i in range(16)]
    delta = {k: after[k] - before[k] for k in ("group_commit_rounds", "group_commit_round_flushes",
                                                "group_commit_syncs", "acks_all_requests")}
    assert delta == {"group_commit_rounds": 1, "group_commit_round_flushes": 16, "group_commit_syncs": 1,
                     "acks_all_requests": 1}


# ------------------------------------------------------------------------------------------ producers, close


def test_group_commit_pylog_producer_acks_all_fsyncs_before_completing(store, monkeypatch):
    store.create_topic("t", partitions=3)
    gate = FsyncGate(monkeypatch, os.path.join(str(store.path), "t") + os.sep)
    gate.barrier = threading.Barrier(3)  # the drain's three partitions are flushed at once
    with store.producer(acks="all", linger_ms=50) as producer:
        futures = [producer.send("t", b"v%d" % i, partition=i % 3) for i in range(30)]
        producer.flush(WAIT)
        assert all(f.get(WAIT).offset >= 0 for f in futures)
    assert gate.most_inside == 3


def test_group_commit_store_close_fsyncs_partitions_in_parallel(tmp_path, monkeypatch):
    s = pylog.open(tmp_path / "store", log_cleaner_enable=False)
    s.create_topic("t", partitions=8)
    for i in range(8):
        s.topic("t").partition(i).append_values([b"x"])
    # Every fsync of a file under the topic (logs, indexes, checkpoints, directories) is counted, and made to
    # last 20 ms: closing the partitions one after another never has two under way at once.
    gate = FsyncGate(monkeypatch, os.path.join(str(tmp_path / "store"), "t") + os.sep, suffix="", delay=0.02)
    s.close()
    assert gate.calls >= 8
    assert gate.most_inside >= 2
    monkeypatch.undo()
    with pylog.open(tmp_path / "store") as again:
        assert [again.topic("t").partition(i).log_end_offset for i in range(8)] == [1] * 8


# ------------------------------------------------------------------------------------------ a killed server


@needs_syncfs
@pytest.mark.slow
def test_group_commit_records_acked_through_store_wide_rounds_survive_a_killed_server(tmp_path):
    """A ``pylog serve`` process acknowledging acks=all through store-wide rounds (a confluent-kafka producer
    spread over 64 partitions, rounds from 2 waiting partitions on) is SIGKILLed mid-stream: every record
    acknowledged before the kill is in the store reopened after it, at its acknowledged offset."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    path = tmp_path / "store"
    with pylog.open(path) as s:
        s.create_topic("t", partitions=64)
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", str(path), "--port", "0", "--log-level", "INFO",
                             "--group-commit-syncfs-partitions", "2"], stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    listening = threading.Event()
    rounds = threading.Event()

    def read_log() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                listening.set()
            if "made durable together by one syncfs" in line:
                rounds.set()
    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    acked: list[tuple[int, int, bytes]] = []
    try:
        assert listening.wait(WAIT), "".join(lines)
        port = re.search(r"listening on [\d.]+:(\d+)", "".join(lines)).group(1)  # type: ignore[union-attr]
        producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all",
                                             "linger.ms": 5, "message.timeout.ms": 5000, "retries": 0})

        def report(err, msg) -> None:
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
        deadline = time.monotonic() + 60
        i = 0
        # Produce until a round has acknowledged records and a few thousand are acknowledged, then kill.
        while not (rounds.is_set() and len(acked) >= 3000) and time.monotonic() < deadline:
            for _ in range(500):
                try:
                    producer.produce("t", b"%d" % i, partition=i % 64, on_delivery=report)
                except BufferError:  # the client's queue is full (a slow server): let it drain a little
                    break
                i += 1
            producer.poll(0.005)
        assert rounds.is_set(), "no store-wide round ran:\n" + "".join(lines[-20:])
        proc.kill()  # mid-stream: requests in flight, rounds under way
        proc.wait(WAIT)
        producer.flush(WAIT)  # the acknowledgements that arrived before the kill; the rest fail
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(acked) >= 3000
    with pylog.open(path) as s:  # the killed server's partitions are recovered as after a crash
        stored = {}
        for number in range(64):
            for r in s.topic("t").partition(number).read(0, max_records=100_000):
                stored[(number, r.offset)] = r.value
    missing = [(p, o, v) for p, o, v in acked if stored.get((p, o)) != v]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records are not in the store: {missing[:5]}"


def test_group_commit_without_eventfd_wakes_its_workers_with_a_semaphore(store, monkeypatch):
    # Where os.eventfd is missing (not Linux), idle workers wait on a threading.Semaphore: six partitions flushed
    # by four workers, each once, and two at once at least (the barrier holds each fsync until a second arrives).
    monkeypatch.delattr(os, "eventfd")
    store.create_topic("t", partitions=6)
    parts = [store.topic("t").partition(i) for i in range(6)]
    for p in parts:
        p.append_values([b"x"])
    gate = FsyncGate(monkeypatch, _log_dir(store, "t", 0)[:-len("0/")])
    gate.barrier = threading.Barrier(2)
    gc = GroupCommit(threads=4)
    assert gc.sync(_flushing(parts), timeout=WAIT) == [None] * 6
    assert gate.calls == 6 and gate.most_inside >= 2
    assert gc.stats()["flushes"] == 6


def test_group_commit_in_a_forked_child_flushes_with_workers_of_its_own(store):
    # The process-wide instance's workers wait on an eventfd: after a fork the child makes a bell and workers
    # of its own (the parent's threads are not in the child), and its flushes complete.
    from pylog.storage import group_commit
    store.create_topic("t", partitions=2)
    parts = [store.topic("t").partition(i) for i in range(2)]
    for p in parts:
        p.append_values([b"before the fork"])
    assert group_commit.sync(_flushing(parts), timeout=WAIT) == [None, None]  # the parent's workers started
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its own flushes complete
        code = 1
        try:
            code = 0 if group_commit.sync(_flushing(parts), timeout=WAIT) == [None, None] else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 2 * WAIT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's group commit never completed")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


def test_group_commit_server_wakes_a_waiting_fetch_before_the_acks_all_fsync(store, monkeypatch):
    # The storage thread that appended hands the news to the fetches waiting for the partition at once, not after
    # the fsync: a consumer's long poll returns the record while the producer's acks=all answer still waits. The
    # fetch waiters' watcher thread (which also sees this process's appends, polling) is kept from starting, so
    # only the storage thread's hand-over can wake the fetch.
    from pylog.server.waiting import FetchWaiters
    monkeypatch.setattr(FetchWaiters, "_ensure_thread", lambda self: None)
    store.create_topic("t")
    with _warm_connection(store, monkeypatch) as (srv, s, gate):
        body = {"replica_id": -1, "max_wait_ms": int(3 * WAIT * 1000), "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": "t", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 1, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        with socket.create_connection((srv.host, srv.port), timeout=WAIT) as consumer:
            consumer.sendall(encode_request(1, 11, 9, "waiting-fetch", body))
            assert select.select([consumer], [], [], 0.3)[0] == [], "the fetch did not wait for a record"
            gate.close()
            _produce(s, 2, "t", [b"seen before durable"])
            assert gate.entered.wait(WAIT), "acks=all made no fsync of the partition"
            ready = select.select([consumer], [], [], WAIT)[0]
            assert ready == [consumer], "the waiting fetch was not woken by the append"
            frame = recv_frame(consumer)
            assert frame is not None
            records = parse_response(1, 11, frame)[1]["responses"][0]["partitions"][0]["records"]
            assert b"seen before durable" in (b"".join(records) if isinstance(records, list) else bytes(records))
            assert select.select([s], [], [], 0.2)[0] == [], "acks=all was answered before its fsync returned"
        gate.open.set()
        corr, answer = _answer(s)
        assert (corr, answer["responses"][0]["partition_responses"][0]["error_code"]) == (2, 0)
