"""Kafka RecordBatch v2 (magic 2) <-> pylog: Produce's batches into columnar appends, read slices into Fetch's.

Kafka's batch (all big-endian; varints are zigzag, as protobuf's ``sint``)::

    off size field                  off size field
      0   8  baseOffset              27   8  baseTimestamp
      8   4  batchLength (after it)  35   8  maxTimestamp
     12   4  partitionLeaderEpoch    43   8  producerId
     16   1  magic (2)               51   2  producerEpoch
     17   4  crc (CRC-32C of 21..end) 53   4  baseSequence
     21   2  attributes              57   4  recordCount
     23   4  lastOffsetDelta         61   .  records (compressed as a whole when codec != 0)

attributes: bits 0-2 codec (:mod:`.compression`), 3 timestamp type (LogAppendTime), 4 transactional,
5 control. A record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint, keyLength
varint (-1 null), key, valueLength varint, value, headerCount varint, then per header keyLength varint,
key (UTF-8), valueLength varint (-1 null), value.

- :func:`decode_batches` checks a Produce request's ``records`` (one or more batches back to back) and turns
  each batch into a :class:`KafkaBatch`: producer fields plus the records as the columns
  ``Partition.append_columns`` takes; :func:`append_batch` appends one.
- :func:`encode_slices` turns ``Partition.read_slices`` output into uncompressed Kafka batches, one per
  slice, CRC included: what a Fetch response's ``records`` holds.

The per-record work of both directions is in C when the accelerator is live (``native/kafka.c``:
``kafka_parse_records``, ``kafka_encode_slice``); :func:`parse_records_pure` and :func:`encode_slice_pure`
are the reference, and both give the same columns, bytes, error classes and messages
(tests/test_server_recordbatch.py compares them).

Invariants:
- Decoding trusts no length: every count, varint and size is bounded by the bytes present (a decompressed
  section by ``max_size``) before anything is allocated, so hostile input raises a PylogError subclass
  (:func:`kafka_error_code` says which Kafka error each means) and costs at most about its own size.
- Offsets, timestamps, keys, values, headers and producer fields survive decode -> append -> read ->
  encode unchanged; a slice starting inside a pylog batch gets the base sequence of its first record.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

import crc32c as _crc32c
import numpy as np

from ..accel import native as _native
from ..partition import Partition, RecordHeaders, internals
from ..errors import (CorruptBatchError, InvalidBatchError, RecordTooLargeError,
                      UnsupportedCompressionError, UnsupportedMagicError)
from ..storage.records.format import ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL
from ..storage.records.format import ATTR_LOG_APPEND_TIME as ATTR_TIMESTAMP_TYPE  # Kafka's name for the bit
from ..storage.records.views import BatchView, records_pure
from . import compression
from .errormap import code_for

__all__ = ["KafkaBatch", "decode_batches", "append_batch", "encode_slices", "encode_slice",
           "encode_slice_pure", "encode_slice_native", "parse_records_pure", "parse_records_native",
           "kafka_error_code", "HEADER", "HEADER_SIZE", "MAGIC", "MIN_RECORD_SIZE"]

#: The v2 batch header up to the records (61 bytes), big-endian.
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size
MAGIC = 2
#: Where the CRC's coverage starts (attributes) and the batch fields batchLength counts from.
CRC_START = 21
LENGTH_PREFIX = 12
#: The smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength and
#: headerCount of one byte each. Bounds a record count by the bytes before any column is allocated.
MIN_RECORD_SIZE = 7
_SEQ_MOD = 1 << 31
_I32 = np.dtype("<i4")
_I64 = np.dtype("<i8")

def kafka_error_code(exc: BaseException) -> int:
    """The Kafka error code for an error :func:`decode_batches` raised: the server's one table,
    :func:`pylog.server.errormap.code_for` (UNKNOWN_SERVER_ERROR, -1, for anything else)."""
    return code_for(exc)


class KafkaBatch:
    """One decoded v2 batch: its header fields and its records as columns for ``Partition.append_columns``.

    - ``value_lengths``: int32 array, -1 for a null value; ``value_data``: the non-null values concatenated.
    - ``key_lengths``/``key_data``: the same for keys, both None when every key is null.
    - ``timestamps``: int64 array, ``base_timestamp`` + each record's delta.
    - ``headers``: None when no record has a header, else one tuple of ``(str, bytes | None)`` pairs per record.
    """

    __slots__ = ("base_offset", "partition_leader_epoch", "attributes", "last_offset_delta", "base_timestamp",
                 "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count",
                 "value_lengths", "value_data", "key_lengths", "key_data", "timestamps", "headers", "size")

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    value_lengths: np.ndarray
    value_data: bytes
    key_lengths: np.ndarray | None
    key_data: bytes | None
    timestamps: np.ndarray
    headers: list[RecordHeaders] | None
    size: int

    def __init__(self, header: tuple, columns: tuple, size: int) -> None:
        (self.base_offset, _, self.partition_leader_epoch, _, _, self.attributes, self.last_offset_delta,
         self.base_timestamp, self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.record_count) = header
        vlens, self.value_data, klens, self.key_data, ts, self.headers = columns
        self.value_lengths = np.frombuffer(vlens, _I32)
        self.key_lengths = None if klens is None else np.frombuffer(klens, _I32)
        self.timestamps = np.frombuffer(ts, _I64)
        #: The batch's size on the wire (header included).
        self.size = size

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def producer(self) -> tuple[int, int, int] | None:
        """``(producer id, epoch, base sequence)`` for an idempotent producer's batch, else None."""
        if self.producer_id < 0:
            return None
        return self.producer_id, self.producer_epoch, self.base_sequence

    def __len__(self) -> int:
        return self.record_count

    def __repr__(self) -> str:
        return (f"KafkaBatch(records={self.record_count}, codec={self.codec}, producer_id={self.producer_id}, "
                f"base_sequence={self.base_sequence})")


