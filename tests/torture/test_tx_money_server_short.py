"""CI run of the money-transfer torture through ``pylog serve`` (tests/torture/tx_money_server.py, short mode):
confluent-kafka transactional producers in two processes, the server and the producers SIGKILLed at random
points; a read_committed reader's balances always sum to the total."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

pytest.importorskip("confluent_kafka")
import tx_money_server  # noqa: E402

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_tx_money_server_short(tmp_path):
    counts = tx_money_server.run("short", str(tmp_path))
    # run() raises AssertionError on any violation; these only make sure the run exercised something.
    assert counts["server kills"] + counts["producer kills"] > 0
    assert counts["committed"] > 0 and counts["records"] > 0
