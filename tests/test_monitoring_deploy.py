"""The monitoring files shipped in deploy/: Prometheus' alerting rules (deploy/prometheus/pylog-rules.yml) checked
and unit-tested by promtool, the Grafana dashboard (deploy/grafana/pylog.json), and both naming only metrics
pylog exports (pylog.metrics.METRICS), every alert with a runbook section in docs/OPERATIONS.md.

promtool and Prometheus come from the distribution's ``prometheus`` package (.ci/run installs it); their tests
skip without it outside CI. One test loads the rules into a real Prometheus scraping a ``pylog metrics``
exporter of a store in trouble.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import pylog
from pylog.metrics import METRICS
from pylog.structs import TopicPartition

from promserver import PromServer, start_exporter, stop
from serverutil import wait_until
from storetools import kill_with_cleaner_published

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "pylog-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "pylog-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "pylog.json"
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"

#: Metrics of other exporters the rules may name: node_exporter's file system sizes (pylog does not measure the
#: file system) and Prometheus' own ``up``. The dashboard names pylog's metrics only.
FOREIGN = {"node_filesystem_avail_bytes", "node_filesystem_size_bytes", "up"}
#: PromQL's words that look like names: operators, modifiers and aggregation clauses.
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "offset", "inf", "nan", "atan2"}


def _exported() -> set[str]:
    """Every series name pylog exposes: each metric's name, and a histogram's _bucket, _count and _sum."""
    names = set()
    for m in METRICS:
        names.add(m.name)
        if m.kind == "histogram":
            names |= {m.name + "_bucket", m.name + "_count", m.name + "_sum"}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression (or a Grafana ``label_values(...)`` query): identifiers that are
    not functions (followed by '('), label names (inside {...} or a by/without/on/ignoring list), keywords,
    durations (inside [...]), strings, numbers or Grafana variables ($job)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"label_values\((.*),\s*\w+\s*\)", r"\1", text)  # Grafana's: (series, label name)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)
    names = set()
    for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        if m.group(2) or m.group(1).lower() in _KEYWORDS:
            continue
        names.add(m.group(1))
    return names


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", ())]
    exprs += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus; .ci/run does)")
    return path


# -------------------------------------------------------------------------------------------------- rules

def test_rule_file_passes_promtool_check_rules():
    done = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_rules_fire_on_synthetic_series_as_their_unit_tests_expect():
    done = subprocess.run([_promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_that_fires_it():
    tested = {case["alertname"] for t in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for case in t["alert_rule_test"] if case.get("exp_alerts")}
    assert tested == {r["alert"] for r in _rules()}


def test_every_alert_names_a_severity_and_a_runbook_section_of_operations():
    headings = set(re.findall(r"^### (\w+)$", OPERATIONS.read_text(), re.M))
    for rule in _rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["runbook_url"] == f"docs/OPERATIONS.md#{name.lower()}", name
        assert name in headings, f"docs/OPERATIONS.md has no runbook section '### {name}'"


def test_rules_name_only_metrics_pylog_exports_or_node_exporter_has():
    exported = _exported()
    for rule in _rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        unknown = names - exported - FOREIGN
        assert not unknown, f"{rule['alert']} names metrics nobody exports: {sorted(unknown)}"


@pytest.mark.slow
def test_a_real_prometheus_raises_the_alerts_of_a_store_in_trouble_from_the_exporter(tmp_path):
    """The rule file loaded by a real Prometheus scraping `pylog metrics` of a store where retention deleted
    records a group had not read and a process died with its cleaner: those two alerts come (pending or
    firing: their `for` is a minute) with the labels pylog exports, no other does, and every rule evaluates."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    pytest.importorskip("prometheus_client")
    path = tmp_path / "store"
    with pylog.open(path, log_cleaner_enable=False) as store:
        p = store.create_topic("events").partition(0)
        p.append_values([b"x" * 100] * 500)
        store.commit_offsets("billing", {TopicPartition("events", 0): 10})  # lead 10 - 200 once 200 go
        store.commit_offsets("healthy", {TopicPartition("events", 0): 490})
        assert store.delete_records("events", 0, 200) == 200
    dead = kill_with_cleaner_published(path)
    procs = []
    prom = None
    try:
        exporter, port = start_exporter(path)
        procs.append(exporter)
        prom = PromServer(tmp_path, {"pylog-exporter": port}, [RULES])

        def raised() -> dict[str, dict[str, str]]:
            return {a["labels"]["alertname"]: a["labels"] for a in prom.alerts()}
        wait_until(lambda: {"PylogCleanerDead", "PylogConsumerRecordsDeletedUnread"} <= set(raised()), timeout=90,
                   step=0.5, what=f"the alerts of a store in trouble (raised: {raised()})")
        alerts = raised()
        assert alerts["PylogCleanerDead"]["pid"] == str(dead)
        deleted = alerts["PylogConsumerRecordsDeletedUnread"]
        assert (deleted["group"], deleted["topic"], deleted["partition"]) == ("billing", "events", "0")
        assert prom.query('pylog_group_lead{group="billing"}') == 10 - 200
        assert set(alerts) == {"PylogCleanerDead", "PylogConsumerRecordsDeletedUnread"}, alerts
        health = prom.rule_health()
        assert set(health) == {r["alert"] for r in _rules()}
        assert all(h == "ok" for h in health.values()), health
    finally:
        if prom is not None:
            prom.close()
        for proc in reversed(procs):
            stop(proc)


