"""The tiered storage benchmark runs in its quick mode against its own moto server and prints every figure
(timings are not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_remote_benchmark_quick_run(tmp_path):
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_remote.py"), "--quick", "--dir",
                          str(tmp_path)], capture_output=True, text=True, check=True, timeout=300, env=env).stdout
    for figure in ("plain upload", "ship ", "remote read", "local read", "ship / plain upload MB/s",
                   "cold remote / local read MB/s"):
        assert figure in out, figure
