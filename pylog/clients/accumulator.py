"""The producer's record accumulator: what was sent to one topic since its last drain.

:class:`Accumulation` holds the sent records (a bare ``bytes`` value, or a ``(value, key, partition,
timestamp_ms, headers)`` tuple), turns them into columns at drain time, and carries the completion state
every :class:`~pylog.clients.producer.FutureRecordMetadata` of it reads: done, the errors, the offsets,
partitions and timestamps the drain gave, the callbacks.

Invariants:
- The producer appends to ``records`` under its lock only; after the accumulation is swapped out for a
  drain only the drain touches it, and after :meth:`Accumulation.finish` nothing changes any more (futures
  read it without a lock).
- Completion happens once: :meth:`Accumulation.finish` sets ``done`` and wakes every waiter; callbacks run
  after it, outside any lock, each exactly once (a callback added concurrently is run by whichever of
  the adder and :meth:`Accumulation.run_callbacks` takes it from the list).

With the compiled accelerator live (:mod:`pylog.accel`), the drain's per-record steps — splitting the
records into value and key columns, hashing the keys to partitions, gathering a partition's records —
run in C (native/send.c) with the same results.
"""

from __future__ import annotations

import logging
import threading
from operator import itemgetter
from typing import Any, Callable

import numpy as np

from ..accel import native as _native
from ..storage.records import RECORD_OVERHEAD, column_parts as _column
from ..structs import RecordMetadata, TopicPartition

__all__ = ["Accumulation", "take", "all_none", "RECORD_OVERHEAD", "ITEM_LEN", "COLUMNS"]

log = logging.getLogger("pylog.producer")

ITEM_LEN = 5  # len() of a (value, key, partition, timestamp_ms, headers) record tuple
COLUMNS = tuple(itemgetter(i) for i in range(5))  # value, key, partition, timestamp_ms, headers of a tuple


