"""RemoteLog: one partition's remote log in an object store: shipping, reads, retention, checks, restore.

What each operation does to the bucket, in order (the manifest is the commit point; see
:mod:`pylog.storage.remote.manifest`):

- **ship** a sealed segment (:meth:`RemoteLog.ship_segment`): check it locally (every batch's CRC, sealed
  indexes), PUT its log, indexes and producer snapshot with ``If-None-Match: *`` under content-derived names,
  then commit the manifest with ``If-Match``. A crash anywhere before the commit leaves objects no manifest
  names; the next ship of that segment finds them (412), checks they hold the same bytes (size and CRC in
  their metadata) and goes on: re-upload is idempotent. Two processes shipping one partition both succeed
  or one gets :class:`~pylog.errors.RemoteConflictError`; neither overwrites the other's committed state.
- **commit** (:meth:`RemoteLog.commit`): read the manifest and its ETag, apply a pure change, write it back
  conditionally; on a lost race, re-read and re-apply, at most :data:`COMMIT_ATTEMPTS` times.
- **read** (:meth:`RemoteLog.read`): find the segment in the manifest last loaded, the position in its shipped
  offset index (fetched once, checked against the manifest's CRC, kept in a small cache), then whole batches
  from ranged GETs through a bounded cache of aligned log pieces (:mod:`.chunks`), each batch checked
  (length, magic, CRC-32C, offset order) every time before it is returned. Shipped objects never change, so
  cached pieces are never stale; like a local reader still holding a segment that retention unlinked, a
  reader whose manifest predates a remote retention pass may serve its pieces until it reloads.
- **retention** (:meth:`RemoteLog.enforce_retention`): Kafka's rules over the shipped segments; commit the
  manifest without them (log start raised) *before* deleting their objects; the same pass deletes objects
  below the log start that an interrupted earlier pass left behind.
- **restore** (:meth:`RemoteLog.restore`): download every shipped segment into a new partition directory,
  each file checked against the manifest's size and CRC, with a dirty checkpoint, so the first writer
  re-validates every batch (docs/GUARANTEES.md).

Thread safety: methods may be called from several threads; the manifest and index caches are replaced, not
mutated. Two ``RemoteLog`` objects (in one process or many) for one partition coordinate through the
manifest's conditional writes alone.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import BinaryIO, Callable

from ...errors import (CorruptRecordError, InvalidArgumentError, OffsetOutOfRangeError, RemoteConflictError,
                       RemoteDataCorruptError, RemoteObjectMissingError, RemoteStorageError, StorePathError)
from ..checkpoint import Checkpoint, write_checkpoint
from ..fileio import fsync_dir
from ..filenames import CHECKPOINT_FILE, INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, list_segment_bases, segment_path
from ..producer_state import SNAPSHOT_FILE, ProducerState
from ..records.format import HEADER_SIZE, MAX_BATCH_SIZE, BatchHeader, check_header, crc32c, parse_header
from ..records.views import checked_prefix
from ..retention import deletable_prefix
from .index_file import OFFSET_INDEX_MAGIC, TIME_INDEX_MAGIC, SealedIndex, check_sealed
from .layout import manifest_name, parse_segment_object, partition_prefix, segment_object
from .chunks import ChunkCache
from .manifest import MAX_MANIFEST_BYTES, Manifest, RemoteSegment, decode_manifest, encode_manifest
from .objects import ObjectStore

__all__ = ["RemoteLog", "RemoteBatches", "RemoteRetention", "COMMIT_ATTEMPTS", "EVENT_PUT", "EVENT_COMMITTED"]

#: How often a commit re-reads the manifest after losing a conditional write before giving up.
COMMIT_ATTEMPTS = 8
#: Shipped offset indexes kept parsed per RemoteLog (each a few KiB to a few MiB).
INDEX_CACHE_SIZE = 16
#: Sealed index files are read whole; larger than this is damage (segment.index.bytes is at most 2 GiB, but
#: a sealed file holds only its used entries).
_MAX_INDEX_BYTES = 1 << 31
#: Bytes a remote read fetches at least per GET: index entries are index.interval.bytes apart (4 KiB by
#: default), so one GET usually covers the scan from the entry and the batches asked for.
READ_CHUNK = 64 << 10
#: Metadata names on every shipped object (x-amz-meta-*): what a re-upload compares.
_META_CRC = "pylog-crc32c"
_META_SIZE = "pylog-size"
#: Events reported to ``on_event`` while shipping, in order: each object PUT, then the commit.
EVENT_PUT = "put"
EVENT_COMMITTED = "committed"


@dataclass(frozen=True)
class RemoteBatches:
    """Whole, checked batches read from a shipped segment: ``data`` is the bytes of the log file from
    ``position``; its first batch holds ``offset`` (the offset asked for) and ``next_offset`` follows the last."""

    segment: RemoteSegment
    position: int
    data: bytes
    offset: int
    next_offset: int


@dataclass(frozen=True)
class RemoteRetention:
    """What one remote retention pass removed."""

    deleted_segments: tuple[int, ...]
    bytes_deleted: int
    reasons: tuple[str, ...]
    log_start_offset: int
    #: Objects deleted that no manifest named (left by an interrupted pass or upload below the log start).
    orphans_deleted: int


@dataclass(frozen=True)
class _LocalSegment:
    """A sealed local segment read for shipping: its manifest entry and the bytes of its small files."""

    entry: RemoteSegment
    index: bytes
    timeindex: bytes
    snapshot: bytes | None


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
        self.chunks = chunks if chunks is not None else ChunkCache(objects.config.read_chunk_bytes,
                                                                   objects.config.read_cache_bytes)
        self.topic = topic
        self.partition = partition
        self.on_event = on_event
        self._manifest_name = manifest_name(topic, partition)
        self._lock = threading.Lock()
        self._cached: Manifest | None = None
        self._indexes: OrderedDict[tuple[int, int], SealedIndex] = OrderedDict()

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
            self._cached = m
            return m, None
        m = decode_manifest(raw, self.objects.url(self._manifest_name))
        if (m.topic, m.partition) != (self.topic, self.partition):
            raise RemoteDataCorruptError(f"remote manifest of {m.topic}/{m.partition} found for "
                                         f"{self.topic}/{self.partition}", self.objects.url(self._manifest_name))
        self._cached = m
        return m, etag

    def manifest(self, refresh: bool = False) -> Manifest:
        """The manifest last loaded (loading it if none was, or with ``refresh``)."""
        m = self._cached
        return self.load()[0] if m is None or refresh else m

    def commit(self, change: Callable[[Manifest], Manifest]) -> Manifest:
        """Apply ``change`` (a pure function of the committed manifest; returning its argument means "nothing
        to do") and write the result conditionally, re-reading and re-applying after a lost race.

        :raises RemoteConflictError: when ``change`` refuses the committed state, or after
            :data:`COMMIT_ATTEMPTS` lost races.
        """
        for _ in range(COMMIT_ATTEMPTS):
            m, etag = self.load()
            new = change(m)
            if new is m:
                return m
            new = replace(new, epoch=m.epoch + 1)
            try:
                self.objects.put_replacing(self._manifest_name, encode_manifest(new), etag)
            except RemoteConflictError:
                continue  # another process committed in between: decide again on its state
            self._cached = new
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
            local = self._read_local(directory, base_offset, log)
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
            self._put_object(".snapshot", seg, local.snapshot, seg.snapshot_size, seg.snapshot_crc)
        self.commit(lambda m: m.with_segment(seg))
        self._event(EVENT_COMMITTED, self._manifest_name)
        return seg

    def _read_local(self, directory: str, base_offset: int, log: BinaryIO) -> _LocalSegment | None:
        """The manifest entry and small files of the closed segment whose open log file is ``log``."""
        bases = list_segment_bases(directory)
        if base_offset == bases[-1]:
            raise InvalidArgumentError(f"the segment at {base_offset} is the active one in {directory}: only "
                                       "closed segments are shipped")
        log_path = segment_path(directory, base_offset, LOG_SUFFIX)
        try:
            index = _read_small(segment_path(directory, base_offset, INDEX_SUFFIX))
            timeindex = _read_small(segment_path(directory, base_offset, TIMEINDEX_SUFFIX))
        except FileNotFoundError as exc:
            raise InvalidArgumentError(f"the segment at {base_offset} in {directory} has no {exc.filename}: "
                                       "deleted meanwhile, or not a sealed segment") from None
        check_sealed(index, OFFSET_INDEX_MAGIC, base_offset, segment_path(directory, base_offset, INDEX_SUFFIX))
        times = check_sealed(timeindex, TIME_INDEX_MAGIC, base_offset,
                             segment_path(directory, base_offset, TIMEINDEX_SUFFIX))
        size = os.fstat(log.fileno()).st_size
        if size == 0:
            return None
        with mmap.mmap(log.fileno(), size, prot=mmap.PROT_READ) as mm:
            end_pos, last = checked_prefix(mm, 0, size, base_offset - 1)
            if end_pos != size:
                if end_pos + HEADER_SIZE <= size:  # a header that says what is wrong, when it can
                    check_header(parse_header(mm, end_pos), log_path, end_pos)
                raise CorruptRecordError("batch does not check (length, magic, CRC or offset order); "
                                         "damaged segments are not shipped", log_path, end_pos)
            log_crc = crc32c(mm)
        snapshot = self._snapshot_at(directory, last + 1)
        entry = RemoteSegment(base_offset, last + 1, times.max_timestamp, size, log_crc, len(index), crc32c(index),
                              len(timeindex), crc32c(timeindex),
                              len(snapshot) if snapshot is not None else -1,
                              crc32c(snapshot) if snapshot is not None else 0)
        return _LocalSegment(entry, index, timeindex, snapshot)

    @staticmethod
    def _snapshot_at(directory: str, end_offset: int) -> bytes | None:
        """The producer snapshot's bytes when it is as of ``end_offset`` (the one written when this segment
        rolled), else None: a later snapshot describes offsets a restore up to here would not hold."""
        found = ProducerState.read_snapshot(directory)
        if found is None or found[1] != end_offset:
            return None
        snapshot = _read_small(os.path.join(directory, SNAPSHOT_FILE))
        again = ProducerState.read_snapshot(directory)  # replaced between the two reads: ship none
        return snapshot if again is not None and again[1] == end_offset else None

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
        ``max_bytes`` of them, but always that first batch whole (as Kafka's fetch does).

        :raises OffsetOutOfRangeError: when no shipped segment holds ``offset`` (below the remote log start or
            at/after the remote end). :raises RemoteDataCorruptError: when fetched bytes do not check.
        """
        try:
            return self._read(offset, max_bytes, self.manifest(refresh))
        except RemoteObjectMissingError:
            if refresh:
                raise
            # Remote retention (maybe in another process) deleted what the cached manifest names: once more
            # with the committed manifest, which then says the offset is out of range (or where it is now).
            return self._read(offset, max_bytes, self.manifest(refresh=True))

    def _read(self, offset: int, max_bytes: int, m: Manifest) -> RemoteBatches:
        seg = m.find(offset)
        if seg is None:
            raise OffsetOutOfRangeError(f"offset {offset} is not in the remote log [{m.log_start_offset}, "
                                        f"{m.end_offset}) of {self.topic}/{self.partition}", offset,
                                        m.log_start_offset, m.end_offset)
        name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, LOG_SUFFIX)
        window = _Window(self.objects, self.chunks, name, seg.log_size,
                         max(min(max_bytes, MAX_BATCH_SIZE), READ_CHUNK))
        pos = self._offset_index(seg).position_for(offset)
        while True:  # walk headers from the index entry to the batch holding the offset
            h = self._header(window, pos)
            if h.next_offset > offset:
                break
            pos += h.size
        start, end = pos, pos + h.size  # the first batch, whole, whatever max_bytes says
        while end < seg.log_size and end + HEADER_SIZE <= window.end:
            h = self._header(window, end)
            if end + h.size - start > max_bytes or end + h.size > window.end:
                break
            end += h.size
        data = window.bytes(start, end)
        checked_end, last = checked_prefix(data, 0, len(data), -1)
        if checked_end != len(data):
            raise RemoteDataCorruptError("batch checksum or offset order does not check", self.objects.url(name),
                                         start + checked_end)
        return RemoteBatches(seg, start, data, offset, last + 1)

    def _header(self, window: "_Window", pos: int) -> BatchHeader:
        """The checked header of the batch at ``pos`` (fetching more of the object when needed)."""
        where = self.objects.url(window.name)
        if pos + HEADER_SIZE > window.size:
            raise RemoteDataCorruptError(f"batch header at {pos} runs past the end of the {window.size}-byte log",
                                         where, pos)
        h = parse_header(window.bytes(pos, pos + HEADER_SIZE))
        try:
            check_header(h, where, pos)
        except CorruptRecordError as exc:
            raise RemoteDataCorruptError(exc.reason, where, pos) from None
        if pos + h.size > window.size:
            raise RemoteDataCorruptError(f"batch of {h.size} bytes at {pos} runs past the end of the log", where, pos)
        return h

    def _offset_index(self, seg: RemoteSegment) -> SealedIndex:
        key = (seg.base_offset, seg.log_crc)
        with self._lock:
            found = self._indexes.get(key)
            if found is not None:
                self._indexes.move_to_end(key)
                return found
        raw = self._fetch_checked(seg, INDEX_SUFFIX, seg.index_size, seg.index_crc)
        index = self._as_index(raw, seg, OFFSET_INDEX_MAGIC, INDEX_SUFFIX)
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > INDEX_CACHE_SIZE:
                self._indexes.popitem(last=False)
        return index

    def _as_index(self, raw: bytes, seg: RemoteSegment, magic: bytes, suffix: str) -> SealedIndex:
        where = self.objects.url(segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, suffix))
        try:
            return check_sealed(raw, magic, seg.base_offset, where)
        except CorruptRecordError as exc:
            raise RemoteDataCorruptError(exc.reason, where, exc.position) from None

    def _fetch_checked(self, seg: RemoteSegment, suffix: str, size: int, crc: int) -> bytes:
        """A small shipped file, whole, checked against the manifest's size and CRC."""
        name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, suffix)
        raw, _ = self.objects.get(name, max_bytes=min(size, _MAX_INDEX_BYTES))
        if len(raw) != size or crc32c(raw) != crc:
            raise RemoteDataCorruptError(f"object of {len(raw)} bytes, CRC {crc32c(raw):08x}: the manifest says "
                                         f"{size} bytes, CRC {crc:08x}", self.objects.url(name), 0)
        return raw

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
            for suffix, size, crc in self._files(seg):
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

    @staticmethod
    def _files(seg: RemoteSegment) -> list[tuple[str, int, int]]:
        files = [(LOG_SUFFIX, seg.log_size, seg.log_crc), (INDEX_SUFFIX, seg.index_size, seg.index_crc),
                 (TIMEINDEX_SUFFIX, seg.timeindex_size, seg.timeindex_crc)]
        if seg.snapshot_size >= 0:
            files.append((".snapshot", seg.snapshot_size, seg.snapshot_crc))
        return files

    # ------------------------------------------------------------------------------------------- restore

    def restore(self, directory: str) -> Manifest:
        """Rebuild the partition in ``directory`` (absent or empty) from the remote log: every shipped segment
        with its indexes, the last one's producer snapshot, and a dirty checkpoint with the remote log start,
        so that the first writer re-validates every batch. Returns the manifest restored.

        Files are downloaded under temporary names, checked against the manifest's sizes and CRCs, then
        renamed; the checkpoint is written last. :raises StorePathError: when ``directory`` holds files.
        :raises RemoteDataCorruptError: when an object does not match the manifest.
        :raises RemoteObjectMissingError: when an object the manifest names is gone.
        """
        os.makedirs(directory, exist_ok=True)
        if os.listdir(directory):
            raise StorePathError(f"restore needs an empty directory, {directory} holds files")
        m = self.manifest(refresh=True)
        for seg in m.segments:
            for suffix, size, crc in self._files(seg):
                target = (os.path.join(directory, SNAPSHOT_FILE) if suffix == ".snapshot"
                          else segment_path(directory, seg.base_offset, suffix))
                if suffix == ".snapshot" and seg is not m.segments[-1]:
                    continue
                self._download_checked(seg, suffix, size, crc, target)
        if not m.segments:  # nothing shipped: an empty log starting at the remote log start
            open(segment_path(directory, m.log_start_offset, LOG_SUFFIX), "xb").close()
        write_checkpoint(os.path.join(directory, CHECKPOINT_FILE),
                         Checkpoint(recovery_point=0, log_start_offset=m.log_start_offset, clean=False))
        fsync_dir(directory)
        return m

    def _download_checked(self, seg: RemoteSegment, suffix: str, size: int, crc: int, target: str) -> None:
        name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, suffix)
        tmp = target + ".restoring"
        try:
            with open(tmp, "wb") as out:
                got = self.objects.download(name, out, size)
                out.flush()
                os.fsync(out.fileno())
            if got != crc:
                raise RemoteDataCorruptError(f"CRC {got:08x}, the manifest says {crc:08x}", self.objects.url(name), 0)
            os.rename(tmp, target)
        except BaseException:
            _unlink_quietly(tmp)
            raise


class _Window:
    """The part of a remote log one read has in hand: a byte range, refilled through the chunk cache with at
    least ``want`` bytes at a time, so that walking batch headers makes no request per header."""

    def __init__(self, objects: ObjectStore, chunks: ChunkCache, name: str, size: int, want: int) -> None:
        self.objects, self.chunks, self.name, self.size, self.want = objects, chunks, name, size, want
        self.start = self.end = 0
        self.data = b""

    def bytes(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (``end`` at most its size)."""
        if not (self.start <= start and end <= self.end):
            stop = min(start + max(end - start, self.want), self.size)
            if stop - start > MAX_BATCH_SIZE + READ_CHUNK:
                raise RemoteStorageError(f"a read of {stop - start} bytes is over the bound",
                                         self.objects.url(self.name))
            self.data = self.chunks.read(self.objects, self.name, self.size, start, stop)
            self.start, self.end = start, stop
        return self.data[start - self.start:end - self.start]


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


def _read_small(path: str) -> bytes:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > _MAX_INDEX_BYTES:
            raise CorruptRecordError(f"file of {size} bytes where a sealed index or snapshot is expected", path, 0)
        return f.read()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
