"""pylog's errors as a PySpark user meets them (pylog/spark/failures.py, docs/SPARK.md "Errors"), on both paths:
the JVM reader (``format("pylog")`` with its jar loaded, the shared session) and the Python source
(``format("pylog-python")``). Writes go through the Python writer on both.

Each case checks that (1) ``raise_pylog_errors`` turns what Spark raised into the pylog error, of its class and
with its message, and (2) with Python tracebacks hidden (``pylog.spark.session()``'s setting) the first line
of Spark's message carries ``pylog.errors.<Class>: <message>``, not the last line of a traceback.
"""

from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import DataLossError, InvalidOptionError, RecordTooLargeError, UnknownTopicError
from pylog.spark import pylog_error, raise_pylog_errors

pytestmark = pytest.mark.spark

HIDE = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


@pytest.fixture
def hidden_tracebacks(spark):
    """Python tracebacks hidden from Spark's messages for one test, as ``pylog.spark.session()`` sets it."""
    before = spark.conf.get(HIDE, None)
    spark.conf.set(HIDE, "true")
    yield
    if before is None:
        spark.conf.unset(HIDE)
    else:
        spark.conf.set(HIDE, before)


@pytest.fixture(params=["jvm", "python"])
def fmt(request) -> str:
    """The format name of each path (``pylog`` is the JVM provider in the shared session)."""
    return request.getfixturevalue("jvm_reader") if request.param == "jvm" else "pylog-python"


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "store"
    with pylog.open(path) as store:
        store.create_topic("small", partitions=1, config={"max.message.bytes": 1000})
        store.create_topic("t", partitions=1)
        store.topic("t").partition(0).append_values([b"x%d" % i for i in range(100)])
        store.delete_records("t", 0, 50)
    return path


def _caught(action, expected_class, expected_message: str):
    """What Spark raised for ``action``; ``raise_pylog_errors`` must turn it into the pylog error itself (its
    class, its message, Spark's exception as its cause)."""
    with pytest.raises(Exception) as bare:
        action()
    with pytest.raises(expected_class) as info:
        with raise_pylog_errors():
            raise bare.value
    assert type(info.value) is expected_class
    assert str(info.value) == expected_message
    assert info.value.__cause__ is not None and pylog_error(info.value.__cause__) is not None
    return bare.value


def _first_line_leads(spark_error: BaseException, expected_class, expected_message: str) -> None:
    """pylog's error leads Spark's message: on its first line after Spark's prefix, or (a PythonException
    from a task) on the line after PySpark's one-line header."""
    lines = [line for line in str(spark_error).splitlines() if line.strip()]
    expected = f"pylog.errors.{expected_class.__name__}: {expected_message}"
    assert expected in lines[0] or (lines[0] == "An exception was thrown from the Python worker:"
                                    and lines[1] == expected), str(spark_error)


def test_write_to_a_missing_topic_reaches_the_user_as_unknown_topic_error(spark, fmt, store_path, hidden_tracebacks):
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    message = (f"topic 'nope' does not exist in {store_path}: create it first (`pylog topics create`, "
               "store.create_topic), or write with .option('autoCreateTopics', 'true') and .option('numPartitions', N)")
    error = _caught(lambda: df.write.format(fmt).mode("append").option("topic", "nope").save(str(store_path)),
                    UnknownTopicError, message)
    _first_line_leads(error, UnknownTopicError, message)


def test_record_over_max_message_bytes_reaches_the_user_as_record_too_large_error(spark, fmt, store_path,
                                                                                  hidden_tracebacks):
    big = spark.createDataFrame([("k", "v" * 5000)], "key string, value string").coalesce(1)
    message = "record 0 needs 5073 bytes, over max.message.bytes (1000) of small-0"
    error = _caught(lambda: big.write.format(fmt).mode("append").option("topic", "small").save(str(store_path)),
                    RecordTooLargeError, message)
    _first_line_leads(error, RecordTooLargeError, message)
    with pylog.open(store_path) as store:
        assert store.topic("small").partition(0).log_end_offset == 0


