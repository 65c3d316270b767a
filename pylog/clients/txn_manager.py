"""A transactional producer's side of the protocol (Kafka's client ``TransactionManager``): its state, and the
coordinator calls its producer makes (:mod:`pylog.clients.transactions`).

The producer (``transactional_id`` set) owns one :class:`TransactionManager`. ``init_transactions`` takes the
producer id and epoch from the coordinator, ``begin_transaction`` opens a transaction locally, each drain adds
the partitions it is about to write to (the coordinator's ``add_partitions``, once per partition and
transaction) before its transactional appends, ``send_offsets_to_transaction`` adds the group and appends its
offsets, and ``commit_transaction``/``abort_transaction`` end it at the coordinator after the producer flushed.

States (Kafka's): ``UNINITIALIZED`` -> ``READY`` (init) -> ``IN_TRANSACTION`` (begin) -> ``READY`` (commit or
abort). An error of the transaction's appends or coordinator calls makes it ``ABORTABLE_ERROR``: only
``abort_transaction`` is allowed (a commit raises the error), and when the error may have written part of an
append the abort also takes a new epoch (the coordinator's ``init_producer_id`` with the current id and
epoch), so no sequence number is reused. Being fenced (:class:`~pylog.errors.ProducerFencedError`,
:class:`~pylog.errors.InvalidProducerIdMappingError`) is ``FATAL_ERROR``: every later call raises it; close
the producer (another instance with the same transactional id took over).

Invariants:
- A partition is added to the transaction at the coordinator before the first transactional append to it,
  so the coordinator's markers reach every partition the transaction wrote (KIP-890's rule, kept by the
  client as well).
- The producer id and epoch the drains append with change only in :meth:`TransactionManager.init` (through
  the ``on_producer`` callback, under the producer's drain lock), never in the middle of a transaction.
- Thread-safe: the state is guarded by a lock; coordinator calls run outside it, one at a time per producer
  (the producer's transaction calls are not meant to race each other, and drains run one at a time).
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Callable, Iterable, Mapping

from ..errors import (InvalidProducerIdMappingError, InvalidTxnStateError, ProducerFencedError, PylogError,
                      TransactionCoordinatorFencedError)
from ..structs import OffsetAndMetadata, TopicPartition
from .offsets import offsets_to_commit
from .transactions import TransactionCoordinator, check_transactional_id

__all__ = ["TransactionManager", "ClientTxnState", "group_id_of"]

#: Errors after which this incarnation can do nothing more (another took over the transactional id).
_FATAL = (ProducerFencedError, InvalidProducerIdMappingError, TransactionCoordinatorFencedError)
#: Errors of an append that may have written part of it: the abort then takes a new epoch.
_PARTIAL = (OSError,)


class ClientTxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


def group_id_of(group: Any) -> str:
    """The group id of ``send_offsets_to_transaction``'s second argument: a str (kafka-python's
    ``consumer_group_id``), or an object with a ``group_id`` (Kafka's ``ConsumerGroupMetadata``).

    :raises InvalidTxnStateError: for anything else (also not a str group id)."""
    gid = group if isinstance(group, str) else getattr(group, "group_id", None)
    if not isinstance(gid, str) or not gid:
        raise InvalidTxnStateError(f"send_offsets_to_transaction needs a group id or the consumer's group "
                                   f"metadata (with a group_id), got {group!r}"[:200])
    return gid


class TransactionManager:
    """One transactional producer's transaction state (see the module docstring).

    ``on_producer(producer_id, epoch)`` is called when init takes a producer id and epoch: the producer's
    drains append with them from sequence 0 on every partition."""

    def __init__(self, coordinator: TransactionCoordinator, transactional_id: str, timeout_ms: int,
                 on_producer: Callable[[int, int], None]) -> None:
        self.transactional_id = check_transactional_id(transactional_id)
        self.timeout_ms = timeout_ms
        self._coordinator = coordinator
        self._on_producer = on_producer
        self._lock = threading.Lock()
        self.state = ClientTxnState.UNINITIALIZED
        self.producer_id = -1
        self.epoch = -1
        self._added: set[TopicPartition] = set()
        self._groups: set[str] = set()
        self._error: BaseException | None = None
        self._needs_bump = False

    # ------------------------------------------------------------------ the producer's calls

    def init(self, under_drain_lock: Callable[[Callable[[], None]], None]) -> None:
        """``init_transactions``: take (or, after a fence, take again) the producer id and epoch.
        ``under_drain_lock(fn)`` runs ``fn`` under the producer's drain lock."""
        with self._lock:
            if self.state not in (ClientTxnState.UNINITIALIZED, ClientTxnState.READY):
                raise InvalidTxnStateError(f"init_transactions in state {self.state.value}")
        self._take_epoch(-1, -1, under_drain_lock)

    def begin(self) -> None:
        """``begin_transaction``. :raises InvalidTxnStateError: unless ready (init done, none open)."""
        with self._lock:
            self._raise_fatal()
            if self.state != ClientTxnState.READY:
                raise InvalidTxnStateError(f"begin_transaction in state {self.state.value}"
                                           + (" (call init_transactions first)"
                                              if self.state == ClientTxnState.UNINITIALIZED else ""))
            self.state = ClientTxnState.IN_TRANSACTION
            self._added.clear()
            self._groups.clear()

    def check_send(self) -> None:
        """Before a record is queued: a transaction must be open. :raises ProducerFencedError: after a fence;
        :raises InvalidTxnStateError: outside a transaction, or after an error that needs an abort."""
        state = self.state
        if state == ClientTxnState.IN_TRANSACTION:
            return
        with self._lock:
            self._raise_fatal()
            if self.state == ClientTxnState.ABORTABLE_ERROR:
                raise InvalidTxnStateError(f"the transaction failed ({self._error!r}); abort_transaction first")
            if self.state != ClientTxnState.IN_TRANSACTION:
                raise InvalidTxnStateError("send() of a transactional producer needs begin_transaction() first")

    def add_partitions(self, topic: str, partitions: Iterable[int]) -> None:
        """(a drain, before its appends) Add the partitions not yet in the transaction at the coordinator.

        :raises: the coordinator's error (the transaction then needs an abort, or is fenced)."""
        new = [TopicPartition(topic, p) for p in partitions if TopicPartition(topic, p) not in self._added]
        if not new:
            return
        self.check_send()
        try:
            self._coordinator.add_partitions(self.transactional_id, self.producer_id, self.epoch, new)
        except PylogError as exc:
            self.failed(exc)
            raise
        self._added.update(new)

    def failed(self, exc: BaseException) -> None:
        """(a drain) An append or coordinator call of the transaction failed with ``exc``."""
        with self._lock:
            if self.state == ClientTxnState.FATAL_ERROR:
                return
            self._error = exc
            if isinstance(exc, _FATAL):
                self.state = ClientTxnState.FATAL_ERROR
                return
            if isinstance(exc, _PARTIAL):
                self._needs_bump = True
            if self.state == ClientTxnState.IN_TRANSACTION:
                self.state = ClientTxnState.ABORTABLE_ERROR

    def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], group: Any) -> None:
        """``send_offsets_to_transaction``: add the group, then append its offsets to the transaction."""
        group_id = group_id_of(group)
        checked = offsets_to_commit(offsets)
        self.check_send()
        c, tid = self._coordinator, self.transactional_id
        try:
            if group_id not in self._groups:
                c.add_offsets(tid, self.producer_id, self.epoch, group_id)
                self._groups.add(group_id)
            c.txn_offset_commit(tid, self.producer_id, self.epoch, group_id, checked,
                                member_id=str(getattr(group, "member_id", "") or ""),
                                generation=int(getattr(group, "generation_id", -1)))
        except PylogError as exc:
            self.failed(exc)
            raise

    def commit(self) -> None:
        """``commit_transaction``, after the producer flushed. :raises: the error that made the transaction
        abortable (abort it), or the coordinator's."""
        with self._lock:
            self._raise_fatal()
            if self.state == ClientTxnState.ABORTABLE_ERROR:
                raise InvalidTxnStateError(f"cannot commit: the transaction failed ({self._error!r}); "
                                           "abort_transaction") from self._error
            if self.state != ClientTxnState.IN_TRANSACTION:
                raise InvalidTxnStateError(f"commit_transaction in state {self.state.value}")
        self._end(True)

    def abort(self, under_drain_lock: Callable[[Callable[[], None]], None]) -> None:
        """``abort_transaction``, after the producer flushed (errors of that flush are the transaction's)."""
        with self._lock:
            self._raise_fatal()
            if self.state not in (ClientTxnState.IN_TRANSACTION, ClientTxnState.ABORTABLE_ERROR):
                raise InvalidTxnStateError(f"abort_transaction in state {self.state.value}")
        self._end(False)
        if self._needs_bump:  # part of an append may have landed: never reuse its sequence numbers
            self._take_epoch(self.producer_id, self.epoch, under_drain_lock)

    # ------------------------------------------------------------------ steps

    def _end(self, commit: bool) -> None:
        if self._added or self._groups:  # nothing added: nothing to end at the coordinator (Kafka's clients too)
            try:
                self._coordinator.end_txn(self.transactional_id, self.producer_id, self.epoch, commit)
            except PylogError as exc:
                self.failed(exc)
                raise
        with self._lock:
            self.state = ClientTxnState.READY
            self._error = None
            self._added.clear()
            self._groups.clear()

    def _take_epoch(self, producer_id: int, epoch: int, under_drain_lock: Callable[[Callable[[], None]], None]) -> None:
        try:
            pid, new_epoch = self._coordinator.init_producer_id(self.transactional_id, self.timeout_ms,
                                                                producer_id, epoch)
        except PylogError as exc:
            self.failed(exc)
            raise

        def adopt() -> None:
            self._on_producer(pid, new_epoch)
        under_drain_lock(adopt)
        with self._lock:
            self.producer_id, self.epoch = pid, new_epoch
            self.state = ClientTxnState.READY
            self._needs_bump = False
            self._error = None

    def _raise_fatal(self) -> None:
        """Under the lock: raise the error that fenced this producer, if one did."""
        if self.state == ClientTxnState.FATAL_ERROR:
            err = self._error
            if isinstance(err, ProducerFencedError):
                raise ProducerFencedError(f"transactional id {self.transactional_id!r}: this producer was fenced "
                                          f"({err}); close it") from err
            raise ProducerFencedError(f"transactional id {self.transactional_id!r}: this producer can no longer "
                                      f"act for it ({err!r}); close it") from err
