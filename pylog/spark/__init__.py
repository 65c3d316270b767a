"""pylog as a Spark data source: ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("pylog")``.

    from pylog.spark import session
    spark = session()                                  # local[*], UI off; "pylog" is found with no register call
    df = spark.read.format("pylog").option("subscribe", "events").load("./pylog-data")
    df.selectExpr("topic", "partition", "offset", "cast(value as string)").show()

Installing pylog installs the top-level module ``pyspark_pylog``; PySpark imports every ``pyspark_*``
module it finds and registers its ``DefaultSource``, so ``format("pylog")`` needs no setup.
:func:`register` does it by hand (for a PySpark that does not look, or an install it cannot see).
:func:`session` also puts the JVM reader's jar (:mod:`pylog.jvm`, built on first use) on the classpath when
a JDK is there: ``format("pylog")`` is then the JVM provider, which reads batches itself and hands the rest
to this Python source, registered a second time as ``pylog-python`` (``pyspark_pylog_python``);
:func:`which_reader` says which runs (docs/SPARK.md, "Which reader runs"). A Spark Connect session
(``session(remote=...)``, or any ``builder.remote``) runs on a server whose classpath and Python decide:
:mod:`pylog.spark.connect` (docs/SPARK.md, "Spark Connect").

Importing this package, in the driver, before the session starts, also (1) points Spark's Python workers
at this interpreter when ``python3`` on ``PATH`` is another one and neither ``PYSPARK_PYTHON`` nor
``PYSPARK_DRIVER_PYTHON`` is set (:mod:`pylog.spark.workers`: else the workers do not find the format), and
(2) makes Spark's default save mode append for ``format("pylog")``, as with Kafka's sink
(:mod:`pylog.spark.savemode`).

This package imports PySpark and pyarrow
(``pip install ".[spark]"`` from the checkout; the distribution is ``pylog-embedded``); ``import pylog`` never loads it.
Modules: :mod:`~pylog.spark.options` (parsing), :mod:`~pylog.spark.reader` (planning, Arrow conversion),
:mod:`~pylog.spark.source` (the DataSource: schema, reader and writer factories), :mod:`~pylog.spark.batch`
(batch reader, input partitions), :mod:`~pylog.spark.stream` (streaming reader), :mod:`~pylog.spark.writer`
(Arrow writers), :mod:`~pylog.spark.savemode` (default save mode), :mod:`~pylog.spark.workers` (the
workers' interpreter), :mod:`~pylog.spark.failures` (pylog's errors out of Spark's exceptions),
:mod:`~pylog.spark.connect` (Spark Connect sessions: which reader the server has, the jar as a session
artifact). ``source`` imports the others; none of them imports it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Mapping

from .. import jvm
from ..errors import JvmReaderUnavailableError, SparkConnectUnavailableError
from . import connect, savemode, workers
from .exactly_once import SinkTransactionLostError
from .failures import pylog_error, raise_pylog_errors
from .options import DataLossError, InvalidOptionError
from .source import NAME, PYTHON_NAME, PylogDataSource, PylogPythonDataSource, kafka_schema

savemode.install()
workers.configure()

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PylogDataSource", "register", "session", "which_reader", "kafka_schema", "InvalidOptionError",
           "DataLossError", "SinkTransactionLostError", "SparkConnectUnavailableError", "NAME", "PYTHON_NAME",
           "pylog_error", "raise_pylog_errors"]

log = logging.getLogger("pylog.spark")
#: Spark's setting that drops Python tracebacks from its error messages (session() sets it).
HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def register(spark: "SparkSession") -> None:
    """Register the ``pylog`` format with ``spark`` explicitly (discovery normally makes this unnecessary).

    Logs a warning saying what to set when Spark's Python workers run an interpreter that cannot import
    pylog (they would fail to load the source). With a Spark Connect session the registration goes to the
    server (PySpark sends the class by reference: the server's Python workers must import pylog), the check
    of this process's workers is left out (the server's run the source), and the default save mode of the
    Connect client's writer appends for ``format("pylog")`` from then on (:mod:`pylog.spark.savemode`).
    """
    if connect.is_connect(spark):
        savemode.install()
    else:
        problem = workers.worker_problem()
        if problem:
            log.warning("pylog: %s", problem)
    spark.dataSource.register(PylogDataSource)
    spark.dataSource.register(PylogPythonDataSource)


def which_reader(spark: "SparkSession") -> str:
    """Which implementation reads ``format("pylog")`` in ``spark``: ``"jvm"`` when the JVM reader's jar is on
    the session's classpath, else ``"python"``. (The JVM reader hands the reads it does not handle to the
    Python source; ``df.explain()`` names the one a query runs: ``pylog (JVM reader)`` or a Python scan.)

    A Spark Connect session asks its server (one SQL expression on one row: :mod:`pylog.spark.connect`), whose
    classpath, or the jars the session added, decide; ``"unknown"`` when the server refuses to say.
    """
    if connect.is_connect(spark):
        has = connect.has_jvm_reader(spark, jvm.PROVIDER)
        return "unknown" if has is None else "jvm" if has else "python"
    jvm_gateway = getattr(spark, "_jvm", None)
    if jvm_gateway is None:
        return "unknown"
    try:
        loader = jvm_gateway.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm_gateway.java.lang.Class.forName(jvm.PROVIDER, False, loader)
    except Exception:  # noqa: BLE001 - py4j raises its own error for a missing class
        return "python"
    return "jvm"


def session(master: str = "local[*]", app_name: str = "pylog", conf: Mapping[str, Any] | None = None,
            remote: str | None = None) -> "SparkSession":
    """A SparkSession suited to reading and writing a local store.

    UI off, 2 shuffle partitions per core (``spark.sql.shuffle.partitions``), Python filter pushdown
    enabled (so ``filterPushdown=true`` works), Python tracebacks hidden from Spark's error messages (so that
    pylog's errors lead them: :mod:`pylog.spark.failures`), the workers running this interpreter (``PYSPARK_PYTHON``,
    unless already set), and the JVM reader's jar in ``spark.jars`` (built on first use, :mod:`pylog.jvm`;
    added to any jars ``conf`` names). Without a JDK to build it, a warning says so and ``format("pylog")``
    is the Python source. ``conf`` adds or overrides settings:
    ``session(conf={"spark.sql.shuffle.partitions": 8})``. Returns the active session if there is one
    (``getOrCreate``), with these settings applied where Spark allows it (not ``spark.jars``: a warning says
    when the running session lacks the JVM reader).

    ``remote`` makes it a Spark Connect session instead of ``master`` (docs/SPARK.md, "Spark Connect"):
    ``"sc://host:port"`` connects to a running Connect server, taking the runtime SQL settings only; when the
    server lacks the JVM reader and runs this pyspark's version, the jar is added to the session as an
    artifact, else a warning says how to start the server with it. ``"local[N]"`` starts PySpark's local
    Connect server in this process, with the jar in ``spark.jars``, listening on 127.0.0.1 only.

    :raises SparkConnectUnavailableError: ``remote`` given and the Connect client's dependencies missing (it names
        them); checked before anything else.
    """
    from pyspark.sql import SparkSession

    if remote is not None:
        connect.require_client()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(2 * (os.cpu_count() or 1)),
        "spark.sql.python.filterPushdown.enabled": "true",
        # pylog's errors then read "[PYTHON_DATA_SOURCE_ERROR] ...: pylog.errors.UnknownTopicError: ..." instead of
        # ending a Python traceback (docs/SPARK.md, "Errors"); it hides every Python UDF's traceback too
        HIDE_TRACEBACK: "true",
    }
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    if (remote is None or remote.startswith("local")) and settings[HIDE_TRACEBACK].lower() == "true":
        # The Python workers that plan a Python source's streams read only this variable, not the setting, so
        # the JVM (this process's, a local Connect server's too) must start with it for their errors to lead too
        # (docs/SPARK.md, "Errors")
        os.environ.setdefault("SPARK_HIDE_TRACEBACK", "1")
    try:
        jar: str | None = jvm.ensure_jar()
    except JvmReaderUnavailableError as exc:
        jar = None
        log.warning("pylog: %s", exc)
    if jar is not None:
        settings["spark.jars"] = ",".join(j for j in (settings.get("spark.jars", ""), jar) if j)
    if remote is not None:
        spark = connect.remote_session(remote, app_name, settings, conf or {})
    else:
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    if connect.is_connect(spark):
        savemode.install()  # the Connect client's writer is loaded now
        problem = connect.add_jvm_reader(spark, jar, jvm.PROVIDER) if jar is not None else None
        if problem:
            log.warning("pylog: format('pylog') reads with the Python source: %s", problem)
    elif jar is not None and which_reader(spark) != "jvm":
        log.warning("pylog: the running SparkSession was started without the JVM reader, so format('pylog') reads "
                    "with the Python source; start Spark with spark.jars=%s (pylog spark-jar prints it)", jar)
    return spark
