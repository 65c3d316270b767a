"""Tiered storage hooked into the store (issue 28): KIP-405's settings, the upload thread in the maintenance
layer, and local retention that waits for shipping, against a real S3 API (moto's server on 127.0.0.1).

Stores here are opened with a huge ``remote.log.manager.task.interval.ms`` and driven with
``store.upload_to_remote()`` (one pass of the upload thread, in the test's thread), so each step is explicit.

Run: ``python -m pytest tests/test_tiered_storage.py -q``
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pylog
from pylog import metrics
from pylog.errors import InvalidConfigError
from pylog.partition import internals
from pylog.storage.filenames import LOG_SUFFIX, list_segment_bases, segment_path
from pylog.storage.records import BatchView
from s3_server import FaultProxy

CHILD = Path(__file__).parent / "tiered_upload_child.py"
TOPIC = "events"
#: Small segments: a few hundred appends make many of them. retention.ms -1: the records' timestamps do
#: not matter unless a test sets it.
TIERED = {"remote.storage.enable": True, "segment.bytes": 2048, "index.interval.bytes": 256, "retention.ms": -1}


def _open(root: Path, remote_settings: dict, **kw) -> pylog.Store:
    opts = {k.replace(".", "_"): v for k, v in remote_settings.items()}
    opts.setdefault("remote_log_manager_task_interval_ms", 10 ** 9)
    opts.setdefault("log_cleaner_enable", False)
    opts.update(kw)
    return pylog.open(str(root), **opts)


def _fill(part, batches: int = 80) -> list[bytes]:
    values = []
    for i in range(batches):
        batch = [f"r{i}-{j}".encode() * (1 + j) for j in range(5)]
        part.append_values(batch)
        values += batch
    part.flush()  # rolled segments fsynced: below synced_through, so shippable
    return values


def _remote_values(rl, start: int, end: int) -> list[bytes]:
    out, offset = [], start
    while offset < end:
        got = rl.read(offset, 1 << 20)
        pos = 0
        while pos < len(got.data):
            view = BatchView.from_buffer(got.data, pos)
            out += [r.value for r in view.records(TOPIC, 0) if r.offset >= offset]
            pos += view.header.size
        offset = got.next_offset
    return out


def _consume(store: pylog.Store, count: int, **kw) -> list[bytes]:
    """The values a consumer of TOPIC (no group, from the earliest offset) polls until it has ``count``."""
    consumer = store.consumer(TOPIC, auto_offset_reset="earliest", **kw)
    try:
        got: list[bytes] = []
        for _ in range(200):
            for records in consumer.poll(timeout_ms=100).values():
                got += [r.value for r in records]
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


# ------------------------------------------------------------------------------------------ settings

def test_kip405_settings_default_to_off_and_local_retention_to_the_total():
    cfg = pylog.TopicConfig({"retention.ms": 5000})
    assert cfg["remote.storage.enable"] is False
    assert cfg["local.retention.ms"] == -2 and cfg["local.retention.bytes"] == -2
    cfg = pylog.TopicConfig({"remote.storage.enable": "true", "local.retention.ms": "1000", "retention.ms": 5000})
    assert cfg["remote.storage.enable"] is True and cfg["local.retention.ms"] == 1000


@pytest.mark.parametrize("bad", [
    {"remote.storage.enable": True, "cleanup.policy": "compact"},
    {"remote.storage.enable": True, "cleanup.policy": "compact,delete"},
    {"remote.storage.enable": True, "retention.ms": 1000, "local.retention.ms": 2000},
    {"remote.storage.enable": True, "retention.ms": 1000, "local.retention.ms": -1},
    {"remote.storage.enable": True, "retention.bytes": 100, "local.retention.bytes": 101},
    {"local.retention.ms": -3},
    {"remote.storage.enable": "maybe"},
])
def test_bad_tiered_storage_settings_are_refused(bad):
    with pytest.raises(InvalidConfigError):
        pylog.TopicConfig(bad)


def test_remote_storage_needs_a_store_location(tmp_path):
    with pylog.open(str(tmp_path / "s"), log_cleaner_enable=False) as store:
        with pytest.raises(InvalidConfigError, match="remote.storage.location"):
            store.create_topic(TOPIC, config={"remote.storage.enable": True})
        store.create_topic(TOPIC)
        with pytest.raises(InvalidConfigError, match="remote.storage.location"):
            store.alter_topic_config(TOPIC, {"remote.storage.enable": True})
        assert store.topic(TOPIC).config["remote.storage.enable"] is False
    with pytest.raises(InvalidConfigError, match="s3://"):
        pylog.open(str(tmp_path / "t"), remote_storage_location="ftp://bucket/x")


# ------------------------------------------------------------------------------------------ shipping

def test_upload_pass_ships_closed_fsynced_segments_of_enabled_topics_only(tmp_path, remote_settings):
    was = metrics.enabled()
    metrics.enable()
    try:
        with _open(tmp_path / "s", remote_settings) as store:
            store.create_topic(TOPIC, config=TIERED)
            store.create_topic("plain", config={"segment.bytes": 2048})
            part = store.topic(TOPIC).partition(0)
            values = _fill(part)
            _fill(store.topic("plain").partition(0))
            before = metrics.counter("pylog_remote_segments_shipped_total").values()
            store.upload_to_remote()
            bases = list_segment_bases(str(tmp_path / "s" / TOPIC / "0"))
            rl = store.remote_log(TOPIC, 0)
            m = rl.manifest(refresh=True)
            assert [s.base_offset for s in m.segments] == bases[:-1]  # every closed segment, not the active
            assert m.end_offset == part.segments[-1].base_offset
            assert store.remote_log("plain", 0).manifest(refresh=True).segments == ()
            assert _remote_values(rl, 0, m.end_offset) == values[:m.end_offset]
            st = store.cleaner_status()
            assert st.remote_enabled and st.remote_segments_shipped == len(m.segments)
            assert st.remote_bytes_shipped == sum(s.log_size for s in m.segments)
            assert st.remote_lag == {f"{TOPIC}-0": 0.0} and st.remote_failures == 0
            after = dict(metrics.counter("pylog_remote_segments_shipped_total").values())
            assert after[(TOPIC,)] - dict(before).get((TOPIC,), 0) == len(m.segments)
            # A second pass ships nothing again; new closed segments ship on the next one.
            store.upload_to_remote()
            assert store.cleaner_status().remote_segments_shipped == len(m.segments)
            values += _fill(part, 20)
            store.upload_to_remote()
            m2 = rl.manifest(refresh=True)
            assert m2.segments[:len(m.segments)] == m.segments and m2.end_offset == part.segments[-1].base_offset
    finally:
        metrics.enable(was)


def test_unsynced_rolled_segments_wait_for_their_fsync(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        part = store.topic(TOPIC).partition(0)
        _fill(part)
        through = internals(part).synced_through
        shippable = internals(part).shippable_segments()
        assert shippable and all(end <= through for _, end, _ in shippable)
        assert all(base < part.segments[-1].base_offset for base, _, _ in shippable)


def test_the_upload_thread_ships_by_itself(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings, remote_log_manager_task_interval_ms=50) as store:
        store.create_topic(TOPIC, config=TIERED)
        part = store.topic(TOPIC).partition(0)
        _fill(part)
        rl = store.remote_log(TOPIC, 0)
        # Bounded wait on the bucket's state (the thread's progress is the thing checked).
        for _ in range(400):
            if rl.manifest(refresh=True).end_offset == part.segments[-1].base_offset:
                break
            part.wait_for_data(part.log_end_offset, 0.05)
        assert rl.manifest(refresh=True).end_offset == part.segments[-1].base_offset


def test_a_failing_bucket_never_blocks_appends_and_is_retried(tmp_path, remote_settings, s3_endpoint):
    with FaultProxy(s3_endpoint, faults=3, status=503, code="SlowDown") as proxy:
        settings = {**remote_settings, "remote.storage.endpoint.url": proxy.url, "remote.storage.max.attempts": 1}
        with _open(tmp_path / "s", settings, remote_log_manager_task_retry_backoff_ms=1,
                   local_retention_bytes=0) as store:
            store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
            part = store.topic(TOPIC).partition(0)
            values = _fill(part)
            store.upload_to_remote()  # the metadata and the partition fail (503s)
            st = store.cleaner_status()
            assert st.remote_failures >= 1 and "SlowDown" in (st.remote_last_error or "")
            assert st.remote_lag[f"{TOPIC}-0"] > 0
            # Nothing shipped: local retention (local.retention.bytes 0) deletes nothing.
            assert part.enforce_retention().deleted_segments == []
            assert part.read(0, 10 ** 6)[0].value == values[0]
            values += _fill(part, 10)  # appends go on meanwhile
            for _ in range(20):  # back-off of 1 ms, doubled: a few passes and the faults are used up
                store.upload_to_remote()
                if store.cleaner_status().remote_lag.get(f"{TOPIC}-0") == 0:
                    break
                part.wait_for_data(part.log_end_offset, 0.01)
            assert store.cleaner_status().remote_lag[f"{TOPIC}-0"] == 0
            assert store.remote_log(TOPIC, 0).manifest(refresh=True).end_offset == part.segments[-1].base_offset


@pytest.mark.parametrize("signing", [False, True], ids=["unsigned", "signed"])
def test_segment_uploads_carry_the_manifests_crc32c_and_sign_the_body_only_when_asked(tmp_path, remote_settings,
                                                                                     s3_endpoint, signing):
    """Off (the default), botocore sends UNSIGNED-PAYLOAD instead of hashing the body: the CRC-32C pylog
    computed, the one the manifest records, goes in x-amz-checksum-crc32c for the server to check."""
    with FaultProxy(s3_endpoint, faults=0) as proxy:
        settings = {**remote_settings, "remote.storage.endpoint.url": proxy.url,
                    "remote.storage.payload.signing.enabled": signing}
        with _open(tmp_path / "s", settings) as store:
            store.create_topic(TOPIC, config=TIERED)
            part = store.topic(TOPIC).partition(0)
            _fill(part)
            store.upload_to_remote()
            seg = store.remote_log(TOPIC, 0).manifest(refresh=True).segments[0]
            with open(segment_path(internals(part).local_log.directory, seg.base_offset, LOG_SUFFIX), "rb") as f:
                body = f.read()
    name = f"/{seg.base_offset:020d}-{seg.log_crc:08x}.log"
    [headers] = [h for method, path, h in proxy.seen if method == "PUT" and path.split("?")[0].endswith(name)]
    assert base64.b64decode(headers["x-amz-checksum-crc32c"]) == seg.log_crc.to_bytes(4, "big")
    assert headers["x-amz-content-sha256"] == (hashlib.sha256(body).hexdigest() if signing else "UNSIGNED-PAYLOAD")


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
@pytest.mark.parametrize("lag_bound, policy", [(1 << 30, "idle"), (0, "normal")])
def test_upload_passes_run_at_idle_priority_within_the_lag_bound_and_at_normal_priority_over_it(
        tmp_path, remote_settings, lag_bound, policy):
    seen: list[tuple[str, int]] = []
    with _open(tmp_path / "s", remote_settings, remote_log_manager_task_interval_ms=20,
               remote_log_manager_copier_max_lag_bytes=lag_bound) as store:
        store.create_topic(TOPIC, config=TIERED)
        part = store.topic(TOPIC).partition(0)
        rl = store.remote_log(TOPIC, 0)
        rl.on_event = lambda event, name: seen.append((threading.current_thread().name,
                                                       os.sched_getscheduler(threading.get_native_id())))
        _fill(part)
        for _ in range(1200):  # bounded wait on the bucket's state (the thread's progress is the thing checked)
            if rl.manifest(refresh=True).end_offset == part.segments[-1].base_offset:
                break
            part.wait_for_data(part.log_end_offset, 0.05)
        assert rl.manifest(refresh=True).end_offset == part.segments[-1].base_offset
    assert seen
    if policy == "idle":
        assert all(name.startswith("pylog-remote-upload-idle ") and p == os.SCHED_IDLE for name, p in seen)
    else:
        assert all(name.startswith("pylog-remote-upload ") and p != os.SCHED_IDLE for name, p in seen)


@pytest.mark.parametrize("bound", ["max.delay.ms", "max.lag.bytes"])
def test_appends_that_never_pause_delay_shipping_only_within_its_bounds(tmp_path, remote_settings, bound):
    """Lowered passes wait for a pause in the appends; with none, closed segments still ship once they have
    waited remote.log.manager.copier.max.delay.ms, or once more than .max.lag.bytes of them wait."""
    kw = ({"remote_log_manager_copier_max_delay_ms": 200} if bound == "max.delay.ms" else
          {"remote_log_manager_copier_max_delay_ms": 10 ** 9, "remote_log_manager_copier_max_lag_bytes": 4096})
    with _open(tmp_path / "s", remote_settings, remote_log_manager_task_interval_ms=20, **kw) as store:
        store.create_topic(TOPIC, config=TIERED)
        part = store.topic(TOPIC).partition(0)
        rl = store.remote_log(TOPIC, 0)
        deadline = time.monotonic() + 120
        while rl.manifest(refresh=True).end_offset == 0:
            assert time.monotonic() < deadline, "nothing shipped while the appends went on"
            for _ in range(5):
                part.append_values([b"v" * 100] * 5)
            part.flush()  # rolled segments fsynced: shippable
        assert len(part.segments) > 1


# ------------------------------------------------------------------------------------------ retention

def test_closed_segments_of_a_partition_whose_producer_closed_are_shipped(tmp_path, remote_settings):
    """A producer hands the writer lock back when it closes; the upload pass still ships the segments it
    closed (it took nothing but the partitions this store was writing at the time, so they waited for the next
    append, forever if none came), and reads of them from the bucket return what was produced."""
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        values = [b"v%d-" % i * 20 for i in range(300)]
        with store.producer(batch_size=512) as producer:
            for v in values:
                producer.send(TOPIC, v, partition=0)
        part = store.topic(TOPIC).partition(0)
        assert not part.is_writer and len(part.segments) > 3
        store.upload_to_remote()
        shipped_end = store.remote_log(TOPIC, 0).manifest(refresh=True).end_offset
        assert shipped_end == part.segments[-1].base_offset
        assert not part.is_writer  # the lock was given back after the listing
        assert _remote_values(store.remote_log(TOPIC, 0), 0, shipped_end) == values[:shipped_end]


def test_local_retention_deletes_only_shipped_segments(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
        part = store.topic(TOPIC).partition(0)
        values = _fill(part)
        assert part.enforce_retention().deleted_segments == []  # nothing shipped yet
        store.upload_to_remote()
        m = store.remote_log(TOPIC, 0).manifest(refresh=True)
        r = part.enforce_retention()
        assert r.deleted_segments == [s.base_offset for s in m.segments]
        assert [s.base_offset for s in part.segments] == [m.end_offset]  # the active segment only
        assert _remote_values(store.remote_log(TOPIC, 0), 0, m.end_offset) == values[:m.end_offset]
        # The next closed segments stay until shipped too.
        _fill(part, 20)
        assert part.enforce_retention().deleted_segments == []


def test_local_retention_ms_keeps_recent_shipped_segments(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "retention.ms": 10 ** 12, "local.retention.ms": 60_000})
        part = store.topic(TOPIC).partition(0)
        _fill(part)
        store.upload_to_remote()
        assert part.enforce_retention().deleted_segments == []  # shipped, but young
        now = max(s.max_timestamp for s in part.segments) + 120_000
        assert part.enforce_retention(now=now).deleted_segments  # old enough: the shipped ones go
        assert store.remote_log(TOPIC, 0).manifest().segments  # the whole log's retention keeps them remotely


def test_retention_bytes_applies_to_the_whole_log_remote_included(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "retention.bytes": 6000, "local.retention.bytes": 0})
        part = store.topic(TOPIC).partition(0)
        _fill(part, 200)
        store.upload_to_remote()
        m = store.remote_log(TOPIC, 0).manifest(refresh=True)
        assert m.log_start_offset > 0 and m.segments
        # Kafka's size rule: the oldest go while the log (the unshipped active segment counted) keeps at
        # least retention.bytes without them.
        total = m.size + part.segments[-1].size
        assert total - m.segments[0].log_size < 6000 <= total
        assert store.cleaner_status().segments_deleted > 0
        assert m.end_offset == part.segments[-1].base_offset  # what was shipped last stays


# ------------------------------------------------------------------------------------------ crashes

def _child(root: Path, settings: dict, stop_at: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent), str(Path(__file__).parent)]))
    return subprocess.Popen([sys.executable, str(CHILD), json.dumps(settings), str(root), TOPIC, stop_at],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("stop_at", ["put", "committed"])
def test_an_upload_killed_before_or_after_its_commit_is_finished_and_nothing_is_lost(tmp_path, remote_settings,
                                                                                      stop_at):
    """SIGKILL in the two crash windows the design names: objects PUT but the manifest not committed ("put"),
    and committed but the local copy not deleted yet ("committed"). The next store finishes the upload,
    every offset stays readable (locally or remotely), and local retention then deletes the shipped copies."""
    root = tmp_path / "s"
    child = _child(root, remote_settings, stop_at)
    try:
        line = child.stdout.readline().split()
        assert line and line[0] == stop_at, line
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(60)
    with _open(root, remote_settings) as store:
        part = store.topic(TOPIC).partition(0)
        end = part.log_end_offset
        local = [r.value for r in part.read(0, 10 ** 6, max_bytes=1 << 30)]
        assert len(local) == end
        store.upload_to_remote()  # nobody writes the partition since the kill: the pass takes its free lock
        assert not part.is_writer
        rl = store.remote_log(TOPIC, 0)
        m = rl.manifest(refresh=True)
        bases = [s.base_offset for s in m.segments]
        assert bases == sorted(set(bases)) and m.log_start_offset == 0
        assert m.end_offset == part.segments[-1].base_offset
        assert part.try_become_writer()  # local retention is the writer's
        part.enforce_retention()
        assert part.segments[0].base_offset == m.end_offset
        assert _remote_values(rl, 0, m.end_offset) == local[:m.end_offset]
        assert [r.value for r in part.read(m.end_offset, 10 ** 6, max_bytes=1 << 30)] == local[m.end_offset:]



# ------------------------------------------------------------------------------------------ reads

def _shipped_and_trimmed(store: pylog.Store) -> tuple[object, list[bytes], int]:
    store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
    part = store.topic(TOPIC).partition(0)
    values = _fill(part)
    store.upload_to_remote()
    part.enforce_retention()
    local_start = part.segments[0].base_offset
    assert local_start > 0
    return part, values, local_start


def test_reads_below_the_local_log_start_fall_through_to_the_bucket(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        part, values, local_start = _shipped_and_trimmed(store)
        assert part.log_start_offset == 0  # Kafka's logStartOffset: the remote start
        assert part.offsets() == (0, len(values))
        got, offset = [], 0
        while offset < part.log_end_offset:  # small reads cross the boundary in both directions' sizes
            batch = part.read(offset, max_records=7)
            assert [r.offset for r in batch] == list(range(offset, offset + len(batch)))
            got += batch
            offset = batch[-1].offset + 1
        assert [r.value for r in got] == values
        cols = part.read_columns(3, max_records=10)
        assert list(cols.offsets) == list(range(3, 13))
        assert part.read_slices(local_start - 1, max_records=1)[0][0].header.base_offset < local_start


def test_a_read_of_shipped_lz4_batches_bounds_their_decompressed_size(tmp_path, remote_settings):
    """``max_bytes`` counts shipped batches decompressed, as local reads do: 64 KiB values that lz4 stores in
    about 300 bytes each, 200 of them to a shipped segment, came back ~13 MiB decompressed from a 1 MiB read
    when the remote read counted stored bytes."""
    value = b"z" * 65536
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "compression.type": "lz4", "segment.bytes": 65536,
                                          "local.retention.bytes": 0})
        part = store.topic(TOPIC).partition(0)
        for _ in range(600):
            part.append_values([value])
        part.flush()
        store.upload_to_remote()
        part.enforce_retention()
        assert part.segments[0].base_offset > 100  # the first segment is read from the bucket alone
        got = part.read(0, max_records=10_000, max_bytes=1 << 20)
        assert 0 < sum(len(r.value) for r in got) <= (1 << 20) + len(value)
        assert [r.offset for r in got] == list(range(len(got)))
        assert part.read(0, max_records=10_000, max_bytes=1)[0].value == value  # the first batch, whatever the limit


def test_a_consumer_reads_from_the_remote_start_through_the_boundary(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        _, values, _ = _shipped_and_trimmed(store)
        assert _consume(store, len(values), max_poll_records=9) == values


def test_another_process_reads_shipped_segments_it_no_longer_has_locally(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        _, values, _ = _shipped_and_trimmed(store)
        code = ("import json, sys, pylog\n"
                "opts = {k.replace('.', '_'): v for k, v in json.loads(sys.argv[2]).items()}\n"
                "with pylog.open(sys.argv[1], read_only=True, **opts) as s:\n"
                "    p = s.topic('events').partition(0)\n"
                "    out, o = [p.log_start_offset], 0\n"
                "    while o < p.log_end_offset:\n"
                "        rs = p.read(o, 100000, max_bytes=1 << 30)\n"
                "        out += [r.value.decode() for r in rs]\n"
                "        o = rs[-1].offset + 1\n"
                "    print(json.dumps(out))\n")
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent))
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s"), json.dumps(remote_settings)],
                             capture_output=True, text=True, env=env, timeout=120, check=True).stdout
        doc = json.loads(out)
        assert doc[0] == 0 and [v.encode() for v in doc[1:]] == values


def test_a_topic_without_remote_storage_reads_as_before(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={"segment.bytes": 2048, "retention.bytes": 0})
        part = store.topic(TOPIC).partition(0)
        _fill(part)
        part.enforce_retention()
        assert part.log_start_offset == part.segments[0].base_offset > 0
        with pytest.raises(pylog.errors.OffsetOutOfRangeError):
            part.read(0)


def _kafka_python_reads(kafka, bootstrap: str, count: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the first ``count`` records a kafka-python consumer of TOPIC reads from earliest, in
    small fetches (so they cross the local/remote boundary)."""
    consumer = kafka.KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                   consumer_timeout_ms=10_000, max_partition_fetch_bytes=4096)
    got = []
    try:
        for rec in consumer:
            got.append((rec.offset, rec.value))
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


