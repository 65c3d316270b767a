"""Remote reads: whole, checked batches of a shipped segment, found through its shipped offset index.

:class:`RemoteReader` serves :meth:`RemoteLog.read <pylog.storage.remote.remote_log.RemoteLog.read>` for the
manifest it is given: the segment holding the offset, the position from the segment's shipped offset index
(fetched once, checked against the manifest's size and CRC and as a sealed index, kept in a small LRU), then
whole batches from ranged GETs through the shared :class:`~pylog.storage.remote.chunks.ChunkCache`.

Invariants:
- Every batch returned was checked on this read (length, magic, CRC-32C, offset order); a bad one raises
  :class:`~pylog.errors.RemoteDataCorruptError`, never comes back as data.
- A read returns at least the whole batch holding the offset, then whole batches up to ``max_bytes``
  (Kafka's fetch rule), and fetches at most that batch or ``max_bytes`` (capped at the largest batch) plus
  :data:`READ_CHUNK` beyond the index entry's position.
- Thread-safe: the index cache changes under a lock; the rest is per call.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from ...errors import CorruptRecordError, OffsetOutOfRangeError, RemoteDataCorruptError, RemoteStorageError
from ..filenames import INDEX_SUFFIX, LOG_SUFFIX
from ..records.format import HEADER_SIZE, MAX_BATCH_SIZE, BatchHeader, check_header, crc32c, parse_header
from ..records.views import checked_prefix
from .chunks import ChunkCache
from .index_file import MAX_SEALED_INDEX_BYTES, OFFSET_INDEX_MAGIC, SealedIndex, check_sealed
from .layout import segment_object
from .manifest import Manifest, RemoteSegment
from .objects import ObjectStore

__all__ = ["RemoteReader", "RemoteBatches", "READ_CHUNK", "INDEX_CACHE_SIZE"]

#: Bytes a read has in hand at least per fetch: index entries are index.interval.bytes apart (4 KiB by
#: default), so one fetch usually covers the scan from the entry and the batches asked for.
READ_CHUNK = 64 << 10
#: Shipped offset indexes kept parsed per reader (each a few KiB to a few MiB).
INDEX_CACHE_SIZE = 16


@dataclass(frozen=True)
class RemoteBatches:
    """Whole, checked batches read from a shipped segment: ``data`` is the bytes of the log file from
    ``position``; its first batch holds ``offset`` (the offset asked for) and ``next_offset`` follows the last."""

    segment: RemoteSegment
    position: int
    data: bytes
    offset: int
    next_offset: int


class RemoteReader:
    """Reads of ``topic``/``partition``'s shipped segments in ``objects``, through ``chunks``."""

    def __init__(self, objects: ObjectStore, topic: str, partition: int, chunks: ChunkCache) -> None:
        self.objects, self.topic, self.partition, self.chunks = objects, topic, partition, chunks
        self._lock = threading.Lock()
        self._indexes: OrderedDict[tuple[int, int], SealedIndex] = OrderedDict()

    def read(self, offset: int, max_bytes: int, m: Manifest) -> RemoteBatches:
        """The batches at ``offset`` by manifest ``m`` (see :meth:`RemoteLog.read`).

        :raises OffsetOutOfRangeError: when no segment of ``m`` holds ``offset``.
        :raises RemoteObjectMissingError: when an object ``m`` names is gone.
        """
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
        name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, INDEX_SUFFIX)
        where = self.objects.url(name)
        raw, _ = self.objects.get(name, max_bytes=min(seg.index_size, MAX_SEALED_INDEX_BYTES))
        if len(raw) != seg.index_size or crc32c(raw) != seg.index_crc:
            raise RemoteDataCorruptError(f"object of {len(raw)} bytes, CRC {crc32c(raw):08x}: the manifest says "
                                         f"{seg.index_size} bytes, CRC {seg.index_crc:08x}", where, 0)
        try:
            index = check_sealed(raw, OFFSET_INDEX_MAGIC, seg.base_offset, where)
        except CorruptRecordError as exc:
            raise RemoteDataCorruptError(exc.reason, where, exc.position) from None
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > INDEX_CACHE_SIZE:
                self._indexes.popitem(last=False)
        return index


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
