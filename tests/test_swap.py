"""pylog.storage.swap: the compaction swap manifest and finishing (or undoing) an interrupted swap.

The files here stand in for segments by name only (the swap renames and unlinks by name, never reads a
segment): each holds the name it was written under, so a test can tell which file ended up where.
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, strategies as st

from pylog.errors import CorruptRecordError
from pylog.storage.fileio import write_checked
from pylog.storage.filenames import SWAP_MANIFEST_FILE, segment_path
from pylog.storage.swap import (SEGMENT_SUFFIXES, finish_interrupted_swap, read_manifest, remove_leftovers,
                                roll_forward, write_manifest)


def _segment(directory, base, suffix="", tag=b"old"):
    for s in SEGMENT_SUFFIXES:
        path = segment_path(str(directory), base, s + suffix)
        with open(path, "wb") as f:
            f.write(tag + b" " + os.path.basename(path).encode())


def _content(directory, base, s):
    path = segment_path(str(directory), base, s)
    return open(path, "rb").read().split(b" ")[0] if os.path.exists(path) else None


def _bases(directory) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))


groups = st.lists(st.tuples(st.integers(-1, 2**63 - 1), st.lists(st.integers(0, 2**63 - 1), max_size=5)),
                  max_size=5)


@given(groups)
def test_swap_manifest_round_trips_any_swap(tmp_path_factory, swap):
    directory = str(tmp_path_factory.mktemp("swap"))
    write_manifest(directory, swap)
    assert read_manifest(directory) == [(new, list(old)) for new, old in swap]


def test_swap_manifest_missing_is_none(tmp_path):
    assert read_manifest(str(tmp_path)) is None


def test_swap_manifest_with_a_flipped_byte_is_a_corrupt_record_error(tmp_path):
    write_manifest(str(tmp_path), [(0, [0, 10, 20])])
    path = tmp_path / SWAP_MANIFEST_FILE
    raw = bytearray(path.read_bytes())
    for i in range(len(raw)):
        raw[i] ^= 0x01
        path.write_bytes(bytes(raw))
        with pytest.raises(CorruptRecordError):
            read_manifest(str(tmp_path))
        raw[i] ^= 0x01


_HEAD = struct.Struct("<4sHHI")


@pytest.mark.parametrize("body", [
    b"PLC",  # shorter than its header
    _HEAD.pack(b"PLCX", 1, 0, 0),  # another magic
    _HEAD.pack(b"PLCS", 2, 0, 0),  # another version
    _HEAD.pack(b"PLCS", 1, 0, 1),  # one group announced, none there
    _HEAD.pack(b"PLCS", 1, 0, 1) + struct.pack("<qI", 0, 3) + struct.pack("<q", 0),  # fewer bases than said
    _HEAD.pack(b"PLCS", 1, 0, 2**32 - 1),  # a huge count: truncated, not a huge allocation
    _HEAD.pack(b"PLCS", 1, 0, 0) + b"\x00",  # trailing bytes
    _HEAD.pack(b"PLCS", 1, 0, 1) + struct.pack("<qI", -2, 0),  # a new base below -1
    _HEAD.pack(b"PLCS", 1, 0, 1) + struct.pack("<qIq", 5, 1, -1),  # a negative replaced base
], ids=["short", "magic", "version", "no-group", "few-bases", "huge-count", "trailing", "new-base", "old-base"])
def test_swap_manifest_with_a_valid_checksum_but_impossible_content_is_a_corrupt_record_error(tmp_path, body):
    write_checked(os.path.join(str(tmp_path), SWAP_MANIFEST_FILE), body)
    with pytest.raises(CorruptRecordError):
        read_manifest(str(tmp_path))
    with pytest.raises(CorruptRecordError):  # never guessed around at the writer's open either
        finish_interrupted_swap(str(tmp_path))


def test_swap_roll_forward_puts_the_new_segments_in_and_removes_what_they_replace(tmp_path):
    for base in (0, 10, 20, 30):
        _segment(tmp_path, base)
    _segment(tmp_path, 0, ".swap", tag=b"new")  # 0..29 compacted into one segment based at 0
    swap = [(0, [0, 10, 20])]
    write_manifest(str(tmp_path), swap)
    roll_forward(str(tmp_path), swap)
    assert _bases(tmp_path) == [0, 30]
    assert all(_content(tmp_path, 0, s) == b"new" for s in SEGMENT_SUFFIXES)
    assert all(_content(tmp_path, 30, s) == b"old" for s in SEGMENT_SUFFIXES)
    assert not any(n.endswith(".swap") and n != SWAP_MANIFEST_FILE for n in os.listdir(tmp_path))


def test_swap_roll_forward_is_idempotent_after_a_crash_part_way(tmp_path):
    for base in (0, 10, 20):
        _segment(tmp_path, base)
    _segment(tmp_path, 5, ".swap", tag=b"new")
    swap = [(5, [0, 10]), (-1, [20])]  # the second group compacted to nothing
    # A crash after the first rename: the .log is in, its indexes are still .swap.
    os.replace(segment_path(str(tmp_path), 5, ".log.swap"), segment_path(str(tmp_path), 5, ".log"))
    roll_forward(str(tmp_path), swap)
    roll_forward(str(tmp_path), swap)  # and the next open runs it again
    assert _bases(tmp_path) == [5]
    assert all(_content(tmp_path, 5, s) == b"new" for s in SEGMENT_SUFFIXES)
    replaced_indexes = [os.path.basename(segment_path("", b, ".txnindex")) for b in (0, 10, 20)]
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(segment_path("", 5, s))
                                                   for s in SEGMENT_SUFFIXES] + replaced_indexes)
    assert remove_leftovers(str(tmp_path)) == 3  # the next cleaning (or writer open) removes those
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(segment_path("", 5, s))
                                                  for s in SEGMENT_SUFFIXES)


def test_swap_roll_forward_leaves_replaced_txn_indexes_for_readers_listing_the_old_segments(tmp_path):
    """A reader that listed the segments before the swap reads an old segment's aborted transactions by name:
    the replaced segments' indexes stay until the next cleaning (or writer open) removes them, and only
    those: a live segment's index, and one whose segment still exists, are kept."""
    for base in (0, 10, 20, 30):
        _segment(tmp_path, base)
    _segment(tmp_path, 0, ".swap", tag=b"new")
    roll_forward(str(tmp_path), [(0, [0, 10, 20])])
    assert _content(tmp_path, 0, ".txnindex") == b"new"
    assert _content(tmp_path, 10, ".txnindex") == _content(tmp_path, 20, ".txnindex") == b"old"
    assert _content(tmp_path, 10, ".log") is None
    open(tmp_path / "0000000000000000003.txnindex", "wb").close()  # 19 digits: not a segment's, not ours
    assert remove_leftovers(str(tmp_path)) == 2
    assert _content(tmp_path, 10, ".txnindex") is None and _content(tmp_path, 20, ".txnindex") is None
    assert _content(tmp_path, 0, ".txnindex") == b"new" and _content(tmp_path, 30, ".txnindex") == b"old"
    assert os.path.exists(tmp_path / "0000000000000000003.txnindex")