# ------------------------------------------------------------------------------------------- decoding


def _wrap64(v: int) -> int:
    return ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def parse_records_pure(section: Any, count: int, base_timestamp: int) -> tuple:
    """The records section of a batch (decompressed) as ``(value_lengths, value_data, key_lengths | None,
    key_data | None, timestamps, headers | None)``: lengths and timestamps as little-endian int32/int64
    bytes. The reference of the compiled ``kafka_parse_records``.

    :raises CorruptBatchError: a record or varint runs past its bounds, a length is out of range, bytes are
        left over in a record or after the last one, the count cannot fit.
    :raises InvalidBatchError: an offset delta other than the record's index, a null or non-UTF-8 header key.
    """
    data = bytes(section)
    end = len(data)
    if count < 1 or count > end // MIN_RECORD_SIZE:
        raise CorruptBatchError(f"{count} records cannot fit in {end} bytes")
    vlens: list[int] = []
    klens: list[int] = []
    tss: list[int] = []
    values: list[bytes] = []
    keys: list[bytes] = []
    headers: list | None = None
    any_key = False
    pos = 0
    for i in range(count):
        # The record's length varint is bounded by the section, its fields by the record.
        length, pos = _varint(data, pos, end, i, 5)
        if length < 0 or length > end - pos:
            raise CorruptBatchError(f"record {i}: length {length} does not fit the {end - pos} bytes left")
        rend = pos + length
        if pos >= rend:
            raise CorruptBatchError(f"record {i}: truncated")
        pos += 1  # attributes: unused in v2
        tsd, pos = _varint(data, pos, rend, i, 10)
        od, pos = _varint(data, pos, rend, i, 5)
        if od != i:
            raise InvalidBatchError(f"record {i}: offset delta {od}, expected {i}")
        klen, pos = _varint(data, pos, rend, i, 5)
        if klen < -1 or klen > rend - pos:
            raise CorruptBatchError(f"record {i}: key length {klen} does not fit the record")
        if klen >= 0:
            keys.append(data[pos:pos + klen])
            pos += klen
            any_key = True
        vlen, pos = _varint(data, pos, rend, i, 5)
        if vlen < -1 or vlen > rend - pos:
            raise CorruptBatchError(f"record {i}: value length {vlen} does not fit the record")
        if vlen >= 0:
            values.append(data[pos:pos + vlen])
            pos += vlen
        hcount, pos = _varint(data, pos, rend, i, 5)
        if hcount < 0 or hcount > (rend - pos) // 2:
            raise CorruptBatchError(f"record {i}: header count {hcount} does not fit the record")
        if hcount:
            pairs: list[tuple[str, bytes | None]] = []
            for _ in range(hcount):
                hk, pos = _varint(data, pos, rend, i, 5)
                if hk < 0:
                    raise InvalidBatchError(f"record {i}: header key length {hk}")
                if hk > rend - pos:
                    raise CorruptBatchError(f"record {i}: header key length {hk} does not fit the record")
                try:
                    name = data[pos:pos + hk].decode("utf-8")
                except UnicodeDecodeError:
                    raise InvalidBatchError(f"record {i}: header key is not UTF-8") from None
                pos += hk
                hv, pos = _varint(data, pos, rend, i, 5)
                if hv < -1 or hv > rend - pos:
                    raise CorruptBatchError(f"record {i}: header value length {hv} does not fit the record")
                if hv >= 0:
                    pairs.append((name, data[pos:pos + hv]))
                    pos += hv
                else:
                    pairs.append((name, None))
            if headers is None:
                headers = [()] * i
            headers.append(tuple(pairs))
        elif headers is not None:
            headers.append(())
        if pos != rend:
            raise CorruptBatchError(f"record {i}: {rend - pos} bytes left over")
        vlens.append(vlen)
        klens.append(klen)
        tss.append(_wrap64(base_timestamp + tsd))
    if pos != end:
        raise CorruptBatchError(f"{end - pos} bytes after the last of {count} records")
    return (np.array(vlens, _I32).tobytes(), b"".join(values),
            np.array(klens, _I32).tobytes() if any_key else None, b"".join(keys) if any_key else None,
            np.array(tss, _I64).tobytes(), headers)


