"""Structured streaming over a growing topic: ``spark.readStream.format("pylog")``, a running count per
page, ``trigger(availableNow=True)`` runs from one checkpoint, ``writeStream.format("pylog")`` out.

    python examples/spark_streaming.py [DIR]          (default: ./pylog-streaming, recreated; needs Java)

``DIR/store`` is the pylog store, ``DIR/checkpoints`` holds the streaming queries' checkpoints.

A web server (here a thread with pylog's producer) keeps appending click events (JSON, keyed by user) to
the topic ``clicks`` (2 partitions). Two streaming queries read it:

- **counts**, a running aggregation: clicks per page. With ``outputMode("update")`` each micro-batch
  yields the new count of every page it changed; these are appended, keyed by page, to the compacted topic
  ``page_counts``, so the latest record per key *is* the current table (and compaction keeps just that).
  Spark lets Python data source sinks run in append mode only, so update-mode rows go through
  ``foreachBatch``, which writes each micro-batch with the batch writer ``df.write.format("pylog")``.
  A replayed micro-batch (after a crash) writes the same counts again: harmless for a table.
- **checkouts**, a stateless routing job: the clicks on ``/checkout``, key and value as they are,
  appended with ``writeStream.format("pylog")`` to the topic ``checkouts``.

The queries run like batch jobs from a scheduler: ``trigger(availableNow=True)`` reads everything there
is when the run starts, then stops. Each query keeps one checkpoint directory for all its runs, holding
the offsets read so far (``{"clicks": {"0": next offset, "1": ...}}``) and, for counts, the
aggregation's state, so each run starts exactly where the previous one ended, while the producer goes
on appending. The first run happens while the producer appends, the second after it stopped:

    run 1 counts:    clicks-0 [0, 1546), clicks-1 [0, 854): 2400 records
    run 1 checkouts: clicks-0 [0, 1421), clicks-1 [0, 779): 2200 records
    producer stopped after 5000 clicks
    run 2 counts:    clicks-0 [1546, 3244), clicks-1 [854, 1756): 2600 records
    run 2 checkouts: clicks-0 [1421, 3244), clicks-1 [779, 1756): 2800 records
    counts: runs read 5000 records in all, no gap and no overlap between runs
    checkouts: runs read 5000 records in all, no gap and no overlap between runs
    page_counts matches the clicks produced: yes  /=1601, /cart=679, /checkout=354, /product=1334, /search=1032
    checkouts holds each /checkout click exactly once: yes (354 of 354)

(Where the first run stops depends on the machine's speed; "no gap and no overlap" and the two "yes" do
not.)

:func:`main` returns the runs' offset ranges and the results, so that a test can check them, and takes an
existing ``spark`` session (the script builds one with :func:`pylog.spark.session`).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import shutil
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import pylog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

CLICKS = "clicks"
COUNTS = "page_counts"
CHECKOUTS = "checkouts"
PARTITIONS = 2
PAGES = ("/", "/search", "/product", "/cart", "/checkout")
#: The producer appends a burst of BURST clicks every BURST_PAUSE seconds until it is stopped; MAX_CLICKS
#: only guards against a run that never ends.
BURST = 50
BURST_PAUSE = 0.1
MAX_CLICKS = 1_000_000
#: Runs made while the producer is still appending; one more runs after it stopped. (Each run of the two
#: queries costs Spark a few seconds, even with nothing new, so the example keeps to two.)
RUNS_WHILE_PRODUCING = 1

#: {partition: (first offset read, end offset)} and the records read, of one query in one run.
Run = tuple[dict[int, tuple[int, int]], int]


def clicks(seed: int = 11) -> Iterator[dict[str, Any]]:
    """The click stream, endless and deterministic for a seed; ``n`` numbers the clicks from 0."""
    rnd = random.Random(seed)
    for n in itertools.count():
        yield {"n": n, "user": f"u{rnd.randrange(100):02d}", "page": rnd.choices(PAGES, (5, 3, 4, 2, 1))[0]}


class ClickProducer(threading.Thread):
    """The web server: appends bursts of clicks until stopped (or MAX_CLICKS); ``sent`` counts them."""

    def __init__(self, store: pylog.Store) -> None:
        super().__init__(name="click-producer", daemon=True)
        self.store = store
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        gen = clicks()
        with self.store.producer(linger_ms=5) as producer:
            while not self.stop.is_set() and self.sent < MAX_CLICKS:
                burst = min(BURST, MAX_CLICKS - self.sent)
                for _ in range(burst):
                    click = next(gen)
                    producer.send(CLICKS, json.dumps(click).encode(), key=click["user"].encode())
                producer.flush()  # the burst is in the log before it counts as sent
                self.sent += burst
                self.stop.wait(BURST_PAUSE)


# ------------------------------------------------------------------------------------------------ queries


def counts_query(clicks_df: "DataFrame", path: str) -> "DataStreamWriter":
    """The running count per page, its changed rows appended to ``page_counts`` after each micro-batch."""
    from pyspark.sql import functions as F

    counts = (clicks_df.select(F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"))
              .groupBy("page").count())

    def append_changes(batch: "DataFrame", batch_id: int) -> None:
        (batch.select(F.col("page").alias("key"), F.col("count").cast("string").alias("value"))
         .write.format("pylog").option("topic", COUNTS).mode("append").save(path))

    return counts.writeStream.outputMode("update").foreachBatch(append_changes)


def checkouts_query(clicks_df: "DataFrame", path: str) -> "DataStreamWriter":
    """The ``/checkout`` clicks, as they are, into ``checkouts`` (the streaming pylog sink)."""
    from pyspark.sql import functions as F

    page = F.get_json_object(F.col("value").cast("string"), "$.page")
    return (clicks_df.where(page == "/checkout").select("key", "value")
            .writeStream.format("pylog").option("topic", CHECKOUTS).option("path", path))


def run_once(spark: "SparkSession", path: str, checkpoints: str,
             queries: Mapping[str, Callable[["DataFrame", str], "DataStreamWriter"]]) -> dict[str, Run]:
    """One scheduled run: start every query with ``availableNow``, wait for all, report what each read.

    What a query read comes from its progress reports (one per micro-batch): the source's start and end
    offsets and the number of input rows.
    """
    clicks_df = (spark.readStream.format("pylog").option("subscribe", CLICKS)
                 .option("startingOffsets", "earliest")  # only for a query's first run; then its checkpoint
                 .load(path))
    started = {name: build(clicks_df, path).option("checkpointLocation", os.path.join(checkpoints, name))
               .trigger(availableNow=True).start()
               for name, build in queries.items()}
    out: dict[str, Run] = {}
    for name, query in started.items():
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"streaming query {name} failed: {query.exception()}")
        ranges: dict[int, tuple[int, int]] = {}
        rows = 0
        for progress in query.recentProgress:
            rows += progress["numInputRows"]
            for source in progress["sources"]:
                start = _clicks_offsets(source["startOffset"])
                for p, end in _clicks_offsets(source["endOffset"]).items():
                    if end > start.get(p, 0):
                        first = ranges.get(int(p), (start.get(p, 0), end))[0]
                        ranges[int(p)] = (first, end)
        out[name] = (ranges, rows)
    return out


def _clicks_offsets(text: str | None) -> dict[str, int]:
    """``{"partition": offset}`` of ``clicks`` from a progress report's offset JSON (``"null"`` or None
    before the query's first batch)."""
    doc = json.loads(text) if text else None
    return (doc or {}).get(CLICKS, {})


