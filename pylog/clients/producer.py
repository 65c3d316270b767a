"""The producer: kafka-python's ``KafkaProducer`` shape over an in-process store.

``send()`` only appends the record to its topic's accumulation under a lock and returns a
:class:`FutureRecordMetadata`; the records are *drained* in bulk — by a sender thread as soon as it is
free (``linger_ms=0``) or ``linger_ms`` after the first record, by the caller when ``buffer_memory`` is
full, and by :meth:`Producer.flush` — so one ``append_values`` call per partition carries many records.
A drain assigns partitions for the whole accumulation at once (explicit partition, else Kafka's murmur2 of
the key, vectorised, else the topic's sticky partition), appends each partition's records as one
idempotent call, fsyncs when ``acks="all"`` (one fsync per partition for everything drained together, and
shared with other producers of the process: :mod:`pylog.storage.group_commit`),
and completes every future of the accumulation. This module keeps the sending side (options, ``send()``,
the byte accounting, the sender thread, flush and close, and the futures ``send()`` returns); the writing
side of a drain (placement, idempotent appends, turns at partitions' writer locks, ``acks``, quota delays)
is :class:`pylog.clients.drain.Drainer`.

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
  (``acks="all"``) is done, or with the error that stopped its drain. A callback or errback added to it
  runs exactly once: at once when the record is complete, else by whichever of the adder and the
  completing drain takes it from the accumulation's list.
- ``buffer_memory`` is never exceeded unnoticed: ``check_at`` is set so that records of at most ``bound``
  bytes each (every record since the last look is) cannot fill the buffer before the ``send()`` that
  reaches ``check_at`` looks; the one that fills it drains. ``batch_size`` is noticed at the record that
  reaches it when record sizes are steady (``check_at`` assumes the accumulation's average size for it),
  a few records later otherwise: it only wakes the sender early.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .. import metrics
from ..accel import native as _native
from ..errors import ProducerTimeoutError  # defined here before pylog.errors: still importable from here
from ..errors import (InvalidArgumentError, InvalidConfigError, InvalidRecordError, InvalidTopicError,
                      InvalidTxnStateError, RecordTooLargeError, StoreClosedError)
from ..storage.filenames import is_internal_topic
from ..storage.records import header_pairs
from ..topic import Topic
from .accumulator import ITEM_LEN, RECORD_OVERHEAD, Accumulation
from .drain import HANDOVER_POLL, Drainer
from .quotas import QuotaManager
from .storeview import StoreView
from .transactions import TransactionCoordinator, check_transactional_id
from .txn_manager import TransactionManager
from ..structs import OffsetAndMetadata, RecordMetadata, TopicPartition


__all__ = ["Producer", "FutureRecordMetadata", "ProducerTimeoutError"]

log = logging.getLogger("pylog.producer")

_DEFAULTS: dict[str, Any] = {
    "client_id": None,
    "key_serializer": None,
    "value_serializer": None,
    "acks": 1,
    "compression_type": None,
    "batch_size": 65536,  # Kafka: 16384; see docs/CONFIGURATION.md for why pylog cuts larger batches
    "linger_ms": 0,
    "partitioner": None,
    "buffer_memory": 32 * 1024 * 1024,
    "max_block_ms": 60_000,
    "max_request_size": 1_048_576,
    "enable_idempotence": True,
    "retries": 0,
    "retry_backoff_ms": 100,
    "transactional_id": None,
    "transaction_timeout_ms": 60_000,
}
#: kafka-python options that only make sense with a broker: refused with a clear message.
_NETWORK_OPTIONS = {"bootstrap_servers", "security_protocol", "sasl_mechanism", "ssl_context", "api_version",
                    "request_timeout_ms", "metadata_max_age_ms", "connections_max_idle_ms",
                    "max_in_flight_requests_per_connection", "reconnect_backoff_ms"}
#: Room a batch header needs beside one record within the topic's max.message.bytes (send-time check).
_BATCH_OVERHEAD = 64
#: Longest value send()'s fast path takes (bytes); longer ones are checked one by one. It bounds how many
#: fast records fit in what is left of buffer_memory, so it sets how often send() must look.
_FAST_MAX = 16 * 1024


def _check_transactional(cfg: dict[str, Any], given: Mapping[str, Any],
                         transactions: TransactionCoordinator | None) -> None:
    """The options of a producer with a ``transactional_id`` (Kafka's rules: idempotent, ``acks="all"``, which
    is then the default). :raises InvalidConfigError:"""
    check_transactional_id(cfg["transactional_id"])
    if transactions is None:
        raise InvalidConfigError("transactional_id: this producer was not made by a store (pylog.open(path)."
                                 "producer(...) or pylog.KafkaProducer), which gives it its transaction coordinator")
    if not cfg["enable_idempotence"]:
        raise InvalidConfigError("transactional_id needs enable_idempotence=True (Kafka's rule)")
    if "acks" in given and cfg["acks"] not in ("all", -1):
        raise InvalidConfigError(f"transactional_id needs acks='all' (Kafka's rule), got acks={cfg['acks']!r}")
    cfg["acks"] = "all"
    timeout = cfg["transaction_timeout_ms"]
    if type(timeout) is not int or timeout < 1:
        raise InvalidConfigError(f"transaction_timeout_ms must be a positive int, got {timeout!r}")


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
    sequence numbers), ``transactional_id`` / ``transaction_timeout_ms`` (a transactional producer:
    :meth:`init_transactions`, :meth:`begin_transaction`, :meth:`send_offsets_to_transaction`,
    :meth:`commit_transaction`, :meth:`abort_transaction`; ``send()`` outside a transaction then raises
    :class:`~pylog.errors.InvalidTxnStateError`). Broker options (``bootstrap_servers``, ...) raise
    :class:`InvalidConfigError`.
    """

    #: The options and their defaults (kafka-python's attribute name).
    DEFAULT_CONFIG: Mapping[str, Any] = MappingProxyType(_DEFAULTS)

    def __init__(self, store: StoreView, *, quotas: QuotaManager | None = None,
                 transactions: TransactionCoordinator | None = None, **configs: Any) -> None:
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
        if cfg["transactional_id"] is not None:
            _check_transactional(cfg, configs, transactions)
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
        self._key_ser = cfg["key_serializer"]
        self._value_ser = cfg["value_serializer"]
        self._batch_size = cfg["batch_size"]
        self._linger = cfg["linger_ms"] / 1000
        #: The writing side: placement, idempotent appends, turns at writer locks, acks, quota delays.
        #: Only under the drain lock.
        self._drainer = Drainer(store, quotas, cfg, self._acks)
        #: Guards _accs, every accumulation's records and byte counters, _closed and _sender_idle.
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._accs: dict[str, Accumulation] = {}
        self._closed = False
        self._acks0 = self._acks == 0
        self._max_request = cfg["max_request_size"]
        self._buffer_memory = cfg["buffer_memory"]
        self._sender_idle = True
        self._wake = threading.Event()
        if _native is not None and type(self).send is Producer.send:
            # The compiled fast path (native/send.c) becomes this producer's send(): the same steps as
            # send()'s below, handing every call it does not take to that method (a subclass that
            # overrides send() keeps its own). An instance attribute, so no Python frame runs per record.
            self.__dict__["send"] = _native.Sender(types.MethodType(Producer.send, self), self._lock, self._accs,
                                                   self._settle, self._drain_all, Accumulation, FutureRecordMetadata)
        #: The transaction of a producer with a ``transactional_id`` (None for others).
        self._txn: TransactionManager | None = None
        if cfg["transactional_id"] is not None:
            assert transactions is not None
            self._txn = self._drainer.txn = TransactionManager(
                transactions, cfg["transactional_id"], cfg["transaction_timeout_ms"], self._drainer.set_producer)
            queue = self.__dict__.get("send") or types.MethodType(Producer.send, self)
            check = self._txn.check_send

            def send_in_transaction(*args: Any, **kwargs: Any) -> FutureRecordMetadata:
                check()
                return queue(*args, **kwargs)
            self.__dict__["send"] = send_in_transaction
        self._sender = threading.Thread(target=self._run_sender, name="pylog-producer-sender", daemon=True)
        self._sender.start()
        metrics.track("producer", self)  # buffer available, read when scraped

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
                        if partition is None:
                            # A key alone: the value in records and the key at the same index of rkeys (no
                            # tuple per record: see Accumulation.rkeys).
                            rkeys = acc.rkeys
                            if len(rkeys) < i:
                                rkeys.extend([None] * (i - len(rkeys)))
                            rkeys.append(key)
                            recs.append(value)
                            acc.adjust += size - len(value)
                        else:
                            recs.append((value, key, partition, None, None))
                            acc.slow += 1
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

    # ------------------------------------------------------------------ transactions (kafka-python's names)

    def init_transactions(self) -> None:
        """Take this ``transactional_id``'s producer id and a new epoch from the store's transaction coordinator:
        any earlier producer with the same id (in any process) is fenced, and the transaction it left open is
        aborted (or one it was ending completed) before this returns.

        :raises InvalidTxnStateError: without a ``transactional_id``, or inside a transaction.
        :raises ConcurrentTransactionsError: when another process held the id's lock for the whole wait."""
        self._transaction().init(self._under_drain_lock)

    def begin_transaction(self) -> None:
        """Open a transaction: every record sent until :meth:`commit_transaction` or :meth:`abort_transaction`
        belongs to it (its first send to a partition adds the partition to it).

        :raises InvalidTxnStateError: before :meth:`init_transactions` or while one is open.
        :raises ProducerFencedError: after another producer with the same ``transactional_id`` took over."""
        self._transaction().begin()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                    consumer_group_id: Any) -> None:
        """Commit a consumer group's ``offsets`` (``{TopicPartition: OffsetAndMetadata or offset}``, the next
        offsets to consume) as part of the open transaction: they count for the group exactly when the
        transaction commits. ``consumer_group_id``: the group id (kafka-python) or the consumer's group
        metadata (an object with ``group_id``, as Kafka's ``ConsumerGroupMetadata``).

        :raises InvalidTxnStateError: outside a transaction. :raises ProducerFencedError: when fenced."""
        self._transaction().send_offsets(offsets, consumer_group_id)

    def commit_transaction(self) -> None:
        """Flush every record of the transaction, then commit it: its records (in every partition) and
        offsets become visible to ``read_committed`` readers together.

        :raises InvalidTxnStateError: outside a transaction, or when one of its appends failed (abort it).
        :raises ProducerFencedError: when another producer took the ``transactional_id`` over, or the
            transaction outlived ``transaction_timeout_ms`` and was aborted."""
        txn = self._transaction()
        self.flush()
        txn.commit()

    def abort_transaction(self) -> None:
        """Flush what was sent, then abort the transaction: ``read_committed`` readers never see its records,
        nor its groups its offsets.

        :raises InvalidTxnStateError: outside a transaction. :raises ProducerFencedError: when fenced."""
        txn = self._transaction()
        try:
            self.flush()
        except Exception as exc:  # the transaction's records are being aborted: their failure is moot
            txn.failed(exc)
        txn.abort(self._under_drain_lock)

    def _transaction(self) -> TransactionManager:
        if self._txn is None:
            raise InvalidTxnStateError("this producer has no transactional_id: make it with "
                                       "transactional_id=... to use transactions")
        return self._txn

    def _under_drain_lock(self, fn: Callable[[], None]) -> None:
        with self._drain_lock:
            fn()

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
                self._drainer.let_go_all()
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
        d = self._drainer
        return {"producer_id": d.producer_id, "buffered_bytes": buffered, "pending_topics": pending,
                "produce-throttle-time-avg": d.throttle_total / d.drains * 1000 if d.drains else 0.0,
                "produce-throttle-time-max": d.throttle_max * 1000}

    # ------------------------------------------------------------------ draining

    def _run_sender(self) -> None:
        timeout: float | None = None
        while not self._closed:
            # Wake-ups are never missed (send() and this loop look at _sender_idle under the lock); the
            # 50 ms poll when idle is only a safety net.
            self._wake.wait((HANDOVER_POLL if self._drainer.held else 0.05) if timeout is None else timeout)
            self._wake.clear()
            if self._closed:
                return
            if self._drainer.held:
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
                self._drainer.append(acc, self._topic_for_drain(acc.topic))
            except BaseException as exc:
                error = exc
            if error is None:
                try:
                    self._drainer.throttle(acc)
                except BaseException as exc:  # the records are appended all the same
                    interrupted = exc
            acc.finish(error)  # done before the lock goes: flush() relies on it
        # Callbacks outside the drain lock: a callback may send, flush or close.
        acc.run_callbacks()
        if interrupted is not None:
            raise interrupted
        if error is not None and not isinstance(error, Exception):
            raise error

    def _topic_for_drain(self, name: str) -> Topic:
        """The topic a drain appends to; its config may have changed since the accumulation started, so
        the records sent from now on see the new limits (not after close)."""
        topic = self._store.topic(name)
        with self._lock:
            current = self._accs.get(name)
            if current is not None:
                current.limit, current.klimit, current.max_bytes = self._limits_of(topic)
                current.bound = max(current.bound, current.limit + RECORD_OVERHEAD, current.klimit + RECORD_OVERHEAD)
        return topic

    def _hand_over(self) -> None:
        """Between drains: release the partitions another process's producer waits for."""
        with self._drain_lock:
            self._drainer.hand_over_wanted()
