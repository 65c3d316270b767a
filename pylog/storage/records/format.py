"""The record batch byte layout: the header struct, constants, attribute bits and header checks.

This is the only module that knows where the fields of a batch are; :mod:`.encode` writes batches and
:mod:`.views` reads them through the names defined here. A batch is the unit of writing, checksumming,
compression and indexing. Byte layout (little-endian; the full specification, with the body sections, is
docs/FORMAT.md)::

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

The body (docs/FORMAT.md has the full specification) is columnar, in this order, each section present only
when its attribute bit says so: offset deltas (int32 x n), timestamp deltas (int64 x n), key lengths
(int32 x n), value lengths (int32 x n), key data, value data, headers (msgpack). Lengths are -1 for null.

Invariants:
- :func:`check_header` bounds every count and size a header claims by the bytes it says are stored, so
  nothing decoded from a header that passes can ask for a huge allocation.
- The CRC-32C covers the base offset and everything after the CRC field (:func:`batch_crc`).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, NamedTuple

import crc32c as _crc32c
import numpy as np

from ...accel import native as _native
from ...errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "HEADER", "HEADER_SIZE", "LENGTH_PREFIX", "CRC_START", "CRC_POS", "MAGIC", "MAX_BATCH_SIZE", "MAX_OFFSET",
    "CODEC_NONE", "CODEC_LZ4", "CODEC_MASK", "ATTR_LOG_APPEND_TIME", "ATTR_TRANSACTIONAL", "ATTR_CONTROL",
    "ATTR_KEYS", "ATTR_TIMESTAMPS", "ATTR_HEADERS", "ATTR_OFFSET_DELTAS", "KNOWN_ATTRS", "CREATE_TIME",
    "LOG_APPEND_TIME", "LZ4_MAX_RATIO", "I32", "I64", "NULL_LENGTH", "RECORD_OVERHEAD", "WALK",
    "BatchHeader", "CRC32C", "crc32c", "parse_header", "check_header", "batch_crc", "stamp_base_offset", "pack_header",
    "length_stats",
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
#: Attribute bits (see the table above): the codec, then flags, then which body columns are present. The
#: flags (0x08 log-append time, 0x10 transactional, 0x20 control) are Kafka's v2 batch attribute bits: pylog
#: serve reads and writes Kafka batches' attributes with these same constants.
CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_KEYS = 0x40
ATTR_TIMESTAMPS = 0x80
ATTR_HEADERS = 0x100
ATTR_OFFSET_DELTAS = 0x200
KNOWN_ATTRS = 0x3FF
#: Position of the CRC field, which covers bytes ``[0, 8)`` (the base offset) then ``[CRC_START, end)``.
CRC_POS = 13

CREATE_TIME = 0
LOG_APPEND_TIME = 1

#: lz4's best case is ~255:1; a body_size claiming more than this relative to the stored bytes is a lie.
LZ4_MAX_RATIO = 256

#: Dtypes of the body's columns: lengths and offset deltas (int32), timestamp deltas (int64).
I32 = np.dtype("<i4")
I64 = np.dtype("<i8")
#: A null item's length, as the bytes of one entry of a length column.
NULL_LENGTH = (-1).to_bytes(4, "little", signed=True)
#: Per-record bytes in a batch body besides key and value: value length, key length, timestamp delta.
#: What sizing a batch before encoding it counts per record (an estimate: columns may be left out).
RECORD_OVERHEAD = 16


#: ``CRC32C(data, value=0)``, the CRC-32C function of the live path (:mod:`pylog.accel`): the compiled
#: accelerator's, which fetches memory ahead of its three streams (a batch read for the first time is in memory,
#: not cache: ~25% less CPU for 64 KiB), or the ``crc32c`` package's, the pure-Python path's reference. Both
#: use the SSE4.2 instruction where the CPU has it and give the same results (tests/test_native_accel.py).
CRC32C: Callable[..., int] = _crc32c.crc32c if _native is None else _native.crc32c


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data`` continuing from ``value``; hardware-accelerated where available."""
    return CRC32C(data, value)


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
    def decompressed_size(self) -> int:
        """The batch's size with its body decompressed, header included (:attr:`size` when uncompressed): what
        byte limits on reads count, whatever the compression ratio."""
        return HEADER_SIZE + self.body_size

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & ATTR_LOG_APPEND_TIME else CREATE_TIME

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def has_keys(self) -> bool:
        return bool(self.attributes & ATTR_KEYS)


