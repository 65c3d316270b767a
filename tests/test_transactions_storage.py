"""Transactions in a partition's storage: transactional batches, commit/abort markers, the last stable offset,
the aborted-transaction index (also rebuilt after a crash) and read_committed / read_uncommitted reads.

Run: ``python -m pytest tests/test_transactions_storage.py -q``
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time

import asyncio

import msgpack
import pytest

import pylog
from storetools import abandon, append_foreign_control
from pylog.aio import AIOKafkaConsumer
from pylog.errors import CorruptRecordError, InvalidTxnStateError, ProducerFencedError, TransactionCoordinatorFencedError
from pylog.kafka import KafkaConsumer
from pylog.partition import internals
from pylog.storage.log import txn
from pylog.storage.producer_state import ProducerState
from pylog.storage.txn_index import index_path, parse_marker, read_index

TOPIC = "t"


def _store(path, **cfg):
    return pylog.open(str(path), log_cleaner_enable=False, **cfg)


def _part(store):
    store.create_topic(TOPIC)
    return store.topic(TOPIC).partition(0)


def _open_transaction(store, value, epoch=0):
    """A new partition holding one record of an open transaction: ``(partition, producer id)``."""
    p = _part(store)
    pid = store.new_producer_id()
    p.append_values([value], producer=(pid, epoch, 0), transactional=True)
    return p, pid


def _plain_then_open(store):
    """A new partition holding a plain record ``c`` at 0 then one of an open transaction at 1."""
    p = _part(store)
    p.append_values([b"c"])
    pid = store.new_producer_id()
    p.append_values([b"t"], producer=(pid, 0, 0), transactional=True)
    return p, pid


def _one_transaction(store, value, commit, coordinator_epoch=0):
    """A partition holding one transaction of one record, ended by its marker: ``(partition, producer id)``."""
    p, pid = _open_transaction(store, value)
    internals(p).append_marker(pid, 0, commit=commit, coordinator_epoch=coordinator_epoch)
    return p, pid


def _values(p, level="read_uncommitted", start=0):
    return [r.value for r in p.read(start, max_records=10 ** 6, isolation_level=level)]


def test_committed_transaction_becomes_visible_to_read_committed_at_its_marker(tmp_path):
    with _store(tmp_path) as store:
        p = _part(store)
        pid = store.new_producer_id()
        p.append_values([b"plain"])
        assert p.append_values([b"t1", b"t2"], producer=(pid, 0, 0), transactional=True) == 1
        p.append_values([b"after"])
        assert p.last_stable_offset == 1
        assert _values(p, "read_committed") == [b"plain"]
        assert _values(p) == [b"plain", b"t1", b"t2", b"after"]
        marker = internals(p).append_marker(pid, 0, commit=True, coordinator_epoch=3)
        assert marker == 4 and p.log_end_offset == 5
        assert p.last_stable_offset == 5
        assert _values(p, "read_committed") == [b"plain", b"t1", b"t2", b"after"]
        assert _values(p) == [b"plain", b"t1", b"t2", b"after"]  # the marker is never a record
        cols = p.read_columns(0, isolation_level="read_committed")
        assert list(cols.offsets) == [0, 1, 2, 3]


def test_aborted_transaction_is_never_returned_to_read_committed(tmp_path):
    with _store(tmp_path) as store:
        p = _part(store)
        a, b = store.new_producer_id(), store.new_producer_id()
        p.append_values([b"a1"], producer=(a, 0, 0), transactional=True)
        p.append_values([b"b1"], producer=(b, 0, 0), transactional=True)
        p.append_values([b"a2"], producer=(a, 0, 1), transactional=True)
        internals(p).append_marker(a, 0, commit=False)
        assert p.last_stable_offset == 1  # b's transaction is still open
        assert _values(p, "read_committed") == []
        internals(p).append_marker(b, 0, commit=True)
        assert _values(p, "read_committed") == [b"b1"]
        assert _values(p) == [b"a1", b"b1", b"a2"]  # read_uncommitted sees aborted records
        [entry] = read_index(index_path(p.directory, 0))
        assert (entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset) == (a, 0, 3, 1)


def test_read_committed_skips_only_aborted_batches_between_committed_ones(tmp_path):
    with _store(tmp_path) as store:
        p = _part(store)
        pid = store.new_producer_id()
        seq = 0
        want = []
        for i in range(6):
            vals = [b"%d-%d" % (i, j) for j in range(3)]
            p.append_values(vals, producer=(pid, 0, seq), transactional=True)
            seq += 3
            commit = i % 2 == 0
            internals(p).append_marker(pid, 0, commit=commit)
            if commit:
                want += vals
        assert _values(p, "read_committed") == want
        # A read starting inside an aborted transaction, and a read of one record at a time.
        assert _values(p, "read_committed", start=5) == want[3:]
        got, pos = [], 0
        while True:
            slices, nxt = internals(p).read_isolated(pos, 1, 1 << 20, "read_committed")
            if not slices:
                if nxt == pos:
                    break
                pos = nxt
                continue
            recs = p.read(pos, max_records=1, isolation_level="read_committed")
            got += [r.value for r in recs]
            pos = recs[-1].offset + 1
        assert got == want


def test_a_read_at_a_marker_moves_past_it(tmp_path):
    with _store(tmp_path) as store:
        p, _ = _one_transaction(store, b"x", commit=True)
        for level in ("read_uncommitted", "read_committed"):
            assert p.read(1, isolation_level=level) == []
            assert internals(p).read_isolated(1, 10, 1 << 20, level) == ([], 2)


def test_non_transactional_batch_during_an_open_transaction_is_refused(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _open_transaction(store, b"t")
        with pytest.raises(InvalidTxnStateError):
            p.append_values([b"i"], producer=(pid, 0, 1))
        with pytest.raises(InvalidTxnStateError):
            p.append_values([b"x"], transactional=True)  # no producer
        assert p.log_end_offset == 1


def test_markers_are_fenced_by_producer_and_coordinator_epoch(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _open_transaction(store, b"t", epoch=1)
        with pytest.raises(ProducerFencedError):
            internals(p).append_marker(pid, 0, commit=True)
        with pytest.raises(ProducerFencedError):
            p.append_values([b"old"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 1, commit=False, coordinator_epoch=5)
        with pytest.raises(TransactionCoordinatorFencedError):
            internals(p).append_marker(pid, 1, commit=True, coordinator_epoch=4)
        # A marker from a bumped epoch (a coordinator aborting for a new incarnation) fences the old one.
        p.append_values([b"t2"], producer=(pid, 1, 1), transactional=True)
        internals(p).append_marker(pid, 2, commit=False, coordinator_epoch=5)
        with pytest.raises(ProducerFencedError):
            p.append_values([b"late"], producer=(pid, 1, 2), transactional=True)
        assert p.last_stable_offset == p.log_end_offset
        assert _values(p, "read_committed") == []


def test_marker_record_carries_type_and_coordinator_epoch(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _one_transaction(store, b"t", commit=False, coordinator_epoch=7)
        view, a, _ = internals(p).local_log.slices(1, 1, 1 << 20, True)[0]
        h = view.header
        assert h.is_control and h.is_transactional and h.producer_id == pid and h.base_sequence == -1
        rec = view.records(None, -1, a, a + 1)[0]
        assert parse_marker(rec.key, rec.value) == (False, 7)


def test_open_transaction_survives_a_clean_restart_in_the_snapshot(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _plain_then_open(store)
    state, _ = ProducerState.read_snapshot(os.path.join(str(tmp_path), TOPIC, "0"))
    assert state.ongoing() == {pid: 1}
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.last_stable_offset == 1
        internals(p).append_marker(pid, 0, commit=False)
        assert _values(p, "read_committed") == [b"c"]
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert _values(p, "read_committed") == [b"c"]
        assert p.last_stable_offset == p.log_end_offset


def test_snapshot_without_transactions_keeps_its_old_layout(tmp_path):
    with _store(tmp_path) as store:
        p = _part(store)
        p.append_values([b"i"], producer=(store.new_producer_id(), 0, 0))
    raw = open(os.path.join(str(tmp_path), TOPIC, "0", "producer.snapshot"), "rb").read()
    doc = msgpack.unpackb(raw[8:-4])
    assert all(len(entry) == 4 for entry in doc["producers"])


def test_a_reader_in_another_handle_sees_the_writers_lso(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _plain_then_open(store)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            r = reader.topic(TOPIC).partition(0)
            assert r.last_stable_offset == 1
            assert [x.value for x in r.read(0, isolation_level="read_committed")] == [b"c"]
            internals(p).append_marker(pid, 0, commit=False)
            p.append_values([b"d"])
            assert r.last_stable_offset == 4
            assert [x.value for x in r.read(0, isolation_level="read_committed")] == [b"c", b"d"]


def test_index_rebuilt_when_damaged_or_missing_after_the_snapshot(tmp_path):
    with _store(tmp_path) as store:
        p, _ = _one_transaction(store, b"t", commit=False)
        path = index_path(p.directory, 0)
        want = read_index(path)
        abandon(p)  # a crash: no snapshot at close
    os.remove(path)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        # Its first producer append loads the producer state and repairs the index on the way.
        p.append_values([b"c"], producer=(store.new_producer_id(), 0, 0))
        assert read_index(path) == want
        assert _values(p, "read_committed") == [b"c"]


def _three_aborts(tmp_path):
    """A store whose partition holds three aborted transactions of 3 records then ``y``; its index's path."""
    with _store(tmp_path) as store:
        p = _part(store)
        for n in range(3):
            pid = store.new_producer_id()
            p.append_values([b"x%d" % n] * 3, producer=(pid, 0, 0), transactional=True)
            internals(p).append_marker(pid, 0, commit=False)
        p.append_values([b"y"])
        assert _values(p, "read_committed") == [b"y"]
        return index_path(p.directory, 0)


