"""The README example and every script in examples/ run as written."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_quickstart_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## Quickstart\s+```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "pylog-data" / "events" / "0").is_dir()


def test_quickstart_example(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), str(tmp_path / "d")],
                         capture_output=True, text=True, check=True).stdout
    assert "partition 0 holds offsets [0, 1001)" in out


def test_storage_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_storage.py"), "--quick", "--dir",
                          str(tmp_path)], capture_output=True, text=True, check=True, timeout=300).stdout
    assert "read_columns" in out and "reopen after SIGKILL" in out


def test_examples_have_a_main_guard():
    for path in (ROOT / "examples").glob("*.py"):
        assert "__main__" in path.read_text(), path
    assert os.path.exists(ROOT / "examples" / "quickstart.py")
    runpy  # keep the import: examples may be run in-process by later tests


def test_client_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_clients.py"), "--quick", "--dir",
                          str(tmp_path)], capture_output=True, text=True, check=True, timeout=300).stdout
    for figure in ("baseline: lock + list.append", "send() one at a time", "acks='all', 16 thread(s)",
                   "consumer iteration", "end-to-end latency p99.9"):
        assert figure in out, figure


def test_delivery_semantics_example(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "delivery_semantics.py"), str(tmp_path / "d")],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    lines = {line.split(":")[0].strip(): line for line in out.splitlines()}
    assert re.search(r"1000 orders, \d+ invoices, [1-9]\d* lost, 0 billed twice", lines["at-most-once"])
    assert re.search(r"1000 orders, \d+ invoices, 0 lost, [1-9]\d* billed twice", lines["at-least-once"])
    assert "1000 orders, 1000 invoices, 0 lost, 0 billed twice" in lines["exactly-once"]


def test_process_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_processes.py"), "--quick", "--records",
                          "5000", "--dir", str(tmp_path)], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    assert "3 processes" in out and "ratio" in out
