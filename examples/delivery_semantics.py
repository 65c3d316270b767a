"""At-most-once, at-least-once and exactly-once (two ways), shown by killing a consume -> process -> produce worker.

    python examples/delivery_semantics.py [DIR]        (default: ./pylog-delivery, recreated)

For each mode, 1,000 orders are produced to ``orders`` (3 partitions). A worker process in consumer group
``billing-<mode>`` reads them, "bills" each one and produces an invoice to ``invoices-<mode>`` (the same
partition number as the order). The first worker dies (``os._exit``, no cleanup, like a crash) in the
middle of a poll, after some of that poll's invoices were written; a second worker then finishes the job.
Finally every order's invoices are counted:

- **at-most-once**: the worker commits a poll's offsets *before* processing it, so the orders of the poll
  the crash interrupted are never billed: some are lost, none is billed twice.
- **at-least-once** (the usual choice, and what ``enable_auto_commit`` approximates): it commits *after*
  processing, so the interrupted poll is processed again: nothing is lost, some orders are billed twice.
- **exactly-once**: each invoice carries its order's offset in a header, so the invoices partition itself
  records how far the worker got. A restarted worker seeks each order partition to one past the last
  order found in the matching invoices partition (in its rebalance listener), and the idempotent producer
  keeps a retried batch from being appended twice. The offsets live *with the output*: committing them to
  the group is only for monitoring. Nothing is lost, nothing is duplicated.
- **transactions**: Kafka's way. A transactional producer (``transactional_id``) writes each poll's invoices and
  the poll's consumed offsets (``send_offsets_to_transaction``) in one transaction, committed together. The
  crash leaves a transaction open; the restarted worker's ``init_transactions`` aborts it, so its invoices are
  never seen by ``read_committed`` readers and the group resumes from the last committed transaction's
  offsets. Nothing is lost, nothing is duplicated, and nothing needs to be put in the output by hand.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys

import pylog
from pylog import TopicPartition

ORDERS = "orders"
PARTITIONS = 3
N_ORDERS = 1000
MODES = ("at-most-once", "at-least-once", "exactly-once", "transactions")


def bill(value: bytes) -> bytes:
    """The "processing": an invoice for an order."""
    return b"invoice for " + value


class ResumeFromOutput(pylog.ConsumerRebalanceListener):
    """Exactly-once: position each assigned order partition after the last order already invoiced."""

    def __init__(self, store: pylog.Store, consumer: pylog.Consumer, out_topic: str) -> None:
        self.store, self.consumer, self.out_topic = store, consumer, out_topic

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass  # nothing to save: the invoices already say how far we got

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            out = self.store.topic(self.out_topic).partition(tp.partition)
            end = out.log_end_offset
            if end > out.log_start_offset:
                last = out.read(end - 1, max_records=1)[0]
                self.consumer.seek(tp, int(dict(last.headers)["order-offset"]) + 1)


def worker(directory: str, mode: str, crash_after: int) -> None:
    """Process orders until none are left; with ``crash_after`` > 0, die after that many invoices."""
    out_topic = f"invoices-{mode}"
    written = 0
    with pylog.open(directory) as store:
        consumer = store.consumer(group_id=f"billing-{mode}", enable_auto_commit=False,
                                  auto_offset_reset="earliest", max_poll_records=100)
        transactional = {"transactional_id": f"billing-{mode}"} if mode == "transactions" else {"acks": 1}
        producer = store.producer(linger_ms=0, **transactional)
        if mode == "transactions":
            producer.init_transactions()  # aborts the transaction a crashed worker left open
        listener = ResumeFromOutput(store, consumer, out_topic) if mode == "exactly-once" else None
        consumer.subscribe([ORDERS], listener=listener)
        while True:
            batch = consumer.poll(timeout_ms=300)
            if not batch:
                break
            if mode == "at-most-once":
                consumer.commit()  # before processing: a crash from here on loses this poll
            if mode == "transactions":
                producer.begin_transaction()
            for tp, records in batch.items():
                for rec in records:
                    producer.send(out_topic, bill(rec.value), key=rec.key, partition=tp.partition,
                                  headers=[("order-offset", str(rec.offset).encode())])
                    written += 1
                    if crash_after and written == crash_after:
                        producer.flush()  # these invoices are in the log...
                        os._exit(17)  # ...and the process dies before anything else happens
            if mode == "transactions":  # the poll's offsets commit with its invoices, or neither does
                producer.send_offsets_to_transaction(
                    {tp: pylog.OffsetAndMetadata(records[-1].offset + 1, "") for tp, records in batch.items()},
                    f"billing-{mode}")
                producer.commit_transaction()
                continue
            producer.flush()
            if mode != "at-most-once":
                consumer.commit()  # after processing (for exactly-once: only to report lag)
        producer.close()
        consumer.close(autocommit=False)


def run(directory: str, crash_after: int = 150) -> dict[str, dict[str, int]]:
    """Run the three modes in ``directory`` (recreated); returns per mode: orders, invoices, lost, duplicated."""
    shutil.rmtree(directory, ignore_errors=True)
    with pylog.open(directory) as store:
        store.create_topic(ORDERS, partitions=PARTITIONS)
        for mode in MODES:
            store.create_topic(f"invoices-{mode}", partitions=PARTITIONS)
        with store.producer() as producer:
            for i in range(N_ORDERS):
                producer.send(ORDERS, b"order %d" % i, key=b"customer-%d" % (i % 37))
    results = {}
    for mode in MODES:
        crashed = subprocess.run([sys.executable, __file__, "--worker", directory, mode, str(crash_after)])
        assert crashed.returncode == 17, f"the first {mode} worker should have crashed"
        subprocess.run([sys.executable, __file__, "--worker", directory, mode, "0"], check=True)
        with pylog.open(directory) as store:
            seen: collections.Counter[tuple[int, int]] = collections.Counter()
            for p in store.topic(f"invoices-{mode}").partitions:
                for rec in p.read(0, max_records=10 * N_ORDERS, isolation_level="read_committed"):
                    seen[(p.number, int(dict(rec.headers)["order-offset"]))] += 1
            orders = {(p.number, o) for p in store.topic(ORDERS).partitions for o in range(p.log_end_offset)}
            results[mode] = {"orders": len(orders), "invoices": sum(seen.values()),
                             "lost": len(orders - set(seen)), "duplicated": sum(n - 1 for n in seen.values())}
    return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    directory = sys.argv[1] if len(sys.argv) > 1 else "./pylog-delivery"
    results = run(directory)
    for mode, r in results.items():
        print(f"{mode:>14}: {r['orders']} orders, {r['invoices']} invoices, {r['lost']} lost, "
              f"{r['duplicated']} billed twice")


if __name__ == "__main__":
    main()