def _labels_of() -> dict[str, set[str]]:
    """Series name -> the labels pylog gives it, with the target labels Prometheus adds (and a bucket's le)."""
    out = {}
    for m in METRICS:
        names = [m.name] + ([m.name + s for s in ("_bucket", "_count", "_sum")] if m.kind == "histogram" else [])
        for name in names:
            out[name] = set(m.labels) | {"job", "instance"} | ({"le"} if name.endswith("_bucket") else set())
    return out


def _label_problems(expr: str) -> list[str]:
    """Labels an expression matches or groups by that none of its pylog series has."""
    labels_of = _labels_of()
    problems = []
    used = set()
    for m in re.finditer(r"\b(pylog_\w+)\s*\{([^}]*)\}", expr):
        used.add(m.group(1))
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", re.sub(r'"(?:[^"\\]|\\.)*"', '""', m.group(2))):
            if label not in labels_of.get(m.group(1), ()):
                problems.append(f"{m.group(1)} has no label {label!r}")
    used |= {n for n in metric_names(expr) if n in labels_of}
    known = set().union(*(labels_of[n] for n in used)) if used else set()
    for m in re.finditer(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        for label in filter(None, (x.strip() for x in m.group(1).split(","))):
            if label not in known:
                problems.append(f"grouping by {label!r}, which none of {sorted(used)} has")
    return problems


def test_rules_and_their_unit_tests_use_the_labels_pylog_exports():
    for rule in _rules():
        assert not _label_problems(rule["expr"]), (rule["alert"], _label_problems(rule["expr"]))
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for series in case["input_series"]:
            assert not _label_problems(series["series"]), (case["name"], _label_problems(series["series"]))
    assert _label_problems('sum by (group, client) (pylog_group_lag{pid="1"})') == [
        "pylog_group_lag has no label 'pid'", "grouping by 'client', which none of ['pylog_group_lag'] has"]


# ---------------------------------------------------------------------------------------------- dashboard

def test_dashboard_names_only_metrics_pylog_exports():
    exported = _exported()
    used: set[str] = set()
    for expr in _dashboard_exprs():
        names = metric_names(expr)
        assert names, expr
        assert not names - exported, f"the dashboard names metrics pylog does not export: {sorted(names - exported)}"
        assert not _label_problems(expr), (expr, _label_problems(expr))
        used |= names
    # it shows each part: throughput, groups, requests, fsyncs, the cleaner, the clients
    for name in ("pylog_log_end_offset", "pylog_group_lag", "pylog_server_request_duration_seconds_bucket",
                 "pylog_log_flush_duration_seconds_bucket", "pylog_cleaner_alive", "pylog_producer_records_sent_total",
                 "pylog_consumer_records_lag_max"):
        assert name in used


def test_dashboard_queries_are_valid_promql(tmp_path):
    """Each panel's expression, with Grafana's variables given values, as a recording rule: `promtool check rules`
    parses it as Prometheus does."""
    exprs = [e for e in _dashboard_exprs() if not e.startswith("label_values(")]
    values = {"$__rate_interval": "5m", "$job": ".*", "$instance": ".*"}
    rules = []
    for i, expr in enumerate(exprs):
        for var, value in values.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
        rules.append({"record": f"pylog:dashboard_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_dashboard_is_importable_grafana_json():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 30
    assert {i["name"] for i in board["__inputs"]} == {"DS_PROMETHEUS"}
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        box = p["gridPos"]
        assert box["x"] + box["w"] <= 24 and box["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]


# -------------------------------------------------------------------------------- the name extraction

def test_metric_names_finds_metrics_and_skips_functions_labels_and_variables():
    expr = ('histogram_quantile(0.99, sum by (api, le) (rate(pylog_server_request_duration_seconds_bucket'
            '{job=~"$job", api!~"Fetch|x"}[$__rate_interval]))) > 0.5 and on(job) up == 1 or time() - '
            'pylog_group_lagg offset 5m')
    assert metric_names(expr) == {"pylog_server_request_duration_seconds_bucket", "up", "pylog_group_lagg"}
    assert metric_names('label_values(pylog_info{job=~"$job"}, instance)') == {"pylog_info"}
    assert "pylog_group_lagg" not in _exported()  # a misspelt name is caught