def test_bad_read_option_reaches_the_user_as_invalid_option_error(spark, fmt, store_path, hidden_tracebacks):
    message = "option 'startingOffsets': expected earliest, latest or per-partition JSON, got 'bogus'"
    error = _caught(lambda: spark.read.format(fmt).option("subscribe", "t").option("startingOffsets", "bogus")
                    .load(str(store_path)).collect(), InvalidOptionError, message)
    _first_line_leads(error, InvalidOptionError, message)


def test_removed_offsets_reach_the_user_as_data_loss_error(spark, fmt, store_path, hidden_tracebacks):
    message = ("t-0: offsets [10, 50) were removed (the log now starts at 50) (set failOnDataLoss=false to skip "
               "what is gone)")
    error = _caught(lambda: spark.read.format(fmt).option("subscribe", "t")
                    .option("startingOffsets", '{"t": {"0": 10}}').load(str(store_path)).collect(),
                    DataLossError, message)
    assert f"pylog.errors.DataLossError: {message}" in str(error)


def test_pylog_error_leaves_other_exceptions_alone():
    assert pylog_error(ValueError("pylog.errors.NotAnError: x")) is None
    assert pylog_error(RuntimeError("no pylog error here")) is None
    found = pylog_error(RuntimeError("Traceback (most recent call last):\n  File \"x\", line 1\n"
                                     "pylog.errors.UnknownTopicError: first\n\nDuring handling...\n"
                                     "pylog.errors.DataLossError: t-0: the last one raised\n"))
    assert type(found) is DataLossError and str(found) == "t-0: the last one raised"
    with pytest.raises(ValueError):
        with raise_pylog_errors():
            raise ValueError("not pylog's")


def test_stream_refused_for_a_batch_only_option_fails_at_its_first_call_with_the_pylog_error(store_path):
    # Raised by streamReader() itself, PySpark's streaming planner lost the error: its `finally: reader.stop()`
    # met an unbound `reader` and reported an UnboundLocalError instead.
    from pylog.spark import PylogDataSource, kafka_schema
    source = PylogDataSource({"path": str(store_path), "subscribe": "t", "endingOffsets": "latest"})
    reader = source.streamReader(kafka_schema())
    message = "option 'endingOffsets': applies to batch reads only, not to streaming reads"
    for call in (reader.initialOffset, reader.getDefaultReadLimit, reader.prepareForTriggerAvailableNow):
        with pytest.raises(InvalidOptionError) as info:
            call()
        assert str(info.value) == message
    reader.stop()


_STREAM_ERROR_CHILD = """
import os, sys
from pylog.spark import session
spark = session(master="local[1]", conf={"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
                                         "spark.local.dir": sys.argv[2]})
for fmt in ("pylog", "pylog-python"):
    for trigger in ({"availableNow": True}, {"processingTime": "1 second"}):
        query = (spark.readStream.format(fmt).option("subscribe", "t").option("endingOffsets", "latest")
                 .load(sys.argv[1]).writeStream.format("noop").trigger(**trigger).start())
        try:
            query.awaitTermination(300)
            print("NO ERROR", flush=True)
        except Exception as exc:
            print(str(exc).strip().splitlines()[0], flush=True)
spark.stop()
"""


@pytest.mark.slow  # a Spark driver of its own: what session() sets must be there when the JVM starts
def test_a_refused_stream_option_leads_the_streaming_query_error_in_a_session_from_pylog(spark, store_path, tmp_path):
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HIDE_TRACEBACK"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    out = subprocess.run([sys.executable, "-c", _STREAM_ERROR_CHILD, str(store_path), str(tmp_path / "local")],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert out.returncode == 0 and len(lines) == 4, out.stdout + out.stderr[-3000:]
    expected = ("pylog.errors.InvalidOptionError: option 'endingOffsets': applies to batch reads only, "
                "not to streaming reads")
    for line in lines:
        assert line.startswith("[STREAM_FAILED]") and expected in line, line