def _varint(data: bytes, pos: int, end: int, i: int, max_bytes: int) -> tuple[int, int]:
    """The zigzag varint (``max_bytes`` 5: 32-bit; 10: 64-bit) at ``data[pos:end]`` and the position after it."""
    value = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise CorruptBatchError(f"record {i}: truncated")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value >> (7 * max_bytes - (3 if max_bytes == 5 else 6)):  # more than 32 / 64 bits
                raise CorruptBatchError(f"record {i}: malformed varint")
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise CorruptBatchError(f"record {i}: malformed varint")


def parse_records_native(section: Any, count: int, base_timestamp: int) -> tuple:
    """:func:`parse_records_pure` in C (the accelerator must be live): the same columns and errors."""
    assert _native is not None, "parse_records_native needs the compiled accelerator"
    return _native.kafka_parse_records(section, count, base_timestamp)


_parse_records = parse_records_pure if _native is None else _native.kafka_parse_records


def decode_batches(data: Any, max_size: int) -> list[KafkaBatch]:
    """The v2 batches of a Produce request's ``records`` (back to back, nothing else), checked and decoded.

    ``max_size`` bounds each batch's records section once decompressed (say the topic's
    ``max.message.bytes`` or a server-wide limit): a decompression bomb stops there.

    :raises UnsupportedMagicError: a batch of magic 0 or 1 (or an unknown magic).
    :raises CorruptBatchError: truncated bytes, a CRC mismatch, bad compressed bytes or records.
    :raises InvalidBatchError: a batch breaking producers' rules (no records, offset deltas not 0..n-1).
    :raises UnsupportedCompressionError: a codec Kafka does not define, or one whose package is missing.
    :raises RecordTooLargeError: a records section that decompresses past ``max_size``.
    """
    mv = memoryview(data).cast("B")
    end = len(mv)
    out: list[KafkaBatch] = []
    pos = 0
    crc = _crc32c.crc32c
    while pos < end:
        left = end - pos
        if left < 17:
            raise CorruptBatchError(f"record batch truncated to {left} bytes")
        magic = mv[pos + 16]
        if magic != MAGIC:
            raise UnsupportedMagicError(f"record batch of magic {magic}: only magic 2 (Kafka 0.11+ clients) is "
                                        "supported")
        (length,) = struct.unpack_from(">i", mv, pos + 8)
        if length < HEADER_SIZE - LENGTH_PREFIX:
            raise CorruptBatchError(f"record batch length {length} is below the header's")
        size = length + LENGTH_PREFIX
        if size > left:
            raise CorruptBatchError(f"record batch of {size} bytes truncated to {left}")
        header = HEADER.unpack_from(mv, pos)
        if crc(mv[pos + CRC_START:pos + size]) != header[4]:
            raise CorruptBatchError("record batch CRC mismatch")
        attrs, last_delta, count = header[5], header[6], header[12]
        codec = attrs & 0x07
        if codec > compression.ZSTD:
            raise UnsupportedCompressionError(f"unknown compression codec {codec} (Kafka defines 0-4)")
        if count < 1:
            raise InvalidBatchError(f"record batch with {count} records")
        if last_delta != count - 1:
            raise InvalidBatchError(f"record batch of {count} records with last offset delta {last_delta}")
        section: Any = mv[pos + HEADER_SIZE:pos + size]
        if codec:
            section = compression.decompress(codec, section, max_size)
        elif len(section) > max_size:
            raise RecordTooLargeError(f"records section of {len(section)} bytes exceeds {max_size}")
        out.append(KafkaBatch(header, _parse_records(section, count, header[7]), size))
        pos += size
    return out


