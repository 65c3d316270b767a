"""What the producer and the consumer count for the metrics (:mod:`pylog.metrics`), per ``client_id``.

The producer calls :func:`drained` once per drain (a topic's accumulation appended, partition by partition);
the consumer calls :func:`read` once per partition read of a poll and :func:`polled` once per poll that
returned records. Callers test ``metrics.state.on`` first; nothing here is per record.

Invariants: the counters are the process's (labelled by client id), so they outlive the clients and never go
back when one closes; two clients with the same ``client_id`` add to the same series, as they share a quota.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from .. import metrics
from ..storage.records import payload_bytes
from .accumulator import Accumulation

__all__ = ["drained", "throttled", "read", "polled", "label"]

_sent = metrics.counter("pylog_producer_records_sent_total")
_sent_bytes = metrics.counter("pylog_producer_bytes_sent_total")
_batch = metrics.histogram("pylog_producer_batch_size_bytes")
_queue = metrics.histogram("pylog_producer_record_queue_time_seconds")
_throttle = metrics.counter("pylog_producer_throttle_time_seconds_total")
_consumed = metrics.counter("pylog_consumer_records_consumed_total")
_consumed_bytes = metrics.counter("pylog_consumer_bytes_consumed_total")
_fetch = metrics.histogram("pylog_consumer_fetch_duration_seconds")


def label(client_id: Any) -> tuple[str]:
    """The label values of a client with this ``client_id`` (None: "")."""
    return ("" if client_id is None else str(client_id),)


def drained(client: tuple[str], acc: Accumulation, groups: Sequence[tuple[int, Any]]) -> None:
    """One drain of ``acc`` (after its appends), placed as ``groups`` (partition, record indexes or None for
    all): records sent and appended, their bytes as ``buffer_memory`` counts them, each partition append's
    share of those bytes (Kafka's batch size), and how long the oldest record waited."""
    records = len(acc.records)
    if records <= 0:
        return
    per_record = acc.size() / records
    failed = 0
    for number, idx in groups:
        n = records if idx is None else len(idx)
        if number in acc.partition_errors:
            failed += n
        else:
            _batch.observe(client, n * per_record)
    sent = records - failed
    _sent.inc(client, sent)
    _sent_bytes.inc(client, round(sent * per_record))
    if acc.first_at > 0:
        _queue.observe(client, max(0.0, time.monotonic() - acc.first_at))


def throttled(client: tuple[str], seconds: float) -> None:
    """A drain waited ``seconds`` for the client's produce quota."""
    _throttle.inc(client, seconds)


def read(client: tuple[str], topic: str, records: int, slices: Any) -> None:
    """One partition read of a poll: ``records`` returned from ``slices`` of ``topic``."""
    nbytes = payload_bytes(slices)
    _consumed.inc(client, records)
    _consumed_bytes.inc(client, nbytes)
    metrics.handed_out(topic, records, nbytes)


def polled(client: tuple[str], seconds: float) -> None:
    """A poll that returned records spent ``seconds`` reading them."""
    _fetch.observe(client, seconds)
