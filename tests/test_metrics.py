"""pylog's metrics (pylog/metrics.py, pylog/prometheus.py, the hooks in the storage, clients and server):
names and docs, counters against ground truth (records produced through pylog serve by kafka-python and by
pylog's producer), lag of a group made to lag by hand, the exposition checked by promtool, /health, and the
library without the prometheus-client extra.

Recorders are the process's (invariant: they never go back), so each test compares values before and after
what it does, on topics of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("prometheus_client", reason="the metrics extra (prometheus-client) is not installed")

import pylog  # noqa: E402
from pylog import metrics, prometheus  # noqa: E402
from pylog.server.auth import Credentials  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.errors import KafkaError  # noqa: E402

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs", "OPERATIONS.md")


@pytest.fixture(autouse=True)
def recording_restored():
    """Leave recording as it was (registering turns it on for the process)."""
    was = metrics.enabled()
    yield
    metrics.enable(was)


def value(reg, name: str, **labels: str) -> float:
    """The sample's value in ``reg`` (0 when absent: a counter not incremented yet)."""
    got = reg.get_sample_value(name, labels)
    return 0.0 if got is None else got


# ------------------------------------------------------------------------------------------ names and docs

def test_operations_doc_table_lists_every_metric_as_defined():
    text = open(DOCS, encoding="utf-8").read()
    rows = re.findall(r"^\| `(pylog_\w+)` \| (\w+) \| ([^|]*) \| (\w+) \| ([^|]*) \| ([^|]*) \|$", text, re.M)
    documented = [(name, kind, labels.strip(), source, kafka.strip(), help_.strip())
                  for name, kind, labels, source, kafka, help_ in rows]
    defined = [(m.name, m.kind, ", ".join(m.labels) or "-", m.source, m.kafka or "-", m.help) for m in metrics.METRICS]
    assert documented == defined


def test_metric_names_follow_prometheus_conventions():
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    for m in metrics.METRICS:
        assert re.fullmatch(r"pylog_[a-z0-9_]+", m.name), m.name
        if m.kind == "counter":
            assert m.name.endswith("_total"), m.name
        else:
            assert not m.name.endswith("_total"), m.name
        if m.kind == "histogram":
            assert m.name.endswith(("_seconds", "_bytes")) and list(m.buckets) == sorted(m.buckets), m.name
        assert not re.search(r"_(ms|milliseconds|kb|mb|percent)(_|$)", m.name), m.name


def test_a_counter_never_goes_backwards():
    c = metrics.Counter(metrics.BY_NAME["pylog_topic_records_in_total"])
    c.inc(("t",), 3)
    with pytest.raises(ValueError):
        c.inc(("t",), -1)
    assert c.values() == [(("t",), 3)]


def test_histogram_buckets_are_cumulative_with_sum():
    h = metrics.Histogram(metrics.BY_NAME["pylog_log_flush_duration_seconds"])
    for v in (0.00005, 0.0003, 0.0003, 7.0):
        h.observe((), v)
    [(labels, buckets, total)] = h.values()
    counts = dict(buckets)
    assert labels == () and counts["0.0001"] == 1 and counts["0.0005"] == 3 and counts["5.0"] == 3
    assert counts["+Inf"] == 4 and total == pytest.approx(7.00065)


# ------------------------------------------------------------------------------------- against ground truth

