"""Retention and delete-records under read_committed reads: a segment deleted (with its aborted-transaction index)
after a reader took its segment list or read its records never makes the reader take an aborted record for a
committed one (pylog/storage/log/internals.py, PartitionInternals.aborted; docs/FORMAT.md, `.txnindex`).

Deterministic: each test reads the records first (through the handle's real read path, which holds the
segment's log open), then makes the writer delete the segment, then asks for the aborted transactions, the
order a Fetch or a read_committed read goes in."""

from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import OffsetOutOfRangeError
from pylog.maintenance.compaction import clean_partition
from pylog.partition import internals
from pylog.storage.txn_index import index_path, read_index

TOPIC = "t"


def _aborted_segment_then_plain(store):
    """Segment 0: an aborted transaction's record (offset 0) and its marker (1); segment 2: plain ``c``."""
    store.create_topic(TOPIC)
    p = store.topic(TOPIC).partition(0)
    pid = store.new_producer_id()
    p.append_values([b"t"], producer=(pid, 0, 0), transactional=True)
    internals(p).append_marker(pid, 0, commit=False)
    p.roll()
    p.append_values([b"c"])
    assert read_index(index_path(p.directory, 0))
    return p, pid


def _delete_first_segment(p, how):
    if how == "retention":
        p.enforce_retention(now=1 << 62)  # every segment is past retention.ms: all go (after a roll)
    else:
        p.delete_records(2)
    assert not read_index(index_path(p.directory, 0))  # the index went with its segment


@pytest.mark.parametrize("how", ["retention", "delete_records"])
def test_reader_with_stale_segment_list_never_gets_a_deleted_segments_aborts_as_none(tmp_path, how):
    """A read-only handle (another process's view) reads the segment's records, the writer deletes it, then the
    reader asks for the read's aborted transactions (a Fetch's order): it is told to read again, never given an
    empty answer that would make the aborted record at 0 a committed one."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p, pid = _aborted_segment_then_plain(store)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            r = reader.topic(TOPIC).partition(0)
            assert [s.base_offset for s in r.segments] == [0, 2]  # the reader's list, soon stale
            slices = internals(r).read_with_markers(0, 500, 1 << 20)  # holds segment 0's log open
            assert slices[0][0].header.base_offset == 0
            _delete_first_segment(p, how)
            with pytest.raises(FileNotFoundError):  # "read again on the current view", never "none"
                internals(r).aborted_transactions(0, 2)
            # A new read goes by the new view: the deleted offsets are out of range, the rest reads.
            with pytest.raises(OffsetOutOfRangeError):
                r.read(0, isolation_level="read_committed")
            rest = [x.value for x in r.read(r.log_start_offset, isolation_level="read_committed")]
            assert rest == ([] if how == "retention" else [b"c"])  # retention took segment 2 too


@pytest.mark.parametrize("how", ["retention", "delete_records"])
def test_writers_own_read_never_gets_a_deleted_segments_aborts_as_none(tmp_path, how):
    """The same in the writer's process: a read took segment 0's records, maintenance deleted it (the writer's
    view moved on at once), then the read asks for its aborted transactions."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p, pid = _aborted_segment_then_plain(store)
        assert internals(p).read_with_markers(0, 500, 1 << 20)
        assert internals(p).aborted_transactions(0, 2) == [(pid, 0)]
        _delete_first_segment(p, how)
        with pytest.raises(OffsetOutOfRangeError):
            internals(p).aborted_transactions(0, 2)


@pytest.mark.parametrize("how", ["retention", "delete_records"])
def test_read_committed_after_deletion_returns_no_aborted_record(tmp_path, how):
    """Through the public read: a reader that listed the segments before the deletion reads read_committed from
    offset 0 after it: out of range (or, had it not listed again, still without the aborted record)."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p, pid = _aborted_segment_then_plain(store)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            r = reader.topic(TOPIC).partition(0)
            assert [x.value for x in r.read(0)] == [b"t", b"c"]  # segment 0's log open, list taken
            _delete_first_segment(p, how)
            with pytest.raises(OffsetOutOfRangeError):
                r.read(0, isolation_level="read_committed")


@pytest.mark.parametrize("how", ["retention", "delete_records"])
def test_fetch_whose_segment_is_deleted_between_its_read_and_its_aborts_reads_again(tmp_path, how):
    """pylog serve's Fetch order (records, then their aborts) under the internal API's retry: the first attempt
    read segment 0's records, then the writer deleted it; the second attempt, on the current view, finds the
    offsets deleted. No attempt answers with the aborted record and no aborts."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        p, pid = _aborted_segment_then_plain(store)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            r = reader.topic(TOPIC).partition(0)
            attempts = []

            def fetch():
                slices = internals(r).read_with_markers(0, 500, 1 << 20)
                if not attempts:
                    _delete_first_segment(p, how)
                attempts.append(len(slices))
                return slices, internals(r).aborted_transactions(0, slices[-1][0].header.next_offset)

            with pytest.raises(OffsetOutOfRangeError):
                internals(r).on_current_view("a fetch", fetch)
            assert attempts == [3]  # read once (records 0, 1 and 2), then out of range on the current view


def test_reader_holding_a_segment_a_compaction_swap_replaced_never_gets_its_aborts_as_none(tmp_path):
    """The compaction swap leaves a replaced segment's index for readers holding the old list until the next
    pass removes the leftovers: a reader that read the segment's records and looks its aborts up after that
    reads again on the current view (where the cleaning removed the aborted record)."""
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"v0"], keys=[b"k1"])
        p.roll()
        pid = store.new_producer_id()
        p.append_values([b"a"], keys=[b"k2"], producer=(pid, 0, 0), transactional=True)  # offset 1, aborted
        internals(p).append_marker(pid, 0, commit=False)
        p.roll()
        p.append_values([b"v1"], keys=[b"k1"])
        p.roll()
        with pylog.open(str(tmp_path), read_only=True) as reader:
            r = reader.topic(TOPIC).partition(0)
            assert [s.base_offset for s in r.segments] == [0, 1, 3, 4]
            attempts = []

            def fetch():
                slices = internals(r).read_with_markers(1, 500, 1 << 20)
                if not attempts:  # the reader read segment 1; the writer cleans, then a next pass starts
                    assert clean_partition(p, 1 << 20, force=True).aborted_removed == 1
                    assert not os.path.exists(os.path.join(p.directory, "%020d.log" % 1))
                    internals(p).remove_swap_leftovers()
                    assert not os.path.exists(index_path(p.directory, 1))
                attempts.append([(s[0].header.base_offset, s[0].header.producer_id) for s in slices])
                end = slices[-1][0].header.next_offset
                return slices, internals(r).aborted_transactions(1, end)

            slices, aborts = internals(r).on_current_view("a fetch", fetch)
            assert attempts[0][0] == (1, pid)  # the first attempt read the aborted batch ...
            assert len(attempts) == 2 and all(b != 1 for b, _ in attempts[1])  # ... the second, cleaned, has none
            assert [x.value for x in r.read(0, isolation_level="read_committed")] == [b"v1"]
