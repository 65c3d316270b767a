"""pylog.__main__: the command line, run in-process."""

from __future__ import annotations

import io

import pytest

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


def test_maintenance_commands(tmp_path, capsys):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        store.create_topic("c", config={"cleanup.policy": "compact", "segment.bytes": 2048})
        p = store.topic("c").partition(0)
        for i in range(200):
            p.append_values([b"v%d" % i], keys=[b"k%d" % (i % 4)])
        store.create_topic("d", config={"retention.bytes": 0, "segment.bytes": 2048})
        store.topic("d").partition(0).append_values([b"x" * 100] * 50)
    out = io.StringIO()
    assert main(["compact", str(tmp_path), "c"], out) == ExitCode.OK
    assert "c-0: read" in out.getvalue() and "removed" in out.getvalue()
    out = io.StringIO()
    assert main(["retention", str(tmp_path), "d"], out) == ExitCode.OK
    assert "d-0: deleted" in out.getvalue()
    out = io.StringIO()
    assert main(["delete-records", str(tmp_path), "c", "0", "150"], out) == ExitCode.OK
    assert "log start offset 150" in out.getvalue()
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as store:
        assert store.topic("c").partition(0).log_start_offset == 150
        store.topic("d").partition(0).append_values([b"y"])  # this handle writes d now
        out = io.StringIO()
        assert main(["retention", str(tmp_path), "d"], out) == ExitCode.PROBLEMS
        assert "locked by another writer" in out.getvalue()
        store.topic("c").partition(0).append_values([b"z"], keys=[b"k"])
        out = io.StringIO()
        assert main(["compact", str(tmp_path), "c"], out) == ExitCode.PROBLEMS
        assert "c-0: locked by another writer" in out.getvalue()
    assert main(["delete-records", str(tmp_path), "c", "0", "99999"]) == ExitCode.ERROR
    assert "ends at 201" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["delete-records", str(tmp_path), "c", "0", "-3"])


def test_groups_shows_members_and_lag(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=2)
        for p in range(2):
            store.topic("t").partition(p).append_values([b"v"] * 10)
        c = store.consumer("t", group_id="billing", auto_offset_reset="earliest", max_poll_records=3,
                           client_id="worker")
        c.poll(0)
        c.commit()
        out = io.StringIO()
        assert main(["groups", str(tmp_path)], out) == ExitCode.OK
        text = out.getvalue()
        assert "billing  generation=1  strategy=range  members=1" in text
        assert "member worker-" in text and "t-0,t-1" in text
        assert "t-0: committed 3  log end 10  lag 7  lead 3" in text and "total lag 7" in text
        c.close(autocommit=False)
    out = io.StringIO()
    assert main(["groups", str(tmp_path), "billing"], out) == ExitCode.OK
    assert "members=0" in out.getvalue()
    out = io.StringIO()
    assert main(["groups", str(tmp_path), "nobody"], out) == ExitCode.OK
    assert "total lag 0" in out.getvalue()
