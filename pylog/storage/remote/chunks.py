"""ChunkCache: a bounded local cache of fetched pieces of remote segment logs, for remote reads.

A remote read fetches byte ranges of a shipped log. Consumers read forward in steps smaller than a useful
GET, and several readers (the server's fetches, a consumer, Spark tasks) read the same recent segments: each
would GET the same bytes again. The cache keeps fixed-size, aligned chunks (``remote.storage.read.chunk.bytes``)
of the objects read, least recently used out first, up to ``remote.storage.read.cache.bytes`` in all.

Invariants:
- Only immutable objects are cached: segment objects, whose names carry their log's CRC-32C
  (:mod:`.layout`), so a name never stands for other bytes and a cached chunk is never stale. The
  manifest (replaced in place) never goes through here.
- What a chunk holds is whatever the store answered for its range; every batch read from it is checked
  again (CRC-32C) by the reader each time, so the cache cannot turn damage into data.
- Memory is bounded: at most ``cache_bytes`` of chunks are kept (a cache smaller than one chunk keeps none);
  a read larger than the cache is served without keeping what it fetched beyond the bound.
- Thread-safe: lookups and insertions under one lock; fetches run outside it (two threads missing the same
  chunk may both fetch it; the second insertion replaces the first, same bytes).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ...errors import RemoteDataCorruptError
from .objects import ObjectStore

__all__ = ["ChunkCache"]


class ChunkCache:
    """Chunks of ``chunk_bytes`` of immutable objects, at most ``cache_bytes`` in all (0: fetch, keep none)."""

    def __init__(self, chunk_bytes: int, cache_bytes: int) -> None:
        self.chunk_bytes = chunk_bytes
        self.cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._held = 0
        #: Chunks served from the cache, and fetched from the store (for status and tests).
        self.hits = 0
        self.misses = 0

    @property
    def held_bytes(self) -> int:
        return self._held

    def read(self, objects: ObjectStore, name: str, size: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the immutable object ``name`` (``size`` bytes long, per its manifest),
        from cached chunks where there are some and one ranged GET per run of missing chunks.

        :raises RemoteDataCorruptError: when the store's object is shorter than ``size``.
        """
        end = min(end, size)
        if start >= end:
            return b""
        c = self.chunk_bytes
        first, last = start // c, (end - 1) // c
        pieces: list[bytes] = []
        missing_from: int | None = None
        for i in range(first, last + 2):
            chunk = self._get((name, i)) if i <= last else None
            if chunk is None and i <= last:
                if missing_from is None:
                    missing_from = i
                continue
            if missing_from is not None:  # fetch the run of missing chunks [missing_from, i)
                pieces.extend(self._fetch(objects, name, size, missing_from, i))
                missing_from = None
            if chunk is not None:
                pieces.append(chunk)
        data = b"".join(pieces)
        offset = start - first * c
        return data[offset:offset + end - start]

    def _get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
                self.hits += 1
            return chunk

    def _fetch(self, objects: ObjectStore, name: str, size: int, first: int, stop: int) -> list[bytes]:
        c = self.chunk_bytes
        start, end = first * c, min(stop * c, size)
        data, _ = objects.get(name, start, end - start, max_bytes=end - start)
        if len(data) != end - start:
            raise RemoteDataCorruptError(f"the object ends at {start + len(data)}, its manifest says {size} bytes",
                                         objects.url(name), start + len(data))
        chunks = [data[k:k + c] for k in range(0, len(data), c)]
        with self._lock:
            self.misses += len(chunks)
            for i, chunk in enumerate(chunks, first):
                self._put((name, i), chunk)
        return chunks

    def _put(self, key: tuple[str, int], chunk: bytes) -> None:
        """Keep ``chunk`` (under the lock), dropping the least recently used beyond the bound."""
        if len(chunk) > self.cache_bytes:
            return
        old = self._chunks.pop(key, None)
        if old is not None:
            self._held -= len(old)
        self._chunks[key] = chunk
        self._held += len(chunk)
        while self._held > self.cache_bytes:
            _, dropped = self._chunks.popitem(last=False)
            self._held -= len(dropped)
