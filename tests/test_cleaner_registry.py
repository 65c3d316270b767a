"""Cleaner status files (pylog/maintenance/cleaner_registry.py): another process sees each cleaner's health, and
``pylog health`` fails on a dead, hung or failing cleaner."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest

import pylog
from pylog.__main__ import ExitCode, main
from pylog.maintenance.cleaner import Cleaner
from pylog.maintenance.cleaner_registry import published_cleaners
from pylog.storage.filenames import CLEANERS_DIR

from childproc import Child
from storetools import wait_for


def _health(path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["health", str(path), *args], out)
    return code, out.getvalue()


def _wait_for(predicate, timeout: float = 30.0):
    return wait_for(predicate, timeout, step=0.02)


def test_a_store_publishes_its_cleaner_and_removes_it_on_close(tmp_path):
    with pylog.open(tmp_path, log_retention_check_interval_ms=50) as store:
        store.create_topic("x")
        store.topic("x").partition(0).append_values([b"a"])
        # the entry names the partition this store writes after its next run
        entry = _wait_for(lambda: next((c for c in published_cleaners(str(tmp_path)) if "x-0" in c.partitions), None))
        assert entry is not None and entry.pid == os.getpid() and entry.process_alive and entry.error is None
        assert entry.status.enabled and entry.status.alive and entry.status.runs >= 1
        assert entry.heartbeat_age() < 30
        assert [c.name for c in store.cleaners()] == [entry.name]
        code, text = _health(tmp_path)
        assert code == ExitCode.OK, text
        row = next(line.split() for line in text.splitlines() if line.startswith(str(os.getpid())))
        assert row[1:3] == ["alive", "alive"]
    assert published_cleaners(str(tmp_path)) == []
    assert os.listdir(tmp_path / CLEANERS_DIR) == []


def test_a_store_without_a_cleaner_publishes_nothing(tmp_path):
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        store.create_topic("x")
        assert store.cleaners() == []


def test_a_dead_cleaner_thread_is_published_with_its_error_and_fails_health(tmp_path, monkeypatch):
    with pylog.open(tmp_path, log_retention_check_interval_ms=50) as store:
        store.create_topic("x").partition(0).append_values([b"a"])

        def boom(cleaner: Cleaner) -> None:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(Cleaner, "run_retention", boom)  # the next run kills the thread
        entry = _wait_for(lambda: next((c for c in store.cleaners() if c.status and not c.status.alive), None))
        assert entry is not None and "disk on fire" in entry.status.last_error
        code, text = _health(tmp_path)
        assert code == ExitCode.PROBLEMS
        assert f"problem: cleaner of pid {os.getpid()}" in text and "the thread is dead" in text
        assert "RuntimeError: disk on fire" in text


def test_a_partition_the_cleaner_gave_up_on_fails_health(tmp_path, monkeypatch):
    with pylog.open(tmp_path, log_retention_check_interval_ms=50) as store:
        store.create_topic("x").partition(0).append_values([b"a"])

        def bad(cleaner: Cleaner, p) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(Cleaner, "retain_partition", bad)
        assert _wait_for(lambda: any(c.status and c.status.uncleanable for c in store.cleaners()))
        code, text = _health(tmp_path)
        assert code == ExitCode.PROBLEMS
        (name,) = [c.name for c in store.cleaners() if c.pid == os.getpid()]
        assert f"cleaner of pid {os.getpid()} ({name}) gave up on x-0: OSError: [Errno 5]" in text


def test_a_stopped_process_is_stale_and_a_killed_one_is_a_warning_then_swept(tmp_path):
    child = Child("""
        import sys, pylog
        store = pylog.open(sys.argv[1], log_retention_check_interval_ms=50)
        store.create_topic("x").partition(0).append_values([b"a"])
        print("ready", flush=True)
        sys.stdin.readline()
    """, str(tmp_path), cwd=str(tmp_path))
    try:
        child.expect("ready")
        pid = child.proc.pid
        entry = _wait_for(lambda: next((c for c in published_cleaners(str(tmp_path)) if c.pid == pid and
                                        "x-0" in c.partitions), None))
        assert entry is not None and entry.process_alive and entry.status.alive
        code, text = _health(tmp_path, "--cleaner-stale-ms", "10000")
        assert code == ExitCode.OK, text

        os.kill(pid, signal.SIGSTOP)  # a hung process: its heartbeat grows old
        try:
            time.sleep(0.6)  # not synchronisation: a stopped heartbeat ageing past 300 ms is what is tested
            code, text = _health(tmp_path, "--cleaner-stale-ms", "300")
            assert code == ExitCode.PROBLEMS
            assert f"problem: cleaner of pid {pid}" in text and "no heartbeat for" in text
        finally:
            os.kill(pid, signal.SIGCONT)

        os.kill(pid, signal.SIGKILL)
        child.wait(30)
        entry = next(c for c in published_cleaners(str(tmp_path)) if c.pid == pid)
        assert not entry.process_alive and entry.status is not None  # its last word stays readable
        code, text = _health(tmp_path)
        assert code == ExitCode.OK, text
        assert f"warning: cleaner of pid {pid}" in text and "died without closing the store" in text
        row = next(line.split() for line in text.splitlines() if line.startswith(str(pid)))
        assert row[1] == "dead"
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
    with pylog.open(tmp_path) as store:  # a store that publishes sweeps the dead entry
        assert [c.pid for c in store.cleaners()] == [os.getpid()]


def test_a_corrupt_status_file_is_reported_not_raised(tmp_path):
    with pylog.open(tmp_path) as store:
        (name,) = [c.name for c in store.cleaners() if c.pid == os.getpid()]
        status = tmp_path / CLEANERS_DIR / f"{name}.status"
        # the thread's first write (the file exists, empty, from the store's open); the next is 5 s away
        _wait_for(lambda: any(c.status is not None for c in store.cleaners()))
        status.write_bytes(b"PLCS\x01garbage")
        (entry,) = store.cleaners()
        assert entry.status is None and "checksum mismatch" in entry.error and entry.process_alive
        code, text = _health(tmp_path)
        assert code == ExitCode.OK and f"warning: cleaner of pid {os.getpid()} ({name}): status unreadable" in text


def test_the_cleaners_directory_is_not_a_topic_name(tmp_path):
    with pylog.open(tmp_path) as store:
        with pytest.raises(pylog.InvalidTopicError, match="reserved"):
            store.create_topic(CLEANERS_DIR)
        assert CLEANERS_DIR not in store.topics()


@pytest.mark.parametrize("doc", [
    pytest.param({"pid": 1, "heartbeat": float("nan"), "partitions": [], "status": {}}, id="nan_heartbeat"),
    pytest.param({"pid": 1, "heartbeat": 1.0, "partitions": [], "status": {"uncleanable": ["t-0"]}},
                 id="uncleanable_not_a_map"),
    pytest.param({"pid": 1, "heartbeat": 1.0, "partitions": [{"a": 1}], "status": {}}, id="partition_not_a_str"),
])
def test_status_file_with_hostile_content_and_valid_crc_is_reported_not_trusted(tmp_path, doc):
    """A status file whose CRC checks but whose fields have the wrong types or non-finite numbers used to
    be taken as it was (a NaN heartbeat, a list where health expects a map)."""
    from pylog.maintenance.cleaner_registry import _MAGIC, _VERSION
    from pylog.storage.fileio import checked, encode_doc
    # No cleaner of this store publishes (the hostile file must stay as written): an entry as a process that
    # died without closing its store leaves it.
    with pylog.open(tmp_path, log_cleaner_enable=False) as store:
        directory = os.path.join(store.path, CLEANERS_DIR)
        os.makedirs(directory, exist_ok=True)
        name = f"{os.getpid()}-0badc0de"
        with open(os.path.join(directory, name + ".lock"), "wb"):
            pass
        with open(os.path.join(directory, name + ".status"), "wb") as f:
            f.write(checked(encode_doc(_MAGIC, _VERSION, doc)))
        (entry,) = published_cleaners(store.path)
        assert entry.status is None and entry.error is not None and "unexpected content" in entry.error
