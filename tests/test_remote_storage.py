"""Tiered storage's remote layer (pylog/storage/remote) against a real S3 API: moto's server on 127.0.0.1.

Each test writes a real store with small segments, ships its closed segments through RemoteLog and checks
what the bucket holds, what reads and restores give back, and what a hostile or failing bucket does.

Run: ``python -m pytest tests/test_remote_storage.py -q``
"""

from __future__ import annotations

import io
import json
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import pylog
from pylog.cli import main
from pylog.errors import (InvalidArgumentError, InvalidConfigError, OffsetOutOfRangeError, RemoteConflictError,
                          RemoteDataCorruptError, RemoteObjectMissingError, RemoteStorageError, StorePathError)
from pylog.storage.filenames import list_segment_bases
from pylog.storage.producer_state import ProducerState
from pylog.storage.records import BatchView, parse_header
from pylog.storage.records.format import crc32c
from pylog.storage.remote import ChunkCache, ObjectStore, RemoteLog, restore_store, ship_store_metadata
from pylog.storage.remote.index_file import OFFSET_INDEX_MAGIC, TIME_INDEX_MAGIC, check_sealed
from pylog.storage.remote.layout import manifest_name, parse_segment_object, segment_object
from pylog.storage.remote.manifest import Manifest, RemoteSegment, decode_manifest, encode_manifest
from s3_server import FaultProxy, raw_client

CHILD = Path(__file__).parent / "remote_ship_child.py"
TOPIC = "events"
#: Small segments with index entries every few batches: a store of a few hundred KB has many segments.
CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 256, "retention.ms": -1,
          "producer.id.expiration.ms": 1 << 62}  # the records' 2023 timestamps must not expire the producers


def _write_store(root: Path, partitions: int = 1, batches: int = 60, seed: int = 0) -> dict[int, list]:
    """A store of small segments, the active one empty; each partition written by an idempotent producer
    (id 1000 + p). Returns
    each partition's appends as ``(first offset, sequence, values, keys, timestamps)``."""
    appends: dict[int, list] = {}
    with pylog.open(str(root), log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions, config=CONFIG)
        for p in range(partitions):
            part, seq = store.topic(TOPIC).partition(p), 0
            appends[p] = []
            for i in range(batches):
                n = 1 + (i * 7 + seed) % 13
                values = [f"v{seed}-{p}-{i}-{j}".encode() * (1 + j % 9) for j in range(n)]
                keys = [f"k{j}".encode() for j in range(n)]
                stamps = [1_700_000_000_000 + i * 1000 + j for j in range(n)]
                first = part.append_values(values, keys=keys, timestamps=stamps, producer=(1000 + p, 0, seq))
                appends[p].append((first, seq, values, keys, stamps))
                seq += n
            # Rolled at the end: the producer snapshot (rewritten at each roll and at close) is then as of
            # the last closed segment's end, so shipping that segment carries it.
            part.roll()
    return appends


def _ship_all(remote: RemoteLog, directory: Path) -> list[RemoteSegment]:
    return [s for s in (remote.ship_segment(str(directory), b) for b in list_segment_bases(str(directory))[:-1])
            if s is not None]


def _remote(settings: dict, partition: int = 0, **kw) -> RemoteLog:
    return RemoteLog(ObjectStore.from_settings(settings), TOPIC, partition, **kw)


def _bucket_key(settings: dict, name: str) -> tuple[str, str]:
    bucket, _, prefix = str(settings["remote.storage.location"])[5:].partition("/")
    return bucket, f"{prefix}/{name}"


# ------------------------------------------------------------------------------------------- object store

def test_object_store_put_get_range_list_head_and_delete_round_trip(remote_settings):
    objects = ObjectStore.from_settings(remote_settings)
    data = bytes(range(256)) * 5000
    etag = objects.put_new("a/one", data, len(data), {"pylog-crc32c": "abc"})
    assert objects.get("a/one", max_bytes=len(data)) == (data, etag)
    assert objects.get("a/one", 1000, 77)[0] == data[1000:1077]
    assert objects.get("a/one", len(data) - 5, 100)[0] == data[-5:]  # cut where the object ends
    assert objects.get("a/one", len(data) + 10, 5)[0] == b""
    info = objects.head("a/one")
    assert info is not None and (info.key, info.size, info.metadata["pylog-crc32c"]) == ("a/one", len(data), "abc")
    objects.put_new("a/two", b"2", 1)
    objects.put_new("b/three", b"3", 1)
    assert [i.key for i in objects.list("a/")] == ["a/one", "a/two"]
    assert sorted(objects.folders("")) == ["a", "b"]
    objects.delete(["a/one", "a/missing"])
    assert objects.head("a/one") is None
    with pytest.raises(RemoteObjectMissingError, match="a/one"):
        objects.get("a/one")


def test_a_whole_get_over_its_memory_bound_is_refused(remote_settings):
    objects = ObjectStore.from_settings(remote_settings)
    objects.put_new("big", b"x" * 5000, 5000)
    with pytest.raises(RemoteStorageError, match="more than"):
        objects.get("big", max_bytes=4096)
    with pytest.raises(RemoteStorageError, match="over the bound"):
        objects.get("big", 0, 5000, max_bytes=4096)


