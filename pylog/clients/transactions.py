"""The transaction coordinator: Kafka's transaction protocol (KIP-98) as library code, no coordinator process.

Whichever process acts for a transactional id (a library producer, ``pylog serve`` for a Kafka client, the
timeout sweep of any process with the store open) runs :class:`TransactionCoordinator` under that id's
coordinator lock, an exclusive ``flock`` of ``__transactions/<id>.lock``. The id's state is the latest record
of ``__transaction_state`` (:mod:`pylog.clients.txn_log`; layout :mod:`pylog.storage.txn_state`). The calls,
each named for the Kafka request it answers (``pylog serve`` maps them one to one):

``init_producer_id(transactional_id, transaction_timeout_ms, producer_id=-1, producer_epoch=-1)``
    InitProducerId. A new id gets a producer id (``Store.new_producer_id``) and epoch 0; a known one its
    epoch bumped (a new producer id past epoch 32767), which fences the previous incarnation: its calls here
    get :class:`ProducerFencedError`, its appends and markers in partitions the fence reached too. A
    transaction it left Ongoing is aborted first, with the bumped epoch in the markers (so every partition it
    wrote fences it); one left half-ended (``Prepare*``) is completed. Returns :class:`ProducerIdAndEpoch`.
    ``producer_id``/``producer_epoch`` (KIP-360's re-initialisation) must then be the id's current ones.
    :raises InvalidTransactionTimeoutError: a timeout outside 1..``transaction.max.timeout.ms``.
``add_partitions(transactional_id, producer_id, producer_epoch, partitions)``
    AddPartitionsToTxn: the partitions join the open transaction (opening it: Ongoing, ``start_ms`` now).
    Every transactional append to a partition must come after its partition was added (KIP-890).
    :raises UnknownTopicError: a topic the store lacks; :raises InvalidArgumentError: a partition it lacks.
``add_offsets(transactional_id, producer_id, producer_epoch, group_id)``
    AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction.
``txn_offset_commit(transactional_id, producer_id, producer_epoch, group_id, offsets)``
    TxnOffsetCommit: the offsets are appended as transactional records of the producer; committed-offset
    lookups see them once the transaction commits, never after an abort.
    :raises InvalidTxnStateError: the group was not added (``add_offsets``) to the open transaction.
``end_txn(transactional_id, producer_id, producer_epoch, commit)``
    EndTxn: ``PrepareCommit``/``PrepareAbort`` is appended and fsynced (the commit point), a marker is
    written into every partition of the transaction and fsynced, then ``CompleteCommit``/``CompleteAbort``.
    Repeating the call that ended the last transaction succeeds (a retry); ending an Empty or completed one
    otherwise is :class:`InvalidTxnStateError`. Once the commit point is durable the call succeeds even if a
    marker could not be written (logged): the next holder of the id's lock, or the timeout sweep, finishes.
``describe(transactional_id)``, ``list_transactions(states=None, producer_ids=None)``
    DescribeTransactions, ListTransactions: :class:`~pylog.storage.txn_state.TransactionMetadata` of the latest
    state. :raises TransactionalIdNotFoundError: for an id without a state.
``abort_timed_out(now=None)``
    The timeout sweep (``transaction.abort.timed.out.transaction.cleanup.interval.ms``, run by
    :class:`TimeoutSweeper` in every process with the store open for writing and its cleaner enabled): an
    Ongoing transaction older than its timeout is aborted with the epoch bumped (Kafka's PrepareEpochFence), so
    its producer is fenced; a ``Prepare*`` state whose lock is free (its writer died) is completed.
``expire(now=None)``
    The expiry, run by the same sweep (:meth:`TransactionCoordinator.sweep`): an id in Empty, CompleteCommit,
    CompleteAbort or Dead whose last transition is older than ``transactional.id.expiration.ms`` (7 days) is
    forgotten, as Kafka does: a tombstone of its state (fsynced; compaction drops both after
    ``delete.retention.ms``) and its lock file removed. Its next InitProducerId starts afresh (a new producer
    id, epoch 0). An id whose transaction is open (Ongoing, Prepare*) never expires.

Every call taking ``producer_id, producer_epoch`` checks them against the id's state first:
:class:`InvalidProducerIdMappingError` for another producer id, or for an id without a state (never
initialised, or expired: Kafka's answer), :class:`ProducerFencedError` for an older epoch,
:class:`InvalidProducerEpochError` for a newer one. A lock held longer than the wait (``lock_wait_ms``) is
:class:`ConcurrentTransactionsError`.
Partitions that a state write or a marker could not get within the wait raise
:class:`~pylog.errors.PartitionLockedError`; storage faults raise as everywhere (``StorageError``).

Invariants:
- Every state transition of an id happens under its coordinator lock, which dies with its process, so a
  crashed coordinator never blocks others; whoever takes the lock next first completes a ``Prepare*`` state
  left behind (the lock is free, so its writer is gone): a transaction that reached its commit point commits.
- A transaction's records and offsets become visible to read_committed readers together or not at all: the
  commit point is one fsynced state record; markers follow it; ``Complete*`` follows the markers' fsync.
- The coordinator epoch in markers never decreases for a producer id: it is the larger of the state's last
  one and this process's (a store-wide counter, ``__transactions/coordinator.epoch``, taken once per process),
  and it is stored in the ``Prepare*`` record before any marker carries it.
- Thread-safe: the coordinator lock is a ``flock`` of a file opened per call, which excludes threads of one
  process as it excludes processes.
- A lock file is unlinked only by a holder of its ``flock``, as the last step before letting go (after the
  id's tombstone is durable); whoever takes a ``flock`` then checks that its descriptor is still the file the
  path names (an unlinked one is let go and the path opened again), so two holders never lock two files of
  one id. A process that dies between the tombstone and the unlink leaves a lock file without a state: the
  sweep unlinks such files the same way (under their ``flock``, after reading the states again).

Known limit: an id whose epoch reached 32767 moves to a new producer id at its next init; the abort markers of
that fence keep epoch 32767, so a zombie of the old incarnation that still appends to a partition it had
added is refused by the coordinator's calls but not by that partition (Kafka has the same gap before
KIP-890; pylog serve's KIP-890 check of a produce against the added partitions refuses it there).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterable, Iterator, Mapping, NamedTuple

from ..errors import (ConcurrentTransactionsError, InvalidArgumentError, InvalidProducerEpochError,
                      InvalidProducerIdMappingError, InvalidTopicError, InvalidTransactionTimeoutError,
                      InvalidTxnStateError, ProducerFencedError, PylogError, ReadOnlyStoreError,
                      TransactionalIdNotFoundError, UnknownTopicError)
from ..partition import Partition, internals
from ..storage import group_commit
from ..storage.counter import take_next
from ..storage.fileio import try_flock, write_faults
from ..storage.filenames import (COORDINATOR_EPOCH_FILE, TRANSACTION_STATE_TOPIC, TRANSACTIONS_DIR, check_group_id,
                                legal_name)
from ..storage.records import now_ms
from ..storage.txn_state import MAX_EPOCH, TransactionMetadata, TxnState
from ..structs import OffsetAndMetadata, TopicPartition
from .drain import HANDOVER_POLL
from .offsets import CommittedOffsets
from .storeview import StoreView
from .txn_log import TransactionLog

__all__ = ["TransactionCoordinator", "ProducerIdAndEpoch", "TimeoutSweeper", "TxnState", "TransactionMetadata",
           "check_transactional_id"]

log = logging.getLogger("pylog.transactions")

_INT32_MAX = (1 << 31) - 1
#: The states a new transaction may start from.
_IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_PREPARED = {TxnState.PREPARE_COMMIT: True, TxnState.PREPARE_ABORT: False}
#: The states an id may expire in (``transactional.id.expiration.ms``): no transaction open or being ended.
_EXPIRABLE = frozenset(_IDLE) | {TxnState.DEAD}


class ProducerIdAndEpoch(NamedTuple):
    """What InitProducerId returns: the producer id and epoch a transactional producer appends with."""
    producer_id: int
    epoch: int


def check_transactional_id(transactional_id: object) -> str:
    """``transactional_id`` when usable (a non-empty str that UTF-8 can encode), else InvalidArgumentError."""
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidArgumentError(f"transactional_id must be a non-empty str, got {transactional_id!r}"[:200])
    try:
        transactional_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"transactional_id {transactional_id!r} cannot be encoded as UTF-8"[:200]) \
            from None
    return transactional_id


def _lock_name(transactional_id: str) -> str:
    # Readable where the id is a safe file name; a digest otherwise ('%' is no topic character, so the two
    # kinds never collide).
    if legal_name(transactional_id) and len(transactional_id) <= 200:
        return transactional_id + ".lock"
    return "%" + hashlib.blake2b(transactional_id.encode("utf-8"), digest_size=16).hexdigest() + ".lock"


class TransactionCoordinator:
    """Kafka's transaction coordinator over a store (see the module docstring for the calls and errors).

    ``state_log`` and ``offsets`` are the store's ``__transaction_state`` and ``__consumer_offsets`` access;
    ``lock_wait_ms`` bounds every wait for the id's lock, the state partition and each marked partition."""

    def __init__(self, store: StoreView, state_log: TransactionLog, offsets: CommittedOffsets, *,
                 lock_wait_ms: float = 30_000) -> None:
        self._store = store
        self._log = state_log
        self._offsets = offsets
        self.lock_wait_ms = lock_wait_ms
        self._dir = os.path.join(store.path, TRANSACTIONS_DIR)
        self._epoch_lock = threading.Lock()
        self._process_epoch = -1

    # ------------------------------------------------------------------ the Kafka requests

    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int, producer_id: int = -1,
                         producer_epoch: int = -1) -> ProducerIdAndEpoch:
        """InitProducerId (see the module docstring)."""
        max_timeout = self._store.settings["transaction.max.timeout.ms"]
        if type(transaction_timeout_ms) is not int or not 1 <= transaction_timeout_ms <= max_timeout:
            raise InvalidTransactionTimeoutError(f"transaction_timeout_ms must be an int in 1..{max_timeout} "
                                                 f"(transaction.max.timeout.ms), got {transaction_timeout_ms!r}")
        with self._locked(transactional_id) as meta:
            now = now_ms()
            if meta is None:
                if producer_id >= 0:
                    raise InvalidProducerIdMappingError(f"transactional id {transactional_id!r} has no producer "
                                                        f"id yet; initialise with producer_id -1")
                meta = TransactionMetadata(transactional_id, self._store.new_producer_id(), 0,
                                           transaction_timeout_ms, TxnState.EMPTY, update_ms=now)
                self._log.append(meta, True, self.lock_wait_ms)
                return ProducerIdAndEpoch(meta.producer_id, 0)
            if producer_id >= 0:
                self._check_producer(meta, producer_id, producer_epoch)
            if meta.state == TxnState.ONGOING:
                old = meta.producer_epoch
                meta = self._abort_fenced(meta)
                if meta.state in _PREPARED:
                    raise ConcurrentTransactionsError(f"transactional id {transactional_id!r}: the transaction "
                                                      "its previous incarnation left open is not aborted yet")
                # The fence's bumped epoch is the new incarnation's (no marker names it as anyone else's).
                pid, epoch = (meta.producer_id, meta.producer_epoch) if meta.producer_epoch > old else self._bump(meta)
            else:
                pid, epoch = self._bump(meta)
            meta = replace(meta, producer_id=pid, producer_epoch=epoch, timeout_ms=transaction_timeout_ms,
                           state=TxnState.EMPTY, partitions=frozenset(), groups=frozenset(), start_ms=-1,
                           update_ms=now)
            self._log.append(meta, True, self.lock_wait_ms)
            return ProducerIdAndEpoch(pid, epoch)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn (see the module docstring)."""
        tps = frozenset(TopicPartition(*tp) for tp in partitions)
        for tp in tps:
            self._check_partition(tp)
        with self._locked(transactional_id) as meta:
            meta = self._checked(meta, transactional_id, producer_id, producer_epoch)
            self._open(meta, partitions=tps)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn (see the module docstring). :raises InvalidGroupError: for a group id that is not one."""
        check_group_id(group_id)
        with self._locked(transactional_id) as meta:
            meta = self._checked(meta, transactional_id, producer_id, producer_epoch)
            p = self._offsets.partition_for(group_id)
            self._open(meta, partitions=frozenset([TopicPartition(p.topic, p.number)]), groups=frozenset([group_id]))

    def txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int = -1,
                          member_id: str = "") -> None:
        """TxnOffsetCommit (see the module docstring)."""
        oms = {TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om, "")
               for tp, om in offsets.items()}
        with self._locked(transactional_id) as meta:
            meta = self._checked(meta, transactional_id, producer_id, producer_epoch)
            if meta.state != TxnState.ONGOING or group_id not in meta.groups:
                raise InvalidTxnStateError(f"group {group_id!r} was not added to the open transaction of "
                                           f"{transactional_id!r} (send_offsets_to_transaction adds it first)")
            self._offsets.commit(group_id, oms, generation, member_id, self.lock_wait_ms,
                                 producer=(meta.producer_id, meta.producer_epoch))

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """EndTxn (see the module docstring)."""
        with self._locked(transactional_id) as meta:
            meta = self._checked(meta, transactional_id, producer_id, producer_epoch)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if meta.state == done:
                return  # a retry of the call that ended it
            if meta.state != TxnState.ONGOING:
                raise InvalidTxnStateError(f"transactional id {transactional_id!r} has no open transaction to "
                                           f"{'commit' if commit else 'abort'} (state {meta.state.kafka_name})")
            self._end(meta, commit, meta.producer_epoch)

    def describe(self, transactional_id: str) -> TransactionMetadata:
        """DescribeTransactions. :raises TransactionalIdNotFoundError:"""
        meta = self._log.get(check_transactional_id(transactional_id))
        if meta is None:
            raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r} in {self._store.path}")
        return meta

    def list_transactions(self, states: Iterable[TxnState] | None = None,
                          producer_ids: Iterable[int] | None = None) -> list[TransactionMetadata]:
        """ListTransactions: every id's latest state (filtered by ``states`` and ``producer_ids`` when given)."""
        want_states = None if states is None else set(states)
        want_pids = None if producer_ids is None else set(producer_ids)
        return [m for m in self._log.all() if (want_states is None or m.state in want_states)
                and (want_pids is None or m.producer_id in want_pids)]

    def sweep(self, now: int | None = None) -> None:
        """What the sweep runs: :meth:`abort_timed_out`, then :meth:`expire` (``now`` in ms: for tests)."""
        self.abort_timed_out(now)
        self.expire(now)

    def abort_timed_out(self, now: int | None = None) -> list[str]:
        """The timeout sweep (see the module docstring); returns the ids whose transaction it aborted or
        completed. An id whose lock another holds is left alone (its holder is alive)."""
        done = []
        now = now_ms() if now is None else now
        for meta in self._log.all():
            due = meta.state in _PREPARED or (meta.state == TxnState.ONGOING
                                              and now - meta.start_ms > meta.timeout_ms)
            if due and self._sweep_one(meta.transactional_id, now):
                done.append(meta.transactional_id)
        return done

    def expire(self, now: int | None = None) -> list[str]:
        """Forget the idle ids last changed more than ``transactional.id.expiration.ms`` before ``now`` (see the
        module docstring), and remove lock files left without a state; returns the ids forgotten. An id whose
        lock another holds is left for the next sweep."""
        now = now_ms() if now is None else now
        ttl = self._store.settings["transactional.id.expiration.ms"]
        metas = self._log.all()
        done = [m.transactional_id for m in metas
                if _expired(m, now, ttl) and self._expire_one(m.transactional_id, now, ttl)]
        if os.path.isdir(self._dir):
            live = {_lock_name(m.transactional_id) for m in metas}
            with os.scandir(self._dir) as entries:
                strays = [e.name for e in entries if e.name.endswith(".lock") and e.name not in live]
            for name in strays:
                self._remove_stray(name)
        return done

    # ------------------------------------------------------------------ steps

    def _expire_one(self, transactional_id: str, now: int, ttl: int) -> bool:
        try:
            with self._lock_file(os.path.join(self._dir, _lock_name(transactional_id)), transactional_id,
                                 False) as path:
                meta = self._log.get(transactional_id)  # again: it may have changed since the sweep read it
                if meta is None or not _expired(meta, now, ttl):
                    return False
                log.info("transactional id %r (producer %d epoch %d) expired: idle for %d ms, past "
                         "transactional.id.expiration.ms %d", transactional_id, meta.producer_id,
                         meta.producer_epoch, now - meta.update_ms, ttl)
                self._log.append(meta, True, self.lock_wait_ms, tombstone=True)
                _unlink(path)  # last, under the flock (see the module docstring)
                return True
        except ConcurrentTransactionsError:
            return False

    def _remove_stray(self, name: str) -> None:
        """Unlink the lock file ``name`` when no id has a state for it (its expiry died before the unlink)."""
        try:
            with self._lock_file(os.path.join(self._dir, name), name, False) as path:
                if name not in {_lock_name(m.transactional_id) for m in self._log.all()}:
                    _unlink(path)
        except ConcurrentTransactionsError:
            pass  # in use: its holder writes a state


    def _sweep_one(self, transactional_id: str, now: int) -> bool:
        try:
            with self._locked(transactional_id, wait=False) as meta:
                if meta is None or meta.state != TxnState.ONGOING or now - meta.start_ms <= meta.timeout_ms:
                    return meta is not None and meta.state in _IDLE  # a Prepare* it completed on locking
                log.warning("aborting the transaction of %r (producer %d epoch %d): open for %d ms, past its "
                            "timeout of %d ms", transactional_id, meta.producer_id, meta.producer_epoch,
                            now - meta.start_ms, meta.timeout_ms)
                self._abort_fenced(meta)
                return True
        except ConcurrentTransactionsError:
            return False

    def _abort_fenced(self, meta: TransactionMetadata) -> TransactionMetadata:
        """Abort ``meta``'s open transaction with the epoch bumped (fencing its producer everywhere the markers
        go); returns the CompleteAbort state. At epoch 32767 the markers keep it (the id then moves to a new
        producer id, which the old incarnation's calls here no longer match)."""
        return self._end(meta, False, min(meta.producer_epoch + 1, MAX_EPOCH))

    def _end(self, meta: TransactionMetadata, commit: bool, epoch: int) -> TransactionMetadata:
        """Prepare (durable), markers, Complete; returns the Complete state."""
        prepared = replace(meta, producer_epoch=epoch,
                           state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, update_ms=now_ms(),
                           coordinator_epoch=max(meta.coordinator_epoch, self._coordinator_epoch()))
        self._log.append(prepared, True, self.lock_wait_ms)
        return self._complete(prepared)

    def _complete(self, prepared: TransactionMetadata) -> TransactionMetadata:
        """Write ``prepared``'s markers and its Complete state (not fsynced: a lost Complete is redone from the
        Prepare record). A marker that cannot be written leaves the Prepare state for the next lock holder."""
        commit = _PREPARED[prepared.state]
        try:
            self._write_markers(prepared, commit)
        except (PylogError, OSError):
            log.warning("transactional id %r: markers not all written; the %s completes when the id's lock is "
                        "next taken", prepared.transactional_id, "commit" if commit else "abort", exc_info=True)
            return prepared
        done = replace(prepared, state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                       update_ms=now_ms())
        self._log.append(done, False, self.lock_wait_ms)
        return done

    def _write_markers(self, meta: TransactionMetadata, commit: bool) -> None:
        """A marker into each of ``meta``'s partitions (a deleted topic has nothing to end), then one fsync
        of them all (none when ``__transaction_state`` has a flush policy of its own: :class:`TransactionLog`);
        partitions taken for the markers are handed back."""
        taken: list[Partition] = []
        marked: list[Partition] = []
        try:
            for tp in sorted(meta.partitions):
                try:
                    p = self._store.topic(tp.topic).partition(tp.partition)
                except (UnknownTopicError, InvalidArgumentError):
                    log.info("transactional id %r: %s-%d is gone; no marker", meta.transactional_id, *tp)
                    continue
                with internals(p).writer_turn():
                    if not p.is_writer:
                        p.wait_to_write(self.lock_wait_ms)
                        taken.append(p)
                    internals(p).append_marker(meta.producer_id, meta.producer_epoch, commit, meta.coordinator_epoch)
                marked.append(p)
            if self._log.fsyncs_commit_points():  # else __transaction_state's flush policy: Kafka's, no fsync
                for exc in group_commit.sync([internals(p) for p in marked]):
                    if exc is not None:
                        raise exc
        finally:
            for p in taken:
                internals(p).pass_turn(wanted_only=False)

    def _open(self, meta: TransactionMetadata, partitions: frozenset[TopicPartition] = frozenset(),
              groups: frozenset[str] = frozenset()) -> None:
        """Add ``partitions`` and ``groups`` to the open transaction (opening one from an idle state)."""
        if meta.state == TxnState.ONGOING:
            if partitions <= meta.partitions and groups <= meta.groups:
                return
            new = replace(meta, partitions=meta.partitions | partitions, groups=meta.groups | groups,
                          update_ms=now_ms())
        elif meta.state in _IDLE:
            now = now_ms()
            new = replace(meta, state=TxnState.ONGOING, partitions=partitions, groups=groups, start_ms=now,
                          update_ms=now)
        else:
            raise ConcurrentTransactionsError(f"transactional id {meta.transactional_id!r} is in state "
                                              f"{meta.state.kafka_name}")
        self._log.append(new, True, self.lock_wait_ms)

    def _bump(self, meta: TransactionMetadata) -> tuple[int, int]:
        """The next (producer id, epoch) of ``meta``'s id: the epoch + 1, or a new producer id past 32767."""
        if meta.producer_epoch < MAX_EPOCH:
            return meta.producer_id, meta.producer_epoch + 1
        return self._store.new_producer_id(), 0

    def _check_producer(self, meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> None:
        if producer_id != meta.producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {meta.transactional_id!r} maps to producer {meta.producer_id}, not {producer_id}"
                " (another incarnation initialised it since: this one is fenced)")
        if producer_epoch < meta.producer_epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {producer_epoch} of transactional id "
                                      f"{meta.transactional_id!r} was fenced by epoch {meta.producer_epoch}")
        if producer_epoch > meta.producer_epoch:
            raise InvalidProducerEpochError(f"producer {producer_id} epoch {producer_epoch} is newer than the "
                                            f"coordinator's {meta.producer_epoch} for {meta.transactional_id!r}")

    def _checked(self, meta: TransactionMetadata | None, transactional_id: str, producer_id: int,
                 producer_epoch: int) -> TransactionMetadata:
        if meta is None:
            # Kafka's answer for an id without a state: the producer's incarnation is no longer (or never was)
            # the id's, as after a fence by another producer id; fatal for the producer.
            raise InvalidProducerIdMappingError(f"transactional id {transactional_id!r} has no state: never "
                                                "initialised, or expired (transactional.id.expiration.ms); "
                                                "init_transactions first")
        self._check_producer(meta, producer_id, producer_epoch)
        return meta

    def _check_partition(self, tp: TopicPartition) -> None:
        if tp.topic == TRANSACTION_STATE_TOPIC:
            raise InvalidTopicError(f"{tp.topic} cannot be part of a transaction")
        n = self._store.topic(tp.topic).num_partitions  # UnknownTopicError
        if type(tp.partition) is not int or not 0 <= tp.partition < n:
            raise InvalidArgumentError(f"{tp.topic} has no partition {tp.partition!r} (it has {n})")

    def _coordinator_epoch(self) -> int:
        """This process's coordinator epoch, taken from the store-wide counter on first use."""
        with self._epoch_lock:
            if self._process_epoch < 0:
                os.makedirs(self._dir, exist_ok=True)
                with write_faults("taking a coordinator epoch", "no transaction was ended"):
                    self._process_epoch = min(take_next(os.path.join(self._dir, COORDINATOR_EPOCH_FILE),
                                                        "coordinator epoch file"), _INT32_MAX)
            return self._process_epoch

    @contextmanager
    def _locked(self, transactional_id: str, wait: bool = True) -> Iterator[TransactionMetadata | None]:
        """Hold ``transactional_id``'s coordinator lock and yield its state, a ``Prepare*`` one left by a
        dead holder completed first. :raises ConcurrentTransactionsError: when the lock stayed held for
        ``lock_wait_ms`` (at once without ``wait``)."""
        check_transactional_id(transactional_id)
        if self._store.read_only:
            raise ReadOnlyStoreError(f"{self._store.path} is open read-only: transactions cannot change")
        with write_faults(f"locking transactional id {transactional_id!r}", "nothing was changed"):
            os.makedirs(self._dir, exist_ok=True)
        with self._lock_file(os.path.join(self._dir, _lock_name(transactional_id)), transactional_id, wait):
            meta = self._log.get(transactional_id)
            if meta is not None and meta.state in _PREPARED:
                log.warning("transactional id %r: completing the %s its previous coordinator left half-done",
                            transactional_id, meta.state.kafka_name)
                meta = self._complete(meta)
                if meta.state in _PREPARED:
                    raise ConcurrentTransactionsError(f"transactional id {transactional_id!r}: its "
                                                      f"{meta.state.kafka_name} could not be completed yet")
            yield meta

    @contextmanager
    def _lock_file(self, path: str, transactional_id: str, wait: bool) -> Iterator[str]:
        """Hold the ``flock`` of the lock file ``path`` (created if missing), yielding ``path``. A file unlinked
        by its expiry while this waited for it is let go and the path opened again (see the module docstring).
        :raises ConcurrentTransactionsError: as :meth:`_locked`."""
        while True:
            with write_faults(f"locking transactional id {transactional_id!r}", "nothing was changed"):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._lock_fd(fd, transactional_id, wait)
                if _names(fd, path):
                    yield path
                    return
            finally:
                os.close(fd)  # releases the flock

    def _lock_fd(self, fd: int, transactional_id: str, wait: bool) -> None:
        deadline = time.monotonic() + self.lock_wait_ms / 1000
        pause = 0.001
        while not try_flock(fd):
            if not wait or time.monotonic() >= deadline:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is being changed by "
                                                  f"another process or thread (waited {self.lock_wait_ms} ms)")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _expired(meta: TransactionMetadata, now: int, ttl: int) -> bool:
    return meta.state in _EXPIRABLE and now - meta.update_ms > ttl