def _reader_reads_on(tmp_path, want):
    """A reader of the store in another handle (read-only) reads ``want`` at read_committed and `pylog verify`
    finds nothing wrong."""
    with pylog.open(str(tmp_path), read_only=True) as store:
        assert _values(store.topic(TOPIC).partition(0), "read_committed") == want
        assert store.topic(TOPIC).partition(0).check() == []


@pytest.mark.parametrize("read_only", [True, False])
@pytest.mark.parametrize("entry", [0, 2])
def test_a_damaged_aborted_transaction_index_entry_fails_read_committed_reads(tmp_path, entry, read_only):
    """A flipped byte in an entry of the index made every reader skip it and the entries after it, so the
    aborted transactions' records came back to read_committed readers as committed ones. The first entry
    (whole entries after it) and the last one (a marker after it: it was whole once) are damage."""
    path = _three_aborts(tmp_path)
    raw = bytearray(open(path, "rb").read())
    raw[8 + 36 * entry + 20] ^= 0xFF
    open(path, "wb").write(raw)
    with pylog.open(str(tmp_path), read_only=read_only, log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        with pytest.raises(CorruptRecordError, match="aborted-transaction index entry checksum mismatch"):
            _values(p, "read_committed")
        assert len(_values(p)) == 10  # read_uncommitted needs no index
        assert any("aborted-transaction index entry checksum mismatch" in x for x in p.check())  # pylog verify
        if not read_only:  # the writer neither drops the entries it cannot rebuild nor goes on without them
            with pytest.raises(CorruptRecordError, match="checksum mismatch"):
                p.append_values([b"z"], producer=(store.new_producer_id(), 0, 0))
    assert open(path, "rb").read() == bytes(raw)


def test_a_torn_last_index_entry_without_its_marker_is_dropped(tmp_path):
    """A crash after an entry's write but before its fsync can leave a whole-sized entry whose CRC fails and
    no marker: readers read on without it, and the writer drops it before it appends again."""
    path = _three_aborts(tmp_path)
    good = open(path, "rb").read()
    torn = good + bytes(range(36))  # a 4th entry that never checked; its marker never landed
    open(path, "wb").write(torn)
    with pylog.open(str(tmp_path), read_only=True) as store:
        assert _values(store.topic(TOPIC).partition(0), "read_committed") == [b"y"]
        assert store.topic(TOPIC).partition(0).check() == []
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert _values(p, "read_committed") == [b"y"]
        p.append_values([b"z"], producer=(store.new_producer_id(), 0, 0))
        assert open(path, "rb").read() == good
        assert _values(p, "read_committed") == [b"y", b"z"]


def test_a_torn_last_index_entry_after_a_commit_marker_is_still_a_torn_write(tmp_path):
    """A commit marker after the entries that check (commits have no entry) made a torn last entry count as
    damage: read_committed reads and the writer's open refused the store. Only an abort marker there means
    the entry was whole once."""
    path = _three_aborts(tmp_path)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        p.append_values([b"c"] * 2, producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=True)
    good = open(path, "rb").read()
    open(path, "wb").write(good + bytes(range(36)))  # a later abort's entry torn before its marker landed
    with pylog.open(str(tmp_path), read_only=True) as store:
        assert _values(store.topic(TOPIC).partition(0), "read_committed") == [b"y", b"c", b"c"]
        assert store.topic(TOPIC).partition(0).check() == []
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert _values(p, "read_committed") == [b"y", b"c", b"c"]
        p.append_values([b"z"], producer=(store.new_producer_id(), 0, 0))
        assert open(path, "rb").read() == good


def test_a_damaged_index_header_fails_read_committed_reads_and_the_writers_producer_appends(tmp_path):
    """docs/FORMAT.md said the writer reads an index with a bad header as an empty one (its aborts lost when
    they are older than the producer snapshot); it raises as readers do, and leaves the file as it is."""
    path = _three_aborts(tmp_path)
    raw = bytearray(open(path, "rb").read())
    raw[0] ^= 0xFF
    open(path, "wb").write(raw)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        with pytest.raises(CorruptRecordError, match="not an aborted-transaction index"):
            _values(p, "read_committed")
        with pytest.raises(CorruptRecordError, match="not an aborted-transaction index"):
            p.append_values([b"z"], producer=(store.new_producer_id(), 0, 0))
        assert any("not an aborted-transaction index" in x for x in p.check())
    assert open(path, "rb").read() == bytes(raw)


def test_a_torn_last_index_entry_is_dropped_when_a_writer_of_plain_records_rolls_its_segment(tmp_path):
    """A writer that never loaded its producer state (plain appends only) sealed a crash's torn index entry
    into a rolled segment, where it is damage: every read_committed read failed from then on."""
    path = _three_aborts(tmp_path)
    good = open(path, "rb").read()
    open(path, "wb").write(good + bytes(range(36)))  # a 4th entry torn by a crash; its marker never landed
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"plain"])
        p.roll()
        p.append_values([b"next"])
        assert _values(p, "read_committed") == [b"y", b"plain", b"next"]
        assert p.check() == []
    assert open(path, "rb").read() == good


