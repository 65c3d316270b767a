"""The server's turns sweep (:mod:`pylog.server.turns`): a partition the server appended to stays held across
the pauses of a steady producer (letting go and taking the lock back cost ~0.6 ms of CPU per partition, which
a partition written every second or two paid per append when the sweep let go after 1 s) and is let go of
once idle for :data:`~pylog.server.turns.IDLE_RELEASE_S`. The sweep is given the clock to judge by: no sleep."""

from __future__ import annotations

import time

import pylog
from pylog.server.turns import IDLE_RELEASE_S, Turns


def test_a_partition_paused_for_a_few_seconds_stays_held_and_is_let_go_of_once_idle(tmp_path):
    with pylog.open(tmp_path / "store", log_cleaner_enable=False) as store:
        store.create_topic("t", partitions=2)
        parts = [store.topic("t").partition(i) for i in range(2)]
        turns = Turns()
        for part in parts:
            part.wait_to_write(1_000)
            turns.note(part)
        noted = time.monotonic()
        turns.sweep(now=noted + 3.0)  # a producer's pause of 3 s
        assert all(part.is_writer for part in parts) and len(turns) == 2
        turns.sweep(now=noted + IDLE_RELEASE_S + 0.5)
        assert not any(part.is_writer for part in parts) and len(turns) == 0
        parts[0].wait_to_write(1_000)  # taken back for the next append
        assert parts[0].is_writer