def test_a_kafka_client_fetches_shipped_segments_through_pylog_serve(tmp_path, remote_settings):
    """kafka-python from earliest through ``pylog serve``: ListOffsets gives the remote start, Fetch below the
    local log start is served from the bucket, and every record comes back once, in order."""
    kafka = pytest.importorskip("kafka")
    with _open(tmp_path / "s", remote_settings) as store:
        _, values, local_start = _shipped_and_trimmed(store)
        with pylog.serve(store, port=0) as server:
            got = _kafka_python_reads(kafka, server.bootstrap_servers, len(values))
    assert local_start > 0
    assert got == list(enumerate(values))


def test_pylog_serve_command_serves_shipped_segments_with_remote_storage_location(tmp_path, remote_settings):
    """`pylog serve STORE --remote-storage-location ...` (the command, not the API): a Kafka client reading from
    earliest gets the offsets only the bucket holds. Without the flag the command could not open a store with
    its location at all, so Kafka clients saw only the local log."""
    kafka = pytest.importorskip("kafka")
    from serverutil import start_cli_server
    with _open(tmp_path / "s", remote_settings) as store:
        _, values, local_start = _shipped_and_trimmed(store)
    proc, bootstrap, lines = start_cli_server(
        tmp_path / "s", "--remote-storage-location", str(remote_settings["remote.storage.location"]),
        "--remote-storage-endpoint-url", str(remote_settings["remote.storage.endpoint.url"]))
    try:
        got = _kafka_python_reads(kafka, bootstrap, len(values))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)
    assert local_start > 0
    assert got == list(enumerate(values))


