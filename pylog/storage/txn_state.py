"""The transaction coordinator's state records: what ``__transaction_state`` holds for each transactional id.

One record per state transition of a transactional id (docs/FORMAT.md, "Transaction state"): the key names the
id, the value is the id's whole state after the transition, so the latest record of a key is the id's state
and compaction keeps only it. Key: msgpack ``[1, transactional id]``. Value: magic ``PLTX``, one version
byte (1), a msgpack array (below), then the CRC-32C of everything before it (uint32 LE)::

    [producer id, producer epoch, transaction timeout ms, state, [[topic, partition], ...], [group id, ...],
     transaction start ms, last update ms, coordinator epoch]

Invariants:
- A record that does not decode to exactly this shape, every field typed and in range (a bool is no int), is
  :class:`~pylog.errors.CorruptRecordError`, never a state.
- ``partitions`` and ``groups`` are written sorted, so one state has one encoding (the golden files hold it).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ..errors import CorruptRecordError
from ..structs import TopicPartition
from .fileio import in_range
from .records import crc32c

__all__ = ["TxnState", "TransactionMetadata", "state_key", "state_value", "decode_state", "STATE_MAGIC",
           "MAX_EPOCH"]

STATE_MAGIC = b"PLTX"
_VERSION = 1
_KEY_VERSION = 1
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
#: The largest producer epoch (an int16 in every batch header); a bump past it takes a new producer id.
MAX_EPOCH = 0x7FFF
#: Most partitions (and groups) one transaction may hold: bounds what a damaged record can make us build.
MAX_MEMBERS = 1 << 20


class TxnState(enum.IntEnum):
    """A transactional id's state, with Kafka's numbers (``TransactionState`` ids)."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the state, as DescribeTransactions and ListTransactions return it ("Ongoing")."""
        return "".join(w.capitalize() for w in self.name.split("_"))


@dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id's state as the coordinator keeps it (immutable: a transition makes a new one).

    ``start_ms`` is when the open transaction began (its first partition or group was added), -1 when none
    is open; ``update_ms`` the time of the last transition; ``coordinator_epoch`` the one written into the
    id's last markers (-1 before any)."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    start_ms: int = -1
    update_ms: int = -1
    coordinator_epoch: int = -1

    @property
    def open(self) -> bool:
        """Whether a transaction is open or being ended (Ongoing or Prepare*)."""
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT,
                              TxnState.PREPARE_EPOCH_FENCE)


def state_key(transactional_id: str) -> bytes:
    """The record key of ``transactional_id``'s state."""
    return msgpack.packb([_KEY_VERSION, transactional_id], use_bin_type=True)


def state_value(meta: TransactionMetadata) -> bytes:
    """The record value of ``meta`` (see the module docstring)."""
    doc = [meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state),
           [[tp.topic, tp.partition] for tp in sorted(meta.partitions)], sorted(meta.groups),
           meta.start_ms, meta.update_ms, meta.coordinator_epoch]
    body = STATE_MAGIC + bytes([_VERSION]) + msgpack.packb(doc, use_bin_type=True)
    return body + struct.pack("<I", crc32c(body))


def _decode_key(key: bytes | None, where: str) -> str:
    try:
        k = msgpack.unpackb(key, raw=False) if key is not None else None
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException):
        k = None
    if not (type(k) is list and len(k) == 2 and k[0] == _KEY_VERSION and type(k[1]) is str and k[1]):
        raise CorruptRecordError("not a transaction state key", where, 0)
    return k[1]


def decode_state(key: bytes | None, value: bytes | None, where: str = "__transaction_state") -> \
        tuple[str, TransactionMetadata | None]:
    """``(transactional id, state)`` of a record of ``__transaction_state``; the state is None for a tombstone.

    :raises CorruptRecordError: for anything that is not such a record (``where`` names the partition)."""
    tid = _decode_key(key, where)
    if value is None:
        return tid, None
    if len(value) < 9 or value[:4] != STATE_MAGIC:
        raise CorruptRecordError("transaction state: bad magic", where, 0)
    if value[4] != _VERSION:
        raise CorruptRecordError(f"transaction state: version {value[4]} is not supported", where, 4)
    if struct.unpack_from("<I", value, len(value) - 4)[0] != crc32c(value[:-4]):
        raise CorruptRecordError("transaction state: checksum mismatch", where, 0)
    try:
        return tid, _metadata(tid, msgpack.unpackb(value[5:-4], raw=False))
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException) as exc:
        raise CorruptRecordError(f"transaction state does not decode: {exc!r}"[:200], where, 5) from None


def _metadata(tid: str, doc: Any) -> TransactionMetadata:
    if type(doc) is not list or len(doc) != 9:
        raise ValueError("not a state document")
    pid, epoch, timeout, state, parts, groups, start, update, cepoch = doc
    if not (in_range(pid, _INT64_MAX) and in_range(epoch, MAX_EPOCH) and in_range(timeout, _INT32_MAX, 1)
            and in_range(state, max(TxnState)) and in_range(start, _INT64_MAX, -1)
            and in_range(update, _INT64_MAX, -1) and in_range(cepoch, _INT32_MAX, -1)):
        raise ValueError("a field is out of range")
    if type(parts) is not list or type(groups) is not list or len(parts) + len(groups) > MAX_MEMBERS:
        raise ValueError("partitions and groups must be lists")
    tps = []
    for item in parts:
        if not (type(item) is list and len(item) == 2 and type(item[0]) is str and in_range(item[1], _INT32_MAX)):
            raise ValueError("not a [topic, partition] pair")
        tps.append(TopicPartition(item[0], item[1]))
    if not all(type(g) is str and g for g in groups):
        raise ValueError("a group id is not a non-empty str")
    return TransactionMetadata(tid, pid, epoch, timeout, TxnState(state), frozenset(tps), frozenset(groups),
                               start, update, cepoch)
