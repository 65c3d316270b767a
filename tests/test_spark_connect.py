"""``format("pylog")`` through Spark Connect: a Connect server with the JVM reader's jar, a client without a JVM.

The server is Spark's own ``SparkConnectServer`` run with ``spark-submit --jars <the JVM reader's jar>`` (as
docs/SPARK.md, "Spark Connect", says to start it), in a process of its own: a process holds one SparkContext and
the shared session's is a classic one. It listens on 127.0.0.1 only (gRPC, the driver and its block manager:
``SPARK_LOCAL_IP``) on a port it picks, which the fixture reads from the server's log line; it runs under
``timeout`` (so it ends by itself even if this process dies without tearing down) and is stopped at the end of
the module. Its Python workers run this interpreter, which imports pylog (the writes and streams the JVM
provider hands to the Python source run there).

The client session here is made with the Connect client's own builder (``create()``): PySpark's generic builder
would refuse it next to the classic session and would switch this whole process into Connect mode. The tests of
the user's path (a plain client, ``pylog.spark.session(remote=...)``) run as child processes (no JVM in them).
Rows are compared with the Python source's (the reference) in the shared classic session, every column.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("pyspark")

import pylog  # noqa: E402

pytestmark = pytest.mark.slow  # a Spark Connect server JVM of its own (and spark: conftest marks the file)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:(\d+)")
#: How long the server may take to start on a loaded machine, and how long it may live at all.
START_TIMEOUT_S = 300
LIFETIME_S = 1800


def _spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _start_server(scratch, jar: str | None) -> tuple[subprocess.Popen, int, str]:
    """Starts a Connect server, with the JVM reader's ``jar`` on its classpath if given; returns it, its port and
    its log's path."""
    log_path = str(scratch / "connect-server.log")
    home = _spark_home()
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("SPARK_REMOTE", None)
    cmd = ["timeout", "--kill-after=30", str(LIFETIME_S), os.path.join(home, "bin", "spark-submit"),
           "--class", SERVER_CLASS, "--master", "local[2]", *(["--jars", jar] if jar else []),
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.connect.grpc.binding.port=0",  # a free port, read from the log
           "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", f"spark.local.dir={scratch / 'local'}",
           "--conf", f"spark.sql.warehouse.dir={scratch / 'warehouse'}",
           "--conf", f"spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -Djava.io.tmpdir={scratch}"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=str(scratch),
                                start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            found = STARTED.search(f.read())
        if found:
            return proc, int(found.group(1)), log_path
        time.sleep(0.2)  # polling the server's log for its start line (it offers no other handshake)
    _stop_server(proc)
    with open(log_path, encoding="utf-8", errors="replace") as f:
        tail = f.read()[-4000:]
    pytest.fail(f"the Spark Connect server did not start (exit {proc.returncode}):\n{tail}")


def _stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def connect_url(jvm_reader, jvm_jar, tmp_path_factory):
    """``sc://127.0.0.1:<port>`` of a Spark Connect server with the JVM reader's jar on its classpath."""
    proc, port, _ = _start_server(tmp_path_factory.mktemp("connect-server"), jvm_jar)
    yield f"sc://127.0.0.1:{port}"
    _stop_server(proc)


@pytest.fixture(scope="module")
def bare_url(jvm_reader, tmp_path_factory):
    """``sc://127.0.0.1:<port>`` of a Spark Connect server started without the JVM reader's jar."""
    proc, port, _ = _start_server(tmp_path_factory.mktemp("bare-connect-server"), None)
    yield f"sc://127.0.0.1:{port}"
    _stop_server(proc)


@pytest.fixture(scope="module")
def connect(connect_url):
    """A Connect client session on the module's server."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(connect_url).create()
    yield session
    session.stop()


def _rows(df):
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[2], r[3], r[4]))


def _store(path, partitions=3, records=1200):
    with pylog.open(path) as store:
        store.create_topic("events", partitions=partitions)
        producer = store.producer()
        for i in range(records):
            producer.send("events", value=b"v%d" % i if i % 9 else None, key=b"k%d" % (i % 17) if i % 4 else None,
                          headers=[("h", b"%d" % i)] if i % 5 == 0 else None, partition=i % partitions,
                          timestamp_ms=1_700_000_000_000 + i)
        producer.close()
    return str(path)


def _plan(df, capsys) -> str:
    capsys.readouterr()
    df.explain()
    return capsys.readouterr().out


def test_connect_batch_read_runs_the_jvm_reader_and_reads_every_column(spark, connect, tmp_path, capsys):
    path = _store(tmp_path / "store")
    df = connect.read.format("pylog").option("subscribe", "events").option("includeHeaders", "true").load(path)
    reference = spark.read.format("pylog-python").option("subscribe", "events").option("includeHeaders", "true")
    rows = _rows(df)
    assert len(rows) == 1200
    assert rows == _rows(reference.load(path))
    assert "pylog (JVM reader)" in _plan(df, capsys)
    assert df.count() == 1200
    assert df.selectExpr("sum(length(value)) AS n").collect()[0].n == sum(len(b"v%d" % i) for i in range(1200) if i % 9)


def test_connect_filter_on_partition_and_offset_is_pushed_into_the_jvm_scan(spark, connect, tmp_path, capsys):
    path = _store(tmp_path / "store")
    where = "partition = 1 AND offset >= 390"
    df = connect.read.format("pylog").option("subscribe", "events").load(path).where(where)
    rows = _rows(df)
    assert [(r[3], r[4]) for r in rows] == [(1, o) for o in range(390, 400)]
    assert rows == _rows(spark.read.format("pylog-python").option("subscribe", "events").load(path).where(where))
    plan = _plan(df, capsys)
    assert "pylog (JVM reader)" in plan
    # The scan took both conditions (they are exact on its ranges): Spark filters the rows no more.
    assert not re.search(r"Filter .*(390|partition#\d+ = 1)", plan), plan


def test_which_reader_asks_the_connect_server(connect):
    from pylog import jvm
    from pylog.spark import which_reader
    from pylog.spark.connect import has_jvm_reader, is_connect

    assert is_connect(connect)
    assert which_reader(connect) == "jvm"
    assert has_jvm_reader(connect, jvm.PROVIDER) is True
    assert has_jvm_reader(connect, "org.pylog.spark.NoSuchProvider") is False


def test_connect_python_source_reads_on_the_server_workers_after_register(spark, connect, tmp_path):
    from pylog.spark import register

    path = _store(tmp_path / "store", records=300)
    register(connect)  # the classes go to the server by reference: its workers import pylog
    df = connect.read.format("pylog-python").option("subscribe", "events").load(path)
    assert _rows(df) == _rows(spark.read.format("pylog-python").option("subscribe", "events").load(path))
    assert connect.read.format("pylog").option("subscribe", "events").load(path).count() == 300


def test_connect_available_now_stream_copies_a_topic_exactly_once(connect, tmp_path):
    path = _store(tmp_path / "store", records=900)
    with pylog.open(path) as store:
        store.create_topic("copy", partitions=2)
    query = (connect.readStream.format("pylog").option("subscribe", "events").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 400).load(path).selectExpr("key", "value")
             .writeStream.format("pylog").option("topic", "copy")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start(path))
    assert query.awaitTermination(600) is not False
    progress = [p for p in query.recentProgress if p.numInputRows]
    assert sum(p.numInputRows for p in progress) == 900 and len(progress) >= 3  # 400 per trigger at most
    source = progress[-1].sources[0]
    assert "PylogStream" in source.description  # the JVM reader's stream
    assert source.metrics["maxOffsetsBehindLatest"] == "0"
    copied = []
    with pylog.open(path, read_only=True) as store:
        for p in store.topic("copy").partitions:
            assert p.last_stable_offset == p.log_end_offset  # the exactly-once sink committed every transaction
            copied += [r.value for r in p.read(0, 10_000, isolation_level="read_committed")]
    assert sorted(copied, key=lambda v: v or b"") == sorted((b"v%d" % i if i % 9 else None for i in range(900)),
                                                           key=lambda v: v or b"")


CLIENT = r'''
import json, sys
url, path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
report = {}
if mode in ("plain", "register"):        # a plain Connect client: pylog.spark is not imported before it
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(url).getOrCreate()
    if mode == "register":
        try:                             # Spark's default save mode, before pylog.spark is imported
            spark.range(1).selectExpr("'x' AS value").write.format("pylog").option("topic", "w").save(path)
            report["save_before"] = "appended"
        except Exception as exc:
            report["save_before"] = str(exc).splitlines()[0]
        import pylog.spark
        pylog.spark.register(spark)
        report["reader"] = pylog.spark.which_reader(spark)
else:                                    # pylog's helper, on a server or a local one started here
    import pylog.spark
    spark = pylog.spark.session(remote=url, conf={"spark.sql.shuffle.partitions": 3, "spark.local.dir": sys.argv[4]})
    report["reader"] = pylog.spark.which_reader(spark)
    report["shuffle"] = spark.conf.get("spark.sql.shuffle.partitions")
from pyspark.sql import functions as F
df = spark.range(50).select(F.col("id").cast("string").alias("key"), (F.col("id") * 2).cast("string").alias("value"))
try:
    df.write.format("pylog").option("topic", "w").save(path)      # Spark's default save mode: ErrorIfExists
    report["save"] = "appended"
except Exception as exc:
    report["save"] = str(exc).splitlines()[0]
    df.write.format("pylog").option("topic", "w").mode("append").save(path)
try:
    df.write.format("pylog").option("topic", "w").mode("overwrite").save(path)
    report["overwrite"] = "accepted"
except Exception as exc:
    report["overwrite"] = str(exc).splitlines()[0]
read = spark.read.format("pylog").option("subscribe", "w").load(path)
report["rows"] = sorted(r.value.decode() for r in read.select("value").collect())
report["connect"] = type(spark).__module__
report["pylog.spark"] = "pylog.spark" in sys.modules
spark.stop()
print(json.dumps(report))
'''


def _client(url, tmp_path, mode):
    """Runs :data:`CLIENT` against ``url`` on a new store with topic ``w``; returns its report."""
    path = str(tmp_path / "store")
    with pylog.open(path) as store:
        store.create_topic("w", partitions=2)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-c", CLIENT, url, path, mode, str(tmp_path / "local")],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines() if "\tat " not in line)[-6000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["connect"].startswith("pyspark.sql.connect")
    return report


EXPECTED = sorted(str(i * 2) for i in range(50))


def test_plain_connect_client_writes_in_spark_default_save_mode_without_pylog_in_the_client(connect_url, tmp_path):
    report = _client(connect_url, tmp_path, "plain")
    assert report["pylog.spark"] is False  # no wrapped DataFrameWriter: the server's JVM provider appends
    assert report["save"] == "appended"
    assert report["rows"] == EXPECTED  # appended once, overwrite refused
    assert "a pylog topic is append-only" in report["overwrite"]


def test_pylog_session_helper_makes_a_connect_session(connect_url, tmp_path):
    report = _client(connect_url, tmp_path, "helper")
    assert report["reader"] == "jvm" and report["shuffle"] == "3"
    assert report["save"] == "appended" and report["rows"] == EXPECTED
    assert "a pylog topic is append-only" in report["overwrite"]


def test_pylog_session_helper_adds_the_jvm_reader_to_a_session_on_a_server_without_it(bare_url, tmp_path):
    report = _client(bare_url, tmp_path, "helper")
    assert report["reader"] == "jvm"  # the jar went to the server as the session's artifact
    assert report["save"] == "appended" and report["rows"] == EXPECTED
    assert "a pylog topic is append-only" in report["overwrite"]


def test_register_makes_the_default_save_mode_append_on_a_connect_server_without_the_jar(bare_url, tmp_path):
    report = _client(bare_url, tmp_path, "register")
    # What docs/SPARK.md says does not work there: Spark refuses its default save mode for a Python data source.
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in report["save_before"]
    assert report["reader"] == "python"
    assert report["save"] == "appended"  # pylog's wrapper of the Connect client's writer sent it as append
    assert report["rows"] == EXPECTED  # the refused write wrote nothing


def test_pylog_session_helper_starts_a_local_connect_server_with_the_jvm_reader(jvm_reader, tmp_path):
    report = _client("local[1]", tmp_path, "helper")
    assert report["reader"] == "jvm" and report["shuffle"] == "3"
    assert report["save"] == "appended" and report["rows"] == EXPECTED


def test_session_with_remote_names_the_missing_connect_client_dependencies(monkeypatch):
    import importlib.util

    import pylog.spark
    from pylog.errors import PylogError, SparkConnectUnavailableError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "grpc_status" else real(name, *a))
    with pytest.raises(SparkConnectUnavailableError, match=r"lacks grpc_status: pip install 'pyspark\[connect\]'") as e:
        pylog.spark.session(remote="sc://127.0.0.1:1")
    assert isinstance(e.value, PylogError) and isinstance(e.value, ImportError)


def test_pylog_errors_come_out_of_connect_exceptions(connect, tmp_path):
    from pylog.errors import InvalidOptionError, UnknownTopicError
    from pylog.spark import raise_pylog_errors

    path = _store(tmp_path / "store", records=10)
    read = connect.read.format("pylog").option("subscribe", "events")
    with pytest.raises(InvalidOptionError, match="startingoffset"), raise_pylog_errors():  # the JVM reader's
        read.option("startingOffset", "earliest").load(path).count()
    with pytest.raises(UnknownTopicError), raise_pylog_errors():  # the Python writer's, on the server
        connect.range(1).selectExpr("'x' AS value").write.format("pylog").option("topic", "nope").save(path)