def test_delete_records_raises_the_remote_log_start_first(tmp_path, remote_settings):
    with _open(tmp_path / "s", remote_settings) as store:
        part, values, local_start = _shipped_and_trimmed(store)
        rl = store.remote_log(TOPIC, 0)
        cut = rl.manifest().segments[1].base_offset + 3  # inside the second shipped segment
        assert part.delete_records(cut) >= local_start
        assert part.log_start_offset == cut and rl.manifest(refresh=True).log_start_offset == cut
        with pytest.raises(pylog.errors.OffsetOutOfRangeError):
            part.read(cut - 1)
        assert [r.value for r in part.read(cut, max_records=5)] == values[cut:cut + 5]
        # Past the remote end: everything remote is below the new start; shipping goes on from there.
        end = part.log_end_offset
        part.delete_records(end)
        m = rl.manifest(refresh=True)
        assert m.segments == () and m.log_start_offset == end and part.log_start_offset == end
        more = _fill(part, 30)
        store.upload_to_remote()
        assert store.cleaner_status().remote_failures == 0
        m = rl.manifest(refresh=True)
        assert m.segments and m.segments[0].end_offset > end and m.log_start_offset == end
        assert [r.value for r in part.read(end, max_records=len(more), max_bytes=1 << 30)][:5] == more[:5]


