"""The background cleaner thread: it compacts and flushes on its own, and its death or failures are seen.

Run: ``python -m pytest tests/test_cleaner.py -q``
"""

from __future__ import annotations

import io
import logging
import os
import threading
import time

import pytest

import pylog
from pylog import prometheus
from pylog.cli import main
from pylog.partition import internals
from pylog.maintenance.cleaner import Cleaner

from storetools import wait_for

TOPIC = "c"


def _wait(cond, timeout=10.0):
    return bool(wait_for(cond, timeout))


def _compacted(store, name=TOPIC):
    store.create_topic(name, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.1,
                                     "segment.bytes": 2048})
    p = store.topic(name).partition(0)
    for i in range(400):
        p.append_values([b"value-%d" % i], keys=[b"k%d" % (i % 5)])
    p.roll()
    return p


def test_background_thread_compacts_and_reports_status(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_backoff_ms=20) as store:
        p = _compacted(store)
        # The thread may clean while records are still being appended: wait for the final state.
        # (the totals are added when a cleaning returns, just after its last swap).
        assert _wait(lambda: len(p.read(0, max_records=1000)) == 5 and store.cleaner_status().records_removed >= 395)
        st = store.cleaner_status()
        assert st.enabled and st.alive and st.healthy
        assert st.cleanings >= 1 and st.records_removed >= 395 and st.bytes_written > 0
        assert st.last_run_start is not None and st.last_run_end is not None and st.runs >= 1
        assert st.dirty_ratios[f"{TOPIC}-0"] == 0.0
        assert {r.key: r.value for r in p.read(0, max_records=1000)} == {
            b"k%d" % k: b"value-%d" % (395 + k) for k in range(5)}
        store.check_health()


def test_a_dead_cleaner_thread_is_reported_and_check_health_raises(tmp_path, caplog, monkeypatch):
    store = pylog.open(str(tmp_path), log_cleaner_backoff_ms=20)
    try:
        def boom(cleaner: Cleaner) -> None:
            raise RuntimeError("simulated bug in the cleaner loop")

        # an error outside the per-partition handlers kills the thread
        monkeypatch.setattr(Cleaner, "run_compaction", boom)
        with caplog.at_level(logging.ERROR, logger="pylog.cleaner"):
            assert _wait(lambda: not store.cleaner_status().alive)
        st = store.cleaner_status()
        assert not st.alive and not st.healthy
        assert "simulated bug in the cleaner loop" in st.last_error and "Traceback" in st.last_error
        assert st.last_error_at is not None
        assert any("cleaner thread died" in r.getMessage() for r in caplog.records)
        with pytest.raises(pylog.CleanerError, match="not running"):
            store.check_health()
    finally:
        store.close()


def test_a_partition_that_fails_is_marked_uncleanable_and_others_go_on(tmp_path, caplog):
    with pylog.open(str(tmp_path), log_cleaner_enable=False) as setup:
        bad = _compacted(setup, "bad")
        victim = bad.segments[0].log_path
    with open(victim, "r+b") as f:  # damage a record body in a sealed segment
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with caplog.at_level(logging.ERROR, logger="pylog.cleaner"):
        with pylog.open(str(tmp_path), log_cleaner_backoff_ms=20) as store:
            store.topic("bad").partition(0).append_values([b"x"], keys=[b"k"])  # become its writer
            good = _compacted(store, "good")
            assert _wait(lambda: "bad-0" in store.cleaner_status().uncleanable)
            # The thread may clean while records are still being appended (a dirty ratio of 0.0 then, with
            # records in the active segment still to clean): wait for the final state.
            assert _wait(lambda: len(good.read(0, max_records=1000)) == 5
                         and store.cleaner_status().dirty_ratios.get("good-0") == 0.0)
            st = store.cleaner_status()
            assert st.alive and not st.healthy
            assert "CorruptRecordError" in st.uncleanable["bad-0"]
            with pytest.raises(pylog.CleanerError, match="bad-0") as raised:
                store.check_health()
            # the message names the error itself, not a traceback's first line
            assert "CorruptRecordError" in str(raised.value) and "Traceback" not in str(raised.value)
            assert len(good.read(0, max_records=1000)) == 5
    assert any("compaction of bad-0 failed" in r.getMessage() for r in caplog.records)


def test_disabled_cleaner(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_enable="false") as store:
        st = store.cleaner_status()
        assert not st.enabled and not st.alive and st.healthy
        store.check_health()
    with pytest.raises(pylog.InvalidConfigError):
        pylog.open(str(tmp_path), log_cleaner_enable="maybe")


def test_flush_ms_is_enforced_by_the_background_thread(tmp_path):
    # 1 s, not less: on a loaded machine the thread must not get there between the append and the check
    with pylog.open(str(tmp_path), flush_ms=1000) as store:
        store.create_topic("f")
        p = store.topic("f").partition(0)
        internals(p).durability.last_flush = time.monotonic()
        p.append_values([b"a"])
        assert internals(p).durability.unflushed == 1
        assert _wait(lambda: internals(p).durability.unflushed == 0, timeout=20)


def test_close_stops_the_thread(tmp_path):
    store = pylog.open(str(tmp_path), log_cleaner_backoff_ms=20)
    (thread,) = [t for t in threading.enumerate() if t.name == f"pylog-cleaner {store.path}"]
    assert thread.is_alive()
    store.close()
    assert not thread.is_alive()
    with pytest.raises(pylog.StoreClosedError):
        store.check_health()


def test_cleaner_counts_aborted_records_it_removes_in_its_status_health_and_metrics(tmp_path):
    with pylog.open(str(tmp_path), log_cleaner_backoff_ms=20) as store:
        store.create_topic(TOPIC, config={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        p.append_values([b"a1", b"a2", b"a3"], keys=[b"k1", b"k2", b"k3"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        p.append_values([b"v"], keys=[b"k1"])
        p.roll()
        assert _wait(lambda: store.cleaner_status().aborted_removed >= 3)
        st = store.cleaner_status()
        assert st.aborted_removed == 3 and st.markers_removed == 0  # the marker stays delete.retention.ms
        assert [r.value for r in p.read(0)] == [b"v"]
        # Other processes see it in the published status: `pylog health` and the metrics.
        me = os.getpid()
        assert _wait(lambda: any(c.pid == me and c.status is not None and c.status.aborted_removed == 3
                                 for c in store.cleaners()))
        out = io.StringIO()
        main(["health", str(tmp_path)], out)
        assert f"{st.records_removed} record(s) (0 tombstones, 3 of aborted transactions, 0 transaction markers)" \
            in out.getvalue()
        if prometheus.AVAILABLE:  # the metrics extra
            from prometheus_client import generate_latest
            text = generate_latest(prometheus.registry(store)).decode()
            assert f'pylog_cleaner_aborted_records_removed_total{{pid="{me}"}} 3.0' in text
            assert f'pylog_cleaner_markers_removed_total{{pid="{me}"}} 0.0' in text
