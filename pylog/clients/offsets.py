"""Committed offsets without a server: a group's commits as records of the internal ``__consumer_offsets`` topic.

:class:`CommittedOffsets` is a store's access to that topic (the store makes one and hands it to its
consumers); :func:`offset_key`, :func:`offset_value` and :func:`decode_commit` are the records' layout
(docs/FORMAT.md, "Committed offsets"), which ``pylog serve``'s OffsetCommit writes too.

Invariants:
- Committed offsets are ordinary records of ``__consumer_offsets``, appended by whichever process commits
  (it holds the partition's writer lock for that append only, a turn of a shared partition) and read back
  by tailing the partition, so they are as crash-safe as any log data and compaction keeps the topic short.
- A group's commits all go to one partition of the topic (CRC-32C of the group id), so one group's
  commits are read in the order they were appended and the latest commit of a key wins.
- A record of the topic is data from disk like any other: one that is not a well-formed commit (types
  checked exactly, offsets and partitions in range) is skipped and counted, never raised nor taken as one.
- Looking offsets up never creates the topic: only a commit does.
- A transaction's commits (:meth:`CommittedOffsets.commit` with ``producer``: transactional records of the
  producer, docs/ARCHITECTURE.md "Transactions") count once the transaction's commit marker is in the
  partition and never after an abort marker; until then they wait in a per-producer table, while other commits
  count at once (as Kafka's group coordinator keeps pending transactional offsets apart).
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from typing import Any, Iterable, Mapping

import msgpack

from ..errors import CorruptRecordError, InvalidArgumentError, PartitionLockedError
from ..storage.fileio import in_range
from ..storage.filenames import OFFSETS_TOPIC
from ..partition import Partition, internals
from ..storage.records import Record, crc32c
from ..storage.txn_index import parse_marker
from ..topic import Topic
from ..structs import OffsetAndMetadata, TopicPartition
from .storeview import CreateInternalTopic, StoreView, internal_topic

__all__ = ["CommittedOffsets", "offset_key", "offset_value", "decode_commit", "valid_position", "offsets_to_commit"]

log = logging.getLogger("pylog.groups")  # logger names are what operators filter on: unchanged by the split

#: The first element of every commit's key and value (layouts in docs/FORMAT.md).
_COMMIT_VERSION = 1
_OFFSET_MAX = (1 << 63) - 1
#: Kafka stores any int64 a client commits: kafkajs commits -1 and -2 (its "latest"/"earliest" markers) to reset a
#: group and relies on reading them back. A negative commit is no position (see :func:`valid_position`).
_OFFSET_MIN = -(1 << 63)
_PARTITION_MAX = (1 << 31) - 1
_EPOCH_MAX = (1 << 31) - 1


def offset_key(group: str, tp: TopicPartition) -> bytes:
    """The key of ``group``'s commit for ``tp`` in the offsets topic (read back by :func:`decode_commit`)."""
    return msgpack.packb([_COMMIT_VERSION, group, tp.topic, tp.partition], use_bin_type=True)


def offset_value(om: OffsetAndMetadata, generation: int, member_id: str) -> bytes:
    """The value of a commit of ``om`` in the offsets topic, stamped now (read back by :func:`decode_commit`)."""
    return msgpack.packb([_COMMIT_VERSION, om.offset, om.metadata, int(time.time() * 1000), generation, member_id,
                          om.leader_epoch], use_bin_type=True)


def decode_commit(key: bytes | None,
                   value: bytes | None) -> tuple[tuple[str, str, int], OffsetAndMetadata | None] | None:
    """(group, topic, partition) and the commit (None: a tombstone), or None for a record that is not one.

    Types are checked exactly (msgpack decodes ``true`` as a bool, which ``isinstance(.., int)`` accepts) and
    offsets and partitions must be in range: a record of the offsets topic is data from disk like any other.
    """
    try:
        k = msgpack.unpackb(key, raw=False) if key is not None else None
        if not (type(k) is list and len(k) == 4 and k[0] == _COMMIT_VERSION and type(k[1]) is str
                and type(k[2]) is str and in_range(k[3], _PARTITION_MAX)):
            return None
        if value is None:
            return (k[1], k[2], k[3]), None
        v = msgpack.unpackb(value, raw=False)
        if not (type(v) is list and len(v) >= 3 and v[0] == _COMMIT_VERSION
                and in_range(v[1], _OFFSET_MAX, _OFFSET_MIN) and type(v[2]) is str):
            return None
        # The leader epoch (7th element) is optional: commits written before it was kept have 6 elements.
        epoch = v[6] if len(v) >= 7 and in_range(v[6], _EPOCH_MAX, -1) else -1
        return (k[1], k[2], k[3]), OffsetAndMetadata(v[1], v[2], epoch)
    except (ValueError, TypeError, OverflowError, RecursionError, msgpack.UnpackException):
        return None


