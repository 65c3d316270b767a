"""Sealed index files as bytes: the check before shipping one, offset lookups in a downloaded one, and the
empty pair of a read-only attach's stub segment.

The storage core's index classes work on mmapped files they own and may still grow; tiered storage handles
*sealed* index files only, as bytes read once (before upload) or fetched from the bucket (for remote reads),
so it reads the layout of docs/FORMAT.md ("Indexes") directly:

| offset | size | field |
|---:|---:|---|
| 0 | 4 | magic ``PLXO`` / ``PLXT`` |
| 4 | 2 | version 1 |
| 6 | 2 | flags, bit 0 sealed |
| 8 | 8 | base offset |
| 16 | 4 | capacity |
| 20 | 4 | count |
| 24 | 4 | CRC-32C of the used entries (column A then column B) |
| 28 | 8 | max timestamp (time index) |
| 60 | 4 | CRC-32C of bytes [0, 60) |

Invariants: :func:`check_sealed` accepts only a whole sealed file whose two checksums hold, whose base
offset is the segment's and whose size is exactly its header's; every lookup runs on such bytes.
:func:`empty_sealed_index` makes bytes :func:`check_sealed` accepts (and the core's index reader opens).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ...errors import CorruptRecordError
from ..records.format import crc32c

__all__ = ["SealedIndex", "check_sealed", "empty_sealed_index", "OFFSET_INDEX_MAGIC", "TIME_INDEX_MAGIC",
           "MAX_SEALED_INDEX_BYTES"]

OFFSET_INDEX_MAGIC = b"PLXO"
TIME_INDEX_MAGIC = b"PLXT"
#: Sealed index files are read whole; larger than this is damage (a sealed index holds only its used entries,
#: and segment.index.bytes is at most 2 GiB anyway).
MAX_SEALED_INDEX_BYTES = 1 << 31
_HEADER = struct.Struct("<4sHHqIIIq24xI")
_SEALED = 1
#: Column A's dtype per kind: relative offsets (uint32) or timestamps (int64); column B is uint32 either way.
_COLUMN_A: dict[bytes, np.dtype] = {OFFSET_INDEX_MAGIC: np.dtype("<u4"), TIME_INDEX_MAGIC: np.dtype("<i8")}
_COLUMN_B: np.dtype = np.dtype("<u4")


@dataclass(frozen=True)
class SealedIndex:
    """A checked sealed index: its used entries and, for a time index, the segment's max timestamp."""

    magic: bytes
    base_offset: int
    a: np.ndarray
    b: np.ndarray
    max_timestamp: int

    def position_for(self, offset: int) -> int:
        """The file position of the batch to start scanning at for ``offset`` (offset index): the position
        of the last entry at or below it, 0 when there is none (the segment's first batch)."""
        i = int(np.searchsorted(self.a, offset - self.base_offset, side="right")) - 1
        return int(self.b[i]) if i >= 0 else 0


def check_sealed(raw: bytes, magic: bytes, base_offset: int, where: str) -> SealedIndex:
    """``raw`` checked as a sealed index file of kind ``magic`` for the segment at ``base_offset``.

    :raises CorruptRecordError: (path ``where``) when it is not one: unsealed (still live), another
        segment's, cut short or grown, or a checksum fails.
    """
    if len(raw) < _HEADER.size:
        raise CorruptRecordError(f"index file of {len(raw)} bytes is shorter than its header", where, 0)
    mg, version, flags, base, capacity, count, entries_crc, max_ts, header_crc = _HEADER.unpack_from(raw)
    if mg != magic or version != 1 or header_crc != crc32c(raw[:60]):
        raise CorruptRecordError(f"not a version-1 {magic.decode()} index, or its header checksum fails", where, 0)
    if not flags & _SEALED:
        raise CorruptRecordError("index is not sealed (its segment is still being written)", where, 6)
    if base != base_offset:
        raise CorruptRecordError(f"index of the segment at {base}, expected {base_offset}", where, 8)
    dtype_a = _COLUMN_A[magic]
    if capacity != max(count, 1) or len(raw) != _HEADER.size + capacity * (dtype_a.itemsize + _COLUMN_B.itemsize):
        raise CorruptRecordError(f"sealed index of {len(raw)} bytes with {count} entries in {capacity} slots",
                                 where, 16)
    a = np.frombuffer(raw, dtype_a, count, _HEADER.size)
    b = np.frombuffer(raw, _COLUMN_B, count, _HEADER.size + capacity * dtype_a.itemsize)
    if crc32c(b.tobytes(), crc32c(a.tobytes())) != entries_crc:
        raise CorruptRecordError("index entries checksum mismatch", where, _HEADER.size)
    if count and bool(np.any(np.diff(a) <= 0)):
        raise CorruptRecordError("index entries are not strictly increasing", where, _HEADER.size)
    return SealedIndex(magic, base, a, b, max_ts)


def empty_sealed_index(magic: bytes, base_offset: int) -> bytes:
    """A sealed index file of kind ``magic`` with no entries, for an empty segment at ``base_offset``: one
    zeroed slot (a sealed file's capacity is ``max(count, 1)``), no max timestamp (-1), as the core seals the
    indexes of a segment that holds nothing."""
    empty_crc = crc32c(b"", crc32c(b""))  # of the used entries: column A then column B, none of either
    header = bytearray(_HEADER.pack(magic, 1, _SEALED, base_offset, 1, 0, empty_crc, -1, 0))
    struct.pack_into("<I", header, 60, crc32c(bytes(header[:60])))
    return bytes(header) + bytes(_COLUMN_A[magic].itemsize + _COLUMN_B.itemsize)