def parse_header(buf: Any, pos: int = 0) -> BatchHeader:
    """Unpack the header at ``buf[pos:]`` without checking it (see :func:`check_header`)."""
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def check_header(h: BatchHeader, path: str | None = None, position: int | None = None) -> None:
    """Validate a header's self-consistency; the bounds here cap every later allocation.

    :raises CorruptRecordError: naming ``path`` and ``position`` when a field is impossible.
    """
    (base, length, magic, _crc, attrs, last_delta, first_ts, max_ts, _pid, _epoch, _seq, count,
     body_size) = h
    codec = attrs & CODEC_MASK
    stored = length + LENGTH_PREFIX - HEADER_SIZE
    # One combined test on the hot path; the message is worked out only for a bad header.
    if (magic == MAGIC and HEADER_SIZE - LENGTH_PREFIX <= length <= MAX_BATCH_SIZE - LENGTH_PREFIX
            and not attrs & ~KNOWN_ATTRS
            and (body_size == stored if codec == CODEC_NONE else
                 codec == CODEC_LZ4 and body_size <= min(stored * LZ4_MAX_RATIO + 64, MAX_BATCH_SIZE))
            and 1 <= count <= body_size // 4 and last_delta >= count - 1 and 0 <= base <= MAX_OFFSET - last_delta
            and max_ts >= first_ts):
        return
    if magic != MAGIC:
        msg = f"unknown batch magic {magic} (expected {MAGIC})"
    elif not HEADER_SIZE - LENGTH_PREFIX <= length <= MAX_BATCH_SIZE - LENGTH_PREFIX:
        msg = f"batch length {length} out of range"
    elif attrs & ~KNOWN_ATTRS:
        msg = f"unknown attribute bits 0x{attrs:04x}"
    elif codec == CODEC_NONE and body_size != stored:
        msg = f"body size {body_size} != stored size {stored} in an uncompressed batch"
    elif codec not in (CODEC_NONE, CODEC_LZ4):
        msg = f"unknown compression codec {codec}"
    elif codec == CODEC_LZ4 and body_size > min(stored * LZ4_MAX_RATIO + 64, MAX_BATCH_SIZE):
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
    return CRC32C(mv[CRC_START:], CRC32C(mv[:8]))


#: base_offset, batch_length, magic, crc, last_offset_delta (attributes skipped): what checked_prefix reads.
WALK = struct.Struct("<qIBI2xi")


def stamp_base_offset(batch: bytearray | memoryview, base_offset: int) -> None:
    """Set the base offset of an encoded batch in place and recompute its CRC (which covers the offset)."""
    struct.pack_into("<q", batch, 0, base_offset)
    struct.pack_into("<I", batch, CRC_POS, batch_crc(batch))


_new_header = tuple.__new__


def pack_header(fields: tuple, body_parts: list) -> tuple[bytes, BatchHeader]:
    """The header bytes of a batch whose stored body is ``body_parts``, with the batch's CRC filled in, and
    the :class:`BatchHeader` with that CRC. ``fields`` are the header's fields in :class:`BatchHeader`'s
    order (a plain tuple: this runs for every batch written); its ``crc`` is ignored.

    :raises InvalidRecordError: when a field does not fit its header slot (an epoch beyond int16, say).
    """
    try:
        hdr = bytearray(HEADER.pack(*fields))
    except struct.error as exc:
        raise InvalidRecordError(f"a batch header field is out of range (base offset, timestamps, producer id, "
                                 f"epoch or sequence): {exc}") from None
    crc = CRC32C(memoryview(hdr)[CRC_START:], CRC32C(memoryview(hdr)[:8]))
    for part in body_parts:
        crc = CRC32C(part, crc)
    struct.pack_into("<I", hdr, CRC_POS, crc)
    return bytes(hdr), _new_header(BatchHeader, (*fields[:3], crc, *fields[4:]))


# ------------------------------------------------------------------------------------------ columns


def length_stats(raw: Any, n: int, buf: Any = None, offset: int = 0) -> tuple[int, int, bool]:
    """``(min, data bytes, uniform)`` of an int32 length column (-1 = null, no data).

    ``raw`` is the column's bytes (``buf[offset:offset + 4n]`` when ``buf`` is given). Fixed-size items are
    common, and every batch of them pays this: a column that is one repeated length is recognised by
    comparing its bytes with that length repeated (a memcmp), far cheaper than numpy's min and sum.
    """
    head = bytes(raw[:4])
    if head * n == (raw if isinstance(raw, bytes) else bytes(raw)):
        first = int.from_bytes(head, "little", signed=True)
        return first, max(first, 0) * n, True
    lengths = np.frombuffer(raw if buf is None else buf, I32, n, 0 if buf is None else offset)
    lo = int(lengths.min())
    total = int(lengths.sum())
    if lo < 0:
        total += int(np.count_nonzero(lengths < 0))
    return lo, total, False