def test_swap_finish_rolls_a_committed_swap_forward_and_removes_the_manifest(tmp_path):
    for base in (0, 10):
        _segment(tmp_path, base)
    _segment(tmp_path, 0, ".swap", tag=b"new")
    write_manifest(str(tmp_path), [(0, [0, 10])])
    finish_interrupted_swap(str(tmp_path))
    assert _bases(tmp_path) == [0]
    assert _content(tmp_path, 0, ".log") == b"new"
    assert read_manifest(str(tmp_path)) is None


def test_swap_finish_without_a_manifest_rolls_back_uncommitted_output(tmp_path):
    for base in (0, 10):
        _segment(tmp_path, base)
    _segment(tmp_path, 0, ".cleaned", tag=b"new")  # cleaner output not yet renamed
    _segment(tmp_path, 10, ".swap", tag=b"new")  # renamed, but the manifest was never written
    open(tmp_path / "checkpoint.123-456.tmp", "wb").close()  # an atomic replacement a crash interrupted
    open(tmp_path / "00000000000000000020.log.deleted", "wb").close()
    finish_interrupted_swap(str(tmp_path))
    assert _bases(tmp_path) == [0, 10]
    assert all(_content(tmp_path, b, s) == b"old" for b in (0, 10) for s in SEGMENT_SUFFIXES)
    assert len(os.listdir(tmp_path)) == 2 * len(SEGMENT_SUFFIXES)


def test_swap_remove_leftovers_keeps_the_manifest_and_temporaries_unless_asked(tmp_path):
    write_manifest(str(tmp_path), [(0, [0])])
    _segment(tmp_path, 0, ".swap", tag=b"new")
    open(tmp_path / "topic.json.1-2.tmp", "wb").close()
    assert remove_leftovers(str(tmp_path)) == len(SEGMENT_SUFFIXES)  # the .swap segment files
    names = set(os.listdir(tmp_path))
    assert names == {SWAP_MANIFEST_FILE, "topic.json.1-2.tmp"}
    assert remove_leftovers(str(tmp_path), temporaries=True) == 1
    assert os.listdir(tmp_path) == [SWAP_MANIFEST_FILE]


def test_swap_remove_leftovers_counts_what_it_deleted(tmp_path):
    _segment(tmp_path, 0)
    _segment(tmp_path, 0, ".cleaned")
    assert remove_leftovers(str(tmp_path)) == len(SEGMENT_SUFFIXES)
    assert remove_leftovers(str(tmp_path)) == 0
    assert _bases(tmp_path) == [0]
