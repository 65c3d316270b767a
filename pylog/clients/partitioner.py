"""Kafka's default partitioning: murmur2 of the key for keyed records, sticky partitions for the rest.

A keyed record goes to ``toPositive(murmur2(key)) % num_partitions`` exactly as in Kafka's Java client
(``Utils.murmur2``, ``Utils.toPositive(x) = x & 0x7fffffff``), so a key lands on the same partition
number in pylog as in Kafka with the same partition count. A record without a key goes to its topic's
*sticky* partition (KIP-480), which changes only when the producer reports that a batch for it was
completed.

Invariants:
- :func:`murmur2` returns exactly the signed 32-bit ``int`` Java's ``Utils.murmur2`` returns;
  :func:`murmur2_many` and :func:`partitions_for_keys` return, for each key, exactly what the scalar
  functions return for it alone: a key's result never depends on the other keys of the call (each key
  mixes only its own words and its own tail bytes).
- The bulk functions never copy or pad the key bytes: they read each key's 4-byte words straight from
  the caller's buffer through (unaligned) uint32 views. Besides a few per-key arrays for the whole call
  (lengths and offsets, at most ~40 bytes a key), their workspace is bounded by the chunk of at most
  :data:`CHUNK_KEYS` keys hashed at a time, with one Python-level step per 4-byte word of the chunk's
  longest key; keys longer than :data:`SCALAR_CUTOFF` bytes go through the scalar function one at a
  time, so one long key does not lengthen the loop for the others.
- A :class:`StickyPartitioner` only ever returns a partition of the ``all_partitions`` it was given (of
  ``available_partitions`` when that is non-empty), and changes a topic's sticky partition only on the
  first :meth:`~StickyPartitioner.on_new_batch` naming the current one; its state is guarded by a lock.

With the compiled accelerator live (:mod:`pylog.accel`), :func:`murmur2` and the bulk functions' hashing
run in C (native/send.c), giving the same values; the checks of the bulk functions' arguments stay here,
shared by both paths.

Kafka 3.3+ (KIP-794) replaced KIP-480's sticky choice for key-less records with an adaptive one that
weighs partitions by queue size; keyed records are placed the same way in every Kafka version.
"""

from __future__ import annotations

import random
import struct
import threading
from typing import Any, Sequence

import numpy as np

from ..accel import native as _native
from ..errors import InvalidArgumentError

__all__ = [
    "murmur2",
    "murmur2_many",
    "partition_for_key",
    "partitions_for_keys",
    "StickyPartitioner",
    "DefaultPartitioner",
    "SCALAR_CUTOFF",
    "CHUNK_KEYS",
]

#: Keys longer than this many bytes are hashed by the scalar :func:`murmur2`, one at a time.
SCALAR_CUTOFF = 256
#: Most keys hashed together in one chunk of the bulk functions.
CHUNK_KEYS = 65536

#: Keys with at least this many bytes of whole words have those mixed by numpy in :func:`murmur2`.
_SCALAR_NUMPY_BYTES = 128

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
_U32 = np.uint32
_M_U32 = _U32(_M)
_SEED_U32 = _U32(_SEED)
#: Masks keeping the 0-3 tail bytes of a key's last, partial word.
_TAIL_MASK = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], _U32)

_Bytes = bytes | bytearray | memoryview
#: What the bulk functions take as the keys' concatenated bytes (anything with a contiguous byte buffer).
_BulkBytes = bytes | bytearray | memoryview | np.ndarray


# ---------------------------------------------------------------------------------------------- words

def _word_view(buf: np.ndarray, offset: int, count: int, stride: int) -> np.ndarray:
    """``count`` little-endian uint32 words read from ``buf`` at ``offset``, ``offset + stride``, ...
    (no copy; the words may be unaligned and, with ``stride`` < 4, overlap)."""
    return np.ndarray((count,), dtype="<u4", buffer=buf, offset=offset, strides=(stride,))


def _mix_k(w: np.ndarray) -> np.ndarray:
    """murmur2's per-word mix ``k = w * m; k ^= k >>> r; k *= m`` as a new array (``w`` may be a view
    of the caller's data: it is only read)."""
    k = w * _M_U32
    k ^= k >> _U32(_R)
    k *= _M_U32
    return k


