"""The benchmark suite against peers (benchmarks/suite.py): its quick run writes a complete report and
plots, every adapter reads back what it wrote in order, and the suite refuses to run without scratch space.

Timings are not asserted: the figures depend on the machine. What is asserted is that every workload and
every peer that can run here is measured and reported, and that the report's figures are the measured ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pylog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import suite  # noqa: E402
import suite_peers  # noqa: E402
import suite_report  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORKLOAD_HEADINGS = [f"### {title}" for title, _ in suite_report.THROUGHPUT.values()] + [
    "## Throughput against message size", "## Throughput against data stored", "## End-to-end latency",
    "## What bounds these figures"]


def _available() -> tuple[list[str], dict[str, str]]:
    ok, skipped = [], {}
    for cls in suite_peers.PEERS:
        reason = cls.unavailable()
        if reason is None:
            ok.append(cls.name)
        else:
            skipped[cls.name] = reason
    return ok, skipped


def _tables(report: str) -> dict[str, list[list[str]]]:
    """Each section heading -> the rows (cells) of the tables under it."""
    out: dict[str, list[list[str]]] = {}
    heading = ""
    for line in report.splitlines():
        if line.startswith("#"):
            heading = line
        elif line.startswith("| ") and not line.startswith("|---"):
            out.setdefault(heading, []).append([c.strip() for c in line.strip("|").split("|")])
    return out


@pytest.mark.slow
def test_quick_run_reports_every_workload_and_peer(tmp_path):
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--quick", "--dir", str(scratch),
                           "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert list(scratch.iterdir()) == [], "the suite leaves no data behind in its scratch directory"

    peers, skipped = _available()
    assert {"pylog", "pylog-client", "file", "lmdb", "sqlite"} <= set(peers), skipped  # the test extra has them
    report = (out / "REPORT.md").read_text()
    for heading in WORKLOAD_HEADINGS:
        assert heading in report, heading
    for name, reason in skipped.items():
        assert f"- **{name}**: {reason}" in report, "a peer that cannot run is listed with why"

    tables = _tables(report)
    measured = [h for h in tables if h.startswith("### ") or h in WORKLOAD_HEADINGS]
    assert len(measured) == len(WORKLOAD_HEADINGS) - 1  # every workload has a table ("what bounds" has none)
    for heading in measured:
        names = [row[0] for row in tables[heading] if row[0] != "peer"]
        for peer in peers:
            assert peer in names, (heading, peer)

    results = json.loads((out / "results.json").read_text())
    meta, res = results["meta"], results["results"]
    assert list(meta["peers"]) == peers and meta["skipped"] == skipped
    for wid in suite_report.THROUGHPUT:
        for peer in peers:
            (run,) = res["throughput"][wid][peer]
            assert run["records"] > 0 and run["records_s"] > 0, (wid, peer)
    for peer in peers:
        assert all(len(runs) == 1 and runs[0]["records"] > 0 for runs in res["sizes"][peer].values())
        assert res["stored"][peer]["stored"] > 0 and res["stored"][peer]["series"]
        (lat,) = res["latency"][peer]
        assert 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]
        assert lat["records"] == meta["plan"]["latency_records"]

    # The tables show the measured figures: the 1-producer row of each peer carries its records/s.
    rows = {r[0]: r for r in tables["### 1 producer"]}
    for peer in peers:
        (run,) = res["throughput"]["produce1"][peer]
        assert rows[peer][1] == suite_report.rate_text(run["records_s"]), peer
    assert rows["pylog"][3] == "1.00x"

    for name in suite_report.PLOTS.values():
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
        assert f"]({name})" in report, f"{name} is embedded in the report"


@pytest.fixture
def peers(tmp_path):
    """Every peer that can run here, on fresh data under ``tmp_path`` (Redis on a private server)."""
    available, _ = _available()
    server = None
    made = []
    try:
        for cls in suite_peers.PEERS:
            if cls.name not in available:
                continue
            if cls is suite_peers.RedisPeer:
                server = suite_peers.RedisServer(str(tmp_path)).__enter__()
                made.append(cls(str(tmp_path), server))
            else:
                made.append(cls(str(tmp_path)))
        yield made
    finally:
        if server is not None:
            server.__exit__(None, None, None)


def test_every_adapter_reads_back_what_it_wrote_in_order(peers):
    batches = [[b"%d-%d:" % (s, i) + b"v" * (i % 7) for i in range(n)] for s, n in enumerate((3, 1, 700, 250))]
    expected = [v for b in batches for v in b]
    for peer in peers:
        peer.create(2)
        w = peer.writer(1)
        for b in batches:
            w.append(b)
        w.flush()
        w.close()
        r = peer.reader(1)
        got: list[bytes] = []
        while True:
            chunk = r.poll(300, 0)
            assert len(chunk) <= 300, peer.name
            if not chunk:
                break
            got.extend(chunk)
        assert got == expected, peer.name
        assert r.poll(10, 0.01) == [], f"{peer.name}: nothing more after the end"
        other = peer.reader(0)
        assert other.poll(10, 0) == [], f"{peer.name}: streams are separate"
        other.close()
        r.close()
        assert peer.footprint() > 0, peer.name
        peer.destroy()


def test_refuses_without_scratch_directory(tmp_path, capsys):
    missing, out = tmp_path / "missing", tmp_path / "out"
    code = suite.main(["--quick", "--dir", str(missing), "--out", str(out)])
    assert code == suite.ExitCode.CANNOT_RUN
    err = capsys.readouterr().err
    assert "refusing to run" in err and str(missing) in err and "does not exist" in err
    assert not out.exists()


def test_refuses_with_too_little_space(tmp_path):
    need = shutil.disk_usage(tmp_path).free + (1 << 40)
    with pytest.raises(pylog.PylogError, match=r"GB free; this run needs"):
        suite.check_scratch(str(tmp_path), need)
    suite.check_scratch(str(tmp_path), 1)  # enough: no error


def test_unknown_peer_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as e:
        suite.main(["--quick", "--dir", str(tmp_path), "--peers", "pylog,kafka"])
    assert e.value.code == suite.ExitCode.USAGE


def test_the_consume_cpu_script_reports_rate_and_cpu_per_record_for_each_peer(tmp_path):
    """benchmarks/suite_consume_cpu.py: the suite's produce-then-consume rounds with the consumers' CPU time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite_consume_cpu.py"), "--records", "3000",
                           "--rounds", "1", "--processes", "2", "--peers", "pylog,pylog-client",
                           "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout.split("medians over 1 rounds")[1]
    for peer in ("pylog", "pylog-client"):
        assert re.search(rf"^{peer} +[0-9.]+ M rec/s .* CPU +[0-9]+ ns/record", summary, re.M), summary
    assert os.listdir(tmp_path) == []
