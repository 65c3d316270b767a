"""The producer: kafka-python's ``KafkaProducer`` shape over an in-process store.

``send()`` only appends the record to its topic's accumulator (a few list appends under a lock) and returns
a :class:`FutureRecordMetadata`; the records are *drained* in bulk — by a sender thread as soon as it is
free (``linger_ms=0``) or ``linger_ms`` after the first record, by the caller when ``buffer_memory`` is
full, and by :meth:`Producer.flush` — so one ``append_values`` call per partition carries many records.
A drain assigns partitions for the whole accumulation at once (explicit partition, else Kafka's murmur2 of
the key, vectorised, else the topic's sticky partition), appends each partition's records as one
idempotent call, fsyncs when ``acks="all"`` (one fsync for everything drained together: group commit),
and completes every future of the accumulation.

Invariants:
- Records of one producer reach each partition in the order they were sent: drains run one at a time
  (a drain lock taken before the accumulator is swapped out) and keep send order within a partition.
- With ``enable_idempotence`` (default) every append carries this producer's id, epoch and per-partition
  sequence number, so a drain retried after an error is not appended twice, even across a store restart
  (see :mod:`pylog.producer_state`).
- A future completes exactly once: with its record's metadata once the append (``acks=1``) or the fsync
  (``acks="all"``) is done, or with the error that stopped its drain.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .errors import (InvalidConfigError, InvalidRecordError, LogFailedError, PylogError, RecordTooLargeError,
                     StoreClosedError)
from .partitioner import DefaultPartitioner
from .records import _column, now_ms
from .structs import RecordMetadata, TopicPartition

if TYPE_CHECKING:
    from .log import Store

__all__ = ["Producer", "FutureRecordMetadata", "ProducerTimeoutError"]

log = logging.getLogger("pylog.producer")

_DEFAULTS: dict[str, Any] = {
    "client_id": None,
    "key_serializer": None,
    "value_serializer": None,
    "acks": 1,
    "compression_type": None,
    "batch_size": 16384,
    "linger_ms": 0,
    "partitioner": None,
    "buffer_memory": 32 * 1024 * 1024,
    "max_block_ms": 60_000,
    "max_request_size": 1_048_576,
    "enable_idempotence": True,
    "retries": 0,
    "retry_backoff_ms": 100,
}
#: kafka-python options that only make sense with a broker: refused with a clear message.
_NETWORK_OPTIONS = {"bootstrap_servers", "security_protocol", "sasl_mechanism", "ssl_context", "api_version",
                    "request_timeout_ms", "metadata_max_age_ms", "connections_max_idle_ms",
                    "max_in_flight_requests_per_connection", "reconnect_backoff_ms"}
#: Per-record overhead in a batch body beyond key and value, for the size checks.
_RECORD_OVERHEAD = 16


class ProducerTimeoutError(PylogError, TimeoutError):
    """A future's ``get(timeout)`` or ``flush(timeout)`` ran out of time (kafka-python's KafkaTimeoutError)."""


def _check_headers(headers: Any) -> int:
    """Validate ``[(str, bytes | None), ...]`` headers; returns their size."""
    size = 0
    for item in headers:
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str) or not (
                item[1] is None or isinstance(item[1], (bytes, bytearray, memoryview))):
            raise InvalidRecordError(f"headers must be (str, bytes) pairs, got {item!r}"[:200])
        size += len(item[0]) + (0 if item[1] is None else len(item[1])) + 8
    return size


class _Accumulation:
    """The records sent to one topic since its last drain, and the completion state they share."""

    __slots__ = ("topic", "records", "values", "keys", "partitions", "timestamps", "headers", "nbytes", "first_at",
                 "max_bytes",
                 "done", "error", "partition_errors", "offsets", "placed", "stamps", "callbacks", "_event")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        #: (value, key, partition, timestamp_ms, headers) per record, as sent; the columns below are
        #: filled from it when the accumulation is drained (one append per send keeps send() cheap).
        self.records: list[tuple] = []
        self.values: list[Any] = []
        self.keys: list[Any] = []
        self.partitions: list[int | None] = []
        self.timestamps: list[int | None] = []
        self.headers: list[Any] = []
        self.nbytes = 0
        self.max_bytes = 1 << 62
        self.first_at = 0.0
        self.done = False
        self.error: BaseException | None = None  # the whole accumulation failed
        #: partition -> the error of its append: records placed elsewhere are unaffected
        self.partition_errors: dict[int, BaseException] = {}
        self.offsets: np.ndarray | None = None
        self.placed: np.ndarray | None = None
        self.stamps: list[int] = []
        self.callbacks: list[tuple[int, bool, Callable[..., Any], tuple, dict]] = []
        self._event = threading.Event()

    def columns(self) -> None:
        """Turn the sent records into columns (at drain time, outside the producer's lock)."""
        if self.records:
            values, keys, partitions, timestamps, headers = map(list, zip(*self.records))
            self.values, self.keys, self.partitions, self.timestamps, self.headers = (
                values, keys, partitions, timestamps, headers)
            self.records = []

    def complete(self, error: BaseException | None = None) -> None:
        self.finish(error)
        self.run_callbacks()

    def finish(self, error: BaseException | None = None) -> None:
        """Mark done (every get() returns from here on); callbacks run separately, outside any lock."""
        self.error = error
        self.done = True
        self._event.set()

    def run_callbacks(self) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for i, on_error, fn, args, kwargs in callbacks:
            _run_callback(self, i, on_error, fn, args, kwargs)

    def wait(self, timeout: float | None) -> bool:
        return self.done or self._event.wait(timeout)


def _error_of(acc: _Accumulation, i: int) -> BaseException | None:
    if acc.error is not None:
        return acc.error
    if acc.partition_errors and acc.placed is not None:
        return acc.partition_errors.get(int(acc.placed[i]))
    return None


def _run_callback(acc: _Accumulation, i: int, on_error: bool, fn: Callable[..., Any], args: tuple,
                  kwargs: dict) -> None:
    try:
        error = _error_of(acc, i)
        if on_error and error is not None:
            fn(error, *args, **kwargs)
        elif not on_error and error is None:
            fn(FutureRecordMetadata(acc, i).get(0), *args, **kwargs)
    except Exception:  # a user's callback must not break the producer (kafka-python logs and goes on)
        log.exception("error in a producer callback")


class FutureRecordMetadata:
    """The eventual :class:`~pylog.structs.RecordMetadata` of one sent record (kafka-python's future)."""

    __slots__ = ("_acc", "_i", "_acks0")

    def __init__(self, acc: _Accumulation, i: int, acks0: bool = False) -> None:
        self._acc = acc
        self._i = i
        self._acks0 = acks0

    @property
    def is_done(self) -> bool:
        return self._acc.done

    def succeeded(self) -> bool:
        return self._acc.done and _error_of(self._acc, self._i) is None

    def failed(self) -> bool:
        return self._acc.done and _error_of(self._acc, self._i) is not None

    @property
    def exception(self) -> BaseException | None:
        return _error_of(self._acc, self._i) if self._acc.done else None

    @property
    def value(self) -> RecordMetadata | None:
        return self.get(0) if self.succeeded() else None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: forever) for the record's metadata.

        :raises ProducerTimeoutError: on timeout; the drain's error when the append failed.
        """
        acc = self._acc
        if not acc.wait(timeout):
            raise ProducerTimeoutError(f"record not appended to {acc.topic} within {timeout} s")
        i = self._i
        error = _error_of(acc, i)
        if error is not None:
            raise error
        assert acc.offsets is not None and acc.placed is not None
        key, value, headers = acc.keys[i], acc.values[i], acc.headers[i]
        partition = int(acc.placed[i])
        return RecordMetadata(
            acc.topic, partition, TopicPartition(acc.topic, partition), -1 if self._acks0 else int(acc.offsets[i]),
            acc.stamps[i], -1, None, -1 if key is None else len(key), -1 if value is None else len(value),
            sum(len(k.encode()) + (0 if v is None else len(v)) for k, v in headers) if headers else 0)

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(record_metadata, *args, **kwargs)`` when the record is appended (at once if it is)."""
        return self._add(False, fn, args, kwargs)

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(exception, *args, **kwargs)`` if the append fails (at once if it did)."""
        return self._add(True, fn, args, kwargs)

    def _add(self, on_error: bool, fn: Callable[..., Any], args: tuple, kwargs: dict) -> "FutureRecordMetadata":
        acc = self._acc
        entry = (self._i, on_error, fn, args, kwargs)
        if not acc.done:
            acc.callbacks.append(entry)
            if not acc.done:
                return self
            try:
                acc.callbacks.remove(entry)
            except ValueError:
                return self  # complete() took it and ran it
        _run_callback(acc, *entry)
        return self


class Producer:
    """Publishes records to a store's topics; kafka-python's ``KafkaProducer`` API. Thread-safe.

    Options (kafka-python's names): ``client_id``, ``key_serializer``, ``value_serializer``, ``acks``
    (0, 1 or "all"), ``compression_type`` (None or "lz4"), ``batch_size``, ``linger_ms``,
    ``partitioner`` (``fn(key_bytes, all_partitions, available_partitions) -> int``; default: Kafka's),
    ``buffer_memory``, ``max_block_ms`` (accepted for kafka-python compatibility: send() never waits
    for metadata, and when the buffer is full it drains in place instead of blocking),
    ``max_request_size``, ``enable_idempotence`` (default True),
    ``retries`` / ``retry_backoff_ms`` (an append that failed with an OSError is retried with the same
    sequence numbers). Broker options (``bootstrap_servers``, ...) raise :class:`InvalidConfigError`.
    """

    def __init__(self, store: "Store", **configs: Any) -> None:
        unknown = set(configs) - set(_DEFAULTS)
        if unknown & _NETWORK_OPTIONS:
            raise InvalidConfigError(f"pylog runs in-process, without a broker: {sorted(unknown & _NETWORK_OPTIONS)} "
                                     "do not apply")
        if unknown:
            raise InvalidConfigError(f"unknown producer option(s) {sorted(unknown)}")
        cfg = dict(_DEFAULTS, **configs)
        if cfg["acks"] not in (0, 1, -1, "all", "1", "0"):
            raise InvalidConfigError(f"acks must be 0, 1 or 'all', got {cfg['acks']!r}")
        self._acks = {"all": -1, -1: -1, "1": 1, "0": 0}.get(cfg["acks"], cfg["acks"])
        if cfg["compression_type"] not in (None, "none", "lz4"):
            raise InvalidConfigError(f"compression_type {cfg['compression_type']!r} is not supported (None or 'lz4')")
        for name in ("batch_size", "buffer_memory", "max_request_size"):
            if not isinstance(cfg[name], int) or cfg[name] < 1:
                raise InvalidConfigError(f"{name} must be a positive int, got {cfg[name]!r}")
        self.config = cfg
        self._store = store
        self._key_ser = cfg["key_serializer"]
        self._value_ser = cfg["value_serializer"]
        self._batch_size = cfg["batch_size"]
        self._linger = cfg["linger_ms"] / 1000
        self._partitioner = cfg["partitioner"]
        self._default_partitioner = DefaultPartitioner()
        self._idempotent = bool(cfg["enable_idempotence"])
        self._producer_id = store.new_producer_id() if self._idempotent else -1
        self._sequences: dict[tuple[str, int], int] = {}
        self._epoch = 0
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._accs: dict[str, _Accumulation] = {}
        self._buffered = 0
        self._closed = False
        self._acks0 = self._acks == 0
        self._max_request = cfg["max_request_size"]
        self._buffer_memory = cfg["buffer_memory"]
        self._retries = int(cfg["retries"])
        self._retry_backoff = cfg["retry_backoff_ms"] / 1000
        self._sender_idle = True
        self._wake = threading.Event()
        self._sender = threading.Thread(target=self._run_sender, name="pylog-producer-sender", daemon=True)
        self._sender.start()

    # ------------------------------------------------------------------ sending

    def send(self, topic: str, value: Any = None, key: Any = None, headers: list[tuple[str, bytes]] | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a future whose ``get()`` gives its :class:`RecordMetadata`.

        :raises RecordTooLargeError: when the record alone exceeds ``max_request_size``.
        :raises UnknownTopicError: for a topic the store does not have.
        """
        # The hot path of one-record-at-a-time producing: a few checks and one list append under the lock.
        if self._closed:
            raise StoreClosedError("producer is closed")
        if key is not None and self._key_ser is not None:
            key = self._key_ser(key)
        if value is not None and self._value_ser is not None:
            value = self._value_ser(value)
        if value is None:
            size = _RECORD_OVERHEAD
        elif type(value) is bytes or isinstance(value, (bytearray, memoryview)):
            size = len(value) + _RECORD_OVERHEAD
        else:
            raise InvalidRecordError(f"value must be bytes (or use value_serializer), got {type(value).__name__}")
        if key is not None:
            if not (type(key) is bytes or isinstance(key, (bytearray, memoryview))):
                raise InvalidRecordError(f"key must be bytes (or use key_serializer), got {type(key).__name__}")
            size += len(key)
        if headers:
            size += _check_headers(headers)
        if size > self._max_request:
            raise RecordTooLargeError(f"record of about {size} bytes exceeds max_request_size ({self._max_request})")
        if partition is not None or key is None:
            self._check_placement(topic, partition, key)
        with self._lock:
            if self._closed:
                raise StoreClosedError("producer is closed")
            acc = self._accs.get(topic) or self._new_accumulation(topic)
            if size + 64 > acc.max_bytes:  # one record alone must fit the topic's max.message.bytes
                raise RecordTooLargeError(f"record of about {size} bytes does not fit max.message.bytes "
                                          f"({acc.max_bytes}) of {topic}")
            recs = acc.records
            i = len(recs)
            if i == 0:
                acc.first_at = time.monotonic()
            recs.append((value, key, partition, timestamp_ms, headers))
            acc.nbytes += size
            self._buffered += size
        if acc.nbytes >= self._batch_size or (self._sender_idle and self._linger == 0):
            self._sender_idle = False
            if not self._wake.is_set():
                self._wake.set()
        if self._buffered >= self._buffer_memory:
            self._drain_all()  # back-pressure: the caller drains when the buffer is full
        return FutureRecordMetadata(acc, i, self._acks0)

    def _check_placement(self, topic: str, partition: int | None, key: Any) -> None:
        """Errors a drain would meet for this record alone, raised at send() as kafka-python does."""
        t = self._store.topic(topic)
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)
                                      or not 0 <= partition < t.num_partitions):
            raise ValueError(f"partition {partition!r} is not one of {topic}'s {t.num_partitions}")
        if key is None and t.config.compact:
            raise InvalidRecordError(f"{topic} is compacted: every record needs a key")

    def _new_accumulation(self, topic: str) -> _Accumulation:
        t = self._store.topic(topic)  # raises UnknownTopicError now rather than in the drain
        acc = self._accs[topic] = _Accumulation(topic)
        acc.max_bytes = t.config["max.message.bytes"]
        return acc

    def flush(self, timeout: float | None = None) -> None:
        """Append everything sent so far (and fsync with ``acks="all"``) before returning."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # Drains run one at a time, so once _drain_all has had its turn every earlier drain is over too.
        pending = [a for a in list(self._accs.values()) if a.records]
        self._drain_all()
        for acc in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not acc.wait(left):
                raise ProducerTimeoutError(f"flush did not finish within {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True  # from here send() refuses, so nothing lands after the last drain
        try:
            self.flush(timeout)
        finally:
            self._wake.set()
            if threading.current_thread() is not self._sender:  # close() from a callback: no self-join
                self._sender.join(timeout)
            with self._lock:
                left = [a for a in self._accs.values() if a.records]
                self._accs.clear()
            for acc in left:  # flush timed out: fail what was never appended rather than leave it hanging
                acc.complete(StoreClosedError("producer closed before the record was appended"))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic``."""
        return set(range(self._store.topic(topic).num_partitions))

    def metrics(self) -> dict[str, Any]:
        return {"producer_id": self._producer_id, "buffered_bytes": self._buffered,
                "pending_topics": sum(1 for a in self._accs.values() if a.records)}

    # ------------------------------------------------------------------ draining

    def _run_sender(self) -> None:
        timeout: float | None = None
        while not self._closed:
            # Idle, it still looks every 50 ms: send() wakes it without a lock, so a wake-up can be missed.
            self._wake.wait(0.05 if timeout is None else timeout)
            self._wake.clear()
            self._sender_idle = False
            if self._closed:
                return
            try:
                now = time.monotonic()
                due = [t for t, a in list(self._accs.items()) if a.records and (
                    a.nbytes >= self._batch_size or now - a.first_at >= self._linger)]
                for topic in due:
                    self._drain(topic)
            except Exception:  # a drain completes its futures with its error; keep the thread alive
                log.exception("pylog producer sender: drain failed")
            # Idle first, then look: a send() after the look sees the flag and wakes us; one before it is
            # pending and drained as soon as it is due (at once with linger_ms=0).
            self._sender_idle = True
            pending = [a.first_at for a in list(self._accs.values()) if a.records]
            timeout = max(0.0, min(pending) + self._linger - time.monotonic()) if pending else None
            if timeout is not None:
                self._sender_idle = False

    def _drain_all(self) -> None:
        for topic in list(self._accs):
            self._drain(topic)

    def _drain(self, topic: str) -> None:
        error: BaseException | None = None
        with self._drain_lock:
            with self._lock:
                acc = self._accs.get(topic)
                if acc is None or not acc.records:
                    return
                self._accs[topic] = _Accumulation(topic)
                self._buffered -= acc.nbytes
            try:
                acc.columns()
                self._append(acc)
            except BaseException as exc:
                error = exc
            acc.finish(error)  # done before the lock goes: flush() relies on it
        # Callbacks outside the drain lock: a callback may send, flush or close.
        acc.run_callbacks()
        if error is not None and not isinstance(error, Exception):
            raise error

    def _append(self, acc: _Accumulation) -> None:
        topic = self._store.topic(acc.topic)
        n = len(acc.values)
        all_parts = list(range(topic.num_partitions))
        placed, sticky = self._place(acc, all_parts)
        now = now_ms()
        # list.count and list repetition run in C: no Python step per record in the common case.
        stamps = [now] * n if acc.timestamps.count(None) == n else [now if t is None else t for t in acc.timestamps]
        offsets = np.empty(n, np.int64)
        compression = None if self.config["compression_type"] in (None, "none") else "lz4"
        touched = []
        groups: list[tuple[int, np.ndarray | None]]
        if len(all_parts) == 1 or (placed == placed[0]).all():
            groups = [(int(placed[0]), None)]
        else:
            order = np.argsort(placed, kind="stable")
            cuts = np.flatnonzero(np.diff(placed[order])) + 1
            groups = [(int(placed[idx[0]]), idx) for idx in np.split(order, cuts)]
        for number, idx in groups:
            if idx is None:
                vals, keys, ts, hs = acc.values, acc.keys, stamps, acc.headers
            else:
                il = idx.tolist()
                vals = [acc.values[i] for i in il]
                keys = [acc.keys[i] for i in il]
                ts = [stamps[i] for i in il]
                hs = [acc.headers[i] for i in il]
            producer = None
            if self._idempotent:
                seq = self._sequences.get((acc.topic, number), 0)
                producer = (self._producer_id, self._epoch, seq)
            try:
                part = topic.partition(number)
                first = self._append_with_retries(part, vals, keys if keys.count(None) != len(keys) else None,
                                                  ts, hs if any(hs) else None, producer, compression)
            except Exception as exc:
                # Only this partition's records fail. Some of them may have landed, so their sequence
                # numbers must not be reused for other records: start a new epoch, whose sequences start
                # again at 0 on every partition (Kafka's producer bumps its epoch likewise, KIP-360).
                acc.partition_errors[number] = exc
                if producer is not None and isinstance(exc, (OSError, LogFailedError)):
                    self._new_epoch()
                continue
            if producer is not None:
                self._sequences[(acc.topic, number)] = (producer[2] + len(vals)) % (1 << 31)
            if idx is None:
                offsets[:] = np.arange(first, first + n)
            else:
                offsets[idx] = np.arange(first, first + len(idx))
            touched.append(part)
        if self._acks == -1:
            for part in touched:
                try:
                    part.flush()  # one fsync for everything this drain appended: group commit
                except Exception as exc:
                    acc.partition_errors[part.number] = exc
        acc.offsets, acc.placed, acc.stamps = offsets, placed, stamps
        # Sticky partitioning: a completed batch moves key-less records on to another partition.
        if sticky is not None:
            for number in set(placed[sticky].tolist()):
                self._default_partitioner.on_new_batch(acc.topic, number, all_parts)

    def _new_epoch(self) -> None:
        """After a failure that may have written part of a call: never reuse its sequence numbers."""
        self._sequences.clear()
        self._epoch += 1
        if self._epoch > 0x7FFF:  # the header's epoch is an int16: start over under a new producer id
            self._producer_id = self._store.new_producer_id()
            self._epoch = 0

    def _append_with_retries(self, part: Any, vals: list, keys: list | None, ts: list, hs: list | None,
                             producer: tuple[int, int, int] | None, compression: str | None) -> int:
        """One partition's append; an OSError (a full disk, say) is retried ``retries`` times with the
        same sequence numbers, so an append that did land before the error is not written twice."""
        attempt = 0
        while True:
            try:
                return part.append_values(vals, keys=keys, timestamps=ts, headers=hs, producer=producer,
                                          compression=compression)
            except OSError:
                if attempt >= self._retries:
                    raise
                attempt += 1
                log.warning("pylog producer: append to %s-%d failed; retry %d of %d", part.topic, part.number,
                            attempt, self._retries, exc_info=True)
                time.sleep(self._retry_backoff)

    def _place(self, acc: _Accumulation, all_parts: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """The partition of every record of the accumulation, and which of them went to the sticky
        partition (None when a custom partitioner placed them)."""
        n = len(acc.values)
        explicit = acc.partitions
        placed = np.full(n, -1, np.int32)
        if explicit.count(None) != n:
            for i, p in enumerate(explicit):
                if p is not None:
                    if not isinstance(p, int) or not 0 <= p < len(all_parts):
                        raise ValueError(f"partition {p!r} is not one of {acc.topic}'s {len(all_parts)}")
                    placed[i] = p
        todo = np.flatnonzero(placed < 0)
        if not len(todo):
            return placed, None
        if self._partitioner is not None:
            for i in todo.tolist():
                placed[i] = self._partitioner(acc.keys[i], all_parts, all_parts)
            return placed, None
        keys = [acc.keys[i] for i in todo.tolist()] if len(todo) != n else acc.keys
        if keys.count(None) == len(keys):  # no keys at all: all sticky, nothing to hash
            lengths, data = np.full(len(keys), -1, np.int32), b""
        else:
            lengths, parts = _column(keys, len(keys), "keys")  # lengths from a C-level map when it can
            data = b"".join(parts)
        placed[todo] = self._default_partitioner.partition_batch(lengths, data, all_parts, topic=acc.topic)
        sticky = np.zeros(n, bool)
        sticky[todo[lengths < 0]] = True
        return placed, sticky
