"""The cleaner benchmark runs in its quick mode and prints every figure (timings are not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_cleaner_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cleaner.py"), "--quick", "--dir",
                          str(tmp_path)], capture_output=True, text=True, check=True, timeout=300).stdout
    for figure in ("baseline: read_columns scan", "baseline: copy the segment files", "compact (", "peak extra RssAnon",
                   "tracemalloc peak", "baseline: listdir + stat", "enforce_retention", "correctness: one record per key"):
        assert figure in out, figure
    assert "FAIL" not in out