@pytest.mark.parametrize("sealed", [False, True])
@pytest.mark.parametrize("left", [1, 20, 35])
def test_an_index_cut_inside_its_last_entry_whose_abort_marker_is_in_the_log_fails_read_committed_reads(
        tmp_path, sealed, left):
    """Bytes after the last whole entry ended the entries silently, even with the cut entry's abort marker in
    the log (it was whole once: the entry is fsynced before the marker) or in a sealed index (a roll drops a
    torn tail first): the aborted transaction's records came back to read_committed readers as committed
    ones, the cleaner would have dropped its entry, and `pylog verify` said nothing."""
    path = _three_aborts(tmp_path)
    if sealed:
        with _store(tmp_path) as store:
            store.topic(TOPIC).partition(0).roll()
    good = open(path, "rb").read()
    open(path, "wb").write(good[:len(good) - 36 + left])
    for read_only in (True, False):
        with pylog.open(str(tmp_path), read_only=read_only, log_cleaner_enable=False) as store:
            p = store.topic(TOPIC).partition(0)
            with pytest.raises(CorruptRecordError, match="torn entry"):
                _values(p, "read_committed")
            assert any("torn entry" in x for x in p.check())  # pylog verify
            assert len(_values(p)) == 10
    assert open(path, "rb").read() == good[:len(good) - 36 + left]


