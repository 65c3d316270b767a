"""The README example and every script in examples/ run as written."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from storetools import read_all

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


@pytest.mark.slow
def test_storage_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_storage.py"), "--quick", "--dir",
                          str(tmp_path)], capture_output=True, text=True, check=True, timeout=300).stdout
    assert "read_columns" in out and "reopen after SIGKILL" in out and "append that rolls" in out


def test_examples_have_a_main_guard():
    for path in (ROOT / "examples").glob("*.py"):
        assert "__main__" in path.read_text(), path
    assert os.path.exists(ROOT / "examples" / "quickstart.py")
    runpy  # keep the import: examples may be run in-process by later tests


@pytest.mark.slow
def test_client_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_clients.py"), "--quick", "--dir",
                          str(tmp_path)], capture_output=True, text=True, check=True, timeout=300).stdout
    for figure in ("baseline: lock + list.append", "send() one at a time", "acks='all', 16 thread(s)",
                   "consumer iteration", "consumer.poll() of 1 new record", "end-to-end latency p99.9"):
        assert figure in out, figure


@pytest.mark.slow
def test_delivery_semantics_example(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "delivery_semantics.py"), str(tmp_path / "d")],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    lines = {line.split(":")[0].strip(): line for line in out.splitlines()}
    assert re.search(r"1000 orders, \d+ invoices, [1-9]\d* lost, 0 billed twice", lines["at-most-once"])
    assert re.search(r"1000 orders, \d+ invoices, 0 lost, [1-9]\d* billed twice", lines["at-least-once"])
    assert "1000 orders, 1000 invoices, 0 lost, 0 billed twice" in lines["exactly-once"]
    assert "1000 orders, 1000 invoices, 0 lost, 0 billed twice" in lines["transactions"]


@pytest.mark.slow
def test_process_benchmark_quick_run(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_processes.py"), "--quick", "--records",
                          "5000", "--dir", str(tmp_path)], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    assert "3 processes" in out and "ratio" in out


# ------------------------------------------------------------------ event sourcing, groups, Spark (issue 6)


def _example(name: str) -> dict:
    """An example's module namespace, loaded in this process without running its ``__main__`` block."""
    return runpy.run_path(str(ROOT / "examples" / f"{name}.py"))


def _read_all(store, topic: str) -> list:
    return [r for p in store.topic(topic).partitions for r in read_all(p, chunk=5000)]


def test_event_sourced_table_example(tmp_path):
    import json

    import pylog

    directory = tmp_path / "d"
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "event_sourced_table.py"), str(directory)],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    stages = {m[0]: (*map(int, m[1:5]), m[5]) for m in re.findall(
        r"^(before compaction|after compaction|after tombstone cleanup)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(yes|NO)$",
        out, re.M)}
    before, compacted, cleaned = (stages[s] for s in ("before compaction", "after compaction",
                                                      "after tombstone cleanup"))
    # records, tombstones, segments, accounts, identical
    assert before[:2] == (3240, 40) and before[3:] == (160, "yes"), out
    # Compaction keeps exactly the latest record of each of the 200 keys (160 accounts + 40 tombstones).
    assert compacted[:2] == (200, 40) and compacted[2] < before[2] and compacted[3:] == (160, "yes"), out
    # Past delete.retention.ms the tombstones go too: only the live accounts are left.
    assert cleaned[:2] == (160, 0) and cleaned[3:] == (160, "yes"), out
    assert "closed accounts still in the log: 0 of 40" in out
    # Independently of the script's own checks: the log it left replays to the table its history describes.
    expected = _example("event_sourced_table")["expected_table"]()
    with pylog.open(directory, log_cleaner_enable=False) as store:
        recs = _read_all(store, "accounts")
    assert all(r.value is not None for r in recs)
    assert len(recs) == len(expected) == 160
    assert {r.key: json.loads(r.value) for r in recs} == expected


