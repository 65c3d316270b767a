"""pylog.index: sparse mmapped indexes, sealing, sanity checks."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pylog.index import IndexError_, OffsetIndex, TimeIndex, open_writable


def test_lookup_on_an_empty_index_returns_the_segment_start(tmp_path):
    idx = OffsetIndex.create(str(tmp_path / "0.index"), 100, 4096)
    assert idx.lookup(0) == (0, 0)
    assert idx.lookup(10**6) == (0, 0)
    idx.close()


def test_offset_lookup_finds_the_greatest_entry_at_or_below(tmp_path):
    idx = OffsetIndex.create(str(tmp_path / "0.index"), 0, 4096)
    for rel, pos in [(10, 100), (20, 250), (35, 900)]:
        idx.append(rel, pos)
    assert idx.lookup(9) == (0, 0)
    assert idx.lookup(10) == (10, 100)
    assert idx.lookup(34) == (20, 250)
    assert idx.lookup(10**9) == (35, 900)
    with pytest.raises(ValueError):
        idx.append(30, 1000)  # not increasing
    idx.close()


def test_time_lookup_returns_where_a_scan_must_start(tmp_path):
    idx = TimeIndex.create(str(tmp_path / "0.timeindex"), 0, 4096)
    idx.append(100, 5)
    idx.append(100, 9)   # ignored: timestamp not above the last
    idx.append(200, 12)
    assert idx.count == 2
    assert idx.lookup(50) == 0
    assert idx.lookup(100) == 0     # records before rel 5 are <= 100, one of them may equal 100
    assert idx.lookup(101) == 5
    assert idx.lookup(10**12) == 12
    idx.close()


def test_seal_trims_and_reopen_regrows(tmp_path):
    path = str(tmp_path / "0.index")
    idx = OffsetIndex.create(path, 7, 1 << 16)
    for i in range(1, 50):
        idx.append(i, i * 10)
    sealed = idx.seal(durable=False)
    assert sealed.sealed and sealed.count == 49
    assert os.path.getsize(path) == 64 + 49 * 8
    assert sealed.lookup(25) == (25, 250)
    sealed.close()
    again = open_writable(OffsetIndex, path, 7, 1 << 16)
    assert again.count == 49 and again.capacity > 49
    again.append(60, 600)
    assert again.lookup(61) == (60, 600)
    again.close()


def test_a_reader_counts_live_entries_of_an_unsealed_index(tmp_path):
    path = str(tmp_path / "0.index")
    w = OffsetIndex.create(path, 0, 4096)
    for i in range(1, 8):
        w.append(i, i * 3)
    r = OffsetIndex.open(path, 0)
    assert r.count == 7
    assert r.lookup(5) == (5, 15)
    w.close()
    r.close()


@pytest.mark.parametrize("damage", ["magic", "header_crc", "entries", "size", "base"])
def test_damaged_index_fails_its_sanity_check(tmp_path, damage):
    path = str(tmp_path / "0.index")
    idx = OffsetIndex.create(path, 5, 4096)
    idx.append(1, 10)
    idx.append(2, 20)
    idx.seal(durable=False).close()
    with open(path, "r+b") as f:
        if damage == "magic":
            f.write(b"XXXX")
        elif damage == "header_crc":
            f.seek(20)
            f.write(b"\x09")
        elif damage == "entries":
            f.seek(64)
            f.write(b"\xff")
        elif damage == "size":
            f.truncate(70)
    base = 6 if damage == "base" else 5
    with pytest.raises(IndexError_):
        OffsetIndex.open(path, base)


def test_missing_index_is_reported(tmp_path):
    with pytest.raises(IndexError_):
        TimeIndex.open(str(tmp_path / "nope.timeindex"), 0)


def test_capacity_follows_segment_index_bytes():
    assert OffsetIndex.capacity_for(64 + 8 * 100) == 100
    assert TimeIndex.capacity_for(64 + 12 * 100) == 100
    assert np.dtype(TimeIndex.A).itemsize == 8
