"""A store's partitions hold files within a budget of descriptors (``max.open.descriptors``,
:mod:`pylog.storage.handles`): a process with a low ``RLIMIT_NOFILE`` writes and reads thousands of partitions
through the library and through ``pylog serve`` with a real Kafka client; other clients keep being served,
new connections are accepted, and running out of descriptors is one request's KAFKA_STORAGE_ERROR, never the
server's end. The children run with ``RLIMIT_NOFILE`` = 256; no timed assertion (each wait has a generous bound).
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pylog
from pylog.partition import internals
from pylog.errors import StorageError, TooManyOpenFilesError
from pylog.server.errormap import code_for
from pylog.server.protocol import codes as E
from pylog.storage.handles import HandleCache, RateLimitedLog, default_budget
from pylog.storage.log import writer_lock

from serverutil import start_cli_server, wait_until
from storetools import blocked_in, wait_for

_LIMIT = 256
_PARTITIONS = 2000


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_LIMIT, _LIMIT))


_LIBRARY = """
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (%(limit)d, %(limit)d))
    import pylog
    path, n = sys.argv[1], int(sys.argv[2])
    def fds():
        return len(os.listdir("/proc/self/fd"))
    most = 0
    with pylog.open(path) as store:
        store.create_topic("direct", partitions=n)
        store.create_topic("produced", partitions=n)
        direct = store.topic("direct")
        for i in range(n):
            direct.partition(i).append_values([b"d%%d" %% i])
            most = max(most, fds())
        with store.producer(acks="all") as producer:
            futures = [producer.send("produced", b"p%%d" %% i, partition=i) for i in range(n)]
            offsets = [f.get(120).offset for f in futures]
            most = max(most, fds())
        assert offsets == [0] * n, offsets[:10]
        for name, prefix in (("direct", b"d"), ("produced", b"p")):
            topic = store.topic(name)
            for i in range(n):
                assert [r.value for r in topic.partition(i).read(0)] == [prefix + b"%%d" %% i], (name, i)
                most = max(most, fds())
        print("done", store.handles.capacity, store.handles.released, most, flush=True)
""" % {"limit": _LIMIT}


@pytest.mark.slow
def test_library_writes_and_reads_2000_partitions_with_256_descriptors(tmp_path):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_LIBRARY), str(tmp_path / "store"), str(_PARTITIONS)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    _, capacity, released, most = out.stdout.split()
    assert int(released) > 0 and int(most) < _LIMIT
    with pylog.open(tmp_path / "store", read_only=True) as store:
        for name in ("direct", "produced"):
            topic = store.topic(name)
            assert sum(topic.end_offsets().values()) == _PARTITIONS
    verify = subprocess.run([sys.executable, "-m", "pylog", "verify", str(tmp_path / "store")], capture_output=True,
                            text=True, timeout=900)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]


@pytest.mark.slow
def test_server_with_256_descriptors_serves_2000_partitions_and_everyone_else(tmp_path):
    kafka = pytest.importorskip("kafka")
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("wide", partitions=_PARTITIONS)
        store.create_topic("small", partitions=1)
    proc, bootstrap, lines = start_cli_server(path, preexec_fn=_low_limit)
    try:
        wide = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, retries=10)
        other = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=10)
        futures = [wide.send("wide", b"w%d" % i, partition=i) for i in range(_PARTITIONS)]
        # Another client is served meanwhile, and afterwards.
        small = [other.send("small", b"s%d" % i).get(timeout=60).offset for i in range(20)]
        wide.flush(timeout=300)
        assert [f.get(timeout=60).offset for f in futures] == [0] * _PARTITIONS
        small += [other.send("small", b"s%d" % i).get(timeout=60).offset for i in range(20, 40)]
        assert small == list(range(40))
        # New connections are accepted, again and again.
        for _ in range(5):
            admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
            assert {"wide", "small"} <= set(admin.list_topics())
            admin.close()
        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False, consumer_timeout_ms=30_000)
        consumer.assign([kafka.TopicPartition("wide", i) for i in range(_PARTITIONS)])
        seen: dict[int, bytes] = {}
        for m in consumer:
            seen[m.partition] = m.value
            if len(seen) == _PARTITIONS:
                break
        consumer.close()
        assert seen == {i: b"w%d" % i for i in range(_PARTITIONS)}
        wide.close()
        other.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = "".join(lines)
    assert "may open 256 file descriptors" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    with pylog.open(path, read_only=True) as store:
        assert sum(store.topic("wide").end_offsets().values()) == _PARTITIONS


def test_running_out_of_descriptors_is_a_storage_error_answered_kafka_storage_error(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("t", partitions=1)
    code = """