def test_pylog_health_shows_what_the_upload_thread_shipped(tmp_path, remote_settings):
    import io
    import threading

    from pylog.cli import main

    with _open(tmp_path / "s", remote_settings, log_cleaner_enable=True) as store:
        store.create_topic(TOPIC, config=TIERED)
        _fill(store.topic(TOPIC).partition(0))
        store.upload_to_remote()
        shipped = store.cleaner_status().remote_segments_shipped
        assert shipped > 0
        # The status file is rewritten at the cleaner's next heartbeat (at least every 5 s): bounded wait.
        idle = threading.Event()
        for _ in range(150):
            st = [c.status for c in store.cleaners() if c.status is not None]
            if st and st[0].remote_segments_shipped == shipped:
                break
            idle.wait(0.1)
        out = io.StringIO()
        main(["health", str(tmp_path / "s")], out)
        assert f"remote storage of pid {os.getpid()}" in out.getvalue()
        assert f"{shipped} segment(s)" in out.getvalue() and "0 closed segment(s) waiting" in out.getvalue()



def test_pylog_health_does_not_call_shipped_records_below_a_groups_offset_deleted(tmp_path, remote_settings):
    # Opened without the bucket, `pylog health` compared a group's offset with the local log start and reported
    # the shipped segments' records as "deleted before the group read them" (exit 1).
    import io

    from pylog.cli import main

    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
        store.create_topic("plain", config={"segment.bytes": 1024})
        part = store.topic(TOPIC).partition(0)
        _fill(part)
        store.upload_to_remote()
        part.enforce_retention()
        local_start = part.segments[0].base_offset
        assert local_start > 10 and part.log_start_offset == 0   # the remote log start, with the bucket
        store.commit_offsets("g", {(TOPIC, 0): 10})
    out = io.StringIO()
    assert main(["health", str(tmp_path / "s")], out) == 0, out.getvalue()
    assert (f"warning: group g: {TOPIC}-0 committed offset 10 is below the local log start {local_start}; {TOPIC} "
            "ships to remote storage") in out.getvalue()
    with pylog.open(tmp_path / "s") as store:   # a topic that does not ship: records below are gone
        plain = store.topic("plain").partition(0)
        _fill(plain, 20)
        store.delete_records("plain", 0, 15)
        store.commit_offsets("g", {("plain", 0): 5})
    out = io.StringIO()
    assert main(["health", str(tmp_path / "s")], out) == 1
    assert "problem: group g: plain-0 committed offset 5 is below the log start 15" in out.getvalue()