def test_an_index_cut_inside_an_entry_never_followed_by_its_marker_is_a_torn_write(tmp_path):
    """A crash inside an entry's write (before its fsync and so before its marker) leaves part of it: readers
    read on without it, and the writer's roll drops it before it seals the index."""
    path = _three_aborts(tmp_path)
    good = open(path, "rb").read()
    open(path, "wb").write(good + good[-36:-16])  # 20 bytes of a 4th entry
    _reader_reads_on(tmp_path, [b"y"])
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        p.roll()
        assert _values(p, "read_committed") == [b"y"]
    assert open(path, "rb").read() == good


@pytest.mark.parametrize("torn", [b"", b"PL", bytes(44)], ids=["empty", "cut-header", "zeroed"])
def test_an_active_index_whose_first_write_was_torn_reads_on_and_its_writer_appends(tmp_path, torn):
    """The index file is created by its first entry's write (header and entry at once): a crash before its
    fsync may leave it empty, cut inside the header or zero-filled, and that abort's marker never landed. A
    cut or zeroed header made every read_committed read and the writer's producer appends raise for good."""
    with _store(tmp_path) as store:
        p = _part(store)
        pid = store.new_producer_id()
        p.append_values([b"c"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=True)
        path = index_path(p.directory, 0)
    open(path, "wb").write(torn)
    _reader_reads_on(tmp_path, [b"c"])
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        p.append_values([b"x"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        assert _values(p, "read_committed") == [b"c"]
        assert read_index(path) == [(pid, 2, 3, 4)]


@pytest.mark.parametrize("torn", [b"", b"PL", bytes(44)], ids=["empty", "cut-header", "zeroed"])
def test_an_active_index_cut_to_a_torn_first_write_after_its_abort_marker_fails_read_committed_reads(tmp_path,
                                                                                                    torn):
    """An empty index (or one cut inside its header) of the active segment read as no aborted transaction at
    all, though abort markers in the segment say entries were written and fsynced before them."""
    path = _three_aborts(tmp_path)
    open(path, "wb").write(torn)
    with pylog.open(str(tmp_path), read_only=True, log_cleaner_enable=False) as store:
        p = store.topic(TOPIC).partition(0)
        with pytest.raises(CorruptRecordError, match="torn first write"):
            _values(p, "read_committed")
        assert any("torn first write" in x for x in p.check())


@pytest.mark.parametrize("closed", [False, True], ids=["crashed", "closed-then-crashed"])
def test_a_torn_last_index_entry_after_an_abort_of_a_transaction_without_records_here_is_a_torn_write(tmp_path,
                                                                                                      closed):
    """A coordinator writes an abort marker into every partition added to the transaction, records or not
    (librdkafka adds a partition when a message is queued for it; aborting purges the queue), and such a
    marker has no index entry. A crash-torn entry after one counted as damage: read_committed reads and the
    writer's producer appends failed for good, and the roll sealed the torn write in. With the producer
    snapshot written after that marker (a clean close, then a crash), the check replays from the log start."""
    path = _three_aborts(tmp_path)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        internals(p).append_marker(store.new_producer_id(), 0, commit=False)  # no record of it here: no entry
        p.append_values([b"after"])
        if not closed:
            abandon(p)  # a crash: no producer snapshot at close
    good = open(path, "rb").read()
    open(path, "wb").write(good + bytes(range(36)))  # the next abort's entry, torn before its marker landed
    _reader_reads_on(tmp_path, [b"y", b"after"])
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"z"], producer=(store.new_producer_id(), 0, 0))
        assert open(path, "rb").read() == good
        assert _values(p, "read_committed") == [b"y", b"after", b"z"]


def test_reads_after_a_torn_index_entry_and_an_abort_without_records_replay_the_producer_state_once(
        tmp_path, monkeypatch):
    """After a crash tore the active index's last entry, with an abort of a transaction without records here
    after the entries that check, every read_committed read replayed the producer state from the log start (the
    snapshot of a clean close is past the entries) until the writer dropped the torn tail: a read of a big
    partition cost a scan of all its batch headers. The partition keeps the check and goes on from it; plain
    records appended since (a writer of plain records keeps the torn tail) are looked at, not the whole log."""
    path = _three_aborts(tmp_path)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        internals(p).append_marker(store.new_producer_id(), 0, commit=False)  # no record of it here: no entry
    open(path, "ab").write(bytes(range(20)))  # the next abort's entry, torn before its marker landed
    replays = []
    real = txn.load_state
    monkeypatch.setattr(txn, "load_state", lambda *a: replays.append(a) or real(*a))
    with pylog.open(str(tmp_path), read_only=True) as store:
        r = store.topic(TOPIC).partition(0)
        assert _values(r, "read_committed") == [b"y"]
        first = len(replays)
        for _ in range(5):
            assert _values(r, "read_committed") == [b"y"]
        assert len(replays) == first
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"z"])  # plain records: the writer keeps the torn tail
        assert open(path, "rb").read().endswith(bytes(range(20)))
        for _ in range(3):
            assert _values(p, "read_committed") == [b"y", b"z"]
        assert p.check() == []


