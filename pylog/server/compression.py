"""Kafka's record compression codecs, bounded: what a Produce request's batches may be compressed with.

Kafka's RecordBatch v2 compresses the records section as a whole with the codec in attribute bits 0-2:
0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (:data:`CODECS`).

- gzip: the gzip format (Java's GZIPOutputStream); zlib streams and concatenated gzip members are read too.
- snappy: raw snappy (what librdkafka sends) or the xerial/snappy-java framing Java clients and
  kafka-python send (``\\x82SNAPPY\\x00``, two int32 versions, then blocks of int32 length + raw snappy).
- lz4: the LZ4 *frame* format (``lz4.frame``; a core dependency).
- zstd: a zstd frame, with or without its content size.

snappy and zstd come from the optional ``cramjam`` package (``pip install "pylog-embedded[server]"``),
imported on first use; without it, such a batch raises :class:`~pylog.errors.UnsupportedCompressionError`.

Invariants:
- :func:`decompress` never returns, nor allocates much more than, ``max_size`` bytes: a section that
  decompresses to more raises :class:`~pylog.errors.RecordTooLargeError` (a decompression bomb costs at
  most about ``max_size`` of memory and the time to produce it), whatever sizes the compressed bytes claim.
- Damaged compressed bytes raise :class:`~pylog.errors.CorruptBatchError`; nothing else escapes but
  :class:`~pylog.errors.PylogError` subclasses.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from types import ModuleType
from typing import Any

import lz4.frame as _lz4f

from ..errors import CorruptBatchError, RecordTooLargeError, UnsupportedCompressionError

__all__ = ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODECS", "CODEC_NAMES", "decompress", "compress",
           "available", "XERIAL_MAGIC"]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
#: Codec number (attribute bits 0-2) -> name, as Kafka's ``compression.type`` spells it.
CODECS = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_NAMES = {name: number for number, name in CODECS.items()}
#: The xerial (snappy-java) framing's header: magic, then int32 version and int32 compatible version.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_XERIAL_BLOCK = struct.Struct(">i")

_INSTALL_HINT = 'pip install "pylog-embedded[server]"'
_cramjam: ModuleType | None = None


def _need_cramjam(codec: int) -> Any:
    """The cramjam module, imported on first use; UnsupportedCompressionError naming the extra if missing."""
    global _cramjam
    if _cramjam is None:
        try:
            _cramjam = importlib.import_module("cramjam")
        except ImportError:
            raise UnsupportedCompressionError(
                f"{CODECS[codec]} compression needs the cramjam package: {_INSTALL_HINT}") from None
    return _cramjam


def available(codec: int) -> bool:
    """Whether this installation can decompress (and compress) ``codec``."""
    if codec in (NONE, GZIP, LZ4):
        return True
    if codec in (SNAPPY, ZSTD):
        try:
            _need_cramjam(codec)
        except UnsupportedCompressionError:
            return False
        return True
    return False


def _too_large(codec: int, max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"{CODECS[codec]} records section decompresses to more than {max_size} bytes")


def _corrupt(codec: int, exc: object) -> CorruptBatchError:
    return CorruptBatchError(f"{CODECS[codec]} records section does not decompress: {exc}")


def decompress(codec: int, data: Any, max_size: int) -> bytes:
    """The records section ``data`` compressed with ``codec``, decompressed to at most ``max_size`` bytes.

    :raises UnsupportedCompressionError: an unknown codec, or snappy/zstd without cramjam.
    :raises RecordTooLargeError: the section decompresses to more than ``max_size`` bytes.
    :raises CorruptBatchError: the bytes are not a valid, complete stream of the codec.
    """
    if codec == NONE:
        if len(data) > max_size:
            raise _too_large(codec, max_size)
        return bytes(data)
    if codec == GZIP:
        return _gunzip(data, max_size)
    if codec == LZ4:
        return _unlz4(data, max_size)
    if codec == SNAPPY:
        cj = _need_cramjam(codec)
        if bytes(data[:len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            return _unxerial(cj, data, max_size)
        return _unsnappy_raw(cj, data, max_size, [0])
    if codec == ZSTD:
        return _unzstd(_need_cramjam(codec), data, max_size)
    raise UnsupportedCompressionError(f"unknown compression codec {codec} (Kafka defines 0-4)")


def _gunzip(data: Any, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest = bytes(data)
    try:
        while True:
            d = zlib.decompressobj(wbits=47)  # 32 + 15: a gzip or a zlib header, detected
            chunk = d.decompress(rest, max_size + 1 - total)
            total += len(chunk)
            out.append(chunk)
            if total > max_size or d.unconsumed_tail:
                raise _too_large(GZIP, max_size)
            if not d.eof:
                raise _corrupt(GZIP, "truncated stream")
            rest = d.unused_data
            if not rest:
                break
    except zlib.error as exc:
        raise _corrupt(GZIP, exc) from None
    return b"".join(out)


def _unlz4(data: Any, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest = bytes(data)
    try:
        while True:  # a stream of one or more frames, as LZ4FrameInputStream reads
            d = _lz4f.LZ4FrameDecompressor()
            chunk = d.decompress(rest, max_length=max_size + 1 - total)
            total += len(chunk)
            out.append(chunk)
            if total > max_size or d.needs_input is False and not d.eof:
                raise _too_large(LZ4, max_size)
            if not d.eof:
                raise _corrupt(LZ4, "truncated frame")
            rest = d.unused_data or b""
            if not rest:
                break
    except RuntimeError as exc:  # lz4.frame reports damage as RuntimeError
        raise _corrupt(LZ4, exc) from None
    return b"".join(out)


def _snappy_length(data: Any) -> int:
    """The uncompressed length a raw snappy block's varint preamble declares (-1 if it has none)."""
    value = shift = 0
    for i in range(min(len(data), 5)):
        b = data[i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
    return -1


def _unsnappy_raw(cj: Any, data: Any, max_size: int, used: list[int]) -> bytes:
    """One raw snappy block; ``used[0]`` is what earlier blocks produced (counts against ``max_size``)."""
    declared = _snappy_length(data)
    if declared < 0:
        raise _corrupt(SNAPPY, "bad length preamble")
    if used[0] + declared > max_size:  # checked before snappy allocates what the preamble says
        raise _too_large(SNAPPY, max_size)
    try:
        out = bytes(cj.snappy.decompress_raw(bytes(data)))
    except Exception as exc:  # cramjam.DecompressionError
        raise _corrupt(SNAPPY, exc) from None
    if len(out) != declared:
        raise _corrupt(SNAPPY, "length preamble does not match the block")
    used[0] += declared
    return out


def _unxerial(cj: Any, data: Any, max_size: int) -> bytes:
    if len(data) < _XERIAL_HEADER:
        raise _corrupt(SNAPPY, "truncated xerial header")
    mv = memoryview(bytes(data))
    pos = _XERIAL_HEADER
    used = [0]
    out: list[bytes] = []
    while pos < len(mv):
        if pos + 4 > len(mv):
            raise _corrupt(SNAPPY, "truncated xerial block length")
        (size,) = _XERIAL_BLOCK.unpack_from(mv, pos)
        pos += 4
        if size < 0 or pos + size > len(mv):
            raise _corrupt(SNAPPY, "xerial block past the end of the data")
        out.append(_unsnappy_raw(cj, mv[pos:pos + size], max_size, used))
        pos += size
    return b"".join(out)


def _zstd_content_size(data: bytes) -> int:
    """The Frame_Content_Size of a zstd frame header, or -1 when the frame does not carry it."""
    if len(data) < 6 or data[:4] != b"\x28\xb5\x2f\xfd":
        return -1
    fhd = data[4]
    fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
    did_size = (0, 1, 2, 4)[fhd & 3]
    pos = 5 + (0 if single else 1) + did_size
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or pos + size > len(data):
        return -1
    value = int.from_bytes(data[pos:pos + size], "little")
    return value + 256 if size == 2 else value


def _unzstd(cj: Any, data: Any, max_size: int) -> bytes:
    raw = bytes(data)
    declared = _zstd_content_size(raw)
    if declared > max_size:
        raise _too_large(ZSTD, max_size)
    # decompress_into stops with an error at the end of its buffer, so a buffer bounds the output. Without
    # a declared size, buffers grow 4x from a guess up to max_size + 1: at most ~1.33x the work of one pass.
    cap = declared + 1 if declared >= 0 else min(max_size + 1, max(64 << 10, 8 * len(raw)))
    while True:
        buf = bytearray(cap)
        try:
            n = cj.zstd.decompress_into(raw, buf)
        except Exception as exc:  # cramjam.DecompressionError: damaged, or the buffer is too small
            if "whole buffer" not in str(exc):
                raise _corrupt(ZSTD, exc) from None
            n = cap  # the output did not fit
        if n < cap:
            if declared >= 0 and n != declared:
                raise _corrupt(ZSTD, "frame content size does not match the data")
            del buf[n:]
            return bytes(buf)
        if cap > max_size:
            raise _too_large(ZSTD, max_size)
        cap = min(max_size + 1, cap * 4)


def compress(codec: int, data: Any) -> bytes:
    """``data`` compressed with ``codec`` as Kafka clients do (gzip format; raw snappy, as librdkafka sends;
    an LZ4 frame; a zstd frame). For tests and completeness: the server sends uncompressed batches."""
    raw = bytes(data)
    if codec == NONE:
        return raw
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(raw) + c.flush()
    if codec == LZ4:
        return _lz4f.compress(raw)
    if codec == SNAPPY:
        return bytes(_need_cramjam(codec).snappy.compress_raw(raw))
    if codec == ZSTD:
        return bytes(_need_cramjam(codec).zstd.compress(raw))
    raise UnsupportedCompressionError(f"unknown compression codec {codec} (Kafka defines 0-4)")


def compress_xerial(data: Any, block_size: int = 32 << 10) -> bytes:
    """``data`` in the xerial/snappy-java framing (what Java clients send), for tests."""
    cj = _need_cramjam(SNAPPY)
    raw = bytes(data)
    parts = [XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for i in range(0, len(raw), block_size):
        block = bytes(cj.snappy.compress_raw(raw[i:i + block_size]))
        parts += [_XERIAL_BLOCK.pack(len(block)), block]
    return b"".join(parts)
