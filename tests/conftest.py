"""Test-wide settings: tests write nothing outside temporary directories.

Hypothesis keeps caches in ./.hypothesis and pytest-benchmark creates ./.benchmarks at start-up; both are
pointed at a temporary directory that is removed when the run ends, and Hypothesis's example database is
off.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest
from hypothesis import configuration, settings

settings.register_profile("pylog", database=None, deadline=None)
settings.load_profile("pylog")

_STATE_DIR = tempfile.mkdtemp(prefix="pylog-test-state-")
configuration.set_hypothesis_home_dir(_STATE_DIR + "/hypothesis")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_storage"):
        config.option.benchmark_storage = "file://" + _STATE_DIR + "/benchmarks"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_STATE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """One local SparkSession for every Spark test: ``local[2]``, UI off, 2 shuffle partitions, Python
    workers running this interpreter, Spark's scratch files under a pytest temporary directory.

    The ``pylog`` format is not registered here: PySpark must discover it (``pyspark_pylog``).
    Filter pushdown for Python sources is off, Spark's default; tests that need it turn it on. The JVM
    compiles with C1 only (``-XX:TieredStopAtLevel=1``): tests run many short queries, so a third less
    warm-up time matters more than peak speed.
    """
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    scratch = tmp_path_factory.mktemp("spark")
    session = (SparkSession.builder.master("local[2]").appName("pylog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", str(scratch / "local"))
               .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
               .config("spark.driver.extraJavaOptions", f"-XX:TieredStopAtLevel=1 -Djava.io.tmpdir={scratch}")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