import resource, sys
import pylog
from pylog.errors import TooManyOpenFilesError
store = pylog.open(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
held = []
try:
    while True:
        held.append(open("/dev/null"))
except OSError:
    pass
try:
    store.topic("t")
except TooManyOpenFilesError as exc:
    print("refused", exc.errno, flush=True)
for f in held[:64]:
    f.close()
store.topic("t").partition(0).append_values([b"x"])
print("then", store.topic("t").partition(0).read(0)[0].value.decode(), flush=True)
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         preexec_fn=_low_limit)
    assert out.stdout.split("\n")[:2] == [f"refused {errno.EMFILE}", "then x"], out.stdout + out.stderr[-2000:]
    exc = TooManyOpenFilesError("x")
    assert isinstance(exc, StorageError) and code_for(exc) == E.KAFKA_STORAGE_ERROR


class _Part:
    def __init__(self, busy: bool = False) -> None:
        self.busy = busy
        self.released = 0

    def release_handles(self) -> bool:
        if self.busy:
            return False
        self.released += 1
        return True


def test_handle_cache_lets_go_of_the_least_recently_used_and_retries_a_busy_one_later():
    cache = HandleCache(budget=40)  # 4 partitions
    parts = [_Part() for _ in range(6)]
    parts[1].busy = True
    for p in parts[:4]:
        cache.touch(p)
    cache.touch(parts[0])  # now the most recently used
    cache.touch(parts[4])  # 5 > 4: the oldest, parts[1], is busy: kept, moved to the end
    assert parts[1].released == 0 and len(cache) == 5
    cache.touch(parts[5])  # the oldest now: parts[2] and parts[3]
    assert [p.released for p in parts] == [0, 0, 1, 1, 0, 0] and len(cache) == 4
    parts[1].busy = False
    assert cache.shrink(1) == 1 and parts[0].released == 1  # parts[0] was the least recently used
    cache.forget(parts[5])
    assert len(cache) == 2
    # A partition whose reads keep segments open is counted for more: the others make room.
    more = [_Part() for _ in range(4)]
    for p in more:
        cache.touch(p)
    assert len(cache) == 4 and [p.released for p in parts[:2]] == [1, 1]
    cache.touch(more[0], weight=10 + 4 * 8)
    assert len(cache) == 4  # the most recent four are always kept, whatever they count
    tick = cache.touch(more[1])
    assert cache.fresh(tick)
    assert default_budget(1024) == 512 and default_budget(10) >= 40


def test_rate_limited_log_says_how_many_lines_it_left_out(caplog):
    import logging
    rl = RateLimitedLog(logging.getLogger("pylog.test"), interval=3600)
    with caplog.at_level(logging.ERROR, logger="pylog.test"):
        assert rl.log(logging.ERROR, "k", "out of %s", "files")
        assert not any(rl.log(logging.ERROR, "k", "out of %s", "files") for _ in range(800))
        assert rl.log(logging.ERROR, "other", "else")
    assert [r.getMessage() for r in caplog.records] == ["out of files", "else"]


