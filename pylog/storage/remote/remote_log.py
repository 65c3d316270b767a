"""RemoteLog: one partition's remote log in an object store: shipping, reads, retention, checks, restore.

What each operation does to the bucket, in order (the manifest is the commit point; see
:mod:`pylog.storage.remote.manifest`):

- **ship** a sealed segment (:meth:`RemoteLog.ship_segment`): check it locally (:mod:`.local_segment`: every
  batch's CRC, sealed indexes, the aborted-transaction index's entries), PUT its log, indexes (its
  aborted-transaction index among them, when it has one) and producer snapshot with ``If-None-Match: *`` under
  content-derived names, then commit the manifest with ``If-Match``. A crash anywhere before the commit
  leaves objects no manifest names; the next ship of that segment finds them (412), checks they hold the
  same bytes (size and CRC in their metadata) and goes on: re-upload is idempotent. Two processes shipping
  one partition both succeed or one gets :class:`~pylog.errors.RemoteConflictError`; neither overwrites the
  other's committed state.
- **commit** (:meth:`RemoteLog.commit`): read the manifest and its ETag, apply a pure change, write it back
  conditionally; on a lost race, re-read and re-apply, at most :data:`COMMIT_ATTEMPTS` times.
- **read** (:meth:`RemoteLog.read`, by :mod:`.reading`): the segment in the manifest last loaded, the
  position in its shipped offset index, then whole batches through a bounded cache of aligned log pieces
  (:mod:`.chunks`), each batch checked (length, magic, CRC-32C, offset order) on every read. Shipped objects
  never change, so cached pieces are never stale; like a local reader still holding a segment that retention
  unlinked, a reader whose manifest predates a remote retention pass may serve its pieces until it reloads.
- **retention** (:meth:`RemoteLog.enforce_retention`): Kafka's rules over the shipped segments; commit the
  manifest without them (log start raised) *before* deleting their objects; the same pass deletes objects
  below the log start that an interrupted earlier pass left behind.
- **restore** (:meth:`RemoteLog.restore`, by :mod:`.download`): every shipped segment into a new partition
  directory, each file checked against the manifest's size and CRC, with a dirty checkpoint, so the first
  writer re-validates every batch (docs/GUARANTEES.md).

RemoteLog is the facade: it owns the manifest (load, cache, conditional commit) and orders each operation's
steps; reading a local segment (:mod:`.local_segment`), remote reads (:mod:`.reading`) and downloads
(:mod:`.download`) are parts that need nothing from each other or from it beyond what it passes.

Thread safety: methods may be called from several threads: the cached manifest is replaced, never mutated,
and the index cache and the chunk cache change under their locks. Two ``RemoteLog`` objects (in one process
or many) for one partition coordinate through the manifest's conditional writes alone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Callable

from ...errors import (InvalidArgumentError, RemoteConflictError, RemoteDataCorruptError, RemoteObjectMissingError)
from ..filenames import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, segment_path
from ..retention import deletable_prefix
from .chunks import ChunkCache
from .download import SNAPSHOT_SUFFIX, TXN_INDEX_SUFFIX, restore_partition, segment_files
from .layout import manifest_name, parse_segment_object, partition_prefix, segment_object
from .local_segment import read_local_segment
from .manifest import MAX_MANIFEST_BYTES, Manifest, RemoteSegment, decode_manifest, encode_manifest
from .objects import ObjectStore
from .reading import RemoteBatches, RemoteReader

__all__ = ["RemoteLog", "RemoteBatches", "RemoteRetention", "COMMIT_ATTEMPTS", "EVENT_PUT", "EVENT_COMMITTED"]

#: How often a commit re-reads the manifest after losing a conditional write before giving up.
COMMIT_ATTEMPTS = 8
#: Metadata names on every shipped object (x-amz-meta-*): what a re-upload compares.
_META_CRC = "pylog-crc32c"
_META_SIZE = "pylog-size"
#: Events reported to ``on_event`` while shipping, in order: each object PUT, then the commit.
EVENT_PUT = "put"
EVENT_COMMITTED = "committed"


@dataclass(frozen=True)
class RemoteRetention:
    """What one remote retention pass removed."""

    deleted_segments: tuple[int, ...]
    bytes_deleted: int
    reasons: tuple[str, ...]
    log_start_offset: int
    #: Objects deleted that no manifest named (left by an interrupted pass or upload below the log start).
    orphans_deleted: int


class RemoteLog:
    """The remote log of ``topic``/``partition`` in ``objects``.

    :param on_event: called as ``on_event(event, name)`` after each object PUT (``"put"``) and after the
        manifest commit (``"committed"``) while shipping: progress for the uploader's status (and the crash
        tests, which stop a shipping process at exactly these points).
    :param chunks: the cache of fetched log pieces remote reads go through; a store passes one for all its
        partitions. Default: one of this RemoteLog's own, sized by ``objects``' settings.
    """

    def __init__(self, objects: ObjectStore, topic: str, partition: int,
                 on_event: Callable[[str, str], None] | None = None, chunks: ChunkCache | None = None) -> None:
        self.objects = objects
        self.topic = topic
        self.partition = partition
        self.on_event = on_event
        self.chunks = chunks if chunks is not None else ChunkCache(objects.config.read_chunk_bytes,
                                                                   objects.config.read_cache_bytes)
        self._reader = RemoteReader(objects, topic, partition, self.chunks)
        self._manifest_name = manifest_name(topic, partition)
        self._lock = threading.Lock()
        self._cached: Manifest | None = None
        #: The ETag of :attr:`_cached` when this object loaded or wrote it (None: unknown or never written).
        self._cached_etag: str | None = None

    def __repr__(self) -> str:
        return f"RemoteLog({self.objects.url(partition_prefix(self.topic, self.partition))!r})"

    # ------------------------------------------------------------------------------------------ manifest

    def load(self) -> tuple[Manifest, str | None]:
        """``(manifest, ETag)`` as committed now; an empty manifest and None when none was ever written.

        :raises RemoteDataCorruptError: when the stored manifest is damaged or names another partition.
        """
        try:
            raw, etag = self.objects.get(self._manifest_name, max_bytes=MAX_MANIFEST_BYTES)
        except RemoteObjectMissingError:
            m: Manifest = Manifest(self.topic, self.partition)
            self._cached, self._cached_etag = m, None
            return m, None
        m = decode_manifest(raw, self.objects.url(self._manifest_name))
        if (m.topic, m.partition) != (self.topic, self.partition):
            raise RemoteDataCorruptError(f"remote manifest of {m.topic}/{m.partition} found for "
                                         f"{self.topic}/{self.partition}", self.objects.url(self._manifest_name))
        self._cached, self._cached_etag = m, etag
        return m, etag

    def manifest(self, refresh: bool = False) -> Manifest:
        """The manifest last loaded (loading it if none was, or with ``refresh``)."""
        m = self._cached
        return self.load()[0] if m is None or refresh else m

    def commit(self, change: Callable[[Manifest], Manifest]) -> Manifest:
        """Apply ``change`` (a pure function of the committed manifest; returning its argument means "nothing
        to do") and write the result conditionally, re-reading and re-applying after a lost race. The first
        attempt starts from the manifest this object last wrote or loaded, when it knows its ETag (the usual
        case of one shipper: no read per commit); the conditional write refuses it if that is stale.

        :raises RemoteConflictError: when ``change`` refuses the committed state, or after
            :data:`COMMIT_ATTEMPTS` lost races.
        """
        m, etag = self._cached, self._cached_etag
        for attempt in range(COMMIT_ATTEMPTS):
            loaded = m is None or etag is None or attempt > 0
            if loaded:
                m, etag = self.load()
            assert m is not None
            try:
                new = change(m)
            except RemoteConflictError:
                if loaded:
                    raise
                continue  # refused on a manifest that may be stale: decide again on the committed one
            if new is m:
                return m  # nothing to do (on a stale manifest too: a log only grows and its start only rises)
            new = replace(new, epoch=m.epoch + 1)
            try:
                written = self.objects.put_replacing(self._manifest_name, encode_manifest(new), etag)
            except RemoteConflictError:
                continue  # another process committed in between: decide again on its state
            self._cached, self._cached_etag = new, written
            return new
        raise RemoteConflictError(f"the manifest kept changing under {COMMIT_ATTEMPTS} attempts to commit",
                                  self.objects.url(self._manifest_name))

    # ------------------------------------------------------------------------------------------ shipping

    def ship_segment(self, directory: str, base_offset: int) -> RemoteSegment | None:
        """Ship the sealed segment at ``base_offset`` of the partition in ``directory`` and commit it.

        The segment must be closed (a later segment exists) with sealed indexes. Returns its manifest entry
        (the committed one when it was shipped before), or None for an empty segment (nothing to ship).

        :raises InvalidArgumentError: when the segment is the active one or does not exist.
        :raises CorruptRecordError: when a batch or an index of the local segment does not check.
        :raises RemoteConflictError: when the remote log holds other content for these offsets or does not
            end where this segment starts. :raises RemoteStorageError: when the store fails.
        """
        try:
            log = open(segment_path(directory, base_offset, LOG_SUFFIX), "rb")
        except FileNotFoundError:
            raise InvalidArgumentError(f"no segment at {base_offset} in {directory}") from None
        # One open file for the check, the CRC and the upload: the bytes checked are the bytes shipped, even
        # if the name is replaced or unlinked meanwhile.
        with log:
            local = read_local_segment(directory, base_offset, log)
            if local is None:
                return None
            seg = local.entry
            shipped = self.manifest().find(seg.base_offset)
            if shipped is not None and shipped == seg:
                return shipped
            log.seek(0)
            self._put_object(LOG_SUFFIX, seg, log, seg.log_size, seg.log_crc)
        self._put_object(INDEX_SUFFIX, seg, local.index, seg.index_size, seg.index_crc)
        self._put_object(TIMEINDEX_SUFFIX, seg, local.timeindex, seg.timeindex_size, seg.timeindex_crc)
        if local.snapshot is not None:
            self._put_object(SNAPSHOT_SUFFIX, seg, local.snapshot, seg.snapshot_size, seg.snapshot_crc)
        if local.txnindex is not None:
            self._put_object(TXN_INDEX_SUFFIX, seg, local.txnindex, seg.txnindex_size, seg.txnindex_crc)
        self.commit(lambda m: m.with_segment(seg))
        self._event(EVENT_COMMITTED, self._manifest_name)
        return seg

    def _put_object(self, suffix: str, seg: RemoteSegment, body: object, size: int, crc: int) -> None:
        name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, suffix)
        meta = {_META_CRC: f"{crc:08x}", _META_SIZE: str(size)}
        try:
            self.objects.put_new(name, body, size, meta, crc)  # type: ignore[arg-type]
        except RemoteConflictError:
            # Already there: an earlier attempt (this process before a crash, or another shipper) wrote it,
            # or botocore retried a PUT that had succeeded. Same bytes: done; else refuse.
            info = self.objects.head(name)
            if info is None or info.metadata.get(_META_CRC) != f"{crc:08x}" or info.size != size:
                found = f"{info.size} bytes, CRC {info.metadata.get(_META_CRC)}" if info is not None else "gone"
                raise RemoteConflictError(f"{suffix} object exists with other content ({found}; expected {size} "
                                          f"bytes, CRC {crc:08x})", self.objects.url(name)) from None
        self._event(EVENT_PUT, name)

    def _event(self, event: str, name: str) -> None:
        if self.on_event is not None:
            self.on_event(event, name)

    # --------------------------------------------------------------------------------------------- reads

    def read(self, offset: int, max_bytes: int, refresh: bool = False) -> RemoteBatches:
        """Whole, checked batches of the shipped segment holding ``offset``, the first one holding it: at most
        ``max_bytes`` of them, but always that first batch whole (as Kafka's fetch does). By the manifest
        last loaded, or (``refresh``) by the committed one.

        :raises OffsetOutOfRangeError: when no shipped segment holds ``offset`` (below the remote log start or
            at/after the remote end). :raises RemoteDataCorruptError: when fetched bytes do not check.
        """
        try:
            return self._reader.read(offset, max_bytes, self.manifest(refresh))
        except RemoteObjectMissingError:
            if refresh:
                raise
            # Remote retention (maybe in another process) deleted what the cached manifest names: once more
            # with the committed manifest, which then says the offset is out of range (or where it is now).
            return self._reader.read(offset, max_bytes, self.manifest(refresh=True))

    def aborted(self, start: int, end: int, refresh: bool = False) -> dict[int, list[tuple[int, int]]]:
        """``{producer id: [(first offset, last offset), ...]}`` of the aborted transactions the shipped
        aborted-transaction indexes record over ``[start, end)`` (see :meth:`RemoteReader.aborted
        <pylog.storage.remote.reading.RemoteReader.aborted>`), by the manifest last loaded.

        :raises RemoteStorageError: when a segment's index is unknown (shipped by a version-1 writer) or the
            bucket fails. :raises RemoteDataCorruptError: when a shipped index does not check.
        """
        try:
            return self._reader.aborted(start, end, self.manifest(refresh))
        except RemoteObjectMissingError:
            if refresh:
                raise
            return self._reader.aborted(start, end, self.manifest(refresh=True))  # as in :meth:`read`

    # ------------------------------------------------------------------------------------------ retention

    def enforce_retention(self, now_ms: int, retention_ms: int, retention_bytes: int,
                          local_bytes: int = 0) -> RemoteRetention:
        """Drop the oldest shipped segments by Kafka's rules (``retention.ms``, ``retention.bytes`` counting
        the remote log and ``local_bytes`` of the local log after it), then delete their objects.

        The manifest is committed first, so a crash before the deletions leaves only objects below the log
        start, which this pass deletes next time (``orphans_deleted``).
        """
        remote_bytes = max(retention_bytes - local_bytes, 0) if retention_bytes >= 0 else -1
        reasons: list[str] = []

        def change(m: Manifest) -> Manifest:
            views = [_RetentionView(s.base_offset, s.log_size, s.max_timestamp) for s in m.segments]
            count, why = deletable_prefix(views, m.log_start_offset, now_ms, retention_ms, remote_bytes)
            reasons[:] = why
            return m.without_head(count)

        before = self.manifest(refresh=True)
        after = self.commit(change)
        dropped = [s for s in before.segments if s.end_offset <= after.log_start_offset]
        orphans = self._delete_below(after.log_start_offset, {s.base_offset for s in dropped})
        return RemoteRetention(tuple(s.base_offset for s in dropped), sum(s.log_size for s in dropped),
                               tuple(reasons) if dropped else (), after.log_start_offset, orphans)

    def _delete_below(self, log_start: int, dropped: set[int]) -> int:
        """Delete every segment object wholly below ``log_start``: those of ``dropped`` and any orphans.
        Returns how many orphans (objects of segments not in ``dropped``) went."""
        m = self.manifest()
        first_kept = m.segments[0].base_offset if m.segments else log_start
        names, orphans = [], 0
        for info in self.objects.list(partition_prefix(self.topic, self.partition)):
            parsed = parse_segment_object(info.key)
            if parsed is None or parsed[0] >= first_kept:
                continue  # the manifest, kept segments, and uploads at or past the log start (maybe in flight)
            names.append(info.key)
            orphans += parsed[0] not in dropped
        self.objects.delete(names)
        return orphans

    # ------------------------------------------------------------------------------------------ checking

    def check(self, full: bool = False) -> list[str]:
        """Problems of the remote log: each object the manifest names must exist with its size (and with
        ``full``, its CRC: every byte is downloaded). Returns one line per problem; empty means sound."""
        problems: list[str] = []
        m = self.manifest(refresh=True)
        for seg in m.segments:
            for suffix, size, crc in segment_files(seg):
                name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, suffix)
                info = self.objects.head(name)
                if info is None:
                    problems.append(f"{self.objects.url(name)}: missing")
                elif info.size != size:
                    problems.append(f"{self.objects.url(name)}: {info.size} bytes, the manifest says {size}")
                elif full:
                    got = self.objects.download(name, _Discard(), size)
                    if got != crc:
                        problems.append(f"{self.objects.url(name)}: CRC {got:08x}, the manifest says {crc:08x}")
        return problems

    # ------------------------------------------------------------------------------------------- restore

    def restore(self, directory: str) -> Manifest:
        """Rebuild the partition in ``directory`` (absent or empty) from the committed remote log: every
        shipped segment with its indexes, the last one's producer snapshot, and a dirty checkpoint with the
        remote log start (:mod:`.download`). Returns the manifest restored.

        :raises StorePathError: when ``directory`` holds files.
        :raises RemoteDataCorruptError: when an object does not match the manifest.
        :raises RemoteObjectMissingError: when an object the manifest names is gone.
        """
        m = self.manifest(refresh=True)
        restore_partition(self.objects, self.topic, self.partition, m, directory)
        return m


@dataclass
class _RetentionView:
    """A shipped segment as the retention rules (storage/retention.py) read one."""

    base_offset: int
    size: int
    max_timestamp: int


class _Discard:
    """A sink for :meth:`ObjectStore.download` when only the CRC is wanted."""

    def write(self, data: bytes) -> int:
        return len(data)
