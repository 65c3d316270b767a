"""The record batch format: encode, validate and decode batches, as whole columns.

A batch is the unit of writing, checksumming, compression and indexing. Byte layout (little-endian; the
full specification, with the body sections, is docs/FORMAT.md)::

    off size field              notes
      0   8  base_offset        int64 (covered by the CRC, unlike Kafka: a flipped offset must not pass)
      8   4  batch_length       uint32; bytes after this field (total size - 12)
     12   1  magic              uint8; format version, currently 1
     13   4  crc                uint32; CRC-32C (Castagnoli) of bytes [0, 8) then [17, total size)
     17   2  attributes         uint16; bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control,
                                6 keys, 7 timestamps, 8 headers, 9 offset deltas (column present flags)
     19   4  last_offset_delta  int32; last offset - base offset
     23   8  first_timestamp    int64 ms
     31   8  max_timestamp      int64 ms
     39   8  producer_id        int64 (-1: none)
     47   2  producer_epoch     int16
     49   4  base_sequence      int32
     53   4  record_count       int32 (>= 1)
     57   4  body_size          uint32; size of the body once decompressed
     61   3  reserved           zero
     64      body               columnar, lz4-block compressed when codec = 1

Invariants this module keeps:
- :func:`encode_batch` / :func:`encode_columns` only produce batches that :func:`check_header` and the
  decoders accept, and decoding returns exactly what was encoded (keys, values, nulls, headers, timestamps).
- No decoder trusts a length it has not bounded: every count and size is checked against the bytes
  actually present before anything is allocated, so hostile input raises
  :class:`~pylog.errors.CorruptRecordError` instead of hanging or allocating more than the input's size.
- Work is per batch (numpy arrays over the body, bytes joins), never a Python object per record, except
  in :meth:`BatchView.records`, whose job is to build those objects.

This module knows nothing about files, offsets assignment or topics.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import struct
import time
from operator import itemgetter
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

import crc32c as _crc32c
import lz4.block as _lz4
import msgpack
import numpy as np

from ..errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "Record", "RecordColumns", "BatchHeader", "BatchView",
    "encode_batch", "encode_columns", "encode_parts", "check_header", "parse_header", "stamp_base_offset", "batch_crc",
    "checked_prefix",
    "crc32c", "now_ms",
    "HEADER", "HEADER_SIZE", "LENGTH_PREFIX", "MAGIC", "CODEC_NONE", "CODEC_LZ4",
    "CREATE_TIME", "LOG_APPEND_TIME", "MAX_BATCH_SIZE", "MAX_OFFSET", "RECORD_OVERHEAD", "slice_parts",
]

HEADER = struct.Struct("<qIBIHiqqqhiiI3x")
HEADER_SIZE = HEADER.size  # 64
LENGTH_PREFIX = 12  # base_offset + batch_length: what precedes the part batch_length counts
CRC_START = 17
MAGIC = 1
MAX_BATCH_SIZE = (1 << 31) - 1
#: Largest offset a record can have (Kafka's offsets are int64 too): base offset + last offset delta.
MAX_OFFSET = (1 << 63) - 1

CODEC_NONE = 0
CODEC_LZ4 = 1
_CODEC_MASK = 0x07
_TS_LOG_APPEND = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_HAS_KEYS = 0x40
_HAS_TIMESTAMPS = 0x80
_HAS_HEADERS = 0x100
_HAS_OFFSET_DELTAS = 0x200
_KNOWN_ATTRS = 0x3FF

CREATE_TIME = 0
LOG_APPEND_TIME = 1

#: lz4's best case is ~255:1; a body_size claiming more than this relative to the stored bytes is a lie.
_LZ4_MAX_RATIO = 256

_I32 = np.dtype("<i4")
_I64 = np.dtype("<i8")
_EMPTY_HEADERS: tuple = ()
_LENGTH_STRUCTS: dict[int, struct.Struct] = {}  # "<{n}i" packers for length columns, by n
_NULL_LENGTH = (-1).to_bytes(4, "little", signed=True)


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data`` continuing from ``value``; hardware-accelerated where available."""
    return _crc32c.crc32c(data, value)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many records.

    Every allocated tuple counts towards a collection, and a collection walks the young objects: building
    10,000 records would trigger a dozen passes that find nothing (records hold no cycles), about 40% of
    the cost of :meth:`BatchView.records`. Only re-enables what it disabled, so nested or concurrent use
    and a caller's own ``gc.disable()`` are respected.
    """
    if gc.isenabled():
        gc.disable()
        try:
            yield
        finally:
            gc.enable()
    else:
        yield


def now_ms() -> int:
    """Wall-clock time in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------------------------- records

_tuple_new = tuple.__new__