def test_put_new_refuses_a_taken_key_and_put_replacing_needs_the_version_read(remote_settings):
    objects = ObjectStore.from_settings(remote_settings)
    first = objects.put_new("k", b"first", 5)
    with pytest.raises(RemoteConflictError):
        objects.put_new("k", b"second", 6)
    with pytest.raises(RemoteConflictError):
        objects.put_replacing("k", b"second", '"0000"')
    with pytest.raises(RemoteConflictError):
        objects.put_replacing("k", b"second", None)  # "create only": it exists
    second = objects.put_replacing("k", b"second", first)
    with pytest.raises(RemoteConflictError):
        objects.put_replacing("k", b"third", first)  # the version read is gone
    assert objects.get("k") == (b"second", second)


@pytest.mark.parametrize("location", ["", "bucket", "s3://", "s3:///x", "http://b/p", "s3://b/a/../c", "s3://b/a//c"])
def test_remote_storage_location_must_be_s3_bucket_and_prefix(location):
    with pytest.raises(InvalidConfigError, match="remote.storage.location"):
        ObjectStore.from_settings({"remote.storage.location": location})


def test_unknown_remote_setting_and_bad_values_are_refused():
    with pytest.raises(InvalidConfigError, match="unknown"):
        ObjectStore.from_settings({"remote.storage.location": "s3://b/p", "remote.storage.bukket": "x"})
    with pytest.raises(InvalidConfigError, match="max.attempts"):
        ObjectStore.from_settings({"remote.storage.location": "s3://b/p", "remote.storage.max.attempts": 0})


def test_unreachable_endpoint_is_a_remote_storage_error(s3_endpoint):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    objects = ObjectStore.from_settings({"remote.storage.location": "s3://pylog-none/p",
                                         "remote.storage.endpoint.url": f"http://127.0.0.1:{port}",
                                         "remote.storage.request.timeout.ms": 500, "remote.storage.max.attempts": 2})
    with pytest.raises(RemoteStorageError, match="(?i)connect") as err:
        objects.head("x")
    assert err.value.key == "s3://pylog-none/p/x"


def test_a_store_that_never_answers_times_out_as_a_remote_storage_error(s3_endpoint):
    with socket.socket() as listener:  # accepts connections (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        objects = ObjectStore.from_settings({
            "remote.storage.location": "s3://pylog-silent/p",
            "remote.storage.endpoint.url": f"http://127.0.0.1:{listener.getsockname()[1]}",
            "remote.storage.request.timeout.ms": 300, "remote.storage.max.attempts": 1})
        start = time.monotonic()
        with pytest.raises(RemoteStorageError, match="(?i)timeout|timed out"):
            objects.get("x")
        assert time.monotonic() - start < 60  # bounded (a hang would stop here, not pass)


def test_missing_bucket_is_a_remote_storage_error_with_its_code(s3_endpoint):
    objects = ObjectStore.from_settings({"remote.storage.location": "s3://pylog-no-such-bucket/p",
                                         "remote.storage.endpoint.url": s3_endpoint})
    with pytest.raises(RemoteStorageError) as err:
        objects.put_new("x", b"1", 1)
    assert err.value.code == "NoSuchBucket"


def _through(proxy: FaultProxy, settings: dict, attempts: int) -> ObjectStore:
    return ObjectStore.from_settings({**settings, "remote.storage.endpoint.url": proxy.url,
                                      "remote.storage.max.attempts": attempts})


def test_throttling_is_retried_and_a_request_succeeds_within_its_attempts(remote_settings, s3_endpoint):
    with FaultProxy(s3_endpoint, faults=2) as proxy:
        objects = _through(proxy, remote_settings, attempts=3)
        objects.put_new("k", b"value", 5)
        assert proxy.requests == 3  # two SlowDown answers, then the PUT
    assert ObjectStore.from_settings(remote_settings).get("k")[0] == b"value"


@pytest.mark.parametrize("status, code", [(503, "SlowDown"), (500, "InternalError"), (403, "AccessDenied")])
def test_a_failing_bucket_is_a_remote_storage_error_after_at_most_max_attempts(remote_settings, s3_endpoint, status,
                                                                               code):
    with FaultProxy(s3_endpoint, faults=100, status=status, code=code) as proxy:
        objects = _through(proxy, remote_settings, attempts=3)
        with pytest.raises(RemoteStorageError) as err:
            objects.get("k")
        assert err.value.code == code
        assert proxy.requests == (1 if status == 403 else 3)  # refusals are not retried; the rest 3 times


def test_a_commit_whose_answer_was_lost_is_not_applied_twice(tmp_path, remote_settings, s3_endpoint):
    """The manifest PUT took effect but its answer was lost (a 500 instead): botocore's retry meets 412 (the
    version it read is gone), the commit re-reads, finds its own change there and stops; the same for a
    segment object's PUT, which the re-upload check accepts."""
    _write_store(tmp_path / "s")
    part = str(tmp_path / "s" / TOPIC / "0")
    bases = list_segment_bases(part)
    _remote(remote_settings).ship_segment(part, bases[0])
    with FaultProxy(s3_endpoint, faults=0, status=500, code="InternalError", lose_puts=100) as proxy:
        lossy = RemoteLog(_through(proxy, remote_settings, attempts=2), TOPIC, 0)
        seg = lossy.ship_segment(part, bases[1])
        assert proxy.lose_puts == 100 - 4  # the log, both indexes and the manifest: each written, answer lost
    m = _remote(remote_settings).manifest(refresh=True)
    assert m.epoch == 2 and m.segments[-1] == seg and len(m.segments) == 2
    assert _remote(remote_settings).check(full=True) == []


