"""pylog against the golden files of its on-disk format (tests/golden/, see make_golden.py there).

The golden files are written from docs/FORMAT.md by an independent script that never imports pylog. Here
pylog must (1) read each of them and get exactly what manifest.json says they hold, through the decoders
and through a real store opened on a copy; (2) write the very same bytes from the same inputs, through its
encoders and through a store's own appends and close; and (3) the script, run again, must write the
committed bytes, so the files, the script and the spec cannot drift apart unnoticed.
"""

from __future__ import annotations

import ast
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pylog
from pylog.errors import CorruptRecordError, RemoteDataCorruptError
from pylog.storage.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from pylog.maintenance.cleaner_status import CleanerStatus
from pylog.maintenance.cleaner_registry import PublishedCleaner, _read_status
from pylog.maintenance.compaction import CleanerCheckpoint, read_cleaner_checkpoint
from pylog.storage.swap import read_manifest, write_manifest
from pylog.storage.fileio import checked, decode_doc, encode_doc, unchecked
from pylog.clients.groups import _read_state
from pylog.clients.offsets import decode_commit, offset_key
from pylog.index import OffsetIndex, TimeIndex
from pylog.storage.producer_state import ProducerEntry, ProducerState
from pylog.storage.txn_index import append_index, marker_record, parse_marker, read_index, truncate_index
from pylog.storage.txn_state import decode_state, state_key, state_value
from pylog.storage.remote.group_offsets import decode_group_offsets, encode_group_offsets
from pylog.storage.remote.manifest import TXNINDEX_UNKNOWN, decode_manifest, encode_manifest
from pylog.clients.consumer import ConsumerRecord
from pylog.storage.records import (CODEC_LZ4, BatchView, RecordColumns, encode_batch, parse_header,
                                   stamp_base_offset, views)
from pylog.structs import TopicPartition
from pylog.topic import read_topic_file, write_topic_file

GOLDEN = Path(__file__).parent / "golden"
SCRIPT = GOLDEN / "make_golden.py"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
STORE = MANIFEST["store"]
SEGMENT = "00000000000000000000"


def _raw(rel: str) -> bytes:
    return (GOLDEN / rel).read_bytes()


def _b(h: str | None) -> bytes | None:
    return None if h is None else bytes.fromhex(h)


def _as_manifest(records: list, topic: str | None = None, partition: int = -1) -> list[dict]:
    """pylog Records in the manifest's notation (hex bytes), checking topic and partition on the way."""
    out = []
    for r in records:
        assert (r.topic, r.partition) == (topic, partition)
        out.append({"offset": r.offset, "timestamp": r.timestamp, "timestamp_type": r.timestamp_type,
                    "key": None if r.key is None else r.key.hex(), "value": None if r.value is None else r.value.hex(),
                    "headers": [[k, None if v is None else v.hex()] for k, v in r.headers]})
    return out


