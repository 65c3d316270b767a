"""A real Prometheus server for the tests (Debian's ``prometheus`` package, installed by ``.ci/run``), and a
``pylog metrics`` exporter in a process of its own.

Prometheus gets a temporary config and storage under the test's tmp path, scrapes 127.0.0.1 targets every
second, evaluates rules every second, listens on a free 127.0.0.1 port and is stopped by :meth:`close`.
"""

from __future__ import annotations

import json
import queue
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable

from serverutil import wait_until

__all__ = ["PromServer", "free_port", "stop", "start_exporter"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """Terminate ``proc`` (kill it after 30 s) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def start_exporter(path: Any) -> tuple[subprocess.Popen, int]:
    """``pylog metrics PATH --port 0`` in its own process: (the process, its port) once it serves. Its output
    (stdout and stderr together) is read on by a daemon thread, so that neither pipe fills and stops it, and
    its first line is waited for 60 s at most: a stuck exporter fails the test instead of hanging it."""
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "metrics", str(path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True).start()
    try:
        line = lines.get(timeout=60)
    except queue.Empty:
        line = ""
    m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    if not m:
        stop(proc)
        raise AssertionError(f"pylog metrics did not start within 60 s: {line!r}")
    return proc, int(m.group(1))


class PromServer:
    """Prometheus on 127.0.0.1 scraping ``jobs`` (job name -> a 127.0.0.1 port) with ``rule_files`` loaded;
    :meth:`query` is its instant query API, :meth:`alerts` its alerts API."""

    def __init__(self, tmp: Path, jobs: dict[str, int], rule_files: Iterable[Path] = ()) -> None:
        config = tmp / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                               for job, port in jobs.items()],
        }))
        self.port = free_port()
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

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, promql: str) -> float | None:
        """The value of ``promql`` (a single series or a scalar aggregation), None while it has none."""
        result = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["result"]
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing now: each with ``labels``, ``annotations`` and ``state``."""
        return self._get("/api/v1/alerts")["alerts"]

    def rule_health(self) -> dict[str, str]:
        """Each loaded rule's name and its last evaluation's health ("ok", "err" with the error, "unknown")."""
        out = {}
        for group in self._get("/api/v1/rules")["groups"]:
            for rule in group["rules"]:
                out[rule["name"]] = rule["health"] + (f": {rule['lastError']}" if rule.get("lastError") else "")
        return out

    def close(self) -> None:
        stop(self.proc)
        self.log.close()
