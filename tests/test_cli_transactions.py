"""The CLI's transaction views: `pylog transactions`, the LSO column of `pylog topics describe`,
`pylog consume --isolation-level`, `pylog dump`'s markers, ``--isolation-level read_committed`` and .txnindex
files, `pylog compact`'s counts. In-process, as tests/test_cli.py."""

from __future__ import annotations

import io

import pytest

import pylog
from pylog.__main__ import ExitCode, main
from pylog.partition import internals

TOPIC = "t"


def _run(*argv: object) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(a) for a in argv], out)
    return code, out.getvalue()


@pytest.fixture
def store_with_transactions(txn_store):
    """t-0: a committed and an aborted transaction; t-1: one left open (producer "open-one")."""
    with txn_store.producer(transactional_id="done") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("t", b"committed", partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send("t", b"aborted", partition=0)
        p.abort_transaction()
    left = txn_store.producer(transactional_id="open-one")
    left.init_transactions()
    left.begin_transaction()
    left.send("t", b"pending", partition=1).get(5)
    yield txn_store
    left.close()


def test_transactions_lists_each_ids_state_and_the_open_ones_partitions(store_with_transactions):
    code, out = _run("transactions", store_with_transactions.path)
    assert code == 0
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert lines["done"][1] == "CompleteAbort"
    assert lines["open-one"][1] == "Ongoing" and lines["open-one"][-1] == "t-1"
    code, out = _run("transactions", store_with_transactions.path, "--open")
    assert "open-one" in out and "done" not in out


def test_topics_describe_shows_the_lso_below_the_log_end_while_a_transaction_is_open(store_with_transactions):
    code, out = _run("topics", "describe", store_with_transactions.path, "t")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isdigit()}
    assert out.splitlines()[1].split()[:4] == ["PARTITION", "LOG-START", "LOG-END", "LSO"]
    assert rows["1"][2:4] == ["1", "0"]  # log end 1, LSO 0: the open transaction's first offset
    assert rows["0"][2] == rows["0"][3]


def test_consume_read_committed_prints_committed_records_only(store_with_transactions):
    path = store_with_transactions.path
    code, out = _run("consume", path, "t", "--isolation-level", "read_committed")
    assert code == 0 and out.split() == ["committed"]
    code, out = _run("consume", path, "t")
    assert sorted(out.split()) == ["aborted", "committed", "pending"]


def test_dump_shows_markers_and_the_aborted_transaction_index(store_with_transactions):
    seg = f"{store_with_transactions.path}/t/0/00000000000000000000"
    code, out = _run("dump", seg + ".log", "--records")
    assert code == 0
    assert "endTxnMarker: COMMIT" in out and "endTxnMarker: ABORT" in out
    assert "isTransactional: true isControl: true" in out
    code, out = _run("dump", seg + ".txnindex")
    assert code == 0 and "producerId:" in out and "1 aborted transaction(s)" in out


def _store(path) -> int:
    """Partition 0: a0, a committed c0 (commit marker at 2), an aborted x0 (abort marker at 4), a1, an open o0,
    a2. Returns the producer of the open transaction."""
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.create_topic(TOPIC).partition(0)
        a, b = store.new_producer_id(), store.new_producer_id()
        p.append_values([b"a0"])
        p.append_values([b"c0"], producer=(a, 0, 0), transactional=True)
        internals(p).append_marker(a, 0, commit=True, coordinator_epoch=7)
        p.append_values([b"x0"], producer=(a, 0, 1), transactional=True)
        internals(p).append_marker(a, 0, commit=False, coordinator_epoch=7)
        p.append_values([b"a1"])
        p.append_values([b"o0"], producer=(b, 0, 0), transactional=True)
        p.append_values([b"a2"])
        return b


