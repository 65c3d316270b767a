"""pylog's errors out of the exceptions Spark wraps them in (docs/SPARK.md, "Errors").

Spark never lets a data source's own exception reach the user: an error of the Python source or writer
arrives as an ``AnalysisException`` ``[PYTHON_DATA_SOURCE_ERROR]`` (while the source or writer is created or
planned), a ``PythonException`` (in a task), or a ``StreamingQueryException`` (a stream), carrying the Python
traceback as text; an error of the JVM reader as an ``IllegalArgumentException`` (options) or a Py4J error
(data loss, a damaged file in a task). In every case the text holds one line
``pylog.errors.<Class>: <message>``: the last line of the Python traceback (the only line when Spark hides
tracebacks: ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``, which :func:`pylog.spark.session`
sets), and the start of the JVM reader's messages, which lead with the Python reader's class for the same
failure.

:func:`pylog_error` finds that line and rebuilds the error; :func:`raise_pylog_errors` re-raises it, so that
``except UnknownTopicError`` works around a Spark call. Nothing here imports PySpark: the rules are on text.

Invariants: only subclasses of :class:`pylog.errors.PylogError` are rebuilt (a name that is not one is not
pylog's error, and is left alone); the rebuilt error's ``str()`` is the message as pylog raised it.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from .. import errors

__all__ = ["pylog_error", "raise_pylog_errors"]

#: A Python traceback's header: when the text has one, the error raised is the last ``pylog.errors`` line.
_TRACEBACK = "Traceback (most recent call last):"
_LINE = re.compile(r"pylog\.errors\.([A-Za-z_][A-Za-z0-9_]*): ([^\n]*)")
#: What Spark appends to an error class's message on a line of its own.
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")
_OPTION = re.compile(r"option '([^']*)': (.*)", re.S)


def pylog_error(exc: BaseException) -> errors.PylogError | None:
    """The pylog error inside ``exc`` (a Spark, Py4J or PySpark exception, or a pylog error itself), rebuilt
    as its own class with its message; None when ``exc`` carries none."""
    if isinstance(exc, errors.PylogError):
        return exc
    text = str(exc)
    found = list(_LINE.finditer(text))
    if not found:
        return None
    # a traceback ends with the error raised (causes come before it); the JVM's texts start with it and
    # repeat it in the causes and stack traces that follow
    match = found[-1] if _TRACEBACK in text else found[0]
    cls = getattr(errors, match.group(1), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.PylogError)):
        return None
    return _rebuild(cls, _SQLSTATE.sub("", match.group(2)).strip())


def _rebuild(cls: type[errors.PylogError], message: str) -> errors.PylogError:
    """An instance of ``cls`` whose ``str()`` is ``message``: through its constructor where that keeps the
    message (its other attributes then get their defaults), else with the message alone."""
    option = _OPTION.match(message)
    try:
        error = cls(option.group(1), option.group(2)) if issubclass(cls, errors.InvalidOptionError) and option \
            else cls(message)
        if str(error) == message:
            return error
    except TypeError:
        pass
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    return error


@contextmanager
def raise_pylog_errors() -> Iterator[None]:
    """Within the block, an exception carrying a pylog error is re-raised as that error (its ``__cause__``
    the exception Spark raised); other exceptions pass unchanged::

        with raise_pylog_errors():
            df.write.format("pylog").option("topic", "events").save(path)   # UnknownTopicError if missing
    """
    try:
        yield
    except errors.PylogError:
        raise
    except Exception as exc:  # noqa: BLE001 - every Spark exception type may carry one
        error = pylog_error(exc)
        if error is None:
            raise
        raise error from exc
