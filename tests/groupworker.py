"""A consumer group member for tests/test_server_group_processes.py, run as a script in its own process.

    python groupworker.py CLIENT BOOTSTRAP TOPIC GROUP OUT_FILE STOP_FILE

CLIENT is ``kafka-python``, ``aiokafka`` or ``confluent-kafka``. The worker joins GROUP (manual commits,
session timeout 6 s), and for each batch it polls: "processes" each record (a short sleep), appends one
``partition offset`` line per record to OUT_FILE with an unbuffered ``os.write`` (so the lines are in the
file, visible to other processes and kept across a SIGKILL, before the commit is sent), then commits
synchronously. A commit failed by a rebalance is ignored: the records are consumed again by their next owner
(at least once). The worker exits when STOP_FILE exists, or after 90 s whatever happens.

Imports no pylog module: it is only a Kafka client of ``pylog serve``.
"""

from __future__ import annotations

import os
import sys
import time

PROCESS_S = 0.01  # per record: slow enough that the group is mid-run when the test kills a member
DEADLINE_S = 90.0
SESSION_MS = 6000
HEARTBEAT_MS = 1000
MAX_POLL_INTERVAL_MS = 20000
MAX_RECORDS = 20


class Out:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def processed(self, pairs: list[tuple[int, int]]) -> None:
        for _ in pairs:
            time.sleep(PROCESS_S)
        if pairs:
            os.write(self.fd, "".join(f"{p} {o}\n" for p, o in pairs).encode())


def stop(stop_file: str, started: float) -> bool:
    return os.path.exists(stop_file) or time.monotonic() - started > DEADLINE_S


def run_kafka_python(bootstrap: str, topic: str, group: str, out: Out, stop_file: str) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    started = time.monotonic()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"w{os.getpid()}",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                             max_poll_interval_ms=MAX_POLL_INTERVAL_MS, max_poll_records=MAX_RECORDS)
    try:
        while not stop(stop_file, started):
            batches = consumer.poll(timeout_ms=200)
            pairs = [(r.partition, r.offset) for recs in batches.values() for r in recs]
            out.processed(pairs)
            if pairs:
                try:
                    consumer.commit()  # the positions: one past every record just processed
                except KafkaError as exc:
                    print(f"commit failed: {exc!r}", file=sys.stderr, flush=True)
    finally:
        consumer.close(autocommit=False)


def run_aiokafka(bootstrap: str, topic: str, group: str, out: Out, stop_file: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    async def main() -> None:
        started = time.monotonic()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    client_id=f"w{os.getpid()}", enable_auto_commit=False,
                                    auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                    heartbeat_interval_ms=HEARTBEAT_MS, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                                    max_poll_records=MAX_RECORDS)
        await consumer.start()
        try:
            while not stop(stop_file, started):
                batches = await consumer.getmany(timeout_ms=200)
                pairs = [(r.partition, r.offset) for recs in batches.values() for r in recs]
                out.processed(pairs)  # blocks the loop like real processing would; well under the session
                if pairs:
                    try:
                        await consumer.commit()
                    except KafkaError as exc:
                        print(f"commit failed: {exc!r}", file=sys.stderr, flush=True)
        finally:
            await consumer.stop()

    asyncio.run(main())


def run_confluent(bootstrap: str, topic: str, group: str, out: Out, stop_file: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"w{os.getpid()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                         "max.poll.interval.ms": MAX_POLL_INTERVAL_MS})
    consumer.subscribe([topic])
    try:
        while not stop(stop_file, started):
            msgs = consumer.consume(num_messages=MAX_RECORDS, timeout=0.2)
            pairs = []
            for m in msgs:
                if m.error():
                    print(f"consume error: {m.error()}", file=sys.stderr, flush=True)
                    continue
                pairs.append((m.partition(), m.offset()))
            out.processed(pairs)
            if pairs:
                try:
                    consumer.commit(asynchronous=False)  # the stored offsets: one past each record consumed
                except KafkaException as exc:
                    print(f"commit failed: {exc!r}", file=sys.stderr, flush=True)
    finally:
        consumer.close()


RUNNERS = {"kafka-python": run_kafka_python, "aiokafka": run_aiokafka, "confluent-kafka": run_confluent}


if __name__ == "__main__":
    client, bootstrap, topic, group, out_file, stop_file = sys.argv[1:7]
    RUNNERS[client](bootstrap, topic, group, Out(out_file), stop_file)