class Record(tuple):
    """One record: ``Record(value=b"v", key=b"k", headers=[("h", b"x")], timestamp=ms)``.

    Records read back also carry ``offset``, ``topic``, ``partition`` and ``timestamp_type``
    (0 CreateTime, 1 LogAppendTime). A ``value`` of ``None`` is a tombstone. ``headers`` is always a
    tuple of ``(str, bytes | None)`` pairs. Records are immutable tuples, so reading builds them at C speed.
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "key", "value", "headers", "topic", "partition", "timestamp_type")

    def __new__(cls, value: bytes | None = None, key: bytes | None = None,
                headers: Iterable[tuple[str, bytes | None]] | None = None, timestamp: int | None = None, *,
                offset: int = -1, topic: str | None = None, partition: int = -1,
                timestamp_type: int = CREATE_TIME) -> "Record":
        hdrs = tuple((k, v) for k, v in headers) if headers else _EMPTY_HEADERS
        return _tuple_new(cls, (offset, timestamp, key, value, hdrs, topic, partition, timestamp_type))

    offset = property(itemgetter(0), doc="Offset in the partition (-1 before it is appended).")
    timestamp = property(itemgetter(1), doc="Timestamp in ms since the epoch (None: the append time).")
    key = property(itemgetter(2), doc="Key bytes or None.")
    value = property(itemgetter(3), doc="Value bytes or None (a tombstone).")
    headers = property(itemgetter(4), doc="Tuple of (str, bytes | None) pairs.")
    topic = property(itemgetter(5), doc="Topic name (None before it is appended).")
    partition = property(itemgetter(6), doc="Partition number (-1 before it is appended).")
    timestamp_type = property(itemgetter(7), doc="0 CreateTime, 1 LogAppendTime.")

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        return "Record(" + ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self)) + ")"

    def __reduce__(self) -> Any:  # pickle every field, not just what __new__'s keywords take
        return (_rebuild_record, (tuple(self),))


def _rebuild_record(fields: tuple) -> Record:
    return _tuple_new(Record, fields)


# ---------------------------------------------------------------------------------------------- header


class BatchHeader(NamedTuple):
    """The decoded fixed-size header of one batch (see the module docstring for the layout)."""

    base_offset: int
    batch_length: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    body_size: int

    @property
    def size(self) -> int:
        """Total size of the batch in bytes, header included."""
        return self.batch_length + LENGTH_PREFIX

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & _TS_LOG_APPEND else CREATE_TIME

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL)

    @property
    def has_keys(self) -> bool:
        return bool(self.attributes & _HAS_KEYS)


def parse_header(buf: Any, pos: int = 0) -> BatchHeader:
    """Unpack the header at ``buf[pos:]`` without checking it (see :func:`check_header`)."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def check_header(h: BatchHeader, path: str | None = None, position: int | None = None) -> None:
    """Validate a header's self-consistency; the bounds here cap every later allocation.

    :raises CorruptRecordError: naming ``path`` and ``position`` when a field is impossible.
    """
    (base, length, magic, _crc, attrs, last_delta, first_ts, max_ts, _pid, _epoch, _seq, count,
     body_size) = h
    codec = attrs & _CODEC_MASK
    stored = length + LENGTH_PREFIX - HEADER_SIZE
    # One combined test on the hot path; the message is worked out only for a bad header.
    if (magic == MAGIC and HEADER_SIZE - LENGTH_PREFIX <= length <= MAX_BATCH_SIZE - LENGTH_PREFIX
            and not attrs & ~_KNOWN_ATTRS
            and (body_size == stored if codec == CODEC_NONE else
                 codec == CODEC_LZ4 and body_size <= min(stored * _LZ4_MAX_RATIO + 64, MAX_BATCH_SIZE))
            and 1 <= count <= body_size // 4 and last_delta >= count - 1 and 0 <= base <= MAX_OFFSET - last_delta
            and max_ts >= first_ts):
        return
    if magic != MAGIC:
        msg = f"unknown batch magic {magic} (expected {MAGIC})"
    elif not HEADER_SIZE - LENGTH_PREFIX <= length <= MAX_BATCH_SIZE - LENGTH_PREFIX:
        msg = f"batch length {length} out of range"
    elif attrs & ~_KNOWN_ATTRS:
        msg = f"unknown attribute bits 0x{attrs:04x}"
    elif codec == CODEC_NONE and body_size != stored:
        msg = f"body size {body_size} != stored size {stored} in an uncompressed batch"
    elif codec not in (CODEC_NONE, CODEC_LZ4):
        msg = f"unknown compression codec {codec}"
    elif codec == CODEC_LZ4 and body_size > min(stored * _LZ4_MAX_RATIO + 64, MAX_BATCH_SIZE):
        msg = f"compressed body claims {body_size} bytes from {stored}"
    elif not 1 <= count <= body_size // 4:
        msg = f"record count {count} impossible for a {body_size}-byte body"
    elif last_delta < count - 1:
        msg = f"last offset delta {last_delta} < record count - 1"
    elif base < 0:
        msg = f"negative base offset {base}"
    elif base > MAX_OFFSET - last_delta:
        # Offsets are int64 everywhere (numpy columns, the index, Kafka): the last one must fit.
        msg = f"base offset {base} + last offset delta {last_delta} exceeds {MAX_OFFSET}"
    else:
        msg = "max timestamp below first timestamp"
    raise CorruptRecordError(msg, path, position)


def batch_crc(batch: Any) -> int:
    """The CRC a whole encoded batch should carry: bytes [0, 8) (base offset) then [17, end)."""
    mv = memoryview(batch)
    return _crc32c.crc32c(mv[CRC_START:], _crc32c.crc32c(mv[:8]))


#: base_offset, batch_length, magic, crc, last_offset_delta (attributes skipped): what checked_prefix reads.
_WALK = struct.Struct("<qIBI2xi")


