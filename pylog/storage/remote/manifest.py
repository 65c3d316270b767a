"""The remote manifest of one partition: which shipped segments make up its remote log (``remote.manifest``).

Byte layout (docs/FORMAT.md, "Remote manifest"): ``PLRM``, version byte 2, a msgpack map, CRC-32C::

    {"topic": str, "partition": int, "epoch": int, "log_start_offset": int,
     "segments": [[base_offset, end_offset, max_timestamp, log_size, log_crc,
                   index_size, index_crc, timeindex_size, timeindex_crc, snapshot_size, snapshot_crc,
                   txnindex_size, txnindex_crc], ...]}

Version 1 (written before aborted-transaction indexes were shipped) has entries of the first eleven numbers;
it is still read, its segments' ``txnindex_size`` being :data:`TXNINDEX_UNKNOWN`.

Invariants (checked by :func:`decode_manifest` and kept by every method that makes a new manifest):
- Segments are in offset order and contiguous: each starts where the one before ends
  (``base_offset[i+1] == end_offset[i]``), and each holds at least one offset (``end_offset > base_offset``).
  Only delete-policy topics are shipped, so offsets are dense (compaction would leave gaps).
- ``log_start_offset`` is at or below the first segment's end offset; remote retention raises it *before*
  deleting the objects of the segments it drops.
- ``epoch`` counts commits: each conditional write of the manifest carries the one before plus one, so a
  reader can tell two versions apart without comparing segment lists.
- ``snapshot_size`` is -1 when no producer snapshot was shipped with the segment (``snapshot_crc`` 0).
- ``txnindex_size`` is -1 when the segment has no aborted-transaction index (it holds no abort marker;
  ``txnindex_crc`` 0), :data:`TXNINDEX_UNKNOWN` (-2) when it was shipped by a version-1 writer, which did not
  ship indexes: then which of its transactional batches were aborted is not known remotely.
- The manifest is the commit point of tiered storage: an object it does not name is not part of the remote
  log (an upload interrupted before its commit, or a deletion interrupted after it), whatever the bucket holds.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

from ...errors import CorruptRecordError, RemoteConflictError, RemoteDataCorruptError
from ..fileio import checked, decode_doc, encode_doc, unchecked
from ..records.format import MAX_OFFSET

__all__ = ["RemoteSegment", "Manifest", "encode_manifest", "decode_manifest", "MANIFEST_MAGIC", "MAX_MANIFEST_BYTES",
           "TXNINDEX_UNKNOWN"]

MANIFEST_MAGIC = b"PLRM"
_VERSION = 2
#: Entry length by format version (version 1 lacks the aborted-transaction index's two numbers).
_ENTRY_LENGTH = {1: 11, 2: 13}
#: ``txnindex_size`` of a segment a version-1 writer shipped: its aborted-transaction index is not known.
TXNINDEX_UNKNOWN = -2
#: A manifest larger than this is refused as damage: ~100 bytes per segment, so a million segments.
MAX_MANIFEST_BYTES = 128 << 20
_U32 = (1 << 32) - 1
_I64_MIN = -(1 << 63)


@dataclass(frozen=True)
class RemoteSegment:
    """One shipped segment as its manifest records it. ``end_offset`` is one past its last offset."""

    base_offset: int
    end_offset: int
    max_timestamp: int
    log_size: int
    log_crc: int
    index_size: int
    index_crc: int
    timeindex_size: int
    timeindex_crc: int
    snapshot_size: int = -1
    snapshot_crc: int = 0
    txnindex_size: int = -1
    txnindex_crc: int = 0

    @property
    def size(self) -> int:
        """Bytes of its log (what ``retention.bytes`` counts)."""
        return self.log_size

    def fields(self) -> list[int]:
        return [self.base_offset, self.end_offset, self.max_timestamp, self.log_size, self.log_crc,
                self.index_size, self.index_crc, self.timeindex_size, self.timeindex_crc, self.snapshot_size,
                self.snapshot_crc, self.txnindex_size, self.txnindex_crc]


@dataclass(frozen=True)
class Manifest:
    """A partition's remote log at one commit. Immutable: changes make a new manifest."""

    topic: str
    partition: int
    epoch: int = 0
    log_start_offset: int = 0
    segments: tuple[RemoteSegment, ...] = ()

    @property
    def end_offset(self) -> int:
        """One past the last shipped offset (the log start when nothing is shipped)."""
        return self.segments[-1].end_offset if self.segments else self.log_start_offset

    @property
    def size(self) -> int:
        return sum(s.log_size for s in self.segments)

    def find(self, offset: int) -> RemoteSegment | None:
        """The segment holding ``offset``, or None when no shipped segment does."""
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        if i < 0 or offset >= self.segments[i].end_offset or offset < self.log_start_offset:
            return None
        return self.segments[i]

    def with_segment(self, seg: RemoteSegment) -> "Manifest":
        """This manifest with ``seg`` shipped; itself when ``seg`` already is (a re-upload).

        :raises RemoteConflictError: when ``seg`` does not continue the remote log (another process shipped
            different content for those offsets, or a segment between is missing).
        """
        for s in self.segments:
            if s.base_offset == seg.base_offset:
                if s == seg:
                    return self
                raise RemoteConflictError(f"offset {seg.base_offset} was shipped with other content "
                                          f"(log CRC {s.log_crc:08x}, this one {seg.log_crc:08x})")
        if self.segments and seg.base_offset != self.end_offset:
            raise RemoteConflictError(f"segment at {seg.base_offset} does not continue the remote log, "
                                      f"which ends at {self.end_offset}")
        if not self.segments and seg.end_offset <= self.log_start_offset:
            raise RemoteConflictError(f"segment [{seg.base_offset}, {seg.end_offset}) is below the remote log "
                                      f"start {self.log_start_offset}")
        start = self.log_start_offset if self.segments else max(self.log_start_offset, seg.base_offset)
        return replace(self, log_start_offset=start, segments=self.segments + (seg,))

    def trimmed(self, before: int) -> "Manifest":
        """This manifest with its log start raised to ``before`` (Kafka's DeleteRecords), segments wholly below
        it dropped; itself when ``before`` is at or below the log start."""
        if before <= self.log_start_offset:
            return self
        kept = self.without_head(sum(1 for s in self.segments if s.end_offset <= before))
        return replace(kept, log_start_offset=max(kept.log_start_offset, before))

    def without_head(self, count: int) -> "Manifest":
        """This manifest without its ``count`` oldest segments; the log start moves to the first kept offset."""
        if count <= 0:
            return self
        count = min(count, len(self.segments))
        start = max(self.log_start_offset, self.segments[count - 1].end_offset)
        return replace(self, log_start_offset=start, segments=self.segments[count:])