def append_batch(partition: Partition, batch: KafkaBatch, *, in_turn: bool = True, flush_policy: bool = True) -> int:
    """Append ``batch``'s records to ``partition`` (a pylog ``Partition``) through ``append_columns``, as one
    producer call (idempotent when the batch has a producer id: a retry is recognised; transactional when the
    batch is: it opens or continues its producer's transaction in the partition); returns the offset of
    the first record (that of the original call, for a retry). ``flush_policy`` as for ``append_columns``."""
    # With the topic's compression.type "producer", a batch the client compressed (any codec) is stored lz4
    # compressed, pylog's one codec, and an uncompressed one uncompressed; any other setting decides alone.
    return int(internals(partition).append_columns(
        batch.value_lengths, batch.value_data, batch.key_lengths, batch.key_data, batch.timestamps,
        headers=batch.headers, producer=batch.producer, compression="lz4" if batch.codec else None,
        in_turn=in_turn, flush_policy=flush_policy, transactional=batch.is_transactional))


# ------------------------------------------------------------------------------------------- encoding


def _zigzag(v: int) -> int:
    return (v << 1) ^ (v >> 63)


def _put_varint(out: bytearray, v: int) -> None:
    """Append the zigzag varint of ``v`` (an int64) to ``out``."""
    u = _zigzag(v) & 0xFFFFFFFFFFFFFFFF
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def _check_slice(count: int, start: int, stop: int, leader_epoch: int) -> None:
    """The argument checks both encoders make first (kafka_encode_slice's, messages included), before any
    byte of the batch is read: records_pure would take negative indexes from the end."""
    if start >= stop:
        raise ValueError(f"empty slice {start}:{stop}")
    if start < 0 or stop > count:
        raise ValueError(f"records {start}:{stop} of a batch of {count}")
    if not -(1 << 31) <= leader_epoch < 1 << 31:
        raise OverflowError(f"leader epoch {leader_epoch} does not fit in int32")


def _put_bytes(out: bytearray, b: Any) -> None:
    """Append a varint length (-1 for None) and the bytes: how a record writes its key, value and headers."""
    if b is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(b))
        out += b


def encode_slice_pure(view: BatchView, start: int, stop: int, leader_epoch: int = 0) -> bytes:
    """Records ``start:stop`` of a pylog batch as one uncompressed Kafka v2 batch (the reference of the
    compiled ``kafka_encode_slice``): the first record's offset as baseOffset, offset deltas and timestamps
    relative to it, the timestamp type, transactional and control bits and producer fields of the pylog
    batch (the base sequence moved on to the first record's), CRC-32C computed."""
    h = view.header
    _check_slice(h.record_count, start, stop, leader_epoch)
    recs = records_pure(view, None, -1, start, stop)
    base = recs[0][0]
    base_ts = recs[0][1]
    max_ts = max(r[1] for r in recs)
    seq = h.base_sequence
    if seq >= 0:
        seq = (seq + base - h.base_offset) % _SEQ_MOD
    body = bytearray()
    rec = bytearray()
    for off, ts, key, value, hdrs, *_ in recs:
        rec.clear()
        rec.append(0)
        _put_varint(rec, _wrap64(ts - base_ts))
        _put_varint(rec, off - base)
        _put_bytes(rec, key)
        _put_bytes(rec, value)
        _put_varint(rec, len(hdrs))
        for name, hv in hdrs:
            _put_bytes(rec, name.encode("utf-8"))
            _put_bytes(rec, hv)
        _put_varint(body, len(rec))
        body += rec
    attrs = h.attributes & (ATTR_LOG_APPEND_TIME | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    tail = struct.pack(">hiqqqhii", attrs, recs[-1][0] - base, base_ts, max_ts, h.producer_id, h.producer_epoch,
                       seq, len(recs)) + body
    length = len(tail) + 9  # leader epoch, magic, crc
    return struct.pack(">qiibI", base, length, leader_epoch, MAGIC, _crc32c.crc32c(tail)) + tail


def encode_slice_native(view: BatchView, start: int, stop: int, leader_epoch: int = 0) -> bytes:
    """:func:`encode_slice_pure` in C (the accelerator must be live): the same bytes."""
    assert _native is not None, "encode_slice_native needs the compiled accelerator"
    h = view.header
    _check_slice(h.record_count, start, stop, leader_epoch)  # before view.headers(), as the pure path
    return _native.kafka_encode_slice(view.body, h, start, stop, view.headers(), leader_epoch)


encode_slice = encode_slice_pure if _native is None else encode_slice_native


def encode_slices(slices: Sequence[tuple[BatchView, int, int]], leader_epoch: int = 0) -> bytes:
    """``Partition.read_slices`` output as Kafka v2 batches back to back (one per slice): a Fetch
    response's ``records``. Empty slices are skipped."""
    enc = encode_slice
    parts = [enc(v, a, b, leader_epoch) for v, a, b in slices if b > a]
    return parts[0] if len(parts) == 1 else b"".join(parts)
