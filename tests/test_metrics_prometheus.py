"""A real Prometheus server scrapes ``pylog serve --metrics-port`` and a ``pylog metrics`` exporter of the same
store (each in its own process), and its HTTP API answers with what the test produced and consumed through
kafka-python.

Needs Debian's ``prometheus`` package (``.ci/run`` installs it); outside CI the test is skipped without it, in
CI a skip fails (tests/conftest.py). Everything listens on 127.0.0.1; Prometheus gets a temporary config and
storage, a 1 s scrape interval, and is stopped by the test.
"""

from __future__ import annotations

import re
import shutil

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra (prometheus-client) is not installed")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402

from promserver import PromServer, start_exporter, stop  # noqa: E402
from serverutil import start_cli_server, wait_until  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus is not installed (.ci/run installs Debian's prometheus package)"),
]

def test_prometheus_scrapes_served_counts_and_exported_lag(tmp_path):
    store = tmp_path / "store"
    n, m = 600, 250
    server, bootstrap, lines = start_cli_server(store, "--metrics-port", "0")
    procs = [server]
    prom = None
    try:
        serve_port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", "".join(lines)).group(1))
        exporter, exporter_port = start_exporter(store)
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

        prom = PromServer(tmp_path, {"serve": serve_port, "exporter": exporter_port})
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
            stop(proc)
    assert server.returncode == 0
