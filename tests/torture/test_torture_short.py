"""CI mode of the kill torture (tests/torture/torture.py): a few dozen SIGKILLs of real processes inside
segment rolls, retention, compaction and its swap, producer group commits, writer handovers between
producer processes, consumer-group commits and rebalances, topic create/delete and store open, each
followed by a check of the reopened store against what the killed process reported durable."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import torture  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "pidfd_open"),
                                reason="needs fork and pidfd_open (Linux)")]


def test_kills_inside_every_crash_path_lose_nothing_and_add_nothing(tmp_path):
    counts = torture.run("short", str(tmp_path), seed=None)
    print(f"\ntorture short: {counts}")
    assert counts["kills"] >= sum(torture.SHORT_KILLS.values())
    assert counts["self_kills"] > 0 and counts["parent_kills"] > 0
    for scenario, kills in torture.SHORT_KILLS.items():
        assert counts["by_scenario"][scenario] >= kills
