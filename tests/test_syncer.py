"""pylog.storage.syncer: the process's background sync thread, through ``submit`` and ``wait_idle``.

(How partitions use it, and the thread's restart and fork behaviour, are in test_background_sync.py.)
"""

from __future__ import annotations

import logging
import threading

from pylog.storage import syncer


def test_syncer_runs_jobs_once_each_in_the_order_submitted():
    ran: list[int] = []
    for i in range(50):
        syncer.submit(lambda i=i: ran.append(i))
    assert syncer.wait_idle(timeout=60)
    assert ran == list(range(50))


def test_syncer_job_that_raises_is_logged_and_the_next_jobs_still_run(caplog):
    ran: list[str] = []

    def bad() -> None:
        raise OSError("injected")

    with caplog.at_level(logging.ERROR, logger="pylog.syncer"):
        syncer.submit(bad)
        syncer.submit(lambda: ran.append("after"))
        assert syncer.wait_idle(timeout=60)
    assert ran == ["after"]
    assert "background sync job failed" in caplog.text and "injected" in caplog.text


def test_syncer_runs_jobs_off_the_submitting_thread():
    where: list[str] = []
    syncer.submit(lambda: where.append(threading.current_thread().name))
    assert syncer.wait_idle(timeout=60)
    assert where == ["pylog-syncer"]


def test_syncer_wait_idle_waits_for_a_running_job_and_is_false_on_timeout():
    release = threading.Event()
    started = threading.Event()
    done: list[bool] = []

    def job() -> None:
        started.set()
        release.wait()
        done.append(True)

    syncer.submit(job)
    assert started.wait(60)
    assert syncer.wait_idle(timeout=0) is False  # taken off the queue, not finished: not idle
    release.set()
    assert syncer.wait_idle(timeout=60) is True
    assert done == [True]


def test_syncer_wait_idle_with_nothing_submitted_is_true_at_once():
    assert syncer.wait_idle(timeout=60)
    assert syncer.wait_idle(timeout=0)
