"""The CLI's transaction views: `pylog transactions`, the LSO column of `pylog topics describe`,
`pylog consume --isolation-level` and `pylog dump`'s markers and .txnindex files."""

from __future__ import annotations

import io

import pytest

from pylog.__main__ import main


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
