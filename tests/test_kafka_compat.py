"""pylog.kafka: kafka-python's KafkaProducer / KafkaConsumer names over a store, and the helpful errors of
pylog.open and the clients (issue 18, items 2 and 3).

The three snippets below are written from kafka-python's documented usage (its README and the
KafkaProducer / KafkaConsumer docstrings) as a kafka-python program would have them, with
``from kafka import``; each test runs the text with only that import line changed, and checks that
nothing else was. ``servers`` stands for the program's broker list (here: the store's ``pylog:///`` URL).
"""

from __future__ import annotations

import logging
import warnings

import pytest

with warnings.catch_warnings():  # kafka-python (the reference, test-only) warns about its own imports
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

import pylog
from pylog import kafka as pkafka

PRODUCER_SNIPPET = '''
from kafka import KafkaProducer
import json

producer = KafkaProducer(bootstrap_servers=servers, acks='all', retries=5, linger_ms=5,
                         api_version=(2, 8), request_timeout_ms=30000)
for _ in range(100):
    producer.send('foobar', b'some_message_bytes')
producer.flush()

# Block until a single message is sent (or timeout)
future = producer.send('foobar', b'another_message')
result = future.get(timeout=60)

# Use a key for hashed-partitioning
producer.send('foobar', key=b'foo', value=b'bar')

# Asynchronous by default, with callbacks
def on_send_success(record_metadata):
    delivered.append((record_metadata.topic, record_metadata.partition, record_metadata.offset))

def on_send_error(excp):
    failed.append(excp)

producer.send('foobar', b'raw_bytes').add_callback(on_send_success).add_errback(on_send_error)

# Include record headers
producer.send('foobar', value=b'c29tZSB2YWx1ZQ==', headers=[('content-encoding', b'base64')])
producer.flush()
producer.close()

# Serialize json messages
producer = KafkaProducer(bootstrap_servers=servers, value_serializer=lambda v: json.dumps(v).encode('utf-8'))
producer.send('fizzbuzz', {'foo': 'bar'})
producer.flush()
metrics = producer.metrics()
producer.close()
'''

CONSUMER_SNIPPET = '''
from kafka import KafkaConsumer
import json

# consume json messages from the earliest offset as a member of a group; stop after 1 s without any
consumer = KafkaConsumer('fizzbuzz', group_id='my-group', bootstrap_servers=servers,
                         auto_offset_reset='earliest', enable_auto_commit=True, consumer_timeout_ms=1000,
                         value_deserializer=lambda m: json.loads(m.decode('ascii')),
                         security_protocol='PLAINTEXT', fetch_max_wait_ms=500)
for message in consumer:
    # message value and key are raw bytes -- decode if necessary!
    lines.append("%s:%d:%d: key=%s value=%s" % (message.topic, message.partition, message.offset,
                                                message.key, message.value))
topics = consumer.topics()
consumer.close()
'''

MANUAL_SNIPPET = '''
from kafka import KafkaConsumer, TopicPartition

consumer = KafkaConsumer(bootstrap_servers=servers, group_id='billing', enable_auto_commit=False,
                         auto_offset_reset='earliest', max_poll_records=40)
partitions = consumer.partitions_for_topic('payments')
consumer.assign([TopicPartition('payments', p) for p in sorted(partitions)])
while True:
    batch = consumer.poll(timeout_ms=200)
    if not batch:
        break
    for tp, records in batch.items():
        for record in records:
            processed.append(record.value)
    consumer.commit()  # at least once: only after processing

tp = TopicPartition('payments', 0)
committed = consumer.committed(tp)
highwater = consumer.highwater(tp)
end = consumer.end_offsets([tp])[tp]
consumer.seek_to_beginning(tp)
again = consumer.poll(timeout_ms=200, max_records=5)[tp]
connected = consumer.bootstrap_connected()
consumer.close()
'''


def _run_as_pylog(snippet: str, **names):
    """Run a kafka-python snippet with only ``from kafka import`` changed to ``from pylog import``."""
    ported = snippet.replace("from kafka import ", "from pylog import ")
    changed = [(a, b) for a, b in zip(snippet.splitlines(), ported.splitlines(), strict=True) if a != b]
    assert changed and all(a.startswith("from kafka import ") for a, _ in changed)
    scope = dict(names)
    exec(compile(ported, "<kafka-python snippet>", "exec"), scope)
    return scope


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "store")
    pylog.open(p, log_cleaner_enable=False).close()
    return p


