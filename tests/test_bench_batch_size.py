"""benchmarks/bench_batch_size.py (the writer's CPU per record at several batch sizes) runs and reports every
figure for every size."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_a_small_run_reports_send_keyed_send_and_the_drains_append_for_each_size(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_batch_size.py"), "--sizes", "700,16384",
                           "--records", "3000", "--dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for size in (700, 16384):
        for figure in ("send()", "keyed send()", "a drain's append alone"):
            assert got[f"{figure}, batch_size={size}"] > 0
    assert os.listdir(tmp_path) == []  # its scratch directory is removed