def test_a_damaged_last_index_entry_is_damage_when_its_abort_marker_precedes_the_producer_snapshot(tmp_path):
    """The marker check replays the producer state from the snapshot; a snapshot written after the damaged
    entry's marker (a clean close) cannot tell that marker had an entry, so the replay starts at the log start
    instead of reading the aborted records as committed ones."""
    path = _three_aborts(tmp_path)  # closed cleanly: the snapshot is past every marker
    raw = bytearray(open(path, "rb").read())
    raw[-3] ^= 0xFF
    open(path, "wb").write(raw)
    with pylog.open(str(tmp_path), read_only=True) as store:
        with pytest.raises(CorruptRecordError, match="abort marker follows"):
            _values(store.topic(TOPIC).partition(0), "read_committed")


def test_verify_reports_an_index_cut_on_an_entry_boundary_after_its_abort_marker(tmp_path):
    """An index cut between two entries reads as one without the later entry (nothing in the file tells), and
    read_committed reads return that aborted transaction's records: `pylog verify` said nothing. It replays the
    producer state and names each abort marker of a transaction with records here that has no entry; an abort
    of a transaction with no record here (no entry by design) is not reported."""
    path = _three_aborts(tmp_path)
    with _store(tmp_path) as store:
        internals(store.topic(TOPIC).partition(0)).append_marker(store.new_producer_id(), 0, commit=False)
    _reader_reads_on(tmp_path, [b"y"])
    whole = open(path, "rb").read()
    open(path, "wb").write(whole[:8 + 2 * 36])
    with pylog.open(str(tmp_path), read_only=True) as store:
        p = store.topic(TOPIC).partition(0)
        problems = p.check()
        assert len(problems) == 1 and "no entry for the abort marker" in problems[0] and "offset 11" in problems[0]