# ------------------------------------------------------------------------------------------------ manifest

def _seg(base: int, end: int, crc: int = 1) -> RemoteSegment:
    return RemoteSegment(base, end, 5, 100, crc, 64, 2, 64, 3)


def test_manifest_round_trips_and_keeps_segments_contiguous():
    m = Manifest(TOPIC, 3).with_segment(_seg(10, 20)).with_segment(_seg(20, 25))
    assert (m.log_start_offset, m.end_offset, m.find(19).base_offset, m.find(25)) == (10, 25, 10, None)
    assert m.with_segment(_seg(20, 25)) is m  # a re-upload changes nothing
    with pytest.raises(RemoteConflictError, match="other content"):
        m.with_segment(_seg(20, 25, crc=9))
    with pytest.raises(RemoteConflictError, match="does not continue"):
        m.with_segment(_seg(26, 30))
    assert decode_manifest(encode_manifest(m), "x") == m
    head = m.without_head(1)
    assert (head.log_start_offset, [s.base_offset for s in head.segments]) == (20, [20])


@pytest.mark.parametrize("damage", ["flip", "cut", "magic", "gap"])
def test_damaged_manifest_is_refused_as_remote_data_corrupt(damage):
    m = Manifest(TOPIC, 0).with_segment(_seg(0, 10)).with_segment(_seg(10, 20))
    raw = bytearray(encode_manifest(m))
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x40
    elif damage == "cut":
        raw = raw[:-7]
    elif damage == "magic":
        raw = bytearray(encode_manifest(m).replace(b"PLRM", b"PLRX"))
    else:  # a well-formed file whose segments leave a gap: checked beyond the CRC
        from pylog.storage.fileio import checked, encode_doc
        doc = {"topic": TOPIC, "partition": 0, "epoch": 1, "log_start_offset": 0,
               "segments": [_seg(0, 10).fields(), _seg(11, 20).fields()]}
        raw = bytearray(checked(encode_doc(b"PLRM", 1, doc)))
    with pytest.raises(RemoteDataCorruptError, match="remote manifest"):
        decode_manifest(bytes(raw), "s3://b/events/0/remote.manifest")


def test_segment_object_names_parse_back():
    name = segment_object(TOPIC, 2, 1234, 0xABC, ".timeindex")
    assert name == "events/2/00000000000000001234-00000abc.timeindex"
    assert parse_segment_object(name) == (1234, 0xABC, ".timeindex")
    for other in ("events/2/remote.manifest", "events/2/00000000000000001234.log", "x/00000000000000001234-ABCDEF00.log"):
        assert parse_segment_object(other) is None


# ------------------------------------------------------------------------------------------------ shipping

