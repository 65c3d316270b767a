"""Test-wide settings: tests write nothing outside temporary directories.

Hypothesis keeps caches in ./.hypothesis and pytest-benchmark creates ./.benchmarks at start-up; both are
pointed at a temporary directory that is removed when the run ends, and Hypothesis's example database is
off.

Under CI (the ``CI`` environment variable set, as ``.ci/run`` does), a skipped test fails instead: a test
that CI never runs (a missing optional dependency, a platform check) must not pass unnoticed. The header
names the pylog package under test, so a run against the checkout cannot pass for one of the installed copy.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest
from hypothesis import configuration, settings

from s3_server import S3_TEST_ENV, remote_settings, s3_endpoint  # noqa: F401 - fixtures of the tiered storage tests

# Spark's driver, its block manager and every JVM or Python worker that Spark starts (local-cluster executors
# too: they inherit this environment) bind to loopback, not to the host's address: no network beyond
# 127.0.0.1 at test time.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

settings.register_profile("pylog", database=None, deadline=None)
settings.load_profile("pylog")

_STATE_DIR = tempfile.mkdtemp(prefix="pylog-test-state-")
configuration.set_hypothesis_home_dir(_STATE_DIR + "/hypothesis")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_report_header(config: pytest.Config) -> list[str]:
    import pylog
    lines = [f"pylog {pylog.__version__} from {os.path.dirname(pylog.__file__)}"]
    if _in_ci():
        lines.append("CI is set: a skipped test counts as a failure")
    return lines


def _fail_skip_in_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skip into a failure under CI, saying why it was skipped (xfail stays what it is)."""
    if not (report.skipped and _in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped, which CI does not allow (CI={os.environ['CI']!r}): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result())


_skipped_modules: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A whole module skipped at collection (``pytest.importorskip``): noted here, failed at the end (a
    collection error would stop the run before the other tests)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped_modules.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _skipped_modules:
        terminalreporter.section("skipped modules, which CI does not allow", red=True)
        for line in _skipped_modules:
            terminalreporter.line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_modules and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``spark`` every test of a ``test_spark_*`` file and every test using the ``spark`` fixture, so
    ``-m "not spark"`` leaves out all that starts a JVM (the ``slow`` marks are set in the files)."""
    for item in items:
        if item.path.name.startswith("test_spark_") or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "benchmark_storage"):
        config.option.benchmark_storage = "file://" + _STATE_DIR + "/benchmarks"


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_STATE_DIR, ignore_errors=True)


_JVM_JAR: str | None = None
_JVM_PROBLEM = "not built"


def _build_jvm_reader(scratch) -> str | None:
    """Builds the JVM reader (pylog.jvm) into a cache under ``scratch`` for the shared session, as
    ``pylog.spark.session()`` does into the user's cache; None, with the reason kept for :func:`jvm_reader`,
    when there is no JDK. A failing compile fails loudly."""
    global _JVM_PROBLEM
    from pylog import jvm
    from pylog.errors import JvmReaderUnavailableError
    os.environ["PYLOG_CACHE_DIR"] = str(scratch / "cache")
    try:
        return jvm.ensure_jar()
    except JvmReaderUnavailableError as exc:
        if "did not compile" in str(exc):
            raise
        _JVM_PROBLEM = str(exc)
        return None


@pytest.fixture(scope="session")
def jvm_jar(spark) -> str | None:
    """The JVM reader's jar the shared session loaded (None without a JDK, failing in CI as ``jvm_reader``)."""
    if _JVM_JAR is None and os.environ.get("CI"):
        pytest.fail(f"the JVM reader must be built in CI: {_JVM_PROBLEM}")
    return _JVM_JAR


@pytest.fixture(scope="session")
def jvm_reader(spark) -> str:
    """The format name the JVM reader answers to in the shared session (``pylog``: its jar is loaded there, so
    ``format("pylog")`` runs it, and ``pylog-python`` the Python source); skipped without a JDK, except in CI."""
    if _JVM_JAR is None:
        if os.environ.get("CI"):
            pytest.fail(f"the JVM reader must be built in CI: {_JVM_PROBLEM}")
        pytest.skip(_JVM_PROBLEM)
    return "pylog"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """One local SparkSession for every Spark test: ``local[2]``, UI off, 2 shuffle partitions, Python
    workers running this interpreter, Spark's scratch files under a pytest temporary directory.

    The ``pylog`` format is not registered here: PySpark must discover it (``pyspark_pylog``). The JVM reader's
    jar is on the classpath when a JDK is there (always in CI): ``format("pylog")`` is then the JVM provider,
    which hands the Python source (``pylog-python``) writes, streams and the reads it does not handle, as in
    ``pylog.spark.session()``; tests of the Python reader itself read ``format("pylog-python")``.
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
    global _JVM_JAR
    _JVM_JAR = _build_jvm_reader(scratch)
    jars = [_JVM_JAR] if _JVM_JAR else []
    session = (SparkSession.builder.master("local[2]").appName("pylog-tests")
               .config("spark.jars", ",".join(jars))
               .config("spark.ui.enabled", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", str(scratch / "local"))
               .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
               .config("spark.driver.extraJavaOptions", f"-XX:TieredStopAtLevel=1 -Djava.io.tmpdir={scratch}"))
    # The JVM, and so the Python workers it starts, get the test bucket's fixed credentials in their
    # environment (it may start before a test module's moto server sets them here, and Python data sources
    # plan in workers that spark.executorEnv does not reach): Spark tests can read a bucket on 127.0.0.1.
    saved = {name: os.environ.get(name) for name in S3_TEST_ENV}
    os.environ.update(S3_TEST_ENV)
    try:
        session = session.getOrCreate()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def store(tmp_path):
    """A store under the test's temporary directory, closed after the test (a module may define its own)."""
    import pylog
    s = pylog.open(tmp_path / "store")
    yield s
    s.close()


@pytest.fixture
def txn_store(tmp_path):
    """The transaction tests' store (tests/test_transactions_*.py): ``tmp_path / "s"`` without the background
    thread (the tests run the timeout sweep themselves), with a topic ``t`` of 3 partitions."""
    import pylog
    s = pylog.open(tmp_path / "s", log_cleaner_enable=False)
    s.create_topic("t", 3)
    yield s
    s.close()


@pytest.fixture
def server(store):
    """``pylog.serve`` on ``store`` (tests/test_server_*.py), on a free 127.0.0.1 port, with a short initial
    rebalance delay so that groups form quickly."""
    import pylog
    with pylog.serve(store, port=0, group_initial_rebalance_delay_ms=50) as srv:
        yield srv