def test_invalid_isolation_level_is_refused(tmp_path):
    with _store(tmp_path) as store:
        p = _part(store)
        p.append_values([b"x"])
        with pytest.raises(pylog.InvalidArgumentError):
            p.read(0, isolation_level="committed")


def _open_transaction_then_die(path, ready):
    store = _store(path)
    p = store.topic(TOPIC).partition(0)
    p.append_values([b"t1"], producer=(7, 0, 0), transactional=True)
    p.append_values([b"t2"], producer=(7, 0, 1), transactional=True)
    ready.set()
    signal.pause()


def test_writer_killed_mid_transaction_leaves_it_open_then_abort_is_indexed(tmp_path):
    with _store(tmp_path) as store:
        p = _part(store)
        p.append_values([b"before"])
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_open_transaction_then_die, args=(str(tmp_path), ready))
    child.start()
    try:
        assert ready.wait(120)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.log_end_offset == 3
        assert p.last_stable_offset == 1  # the dead producer's transaction is still open
        assert _values(p, "read_committed") == [b"before"]
        internals(p).append_marker(7, 0, commit=False)
        [entry] = read_index(index_path(p.directory, 0))
        assert (entry.first_offset, entry.last_offset) == (1, 3)
        p.append_values([b"after"])
        assert _values(p, "read_committed") == [b"before", b"after"]
        assert _values(p) == [b"before", b"t1", b"t2", b"after"]
        assert p.check() == []


