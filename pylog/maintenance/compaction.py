"""The log cleaner: Kafka's log compaction (latest record per key, tombstones), swapped in crash-safely.

One cleaning of a partition (:func:`clean_partition`):

1. **Range.** The *dirty* section starts at the cleaner checkpoint's first dirty offset and ends at the
   first *uncleanable* offset: the active segment's base (or the first rolled segment whose background
   fsync is still pending: nothing not yet durable is ever called clean), or earlier, the base of the
   first segment with a record younger than ``min.compaction.lag.ms``, or the base of the segment holding
   the last stable offset (an open transaction is never cleaned). It is cleanable when dirty bytes /
   (clean + dirty bytes) > ``min.cleanable.dirty.ratio``, or when its oldest record is older than
   ``max.compaction.lag.ms`` (or on demand).
2. **Map.** Keys of the dirty section are hashed to 128-bit digests (two independent 64-bit lanes of a
   multiply-xorshift mix, keyed by a random seed drawn per cleaning; keys over 64 bytes use keyed BLAKE2b)
   and kept in an :class:`OffsetMap` of digest -> latest offset whose size is bounded by
   ``log.cleaner.dedupe.buffer.size``. When the map is full the pass ends at a batch boundary and the
   next pass goes on from there. Records of control batches and of aborted transactions are not mapped.
3. **Rewrite.** Every segment from the log start up to the end of the mapped range (never the active one)
   is rewritten in groups whose total size fits ``segment.bytes``: a record is dropped when the map holds
   a later offset for its key, when it is a tombstone (null value) first reached by a cleaning more than
   ``delete.retention.ms`` ago, or when it has no key. Kept records keep their offsets, order,
   timestamps, headers and their batch's attributes and producer fields; a batch that loses nothing is
   copied byte for byte. Transactions are decided whole, batch by batch in offset order, by
   :mod:`.compaction_txn`: aborted transactions' batches go, markers stay until safe.
4. **Swap.** For each group: write ``<base>.log.cleaned`` (+ sealed indexes) and fsync its log, and
   ``<base>.txnindex.cleaned`` (fsynced; a group whose records and index entries would stay the same is
   not rewritten); then
   hand every group of the pass to :meth:`PartitionInternals.swap_in <pylog.partition.PartitionInternals.swap_in>`
   (Kafka's ``replaceSegments``), which swaps them in with one commit under the partition's own locks
   and marks the partition failed if that breaks past the commit point. The numbered crash-safety
   protocol, the manifest and the recovery of an interrupted swap are the storage layer's
   (:mod:`pylog.storage.swap`); this module only writes ``.cleaned`` files (and its cleaner checkpoint)
   and has unfinished ones removed by :meth:`PartitionInternals.remove_swap_leftovers`.

Invariants:
- For every key, at least its latest record below the uncleanable offset survives; offsets are a
  strictly increasing subset of the originals; the active segment is never touched.
- A tombstone survives at least ``delete.retention.ms`` after the first cleaning that reached it (the
  cleaner checkpoint records when each cleaned range was first reached).
- Transactions: the invariants of :mod:`.compaction_txn` (nothing at or past the last stable offset's
  segment is cleaned; aborted records go and never supersede; markers outlive their transactions' records).
- The map never holds more than :func:`map_capacity` keys (about ``3/4 * buffer / 64``: a quarter of the
  buffer is the workspace of the chunk being hashed), so the cleaner's memory for keys, map and merge
  workspace included, stays within ``log.cleaner.dedupe.buffer.size``.
- Readers keep reading: old segments are unlinked, never closed under a reader (see
  :mod:`pylog.partition`), and a reader whose segment was replaced retries on the new one.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import os
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import CleanerStoppedError, CorruptRecordError, PylogError
from ..storage.filenames import CLEANED_SUFFIX, TXN_INDEX_SUFFIX, segment_path
from ..storage.records.format import ATTR_CONTROL, ATTR_TRANSACTIONAL
from ..storage.txn_index import AbortedTxn, index_path, read_index, write_index
from ..index import OffsetIndex
from ..storage.records import BatchView, encode_parts, now_ms
from ..segment import Segment
from ..partition import Partition, internals
from .cleaner_checkpoint import CleanerCheckpoint, read_cleaner_checkpoint, write_cleaner_checkpoint
from .compaction_txn import TxnCleaning, aborted_entries


__all__ = ["CleanResult", "CleanerCheckpoint", "OffsetMap", "key_digests", "map_capacity", "clean_partition",
           "cleanable_range", "read_cleaner_checkpoint", "BYTES_PER_KEY", "CleanerStoppedError"]

log = logging.getLogger("pylog.compaction")

#: Bytes of dedupe buffer one distinct key costs: 24 in the map (two digest words + offset) plus the
#: workspace of merging a chunk into it (a new copy of the arrays) and the chunk's own sort.
BYTES_PER_KEY = 64
#: Most records hashed and merged into the map at a time.
CHUNK_RECORDS = 65536
#: Workspace per record of a chunk (digests, offsets, lengths, sort orders, key bytes), from the buffer.
_CHUNK_BYTES_PER_RECORD = 200


def map_capacity(buffer_bytes: int) -> int:
    """Distinct keys one cleaning pass can map with a dedupe buffer of ``buffer_bytes``."""
    reserved = min(chunk_records(buffer_bytes) * _CHUNK_BYTES_PER_RECORD, buffer_bytes // 4)
    return max(1, (buffer_bytes - reserved) // BYTES_PER_KEY)


def chunk_records(buffer_bytes: int) -> int:
    """Records per chunk for a dedupe buffer: a quarter of the buffer is chunk workspace."""
    return int(min(CHUNK_RECORDS, max(16, buffer_bytes // 4 // _CHUNK_BYTES_PER_RECORD)))
#: Keys up to this many bytes are hashed with numpy in bulk; longer ones one by one with BLAKE2b.
_SHORT_KEY = 64
_U64 = np.uint64
_M1 = _U64(0xFF51AFD7ED558CCD)
_M2 = _U64(0xC4CEB9FE1A85EC53)
_GOLDEN = _U64(0x9E3779B97F4A7C15)


# ---------------------------------------------------------------------------------------------- digests

def _fmix(h: np.ndarray) -> None:
    """MurmurHash3's 64-bit finaliser, in place: a bijective avalanche mix."""
    h ^= h >> _U64(33)
    h *= _M1
    h ^= h >> _U64(33)
    h *= _M2
    h ^= h >> _U64(33)


