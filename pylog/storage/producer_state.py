"""Idempotent-producer state of one partition: what makes a retried batch land once, across restarts.

For every producer id the partition remembers its epoch and its last :data:`BATCHES_KEPT` appended
ranges as ``(first sequence, last sequence, first offset, last offset)``; a range grows while appends
continue both its sequences and its offsets, so one producer call split into several on-disk batches is
one range, before and after a restart alike. Kafka's rules (``ProducerStateManager``) decide what a new
batch from that producer is:

- ``producer_id < 0``: not idempotent, always appended.
- epoch below the producer's current one: :class:`~pylog.errors.ProducerFencedError`.
- a new, higher epoch: the sequence must start again at 0.
- the same epoch and sequences inside a remembered range: a **duplicate**; nothing is appended and the
  offset its first record got the first time is returned.
- the same epoch and first sequence = last appended sequence + 1 (wrapping at 2**31): appended.
- anything else: :class:`~pylog.errors.OutOfOrderSequenceError`.
- an unknown producer id (never seen, or expired): appended whatever its sequence (Kafka accepts it too
  once the producer's state is gone).

Transactions (Kafka's ``ProducerAppendInfo``): a transactional batch (attribute bit 4) opens its producer's
transaction when none is open (``txn_first_offset``, the first record's offset); a marker (a control batch,
:mod:`pylog.storage.txn_index`) closes it. A non-transactional batch while the same epoch's transaction is
open is :class:`~pylog.errors.InvalidTxnStateError`; a marker with an older producer epoch is
:class:`~pylog.errors.ProducerFencedError`, one with an older coordinator epoch than the last marker's
:class:`~pylog.errors.TransactionCoordinatorFencedError`. The **last stable offset** is the first offset of
the earliest open transaction, else the log end (:meth:`ProducerState.last_stable_offset`).

Invariants:
- The state after a crash equals the state before it for every batch that survived the crash: the
  snapshot (``producer.snapshot``: magic ``PLPS``, version, CRC-32C over a msgpack body) records the
  state as of an offset, and the writer rebuilds the rest from the batch headers from that offset on
  (the producer fields are in every batch header, so no record is decoded).
- A snapshot is only ever replaced atomically; a damaged one is ignored (and the state rebuilt from an
  earlier point, the log start), never trusted.
- Producers idle longer than ``producer.id.expiration.ms`` are dropped when a snapshot is taken, except
  those with an open transaction (their transaction holds the last stable offset until it ends).
- A producer entry of the snapshot has 4 items, or 6 (``txn_first_offset``, ``coordinator_epoch``) when the
  producer has an open transaction or wrote a marker: a store whose producers never used transactions
  writes the same snapshot bytes as before transactions existed.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

import msgpack

from ..errors import (CorruptRecordError, InvalidTxnStateError, OutOfOrderSequenceError, ProducerFencedError,
                      TransactionCoordinatorFencedError)
from .fileio import read_checked, write_checked

__all__ = ["ProducerState", "ProducerEntry", "ProducerDescription", "BATCHES_KEPT", "SNAPSHOT_FILE", "DUPLICATE"]

#: Batches remembered per producer (Kafka's max.in.flight for idempotent producers).
BATCHES_KEPT = 5
SNAPSHOT_FILE = "producer.snapshot"
_MAGIC = b"PLPS"
_VERSION = 1
_HEAD = struct.Struct("<4sHH")
_SEQ_MOD = 1 << 31
_OFFSET_MAX = (1 << 63) - 1
_I64_MIN = -(1 << 63)
#: Returned by :meth:`ProducerState.check` for a duplicate batch, with the original first offset.
DUPLICATE = "duplicate"


@dataclass
class ProducerEntry:
    epoch: int
    #: (first sequence, last sequence, first offset, last offset), oldest first.
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)
    last_timestamp: int = -1
    #: First offset of the producer's open transaction, -1 when none is open.
    txn_first_offset: int = -1
    #: Coordinator epoch of the last marker written for this producer, -1 when none.
    coordinator_epoch: int = -1


class ProducerDescription(NamedTuple):
    """One producer as a partition remembers it (Kafka's DescribeProducers fields)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: no batch remembered (a producer known by its markers only)
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open


class ProducerState:
    """The producer table of one partition. Not thread-safe: the partition's append lock guards it."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int,
              transactional: bool = False) -> tuple[int, int | None]:
        """Validate a call's records before they are written.

        Returns ``(skip, first_offset)``: the leading ``skip`` records were appended before (all of them:
        a duplicate; some: the rest of a call that failed part-way, to be appended now), and the offset
        the first of them got; ``(0, None)`` to append everything.

        :raises ProducerFencedError, OutOfOrderSequenceError, InvalidTxnStateError:
        """
        if producer_id < 0:
            return 0, None
        e = self.producers.get(producer_id)
        if e is None:
            return 0, None
        last_seq = (first_seq + count - 1) % _SEQ_MOD
        if epoch < e.epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {epoch} is older than its current epoch {e.epoch}")
        if not transactional and e.txn_first_offset >= 0 and epoch == e.epoch:
            raise InvalidTxnStateError(f"producer {producer_id} sent a non-transactional batch while its transaction "
                                       f"from offset {e.txn_first_offset} is open")
        if epoch > e.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(f"producer {producer_id}: new epoch {epoch} must start at sequence 0, "
                                              f"got {first_seq}")
            return 0, None
        wraps = first_seq + count - 1 != last_seq
        for f, last, first_off, _ in e.batches:
            if not wraps and f <= first_seq <= last:
                return min(last, last_seq) - first_seq + 1, first_off + (first_seq - f)
        expected = (e.batches[-1][1] + 1) % _SEQ_MOD if e.batches else first_seq
        if first_seq != expected:
            raise OutOfOrderSequenceError(f"producer {producer_id} epoch {epoch}: sequence {first_seq}, expected "
                                          f"{expected}")
        return 0, None

    def next_sequence(self, producer_id: int, epoch: int) -> int:
        """The first sequence :meth:`check` accepts next from ``producer_id`` with ``epoch`` (0 when it knows
        no batch of that epoch). :raises ProducerFencedError: for an epoch older than the producer's."""
        e = self.producers.get(producer_id)
        if e is not None and epoch < e.epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {epoch} is older than its current epoch {e.epoch}")
        if e is None or epoch > e.epoch or not e.batches:
            return 0
        return (e.batches[-1][1] + 1) % _SEQ_MOD

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int, timestamp: int, transactional: bool = False) -> None:
        """Record an appended (or, rebuilding, a found) batch."""
        if producer_id < 0:
            return
        e = self.producers.get(producer_id)
        if e is None or epoch > e.epoch:
            old = e
            e = self.producers[producer_id] = ProducerEntry(epoch)
            if old is not None:  # a new epoch keeps the transaction its predecessor left open
                e.txn_first_offset, e.coordinator_epoch = old.txn_first_offset, old.coordinator_epoch
        elif epoch < e.epoch:
            return  # a fenced producer's batch found while rebuilding: it was rejected then
        if transactional and e.txn_first_offset < 0:
            e.txn_first_offset = first_offset
        if e.batches:
            f, last, f_off, l_off = e.batches[-1]
            if first_seq == last + 1 and first_offset == l_off + 1:
                e.batches[-1] = (f, last_seq, f_off, last_offset)
                e.last_timestamp = max(e.last_timestamp, timestamp)
                return
        e.batches.append((first_seq, last_seq, first_offset, last_offset))
        if len(e.batches) > BATCHES_KEPT:
            del e.batches[0]
        e.last_timestamp = max(e.last_timestamp, timestamp)

    def rebuild(self, headers: Iterable[Any]) -> None:
        """Replay batch headers (``pylog.storage.records.BatchHeader``) in offset order."""
        for h in headers:
            if h.producer_id >= 0:
                if h.is_control:
                    self.end_txn(h.producer_id, h.producer_epoch, -1, h.max_timestamp)
                    continue
                self.update(h.producer_id, h.producer_epoch, h.base_sequence,
                            (h.base_sequence + h.record_count - 1) % _SEQ_MOD, h.base_offset, h.last_offset,
                            h.max_timestamp, h.is_transactional)

    # ------------------------------------------------------------------ transactions

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Whether a marker of ``producer_id`` may be written.

        :raises ProducerFencedError, TransactionCoordinatorFencedError:
        """
        e = self.producers.get(producer_id)
        if e is None:
            return
        if epoch < e.epoch:
            raise ProducerFencedError(f"marker for producer {producer_id} epoch {epoch}, older than its current "
                                      f"epoch {e.epoch}")
        if coordinator_epoch < e.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{e.coordinator_epoch}")

    def end_txn(self, producer_id: int, epoch: int, coordinator_epoch: int, timestamp: int) -> int:
        """Close ``producer_id``'s open transaction (a marker was written or found); returns its first
        offset, or -1 when none was open. A marker with a newer epoch makes it the producer's epoch."""
        e = self.producers.get(producer_id)
        if e is None or epoch > e.epoch:
            old = e
            e = self.producers[producer_id] = ProducerEntry(epoch)
            if old is not None:
                e.txn_first_offset, e.coordinator_epoch = old.txn_first_offset, old.coordinator_epoch
        elif epoch < e.epoch:
            return -1  # a fenced marker found while rebuilding: it was rejected then
        first, e.txn_first_offset = e.txn_first_offset, -1
        e.coordinator_epoch = max(e.coordinator_epoch, coordinator_epoch)
        e.last_timestamp = max(e.last_timestamp, timestamp)
        return first

    def ongoing(self) -> dict[int, int]:
        """``{producer id: first offset}`` of the open transactions."""
        return {pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def last_stable_offset(self, log_end: int) -> int:
        """The first offset of the earliest open transaction, else ``log_end``."""
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        return min(firsts) if firsts else log_end

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        for pid in [p for p, e in self.producers.items()
                    if now_ms - e.last_timestamp > expiration_ms and e.txn_first_offset < 0]:
            del self.producers[pid]

    # ------------------------------------------------------------------ snapshot

    def write_snapshot(self, directory: str, offset: int, durable: bool = True) -> None:
        """Persist the state as of ``offset`` (every batch below it is accounted for); ``durable``: fsync."""
        body = msgpack.packb({"offset": offset, "producers": [
            [pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches]]
            + ([e.txn_first_offset, e.coordinator_epoch] if e.txn_first_offset >= 0 or e.coordinator_epoch >= 0
               else []) for pid, e in self.producers.items()]})
        raw = _HEAD.pack(_MAGIC, _VERSION, 0) + body
        write_checked(os.path.join(directory, SNAPSHOT_FILE), raw, durable=durable)

    @classmethod
    def read_snapshot(cls, directory: str, name: str = SNAPSHOT_FILE) -> tuple["ProducerState", int] | None:
        """``(state, offset)`` from the snapshot (the file ``name``, another one than ``producer.snapshot`` for
        tiered storage's per-segment copies), or None when there is none.

        :raises CorruptRecordError: when it is damaged (the caller rebuilds from further back).
        """
        path = os.path.join(directory, name)
        raw = read_checked(path, 64 << 20, "producer snapshot")
        if raw is None:
            return None
        if len(raw) < _HEAD.size:
            raise CorruptRecordError("producer snapshot is truncated", path, 0)
        magic, version, _ = _HEAD.unpack_from(raw)
        if magic != _MAGIC or version != _VERSION:
            raise CorruptRecordError(f"bad producer snapshot magic/version {magic!r}/{version}", path, 0)
        try:
            doc = msgpack.unpackb(raw[_HEAD.size:], strict_map_key=True)
            state = cls()
            if not isinstance(doc, dict) or not isinstance(doc.get("producers"), list):
                raise ValueError("not a snapshot document")
            offset = _field(doc.get("offset"), 0, _OFFSET_MAX)
            for item in doc["producers"]:
                if not isinstance(item, list) or len(item) not in (4, 6) or not isinstance(item[3], list) \
                        or len(item[3]) > BATCHES_KEPT:
                    raise ValueError("not a producer entry")
                pid, epoch, ts, batches = item[:4]
                entry = ProducerEntry(_field(epoch, -(1 << 15), (1 << 15) - 1), [], _field(ts, _I64_MIN, _OFFSET_MAX))
                if len(item) == 6:
                    entry.txn_first_offset = _field(item[4], -1, _OFFSET_MAX)
                    entry.coordinator_epoch = _field(item[5], -1, (1 << 31) - 1)
                for b in batches:
                    if not isinstance(b, list) or len(b) != 4:
                        raise ValueError("not a batch range")
                    first_seq, last_seq = _field(b[0], 0, _SEQ_MOD - 1), _field(b[1], 0, _SEQ_MOD - 1)
                    first_off, last_off = _field(b[2], 0, _OFFSET_MAX), _field(b[3], 0, _OFFSET_MAX)
                    if first_off > last_off:
                        raise ValueError("batch range ends before it starts")
                    entry.batches.append((first_seq, last_seq, first_off, last_off))
                state.producers[_field(pid, 0, _OFFSET_MAX)] = entry
        except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
            raise CorruptRecordError(f"producer snapshot does not decode: {exc!r}"[:200], path, _HEAD.size) from None
        return state, offset


def _field(value: Any, lo: int, hi: int) -> int:
    """``value`` when it is an int (not a bool, float or str: msgpack decodes whatever the bytes say) in
    ``[lo, hi]``. :raises ValueError: otherwise."""
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{value!r} is not an int in [{lo}, {hi}]"[:120])
    return value
