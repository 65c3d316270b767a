"""Kafka clients on a pylog store: `pylog.serve` speaks Kafka's wire protocol, so a confluent-kafka producer
and a kafka-python consumer group use the store unchanged, while pylog's own API reads the same records and
sees the group's committed offsets.

Needs the Kafka client libraries (`pip install confluent-kafka kafka-python`; both are in the test extra).

    python examples/kafka_clients_on_a_store.py [DIR]
"""

from __future__ import annotations

import json
import sys

from confluent_kafka import Producer
from kafka import KafkaConsumer

import pylog


def main(path: str) -> None:
    with pylog.open(path) as store:
        if "orders" not in store:
            store.create_topic("orders", partitions=3)
        before = sum(store.topic("orders").end_offsets().values())

        with pylog.serve(store, port=0) as server:            # a Kafka broker on a free loopback port
            print(f"serving {path} at {server.bootstrap_servers}")

            # confluent-kafka (librdkafka): murmur2_random places keys as Java, kafka-python and pylog do.
            producer = Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 5,
                                 "partitioner": "murmur2_random", "enable.idempotence": True})
            for i in range(1000):
                order = {"order": before + i, "customer": f"c{i % 7}", "amount": i % 50}
                producer.produce("orders", json.dumps(order).encode(), key=order["customer"].encode(),
                                 headers=[("source", b"checkout")])
            producer.flush(30)

            # kafka-python, as a consumer group member committing what it processed.
            consumer = KafkaConsumer("orders", bootstrap_servers=server.bootstrap_servers, group_id="billing",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     consumer_timeout_ms=3000)
            totals: dict[str, int] = {}
            seen = 0
            for msg in consumer:
                order = json.loads(msg.value)
                totals[order["customer"]] = totals.get(order["customer"], 0) + order["amount"]
                seen += 1
            consumer.commit()
            consumer.close()
            print(f"kafka-python consumed {seen} orders; totals per customer: {dict(sorted(totals.items()))}")

        # The same store through pylog's own API: the records, their headers, the group's committed offsets.
        p0 = store.topic("orders").partition(0)
        first = p0.read(p0.log_start_offset, max_records=1)[0]
        print(f"pylog reads partition 0 from offset {first.offset}: key={first.key!r} headers={first.headers}")
        lag = store.group_lag("billing")
        committed = {tp.partition: x.committed for tp, x in sorted(lag.items())}
        print(f"group 'billing' committed {committed} of {sum(store.topic('orders').end_offsets().values())} "
              f"records, lag {sum(x.lag for x in lag.values())}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "./pylog-data")
