"""The CLI and transactions: ``pylog consume --isolation-level`` and ``pylog dump`` (``isTransactional``, the
markers' records, ``--isolation-level read_committed``, ``.txnindex`` files). In-process, as tests/test_cli.py.
"""

from __future__ import annotations

import io

import pylog
from pylog.__main__ import ExitCode, main
from pylog.partition import internals

TOPIC = "t"


def _run(*argv) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(a) for a in argv], out)
    return code, out.getvalue()


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
    assert "AbortedTxnIndex: 1 entries" in text
    assert "firstOffset: 3 lastOffset: 4 lastStableOffset: 5 crcValid: true" in text
    raw = bytearray(index.read_bytes())
    raw[10] ^= 1
    index.write_bytes(bytes(raw) + b"\x00" * 5)
    code, text = _run("dump", index)
    assert code == ExitCode.PROBLEMS
    assert "crcValid: false" in text and "fails its checksum" in text and "torn entry (5 of 36 bytes)" in text
    index.write_bytes(b"nope")
    code, text = _run("dump", index)
    assert code == ExitCode.PROBLEMS and "not an aborted-transaction index" in text