@pytest.mark.slow
def test_server_out_of_descriptors_for_connections_keeps_serving_and_logs_it_once(tmp_path):
    kafka = pytest.importorskip("kafka")
    proc, bootstrap, lines = start_cli_server(tmp_path / "store", preexec_fn=_low_limit)
    host, port = bootstrap.rsplit(":", 1)
    flood: list[socket.socket] = []
    try:
        # More connections than the server has descriptors: its accept fails with EMFILE.
        for _ in range(_LIMIT + 50):
            flood.append(socket.create_connection((host, int(port)), timeout=10))
        wait_until(lambda: any("out of file descriptors" in line for line in lines), 60, what="EMFILE logged")
        # Let asyncio's accept fail again and again (it retries every second): logged once all the same.
        time.sleep(3)
        for s in flood:
            s.close()
        flood.clear()
        # Accepting again: a client is served, and the connections it makes are accepted.
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=10)
        assert producer.send("after", b"x").get(timeout=60).offset == 0
        producer.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)[-3000:]
    finally:
        for s in flood:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = "".join(lines)
    assert log.count("out of file descriptors") == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_letting_go_of_a_partition_never_closes_the_handover_probe_under_a_probe_in_another_thread(
        tmp_path, monkeypatch):
    """A producer's idle look (or the server's sweep) probes ``.want`` while the budget lets go of the
    partition's files in another thread. The probe's descriptor must not be closed under it: its number is
    soon another file's (here a lock the test holds; in ``pylog serve``, another partition's ``.lock``),
    which the probe would flock and unlock, releasing a writer lock its holder still counts on."""
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic("ev").partition(0)
        p.wait_to_write(10_000)
        p.append_values([b"a"])
        assert not internals(p).handover_wanted()  # opens the probe
        probing, go_on = threading.Event(), threading.Event()
        real_try_flock = writer_lock.try_flock
        outcome: list = []

        def paused_try_flock(fd: int) -> bool:
            if threading.current_thread() is prober:
                probing.set()  # the probe holds its descriptor's number now, about to flock it
                assert go_on.wait(30)
            return real_try_flock(fd)

        monkeypatch.setattr(writer_lock, "try_flock", paused_try_flock)
        prober = threading.Thread(target=lambda: outcome.append(_probe(p)))
        prober.start()
        assert probing.wait(30)
        letting_go = threading.Thread(target=lambda: outcome.append(internals(p).release_handles()))
        letting_go.start()
        # Either the let-go finished (the probe's descriptor closed under it) or it waits for the probe.
        assert wait_for(lambda: not letting_go.is_alive() or blocked_in(letting_go, "close"), 30)
        # Locked files opened now take the lowest free numbers, the probe's among them if it was closed.
        victims = [os.open(str(tmp_path / f"victim-{i}.lock"), os.O_RDWR | os.O_CREAT, 0o644) for i in range(32)]
        try:
            for fd in victims:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            go_on.set()
            prober.join(30)
            letting_go.join(30)
            assert not prober.is_alive() and not letting_go.is_alive()
            outcome.sort(key=repr)
            if isinstance(outcome[0], Exception):  # the probe's number was not reused: EBADF
                raise outcome[0]
            for i in range(32):
                other = os.open(str(tmp_path / f"victim-{i}.lock"), os.O_RDWR)
                try:
                    with pytest.raises(BlockingIOError):  # each of the test's locks is still held
                        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                finally:
                    os.close(other)
            assert outcome == [False, True]  # nobody waited; the files were let go of
        finally:
            go_on.set()
            for fd in victims:
                os.close(fd)
        assert not p.is_writer
        p.append_values([b"b"])  # the next append takes the lock and the files again
        assert [r.value for r in p.read(0)] == [b"a", b"b"]


def _probe(p) -> object:
    try:
        return internals(p).handover_wanted()
    except Exception as exc:  # a descriptor closed under the probe: EBADF
        return exc


def test_random_reads_over_a_dozen_sealed_segments_open_each_one_once(tmp_path, monkeypatch):
    """A handle keeps the files of the sealed segments its reads used (up to local_log.OPEN_SEALED): random
    reads over 12 of them (10^8 records of 100 bytes in 1 GiB segments) do not reopen a segment's indexes."""
    import random

    from pylog.index import OffsetIndex
    from pylog.storage.log import local_log
    if local_log.OPEN_SEALED < 13:
        pytest.skip(f"ulimit -n below 4,096: a handle keeps {local_log.OPEN_SEALED} sealed segments open")
    opened: list[str] = []
    real = OffsetIndex.open.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(OffsetIndex, "open", classmethod(lambda cls, path, *a, **k: (opened.append(path),
                                                                                     real(cls, path, *a, **k))[1]))
    with pylog.open(str(tmp_path / "w"), log_cleaner_enable=False) as store:
        p = store.create_topic("t", config={"segment.bytes": 4096}).partition(0)
        for _ in range(13):
            p.append_values([b"x" * 100] * 30)
            p.roll()
    with pylog.open(str(tmp_path / "w"), log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        sealed = len(p.segments) - 1
        assert sealed >= 12
        opened.clear()
        rnd = random.Random(5)
        for _ in range(2000):
            offset = rnd.randrange(p.log_end_offset)
            assert p.read(offset, max_records=1)[0].offset == offset
    assert len(opened) == len(set(opened)) <= sealed + 1, sorted(opened)
