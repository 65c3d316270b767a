"""Tiered storage's upload thread (Kafka's RLM copier, KIP-405): ships closed segments and applies retention to
the remote log, beside the cleaner thread of a store opened with ``remote.storage.location``.

Each pass ships the store marker, the ``topic.json`` of the topics concerned and the groups' committed
offsets for them (``group.offsets``: what ``pylog restore`` needs beside the segments), then, for every
partition of a topic with ``remote.storage.enable`` that this store writes or nobody writes (see below):

1. ask the core for the shippable segments (:meth:`PartitionInternals.shippable_segments`: below
   ``synced_through``, i.e. rolled, sealed and fsynced), from a snapshot of the segment list;
2. ship, oldest first, those not yet in the remote log with :meth:`RemoteLog.ship_segment` (objects first,
   the manifest's conditional commit last) and after each commit tell the core the new remote end
   (:meth:`PartitionInternals.note_remote`), which is what lets local retention delete the local copy, and
   remove the producer snapshots kept at rolls (``<end>.snapshot``) of the segments now shipped;
3. apply ``retention.ms`` / ``retention.bytes`` to the whole log with :meth:`RemoteLog.enforce_retention`
   (the local bytes not shipped yet counted towards ``retention.bytes``).

Invariants:
- No partition lock is held during a request to the bucket: sealed segments of a delete-policy topic never
  change (compacted topics may not enable remote storage), the upload reads them through descriptors of
  its own, and local retention cannot delete a segment before its commit (:mod:`pylog.storage.log.maintenance`).
  So a slow or failing bucket never blocks appends, reads, retention or compaction.
- A crash anywhere leaves a state the next pass finishes: objects without a commit are found and reused
  (:mod:`pylog.storage.remote.remote_log`); a commit not yet noted is read back from the manifest.
- A failing partition is logged, counted (``remote_failures``, ``remote_last_error`` in the cleaner status)
  and tried again after ``remote.log.manager.task.retry.backoff.ms``, doubled per failure up to
  ``.max.ms``; the others go on. The thread never dies of a partition's error.
- Shipping is background work: while the closed segments waiting for upload (bytes of log, all partitions)
  are at most ``remote.log.manager.copier.max.lag.bytes``, a pass runs in a short-lived thread of its own
  that first lowers its CPU priority (``remote.log.manager.copier.priority``: ``idle`` is Linux's
  SCHED_IDLE, so it gets a core only when this process's other threads leave one), and that ends the pass
  early once the lag goes over the bound. Above the bound, passes run on the upload thread itself at the
  process's priority. A thread cannot raise its own priority back without privileges, hence a thread per
  pass rather than one thread switching. So the lag under sustained CPU load is about the bound plus the
  active segments; beyond that only a bucket slower than the appends lets it grow (docs/GUARANTEES.md).
- And it paces itself: a lowered pass waits (is deferred, or ends after its current segment) while the
  shipping partitions' logs keep growing (looked at every 0.5 s: each look takes the GIL from the appenders),
  for at most ``remote.log.manager.copier.max.delay.ms`` since the first deferral after the last whole pass;
  then a whole pass runs at the lowered priority whatever the appends do. So under a continuous append load
  a closed segment waits at most about the interval, that delay and the uploads before its own (and,
  whatever the load, a lag over the bound ships at normal priority).
- It ships the partitions this store writes and those nobody writes at the time of the pass (a writer lock
  that is free is taken only to list the sealed segments, and released before any request to the bucket):
  a partition whose writer went idle or closed still has its closed segments shipped. Partitions another
  handle writes are left to that handle's upload thread. Local copies are deleted by the writer's retention.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .. import metrics
from ..config import REMOTE_STORAGE_SETTINGS, TopicConfig
from ..errors import InvalidConfigError, StoreClosedError
from ..partition import Partition, internals
from ..storage.filenames import remove_segment_snapshots
from ..storage.records import now_ms
from ..storage.remote import ChunkCache, ObjectStore, RemoteLog, RemoteStorageConfig, ship_store_metadata
from ..storage.remote.group_offsets import GroupOffsets, encode_group_offsets

__all__ = ["RemoteUploader", "UploadCounts", "check_location", "lower_thread_priority"]

log = logging.getLogger("pylog.remote")


def check_location(config: TopicConfig, store_settings: dict[str, Any]) -> None:
    """Refuse ``remote.storage.enable`` for a store opened without ``remote.storage.location`` (Kafka refuses
    it on a broker with remote storage off). :raises InvalidConfigError:"""
    if config["remote.storage.enable"] and not store_settings["remote.storage.location"]:
        raise InvalidConfigError("remote.storage.enable: this store was opened without a remote.storage.location "
                                 "(pylog.open(path, remote_storage_location='s3://bucket/prefix'))")


@dataclass
class UploadCounts:
    """What one partition's pass did (added to the cleaner status by the caller's ``report``)."""

    segments: int = 0
    bytes: int = 0
    #: Closed segments still waiting for upload after the pass (the lag).
    waiting: int = 0
    remote_segments_deleted: int = 0


class RemoteUploader:
    """The upload thread of the store at ``root``: every ``remote.log.manager.task.interval.ms`` a pass over
    ``partitions()``.

    :param report: called with each partition's :class:`UploadCounts` and (on failure) the error text.
    :param group_offsets: the store's committed offsets, every group's (shipped for the topics shipped).
    :raises InvalidConfigError: for a bad ``remote.storage.*`` setting. :raises RemoteStorageError: when
        boto3 is missing.
    """

    def __init__(self, root: str, partitions: Callable[[], Iterator[Partition]], settings: dict[str, Any],
                 report: Callable[[str, UploadCounts, str | None], None],
                 group_offsets: Callable[[], GroupOffsets] | None = None) -> None:
        self._name = root
        self._partitions = partitions
        self._report = report
        self._group_offsets = group_offsets
        #: The group offsets object this uploader last shipped (or found shipped): not compared again while equal.
        self._offsets_shipped: bytes | None = None
        #: False without a ``remote.storage.location``: then it never starts a thread and ships nothing.
        self.enabled = bool(settings["remote.storage.location"])
        self.config: RemoteStorageConfig | None = None
        self.objects: ObjectStore | None = None
        if self.enabled:
            self.config = RemoteStorageConfig.from_settings({k: settings[k] for k in REMOTE_STORAGE_SETTINGS})
            self.objects = ObjectStore(self.config)
            #: One cache of fetched pieces for every partition's remote reads.
            self.chunks = ChunkCache(self.config.read_chunk_bytes, self.config.read_cache_bytes)
        self.interval = settings["remote.log.manager.task.interval.ms"] / 1000
        self._idle = settings["remote.log.manager.copier.priority"] == "idle"
        self._max_lag = settings["remote.log.manager.copier.max.lag.bytes"]
        self._max_delay = settings["remote.log.manager.copier.max.delay.ms"] / 1000
        #: The thread running the current lowered-priority pass (None when none): only it yields to the lag.
        self._background: threading.Thread | None = None
        #: Since when (monotonic) passes have been deferred with no whole pass since (None: not deferred).
        self._deferred_since: float | None = None
        #: Whether the last lowered pass ended early (:meth:`_yields`), so its deferral goes on counting.
        self._cut_short = False
        #: The sum of the shipping partitions' log end offsets at the last look (appends hot when it moved).
        self._last_ends = -1
        self._backoff_first = settings["remote.log.manager.task.retry.backoff.ms"] / 1000
        self._backoff_max = settings["remote.log.manager.task.retry.backoff.max.ms"] / 1000
        self._logs: dict[tuple[str, int], RemoteLog] = {}
        self._logs_lock = threading.Lock()
        #: "topic-partition" -> (monotonic time before which it is not tried again, current back-off).
        self._retry: dict[str, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: One pass at a time (the thread's, or one a caller runs: Store.upload_to_remote).
        self._pass_lock = threading.Lock()

    @property
    def remote_logs(self) -> Callable[[str, int], RemoteLog] | None:
        """:meth:`remote_log`, or None without a location (what a topic attaches to its partitions)."""
        return self.remote_log if self.enabled else None

    def remote_log(self, topic: str, partition: int) -> RemoteLog:
        """The :class:`RemoteLog` of ``topic``/``partition`` (one per partition, shared with remote reads).
        :raises InvalidConfigError: without a location."""
        objects = self._objects_or_refuse()
        with self._logs_lock:
            rl = self._logs.get((topic, partition))
            if rl is None:
                rl = self._logs[(topic, partition)] = RemoteLog(objects, topic, partition, chunks=self.chunks)
            return rl

    def _objects_or_refuse(self) -> ObjectStore:
        if self.objects is None:
            raise InvalidConfigError(f"the store {self._name} was opened without a remote.storage.location")
        return self.objects

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._main, name=f"pylog-remote-upload {self._name}",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def wake(self) -> None:
        """Start a pass now (tests, ``pylog`` commands that want shipping done soon)."""
        self._wake.set()

    @property
    def alive(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def _main(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            mode = self._next_mode()
            if mode == "defer":
                self._wake.wait(min(self._next_wait(), _APPENDS_LOOK))
                continue
            self._cut_short = False
            if mode == "background":
                t = threading.Thread(target=self._background_pass, name=f"pylog-remote-upload-idle {self._name}",
                                     daemon=True)
                self._background = t
                t.start()
                t.join()
                self._background = None
            else:
                self._logged_pass()
            if not self._cut_short:
                self._deferred_since = None  # a whole pass ran: the next deferral starts its own count
            self._wake.wait(self._next_wait())

    def _next_mode(self) -> str:
        """How the next pass runs: ``"normal"`` (on this thread, the process's priority: the setting says so,
        or the lag is over its bound), ``"background"`` (a thread of its own at the lowered priority) or
        ``"defer"`` (not yet: appends are under way, and the pass has waited less than
        ``remote.log.manager.copier.max.delay.ms``; looked at again in :data:`_APPENDS_LOOK` seconds)."""
        if not self._idle:
            return "normal"
        try:
            if self.lag_bytes() > self._max_lag:
                return "normal"
            return "defer" if self._deferring() else "background"
        except Exception as exc:  # noqa: BLE001 - a closing store: the pass at normal priority finds out
            log.debug("pylog remote upload: lag of %s unknown: %s", self._name, exc)
            return "normal"

    def _deferring(self) -> bool:
        """Whether a lowered-priority pass waits: the shipping partitions' logs grew since the last look
        (appends are hot) and the pass has been waiting (since the first deferral after the last whole pass)
        less than ``max.delay.ms``. Pacing, not only priority: on a machine with no idle core a lowered
        thread (and the bucket's work, when it runs here) still takes some of the appenders' cores, and a
        lowered thread holding the GIL while it waits for a core holds up the appenders too; so shipping (and
        the rest of a pass: remote retention, the store's metadata) waits for a pause, within the bounds."""
        ends = sum(p.log_end_offset for p in self._partitions() if p.config["remote.storage.enable"])
        grew, self._last_ends = ends != self._last_ends, ends
        if not grew:
            return False
        now = time.monotonic()
        if self._deferred_since is None:
            self._deferred_since = now
        return now - self._deferred_since < self._max_delay

    def _logged_pass(self) -> None:
        try:
            self.run_pass()
        except BaseException as exc:  # noqa: BLE001 - never dies: the next pass tries again
            log.error("pylog remote upload pass of %s failed", self._name, exc_info=exc)

    def _background_pass(self) -> None:
        """One pass at the lowered priority (a thread cannot raise it back: this thread ends with the pass)."""
        lower_thread_priority()
        self._logged_pass()

    def lag_bytes(self) -> int:
        """Bytes of closed segments not in the remote log as last noted, over the partitions with remote
        storage (every closed segment of a partition not noted yet)."""
        return sum(_unshipped_bytes(p) for p in self._partitions() if p.config["remote.storage.enable"])

    def _yields(self) -> bool:
        """Whether the running pass should end now: the store stops, or a lowered-priority pass sees the lag over
        its bound (the upload thread then runs the next pass at once, at normal priority)."""
        if self._stop.is_set():
            return True
        if threading.current_thread() is not self._background:
            return False
        if self.lag_bytes() > self._max_lag:
            self._wake.set()  # the next pass at once, at normal priority
            self._cut_short = True
            return True
        self._cut_short = self._deferring()
        return self._cut_short

    def _next_wait(self) -> float:
        now = time.monotonic()
        due = [until - now for until, _ in self._retry.values()]
        return max(0.0, min([self.interval, *due]))

    # ------------------------------------------------------------------ passes

    def run_pass(self) -> None:
        """One pass over every partition with remote storage on that this store writes or nobody writes (the
        thread's work; callable directly: one pass runs at a time). :raises InvalidConfigError: without a location."""
        objects = self._objects_or_refuse()
        with self._pass_lock:
            chosen = [p for p in self._partitions()
                      if p.config["remote.storage.enable"] and not internals(p).transient]
            if not chosen:
                return
            topics = sorted({p.topic for p in chosen})
            try:
                offsets = self._shipped_offsets(set(topics))
                ship_store_metadata(objects, self._name, topics, None if offsets == self._offsets_shipped else offsets)
                self._offsets_shipped = offsets
            except Exception as exc:  # noqa: BLE001 - retried next pass; segments still ship
                log.warning("pylog remote upload: the store's metadata of %s was not shipped: %s", self._name, exc)
                self._report("store metadata", UploadCounts(), "".join(traceback.format_exception(exc)))
            self._pass(chosen)

    def _shipped_offsets(self, topics: set[str]) -> bytes | None:
        """The group offsets object for ``topics``' partitions (None without a source of offsets)."""
        if self._group_offsets is None:
            return None
        offsets = {g: kept for g, commits in self._group_offsets().items()
                   if (kept := {tp: om for tp, om in commits.items() if tp.topic in topics})}
        return encode_group_offsets(offsets)

    def _pass(self, chosen: list[Partition]) -> None:
        for p in chosen:
            if self._yields():
                return
            key = f"{p.topic}-{p.number}"
            retry = self._retry.get(key)
            if retry is not None and time.monotonic() < retry[0]:
                continue
            try:
                counts = self.upload_partition(p)
            except StoreClosedError:
                continue
            except Exception as exc:  # noqa: BLE001 - a partition's failure is logged, counted, retried
                wait = min(self._backoff_max, retry[1] * 2) if retry is not None else self._backoff_first
                self._retry[key] = (time.monotonic() + wait, wait)
                log.warning("pylog remote upload of %s failed (next try in %.1f s): %s", key, wait, exc)
                self._count("pylog_remote_failures_total", p.topic, 1)
                self._report(key, UploadCounts(waiting=_waiting(p)), "".join(traceback.format_exception(exc)))
                continue
            self._retry.pop(key, None)
            self._report(key, counts, None)

    def upload_partition(self, p: Partition) -> UploadCounts:
        """Ship ``p``'s shippable segments not in its remote log yet, note each commit, then apply the whole
        log's retention to the remote log. :raises RemoteStorageError, CorruptRecordError:"""
        ii = internals(p)
        rl = self.remote_log(p.topic, p.number)
        ii.attach_remote(rl)  # reads below the local log start fall through (also when enabled after opening)
        counts = UploadCounts()
        if not p.is_writer and not _maybe_unshipped(p):
            return counts
        m = rl.manifest(refresh=True)
        ii.note_remote(m.log_start_offset, m.end_offset)
        shippable = _shippable_segments(p)
        if shippable is None:  # another handle writes it: its store's upload thread ships it
            return counts
        todo = [s for s in shippable if s[1] > m.end_offset]
        for i, (base, _end, _size) in enumerate(todo):
            if self._yields():
                counts.waiting = len(todo) - i
                return counts
            seg = rl.ship_segment(ii.local_log.directory, base)
            if seg is None:
                continue
            m = rl.manifest()
            ii.note_remote(m.log_start_offset, m.end_offset)
            remove_segment_snapshots(ii.local_log.directory, m.end_offset)  # the copies kept at rolls, shipped
            counts.segments += 1
            counts.bytes += seg.size
            self._count("pylog_remote_segments_shipped_total", p.topic, 1)
            self._count("pylog_remote_bytes_shipped_total", p.topic, seg.size)
        cfg = p.config
        if cfg["retention.ms"] >= 0 or cfg["retention.bytes"] >= 0:
            unshipped = sum(s.size for s in p.segments if s.base_offset >= m.end_offset)
            r = rl.enforce_retention(now_ms(), cfg["retention.ms"], cfg["retention.bytes"], local_bytes=unshipped)
            counts.remote_segments_deleted = len(r.deleted_segments)
            m = rl.manifest()
            ii.note_remote(m.log_start_offset, m.end_offset)
        return counts

    @staticmethod
    def _count(name: str, topic: str, amount: float) -> None:
        if metrics.state.on:
            metrics.counter(name).inc((topic,), amount)


#: Seconds between looks at the appends while a pass is deferred.
_APPENDS_LOOK = 0.5


def lower_thread_priority() -> bool:
    """Put the calling thread under SCHED_IDLE (Linux: the lowest CPU priority there is, below nice 19, which
    is what a process already niced to 19 would otherwise keep). Returns False where that is not available
    (other systems): the pass then runs at the process's priority."""
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True


def _unshipped_bytes(p: Partition) -> int:
    """Bytes of ``p``'s closed segments at or past its remote end as last noted (all of them before any note)."""
    remote = internals(p).remote
    end = remote[1] if remote is not None else -1
    return sum(s.size for s in p.segments[:-1] if s.base_offset >= end)


def _maybe_unshipped(p: Partition) -> bool:
    """Whether a partition this handle does not write may hold closed segments past its remote end as last
    noted (from this handle's view of its segments): only then is its writer lock worth a turn."""
    remote = internals(p).remote
    segs = p.segments
    return len(segs) > 1 and (remote is None or segs[-1].base_offset > remote[1])


def _shippable_segments(p: Partition) -> list[tuple[int, int, int]] | None:
    """:meth:`PartitionInternals.shippable_segments` of ``p``, None when another handle writes it. A partition
    nobody writes (its producers closed, handed over and went idle) would otherwise keep its last closed
    segments unshipped until the next append: its free writer lock is taken for the moment of the listing
    (which needs the writer's knowledge of what is fsynced: a release fsyncs the rolled segments) and given
    back at once, before any request to the bucket."""
    if p.is_writer:
        return internals(p).shippable_segments()
    with internals(p).writer_turn():
        if not p.try_become_writer():
            return None
        try:
            return internals(p).shippable_segments()
        finally:
            p.release_writer()


def _waiting(p: Partition) -> int:
    """Closed segments of ``p`` not in its remote log as last noted (all of them before any note)."""
    ii = internals(p)
    end = ii.remote[1] if ii.remote is not None else -1
    return sum(1 for s in ii.shippable_segments() if s[1] > end)
