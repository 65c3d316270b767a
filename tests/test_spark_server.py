"""Spark and Kafka clients on one store: what confluent-kafka produced through ``pylog serve`` is what
``spark.read.format("pylog")`` reads, and what Spark wrote is what a Kafka consumer gets from the server."""

from __future__ import annotations

import time

import pytest

import pylog

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.slow


def test_spark_reads_what_kafka_clients_wrote_and_kafka_clients_read_what_spark_wrote(spark, tmp_path):
    path = str(tmp_path / "store")
    store = pylog.open(path)
    store.create_topic("orders", partitions=2)
    store.create_topic("totals", partitions=1)
    try:
        with pylog.serve(store, port=0) as server:
            p = ck.Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 5,
                             "partitioner": "murmur2_random", "log_level": 3})
            for i in range(500):
                p.produce("orders", value=str(i % 7).encode(), key=f"customer-{i % 11}".encode(),
                          headers=[("src", b"kafka")])
            assert p.flush(30) == 0

            df = spark.read.format("pylog").option("subscribe", "orders").option("includeHeaders", "true").load(path)
            rows = df.selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "partition", "offset",
                                 "headers").collect()
            assert len(rows) == 500
            stored = {(part, r.offset): (r.key.decode(), r.value.decode())
                      for part in range(2) for r in store.topic("orders").partition(part).read(0, max_records=1000)}
            assert {(r.partition, r.offset): (r.k, r.v) for r in rows} == stored
            assert all([(h.key, bytes(h.value)) for h in r.headers] == [("src", b"kafka")] for r in rows)

            # Spark writes an aggregate back; a Kafka consumer reads it through the server.
            totals = df.selectExpr("CAST(key AS STRING) AS key", "CAST(CAST(value AS STRING) AS INT) AS n").groupBy("key") \
                .sum("n").selectExpr("CAST(key AS BINARY) AS key", "CAST(`sum(n)` AS STRING) AS value")
            totals.write.format("pylog").mode("append").option("topic", "totals").save(path)
            c = ck.Consumer({"bootstrap.servers": server.bootstrap_servers, "group.id": "totals-reader",
                             "auto.offset.reset": "earliest", "log_level": 3})
            c.subscribe(["totals"])
            got = {}
            deadline = time.monotonic() + 20
            while len(got) < 11 and time.monotonic() < deadline:
                for m in c.consume(100, 0.5):
                    assert m.error() is None
                    got[m.key().decode()] = int(m.value())
            c.close()
            expected = {}
            for i in range(500):
                expected[f"customer-{i % 11}"] = expected.get(f"customer-{i % 11}", 0) + i % 7
            assert got == expected
    finally:
        store.close()
