"""The consumer: kafka-python's ``KafkaConsumer`` shape over an in-process store.

A consumer holds a *position* per assigned partition (the next offset to read) and reads from it with
``poll()`` or by iterating. Partitions come from ``assign()`` or from ``subscribe()`` (topics or a regex
pattern; a pattern picks up topics created later). With a ``group_id``, a subscribing consumer is a member
of a consumer group (:mod:`pylog.clients.groups`): the group splits the partitions between its members, and a
position not set yet starts at the group's committed offset. Otherwise, or when nothing was committed, it
is found with ``auto_offset_reset`` ("earliest", "latest" or "none"), and so is a position that retention
or delete-records has since made invalid.

Invariants:
- Positions only move forward by reading, or wherever ``seek*`` puts them; a poll returns, per
  partition, records with strictly increasing offsets starting at the position.
- A poll waiting for data wakes at once on an append in this process and within a few ms on another
  process's append (the partition's condition variable, else a short poll of the log end), and never
  spins.
- Paused partitions are never read; nor are a group member's partitions whose previous owner has not
  let go yet (see :mod:`pylog.clients.groups`: at most one member of a group reads a partition at any time).
- With ``enable_auto_commit``, positions are committed every ``auto_commit_interval_ms`` (during polls),
  before partitions are revoked in a rebalance, and on ``close()``. A member that dies leaves exactly the
  records its polls returned since its last completed commit uncommitted: those, and only those, are
  delivered again to the partitions' next owners.

The options' defaults and checks are :mod:`pylog.clients.consumer_config`'s; iterating (``for record in
consumer``) hands out records through :class:`~pylog.clients.iteration.RecordChain`, which moves the
positions past exactly the records taken.
"""

from __future__ import annotations

import itertools
import re
import time
from types import MappingProxyType

from typing import Any, Callable, Iterable, Iterator, Mapping, Pattern

from .. import metrics
from . import client_metrics
from .consumer_config import DEFAULTS, consumer_config
from ..errors import NoOffsetForPartitionError  # defined here before pylog.errors: still importable from here
from ..errors import (CommitFailedError, InvalidArgumentError, InvalidConfigError, OffsetOutOfRangeError, PylogError,
                     ReadOnlyStoreError,
                     StoreClosedError, UnknownTopicError)
from ..storage.filenames import OFFSETS_TOPIC, is_internal_topic
from .groups import GroupMember
from .offsets import CommittedOffsets, offsets_to_commit, valid_position
from .quotas import CONSUME, QuotaManager
from .storeview import StoreView
from .iteration import RecordChain
from .listener import ConsumerRebalanceListener
from ..storage.records import BatchView, consumer_row_iter, consumer_rows, payload_bytes, slices_count
from ..structs import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from ..partition import Partition, internals, watch_appends


__all__ = ["Consumer", "ConsumerRecord", "ConsumerRebalanceListener", "OffsetAndTimestamp",
           "NoOffsetForPartitionError"]

#: How long one wait on a partition lasts while several are watched (seconds).
_WAIT_STEP = 0.005
#: Longest wait between two looks at the group's state while a member waits for data (seconds): bounds
#: how long a rebalance waits for this member to let go of a partition.
_GROUP_STEP = 0.05
def _topic_partition(tp: Any) -> TopicPartition:
    """``tp`` as a TopicPartition (any ``(topic, partition)`` pair is one). :raises InvalidArgumentError:"""
    if isinstance(tp, TopicPartition):
        return tp
    if isinstance(tp, (tuple, list)) and len(tp) == 2 and isinstance(tp[0], str) and hasattr(tp[1], "__index__"):
        return TopicPartition(*tp)
    raise InvalidArgumentError(f"expected a TopicPartition(topic, partition), got {tp!r}"[:200]
                               + ": pass e.g. [pylog.TopicPartition('orders', 0)]")