def _owners(out: str, title: str) -> dict[str, list[int]]:
    """The ownership block printed after ``title``: {worker: [partitions]} (worker lines interleave)."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line == title), None)
    assert start is not None, f"no line {title!r} in:\n{out}"
    owners = {}
    for line in lines[start + 1:]:
        if line.startswith("    ["):  # a worker's own report of a rebalance
            continue
        m = re.fullmatch(r"  (worker-\d+) \(pid \d+\) owns (.*)", line)
        if not m:
            break
        owners[m[1]] = [int(tp.rsplit("-", 1)[1]) for tp in m[2].split(", ")]
    return owners


def _is_split_of(owners: dict[str, list[int]], partitions: int) -> bool:
    return sorted(p for ps in owners.values() for p in ps) == list(range(partitions))


@pytest.mark.slow
def test_consumer_group_processes_example(tmp_path):
    import collections

    import pylog

    directory = tmp_path / "d"
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "consumer_group_processes.py"), str(directory)],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    before = _owners(out, "group 'workers', 3 members:")
    assert sorted(before) == ["worker-0", "worker-1", "worker-2"] and _is_split_of(before, 6), out
    assert all(before.values()), before
    killed = re.search(r"^killed (worker-\d+) \(pid \d+\) with SIGKILL after \d+ results; it owned (.*)$", out, re.M)
    victim, lost = killed[1], [int(tp.rsplit("-", 1)[1]) for tp in killed[2].split(", ")]
    assert lost == before[victim]
    after = _owners(out, "after the rebalance, 2 members:")
    assert sorted(after) == sorted(set(before) - {victim}) and _is_split_of(after, 6), out
    s = re.search(r"summary: produced (\d+) jobs, processed (\d+) distinct, (\d+) results \((\d+) duplicates\), "
                  r"(\d+) missing, final lag (\d+)", out)
    produced, processed, results, duplicates, missing, lag = map(int, s.groups())
    assert (produced, processed, missing, lag) == (3000, 3000, 0, 0)
    assert results == processed + duplicates
    # Checked again from the store the example left: every job has a result, every partition is committed
    # up to its end, and duplicates come only from the victim's partitions, at most its one uncommitted poll.
    with pylog.open(directory, log_cleaner_enable=False) as store:
        group_lag = store.group_lag("workers")
        assert sorted(tp.partition for tp in group_lag) == list(range(6))
        assert all(v.lag == 0 and v.committed == v.log_end_offset for v in group_lag.values()), group_lag
        jobs = {(p.number, o) for p in store.topic("jobs").partitions for o in range(p.log_end_offset)}
        seen = collections.Counter(tuple(map(int, dict(r.headers)["source"].split(b":")))
                                   for r in _read_all(store, "results"))
    assert set(seen) == jobs and len(jobs) == 3000
    dups = {po: n for po, n in seen.items() if n > 1}
    assert sum(n - 1 for n in dups.values()) == duplicates <= 50
    assert all(p in lost for p, _ in dups), dups


def test_spark_batch_analytics_example(spark, tmp_path):
    import collections

    import pylog

    ex = _example("spark_batch_analytics")
    directory = str(tmp_path / "d")
    r = ex["main"](directory, spark=spark)
    orders = list(ex["orders"]())
    by_country = collections.defaultdict(lambda: [0, 0])
    windows = collections.defaultdict(lambda: [0, 0])
    for o in orders:
        for table, key in ((by_country, o["country"]), (windows, (o["ts"] - ex["T0"]) // ex["WINDOW_MS"])):
            table[key][0] += 1
            table[key][1] += o["amount_cents"]
    with pylog.open(directory, log_cleaner_enable=False) as store:
        ends = {p.number: p.log_end_offset for p in store.topic("orders").partitions}
    assert r["orders"] == len(orders) == 2000 and r["per_partition"] == ends
    assert r["by_country"] == {c: tuple(v) for c, v in by_country.items()}
    assert r["windows"] == [(ex["T0"] + k * ex["WINDOW_MS"], *windows[k]) for k in sorted(windows)]
    start, end = ex["T0"] + 90 * 60_000, ex["T0"] + 120 * 60_000
    assert r["last_half_hour"] == sorted(o["order_id"] for o in orders if start <= o["ts"] < end)
    assert r["slice"] == list(range(100, 150)) and r["slice_partitions"] == [1]
    assert r["written_back"] == r["by_country"]
    assert spark.range(3).count() == 3  # the shared session was used, not stopped


def test_spark_streaming_example(spark, tmp_path):
    import collections
    import json

    import pylog

    ex = _example("spark_streaming")
    directory = tmp_path / "d"
    r = ex["main"](str(directory), spark=spark)
    with pylog.open(directory / "store", log_cleaner_enable=False) as store:
        clicks = [json.loads(rec.value) for rec in _read_all(store, "clicks")]
        ends = {p.number: p.log_end_offset for p in store.topic("clicks").partitions}
    assert len(clicks) == r["produced"] == sum(ends.values()) > 0
    for name, runs in r["runs"].items():
        assert len(runs) == 2, name
        assert runs[0][1] > 0, name  # the first run saw the first burst at least
        position = {p: 0 for p in ends}
        for ranges, rows in runs:  # each run starts where the previous one ended: no gap, no overlap
            for p, (first, end) in ranges.items():
                assert first == position[p] < end, (name, runs)
                position[p] = end
            assert rows == sum(end - first for first, end in ranges.values()), (name, runs)
        assert position == ends, (name, runs)  # and the last run reached the log end
    assert r["page_counts"] == dict(collections.Counter(c["page"] for c in clicks))
    assert r["checkouts"] == sorted(c["n"] for c in clicks if c["page"] == "/checkout")
    assert spark.range(3).count() == 3  # the shared session was used, not stopped


def test_async_orders_service_example(tmp_path):
    """The asyncio web service: 40 POSTs produced by the handlers, all 40 consumed by the background task;
    a second run consumes only its own 40 (the group committed the first run's)."""
    for run in (1, 2):
        out = subprocess.run([sys.executable, str(ROOT / "examples" / "async_orders_service.py"), str(tmp_path / "d")],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        assert "'totals': {" in out and "'c0': 180" in out and "'c3': 210" in out, out
        assert f"orders before this run: {40 * (run - 1)}; consumed in this run: 40" in out, out


@pytest.mark.slow
def test_kafka_clients_on_a_store_example(tmp_path):
    """confluent-kafka produces and a kafka-python group consumes through pylog.serve; pylog reads the same
    records and sees the group's commits; a second run consumes only the new 1,000 orders."""
    for run in (1, 2):
        out = subprocess.run([sys.executable, str(ROOT / "examples" / "kafka_clients_on_a_store.py"),
                              str(tmp_path / "d")], capture_output=True, text=True, check=True, timeout=120).stdout
        assert "kafka-python consumed 1000 orders" in out, out
        assert "headers=(('source', b'checkout'),)" in out, out
        assert f"of {1000 * run} records, lag 0" in out, out
