"""Reading record batches: validated zero-copy views of batches, and records as whole columns.

Invariants:
- No decoder trusts a length it has not bounded: every count and size is checked against the bytes
  actually present before anything is allocated, so hostile input raises
  :class:`~pylog.errors.CorruptRecordError` instead of hanging or allocating more than the input's size.
- Decoding returns exactly what :mod:`.encode` encoded (keys, values, nulls, headers, timestamps), and
  accepts every batch it writes: no bound here is tighter than the encoder's (tests/test_record_bounds.py).
- Work is per batch (numpy arrays over the body, bytes joins), never a Python object per record, except
  in :meth:`BatchView.records`, whose job is to build those objects.

Where the fields are is :mod:`.format`'s business; this module reads the body's sections in the order
format's docstring gives. It knows nothing about files, offsets assignment or topics.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any, Callable, Iterable

import lz4.block as _lz4
import msgpack
import numpy as np

from ...accel import native as _native
from ...errors import CorruptRecordError
from .format import (ATTR_HEADERS, ATTR_KEYS, ATTR_LOG_APPEND_TIME, ATTR_OFFSET_DELTAS, ATTR_TIMESTAMPS, CODEC_LZ4,
                     CODEC_MASK, CRC_START, HEADER_SIZE, I32, I64, LENGTH_PREFIX, MAGIC, NULL_LENGTH, WALK,
                     CRC32C, BatchHeader, check_header, length_stats, parse_header)
from .record import EMPTY_HEADERS, Record, gc_paused

__all__ = ["BatchView", "RecordColumns", "checked_prefix", "Layout", "batch_layout_pure", "batch_layout_native",
           "records_pure", "records_native", "slices_records", "consumer_rows", "consumer_rows_pure",
           "consumer_rows_native", "consumer_row_iter", "consumer_row_iter_native",
           "slices_count", "payload_bytes"]

_tuple_new = tuple.__new__


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
    unpack, crc = WALK.unpack_from, CRC32C
    while pos + HEADER_SIZE <= end:
        base, length, magic, stored, last_delta = unpack(buf, pos)
        size = length + LENGTH_PREFIX
        if (magic != MAGIC or size < HEADER_SIZE or pos + size > end or base <= prev_offset
                or crc(mv[pos + CRC_START:pos + size], crc(mv[pos:pos + 8])) != stored):
            break
        prev_offset = base + last_delta
        pos += size
    return pos, prev_offset


# -------------------------------------------------------------------------------------------- decoding

_UNIFORM_STRUCTS: dict[tuple[int, int], struct.Struct] = {}


def _checked_lengths(mv: memoryview, pos: int, n: int, what: str, path: str | None,
                     position: int | None) -> tuple[int, int]:
    """``(data bytes, common length or -1)`` of the length column at ``mv[pos:]``, or CorruptRecordError."""
    low, data, uniform = length_stats(mv[pos:pos + 4 * n], n, mv, pos)
    if low < -1:
        raise CorruptRecordError(f"negative {what} length", path, position)
    # All lengths equal (and not null) lets _split_uniform skip computing positions.
    return data, (low if uniform and low >= 0 else -1)


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


#: ``(key_pos, key_bytes, key_uniform, value_pos, value_bytes, value_uniform, headers_pos)``: where a body's
#: sections are (positions -1 where a section is absent, uniform -1 where the item lengths differ or are null).
Layout = tuple[int, int, int, int, int, int, int]


def batch_layout_pure(body: Any, count: int, attributes: int, last_offset_delta: int, path: str | None = None,
                      position: int | None = None) -> Layout:
    """The checked section bounds of a batch body (the reference of the compiled ``batch_layout``).

    :raises CorruptRecordError: when the columns do not fit the body, the offset deltas do not rise from 0
        to ``last_offset_delta``, a length is below -1 or the lengths do not add up to the body's size.
    """
    n, a = count, attributes
    size = len(body)
    pos = 0
    width = 4 * n
    need = width * (1 + (a & ATTR_KEYS != 0) + 2 * (a & ATTR_TIMESTAMPS != 0) + (a & ATTR_OFFSET_DELTAS != 0))
    if need > size:
        raise CorruptRecordError(f"body of {size} bytes too small for {n} records", path, position)
    if a & ATTR_OFFSET_DELTAS:
        d = np.frombuffer(body, I32, n, pos)
        pos += width
        if d[0] != 0 or d[-1] != last_offset_delta or (n > 1 and not (d[1:] > d[:-1]).all()):
            raise CorruptRecordError("offset deltas not strictly increasing from 0", path, position)
    elif last_offset_delta != n - 1:
        raise CorruptRecordError("dense batch whose last offset delta is not count - 1", path, position)
    if a & ATTR_TIMESTAMPS:
        pos += 2 * width
    mv = memoryview(body)
    kbytes = 0
    kpos = kuniform = -1
    if a & ATTR_KEYS:
        kpos = pos
        kbytes, kuniform = _checked_lengths(mv, pos, n, "key", path, position)
        pos += width
    vpos = pos
    vbytes, vuniform = _checked_lengths(mv, pos, n, "value", path, position)
    pos += width
    rest = size - pos - kbytes - vbytes
    if rest < 0 or (rest and not a & ATTR_HEADERS) or (not rest and a & ATTR_HEADERS):
        raise CorruptRecordError("record lengths do not add up to the body size", path, position)
    return kpos, kbytes, kuniform, vpos, vbytes, vuniform, (pos + kbytes + vbytes if rest else -1)


#: The compiled batch_layout when the accelerator is live (same results and errors), else the reference.
batch_layout_native = None if _native is None else _native.batch_layout
_batch_layout = batch_layout_pure if _native is None else _native.batch_layout


class BatchView:
    """A validated batch: header plus decompressed body, with lazy zero-copy column views.

    Construct with :meth:`from_buffer`, which checks the CRC and every section bound.
    """

    __slots__ = ("header", "body", "offset_deltas", "ts_deltas", "_kpos", "_vpos", "_mv",
                 "_key_data", "_value_data", "_headers_blob", "_vuniform", "_kuniform")

    def __init__(self, header: BatchHeader, body: Any, path: str | None = None, position: int | None = None) -> None:
        # Runs once per batch on every read path: one layout call (C when accelerated), few numpy calls.
        self.header = header
        self.body = body
        n = header[11]  # record_count
        a = header[4]  # attributes
        kpos, kbytes, kuniform, vpos, vbytes, vuniform, hpos = _batch_layout(body, n, a, header[5], path, position)
        pos = 0
        self.offset_deltas = None
        self.ts_deltas = None
        if a & ATTR_OFFSET_DELTAS:
            self.offset_deltas = np.frombuffer(body, I32, n, pos)
            pos += 4 * n
        if a & ATTR_TIMESTAMPS:
            self.ts_deltas = np.frombuffer(body, I64, n, pos)
        self._mv = mv = memoryview(body)
        self._kpos = kpos
        self._kuniform = kuniform if kuniform >= 0 else None
        self._vpos = vpos
        self._vuniform = vuniform if vuniform >= 0 else None
        pos = vpos + 4 * n
        self._key_data = mv[pos:pos + kbytes]
        self._value_data = mv[pos + kbytes:pos + kbytes + vbytes]
        self._headers_blob = mv[hpos:] if hpos >= 0 else None

    def _items(self, data: Any, lengths_pos: int, uniform: int | None, start: int, stop: int) -> list:
        """Items ``start:stop`` of the key or value column whose lengths start at ``lengths_pos``."""
        if uniform is not None:
            return _split_uniform(data, uniform, start, stop)
        return _split(data, np.frombuffer(self.body, I32, self.header[11], lengths_pos), start, stop)

    def _data_range(self, lengths_pos: int, uniform: int | None, a: int, b: int) -> tuple[int, int]:
        """Byte range, within its data section, of items ``a:b`` of the length column at ``lengths_pos``."""
        if uniform is not None:
            return a * uniform, b * uniform
        lens = np.maximum(np.frombuffer(self.body, I32, b, lengths_pos), 0)
        lo = int(lens[:a].sum())
        return lo, lo + int(lens[a:].sum())

    @property
    def value_lengths(self) -> np.ndarray:
        """Value lengths (int32, -1 for null), a view over the batch."""
        return np.frombuffer(self.body, I32, self.header[11], self._vpos)

    @property
    def key_lengths(self) -> np.ndarray | None:
        """Key lengths (int32, -1 for null), or None when the batch has no key column (all keys null)."""
        if self._kpos < 0:
            return None
        return np.frombuffer(self.body, I32, self.header[11], self._kpos)

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
        if verify_crc and CRC32C(mv[CRC_START:], CRC32C(mv[:8])) != h[3]:
            raise CorruptRecordError("batch checksum mismatch", path, where)
        stored = mv[HEADER_SIZE:]
        if h[4] & CODEC_MASK == CODEC_LZ4:
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
            return np.arange(h.base_offset, h.base_offset + h.record_count, dtype=I64)
        return self.offset_deltas.astype(I64) + h.base_offset

    def timestamps(self) -> np.ndarray:
        """Timestamps in ms (int64); LogAppendTime batches report the append time for every record."""
        h = self.header
        if h.attributes & ATTR_LOG_APPEND_TIME:
            return np.full(h.record_count, h.max_timestamp, I64)
        if self.ts_deltas is None:
            return np.full(h.record_count, h.first_timestamp, I64)
        return self.ts_deltas + h.first_timestamp

    def key_data(self) -> memoryview:
        return self._key_data

    def value_data(self) -> memoryview:
        return self._value_data

    def headers(self) -> list | None:
        """Per-record header tuples, or None when the batch has no headers."""
        if self._headers_blob is None:
            return None
        # Every bound is the section's own length (an item takes at least one byte), never a count: the
        # encoder writes any number of headers per record that fits a batch, and a bound below that made
        # records with more than 16 headers unreadable after they were appended (pylog <= 0.1.0's
        # max_array_len=max(count, 16)). Maps and extension types are never written: refused outright.
        blob = self._headers_blob
        try:
            rows = msgpack.unpackb(blob, use_list=False, raw=False, max_array_len=len(blob), max_bin_len=len(blob),
                                   max_str_len=len(blob), max_map_len=0, max_ext_len=0)
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
        """Records ``start:stop`` (indexes into the batch, ``0 <= start``, ``stop <= count``) as
        :class:`Record` objects; built in C when the accelerator is live (:func:`records_native`)."""
        return _records(self, topic, partition, start, stop)


def records_pure(view: BatchView, topic: str | None = None, partition: int = -1, start: int = 0,
                 stop: int | None = None) -> list[Record]:
    """:meth:`BatchView.records` in pure Python: the reference of :func:`records_native`."""
    h = view.header
    n = h.record_count
    stop = n if stop is None else stop
    if start >= stop:
        return []
    m = stop - start
    if view.offset_deltas is None:
        offs: Iterable[int] = range(h.base_offset + start, h.base_offset + stop)
    else:
        offs = (view.offset_deltas[start:stop].astype(I64) + h.base_offset).tolist()
    if h.attributes & ATTR_LOG_APPEND_TIME:
        ts: Iterable[int] = itertools.repeat(h.max_timestamp, m)
    elif view.ts_deltas is None:
        ts = itertools.repeat(h.first_timestamp, m)
    else:
        ts = (view.ts_deltas[start:stop] + h.first_timestamp).tolist()
    values = view._items(view._value_data, view._vpos, view._vuniform, start, stop)
    keys: Iterable[Any] = (itertools.repeat(None, m) if view._kpos < 0
                           else view._items(view._key_data, view._kpos, view._kuniform, start, stop))
    hdrs = view.headers()
    hs: Iterable[Any] = itertools.repeat(EMPTY_HEADERS, m) if hdrs is None else hdrs[start:stop]
    return list(map(_tuple_new, itertools.repeat(Record), zip(
        offs, ts, keys, values, hs, itertools.repeat(topic, m), itertools.repeat(partition, m),
        itertools.repeat(h.timestamp_type, m), strict=True)))


def records_native(view: BatchView, topic: str | None = None, partition: int = -1, start: int = 0,
                   stop: int | None = None) -> list[Record]:
    """:meth:`BatchView.records` built in C from the batch body (the accelerator must be live): equal to
    :func:`records_pure`, its tuples untracked by the cyclic collector (they hold no cycle)."""
    h = view.header
    assert _native is not None, "records_native needs the compiled accelerator"
    return _native.decode_records(view.body, h, start, h[11] if stop is None else stop, topic, partition, Record,
                                  view.headers())


_records = records_pure if _native is None else records_native


def slices_records(slices: list[tuple[BatchView, int, int]], topic: str | None, partition: int) -> list[Record]:
    """The records of ``(view, start, stop)`` slices of batches, in order (what ``Partition.read`` returns)."""
    if len(slices) == 1:
        view, a, b = slices[0]
        if _native is not None or b - a < 256:  # a small read (or untracked tuples): no collector pause
            return _records(view, topic, partition, a, b)
    out: list[Record] = []
    if _native is not None:
        for view, a, b in slices:
            out.extend(records_native(view, topic, partition, a, b))
        return out
    with gc_paused():
        for view, a, b in slices:
            out.extend(records_pure(view, topic, partition, a, b))
    return out


# ------------------------------------------------------------------------------------------- columns

# RecordColumns' data columns are joined by native.join_buffers when it is built: the same bytes as
# b"".join, into fresh memory faulted in 2 MiB huge pages rather than 4 KiB ones (native/columns.c), which
# halves the cost of a large read_columns on a VM. Absent (pure Python, an older build): b"".join.
_join_columns: Any = getattr(_native, "join_buffers", None) or b"".join


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
    def starts_of(lengths: np.ndarray) -> np.ndarray:
        """Where each item of a length column starts in its data (a None, length -1, takes no bytes),
        with the total at the end: ``len(lengths) + 1`` int64 positions."""
        out = np.zeros(len(lengths) + 1, I64)
        np.cumsum(np.maximum(lengths, 0), out=out[1:])
        return out

    @property
    def value_offsets(self) -> np.ndarray:
        return self.starts_of(self.value_lengths)

    @property
    def key_offsets(self) -> np.ndarray:
        return self.starts_of(self.key_lengths)

    def values(self) -> list:
        """The values as a list of bytes/None (builds Python objects: for convenience, not speed)."""
        return _split(self.value_data, self.value_lengths)

    def keys(self) -> list:
        return _split(self.key_data, self.key_lengths)

    def to_records(self) -> list[Record]:
        n = len(self)
        hs = self.headers if self.headers is not None else itertools.repeat(EMPTY_HEADERS, n)
        with gc_paused():
            return list(map(_tuple_new, itertools.repeat(Record), zip(
                self.offsets.tolist(), self.timestamps.tolist(), self.keys(), self.values(), hs,
                itertools.repeat(self.topic, n), itertools.repeat(self.partition, n),
                self.timestamp_types.tolist(), strict=True)))

    @classmethod
    def empty(cls, topic: str | None = None, partition: int = -1) -> "RecordColumns":
        e64 = np.empty(0, I64)
        e32 = np.empty(0, I32)
        return cls(topic, partition, e64, e64.copy(), np.empty(0, np.int8), e32, b"", e32.copy(), b"", None)

    @classmethod
    def _of_view(cls, v: BatchView, a: int, b: int, topic: str | None, partition: int) -> "RecordColumns":
        """:meth:`concat_views` of one slice, the common case of a consumer keeping up with a few records
        per read: a handful of numpy calls, not the dozens the general path's batch-wise steps cost."""
        h = v.header
        n = b - a
        whole = a == 0 and b == h[11]
        offsets = (np.arange(h[0] + a, h[0] + b, dtype=I64) if v.offset_deltas is None
                   else v.offset_deltas[a:b].astype(I64) + h[0])
        if h[4] & ATTR_LOG_APPEND_TIME:
            timestamps = np.full(n, h.max_timestamp, I64)
        elif v.ts_deltas is None:
            timestamps = np.full(n, h.first_timestamp, I64)
        else:
            timestamps = v.ts_deltas[a:b] + h.first_timestamp
        mv = v._mv
        # Copies, not views: the batch may lie in a segment's mapping, which must stay closable.
        vlens = np.frombuffer(mv[v._vpos + 4 * a:v._vpos + 4 * b].tobytes(), I32)
        vd = v._value_data
        if not whole:
            lo, hi = v._data_range(v._vpos, v._vuniform, a, b)
            vd = vd[lo:hi]
        if v._kpos < 0:
            klens = np.full(n, -1, I32)
            kd: Any = b""
        else:
            klens = np.frombuffer(mv[v._kpos + 4 * a:v._kpos + 4 * b].tobytes(), I32)
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
        counts = np.fromiter((b - a for _, a, b in views), I64, nb)
        total = int(counts.sum())
        firsts = np.zeros(nb, I64)
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
            if v.ts_deltas is not None and not attrs & ATTR_LOG_APPEND_TIME:
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
            bases = np.fromiter((v.header.base_offset + a for v, a, _ in views), I64, nb)
            offsets = np.repeat(bases - firsts, counts) + np.arange(total, dtype=I64)
        else:
            offsets = np.concatenate([v.offsets()[a:b] for v, a, b in views])
        if uniform_ts:
            # Here every batch has one timestamp for all its records: LogAppendTime's, or the first one.
            per = np.fromiter((v.header.max_timestamp if v.header.attributes & ATTR_LOG_APPEND_TIME
                               else v.header.first_timestamp for v, _, _ in views), I64, nb)
            timestamps = np.repeat(per, counts)
        else:
            timestamps = np.concatenate([v.timestamps()[a:b] for v, a, b in views])
        ttypes = np.repeat(np.fromiter((v.header.timestamp_type for v, _, _ in views), np.int8, nb), counts)
        if has_keys:
            for v, a, b in views:
                if v._kpos < 0:
                    klens.append(NULL_LENGTH * (b - a))
                    continue
                kd = v._key_data
                if a or b != v.header[11]:
                    lo, hi = v._data_range(v._kpos, v._kuniform, a, b)
                    kd = kd[lo:hi]
                klens.append(v._mv[v._kpos + 4 * a:v._kpos + 4 * b])
                kdata.append(kd)
            key_lengths = np.frombuffer(b"".join(klens), I32)
        else:
            key_lengths = np.full(total, -1, I32)
        headers: list | None = None
        if any_headers:
            headers = []
            for v, a, b in views:
                h = v.headers()
                headers.extend(h[a:b] if h is not None else itertools.repeat(EMPTY_HEADERS, b - a))
        return cls(topic, partition, offsets, timestamps, ttypes, key_lengths, _join_columns(kdata),
                   np.frombuffer(b"".join(vlens), I32), _join_columns(vdata), headers)


