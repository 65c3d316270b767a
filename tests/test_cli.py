"""pylog.__main__ / pylog.cli: every command and its exit codes, run in-process against stores in tmp_path."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

import pylog
from pylog.__main__ import ExitCode, main
from pylog.cli import output
from pylog.storage.checkpoint import Checkpoint, write_checkpoint
from pylog.clients.consumer import Consumer
from pylog.storage.records import HEADER_SIZE
from pylog.structs import TopicPartition


def _store(path):
    with pylog.open(path) as store:
        p = store.create_topic("events", partitions=2, config={"segment.bytes": 4096}).partition(0)
        for i in range(100):
            p.append_values([b"value %d" % i] * 10)


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(a) for a in argv], out)
    return code, out.getvalue()


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def _corrupt_second_segment(tmp_path):
    """Flip a byte inside the first batch's body of events-0's second segment; returns its path."""
    log = sorted((tmp_path / "events" / "0").glob("*.log"))[1]
    raw = bytearray(log.read_bytes())
    raw[HEADER_SIZE + 3] ^= 0xFF
    log.write_bytes(bytes(raw))
    return log


# ------------------------------------------------------------------------------------------------ topics

def test_topics_lists_partitions_and_offsets(tmp_path):
    _store(tmp_path)
    code, text = _run("topics", tmp_path)
    assert code == ExitCode.OK
    assert "events  partitions=2  config: segment.bytes=4096" in text
    assert "0: offsets [0, 1000)" in text and "1: offsets [0, 0)" in text
    assert _run("topics", "list", tmp_path) == (code, text)


def test_topics_create_describe_delete(tmp_path, capsys):
    store_dir = tmp_path / "new-store"
    code, text = _run("topics", "create", store_dir, "users", "--partitions", "3",
                      "--config", "cleanup.policy=compact", "--config", "segment.bytes=2048")
    assert code == ExitCode.OK and "created topic users: 3 partition(s)" in text
    assert "cleanup.policy=compact, segment.bytes=2048" in text
    assert _run("topics", "create", store_dir, "users")[0] == ExitCode.ERROR
    assert "already exists" in capsys.readouterr().err
    assert _run("topics", "create", store_dir, "users", "--if-not-exists")[0] == ExitCode.OK
    assert _run("topics", "create", store_dir, "bad", "--config", "segment.bytes=x")[0] == ExitCode.ERROR
    assert "segment.bytes" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert _run("topics", "create", tmp_path / "busy", "t")[0] == ExitCode.ERROR  # never made a store
    assert "not empty: it is left alone" in capsys.readouterr().err and os.listdir(tmp_path / "busy") == ["notes.txt"]
    with pylog.open(store_dir, log_cleaner_enable=False) as store:
        store.topic("users").partition(1).append_values([b"v"], keys=[b"k"])  # this process writes users-1
        code, text = _run("topics", "describe", store_dir, "users")
        assert code == ExitCode.OK
        lines = text.splitlines()
        assert lines[0] == "topic users: 3 partition(s), cleanup.policy compact"
        row = next(line.split() for line in lines if line.startswith("1 "))
        assert row[:6] == ["1", "0", "1", "1", "1", row[5]] and row[6:] == ["pid", str(os.getpid())]  # LSO = end
        assert next(line for line in lines if line.startswith("0 ")).split()[-1] == "-"
        assert next(line for line in lines if line.startswith("cleanup.policy")).split() == \
            ["cleanup.policy", "compact", "topic", "*"]
        assert next(line for line in lines if line.startswith("retention.ms")).split()[-1] == "default"
        assert _run("topics", "delete", store_dir, "users") == (ExitCode.PROBLEMS,
                                                                "users: locked by another writer, not deleted\n")
    assert _run("topics", "delete", store_dir, "users") == (ExitCode.OK, "deleted topic users\n")
    assert _run("topics", "describe", store_dir)[1].startswith("no topics in")
    assert _run("topics", "delete", store_dir, "users")[0] == ExitCode.ERROR
    assert _run("topics", "delete", store_dir, "__consumer_offsets")[0] == ExitCode.ERROR
    assert "groups delete" in capsys.readouterr().err


def test_a_directory_that_is_not_a_store_is_refused_and_left_alone(tmp_path, capsys):
    nothing = str(tmp_path / "nothing")
    for argv in (["topics", nothing], ["topics", "describe", nothing], ["topics", "delete", nothing, "t"],
                 ["groups", nothing], ["groups", "list", nothing], ["health", nothing], ["verify", nothing],
                 ["retention", nothing], ["consume", nothing, "t"], ["produce", nothing, "t"]):
        assert main(argv) == ExitCode.ERROR, argv
        assert "not a pylog store" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()


def test_the_cli_doc_names_only_real_commands(capsys):
    text = (Path(__file__).resolve().parent.parent / "docs" / "CLI.md").read_text()
    named = set(re.findall(r"pylog ([a-z-]+)(?: ([a-z-]+))?", text))
    assert {c for c, _ in named} >= {"topics", "produce", "consume", "dump", "verify", "groups", "retention", "compact",
                                     "delete-records", "repair", "health", "bench"}
    for command, action in named:
        with pytest.raises(SystemExit) as exc:
            main([command] + ([action] if action else []) + ["--help"])
        assert exc.value.code == 0, (command, action)
    capsys.readouterr()


def test_usage_errors_exit_2(tmp_path):
    for argv in ([], ["nonsense"], ["topics"], ["groups", "reset-offsets", str(tmp_path), "g"],
                 ["delete-records", str(tmp_path), "c", "0", "-3"], ["bench", "producer", str(tmp_path), "--records", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == ExitCode.USAGE


# ------------------------------------------------------------------------------------------- verify, dump

def test_verify_passes_a_sound_store_and_fails_a_damaged_one(tmp_path):
    _store(tmp_path)
    code, text = _run("verify", tmp_path)
    assert code == ExitCode.OK and "verify: no problems" in text
    assert "events-0: 5 segments, offsets [0, 1000): ok" in text
    log = _corrupt_second_segment(tmp_path)
    code, text = _run("verify", tmp_path, "events")
    assert code == ExitCode.PROBLEMS
    assert "checksum" in text and f"[{log} @ byte 0]" in text and "verify: 1 problem(s)" in text


def _damaged_active_segment(tmp_path, batches=5, flip=64 + 3):
    """A 1-partition topic ``t`` of ``batches`` batches of 10 records, all in the active segment, cleanly
    closed; then one byte of the first batch's body flipped (by hand, as bit rot would)."""
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic("t").partition(0)
        for i in range(batches):
            p.append_values([b"x%d" % i] * 10)
    log = tmp_path / "t" / "0" / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    raw[flip] ^= 0xFF
    log.write_bytes(bytes(raw))
    return log


