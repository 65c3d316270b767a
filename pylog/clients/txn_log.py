"""The transaction coordinator's state as records of the internal ``__transaction_state`` topic.

:class:`TransactionLog` is a store's access to that topic: append a transactional id's new state, look the
latest one up. The records' layout is :mod:`pylog.storage.txn_state` (docs/FORMAT.md, "Transaction state").

Invariants:
- A transactional id's states all go to one partition (CRC-32C of the id modulo
  ``transaction.state.log.num.partitions``), appended by whichever process acts for the id while it holds the
  id's coordinator lock (:mod:`pylog.clients.transactions`), so the latest record of a key is the id's state.
- The topic is compacted: only the latest state of each id is kept for long. An expired id's latest record is
  a tombstone (null value): lookups then find no state, and compaction drops it after ``delete.retention.ms``.
- Lookups read only the records appended since the previous lookup of that partition (a table per partition).
- A record of the topic that is not a well-formed state is skipped and logged, never taken as one.
- Looking states up never creates the topic: only an append does.
- With ``keep_turns`` (the store sets it when its :class:`~pylog.clients.transactions.TimeoutSweeper` thread
  runs) a state partition stays this handle's between appends, as a producer's partitions do: handed over as
  soon as another handle waits for it (:meth:`TransactionLog.hand_over`, every 10 ms) and let go after
  :data:`IDLE_TURN_S` without an append. A state transition then costs its append (and fsync), not the
  writer lock's acquisition and the checkpoint written at its release. Without it, each append takes the lock
  and hands it back.
- Commit points are fsynced (:meth:`TransactionLog.fsyncs_commit_points`) unless the topic has its own
  ``flush.messages`` or ``flush.ms`` (Kafka's topic configs, which Kafka lets an operator set on
  ``__transaction_state``): then the state records follow that flush policy as any append does, and the
  coordinator does not fsync its markers either (Kafka's behaviour: all-or-nothing survives a process crash,
  not a power loss). pylog's default, with neither set, is the fsync of every commit point.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ..errors import CorruptRecordError, PartitionLockedError
from ..partition import Partition, internals
from ..storage.filenames import TRANSACTION_STATE_TOPIC
from ..storage.records import crc32c
from ..storage.txn_state import TransactionMetadata, decode_state, state_key, state_value
from ..topic import Topic
from .storeview import CreateInternalTopic, StoreView, internal_topic

__all__ = ["TransactionLog", "IDLE_TURN_S", "STATE_FLUSH_KEYS"]

#: How long a state partition kept between appends (``keep_turns``) stays held without one (seconds).
IDLE_TURN_S = 1.0
#: The topic configs of ``__transaction_state`` an operator may set (``Store.alter_topic_config``): either one
#: replaces the coordinator's fsync of each commit point by that flush policy (see the module docstring).
STATE_FLUSH_KEYS = frozenset(("flush.messages", "flush.ms"))

log = logging.getLogger("pylog.transactions")


class TransactionLog:
    """A store's access to ``__transaction_state``. Thread-safe.

    ``create_internal_topic(name, partitions, config)``: the store's way of creating an internal topic."""

    def __init__(self, store: StoreView, create_internal_topic: CreateInternalTopic) -> None:
        self._store = store
        self._create_internal_topic = create_internal_topic
        self._lock = threading.Lock()
        self._topic: Topic | None = None
        #: state partition -> (next offset to read, {transactional id: latest state})
        self._tables: dict[int, tuple[int, dict[str, TransactionMetadata]]] = {}
        self._bad_records = 0
        #: Keep state partitions between appends (see the module docstring); the store sets it.
        self.keep_turns = False
        #: State partitions held between appends: number -> (partition, time of its last append).
        self._held: dict[int, tuple[Partition, float]] = {}
        #: Called when a partition starts being held (the sweeper thread wakes to hand it over in time).
        self.on_hold: Callable[[], None] | None = None

    def exists(self) -> bool:
        """Whether the topic exists (looking states up never creates it)."""
        return self._topic is not None or TRANSACTION_STATE_TOPIC in self._store

    def topic(self) -> Topic:
        """The state topic, created (compacted, ``transaction.state.log.*``) on first use."""
        if self._topic is None:
            self._topic = internal_topic(self._store, self._create_internal_topic, TRANSACTION_STATE_TOPIC,
                                         "transaction.state.log")
        return self._topic

    def fsyncs_commit_points(self) -> bool:
        """Whether the coordinator fsyncs its commit points and markers: unless the topic has its own
        ``flush.messages`` or ``flush.ms`` (see the module docstring)."""
        return STATE_FLUSH_KEYS.isdisjoint(self.topic().config.overrides)

    def partition_for(self, transactional_id: str) -> Partition:
        t = self.topic()
        return t.partition(crc32c(transactional_id.encode("utf-8", "surrogatepass")) % t.num_partitions)

    def append(self, meta: TransactionMetadata, durable: bool, timeout_ms: float, tombstone: bool = False) -> None:
        """Append ``meta`` as its id's latest state; ``durable``: fsynced before returning (a commit point),
        unless the topic's own flush policy replaces that (:meth:`fsyncs_commit_points`); ``tombstone``: a
        tombstone of ``meta``'s id instead (the id expired: lookups no longer find it). Call under the id's
        coordinator lock.

        :raises PartitionLockedError: when another writer held the state partition for ``timeout_ms``.
        """
        p = self.partition_for(meta.transactional_id)
        with internals(p).writer_turn():
            try:
                p.wait_to_write(timeout_ms)
            except PartitionLockedError:
                raise PartitionLockedError(f"could not write the state of transactional id "
                                           f"{meta.transactional_id!r}: {p.topic}-{p.number} stayed locked by "
                                           f"another writer for {timeout_ms} ms") from None
            try:
                internals(p).append_values_in_turn([None if tombstone else state_value(meta)],
                                                   [state_key(meta.transactional_id)], None,
                                                   None, None, None)
                if durable and self.fsyncs_commit_points():
                    p.flush()
            finally:
                if self.keep_turns:
                    with self._lock:
                        new = p.number not in self._held
                        self._held[p.number] = (p, time.monotonic())
                    internals(p).pass_turn()  # at once to a handle that waits
                    if new and self.on_hold is not None:
                        self.on_hold()
                else:
                    p.release_writer()

    def holding(self) -> bool:
        """Whether state partitions are held between appends (:meth:`hand_over` is then due every 10 ms)."""
        return bool(self._held)

    def hand_over(self, let_go: bool = False) -> None:
        """Hand the state partitions held between appends over to handles waiting for them; let go of those
        idle for :data:`IDLE_TURN_S` (all of them with ``let_go``). Never blocks behind an append under way."""
        now = time.monotonic()
        with self._lock:
            held = list(self._held.items())
        for number, (p, used) in held:
            idle = let_go or now - used > IDLE_TURN_S
            internals(p).pass_turn(wanted_only=not idle, blocking=False)
            if not p.is_writer:
                with self._lock:
                    if self._held.get(number, (None, 0.0))[1] == used:
                        del self._held[number]

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The latest state of ``transactional_id`` (including other processes' appends), None when it has none."""
        if not self.exists():
            return None
        return self._table(self.partition_for(transactional_id).number).get(transactional_id)

    def all(self) -> list[TransactionMetadata]:
        """The latest state of every transactional id, sorted by id."""
        if not self.exists():
            return []
        out: list[TransactionMetadata] = []
        for i in range(self.topic().num_partitions):
            out.extend(self._table(i).values())
        return sorted(out, key=lambda m: m.transactional_id)

    def _table(self, number: int) -> dict[str, TransactionMetadata]:
        p = self.topic().partition(number)
        with self._lock:
            pos, table = self._tables.get(number, (0, {}))
            pos = max(pos, p.log_start_offset)
            while pos < p.log_end_offset:
                cols = p.read_columns(pos, max_records=65_536)
                if not len(cols):
                    break
                for key, value in zip(cols.keys(), cols.values(), strict=True):
                    self._fold(p, table, key, value)
                pos = int(cols.offsets[-1]) + 1
            self._tables[number] = (pos, table)
            return table

    def _fold(self, p: Partition, table: dict[str, TransactionMetadata], key: bytes | None,
              value: bytes | None) -> None:
        try:
            tid, meta = decode_state(key, value, p.directory)
        except CorruptRecordError as exc:
            self._bad_records += 1
            if self._bad_records == 1:
                log.warning("%s: skipping records that are not transaction states (%s)", p.directory, exc)
            return
        if meta is None:
            table.pop(tid, None)
        else:
            table[tid] = meta