def test_retention_deletes_a_segments_aborted_transaction_index_with_it(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _one_transaction(store, b"t", commit=False)
        p.roll()
        p.append_values([b"c"])
        assert os.path.exists(index_path(p.directory, 0))
        p.delete_records(2)
        assert not os.path.exists(index_path(p.directory, 0))
        assert _values(p, "read_committed", start=2) == [b"c"]
        assert p.check() == []


def _poll_all(consumer):
    got = []
    while True:
        batch = consumer.poll(timeout_ms=50)
        if not batch:
            return got
        got += [r.value for recs in batch.values() for r in recs]


def test_read_committed_consumer_sees_committed_records_only_and_moves_past_markers(tmp_path):
    with _store(tmp_path) as store:
        p, a = _plain_then_open(store)  # "c" at 0, a's "t" at 1
        internals(p).append_marker(a, 0, commit=True)
        b = store.new_producer_id()
        p.append_values([b"aborted"], producer=(b, 0, 0), transactional=True)
        internals(p).append_marker(b, 0, commit=False)
        tp = pylog.TopicPartition(TOPIC, 0)
        committed = store.consumer(TOPIC, auto_offset_reset="earliest", isolation_level="read_committed")
        uncommitted = store.consumer(TOPIC, auto_offset_reset="earliest")
        assert _poll_all(committed) == [b"c", b"t"]
        assert committed.position(tp) == p.log_end_offset == 5  # past the last marker, not stuck before it
        assert _poll_all(uncommitted) == [b"c", b"t", b"aborted"]
        # An open transaction holds read_committed back, and its end offset, until it commits.
        p.append_values([b"open"], producer=(b, 0, 1), transactional=True)
        p.append_values([b"later"])
        assert committed.end_offsets([tp]) == {tp: 5} and uncommitted.end_offsets([tp]) == {tp: 7}
        assert _poll_all(committed) == [] and committed.position(tp) == 5
        internals(p).append_marker(b, 0, commit=True)
        assert _poll_all(committed) == [b"open", b"later"]
        with pytest.raises(pylog.InvalidConfigError):
            store.consumer(TOPIC, isolation_level="committed")


def test_kafka_python_consumer_through_pylog_serve_moves_past_a_marker_at_the_end(server, store):
    # Fetch hands the markers to the client as Kafka does: kafka-python skips them and its position moves
    # past a marker that ends the log (a fetch without it would leave the position, and the lag, before it).
    kafka = pytest.importorskip("kafka")
    p, pid = _plain_then_open(store)
    internals(p).append_marker(pid, 0, commit=True)
    tp = kafka.TopicPartition(TOPIC, 0)
    consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest")
    consumer.assign([tp])
    got = []
    try:
        deadline = time.monotonic() + 20
        while consumer.position(tp) < 3 and time.monotonic() < deadline:
            got += [r.value for recs in consumer.poll(timeout_ms=100).values() for r in recs]
        assert got == [b"c", b"t"] and consumer.position(tp) == 3
    finally:
        consumer.close()


def test_a_transaction_spanning_segments_is_dropped_by_its_marker_in_a_later_segment(tmp_path):
    with _store(tmp_path) as store:
        p, pid = _open_transaction(store, b"t0")
        p.roll()
        p.append_values([b"t1"], producer=(pid, 0, 1), transactional=True)
        p.roll()
        p.append_values([b"plain"])
        internals(p).append_marker(pid, 0, commit=False)
        assert len(p.segments) == 3 and read_index(index_path(p.directory, 2))
        for start in (0, 1, 2):  # twice: the second read takes the sealed segments' entries from the cache
            assert _values(p, "read_committed", start=start) == [b"plain"]
            assert _values(p, "read_committed", start=start) == [b"plain"]
        assert _values(p) == [b"t0", b"t1", b"plain"]


@pytest.mark.parametrize("seed", range(6))
def test_random_transactions_read_back_as_a_model_says_also_after_reopening(tmp_path, seed):
    """Several producers interleave transactions (committed or aborted), plain appends and rolls; after each
    step read_committed and read_uncommitted equal the model, also through a second handle and after the
    store is reopened (cleanly or after an abandoned writer)."""
    rng = random.Random(seed)
    store = _store(tmp_path, segment_bytes=1 << 10)
    p = _part(store)
    pids = [store.new_producer_id() for _ in range(3)]
    seqs = dict.fromkeys(pids, 0)
    open_txn: dict[int, list[int]] = {}  # producer -> offsets of its open transaction's records
    log: list[tuple[bytes, str]] = []  # every record with its fate: "plain", "open", "commit" or "abort"
    try:
        for step in range(60):
            kind = rng.random()
            pid = rng.choice(pids)
            if kind < 0.45:
                n = rng.randint(1, 4)
                vals = [b"%d-%d" % (step, i) for i in range(n)]
                first = p.append_values(vals, producer=(pid, 0, seqs[pid]), transactional=True)
                seqs[pid] += n
                open_txn.setdefault(pid, []).extend(range(first, first + n))
                log += [(v, "open") for v in vals]
            elif kind < 0.7 and pid in open_txn:
                commit = rng.random() < 0.5
                internals(p).append_marker(pid, 0, commit=commit)
                for off in open_txn.pop(pid):
                    log[off] = (log[off][0], "commit" if commit else "abort")
                log.append((b"", "marker"))
            elif kind < 0.85:
                log.append((b"p%d" % step, "plain"))
                p.append_values([log[-1][0]])
            elif kind < 0.92:
                p.roll()
            else:
                if rng.random() < 0.5:
                    store.close()
                else:
                    abandon(p)  # a writer that died: no snapshot at close
                    store.close()
                store = _store(tmp_path, segment_bytes=1 << 10)
                p = store.topic(TOPIC).partition(0)
            firsts = [offs[0] for offs in open_txn.values()]
            lso = min(firsts) if firsts else len(log)
            assert p.last_stable_offset == lso
            assert _values(p, "read_committed") == [v for v, fate in log[:lso] if fate in ("plain", "commit")]
            assert _values(p) == [v for v, fate in log if fate != "marker"]
        assert len(p.segments) > 3  # rolls by hand and by segment.bytes: indexes in several segments
        with pylog.open(str(tmp_path), read_only=True) as reader:
            r = reader.topic(TOPIC).partition(0)
            assert r.last_stable_offset == lso
            assert _values(r, "read_committed") == _values(p, "read_committed")
    finally:
        store.close()


def test_kafka_python_and_aiokafka_named_consumers_take_isolation_level(tmp_path):
    with _store(tmp_path) as store:
        _one_transaction(store, b"aborted", commit=False)
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"plain"])
        c = KafkaConsumer(TOPIC, bootstrap_servers=store, auto_offset_reset="earliest",
                          isolation_level="read_committed", consumer_timeout_ms=200)
        assert [r.value for r in c] == [b"plain"]
        c.close()

        async def consume(level):
            async with AIOKafkaConsumer(TOPIC, bootstrap_servers=store, auto_offset_reset="earliest",
                                        isolation_level=level) as ac:
                got = await ac.getmany(timeout_ms=1000)
                return [r.value for recs in got.values() for r in recs]

        assert asyncio.run(consume("read_committed")) == [b"plain"]
        assert asyncio.run(consume("read_uncommitted")) == [b"aborted", b"plain"]


