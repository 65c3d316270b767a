"""What ``pylog serve`` counts for its metrics (:mod:`pylog.metrics`): requests, errors and latency per API,
throttle time, connections, authentications, and the records a Fetch hands out.

The connection calls :func:`answered` once per request, when its answer is ready (the answer itself, or the
future of an answer that is completed later: a Produce waiting for its appends and fsyncs); the Fetch
handler calls :func:`fetched` once per answer. Nothing here runs unless recording is on
(``metrics.state.on``, tested by the callers), and nothing here is per record.

Invariants: one latency observation per request, which is also its count (``pylog_server_requests_total``
reads the latency histogram's counts: :mod:`pylog.metrics`); an answer's error codes are counted once each,
wherever they sit (the answer's own ``error_code``, each topic's, partition's or item's); NONE is not counted.
Latency is measured from the request taken off the connection's queue to its answer ready to encode.
"""

from __future__ import annotations

import asyncio
import time

from .. import metrics
from .protocol import APIS
from .protocol.codes import ErrorCode

__all__ = ["answered", "fetched", "connection_created", "authenticated", "authentication_failed"]

_errors = metrics.counter("pylog_server_request_errors_total")
_latency = metrics.histogram("pylog_server_request_duration_seconds")
_throttle = metrics.counter("pylog_server_throttle_time_seconds_total")
_throttled = metrics.counter("pylog_server_throttled_requests_total")
_created = metrics.counter("pylog_server_connections_created_total")
_auth_ok = metrics.counter("pylog_server_authentications_total")
_auth_failed = metrics.counter("pylog_server_authentication_failures_total")

#: Kafka's name of each API key and error code (label values), computed once.
_API_NAMES = {key: (api.name,) for key, api in APIS.items()}
_ERROR_NAMES = {int(code): code.name for code in ErrorCode}
#: Offset of a Kafka v2 record batch's record count (baseOffset 8, length 4, leader epoch 4, magic 1, crc 4,
#: attributes 2, last offset delta 4, two timestamps 16, producer id 8, epoch 2, base sequence 4).
_RECORD_COUNT_AT = 57


def answered(api_key: int, began: float, answer: "dict | asyncio.Future[dict] | None") -> None:
    """Count one request of ``api_key`` taken at ``time.perf_counter()`` ``began``, when ``answer`` is ready."""
    if isinstance(answer, asyncio.Future):
        answer.add_done_callback(lambda fut: _answered(api_key, began, _result(fut)))
    else:
        _answered(api_key, began, answer)


def _result(fut: "asyncio.Future[dict]") -> dict | None:
    if fut.cancelled() or fut.exception() is not None:
        return None
    return fut.result()


def _answered(api_key: int, began: float, answer: dict | None) -> None:
    # One recording per request: the latency observation is also the request's count
    # (pylog_server_requests_total reads the histogram's counts), and no dict is made unless it has errors.
    labels = _API_NAMES.get(api_key) or (str(api_key),)
    _latency.observe(labels, time.perf_counter() - began)
    if answer is None:
        return
    throttle = answer.get("throttle_time_ms")
    if throttle:
        _throttle.inc(labels, throttle / 1000.0)
        _throttled.inc(labels)
    counts = _error_codes(answer, None, 0)
    if counts:
        for code, n in counts.items():
            _errors.inc((labels[0], _ERROR_NAMES.get(code, str(code))), n)


def _error_codes(body: dict, counts: dict[int, int] | None, depth: int) -> dict[int, int] | None:
    """``counts`` (made when the first is found) with the non-zero ``error_code`` of ``body`` and of the dicts
    in its lists (three levels: topics, partitions, items) added."""
    code = body.get("error_code")
    if code:
        if counts is None:
            counts = {}
        counts[code] = counts.get(code, 0) + 1
    if depth < 3:
        for value in body.values():
            if type(value) is list:
                for entry in value:
                    if type(entry) is dict:
                        counts = _error_codes(entry, counts, depth + 1)
    return counts


def fetched(responses: list[dict]) -> None:
    """Count the records and bytes of a Fetch answer's ``responses`` per topic (from the Kafka batches'
    headers: one look per batch)."""
    for topic in responses:
        records = nbytes = 0
        for entry in topic["partitions"]:
            parts = entry.get("records")
            if not parts or type(parts) is not list:
                continue
            for part in parts:
                nbytes += len(part)
                records += int.from_bytes(part[_RECORD_COUNT_AT:_RECORD_COUNT_AT + 4], "big")
        if nbytes:
            metrics.handed_out(topic["topic"], records, nbytes)


def connection_created() -> None:
    _created.inc(())


def authenticated() -> None:
    _auth_ok.inc(())


def authentication_failed() -> None:
    _auth_failed.inc(())
