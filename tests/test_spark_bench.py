"""benchmarks/bench_spark.py --quick runs (in the tests' Spark session) and prints every figure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parent.parent


def test_spark_benchmark_quick_run(spark, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_spark", ROOT / "benchmarks" / "bench_spark.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--dir", str(tmp_path)], spark=spark) == 0
    out = capsys.readouterr().out
    for figure in ("read  python", "read  parquet", "read  tuples", "write pylog", "write parquet", "| ratio |",
                   "count(*)             declared", "7-column hash        parquet", "group by key         jvm",
                   "offset > X (1%)      python", "| declared / Parquet |", "stream availableNow jvm",
                   "stream availableNow parquet", "| Parquet file stream |", "load average"):
        assert figure in out
    assert not list(tmp_path.iterdir())  # the run's directory is removed


def test_jvm_reader_cpu_benchmark_quick_run(jvm_jar, tmp_path, capsys):
    if jvm_jar is None:
        pytest.skip("no JDK: the JVM reader is not built")
    spec = importlib.util.spec_from_file_location("bench_jvm_reader", ROOT / "benchmarks" / "bench_jvm_reader.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--rows", "40000", "--rounds", "2", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "columns all" in out and "columns value" in out and "ns of CPU per row" in out
    assert not list(tmp_path.iterdir())  # the run's directory is removed