# ---------------------------------------------------------------------------------------------- scalar

def murmur2(data: _Bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: MurmurHash2 (seed ``0x9747b28c``) as a signed 32-bit int.

    The value is the one Java returns (in ``[-2**31, 2**31)``); kafka-python's ``murmur2`` returns the
    same 32 bits as an unsigned number.
    """
    if _native is not None:
        return _native.murmur2(data)
    mv = memoryview(data).cast("B")
    length = mv.nbytes
    h = (_SEED ^ length) & _MASK32
    body = length & ~3
    if body >= _SCALAR_NUMPY_BYTES:
        # The words' own mix is independent per word: numpy does it, leaving only the chain on h here.
        for k in _mix_k(np.frombuffer(mv[:body], "<u4")).tolist():
            h = ((h * _M) & _MASK32) ^ k
    else:
        for (w,) in struct.iter_unpack("<I", mv[:body]):
            k = (w * _M) & _MASK32
            k ^= k >> _R
            h = ((h * _M) & _MASK32) ^ ((k * _M) & _MASK32)
    if length & 3:
        # Java's fall-through switch XORs the 1-3 tail bytes in at bits 0, 8, 16: one little-endian int.
        h ^= int.from_bytes(mv[body:], "little")
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _check_num_partitions(num_partitions: int) -> None:
    # Kafka counts partitions in a Java int.
    if not 1 <= num_partitions <= 0x7FFFFFFF:
        raise InvalidArgumentError(f"num_partitions must be in [1, 2**31 - 1], got {num_partitions}")


def partition_for_key(key: _Bytes, num_partitions: int) -> int:
    """Kafka's partition of a keyed record: ``toPositive(murmur2(key)) % num_partitions``."""
    _check_num_partitions(num_partitions)
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# ---------------------------------------------------------------------------------------------- bulk

def _final_mix(h: np.ndarray) -> np.ndarray:
    """murmur2's final avalanche ``h ^= h >>> 13; h *= m; h ^= h >>> 15``, in place; returns ``h``."""
    h ^= h >> _U32(13)
    h *= _M_U32
    h ^= h >> _U32(15)
    return h


def _hash_uniform(buf: np.ndarray, s0: int, length: int, n: int) -> np.ndarray:
    """Unsigned murmur2 (uint32) of ``n`` keys of ``length`` bytes stored back to back from ``buf[s0]``.

    The common producer case. Word j of every key is a strided view of the buffer, so nothing is copied
    or gathered before the arithmetic. The last key's partial word is read whole (its bytes past the key
    are masked off), so it must end at least ``(-length) % 4`` bytes before the end of ``buf``.
    """
    h = np.full(n, _SEED_U32 ^ _U32(length), _U32)
    for j in range(length >> 2):
        h *= _M_U32
        h ^= _mix_k(_word_view(buf, s0 + 4 * j, n, length))
    if length & 3:
        h ^= _word_view(buf, s0 + (length & ~3), n, length) & _TAIL_MASK[length & 3]
        h *= _M_U32
    return _final_mix(h)


def _hash_mixed(lens: np.ndarray, starts: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """Unsigned murmur2 (uint32) of the keys at ``buf[starts[i]:starts[i] + lens[i]]``.

    ``lens`` and ``starts`` are int64; every key is non-null and at most :data:`SCALAR_CUTOFF` bytes. As
    in :func:`_hash_uniform`, each key's partial last word is read whole, so every key must end at least
    ``(-len) % 4`` bytes before the end of ``buf``.
    """
    n = len(lens)
    max_len = int(lens.max())
    order: np.ndarray | None = None
    if int(lens.min()) == max_len:
        # One length, but not back to back (nulls or long keys in between): every key owns every word.
        pos = starts.copy()
    else:
        # Longest keys first, so the keys that own word j are a prefix of the rows and every step works
        # on a slice (no masks: a key mixes only its own words). int16 lengths make the stable argsort a
        # radix sort.
        order = np.argsort(-lens.astype(np.int16), kind="stable")
        lens = lens[order]
        pos = starts[order]
    h = lens.astype(_U32)
    h ^= _SEED_U32
    blocks = lens >> 2
    owners = np.searchsorted(-blocks, -np.arange(max_len >> 2), side="left")  # keys that have word j
    # Every word of every key, wherever it starts: word i is bytes i..i+3 of the buffer.
    words = _word_view(buf, 0, max(0, len(buf) - 3), 1)
    for j in range(max_len >> 2):
        c = int(owners[j])
        hv = h[:c]
        hv *= _M_U32
        hv ^= _mix_k(words[pos[:c]])
        pos[:c] += 4
    tail = lens & 3
    has_tail = np.flatnonzero(tail)
    if len(has_tail):
        x = h[has_tail] ^ (words[pos[has_tail]] & _TAIL_MASK[tail[has_tail]])
        x *= _M_U32
        h[has_tail] = x
    if order is None:
        return _final_mix(h)
    out = np.empty(n, _U32)
    out[order] = _final_mix(h)
    return out


def _murmur2_u32(lengths: Any, data: _BulkBytes) -> tuple[np.ndarray, bool]:
    """(unsigned murmur2 per key, 0 for null keys; whether there are null keys) of a bulk key column."""
    lens = np.asarray(lengths)
    if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "iu"):
        raise InvalidArgumentError("lengths must be a 1-D integer array")
    n = len(lens)
    mv = (data.data if isinstance(data, np.ndarray) else memoryview(data)).cast("B")
    size = mv.nbytes
    buf = np.frombuffer(mv, np.uint8) if size else np.zeros(4, np.uint8)
    lo = int(lens.min()) if n else 0
    hi = int(lens.max()) if n else 0
    if lo < -1:
        raise InvalidArgumentError("key lengths must be >= -1 (-1 = null key)")
    if _native is not None:
        lens = np.ascontiguousarray(lens, np.int64)
        total = int(np.maximum(lens, 0).sum()) if n else 0
        if total != size or (n and int(lens.min()) < -1):  # the latter: a uint64 length past 2**63
            raise InvalidArgumentError(f"key lengths add up to {total} bytes but data holds {size}")
        return np.frombuffer(_native.murmur2_lengths(lens, mv), _U32), lo < 0
    if 0 <= hi <= SCALAR_CUTOFF and (lo == hi or (lo == -1 and not ((lens != hi) & (lens != -1)).any())):
        # One length (and maybe nulls, which take no bytes): the keys are back to back in the data, so
        # there are no offsets to compute and no keys to select.
        keyed = np.flatnonzero(lens >= 0) if lo < 0 else None
        m = n if keyed is None else len(keyed)
        if m * hi != size:
            raise InvalidArgumentError(f"key lengths add up to {m * hi} bytes but data holds {size}")
        hashes = np.empty(m, _U32)
        # The last keys' partial words would be read past the end of the data (the last 3 keys for
        # 1-byte keys, the last one for other lengths that are not a multiple of 4): the scalar function
        # does those instead of a padded copy of the data.
        vec = max(0, m + 1 - -(-((hi + 3) & ~3) // hi)) if hi & 3 else m
        for a in range(0, vec, CHUNK_KEYS):
            b = min(vec, a + CHUNK_KEYS)
            hashes[a:b] = _hash_uniform(buf, a * hi, hi, b - a)
        for i in range(vec, m):
            hashes[i] = murmur2(mv[i * hi:(i + 1) * hi]) & _MASK32
        if keyed is None:
            return hashes, False
        out = np.zeros(n, _U32)
        out[keyed] = hashes
        return out, True
    lens = lens.astype(np.int64)
    nonneg = np.maximum(lens, 0)
    ends = np.cumsum(nonneg)
    total = int(ends[-1]) if n else 0
    if total != size:
        raise InvalidArgumentError(f"key lengths add up to {total} bytes but data holds {size}")
    out = np.zeros(n, _U32)
    starts = ends - nonneg
    # Keys hashed in numpy: non-null, short, and whose partial last word, read whole, stays inside the
    # data. Only the last few non-empty keys can fail that (their ends are within 3 bytes of the end).
    vector = (lens >= 0) & (lens <= SCALAR_CUTOFF)
    near_end = int(np.searchsorted(ends, size - 2, side="left"))
    vector[near_end:] &= (lens[near_end:] == 0) | (starts[near_end:] + ((lens[near_end:] + 3) & ~3) <= size)
    for a in range(0, n, CHUNK_KEYS):
        b = min(n, a + CHUNK_KEYS)
        sel = vector[a:b]
        if sel.all():
            out[a:b] = _hash_mixed(lens[a:b], starts[a:b], buf)
        else:
            idx = np.flatnonzero(sel) + a
            if len(idx):
                out[idx] = _hash_mixed(lens[idx], starts[idx], buf)
    for i in np.flatnonzero(~vector & (lens >= 0)).tolist():
        out[i] = murmur2(mv[int(starts[i]):int(ends[i])]) & _MASK32
    return out, lo < 0


def murmur2_many(lengths: np.ndarray, data: _BulkBytes) -> np.ndarray:
    """:func:`murmur2` of many keys at once, as an int32 array (Java's signed values).

    ``lengths`` holds each key's length (-1 for a null key) and ``data`` the non-null keys' bytes
    concatenated in order; their sizes must agree. Null keys get 0 (they have no hash: mask them with
    ``lengths < 0``). Raises ``ValueError`` for lengths below -1 or that disagree with ``data``.
    """
    return _murmur2_u32(lengths, data)[0].view(np.int32)


def partitions_for_keys(lengths: np.ndarray, data: _BulkBytes, num_partitions: int) -> np.ndarray:
    """:func:`partition_for_key` of many keys at once: an int32 array, -1 for null keys.

    Keys are given as in :func:`murmur2_many`. Null keys are left to the caller (the sticky rule, see
    :class:`StickyPartitioner`); every other key gets ``toPositive(murmur2(key)) % num_partitions``.
    """
    _check_num_partitions(num_partitions)
    h, has_null = _murmur2_u32(lengths, data)
    h &= _U32(0x7FFFFFFF)
    h %= _U32(num_partitions)
    parts = h.view(np.int32)  # every value is below 2**31 now
    if has_null:
        parts[np.asarray(lengths) < 0] = -1
    return parts


# ---------------------------------------------------------------------------------------------- sticky

class StickyPartitioner:
    """KIP-480 sticky partitioning of key-less records: one partition per topic until a batch completes.

    :meth:`partition` returns the topic's sticky partition, picking one at random the first time (from
    ``available_partitions`` when non-empty, else from ``all_partitions``, as Kafka does). When the
    producer completes a batch for that partition it calls :meth:`on_new_batch`, which picks another one
    at random, different from the previous whenever there is more than one to choose from. A report that
    names a partition that is no longer the sticky one (another thread rotated it already) changes
    nothing, so concurrent producers rotate once per completed batch. Thread-safe.

    A sticky partition that is no longer in ``all_partitions`` (or, when ``available_partitions`` is
    non-empty, no longer available) is replaced on the next :meth:`partition` call.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        """``rng`` (default: a new, OS-seeded ``random.Random``) draws the partitions; pass a seeded one
        for reproducible choices."""
        self._rng = rng if rng is not None else random.Random()
        self._sticky: dict[str, int] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, all_partitions: Sequence[int],
                  available_partitions: Sequence[int] | None = None) -> int:
        """The partition for the next key-less record of ``topic``."""
        with self._lock:
            current = self._sticky.get(topic)
            if current is not None and current in (available_partitions or all_partitions):
                return current
            return self._pick(topic, all_partitions, available_partitions, avoid=current)

    def on_new_batch(self, topic: str, prev_partition: int, all_partitions: Sequence[int],
                     available_partitions: Sequence[int] | None = None) -> int:
        """Report that a batch of ``topic`` on ``prev_partition`` was completed; returns the topic's sticky
        partition afterwards (a new one if ``prev_partition`` was the sticky one)."""
        with self._lock:
            current = self._sticky.get(topic)
            if current is not None and current != prev_partition:
                return current
            return self._pick(topic, all_partitions, available_partitions, avoid=prev_partition)

    def current(self, topic: str) -> int | None:
        """The topic's sticky partition, or ``None`` before the first :meth:`partition` call."""
        with self._lock:
            return self._sticky.get(topic)

    def _pick(self, topic: str, all_partitions: Sequence[int],
              available_partitions: Sequence[int] | None, avoid: int | None) -> int:
        """Draw and store a new sticky partition for ``topic``; the caller holds the lock."""
        pool = available_partitions or all_partitions
        if not len(pool):
            raise InvalidArgumentError(f"topic {topic!r} has no partitions to choose from")
        if len(pool) > 1 and avoid is not None and avoid in pool:
            # Uniform over the others: the same distribution as Kafka's redraw-until-different loop.
            i = self._rng.randrange(len(pool) - 1)
            choice = pool[i]
            if choice == avoid:
                choice = pool[len(pool) - 1]
        else:
            choice = pool[self._rng.randrange(len(pool))]
        self._sticky[topic] = choice
        return choice


# ---------------------------------------------------------------------------------------------- default

class DefaultPartitioner:
    """Kafka's default partitioner: murmur2 for keyed records, :class:`StickyPartitioner` for the rest.

    Called like kafka-python's partitioner callable before its 3.0 ``Partitioner.partition`` API,
    ``partitioner(key_bytes, all_partitions, available_partitions)``, plus the topic (for the sticky
    state) as a keyword. ``all_partitions`` is
    the topic's sorted partition ids (``range(n)`` for a pylog topic); a keyed record goes to
    ``all_partitions[toPositive(murmur2(key)) % len(all_partitions)]``, which is partition number
    ``toPositive(murmur2(key)) % n`` as in Kafka. Availability never moves a keyed record, as in Kafka.
    """

    def __init__(self, sticky: StickyPartitioner | None = None) -> None:
        """``sticky`` (default: a new one) chooses the partitions of key-less records."""
        self.sticky = sticky if sticky is not None else StickyPartitioner()

    def __call__(self, key: _Bytes | None, all_partitions: Sequence[int],
                 available_partitions: Sequence[int] | None = None, *, topic: str = "") -> int:
        """The partition of one record with serialized key ``key`` (``None``: no key) of ``topic``."""
        if not len(all_partitions):
            raise InvalidArgumentError(f"topic {topic!r} has no partitions to choose from")
        if key is None:
            return self.sticky.partition(topic, all_partitions, available_partitions)
        return all_partitions[partition_for_key(key, len(all_partitions))]

    def partition_batch(self, lengths: np.ndarray, data: _BulkBytes, all_partitions: Sequence[int],
                        available_partitions: Sequence[int] | None = None, *, topic: str = "") -> np.ndarray:
        """The partitions (int32 array) of many records of ``topic`` with keys given as in
        :func:`murmur2_many`. Every key-less record gets the topic's current sticky partition: a caller
        that completes a batch part-way through should split the call there and call
        :meth:`on_new_batch` in between (or use :func:`partitions_for_keys` and place them itself)."""
        n = len(all_partitions)
        if not n:
            raise InvalidArgumentError(f"topic {topic!r} has no partitions to choose from")
        parts = partitions_for_keys(lengths, data, n)
        nulls = parts < 0
        if not (isinstance(all_partitions, range) and all_partitions.start == 0 and all_partitions.step == 1):
            ids = np.asarray(all_partitions, np.int32)
            parts = np.where(nulls, parts, ids[np.maximum(parts, 0)]).astype(np.int32)
        if nulls.any():
            parts[nulls] = self.sticky.partition(topic, all_partitions, available_partitions)
        return parts

    def on_new_batch(self, topic: str, prev_partition: int, all_partitions: Sequence[int],
                     available_partitions: Sequence[int] | None = None) -> int:
        """Forwarded to :meth:`StickyPartitioner.on_new_batch`: a batch of ``topic`` was completed."""
        return self.sticky.on_new_batch(topic, prev_partition, all_partitions, available_partitions)
