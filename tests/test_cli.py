"""pylog.__main__: the command line, run in-process."""

from __future__ import annotations

import io

import pylog
from pylog.__main__ import ExitCode, main
from pylog.records import HEADER_SIZE


def _store(path):
    with pylog.open(path) as store:
        p = store.create_topic("events", partitions=2, config={"segment.bytes": 4096}).partition(0)
        for i in range(100):
            p.append_values([b"value %d" % i] * 10)


def test_topics_lists_partitions_and_offsets(tmp_path):
    _store(tmp_path)
    out = io.StringIO()
    assert main(["topics", str(tmp_path)], out) == ExitCode.OK
    text = out.getvalue()
    assert "events  partitions=2" in text and "0: offsets [0, 1000)" in text and "1: offsets [0, 0)" in text


def test_verify_passes_a_sound_store_and_fails_a_damaged_one(tmp_path):
    _store(tmp_path)
    out = io.StringIO()
    assert main(["verify", str(tmp_path)], out) == ExitCode.OK
    assert "verify: no problems" in out.getvalue()
    log = sorted((tmp_path / "events" / "0").glob("*.log"))[1]
    raw = bytearray(log.read_bytes())
    raw[HEADER_SIZE + 3] ^= 0xFF
    log.write_bytes(bytes(raw))
    out = io.StringIO()
    assert main(["verify", str(tmp_path), "events"], out) == ExitCode.PROBLEMS
    assert "checksum" in out.getvalue() and str(log) in out.getvalue()


def test_a_directory_that_is_not_a_store_is_refused_and_left_alone(tmp_path, capsys):
    assert main(["topics", str(tmp_path / "nothing")]) == ExitCode.ERROR
    assert not (tmp_path / "nothing").exists()
    assert "not a pylog store" in capsys.readouterr().err