def test_shipped_segments_are_committed_once_with_their_checksums(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    shipped = _ship_all(remote, part)
    bases = list_segment_bases(str(part))
    assert len(shipped) == len(bases) - 1 >= 5
    m = remote.manifest(refresh=True)
    assert m.segments == tuple(shipped) and m.epoch == len(shipped)
    assert m.end_offset == bases[-1]  # everything before the active segment
    assert remote.check(full=True) == []
    # Shipping again is a no-op: same manifest, same epoch.
    assert _ship_all(remote, part) == shipped
    assert remote.manifest(refresh=True).epoch == len(shipped)


def test_the_active_segment_and_a_damaged_one_are_not_shipped(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    bases = list_segment_bases(str(part))
    remote = _remote(remote_settings)
    with pytest.raises(InvalidArgumentError, match="active"):
        remote.ship_segment(str(part), bases[-1])
    with pytest.raises(InvalidArgumentError, match="no segment"):
        remote.ship_segment(str(part), bases[0] + 1)
    log = part / f"{bases[1]:020d}.log"
    raw = bytearray(log.read_bytes())
    raw[200] ^= 0x01
    log.write_bytes(bytes(raw))
    remote.ship_segment(str(part), bases[0])
    with pytest.raises(pylog.CorruptRecordError):
        remote.ship_segment(str(part), bases[1])
    assert remote.manifest(refresh=True).end_offset == bases[1]


def test_two_shippers_of_one_partition_never_overwrite_each_other(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = str(tmp_path / "s" / TOPIC / "0")
    bases = list_segment_bases(part)
    a, b = _remote(remote_settings), _remote(remote_settings)
    a.ship_segment(part, bases[0])
    # b commits a segment between a's read of the manifest and a's conditional write: a's write loses, and
    # a re-reads and decides again on b's state instead of overwriting it.
    raced = []

    def change(m: Manifest) -> Manifest:
        if not raced:
            raced.append(b.ship_segment(part, bases[1]))
        return m.with_segment(_seg(m.end_offset, m.end_offset + 5))

    result = a.commit(change)
    assert [s.base_offset for s in result.segments] == bases[:3]
    assert result.segments[1] == raced[0] and result.epoch == 3
    with pytest.raises(RemoteConflictError, match="does not continue"):
        a.commit(lambda m: m.with_segment(_seg(m.end_offset + 1, m.end_offset + 5)))
    # Different content at a shipped offset (another store's segment at the same base) is refused.
    _write_store(tmp_path / "other", seed=5)
    other = str(tmp_path / "other" / TOPIC / "0")
    with pytest.raises(RemoteConflictError, match="other content"):
        _remote(remote_settings).ship_segment(other, list_segment_bases(other)[0])
    assert b.manifest(refresh=True).epoch == 3


def test_an_object_overwritten_with_other_bytes_is_refused_on_reupload(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = str(tmp_path / "s" / TOPIC / "0")
    base = list_segment_bases(part)[0]
    remote = _remote(remote_settings)
    log_crc = crc32c(Path(part, f"{base:020d}.log").read_bytes())  # names the shipped objects
    objects = ObjectStore.from_settings(remote_settings)
    objects.put_new(segment_object(TOPIC, 0, base, log_crc, ".index"), b"junk", 4, {"pylog-crc32c": "00000000"})
    with pytest.raises(RemoteConflictError, match="other content"):
        remote.ship_segment(part, base)
    assert remote.manifest(refresh=True).segments == ()


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 2, 3, 4, 6])
def test_a_shipper_killed_between_puts_or_before_the_commit_is_finished_by_the_next(tmp_path, remote_settings,
                                                                                    kill_after):
    """SIGKILL after the first segment's log PUT (1), its index PUT (2), its time index PUT, the last before
    its manifest commit (3), right after that commit (4), or between the second segment's PUTs (6): the
    manifest holds exactly the segments committed before the kill, and the re-run ships everything exactly
    once, leaving no duplicate or stray object."""
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    child = subprocess.Popen([sys.executable, str(CHILD), json.dumps(remote_settings), str(part), TOPIC, "0"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(), text=True)
    try:
        events = []
        while len(events) < kill_after:
            line = child.stdout.readline()
            assert line, "the shipping child ended early"
            events.append(line.split())
            if len(events) < kill_after:
                child.stdin.write("\n")
                child.stdin.flush()
        child.kill()  # SIGKILL while it waits after events[-1]
    finally:
        child.wait(timeout=60)
    committed = sum(e[0] == "committed" for e in events)
    assert committed == (kill_after >= 4), events
    remote = _remote(remote_settings)
    assert len(remote.manifest(refresh=True).segments) == committed
    shipped = _ship_all(remote, part)
    m = remote.manifest(refresh=True)
    assert m.segments == tuple(shipped) and m.epoch == len(shipped)
    assert remote.check(full=True) == []
    names = [i.key for i in ObjectStore.from_settings(remote_settings).list(f"{TOPIC}/0/")]
    assert len(names) == len(set(names)) == 1 + sum(3 + (s.snapshot_size >= 0) for s in shipped)


def _child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(pylog.__file__).parent.parent),
                                                        os.environ.get("PYTHONPATH", "")]))