def _committed_values(part, start: int = 0) -> list[bytes]:
    """Every record from ``start`` a read_committed reader gets, read as a consumer reads (going on past what
    a read skipped)."""
    out, offset = [], start
    ii = internals(part)
    while offset < part.log_end_offset:
        slices, nxt = ii.read_isolated(offset, 50, 1 << 20, "read_committed")
        for view, a, b in slices:
            out += [r.value for r in view.records(TOPIC, 0, a, b)]
        offset = slices[-1][0].header.next_offset if slices else nxt
        if not slices and nxt <= offset and offset < part.last_stable_offset:
            raise AssertionError(f"read_committed made no progress at {offset}")
    return out


def _transactions_then_fill(part) -> tuple[list[bytes], int]:
    """An aborted transaction (producer 7), a committed one (producer 8) interleaved with it, then plain
    records filling many segments; returns what read_committed must return and the abort marker's offset."""
    part.append_values([b"aborted" * 40] * 3, producer=(7, 0, 0), transactional=True)
    part.append_values([b"committed" * 30] * 2, producer=(8, 0, 0), transactional=True)
    marker = internals(part).append_marker(7, 0, commit=False)
    internals(part).append_marker(8, 0, commit=True)
    values = _fill(part)
    return [b"committed" * 30] * 2 + values, marker


def _shipped_transactions(store):
    """A tiered topic's partition whose transactions (:func:`_transactions_then_fill`) were shipped and deleted
    locally, the abort marker's segment and index with them; (partition, the records read_committed returns)."""
    store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
    part = store.topic(TOPIC).partition(0)
    want, marker = _transactions_then_fill(part)
    store.upload_to_remote()
    part.enforce_retention()
    assert part.segments[0].base_offset > marker  # the marker's segment and its index: only in the bucket
    return part, want


def test_read_committed_of_shipped_segments_drops_aborted_transactions_after_local_deletion(tmp_path,
                                                                                           remote_settings):
    """The aborted-transaction index ships with its segment: once the local copies are gone, read_committed
    below the local log start still drops the aborted transaction's records (and never returns markers)."""
    with _open(tmp_path / "s", remote_settings) as store:
        part, want = _shipped_transactions(store)
        m = store.remote_log(TOPIC, 0).manifest()
        assert [s.txnindex_size > 0 for s in m.segments].count(True) == 1
        assert not list((tmp_path / "s" / TOPIC / "0").glob("*.txnindex"))
        assert _committed_values(part) == want
        uncommitted = [r.value for r in part.read(0, max_records=5)]
        assert uncommitted == [b"aborted" * 40] * 3 + [b"committed" * 30] * 2  # read_uncommitted: as written
        assert internals(part).aborted_transactions(0, 10) == [(7, 0)]  # what pylog serve's Fetch sends


