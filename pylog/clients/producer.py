"""The producer: kafka-python's ``KafkaProducer`` shape over an in-process store.

``send()`` only appends the record to its topic's accumulation under a lock and returns a
:class:`FutureRecordMetadata`; the records are *drained* in bulk — by a sender thread as soon as it is
free (``linger_ms=0``) or ``linger_ms`` after the first record, by the caller when ``buffer_memory`` is
full, and by :meth:`Producer.flush` — so one ``append_values`` call per partition carries many records.
A drain assigns partitions for the whole accumulation at once (explicit partition, else Kafka's murmur2 of
the key, vectorised, else the topic's sticky partition), appends each partition's records as one
idempotent call, fsyncs when ``acks="all"`` (one fsync per partition for everything drained together, and
shared with other producers of the process: :mod:`pylog.storage.group_commit`),
and completes every future of the accumulation.

The common record — a ``bytes`` value of at most 16 KiB and nothing else, no serializer — takes a fast
path: ``send()`` appends the value itself (no tuple) and compares the record's index with a precomputed
one; the future is a two-slot object. A drain of only such records hands the list to the partition as its
value column without a Python step per record. A record with a ``bytes`` key as well takes a twin path
that appends a tuple; any other record goes through every check in ``_send``. With the compiled
accelerator live (:mod:`pylog.accel`) both fast paths run in C (native/send.c's ``Sender``, installed as
the producer's ``send``), step for step as written here. Everything that depends on
byte counts (waking the sender at ``batch_size``, draining at ``buffer_memory``, stamping the first
record for ``linger_ms``) happens in :meth:`Producer._settle`, which ``send()`` calls only once its
record's index reaches ``check_at`` (see :class:`Accumulation`): bytes are summed there, in C, for all
the records since the last look.

With a quota for the producer's ``client_id`` (:mod:`pylog.clients.quotas`), each drain records the bytes it
appended (values, keys and headers) and, when the client is over its byte rate, waits the quota's delay
before completing the drain's futures and before the next drain may start: as a Kafka broker delays its
produce response. Meanwhile ``send()`` keeps filling the buffer and blocks once ``buffer_memory`` is full.

Invariants:
- Records of one producer reach each partition in the order they were sent: drains run one at a time
  (a drain lock taken before the accumulation is swapped out) and keep send order within a partition.
- With ``enable_idempotence`` (default) every append carries this producer's id, epoch and per-partition
  sequence number, so a drain retried after an error is not appended twice, even across a store restart
  (see :mod:`pylog.storage.producer_state`).
- A producer never holds a partition's writer lock it could let go of while it waits for another partition
  or out a quota delay: it first lets go of every partition it holds for a turn (fsynced first with
  ``acks="all"``), so two producers never wait for the partition the other holds. One whose retention or
  compaction pass is under way in this store stays held until the pass ends (tried again while it waits,
  so it goes then), and only the wait for the partition itself counts against ``max_block_ms``. A producer
  still waits while the partition it needs is another's turn: until that producer hands it over after its
  append (or within 10 ms when idle), which a pass under way there also puts off.
- A future completes exactly once: with its record's metadata once the append (``acks=1``) or the fsync
  (``acks="all"``) is done, or with the error that stopped its drain.
- ``buffer_memory`` is never exceeded unnoticed: ``check_at`` is set so that records of at most ``bound``
  bytes each (every record since the last look is) cannot fill the buffer before the ``send()`` that
  reaches ``check_at`` looks; the one that fills it drains. ``batch_size`` is noticed at the record that
  reaches it when record sizes are steady (``check_at`` assumes the accumulation's average size for it),
  a few records later otherwise: it only wakes the sender early.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import types
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from ..accel import native as _native
from ..errors import ProducerTimeoutError  # defined here before pylog.errors: still importable from here
from ..errors import (InvalidArgumentError, InvalidConfigError, InvalidRecordError, InvalidTopicError, LogFailedError,
                     PartitionLockedError,
                     RecordTooLargeError, StoreClosedError)
from ..storage import group_commit
from ..storage.filenames import is_internal_topic
from .partitioner import DefaultPartitioner
from .quotas import PRODUCE, QuotaManager
from .storeview import StoreView
from ..storage.records import header_pairs, now_ms
from .accumulator import ITEM_LEN, RECORD_OVERHEAD, Accumulation
from ..structs import RecordMetadata
from ..partition import Partition


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
#: How often (seconds) an idle sender thread looks whether another process waits for a partition it holds.
_HANDOVER_POLL = 0.01
#: Room a batch header needs beside one record within the topic's max.message.bytes (send-time check).
_BATCH_OVERHEAD = 64
#: Longest value send()'s fast path takes (bytes); longer ones are checked one by one. It bounds how many
#: fast records fit in what is left of buffer_memory, so it sets how often send() must look.
_FAST_MAX = 16 * 1024


def _check_headers(headers: Any) -> tuple[tuple, int]:
    """One record's headers checked as the encoder checks them (:func:`header_pairs`: ``(str, bytes | None)``
    pairs, keys UTF-8 encodable) and their size.

    :raises InvalidRecordError: for any other shape, here at send() rather than in the drain's append.
    """
    pairs = header_pairs(headers)
    return pairs, sum(len(k) + (0 if v is None else len(v)) + 8 for k, v in pairs)


def _check_writable(topic: str) -> None:
    """Internal topics (``__consumer_offsets``) are written by pylog only. :raises InvalidTopicError:"""
    if is_internal_topic(topic):
        raise InvalidTopicError(f"{topic!r} is an internal topic of pylog: producers cannot write to it")


class FutureRecordMetadata:
    """The eventual :class:`~pylog.structs.RecordMetadata` of one sent record (kafka-python's future).

    Made by :meth:`Producer.send` only: two slots (the record's accumulation and its index in it) and no
    ``__init__``, because one is made per record on the hot path.
    """

    __slots__ = ("_acc", "_i")
    _acc: Accumulation
    _i: int

    @property
    def is_done(self) -> bool:
        return self._acc.done

    def succeeded(self) -> bool:
        return self._acc.done and self._acc.error_of(self._i) is None

    def failed(self) -> bool:
        return self._acc.done and self._acc.error_of(self._i) is not None

    @property
    def exception(self) -> BaseException | None:
        return self._acc.error_of(self._i) if self._acc.done else None

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
        return acc.metadata(self._i)

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
        acc.run_callback(*entry)
        return self


class Producer:
    """Publishes records to a store's topics; kafka-python's ``KafkaProducer`` API. Thread-safe.

    Options (kafka-python's names): ``client_id`` (also the key of the producer's quota, see
    :meth:`pylog.store.Store.set_quota`), ``key_serializer``, ``value_serializer``, ``acks``
    (0, 1 or "all"), ``compression_type`` (None or "lz4"), ``batch_size``, ``linger_ms``,
    ``partitioner`` (``fn(key_bytes, all_partitions, available_partitions) -> int``; default: Kafka's),
    ``buffer_memory``, ``max_block_ms`` (how long an append waits for a partition that a producer of
    another process is writing; send() itself never waits for metadata, and when the buffer is full it
    drains in place instead of blocking),
    ``max_request_size``, ``enable_idempotence`` (default True),
    ``retries`` / ``retry_backoff_ms`` (an append that failed with an OSError is retried with the same
    sequence numbers). Broker options (``bootstrap_servers``, ...) raise :class:`InvalidConfigError`.
    """

    #: The options and their defaults (kafka-python's attribute name).
    DEFAULT_CONFIG: Mapping[str, Any] = MappingProxyType(_DEFAULTS)

    def __init__(self, store: StoreView, *, quotas: QuotaManager | None = None, **configs: Any) -> None:
        if quotas is None:  # made by hand, not by Store.producer(): most likely Producer("path")
            made_from = f"{type(store).__name__} {store!r}"[:160]
            raise InvalidArgumentError(f"a Producer is made by its store, not from {made_from}: "
                                       "use pylog.open(path).producer(...)")
        unknown = set(configs) - set(_DEFAULTS)
        if unknown & _NETWORK_OPTIONS:
            raise InvalidConfigError(f"pylog runs in-process, without a broker: {sorted(unknown & _NETWORK_OPTIONS)} "
                                     "do not apply (pylog.KafkaProducer takes bootstrap_servers=<store path> and "
                                     "ignores the others)")
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
        if not isinstance(cfg["retries"], int) or isinstance(cfg["retries"], bool) or cfg["retries"] < 0:
            raise InvalidConfigError(f"retries must be a non-negative int, got {cfg['retries']!r}")
        self.config = cfg
        self._store = store
        self._client_id = cfg["client_id"]
        self._quotas = quotas
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
        #: Guards _accs, every accumulation's records and byte counters, _closed and _sender_idle.
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._accs: dict[str, Accumulation] = {}
        self._closed = False
        self._acks0 = self._acks == 0
        self._max_request = cfg["max_request_size"]
        self._buffer_memory = cfg["buffer_memory"]
        self._retries = int(cfg["retries"])
        self._retry_backoff = cfg["retry_backoff_ms"] / 1000
        # Throttle time per drain (Kafka's produce-throttle-time metrics); updated under the drain lock.
        self._drains = 0
        self._throttle_total = 0.0
        self._throttle_max = 0.0
        self._sender_idle = True
        #: Partitions this producer appended to: it hands them over when another process's producer waits
        #: for one (see _hand_over). Only under the drain lock.
        self._held: dict[int, "Partition"] = {}
        self._max_block_ms = cfg["max_block_ms"]
        self._wake = threading.Event()
        if _native is not None and type(self).send is Producer.send:
            # The compiled fast path (native/send.c) becomes this producer's send(): the same steps as
            # send()'s below, handing every call it does not take to that method (a subclass that
            # overrides send() keeps its own). An instance attribute, so no Python frame runs per record.
            self.__dict__["send"] = _native.Sender(types.MethodType(Producer.send, self), self._lock, self._accs,
                                                   self._settle, self._drain_all, Accumulation, FutureRecordMetadata)
        self._sender = threading.Thread(target=self._run_sender, name="pylog-producer-sender", daemon=True)
        self._sender.start()

    # ------------------------------------------------------------------ sending

    def send(self, topic: str, value: Any = None, key: Any = None, headers: list[tuple[str, bytes]] | None = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a future whose ``get()`` gives its :class:`RecordMetadata`.

        :raises InvalidRecordError: for a value, key, headers or timestamp of the wrong type, or a key-less
            record for a compacted topic.
        :raises RecordTooLargeError: when the record alone exceeds ``max_request_size`` or does not fit the
            topic's ``max.message.bytes``.
        :raises UnknownTopicError: for a topic the store does not have.
        :raises InvalidArgumentError: for a partition the topic does not have (also a ValueError).
        :raises StoreClosedError: after :meth:`close`.
        """
        # The hot path: a bytes value and nothing else, for a topic already seen. Every check it needs
        # is folded into `len(value) <= acc.limit` (see _limits_of), all byte counting into
        # `i < acc.check_at` (see _settle); anything else goes to _send. Written for CPython's
        # specialising interpreter: `lock.acquire()` on a local (not a bound method kept on self), a dict
        # subscript rather than .get(), no int arithmetic, the future made under the lock so the common
        # case returns from inside the try.
        if type(value) is bytes and headers is None and timestamp_ms is None:
            if key is None and partition is None:
                lock = self._lock
                lock.acquire()
                try:
                    acc = self._accs[topic]
                    if len(value) <= acc.limit:
                        recs = acc.records
                        f = FutureRecordMetadata()
                        f._acc = acc
                        f._i = i = len(recs)
                        recs.append(value)
                        if i < acc.check_at or not self._settle():
                            return f
                    else:
                        f = None
                except KeyError:  # the topic's first record: _send looks the topic up
                    f = None
                finally:
                    lock.release()
                if f is not None:  # _settle found buffer_memory full: back-pressure, the caller drains
                    self._drain_all()
                    return f
            elif (key is None or type(key) is bytes) and (partition is None or type(partition) is int):
                # The same for a keyed record, or one sent to a given partition (a tuple, as _send makes);
                # a partition is checked against the count the producer saw (a topic only grows).
                lock = self._lock
                lock.acquire()
                try:
                    acc = self._accs[topic]
                    if key is None:
                        size = len(value)
                        fits = size <= acc.limit
                    else:
                        size = len(value) + len(key)
                        fits = size <= acc.klimit
                    if fits and (partition is None or 0 <= partition < acc.nparts):
                        recs = acc.records
                        f = FutureRecordMetadata()
                        f._acc = acc
                        f._i = i = len(recs)
                        recs.append((value, key, partition, None, None))
                        acc.slow += 1
                        if partition is not None:
                            acc.extra = True
                        acc.adjust += size - ITEM_LEN
                        if i < acc.check_at or not self._settle():
                            return f
                    else:
                        f = None
                except KeyError:
                    f = None
                finally:
                    lock.release()
                if f is not None:
                    self._drain_all()
                    return f
        return self._send(topic, value, key, headers, partition, timestamp_ms)

    def _send(self, topic: str, value: Any, key: Any, headers: Any, partition: int | None,
              timestamp_ms: int | None) -> FutureRecordMetadata:
        """send() for every record the fast path does not take: serializers, checks, then the append."""
        if self._closed:
            raise StoreClosedError("producer is closed")
        if key is not None and self._key_ser is not None:
            key = self._key_ser(key)
        if value is not None and self._value_ser is not None:
            value = self._value_ser(value)
        if value is None:
            size = RECORD_OVERHEAD
        elif type(value) is bytes or isinstance(value, (bytearray, memoryview)):
            size = len(value) + RECORD_OVERHEAD
        else:
            raise InvalidRecordError(f"value must be bytes (or use value_serializer), got {type(value).__name__}")
        if key is not None:
            if not (type(key) is bytes or isinstance(key, (bytearray, memoryview))):
                raise InvalidRecordError(f"key must be bytes (or use key_serializer), got {type(key).__name__}")
            size += len(key)
        if headers is not None:
            headers, hsize = _check_headers(headers)
            size += hsize
        if not headers:
            headers = None
        if timestamp_ms is not None and (type(timestamp_ms) is not int or not -(1 << 63) <= timestamp_ms < 1 << 63):
            raise InvalidRecordError(f"timestamp_ms must be an int (ms since the epoch), got {timestamp_ms!r}")
        if size > self._max_request:
            raise RecordTooLargeError(f"record of about {size} bytes exceeds max_request_size ({self._max_request})")
        if partition is not None or key is None:
            self._check_placement(topic, partition, key)
        plain = type(value) is bytes and key is None and headers is None and partition is None and timestamp_ms is None
        with self._lock:
            if self._closed:
                raise StoreClosedError("producer is closed")
            acc = self._accs.get(topic) or self._new_accumulation(topic)
            if size + _BATCH_OVERHEAD > acc.max_bytes:  # one record alone must fit the topic's max.message.bytes
                raise RecordTooLargeError(f"record of about {size} bytes does not fit max.message.bytes "
                                          f"({acc.max_bytes}) of {topic}")
            recs = acc.records
            i = len(recs)
            if plain:
                recs.append(value)
            else:
                recs.append((value, key, partition, timestamp_ms, headers))
                acc.slow += 1
                acc.adjust += size - RECORD_OVERHEAD - ITEM_LEN
                if partition is not None or timestamp_ms is not None or headers is not None:
                    acc.extra = True
            if size > acc.bound:
                acc.bound = size
                full = self._settle()
            else:
                full = i >= acc.check_at and self._settle()
        if full:
            self._drain_all()
        f = FutureRecordMetadata()
        f._acc = acc
        f._i = i
        return f

    def _settle(self) -> bool:
        """Look at the byte counts; called under the lock by a send() whose record reached ``check_at``.

        Stamps accumulations' first records (for ``linger_ms``), wakes the sender for accumulations that
        reached ``batch_size`` (and, with ``linger_ms=0`` or a first record to time, when it is idle), then
        sets each accumulation's ``check_at``: the records that surely fit in its share of what is left of
        ``buffer_memory`` (at ``bound`` bytes each) and, until it is due, in what is left of its
        ``batch_size`` (at its average record size). Empty accumulations get 0, so their first record
        comes here. Returns True when ``buffer_memory`` is full: the caller drains.
        """
        batch = self._batch_size
        sizes = [(acc, acc.size()) for acc in self._accs.values()]
        buffered = active = 0
        wake = first = False
        now = 0.0
        for acc, size in sizes:
            if size:
                active += 1
                buffered += size
                if not acc.first_at:
                    acc.first_at = now = now or time.monotonic()
                    first = True
                if size >= batch and not acc.due:
                    acc.due = wake = True
        if buffered and self._sender_idle and (first or self._linger == 0):
            wake = True
        if wake:
            self._sender_idle = False
            self._wake.set()
        free = self._buffer_memory - buffered
        share = free // active if active and free > 0 else 0
        for acc, size in sizes:
            n = len(acc.records)
            if not n:
                acc.check_at = 0
                continue
            fit = (share - 1) // acc.bound if share > 0 else 0  # records that cannot fill the share
            if not acc.due:
                average = size // n
                fit = min(fit, (batch - size - 1) // average)  # records before the one that reaches batch
            acc.check_at = n + fit
        return free <= 0

    def _check_placement(self, topic: str, partition: int | None, key: Any) -> None:
        """Errors a drain would meet for this record alone, raised at send() as kafka-python does."""
        _check_writable(topic)
        t = self._store.topic(topic)
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)
                                      or not 0 <= partition < t.num_partitions):
            raise InvalidArgumentError(f"partition {partition!r} is not one of {topic}'s {t.num_partitions} "
                                       "partitions: pass partition=None (the partitioner chooses) or one in "
                                       f"[0, {t.num_partitions})")
        if key is None and t.config.compact:
            raise InvalidRecordError(f"{topic} is compacted: every record needs a key")

    def _limits_of(self, t: Any) -> tuple[int, int, int]:
        """(fast-path value limit, keyed fast-path value + key limit, max.message.bytes) for topic ``t``:
        a plain record whose value is at most the first (a keyed one whose value and key are at most the
        second) needs none of send()'s checks; -1 when every such record must be checked (see
        Accumulation.limit). Call under the lock (it reads _closed)."""
        max_bytes = t.config["max.message.bytes"]
        if self._closed or self._value_ser is not None:
            return -1, -1, max_bytes
        limit = min(self._max_request - RECORD_OVERHEAD, max_bytes - _BATCH_OVERHEAD - RECORD_OVERHEAD, _FAST_MAX)
        return (-1 if t.config.compact else limit), (-1 if self._key_ser is not None else limit), max_bytes

    def _new_accumulation(self, topic: str) -> Accumulation:
        """Under the lock: the first accumulation of ``topic``."""
        _check_writable(topic)  # every send to a topic not seen yet comes here (the fast path needs an acc)
        t = self._store.topic(topic)  # raises UnknownTopicError now rather than in the drain
        acc = self._accs[topic] = Accumulation(topic, *self._limits_of(t), self._acks0)
        acc.nparts = t.num_partitions
        return acc

    def flush(self, timeout: float | None = None) -> None:
        """Append everything sent so far (and fsync with ``acks="all"``) before returning.

        A producer over its quota waits its throttle delays here too (the wait for the drain lock is not
        bounded by ``timeout``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        # Drains run one at a time, so once _drain_all has had its turn every earlier drain is over too.
        with self._lock:
            pending = [a for a in self._accs.values() if a.records]
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
            for acc in self._accs.values():
                acc.limit = acc.klimit = -1  # the fast paths too
        try:
            self.flush(timeout)
        finally:
            self._wake.set()
            if threading.current_thread() is not self._sender:  # close() from a callback: no self-join
                self._sender.join(timeout)
            # Nobody will hand these over once the sender is gone: let them go now (a lock a direct
            # append pinned stays with the store).
            with self._drain_lock:
                for part in self._held.values():
                    self._hand_over_one(part, wanted_only=False)
                self._held.clear()
            with self._lock:
                left = [a for a in self._accs.values() if a.records]
                self._accs.clear()
            for acc in left:  # flush timed out: fail what was never appended rather than leave it hanging
                acc.complete(StoreClosedError("producer closed before the record was appended"))

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def bootstrap_connected(self) -> bool:
        """True while this producer and its store are open (kafka-python: connected to a broker)."""
        return not self._closed and not self._store.closed

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic``."""
        return set(range(self._store.topic(topic).num_partitions))

    def metrics(self) -> dict[str, Any]:
        """``producer_id``; ``buffered_bytes`` and ``pending_topics`` (sent, not yet drained);
        ``produce-throttle-time-avg`` / ``-max``: quota delays per drain in ms, since the producer started
        (Kafka's names; 0 without a quota)."""
        with self._lock:
            buffered = sum(a.size() for a in self._accs.values())
            pending = sum(1 for a in self._accs.values() if a.records)
        drains = self._drains
        return {"producer_id": self._producer_id, "buffered_bytes": buffered, "pending_topics": pending,
                "produce-throttle-time-avg": self._throttle_total / drains * 1000 if drains else 0.0,
                "produce-throttle-time-max": self._throttle_max * 1000}

    # ------------------------------------------------------------------ draining

    def _run_sender(self) -> None:
        timeout: float | None = None
        while not self._closed:
            # Wake-ups are never missed (send() and this loop look at _sender_idle under the lock); the
            # 50 ms poll when idle is only a safety net.
            self._wake.wait((_HANDOVER_POLL if self._held else 0.05) if timeout is None else timeout)
            self._wake.clear()
            if self._closed:
                return
            if self._held:
                self._hand_over()
            try:
                now = time.monotonic()
                with self._lock:
                    self._sender_idle = False
                    due = [t for t, a in self._accs.items() if a.records and (
                        a.due or a.size() >= self._batch_size or now - a.first_at >= self._linger)]
                for topic in due:
                    self._drain(topic)
            except Exception:  # a drain completes its futures with its error; keep the thread alive
                log.exception("pylog producer sender: drain failed")
            with self._lock:
                pending = [a.first_at for a in self._accs.values() if a.records]
                if pending:  # due now (linger_ms=0) or when the oldest has lingered long enough
                    timeout = max(0.0, min(pending) + self._linger - time.monotonic())
                else:
                    timeout = None
                    self._sender_idle = True
                    for acc in self._accs.values():  # the next record settles, and _settle wakes us
                        acc.check_at = 0

    def _hand_over(self) -> None:
        """Release the partitions another process's producer waits for (Partition.handover_wanted); forget
        those this store no longer writes. Between drains only: a drain appends to a partition whole."""
        with self._drain_lock:
            for key, part in list(self._held.items()):
                if not self._hand_over_one(part) or not part.is_writer:
                    del self._held[key]

    @staticmethod
    def _hand_over_one(part: "Partition", wanted_only: bool = True, blocking: bool = True) -> bool:
        """Hand ``part`` over (:meth:`Partition.pass_turn <pylog.partition.Partition.pass_turn>`, the hand-over
        pylog serve makes too); False when the partition is gone. Never raises: the records are appended already."""
        return part.pass_turn(wanted_only=wanted_only, blocking=blocking)

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
                fresh = self._accs[topic] = Accumulation(topic, acc.limit, acc.klimit, acc.max_bytes, self._acks0)
                fresh.nparts = acc.nparts
            interrupted: BaseException | None = None
            try:
                acc.columns()
                self._append(acc)
            except BaseException as exc:
                error = exc
            if error is None:
                try:
                    self._throttle(acc)
                except BaseException as exc:  # the records are appended all the same
                    interrupted = exc
            acc.finish(error)  # done before the lock goes: flush() relies on it
        # Callbacks outside the drain lock: a callback may send, flush or close.
        acc.run_callbacks()
        if interrupted is not None:
            raise interrupted
        if error is not None and not isinstance(error, Exception):
            raise error

    def _throttle(self, acc: Accumulation) -> None:
        """Under the drain lock, after an append: record its bytes against the client's produce quota and
        wait the quota's delay (before the futures complete and the next drain starts)."""
        delay = 0.0
        quotas, client = self._quotas, self._client_id
        if client is not None and quotas.active(client, PRODUCE):
            delay = quotas.record(client, PRODUCE, acc.payload_bytes())
            if delay > 0:
                # Nobody should wait out this producer's quota delay for a partition it holds. Nor should
                # the delay wait for a retention or compaction pass: a partition whose pass is under way
                # is let go of as soon as the pass ends, tried again every poll while the delay runs.
                kept = list(self._held.values())
                left = delay
                while True:
                    kept = [p for p in kept if self._hand_over_one(p, wanted_only=False, blocking=False)
                            and p.is_writer]
                    if not kept or left <= _HANDOVER_POLL:
                        break
                    quotas.sleep(_HANDOVER_POLL)
                    left -= _HANDOVER_POLL
                quotas.sleep(left)
        self._drains += 1
        self._throttle_total += delay
        if delay > self._throttle_max:
            self._throttle_max = delay

    def _append(self, acc: Accumulation) -> None:
        topic = self._store.topic(acc.topic)
        with self._lock:  # the topic's config may have changed: the next records see it (not after close)
            current = self._accs.get(acc.topic)
            if current is not None:
                current.limit, current.klimit, current.max_bytes = self._limits_of(topic)
                current.bound = max(current.bound, current.limit + RECORD_OVERHEAD,
                                    current.klimit + RECORD_OVERHEAD)
        all_parts = list(range(topic.num_partitions))
        placed, sticky = acc.place(self._partitioner, self._default_partitioner, all_parts)
        if not isinstance(placed, int) and (placed == placed[0]).all():
            placed = int(placed[0])
        acc.placed = placed
        column = acc.stamp(now_ms())
        compression = None if self.config["compression_type"] in (None, "none") else "lz4"
        touched: list[Partition] = []  # appended to by this drain, in order
        flushed: set[Partition] = set()  # of those, fsynced already (acks="all") before a handover
        groups, offsets = acc.groups()
        for number, idx in groups:
            vals, keys, ts, hs = acc.columns_of(idx, column)
            producer = None
            if self._idempotent:
                seq = self._sequences.get((acc.topic, number), 0)
                producer = (self._producer_id, self._epoch, seq)
            try:
                part = topic.partition(number)
                first = self._append_with_retries(part, vals, keys, ts, hs, producer, compression,
                                                  functools.partial(self._let_go, part, touched, flushed, acc))
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
                offsets = first
            else:
                assert isinstance(offsets, np.ndarray)
                offsets[idx] = np.arange(first, first + len(idx))
            touched.append(part)
            # Hand over after each append, not after the whole drain: another process's producer may be
            # waiting for this partition while this drain goes on to the next.
            if self._wanted(part):
                self._let_go_one(part, touched, flushed, acc, wanted_only=True)
        self._end_drain(acc, touched, flushed)
        acc.offsets = offsets
        # Sticky partitioning: a completed batch moves key-less records on to another partition.
        for number in sticky:
            self._default_partitioner.on_new_batch(acc.topic, number, all_parts)

    def _end_drain(self, acc: Accumulation, touched: list["Partition"], flushed: set["Partition"]) -> None:
        """After a drain's appends: one fsync per partition not fsynced yet (``acks="all"``: group commit),
        then hand each over (a handover does not fsync, so the fsync comes first)."""
        if self._acks == -1:
            self._sync([part for part in touched if part not in flushed], acc)
        for part in touched:
            self._held[id(part)] = part
            self._hand_over_one(part)

    @staticmethod
    def _sync(parts: list["Partition"], acc: Accumulation) -> None:
        """fsync ``parts`` through the process's group commit (:mod:`pylog.storage.group_commit`: in parallel,
        and one fsync covers this drain and whatever other producers and ``pylog serve`` of this process
        appended meanwhile); a partition whose fsync failed fails its records."""
        for part, exc in zip(parts, group_commit.sync(parts), strict=True):
            if exc is not None:
                acc.partition_errors[part.number] = exc

    @staticmethod
    def _wanted(part: "Partition") -> bool:
        """Whether another handle waits for ``part`` (False when that cannot be told: nothing to do)."""
        try:
            return part.is_writer and part.handover_wanted()
        except Exception:  # a closed store, a deleted topic: the hand-over step says so, or nobody cares
            return False

    def _let_go_one(self, part: "Partition", touched: list["Partition"], flushed: set["Partition"],
                    acc: Accumulation, wanted_only: bool, blocking: bool = True) -> None:
        """Mid-drain: fsync ``part`` first if this drain appended to it and ``acks="all"`` (a handover
        does not fsync; a flush after it still reaches this drain's appends, by file name, but would
        also wait for the next writer's), then hand it over
        (or, with ``wanted_only`` False, let go of it whether or not anyone waits)."""
        if self._acks == -1 and part in touched and part not in flushed:
            flushed.add(part)
            self._sync([part], acc)
        self._hand_over_one(part, wanted_only=wanted_only, blocking=blocking)

    def _let_go(self, waiting_for: "Partition", touched: list["Partition"], flushed: set["Partition"],
                acc: Accumulation) -> Callable[[], None]:
        """Before a drain waits for ``waiting_for``: let go of every other partition this producer holds
        for a turn (from earlier drains and from this one), so that no producer holds a writer lock it
        could let go of while it waits for another (two producers each holding the partition the other
        waits for would wait until ``max_block_ms`` ran out). A lock a direct append pinned stays
        (release_turn leaves it). Never waits for a partition's retention or compaction pass (seconds,
        maybe): a partition whose pass is under way stays held for now, and the function returned, which
        the wait for ``waiting_for`` calls between its attempts, tries again, so that it goes as soon as
        the pass ends."""
        kept: dict[int, Partition] = {}
        for part in [*self._held.values(), *touched]:
            if part is not waiting_for and part.is_writer and id(part) not in kept:
                self._let_go_one(part, touched, flushed, acc, wanted_only=False, blocking=False)
                if part.is_writer:
                    kept[id(part)] = part

        def again() -> None:
            for key, part in list(kept.items()):
                if not self._hand_over_one(part, wanted_only=False, blocking=False) or not part.is_writer:
                    del kept[key]
        return again

    def _new_epoch(self) -> None:
        """After a failure that may have written part of a call: never reuse its sequence numbers."""
        self._sequences.clear()
        self._epoch += 1
        if self._epoch > 0x7FFF:  # the header's epoch is an int16: start over under a new producer id
            self._producer_id = self._store.new_producer_id()
            self._epoch = 0

    def _append_with_retries(self, part: Any, vals: list, keys: list | None, ts: np.ndarray, hs: list | None,
                             producer: tuple[int, int, int] | None, compression: str | None,
                             before_waiting: Callable[[], Callable[[], None]]) -> int:
        """One partition's append; an OSError (a full disk, say) is retried ``retries`` times with the
        same sequence numbers, so an append that did land before the error is not written twice.
        ``before_waiting`` runs when the partition is not free at once, before waiting for it; the
        function it returns runs between the attempts of that wait."""
        attempt = 0
        deadline = time.monotonic() + self._max_block_ms / 1000
        while True:
            try:
                # Another producer (here or in another process) may write it: wait for our turn, holding
                # no other partition meanwhile (two producers each holding the partition the other waits
                # for would wait until max_block_ms ran out).
                try:
                    part.wait_to_write(0)
                except PartitionLockedError:
                    started = time.monotonic()
                    again = before_waiting()
                    # Only the wait for this partition counts against max_block_ms, not letting go of others.
                    deadline += time.monotonic() - started
                    part.wait_to_write(max(0.0, deadline - time.monotonic()) * 1000, again)
                return part.append_values_in_turn(vals, keys, ts, hs, producer, compression)
            except PartitionLockedError:
                # Handed on between our turn and the append (another producer of this process): wait again.
                if time.monotonic() >= deadline:
                    raise
            except OSError:
                if attempt >= self._retries:
                    raise
                attempt += 1
                log.warning("pylog producer: append to %s-%d failed; retry %d of %d", part.topic, part.number,
                            attempt, self._retries, exc_info=True)
                time.sleep(self._retry_backoff)
