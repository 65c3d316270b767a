"""CI run of the money-transfer torture (tests/torture/tx_money.py, short mode): transactional producers in
three processes, SIGKILLed at random points; a read_committed reader's balances always sum to the total."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import tx_money  # noqa: E402

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_tx_money_short(tmp_path):
    counts = tx_money.run("short", str(tmp_path))
    # run() raises AssertionError on any violation; these only make sure the run exercised something.
    assert counts["kills"] == tx_money.MODES["short"]["kills"]
    assert counts["committed"] > 0 and counts["records"] > 0
