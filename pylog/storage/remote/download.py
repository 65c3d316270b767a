"""A partition rebuilt in a directory from its shipped segments (the partition half of a restore).

Invariants:
- Writes only into an absent or empty directory.
- Every file is downloaded under a temporary name (``.restoring``), checked against the manifest's size and
  CRC-32C, fsynced and only then renamed into place; a failure removes the temporary file, so no partial or
  unchecked file ever carries a segment's name.
- The checkpoint is written last and dirty (recovery point 0, the remote log start), so the first writer
  re-validates every batch and rebuilds any index that fails its check (docs/GUARANTEES.md).
- Only the latest shipped producer snapshot is restored (as ``producer.snapshot``): the last segment's, as
  of the restored log's end, when it has one (the writer replays the batch headers after it).
  Every shipped aborted-transaction index is restored beside its segment (``<base>.txnindex``).
"""

from __future__ import annotations

import os

from ...errors import RemoteDataCorruptError, StorePathError
from ..checkpoint import Checkpoint, write_checkpoint
from ..fileio import fsync_dir
from ..filenames import CHECKPOINT_FILE, INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, segment_path
from ..producer_state import SNAPSHOT_FILE
from ..txn_index import TXN_INDEX_SUFFIX
from .index_file import OFFSET_INDEX_MAGIC, TIME_INDEX_MAGIC, empty_sealed_index
from .layout import segment_object
from .manifest import Manifest, RemoteSegment
from .objects import ObjectStore

__all__ = ["restore_partition", "stub_partition", "segment_files", "SNAPSHOT_SUFFIX", "TXN_INDEX_SUFFIX"]

SNAPSHOT_SUFFIX = ".snapshot"


def segment_files(seg: RemoteSegment) -> list[tuple[str, int, int]]:
    """``(suffix, size, crc)`` of each object of a shipped segment, the log first."""
    files = [(LOG_SUFFIX, seg.log_size, seg.log_crc), (INDEX_SUFFIX, seg.index_size, seg.index_crc),
             (TIMEINDEX_SUFFIX, seg.timeindex_size, seg.timeindex_crc)]
    if seg.snapshot_size >= 0:
        files.append((SNAPSHOT_SUFFIX, seg.snapshot_size, seg.snapshot_crc))
    if seg.txnindex_size >= 0:
        files.append((TXN_INDEX_SUFFIX, seg.txnindex_size, seg.txnindex_crc))
    return files


def restore_partition(objects: ObjectStore, topic: str, partition: int, m: Manifest, directory: str) -> None:
    """Download every segment of ``m`` into ``directory`` (see the module's invariants).

    :raises StorePathError: when ``directory`` holds files.
    :raises RemoteDataCorruptError: when an object does not match the manifest.
    :raises RemoteObjectMissingError: when an object the manifest names is gone.
    """
    os.makedirs(directory, exist_ok=True)
    if os.listdir(directory):
        raise StorePathError(f"restore needs an empty directory, {directory} holds files")
    with_snapshot = [s for s in m.segments if s.snapshot_size >= 0]
    for seg in m.segments:
        for suffix, size, crc in segment_files(seg):
            if suffix == SNAPSHOT_SUFFIX and seg is not with_snapshot[-1]:
                continue
            target = (os.path.join(directory, SNAPSHOT_FILE) if suffix == SNAPSHOT_SUFFIX
                      else segment_path(directory, seg.base_offset, suffix))
            name = segment_object(topic, partition, seg.base_offset, seg.log_crc, suffix)
            _download_checked(objects, name, size, crc, target)
    if not m.segments:  # nothing shipped: an empty log starting at the remote log start
        open(segment_path(directory, m.log_start_offset, LOG_SUFFIX), "xb").close()
    write_checkpoint(os.path.join(directory, CHECKPOINT_FILE),
                     Checkpoint(recovery_point=0, log_start_offset=m.log_start_offset, clean=False))
    fsync_dir(directory)


def stub_partition(m: Manifest, directory: str) -> None:
    """A partition in ``directory`` (absent or empty) holding none of ``m``'s records locally: an empty segment
    at the remote log end (with empty sealed indexes, so readers find them as for any segment) and a clean
    checkpoint with the log start there, so that every offset of the remote log lies below the local log start
    and reads fall through to the bucket (a read-only attach).

    :raises StorePathError: when ``directory`` holds files.
    """
    os.makedirs(directory, exist_ok=True)
    if os.listdir(directory):
        raise StorePathError(f"a partition stub needs an empty directory, {directory} holds files")
    for suffix, magic in ((INDEX_SUFFIX, OFFSET_INDEX_MAGIC), (TIMEINDEX_SUFFIX, TIME_INDEX_MAGIC)):
        with open(segment_path(directory, m.end_offset, suffix), "xb") as f:  # indexes first, as at a roll
            f.write(empty_sealed_index(magic, m.end_offset))
    open(segment_path(directory, m.end_offset, LOG_SUFFIX), "xb").close()
    write_checkpoint(os.path.join(directory, CHECKPOINT_FILE),
                     Checkpoint(recovery_point=m.end_offset, log_start_offset=m.end_offset, clean=True))


def _download_checked(objects: ObjectStore, name: str, size: int, crc: int, target: str) -> None:
    tmp = target + ".restoring"
    try:
        with open(tmp, "wb") as out:
            got = objects.download(name, out, size)
            out.flush()
            os.fsync(out.fileno())
        if got != crc:
            raise RemoteDataCorruptError(f"CRC {got:08x}, the manifest says {crc:08x}", objects.url(name), 0)
        os.rename(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
