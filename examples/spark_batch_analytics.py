"""Batch analytics with Spark over a pylog store: land events with the producer, query them with
``spark.read.format("pylog")``, write an aggregate back with ``df.write.format("pylog")``.

    python examples/spark_batch_analytics.py [DIR]      (default: ./pylog-analytics, recreated; needs Java)

The application side writes 2,000 shop orders (JSON) over two simulated hours into the topic ``orders``
(3 partitions, keyed by customer) with pylog's producer, each with its order time as the record
timestamp. The analytics side is Spark, reading the store directory directly (no broker, no export):

1. ``spark.read.format("pylog")``: the Kafka source's columns (``key``, ``value``, ``topic``,
   ``partition``, ``offset``, ``timestamp``, ...); ``from_json`` turns the value into columns;
2. a group-by: orders and revenue per country;
3. time windows over the ``timestamp`` column: orders and revenue per 30 minutes;
4. the source's options that cut the read before Spark sees a row: ``startingTimestamp`` /
   ``endingTimestamp`` (the last half hour, found through each partition's time index) and ``assign`` with
   ``startingOffsets`` / ``endingOffsets`` (one partition's offset range);
5. ``df.write.format("pylog")``: revenue per country as records keyed by country into the compacted topic
   ``revenue_by_country``, read back with pylog's consumer.

:func:`main` returns every figure, so that a test can check them against the orders themselves, and
takes an existing ``spark`` session (the script builds one with :func:`pylog.spark.session`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from typing import TYPE_CHECKING, Any, Iterator

import pylog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ORDERS = "orders"
REVENUE = "revenue_by_country"
PARTITIONS = 3
N_ORDERS = 2000
#: 2026-01-01T00:00:00Z in ms: the first order's time. Orders follow every 3.6 s: two hours in all.
T0 = 1_767_225_600_000
STEP_MS = 3_600
WINDOW_MS = 30 * 60 * 1000
COUNTRIES = ("DE", "FR", "JP", "US", "BR")
#: The JSON in every order's value, as a Spark DDL schema for ``from_json``.
ORDER_SCHEMA = "order_id long, customer string, country string, amount_cents long, items int"


def orders(seed: int = 3) -> Iterator[dict[str, Any]]:
    """The orders, deterministic for a seed, in time order; ``ts`` (ms) becomes the record timestamp."""
    rnd = random.Random(seed)
    for i in range(N_ORDERS):
        customer = rnd.randrange(300)
        yield {"order_id": i, "customer": f"c{customer:03d}", "country": COUNTRIES[customer % len(COUNTRIES)],
               "amount_cents": rnd.randrange(500, 20_000), "items": rnd.randint(1, 5), "ts": T0 + i * STEP_MS}


def land_orders(directory: str) -> None:
    """The application: create the topics in ``directory`` (recreated) and produce every order."""
    shutil.rmtree(directory, ignore_errors=True)
    with pylog.open(directory) as store:
        store.create_topic(ORDERS, partitions=PARTITIONS)
        # The aggregate is a table (one row per country): a compacted topic keeps the latest per key.
        store.create_topic(REVENUE, partitions=1, config={"cleanup.policy": "compact"})
        with store.producer(linger_ms=5) as producer:
            for o in orders():
                ts = o.pop("ts")
                producer.send(ORDERS, json.dumps(o).encode(), key=o["customer"].encode(), timestamp_ms=ts)


def main(directory: str = "./pylog-analytics", spark: "SparkSession | None" = None) -> dict[str, Any]:
    """Land the orders in ``directory`` and analyse them with ``spark`` (a new local session if None).

    Returns ``orders`` (rows read), ``per_partition`` ({partition: rows}), ``by_country`` ({country:
    (orders, revenue cents)}), ``windows`` ([(window start ms, orders, revenue cents)]), ``last_half_hour``
    (order ids read with timestamp options), ``slice`` and ``slice_partitions`` (offsets and partitions read
    with offset options) and ``written_back`` ({country: (orders, revenue cents)} as read back from
    ``revenue_by_country``).
    """
    from pyspark.sql import functions as F

    own_session = spark is None
    if spark is None:
        from pylog.spark import session
        spark = session(app_name="pylog-batch-analytics")
    path = os.path.abspath(directory)  # executors open the store by this path
    land_orders(path)
    try:
        # ---- 1. read: the store directory is the path; "subscribe" names the topics.
        raw = spark.read.format("pylog").option("subscribe", ORDERS).load(path)
        orders_df = (raw.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"),
                                "partition", "offset", "timestamp")
                     .select("o.*", "partition", "offset", "timestamp")
                     .cache())  # several queries below: decode once
        per_partition = {r["partition"]: r["count"] for r in orders_df.groupBy("partition").count().collect()}
        print(f"read {sum(per_partition.values())} orders from {ORDERS!r}; per partition: "
              f"{dict(sorted(per_partition.items()))}")

        # ---- 2. a group-by on decoded columns.
        by_country_df = (orders_df.groupBy("country")
                         .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue_cents"))
                         .orderBy("country"))
        by_country = {r["country"]: (r["orders"], r["revenue_cents"]) for r in by_country_df.collect()}
        for country, (n, cents) in by_country.items():
            print(f"  {country}: {n:>4} orders, {cents / 100:>10.2f} revenue")

        # ---- 3. time windows over the record timestamp (the order time the producer set).
        windows_df = (orders_df.groupBy(F.window("timestamp", "30 minutes"))
                      .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("revenue_cents"))
                      .select(F.expr("unix_millis(window.start)").alias("start_ms"), "orders", "revenue_cents")
                      .orderBy("start_ms"))
        windows = [(r["start_ms"], r["orders"], r["revenue_cents"]) for r in windows_df.collect()]
        for start, n, cents in windows:
            print(f"  window starting {(start - T0) // 60_000:>3} min after T0: {n:>4} orders, "
                  f"{cents / 100:>10.2f} revenue")

        # ---- 4a. only the last half hour: each partition's time index finds where to start and stop, so
        # Spark never reads the earlier records (endingTimestamp is exclusive). The same pruning is
        # available for where() clauses on partition, offset and timestamp with filterPushdown=true (it
        # needs spark.sql.python.filterPushdown.enabled, which pylog.spark.session() sets).
        start_ms, end_ms = T0 + 90 * 60 * 1000, T0 + 120 * 60 * 1000
        last = (spark.read.format("pylog").option("subscribe", ORDERS)
                .option("startingTimestamp", str(start_ms)).option("endingTimestamp", str(end_ms)).load(path)
                .select(F.get_json_object(F.col("value").cast("string"), "$.order_id").cast("long").alias("id")))
        last_half_hour = sorted(r["id"] for r in last.collect())
        print(f"last half hour (startingTimestamp/endingTimestamp): {len(last_half_hour)} orders")

        # ---- 4b. one partition's offset range: assign + startingOffsets/endingOffsets (end exclusive).
        sliced = (spark.read.format("pylog").option("assign", json.dumps({ORDERS: [1]}))
                  .option("startingOffsets", json.dumps({ORDERS: {"1": 100}}))
                  .option("endingOffsets", json.dumps({ORDERS: {"1": 150}})).load(path))
        slice_rows = sliced.select("partition", "offset").collect()
        slice_offsets = sorted(r["offset"] for r in slice_rows)
        print(f"{ORDERS}-1 offsets [100, 150): {len(slice_offsets)} records, partitions "
              f"{sorted({r['partition'] for r in slice_rows})}")

        # ---- 5. write the aggregate back: key = country, value = JSON; the sink puts a keyed row where
        # pylog's producer would (murmur2 of the key). Only mode("append") exists: a log is append-only.
        (by_country_df.select(F.col("country").alias("key"),
                              F.to_json(F.struct("country", "orders", "revenue_cents")).alias("value"))
         .write.format("pylog").option("topic", REVENUE).mode("append").save(path))
        orders_df.unpersist()
    finally:
        if own_session:
            spark.stop()

    # Read the aggregate back with pylog itself: the latest record per country (a table, as compacted).
    written_back: dict[str, tuple[int, int]] = {}
    with pylog.open(path) as store:
        with store.consumer(REVENUE, auto_offset_reset="earliest", consumer_timeout_ms=200) as consumer:
            for rec in consumer:
                row = json.loads(rec.value)
                written_back[rec.key.decode()] = (row["orders"], row["revenue_cents"])
    print(f"read back from {REVENUE!r}: " + ", ".join(f"{c}={n} orders/{cents / 100:.2f}"
                                                   for c, (n, cents) in sorted(written_back.items())))
    return {"orders": sum(per_partition.values()), "per_partition": per_partition, "by_country": by_country,
            "windows": windows, "last_half_hour": last_half_hour, "slice": slice_offsets,
            "slice_partitions": sorted({r["partition"] for r in slice_rows}),
            "written_back": written_back}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "./pylog-analytics")
