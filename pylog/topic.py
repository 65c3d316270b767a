"""A topic: a named set of partitions sharing one configuration, described by ``topic.json``.

``topic.json`` (human-readable) holds ``format``, ``version``, ``name``, ``partitions``, the config
overrides and ``crc32c``, the CRC-32C of the canonical JSON of the other fields; a damaged file raises
:class:`~pylog.errors.CorruptRecordError` rather than being guessed at.

Invariants: the partition count only grows; a partition's directory is ``<topic>/<number>``; the topic
exists exactly when its ``topic.json`` does (it is written last on create, atomically).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import threading
from typing import Any, Callable, Iterable, Mapping

from .config import TopicConfig
from .errors import (CorruptRecordError, InvalidArgumentError, InvalidConfigError, InvalidTopicError,
                      ReadOnlyStoreError, UnknownTopicError)
from .storage.fileio import atomic_write, descriptor_faults, write_faults
from .storage.filenames import TOPIC_FILE, TRANSIENT_TOPICS, is_internal_topic
from .storage.handles import HandleCache
from .partition import Partition, internals
from .storage.records import crc32c
from .storage.remote import RemoteLog

__all__ = ["Topic", "read_topic_file", "write_topic_file", "call_each", "check_partition_count", "MAX_PARTITIONS",
           "opened_partitions"]

log = logging.getLogger("pylog.topic")

#: Most partitions a topic file may name (far above any real topic: each partition is a directory).
MAX_PARTITIONS = 1 << 20
_FORMAT = "pylog-topic"
_VERSION = 1


def _canonical(doc: Mapping[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in doc.items() if k != "crc32c"}, sort_keys=True,
                      separators=(",", ":")).encode()


def write_topic_file(directory: str, name: str, partitions: int, overrides: Mapping[str, Any]) -> None:
    cfg = {k: (",".join(v) if isinstance(v, tuple) else v) for k, v in overrides.items()}
    doc: dict[str, Any] = {"format": _FORMAT, "version": _VERSION, "name": name, "partitions": partitions,
                           "config": cfg}
    doc["crc32c"] = crc32c(_canonical(doc))
    atomic_write(os.path.join(directory, TOPIC_FILE), (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())


def read_topic_file(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, TOPIC_FILE)
    try:
        with descriptor_faults(f"reading {path}"), open(path, "rb") as f:
            raw = f.read(1 << 20)
    except FileNotFoundError:
        raise UnknownTopicError(f"no topic at {directory}") from None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CorruptRecordError(f"topic file is not JSON: {exc!r}"[:200], path) from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != _VERSION:
        raise CorruptRecordError("not a pylog topic file (format/version)", path)
    if doc.get("crc32c") != crc32c(_canonical(doc)):
        raise CorruptRecordError("topic file checksum mismatch", path)
    if (type(doc.get("partitions")) is not int or not 1 <= doc["partitions"] <= MAX_PARTITIONS
            or not isinstance(doc.get("config"), dict)):
        # The count sizes a list when the topic opens: a huge one must not allocate (or overflow) there.
        raise CorruptRecordError("topic file has no valid partition count/config", path)
    return doc


def check_partition_count(count: Any, what: str = "partitions") -> None:
    """Check a partition count before any directory is made for it: the bound :func:`read_topic_file`
    enforces on a topic file, so a topic that can be created can be opened again.

    :raises InvalidArgumentError: unless ``count`` is an int in ``[1, MAX_PARTITIONS]``.
    """
    if type(count) is not int or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidArgumentError(f"{what} must be an int in [1, {MAX_PARTITIONS}] (each partition is a directory), "
                                   f"got {count!r:.40}")


#: Threads closing or flushing the partitions of one topic at once: a clean close makes about 7 fsyncs per
#: partition (log, indexes, checkpoint, directory), which one after another took ~55 s for a server that had
#: written ~2,100 partitions. fsync releases the GIL, and the journal commits concurrent fsyncs together.
PARALLEL = 16


def call_each(items: Iterable[Any], what: str, *args: Any, threads: int = 1) -> None:
    """Call method ``what`` of each item, with up to ``threads`` at once; one that fails (a failed partition's
    flush raises LogFailedError, a close may meet a full disk) does not keep the others from being flushed or
    closed, and from letting their writer locks go. The first error (in the items' order) is raised at the
    end; the others are logged."""
    items = list(items)
    futures: list[concurrent.futures.Future[Any]] = []
    if threads > 1 and len(items) > 1:
        with concurrent.futures.ThreadPoolExecutor(min(threads, len(items)),
                                                   thread_name_prefix=f"pylog-{what}") as pool:
            for item in items:
                try:
                    futures.append(pool.submit(getattr(item, what), *args))
                except RuntimeError:
                    # The interpreter is exiting: concurrent.futures takes no new work once its exit hook
                    # ran, and a finalizer may close a store after that (a metrics collector's view). The
                    # rest is done in this thread.
                    break
    errors: list[BaseException | None] = [f.exception() for f in futures]
    for item in items[len(futures):]:
        try:
            getattr(item, what)(*args)
        except Exception as exc:  # noqa: BLE001 - do the rest, then report
            errors.append(exc)
        else:
            errors.append(None)
    failed = [(item, error) for item, error in zip(items, errors, strict=True) if error is not None]
    for item, error in failed[1:]:
        log.error("%s of %r failed too: %s", what, item, error)
    if failed:
        raise failed[0][1]


class Topic:
    """A topic of a store. Obtain it with ``store.topic(name)``; thread-safe."""

    def __init__(self, name: str, directory: str, config: TopicConfig, num_partitions: int,
                 lock_timeout_ms: int = 0, read_only: bool = False, handles: HandleCache | None = None,
                 remote: Callable[[str, int], RemoteLog] | None = None) -> None:
        self.name = name
        #: Of a store opened with ``read_only=True``: its partitions never write, it never grows.
        self.read_only = read_only
        self.directory = directory
        self.config = config
        self._lock_timeout_ms = lock_timeout_ms
        self._handles = handles  # the store's descriptor budget, shared by its partitions
        #: The store's remote log of a partition (tiered storage; None: the store has no remote location).
        self._remote = remote
        self._lock = threading.Lock()
        self._partitions: list[Partition | None] = [None] * num_partitions

    @property
    def num_partitions(self) -> int:
        return len(self._partitions)

    def partition(self, number: int) -> Partition:
        """Partition ``number`` (opened on first use). :raises UnknownTopicError: when out of range."""
        if not isinstance(number, int) or not 0 <= number < len(self._partitions):
            self._reload_count()
            if not isinstance(number, int) or not 0 <= number < len(self._partitions):
                raise UnknownTopicError(f"topic {self.name!r} has no partition {number!r} "
                                        f"(it has {len(self._partitions)})")
        p = self._partitions[number]
        if p is None:
            with self._lock:
                p = self._partitions[number]
                if p is None:
                    p = Partition(self.name, number, os.path.join(self.directory, str(number)), self.config,
                                  self._lock_timeout_ms, read_only=self.read_only, handles=self._handles)
                    # Committed offsets are appended by every process of every group in turn.
                    internals(p).transient = self.name in TRANSIENT_TOPICS
                    if self._remote is not None and self.config["remote.storage.enable"]:
                        internals(p).attach_remote(self._remote(self.name, number))
                    self._partitions[number] = p
        return p

    @property
    def partitions(self) -> list[Partition]:
        return [self.partition(i) for i in range(self.num_partitions)]

    def _reload_count(self) -> None:
        """Pick up partitions added by another process."""
        try:
            doc = read_topic_file(self.directory)
        except UnknownTopicError:
            return
        with self._lock:
            extra = doc["partitions"] - len(self._partitions)
            if extra > 0:
                self._partitions.extend([None] * extra)

    def add_partitions(self, total: int) -> None:
        """Grow the topic to ``total`` partitions (Kafka's rule: the count never shrinks).

        :raises InvalidTopicError: for an internal topic (a group's committed offsets are found by the
            offsets topic's partition count: growing it would lose them).
        :raises ReadOnlyStoreError, DiskFullError: when the store cannot be written (nothing changed).
        """
        if is_internal_topic(self.name):
            raise InvalidTopicError(f"{self.name!r} is an internal topic of pylog: its partitions cannot be added to")
        if self.read_only:
            raise ReadOnlyStoreError(f"topic {self.name!r} belongs to a store opened with read_only=True; "
                                     "open the store without read_only to add partitions")
        check_partition_count(total, "total")
        with self._lock:
            current = len(self._partitions)
            if total <= current:
                raise InvalidConfigError(f"topic {self.name!r} has {current} partitions; {total} does not add any")
            with write_faults(f"adding partitions to {self.name!r}", f"it still has {current}"):
                for i in range(current, total):
                    os.makedirs(os.path.join(self.directory, str(i)), exist_ok=True)
                write_topic_file(self.directory, self.name, total, self.config.overrides)
            self._partitions.extend([None] * (total - current))

    def end_offsets(self) -> dict[int, int]:
        return {p.number: p.log_end_offset for p in self.partitions}

    def beginning_offsets(self) -> dict[int, int]:
        return {p.number: p.log_start_offset for p in self.partitions}

    def flush(self) -> None:
        """fsync every opened partition (see :func:`call_each`)."""
        call_each([p for p in self._partitions if p is not None], "flush", threads=PARALLEL)

    def close(self, discard: bool = False) -> None:
        """Close every opened partition (``discard``: without writing anything, the files are going away).
        One that fails does not keep the others open (see :func:`call_each`)."""
        with self._lock:
            # A discard writes nothing, and its caller (Store.delete_topic) holds the partitions' maintenance
            # locks, which close takes too: in this thread only.
            call_each([p for p in self._partitions if p is not None], "close", discard,
                      threads=1 if discard else PARALLEL)

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, partitions={self.num_partitions})"


def opened_partitions(topic: Topic) -> list[Partition]:
    """The partitions of ``topic`` opened so far (a snapshot; opening none), for the store's work over what is in
    use only (the cleaner's flushes, topic deletion). Not a member of :class:`Topic`, whose members are its
    public API."""
    return [p for p in list(topic._partitions) if p is not None]