def test_a_tiered_topic_opened_without_a_location_keeps_only_the_newest_snapshot_copy(tmp_path, remote_settings):
    """Without a remote location nothing ships, so nothing would remove the producer snapshots kept at rolls
    for shipping: only the newest is kept (the last closed segment's). Opened with the location again, the
    upload thread ships every closed segment, the last one with that snapshot, and the copy goes."""
    root = tmp_path / "s"
    pdir = root / TOPIC / "0"
    with _open(root, remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
    with pylog.open(str(root), log_cleaner_enable=False) as store:
        part = store.topic(TOPIC).partition(0)
        for seq in range(60):
            part.append_values([b"x" * 100] * 5, producer=(5, 0, seq * 5))
            kept = sorted(int(p.name[:20]) for p in pdir.glob("[0-9]*.snapshot"))
            assert kept == ([part.segments[-1].base_offset] if len(part.segments) > 1 else [])
        assert len(part.segments) > 10
        last_closed_end = part.segments[-1].base_offset
    with _open(root, remote_settings) as store:
        part = store.topic(TOPIC).partition(0)
        part.append_values([b"the writer again"], producer=(5, 0, 300))
        store.upload_to_remote()
        m = store.remote_log(TOPIC, 0).manifest()
        assert m.end_offset == last_closed_end
        assert m.segments[-1].snapshot_size > 0 and all(s.snapshot_size == -1 for s in m.segments[:-1])
        assert not list(pdir.glob("[0-9]*.snapshot"))


def test_a_new_producer_of_a_restored_store_gets_a_producer_id_of_its_own(tmp_path, remote_settings):
    """The producer id counter is not in the bucket: a restore started it at 0 again, so the first new
    producer got the id of a producer the restored partitions remember, and its first batch (sequence 0) was
    acknowledged as a duplicate of that producer's first batch, at its offset, and never written."""
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        with store.producer() as producer:
            for i in range(120):
                producer.send(TOPIC, b"old-%d" % i, partition=0)
                if i % 10 == 9:
                    producer.flush()
        part = store.topic(TOPIC).partition(0)
        part.append_values([b"tail"])  # closes nothing: the shipped end is the active segment's base
        store.upload_to_remote()
        shipped_end = store.remote_log(TOPIC, 0).manifest(refresh=True).end_offset
    assert shipped_end > 0
    pylog.restore(str(remote_settings["remote.storage.location"]), str(tmp_path / "r"),
                  remote_storage_endpoint_url=remote_settings["remote.storage.endpoint.url"])
    with pylog.open(str(tmp_path / "r"), log_cleaner_enable=False) as restored:
        with restored.producer() as producer:
            assert producer.send(TOPIC, b"new", partition=0).get(10).offset == shipped_end
        for tid in ("a", "b"):  # transactional producers too: a fresh id each, no clash with the restored ones
            with restored.producer(transactional_id=tid) as producer:
                producer.init_transactions()
                producer.begin_transaction()
                producer.send(TOPIC, tid.encode(), partition=0)
                producer.commit_transaction()
        part = restored.topic(TOPIC).partition(0)
        assert [r.value for r in part.read(shipped_end, isolation_level="read_committed")] == [b"new", b"a", b"b"]


def test_a_transaction_open_at_the_last_shipped_segment_is_aborted_by_the_restore(tmp_path, remote_settings):
    """The coordinator's state is not shipped: a transaction still open in the restored partitions was ended
    by nothing, and held the last stable offset (every read_committed reader) at its first record for good,
    past any timeout. The restore aborts it; the records after it are read_committed-visible."""
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        part = store.topic(TOPIC).partition(0)
        part.append_values([b"before-%d" % i * 10 for i in range(30)])
        producer = store.producer(transactional_id="left-open")
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(20):
            producer.send(TOPIC, b"open-%d" % i * 10, partition=0)
            producer.flush()
        after = [b"after-%d" % i * 10 for i in range(40)]
        for v in after:
            part.append_values([v])
        store.upload_to_remote()
        shipped_end = store.remote_log(TOPIC, 0).manifest(refresh=True).end_offset
        assert part.last_stable_offset == 30 < shipped_end
        producer.close()  # never ended: the coordinator still has it open
    pylog.restore(str(remote_settings["remote.storage.location"]), str(tmp_path / "r"),
                  remote_storage_endpoint_url=remote_settings["remote.storage.endpoint.url"])
    with pylog.open(str(tmp_path / "r"), log_cleaner_enable=False) as restored:
        part = restored.topic(TOPIC).partition(0)
        assert part.last_stable_offset == part.log_end_offset == shipped_end + 1  # the abort marker
        got = [r.value for r in part.read(0, 10 ** 6, max_bytes=1 << 30, isolation_level="read_committed")]
        shipped_after = [v for v in after if v in {r.value for r in part.read(0, 10 ** 6, max_bytes=1 << 30)}]
        assert got == [b"before-%d" % i * 10 for i in range(30)] + shipped_after and shipped_after


def test_a_restored_store_keeps_aborted_transactions_and_producer_state(tmp_path, remote_settings):
    """Restore brings back every shipped aborted-transaction index and the producer snapshot kept at the last
    shipped segment's roll: read_committed is right, and a producer whose batches were all deleted is still
    known (a retried append is a duplicate, not written twice; a sequence gap is refused), as Kafka keeps a
    producer snapshot per segment."""
    from pylog.storage.remote import ObjectStore, restore_store

    pdir = tmp_path / "s" / TOPIC / "0"
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        part = store.topic(TOPIC).partition(0)
        first = part.append_values([b"idempotent"], producer=(5, 0, 0))
        _fill(part, 25)
        cut = part.segments[1].base_offset  # producer 5's only batch is below: deleted before the restore
        txn_start = part.log_end_offset
        _transactions_then_fill(part)
    # Closed before shipping: producer.snapshot is now as of the log end, inside the active segment, so each
    # shipped segment's snapshot can only be the copy kept at its roll.
    assert list(pdir.glob("[0-9]*.snapshot"))
    with _open(tmp_path / "s", remote_settings) as store:
        part = store.topic(TOPIC).partition(0)
        part.append_values([b"after reopening"])  # the writer again: the upload thread ships what a store writes
        store.upload_to_remote()
        part.delete_records(cut)
        m = store.remote_log(TOPIC, 0).manifest(refresh=True)
        assert m.log_start_offset == cut == m.segments[0].base_offset and m.segments[-1].snapshot_size > 0
        ends = {int(p.name[:20]) for p in pdir.glob("[0-9]*.snapshot")}
        assert all(e > m.end_offset for e in ends)  # the copies of shipped segments removed once shipped
        want = _committed_values(part, cut)
        assert b"aborted" * 40 not in want and want.count(b"committed" * 30) == 2
    restore_store(ObjectStore.from_settings(remote_settings), str(tmp_path / "r"))
    with pylog.open(str(tmp_path / "r"), log_cleaner_enable=False) as store:
        part = store.topic(TOPIC).partition(0)
        assert (part.log_start_offset, part.log_end_offset) == (cut, m.end_offset) and cut <= txn_start
        got = _committed_values(part, cut)
        assert got == want[:len(got)] and len(got) > len(want) // 2
        assert part.append_values([b"idempotent"], producer=(5, 0, 0)) == first  # a duplicate: not written
        assert part.log_end_offset == m.end_offset
        with pytest.raises(pylog.errors.OutOfOrderSequenceError):
            part.append_values([b"gap"], producer=(5, 0, 3))


def test_group_offsets_are_shipped_and_restored_with_the_store(tmp_path, remote_settings):
    """Committed offsets of the topics shipped go to the bucket (``group.offsets``, replaced when they change)
    and ``pylog.restore`` commits them into the restored store; a topic not shipped keeps its commits home."""
    from pylog.storage.remote import ObjectStore
    from pylog.storage.remote.group_offsets import decode_group_offsets

    tp, other = pylog.TopicPartition(TOPIC, 0), pylog.TopicPartition("local-only", 0)
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        store.create_topic("local-only")
        _fill(store.topic(TOPIC).partition(0), 20)
        store.commit_offsets("billing", {tp: pylog.OffsetAndMetadata(7, "first", 3), other: 1})
        store.commit_offsets("audit", {tp: 2})
        store.upload_to_remote()
        store.commit_offsets("billing", {tp: pylog.OffsetAndMetadata(11, "again")})  # changed: shipped again
        store.upload_to_remote()
    objects = ObjectStore.from_settings(remote_settings)
    raw, _ = objects.get("group.offsets")
    shipped = decode_group_offsets(raw, "group.offsets")
    assert shipped == {"billing": {tp: pylog.OffsetAndMetadata(11, "again", -1)},
                       "audit": {tp: pylog.OffsetAndMetadata(2, "", -1)}}
    opts = {k.replace(".", "_"): v for k, v in remote_settings.items() if k != "remote.storage.location"}
    restored = pylog.restore(remote_settings["remote.storage.location"], str(tmp_path / "r"), **opts)
    assert restored.group_offsets == shipped
    with pylog.open(str(tmp_path / "r"), read_only=True) as store:
        assert store.committed_offsets("billing") == {tp: pylog.OffsetAndMetadata(11, "again", -1)}
        assert store.committed_offsets("audit") == {tp: pylog.OffsetAndMetadata(2, "", -1)}
        assert "local-only" not in store.topics()


def test_a_store_attached_read_only_from_the_bucket_reads_every_shipped_record(tmp_path, remote_settings):
    """``pylog.attach``: no local store at all (the shipping store's directory is gone); ``read``,
    ``read_columns``, read_committed and a consumer get every shipped record, byte for byte, from the bucket."""
    import shutil

    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        want, _ = _transactions_then_fill(store.topic(TOPIC).partition(0))
        store.upload_to_remote()
        end = store.remote_log(TOPIC, 0).manifest().end_offset
        everything = [r.value for r in store.topic(TOPIC).partition(0).read(0, 10 ** 6, max_bytes=1 << 30)]
    shutil.rmtree(tmp_path / "s")
    opts = {k.replace(".", "_"): v for k, v in remote_settings.items() if k != "remote.storage.location"}
    with pylog.attach(remote_settings["remote.storage.location"], **opts) as store:
        assert store.read_only and store.topics() == [TOPIC]
        part = store.topic(TOPIC).partition(0)
        assert part.offsets() == (0, end) and end > 100
        got, offset = [], 0
        while offset < end:
            batch = part.read(offset, max_records=37)
            got += batch
            offset = batch[-1].offset + 1
        assert [r.value for r in got] == everything[:len(got)] and len(got) == len(everything[:len(got)])
        cols = part.read_columns(10, max_records=10)  # past the two markers at 5 and 6; up to a segment's end
        assert 0 < len(cols.offsets) and list(cols.offsets) == list(range(10, 10 + len(cols.offsets)))
        assert cols.values() == everything[8:8 + len(cols.offsets)]  # offsets 5 and 6 are markers
        committed = _committed_values(part)
        assert committed == want[:len(committed)] and len(committed) > len(want) // 2
        assert _consume(store, len(got), max_poll_records=50) == [r.value for r in got]
        directory = store.path
    assert not os.path.exists(directory)  # the attach's temporary directory went with the store


def test_an_attached_store_never_closed_removes_its_directory_at_exit(tmp_path, remote_settings):
    """A process that attaches and exits without closing the store leaves no temporary directory behind,
    while a partition kept after the store itself was dropped still reads."""
    import subprocess
    import sys

    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        values = _fill(store.topic(TOPIC).partition(0), 40)
        store.upload_to_remote()
    opts = {k.replace(".", "_"): v for k, v in remote_settings.items() if k != "remote.storage.location"}
    script = (
        "import sys, pylog\n"
        f"part = pylog.attach({remote_settings['remote.storage.location']!r}, **{opts!r})"
        f".topic({TOPIC!r}).partition(0)\n"
        "import gc; gc.collect()\n"
        "print(part.directory, flush=True)\n"
        "print(len(part.read(0, max_records=10 ** 6, max_bytes=1 << 30)), flush=True)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    path, count = out.stdout.split()
    assert path.startswith(str(tmp_path)) and 0 < int(count) <= len(values)
    assert not os.path.exists(path) and [p.name for p in tmp_path.iterdir() if p.name.startswith("pylog-attach")] == []


def test_an_attached_stores_stub_segments_have_valid_indexes_and_log_no_warning(tmp_path, remote_settings, caplog):
    """``pylog.attach`` stubs each partition with an empty segment at the remote end: its indexes are there,
    sealed and empty (the core's index reader opens them as they are), so reading the attached store logs no
    "rebuilding indexes ... index file missing" warning."""
    import logging

    from pylog.index import OffsetIndex, TimeIndex
    from pylog.storage.remote.index_file import check_sealed

    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        values = _fill(store.topic(TOPIC).partition(0), 40)
        store.upload_to_remote()
        end = store.remote_log(TOPIC, 0).manifest().end_offset
    opts = {k.replace(".", "_"): v for k, v in remote_settings.items() if k != "remote.storage.location"}
    caplog.set_level(logging.WARNING, logger="pylog")
    with pylog.attach(remote_settings["remote.storage.location"], **opts) as store:
        pdir = Path(store.path) / TOPIC / "0"
        for kind, suffix in ((OffsetIndex, ".index"), (TimeIndex, ".timeindex")):
            idx = kind.open(str(pdir / f"{end:020d}{suffix}"), end)
            assert idx.sealed and idx.count == 0
            idx.close()
            check_sealed((pdir / f"{end:020d}{suffix}").read_bytes(), kind.MAGIC, end, suffix)
        part = store.topic(TOPIC).partition(0)
        assert part.offsets() == (0, end)
        got: list[bytes] = []
        while len(got) < end:  # a remote read ends at its segment's end
            got += [r.value for r in part.read(len(got), max_records=10 ** 6, max_bytes=1 << 30)]
        assert got == values[:end] and part.read(end) == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pylog")] == []


def test_an_attached_store_starts_assigned_group_consumers_at_the_shipped_offsets_and_refuses_commits(
        tmp_path, remote_settings):
    """An attached store has the groups' committed offsets as shipped (``group.offsets``): a consumer with the
    group that calls ``assign()`` starts there (not at ``auto_offset_reset``); joining the group, committing and
    ``commit_offsets`` raise ReadOnlyStoreError naming the attach, not the private directory."""
    from pylog.structs import TopicPartition

    tp = TopicPartition(TOPIC, 0)
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config=TIERED)
        values = _fill(store.topic(TOPIC).partition(0), 40)
        store.commit_offsets("readers", {tp: 42})
        store.upload_to_remote()
    location = remote_settings["remote.storage.location"]
    opts = {k.replace(".", "_"): v for k, v in remote_settings.items() if k != "remote.storage.location"}
    with pylog.attach(location, **opts) as store:
        assert store.committed_offsets("readers")[tp].offset == 42
        consumer = store.consumer(group_id="readers", enable_auto_commit=False, auto_offset_reset="earliest")
        consumer.assign([tp])
        got = [r for records in consumer.poll(timeout_ms=5000).values() for r in records]
        assert got and got[0].offset == 42 and got[0].value == values[42]
        with pytest.raises(pylog.ReadOnlyStoreError, match=f"attached from {location}"):
            consumer.commit()
        consumer.close()
        with pytest.raises(pylog.ReadOnlyStoreError, match=f"attached from {location}"):
            store.consumer(TOPIC, group_id="readers", enable_auto_commit=False)
        with pytest.raises(pylog.ReadOnlyStoreError, match="pylog.restore"):
            store.commit_offsets("readers", {tp: 1})
        assert store.committed_offsets("readers")[tp].offset == 42


def test_spark_reads_a_shipped_topic_from_the_bucket_alone(tmp_path, remote_settings, spark):
    """``spark.read.format("pylog").load("s3://bucket/prefix")``: no store directory anywhere (the shipping
    store is gone); the driver plans from the shipped manifests, the executors read the segments by ranged
    GETs, and the rows are every shipped record, in order (markers are no rows)."""
    import shutil

    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, partitions=2, config=TIERED)
        want, _ = _transactions_then_fill(store.topic(TOPIC).partition(0))
        _fill(store.topic(TOPIC).partition(1), 40)
        store.upload_to_remote()
        ends = [store.remote_log(TOPIC, p).manifest().end_offset for p in (0, 1)]
        shipped = {p: [r.value for r in store.topic(TOPIC).partition(p).read(0, 10 ** 6, max_bytes=1 << 30)
                       if r.offset < ends[p]] for p in (0, 1)}
    shutil.rmtree(tmp_path / "s")
    reader = (spark.read.format("pylog").option("subscribe", TOPIC)
              .option("remote.storage.endpoint.url", remote_settings["remote.storage.endpoint.url"]))
    rows = reader.option("minPartitions", 3).load(remote_settings["remote.storage.location"]) \
        .select("partition", "offset", "value").orderBy("partition", "offset").collect()
    for p in (0, 1):
        got = [bytes(r.value) for r in rows if r.partition == p]
        assert got == shipped[p] and [r.offset for r in rows if r.partition == p][-1] == ends[p] - 1
    # A stream of the bucket is refused, saying why: an attached store sees what was shipped when it was
    # opened, so a stream would never see a new record (docs/SPARK.md, "Reading a bucket").
    stream = (spark.readStream.format("pylog").option("subscribe", TOPIC)
              .option("remote.storage.endpoint.url", remote_settings["remote.storage.endpoint.url"]))
    with pytest.raises(Exception, match="batch reads only read a bucket") as refused:
        query = stream.load(remote_settings["remote.storage.location"]).writeStream.format("memory") \
            .queryName("bucket_stream").start()
        try:
            query.processAllAvailable()  # the refusal may come when the stream plans its first micro-batch
        finally:
            query.stop()
    assert "path" in str(refused.value)