def test_verify_finds_damage_in_the_active_segment_of_a_partition_nobody_writes(tmp_path):
    log = _damaged_active_segment(tmp_path)
    code, text = _run("verify", tmp_path)
    # a reader stops at the bad batch as if it were still being written; verify reads to the file's end
    assert code == ExitCode.PROBLEMS and f"checksum mismatch [{log} @ byte 0]" in text


def test_verify_reports_a_torn_last_batch_unless_a_writer_may_be_writing_it(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic("t").partition(0)
        p.append_values([b"a" * 100] * 10)
        p.append_values([b"b" * 100] * 10)
    log = tmp_path / "t" / "0" / "00000000000000000000.log"
    size = log.stat().st_size
    with open(log, "r+b") as f:
        f.truncate(size - 50)  # the second batch cut short, as a crash mid-write leaves it
    # ... with the checkpoint a writer leaves while it appends (dirty, recovery point at the active
    # segment's base): a clean one would say offsets [10, 20) were flushed, and their loss is reported.
    write_checkpoint(str(tmp_path / "t" / "0" / "partition.checkpoint"), Checkpoint(0, 0, clean=False))
    code, text = _run("verify", tmp_path)
    assert code == ExitCode.PROBLEMS and "after the last valid batch are a torn tail" in text
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        assert p.check(writer_active=True) == []  # a live writer may be writing it right now
        assert len(p.check(writer_active=False)) == 1


def test_a_clean_store_damaged_in_the_middle_refuses_appends_until_repaired(tmp_path):
    _damaged_active_segment(tmp_path)
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        with pytest.raises(pylog.CorruptRecordError, match="damaged in the middle after a clean close"):
            p.append_values([b"new"])
        assert not p.is_writer
    # nothing was cut: the whole batches after the damage are still on disk
    assert (tmp_path / "t" / "0" / "00000000000000000000.log").stat().st_size > 600
    code, text = _run("repair", tmp_path, "t", "0")
    assert code == ExitCode.OK and "1 segment(s) validated" in text and "log end offset 0" in text
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        assert store.topic("t").partition(0).append_values([b"new"]) == 0
    assert _run("verify", tmp_path)[0] == ExitCode.OK


def test_a_clean_store_whose_last_batch_is_bad_recovers_on_its_own(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic("t").partition(0)
        p.append_values([b"a"] * 10)
        p.append_values([b"b"] * 10)
    log = tmp_path / "t" / "0" / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    raw[-5] ^= 0xFF  # the last batch's body: what a writer that died mid-append (taking turns) leaves
    log.write_bytes(bytes(raw))
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        assert p.append_values([b"c"]) == 10
        assert p.last_recovery["bytes_dropped"] > 0
        assert [r.value for r in p.read(0, max_records=100)] == [b"a"] * 10 + [b"c"]


def test_verify_defaults_to_the_current_directory(tmp_path, monkeypatch):
    _store(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, text = _run("verify")
    assert code == ExitCode.OK and "events-1: 0 segments" in text


def test_verify_reports_a_topic_that_cannot_be_opened(tmp_path):
    _store(tmp_path)
    (tmp_path / "events" / "topic.json").write_text("{not json")
    code, text = _run("verify", tmp_path)
    assert code == ExitCode.PROBLEMS and "events: cannot be opened" in text


def test_dump_prints_every_batch_and_record(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t")
        with store.producer(compression_type="lz4") as producer:
            producer.send("t", b"hello" * 20, key=b"k1", headers=[("h", b"x")]).get()  # compressible
        store.topic("t").partition(0).append_values([b"\xff\x00", None], keys=[b"k2", b"k3"])
    log = tmp_path / "t" / "0" / "00000000000000000000.log"
    code, text = _run("dump", log, "--records")
    assert code == ExitCode.OK
    lines = text.splitlines()
    assert lines[0] == f"Dumping {log}"
    first, second = (line for line in lines if line.startswith("baseOffset"))
    assert "baseOffset: 0 lastOffset: 0 count: 1 position: 0" in first and "codec: lz4" in first
    assert "producerId: " in first and "producerId: -1" not in first and "baseSequence: 0" in first
    assert "crcValid: true isValid: true" in first
    assert "baseOffset: 1 lastOffset: 2 count: 2" in second and "codec: none" in second
    assert "| offset: 0 " in text and "headers: [h:x] key: k1 value: hellohello" in text
    assert "key: k2 value: \\xff\\x00" in text and "valueSize: -1 headers: [] key: k3 value: null" in text
    assert lines[-1].startswith("2 batch(es), 3 record(s), ")
    assert "| offset" not in _run("dump", log)[1]


def test_dump_names_file_and_position_of_a_bad_checksum_and_goes_on(tmp_path):
    _store(tmp_path)
    log = _corrupt_second_segment(tmp_path)
    code, text = _run("dump", log)
    assert code == ExitCode.PROBLEMS
    batches = [line for line in text.splitlines() if line.startswith("baseOffset")]
    assert "crcValid: false isValid: false" in batches[0] and "crcValid: true" in batches[1]
    assert f"{log} @ byte 0: batch checksum mismatch" in text and "1 problem(s):" in text


def test_dump_reports_a_torn_tail_and_a_corrupt_header(tmp_path):
    _store(tmp_path)
    log = sorted((tmp_path / "events" / "0").glob("*.log"))[-1]
    raw = log.read_bytes()
    size = int.from_bytes(raw[8:12], "little") + 12  # the first batch's size
    log.write_bytes(raw[:size + 30])
    code, text = _run("dump", log)
    assert code == ExitCode.PROBLEMS
    assert f"{log} @ byte {size}: torn batch: header cut to 30 of {HEADER_SIZE} bytes" in text
    log.write_bytes(raw[:size] + raw[size:size + 12] + b"\x07" + raw[size + 13:])  # a bad magic byte
    code, text = _run("dump", log)
    assert code == ExitCode.PROBLEMS and f"{log} @ byte {size}: corrupt batch header: unknown batch magic 7" in text
    log.write_bytes(raw[:size + 100])
    code, text = _run("dump", log)
    assert code == ExitCode.PROBLEMS and f"{log} @ byte {size}: torn batch: 100 of" in text


def test_dump_indexes_and_checks_them_against_the_log(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic("t", config={"index.interval.bytes": 1}).partition(0)
        for i in range(5):
            p.append_values([b"v%d" % i], timestamps=[1000 + i])
    index = tmp_path / "t" / "0" / "00000000000000000000.index"
    code, text = _run("dump", index, tmp_path / "t" / "0" / "00000000000000000000.timeindex")
    assert code == ExitCode.OK
    assert "offset: 1 position: " in text and "offset: 4 position: " in text
    assert "timestamp: 1003 offset: 4" in text
    code, text = _run("dump", tmp_path / "t" / "0" / "partition.checkpoint")
    assert code == ExitCode.PROBLEMS and "not a .log, .index, .timeindex or .txnindex file" in text
    with pytest.raises(SystemExit):
        main(["dump"])
    assert main(["dump", str(tmp_path / "missing.log")]) == ExitCode.ERROR


# ---------------------------------------------------------------------------------------- produce, consume

def test_produce_then_consume_round_trip_through_stdin_and_stdout(tmp_path, monkeypatch, capsys):
    with pylog.open(tmp_path) as store:
        store.create_topic("t", partitions=3)
    _stdin(monkeypatch, b"k1:hello\nk2:world\nk1:again\nk3:DEL\n")
    code, text = _run("produce", tmp_path, "t", "--key-separator", ":", "--header", "src=cli", "--null-marker", "DEL",
                      "--acks", "all")
    assert code == ExitCode.OK
    assert text.startswith("produced 4 record(s), 23 bytes, to t in ")
    code, text = _run("consume", tmp_path, "t", "--print-key", "--key-separator", ":", "--null-marker", "DEL")
    assert code == ExitCode.OK
    assert sorted(text.splitlines()) == ["k1:again", "k1:hello", "k2:world", "k3:DEL"]
    assert "Processed a total of 4 messages" in capsys.readouterr().err
    code, text = _run("consume", tmp_path, "t", "--print-offset", "--print-partition", "--print-headers",
                      "--print-timestamp", "--max-messages", "1")
    fields = text.rstrip("\n").split("\t")
    assert len(text.splitlines()) == 1 and fields[0].startswith("CreateTime:") and fields[1].startswith("Partition:")
    assert fields[2] == "Offset:0" and fields[3] == "src:cli"


def test_produce_and_consume_json_copy_every_field(tmp_path, monkeypatch):
    with pylog.open(tmp_path) as store:
        store.create_topic("src", partitions=2)
        store.create_topic("dst", partitions=2)
        store.topic("src").partition(1).append_values([b"\xff\x00binary", None, "text é".encode()],
                                                      keys=[b"a", None, b"\xfe"], timestamps=[111, 222, 333],
                                                      headers=[[("h", b"1"), ("h", None)], [], [("bin", b"\x80")]])
    code, text = _run("consume", tmp_path, "src", "--format", "json")
    docs = [json.loads(line) for line in text.splitlines()]
    assert code == ExitCode.OK and len(docs) == 3
    assert docs[0] == {"topic": "src", "partition": 1, "offset": 0, "timestamp": 111, "timestamp_type": "CreateTime",
                       "key": "a", "value": {"base64": "/wBiaW5hcnk="}, "headers": [["h", "1"], ["h", None]]}
    assert docs[1]["value"] is None and docs[2]["value"] == "text é" and docs[2]["key"] == {"base64": "/g=="}
    _stdin(monkeypatch, text.encode())
    code, summary = _run("produce", tmp_path, "dst", "--format", "json")
    assert code == ExitCode.OK and "partition 1: 3 record(s), offsets 0-2" in summary
    with pylog.open(tmp_path) as store:
        a = store.topic("src").partition(1).read(0)
        b = store.topic("dst").partition(1).read(0)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in a] == [(r.key, r.value, r.headers, r.timestamp) for r in b]


def test_produce_stops_at_a_bad_line_and_reports_what_it_sent(tmp_path, monkeypatch, capsys):
    with pylog.open(tmp_path) as store:
        store.create_topic("t")
    _stdin(monkeypatch, b"k:v\nno separator here\nk:w\n")
    code, text = _run("produce", tmp_path, "t", "--key-separator", ":")
    assert code == ExitCode.ERROR and "produced 1 record(s)" in text
    assert "stdin line 2: no key separator ':'" in capsys.readouterr().err
    _stdin(monkeypatch, b'{"value": "ok"}\n[1, 2]\n')
    assert _run("produce", tmp_path, "t", "--format", "json")[0] == ExitCode.ERROR
    assert "stdin line 2: not a JSON object" in capsys.readouterr().err
    _stdin(monkeypatch, b"x\n")
    assert _run("produce", tmp_path, "t", "--partition", "5")[0] == ExitCode.ERROR
    assert _run("produce", tmp_path, "nope")[0] == ExitCode.ERROR
    monkeypatch.setattr(sys, "stdin", io.StringIO("plain text stdin\n"))  # no .buffer underneath
    assert _run("produce", tmp_path, "t", "--acks", "0")[1].endswith("offsets not awaited (acks=0)\n")
    with pylog.open(tmp_path) as store:
        assert [r.value for r in store.topic("t").partition(0).read(0)] == [b"v", b"ok", b"plain text stdin"]


def test_consume_from_offset_timestamp_latest_and_partition(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("t", partitions=2)
        store.topic("t").partition(0).append_values([b"a", b"b", b"c", b"d"], timestamps=[10, 20, 30, 40])
        store.topic("t").partition(1).append_values([b"x"], timestamps=[25])
    assert _run("consume", tmp_path, "t", "--partition", "0", "--offset", "2")[1] == "c\nd\n"
    assert _run("consume", tmp_path, "t", "--partition", "0", "--offset", "99")[1] == ""
    assert sorted(_run("consume", tmp_path, "t", "--timestamp", "25")[1].split()) == ["c", "d", "x"]
    assert _run("consume", tmp_path, "t", "--from", "latest") == (ExitCode.OK, "")
    assert _run("consume", tmp_path, "t", "--partition", "1")[1] == "x\n"
    assert _run("consume", tmp_path, "t", "--partition", "7")[0] == ExitCode.ERROR
    assert _run("consume", tmp_path, "t", "--group", "g", "--partition", "0")[0] == ExitCode.USAGE


def test_consume_as_a_group_commits_what_it_printed(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("t", partitions=2)
        for p in range(2):
            store.topic("t").partition(p).append_values([b"%d-%d" % (p, i) for i in range(5)])
    code, first = _run("consume", tmp_path, "t", "--group", "g", "--max-messages", "3")
    assert code == ExitCode.OK and len(first.split()) == 3
    with pylog.open(tmp_path) as store:
        assert sum(lag.committed for lag in store.group_lag("g").values()) == 3
    code, rest = _run("consume", tmp_path, "t", "--group", "g")
    assert sorted(first.split() + rest.split()) == sorted(f"{p}-{i}" for p in range(2) for i in range(5))
    with pylog.open(tmp_path) as store:
        assert {tp: lag.lag for tp, lag in store.group_lag("g").items()} == {("t", 0): 0, ("t", 1): 0}
        assert not store.describe_consumer_group("g").members  # the member left
    assert _run("consume", tmp_path, "t", "--group", "g") == (ExitCode.OK, "")


def test_consume_follow_ends_cleanly_on_ctrl_c_and_commits(tmp_path, monkeypatch, capsys):
    with pylog.open(tmp_path) as store:
        store.create_topic("t").partition(0).append_values([b"a", b"b"])
    polls = []
    original = Consumer.poll

    def poll(self, *args, **kwargs):  # the third poll is interrupted, as by Ctrl-C while it waits
        polls.append(1)
        if len(polls) == 3:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Consumer, "poll", poll)
    assert _run("consume", tmp_path, "t", "--follow", "--group", "g") == (ExitCode.OK, "a\nb\n")
    assert "Processed a total of 2 messages" in capsys.readouterr().err
    with pylog.open(tmp_path) as store:
        assert store.committed_offsets("g")[TopicPartition("t", 0)].offset == 2


def test_consume_follow_ends_when_the_reader_of_its_output_goes_away(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("empty")
        store.create_topic("full").partition(0).append_values([b"a", b"b"])
    for topic in ("empty", "full"):  # waiting with nothing to write, and failing to write
        r, w = os.pipe()
        os.close(r)
        out = open(w, "w")
        assert main(["consume", str(tmp_path), topic, "--follow"], out) == ExitCode.OK
        if topic == "full":  # what could not be written is still buffered
            with pytest.raises(BrokenPipeError):
                out.close()
        out.close()


# ------------------------------------------------------------------------------------------------- groups

def _group_with_member(store):
    store.create_topic("t", partitions=2)
    for p in range(2):
        store.topic("t").partition(p).append_values([b"v"] * 10, timestamps=list(range(1000, 1010)))
    c = store.consumer("t", group_id="billing", auto_offset_reset="earliest", max_poll_records=3,
                       client_id="worker")
    c.poll(0)
    c.commit()
    return c


def test_groups_describe_shows_members_owners_and_lag(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        c = _group_with_member(store)
        member = store.describe_consumer_group("billing").members[0].member_id
        code, text = _run("groups", tmp_path)
        assert code == ExitCode.OK
        assert "billing  generation=1  strategy=range  members=1" in text
        assert f"  member {member} (client worker, pid {os.getpid()}): t-0,t-1" in text
        rows = [line.split() for line in text.splitlines() if line.startswith("t ")]
        assert ["t", "0", "3", "0", "10", "7", "3", member] in rows
        assert ["t", "1", "-", "0", "10", "-", "-", member] in rows  # assigned, nothing committed
        assert "  total lag 7" in text
        assert _run("groups", "describe", tmp_path, "billing") == (code, text)
        code, text = _run("groups", "list", tmp_path)
        assert text.splitlines()[1].split() == ["billing", "1", "range", "1", "1", "7"]
        c.close(autocommit=False)
    code, text = _run("groups", tmp_path, "billing")
    assert "members=0" in text
    assert [line.split() for line in text.splitlines() if line.startswith("t ")] == [["t", "0", "3", "0", "10", "7",
                                                                                      "3", "-"]]
    code, text = _run("groups", tmp_path, "nobody")
    assert code == ExitCode.OK and "no such group" in text and "total lag 0" in text
    assert not (tmp_path / "__consumer_groups" / "nobody").exists()


def test_groups_in_a_store_without_any(tmp_path):
    _store(tmp_path)
    assert _run("groups", "list", tmp_path)[1].startswith("no consumer groups")
    assert _run("groups", tmp_path, "x")[0] == ExitCode.OK
    assert not (tmp_path / "__consumer_offsets").exists()  # looking creates nothing


def test_groups_reset_offsets(tmp_path, capsys):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        c = _group_with_member(store)
        assert _run("groups", "reset-offsets", tmp_path, "billing", "--to-earliest", "--execute")[0] == ExitCode.PROBLEMS
        assert f"has 1 live member(s) (pid {os.getpid()}): stop them" in capsys.readouterr().err
        c.close(autocommit=False)
    code, text = _run("groups", "reset-offsets", tmp_path, "billing", "--to-latest")
    assert code == ExitCode.OK and "dry run: nothing committed" in text
    assert text.splitlines()[1].split() == ["t", "0", "0", "10", "3", "10"]

    def lag():
        with pylog.open(tmp_path) as store:
            return {tp.partition: v.committed for tp, v in store.group_lag("billing").items()}

    assert lag() == {0: 3}
    assert _run("groups", "reset-offsets", tmp_path, "billing", "--to-latest", "--execute")[0] == ExitCode.OK
    assert lag() == {0: 10}
    code, text = _run("groups", "reset-offsets", tmp_path, "billing", "--to-timestamp", "1004", "--topic", "t",
                      "--execute")
    assert code == ExitCode.OK and "committed new offsets for 2 partition(s) of group billing" in text
    assert lag() == {0: 4, 1: 4}
    _run("groups", "reset-offsets", tmp_path, "billing", "--to-offset", "99", "--topic", "t:1", "--execute")
    assert lag() == {0: 4, 1: 10}  # kept within the log
    _run("groups", "reset-offsets", tmp_path, "billing", "--to-earliest", "--execute")
    assert lag() == {0: 0, 1: 0}
    assert _run("groups", "reset-offsets", tmp_path, "other", "--to-earliest")[0] == ExitCode.ERROR
    assert "has no committed offsets: name the partitions with --topic" in capsys.readouterr().err
    assert _run("groups", "reset-offsets", tmp_path, "billing", "--to-earliest", "--topic", "t:9")[0] == ExitCode.ERROR
    assert _run("groups", "reset-offsets", tmp_path, "billing", "--to-earliest", "--topic", "t:x")[0] == ExitCode.USAGE


def test_groups_delete(tmp_path, capsys):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        c = _group_with_member(store)
        assert _run("groups", "delete", tmp_path, "billing")[0] == ExitCode.PROBLEMS
        assert "live member" in capsys.readouterr().err
        c.close(autocommit=False)
    assert _run("groups", "delete", tmp_path, "billing") == (ExitCode.OK, "deleted group billing (1 committed offset(s))\n")
    assert _run("groups", "delete", tmp_path, "billing")[0] == ExitCode.ERROR
    assert "no consumer group 'billing'" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- maintenance, health

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


def _old_segments(store, name, config):
    """A topic whose records are long past retention.ms (timestamps near the epoch), in several segments."""
    p = store.create_topic(name, config={"retention.ms": 1000, "segment.bytes": 1024, **config}).partition(0)
    for i in range(40):
        p.append_values([b"x" * 50], keys=[b"k%d" % (i % 3)], timestamps=[1000 + i])
    return p


def test_health_retention_overdue_is_a_problem_only_while_a_process_writes_the_partition(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        _old_segments(store, "old", {})
        code, text = _run("health", tmp_path)
        assert code == ExitCode.PROBLEMS
        row = next(line.split() for line in text.splitlines() if line.startswith("old-0"))
        assert row[:5] == ["old-0", "delete", "pid", str(os.getpid()), row[4]] and row[5] == "overdue"
        assert f"problem: old-0: {row[4]} segment(s)" in text
        assert f"pid {os.getpid()} writes it and runs no live cleaner (log_cleaner_enable=False" in text
        assert "cleaners: none published" in text
        assert text.rstrip().endswith("health: 1 problem(s)")
    code, text = _run("health", tmp_path)  # nobody writes it now: nobody maintains it
    assert code == ExitCode.OK and "warning: old-0:" in text and f"`pylog retention {tmp_path} old`" in text
    assert text.rstrip().endswith("health: ok")
    _run("retention", tmp_path)
    code, text = _run("health", tmp_path)
    assert code == ExitCode.OK and "warning" not in text
    assert next(line.split() for line in text.splitlines() if line.startswith("old-0"))[3] == "ok"


def test_health_compaction_and_lag_checks(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        _old_segments(store, "keys", {"cleanup.policy": "compact", "max.compaction.lag.ms": 1})
        c = _group_with_member(store)
        c.close()
        code, text = _run("health", tmp_path, "--max-lag", "100")
        assert code == ExitCode.PROBLEMS and "problem: keys-0: records older than max.compaction.lag.ms" in text
        row = next(line.split() for line in text.splitlines() if line.startswith("keys-0"))
        assert row[1] == "compact" and row[-1] == "never" and float(row[-2]) == 1.0
    code, text = _run("health", tmp_path, "--max-lag", "100")
    assert code == ExitCode.OK
    assert next(line.split() for line in text.splitlines() if line.startswith("billing")) == ["billing", "0", "7", "3"]
    code, text = _run("health", tmp_path, "--max-dirty-ratio", "0.5")
    assert code == ExitCode.PROBLEMS and "problem: keys-0: dirty ratio 1.00 > 0.5" in text
    _run("compact", tmp_path, "keys")
    code, text = _run("health", tmp_path, "--max-dirty-ratio", "0.5", "--max-lag", "6", "--group", "billing")
    assert code == ExitCode.PROBLEMS and text.count("problem:") == 1
    assert "problem: group billing: total lag 7 > --max-lag 6" in text
    assert next(line.split() for line in text.splitlines() if line.startswith("keys-0"))[-1].endswith("Z")
    _run("delete-records", tmp_path, "t", "0", "5")  # past the group's committed offset 3
    code, text = _run("health", tmp_path)
    assert code == ExitCode.PROBLEMS
    assert "group billing: t-0 committed offset 3 is below the log start 5: 2 record(s) were deleted" in text


def test_health_of_an_empty_store(tmp_path):
    pylog.open(tmp_path).close()
    code, text = _run("health", tmp_path)
    assert code == ExitCode.OK and "no topics in" in text and "health: ok" in text


# -------------------------------------------------------------------------------------------------- bench

@pytest.mark.parametrize("kind", ["producer", "consumer", "latency"])
def test_bench_with_tiny_sizes(tmp_path, kind):
    store = tmp_path / "bench"
    code, text = _run("bench", kind, store, "--records", "50", "--record-size", "10", "--json")
    doc = json.loads(text)
    assert code == ExitCode.OK and doc["benchmark"] == kind and doc["records"] == 50 and doc["bytes"] >= 500
    assert doc["records_per_sec"] > 0 and set(doc["latency_ms"]) == {"avg", "p50", "p95", "p99", "p99.9", "max"}
    assert doc["latency_ms"]["p50"] <= doc["latency_ms"]["max"]
    code, text = _run("bench", kind, store, "--records", "20")
    assert code == ExitCode.OK and text.startswith("20 ") and " 99.9th." in text


def test_bench_producer_throughput_cap_and_consumer_of_an_existing_topic(tmp_path, capsys):
    code, text = _run("bench", "producer", tmp_path, "--topic", "perf", "--keep", "--records", "30",
                      "--throughput", "1000000", "--acks", "all", "--compression", "lz4", "--partitions", "2")
    assert code == ExitCode.OK and text.startswith("30 records sent, ")
    assert f"benchmark topic perf in {tmp_path} (kept (--keep))" in capsys.readouterr().err
    code, text = _run("bench", "consumer", tmp_path, "--topic", "perf", "--records", "100")  # only 30 there
    assert code == ExitCode.OK and text.startswith("30 records consumed in ")
    assert "benchmark topic" not in capsys.readouterr().err  # an existing topic: used and kept, nothing said
    with pylog.open(tmp_path) as store:
        assert store.topics() == ["perf"]


@pytest.mark.parametrize("kind", ["producer", "consumer", "latency"])
def test_bench_writes_to_a_temporary_topic_and_says_where(tmp_path, capsys, kind):
    code, _ = _run("bench", kind, tmp_path, "--records", "20")
    err = capsys.readouterr().err
    assert code == ExitCode.OK and f" in {tmp_path} (deleted afterwards; --keep keeps it)" in err
    with pylog.open(tmp_path) as store:
        assert store.topics() == []  # deleted
    code, _ = _run("bench", kind, tmp_path, "--records", "20", "--keep")
    name = capsys.readouterr().err.split("benchmark topic ")[1].split()[0]
    with pylog.open(tmp_path) as store:
        assert store.topics() == [name] and name.startswith("pylog-bench-")


def test_topics_hide_internal_topics_unless_all(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("orders")
        store.commit_offsets("g", {("orders", 0): 0})  # creates __consumer_offsets
        assert "__consumer_offsets" in store.topics()
    for action in ("list", "describe"):
        code, text = _run("topics", action, tmp_path)
        assert code == ExitCode.OK and "orders" in text and "__consumer_offsets" not in text
        code, text = _run("topics", action, tmp_path, "--all")
        assert code == ExitCode.OK and "__consumer_offsets" in text


def test_consume_from_past_the_end_says_so_and_fails_without_follow(tmp_path, capsys):
    _store(tmp_path)
    code, text = _run("consume", tmp_path, "events", "--offset", "999999")
    err = capsys.readouterr().err
    assert code == ExitCode.ERROR and text == ""
    assert "offset 999999: past the end of events-0 (log end 1000), events-1 (log end 0)" in err and "--follow" in err
    code, text = _run("consume", tmp_path, "events", "--offset", "500")  # past the end of events-1 only
    err = capsys.readouterr().err
    assert code == ExitCode.OK and len(text.splitlines()) == 500 and "past the end of events-1 (log end 0)" in err
    code, text = _run("consume", tmp_path, "events", "--timestamp", "4102444800000")  # 2100: no record after it
    assert code == ExitCode.ERROR and "no record at or after the timestamp" in capsys.readouterr().err


def test_every_command_help_shows_an_example(capsys):
    from pylog import cli
    from pylog.cli import EXAMPLES, build_parser
    seen = []

    def walk(parser, words):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    seen.append(" ".join(words + [name]))
                    assert sub.format_help().rstrip().endswith(EXAMPLES[" ".join(words + [name])]), name
                    walk(sub, words + [name])
    walk(build_parser(), [])
    assert sorted(seen) == sorted(EXAMPLES) and len(seen) > 20
    for example in EXAMPLES.values():  # each one parses as written
        argv = example.split("| ")[-1].split()[1:]
        build_parser().parse_args(cli.with_default_action([a.strip("'") for a in argv]))


# ------------------------------------------------------------------------------------ terminal rendering

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tables_are_rich_on_a_terminal_and_plain_elsewhere():
    pytest.importorskip("rich")
    table = output.Table("NAME", "COUNT")
    table.add_row("a[b]", 1)
    table.add_row(None, 22)
    plain = io.StringIO()
    table.print(plain)
    assert plain.getvalue() == "NAME  COUNT\na[b]  1\n-     22\n"
    term = _Terminal()
    table.print(term)
    assert "┃" in term.getvalue() and "a[b]" in term.getvalue()  # box drawing; '[b]' is not markup


@pytest.mark.parametrize("with_rich", [True, False])
def test_verify_shows_progress_on_a_terminal_only(tmp_path, monkeypatch, with_rich):
    if with_rich:
        pytest.importorskip("rich")
    else:
        for name in ["rich", "rich.console", "rich.progress"] + [m for m in sys.modules if m.startswith("rich.")]:
            monkeypatch.setitem(sys.modules, name, None)  # import rich fails: the plain indicator
    _store(tmp_path)
    monkeypatch.setattr(output, "PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(output, "_PLAIN_REDRAW", 0.0)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    code, text = _run("verify", tmp_path)
    assert code == ExitCode.OK and "verify: no problems" in text and "\r" not in text
    drawn = sys.stderr.getvalue()
    assert "verify" in drawn and ("100%" in drawn)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: nothing drawn
    _run("verify", tmp_path)
    assert sys.stderr.getvalue() == ""
