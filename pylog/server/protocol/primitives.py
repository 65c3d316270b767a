"""Kafka protocol primitive types: readers and writers (pure Python, no I/O).

Readers take ``(buf, pos, end, where)`` and return ``(value, new_pos)``; ``buf`` is a memoryview (or
bytes) and ``end`` the end of the region they may read (a frame, or a tagged field's data). Every length
is checked against ``end - pos`` *before* anything is allocated or sliced, so hostile input costs at most
the bytes it sent: a bad length, a negative length other than -1 (null), a varint longer than its type or
invalid UTF-8 raise :class:`~pylog.errors.ProtocolError` naming ``where`` (the field's dotted path) and the
byte position; nothing else (IndexError, struct.error, UnicodeDecodeError, MemoryError) escapes.

Writers take ``(out, value)`` and append to a bytearray. RECORDS fields are never copied on decode: the
reader returns a memoryview slice of the frame.

Encodings (Kafka's): intN big-endian two's complement; uint16/uint32 big-endian; unsigned varint: 7 bits
per byte, low group first, high bit = more; varint/varlong: zigzag then unsigned varint; string: int16
length + UTF-8 (-1 = null); compact string: unsigned varint (length + 1, 0 = null) + UTF-8; bytes: int32
length (-1 = null); compact bytes: unsigned varint (length + 1); array: int32 count (-1 = null); compact
array: unsigned varint (count + 1); uuid: 16 bytes; tagged fields: unsigned varint count, then per field
unsigned varint tag, unsigned varint size, data.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from pylog.errors import ProtocolError

__all__ = [
    "ZERO_UUID", "short", "read_uvarint", "read_varint", "read_varlong", "write_uvarint", "write_varint",
    "write_varlong", "uvarint_size",
    "read_string", "read_nstring", "read_cstring", "read_cnstring",
    "read_bytes", "read_nbytes", "read_cbytes", "read_cnbytes", "read_records", "read_crecords",
    "read_uuid", "write_string", "write_nstring", "write_cstring", "write_cnstring",
    "write_bytes", "write_nbytes", "write_cbytes", "write_cnbytes", "write_uuid",
    "skip_tagged_fields",
    "I8", "I16", "I32", "I64", "U16", "U32", "F64", "BOOL",
]

ZERO_UUID = uuid.UUID(int=0)

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
F64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

_NULL16 = b"\xff\xff"
_NULL32 = b"\xff\xff\xff\xff"


def short(pos: int, need: int, have: int, where: str) -> ProtocolError:
    """The error for a read of ``need`` bytes at ``pos`` with only ``have`` left."""
    return ProtocolError(f"truncated: {need} bytes needed, {max(have, 0)} left", pos, where)


# ------------------------------------------------------------------------------------------------ varints

def read_uvarint(buf: Any, pos: int, end: int, where: str, max_bytes: int = 5) -> tuple[int, int]:
    """An unsigned varint of at most ``max_bytes`` bytes (5 for 32-bit values, 10 for 64-bit)."""
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise short(start, pos - start + 1, end - start, where)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if max_bytes == 5 and result > 0xFFFFFFFF:
                raise ProtocolError("unsigned varint exceeds 32 bits", start, where)
            return result, pos
        shift += 7
        if pos - start >= max_bytes:
            raise ProtocolError(f"varint longer than {max_bytes} bytes", start, where)


def read_varint(buf: Any, pos: int, end: int, where: str) -> tuple[int, int]:
    """A zigzag-encoded signed 32-bit varint."""
    n, pos = read_uvarint(buf, pos, end, where, 5)
    return (n >> 1) ^ -(n & 1), pos


def read_varlong(buf: Any, pos: int, end: int, where: str) -> tuple[int, int]:
    """A zigzag-encoded signed 64-bit varint."""
    n, pos = read_uvarint(buf, pos, end, where, 10)
    if n > 0xFFFFFFFFFFFFFFFF:
        raise ProtocolError("varlong exceeds 64 bits", pos, where)
    return (n >> 1) ^ -(n & 1), pos


_UV1 = [bytes([i]) for i in range(128)]


def write_uvarint(out: bytearray, n: int) -> None:
    if n < 0x80:
        out += _UV1[n]
        return
    if n < 0:
        raise ProtocolError(f"negative unsigned varint {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def write_varint(out: bytearray, n: int) -> None:
    if not -0x80000000 <= n <= 0x7FFFFFFF:
        raise ProtocolError(f"varint out of range: {n}")
    write_uvarint(out, ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, n: int) -> None:
    if not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
        raise ProtocolError(f"varlong out of range: {n}")
    write_uvarint(out, ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_size(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


# -------------------------------------------------------------------------------------- strings and bytes

def _text(buf: Any, pos: int, n: int, where: str) -> str:
    try:
        return str(buf[pos:pos + n], "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"invalid UTF-8 in string ({e.reason})", pos + e.start, where) from None


def _len16(buf: Any, pos: int, end: int, where: str) -> tuple[int, int]:
    if end - pos < 2:
        raise short(pos, 2, end - pos, where)
    n = (buf[pos] << 8) | buf[pos + 1]
    if n >= 0x8000:
        n -= 0x10000
    return n, pos + 2


def _len32(buf: Any, pos: int, end: int, where: str) -> tuple[int, int]:
    if end - pos < 4:
        raise short(pos, 4, end - pos, where)
    return I32.unpack_from(buf, pos)[0], pos + 4


def read_nstring(buf: Any, pos: int, end: int, where: str) -> tuple[str | None, int]:
    n, pos = _len16(buf, pos, end, where)
    if n < 0:
        if n == -1:
            return None, pos
        raise ProtocolError(f"negative string length {n}", pos - 2, where)
    if n > end - pos:
        raise short(pos, n, end - pos, where)
    return _text(buf, pos, n, where), pos + n


def read_string(buf: Any, pos: int, end: int, where: str) -> tuple[str, int]:
    s, p = read_nstring(buf, pos, end, where)
    if s is None:
        raise ProtocolError("null in a non-nullable string", pos, where)
    return s, p


def read_cnstring(buf: Any, pos: int, end: int, where: str) -> tuple[str | None, int]:
    if pos < end and buf[pos] < 0x80:        # the usual one-byte length
        n = buf[pos] - 1
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos, end, where)
        n -= 1
    if n < 0:
        return None, pos
    if n > end - pos:
        raise short(pos, n, end - pos, where)
    return _text(buf, pos, n, where), pos + n


def read_cstring(buf: Any, pos: int, end: int, where: str) -> tuple[str, int]:
    s, p = read_cnstring(buf, pos, end, where)
    if s is None:
        raise ProtocolError("null in a non-nullable compact string", pos, where)
    return s, p


def read_nbytes(buf: Any, pos: int, end: int, where: str) -> tuple[bytes | None, int]:
    n, pos = _len32(buf, pos, end, where)
    if n < 0:
        if n == -1:
            return None, pos
        raise ProtocolError(f"negative bytes length {n}", pos - 4, where)
    if n > end - pos:
        raise short(pos, n, end - pos, where)
    return bytes(buf[pos:pos + n]), pos + n


def read_bytes(buf: Any, pos: int, end: int, where: str) -> tuple[bytes, int]:
    b, p = read_nbytes(buf, pos, end, where)
    if b is None:
        raise ProtocolError("null in non-nullable bytes", pos, where)
    return b, p


def read_cnbytes(buf: Any, pos: int, end: int, where: str) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos, end, where)
    n -= 1
    if n < 0:
        return None, pos
    if n > end - pos:
        raise short(pos, n, end - pos, where)
    return bytes(buf[pos:pos + n]), pos + n


def read_cbytes(buf: Any, pos: int, end: int, where: str) -> tuple[bytes, int]:
    b, p = read_cnbytes(buf, pos, end, where)
    if b is None:
        raise ProtocolError("null in non-nullable compact bytes", pos, where)
    return b, p


def read_records(buf: Any, pos: int, end: int, where: str) -> tuple[Any, int]:
    """RECORDS (nullable int32-length bytes) as a memoryview slice of ``buf``: no copy."""
    n, pos = _len32(buf, pos, end, where)
    if n < 0:
        if n == -1:
            return None, pos
        raise ProtocolError(f"negative records length {n}", pos - 4, where)
    if n > end - pos:
        raise short(pos, n, end - pos, where)
    return memoryview(buf)[pos:pos + n], pos + n


def read_crecords(buf: Any, pos: int, end: int, where: str) -> tuple[Any, int]:
    """Compact RECORDS (flexible versions) as a memoryview slice of ``buf``: no copy."""
    n, pos = read_uvarint(buf, pos, end, where)
    n -= 1
    if n < 0:
        return None, pos
    if n > end - pos:
        raise short(pos, n, end - pos, where)
    return memoryview(buf)[pos:pos + n], pos + n


def read_uuid(buf: Any, pos: int, end: int, where: str) -> tuple[uuid.UUID, int]:
    if end - pos < 16:
        raise short(pos, 16, end - pos, where)
    return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ProtocolError(f"string cannot be encoded as UTF-8: {e.reason}") from None


def write_nstring(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _NULL16
        return
    b = _utf8(s)
    if len(b) > 0x7FFF:
        raise ProtocolError(f"string of {len(b)} bytes is longer than 32767")
    out += I16.pack(len(b))
    out += b


def write_string(out: bytearray, s: str) -> None:
    if s is None:
        raise ProtocolError("None for a non-nullable string")
    write_nstring(out, s)


def write_cnstring(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
        return
    b = _utf8(s)
    write_uvarint(out, len(b) + 1)
    out += b


def write_cstring(out: bytearray, s: str) -> None:
    if s is None:
        raise ProtocolError("None for a non-nullable compact string")
    write_cnstring(out, s)


def write_nbytes(out: bytearray, b: Any) -> None:
    if b is None:
        out += _NULL32
        return
    out += I32.pack(len(b))
    out += b


def write_bytes(out: bytearray, b: Any) -> None:
    if b is None:
        raise ProtocolError("None for non-nullable bytes")
    write_nbytes(out, b)


def write_cnbytes(out: bytearray, b: Any) -> None:
    if b is None:
        out.append(0)
        return
    write_uvarint(out, len(b) + 1)
    out += b


def write_cbytes(out: bytearray, b: Any) -> None:
    if b is None:
        raise ProtocolError("None for non-nullable compact bytes")
    write_cnbytes(out, b)


def write_uuid(out: bytearray, u: Any) -> None:
    """A uuid.UUID, 16 bytes, or None (the zero UUID)."""
    if u is None:
        out += bytes(16)
    elif isinstance(u, uuid.UUID):
        out += u.bytes
    elif len(u) == 16:
        out += u
    else:
        raise ProtocolError(f"uuid must be a uuid.UUID or 16 bytes, not {u!r}")


def skip_tagged_fields(buf: Any, pos: int, end: int, where: str) -> int:
    """Skips a tagged-fields section (used for headers whose tags pylog does not read)."""
    n, pos = read_uvarint(buf, pos, end, where)
    if n > (end - pos) // 2:
        raise ProtocolError(f"{n} tagged fields cannot fit in {end - pos} bytes", pos, where)
    for _ in range(n):
        _, pos = read_uvarint(buf, pos, end, where)
        size, pos = read_uvarint(buf, pos, end, where)
        if size > end - pos:
            raise short(pos, size, end - pos, where)
        pos += size
    return pos