def test_producer_snippet_runs_unchanged_and_auto_creates_its_topics(path, caplog):
    with caplog.at_level(logging.WARNING, logger="pylog.kafka"):
        scope = _run_as_pylog(PRODUCER_SNIPPET, servers=f"pylog://{path}", delivered=[], failed=[])
    assert scope["result"].topic == "foobar" and scope["result"].offset == 100
    assert scope["delivered"] == [("foobar", 0, 102)] and scope["failed"] == []
    assert "producer_id" in scope["metrics"]
    with pylog.open(path, create=False) as store:
        assert store.topics() == ["fizzbuzz", "foobar"]  # kafka-python's default allow_auto_create_topics
        recs = store.topic("foobar").partition(0).read(0, max_records=1000)
        assert len(recs) == 104 and recs[101].key == b"foo" and recs[103].headers == (("content-encoding", b"base64"),)
        assert store.topic("fizzbuzz").partition(0).read(0)[0].value == b'{"foo": "bar"}'


def test_consumer_snippets_run_unchanged(path):
    with pylog.open(path) as store:
        store.create_topic("fizzbuzz", partitions=2)
        store.create_topic("payments", partitions=2)
        with store.producer() as p:
            for i in range(6):
                p.send("fizzbuzz", b'{"n": %d}' % i, partition=i % 2)
            for i in range(100):
                p.send("payments", str(i).encode(), partition=i % 2)
    scope = _run_as_pylog(CONSUMER_SNIPPET, servers=path, lines=[])
    assert sorted(scope["lines"]) == sorted(f"fizzbuzz:{i % 2}:{i // 2}: key=None value={{'n': {i}}}"
                                            for i in range(6))
    assert scope["topics"] == {"fizzbuzz", "payments"}  # __consumer_offsets is pylog's own: left out
    with pylog.open(path) as store:  # enable_auto_commit: close() committed the group's positions
        assert {tp.partition: om.offset for tp, om in store.committed_offsets("my-group").items()} == {0: 3, 1: 3}

    scope = _run_as_pylog(MANUAL_SNIPPET, servers=[path], processed=[])
    assert sorted(scope["processed"], key=int) == [str(i).encode() for i in range(100)]
    assert scope["partitions"] == {0, 1} and scope["committed"] == 50
    assert scope["highwater"] == scope["end"] == 50 and [r.offset for r in scope["again"]] == [0, 1, 2, 3, 4]
    assert scope["connected"] is True


def test_every_kafka_python_constructor_keyword_is_accepted(path, caplog, monkeypatch):
    """kafka-python's own DEFAULT_CONFIG, every key, goes into pylog's constructors; the broker-only ones
    are logged once, in one warning per client kind."""
    monkeypatch.setattr(pkafka, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="pylog.kafka"):
        for _ in range(2):
            cfg = dict(kafka.KafkaProducer.DEFAULT_CONFIG, bootstrap_servers=path)
            with pylog.KafkaProducer(**cfg) as p:
                assert p.send("t", b"x").get(10).offset >= 0
            cfg = dict(kafka.KafkaConsumer.DEFAULT_CONFIG, bootstrap_servers=path)
            with pylog.KafkaConsumer("t", **cfg) as c:
                assert c.bootstrap_connected() and c.partitions_for_topic("t") == {0}
            assert not c.bootstrap_connected()
    warnings = [r.getMessage() for r in caplog.records if r.name == "pylog.kafka"]
    assert len(warnings) == 2 and "ssl_cafile" in warnings[0] and "fetch_min_bytes" in warnings[1]
    assert "request_timeout_ms" in warnings[0] and "request_timeout_ms" not in warnings[1]  # once per process


def test_store_handed_over_stays_open_and_a_path_is_closed_with_the_client(path):
    with pylog.open(path) as store:
        with pylog.KafkaProducer(bootstrap_servers=store) as p:
            p.send("t", b"x")
        assert not store.closed  # the caller's store
    p = pylog.KafkaProducer(bootstrap_servers=path)
    assert not p.store.closed
    p.close()
    assert p.store.closed and not p.bootstrap_connected()
    c = pylog.KafkaConsumer(bootstrap_servers=f"pylog://{path}")
    c.close()
    assert c.store.closed


