"""Spark's default save mode appends to a pylog store, as it does with Kafka's sink.

``df.write.format("pylog").save(path)`` without ``.mode(...)`` runs in Spark's default mode, ErrorIfExists,
which the JVM refuses for every Python data source before any pylog code runs. Kafka's sink accepts it
(and ``error``/``errorifexists`` given explicitly) and appends. :func:`install` wraps PySpark's
``DataFrameWriter`` (classic, and Spark Connect's when its client is loaded) so that a write whose format is
``pylog`` and whose mode is unset, ``error``, ``errorifexists`` or ``default`` is sent as ``append``.
With the JVM reader's jar loaded (classic or on a Spark Connect server) the JVM provider appends in Spark's
default mode itself and the wrapper changes nothing that matters; it is what makes the default mode work
for the Python source alone.

Invariants:
- Only writes whose format is ``pylog`` change; every other write goes through PySpark untouched.
- An explicit ``append``, ``overwrite`` or ``ignore`` is passed on as given (overwrite still fails, with
  pylog's message: a topic is append-only).
- Installing is idempotent and needs no SparkSession; it must run in the driver's Python process before
  ``save()`` (importing :mod:`pylog.spark` does it; PySpark's discovery of ``pyspark_pylog`` happens in a
  worker process and cannot). Spark Connect's writer is wrapped only once its client is loaded, which
  :func:`pylog.spark.register` and :func:`pylog.spark.session` do for a Connect session (they install again).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

__all__ = ["install", "effective_mode", "APPENDING_MODES"]

#: Save modes that Kafka's sink treats as append (None: no mode given, Spark's default ErrorIfExists).
APPENDING_MODES = (None, "error", "errorifexists", "default")

_FORMAT = "_pylog_format"  # attributes this module keeps on a DataFrameWriter instance
_MODE = "_pylog_mode"


def effective_mode(fmt: str | None, mode: str | None) -> str | None:
    """The mode to send for a write of format ``fmt`` given ``mode``: ``append`` in place of Spark's
    default for the pylog format, ``mode`` unchanged otherwise."""
    from .source import NAME, PYTHON_NAME

    pylog_format = fmt is not None and fmt.strip().lower() in (NAME, PYTHON_NAME)
    if pylog_format and (mode is None or mode.lower() in APPENDING_MODES):
        return "append"
    return mode


def _wrap(cls: type) -> None:
    if getattr(cls, "_pylog_default_append", False):
        return
    orig_mode: Callable[..., Any] = cls.mode  # type: ignore[attr-defined]
    orig_format: Callable[..., Any] = cls.format  # type: ignore[attr-defined]
    orig_save: Callable[..., Any] = cls.save  # type: ignore[attr-defined]

    @functools.wraps(orig_mode)
    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            setattr(self, _MODE, saveMode)
        return orig_mode(self, saveMode)

    @functools.wraps(orig_format)
    def format(self: Any, source: str) -> Any:
        setattr(self, _FORMAT, source)
        return orig_format(self, source)

    @functools.wraps(orig_save)
    def save(self: Any, path: str | None = None, format: str | None = None, mode: str | None = None,
             partitionBy: Any = None, **options: Any) -> Any:
        fmt = format if format is not None else getattr(self, _FORMAT, None)
        given = mode if mode is not None else getattr(self, _MODE, None)
        wanted = effective_mode(fmt, given)
        return orig_save(self, path, format, wanted if wanted != given else mode, partitionBy, **options)

    cls.mode, cls.format, cls.save = mode, format, save  # type: ignore[attr-defined]
    cls._pylog_default_append = True  # type: ignore[attr-defined]


def install() -> None:
    """Make the default save mode append for ``format("pylog")`` in this process (idempotent)."""
    from pyspark.sql.readwriter import DataFrameWriter

    _wrap(DataFrameWriter)
    # Spark Connect's writer only if its client is loaded already: importing it without its dependencies
    # (grpc, ...) from `python -c` exits the process (PySpark takes that for a doctest run).
    connect = sys.modules.get("pyspark.sql.connect.readwriter")
    if connect is not None:
        _wrap(connect.DataFrameWriter)
