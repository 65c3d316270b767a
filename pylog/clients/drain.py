"""The producer's drain: one topic's accumulation appended to its partitions, in turns with other writers.

:class:`Drainer` is the part of a :class:`~pylog.clients.producer.Producer` that writes. Given an
:class:`~pylog.clients.accumulator.Accumulation` swapped out of the producer, it places the records
(explicit partition, else the partitioner), appends each partition's records as one idempotent call
(``append_values_in_turn``, cut into batches of at most ``batch_size`` bytes), fsyncs with ``acks="all"``
through the process's group commit (:mod:`pylog.storage.group_commit`), records the bytes against the
client's produce quota and waits out its delay, and hands each partition's writer lock over to whoever waits
for it. The producer keeps the sending side (``send()``, the byte accounting, the sender thread,
completion); it owns no partition.

Not exported: the producer makes one and calls it under its drain lock (every method here must be called
under that lock, except the constructor), so a drainer's state needs no lock of its own.

Invariants:
- Records reach each partition in the order the accumulation holds them: one call per partition per
  drain, drains one at a time (the producer's drain lock).
- With idempotence, every append carries (producer id, epoch, the partition's next sequence); after an
  error that may have written part of a call the epoch moves on (a new producer id past int16), so no
  sequence number is ever reused for other records (Kafka's KIP-360). A transactional producer's id and
  epoch are its coordinator's (:meth:`Drainer.set_producer`): after such an error its transaction is told
  (``TxnHooks.failed``), whose abort takes the new epoch from the coordinator.
- A transactional drain adds the partitions it writes to the transaction (``TxnHooks.add_partitions``)
  before its first append, and appends transactional batches only.
- A partition this drainer holds for a turn is never held while it waits for another partition or out a
  quota delay: it lets go of every other first (fsynced first with ``acks="all"``: a hand-over does not
  fsync). A partition whose retention or compaction pass is under way stays held until the pass ends,
  tried again between the attempts of the wait. Only the wait for the partition itself counts against
  ``max_block_ms``.
- ``held`` lists the partitions it appended to and has not let go of for good; hand-over steps never
  raise (the records are appended already): a partition that cannot be handed over any more is dropped.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from .. import metrics
from ..errors import LogFailedError, PartitionLockedError
from ..storage import group_commit
from ..partition import Headers, Partition, internals
from ..storage.records import now_ms
from ..topic import Topic
from . import client_metrics
from .accumulator import Accumulation
from .partitioner import DefaultPartitioner
from .quotas import PRODUCE, QuotaManager
from .storeview import StoreView

__all__ = ["Drainer", "HANDOVER_POLL", "TxnHooks"]

log = logging.getLogger("pylog.producer")

#: How often (seconds) an idle sender thread looks whether another process waits for a partition it holds,
#: and how often a quota delay tries again to let go of a partition whose maintenance pass is under way.
HANDOVER_POLL = 0.01


class TxnHooks(Protocol):
    """What a transactional producer's drains tell its transaction
    (:class:`pylog.clients.txn_manager.TransactionManager`)."""

    def add_partitions(self, topic: str, partitions: Iterable[int]) -> None:
        """Before the drain's appends: the partitions it writes join the transaction (raises to fail it)."""
        ...

    def failed(self, exc: BaseException) -> None:
        """A partition's transactional append failed with ``exc``."""
        ...


