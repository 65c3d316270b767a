"""A closed local segment read for shipping: checked batch by batch, checksummed, its small files in hand.

Invariants:
- Only a closed segment (a later segment exists in the directory) with both indexes sealed
  (:func:`~pylog.storage.remote.index_file.check_sealed`) and every batch whole and checking (length, magic,
  CRC-32C, offset order) is described; damage raises :class:`~pylog.errors.CorruptRecordError` instead, so
  damage is never shipped.
- The log is read through the open file the caller passes, which the caller then uploads: the bytes
  checked and checksummed are the bytes shipped, even if the segment's name is replaced or unlinked meanwhile.
- The producer snapshot is included only when it is as of the segment's end offset: the copy kept at its
  roll (``<end>.snapshot``, for topics with tiered storage), else ``producer.snapshot`` when it has not been
  replaced since; a later one describes offsets a restore up to here would not hold.
- The aborted-transaction index (``<base>.txnindex``) is included when it holds entries, each checking and
  naming an abort marker inside the segment (``base <= last offset < end``); a torn or damaged one raises
  :class:`~pylog.errors.CorruptRecordError` (a reader of the shipped copy would return aborted records).
- Reads nothing larger than a sealed index can be (or a snapshot, 64 MiB: its readers' cap) into memory
  besides mapping the log.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import BinaryIO

from ...errors import CorruptRecordError, InvalidArgumentError
from ..filenames import (INDEX_SUFFIX, LOG_SUFFIX, SEGMENT_SNAPSHOT_SUFFIX, TIMEINDEX_SUFFIX, list_segment_bases,
                         segment_path)
from ..producer_state import SNAPSHOT_FILE, ProducerState
from ..txn_index import MAX_INDEX_BYTES, decode_index, index_path
from ..records.format import HEADER_SIZE, check_header, crc32c, parse_header
from ..records.views import checked_prefix
from .index_file import MAX_SEALED_INDEX_BYTES, OFFSET_INDEX_MAGIC, TIME_INDEX_MAGIC, check_sealed
from .manifest import RemoteSegment

__all__ = ["LocalSegment", "read_local_segment"]

#: Producer snapshots larger than this are damage (docs/FORMAT.md: readers cap them at 64 MiB).
_MAX_SNAPSHOT_BYTES = 64 << 20


@dataclass(frozen=True)
class LocalSegment:
    """A sealed local segment read for shipping: its manifest entry and the bytes of its small files."""

    entry: RemoteSegment
    index: bytes
    timeindex: bytes
    snapshot: bytes | None
    txnindex: bytes | None


def read_local_segment(directory: str, base_offset: int, log: BinaryIO) -> LocalSegment | None:
    """The closed segment at ``base_offset`` in ``directory``, whose log file the caller opened as ``log``;
    None when its log is empty (nothing to ship).

    :raises InvalidArgumentError: when it is the active segment, or its indexes are gone.
    :raises CorruptRecordError: when a batch or an index does not check.
    """
    bases = list_segment_bases(directory)
    if base_offset == bases[-1]:
        raise InvalidArgumentError(f"the segment at {base_offset} is the active one in {directory}: only "
                                   "closed segments are shipped")
    log_path = segment_path(directory, base_offset, LOG_SUFFIX)
    try:
        index = _read_small(segment_path(directory, base_offset, INDEX_SUFFIX), MAX_SEALED_INDEX_BYTES)
        timeindex = _read_small(segment_path(directory, base_offset, TIMEINDEX_SUFFIX), MAX_SEALED_INDEX_BYTES)
    except FileNotFoundError as exc:
        raise InvalidArgumentError(f"the segment at {base_offset} in {directory} has no {exc.filename}: "
                                   "deleted meanwhile, or not a sealed segment") from None
    check_sealed(index, OFFSET_INDEX_MAGIC, base_offset, segment_path(directory, base_offset, INDEX_SUFFIX))
    times = check_sealed(timeindex, TIME_INDEX_MAGIC, base_offset,
                         segment_path(directory, base_offset, TIMEINDEX_SUFFIX))
    size = os.fstat(log.fileno()).st_size
    if size == 0:
        return None
    with mmap.mmap(log.fileno(), size, prot=mmap.PROT_READ) as mm:
        end_pos, last = checked_prefix(mm, 0, size, base_offset - 1)
        if end_pos != size:
            if end_pos + HEADER_SIZE <= size:  # a header that says what is wrong, when it can
                check_header(parse_header(mm, end_pos), log_path, end_pos)
            raise CorruptRecordError("batch does not check (length, magic, CRC or offset order); "
                                     "damaged segments are not shipped", log_path, end_pos)
        log_crc = crc32c(mm)
    snapshot = _snapshot_at(directory, last + 1)
    txnindex = _txnindex(directory, base_offset, last + 1)
    entry = RemoteSegment(base_offset, last + 1, times.max_timestamp, size, log_crc, len(index), crc32c(index),
                          len(timeindex), crc32c(timeindex),
                          len(snapshot) if snapshot is not None else -1,
                          crc32c(snapshot) if snapshot is not None else 0,
                          len(txnindex) if txnindex is not None else -1,
                          crc32c(txnindex) if txnindex is not None else 0)
    return LocalSegment(entry, index, timeindex, snapshot, txnindex)


def _snapshot_at(directory: str, end_offset: int) -> bytes | None:
    """The bytes of the producer snapshot as of ``end_offset`` (the copy kept at the roll, else the current
    one when it still is as of there), or None."""
    kept = os.path.basename(segment_path(directory, end_offset, SEGMENT_SNAPSHOT_SUFFIX))
    for name in (kept, SNAPSHOT_FILE):
        try:
            found = ProducerState.read_snapshot(directory, name)
        except CorruptRecordError:
            continue  # damaged (a power cut before it was fsynced): the other one, or none
        if found is None or found[1] != end_offset:
            continue
        snapshot = _read_small(os.path.join(directory, name), _MAX_SNAPSHOT_BYTES)
        again = ProducerState.read_snapshot(directory, name)  # replaced between the two reads: not this one
        if again is not None and again[1] == end_offset:
            return snapshot
    return None


def _txnindex(directory: str, base_offset: int, end_offset: int) -> bytes | None:
    """The bytes of the segment's aborted-transaction index when it has entries, checked; else None.
    :raises CorruptRecordError:"""
    path = index_path(directory, base_offset)
    try:
        raw = _read_small(path, MAX_INDEX_BYTES)
    except FileNotFoundError:
        return None
    entries = decode_index(raw, path)
    for e in entries:
        if not base_offset <= e.last_offset < end_offset:
            raise CorruptRecordError(f"aborted-transaction index entry names a marker at {e.last_offset}, outside "
                                     f"the segment [{base_offset}, {end_offset}); not shipped", path, 0)
    return raw if entries else None


def _read_small(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise CorruptRecordError(f"file of {size} bytes where a sealed index or snapshot is expected", path, 0)
        return f.read()