def test_records_produced_through_the_server_and_by_the_producer_count_exactly(store, server):
    reg = prometheus.registry(store)
    n = 1234
    store.create_topic("via-kafka", partitions=3)
    store.create_topic("via-pylog", partitions=2)
    before = {name: value(reg, name, api="Produce") for name in ("pylog_server_requests_total",
                                                                 "pylog_server_request_duration_seconds_count")}
    kp = KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks=1, linger_ms=5)
    for i in range(n):
        kp.send("via-kafka", f"v{i}".encode(), key=str(i).encode())
    kp.flush()
    kp.close()
    producer = store.producer(client_id="metrics-test-producer")
    sent_before = value(reg, "pylog_producer_records_sent_total", client_id="metrics-test-producer")
    for i in range(n):
        producer.send("via-pylog", f"v{i}".encode())
    producer.flush()
    assert value(reg, "pylog_topic_records_in_total", topic="via-kafka") == n
    assert value(reg, "pylog_topic_records_in_total", topic="via-pylog") == n
    assert value(reg, "pylog_producer_records_sent_total", client_id="metrics-test-producer") - sent_before == n
    stored = sum(p.size_bytes() for p in store.topic("via-kafka").partitions)
    assert value(reg, "pylog_topic_bytes_in_total", topic="via-kafka") == stored
    requests = value(reg, "pylog_server_requests_total", api="Produce") - before["pylog_server_requests_total"]
    assert requests >= 1
    assert value(reg, "pylog_server_request_duration_seconds_count", api="Produce") - \
        before["pylog_server_request_duration_seconds_count"] == requests
    # Out: a Kafka consumer through the server reads all of them. What the server handed out may be more: a
    # client drops a fetched answer whose partition position moved meanwhile and fetches again (Kafka's
    # BytesOut counts those too).
    consumer = KafkaConsumer("via-kafka", bootstrap_servers=server.bootstrap_servers, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
    got = sum(1 for _ in consumer)
    consumer.close()
    assert got == n
    assert value(reg, "pylog_topic_records_out_total", topic="via-kafka") >= n
    assert value(reg, "pylog_topic_bytes_out_total", topic="via-kafka") > 0
    # The producer's gauge: nothing buffered once flushed.
    assert value(reg, "pylog_producer_buffer_available_bytes", client_id="metrics-test-producer") == \
        producer.config["buffer_memory"]
    producer.close()


def test_group_lag_equals_end_minus_committed_for_a_group_made_to_lag_by_hand(store):
    store.create_topic("lagging", partitions=2)
    p0, p1 = store.topic("lagging").partitions
    p0.append_values([b"x"] * 500)
    p1.append_values([b"y"] * 70)
    store.commit_offsets("by-hand", {pylog.TopicPartition("lagging", 0): 123, pylog.TopicPartition("lagging", 1): 70})
    p0.delete_records(100)
    reg = prometheus.registry(store)
    for number, committed in ((0, 123), (1, 70)):
        part = store.topic("lagging").partition(number)
        labels = {"group": "by-hand", "topic": "lagging", "partition": str(number)}
        assert value(reg, "pylog_group_committed_offset", **labels) == committed
        assert value(reg, "pylog_group_lag", **labels) == part.log_end_offset - committed
        assert value(reg, "pylog_group_lead", **labels) == committed - part.log_start_offset
        assert value(reg, "pylog_log_end_offset", topic="lagging", partition=str(number)) == part.log_end_offset
    assert value(reg, "pylog_group_lag", group="by-hand", topic="lagging", partition="0") == 377
    assert value(reg, "pylog_group_lead", group="by-hand", topic="lagging", partition="0") == 23
    assert value(reg, "pylog_log_segments", topic="lagging", partition="0") == len(p0.segments)
    assert value(reg, "pylog_log_size_bytes", topic="lagging", partition="1") == p1.size_bytes()


def test_consumer_gauges_match_its_own_metrics(store):
    store.create_topic("polled", partitions=2)
    for p in store.topic("polled").partitions:
        p.append_values([b"z"] * 300)
    reg = prometheus.registry(store)
    consumer = store.consumer("polled", client_id="metrics-test-consumer", auto_offset_reset="earliest")
    before = value(reg, "pylog_consumer_records_consumed_total", client_id="metrics-test-consumer")
    got = sum(len(v) for v in consumer.poll(timeout_ms=2000, max_records=250).values())
    assert got == 250
    assert value(reg, "pylog_consumer_records_consumed_total", client_id="metrics-test-consumer") - before == got
    assert value(reg, "pylog_topic_records_out_total", topic="polled") == got
    own = consumer.metrics()
    leads = [v["lead"] for v in own.values() if isinstance(v, dict) and v.get("lead") is not None]
    assert value(reg, "pylog_consumer_records_lag_max", client_id="metrics-test-consumer") == \
        own["consumer-fetch-manager-metrics"]["records-lag-max"]
    assert value(reg, "pylog_consumer_records_lead_min", client_id="metrics-test-consumer") == min(leads)
    assert value(reg, "pylog_consumer_fetch_duration_seconds_count", client_id="metrics-test-consumer") >= 1
    consumer.close()


def test_each_flush_is_one_fsync_in_the_flush_histogram(store):
    store.create_topic("flushed")
    part = store.topic("flushed").partition(0)
    reg = prometheus.registry(store)
    before = value(reg, "pylog_log_flush_duration_seconds_count")
    for _ in range(3):
        part.append_values([b"f"] * 10)
        part.flush()
    assert value(reg, "pylog_log_flush_duration_seconds_count") - before == 3
    assert value(reg, "pylog_log_flush_duration_seconds_sum") > 0


def test_recording_off_counts_nothing(store):
    store.create_topic("unrecorded")
    reg = prometheus.registry(store)
    metrics.enable(False)
    store.topic("unrecorded").partition(0).append_values([b"u"] * 5)
    assert value(reg, "pylog_topic_records_in_total", topic="unrecorded") == 0
    metrics.enable(True)
    store.topic("unrecorded").partition(0).append_values([b"u"] * 5)
    assert value(reg, "pylog_topic_records_in_total", topic="unrecorded") == 5


def test_server_errors_are_counted_by_kafka_error_name(store, server):
    reg = prometheus.registry(store)
    labels = {"api": "DeleteTopics", "error": "UNKNOWN_TOPIC_OR_PARTITION"}
    before = value(reg, "pylog_server_request_errors_total", **labels)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
    try:
        with pytest.raises(KafkaError):
            admin.delete_topics(["no-such-topic-a", "no-such-topic-b"])
    finally:
        admin.close()
    assert value(reg, "pylog_server_request_errors_total", **labels) - before == 2
    assert value(reg, "pylog_server_connections") >= 0
    assert value(reg, "pylog_server_event_loop_busy_seconds_total") > 0


def test_authentication_failures_and_successes_are_counted(store):
    reg = prometheus.registry(store)
    creds = Credentials({"alice": "alice-secret"})
    failed = value(reg, "pylog_server_authentication_failures_total")
    ok = value(reg, "pylog_server_authentications_total")
    with pylog.serve(store, port=0, sasl_credentials=creds, connection_failed_authentication_delay_ms=0) as srv:
        common = {"bootstrap_servers": srv.bootstrap_servers, "security_protocol": "SASL_PLAINTEXT",
                  "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "request_timeout_ms": 5000}
        with pytest.raises(KafkaError):
            KafkaAdminClient(sasl_plain_password="wrong", **common)
        admin = KafkaAdminClient(sasl_plain_password="alice-secret", **common)
        admin.list_topics()
        admin.close()
    assert value(reg, "pylog_server_authentication_failures_total") - failed >= 1
    assert value(reg, "pylog_server_authentications_total") - ok >= 1


def test_scrapes_leave_the_partitions_a_process_writes_alone(tmp_path):
    # A store whose descriptor budget holds 6 partitions: scraping 40 others through it would make the two
    # it writes the least recently used and let go of their files and writer locks at every scrape.
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as other:
        other.create_topic("others", partitions=40)
        for p in other.topic("others").partitions:
            p.append_values([b"o"] * (p.number + 1))
    with pylog.open(tmp_path / "s", log_cleaner_enable=False, max_open_descriptors=60) as store:
        store.create_topic("written", partitions=2)
        written = store.topic("written").partitions
        for p in written:
            p.append_values([b"w"] * 3)
        reg = prometheus.registry(store)
        for _ in range(3):
            assert value(reg, "pylog_log_end_offset", topic="others", partition="39") == 40
            assert value(reg, "pylog_log_end_offset", topic="written", partition="1") == 3
        assert all(p.is_writer for p in written) and store.handles.released == 0
        written[0].append_values([b"w"])
        assert value(reg, "pylog_log_end_offset", topic="written", partition="0") == 4


def test_the_store_cleaner_is_exported_alive(tmp_path):
    with pylog.open(tmp_path / "s") as store:  # its cleaner is on by default and publishes its status
        reg = prometheus.registry(store)
        assert value(reg, "pylog_cleaner_alive", pid=str(os.getpid())) == 1
        assert value(reg, "pylog_cleaner_uncleanable_partitions", pid=str(os.getpid())) == 0


# ------------------------------------------------------------------------------------------- exposition

@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (.ci/run installs "
                                                              "Debian's prometheus package)")
def test_promtool_accepts_the_exposition(store, server):
    store.create_topic("linted", partitions=2)
    kp = KafkaProducer(bootstrap_servers=server.bootstrap_servers)
    kp.send("linted", b"v").get(timeout=30)
    kp.close()
    store.topic("linted").partition(1).flush()
    text = prometheus.exposition(prometheus.registry(store, server))
    assert b"pylog_server_request_duration_seconds_bucket" in text and b"pylog_log_end_offset" in text
    run = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_endpoint_serves_metrics_health_and_404(store):
    endpoint = prometheus.start_http_server(prometheus.registry(store), 0, "127.0.0.1",
                                            prometheus.store_health(store))
    with endpoint:
        base = f"http://127.0.0.1:{endpoint.port}"
        with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
            assert r.status == 200 and b"pylog_info" in r.read()
        with urllib.request.urlopen(base + "/health", timeout=30) as r:
            assert r.read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/other", timeout=30)
        assert missing.value.code == 404


def _log_gauges(text: bytes) -> dict[tuple[str, str, str], float]:
    """(metric, topic, partition) -> value of the per-partition log gauges in an exposition."""
    return {(s.name, s.labels["topic"], s.labels["partition"]): s.value
            for fam in text_string_to_metric_families(text.decode()) for s in fam.samples
            if s.name.startswith("pylog_log_") and "topic" in s.labels}


def _log_lines(text: bytes) -> list[bytes]:
    """The lines of the per-partition log families, as formatted (the process's own counters, which other
    tests' threads may move between two scrapes, left out)."""
    return [line for line in text.splitlines()
            if re.match(rb"(# (HELP|TYPE) )?pylog_log_(start_offset|end_offset|size_bytes|segments)\b", line)]


def _settle(path) -> None:
    """Date every file and directory under ``path`` a minute back, as if left alone since: scrapes then trust
    their stamps and reuse what they read of idle partitions (pylog.prometheus._files_stamp)."""
    when = os.stat(path).st_mtime - 60
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (when, when))
    os.utime(path, (when, when))


@pytest.mark.parametrize("settled", [False, True], ids=["just-written", "settled"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only exporter"])
def test_repeated_scrapes_show_appends_and_a_recreated_topic_never_stale(tmp_path, read_only, settled):
    """An endpoint's scrapes reuse the text of families unchanged since the previous scrape (Exposition), and
    what they read of partitions whose files did not change (settled files only): a partition appended between
    two scrapes shows its new end offset and size on the second, a deleted topic vanishes, and one recreated
    shows its new partitions, empty; every text is generate_latest's."""
    def scrape() -> bytes:
        if not settled:
            return exposition()
        _settle(tmp_path / "s")
        text = exposition()  # looks again at the partitions whose stamp moved: all, dated back
        assert _log_lines(exposition()) == _log_lines(text)
        return text

    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        store.create_topic("grows", partitions=3)
        store.create_topic("recreated", partitions=3)
        for p in store.topic("grows").partitions:
            p.append_values([b"x"])
        for p in store.topic("recreated").partitions:
            p.append_values([b"x"] * 4)
        scraped = pylog.open(tmp_path / "s", read_only=True) if read_only else store
        reg = CollectorRegistry(auto_describe=False)
        collector = prometheus.register(scraped, reg)
        try:
            exposition = prometheus.Exposition(reg)
            first = _log_gauges(scrape())
            assert first[("pylog_log_end_offset", "grows", "1")] == 1
            assert first[("pylog_log_end_offset", "recreated", "2")] == 4
            assert _log_gauges(scrape()) == first  # unchanged: the previous text, the same values

            store.topic("grows").partition(1).append_values([b"v" * 100] * 7)
            store.topic("grows").partition(1).flush()
            text = scrape()
            second = _log_gauges(text)
            assert second[("pylog_log_end_offset", "grows", "1")] == 8
            assert second[("pylog_log_size_bytes", "grows", "1")] > first[("pylog_log_size_bytes", "grows", "1")]
            assert second[("pylog_log_end_offset", "grows", "0")] == 1
            assert _log_lines(text) == _log_lines(prometheus.exposition(reg))

            # Deleted and recreated between two scrapes: the new topic's partitions, empty. A read-only handle
            # keeps the partition count of a topic it opened (Store.topic): recreated alike there.
            # A reader's handle notices a swap under it within its stamp interval (pylog.storage.log's reader,
            # 10 ms): scrapes a second apart see it at once; these, made at once, are made again until then.
            store.delete_topic("recreated")
            partitions = 3 if read_only else 1
            store.create_topic("recreated", partitions=partitions)
            fresh = {(m, "recreated", str(i)): 0 for i in range(partitions)
                     for m in ("pylog_log_end_offset", "pylog_log_size_bytes")}
            deadline = time.monotonic() + 10
            while True:
                text = scrape()
                third = _log_gauges(text)
                assert {k[2] for k in third if k[1] == "recreated"} == {str(i) for i in range(partitions)}
                if {k: third[k] for k in fresh} == fresh or time.monotonic() > deadline:
                    break
            assert {k: third[k] for k in fresh} == fresh
            assert _log_lines(text) == _log_lines(prometheus.exposition(reg))

            store.delete_topic("recreated")
            assert not any(topic == "recreated" for _, topic, _ in _log_gauges(scrape()))
        finally:
            collector.close()
            if read_only:
                scraped.close()


def test_health_is_503_once_the_store_is_closed(tmp_path):
    store = pylog.open(tmp_path / "s")
    with prometheus.start_http_server(prometheus.registry(store), 0, health=prometheus.store_health(store)) as ep:
        store.close()
        with pytest.raises(urllib.error.HTTPError) as down:
            urllib.request.urlopen(f"http://127.0.0.1:{ep.port}/health", timeout=30)
        assert down.value.code == 503 and b"closed" in down.value.read()


_WITHOUT_EXTRA = """
import sys
sys.modules["prometheus_client"] = None  # as if the metrics extra were not installed
import pylog, pylog.prometheus
from pylog.errors import MetricsUnavailableError
with pylog.open(sys.argv[1]) as store:
    store.create_topic("t")
    store.topic("t").partition(0).append_values([b"works"])
    assert [r.value for r in store.topic("t").partition(0).read(0)] == [b"works"]
    try:
        pylog.prometheus.registry(store)
    except MetricsUnavailableError as exc:
        print("refused:", exc)
from pylog.cli import main
print("exit", main(["metrics", sys.argv[1], "--port", "0"]))
print("exit", main(["serve", sys.argv[1], "--port", "0", "--metrics-port", "0"]))
"""


def test_without_the_extra_the_library_works_and_metrics_are_refused_clearly(tmp_path):
    run = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRA, str(tmp_path / "s")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "refused: metrics need the prometheus-client library: pip install 'pylog-embedded[metrics]'" in run.stdout
    assert run.stdout.count("exit 3") == 2, run.stdout
    assert run.stderr.count("pip install 'pylog-embedded[metrics]'") == 2


def test_the_exporter_refuses_a_directory_that_is_not_a_store(tmp_path, capsys):
    from pylog.cli import main
    (tmp_path / "notes.txt").write_text("not a store")
    assert main(["metrics", str(tmp_path), "--port", "0"]) == 3
    assert main(["metrics", str(tmp_path / "missing"), "--port", "0"]) == 3
    assert "pylog:" in capsys.readouterr().err


_EXIT_WITH_A_SCRAPED_STORE = """
import sys
import pylog, pylog.prometheus
from prometheus_client import CollectorRegistry, generate_latest
store = pylog.open(sys.argv[1])
for name in ("a", "b", "c"):  # more than one topic: the view's close closes its topics with a thread pool
    store.create_topic(name)
    store.topic(name).partition(0).append_values([b"x"])
registry = CollectorRegistry()
collector = pylog.prometheus.register(store, registry)
assert b'pylog_log_end_offset{partition="0",topic="c"} 1.0' in generate_latest(registry)
store.close()
print("done")
"""


def test_a_process_that_scraped_a_store_exits_without_a_traceback(tmp_path):
    # The collector's read-only view of the store is closed by a finalizer at interpreter exit, after
    # concurrent.futures stopped taking work: closing its topics in a thread pool then raised RuntimeError
    # ("cannot schedule new futures after interpreter shutdown"), printed at every `pylog serve
    # --metrics-port` stop and by every application that registered a store.
    run = subprocess.run([sys.executable, "-c", _EXIT_WITH_A_SCRAPED_STORE, str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout == "done\n", run.stderr
    assert "Traceback" not in run.stderr, run.stderr
