"""The ``pylog serve`` benchmark runs in its quick mode and prints every figure (timings are not asserted)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_server_benchmark_quick_run(tmp_path):
    pytest.importorskip("confluent_kafka")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_server.py"), "--quick", "--records",
                          "5000", "--latency-records", "50", "--acks-records", "3000", "--memory-records", "20000", "--slow-seconds", "0.3",
                          "--count-requests", "--dir", str(tmp_path)], capture_output=True, text=True, check=True, timeout=300).stdout
    for figure in ("the client's floor", "confluent-kafka producer -> pylog serve",
                   "confluent-kafka consumer <- pylog serve", "fetch.queue.backoff.ms=10",
                   "server CPU per 1M records produced", "end-to-end latency p50", "end-to-end latency p99",
                   "100 idle connections", "slow consumer", "VmHWM", "load average at round starts",
                   "acks=all producer, 4 partitions", "acks=all producer, 100 partitions",
                   "fsyncs per acknowledged acks=all request", "server stop after writing",
                   "records per Produce request, acks=all, 100 partitions",
                   "server CPU per Produce request (us), acks=all, 100 partitions"):
        assert figure in out, figure


def test_server_acl_benchmark_quick_run(tmp_path):
    pytest.importorskip("confluent_kafka")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_server_acl.py"), "--quick", "--records",
                          "5000", "--dir", str(tmp_path)], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    for figure in ("confluent-kafka produce rec/s", "confluent-kafka fetch rec/s", "server CPU s per 1M produced",
                   "server CPU s per 1M fetched", "load average at round starts"):
        assert figure in out, figure


def test_server_threads_benchmark_prints_each_thread_kind(tmp_path):
    pytest.importorskip("confluent_kafka")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_server_threads.py"), "--records", "20000",
                          "--partitions", "4", "--acks", "all", "--dir", str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    assert "P=4 acks=all:" in out and "records per Produce request" in out and "client CPU" in out, out
    assert "us/request; switches/request voluntary" in out, out
    if shutil.which("py-spy"):  # thread names come from py-spy: the loop and the group commit's workers (the fsyncs)
        assert "MainThread" in out and "pylog-group-commit" in out, out


def test_fsync_benchmark_compares_reserved_blocks(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_fsync.py"), "--prealloc", "--files", "4",
                          "--rounds", "2", "--bytes", "4096", "--dir", str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    for method in ("seq+reserved", "pool+reserved", "waits/file"):
        assert method in out, method