class Drainer:
    """Appends drained accumulations for one producer. Call every method under the producer's drain lock.

    ``config`` is the producer's checked option dict (kafka-python's names); ``quotas`` its store's quota
    manager. Public attributes, read by the producer's ``metrics()``: ``producer_id``, ``drains``,
    ``throttle_total`` and ``throttle_max`` (seconds of quota delay).
    """

    def __init__(self, store: StoreView, quotas: QuotaManager, config: dict[str, Any], acks: int) -> None:
        self._store = store
        self._quotas = quotas
        self._client_id = config["client_id"]
        self._metrics_label = client_metrics.label(self._client_id)
        self._acks = acks
        self._partitioner = config["partitioner"]
        self._default_partitioner = DefaultPartitioner()
        self._compression = None if config["compression_type"] in (None, "none") else "lz4"
        #: Kafka's batch.size: a partition's records of one drain are cut into batches of at most this many
        #: bytes (one record at least), all appended by one call. Small batches keep a reader's look at one
        #: record cheap: a reader that is not the writer checks the whole batch it reads from.
        self._batch_size = int(config["batch_size"])
        self._idempotent = bool(config["enable_idempotence"])
        self._max_block_ms = config["max_block_ms"]
        self._retries = int(config["retries"])
        self._retry_backoff = config["retry_backoff_ms"] / 1000
        #: A transactional producer's transaction (appends are transactional; the producer id and epoch are
        #: the coordinator's, set by :meth:`set_producer`); None for others.
        self.txn: TxnHooks | None = None
        transactional = config.get("transactional_id") is not None
        self.producer_id = store.new_producer_id() if self._idempotent and not transactional else -1
        self._epoch = 0
        self._sequences: dict[tuple[str, int], int] = {}
        #: Partitions appended to and not let go of for good: handed over when another handle waits.
        self.held: dict[int, Partition] = {}
        # Throttle time per drain (Kafka's produce-throttle-time metrics).
        self.drains = 0
        self.throttle_total = 0.0
        self.throttle_max = 0.0

    # ------------------------------------------------------------------ one drain

    def append(self, acc: Accumulation, topic: Topic) -> None:
        """Append ``acc``'s records to ``topic``'s partitions; a partition's error goes to
        ``acc.partition_errors`` (the others' records still land), ``acc.offsets`` gets the offsets."""
        all_parts = list(range(topic.num_partitions))
        placed, sticky = acc.place(self._partitioner, self._default_partitioner, all_parts)
        if not isinstance(placed, int) and (placed == placed[0]).all():
            placed = int(placed[0])
        acc.placed = placed
        column = acc.stamp(now_ms())
        touched: list[Partition] = []  # appended to by this drain, in order
        flushed: set[Partition] = set()  # of those, fsynced already (acks="all") before a handover
        groups, offsets = acc.groups()
        txn = self.txn
        if txn is not None:
            txn.add_partitions(acc.topic, [number for number, _ in groups])  # raises: the whole drain fails
        for number, idx in groups:
            vals, keys, ts, hs = acc.columns_of(idx, column)
            producer = None
            if self._idempotent:
                seq = self._sequences.get((acc.topic, number), 0)
                producer = (self.producer_id, self._epoch, seq)
            try:
                part = topic.partition(number)
                first = self._append_with_retries(part, vals, keys, ts, hs, producer,
                                                  functools.partial(self._let_go, part, touched, flushed, acc))
            except Exception as exc:
                # Only this partition's records fail. Some of them may have landed, so their sequence
                # numbers must not be reused for other records: start a new epoch, whose sequences start
                # again at 0 on every partition (Kafka's producer bumps its epoch likewise, KIP-360).
                acc.partition_errors[number] = exc
                if txn is not None:
                    txn.failed(exc)  # its abort takes a new epoch from the coordinator when need be
                elif producer is not None and isinstance(exc, (OSError, LogFailedError)):
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
            if _wanted(part):
                self._let_go_one(part, touched, flushed, acc, wanted_only=True)
        self._end_drain(acc, touched, flushed)
        acc.offsets = offsets
        if metrics.state.on:
            client_metrics.drained(self._metrics_label, acc, groups)
        # Sticky partitioning: a completed batch moves key-less records on to another partition.
        for number in sticky:
            self._default_partitioner.on_new_batch(acc.topic, number, all_parts)

    def throttle(self, acc: Accumulation) -> None:
        """After an append: record its bytes against the client's produce quota and wait the quota's delay
        (before the futures complete and the next drain starts)."""
        delay = 0.0
        quotas, client = self._quotas, self._client_id
        if client is not None and quotas.active(client, PRODUCE):
            delay = quotas.record(client, PRODUCE, acc.payload_bytes())
            if delay > 0:
                # Nobody should wait out this producer's quota delay for a partition it holds. Nor should
                # the delay wait for a retention or compaction pass: a partition whose pass is under way
                # is let go of as soon as the pass ends, tried again every poll while the delay runs.
                kept = list(self.held.values())
                left = delay
                while True:
                    kept = [p for p in kept
                            if internals(p).pass_turn(wanted_only=False, blocking=False) and p.is_writer]
                    if not kept or left <= HANDOVER_POLL:
                        break
                    quotas.sleep(HANDOVER_POLL)
                    left -= HANDOVER_POLL
                quotas.sleep(left)
        self.drains += 1
        self.throttle_total += delay
        if delay > 0 and metrics.state.on:
            client_metrics.throttled(self._metrics_label, delay)
        if delay > self.throttle_max:
            self.throttle_max = delay

    # ------------------------------------------------------------------ turns between drains

    def hand_over_wanted(self) -> None:
        """Release the partitions another handle waits for (``PartitionInternals.handover_wanted``); forget those
        this store no longer writes. Between drains only: a drain appends to a partition whole."""
        for key, part in list(self.held.items()):
            if not internals(part).pass_turn() or not part.is_writer:
                del self.held[key]

    def let_go_all(self) -> None:
        """At close: let go of every partition held for a turn (nobody hands them over once the sender is
        gone; a lock a direct append pinned stays with the store)."""
        for part in self.held.values():
            internals(part).pass_turn(wanted_only=False)
        self.held.clear()

    # ------------------------------------------------------------------ steps of a drain

    def _end_drain(self, acc: Accumulation, touched: list[Partition], flushed: set[Partition]) -> None:
        """After a drain's appends: one fsync per partition not fsynced yet (``acks="all"``: group commit),
        then hand each over (a handover does not fsync, so the fsync comes first)."""
        if self._acks == -1:
            _sync([part for part in touched if part not in flushed], acc)
        for part in touched:
            self.held[id(part)] = part
            internals(part).pass_turn()

    def _let_go_one(self, part: Partition, touched: list[Partition], flushed: set[Partition],
                    acc: Accumulation, wanted_only: bool, blocking: bool = True) -> None:
        """Mid-drain: fsync ``part`` first if this drain appended to it and ``acks="all"`` (a handover
        does not fsync; a flush after it still reaches this drain's appends, by file name, but would
        also wait for the next writer's), then hand it over
        (or, with ``wanted_only`` False, let go of it whether or not anyone waits)."""
        if self._acks == -1 and part in touched and part not in flushed:
            flushed.add(part)
            _sync([part], acc)
        internals(part).pass_turn(wanted_only=wanted_only, blocking=blocking)

    def _let_go(self, waiting_for: Partition, touched: list[Partition], flushed: set[Partition],
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
        for part in [*self.held.values(), *touched]:
            if part is not waiting_for and part.is_writer and id(part) not in kept:
                self._let_go_one(part, touched, flushed, acc, wanted_only=False, blocking=False)
                if part.is_writer:
                    kept[id(part)] = part

        def again() -> None:
            for key, part in list(kept.items()):
                if not internals(part).pass_turn(wanted_only=False, blocking=False) or not part.is_writer:
                    del kept[key]
        return again

    def set_producer(self, producer_id: int, epoch: int) -> None:
        """A transactional producer's id and epoch from its coordinator: sequences start again at 0."""
        self.producer_id, self._epoch = producer_id, epoch
        self._sequences.clear()

    def _new_epoch(self) -> None:
        """After a failure that may have written part of a call: never reuse its sequence numbers."""
        self._sequences.clear()
        self._epoch += 1
        if self._epoch > 0x7FFF:  # the header's epoch is an int16: start over under a new producer id
            self.producer_id = self._store.new_producer_id()
            self._epoch = 0

    def _append_with_retries(self, part: Partition, vals: list[bytes | None], keys: list[bytes | None] | None,
                             ts: np.ndarray, hs: Headers | None, producer: tuple[int, int, int] | None,
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
                if self.txn is not None:
                    return internals(part).append_values_in_turn(vals, keys, ts, hs, producer, self._compression,
                                                                 self._batch_size, transactional=True)
                return internals(part).append_values_in_turn(vals, keys, ts, hs, producer, self._compression,
                                                             self._batch_size)
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


def _sync(parts: list[Partition], acc: Accumulation) -> None:
    """fsync ``parts`` through the process's group commit (:mod:`pylog.storage.group_commit`: in parallel,
    and one fsync covers this drain and whatever other producers and ``pylog serve`` of this process
    appended meanwhile); a partition whose fsync failed fails its records."""
    for part, exc in zip(parts, group_commit.sync([internals(p) for p in parts]), strict=True):
        if exc is not None:
            acc.partition_errors[part.number] = exc


def _wanted(part: Partition) -> bool:
    """Whether another handle waits for ``part`` (False when that cannot be told: nothing to do)."""
    try:
        return part.is_writer and internals(part).handover_wanted()
    except Exception:  # a closed store, a deleted topic: the hand-over step says so, or nobody cares
        return False