def offsets_to_commit(offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    """What an application asks to commit (``consumer.commit(offsets)``, ``send_offsets_to_transaction``) as
    checked commits: keys are ``(topic, partition)`` pairs, values an offset or an ``OffsetAndMetadata``, pylog's
    or any object with its fields (kafka-python's ``kafka.structs.OffsetAndMetadata``, ported code passes it).

    :raises InvalidArgumentError: for anything else, a negative offset or metadata that is not a str (never
        a commit of garbage)."""
    if not isinstance(offsets, Mapping):
        raise InvalidArgumentError(f"offsets to commit must be a mapping {{TopicPartition: OffsetAndMetadata}}, "
                                   f"got {type(offsets).__name__}")
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, om in offsets.items():
        partition = _int_of(tp[1]) if isinstance(tp, (tuple, list)) and len(tp) == 2 else None
        if not (isinstance(tp[0], str) and partition is not None and 0 <= partition <= _PARTITION_MAX):
            raise InvalidArgumentError(f"expected a TopicPartition(topic, partition), got {tp!r}"[:200]
                                       + ": pass e.g. {pylog.TopicPartition('orders', 0): OffsetAndMetadata(5, '')}")
        if not isinstance(om, OffsetAndMetadata) and hasattr(om, "offset"):  # another library's OffsetAndMetadata
            epoch = getattr(om, "leader_epoch", -1)
            om = OffsetAndMetadata(om.offset, getattr(om, "metadata", ""), -1 if epoch is None else epoch)
        elif not isinstance(om, OffsetAndMetadata):
            om = OffsetAndMetadata(om, "")
        offset = _int_of(om.offset)
        if offset is None or not 0 <= offset <= _OFFSET_MAX:
            raise InvalidArgumentError(f"offset to commit must be a non-negative int, got {om.offset!r}"[:200])
        if not isinstance(om.metadata, str):
            raise InvalidArgumentError(f"commit metadata must be a str, got {type(om.metadata).__name__}")
        if type(om.leader_epoch) is not int or not -1 <= om.leader_epoch <= _EPOCH_MAX:
            raise InvalidArgumentError(f"leader_epoch must be an int in -1..{_EPOCH_MAX}, got {om.leader_epoch!r}")
        out[TopicPartition(tp[0], partition)] = om._replace(offset=offset)
    return out


def _int_of(value: Any) -> int | None:
    """``value`` as a plain int when it is an integer (numpy's too), not a bool; else None."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        return None
    return operator.index(value)


def valid_position(om: OffsetAndMetadata | None) -> OffsetAndMetadata | None:
    """``om`` when it is a position to consume from, else None: a negative commit (Kafka clients commit -1 and
    -2 to reset a group, and Kafka stores and returns any int64) is no valid position, as for Kafka's Java
    consumer, which then applies ``auto.offset.reset``."""
    return om if om is not None and om.offset >= 0 else None


class CommittedOffsets:
    """A store's access to ``__consumer_offsets``: append commits, look them up. Thread-safe.

    Each partition of the topic is read incrementally: the records after the last one seen are folded into
    an in-memory table (group, topic, partition) -> latest commit, so a lookup costs only the commits made
    since the previous one.
    """

    def __init__(self, store: StoreView, create_internal_topic: CreateInternalTopic) -> None:
        """``create_internal_topic(name, partitions, config)``: the store's way of creating ``__consumer_offsets``
        (an internal topic, which its public ``create_topic`` refuses)."""
        self._store = store
        self._create_internal_topic = create_internal_topic
        self._lock = threading.Lock()
        self._topic: Topic | None = None
        #: offsets partition -> (next offset to read, {(group, topic, partition): commit},
        #: {producer id: its open transaction's commits, None for a removal})
        self._tables: dict[int, tuple[int, dict[tuple[str, str, int], OffsetAndMetadata],
                                      dict[int, dict[tuple[str, str, int], OffsetAndMetadata | None]]]] = {}
        self._bad_records = 0

    def topic(self) -> "Topic":
        """The offsets topic, created (compacted, with the store's offsets settings) on first use."""
        if self._topic is None:
            self._topic = internal_topic(self._store, self._create_internal_topic, OFFSETS_TOPIC, "offsets.topic")
        return self._topic

    def partition_for(self, group_id: str) -> "Partition":
        t = self.topic()
        return t.partition(crc32c(group_id.encode("utf-8", "surrogatepass")) % t.num_partitions)

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], generation: int = -1,
               member_id: str = "", timeout_ms: float = 30_000, producer: tuple[int, int] | None = None) -> None:
        """Append ``offsets`` for ``group_id`` (one batch) and hand the partition's writer lock back.

        ``producer`` (``(producer id, epoch)``, the transaction coordinator's TxnOffsetCommit): the offsets
        belong to that producer's open transaction; lookups see them once its commit marker is written, never
        after an abort. The caller holds the transactional id's coordinator lock, so nobody else appends for
        that producer meanwhile (its sequence is the partition's next for it).

        :raises PartitionLockedError: when another writer held the partition for ``timeout_ms``.
        :raises ProducerFencedError: a ``producer`` epoch older than one the partition saw.
        """
        if not offsets:
            return
        keys = [offset_key(group_id, tp) for tp in offsets]
        values = [offset_value(om, generation, member_id) for om in offsets.values()]
        p = self.partition_for(group_id)
        with internals(p).writer_turn():
            try:
                p.wait_to_write(timeout_ms)
            except PartitionLockedError:
                raise PartitionLockedError(f"could not commit for group {group_id!r}: {p.topic}-{p.number} "
                                           f"stayed locked by another writer for {timeout_ms} ms") from None
            try:
                if producer is None:
                    p.append_values(values, keys)
                else:
                    seq = internals(p).next_sequence(*producer)
                    p.append_values(values, keys, producer=(*producer, seq), transactional=True)
            finally:
                p.release_writer()

    def delete(self, group_id: str, partitions: Iterable[TopicPartition] | None = None) -> int:
        """Tombstone every committed offset of ``group_id`` (``partitions`` None), or only those of the
        partitions given (ones without a commit are skipped); returns how many were tombstoned."""
        committed = self.fetch(group_id)
        if partitions is not None:
            wanted = {TopicPartition(*tp) for tp in partitions}
            committed = {tp: om for tp, om in committed.items() if tp in wanted}
        if committed:
            p = self.partition_for(group_id)
            keys = [offset_key(group_id, tp) for tp in committed]
            with internals(p).writer_turn():
                if not p.try_become_writer():
                    raise PartitionLockedError(f"{p.topic}-{p.number} is being written; try again")
                try:
                    p.append_values([None] * len(keys), keys)
                finally:
                    p.release_writer()
        return len(committed)

    def _table(self, number: int) -> dict[tuple[str, str, int], OffsetAndMetadata]:
        p = self.topic().partition(number)
        with self._lock:
            pos, table, pending = self._tables.get(number, (0, {}, {}))
            pos = max(pos, p.log_start_offset)
            while pos < p.log_end_offset:
                slices = internals(p).read_with_markers(pos, 65_536, 16 << 20)
                if not slices:
                    break
                for view, a, b in slices:
                    h = view.header
                    recs = view.records(None, -1, a, b)
                    if h.is_control:
                        self._end_txn(p, table, pending.pop(h.producer_id, None), recs)
                    elif h.is_transactional:
                        self._fold(p, pending.setdefault(h.producer_id, {}), recs, pending=True)
                    else:
                        self._fold(p, table, recs)
                    pos = h.next_offset if b >= h.record_count or not recs else recs[-1].offset + 1
            self._tables[number] = (pos, table, pending)
            return table

    def _fold(self, p: Partition, table: dict[tuple[str, str, int], Any], records: Iterable[Record],
              pending: bool = False) -> None:
        """Fold commits into ``table``: a tombstone removes its key, or in a transaction's ``pending`` table
        is kept as None (a removal the commit marker applies)."""
        for rec in records:
            got = decode_commit(rec.key, rec.value)
            if got is None:
                self._bad_records += 1
                if self._bad_records == 1:
                    log.warning("%s: skipping records that are not offset commits", p.directory)
            elif got[1] is None and not pending:
                table.pop(got[0], None)
            else:
                table[got[0]] = got[1]

    def _end_txn(self, p: Partition, table: dict[tuple[str, str, int], OffsetAndMetadata],
                 pending: dict[tuple[str, str, int], OffsetAndMetadata | None] | None, records: list[Record]) -> None:
        """A marker: a commit applies the producer's pending commits to ``table``, an abort drops them."""
        if not pending:
            return
        try:
            commit = parse_marker(records[0].key, records[0].value)[0] if records else False
        except CorruptRecordError as exc:
            log.warning("%s: a control batch that is no transaction marker (%s): its transaction's offsets "
                        "are dropped", p.directory, exc)
            commit = False
        if commit:
            for key, om in pending.items():
                if om is None:
                    table.pop(key, None)
                else:
                    table[key] = om

    def _exists(self) -> bool:
        """Whether the offsets topic exists: looking up offsets never creates it (only a commit does)."""
        return self._topic is not None or OFFSETS_TOPIC in self._store

    def fetch(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of ``group_id``, as of now (including other processes' commits)."""
        if not self._exists():
            return {}
        table = self._table(self.partition_for(group_id).number)
        return {TopicPartition(t, p): om for (g, t, p), om in table.items() if g == group_id}

    def pending(self, group_id: str) -> set[TopicPartition]:
        """The partitions of ``group_id`` with offsets in a transaction not ended yet (no marker in the
        partition): what a committed-offset lookup will change once the transaction commits (Kafka's
        UNSTABLE_OFFSET_COMMIT for an OffsetFetch with ``require_stable``)."""
        if not self._exists():
            return set()
        number = self.partition_for(group_id).number
        self._table(number)
        with self._lock:
            waiting = self._tables[number][2]
            return {TopicPartition(t, p) for offsets in waiting.values() for g, t, p in offsets if g == group_id}

    def committed(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        if not self._exists():
            return None
        table = self._table(self.partition_for(group_id).number)
        return table.get((group_id, tp.topic, tp.partition))

    def groups(self) -> set[str]:
        """Groups with at least one committed offset."""
        if not self._exists():
            return set()
        out: set[str] = set()
        for i in range(self.topic().num_partitions):
            out.update(g for g, _, _ in self._table(i))
        return out
