"""The store: one directory of topics. ``pylog.open(path)`` returns a :class:`Store`.

Invariants:
- A directory is a store when it holds ``pylog.store`` (format, version, CRC); opening creates it.
- A store opened with ``read_only=True`` creates, locks, maps for writing and changes nothing under its
  directory, and runs no thread: it only reads (any writing call raises ReadOnlyStoreError at once).
- Topic names follow Kafka's rule minus pylog's own root entries (pylog/storage/filenames.py), so a topic
  directory never escapes the store nor takes the place of the marker, the producer id file, a deletion
  leftover or an internal directory. Internal (``__``) topics can be read but not created, deleted or
  altered through this API. A legacy topic (a name earlier versions allowed, see
  :func:`pylog.storage.filenames.legacy_topic_name`) that exists is used like any other; none is created.
- Any number of stores may be open on one directory, in one or many processes; each partition has one
  writer at a time (the first handle to write takes its lock), readers need no lock.
- Closing the store flushes and cleanly closes every partition it wrote to, so the next open need not
  re-validate anything.
- The store's partitions hold at most about ``max.open.descriptors`` file descriptors
  (:mod:`pylog.storage.handles`): those used least recently let go of their files, a writer handing its
  lock over as between producers' turns, and open them again on their next use.

The directory's rules (the store's path, its marker, which names are topics, the leftovers of deletions) are
:mod:`pylog.storage.store_dir`'s; the store as an auto-creating producer sees it is
:class:`~pylog.clients.storeview.AutoCreatingStore` (re-exported here, where :mod:`pylog.kafka` takes it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from .clients.consumer import Consumer
from .clients.groups import GroupDescription, PartitionLag, describe_group, list_group_dirs, remove_group_dir
from .clients.offsets import CommittedOffsets
from .clients.producer import Producer
from .clients.transactions import (ProducerIdAndEpoch, TimeoutSweeper, TransactionCoordinator, TransactionMetadata,
                                   TxnState)
from .clients.txn_log import STATE_FLUSH_KEYS, TransactionLog
from .clients.quotas import CONSUME, PRODUCE, QuotaManager
from .clients.storeview import AutoCreatingStore, StoreView
from .config import TopicConfig, split_store_options, stored_config
from .errors import (CorruptRecordError, PartitionLockedError,
                     ReadOnlyStoreError, RebalanceInProgressError, StoreClosedError, TopicExistsError,
                     UnknownTopicError)
from .storage.acl_file import MAX_ACLS, AclEntry, read_acls, write_acls
from .storage.acl_file import check_entry as check_acl_entry
from .storage.group_state import SavedGroup, SavedMember, encode_groups, read_groups, write_groups
from .storage.quota_file import QuotaChanges, read_quota_changes, write_quota_changes
from .storage.fileio import fsync_dir, write_faults
from .storage.counter import take_next
from .storage.group_commit import DEFAULT_SYNCFS_PARTITIONS, GroupCommit
from .storage import group_commit
from .storage.handles import HandleCache
from .storage.filenames import (OFFSETS_TOPIC, PRODUCER_IDS_FILE, TOPIC_FILE, TRANSACTION_STATE_TOPIC,
                                check_group_id, deleting_name, is_internal_topic, refuse_bucket_path,
                                topic_name_problem)
from .storage.store_dir import (check_marker, check_not_internal, check_store_path, holds_topic, is_store,
                                no_topic_hint, remove_leftovers, topic_dir, topic_names)
from .maintenance.cleaner import Cleaner
from .maintenance.cleaner_status import CleanerStatus
from .maintenance.cleaner_registry import CleanerPublisher, PublishedCleaner, published_cleaners
from .maintenance.compaction import CleanResult, clean_partition, cleanable_range
from .maintenance.remote_upload import RemoteUploader, check_location
from .storage.remote import RemoteLog
from .partition import Partition, internals
from .storage.retention import RetentionResult
from .structs import OffsetAndMetadata, TopicPartition
from .topic import Topic, call_each, check_partition_count, opened_partitions, read_topic_file, write_topic_file


#: Besides Store and open, what pylog serve and Spark take from here (they never import pylog.storage): the naming
#: rules of topics and groups, the types of the ACL and coordinator-group methods, the group commit's default
#: (docs/ARCHITECTURE.md).
__all__ = ["Store", "open", "is_store", "is_internal_topic", "topic_name_problem", "check_group_id", "OFFSETS_TOPIC",
           "AclEntry", "MAX_ACLS", "check_acl_entry", "SavedGroup", "SavedMember", "DEFAULT_SYNCFS_PARTITIONS",
           "transaction_coordinator", "TransactionCoordinator", "TransactionMetadata", "TxnState",
           "ProducerIdAndEpoch", "TRANSACTION_STATE_TOPIC"]

_T = TypeVar("_T")
log = logging.getLogger("pylog.store")



class Store:
    """A directory of topics. Use as a context manager, or call :meth:`close`. Thread-safe.

    ``read_only`` and ``create``: see :func:`open`."""

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False, create: bool = True,
                 **options: Any) -> None:
        self.path = os.path.abspath(refuse_bucket_path(os.fspath(path)))  # never a directory named "s3:"
        self._create = bool(create) and not read_only
        self._defaults, self._settings = split_store_options(options)
        #: Opened with ``read_only=True``: reads only; every writing call raises ReadOnlyStoreError.
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._topics: dict[str, Topic] = {}
        self._closed = False
        #: Committed offsets and the transaction coordinator (cheap to make: they touch no file until used).
        self._offsets = CommittedOffsets(self, self._create_internal_topic)
        self._txn_log = TransactionLog(self, self._create_internal_topic)
        self._transactions = TransactionCoordinator(self, self._txn_log, self._offsets,
                                                    lock_wait_ms=max(30_000, self._settings["lock.timeout.ms"]))
        #: One budget per client id and kind, shared by every producer and consumer of this store object.
        self._quotas = QuotaManager()
        #: The partitions holding files, within ``max.open.descriptors`` (see pylog.storage.handles).
        self.handles = HandleCache(self._settings["max.open.descriptors"])
        if self.read_only:
            self._settings["log.cleaner.enable"] = False  # no thread, no status files
            check_marker(self.path, self.read_only, self._create)
        else:
            check_store_path(self.path)
            with write_faults(f"opening the store {self.path}", "it was not opened (nor created, if it was new)"):
                if self._create:
                    os.makedirs(self.path, exist_ok=True)
                check_marker(self.path, self.read_only, self._create)
            remove_leftovers(self.path)
        self._publisher = self._new_publisher() if self._settings["log.cleaner.enable"] else None
        self._cleaner = Cleaner(self.path, self._open_partitions, self._settings, self._publisher)
        # Tiered storage: idle without a remote.storage.location, no thread when read-only (remote reads only).
        self._uploader = RemoteUploader(self.path, self._open_partitions, self._settings, self._cleaner.add_upload,
                                        lambda: {g: self.committed_offsets(g) for g in self.consumer_groups()})
        self._cleaner.start()
        # Every process with the store open for writing aborts timed-out transactions (docs/ARCHITECTURE.md).
        self._sweeper = TimeoutSweeper(self._transactions, self._txn_log,
                                       self._settings["transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        if not self.read_only:
            self._uploader.start()
            if self._settings["log.cleaner.enable"]:
                self._txn_log.keep_turns = True  # the sweeper thread hands the state partitions over
                self._sweeper.start()

    def _new_publisher(self) -> CleanerPublisher | None:
        try:
            return CleanerPublisher(self.path)
        except OSError as exc:  # e.g. a read-only store: it works, only its cleaner is invisible from outside
            logging.getLogger("pylog.cleaner").warning("pylog: cannot publish the cleaner status of %s: %s",
                                                       self.path, exc)
            return None

    def _open_partitions(self) -> Iterator[Partition]:
        """The partitions opened through this store so far (a snapshot; for the background thread)."""
        for t in list(self._topics.values()):
            yield from opened_partitions(t)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")

    def _check_writable(self, doing: str) -> None:
        """Refuse a writing call at once, before it touches anything, on a read-only handle."""
        self._check_open()
        if self.read_only:
            raise ReadOnlyStoreError(f"cannot {doing}: {self.read_only_reason}, which never writes; "
                                     f"{self.read_only_remedy}")

    @property
    def read_only_reason(self) -> str:
        """What makes this store read-only, for messages ("the store DIR was opened with read_only=True")."""
        return f"the store {self.path} was opened with read_only=True"

    @property
    def read_only_remedy(self) -> str:
        """What to do instead of a write this store refuses, for messages."""
        return "open it without read_only (on writable storage) to do that"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every later call raises StoreClosedError)."""
        return self._closed

    @property
    def defaults(self) -> dict[str, Any]:
        """Store-wide topic config defaults given to :func:`open`."""
        return dict(self._defaults)

    @property
    def settings(self) -> dict[str, Any]:
        """Store-level settings (``lock.timeout.ms``, ``log.retention.check.interval.ms``)."""
        return dict(self._settings)

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                     *, _internal: bool = False) -> Topic:
        """Create a topic. :raises TopicExistsError, InvalidTopicError, InvalidConfigError:
        :raises ReadOnlyStoreError, DiskFullError: when the store cannot be written (no topic was created)."""
        self._check_writable(f"create topic {name!r}")
        directory = topic_dir(self.path, name, internal_ok=_internal)
        check_partition_count(partitions)
        cfg = TopicConfig(config, self._defaults)
        check_location(cfg, self._settings)
        with self._lock:
            if os.path.exists(os.path.join(directory, TOPIC_FILE)):
                raise TopicExistsError(f"topic {name!r} already exists")
            # The topic exists once topic.json does (written last): a failure before leaves none.
            with write_faults(f"creating topic {name!r}", "the topic was not created"):
                for i in range(partitions):
                    os.makedirs(os.path.join(directory, str(i)), exist_ok=True)
                write_topic_file(directory, name, partitions, cfg.overrides)
                fsync_dir(self.path)
            topic = Topic(name, directory, cfg, partitions, self._settings["lock.timeout.ms"], handles=self.handles,
                          remote=self._uploader.remote_logs)
            self._topics[name] = topic
            return topic

    def upload_to_remote(self) -> None:
        """One pass of tiered storage's upload thread now, in this thread; errors go to ``cleaner_status()``."""
        self._check_writable("upload to remote storage")
        self._uploader.run_pass()

    def remote_log(self, topic: str, partition: int) -> RemoteLog:
        """The :class:`~pylog.storage.remote.RemoteLog` of a partition in ``remote.storage.location``."""
        self._check_open()
        return self._uploader.remote_log(topic, partition)

    def topic(self, name: str) -> Topic:
        """The named topic. :raises UnknownTopicError:"""
        self._check_open()
        t = self._topics.get(name)
        if t is not None:
            return t
        directory = topic_dir(self.path, name)
        with self._lock:
            t = self._topics.get(name)
            if t is None:
                try:
                    doc = read_topic_file(directory)
                except UnknownTopicError:
                    raise UnknownTopicError(no_topic_hint(self.path, name)) from None
                cfg = TopicConfig(stored_config(doc["config"], os.path.join(directory, TOPIC_FILE)),
                                  self._defaults)
                t = Topic(name, directory, cfg, doc["partitions"], self._settings["lock.timeout.ms"],
                          read_only=self.read_only, handles=self.handles, remote=self._uploader.remote_logs)
                self._topics[name] = t
            return t

    def topics(self) -> list[str]:
        """Names of the topics in the store (including those created by other processes), sorted."""
        self._check_open()
        return topic_names(self.path)

    def __contains__(self, name: object) -> bool:
        return holds_topic(self.path, name)

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data. Takes every partition's writer lock first, so a topic another
        process is writing to is refused with :class:`~pylog.errors.PartitionLockedError`. The lock only:
        a partition is not recovered or checked first, so a damaged one is deleted too."""
        self._check_writable(f"delete topic {name!r}")
        check_not_internal(name, "deleted")
        with self._lock:
            topic = self.topic(name)
            locked_here = []
            with contextlib.ExitStack() as held:
                try:
                    for p in topic.partitions:
                        # waits for a cleaning or retention pass under way, then takes the writer lock
                        if held.enter_context(internals(p).held_for_discard()):
                            locked_here.append(p)
                    doomed = os.path.join(self.path, deleting_name(name, uuid.uuid4().hex))
                    with write_faults(f"deleting topic {name!r}", "the topic was not deleted"):
                        os.rename(topic.directory, doomed)  # the locks stay held: flock follows the inode
                except BaseException:
                    for p in locked_here:
                        internals(p).unlock_discard()
                    raise
                fsync_dir(self.path)
                topic.close(discard=True)
                self._topics.pop(name, None)
            shutil.rmtree(doomed, ignore_errors=True)

    def alter_topic_config(self, name: str, changes: Mapping[str, Any],
                           remove: Iterable[str] = ()) -> TopicConfig:
        """Merge ``changes`` into a topic's overrides, drop the overrides named in ``remove`` (the topic then
        inherits the store's default for them; a key in both is set), and persist them; returns the new
        effective config. Nothing changes when the result is invalid (InvalidConfigError).

        Of the internal topics only ``__transaction_state``'s ``flush.messages`` and ``flush.ms`` can be set (as
        Kafka allows): either one replaces the transaction coordinator's fsync of each commit point and marker
        by that flush policy, Kafka's behaviour (all-or-nothing then holds across a process crash, not a power
        loss: docs/GUARANTEES.md). It takes effect in this store object at once, in other processes when they
        open the store."""
        self._check_writable(f"alter the config of topic {name!r}")
        remove = frozenset(remove)
        if name != TRANSACTION_STATE_TOPIC or not STATE_FLUSH_KEYS.issuperset(set(changes) | remove):
            check_not_internal(name, "altered" + (" (only its flush.messages and flush.ms can be)"
                                                        if name == TRANSACTION_STATE_TOPIC else ""))
        else:
            self._txn_log.topic()  # created on first use: it can be set before the first transaction
        with self._lock:
            topic = self.topic(name)
            if remove:
                kept = {k: v for k, v in topic.config.overrides.items() if k not in remove}
                new = TopicConfig({**kept, **changes}, self._defaults)
            else:
                new = topic.config.with_overrides(changes)
            check_location(new, self._settings)
            write_topic_file(topic.directory, name, topic.num_partitions, new.overrides)
            topic.config = new
            for p in opened_partitions(topic):
                p.config = new
            return new

    def producer(self, *, allow_auto_create_topics: bool = False, **configs: Any) -> Producer:
        """A :class:`~pylog.clients.producer.Producer` on this store (kafka-python's ``KafkaProducer`` options),
        throttled by this store's quotas (:meth:`set_quota`).

        ``allow_auto_create_topics`` (Kafka's name; default False here): a send to a topic the store does
        not have creates it with the store's ``num.partitions`` and default config, as a Kafka broker with
        ``auto.create.topics.enable`` does; without it such a send raises
        :class:`~pylog.errors.UnknownTopicError` naming ``store.create_topic``."""
        self._check_writable("make a producer")
        view: StoreView = AutoCreatingStore(self) if allow_auto_create_topics else self
        return Producer(view, quotas=self._quotas, transactions=self._transactions, **configs)

    def consumer(self, *topics: str, **configs: Any) -> Consumer:
        """A :class:`~pylog.clients.consumer.Consumer` on this store (kafka-python's ``KafkaConsumer`` options),
        committing to this store's ``__consumer_offsets`` and throttled by its quotas (:meth:`set_quota`)."""
        self._check_open()
        offsets = self._group_offsets() if configs.get("group_id") is not None else None
        return Consumer(self, *topics, quotas=self._quotas, offsets=offsets, **configs)

    def new_producer_id(self) -> int:
        """A producer id no other producer of this store has had, in any process (for idempotent appends).

        Allocated from ``producer.ids`` (the next id, CRC-protected) under an exclusive ``flock``.
        """
        self._check_writable("allocate a producer id")
        path = os.path.join(self.path, PRODUCER_IDS_FILE)
        with write_faults("allocating a producer id", "none was allocated"):
            return take_next(path, "producer id file")

    # ------------------------------------------------------------------ ACLs (pylog serve's authorizer)

    def acls(self) -> list[AclEntry]:
        """The access-control entries kept in this store (``<store>/__acls``, docs/FORMAT.md), in the order
        written; [] when there are none. pylog serve's authorizer enforces them; the library does not.

        :raises CorruptRecordError: when the ACL file is damaged (it is never taken for a shorter list)."""
        self._check_open()
        return read_acls(self.path)

    def replace_acls(self, entries: Iterable[AclEntry]) -> None:
        """Replace the store's ACLs with ``entries`` (atomically and durably: a crash keeps the old or the new
        list). Callers serialise their read-modify-write themselves (pylog serve's authorizer does).

        :raises InvalidArgumentError: for a malformed entry. :raises ReadOnlyStoreError: on a read-only store."""
        self._check_writable("change the ACLs")
        with write_faults("replacing the ACL file", "the previous ACLs are in force"):
            write_acls(self.path, [AclEntry(*e) for e in entries])

    # ------------------------------------------------------------------ client quotas (pylog serve)

    def client_quota_changes(self) -> QuotaChanges:
        """The client quota changes AlterClientQuotas made through pylog serve (``<store>/__quotas``,
        docs/FORMAT.md): (user, client id) -> {quota name: value, or None for a removed quota}; {} when none.

        :raises CorruptRecordError: when the quota file is damaged."""
        self._check_open()
        return read_quota_changes(self.path)

    def replace_client_quota_changes(self, changes: QuotaChanges) -> None:
        """Replace the store's client quota changes (atomically and durably). Callers serialise their
        read-modify-write themselves (pylog serve does).

        :raises InvalidArgumentError: for a malformed entity. :raises ReadOnlyStoreError: on a read-only store."""
        self._check_writable("change the client quotas")
        with write_faults("replacing the client quota file", "the previous client quotas are in force"):
            write_quota_changes(self.path, changes)

    # ------------------------------------------------------------------ coordinator groups (pylog serve)

    def coordinator_groups(self) -> list[SavedGroup]:
        """The Kafka clients' groups pylog serve's coordinator saved (``__consumer_groups/.coordinator``,
        docs/FORMAT.md): each group's last stable or empty state, for the next server; [] when none.

        :raises CorruptRecordError: when the file is damaged (the coordinator then starts with no groups)."""
        self._check_open()
        return read_groups(self.path)

    def replace_coordinator_groups(self, groups: Iterable[SavedGroup]) -> None:
        """Replace the saved coordinator groups (atomically and durably); callers serialise their calls.

        :raises RecordTooLargeError: beyond the 64 MiB the file may hold (nothing is written).
        :raises ReadOnlyStoreError: on a read-only store."""
        self._check_writable("save the coordinator's groups")
        body = encode_groups(list(groups))
        with write_faults("replacing the coordinator's group file", "the previously saved groups are kept"):
            write_groups(self.path, body)

    # ------------------------------------------------------------------ consumer groups

    def _group_offsets(self) -> CommittedOffsets:
        """This store's committed offsets (``__consumer_offsets``), made on first use; shared by its consumers."""
        self._check_open()
        return self._offsets

    def list_transactions(self) -> list[TransactionMetadata]:
        """Every transactional id's latest state (Kafka's ListTransactions; ``pylog transactions``)."""
        self._check_open()
        return self._transactions.list_transactions()

    def _create_internal_topic(self, name: str, partitions: int, config: Mapping[str, Any]) -> Topic:
        return self.create_topic(name, partitions, config, _internal=True)

    def consumer_groups(self) -> list[str]:
        """Ids of the groups that have members now or committed offsets, sorted."""
        return sorted(set(list_group_dirs(self.path)) | self._group_offsets().groups())

    def describe_consumer_group(self, group_id: str) -> GroupDescription:
        """The group's generation, assignment strategy, live members and their partitions."""
        self._check_open()
        return describe_group(self.path, group_id)

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every offset ``group_id`` has committed (the next offset to consume, per partition).
        :raises InvalidGroupError: for an empty or non-str id, or one that is not valid UTF-8."""
        return self._group_offsets().fetch(check_group_id(group_id))

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit offsets for a group from outside it (an operator resetting a group that has no live
        members). Members' own commits go through ``consumer.commit()``, which checks ownership.

        :raises RebalanceInProgressError: while the group has live members.
        """
        self._check_writable(f"commit offsets for group {group_id!r}")
        if self.describe_consumer_group(group_id).members:
            raise RebalanceInProgressError(f"group {group_id!r} has live members; stop them before resetting "
                                           "its offsets")
        self._group_offsets().commit(group_id, {TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata)
                                                else OffsetAndMetadata(int(om), "") for tp, om in offsets.items()})

    def delete_committed_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> int:
        """Forget ``group_id``'s committed offsets for ``partitions`` (tombstones in ``__consumer_offsets``; its
        other partitions' commits stay): a consumer of the group then starts those partitions from its
        ``auto_offset_reset``. Partitions without a commit are skipped. Returns how many were deleted.

        :raises RebalanceInProgressError: while live pylog consumers of the group subscribe to one of the
            partitions' topics (they would commit again).
        """
        self._check_writable(f"delete committed offsets of group {group_id!r}")
        check_group_id(group_id)
        tps = [TopicPartition(*tp) for tp in partitions]
        topics = {tp.topic for tp in tps}
        busy = sorted({t for m in self.describe_consumer_group(group_id).members for t in m.topics} & topics)
        if busy:
            raise RebalanceInProgressError(f"group {group_id!r} has live members subscribed to "
                                           f"{', '.join(busy)}")
        if not tps or OFFSETS_TOPIC not in self:
            return 0
        return self._group_offsets().delete(group_id, tps)

    def group_lag(self, group_id: str) -> dict[TopicPartition, PartitionLag]:
        """Per partition the group has committed for: committed offset, log start and end offsets,
        lag (end - committed: records still to consume) and lead (committed - start: records retention
        may still remove before the group falls off the log). Partitions of deleted topics are left out, and so
        are negative commits (a Kafka client's -1/-2 reset: no position; the group's consumers start those
        partitions from their ``auto_offset_reset``)."""
        out = {}
        for tp, om in sorted(self.committed_offsets(group_id).items()):
            if om.offset < 0:
                continue
            try:
                p = self.topic(tp.topic).partition(tp.partition)
            except (UnknownTopicError, IndexError, ValueError):
                continue
            start, end = p.log_start_offset, p.log_end_offset
            out[tp] = PartitionLag(om.offset, start, end, max(0, end - om.offset), om.offset - start)
        return out

    def delete_consumer_group(self, group_id: str) -> int:
        """Forget a group with no live members: tombstone its committed offsets and remove its directory.
        Returns how many committed offsets it had. :raises RebalanceInProgressError: while it has members.
        """
        self._check_writable(f"delete group {group_id!r}")
        if self.describe_consumer_group(group_id).members:
            raise RebalanceInProgressError(f"group {group_id!r} has live members")
        n = self._group_offsets().delete(group_id) if OFFSETS_TOPIC in self else 0
        remove_group_dir(self.path, group_id)
        return n

    # ------------------------------------------------------------------ maintenance

    def _partitions_of(self, topic: str | None, partition: int | None = None) -> list[Partition]:
        names = [topic] if topic is not None else self.topics()
        out = []
        for name in names:
            t = self.topic(name)
            out.extend([t.partition(partition)] if partition is not None else t.partitions)
        return out

    def enforce_retention(self, topic: str | None = None, now: int | None = None) -> list[RetentionResult]:
        """Apply retention now to every partition (of ``topic``, or of every topic); returns what each
        pass did. Makes this store the writer of those partitions; partitions another process writes are
        left to it (their writer's background thread maintains them) and reported with ``reasons ==
        ["locked"]``. A partition this store cannot become the writer of because it is damaged (its active
        segment damaged in the middle after a clean close: :class:`~pylog.errors.CorruptRecordError`) is
        logged as a warning, reported with ``reasons == ["damaged"]`` and left as it is, whole segments and
        all, until ``pylog repair``; the other partitions are maintained. ``now`` (ms) is for tests."""
        self._check_writable("enforce retention")
        out = []
        for p in self._partitions_of(topic):
            try:
                r = _maintain(p, p.enforce_retention, now)
            except PartitionLockedError:
                r = RetentionResult(p.topic, p.number, reasons=["locked"], log_start_offset=p.log_start_offset)
            except CorruptRecordError as exc:
                log.warning("retention of %s-%d skipped until `pylog repair STORE %s %d` (see `pylog verify`): %s",
                            p.topic, p.number, p.topic, p.number, exc)
                r = RetentionResult(p.topic, p.number, reasons=["damaged"], log_start_offset=p.log_start_offset)
            self._cleaner.add_retention(r)
            out.append(r)
        return out

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Kafka's DeleteRecords: raise the partition's log start offset to ``before_offset`` (records below
        it become unreadable and whole segments below it are deleted). Returns the new log start offset.
        :raises OffsetOutOfRangeError: past the log end offset. :raises PartitionLockedError:
        :raises InvalidTopicError: for an internal topic."""
        self._check_writable(f"delete records of {topic!r}")
        check_not_internal(topic, "trimmed with delete_records")
        p = self.topic(topic).partition(partition)
        return _maintain(p, p.delete_records, before_offset)

    def compact(self, topic: str, partition: int | None = None, now: int | None = None) -> list[CleanResult]:
        """Compact ``topic`` (one partition, or all) now, whatever its dirty ratio (``min.compaction.lag.ms``
        still holds). Also removes tombstones past ``delete.retention.ms``. Makes this store the writer.
        :raises PartitionLockedError: when another process writes the partition."""
        self._check_writable(f"compact {topic!r}")
        out = []
        for p in self._partitions_of(topic, partition):
            with write_faults(f"compacting {p.topic}-{p.number}", "its segments are as they were (or, if the swap had "
                              "passed its commit point, the partition refuses work until the store is reopened, "
                              "which finishes the swap)"):
                r = _maintain(p, clean_partition, p, self._settings["log.cleaner.dedupe.buffer.size"], now=now,
                              force=True)
            self._cleaner.add_cleaning(r)
            out.append(r)
        return out

    def cleaner_status(self) -> CleanerStatus:
        """Health and totals of the background cleaner (see :class:`pylog.maintenance.cleaner_status.CleanerStatus`)."""
        st = self._cleaner.status()
        for p in self._open_partitions():
            if p.is_writer and p.config.compact:
                try:
                    st.dirty_ratios[f"{p.topic}-{p.number}"] = cleanable_range(p).dirty_ratio
                except Exception:  # a status call must not fail on one odd partition
                    continue
        return st

    def cleaners(self) -> list[PublishedCleaner]:
        """The cleaner of every process that has this store open with its cleaner enabled (this one too),
        as their status files show them: process and thread alive, heartbeat, last run, errors, the
        partitions each maintains; also processes that died without closing the store. For monitoring from
        another process (``pylog health``); see :mod:`pylog.maintenance.cleaner_registry`."""
        self._check_open()
        return published_cleaners(self.path)

    def check_health(self) -> None:
        """Raise :class:`~pylog.errors.CleanerError` when the background cleaner died or gave up on a
        partition (its status has the error and traceback); return quietly otherwise."""
        self._check_open()
        self._cleaner.check_health()

    # ------------------------------------------------------------------ process resources (pylog serve)

    @property
    def group_commit(self) -> GroupCommit:
        """The process's group commit (:mod:`pylog.storage.group_commit`): the ``acks=all`` fsyncs that this
        process's producers, handles and ``pylog serve`` requests share (``submit``, ``stats``, ``wait_idle``)."""
        return group_commit.default()

    def flush(self) -> None:
        """fsync every partition this store has written to. A partition that fails does not keep the
        others from being flushed; the first error is raised at the end."""
        call_each(list(self._topics.values()), "flush", threads=4)  # each topic's partitions: in parallel too

    def close(self) -> None:
        """Flush and cleanly close every partition; release writer locks. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._uploader.stop()
            self._sweeper.stop()
            self._cleaner.stop()
            if self._publisher is not None:
                self._publisher.close()
            try:
                # One failure does not keep the others open. Topics (and each one's partitions) in parallel: a
                # clean close fsyncs every partition several times.
                call_each(list(self._topics.values()), "close", threads=4)
            finally:
                self._topics.clear()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # ------------------------------------------------------------------ quotas

    def set_quota(self, client_id: str, producer_byte_rate: float | None = None,
                  consumer_byte_rate: float | None = None) -> None:
        """Set ``client_id``'s byte-rate quotas (bytes/s), replacing both: a rate left as None removes that
        quota. Clients over their quota are delayed, not refused (see :mod:`pylog.clients.quotas`); the quotas live
        in this store object only (not persisted, not seen by other processes).

        :raises InvalidArgumentError: for a client id that is not a str (also a TypeError).
        :raises InvalidConfigError: for a rate that is not a positive number.
        """
        self._check_open()
        manager = self._quotas
        for kind, rate in ((PRODUCE, producer_byte_rate), (CONSUME, consumer_byte_rate)):
            if rate is not None:
                manager.set_quota(client_id, kind, rate)  # validates before anything changes
        for kind, rate in ((PRODUCE, producer_byte_rate), (CONSUME, consumer_byte_rate)):
            if rate is None:
                manager.set_quota(client_id, kind, None)

    def quotas(self) -> dict[str, dict[str, float]]:
        """Every quota set on this store: ``{client_id: {"producer_byte_rate": ..., "consumer_byte_rate":
        ...}}``, each client with the quotas it has."""
        self._check_open()
        return self._quotas.quotas()


def open(path: str | os.PathLike[str], *, read_only: bool = False,  # noqa: A001 - the library's entry point
         create: bool = True, **options: Any) -> Store:
    """Open (creating if needed) the store at ``path``.

    ``create=False`` opens only an existing store: a path without one raises
    :class:`~pylog.errors.UnknownStoreError` instead of becoming a new, empty store (a mistyped path).

    Keyword options are store-wide topic defaults (Kafka names with ``_`` for ``.``, e.g.
    ``segment_bytes=1 << 20``) or store settings (``lock_timeout_ms``).

    ``read_only=True`` opens an existing store for reading only, e.g. on read-only media, a snapshot or a
    directory this user may not write: it takes no lock, starts no thread and creates, changes or maps for
    writing no file (readers of other processes' writes then poll instead of being woken). Topics,
    partitions, reads, consumers without a ``group_id`` (or with one and ``assign()``, starting from the
    group's committed offsets, with ``enable_auto_commit=False``), committed offsets, group descriptions
    and lag all work; every writing call (creating or deleting topics, appends, producers, commits,
    retention, compaction) raises :class:`~pylog.errors.ReadOnlyStoreError` at once.

    :raises InvalidConfigError: for unknown or bad options.
    :raises UnknownStoreError: with ``read_only`` or ``create=False``, when ``path`` holds no store.
    :raises StorePathError: when ``path`` is a file, or under one ("not a pylog store").
    :raises ReadOnlyStoreError, StorePermissionError, DiskFullError: without ``read_only``, when a new
        store cannot be created there.
    """
    return Store(path, read_only=read_only, create=create, **options)


def quota_manager(store: Store) -> QuotaManager:
    """Internal API (not :class:`Store`'s): ``store``'s :class:`~pylog.clients.quotas.QuotaManager`, which
    :meth:`Store.producer` and :meth:`Store.consumer` hand to each client they make (and
    :mod:`pylog.kafka`'s clients take likewise): one budget per client id and kind, kept in this Store
    object. Users set and list quotas with :meth:`Store.set_quota` and :meth:`Store.quotas`; the manager
    itself is for measuring (its ``clock``, ``sleep`` and window can be replaced)."""
    return store._quotas


def group_offsets(store: Store) -> CommittedOffsets:
    """Internal API (not :class:`Store`'s): ``store``'s committed offsets (``__consumer_offsets``), made on
    first use and shared by its consumers, for the clients it makes (:meth:`Store.consumer`, and
    :class:`pylog.kafka.KafkaConsumer`) and tools that need, e.g., the partition a group's commits go to.
    Lower level than :meth:`Store.committed_offsets` and :meth:`Store.commit_offsets` (no ownership
    checks)."""
    return store._group_offsets()


def transaction_coordinator(store: Store) -> TransactionCoordinator:
    """Internal API (not :class:`Store`'s): ``store``'s transaction coordinator
    (:class:`~pylog.clients.transactions.TransactionCoordinator`), for its transactional producers and
    ``pylog serve``'s transaction requests. :raises StoreClosedError:"""
    store._check_open()
    return store._transactions


def _maintain(p: Partition, work: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Run maintenance that makes this handle ``p``'s writer; a partition written in turn by many handles
    (:attr:`PartitionInternals.transient`) is handed back afterwards."""
    if not internals(p).transient:
        return work(*args, **kwargs)
    with internals(p).writer_turn():
        try:
            return work(*args, **kwargs)
        finally:
            p.release_writer()