# ------------------------------------------------------------------------------------------ failures

def test_a_manifest_naming_a_missing_object_fails_reads_clearly_and_pylog_verify_remote_reports_it(
        tmp_path, remote_settings, s3_endpoint):
    """An object the manifest names deleted behind pylog's back: a read below the local log start raises
    RemoteObjectMissingError naming it (never garbage or a foreign exception), and ``pylog verify --remote``
    reports it with exit 1 while the local check passes."""
    import io

    from pylog.cli import main
    from pylog.storage.remote.layout import segment_object
    from s3_server import raw_client

    with _open(tmp_path / "s", remote_settings) as store:
        part, values, local_start = _shipped_and_trimmed(store)
        seg = store.remote_log(TOPIC, 0).manifest().segments[0]
        bucket, prefix = remote_settings["remote.storage.location"][len("s3://"):].split("/", 1)
        key = f"{prefix}/{segment_object(TOPIC, 0, seg.base_offset, seg.log_crc, '.log')}"
        raw_client(s3_endpoint).delete_object(Bucket=bucket, Key=key)
        with pytest.raises(pylog.RemoteObjectMissingError, match=key):
            part.read(0)
        assert [r.value for r in part.read(local_start, max_records=3)] == values[local_start:local_start + 3]
    out = io.StringIO()
    code = main(["verify", str(tmp_path / "s"), "--remote", remote_settings["remote.storage.location"],
                 "--endpoint-url", s3_endpoint], out)
    text = out.getvalue()
    assert code == 1 and "verify: no problems" in text and f"{key}: missing" in text, text
    assert "verify-remote: 1 problem(s)" in text