def checked_prefix(buf: Any, pos: int, end: int, prev_offset: int) -> tuple[int, int]:
    """Walk the batches of ``buf[pos:end]`` through their length fields, checking what bit rot changes:
    the magic, a length that fits, the CRC-32C, and base offsets above ``prev_offset`` and above the
    last offset of the batch before. Returns ``(position of the first batch that does not check, or
    end; the last offset before it)``.

    The fast path of a writer's check of a whole segment (a few hundred ns per batch): no header is
    decoded and no body section checked, since a batch whose checksum holds was written so.
    :func:`check_header` and :meth:`BatchView.from_buffer` say what is wrong with the batch it stops at.
    """
    mv = memoryview(buf)
    unpack, crc = _WALK.unpack_from, _crc32c.crc32c
    while pos + HEADER_SIZE <= end:
        base, length, magic, stored, last_delta = unpack(buf, pos)
        size = length + LENGTH_PREFIX
        if (magic != MAGIC or size < HEADER_SIZE or pos + size > end or base <= prev_offset
                or crc(mv[pos + CRC_START:pos + size], crc(mv[pos:pos + 8])) != stored):
            break
        prev_offset = base + last_delta
        pos += size
    return pos, prev_offset


def stamp_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Set the base offset of an encoded batch in place and recompute its CRC (which covers the offset)."""
    struct.pack_into("<q", batch, 0, base_offset)
    struct.pack_into("<I", batch, 13, batch_crc(batch))


# -------------------------------------------------------------------------------------------- encoding


def _column(items: Sequence[Any] | None, n: int, what: str) -> tuple[Any, list]:
    """Lengths (int32, -1 for None) and the list of non-null parts of a key or value column."""
    if items is None:
        return None, []
    if len(items) != n:
        raise InvalidRecordError(f"{what}: {len(items)} items for {n} records")
    try:
        # struct packs the lengths from a C-level map in one call: faster than numpy.fromiter here.
        st = _LENGTH_STRUCTS.get(n)
        if st is None:
            if len(_LENGTH_STRUCTS) > 64:
                _LENGTH_STRUCTS.clear()
            st = _LENGTH_STRUCTS[n] = struct.Struct(f"<{n}i")
        lengths = np.frombuffer(st.pack(*map(len, items)), _I32)
        parts = items if isinstance(items, list) else list(items)
    except (TypeError, struct.error):
        lengths = np.fromiter((-1 if v is None else len(v) for v in items), _I32, n)
        parts = [v for v in items if v is not None]
    return lengths, parts


def _headers_blob(headers: Sequence[Any] | None, n: int) -> bytes | None:
    if headers is None:
        return None
    if len(headers) != n:
        raise InvalidRecordError(f"headers: {len(headers)} items for {n} records")
    if not any(headers):
        return None
    rows: list[Any] = []
    for h in headers:
        if not h:
            rows.append(())
            continue
        row = []
        for pair in h:
            k, v = pair
            if not isinstance(k, str) or not (v is None or isinstance(v, (bytes, bytearray, memoryview))):
                raise InvalidRecordError(f"a header must be a (str, bytes | None) pair, got {pair!r}")
            row.append((k, bytes(v) if isinstance(v, (bytearray, memoryview)) else v))
        rows.append(row)
    return msgpack.packb(rows, use_bin_type=True)


def encode_parts(
    values: Sequence[bytes | None] | None = None,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int] | np.ndarray | None = None,
    headers: Sequence[Any] | None = None,
    *,
    value_lengths: np.ndarray | None = None,
    value_data: Any = None,
    key_lengths: np.ndarray | None = None,
    key_data: Any = None,
    offset_deltas: np.ndarray | None = None,
    base_offset: int = 0,
    default_timestamp: int | None = None,
    codec: int = CODEC_NONE,
    log_append_time: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    control: bool = False,
) -> tuple[list, BatchHeader]:
    """Encode one batch as ``([header bytes, *body parts], header)`` so a writer can ``writev`` it uncopied.

    Give either Python lists (``values``/``keys``) or columns (``value_lengths`` + ``value_data``, and
    likewise for keys): lengths are int32 with -1 for null, data is the concatenation of the non-null items
    (one bytes-like object, or a list of them to be joined).
    ``timestamps`` default to ``default_timestamp`` (now, when ``None``); with ``log_append_time`` they are
    all replaced by ``default_timestamp``.

    :raises InvalidRecordError: when columns disagree in length or hold non-bytes items.
    """
    body_parts: list[Any] = []
    vlens: np.ndarray
    klens: np.ndarray | None
    deltas: np.ndarray | None
    if value_lengths is not None:
        vlens = np.ascontiguousarray(value_lengths, dtype=_I32)
        n = len(vlens)
        vparts = value_data if isinstance(value_data, list) else [value_data if value_data is not None else b""]
    else:
        if values is None:
            raise InvalidRecordError("no values given")
        n = len(values)
        vlens, vparts = _column(values, n, "values")
    if n == 0:
        raise InvalidRecordError("a batch needs at least one record")
    if key_lengths is not None:
        klens = np.ascontiguousarray(key_lengths, dtype=_I32)
        if len(klens) != n:
            raise InvalidRecordError(f"keys: {len(klens)} lengths for {n} records")
        kparts = key_data if isinstance(key_data, list) else [key_data if key_data is not None else b""]
    else:
        klens, kparts = _column(keys, n, "keys")
    vraw = vlens.tobytes()
    vmin, vbytes, _ = _length_stats(vraw, n)
    kraw = b""
    kmin = kbytes = 0
    if klens is not None:
        kraw = klens.tobytes()
        kmin, kbytes, kuniform = _length_stats(kraw, n)
        if kuniform and kmin == -1:
            klens, kparts = None, []  # all keys null: no column at all
            kmin = 0

    attrs = codec & _CODEC_MASK
    if default_timestamp is None:
        default_timestamp = now_ms()
    ts_arr = None
    if log_append_time:
        attrs |= _TS_LOG_APPEND
        first_ts = max_ts = default_timestamp
    elif timestamps is None:
        first_ts = max_ts = default_timestamp
    else:
        if isinstance(timestamps, np.ndarray):
            ts_arr = timestamps.astype(_I64, copy=False)
        else:
            try:
                ts_arr = np.fromiter(timestamps, _I64, n)
            except (TypeError, ValueError):
                ts_arr = np.fromiter((default_timestamp if t is None else t for t in timestamps), _I64, n)
        if len(ts_arr) != n:
            raise InvalidRecordError(f"timestamps: {len(ts_arr)} items for {n} records")
        first_ts = int(ts_arr[0])
        raw_ts = ts_arr.tobytes()
        if raw_ts[:8] * n == raw_ts:
            # One timestamp for every record (a producer's drain stamps its batch once): no column. A
            # memcmp finds it faster than numpy's min and max, which cost ~12 us for a one-record batch.
            max_ts = first_ts
            ts_arr = None
        else:
            max_ts = int(ts_arr.max())
            ts_arr = ts_arr - first_ts

    if offset_deltas is not None:
        deltas = np.ascontiguousarray(offset_deltas, dtype=_I32)
        if len(deltas) != n or deltas[0] != 0 or (n > 1 and not (np.diff(deltas) > 0).all()):
            raise InvalidRecordError("offset deltas must start at 0 and strictly increase")
        last_delta = int(deltas[-1])
        if last_delta == n - 1:
            deltas = None
    else:
        deltas = None
        last_delta = n - 1

    if deltas is not None:
        attrs |= _HAS_OFFSET_DELTAS
        body_parts.append(deltas.tobytes())
    if ts_arr is not None:
        attrs |= _HAS_TIMESTAMPS
        body_parts.append(ts_arr.tobytes())
    if klens is not None:
        attrs |= _HAS_KEYS
        body_parts.append(kraw)
    body_parts.append(vraw)
    body_parts.extend(kparts)
    body_parts.extend(vparts)
    hblob = _headers_blob(headers, n)
    if hblob is not None:
        attrs |= _HAS_HEADERS
        body_parts.append(hblob)
    if control:
        attrs |= _CONTROL

    if vmin < -1 or kmin < -1:
        raise InvalidRecordError("lengths must be >= -1")
    data_bytes = vbytes + kbytes
    if len(body_parts) > 16:
        body_parts = [b"".join(body_parts)]  # many small items: one copy now beats a long iovec
    body_size = sum(memoryview(part).nbytes for part in body_parts)
    # Catch non-byte items (str, wide memoryviews) whose len() is not their byte size.
    fixed = 4 * n * (1 + (klens is not None) + (ts_arr is not None) * 2 + (deltas is not None))
    if body_size - (len(hblob) if hblob is not None else 0) != fixed + data_bytes:
        raise InvalidRecordError("keys and values must be bytes-like objects of 1-byte items matching their lengths")

    if attrs & _CODEC_MASK == CODEC_LZ4:
        body = body_parts[0] if len(body_parts) == 1 else b"".join(body_parts)
        compressed = _lz4.compress(body, store_size=False)
        if len(compressed) < body_size:
            body_parts = [compressed]
        else:
            attrs &= ~_CODEC_MASK  # incompressible: store plain rather than grow
    elif attrs & _CODEC_MASK != CODEC_NONE:
        raise InvalidRecordError(f"unknown codec {codec}")
    stored_size = sum(memoryview(part).nbytes for part in body_parts)
    total = HEADER_SIZE + stored_size
    if total > MAX_BATCH_SIZE:
        raise InvalidRecordError(f"batch of {total} bytes exceeds the format's limit")
    hdr = bytearray(HEADER.pack(base_offset, total - LENGTH_PREFIX, MAGIC, 0, attrs, last_delta, first_ts, max_ts,
                                producer_id, producer_epoch, base_sequence, n, body_size))
    crc = _crc32c.crc32c(memoryview(hdr)[CRC_START:], _crc32c.crc32c(memoryview(hdr)[:8]))
    for part in body_parts:
        crc = _crc32c.crc32c(part, crc)
    struct.pack_into("<I", hdr, 13, crc)
    header = BatchHeader(base_offset, total - LENGTH_PREFIX, MAGIC, crc, attrs, last_delta, first_ts, max_ts,
                         producer_id, producer_epoch, base_sequence, n, body_size)
    return [bytes(hdr), *body_parts], header


def _length_stats(raw: Any, n: int, buf: Any = None, offset: int = 0) -> tuple[int, int, bool]:
    """``(min, data bytes, uniform)`` of an int32 length column (-1 = null, no data).

    ``raw`` is the column's bytes (``buf[offset:offset + 4n]`` when ``buf`` is given). Fixed-size items are
    common, and every batch of them pays this: a column that is one repeated length is recognised by
    comparing its bytes with that length repeated (a memcmp), far cheaper than numpy's min and sum.
    """
    head = bytes(raw[:4])
    if head * n == (raw if isinstance(raw, bytes) else bytes(raw)):
        first = int.from_bytes(head, "little", signed=True)
        return first, max(first, 0) * n, True
    lengths = np.frombuffer(raw if buf is None else buf, _I32, n, 0 if buf is None else offset)
    lo = int(lengths.min())
    total = int(lengths.sum())
    if lo < 0:
        total += int(np.count_nonzero(lengths < 0))
    return lo, total, False


def encode_batch(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                 timestamps: Sequence[int] | None = None, headers: Sequence[Any] | None = None,
                 **options: Any) -> bytes:
    """Encode one batch from Python lists and return its bytes (see :func:`encode_parts` for options)."""
    parts, _ = encode_parts(values, keys, timestamps, headers, **options)
    return b"".join(parts)


def encode_columns(value_lengths: np.ndarray, value_data: Any, key_lengths: np.ndarray | None = None,
                   key_data: Any = None, timestamps: np.ndarray | None = None, **options: Any) -> bytes:
    """Encode one batch from columns (int32 lengths, -1 for null, plus concatenated bytes)."""
    parts, _ = encode_parts(value_lengths=value_lengths, value_data=value_data, key_lengths=key_lengths,
                            key_data=key_data, timestamps=timestamps, **options)
    return b"".join(parts)


# -------------------------------------------------------------------------------------------- decoding

_UNIFORM_STRUCTS: dict[tuple[int, int], struct.Struct] = {}


def _checked_lengths(mv: memoryview, pos: int, n: int, what: str, path: str | None,
                     position: int | None) -> tuple[int, int | None]:
    """``(data bytes, common length or None)`` of the length column at ``mv[pos:]``, or CorruptRecordError."""
    low, data, uniform = _length_stats(mv[pos:pos + 4 * n], n, mv, pos)
    if low < -1:
        raise CorruptRecordError(f"negative {what} length", path, position)
    # All lengths equal (and not null) lets _split_uniform skip computing positions.
    return data, (low if uniform and low >= 0 else None)


def _split_uniform(data: Any, size: int, start: int, stop: int) -> list:
    """Items ``start:stop`` of a column whose items are all ``size`` bytes, as a list of bytes."""
    m = stop - start
    if m <= 0:
        return []
    if m == 1:
        return [bytes(data[start * size:(start + 1) * size])]
    # One cached struct unpacks the run at C speed without computing positions.
    key = (size, m)
    st = _UNIFORM_STRUCTS.get(key)
    if st is None:
        st = struct.Struct(f"{size}s" * m)
        if m <= 4096:  # keep the cache small: a struct costs ~30 bytes per item
            if len(_UNIFORM_STRUCTS) > 256:
                _UNIFORM_STRUCTS.clear()
            _UNIFORM_STRUCTS[key] = st
    return list(st.unpack_from(data, size * start))


def _split(data: Any, lengths: np.ndarray, start: int = 0, stop: int | None = None) -> list:
    """Items ``start:stop`` of a column as a list of bytes (None where the length is -1), with C-level loops."""
    stop = len(lengths) if stop is None else stop
    if stop <= start:
        return []
    if stop - start == 1 and start == 0:  # one record: a consumer keeping up, read by read
        size = int(lengths[0])
        return [None] if size < 0 else [bytes(data[:size])]
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo == hi and lo >= 0:
        return _split_uniform(data, lo, start, stop)
    if hi < 0:
        return [None] * (stop - start)  # all null (records without keys, the common case)
    part = lengths[start:stop]
    clipped = np.maximum(part, 0)
    ends = np.cumsum(clipped)
    first = int(np.maximum(lengths[:start], 0).sum()) if start else 0
    ends += first
    starts = (ends - clipped).tolist()
    raw = data if isinstance(data, bytes) else bytes(data[first:int(ends[-1])])
    if raw is not data:
        shift = first
        starts = [x - shift for x in starts]
        ends -= shift
    out: list[bytes | None] = list(map(raw.__getitem__, map(slice, starts, ends.tolist())))
    if int(part.min()) < 0:
        for i in np.flatnonzero(part < 0).tolist():
            out[i] = None
    return out


class BatchView:
    """A validated batch: header plus decompressed body, with lazy zero-copy column views.

    Construct with :meth:`from_buffer`, which checks the CRC and every section bound.
    """

    __slots__ = ("header", "body", "offset_deltas", "ts_deltas", "_kpos", "_vpos", "_mv",
                 "_key_data", "_value_data", "_headers_blob", "_vuniform", "_kuniform")

    def __init__(self, header: BatchHeader, body: Any, path: str | None = None, position: int | None = None) -> None:
        # Runs once per batch on every read path: plain arithmetic and byte comparisons, few numpy calls.
        self.header = header
        self.body = body
        n = header[11]  # record_count
        a = header[4]  # attributes
        size = len(body)
        pos = 0
        width = 4 * n
        need = width * (1 + (a & _HAS_KEYS != 0) + 2 * (a & _HAS_TIMESTAMPS != 0) + (a & _HAS_OFFSET_DELTAS != 0))
        if need > size:
            raise CorruptRecordError(f"body of {size} bytes too small for {n} records", path, position)
        self.offset_deltas = None
        self.ts_deltas = None
        if a & _HAS_OFFSET_DELTAS:
            self.offset_deltas = d = np.frombuffer(body, _I32, n, pos)
            pos += width
            if d[0] != 0 or d[-1] != header[5] or (n > 1 and not (d[1:] > d[:-1]).all()):
                raise CorruptRecordError("offset deltas not strictly increasing from 0", path, position)
        elif header[5] != n - 1:
            raise CorruptRecordError("dense batch whose last offset delta is not count - 1", path, position)
        if a & _HAS_TIMESTAMPS:
            self.ts_deltas = np.frombuffer(body, _I64, n, pos)
            pos += 2 * width
        self._mv = mv = memoryview(body)
        kbytes = 0
        self._kpos = -1
        self._kuniform = None
        if a & _HAS_KEYS:
            self._kpos = pos
            kbytes, self._kuniform = _checked_lengths(mv, pos, n, "key", path, position)
            pos += width
        self._vpos = pos
        vbytes, self._vuniform = _checked_lengths(mv, pos, n, "value", path, position)
        pos += width
        rest = size - pos - kbytes - vbytes
        if rest < 0 or (rest and not a & _HAS_HEADERS) or (not rest and a & _HAS_HEADERS):
            raise CorruptRecordError("record lengths do not add up to the body size", path, position)
        self._key_data = mv[pos:pos + kbytes]
        self._value_data = mv[pos + kbytes:pos + kbytes + vbytes]
        self._headers_blob = mv[pos + kbytes + vbytes:] if rest else None

    def _items(self, data: Any, lengths_pos: int, uniform: int | None, start: int, stop: int) -> list:
        """Items ``start:stop`` of the key or value column whose lengths start at ``lengths_pos``."""
        if uniform is not None:
            return _split_uniform(data, uniform, start, stop)
        return _split(data, np.frombuffer(self.body, _I32, self.header[11], lengths_pos), start, stop)

    def _data_range(self, lengths_pos: int, uniform: int | None, a: int, b: int) -> tuple[int, int]:
        """Byte range, within its data section, of items ``a:b`` of the length column at ``lengths_pos``."""
        if uniform is not None:
            return a * uniform, b * uniform
        lens = np.maximum(np.frombuffer(self.body, _I32, b, lengths_pos), 0)
        lo = int(lens[:a].sum())
        return lo, lo + int(lens[a:].sum())

    @property
    def value_lengths(self) -> np.ndarray:
        """Value lengths (int32, -1 for null), a view over the batch."""
        return np.frombuffer(self.body, _I32, self.header[11], self._vpos)

    @property
    def key_lengths(self) -> np.ndarray | None:
        """Key lengths (int32, -1 for null), or None when the batch has no key column (all keys null)."""
        if self._kpos < 0:
            return None
        return np.frombuffer(self.body, _I32, self.header[11], self._kpos)

    @classmethod
    def from_buffer(cls, buf: Any, pos: int = 0, path: str | None = None, file_pos: int | None = None,
                    header: BatchHeader | None = None, verify_crc: bool = True) -> "BatchView":
        """Validate and view the batch starting at ``buf[pos:]`` (which must hold all of it).

        :raises CorruptRecordError: on a bad header, checksum, compressed body or section bounds.
        """
        where = file_pos if file_pos is not None else pos
        h: BatchHeader
        if header is None:
            have = memoryview(buf).nbytes - pos
            if have < HEADER_SIZE:  # struct.error otherwise: hostile input must raise CorruptRecordError
                raise CorruptRecordError(f"batch header truncated to {max(have, 0)} bytes", path, where)
            h = parse_header(buf, pos)
            check_header(h, path, where)
        else:
            h = header
        total = h[1] + LENGTH_PREFIX
        mv = memoryview(buf)[pos:pos + total]
        if len(mv) != total:
            raise CorruptRecordError(f"batch of {total} bytes truncated to {len(mv)}", path, where)
        if verify_crc and _crc32c.crc32c(mv[CRC_START:], _crc32c.crc32c(mv[:8])) != h[3]:
            raise CorruptRecordError("batch checksum mismatch", path, where)
        stored = mv[HEADER_SIZE:]
        if h[4] & _CODEC_MASK == CODEC_LZ4:
            try:
                body: Any = _lz4.decompress(stored, uncompressed_size=h.body_size)
            except Exception as exc:  # lz4 raises its own LZ4BlockError
                raise CorruptRecordError(f"lz4 body does not decompress: {exc}", path, where) from None
            if len(body) != h.body_size:
                raise CorruptRecordError("decompressed body size mismatch", path, where)
        else:
            body = stored
        return cls(h, body, path, where)

    @property
    def count(self) -> int:
        return self.header.record_count

    def offsets(self) -> np.ndarray:
        """Absolute offsets of the records (int64)."""
        h = self.header
        if self.offset_deltas is None:
            return np.arange(h.base_offset, h.base_offset + h.record_count, dtype=_I64)
        return self.offset_deltas.astype(_I64) + h.base_offset

    def timestamps(self) -> np.ndarray:
        """Timestamps in ms (int64); LogAppendTime batches report the append time for every record."""
        h = self.header
        if h.attributes & _TS_LOG_APPEND:
            return np.full(h.record_count, h.max_timestamp, _I64)
        if self.ts_deltas is None:
            return np.full(h.record_count, h.first_timestamp, _I64)
        return self.ts_deltas + h.first_timestamp

    def key_data(self) -> memoryview:
        return self._key_data

    def value_data(self) -> memoryview:
        return self._value_data

    def headers(self) -> list | None:
        """Per-record header tuples, or None when the batch has no headers."""
        if self._headers_blob is None:
            return None
        try:
            rows = msgpack.unpackb(self._headers_blob, use_list=False, raw=False,
                                   max_array_len=max(self.count, 16), max_bin_len=len(self._headers_blob),
                                   max_str_len=len(self._headers_blob), max_map_len=0, max_ext_len=0)
        except Exception as exc:
            raise CorruptRecordError(f"headers section does not decode: {exc}") from None
        if not isinstance(rows, tuple) or len(rows) != self.count:
            raise CorruptRecordError("headers section has the wrong number of rows")
        # msgpack decodes whatever the bytes say (ints, floats, nested arrays): keep the promise that
        # headers are tuples of (str, bytes | None) pairs.
        for row in rows:
            if type(row) is not tuple:
                raise CorruptRecordError("headers section: a row is not an array")
            for pair in row:
                if (type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str
                        or (pair[1] is not None and type(pair[1]) is not bytes)):
                    raise CorruptRecordError("headers section: a header is not a (str, bytes | nil) pair")
        return list(rows)

    def records(self, topic: str | None = None, partition: int = -1, start: int = 0,
                stop: int | None = None) -> list[Record]:
        """Records ``start:stop`` (indexes into the batch) as :class:`Record` objects."""
        h = self.header
        n = h.record_count
        stop = n if stop is None else stop
        if start >= stop:
            return []
        m = stop - start
        if self.offset_deltas is None:
            offs: Iterable[int] = range(h.base_offset + start, h.base_offset + stop)
        else:
            offs = (self.offset_deltas[start:stop].astype(_I64) + h.base_offset).tolist()
        if h.attributes & _TS_LOG_APPEND:
            ts: Iterable[int] = itertools.repeat(h.max_timestamp, m)
        elif self.ts_deltas is None:
            ts = itertools.repeat(h.first_timestamp, m)
        else:
            ts = (self.ts_deltas[start:stop] + h.first_timestamp).tolist()
        values = self._items(self._value_data, self._vpos, self._vuniform, start, stop)
        keys: Iterable[Any] = (itertools.repeat(None, m) if self._kpos < 0
                               else self._items(self._key_data, self._kpos, self._kuniform, start, stop))
        hdrs = self.headers()
        hs: Iterable[Any] = itertools.repeat(_EMPTY_HEADERS, m) if hdrs is None else hdrs[start:stop]
        return list(map(_tuple_new, itertools.repeat(Record), zip(
            offs, ts, keys, values, hs, itertools.repeat(topic, m), itertools.repeat(partition, m),
            itertools.repeat(h.timestamp_type, m))))


# ------------------------------------------------------------------------------------------- columns


class RecordColumns:
    """Records as columns: numpy arrays and contiguous byte buffers, no Python object per record.

    - ``offsets``, ``timestamps``: int64 arrays; ``timestamp_types``: int8 array (0 Create, 1 LogAppend)
    - ``key_lengths``, ``value_lengths``: int32 arrays, -1 for null
    - ``key_data``, ``value_data``: the non-null keys/values concatenated (``bytes``)
    - ``headers``: a list of per-record header tuples, or None when no record has headers

    ``value_offsets``/``key_offsets`` give int64 start positions (length n + 1) into the data buffers, the
    shape Arrow's binary arrays want.
    """

    __slots__ = ("topic", "partition", "offsets", "timestamps", "timestamp_types", "key_lengths", "key_data",
                 "value_lengths", "value_data", "headers")

    def __init__(self, topic: str | None, partition: int, offsets: np.ndarray, timestamps: np.ndarray,
                 timestamp_types: np.ndarray, key_lengths: np.ndarray, key_data: bytes,
                 value_lengths: np.ndarray, value_data: bytes, headers: list | None) -> None:
        self.topic = topic
        self.partition = partition
        self.offsets = offsets
        self.timestamps = timestamps
        self.timestamp_types = timestamp_types
        self.key_lengths = key_lengths
        self.key_data = key_data
        self.value_lengths = value_lengths
        self.value_data = value_data
        self.headers = headers

    def __len__(self) -> int:
        return len(self.offsets)

    @staticmethod
    def _starts(lengths: np.ndarray) -> np.ndarray:
        out = np.zeros(len(lengths) + 1, _I64)
        np.cumsum(np.maximum(lengths, 0), out=out[1:])
        return out

    @property
    def value_offsets(self) -> np.ndarray:
        return self._starts(self.value_lengths)

    @property
    def key_offsets(self) -> np.ndarray:
        return self._starts(self.key_lengths)

    def values(self) -> list:
        """The values as a list of bytes/None (builds Python objects: for convenience, not speed)."""
        return _split(self.value_data, self.value_lengths)

    def keys(self) -> list:
        return _split(self.key_data, self.key_lengths)

    def to_records(self) -> list[Record]:
        n = len(self)
        hs = self.headers if self.headers is not None else itertools.repeat(_EMPTY_HEADERS, n)
        with gc_paused():
            return list(map(_tuple_new, itertools.repeat(Record), zip(
                self.offsets.tolist(), self.timestamps.tolist(), self.keys(), self.values(), hs,
                itertools.repeat(self.topic, n), itertools.repeat(self.partition, n),
                self.timestamp_types.tolist())))

    @classmethod
    def empty(cls, topic: str | None = None, partition: int = -1) -> "RecordColumns":
        e64 = np.empty(0, _I64)
        e32 = np.empty(0, _I32)
        return cls(topic, partition, e64, e64.copy(), np.empty(0, np.int8), e32, b"", e32.copy(), b"", None)

    @classmethod
    def _of_view(cls, v: BatchView, a: int, b: int, topic: str | None, partition: int) -> "RecordColumns":
        """:meth:`concat_views` of one slice, the common case of a consumer keeping up with a few records
        per read: a handful of numpy calls, not the dozens the general path's batch-wise steps cost."""
        h = v.header
        n = b - a
        whole = a == 0 and b == h[11]
        offsets = (np.arange(h[0] + a, h[0] + b, dtype=_I64) if v.offset_deltas is None
                   else v.offset_deltas[a:b].astype(_I64) + h[0])
        if h[4] & _TS_LOG_APPEND:
            timestamps = np.full(n, h.max_timestamp, _I64)
        elif v.ts_deltas is None:
            timestamps = np.full(n, h.first_timestamp, _I64)
        else:
            timestamps = v.ts_deltas[a:b] + h.first_timestamp
        mv = v._mv
        # Copies, not views: the batch may lie in a segment's mapping, which must stay closable.
        vlens = np.frombuffer(mv[v._vpos + 4 * a:v._vpos + 4 * b].tobytes(), _I32)
        vd = v._value_data
        if not whole:
            lo, hi = v._data_range(v._vpos, v._vuniform, a, b)
            vd = vd[lo:hi]
        if v._kpos < 0:
            klens = np.full(n, -1, _I32)
            kd: Any = b""
        else:
            klens = np.frombuffer(mv[v._kpos + 4 * a:v._kpos + 4 * b].tobytes(), _I32)
            kd = v._key_data
            if not whole:
                lo, hi = v._data_range(v._kpos, v._kuniform, a, b)
                kd = kd[lo:hi]
        hs = v.headers()
        return cls(topic, partition, offsets, timestamps, np.full(n, h.timestamp_type, np.int8), klens, bytes(kd),
                   vlens, bytes(vd), None if hs is None else hs[a:b])

    @classmethod
    def concat_views(cls, views: list[tuple[BatchView, int, int]], topic: str | None,
                     partition: int) -> "RecordColumns":
        """Columns for ``(view, start, stop)`` slices of batches, copying each byte once.

        Offsets, timestamps and timestamp types are built for all batches at once (numpy repeat/arange),
        so the per-batch cost is a few slices, not a numpy call per column per batch.
        """
        if not views:
            return cls.empty(topic, partition)
        if len(views) == 1:
            return cls._of_view(*views[0], topic, partition)
        nb = len(views)
        counts = np.fromiter((b - a for _, a, b in views), _I64, nb)
        total = int(counts.sum())
        firsts = np.zeros(nb, _I64)
        np.cumsum(counts[:-1], out=firsts[1:])
        vlens: list[Any] = []
        vdata: list[Any] = []
        klens: list[Any] = []
        kdata: list[Any] = []
        dense = True
        uniform_ts = True
        has_keys = False
        any_headers = False
        # Per batch only slices are taken; lengths and data are each joined once at the end.
        for v, a, b in views:
            attrs = v.header[4]
            if v.offset_deltas is not None:
                dense = False
            if v.ts_deltas is not None and not attrs & _TS_LOG_APPEND:
                uniform_ts = False
            if v._kpos >= 0:
                has_keys = True
            if v._headers_blob is not None:
                any_headers = True
            vd = v._value_data
            if a or b != v.header[11]:
                lo, hi = v._data_range(v._vpos, v._vuniform, a, b)
                vd = vd[lo:hi]
            vlens.append(v._mv[v._vpos + 4 * a:v._vpos + 4 * b])
            vdata.append(vd)
        if dense:
            bases = np.fromiter((v.header.base_offset + a for v, a, _ in views), _I64, nb)
            offsets = np.repeat(bases - firsts, counts) + np.arange(total, dtype=_I64)
        else:
            offsets = np.concatenate([v.offsets()[a:b] for v, a, b in views])
        if uniform_ts:
            # Here every batch has one timestamp for all its records: LogAppendTime's, or the first one.
            per = np.fromiter((v.header.max_timestamp if v.header.attributes & _TS_LOG_APPEND
                               else v.header.first_timestamp for v, _, _ in views), _I64, nb)
            timestamps = np.repeat(per, counts)
        else:
            timestamps = np.concatenate([v.timestamps()[a:b] for v, a, b in views])
        ttypes = np.repeat(np.fromiter((v.header.timestamp_type for v, _, _ in views), np.int8, nb), counts)
        if has_keys:
            for v, a, b in views:
                if v._kpos < 0:
                    klens.append(_NULL_LENGTH * (b - a))
                    continue
                kd = v._key_data
                if a or b != v.header[11]:
                    lo, hi = v._data_range(v._kpos, v._kuniform, a, b)
                    kd = kd[lo:hi]
                klens.append(v._mv[v._kpos + 4 * a:v._kpos + 4 * b])
                kdata.append(kd)
            key_lengths = np.frombuffer(b"".join(klens), _I32)
        else:
            key_lengths = np.full(total, -1, _I32)
        headers: list | None = None
        if any_headers:
            headers = []
            for v, a, b in views:
                h = v.headers()
                headers.extend(h[a:b] if h is not None else itertools.repeat(_EMPTY_HEADERS, b - a))
        return cls(topic, partition, offsets, timestamps, ttypes, key_lengths, b"".join(kdata),
                   np.frombuffer(b"".join(vlens), _I32), b"".join(vdata), headers)


#: Per-record bytes in a batch body besides key and value: value length, key length, timestamp delta.
RECORD_OVERHEAD = 16


def slice_parts(lengths: np.ndarray, parts: list, start: int, stop: int, contiguous: bool) -> tuple[np.ndarray, list]:
    """Lengths and data parts of records [start, stop) of a column whose null items have no part."""
    lens = lengths[start:stop]
    if contiguous:
        clipped = np.maximum(lengths, 0)
        lo = int(clipped[:start].sum())
        hi = lo + int(clipped[start:stop].sum())
        return lens, [memoryview(parts[0])[lo:hi]] if parts else []
    present = lengths >= 0
    lo = int(present[:start].sum())
    hi = lo + int(present[start:stop].sum())
    return lens, parts[lo:hi]