def _kafka_python_poll_until(consumer, tp, position, deadline_s=20):
    got = []
    deadline = time.monotonic() + deadline_s
    while consumer.position(tp) < position and time.monotonic() < deadline:
        got += [r.value for recs in consumer.poll(timeout_ms=100).values() for r in recs]
    return got


def test_kafka_python_read_committed_through_pylog_serve_drops_aborted_and_waits_for_open(server, store):
    kafka = pytest.importorskip("kafka")
    p, a = _plain_then_open(store)  # "c" at 0, a's "t" at 1
    internals(p).append_marker(a, 0, commit=False)  # 2
    b = store.new_producer_id()
    p.append_values([b"b1"], producer=(b, 0, 0), transactional=True)  # 3
    internals(p).append_marker(b, 0, commit=True)  # 4
    p.append_values([b"open"], producer=(b, 0, 1), transactional=True)  # 5, open
    p.append_values([b"later"])  # 6
    tp = kafka.TopicPartition(TOPIC, 0)
    consumers = {level: kafka.KafkaConsumer(bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                                            isolation_level=level) for level in ("read_committed", "read_uncommitted")}
    try:
        for c in consumers.values():
            c.assign([tp])
        committed, uncommitted = consumers["read_committed"], consumers["read_uncommitted"]
        assert _kafka_python_poll_until(uncommitted, tp, 7) == [b"c", b"t", b"b1", b"open", b"later"]
        assert _kafka_python_poll_until(committed, tp, 5) == [b"c", b"b1"]
        assert committed.poll(timeout_ms=300) == {} and committed.position(tp) == 5  # held at the LSO
        assert committed.end_offsets([tp]) == {tp: 5} and uncommitted.end_offsets([tp]) == {tp: 7}  # ListOffsets
        internals(p).append_marker(b, 0, commit=True)  # 7
        assert _kafka_python_poll_until(committed, tp, 8) == [b"open", b"later"]
    finally:
        for c in consumers.values():
            c.close()


def test_a_foreign_control_batch_does_not_stop_the_writer_loading_its_producer_state(tmp_path):
    # A control batch that is not a marker (pylog before transactions let a caller set the bit), from a
    # producer whose transaction is open, found by the writer's replay with no index entry for it.
    with _store(tmp_path) as store:
        p, pid = _open_transaction(store, b"t")
        append_foreign_control(p, pid)
        abandon(p)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        assert p.append_values([b"i"], producer=(store.new_producer_id(), 0, 0)) == 2
        assert _values(p, "read_committed") == [b"t", b"i"] and read_index(index_path(p.directory, 0)) == []


def test_readers_racing_aborts_and_rolls_never_return_an_aborted_record(tmp_path):
    """Reader threads read read_committed while the writer aborts transactions whose markers land just before
    a roll seals their segment: a reader that read a segment's index before its last entry was written, and
    saw the segment sealed only after, must not keep that index as final (it would return the aborted
    records from then on). A race: without that rule it failed about one run in three."""

    store = _store(tmp_path, segment_bytes=300)  # a roll every other abort or so
    stop = threading.Event()
    seen: list[tuple[int, bytes]] = []
    try:
        p = _part(store)
        pid = store.new_producer_id()

        def follow() -> None:
            pos = 0
            while not stop.is_set():
                recs = p.read(pos, max_records=100, isolation_level="read_committed")
                seen.extend((r.offset, r.value) for r in recs if r.value.startswith(b"ABORT"))
                pos = recs[-1].offset + 1 if recs else pos

        threads = [threading.Thread(target=follow) for _ in range(2)]
        for t in threads:
            t.start()
        for i in range(300):
            p.append_values([b"ABORT-%d" % i], producer=(pid, 0, i), transactional=True)
            internals(p).append_marker(pid, 0, commit=False)
            p.append_values([b"plain-%d" % i])
        stop.set()
        for t in threads:
            t.join(60)
        assert not seen, seen[:5]
    finally:
        stop.set()
        store.close()
