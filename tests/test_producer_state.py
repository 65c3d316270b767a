"""Idempotent appends: a retried producer batch lands once, also after a clean restart, a crash, a damaged
snapshot or a batch split to fit max.message.bytes.

Run: ``python -m pytest tests/test_producer_state.py -q``
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

import pylog
from pylog.storage.producer_state import SNAPSHOT_FILE, ProducerState

from storetools import crash_copy

TOPIC = "t"


def _store(path, **cfg):
    return pylog.open(str(path), log_cleaner_enable=False, **cfg)


def _values(p):
    return [(r.offset, r.value) for r in p.read(p.log_start_offset, max_records=10 ** 6)]


def test_a_retried_call_is_not_appended_twice(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        assert p.append_values([b"a", b"b"], producer=(pid, 0, 0)) == 0
        assert p.append_values([b"a", b"b"], producer=(pid, 0, 0)) == 0  # the retry
        assert p.append_values([b"c"], producer=(pid, 0, 2)) == 2
        assert p.append_values([b"b"], producer=(pid, 0, 1)) == 1  # part of an earlier call, also a duplicate
        assert p.append_values([b"x"]) == 3  # non-idempotent appends are untouched
        assert p.append_values([b"c"], producer=(pid, 0, 2)) == 2
        assert _values(p) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"x")]
        headers = [h for seg in p.segments for _, h in seg.batch_headers()]
        assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers] == [
            (pid, 0, 0), (pid, 0, 2), (-1, -1, -1)]


def test_sequence_gaps_and_fenced_epochs_are_refused(tmp_path):
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        p.append_values([b"a"], producer=(pid, 0, 0))
        with pytest.raises(pylog.OutOfOrderSequenceError):
            p.append_values([b"b"], producer=(pid, 0, 5))
        p.append_values([b"b"], producer=(pid, 1, 0))  # a new epoch starts again at 0
        with pytest.raises(pylog.ProducerFencedError):
            p.append_values([b"c"], producer=(pid, 0, 1))
        with pytest.raises(pylog.OutOfOrderSequenceError):
            p.append_values([b"c"], producer=(pid, 2, 3))
        with pytest.raises(ValueError):
            p.append_values([b"c"], producer=(pid, 0, -1))
        assert _values(p) == [(0, b"a"), (1, b"b")]
        # Another producer is independent.
        other = store.new_producer_id()
        assert other != pid
        assert p.append_values([b"o"], producer=(other, 0, 7)) == 2  # unknown producer: any sequence


def test_a_call_split_into_several_batches_is_still_recognised(tmp_path):
    with _store(tmp_path, max_message_bytes=1000) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        values = [b"v%03d" % i + b"x" * 60 for i in range(100)]
        assert p.append_values(values, producer=(pid, 0, 0)) == 0
        assert len([1 for seg in p.segments for _ in seg.batch_headers()]) > 1
        assert p.append_values(values, producer=(pid, 0, 0)) == 0
        assert p.log_end_offset == 100
    with _store(tmp_path, max_message_bytes=1000) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.append_values(values, producer=(pid, 0, 0)) == 0
        assert p.append_values([b"next"], producer=(pid, 0, 100)) == 100


@pytest.mark.parametrize("how", ["clean", "no_snapshot", "damaged_snapshot", "crash_copy"])
def test_state_survives_restart(tmp_path, how):
    src = tmp_path / "s"
    with _store(src, segment_bytes=2048) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        seq = 0
        for i in range(60):  # several rolls: snapshots on the way
            p.append_values([b"r%d" % i + b"." * 40], producer=(pid, 0, seq))
            seq += 1
        if how == "crash_copy":
            # What a crash leaves: the files as they are while the store is open (no snapshot at close).
            crash_copy(src, tmp_path / "copy")
    path = tmp_path / "copy" if how == "crash_copy" else src
    snap = os.path.join(str(path), TOPIC, "0", SNAPSHOT_FILE)
    if how == "no_snapshot":
        os.unlink(snap)
    elif how == "damaged_snapshot":
        with open(snap, "r+b") as f:
            f.seek(10)
            f.write(b"\xff\xff")
    with _store(path) as store:
        p = store.topic(TOPIC).partition(0)
        end = p.log_end_offset
        assert end == 60
        assert p.append_values([b"r59" + b"." * 40], producer=(pid, 0, 59)) == 59  # the last call, retried
        with pytest.raises(pylog.OutOfOrderSequenceError):
            p.append_values([b"gap"], producer=(pid, 0, 70))
        assert p.append_values([b"new"], producer=(pid, 0, 60)) == 60
        assert p.log_end_offset == 61


def _rewrite_snapshot(directory, doc):
    """Replace the snapshot with ``doc``, framed as pylog frames it (magic, version, CRC): only its content lies."""
    import msgpack
    from pylog.storage.fileio import write_checked
    from pylog.storage.producer_state import _HEAD, _MAGIC, _VERSION
    write_checked(os.path.join(directory, SNAPSHOT_FILE), _HEAD.pack(_MAGIC, _VERSION, 0) + msgpack.packb(doc),
                  durable=False)


@pytest.mark.parametrize("bad", [
    pytest.param({"offset": 1, "producers": [[7, 0, float("inf"), [[0, 0, 0, 0]]]]}, id="infinite_timestamp"),
    pytest.param({"offset": 1, "producers": [[7, 0, 5, [[0, 0, float("nan"), 0]]]]}, id="nan_offset"),
    pytest.param({"offset": 1, "producers": [["7", True, 5, [[0, 0, 0, 0]]]]}, id="str_and_bool_fields"),
    pytest.param({"offset": 1, "producers": [[7, 0, 5, [[0, 0, 0, 1 << 63]]]]}, id="offset_beyond_int64"),
    pytest.param({"offset": 1, "producers": [[7, 1 << 40, 5, []]]}, id="epoch_beyond_int16"),
    pytest.param({"offset": 1, "producers": {"7": 1}}, id="producers_not_a_list"),
    pytest.param([1, 2], id="not_a_map"),
])
def test_snapshot_with_hostile_content_and_valid_crc_is_rebuilt_from_the_log(tmp_path, bad):
    """A snapshot whose CRC checks but whose msgpack holds an infinite float (or a str, a bool, an int out
    of range) used to raise OverflowError/TypeError out of opening the partition, or be trusted."""
    with _store(tmp_path) as store:
        store.create_topic(TOPIC)
        store.topic(TOPIC).partition(0).append_values([b"a"], producer=(7, 0, 0))
    directory = os.path.join(str(tmp_path), TOPIC, "0")
    _rewrite_snapshot(directory, bad)
    with pytest.raises(pylog.CorruptRecordError):
        ProducerState.read_snapshot(directory)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        # Rebuilt from the batch headers: the retry is recognised, the next sequence appends.
        assert p.append_values([b"a"], producer=(7, 0, 0)) == 0
        assert p.append_values([b"b"], producer=(7, 0, 1)) == 1


def test_idle_producers_expire_from_the_snapshot(tmp_path):
    with _store(tmp_path, producer_id_expiration_ms=1) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"a"], producer=(7, 0, 0), timestamps=[1000])
    state, offset = ProducerState.read_snapshot(os.path.join(str(tmp_path), TOPIC, "0"))
    assert offset == 1 and state.producers == {}


def _allocate(path, q):
    with pylog.open(path, log_cleaner_enable=False) as store:
        q.put([store.new_producer_id() for _ in range(50)])


def test_producer_ids_are_unique_across_processes(tmp_path):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_allocate, args=(str(tmp_path), q)) for _ in range(3)]
    for proc in procs:
        proc.start()
    ids = [i for _ in procs for i in q.get(timeout=30)]
    for proc in procs:
        proc.join(30)
    assert len(ids) == len(set(ids)) == 150
    with open(os.path.join(str(tmp_path), "producer.ids"), "r+b") as f:
        f.write(b"\x00" * 3)
    with _store(tmp_path) as store, pytest.raises(pylog.CorruptRecordError):
        store.new_producer_id()


def test_a_call_that_failed_part_way_is_completed_by_its_retry(tmp_path, monkeypatch):
    """An I/O error after the first batches of a call were written (a call's batches that go into one segment
    are written at once, so the call spans rolls here): the retry appends only the rest."""
    from pylog.segment import Segment

    with _store(tmp_path, max_message_bytes=1000, segment_bytes=2000) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        values = [b"v%03d" % i + b"x" * 60 for i in range(60)]
        real, real_many = Segment.append, Segment.append_batches
        writes = []

        def failing(real):
            def write(self, *args):
                writes.append(1)
                if len(writes) == 2:
                    raise OSError(28, "injected: no space left")
                return real(self, *args)
            return write

        monkeypatch.setattr(Segment, "append", failing(real))
        monkeypatch.setattr(Segment, "append_batches", failing(real_many))
        with pytest.raises(OSError):
            p.append_values(values, producer=(pid, 0, 0))
        landed = p.log_end_offset
        assert 0 < landed < 60
        monkeypatch.setattr(Segment, "append", real)
        monkeypatch.setattr(Segment, "append_batches", real_many)
        assert p.append_values(values, producer=(pid, 0, 0)) == 0
        assert [v for _, v in _values(p)] == values
        assert p.append_values(values, producer=(pid, 0, 0)) == 0  # and again: a plain duplicate now
        assert p.log_end_offset == 60