_Slice = tuple[BatchView, int, int]  #: (batch, first record, stop): what a partition's read_slices lists


class Consumer:
    """Reads records from a store's partitions; kafka-python's ``KafkaConsumer`` API. Not thread-safe
    (like kafka-python's): use one consumer per thread."""

    #: The options and their defaults (kafka-python's attribute name).
    DEFAULT_CONFIG: Mapping[str, Any] = MappingProxyType(DEFAULTS)

    def __init__(self, store: StoreView, *topics: str, quotas: QuotaManager | None = None,
                 offsets: CommittedOffsets | None = None, **configs: Any) -> None:
        if quotas is None:  # made by hand, not by Store.consumer(): most likely Consumer("topic", group_id=...)
            made_from = f"{type(store).__name__} {store!r}"[:160]
            raise InvalidArgumentError(f"a Consumer is made by its store, not from {made_from}: "
                                       "use pylog.open(path).consumer(*topics, ...)")
        cfg, strategies = consumer_config(configs, store.read_only, store.read_only_reason)
        self.config = cfg
        self._store = store
        #: Partitions whose last read stopped at their last stable offset (read_committed), data after it.
        self._at_lso: set[TopicPartition] = set()
        self._reset = {"smallest": "earliest", "largest": "latest"}.get(cfg["auto_offset_reset"],
                                                                        cfg["auto_offset_reset"])
        self._kdes: Callable[[bytes], Any] | None = cfg["key_deserializer"]
        self._vdes: Callable[[bytes], Any] | None = cfg["value_deserializer"]
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        self._topics: set[str] = set()
        self._pattern: Pattern[str] | None = None
        self._manual = False
        self._last_scan = 0.0
        self._next_rr = 0
        self._gen: Iterator[ConsumerRecord] | None = None  # what next() draws from
        #: The poll chunk an iterator is handing out; its partition's position is brought up to date lazily
        #: (see _settle).
        self._chain = RecordChain()
        self._closed = False
        self._group_id: str | None = cfg["group_id"]
        self._offsets = offsets if self._group_id is not None else None
        self._strategies = strategies
        self._member: GroupMember | None = None  # while subscribed with a group_id
        self._group_topics: list[str] = []  # the subscribed topics that exist, as last told to the group
        self._pending: set[TopicPartition] = set()  # assigned, but the previous owner still holds them
        self._listener: Any = None
        self._in_group_step = False
        self._next_auto_commit = time.monotonic() + cfg["auto_commit_interval_ms"] / 1000
        self._committed_pos: dict[TopicPartition, int] = {}  # what this consumer last committed
        self._quotas = quotas
        self._fetched_bytes = 0  # by the current fetch, counted only while this client has a quota
        self._throttle_total = self._throttle_max = 0.0
        self._throttled_fetches = 0
        self._metrics_label = client_metrics.label(cfg["client_id"])
        metrics.track("consumer", self)  # lag max and lead min, read when scraped
        if topics:
            self.subscribe(topics)

    # ------------------------------------------------------------------ assignment

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Read every partition of ``topics``, or of every topic matching ``pattern`` (checked again every
        ``metadata_max_age_ms`` for new topics). Replaces an earlier subscription."""
        if self._manual:
            raise InvalidConfigError("subscribe() after assign(): call unsubscribe() first")
        topics = [topics] if isinstance(topics, str) else list(topics)
        if bool(topics) == (pattern is not None):
            raise InvalidArgumentError("subscribe() needs topics or a pattern, not both (and not neither)")
        if listener is not None and not (callable(getattr(listener, "on_partitions_revoked", None))
                                         and callable(getattr(listener, "on_partitions_assigned", None))):
            raise InvalidArgumentError("listener needs on_partitions_revoked and on_partitions_assigned methods: "
                                       "subclass pylog.ConsumerRebalanceListener")
        self._topics = set(topics)
        self._pattern = re.compile(pattern) if pattern is not None else None
        self._listener = listener
        if self._group_id is not None and self._member is None:
            if self._store.read_only:
                raise ReadOnlyStoreError(
                    f"group {self._group_id!r}: joining a group writes to the store, and "
                    f"{self._store.read_only_reason}; assign() partitions instead (they start from the group's "
                    "committed offsets), or subscribe without a group_id")
            cfg = self.config
            self._member = GroupMember(self._store, self._group_id, cfg["client_id"] or "pylog", self._strategies,
                                       cfg["session_timeout_ms"], cfg["heartbeat_interval_ms"])
        self._rescan(force=True)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no subscription)."""
        if self._topics or self._pattern is not None:
            raise InvalidConfigError("assign() after subscribe(): call unsubscribe() first")
        parts = [_topic_partition(tp) for tp in partitions]
        for tp in parts:
            self._partition(tp)  # raises for an unknown topic or partition
        self._settle(cut=True)
        self._manual = True
        self._positions = {tp: self._positions.get(tp) for tp in parts}
        self._paused &= set(parts)

    def unsubscribe(self) -> None:
        """Stop reading; a group member commits (with auto-commit) and leaves its group."""
        self._leave_group(autocommit=self.config["enable_auto_commit"])
        self._settle(cut=True)
        self._topics, self._pattern, self._manual = set(), None, False
        self._positions.clear()
        self._paused.clear()

    def assignment(self) -> set[TopicPartition]:
        self._rescan()
        return set(self._positions)

    def pending(self) -> set[TopicPartition]:
        """Partitions of :meth:`assignment` this consumer does not read yet: the previous owner in the group
        still holds them (it finishes its poll, commits and lets go). Empty outside a group."""
        return set(self._pending)

    def subscription(self) -> set[str] | None:
        if self._manual:
            return None
        return set(self._topics) if self._pattern is None else {t for t, _ in self._positions}

    def _rescan(self, force: bool = False, group: bool = False) -> None:
        """Refresh the subscribed topics (every ``metadata_max_age_ms``); with ``group`` (from ``poll()``
        only), also join the group or follow its generations. As in kafka-python, a rebalance is only ever
        processed inside ``poll()``: between a poll and the commit after it, the assignment cannot change
        under the caller."""
        self._settle()
        if self._manual:
            return
        now = time.monotonic()
        if force or now - self._last_scan >= self.config["metadata_max_age_ms"] / 1000:
            self._last_scan = now
            names = [t for t in self._store.topics() if self._pattern.match(t) and t != OFFSETS_TOPIC] \
                if self._pattern is not None else sorted(t for t in self._topics if t in self._store)
            if self._member is None:
                wanted = [TopicPartition(t, i) for t in names for i in range(self._store.topic(t).num_partitions)]
                self._positions = {tp: self._positions.get(tp) for tp in wanted}
            else:
                self._group_topics = names
        if group and self._member is not None:
            self._group_step()

    # ------------------------------------------------------------------ groups

    def _group_step(self) -> None:
        """Join, follow the group's generations and take partitions as their previous owners let go.
        Re-entrant calls (from a rebalance listener) do nothing."""
        member = self._member
        if member is None or self._in_group_step or self._closed:
            return
        self._in_group_step = True
        try:
            if not member.joined:
                member.join(self._group_topics)
            else:
                member.update_subscription(self._group_topics)
            new = member.poll()
            if new is not None:
                self._reassign(new)
            for tp in sorted(self._pending):
                if member.acquire(tp):
                    self._pending.discard(tp)
                    self._positions[tp] = self._committed_position(tp)
        finally:
            self._in_group_step = False

    def _reassign(self, new: list[TopicPartition]) -> None:
        """A new generation: commit, tell the listener, give up what moved away, take what came."""
        assert self._member is not None
        self._settle(cut=True)
        old = set(self._positions)
        if self.config["enable_auto_commit"]:
            self._commit_owned()
        if self._listener is not None:
            self._listener.on_partitions_revoked(old)
        keep = set(new)
        for tp in old - keep:
            self._member.release(tp)
            self._paused.discard(tp)
            self._committed_pos.pop(tp, None)
        self._positions = {tp: self._positions.get(tp) if self._member.owns(tp) else None for tp in new}
        self._pending = {tp for tp in new if not self._member.owns(tp)}
        for tp in sorted(self._pending):
            if self._member.acquire(tp):
                self._pending.discard(tp)
                self._positions[tp] = self._committed_position(tp)
        if self._listener is not None:
            self._listener.on_partitions_assigned(set(new))

    def _committed_position(self, tp: TopicPartition) -> int | None:
        assert self._offsets is not None and self._group_id is not None
        om = valid_position(self._offsets.committed(self._group_id, tp))  # -1/-2 from a Kafka client: reset
        return None if om is None else om.offset

    def _leave_group(self, autocommit: bool) -> None:
        member = self._member
        if member is None:
            return
        self._settle(cut=True)
        try:
            if member.joined:
                if autocommit:
                    self._commit_owned()
                if self._listener is not None:
                    self._listener.on_partitions_revoked(set(self._positions))
        finally:
            member.leave()
            self._member = None
            self._pending.clear()

    def _commit_owned(self) -> None:
        """Commit the positions of the partitions this member owns that moved since its last commit."""
        self._settle()
        offsets = {tp: OffsetAndMetadata(pos, "") for tp, pos in self._positions.items()
                   if pos is not None and tp not in self._pending and self._committed_pos.get(tp) != pos}
        if offsets:
            self.commit(offsets)

    def _maybe_auto_commit(self) -> None:
        if not self.config["enable_auto_commit"] or self._group_id is None or (
                self._member is None and not self._manual):
            return
        now = time.monotonic()
        if now >= self._next_auto_commit:
            self._next_auto_commit = now + self.config["auto_commit_interval_ms"] / 1000
            self._commit_owned()

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit offsets (the next offset to consume per partition) for the group; by default every
        assigned partition's current position. Synchronous: when it returns, another consumer of the
        group sees the commit.

        :raises CommitFailedError: for a partition this group member does not own (any more).
        :raises InvalidConfigError: without a ``group_id``.
        """
        if self._group_id is None or self._offsets is None:
            raise InvalidConfigError("commit() needs a consumer with a group_id")
        if self._store.read_only:
            raise ReadOnlyStoreError(f"group {self._group_id!r}: cannot commit, {self._store.read_only_reason}")
        if offsets is None:
            self._settle()
            offsets = {tp: OffsetAndMetadata(pos, "") for tp, pos in self._positions.items()
                       if pos is not None and tp not in self._pending}
        norm = offsets_to_commit(offsets)
        member = self._member
        if member is not None:
            lost = sorted(tp for tp in norm if not member.owns(tp))
            if lost:
                raise CommitFailedError(f"group {self._group_id!r}: this member does not own {lost} (the group "
                                        "rebalanced them to another member, or they were never assigned here)")
        elif not self._manual:
            raise CommitFailedError(f"group {self._group_id!r}: this consumer is not in the group (subscribe() "
                                    "to join it, or assign() partitions to commit for them)")
        self._offsets.commit(self._group_id, norm, member.generation if member else -1,
                             member.member_id if member else "", timeout_ms=self.config["session_timeout_ms"])
        for tp, om in norm.items():
            self._committed_pos[tp] = om.offset

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's group membership now (kafka-python's and Kafka's ``group_metadata()``): its group id
        (None without one), generation and member id (-1 and ``""`` while it is not a member), for
        ``producer.send_offsets_to_transaction(offsets, consumer.group_metadata())``."""
        member = self._member
        if member is None:
            return ConsumerGroupMetadata(self._group_id)
        return ConsumerGroupMetadata(self._group_id, member.generation, member.member_id)

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: Callable[[Any, Any], None] | None = None) -> None:
        """:meth:`commit`, then ``callback(offsets, error_or_None)`` (a local commit takes well under a
        millisecond, so it is done at once rather than in the background)."""
        try:
            self.commit(offsets)
        except PylogError as exc:
            if callback is None:
                raise
            callback(offsets, exc)
        else:
            if callback is not None:
                callback(offsets, None)

    def committed(self, tp: TopicPartition, metadata: bool = False) -> int | OffsetAndMetadata | None:
        """The group's last committed offset for ``tp`` (with ``metadata``: the :class:`OffsetAndMetadata`),
        None when nothing was committed or the commit is negative (a Kafka client's -1/-2 reset: no position, as
        for Kafka's Java consumer). :raises InvalidConfigError: without a ``group_id``."""
        if self._group_id is None or self._offsets is None:
            raise InvalidConfigError("committed() needs a consumer with a group_id")
        om = valid_position(self._offsets.committed(self._group_id, _topic_partition(tp)))
        if om is None:
            return None
        return om if metadata else om.offset

    def _partition(self, tp: TopicPartition) -> "Partition":
        return self._store.topic(tp.topic).partition(tp.partition)

    # ------------------------------------------------------------------ positions

    def _resolve(self, tp: TopicPartition) -> int:
        pos = self._positions.get(tp)
        if pos is None and self._offsets is not None and self._member is None:
            pos = self._positions[tp] = self._committed_position(tp)  # assign() with a group_id
        if pos is None and tp in self._pending:
            # Not ours yet: where we would start, without fixing it (the previous owner may still commit).
            committed = self._committed_position(tp)
            if committed is not None:
                return committed
            p = self._partition(tp)
            if self._reset == "none":
                raise NoOffsetForPartitionError(f"{tp.topic}-{tp.partition} has no position and "
                                                "auto_offset_reset is 'none'")
            return p.log_start_offset if self._reset == "earliest" else self._end(p)
        if pos is None:
            p = self._partition(tp)
            if self._reset == "none":
                raise NoOffsetForPartitionError(f"{tp.topic}-{tp.partition} has no position and "
                                                "auto_offset_reset is 'none'")
            pos = p.log_start_offset if self._reset == "earliest" else self._end(p)
            self._positions[tp] = pos
        return pos

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will read from ``tp``."""
        self._check_assigned(tp)
        return self._resolve(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_assigned(tp)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidArgumentError(f"offset must be a non-negative int, got {offset!r}: to start from the log's "
                                       "beginning or end use seek_to_beginning()/seek_to_end()")
        self._settle(cut=True)
        self._positions[tp] = offset

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or list(self._positions):
            self.seek(tp, self._partition(tp).log_start_offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or list(self._positions):
            self.seek(tp, self._end(self._partition(tp)))

    def _check_assigned(self, tp: TopicPartition) -> None:
        self._rescan()
        if tp not in self._positions:
            raise InvalidConfigError(f"{tp} is not assigned to this consumer")

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._partition(_topic_partition(tp)).log_start_offset for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's end: its log end offset, or under read_committed its last stable offset (Kafka's)."""
        return {tp: self._end(self._partition(_topic_partition(tp))) for tp in partitions}

    def _end(self, p: Partition) -> int:
        """Where "latest" is for this consumer's isolation level."""
        return p.last_stable_offset if self.config["isolation_level"] == "read_committed" else p.log_end_offset

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is >= the given one (None if none is)."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in timestamps.items():
            p = self._partition(_topic_partition(tp))
            off = p.offset_for_timestamp(ts)
            if off is None:
                out[tp] = None
            else:
                rec = p.read(off, max_records=1)
                out[tp] = OffsetAndTimestamp(off, rec[0].timestamp if rec else ts)
        return out

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._check_assigned(tp)
        self._settle(cut=True)
        self._paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._paused.discard(tp)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    # ------------------------------------------------------------------ reading

    def poll(self, timeout_ms: float = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned, unpaused partitions, at most ``max_records`` (``max_poll_records``);
        waits up to ``timeout_ms`` for some to arrive. Advances the positions past what it returns."""
        return self._poll(timeout_ms, max_records, update_offsets, self._fetch)

    def _poll(self, timeout_ms: float, max_records: int | None, update_offsets: bool,
              fetch: Callable[[int, bool], dict[TopicPartition, Any]]) -> dict[TopicPartition, Any]:
        """:meth:`poll` with records made by ``fetch``: :meth:`_fetch`'s lists or :meth:`_fetch_iters`'."""
        if self._closed:
            raise StoreClosedError("consumer is closed")
        limit = self.config["max_poll_records"] if max_records is None else max_records
        deadline = time.monotonic() + timeout_ms / 1000
        if update_offsets:
            self._settle(cut=True)  # a poll takes over from an iteration in progress
        self._maybe_auto_commit()
        while True:
            out = fetch(limit, update_offsets)
            if out or time.monotonic() >= deadline:
                return out
            self._wait(deadline)

    def _fetch(self, limit: int, update_offsets: bool) -> dict[TopicPartition, list[ConsumerRecord]]:
        # Rows built straight from the batches (in C when accelerated), deserializers applied per item.
        out = {tp: consumer_rows(slices, tp.topic, tp.partition, ConsumerRecord, self._kdes, self._vdes)
               for tp, slices in self._fetch_slices(limit).items()}
        # Positions move only once every read and row succeeded: a poll that raises returns and skips nothing.
        if update_offsets:
            for tp, recs in out.items():
                self._positions[tp] = recs[-1].offset + 1
        return out

    def _fetch_iters(self, limit: int, update_offsets: bool) -> dict[TopicPartition, Any]:
        """Rows for iteration (no position moves): compiled, built as taken (``consumer_row_iter``)."""
        if consumer_row_iter is None:
            return self._fetch(limit, False)
        return {tp: consumer_row_iter(slices, tp.topic, tp.partition, ConsumerRecord, self._kdes, self._vdes)
                for tp, slices in self._fetch_slices(limit).items()}

    def _fetch_slices(self, limit: int) -> dict[TopicPartition, list[_Slice]]:
        """Slices of at most ``limit`` records from the readable partitions (round robin); the quota's delay."""
        self._rescan(group=True)
        parts = [tp for tp in self._positions if tp not in self._paused and tp not in self._pending]
        out: dict[TopicPartition, list[_Slice]] = {}
        if not parts:
            return out
        got = 0
        began = time.perf_counter()
        start = self._next_rr % len(parts)
        self._next_rr += 1
        for tp in parts[start:] + parts[:start]:  # round robin: no partition starves the others
            if got >= limit:
                break
            try:
                slices = self._read(tp, limit - got)
            except UnknownTopicError:
                if self._manual:
                    raise
                self._rescan(force=True)  # a subscribed topic was deleted: forget it
                continue
            if slices:
                out[tp] = slices
                got += slices_count(slices)
        if out and metrics.state.on:  # reads only: rows are built by the caller (as taken, when iterating)
            client_metrics.polled(self._metrics_label, time.perf_counter() - began)
        if self._fetched_bytes:
            # Over a consumer_byte_rate quota: the records wait, as a broker holds back a fetch response.
            delay = self._quotas.throttle(self.config["client_id"], CONSUME, self._fetched_bytes)
            self._fetched_bytes = 0
            self._throttle_total += delay
            self._throttle_max = max(self._throttle_max, delay)
            self._throttled_fetches += 1
        return out

    def _read(self, tp: TopicPartition, limit: int) -> list[_Slice]:
        p = self._partition(tp)
        pos = self._resolve(tp)
        read = internals(p).read_isolated
        level, max_bytes = self.config["isolation_level"], self.config["fetch_max_bytes"]
        try:
            slices, nxt = read(pos, limit, max_bytes, level)
        except OffsetOutOfRangeError:
            if self._reset == "none":
                raise
            # Retention or delete-records removed the position (or it lies past the end): reset it.
            self._positions[tp] = None
            pos = self._resolve(tp)
            slices, nxt = read(pos, limit, max_bytes, level)
        self._at_lso.discard(tp)
        if not slices and nxt > pos:
            self._positions[tp] = nxt  # past transaction markers and aborted records: nothing to return
        elif not slices and level == "read_committed" and nxt < p.log_end_offset:
            self._at_lso.add(tp)
        if slices and self._quotas.active(self.config["client_id"], CONSUME):
            self._fetched_bytes += payload_bytes(slices)
        if slices and metrics.state.on:
            client_metrics.read(self._metrics_label, tp.topic, slices_count(slices), slices)
        return slices

    def _wait(self, deadline: float) -> None:
        """Sleep until data may be there: one sleep over every partition's wake-up word where the kernel
        allows it (see :func:`pylog.partition.watch_appends`), else on one partition at a time, a few ms each."""
        parts = [tp for tp in self._positions if tp not in self._paused and tp not in self._pending]
        remaining = deadline - time.monotonic()
        if self._member is not None:
            remaining = min(remaining, _GROUP_STEP)
        if remaining <= 0:
            return
        if not parts:
            time.sleep(min(remaining, 0.05))
            return
        if self._at_lso.issuperset(parts):
            # Every partition waits for a transaction to end: its data is there already, so the wake-ups
            # below would return at once; look again every few ms instead.
            time.sleep(min(remaining, _WAIT_STEP))
            return
        if len(parts) > 1 and self._wait_many(parts, remaining):
            return
        tp = parts[self._next_rr % len(parts)]
        step = remaining if len(parts) == 1 else min(remaining, _WAIT_STEP)
        self._partition(tp).wait_for_data(self._resolve(tp), step)

    def _wait_many(self, parts: list[TopicPartition], remaining: float) -> bool:
        """One sleep until an append to any of ``parts`` (or a slice passes); False when unavailable."""
        entries = [(self._partition(tp), self._resolve(tp)) for tp in parts]
        with watch_appends([p for p, _ in entries]) as watch:  # before the log ends: no lost wake-up
            if not watch.usable:
                return False
            for i, (p, offset) in enumerate(entries):
                if p.log_end_offset > offset:
                    watch.found(i)
                    return True
            return watch.sleep(remaining)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records as they come, waiting for them; ends after ``consumer_timeout_ms`` without any.

        Hands out each poll's records through a C-level chain of iterators, no Python step per record (the
        polls read ``max_poll_records`` at a time, more while records are taken fast: see
        :data:`~pylog.clients.iteration.CHUNK_SECONDS`):
        compiled, iterators building each row when it is taken (:func:`~pylog.storage.records.consumer_row_iter`:
        the row before is freed, its memory still in cache), else the poll's lists. Positions move as records
        are handed out (any call that reads a position brings it up to date first); a seek, pause, poll,
        reassignment or close cuts the current iterator short, so nothing is lost or repeated.
        """
        self._settle(cut=True)
        cfg = self.config
        return itertools.chain.from_iterable(self._chain.chunks(
            lambda step, limit: self._poll(step, limit, False, self._fetch_iters), lambda: self._positions,
            lambda tp: tp not in self._paused and tp not in self._pending, cfg["consumer_timeout_ms"],
            cfg["max_poll_records"]))

    def _settle(self, cut: bool = False) -> None:
        """Bring the position of the partition being iterated up to date; with ``cut``, end its iterator."""
        self._chain.settle(self._positions, cut)

    def __next__(self) -> ConsumerRecord:
        """The next record, waiting for one; ``StopIteration`` after ``consumer_timeout_ms`` without any."""
        if self._gen is None:
            self._gen = self.__iter__()
        try:
            return next(self._gen)
        except StopIteration:
            self._gen = None  # the next call waits again, as kafka-python's does
            raise

    # ------------------------------------------------------------------ the rest

    def topics(self) -> set[str]:
        """The store's topics this consumer may read (kafka-python: the topics the user is authorised for);
        pylog's internal topics are left out."""
        return {t for t in self._store.topics() if not is_internal_topic(t)}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``; None when the store has no such topic (as kafka-python)."""
        if topic not in self._store:
            return None
        return set(range(self._store.topic(topic).num_partitions))

    def highwater(self, partition: TopicPartition) -> int:
        """The log end offset of an assigned ``partition`` (kafka-python's high watermark: the offset the
        next record appended will get; every record below it is readable). Read from the log now, so
        unlike kafka-python's it is never None. :raises InvalidConfigError: when it is not assigned."""
        tp = _topic_partition(partition)
        self._check_assigned(tp)
        return self._partition(tp).log_end_offset

    def bootstrap_connected(self) -> bool:
        """True while this consumer and its store are open (kafka-python: connected to a broker)."""
        return not self._closed and not self._store.closed

    def metrics(self, raw: bool = False) -> dict[str, Any]:
        """kafka-python's shape, ``{group: {metric: value}}``. Groups:
        ``"consumer-fetch-manager-metrics"``: ``records-lag-max`` (the largest lag over the assigned
        partitions, ``None`` before any has a position), ``fetch-throttle-time-avg`` / ``-max`` (ms
        fetches were held back by a ``consumer_byte_rate`` quota); ``"consumer-coordinator-metrics"``:
        ``assigned-partitions``; and one per assigned partition (key ``"<topic>-<partition>"``): position,
        committed offset (with a group), log start and end offsets, lag (end - position: records this
        consumer has still to read), lead (position - start: records retention may remove before this
        consumer falls behind the log start) and ``owned``. ``raw`` is accepted for kafka-python's
        signature and changes nothing (these are the values themselves)."""
        del raw
        fetch: dict[str, Any] = {
            "fetch-throttle-time-avg": 1000 * self._throttle_total / max(1, self._throttled_fetches),
            "fetch-throttle-time-max": 1000 * self._throttle_max}
        out: dict[str, Any] = {"consumer-fetch-manager-metrics": fetch}
        lags = []
        for tp in sorted(self.assignment()):
            p = self._partition(tp)
            pos = self._positions.get(tp)
            start, end = p.log_start_offset, p.log_end_offset
            out[f"{tp.topic}-{tp.partition}"] = {
                "position": pos, "committed": self._committed_position(tp) if self._offsets is not None else None,
                "log_start_offset": start, "log_end_offset": end,
                "lag": None if pos is None else end - pos, "lead": None if pos is None else pos - start,
                "owned": tp not in self._pending}
            if pos is not None:
                lags.append(end - pos)
        fetch["records-lag-max"] = max(lags) if lags else None
        out["consumer-coordinator-metrics"] = {"assigned-partitions": len(self._positions)}
        return out

    def close(self, autocommit: bool = True) -> None:
        """Stop the consumer. A group member commits its positions first (with ``autocommit`` and
        ``enable_auto_commit``), calls the listener's revoke callback and leaves the group, so the others
        rebalance at once."""
        if self._closed:
            return
        try:
            self._leave_group(autocommit=autocommit and self.config["enable_auto_commit"])
        finally:
            self._settle(cut=True)
            self._closed = True
            self._gen = None

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def group_member(consumer: Consumer) -> GroupMember | None:
    """Internal API (not :class:`Consumer`'s): ``consumer``'s membership in its group while it is subscribed
    with a ``group_id`` (else None), for tools and tests (its ``member_id``, whether it ``owns()`` a
    partition now)."""
    return consumer._member