def test_bootstrap_servers_errors_say_what_to_pass(tmp_path):
    with pytest.raises(pylog.InvalidConfigError, match="looks like a Kafka broker address"):
        pylog.KafkaProducer(bootstrap_servers="localhost:9092")
    with pytest.raises(pylog.InvalidConfigError, match="pass the store's directory"):
        pylog.KafkaConsumer("t")  # kafka-python's default is a broker on localhost
    with pytest.raises(pylog.UnknownStoreError, match="create=False"):
        pylog.KafkaProducer(bootstrap_servers=str(tmp_path / "typo"))
    assert not (tmp_path / "typo").exists()
    pylog.open(str(tmp_path / "s")).close()
    with pytest.raises(pylog.InvalidConfigError, match="neither kafka-python's nor pylog's"):
        pylog.KafkaConsumer(bootstrap_servers=str(tmp_path / "s"), not_an_option=1)
    with pytest.raises(pylog.InvalidConfigError, match="acks='all'"):
        pylog.KafkaProducer(bootstrap_servers=str(tmp_path / "s"), transactional_id="tx", acks=1)
    with pytest.raises(pylog.InvalidConfigError, match="check_crcs=True"):
        pylog.KafkaConsumer(bootstrap_servers=str(tmp_path / "s"), check_crcs=False)


def test_native_clients_from_a_path_point_at_pylog_open(path):
    with pytest.raises(pylog.InvalidArgumentError, match=r"pylog.open\(path\).producer"):
        pylog.Producer(path)
    with pytest.raises(pylog.InvalidArgumentError, match=r"pylog.open\(path\).consumer"):
        pylog.Consumer(path, group_id="g")
    with pylog.open(path) as store, pytest.raises(pylog.InvalidConfigError, match="pylog.KafkaProducer"):
        store.producer(bootstrap_servers="localhost:9092")


def test_send_to_a_missing_topic_names_both_ways_to_create_it(path):
    with pylog.open(path) as store, store.producer() as p:
        with pytest.raises(pylog.UnknownTopicError) as err:
            p.send("orders", b"x")
        assert "store.create_topic('orders'" in str(err.value) and f"pylog topics create {path} orders" in str(err.value)
        assert "allow_auto_create_topics=True" in str(err.value)


def test_allow_auto_create_topics_uses_the_store_default_partition_count(path):
    with pylog.open(path, num_partitions=3) as store:
        with store.producer(allow_auto_create_topics=True) as p:
            p.send("orders", b"x", key=b"k").get(10)
            p.send("orders", b"y", partition=2).get(10)
        assert store.topic("orders").num_partitions == 3
        with pylog.KafkaProducer(bootstrap_servers=store, allow_auto_create_topics=False) as p:
            with pytest.raises(pylog.UnknownTopicError):
                p.send("other", b"x")
    with pytest.raises(pylog.InvalidConfigError):
        pylog.open(path, num_partitions=0)


def test_open_create_false_and_a_file_where_a_store_goes(tmp_path):
    with pytest.raises(pylog.UnknownStoreError, match="create=False"):
        pylog.open(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(pylog.UnknownStoreError):
        pylog.open(tmp_path / "empty", create=False)
    assert list((tmp_path / "empty").iterdir()) == []
    pylog.open(tmp_path / "s").close()
    with pylog.open(tmp_path / "s", create=False) as store:
        assert store.topics() == []
    f = tmp_path / "file"
    f.write_bytes(b"not a store")
    for where in (f, f / "below"):
        with pytest.raises(pylog.StorePathError, match="is not a pylog store"):
            pylog.open(where)


def test_consumer_topics_partitions_highwater_and_metrics_shape(path):
    with pylog.open(path) as store:
        store.create_topic("t", partitions=2)
        store.topic("t").partition(1).append_values([b"a", b"b", b"c"])
        with store.consumer(group_id="g", auto_offset_reset="earliest") as c:
            assert c.partitions_for_topic("t") == {0, 1} and c.partitions_for_topic("nope") is None
            tp0, tp1 = pylog.TopicPartition("t", 0), pylog.TopicPartition("t", 1)
            with pytest.raises(pylog.InvalidConfigError, match="not assigned"):
                c.highwater(tp1)
            c.assign([tp0, tp1])
            c.commit({tp1: 1})
            assert c.topics() == {"t"}  # __consumer_offsets exists now and is left out
            assert c.highwater(tp1) == 3 and c.highwater(("t", 0)) == 0
            m = c.metrics()
            assert all(isinstance(group, dict) for group in m.values())  # kafka-python's {group: {name: value}}
            assert m["consumer-fetch-manager-metrics"]["records-lag-max"] is None  # no position yet
            c.poll(timeout_ms=0)
            m = c.metrics(raw=True)
            assert m["consumer-fetch-manager-metrics"]["records-lag-max"] == 0
            assert m["consumer-coordinator-metrics"] == {"assigned-partitions": 2}
            assert m["t-1"]["committed"] == 1 and m["t-1"]["position"] == 3