def _store_files() -> list[str]:
    """Paths, relative to the golden store, of every file in it."""
    root = GOLDEN / STORE["path"]
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _copy_store(tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(GOLDEN / STORE["path"], dst)
    return dst


# ------------------------------------------------------------------------------------- the generator

def test_generator_imports_nothing_but_the_standard_library_crc32c_and_lz4():
    allowed = {"__future__", "argparse", "json", "os", "struct", "sys", "crc32c", "lz4.block"}
    imported = set()
    for node in ast.walk(ast.parse(SCRIPT.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported and imported <= allowed, imported - allowed


def test_generator_rerun_writes_exactly_the_committed_files(tmp_path):
    out = tmp_path / "golden"
    # Run as a program, then list which pylog modules it loaded (none may be).
    code = ("import runpy, sys\n"
            f"sys.argv = [{str(SCRIPT)!r}, '--out', {str(out)!r}]\n"
            "try:\n"
            f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print(sorted(m for m in sys.modules if m == 'pylog' or m.startswith('pylog.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    committed = sorted(str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*")
                       if p.is_file() and p.name != "make_golden.py" and "__pycache__" not in p.parts)
    assert written == committed
    for rel in written:
        assert (out / rel).read_bytes() == (GOLDEN / rel).read_bytes(), rel


def test_golden_files_are_small():
    for p in GOLDEN.rglob("*"):
        if p.is_file() and p.suffix != ".py" and p.name != "manifest.json" and "__pycache__" not in p.parts:
            assert p.stat().st_size <= 4096, p


# ------------------------------------------------------------------------------------------ batches

BATCHES = sorted(MANIFEST["batches"])


def test_the_batches_cover_every_header_feature():
    attrs = [MANIFEST["batches"][n]["header"]["attributes"] for n in BATCHES]
    for bit in (CODEC_LZ4, 1 << 3, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8, 1 << 9):
        assert any(a & bit for a in attrs), bit
    assert any(not a & (1 << 6) for a in attrs)  # and a batch without a key column
    assert any(MANIFEST["batches"][n]["header"]["producer_id"] >= 0 for n in BATCHES)
    values = [r["value"] for n in BATCHES for r in MANIFEST["batches"][n]["records"]]
    keys = [r["key"] for n in BATCHES for r in MANIFEST["batches"][n]["records"]]
    assert None in values and "" in values and None in keys and "" in keys


@pytest.mark.parametrize("name", BATCHES)
def test_pylog_decodes_each_golden_batch_to_the_manifest(name):
    want = MANIFEST["batches"][name]
    raw = _raw(want["file"])
    assert parse_header(raw)._asdict() == want["header"]
    view = BatchView.from_buffer(raw)
    assert _as_manifest(view.records()) == want["records"]
    cols = RecordColumns.concat_views([(view, 0, view.count)], "t", 3)
    assert _as_manifest(cols.to_records(), "t", 3) == want["records"]
    assert cols.offsets.tolist() == [r["offset"] for r in want["records"]]


def _encode_options(spec: dict) -> dict:
    opts: dict = {"base_offset": spec["base_offset"]}
    if spec.get("compression") == "lz4":
        opts["codec"] = CODEC_LZ4
    if "append_time" in spec:
        opts.update(log_append_time=True, default_timestamp=spec["append_time"])
    if spec.get("producer"):
        opts.update(producer_id=spec["producer"][0], producer_epoch=spec["producer"][1],
                    base_sequence=spec["producer"][2])
    if spec.get("control"):
        opts["control"] = True
    if spec.get("transactional"):
        opts["transactional"] = True
    if spec.get("offset_deltas"):
        opts["offset_deltas"] = np.array(spec["offset_deltas"], np.int32)
    return opts


@pytest.mark.parametrize("name", BATCHES)
def test_pylog_encodes_each_golden_batch_byte_for_byte(name):
    want = MANIFEST["batches"][name]
    spec = want["encode"]
    keys = None if spec.get("keys") is None else [_b(k) for k in spec["keys"]]
    headers = None if spec.get("headers") is None else [[(k, _b(v)) for k, v in row] for row in spec["headers"]]
    got = encode_batch([_b(v) for v in spec["values"]], keys, spec.get("timestamps"), headers,
                       **_encode_options(spec))
    assert got == _raw(want["file"])


def test_consumer_offset_records_decode_to_the_manifest_commits():
    want = MANIFEST["batches"]["consumer_offsets"]
    records = BatchView.from_buffer(_raw(want["file"])).records()
    got = []
    for r, c in zip(records, want["commits"], strict=True):
        (group, topic, partition), om = decode_commit(r.key, r.value)
        assert r.key == offset_key(group, TopicPartition(topic, partition))
        got.append({"group": group, "topic": topic, "partition": partition,
                    "offset": None if om is None else om.offset, **({} if om is None else {"metadata": om.metadata})})
    assert got == [{k: v for k, v in c.items() if k in ("group", "topic", "partition", "offset", "metadata")}
                   for c in want["commits"]]


# -------------------------------------------------------------------------------------------- store

def test_pylog_opens_the_golden_store_and_reads_exactly_the_manifest_records(tmp_path):
    root = _copy_store(tmp_path)
    with pylog.open(root) as store:
        assert store.topics() == [STORE["topic"]]
        p = store.topic(STORE["topic"]).partition(STORE["partition"])
        assert (p.log_start_offset, p.log_end_offset) == (STORE["log_start_offset"], STORE["log_end_offset"])
        assert _as_manifest(p.read(0, max_records=1000), STORE["topic"], 0) == STORE["records"]
        for r in STORE["records"]:  # through the offset index, from every offset
            assert _as_manifest(p.read(r["offset"], max_records=1), STORE["topic"], 0) == [r]
        cols = p.read_columns(0)
        assert _as_manifest(cols.to_records(), STORE["topic"], 0) == STORE["records"]
        assert p.check() == []
        # Through the time index: the first record at or after each timestamp.
        for ts in sorted({r["timestamp"] for r in STORE["records"]}):
            first = min(r["offset"] for r in STORE["records"] if r["timestamp"] >= ts)
            assert p.offset_for_timestamp(ts) == first
    # Reading changed nothing.
    for rel in _store_files():
        assert (root / rel).read_bytes() == (GOLDEN / STORE["path"] / rel).read_bytes(), rel


def test_a_writer_continues_the_golden_store_from_its_checkpoint_and_producer_snapshot(tmp_path):
    root = _copy_store(tmp_path)
    end = STORE["log_end_offset"]
    first_call = STORE["appends"][0]
    with pylog.open(root) as store:
        p = store.topic(STORE["topic"]).partition(0)
        # A retry of the first producer call is a duplicate: the snapshot remembers it.
        assert p.append_values([_b(v) for v in first_call["values"]], keys=[_b(k) for k in first_call["keys"]],
                               timestamps=first_call["timestamps"], producer=tuple(first_call["producer"])) == 0
        with pytest.raises(pylog.OutOfOrderSequenceError):
            p.append_values([b"gap"], timestamps=[1], producer=(7, 2, 9))
        assert p.append_values([b"next"], timestamps=[1], producer=(7, 2, 6)) == end
        assert _as_manifest(p.read(0, max_records=1000)[:end], STORE["topic"], 0) == STORE["records"]
    log = (root / STORE["topic"] / "0" / f"{SEGMENT}.log").read_bytes()
    golden_log = _raw(f"{STORE['path']}/{STORE['topic']}/0/{SEGMENT}.log")
    assert log[:len(golden_log)] == golden_log and len(log) > len(golden_log)


def _append_manifest_calls(p: pylog.Partition) -> None:
    offset = 0
    for call in STORE["appends"]:
        assert p.append_values(
            [_b(v) for v in call["values"]], keys=None if "keys" not in call else [_b(k) for k in call["keys"]],
            timestamps=call["timestamps"],
            headers=None if "headers" not in call else [[(k, _b(v)) for k, v in row] for row in call["headers"]],
            producer=None if "producer" not in call else tuple(call["producer"]),
            compression=call.get("compression")) == offset
        offset += len(call["values"])


def test_a_store_appending_the_manifest_calls_writes_the_golden_files_byte_for_byte(tmp_path):
    root = tmp_path / "store"
    with pylog.open(root) as store:
        _append_manifest_calls(store.create_topic(STORE["topic"], config=STORE["config"]).partition(0))
    for rel in _store_files():
        assert (root / rel).read_bytes() == (GOLDEN / STORE["path"] / rel).read_bytes(), rel


def test_a_writer_handing_over_leaves_the_golden_live_indexes(tmp_path):
    want_o, want_t = MANIFEST["files"]["live.index"], MANIFEST["files"]["live.timeindex"]
    root = tmp_path / "store"
    with pylog.open(root) as store:
        p = store.create_topic(STORE["topic"], config={**STORE["config"], **want_o["config"]}).partition(0)
        _append_manifest_calls(p)
        p.release_writer()
        part = root / STORE["topic"] / "0"
        assert (part / f"{SEGMENT}.index").read_bytes() == _raw(want_o["file"])
        assert (part / f"{SEGMENT}.timeindex").read_bytes() == _raw(want_t["file"])
        assert (part / f"{SEGMENT}.log").read_bytes() == _raw(f"{STORE['path']}/{STORE['topic']}/0/{SEGMENT}.log")
        for name in ("partition.checkpoint", "producer.snapshot"):  # a clean checkpoint, as close leaves it
            assert (part / name).read_bytes() == _raw(f"{STORE['path']}/{STORE['topic']}/0/{name}"), name
    # And a reader counts the live entries by column B (the header's count is 0).
    for cls, want in ((OffsetIndex, want_o), (TimeIndex, want_t)):
        idx = cls.open(str(GOLDEN / want["file"]), 0)
        try:
            assert not idx.sealed
            a, b = idx.entries()
            assert [[int(x), int(y)] for x, y in zip(a, b)] == want["entries"]
        finally:
            idx.close()


def test_indexes_rebuilt_from_the_golden_log_are_the_golden_indexes(tmp_path):
    root = _copy_store(tmp_path)
    part = root / STORE["topic"] / "0"
    for suffix in (".index", ".timeindex"):
        (part / (SEGMENT + suffix)).unlink()
    (part / "partition.checkpoint").unlink()  # no checkpoint: the writer re-validates every batch
    with pylog.open(root) as store:
        p = store.topic(STORE["topic"]).partition(0)
        assert p.try_become_writer()
        assert _as_manifest(p.read(0, max_records=1000), STORE["topic"], 0) == STORE["records"]
    for rel in _store_files():
        assert (root / rel).read_bytes() == (GOLDEN / STORE["path"] / rel).read_bytes(), rel


# ------------------------------------------------------------------------------------------ indexes

@pytest.mark.parametrize("kind", ["offset_index", "time_index"])
def test_pylog_reads_and_writes_the_golden_indexes(tmp_path, kind):
    cls = OffsetIndex if kind == "offset_index" else TimeIndex
    want = STORE[kind]
    idx = cls.open(str(GOLDEN / want["file"]), 0)
    try:
        assert idx.sealed and idx.max_timestamp == want["max_timestamp"]
        a, b = idx.entries()
        assert [[int(x), int(y)] for x, y in zip(a, b)] == want["entries"]
    finally:
        idx.close()
    out = tmp_path / "out"
    a = np.array([e[0] for e in want["entries"]], cls.A)
    b = np.array([e[1] for e in want["entries"]], cls.B)
    cls.write_file(str(out), 0, a, b, len(a), sealed=True, max_timestamp=want["max_timestamp"])
    assert out.read_bytes() == _raw(want["file"])


# ------------------------------------------------------------------------------- small metadata files

@pytest.mark.parametrize("where", ["store", "files"])
def test_pylog_reads_and_writes_the_golden_checkpoints(tmp_path, where):
    want = STORE["checkpoint"] if where == "store" else MANIFEST["files"]["partition.checkpoint"]
    cp = read_checkpoint(str(GOLDEN / want["file"]))
    expected = Checkpoint(want["recovery_point"], want["log_start_offset"], want["clean"], want["swap_generation"])
    assert cp == expected
    write_checkpoint(str(tmp_path / "cp"), expected, durable=False)
    assert (tmp_path / "cp").read_bytes() == _raw(want["file"])


def test_pylog_reads_and_writes_the_golden_producer_snapshot(tmp_path):
    want = STORE["producer_snapshot"]
    state, offset = ProducerState.read_snapshot(str((GOLDEN / want["file"]).parent))
    assert offset == want["offset"]
    assert [[pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]] for pid, e in state.producers.items()] \
        == want["producers"]
    mine = ProducerState()
    for pid, epoch, ts, batches in want["producers"]:
        mine.producers[pid] = ProducerEntry(epoch, [tuple(b) for b in batches], ts)
    mine.write_snapshot(str(tmp_path), want["offset"], durable=False)
    assert (tmp_path / "producer.snapshot").read_bytes() == _raw(want["file"])


def test_pylog_reads_and_writes_the_golden_snapshot_with_an_open_transaction(tmp_path):
    want = MANIFEST["files"]["txn.producer.snapshot"]
    (tmp_path / "producer.snapshot").write_bytes(_raw(want["file"]))
    state, offset = ProducerState.read_snapshot(str(tmp_path))
    assert offset == want["offset"]
    assert [[pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]]
            + ([e.txn_first_offset, e.coordinator_epoch] if e.txn_first_offset >= 0 else [])
            for pid, e in state.producers.items()] == want["producers"]
    assert state.ongoing() == {12: 325} and state.last_stable_offset(want["offset"]) == 325
    (tmp_path / "producer.snapshot").unlink()
    state.write_snapshot(str(tmp_path), want["offset"], durable=False)
    assert (tmp_path / "producer.snapshot").read_bytes() == _raw(want["file"])


def test_pylog_reads_and_writes_the_golden_aborted_transaction_index(tmp_path):
    want = MANIFEST["files"]["aborted.txnindex"]
    entries = read_index(str(GOLDEN / want["file"]))
    assert [e._asdict() for e in entries] == want["entries"]
    path = str(tmp_path / "x.txnindex")
    for e in entries:
        append_index(path, e)
    assert (tmp_path / "x.txnindex").read_bytes() == _raw(want["file"])
    # A torn last entry ends the readable ones of the active segment's index (a sealed one has whole entries
    # only: there it is damage); a writer cuts it (and entries past the log end) away.
    (tmp_path / "x.txnindex").write_bytes(_raw(want["file"])[:-5])
    assert read_index(path, active=True) == entries[:1]
    with pytest.raises(CorruptRecordError, match="torn entry"):
        read_index(path)
    assert truncate_index(path, 311) == entries[:1]
    assert (tmp_path / "x.txnindex").read_bytes() == _raw(want["file"])[:8 + 36]


def test_the_golden_commit_marker_is_pylogs_marker_record():
    want = MANIFEST["batches"]["commit_marker"]
    view = BatchView.from_buffer(_raw(want["file"]))
    assert view.header.is_control and view.header.is_transactional
    rec = view.records()[0]
    assert parse_marker(rec.key, rec.value) == (True, 5)
    assert marker_record(True, 5) == (rec.key, rec.value)


def test_pylog_reads_and_writes_the_golden_topic_file_and_store_marker(tmp_path):
    want = STORE["topic_file"]
    doc = read_topic_file(str((GOLDEN / want["file"]).parent))
    assert (doc["name"], doc["partitions"], doc["config"]) == (STORE["topic"], want["partitions"], want["config"])
    write_topic_file(str(tmp_path), STORE["topic"], want["partitions"], want["config"])
    assert (tmp_path / "topic.json").read_bytes() == _raw(want["file"])
    pylog.open(tmp_path / "s").close()
    assert (tmp_path / "s" / "pylog.store").read_bytes() == _raw(STORE["store_marker"]["file"])


def test_pylog_reads_and_writes_the_golden_cleaner_checkpoint(tmp_path):
    want = MANIFEST["files"]["cleaner.checkpoint"]
    shutil.copy(GOLDEN / want["file"], tmp_path / "cleaner.checkpoint")
    assert [list(h) for h in read_cleaner_checkpoint(str(tmp_path)).horizons] == want["horizons"]
    assert checked(CleanerCheckpoint([tuple(h) for h in want["horizons"]]).encode()) == _raw(want["file"])


def test_pylog_reads_and_writes_the_golden_cleaner_checkpoint_with_transaction_horizons(tmp_path):
    want = MANIFEST["files"]["txn.cleaner.checkpoint"]
    shutil.copy(GOLDEN / want["file"], tmp_path / "cleaner.checkpoint")
    cp = read_cleaner_checkpoint(str(tmp_path))
    assert [list(h) for h in cp.horizons] == want["horizons"]
    assert [list(h) for h in cp.txn_horizons] == want["txn_horizons"]
    assert checked(CleanerCheckpoint([tuple(h) for h in want["horizons"]],
                                     [tuple(h) for h in want["txn_horizons"]]).encode()) == _raw(want["file"])


def test_pylog_reads_and_writes_the_golden_swap_manifest(tmp_path):
    want = MANIFEST["files"]["cleaner.swap"]
    shutil.copy(GOLDEN / want["file"], tmp_path / "cleaner.swap")
    assert [[new, old] for new, old in read_manifest(str(tmp_path))] == want["groups"]
    out = tmp_path / "out"
    out.mkdir()
    write_manifest(str(out), [(new, old) for new, old in want["groups"]])
    assert (out / "cleaner.swap").read_bytes() == _raw(want["file"])


def test_pylog_takes_the_next_producer_id_from_the_golden_file(tmp_path):
    want = MANIFEST["files"]["producer.ids"]
    root = tmp_path / "s"
    pylog.open(root).close()
    shutil.copy(GOLDEN / want["file"], root / "producer.ids")
    with pylog.open(root) as store:
        assert store.new_producer_id() == want["next_id"]
    body = struct.pack("<q", want["next_id"] + 1)
    assert (root / "producer.ids").read_bytes() == checked(body)


def _store_with_golden_file(tmp_path, name, file_name):
    """A new store at tmp_path/store holding golden file ``name`` as its ``file_name``: (root, manifest, raw)."""
    want = MANIFEST["files"][name]
    raw = _raw(want["file"])
    root = tmp_path / "store"
    pylog.open(root).close()
    (root / file_name).write_bytes(raw)
    return root, want, raw


def test_pylog_reads_and_writes_the_golden_acl_file(tmp_path):
    root, want, raw = _store_with_golden_file(tmp_path, "acls", "__acls")
    with pylog.open(root) as store:
        entries = store.acls()
        assert [list(e) for e in entries] == want["document"]["acls"]
        store.replace_acls(entries)
    assert (root / "__acls").read_bytes() == raw


@pytest.mark.parametrize("name", ["group.state", "group.member", "cleaner.status"])
def test_pylog_reads_and_writes_the_golden_group_and_cleaner_status_files(name):
    want = MANIFEST["files"][name]
    raw = _raw(want["file"])
    magic = want["magic"].encode()
    assert decode_doc(magic, 1, unchecked(raw, want["file"], name), want["file"], name) == want["document"]
    if name == "group.state":
        assert _read_state(str(GOLDEN / want["file"])) == want["document"]
    if name == "cleaner.status":
        entry = PublishedCleaner("4242-golden", 4242, False)
        _read_status(str(GOLDEN / want["file"]), entry)
        assert entry.error is None
        assert (entry.heartbeat, list(entry.partitions)) == (want["document"]["heartbeat"],
                                                             want["document"]["partitions"])
        assert entry.status == CleanerStatus(**want["document"]["status"])
    assert checked(encode_doc(magic, 1, want["document"])) == raw


def test_the_many_headers_batch_pylog_0_1_0_wrote_and_could_not_read_reads_back_on_both_paths():
    # pylog <= 0.1.0 wrote exactly these bytes for this input (the byte-for-byte test above holds its
    # encoder to them) and then raised "17 exceeds max_array_len(16)" on every read of them.
    want = MANIFEST["batches"]["many_headers"]
    assert max(len(r["headers"]) for r in want["records"]) > 16
    assert max(len(r["headers"]) for r in want["records"]) > len(want["records"])
    view = BatchView.from_buffer(_raw(want["file"]))
    paths = [(views.records_pure, views.consumer_rows_pure)]
    if views.batch_layout_native is not None:
        paths.append((views.records_native, views.consumer_rows_native))
    for records, rows in paths:
        assert _as_manifest(records(view)) == want["records"]
        got = rows([(view, 0, view.count)], "t", 0, ConsumerRecord)
        assert [[[k, None if v is None else v.hex()] for k, v in r.headers] for r in got] == \
            [r["headers"] for r in want["records"]]


def test_a_store_holding_the_many_headers_batch_reads_it_and_verifies_clean(tmp_path):
    want = MANIFEST["batches"]["many_headers"]
    raw = bytearray(_raw(want["file"]))
    stamp_base_offset(raw, 0)  # a partition's first batch
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("t")
    with open(tmp_path / "t" / "0" / f"{SEGMENT}.log", "wb") as f:
        f.write(raw)  # as the old version left it
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.topic("t").partition(0)
        assert [[[k, None if v is None else v.hex()] for k, v in r.headers] for r in p.read(0)] == \
            [r["headers"] for r in want["records"]]
        assert p.check() == []


def test_pylog_reads_and_writes_the_golden_coordinator_groups_file(tmp_path):
    """pylog serve's saved groups (docs/FORMAT.md): decoded to the manifest's document, and encoded from it
    byte for byte (bin fields are hex in the manifest)."""
    from pylog.storage.group_state import SavedGroup, SavedMember, decode_groups, encode_groups, read_groups
    want = MANIFEST["files"]["coordinator.groups"]
    raw = _raw(want["file"])
    groups = decode_groups(unchecked(raw, want["file"], "coordinator groups"), want["file"])
    doc = want["document"]["groups"]
    assert [g.group_id for g in groups] == [d["group_id"] for d in doc]
    for g, d in zip(groups, doc):
        assert (g.generation, g.protocol_type, g.protocol_name, g.leader) == \
            (d["generation"], d["protocol_type"], d["protocol_name"], d["leader"])
        assert g.members == [SavedMember(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                                         m["session_timeout_ms"], m["rebalance_timeout_ms"],
                                         [(n, bytes.fromhex(meta)) for n, meta in m["protocols"]],
                                         bytes.fromhex(m["assignment"])) for m in d["members"]]
    assert all(isinstance(g, SavedGroup) for g in groups)
    assert checked(encode_groups(groups)) == raw
    store_dir = tmp_path / "s"
    (store_dir / "__consumer_groups").mkdir(parents=True)
    shutil.copy(GOLDEN / want["file"], store_dir / "__consumer_groups" / ".coordinator")
    assert read_groups(str(store_dir)) == groups


def test_pylog_reads_and_writes_the_golden_client_quota_file(tmp_path):
    root, want, raw = _store_with_golden_file(tmp_path, "quotas", "__quotas")
    with pylog.open(root) as store:
        changes = store.client_quota_changes()
        assert [[u, c, q] for (u, c), q in changes.items()] == want["document"]["quotas"]
        store.replace_client_quota_changes(changes)
    assert (root / "__quotas").read_bytes() == raw


def test_pylog_reads_and_writes_the_golden_remote_manifest():
    want = MANIFEST["files"]["remote.manifest"]
    raw = _raw(want["file"])
    m = decode_manifest(raw, "s3://golden/events/0/remote.manifest")
    doc = want["document"]
    assert (m.topic, m.partition, m.epoch, m.log_start_offset) == (doc["topic"], doc["partition"], doc["epoch"],
                                                                   doc["log_start_offset"])
    assert [s.fields() for s in m.segments] == doc["segments"]
    assert encode_manifest(m) == raw
    assert m.segments[1].txnindex_size == len(_raw("files/aborted.txnindex"))
    # The first entry describes the golden store's own segment and snapshot, as shipping it would.
    part = GOLDEN / "store" / STORE["topic"] / "0"
    log = (part / ("0" * 20 + ".log")).read_bytes()
    assert (m.segments[0].log_size, m.segments[0].end_offset) == (len(log), STORE["log_end_offset"])


def test_pylog_reads_a_version_1_golden_remote_manifest_with_its_indexes_unknown():
    want = MANIFEST["files"]["remote.manifest.v1"]
    m = decode_manifest(_raw(want["file"]), "s3://golden/events/0/remote.manifest")
    assert [s.fields()[:11] for s in m.segments] == want["document"]["segments"]
    assert {(s.txnindex_size, s.txnindex_crc) for s in m.segments} == {(TXNINDEX_UNKNOWN, 0)}
    again = decode_manifest(encode_manifest(m), "s3://golden/events/0/remote.manifest")  # rewritten as version 2
    assert again == m and encode_manifest(m)[4] == 2


def test_pylog_reads_and_writes_the_golden_group_offsets_object():
    want = MANIFEST["files"]["group.offsets"]
    raw = _raw(want["file"])
    got = decode_group_offsets(raw, "s3://golden/group.offsets")
    assert sorted([g, tp.topic, tp.partition, *om] for g, offsets in got.items() for tp, om in offsets.items()) \
        == want["document"]["offsets"]
    assert encode_group_offsets(got) == raw
    for bad in (raw[:-1] + bytes([raw[-1] ^ 1]), raw[:10], b"PLGO\x02" + raw[5:]):
        with pytest.raises(RemoteDataCorruptError):
            decode_group_offsets(bad, "s3://golden/group.offsets")


def test_pylog_reads_and_writes_the_golden_transaction_state_record():
    want = MANIFEST["files"]["txn.state"]
    key, value = _raw(want["key_file"]), _raw(want["file"])
    tid, meta = decode_state(key, value)
    assert tid == want["transactional_id"]
    assert (meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state), meta.start_ms, meta.update_ms,
            meta.coordinator_epoch) == (want["producer_id"], want["producer_epoch"], want["timeout_ms"],
                                        want["state"], want["start_ms"], want["update_ms"], want["coordinator_epoch"])
    assert sorted(meta.partitions) == [tuple(tp) for tp in want["partitions"]]
    assert sorted(meta.groups) == want["groups"]
    assert state_key(tid) == key and state_value(meta) == value