def test_consume_prints_aborted_records_by_default_and_only_committed_ones_read_committed(tmp_path):
    open_pid = _store(tmp_path)
    assert _run("consume", tmp_path, TOPIC) == (ExitCode.OK, "a0\nc0\nx0\na1\no0\na2\n")
    committed = _run("consume", tmp_path, TOPIC, "--isolation-level", "read_committed", "--print-offset")
    assert committed == (ExitCode.OK, "Offset:0\ta0\nOffset:1\tc0\nOffset:5\ta1\n")  # stops at the LSO, 6
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        internals(store.topic(TOPIC).partition(0)).append_marker(open_pid, 0, commit=True)
    assert _run("consume", tmp_path, TOPIC, "--isolation-level", "read_committed")[1] == "a0\nc0\na1\no0\na2\n"
    group = _run("consume", tmp_path, TOPIC, "--group", "g", "--isolation-level", "read_committed")
    assert group == (ExitCode.OK, "a0\nc0\na1\no0\na2\n")


def test_dump_shows_transactional_batches_and_markers_and_read_committed_records(tmp_path):
    _store(tmp_path)
    log = tmp_path / TOPIC / "0" / "00000000000000000000.log"
    code, text = _run("dump", log, "--records")
    assert code == ExitCode.OK
    batches = [line for line in text.splitlines() if line.startswith("baseOffset")]
    assert "isTransactional: false isControl: false" in batches[0]
    assert "isTransactional: true isControl: false" in batches[1]
    assert "isTransactional: true isControl: true" in batches[2]
    records = [line for line in text.splitlines() if line.startswith("| offset")]
    assert len(records) == 8
    assert records[2].endswith("endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert records[4].endswith("endTxnMarker: ABORT coordinatorEpoch: 7")
    code, text = _run("dump", log, "--records", "--isolation-level", "read_committed")
    assert code == ExitCode.OK
    records = [line for line in text.splitlines() if line.startswith("| offset")]
    assert [r.split()[2] for r in records] == ["0", "1", "5"]
    assert len([line for line in text.splitlines() if line.startswith("baseOffset")]) == 8  # every batch still
    copy = tmp_path / "elsewhere.log"
    copy.write_bytes(log.read_bytes())
    code, text = _run("dump", copy, "--records", "--isolation-level", "read_committed")
    assert code == ExitCode.ERROR


def test_compact_counts_the_aborted_transactions_records_it_removed(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        p = store.create_topic(TOPIC, config={"cleanup.policy": "compact"}).partition(0)
        pid = store.new_producer_id()
        p.append_values([b"x0", b"x1"], [b"k", b"l"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        p.append_values([b"v"], [b"k"])
        p.roll()  # the active segment is never cleaned
    code, text = _run("compact", tmp_path, TOPIC)
    assert code == ExitCode.OK
    assert "removed 2 (0 tombstones, 2 of aborted transactions, 0 transaction markers)" in text


def test_dump_prints_an_aborted_transaction_index_and_its_damage(tmp_path):
    _store(tmp_path)
    index = tmp_path / TOPIC / "0" / "00000000000000000000.txnindex"
    code, text = _run("dump", index)
    assert code == ExitCode.OK
    assert "1 aborted transaction(s)" in text
    assert "firstOffset: 3 lastOffset: 4 lastStableOffset: 5 crcValid: true" in text
    raw = bytearray(index.read_bytes())
    raw[10] ^= 1
    index.write_bytes(bytes(raw) + b"\x00" * 5)
    code, text = _run("dump", index)
    assert code == ExitCode.PROBLEMS
    assert "crcValid: false" in text and "torn entry (5 of 36 bytes; read_committed reads raise" in text
    # named by position (its fields are not to be trusted), and what readers do with it (they used to skip one)
    assert "txnindex @ byte 8: entry 0 fails its checksum (read_committed reads raise CorruptRecordError" in text
    index.write_bytes(b"nope")
    code, text = _run("dump", index)
    assert code == ExitCode.PROBLEMS and "not an aborted-transaction index" in text