def test_a_half_finished_multipart_upload_at_a_segment_key_changes_nothing(tmp_path, remote_settings, s3_endpoint):
    """pylog ships each object in one PUT; a multipart upload someone left unfinished at a segment's key is no
    object (S3 lists and serves none until it completes), so shipping, reads and checks go on unaffected."""
    from pylog.storage.records import crc32c
    from pylog.storage.remote import ObjectStore
    from pylog.storage.remote.layout import segment_object
    from s3_server import raw_client

    client = raw_client(s3_endpoint)
    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
        part = store.topic(TOPIC).partition(0)
        values = _fill(part)
        bucket, prefix = remote_settings["remote.storage.location"][len("s3://"):].split("/", 1)
        log_file = tmp_path / "s" / TOPIC / "0" / ("0" * 20 + ".log")
        key = f"{prefix}/{segment_object(TOPIC, 0, 0, crc32c(log_file.read_bytes()), '.log')}"  # the name it ships to
        size = log_file.stat().st_size
        upload = client.create_multipart_upload(Bucket=bucket, Key=key)
        client.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024)
        store.upload_to_remote()
        part.enforce_retention()
        assert store.cleaner_status().remote_failures == 0 and part.segments[0].base_offset > 0
        assert [r.value for r in part.read(0, 10 ** 6, max_bytes=1 << 30)][:20] == values[:20]
        assert store.remote_log(TOPIC, 0).check(full=True) == []
        info = ObjectStore.from_settings(remote_settings).head(key[len(prefix) + 1:])
        assert info is not None and info.size == size  # the segment's own PUT, not the unfinished upload


def test_opening_a_bucket_as_a_store_directory_is_refused_pointing_to_attach(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for location in ("s3://bucket/prefix", "S3A://bucket/prefix"):
        with pytest.raises(pylog.StorePathError, match="pylog.attach"):
            pylog.open(location)
    assert not list(tmp_path.iterdir())  # no directory "s3:" made
    with pytest.raises(pylog.errors.InvalidArgumentError, match="s3://bucket/prefix"):
        pylog.attach(str(tmp_path))


def test_a_kafka_client_reading_committed_drops_shipped_aborted_transactions_through_pylog_serve(tmp_path,
                                                                                               remote_settings):
    """kafka-python with isolation_level=read_committed through ``pylog serve``, every record below the local
    log start: Fetch sends the shipped aborted-transaction index's entries, so the client drops the aborted
    records and gets the committed ones, once, in order."""
    kafka = pytest.importorskip("kafka")
    with _open(tmp_path / "s", remote_settings) as store:
        part, want = _shipped_transactions(store)
        expected = _committed_values(part)
        with pylog.serve(store, port=0) as server:
            consumer = kafka.KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap_servers,
                                           auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                                           isolation_level="read_committed", max_partition_fetch_bytes=4096)
            got = []
            try:
                for rec in consumer:
                    got.append(rec.value)
                    if len(got) >= len(expected):
                        break
            finally:
                consumer.close()
    assert expected[:2] == [b"committed" * 30] * 2 and got == expected


def test_a_damaged_shipped_aborted_transaction_index_fails_read_committed_and_never_lets_records_through(
        tmp_path, remote_settings, s3_endpoint):
    from pylog.storage.remote.layout import segment_object
    from s3_server import raw_client

    with _open(tmp_path / "s", remote_settings) as store:
        store.create_topic(TOPIC, config={**TIERED, "local.retention.bytes": 0})
        part = store.topic(TOPIC).partition(0)
        _transactions_then_fill(part)
        store.upload_to_remote()
        part.enforce_retention()
        seg = next(s for s in store.remote_log(TOPIC, 0).manifest().segments if s.txnindex_size > 0)
        bucket, prefix = remote_settings["remote.storage.location"][len("s3://"):].split("/", 1)
        key = f"{prefix}/{segment_object(TOPIC, 0, seg.base_offset, seg.log_crc, '.txnindex')}"
        raw = raw_client(s3_endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()
        raw_client(s3_endpoint).put_object(Bucket=bucket, Key=key, Body=raw[:-1] + bytes([raw[-1] ^ 1]))
        with pytest.raises(pylog.RemoteDataCorruptError, match="txnindex"):
            internals(part).read_isolated(0, 50, 1 << 20, "read_committed")
        assert [r.value for r in part.read(0, max_records=3)] == [b"aborted" * 40] * 3  # read_uncommitted