# ------------------------------------------------------------------------------------------------ results


def read_topic(store: pylog.Store, topic: str) -> list[pylog.Record]:
    """Every record of ``topic``, partition by partition, in offset order."""
    out: list[pylog.Record] = []
    for p in store.topic(topic).partitions:
        offset = p.log_start_offset
        while recs := p.read(offset, max_records=5000):
            out += recs
            offset = recs[-1].offset + 1
    return out


def contiguous(runs: list[Run]) -> bool:
    """True when each run starts every partition where the previous run ended it (no gap, no overlap)."""
    ends: dict[int, int] = {}
    for ranges, _ in runs:
        for p, (start, end) in ranges.items():
            if start != ends.get(p, 0):
                return False
            ends[p] = end
    return True


def main(directory: str = "./pylog-streaming", spark: "SparkSession | None" = None) -> dict[str, Any]:
    """Run the scenario in ``directory`` (recreated) with ``spark`` (a new local session if None).

    Returns ``runs`` ({query: [Run, ...]}), ``produced`` (clicks sent), ``page_counts`` (page -> latest
    count in ``page_counts``), ``expected_counts`` (page -> clicks produced), ``checkouts`` (sorted click
    numbers in ``checkouts``) and ``expected_checkouts`` (those of the ``/checkout`` clicks produced).
    """
    own_session = spark is None
    if spark is None:
        from pylog.spark import session
        spark = session(app_name="pylog-streaming")
    shutil.rmtree(directory, ignore_errors=True)
    # The store and the queries' checkpoints side by side: a checkpoint belongs to the job, not the store.
    path = os.path.abspath(os.path.join(directory, "store"))
    checkpoints = os.path.abspath(os.path.join(directory, "checkpoints"))
    queries = {"counts": counts_query, "checkouts": checkouts_query}
    runs: dict[str, list[Run]] = {name: [] for name in queries}

    def run_and_print() -> None:
        result = run_once(spark, path, checkpoints, queries)
        n = len(runs["counts"]) + 1
        for name, (ranges, rows) in result.items():
            runs[name].append((ranges, rows))
            read = ", ".join(f"{CLICKS}-{p} [{s}, {e})" for p, (s, e) in sorted(ranges.items())) or "nothing new"
            print(f"run {n} {name + ':':<10} {read}: {rows} records")

    try:
        with pylog.open(path) as store:
            store.create_topic(CLICKS, partitions=PARTITIONS)
            store.create_topic(COUNTS, partitions=1, config={"cleanup.policy": "compact"})
            store.create_topic(CHECKOUTS, partitions=1)
            producer = ClickProducer(store)
            producer.start()
            try:
                while producer.sent < BURST and producer.is_alive():  # let the first clicks arrive
                    time.sleep(0.01)
                for _ in range(RUNS_WHILE_PRODUCING):
                    run_and_print()
            finally:
                producer.stop.set()
                producer.join()
            print(f"producer stopped after {producer.sent} clicks")
            run_and_print()  # catches up with everything
            page_counts: dict[str, int] = {}
            for rec in read_topic(store, COUNTS):  # the latest count per page wins
                page_counts[rec.key.decode()] = int(rec.value)
            checkouts = sorted(json.loads(rec.value)["n"] for rec in read_topic(store, CHECKOUTS))
    finally:
        if own_session:
            spark.stop()

    produced = list(itertools.islice(clicks(), producer.sent))
    expected_counts = dict(collections.Counter(c["page"] for c in produced))
    expected_checkouts = [c["n"] for c in produced if c["page"] == "/checkout"]
    for name, query_runs in runs.items():
        gapless = "no gap and no overlap" if contiguous(query_runs) else "GAP OR OVERLAP"
        print(f"{name}: runs read {sum(n for _, n in query_runs)} records in all, {gapless} between runs")
    print(f"{COUNTS} matches the clicks produced: {'yes' if page_counts == expected_counts else 'NO'}  "
          + ", ".join(f"{page}={n}" for page, n in sorted(page_counts.items())))
    print(f"{CHECKOUTS} holds each /checkout click exactly once: "
          f"{'yes' if checkouts == expected_checkouts else 'NO'} ({len(checkouts)} of {len(expected_checkouts)})")
    return {"runs": runs, "produced": producer.sent, "page_counts": page_counts,
            "expected_counts": expected_counts, "checkouts": checkouts, "expected_checkouts": expected_checkouts}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "./pylog-streaming")
