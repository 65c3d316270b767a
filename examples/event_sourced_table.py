"""An event-sourced table on a compacted topic: replaying the topic rebuilds the table, before and after
compaction, and deleted rows vanish once their tombstones are cleaned.

    python examples/event_sourced_table.py [DIR]        (default: ./pylog-accounts, recreated)

The topic ``accounts`` is the changelog of a table of bank accounts, the way a Kafka Streams KTable or a
CDC feed is kept: every record is keyed by the account id and holds the account's *whole new state*
(JSON); a record with a ``None`` value (a *tombstone*) closes the account. An application that needs the
table, after a restart or on another machine, replays the topic from its first offset and keeps the last
value per key, dropping keys whose last value is a tombstone.

Because only the latest record per key matters, the topic is created with ``cleanup.policy=compact``:
the log cleaner rewrites old segments keeping just the latest record of each key (same offsets, same
order), so the topic stops growing with the number of updates and replays faster. Tombstones are kept
for ``delete.retention.ms`` after the first cleaning that reached them, so that a consumer that is
replaying meanwhile still sees the delete, and are removed by a later cleaning.

The script writes the history of 200 accounts (opening, 3,000 balance updates, 40 closings), then prints
one line per stage, each replaying the topic from scratch and comparing with the table the application
built while writing (``identical``):

    stage                        records  tombstones  segments  accounts  identical
    before compaction               3240          40        ..       160  yes
    after compaction                 200          40        ..       160  yes
    after tombstone cleanup          160           0        ..       160  yes

and finally how many of the closed accounts' keys are still anywhere in the log (0).

Compaction runs here by calling ``store.compact()``, so that each stage's numbers are exact; in an
application the store's background cleaner does the same every ``log_cleaner_backoff_ms`` for any
partition whose dirty ratio exceeds ``min.cleanable.dirty.ratio``.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from typing import Any, Iterator

import pylog
from pylog import TopicPartition

TOPIC = "accounts"
PARTITIONS = 3
N_ACCOUNTS = 200
N_UPDATES = 3000
N_CLOSED = 40
#: Short so that the example sees its tombstones cleaned; Kafka's default is a day.
DELETE_RETENTION_MS = 500

Account = dict[str, Any]


def account_key(account_id: int) -> bytes:
    return b"acct-%04d" % account_id


def history(seed: int = 7) -> Iterator[tuple[bytes, Account | None]]:
    """The table's changelog, deterministic for a seed: ``(key, new state)``, or ``(key, None)`` to close.

    Every account is opened, then updated at random (a deposit or a withdrawal, never below zero), then
    ``N_CLOSED`` of them are closed.
    """
    rnd = random.Random(seed)
    accounts: dict[bytes, Account] = {}
    for i in range(N_ACCOUNTS):
        key = account_key(i)
        accounts[key] = {"id": i, "owner": f"customer {i}", "balance": 0, "version": 1}
        yield key, dict(accounts[key])
    keys = sorted(accounts)
    for _ in range(N_UPDATES):
        acct = accounts[rnd.choice(keys)]
        acct["balance"] = max(0, acct["balance"] + rnd.randint(-50, 100))
        acct["version"] += 1
        yield account_key(acct["id"]), dict(acct)
    for key in rnd.sample(keys, N_CLOSED):
        yield key, None


def expected_table(seed: int = 7) -> dict[bytes, Account]:
    """The table the history describes: what the application knows while it writes."""
    table: dict[bytes, Account] = {}
    for key, state in history(seed):
        if state is None:
            table.pop(key, None)
        else:
            table[key] = state
    return table


def replay(store: pylog.Store) -> tuple[dict[bytes, Account], int, int]:
    """Rebuild the table by reading the whole topic from its log start, as a restarted application would.

    Returns ``(table, records read, tombstones read)``. Nothing else writes meanwhile, so an empty poll
    means every partition has been read to its end (a read at an offset the cleaner removed returns the
    next surviving record, so gaps left by compaction need no special handling).
    """
    consumer = store.consumer(client_id="table-replay")
    tps = [TopicPartition(TOPIC, p) for p in range(store.topic(TOPIC).num_partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    table: dict[bytes, Account] = {}
    records = tombstones = 0
    try:
        while batch := consumer.poll(timeout_ms=0, max_records=2000):
            for recs in batch.values():
                for rec in recs:
                    records += 1
                    if rec.value is None:  # a tombstone: the row is deleted
                        tombstones += 1
                        table.pop(rec.key, None)
                    else:
                        table[rec.key] = json.loads(rec.value)
    finally:
        consumer.close()
    return table, records, tombstones


def keys_in_log(store: pylog.Store) -> set[bytes]:
    """Every key that still has a record (value or tombstone) anywhere in the topic."""
    out: set[bytes] = set()
    for p in store.topic(TOPIC).partitions:
        offset = p.log_start_offset
        while recs := p.read(offset, max_records=5000):
            out.update(r.key for r in recs)
            offset = recs[-1].offset + 1
    return out


def segment_count(store: pylog.Store) -> int:
    return sum(len(p.segments) for p in store.topic(TOPIC).partitions)


def run(directory: str) -> dict[str, dict[str, int | bool]]:
    """Write the history into ``directory`` (recreated), compact twice, replay after each step.

    Returns per stage: records, tombstones, segments, accounts and whether the replayed table is identical
    to :func:`expected_table`; plus ``closed_keys_left``, the closed accounts' keys still in the log.
    """
    shutil.rmtree(directory, ignore_errors=True)
    expected = expected_table()
    stages: dict[str, dict[str, int | bool]] = {}
    # The background cleaner is off so that compaction happens exactly where this script asks for it.
    with pylog.open(directory, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions=PARTITIONS, config={
            "cleanup.policy": "compact",
            "delete.retention.ms": DELETE_RETENTION_MS,
            # Small segments (8 KiB, about 90 records) so this small history spans many of them; the
            # cleaner works segment by segment and merges small cleaned segments back together.
            "segment.bytes": 8192,
        })
        # Keyed records go to murmur2(key) % partitions, like Kafka: every version of an account lands in
        # the same partition, in order, which is what makes "the last record per key" well defined.
        # The events of a real application trickle in; here they are flushed in bursts of 50, which
        # leaves many small batches, and so many 8 KiB segments, like a topic written over time.
        with store.producer(acks=1, linger_ms=5) as producer:
            for i, (key, state) in enumerate(history()):
                value = None if state is None else json.dumps(state, sort_keys=True).encode()
                producer.send(TOPIC, value, key=key)
                if i % 50 == 49:
                    producer.flush()
        # The active (last) segment of a partition is never cleaned, as in Kafka. A live topic rolls by
        # segment.bytes / segment.ms; here the tail is rolled so the whole history can be compacted.
        for p in store.topic(TOPIC).partitions:
            p.roll()

        def stage(name: str) -> None:
            table, records, tombstones = replay(store)
            stages[name] = {"records": records, "tombstones": tombstones, "segments": segment_count(store),
                            "accounts": len(table), "identical": table == expected}

        stage("before compaction")
        # First cleaning: every superseded record goes; tombstones stay (delete.retention.ms starts now).
        store.compact(TOPIC)
        stage("after compaction")
        # Once delete.retention.ms has passed since that cleaning, the next one drops the tombstones too.
        time.sleep(DELETE_RETENTION_MS / 1000 + 0.1)
        store.compact(TOPIC)
        stage("after tombstone cleanup")
        closed = {key for key, state in history() if state is None}
        stages["closed_keys_left"] = {"count": len(closed & keys_in_log(store)), "of": len(closed)}
    return stages


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else "./pylog-accounts"
    stages = run(directory)
    print(f"topic {TOPIC!r}: {N_ACCOUNTS} accounts opened, {N_UPDATES} updates, {N_CLOSED} closed "
          f"({N_ACCOUNTS + N_UPDATES + N_CLOSED} records written)")
    print(f"{'stage':<26} {'records':>8} {'tombstones':>11} {'segments':>9} {'accounts':>9}  identical")
    for name, s in stages.items():
        if name != "closed_keys_left":
            print(f"{name:<26} {s['records']:>8} {s['tombstones']:>11} {s['segments']:>9} {s['accounts']:>9}  "
                  f"{'yes' if s['identical'] else 'NO'}")
    left = stages["closed_keys_left"]
    print(f"closed accounts still in the log: {left['count']} of {left['of']}")


if __name__ == "__main__":
    main()
