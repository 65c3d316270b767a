"""Consumer groups' committed offsets in the bucket (``<prefix>/group.offsets``), for ``pylog restore``.

``__consumer_offsets`` is a compacted topic, so it is not shipped as segments (the manifest requires dense
offsets and immutable objects); instead the upload thread ships a snapshot of what its groups have
committed for the topics it ships, replaced conditionally whenever it changes, and a restore commits it into
the restored store.

Byte layout (docs/FORMAT.md, "Group offsets"): ``PLGO``, version byte 1, a msgpack map, CRC-32C::

    {"offsets": [[group, topic, partition, offset, metadata, leader_epoch], ...]}

Invariants:
- Entries are sorted by (group, topic, partition) and unique, so equal commits give equal bytes (an
  unchanged snapshot is never written again).
- Decoding checks every field's type and range (:func:`decode_group_offsets`); anything else is
  :class:`~pylog.errors.RemoteDataCorruptError`, never a partial result.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import CorruptRecordError, RemoteDataCorruptError
from ...structs import OffsetAndMetadata, TopicPartition
from ..fileio import checked, decode_doc, encode_doc, in_range, unchecked

__all__ = ["GROUP_OFFSETS_MAGIC", "MAX_GROUP_OFFSETS_BYTES", "GroupOffsets", "encode_group_offsets",
           "decode_group_offsets"]

GROUP_OFFSETS_MAGIC = b"PLGO"
_VERSION = 1
#: A larger object is refused as damage (about a million commits).
MAX_GROUP_OFFSETS_BYTES = 128 << 20
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_I31_MAX = (1 << 31) - 1

#: ``{group id: {partition: committed offset}}``
GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]


def encode_group_offsets(offsets: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]]) -> bytes:
    """The object's bytes for ``offsets`` (see the module's layout)."""
    rows = sorted([group, tp.topic, tp.partition, om.offset, om.metadata, om.leader_epoch]
                  for group, commits in offsets.items() for tp, om in commits.items())
    return checked(encode_doc(GROUP_OFFSETS_MAGIC, _VERSION, {"offsets": rows}))


def decode_group_offsets(raw: bytes, where: str) -> GroupOffsets:
    """The committed offsets in ``raw`` (read from ``where``, for messages).

    :raises RemoteDataCorruptError: on a bad checksum, magic, version, or a field out of type or range.
    """
    try:
        if len(raw) > MAX_GROUP_OFFSETS_BYTES:
            raise CorruptRecordError(f"group offsets of {len(raw)} bytes are over {MAX_GROUP_OFFSETS_BYTES}", where, 0)
        doc = decode_doc(GROUP_OFFSETS_MAGIC, _VERSION, unchecked(raw, where, "group offsets"), where, "group offsets")
    except CorruptRecordError as exc:
        raise RemoteDataCorruptError(exc.reason, where, exc.position) from None
    if not isinstance(doc, dict) or set(doc) != {"offsets"} or not isinstance(doc["offsets"], list):
        raise RemoteDataCorruptError("group offsets: not a group offsets document", where, None)
    out: GroupOffsets = {}
    for row in doc["offsets"]:
        if not _row_ok(row):
            raise RemoteDataCorruptError(f"group offsets: entry {row!r:.200} out of range", where, None)
        group, topic, partition, offset, metadata, epoch = row
        out.setdefault(group, {})[TopicPartition(topic, partition)] = OffsetAndMetadata(offset, metadata, epoch)
    return out


def _row_ok(row: Any) -> bool:
    return (isinstance(row, list) and len(row) == 6 and type(row[0]) is str and bool(row[0])
            and type(row[1]) is str and bool(row[1]) and in_range(row[2], _I31_MAX)
            and in_range(row[3], _I64_MAX, _I64_MIN) and type(row[4]) is str and in_range(row[5], _I31_MAX, -1))