def _names(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not unlinked, nor replaced by a new one)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:  # a file left behind costs a directory entry, not correctness: the next sweep retries
        log.warning("could not remove the transaction lock file %s: %s", path, exc)


class TimeoutSweeper:
    """A daemon thread that runs :meth:`TransactionCoordinator.sweep` every ``interval_ms`` once
    the store has a ``__transaction_state`` topic, and while ``state_log`` keeps state partitions between
    appends hands them over every :data:`~pylog.clients.drain.HANDOVER_POLL` (10 ms) to a handle that waits
    (:meth:`TransactionLog.hand_over`); :meth:`stop` ends it (letting them go). Errors are logged, never raised."""

    def __init__(self, coordinator: TransactionCoordinator, state_log: TransactionLog, interval_ms: int) -> None:
        self._coordinator = coordinator
        self._log = state_log
        self._interval = interval_ms / 1000
        self._stopped = False
        self._wake = threading.Event()
        state_log.on_hold = self._wake.set
        self._thread = threading.Thread(target=self._run, name="pylog-txn-timeouts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        next_sweep = time.monotonic() + self._interval
        while True:
            holding = self._log.holding()
            wait = HANDOVER_POLL if holding else max(0.0, next_sweep - time.monotonic())
            self._wake.wait(wait)
            self._wake.clear()
            if self._stopped:
                break
            holding = self._log.holding()
            try:
                if holding:
                    self._log.hand_over()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self._interval
                    if self._log.exists():
                        self._coordinator.sweep()
            except Exception:  # keep sweeping: a store closing under us, a full disk, a damaged partition
                log.warning("transaction timeout sweep failed", exc_info=True)
        try:
            self._log.hand_over(let_go=True)
        except Exception:
            log.debug("letting go of the transaction state partitions failed", exc_info=True)