@pytest.mark.slow
def test_two_processes_shipping_one_partition_at_once_ship_each_segment_once(tmp_path, remote_settings):
    _write_store(tmp_path / "s", batches=120)
    part = tmp_path / "s" / TOPIC / "0"
    argv = [sys.executable, str(CHILD), json.dumps(remote_settings), str(part), TOPIC, "0", "--no-pause"]
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env(), text=True)
                for _ in range(2)]
    outputs = [c.communicate(timeout=300) for c in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0 and out.endswith("done\n"), err[-2000:]
    remote = _remote(remote_settings)
    m = remote.manifest(refresh=True)
    bases = list_segment_bases(str(part))
    assert [s.base_offset for s in m.segments] == bases[:-1]
    assert m.epoch == len(bases) - 1  # one commit per segment: the slower shipper's commits changed nothing
    assert remote.check(full=True) == []


# --------------------------------------------------------------------------------------------------- reads

def test_remote_reads_return_the_local_bytes_of_whole_checked_batches(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    shipped = _ship_all(remote, part)
    for seg in shipped:
        log = (part / f"{seg.base_offset:020d}.log").read_bytes()
        for offset in range(seg.base_offset, seg.end_offset):
            for max_bytes in (1, 700, 1 << 20):
                got = remote.read(offset, max_bytes)
                assert got.data == log[got.position - 0:got.position + len(got.data)]
                first = parse_header(got.data)
                assert first.base_offset <= offset < first.next_offset
                assert len(got.data) <= max(max_bytes, first.size)
                assert got.next_offset > offset


def test_remote_reads_decode_to_the_records_a_local_read_returns(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    remote = _remote(remote_settings)
    shipped = _ship_all(remote, tmp_path / "s" / TOPIC / "0")
    got, offset = [], 0
    while offset < shipped[-1].end_offset:  # what the partition's read path will do below the local log start
        batches = remote.read(offset, 4096)
        pos = 0
        while pos < len(batches.data):
            view = BatchView.from_buffer(batches.data, pos)
            got += [r for r in view.records(TOPIC, 0) if r.offset >= offset]
            pos += view.header.size
        offset = batches.next_offset
    with pylog.open(str(tmp_path / "s"), read_only=True) as store:
        want = store.topic(TOPIC).partition(0).read(0, max_records=100_000)
    assert got == [r for r in want if r.offset < shipped[-1].end_offset] and len(got) > 100


def test_remote_reads_go_through_a_bounded_chunk_cache(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    shipped = _ship_all(_remote(remote_settings), tmp_path / "s" / TOPIC / "0")
    chunks = ChunkCache(4096, 3 * 4096)
    remote = _remote(remote_settings, chunks=chunks)
    first = remote.read(shipped[0].base_offset, 100)
    misses = chunks.misses
    assert misses >= 1 and chunks.held_bytes <= 3 * 4096
    again = remote.read(shipped[0].base_offset, 100)  # the same bytes, from the cache
    assert again == first and chunks.misses == misses and chunks.hits >= 1
    for seg in shipped:  # more than the cache holds: the oldest pieces go, the bound holds
        remote.read(seg.base_offset, 1 << 20)
        assert chunks.held_bytes <= 3 * 4096
    remote.read(shipped[0].base_offset, 100)
    assert chunks.misses > misses


def test_chunk_cache_serves_any_range_byte_for_byte_from_cached_and_fetched_pieces(remote_settings):
    objects = ObjectStore.from_settings(remote_settings)
    data = os.urandom(10 * 4096 + 123)
    objects.put_new("obj", data, len(data))
    chunks = ChunkCache(4096, 6 * 4096)
    rng = random.Random(7)
    for _ in range(200):
        start = rng.randrange(0, len(data) + 10)
        end = start + rng.randrange(0, 5 * 4096)
        assert chunks.read(objects, "obj", len(data), start, end) == data[start:end]
        assert chunks.held_bytes <= 6 * 4096
    assert chunks.hits > 0 and chunks.misses > 0
    objects.put_new("short", data[:5000], 5000)  # an object shorter than its manifest says
    with pytest.raises(RemoteDataCorruptError, match="ends at 5000"):
        ChunkCache(4096, 0).read(objects, "short", 9000, 4000, 9000)


def test_remote_read_outside_the_remote_log_is_out_of_range(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    with pytest.raises(OffsetOutOfRangeError):
        remote.read(0, 100)
    shipped = _ship_all(remote, part)
    with pytest.raises(OffsetOutOfRangeError) as err:
        remote.read(shipped[-1].end_offset, 100)
    assert (err.value.log_start_offset, err.value.log_end_offset) == (0, shipped[-1].end_offset)


def test_a_damaged_remote_log_or_index_is_never_returned_as_data(tmp_path, remote_settings, s3_endpoint):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    seg = _ship_all(remote, part)[0]
    client = raw_client(s3_endpoint)
    log = bytearray((part / f"{seg.base_offset:020d}.log").read_bytes())
    log[40] ^= 0x20  # the first batch's producer id: its CRC fails (the header still parses)
    client.put_object(**dict(zip(("Bucket", "Key"), _bucket_key(remote_settings, segment_object(
        TOPIC, 0, seg.base_offset, seg.log_crc, ".log")))), Body=bytes(log))
    with pytest.raises(RemoteDataCorruptError):
        remote.read(seg.base_offset, 1 << 20)
    assert any("CRC" in p for p in remote.check(full=True))
    client.put_object(**dict(zip(("Bucket", "Key"), _bucket_key(remote_settings, segment_object(
        TOPIC, 0, seg.base_offset, seg.log_crc, ".index")))), Body=b"garbage")
    with pytest.raises(RemoteDataCorruptError, match="manifest says"):
        _remote(remote_settings).read(seg.end_offset - 1, 100)


# ---------------------------------------------------------------------------------------------- retention

def test_remote_retention_commits_the_new_log_start_before_deleting_objects(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    shipped = _ship_all(remote, part)
    keep = shipped[-2:]
    budget = sum(s.log_size for s in keep)
    # Another process's reader, holding the manifest from before (and, to see the objects go, no chunk cache:
    # cached pieces of a shipped log stay valid bytes after retention, as a local reader keeps reading a
    # segment file retention unlinked under it).
    reader = _remote(remote_settings, chunks=ChunkCache(4096, 0))
    assert reader.read(shipped[1].base_offset, 100).offset == shipped[1].base_offset
    result = remote.enforce_retention(now_ms=0, retention_ms=-1, retention_bytes=budget + 10, local_bytes=10)
    assert result.deleted_segments == tuple(s.base_offset for s in shipped[:-2])
    assert result.reasons == ("size",) and result.orphans_deleted == 0
    m = remote.manifest(refresh=True)
    assert m.segments == tuple(keep) and m.log_start_offset == keep[0].base_offset
    left = {parse_segment_object(i.key)[0] for i in ObjectStore.from_settings(remote_settings).list(f"{TOPIC}/0/")
            if parse_segment_object(i.key)}
    assert left == {s.base_offset for s in keep}
    with pytest.raises(OffsetOutOfRangeError):
        remote.read(shipped[0].base_offset, 100)
    with pytest.raises(OffsetOutOfRangeError):  # its objects are gone: the reader re-reads the manifest
        reader.read(shipped[1].base_offset + 1, 100)
    # By time: everything older than the newest kept segment's timestamps.
    result = remote.enforce_retention(now_ms=keep[0].max_timestamp + 100, retention_ms=50, retention_bytes=-1)
    assert result.deleted_segments == (keep[0].base_offset,) and result.reasons == ("time",)


def test_objects_left_by_a_retention_pass_cut_short_are_deleted_by_the_next(tmp_path, remote_settings):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    shipped = _ship_all(remote, part)
    remote.commit(lambda m: m.without_head(2))  # committed, then "crashed" before deleting the objects
    result = remote.enforce_retention(now_ms=0, retention_ms=-1, retention_bytes=-1)
    assert result.deleted_segments == () and result.orphans_deleted == 6  # 2 segments x (log, index, timeindex)
    bases = {parse_segment_object(i.key)[0] for i in ObjectStore.from_settings(remote_settings).list(f"{TOPIC}/0/")
             if parse_segment_object(i.key)}
    assert bases == {s.base_offset for s in shipped[2:]}


# ------------------------------------------------------------------------------------------------- restore

def _records(store_dir: Path, partition: int, end: int) -> list:
    out, offset = [], None
    with pylog.open(str(store_dir), log_cleaner_enable=False) as store:
        part = store.topic(TOPIC).partition(partition)
        offset = part.log_start_offset
        while offset < end:
            batch = part.read(offset, max_records=1000)
            batch = [r for r in batch if r.offset < end]
            if not batch:
                break
            out += batch
            offset = batch[-1].offset + 1
    return out


def test_a_store_restored_from_the_bucket_reads_back_every_shipped_record_byte_for_byte(tmp_path, remote_settings):
    src, dst = tmp_path / "src", tmp_path / "restored"
    appends = _write_store(src, partitions=3, batches=40)
    objects = ObjectStore.from_settings(remote_settings)
    assert ship_store_metadata(objects, str(src), [TOPIC]) == 2
    assert ship_store_metadata(objects, str(src), [TOPIC]) == 0  # unchanged: nothing written
    with pylog.open(str(src), log_cleaner_enable=False) as store:
        store.alter_topic_config(TOPIC, {"retention.bytes": 1 << 40})
    assert ship_store_metadata(objects, str(src), [TOPIC]) == 1  # the changed topic.json
    ends = {}
    for p in (0, 1):  # partition 2 is never shipped: it comes back empty
        ends[p] = _ship_all(RemoteLog(objects, TOPIC, p), src / TOPIC / str(p))[-1].end_offset
    restored = restore_store(objects, str(dst))
    # The last shipped segment carried the producer snapshot written when it rolled (as of its end offset).
    state, at = ProducerState.read_snapshot(str(dst / TOPIC / "0"))
    assert at == ends[0] and 1000 in state.producers
    assert restored.partitions[TOPIC] == {0: (0, ends[0]), 1: (0, ends[1]), 2: (0, 0)}
    for p in (0, 1):
        assert _records(dst, p, ends[p]) == _records(src, p, ends[p])
        for base in list_segment_bases(str(dst / TOPIC / str(p))):
            assert (dst / TOPIC / str(p) / f"{base:020d}.log").read_bytes() == \
                (src / TOPIC / str(p) / f"{base:020d}.log").read_bytes()
    with pylog.open(str(dst), log_cleaner_enable=False) as store:
        assert store.topic(TOPIC).config == pylog.open(str(src), log_cleaner_enable=False).topic(TOPIC).config
        for p in range(3):
            part = store.topic(TOPIC).partition(p)
            assert part.check() == []
            assert part.log_end_offset == ends.get(p, 0)  # at most the unshipped tail is lost
        part = store.topic(TOPIC).partition(0)
        # The producer state came back with the last shipped segment: a retry of the last shipped append is
        # recognised (its first offset again, nothing written), and new appends continue the log.
        first, seq, values, keys, stamps = [a for a in appends[0] if a[0] < ends[0]][-1]
        assert part.append_values(values, keys=keys, timestamps=stamps, producer=(1000, 0, seq)) == first
        assert part.log_end_offset == ends[0]
        assert part.append_values([b"after restore"]) == ends[0]
    assert _records(dst, 0, ends[0] + 1)[-1].value == b"after restore"


def test_restore_refuses_a_directory_with_files_and_a_location_without_a_store(tmp_path, remote_settings):
    objects = ObjectStore.from_settings(remote_settings)
    with pytest.raises(RemoteObjectMissingError, match="nothing was shipped"):
        restore_store(objects, str(tmp_path / "new"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_bytes(b"")
    with pytest.raises(StorePathError):
        restore_store(objects, str(tmp_path / "full"))


def test_restore_stops_at_a_missing_or_damaged_object_and_leaves_no_partial_file(tmp_path, remote_settings,
                                                                                s3_endpoint):
    _write_store(tmp_path / "s")
    part = tmp_path / "s" / TOPIC / "0"
    remote = _remote(remote_settings)
    shipped = _ship_all(remote, part)
    client = raw_client(s3_endpoint)
    bucket, key = _bucket_key(remote_settings, segment_object(TOPIC, 0, shipped[1].base_offset, shipped[1].log_crc,
                                                              ".log"))
    body = bytearray((part / f"{shipped[1].base_offset:020d}.log").read_bytes())
    body[-1] ^= 1
    client.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    with pytest.raises(RemoteDataCorruptError, match="manifest says"):
        remote.restore(str(tmp_path / "r1"))
    assert not [n for n in os.listdir(tmp_path / "r1") if n.endswith(".restoring")]
    client.delete_object(Bucket=bucket, Key=key)
    assert any("missing" in p for p in remote.check())
    with pytest.raises(RemoteObjectMissingError):
        remote.restore(str(tmp_path / "r2"))


def test_a_bucket_failing_during_a_restore_leaves_no_store_and_no_unchecked_file(tmp_path, remote_settings,
                                                                                s3_endpoint):
    _write_store(tmp_path / "src")
    objects = ObjectStore.from_settings(remote_settings)
    ship_store_metadata(objects, str(tmp_path / "src"), [TOPIC])
    _ship_all(RemoteLog(objects, TOPIC, 0), tmp_path / "src" / TOPIC / "0")
    with FaultProxy(s3_endpoint, faults=1000, pass_first=12) as proxy:  # fails part-way through the downloads
        with pytest.raises(RemoteStorageError, match="503|SlowDown"):
            restore_store(_through(proxy, remote_settings, attempts=2), str(tmp_path / "dst"))
    left = [str(p.relative_to(tmp_path / "dst")) for p in (tmp_path / "dst").rglob("*") if p.is_file()]
    assert any(p.endswith(".log") for p in left), left  # it got that far ...
    assert "pylog.store" not in left and not [p for p in left if p.endswith(".restoring")]  # ... and no further
    with pytest.raises(StorePathError, match="remove the directory"):
        restore_store(objects, str(tmp_path / "dst"))


def test_a_manifest_of_another_partition_is_refused(tmp_path, remote_settings, s3_endpoint):
    objects = ObjectStore.from_settings(remote_settings)
    bucket, key = _bucket_key(remote_settings, manifest_name(TOPIC, 1))
    raw_client(s3_endpoint).put_object(Bucket=bucket, Key=key, Body=encode_manifest(Manifest(TOPIC, 0)))
    with pytest.raises(RemoteDataCorruptError, match="events/0 found for events/1"):
        RemoteLog(objects, TOPIC, 1).load()


# ---------------------------------------------------------------------------------------------------- CLI

def _cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out), out.getvalue()


def test_pylog_restore_rebuilds_a_shipped_store_and_verifies_it(tmp_path, remote_settings):
    _write_store(tmp_path / "src", partitions=2)
    objects = ObjectStore.from_settings(remote_settings)
    ship_store_metadata(objects, str(tmp_path / "src"), [TOPIC])
    end = _ship_all(RemoteLog(objects, TOPIC, 0), tmp_path / "src" / TOPIC / "0")[-1].end_offset
    location, endpoint = remote_settings["remote.storage.location"], remote_settings["remote.storage.endpoint.url"]
    code, out = _cli(["restore", location, str(tmp_path / "dst"), "--endpoint-url", endpoint])
    assert code == 0, out
    assert f"{TOPIC}-0: restored offsets [0, {end})" in out and f"{TOPIC}-1: restored offsets [0, 0)" in out
    assert "verify: no problems" in out
    code, out = _cli(["verify-remote", location, "--endpoint-url", endpoint, "--full"])
    assert code == 0 and f"{TOPIC}-0: " in out and "verify-remote: no problems" in out, out
    assert _cli(["restore", location, str(tmp_path / "dst"), "--endpoint-url", endpoint])[0] == 3  # not empty


def test_pylog_verify_remote_reports_a_missing_object_with_exit_1(tmp_path, remote_settings, s3_endpoint):
    _write_store(tmp_path / "s")
    shipped = _ship_all(_remote(remote_settings), tmp_path / "s" / TOPIC / "0")
    bucket, key = _bucket_key(remote_settings, segment_object(TOPIC, 0, shipped[0].base_offset, shipped[0].log_crc,
                                                              ".timeindex"))
    raw_client(s3_endpoint).delete_object(Bucket=bucket, Key=key)
    code, out = _cli(["verify-remote", remote_settings["remote.storage.location"], TOPIC, "--endpoint-url",
                      s3_endpoint])
    assert code == 1 and f"{key}: missing" in out and "verify-remote: 1 problem(s)" in out, out


# ---------------------------------------------------------------------------------------------- index files

GOLDEN = Path(__file__).parent / "golden"


def test_the_golden_sealed_indexes_check_and_give_the_manifests_entries():
    golden = json.loads((GOLDEN / "manifest.json").read_text())["store"]
    index = check_sealed((GOLDEN / golden["offset_index"]["file"]).read_bytes(), OFFSET_INDEX_MAGIC, 0, "golden")
    times = check_sealed((GOLDEN / golden["time_index"]["file"]).read_bytes(), TIME_INDEX_MAGIC, 0, "golden")
    assert [[int(a), int(b)] for a, b in zip(index.a, index.b, strict=True)] == golden["offset_index"]["entries"]
    assert [[int(a), int(b)] for a, b in zip(times.a, times.b, strict=True)] == golden["time_index"]["entries"]
    assert times.max_timestamp == golden["time_index"]["max_timestamp"]
    # Lookups: the last entry at or below the offset, position 0 before the first entry.
    assert [index.position_for(o) for o in (0, 3, 4, 9, 10, 14, 15, 16)] == [0, 0, 170, 170, 348, 480, 607, 607]


@pytest.mark.parametrize("damage", ["live", "other base", "entries", "header", "cut"])
def test_an_unsealed_or_damaged_index_is_not_shipped_or_trusted(damage):
    golden = json.loads((GOLDEN / "manifest.json").read_text())
    raw = bytearray((GOLDEN / "store" / golden["store"]["topic"] / "0" / ("0" * 20 + ".index")).read_bytes())
    base = 0
    if damage == "live":
        raw = bytearray((GOLDEN / "files" / "live.index").read_bytes())
    elif damage == "other base":
        base = 7
    elif damage == "entries":
        raw[-1] ^= 1
    elif damage == "header":
        raw[20] ^= 1
    else:
        raw = raw[:-4]
    with pytest.raises(pylog.CorruptRecordError):
        check_sealed(bytes(raw), OFFSET_INDEX_MAGIC, base, "golden")


# ------------------------------------------------------------------------------------ a model of the remote log

class RemoteLogMachine(RuleBasedStateMachine):
    """Random interleavings of two shippers, remote retention and reads against the simplest model: the list
    of shipped segments (base offsets) and the remote log start. After every step the manifest equals the
    model, every object it names is there, no segment object below the log start survives a retention
    pass, and reads return the local bytes."""

    directory: str = ""
    settings: dict = {}
    endpoint: str = ""

    def __init__(self) -> None:
        super().__init__()
        bucket = f"pylog-{uuid.uuid4().hex[:16]}"
        raw_client(self.endpoint).create_bucket(Bucket=bucket)
        settings = {**self.settings, "remote.storage.location": f"s3://{bucket}/m"}
        self.a = _remote(settings)
        self.b = _remote(settings, chunks=ChunkCache(4096, 8192))
        self.objects = ObjectStore.from_settings(settings)
        self.bases = list_segment_bases(self.directory)[:-1]
        self.shipped: list[int] = []  # the model: base offsets in the remote log
        self.dropped: list[int] = []

    def _next(self) -> int | None:
        done = self.shipped[-1] if self.shipped else (self.dropped[-1] if self.dropped else None)
        later = [b for b in self.bases if done is None or b > done]
        return later[0] if later else None

    @precondition(lambda self: self._next() is not None)
    @rule(which=st.sampled_from("ab"))
    def ship_next(self, which: str) -> None:
        base = self._next()
        getattr(self, which).ship_segment(self.directory, base)
        self.shipped.append(base)

    @precondition(lambda self: bool(self.shipped))
    @rule(which=st.sampled_from("ab"), again=st.integers(0, 5))
    def ship_again(self, which: str, again: int) -> None:
        base = self.shipped[again % len(self.shipped)]
        getattr(self, which).ship_segment(self.directory, base)  # a re-upload: nothing changes

    @precondition(lambda self: bool(self.shipped))
    @rule(keep=st.integers(0, 4))
    def retention_by_bytes(self, keep: int) -> None:
        m = self.a.manifest(refresh=True)
        budget = sum(s.log_size for s in m.segments[len(m.segments) - keep:]) if keep else 0
        result = self.a.enforce_retention(now_ms=0, retention_ms=-1, retention_bytes=budget)
        n = len(result.deleted_segments)
        assert list(result.deleted_segments) == self.shipped[:n]
        self.dropped += self.shipped[:n]
        self.shipped = self.shipped[n:]
        names = [i.key for i in self.objects.list(f"{TOPIC}/0/")]
        assert not [n for n in names if (parse_segment_object(n) or (1 << 62,))[0] in self.dropped]

    @precondition(lambda self: bool(self.shipped))
    @rule(which=st.sampled_from("ab"), pick=st.integers(0, 10_000), max_bytes=st.sampled_from([1, 300, 5000]))
    def read(self, which: str, pick: int, max_bytes: int) -> None:
        m = self.a.manifest(refresh=True)
        offset = m.log_start_offset + pick % (m.end_offset - m.log_start_offset)
        got = getattr(self, which).read(offset, max_bytes, refresh=True)
        log = Path(self.directory, f"{got.segment.base_offset:020d}.log").read_bytes()
        assert got.data == log[got.position:got.position + len(got.data)]

    @invariant()
    def manifest_is_the_model(self) -> None:
        m = self.b.manifest(refresh=True)
        assert [s.base_offset for s in m.segments] == self.shipped
        if self.dropped:
            assert m.log_start_offset == (self.shipped[0] if self.shipped else m.end_offset)
        assert self.b.check() == []


@pytest.mark.slow
def test_remote_log_state_machine(tmp_path, remote_settings, s3_endpoint):
    _write_store(tmp_path / "s", batches=100)
    RemoteLogMachine.directory = str(tmp_path / "s" / TOPIC / "0")
    RemoteLogMachine.settings = remote_settings
    RemoteLogMachine.endpoint = s3_endpoint
    run_state_machine_as_test(RemoteLogMachine, settings=settings(
        max_examples=8, stateful_step_count=12, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