# ----------------------------------------------------------------------------------- consumer rows


def consumer_rows_pure(slices: list[tuple[BatchView, int, int]], topic: str, partition: int, row_type: type,
                       key_deserializer: Callable[[bytes], Any] | None = None,
                       value_deserializer: Callable[[bytes], Any] | None = None) -> list:
    """The records of ``(view, start, stop)`` slices as ``row_type`` tuples in a consumer record's field
    order: topic, partition, offset, timestamp, timestamp type, key, value, headers, checksum (None),
    serialized key size (-1 for null), serialized value size, serialized header size (UTF-8 bytes of the
    header keys plus their values' bytes). The deserializers, when given, are applied to each non-null key
    and value, record by record (key first). The reference of :func:`consumer_rows_native`; ``row_type``
    is passed in because storage does not know the clients' types."""
    cols = RecordColumns.concat_views(slices, topic, partition)
    n = len(cols)
    if not n:
        return []
    # Built column by column and zipped into tuples at C level: no Python expression per record
    # unless a deserializer or headers ask for one.
    keys, values = cols.keys(), cols.values()
    kd, vd = key_deserializer, value_deserializer
    if kd is not None and vd is not None:  # record by record, as the compiled path calls them
        pairs = [(None if k is None else kd(k), None if v is None else vd(v))
                 for k, v in zip(keys, values, strict=True)]
        keys, values = [k for k, _ in pairs], [v for _, v in pairs]
    elif kd is not None:
        keys = [None if k is None else kd(k) for k in keys]
    elif vd is not None:
        values = [None if v is None else vd(v) for v in values]
    if cols.headers is None:
        headers: Iterable[Any] = itertools.repeat(EMPTY_HEADERS, n)
        header_sizes: Iterable[int] = itertools.repeat(0, n)
    else:
        headers = cols.headers
        header_sizes = [sum(len(k.encode()) + (0 if v is None else len(v)) for k, v in h) for h in cols.headers]
    with gc_paused():  # hundreds of tuples without cycles: no collector passes while building them
        return list(map(_tuple_new, itertools.repeat(row_type), zip(
            itertools.repeat(topic, n), itertools.repeat(partition, n), cols.offsets.tolist(),
            cols.timestamps.tolist(), cols.timestamp_types.tolist(), keys, values, headers,
            itertools.repeat(None, n), cols.key_lengths.tolist(), cols.value_lengths.tolist(), header_sizes,
            strict=True)))


