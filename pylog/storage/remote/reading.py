"""Remote reads: whole, checked batches of a shipped segment, found through its shipped offset index.

:class:`RemoteReader` serves :meth:`RemoteLog.read <pylog.storage.remote.remote_log.RemoteLog.read>` for the
manifest it is given: the segment holding the offset, the position from the segment's shipped offset index
(fetched once, checked against the manifest's size and CRC and as a sealed index, kept in a small LRU), then
whole batches from ranged GETs through the shared :class:`~pylog.storage.remote.chunks.ChunkCache`; and
the aborted transactions of a range for ``read_committed`` reads (:meth:`RemoteReader.aborted`), from the
shipped aborted-transaction indexes (fetched once, checked, kept in a small LRU).

Invariants:
- Every batch returned was checked on this read (length, magic, CRC-32C, offset order); a bad one raises
  :class:`~pylog.errors.RemoteDataCorruptError`, never comes back as data.
- A read returns at least the whole batch holding the offset, then whole batches up to ``max_bytes``
  (Kafka's fetch rule), counted decompressed as local reads count them (a compressed batch weighs what its
  reader will hold, so a read of compressible data cannot decompress to many times ``max_bytes``), and
  fetches at most that batch or ``max_bytes`` (capped at the largest batch) plus :data:`READ_CHUNK` beyond
  the index entry's position.
- The aborted transactions of a range are collected as a local read collects them (Kafka's
  ``collectAbortedTransactions``): from the segment holding the range's start on, stopping at the first entry
  whose last stable offset is at or past the range's end; a segment whose index is not known (shipped by a
  version-1 writer) raises :class:`~pylog.errors.RemoteStorageError` rather than guess.
- Thread-safe: the index caches change under a lock; the rest is per call.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from ...errors import CorruptRecordError, OffsetOutOfRangeError, RemoteDataCorruptError, RemoteStorageError
from ..filenames import INDEX_SUFFIX, LOG_SUFFIX
from ..records.format import HEADER_SIZE, MAX_BATCH_SIZE, BatchHeader, check_header, crc32c, parse_header
from ..records.views import checked_prefix
from .chunks import ChunkCache
from ..txn_index import TXN_INDEX_SUFFIX, AbortedTxn, decode_index
from .index_file import MAX_SEALED_INDEX_BYTES, OFFSET_INDEX_MAGIC, SealedIndex, check_sealed
from .layout import segment_object
from .manifest import TXNINDEX_UNKNOWN, Manifest, RemoteSegment
from .objects import ObjectStore

__all__ = ["RemoteReader", "RemoteBatches", "READ_CHUNK", "INDEX_CACHE_SIZE", "TXN_INDEX_CACHE_SIZE"]

#: Bytes a read has in hand at least per fetch: index entries are index.interval.bytes apart (4 KiB by
#: default), so one fetch usually covers the scan from the entry and the batches asked for.
READ_CHUNK = 64 << 10
#: Shipped offset indexes kept parsed per reader (each a few KiB to a few MiB).
INDEX_CACHE_SIZE = 16
#: Shipped aborted-transaction indexes kept parsed per reader (36 bytes an entry): a read_committed read
#: collects the entries of every later segment that has one, until an entry ends the scan.
TXN_INDEX_CACHE_SIZE = 1024


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
        self._txn_indexes: OrderedDict[tuple[int, int], list[AbortedTxn]] = OrderedDict()

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
        counted = h.decompressed_size  # max_bytes counts batches decompressed, as local reads do
        while end < seg.log_size and end + HEADER_SIZE <= window.end:
            h = self._header(window, end)
            if counted + h.decompressed_size > max_bytes or end + h.size > window.end:
                break
            counted += h.decompressed_size
            end += h.size
        data = window.bytes(start, end)
        checked_end, last = checked_prefix(data, 0, len(data), -1)
        if checked_end != len(data):
            raise RemoteDataCorruptError("batch checksum or offset order does not check", self.objects.url(name),
                                         start + checked_end)
        return RemoteBatches(seg, start, data, offset, last + 1)

    def aborted(self, start: int, end: int, m: Manifest) -> dict[int, list[tuple[int, int]]]:
        """``{producer id: [(first offset, last offset), ...]}`` of the aborted transactions in the shipped
        indexes of ``m`` that cover some offset in ``[start, end)`` (see the module's invariants).

        :raises RemoteStorageError: when a segment's index is not known, or the bucket fails.
        :raises RemoteDataCorruptError: when a shipped index does not check.
        """
        out: dict[int, list[tuple[int, int]]] = {}
        for seg in m.segments:
            if seg.end_offset <= start or seg.txnindex_size == -1:
                continue
            if seg.txnindex_size == TXNINDEX_UNKNOWN:
                raise RemoteStorageError(f"read_committed of {self.topic}/{self.partition} at {start}: the segment "
                                         f"at {seg.base_offset} was shipped without its aborted-transaction index "
                                         "(manifest version 1); read it with read_uncommitted")
            for e in self._txn_index(seg):
                if e.last_offset >= start and e.first_offset < end:
                    out.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
                if e.last_stable_offset >= end:
                    return out
        return out

    def _txn_index(self, seg: RemoteSegment) -> list[AbortedTxn]:
        return self._cached(self._txn_indexes, TXN_INDEX_CACHE_SIZE, seg, TXN_INDEX_SUFFIX, seg.txnindex_size,
                            seg.txnindex_crc, decode_index)

    def _cached(self, cache: "OrderedDict[tuple[int, int], Any]", bound: int, seg: RemoteSegment, suffix: str,
                size: int, crc: int, parse: Callable[[bytes, str], Any]) -> Any:
        """A shipped index of ``seg``, from ``cache`` (at most ``bound`` kept) or fetched, checked against the
        manifest's size and CRC, parsed with ``parse(raw, where)`` (whose CorruptRecordError becomes
        RemoteDataCorruptError) and kept."""
        key = (seg.base_offset, seg.log_crc)
        with self._lock:
            found = cache.get(key)
            if found is not None:
                cache.move_to_end(key)
                return found
        name = segment_object(self.topic, self.partition, seg.base_offset, seg.log_crc, suffix)
        where = self.objects.url(name)
        raw, _ = self.objects.get(name, max_bytes=min(size, MAX_SEALED_INDEX_BYTES))
        if len(raw) != size or crc32c(raw) != crc:
            raise RemoteDataCorruptError(f"object of {len(raw)} bytes, CRC {crc32c(raw):08x}: the manifest says "
                                         f"{size} bytes, CRC {crc:08x}", where, 0)
        try:
            value = parse(raw, where)
        except RemoteDataCorruptError:
            raise
        except CorruptRecordError as exc:
            raise RemoteDataCorruptError(exc.reason, where, exc.position) from None
        with self._lock:
            cache[key] = value
            while len(cache) > bound:
                cache.popitem(last=False)
        return value

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
        return self._cached(self._indexes, INDEX_CACHE_SIZE, seg, INDEX_SUFFIX, seg.index_size, seg.index_crc,
                            lambda raw, where: check_sealed(raw, OFFSET_INDEX_MAGIC, seg.base_offset, where))


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
