"""CI run of the multi-process stress harness (tests/torture/stress.py, short mode): producers of three
processes sharing a topic's partitions, a consumer group of two whose members are SIGKILLed and restarted."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import stress  # noqa: E402

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_stress_short(tmp_path):
    counts = stress.run("short", str(tmp_path))
    # run() raises AssertionError on any violation; these only make sure the run exercised something.
    assert counts["acked"] == counts["stored"] > 0
    assert counts["consumed"] == counts["stored"]
    assert counts["kills"] >= 1 and counts["refused"] == 0 and counts["duplicates"] == 0