def key_digests(lengths: np.ndarray, data: Any, seed: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """128-bit digests ``(hi, lo)`` (two uint64 arrays) of the keys given as int32 ``lengths`` (-1 = null)
    and their concatenated bytes ``data``, keyed by ``seed``. Equal keys give equal digests; null and
    empty keys differ."""
    lengths = np.asarray(lengths, np.int32)
    n = len(lengths)
    hi = np.empty(n, _U64)
    lo = np.empty(n, _U64)
    buf = np.frombuffer(data, np.uint8) if memoryview(data).nbytes else np.empty(0, np.uint8)
    lens = np.maximum(lengths, 0).astype(np.int64)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    long_keys = np.flatnonzero(lens > _SHORT_KEY)
    s0 = _U64(seed[0])
    s1 = _U64(seed[1])
    for a in range(0, n, CHUNK_RECORDS):
        b = min(n, a + CHUNK_RECORDS)
        ln = np.minimum(lens[a:b], _SHORT_KEY)
        width = int(ln.max()) if b > a else 0
        words = max(1, (width + 7) // 8)
        mat = np.zeros((b - a, words * 8), np.uint8)
        if width:
            st = starts[a:b]
            if int(ln.min()) == width and int(st[-1] - st[0]) == width * (b - a - 1) and not len(long_keys):
                mat[:, :width] = buf[st[0]:st[0] + width * (b - a)].reshape(b - a, width)
            else:
                rows = np.repeat(np.arange(b - a), ln)
                cols = np.arange(len(rows)) - np.repeat(np.cumsum(ln) - ln, ln)
                mat[rows, cols] = buf[np.repeat(st, ln) + cols]
        w = mat.view("<u8")
        # The length (+1, so null and empty differ) seeds both lanes, so keys that differ only in
        # trailing zero bytes differ too.
        mark = (lengths[a:b].astype(np.int64) + 1).astype(_U64) * _GOLDEN
        h1 = mark ^ s0
        h2 = mark ^ s1
        _fmix(h1)
        _fmix(h2)
        # Each key mixes only its own words, so its digest does not depend on the longest key beside it.
        nw = np.maximum((ln + 7) // 8, 1)
        shortest = int(nw.min())
        for j in range(words):
            if j < shortest:  # every key has this word
                col = w[:, j]
                h1 ^= col
                _fmix(h1)
                h2 += col
                h2 *= _M1
                _fmix(h2)
            else:
                rows = np.flatnonzero(nw > j)
                col = w[rows, j]
                x1 = h1[rows] ^ col
                _fmix(x1)
                h1[rows] = x1
                x2 = (h2[rows] + col) * _M1
                _fmix(x2)
                h2[rows] = x2
        hi[a:b] = h1
        lo[a:b] = h2
    if len(long_keys):
        key = struct.pack("<QQ", seed[0], seed[1])
        mv = memoryview(data)
        for i in long_keys.tolist():
            d = hashlib.blake2b(mv[starts[i]:starts[i + 1]], digest_size=16, key=key).digest()
            hi[i], lo[i] = struct.unpack("<QQ", d)
    return hi, lo


class OffsetMap:
    """Key digest -> latest offset, as three sorted numpy arrays, holding at most ``capacity`` keys.

    Entries are sorted by the ``hi`` digest word (equal ``hi`` words sit together, in any ``lo`` order),
    so a lookup is one ``searchsorted`` plus a check of ``lo``.
    """

    def __init__(self, buffer_bytes: int) -> None:
        self.capacity = map_capacity(buffer_bytes)
        self.hi = np.empty(0, _U64)
        self.lo = np.empty(0, _U64)
        self.off = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self.hi)

    def find(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Index of each digest in the map, or -1."""
        m = len(self.hi)
        if m == 0:
            return np.full(len(hi), -1, np.int64)
        # Sorted queries search much faster (cache locality): sort, search, and put back in order.
        order = np.argsort(hi)
        idx = np.empty(len(hi), np.int64)
        idx[order] = np.searchsorted(self.hi, hi[order])
        c = np.minimum(idx, m - 1)
        same_hi = (self.hi[c] == hi) & (idx < m)
        hit = same_hi & (self.lo[c] == lo)
        res = np.where(hit, c, -1).astype(np.int64)
        # Two keys sharing a 64-bit hi word (about one pair in 2**64): walk the run of equal hi words.
        for k in np.flatnonzero(same_hi & ~hit).tolist():
            j = int(idx[k]) + 1
            while j < m and self.hi[j] == hi[k]:
                if self.lo[j] == lo[k]:
                    res[k] = j
                    break
                j += 1
        return res

    def latest(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """The latest offset recorded for each digest, or -1 when the key is not in the map."""
        f = self.find(hi, lo)
        return np.where(f >= 0, self.off[np.maximum(f, 0)] if len(self.off) else -1, -1)

    def add(self, hi: np.ndarray, lo: np.ndarray, off: np.ndarray) -> bool:
        """Record a chunk of (digest, offset) given in increasing offset order, all above the offsets
        already in the map. Returns False, changing nothing, when the new keys would not fit."""
        if not len(hi):
            return True
        # A stable sort by the hi word keeps each key's records in offset order, so the last of a run of
        # equal hi words is its latest; only when two keys share a hi word does lo join the sort key.
        order = np.argsort(hi, kind="stable")
        hi, lo, off = hi[order], lo[order], off[order]
        same = hi[1:] == hi[:-1]
        if (same & (lo[1:] != lo[:-1])).any():
            order = np.lexsort((off, lo, hi))
            hi, lo, off = hi[order], lo[order], off[order]
            same = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
        last = np.ones(len(hi), bool)
        last[:-1] = ~same
        hi, lo, off = hi[last], lo[last], off[last]
        found = self.find(hi, lo)
        new = found < 0
        n_new = int(new.sum())
        if len(self.hi) + n_new > self.capacity:
            return False
        old = ~new
        self.off[found[old]] = off[old]
        if n_new:
            pos = np.searchsorted(self.hi, hi[new])
            self.hi = np.insert(self.hi, pos, hi[new])
            self.lo = np.insert(self.lo, pos, lo[new])
            self.off = np.insert(self.off, pos, off[new])
        return True

    @property
    def nbytes(self) -> int:
        return self.hi.nbytes + self.lo.nbytes + self.off.nbytes


# ---------------------------------------------------------------------------------------------- cleaning

@dataclass
class CleanResult:
    """What one cleaning of one partition did (all zero when it found nothing to do)."""

    topic: str
    partition: int
    #: Why nothing was cleaned, or None when a cleaning ran.
    skipped: str | None = None
    passes: int = 0
    first_dirty_offset: int = 0
    #: End (exclusive) of the range the last pass's map covered: the next first dirty offset.
    cleaned_up_to: int = 0
    dirty_ratio: float = 0.0
    records_read: int = 0
    records_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    keyless_removed: int = 0
    #: Records of aborted transactions removed, and transaction markers removed (docs/RETENTION.md).
    aborted_removed: int = 0
    markers_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0
    map_keys: int = 0
    map_bytes: int = 0
    seconds: float = 0.0


@dataclass
class CleanableRange:
    first_dirty: int
    uncleanable: int  # first offset that may not be cleaned
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # max.compaction.lag.ms exceeded
    checkpoint: CleanerCheckpoint  # as read for this range; the cleaning passes update it

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _position(seg: Segment, offset: int) -> int:
    try:
        return seg.position_for(offset)[0]
    except (CorruptRecordError, OSError):
        return 0


def cleanable_range(partition: "Partition", now: int | None = None) -> CleanableRange:
    """The partition's clean / dirty / uncleanable split, by Kafka's rules (see the module docstring)."""
    now = now_ms() if now is None else now
    cfg = partition.config
    segs = partition.segments
    log_start = partition.log_start_offset
    cp = read_cleaner_checkpoint(partition.directory)
    first_dirty = max(cp.first_dirty, log_start)
    active = segs[-1]
    # Not past a rolled segment whose background fsync is pending (an append in another thread may have
    # rolled since clean_partition synced them): the cleaner checkpoint must not run ahead of durable data.
    uncleanable = min(active.base_offset, internals(partition).synced_through)
    lso = partition.last_stable_offset
    if lso < uncleanable:
        # Kafka: never past the last stable offset (an open transaction's records may still be aborted), and
        # only whole segments: not past the base of the segment holding it.
        bases = [s.base_offset for s in segs]
        uncleanable = bases[max(0, bisect.bisect_right(bases, lso) - 1)]
    lag = cfg["min.compaction.lag.ms"]
    if lag > 0:
        # Kafka: the first dirty segment holding a record younger than min.compaction.lag.ms, and all after.
        for i, seg in enumerate(segs[:-1]):
            if segs[i + 1].base_offset > first_dirty and seg.size and seg.max_timestamp > now - lag:
                uncleanable = seg.base_offset
                break
    first_dirty = min(first_dirty, uncleanable)
    clean = dirty = 0
    overdue = False
    max_lag = cfg["max.compaction.lag.ms"]
    for i, seg in enumerate(segs[:-1]):
        end = segs[i + 1].base_offset
        if end <= log_start or seg.base_offset >= uncleanable:
            continue
        if end <= first_dirty:
            clean += seg.size
        elif seg.base_offset >= first_dirty:
            dirty += seg.size
            if not overdue and seg.size and seg.first_timestamp is not None and now - seg.first_timestamp > max_lag:
                overdue = True
        else:
            split = _position(seg, first_dirty)
            clean += split
            dirty += seg.size - split
            if seg.size and seg.max_timestamp >= 0 and now - seg.max_timestamp > max_lag:
                overdue = True
    return CleanableRange(first_dirty, uncleanable, clean, dirty, overdue, cp)


#: (the batch's stored bytes, its checked view)
_Batch = tuple[memoryview, BatchView]


def _batches(seg: Segment, start: int = 0) -> Iterator[_Batch]:
    """Every batch of a sealed segment whose last offset is >= ``start``, checked (CRC)."""
    for fpos, h, buf, p in seg.scan(0, seg.size, 16 << 20, tolerate_tail=False):
        if h.last_offset < start:
            continue
        yield memoryview(buf)[p:p + h.size], BatchView.from_buffer(buf, p, seg.log_path, fpos, header=h)


def _blocks(segs: list[Segment], start: int, stop: int, chunk: int) -> Iterator[list[_Batch]]:
    """Batches holding offsets in [start, stop), in runs of about ``chunk`` records."""
    block: list[_Batch] = []
    count = 0
    for seg in segs:
        for raw, view in _batches(seg, start):
            if view.header.base_offset >= stop:
                break
            block.append((raw, view))
            count += view.header.record_count
            if count >= chunk:
                yield block
                block, count = [], 0
    if block:
        yield block


class _Columns:
    """The offsets, key and value lengths of a block's records, concatenated once; digests on demand."""

    def __init__(self, block: list[_Batch]) -> None:
        self.views = views = [v for _, v in block]
        self.counts = np.fromiter((v.header.record_count for v in views), np.int64, len(views))  # per batch
        self.offsets = np.concatenate([v.offsets() for v in views])
        self.key_lengths = np.concatenate([v.key_lengths if v.key_lengths is not None
                                           else np.full(v.header.record_count, -1, np.int32) for v in views])
        self.value_lengths = np.concatenate([v.value_lengths for v in views])

    def digests(self, seed: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        return key_digests(self.key_lengths, b"".join(v.key_data() for v in self.views), seed)


def _gather(data: memoryview, lengths: np.ndarray, keep: np.ndarray) -> list:
    """The bytes of the kept items of a length column, as slices of ``data`` (one per run of kept items)."""
    idx = np.flatnonzero(keep)
    if not len(idx):
        return []
    starts = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(np.maximum(lengths, 0), out=starts[1:])
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    first = idx[np.concatenate(([0], breaks))]
    last = idx[np.concatenate((breaks - 1, [len(idx) - 1]))] + 1
    return [data[a:b] for a, b in zip(starts[first].tolist(), starts[last].tolist(), strict=True) if b > a]


def _filtered_batch(view: BatchView, keep: np.ndarray) -> tuple[list, Any]:
    """Encode the kept records of ``view`` as one batch with the same attributes and producer fields."""
    h = view.header
    offs = view.offsets()[keep]
    klens = view.key_lengths
    vlens = view.value_lengths
    heads = view.headers()
    log_append = h.timestamp_type == 1
    return encode_parts(
        value_lengths=vlens[keep], value_data=_gather(view.value_data(), vlens, keep),
        key_lengths=None if klens is None else klens[keep],
        key_data=[] if klens is None else _gather(view.key_data(), klens, keep),
        timestamps=None if log_append else view.timestamps()[keep],
        headers=None if heads is None else [x for x, k in zip(heads, keep.tolist(), strict=True) if k],
        offset_deltas=offs - offs[0], base_offset=int(offs[0]), default_timestamp=h.max_timestamp,
        codec=h.codec, log_append_time=log_append, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, control=h.is_control, transactional=bool(h.attributes & ATTR_TRANSACTIONAL))


def _groups(segs: list[Segment], bounds: list[int], segment_bytes: int, index_capacity: int) -> list[list[int]]:
    """Split segment indexes into consecutive groups whose output fits one segment and its indexes."""
    groups: list[list[int]] = []
    cur: list[int] = []
    size = entries = 0
    for i, seg in enumerate(segs):
        # An index entry needs index.interval.bytes of log since the last one and a batch is >= 64 bytes,
        # so this bounds the output's entries whatever interval the input was indexed with.
        n_entries = seg.size // max(seg.index_interval_bytes, 64) + 1
        if cur and (size + seg.size > segment_bytes or entries + n_entries > index_capacity
                    or bounds[i] - segs[cur[0]].base_offset > 0xFFFFFFFF):
            groups.append(cur)
            cur, size, entries = [], 0, 0
        cur.append(i)
        size += seg.size
        entries += n_entries
    if cur:
        groups.append(cur)
    return groups


def clean_partition(partition: "Partition", buffer_bytes: int, now: int | None = None, force: bool = False,
                    should_stop: Callable[[], bool] | None = None) -> CleanResult:
    """Compact one partition if its dirty ratio (or ``max.compaction.lag.ms``, or ``force``) calls for it.

    Makes this handle the partition's writer. Runs as one :meth:`PartitionInternals.maintenance_pass`; the partition's
    append lock is held only inside :meth:`PartitionInternals.swap_in`. ``now`` (ms) is injectable for tests.
    :raises CleanerStoppedError: when ``should_stop`` turned true mid-way (nothing half-done is left).
    """
    t0 = time.monotonic()
    now = now_ms() if now is None else now
    result = CleanResult(partition.topic, partition.number)
    if not partition.config.compact:
        result.skipped = "cleanup.policy does not include compact"
        return result
    inner = internals(partition)
    with inner.maintenance_pass():
        inner.ensure_writer()
        # The cleaner checkpoint's first-dirty offset must never run ahead of durable data: a power cut that
        # took an unsynced segment would let new records reuse offsets the checkpoint calls clean.
        inner.sync_rolled()
        inner.remove_swap_leftovers()
        rng = cleanable_range(partition, now)
        result.first_dirty_offset = rng.first_dirty
        result.dirty_ratio = rng.dirty_ratio
        result.segments_before = len(partition.segments)
        if (rng.first_dirty >= rng.uncleanable or rng.dirty_bytes == 0) and not (force and rng.clean_bytes):
            result.skipped = "nothing dirty below the uncleanable offset"
        elif not force and not rng.overdue and rng.dirty_ratio <= partition.config["min.cleanable.dirty.ratio"]:
            result.skipped = (f"dirty ratio {rng.dirty_ratio:.3f} <= min.cleanable.dirty.ratio "
                              f"{partition.config['min.cleanable.dirty.ratio']}")
        else:
            # A forced cleaning with nothing dirty still rewrites the clean section once: it removes
            # tombstones whose delete.retention.ms has passed.
            first_dirty = rng.first_dirty
            while True:
                first_dirty = _clean_pass(partition, buffer_bytes, now, first_dirty, rng.uncleanable, rng.checkpoint,
                                          result, should_stop or (lambda: False))
                result.passes += 1
                if first_dirty >= rng.uncleanable:
                    break
        result.segments_after = len(partition.segments)
    result.seconds = time.monotonic() - t0
    return result


def _clean_pass(partition: "Partition", buffer_bytes: int, now: int, first_dirty: int, uncleanable: int,
                ccp: CleanerCheckpoint, result: CleanResult, should_stop: Callable[[], bool]) -> int:
    """One map-and-rewrite pass; returns the offset it cleaned up to (the next first dirty offset).
    Records the pass in ``ccp`` and writes it."""
    directory = partition.directory
    cfg = partition.config
    segs = partition.segments
    candidates = [s for s in segs[:-1] if s.base_offset < uncleanable]
    seed = (int.from_bytes(os.urandom(8), "little"), int.from_bytes(os.urandom(8), "little"))
    chunk = chunk_records(buffer_bytes)
    omap = OffsetMap(buffer_bytes)
    # --- map: digest -> latest offset over [first_dirty, uncleanable), as far as the map holds
    end = uncleanable
    full = False
    drms = cfg["delete.retention.ms"]
    txn = TxnCleaning(aborted_entries(partition, uncleanable), ccp, now, drms)
    dirty_segs = [s for i, s in enumerate(candidates) if segs[i + 1].base_offset > first_dirty]
    for block in _blocks(dirty_segs, first_dirty, uncleanable, chunk):
        if should_stop():
            raise CleanerStoppedError("store closing")
        cols = _Columns(block)
        hi, lo = cols.digests(seed)
        m = (cols.offsets >= first_dirty) & (cols.offsets < uncleanable) & ~txn.unmapped(cols.views)
        if omap.add(hi[m], lo[m], cols.offsets[m]):
            continue
        # The block does not fit: add its batches one at a time; the pass ends before the first that
        # does not fit, and records from there on are kept as they are (the next pass maps them).
        starts = np.concatenate(([0], np.cumsum(cols.counts)))
        for b in range(len(block)):
            sl = slice(int(starts[b]), int(starts[b + 1]))
            mb = m[sl]
            if not omap.add(hi[sl][mb], lo[sl][mb], cols.offsets[sl][mb]):
                end = max(block[b][1].header.base_offset, first_dirty)
                full = True
                break
        break
    if full and end <= first_dirty:
        raise PylogError(f"{partition.topic}-{partition.number}: log.cleaner.dedupe.buffer.size "
                         f"({buffer_bytes} bytes) cannot hold the keys of one batch at offset {first_dirty}")
    result.map_keys = max(result.map_keys, len(omap))
    result.map_bytes = max(result.map_bytes, omap.nbytes)

    # --- rewrite every segment from the log start through the one holding end - 1
    reached_before = list(ccp.horizons)
    ccp.reached(end, now, partition.log_start_offset)
    to_clean = [s for s in candidates if s.base_offset < end]
    bounds = [segs[i + 1].base_offset for i in range(len(to_clean))]
    index_args = internals(partition).segment_index_args()
    capacity = OffsetIndex.capacity_for(index_args[0])
    # Every key of [first_dirty, end) is in the map, so a record there survives exactly when the map
    # holds its own offset: decided from sorted offsets, without hashing its key again.
    kept_offsets = np.sort(omap.off)
    done: list[tuple[list[Segment], bool]] = []  # (replaced segments, output empty) per cleaned group
    try:
        for group in _groups(to_clean, bounds, cfg["segment.bytes"], capacity):
            if should_stop():
                raise CleanerStoppedError("store closing")
            old = [to_clean[i] for i in group]
            empty = _clean_group(partition, old, omap, kept_offsets, seed, first_dirty, end, chunk, ccp, now, drms,
                                 index_args, result, should_stop, txn)
            if empty is not None:
                done.append((old, empty))
    except BaseException:
        internals(partition).remove_swap_leftovers()
        raise
    result.markers_removed += txn.markers_removed
    result.aborted_removed += txn.aborted_removed
    if txn.met is not None:
        # Markers of the transactions met here stay delete.retention.ms from now: recorded before the swap
        # removes their records (the range reached is recorded once it is clean, after the swap).
        ccp.met_transactions(*txn.met, now, drms)
        write_cleaner_checkpoint(directory, CleanerCheckpoint(reached_before, ccp.txn_horizons))
    if done:
        # the whole numbered protocol of pylog.storage.swap, under the partition's locks
        internals(partition).swap_in(done)
    ccp.expire_transactions(now, drms)
    write_cleaner_checkpoint(directory, ccp)
    result.cleaned_up_to = end
    return end


def _clean_group(partition: "Partition", old: list[Segment], omap: OffsetMap, kept_offsets: np.ndarray,
                 seed: tuple[int, int], first_dirty: int, end: int, chunk: int, ccp: CleanerCheckpoint, now: int,
                 drms: int, index_args: tuple[int, int], result: CleanResult,
                 should_stop: Callable[[], bool], txn: TxnCleaning) -> bool | None:
    """Write the group's cleaned segment as ``.cleaned`` files (log and aborted-transaction index fsynced).
    Returns None when nothing would be removed (no output kept), else whether the output is empty (no file
    kept)."""
    directory = partition.directory
    out = Segment.create(directory, old[0].base_offset, *index_args, suffix=CLEANED_SUFFIX)
    removed = [0]
    block: list[_Batch] = []
    count = 0
    try:
        for seg in old:
            for fpos, h, buf, p in seg.scan(0, seg.size, 16 << 20, tolerate_tail=False):
                if should_stop():
                    raise CleanerStoppedError("store closing")
                n = h.record_count
                base, last = h.base_offset, h.last_offset
                # (transactional batches go through the block: their transaction's fate is decided in order)
                if base >= first_dirty and last < end and not h.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL):
                    lo = int(np.searchsorted(kept_offsets, base))
                    if lo == len(kept_offsets) or kept_offsets[lo] > last:
                        # No record of this batch is the latest of its key: dropped on its header alone
                        # (its checksum was checked when the map was built).
                        result.records_read += n
                        result.bytes_read += h.size
                        removed[0] += n
                        continue
                block.append((memoryview(buf)[p:p + h.size], BatchView.from_buffer(buf, p, seg.log_path, fpos, h)))
                count += n
                if count >= chunk:
                    _clean_block(block, out, omap, kept_offsets, seed, first_dirty, end, ccp, now, drms, result,
                                 removed, txn)
                    block, count = [], 0
        if block:
            _clean_block(block, out, omap, kept_offsets, seed, first_dirty, end, ccp, now, drms, result, removed,
                         txn)
        out.flush()  # the log must be durable before the commit; indexes are derived data
        out.seal(durable=False)
    except BaseException:
        out.delete()
        raise
    result.records_removed += removed[0]
    empty = out.size == 0
    entries = txn.take_index()
    if empty or (removed[0] == 0 and entries == _index_entries(directory, old)):
        out.delete()  # nothing to gain (keep the old segments), or nothing to keep
        return None if removed[0] == 0 else True
    out.close()
    # Always written, even without entries: the swap renames it over the old index at this base.
    write_index(segment_path(directory, old[0].base_offset, TXN_INDEX_SUFFIX + CLEANED_SUFFIX), entries)
    return False


def _index_entries(directory: str, segs: list[Segment]) -> list[AbortedTxn] | None:
    """The aborted-transaction index entries of ``segs`` (None when one is unreadable: rewritten then)."""
    try:
        return [e for s in segs for e in read_index(index_path(directory, s.base_offset))]
    except CorruptRecordError:
        return None


def _clean_block(block: list[_Batch], out: Segment, omap: OffsetMap, kept_offsets: np.ndarray,
                 seed: tuple[int, int], first_dirty: int, end: int, ccp: CleanerCheckpoint, now: int, drms: int,
                 result: CleanResult, removed: list[int], txn: TxnCleaning) -> None:
    """Decide record by record for a run of batches (whole batches for transactions' fates and markers:
    :mod:`.compaction_txn`), and append what survives to ``out``."""
    cols = _Columns(block)
    offs, klens, vlens = cols.offsets, cols.key_lengths, cols.value_lengths
    cleaned = offs < end
    keep = np.ones(len(offs), bool)
    dirty = cleaned & (offs >= first_dirty)
    if dirty.any():
        at = np.minimum(np.searchsorted(kept_offsets, offs[dirty]), max(len(kept_offsets) - 1, 0))
        keep[dirty] = kept_offsets[at] == offs[dirty] if len(kept_offsets) else False
    clean = offs < first_dirty
    if clean.any() and len(omap):
        # The clean section: a record goes when the map holds a later offset for its key.
        hi, lo = cols.digests(seed)
        keep &= ~(clean & (omap.latest(hi, lo) > offs))
    keyless = cleaned & (klens < 0)
    keep &= ~keyless
    tomb = keep & cleaned & (vlens < 0)
    if tomb.any():
        expired = tomb & (now - ccp.first_reached(offs, now) > drms)
        keep &= ~expired
        result.tombstones_removed += int(expired.sum())
    result.keyless_removed += int(keyless.sum())
    pos = 0
    for raw, view in block:
        h = view.header
        n = h.record_count
        k = keep[pos:pos + n]
        pos += n
        result.records_read += n
        result.bytes_read += h.size
        if h.is_control:
            k[:] = txn.keep_control(view)
        elif txn.drop_batch(h):
            k[:] = False
        kept = int(k.sum())
        if kept == 0:
            removed[0] += n
            continue
        if kept == n:
            parts, hdr = [raw], h  # unchanged: copied byte for byte, CRC and all
        else:
            parts, hdr = _filtered_batch(view, k)
            removed[0] += n - kept
        out.append(hdr, parts, hdr.max_timestamp)
        result.records_written += kept
        result.bytes_written += hdr.size
