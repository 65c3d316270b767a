"""A real Prometheus server scrapes ``pylog serve --metrics-port`` and a ``pylog metrics`` exporter of the same
store (each in its own process), and its HTTP API answers with what the test produced and consumed through
kafka-python.

Needs Debian's ``prometheus`` package (``.ci/run`` installs it); outside CI the test is skipped without it, in
CI a skip fails (tests/conftest.py). Everything listens on 127.0.0.1; Prometheus gets a temporary config and
storage, a 1 s scrape interval, and is stopped by the test.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra (prometheus-client) is not installed")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from serverutil import start_cli_server, wait_until  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus is not installed (.ci/run installs Debian's prometheus package)"),
]

_CONFIG = """global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: serve
    static_configs: [{{targets: ['127.0.0.1:{serve}']}}]
  - job_name: exporter
    static_configs: [{{targets: ['127.0.0.1:{exporter}']}}]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


class PromServer:
    """Prometheus on 127.0.0.1 with a config and storage under ``tmp``; :meth:`query` is its instant query API."""

    def __init__(self, tmp, serve_port: int, exporter_port: int) -> None:
        config = tmp / "prometheus.yml"
        config.write_text(_CONFIG.format(serve=serve_port, exporter=exporter_port))
        self.port = _free_port()
        self.log = open(tmp / "prometheus.log", "w+")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._ready, timeout=60, step=0.2, what="prometheus to be ready")
        except AssertionError:
            self.close()
            raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            self.log.seek(0)
            raise AssertionError("prometheus exited:\n" + self.log.read())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def query(self, promql: str) -> float | None:
        """The value of ``promql`` (a single series or a scalar aggregation), None while it has none."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        result = doc["data"]["result"]
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def close(self) -> None:
        _stop(self.proc)
        self.log.close()


def _exporter(path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "metrics", str(path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    if not m:
        _stop(proc)
        raise AssertionError(f"pylog metrics did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, int(m.group(1))


def test_prometheus_scrapes_served_counts_and_exported_lag(tmp_path):
    store = tmp_path / "store"
    n, m = 600, 250
    server, bootstrap, lines = start_cli_server(store, "--metrics-port", "0")
    procs = [server]
    prom = None
    try:
        serve_port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", "".join(lines)).group(1))
        exporter, exporter_port = _exporter(store)
        procs.append(exporter)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("watched", num_partitions=3, replication_factor=1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        for i in range(n):
            producer.send("watched", f"value-{i}".encode(), key=str(i).encode())
        producer.flush()
        producer.close()
        consumer = KafkaConsumer("watched", bootstrap_servers=bootstrap, group_id="watchers",
                                 auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
        consumed = 0
        for _ in consumer:
            consumed += 1
            if consumed == m:
                break
        consumer.commit()
        consumer.close()
        assert consumed == m

        prom = PromServer(tmp_path, serve_port, exporter_port)
        expected = {
            'up{job="serve"}': 1, 'up{job="exporter"}': 1,
            # counted by the server process
            'pylog_topic_records_in_total{job="serve",topic="watched"}': n,
            # read from the store's files by the exporter process (and by the server's own scrape)
            'sum(pylog_log_end_offset{job="exporter",topic="watched"})': n,
            'sum(pylog_log_end_offset{job="serve",topic="watched"})': n,
            'sum(pylog_group_committed_offset{job="exporter",group="watchers"})': m,
            'sum(pylog_group_lag{job="exporter",group="watchers",topic="watched"})': n - m,
            'sum(pylog_group_lag{job="serve",group="watchers",topic="watched"})': n - m,
        }
        for promql, want in expected.items():
            wait_until(lambda q=promql, w=want: prom.query(q) == w, timeout=60, step=0.25,
                       what=f"{promql} == {want} (last: {prom.query(promql)})")
        assert prom.query('pylog_server_requests_total{job="serve",api="Produce"}') >= 1
        assert prom.query('pylog_log_flush_duration_seconds_count{job="serve"}') >= 1  # acks=all
        assert prom.query('sum(pylog_server_request_duration_seconds_count{job="serve"})') >= 1
        assert prom.query('pylog_cleaner_alive{job="exporter"}') == 1  # the server's cleaner, seen from outside
        # Lag by hand: what the API says, end offset minus committed offset, per partition.
        for p in range(3):
            lag = prom.query(f'pylog_group_lag{{job="exporter",group="watchers",topic="watched",partition="{p}"}}')
            end = prom.query(f'pylog_log_end_offset{{job="exporter",topic="watched",partition="{p}"}}')
            committed = prom.query(
                f'pylog_group_committed_offset{{job="exporter",group="watchers",topic="watched",partition="{p}"}}')
            assert lag == end - (committed or 0)
    finally:
        if prom is not None:
            prom.close()
        for proc in reversed(procs):
            _stop(proc)
    assert server.returncode == 0