def encode_manifest(m: Manifest) -> bytes:
    """The bytes of ``m`` as stored (docs/FORMAT.md)."""
    doc = {"topic": m.topic, "partition": m.partition, "epoch": m.epoch, "log_start_offset": m.log_start_offset,
           "segments": [s.fields() for s in m.segments]}
    return checked(encode_doc(MANIFEST_MAGIC, _VERSION, doc))


def decode_manifest(raw: bytes, where: str) -> Manifest:
    """The manifest in ``raw`` (read from ``where``, an ``s3://`` address for messages).

    :raises RemoteDataCorruptError: on a bad checksum, magic, version, shape or a broken invariant.
    """
    try:
        if len(raw) > MAX_MANIFEST_BYTES:
            raise CorruptRecordError(f"remote manifest of {len(raw)} bytes is over {MAX_MANIFEST_BYTES}", where, 0)
        body = unchecked(raw, where, "remote manifest")
        version = body[4] if len(body) > 4 and body[4] in _ENTRY_LENGTH else _VERSION
        doc = decode_doc(MANIFEST_MAGIC, version, body, where, "remote manifest")
        return _checked_manifest(doc, where, _ENTRY_LENGTH[version])
    except RemoteDataCorruptError:
        raise
    except CorruptRecordError as exc:
        raise RemoteDataCorruptError(exc.reason, where, exc.position) from None


def _checked_manifest(doc: Any, where: str, entry_length: int) -> Manifest:
    def bad(what: str) -> RemoteDataCorruptError:
        return RemoteDataCorruptError(f"remote manifest: {what}", where, None)

    if not isinstance(doc, dict) or set(doc) != {"topic", "partition", "epoch", "log_start_offset", "segments"}:
        raise bad("not a manifest document")
    topic, partition, epoch, start, rows = (doc["topic"], doc["partition"], doc["epoch"], doc["log_start_offset"],
                                            doc["segments"])
    if not isinstance(topic, str) or not _int_in(partition, 0, (1 << 31) - 1) or not _int_in(epoch, 0, MAX_OFFSET):
        raise bad("bad topic, partition or epoch")
    if not _int_in(start, 0, MAX_OFFSET) or not isinstance(rows, list):
        raise bad("bad log start offset or segment list")
    segments = tuple(_checked_segment(row, bad, entry_length) for row in rows)
    for before, after in zip(segments, segments[1:], strict=False):
        if after.base_offset != before.end_offset:
            raise bad(f"segment at {after.base_offset} does not follow the one ending at {before.end_offset}")
    if segments and start >= segments[0].end_offset:
        raise bad(f"log start {start} is past the first segment's end {segments[0].end_offset}")
    return Manifest(topic, partition, epoch, start, segments)


def _checked_segment(row: Any, bad: Any, length: int) -> RemoteSegment:
    if not isinstance(row, list) or len(row) != length:
        raise bad(f"a segment entry is not {length} numbers")
    if length == 11:  # version 1: no aborted-transaction index was shipped
        row = [*row, TXNINDEX_UNKNOWN, 0]
    base, end, max_ts, log_size, log_crc, ix_size, ix_crc, tix_size, tix_crc, snap_size, snap_crc, txn_size, \
        txn_crc = row
    sizes_ok = all(_int_in(v, 1, MAX_OFFSET) for v in (log_size, ix_size, tix_size))
    crcs_ok = all(_int_in(v, 0, _U32) for v in (log_crc, ix_crc, tix_crc, snap_crc, txn_crc))
    if not (_int_in(base, 0, MAX_OFFSET) and _int_in(end, base + 1, MAX_OFFSET)
            and _int_in(max_ts, _I64_MIN, MAX_OFFSET) and sizes_ok and crcs_ok and _int_in(snap_size, -1, MAX_OFFSET)
            and _int_in(txn_size, TXNINDEX_UNKNOWN, MAX_OFFSET) and txn_size != 0):
        raise bad(f"segment entry {row!r:.200} out of range")
    return RemoteSegment(*row)


def _int_in(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