class Accumulation:
    """The records sent to one topic since its last drain, and the completion state they share.

    ``records`` holds, in send order, the value itself (a ``bytes``) for a record with nothing else — no
    key, headers, explicit partition or timestamp — and a ``(value, key, partition, timestamp_ms,
    headers)`` tuple for any other (``slow`` counts those), except a bytes value with a bytes key and nothing
    else on send()'s fast path: its value goes in ``records`` and its key at the same index of ``rkeys``
    (``rkeys[i]`` is record ``i``'s key, None for the records that have none there; it may be shorter than
    ``records``: the records past its end have none there). A keyed record is so no tuple, no object the
    garbage collector counts and frees later (a keyed send's CPU per record: see docs/PERFORMANCE.md).
    :meth:`columns` turns them into columns at drain time; the key, partition, timestamp and header columns
    stay ``None`` when no record has one.

    Byte accounting: a record's size is its value, key and headers plus 16. :meth:`size` sums
    ``len(item) + 16`` over the records appended since it last looked (``counted`` of them are summed in
    ``summed``); ``adjust`` adds what a tuple's ``len()`` (5) misses. ``send()`` calls the producer's
    ``_settle`` when the index of the record it appended reaches ``check_at``, or when a record is
    larger than ``bound``; an empty accumulation has ``check_at`` 0, so its first record always settles
    (which stamps ``first_at``).
    """

    __slots__ = ("topic", "records", "rkeys", "slow", "extra", "nparts", "counted", "summed", "adjust", "check_at",
                 "bound", "limit", "klimit", "max_bytes", "first_at", "due", "acks0",
                 "values", "keys", "partitions", "timestamps", "headers",
                 "done", "error", "partition_errors", "offsets", "placed", "stamps", "callbacks", "_event")

    def __init__(self, topic: str, limit: int, klimit: int, max_bytes: int, acks0: bool) -> None:
        self.topic = topic
        self.records: list[Any] = []
        self.rkeys: list[bytes | None] = []
        self.slow = 0
        self.extra = False  # a record has a partition, timestamp or headers: all five columns are needed
        self.counted = 0
        self.summed = 0
        self.adjust = 0
        self.check_at = 0
        #: The longest value send()'s fast path takes for this topic; -1 turns the fast path off (closed
        #: producer, value serializer, compacted topic), sending every record through the checks.
        self.limit = limit
        self.klimit = klimit  # the same for the value and key together of a keyed record
        #: No record appended since the last _settle is larger (bytes): fast ones are at most
        #: max(limit, klimit) + 16, a larger checked one settles and raises it.
        self.bound = max(limit, klimit, 0) + RECORD_OVERHEAD
        self.max_bytes = max_bytes  # the topic's max.message.bytes when the accumulation started
        #: Partitions the topic had when the producer first saw it (a topic only grows): send()'s fast path
        #: takes an explicit partition below this without looking the topic up.
        self.nparts = 0
        self.first_at = 0.0  # time.monotonic() of the first record (set by _settle)
        self.due = False  # reached batch_size: the sender was woken for it
        self.acks0 = acks0
        self.values: list[Any] = []
        self.keys: list[Any] | None = None
        self.partitions: list[int | None] | None = None
        self.timestamps: list[int | None] | None = None
        self.headers: list[Any] | None = None
        self.done = False
        self.error: BaseException | None = None  # the whole accumulation failed
        #: partition -> the error of its append: records placed elsewhere are unaffected
        self.partition_errors: dict[int, BaseException] = {}
        self.offsets: int | np.ndarray = 0  # the first offset when every record went to one partition
        self.placed: int | np.ndarray = 0  # the one partition, or each record's
        self.stamps: int | list[int] = 0  # the one timestamp, or each record's
        self.callbacks: list[tuple[int, bool, Callable[..., Any], tuple, dict]] = []
        self._event = threading.Event()

    def size(self) -> int:
        """The bytes sent into the accumulation (call under the producer's lock); O(records since the last
        call), in C."""
        recs = self.records
        n = len(recs)
        counted = self.counted
        if n > counted:
            self.summed += sum(map(len, recs[counted:] if counted else recs)) + RECORD_OVERHEAD * (n - counted)
            self.counted = n
        return self.summed + self.adjust

    def columns(self) -> None:
        """Turn the sent records into columns (at drain time, outside the producer's lock)."""
        recs = self.records
        n = len(recs)
        rkeys = self.rkeys
        if rkeys and len(rkeys) < n:
            rkeys.extend([None] * (n - len(rkeys)))
        if not self.slow:
            self.values = recs  # every record is a bare value: the list is the value column
            if rkeys and not all_none(rkeys):
                self.keys = rkeys  # and the keys sent beside them the key column
            return
        if not self.extra:  # values and keys only
            if _native is not None:
                self.values, keys = _native.unzip2(recs)
            else:
                rows = recs if self.slow == n else [r if type(r) is tuple else (r, None, None, None, None)
                                                    for r in recs]
                self.values = list(map(COLUMNS[0], rows))
                keys = list(map(COLUMNS[1], rows))
            self.keys = _with_rkeys(keys, rkeys)
            return
        rows = recs if self.slow == n else [r if type(r) is tuple else (r, None, None, None, None) for r in recs]
        values, keys, partitions, timestamps, headers = (list(map(get, rows)) for get in COLUMNS)
        self.values = values
        self.keys = _with_rkeys(keys, rkeys)
        self.partitions = partitions if not all_none(partitions) else None
        self.timestamps = timestamps if not all_none(timestamps) else None
        self.headers = headers if not all_none(headers) else None

    def payload_bytes(self) -> int:
        """Bytes of values, keys and headers (what a quota counts), after :meth:`columns`."""
        total = sum(map(len, filter(None, self.values)))
        if self.keys is not None:
            total += sum(map(len, filter(None, self.keys)))
        if self.headers is not None:
            total += sum(len(k.encode()) + (0 if v is None else len(v)) for h in self.headers if h for k, v in h)
        return total

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
        for entry in callbacks:
            self.run_callback(*entry)

    def run_callback(self, i: int, on_error: bool, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """Run one future's callback (after :meth:`finish`): ``fn(metadata)`` on success, ``fn(error)`` on error."""
        try:
            error = self.error_of(i)
            if on_error and error is not None:
                fn(error, *args, **kwargs)
            elif not on_error and error is None:
                fn(self.metadata(i), *args, **kwargs)
        except Exception:  # a user's callback must not break the producer (kafka-python logs and goes on)
            log.exception("error in a producer callback")

    def wait(self, timeout: float | None) -> bool:
        return self.done or self._event.wait(timeout)

    def partition_of(self, i: int) -> int:
        """The partition record ``i`` went to (after the drain placed it)."""
        placed = self.placed
        return placed if isinstance(placed, int) else int(placed[i])

    def error_of(self, i: int) -> BaseException | None:
        """The error that stopped record ``i`` (its whole drain's, or its partition's), None if it landed."""
        if self.error is not None:
            return self.error
        if self.partition_errors:
            return self.partition_errors.get(self.partition_of(i))
        return None

    def metadata(self, i: int) -> RecordMetadata:
        """Record ``i``'s metadata once :attr:`done`. :raises: the error that stopped it, if one did."""
        error = self.error_of(i)
        if error is not None:
            raise error
        key = None if self.keys is None else self.keys[i]
        value = self.values[i]
        headers = None if self.headers is None else self.headers[i]
        partition = self.partition_of(i)
        offsets, stamps = self.offsets, self.stamps
        offset = -1 if self.acks0 else offsets + i if isinstance(offsets, int) else int(offsets[i])
        return RecordMetadata(
            self.topic, partition, TopicPartition(self.topic, partition), offset,
            stamps if isinstance(stamps, int) else stamps[i], -1, None, -1 if key is None else len(key),
            -1 if value is None else len(value),
            sum(len(k.encode()) + (0 if v is None else len(v)) for k, v in headers) if headers else 0)

    # ------------------------------------------------------------------------------- drain-time helpers

    def stamp(self, now: int) -> np.ndarray:
        """Give the records without a timestamp ``now`` (sets :attr:`stamps`); returns the int64 column."""
        n = len(self.values)
        if self.timestamps is None:
            self.stamps = now
            return np.full(n, now, np.int64)
        stamps = self.stamps = [now if t is None else t for t in self.timestamps]
        return np.array(stamps, np.int64)

    def groups(self) -> tuple[list[tuple[int, np.ndarray | None]], int | np.ndarray]:
        """After :attr:`placed` is set: ``(partition, record indices or None for all)`` in partition order
        (send order within each), and the initial :attr:`offsets` (0, or -1 per record to be filled)."""
        placed = self.placed
        if isinstance(placed, int):
            return [(placed, None)], 0
        # int16 when the partition numbers fit: numpy sorts those by radix, O(n) (int32 by merge sort, ~5x slower)
        keys = placed.astype(np.int16) if int(placed.max()) < 1 << 15 else placed
        order = np.argsort(keys, kind="stable")
        cuts = np.flatnonzero(np.diff(placed[order])) + 1
        return [(int(placed[idx[0]]), idx) for idx in np.split(order, cuts)], np.full(len(self.values), -1, np.int64)

    def columns_of(self, idx: np.ndarray | None,
                   stamps: np.ndarray) -> tuple[list, list | None, np.ndarray, list | None]:
        """Values, keys, timestamps and headers of the records at ``idx`` (None: all), ready to append:
        keys and headers None when none of those records has one."""
        vals, keys, ts, hs = self.values, self.keys, stamps, self.headers
        if idx is not None:
            vals = take(vals, idx)
            keys = None if keys is None else take(keys, idx)
            ts = stamps[idx]
            hs = None if hs is None else take(hs, idx)
        if keys is not None and all_none(keys):
            keys = None
        if hs is not None and not any(hs):
            hs = None
        return vals, keys, ts, hs


    def place(self, partitioner: Callable[..., int] | None, default: Any,
              all_parts: list[int]) -> tuple[int | np.ndarray, list[int]]:
        """The partition of every record (one int when they all go to one), and the partitions that
        received key-less records by the sticky rule. ``partitioner`` is the user's (or None), ``default``
        the producer's :class:`~pylog.clients.partitioner.DefaultPartitioner`."""
        n = len(self.values)
        explicit, keys = self.partitions, self.keys
        if explicit is None and partitioner is None and keys is None:  # all key-less: all sticky
            if len(all_parts) == 1:
                return all_parts[0], []
            sticky = default(None, all_parts, all_parts, topic=self.topic)
            return sticky, [sticky]
        if explicit is None and partitioner is None and _native is not None:
            assert keys is not None
            raw = _native.key_partitions(keys, len(all_parts))  # None: a key that is not bytes/bytearray
            if raw is not None:
                placed = np.frombuffer(raw, np.int32)
                if not (isinstance(all_parts, range) and all_parts.start == 0 and all_parts.step == 1) and \
                        all_parts != list(range(len(all_parts))):
                    ids = np.asarray(all_parts, np.int32)
                    placed = np.where(placed < 0, placed, ids[np.maximum(placed, 0)]).astype(np.int32)
                nulls = placed < 0
                if not nulls.any():
                    return placed, []
                sticky = default.sticky.partition(self.topic, all_parts, None)
                placed[nulls] = sticky
                return placed, [sticky]
        if explicit is not None:
            # Checked at send() (type and range): only the records without one need filling in.
            if explicit.count(None) == 0:
                placed = np.array(explicit, np.int32)
            else:
                placed = np.array([-1 if p is None else p for p in explicit], np.int32)
        else:
            placed = np.full(n, -1, np.int32)
        todo = np.flatnonzero(placed < 0)
        if not len(todo):
            return placed, []
        if partitioner is not None:
            for i in todo.tolist():
                placed[i] = partitioner(None if keys is None else keys[i], all_parts, all_parts)
            return placed, []
        if keys is not None and len(todo) != n:
            keys = take(keys, todo)
        if keys is None or all_none(keys):  # no keys at all: all sticky, nothing to hash
            lengths, data = np.full(len(todo), -1, np.int32), b""
        else:
            lengths, parts = _column(keys, len(keys), "keys")  # lengths from a C-level map when it can
            data = b"".join(parts)
        placed[todo] = default.partition_batch(lengths, data, all_parts, topic=self.topic)
        return placed, sorted(set(placed[todo[lengths < 0]].tolist()))


def _with_rkeys(keys: list, rkeys: list) -> list | None:
    """The key column of records some of which are tuples (their keys in ``keys``) and some bare values sent
    with a key (in ``rkeys``, as long as ``keys`` or empty); None when no record has a key."""
    for i, k in enumerate(rkeys):
        if k is not None:
            keys[i] = k
    return keys if not all_none(keys) else None


def all_none(items: list) -> bool:
    """Whether every item is None (True for an empty list). Looks at the first item before counting: a
    comparison with None costs ~50 ns for a bytes item, and keyed records' key columns rarely start with one."""
    return not items or (items[0] is None and items.count(None) == len(items))


def take(items: list, index: np.ndarray) -> list:
    """``[items[i] for i in index]`` for an int64 index array, with the loop in C."""
    if _native is not None:
        return _native.take(items, index)
    return list(map(items.__getitem__, index.tolist()))
