"""Which Python Spark's workers run, so that they find the ``pylog`` format.

PySpark looks data sources up in a Python worker, and runs every task in one: the interpreter named by
``PYSPARK_DRIVER_PYTHON`` or ``PYSPARK_PYTHON`` in the environment the JVM started with, else ``python3``
from ``PATH`` (``spark.pyspark.python`` only changes the task workers, not the lookup). A script run with a
virtualenv's interpreter, without activating the virtualenv, thus starts workers on another Python that
cannot import pylog, and Spark answers ``[DATA_SOURCE_NOT_FOUND] Failed to find the data source: pylog``.

Invariants:
- :func:`configure` changes nothing the user set: only when neither variable is set, no SparkContext runs
  yet in this process, and ``python3`` on ``PATH`` is another interpreter than this one, it sets
  ``PYSPARK_PYTHON`` to this interpreter (logged), which the JVM started next inherits.
- :func:`worker_problem` runs no Spark job: it resolves the workers' interpreter and, only when it is not
  this one, asks it whether it can import ``pyspark_pylog`` (one short subprocess).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

__all__ = ["configure", "worker_python", "worker_problem", "fix_hint"]

log = logging.getLogger("pylog.spark")

_VARS = ("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON")


def _same_interpreter(exe: str | None) -> bool:
    if not exe:
        return False
    found = shutil.which(exe)
    if found is None:
        return False
    try:
        return os.path.samefile(found, sys.executable) or os.path.realpath(found) == os.path.realpath(sys.executable)
    except OSError:
        return False


def worker_python(env: Any = None) -> str:
    """The interpreter PySpark would start workers with, given environment ``env`` (default: this one)."""
    env = os.environ if env is None else env
    for var in _VARS:
        if env.get(var):
            return str(env[var])
    return "python3"


def fix_hint() -> str:
    """What to set so that Spark's workers run this interpreter."""
    return (f"set PYSPARK_PYTHON={sys.executable} before the SparkSession starts (or activate the virtualenv, or "
            "start Spark with pylog.spark.session())")


def configure() -> bool:
    """Point Spark's workers at this interpreter when they would run another one and the user set nothing
    (see the module docstring). Returns True if it set ``PYSPARK_PYTHON``."""
    if any(os.environ.get(v) for v in _VARS) or _context_running() or _same_interpreter("python3"):
        return False
    os.environ["PYSPARK_PYTHON"] = sys.executable
    log.info("pylog: PYSPARK_PYTHON set to %s (python3 on PATH is another interpreter, which could not find the "
             "pylog data source); set PYSPARK_PYTHON yourself to choose another", sys.executable)
    return True


def worker_problem(exe: str | None = None) -> str | None:
    """Why Spark's workers (interpreter ``exe``, default :func:`worker_python`) cannot find the ``pylog``
    format, with what to set; None when they can."""
    exe = worker_python() if exe is None else exe
    if _same_interpreter(exe):
        return None
    found = shutil.which(exe)
    if found is None:
        return f"Spark's Python workers would run {exe!r}, which is not found; {fix_hint()}"
    try:
        proc = subprocess.run([found, "-c", "import pyspark_pylog"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Spark's Python workers would run {found}, which did not start ({exc}); {fix_hint()}"
    if proc.returncode == 0:
        return None
    return (f"Spark's Python workers run {found}, which cannot import pylog, so Spark will not find the 'pylog' "
            f"data source ([DATA_SOURCE_NOT_FOUND]); {fix_hint()}")


def _context_running() -> bool:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None
