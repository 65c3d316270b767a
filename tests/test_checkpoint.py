"""pylog.storage.checkpoint: the partition checkpoint file (40 bytes, CRC-checked, atomically replaced)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, strategies as st

from pylog.errors import CorruptRecordError
from pylog.storage.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from pylog.storage.fileio import write_checked

offsets = st.integers(0, 2**63 - 1)


@given(offsets, offsets, st.booleans(), offsets)
def test_checkpoint_round_trips_every_field(tmp_path_factory, recovery_point, log_start, clean, generation):
    path = str(tmp_path_factory.mktemp("cp") / "checkpoint")
    cp = Checkpoint(recovery_point, log_start, clean, generation)
    write_checkpoint(path, cp)
    assert read_checkpoint(path) == cp


def test_checkpoint_missing_is_none(tmp_path):
    assert read_checkpoint(str(tmp_path / "checkpoint")) is None


def test_checkpoint_file_is_40_bytes_as_the_layout_says(tmp_path):
    path = str(tmp_path / "checkpoint")
    write_checkpoint(path, Checkpoint(7, 3, True, 2), durable=False)
    raw = open(path, "rb").read()
    assert len(raw) == 40
    assert raw[:4] == b"PLCK"
    magic, version, flags, rp, ls, gen = struct.unpack_from("<4sHHqqq", raw)
    assert (version, flags, rp, ls, gen) == (1, 1, 7, 3, 2)


def test_checkpoint_rewritten_replaces_the_previous_one(tmp_path):
    path = str(tmp_path / "checkpoint")
    write_checkpoint(path, Checkpoint(10, 0, True))
    write_checkpoint(path, Checkpoint(20, 5, False, 1))
    assert read_checkpoint(path) == Checkpoint(20, 5, False, 1)
    assert os.listdir(tmp_path) == ["checkpoint"]


@pytest.mark.parametrize("byte", range(40))
def test_checkpoint_with_a_flipped_byte_is_a_corrupt_record_error(tmp_path, byte):
    path = str(tmp_path / "checkpoint")
    write_checkpoint(path, Checkpoint(123, 45, True, 6))
    raw = bytearray(open(path, "rb").read())
    raw[byte] ^= 0x5A
    open(path, "wb").write(raw)
    with pytest.raises(CorruptRecordError):
        read_checkpoint(path)


@pytest.mark.parametrize("size", [0, 3, 4, 39, 41, 64, 100])
def test_checkpoint_of_the_wrong_length_is_a_corrupt_record_error(tmp_path, size):
    path = str(tmp_path / "checkpoint")
    write_checkpoint(path, Checkpoint(1, 1))
    raw = open(path, "rb").read()
    open(path, "wb").write((raw * 3)[:size])
    with pytest.raises(CorruptRecordError):
        read_checkpoint(path)


@pytest.mark.parametrize("body", [
    struct.pack("<4sHHqqq4x", b"PLCX", 1, 0, 0, 0, 0),  # another magic
    struct.pack("<4sHHqqq4x", b"PLCK", 2, 0, 0, 0, 0),  # a later version
    struct.pack("<4sHHqqq4x", b"PLCK", 1, 0, -1, 0, 0),  # negative recovery point
    struct.pack("<4sHHqqq4x", b"PLCK", 1, 0, 0, -5, 0),  # negative log start
    struct.pack("<4sHHqqq4x", b"PLCK", 1, 0, 0, 0, -1),  # negative swap generation
    struct.pack("<4sHHqqq", b"PLCK", 1, 0, 0, 0, 0),  # no reserved bytes
], ids=["magic", "version", "recovery-point", "log-start", "generation", "short"])
def test_checkpoint_with_a_valid_checksum_but_impossible_content_is_a_corrupt_record_error(tmp_path, body):
    path = str(tmp_path / "checkpoint")
    write_checked(path, body)  # the CRC holds: only the content check can refuse it
    with pytest.raises(CorruptRecordError):
        read_checkpoint(path)


def test_checkpoint_defaults_are_an_unclean_empty_log():
    assert Checkpoint() == Checkpoint(recovery_point=0, log_start_offset=0, clean=False, swap_generation=0)
