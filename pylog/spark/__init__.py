"""pylog as a Spark data source: ``spark.read`` / ``readStream`` / ``write`` / ``writeStream`` ``.format("pylog")``.

    from pylog.spark import session
    spark = session()                                  # local[*], UI off; "pylog" is found with no register call
    df = spark.read.format("pylog").option("subscribe", "events").load("./pylog-data")
    df.selectExpr("topic", "partition", "offset", "cast(value as string)").show()

Installing pylog installs the top-level module ``pyspark_pylog``; PySpark imports every ``pyspark_*``
module it finds and registers its ``DefaultSource``, so ``format("pylog")`` needs no setup.
:func:`register` does it by hand (for a PySpark that does not look, or an install it cannot see).

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
workers' interpreter). ``source`` imports the others; none of them imports it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Mapping

from . import savemode, workers
from .exactly_once import SinkTransactionLostError
from .options import DataLossError, InvalidOptionError
from .source import NAME, PylogDataSource, kafka_schema

savemode.install()
workers.configure()

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PylogDataSource", "register", "session", "kafka_schema", "InvalidOptionError", "DataLossError",
           "SinkTransactionLostError", "NAME"]


def register(spark: "SparkSession") -> None:
    """Register the ``pylog`` format with ``spark`` explicitly (discovery normally makes this unnecessary).

    Logs a warning saying what to set when Spark's Python workers run an interpreter that cannot import
    pylog (they would fail to load the source).
    """
    problem = workers.worker_problem()
    if problem:
        logging.getLogger("pylog.spark").warning("pylog: %s", problem)
    spark.dataSource.register(PylogDataSource)


def session(master: str = "local[*]", app_name: str = "pylog", conf: Mapping[str, Any] | None = None) -> "SparkSession":
    """A SparkSession suited to reading and writing a local store.

    UI off, 2 shuffle partitions per core (``spark.sql.shuffle.partitions``), Python filter pushdown
    enabled (so ``filterPushdown=true`` works), and the workers running this interpreter
    (``PYSPARK_PYTHON``, unless already set). ``conf`` adds or overrides settings:
    ``session(conf={"spark.sql.shuffle.partitions": 8})``. Returns the active session if there is one
    (``getOrCreate``), with these settings applied where Spark allows it.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(2 * (os.cpu_count() or 1)),
        "spark.sql.python.filterPushdown.enabled": "true",
    }
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
