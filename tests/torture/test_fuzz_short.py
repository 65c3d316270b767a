"""Short mode of the decoder fuzz harness (tests/torture/fuzz.py): a few thousand mutated inputs over every
on-disk decoder; only PylogError may escape, no input hangs or allocates beyond the worker's limit."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import fuzz  # noqa: E402

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_every_decoder_lets_only_pylog_errors_out_of_mutated_input(tmp_path):
    result = fuzz.run("short", str(tmp_path), seed=None)
    for name in fuzz.FULL_COUNTS:
        assert sum(result[name].values()) >= 20, name
        # The mutations reach the parsers: each decoder both accepts and rejects some inputs, except those
        # whose reader reports damage in its result instead of raising (cleaner status entries, skipped
        # offset commits, a damaged cleaner checkpoint read as empty).
        assert result[name].get("accepted", 0) > 0, name
    assert result["_total"] == sum(max(20, n // fuzz.SHORT_DIVISOR) for n in fuzz.FULL_COUNTS.values())