def consumer_rows_native(slices: list[tuple[BatchView, int, int]], topic: str, partition: int, row_type: type,
                         key_deserializer: Callable[[bytes], Any] | None = None,
                         value_deserializer: Callable[[bytes], Any] | None = None) -> list:
    """:func:`consumer_rows_pure` built in C straight from the batch bodies (the accelerator must be live):
    one pass per slice, no intermediate columns; rows holding only atoms are untracked by the collector."""
    assert _native is not None, "consumer_rows_native needs the compiled accelerator"
    out: list = []
    decode = _native.decode_rows
    for v, a, b in slices:
        decode(out, v.body, v.header, a, b, topic, partition, row_type, v.headers(), key_deserializer,
               value_deserializer)
    return out


#: The consumer's path: compiled when the accelerator is live, else the reference.
consumer_rows = consumer_rows_pure if _native is None else consumer_rows_native


def consumer_row_iter_native(slices: list[tuple[BatchView, int, int]], topic: str, partition: int, row_type: type,
                             key_deserializer: Callable[[bytes], Any] | None = None,
                             value_deserializer: Callable[[bytes], Any] | None = None) -> Any:
    """The rows :func:`consumer_rows_native` returns for ``slices``, as an iterator that builds each row when
    it is asked for (the accelerator must be live): the loop taking them frees each row before the next is
    built, so a row's memory is still in cache, where a list of a whole poll's rows is not. Its
    ``__length_hint__()`` counts the rows not handed out yet, ``next_offset`` is the offset after the last
    one handed out (-1 before the first), ``close()`` hands out no more. A row whose building raises (a
    deserializer's error) raises from the ``__next__`` that reaches it, and the next call tries it again.
    Equal, row for row, to :func:`consumer_rows_pure` (tests/test_native_decode.py)."""
    assert _native is not None, "consumer_row_iter_native needs the compiled accelerator"
    return _native.consumer_row_iter([(v.body, v.header, a, b, v.headers()) for v, a, b in slices], topic,
                                     partition, row_type, key_deserializer, value_deserializer)


#: Rows built one at a time as they are taken (compiled only); None in pure Python (or a build older than
#: native.consumer_row_iter), where a consumer takes :func:`consumer_rows`' list (the reference builds rows
#: column by column, no Python step per row).
consumer_row_iter = consumer_row_iter_native if hasattr(_native, "consumer_row_iter") else None


def slices_count(slices: list[tuple[BatchView, int, int]]) -> int:
    """How many records ``(view, start, stop)`` slices hold."""
    return sum(b - a for _, a, b in slices)


def payload_bytes(slices: list[tuple[BatchView, int, int]]) -> int:
    """Key and value bytes of the records in ``(view, start, stop)`` slices (what a byte quota counts):
    a few slices per batch, no work per record."""
    total = 0
    for v, a, b in slices:
        lo, hi = v._data_range(v._vpos, v._vuniform, a, b)
        total += hi - lo
        if v._kpos >= 0:
            lo, hi = v._data_range(v._kpos, v._kuniform, a, b)
            total += hi - lo
    return total
