"""The metrics overhead benchmark: its server figures count a scrape's CPU apart from the records' (the threads
that ended are the metrics endpoint's, one per scrape), and a small run prints every server figure (timings are not
asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_metrics  # noqa: E402
from bench_server import ServerProcess  # noqa: E402

pytestmark = pytest.mark.slow  # see docs/TESTING.md: the quick subset leaves it out


def test_server_phase_counts_the_scrapes_cpu_apart_from_the_live_threads(tmp_path):
    pytest.importorskip("prometheus_client")
    log = tmp_path / "serve.log"
    server = ServerProcess(str(tmp_path / "store"), str(log), args=["--metrics-port", "0"])
    try:
        url = re.search(r"metrics on (http://\S+)", log.read_text()).group(1)
        urllib.request.urlopen(url, timeout=30).read()  # the first scrape's one-time costs
        idle = bench_metrics.ServerPhase(server)
        for _ in range(300):
            urllib.request.urlopen(url, timeout=30).read()
        scraped = bench_metrics.ServerPhase(server)
        scraping = idle.rates(1)  # the 300 scrapes
        scraped.rates(1)  # nothing since
    finally:
        server.stop()
    # Each scrape is collected and formatted by a thread of its own that has ended: most of the CPU is theirs
    # (the endpoint's accepting thread, alive, takes the rest), and a phase with no scrape has none of it.
    assert idle.ended > 0.5 * idle.cpu > 0, (idle.cpu, idle.live, idle.ended)
    assert scraped.ended < 0.1 * idle.ended, (scraped.cpu, scraped.ended)
    assert scraping[2] > scraping[1]  # the scrapes' CPU counted as their share of the wall time, not per record


def test_metrics_benchmark_server_figures_small_run(tmp_path):
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("prometheus_client")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_metrics.py"), "--rounds", "1",
                          "--server-only", "--server-records", "20000"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    out = out.stdout
    for figure in ("server produce  CPU-bound", "server fetch    CPU-bound", "server fetch    rec/CPU-s",
                   "fetch assigned  CPU-bound", "hook request"):
        assert figure in out, figure
