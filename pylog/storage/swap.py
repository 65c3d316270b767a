"""The compaction swap: replacing segments by cleaned ones crash-safely, and recovering an interrupted one.

This module documents the whole protocol; the storage layer runs all of it. The log cleaner
(:mod:`pylog.maintenance.compaction`) only writes each group's cleaned segment as ``<base>.log.cleaned``
(+ indexes, the log fsynced) and calls :meth:`PartitionInternals.swap_in <pylog.partition.PartitionInternals.swap_in>`
(Kafka's ``replaceSegments``), which takes the partition's locks itself (the maintenance lock, then the
append lock) and runs, for every group of one cleaning pass at once:

1. **Stage** (:func:`commit`): rename each group's ``.cleaned`` files to ``.swap``; fsync the directory.
2. **Commit** (:func:`commit`): write the swap manifest (``cleaner.swap``, :func:`write_manifest`: each
   group's new base, or -1 when it compacted to nothing, and the base offsets of the segments it
   replaces). This is the commit point: before it a crash rolls the swap back, after it forward.
3. **Swap generation** (under the append lock, before any name points at a new file): record a new swap
   generation in the partition checkpoint, durably; the segments the swap does not replace move to it,
   so a handle that sized a segment under the old generation re-checks it instead of reading a new file
   with old sizes.
4. **Roll forward** (:func:`roll_forward`, under the append lock): rename each ``.swap`` over the live
   name, then unlink the replaced segments (all but their aborted-transaction indexes, which readers
   holding the old segment list read by name: :func:`remove_leftovers` removes them at the next cleaning
   or writer open); fsync the directory.
5. **View** (under the append lock): replace the old segment objects by the new ones in the partition's
   segment list (old ones are unlinked, never closed: readers holding a snapshot go on or retry).
6. **Done** (:func:`finish`): remove the manifest; fsync the directory.

A failure after step 2 leaves the files and the in-memory view possibly disagreeing: ``swap_in`` marks
the partition failed (every later operation raises ``LogFailedError`` until the store is reopened) and
re-raises. A crash can stop it anywhere, so the partition's writer open (:mod:`pylog.partition`)
calls :func:`finish_interrupted_swap` under its writer lock: with a manifest it rolls the swap forward
(steps 4 and 6 again), without one it deletes ``.cleaned``/``.swap`` leftovers (rolls back).

Invariants:
- A manifest is written atomically (whole or absent, CRC-checked); a damaged one is a CorruptRecordError,
  never guessed around.
- Rolling forward is idempotent and renames each group's new log in before unlinking what it replaces, so
  a reader listing the directory meanwhile finds every surviving offset in some segment, and a crash
  during it is finished by the next writer open.
- Either way every offset is held exactly once.
"""

from __future__ import annotations

import logging
import os
import struct

from ..errors import CorruptRecordError
from .fileio import fsync_dir, read_checked, write_checked
from .filenames import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_MANIFEST_FILE, SWAP_SUFFIX,
                        TIMEINDEX_SUFFIX, TMP_SUFFIX, TXN_INDEX_SUFFIX, segment_path)

__all__ = ["Swap", "SEGMENT_SUFFIXES", "commit", "finish", "write_manifest", "read_manifest", "remove_leftovers",
           "roll_forward", "finish_interrupted_swap"]

#: The cleaner's logger: what recovery reports is the cleaner's work being finished.
log = logging.getLogger("pylog.compaction")

#: The files of one segment, each swapped in as a unit. A cleaned segment always has an aborted-transaction
#: index (without entries when it holds no abort that needs one), so that rolling forward replaces the old
#: one at its base whatever it held.
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXN_INDEX_SUFFIX)
#: What rolling forward unlinks of a replaced segment: not its aborted-transaction index, which readers
#: find by name from a list of segments taken before the swap (one in another process may hold such a list
#: long after): it stays until the next cleaning or writer open (:func:`remove_leftovers`), so such a
#: reader still finds the aborted transactions of the old segments it reads.
_UNLINKED_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)

_MANIFEST = struct.Struct("<4sHHI")  # magic, version, reserved, group count
_GROUP = struct.Struct("<qI")  # new base (-1: the group compacted to nothing), replaced segment count
_MANIFEST_MAGIC = b"PLCS"
#: A swap: ``[(new base or -1, [replaced base offsets]), ...]``, one entry per group.
Swap = list[tuple[int, list[int]]]


def commit(directory: str, groups: Swap) -> None:
    """Steps 1 and 2: stage each group's cleaned files as ``.swap`` (a group with new base -1 has none),
    fsync the directory, then write the manifest: the commit point."""
    for new_base, _ in groups:
        if new_base >= 0:
            for suffix in SEGMENT_SUFFIXES:
                os.replace(segment_path(directory, new_base, suffix + CLEANED_SUFFIX),
                           segment_path(directory, new_base, suffix + SWAP_SUFFIX))
    fsync_dir(directory)
    write_manifest(directory, groups)


def finish(directory: str) -> None:
    """Step 6: the swap is rolled forward and in the view; remove its manifest, durably."""
    os.unlink(os.path.join(directory, SWAP_MANIFEST_FILE))
    fsync_dir(directory)


def write_manifest(directory: str, groups: Swap) -> None:
    raw = _MANIFEST.pack(_MANIFEST_MAGIC, 1, 0, len(groups)) + b"".join(
        _GROUP.pack(new, len(old)) + struct.pack(f"<{len(old)}q", *old) for new, old in groups)
    write_checked(os.path.join(directory, SWAP_MANIFEST_FILE), raw)


def read_manifest(directory: str) -> Swap | None:
    path = os.path.join(directory, SWAP_MANIFEST_FILE)
    # Written atomically, so a manifest is whole or absent; damage is not ours to guess around.
    raw = read_checked(path, 1 << 26, "compaction swap manifest")
    if raw is None:
        return None
    if len(raw) < _MANIFEST.size:
        raise CorruptRecordError("compaction swap manifest is truncated", path, 0)
    magic, version, _, count = _MANIFEST.unpack_from(raw)
    if magic != _MANIFEST_MAGIC or version != 1:
        raise CorruptRecordError("not a pylog compaction swap manifest", path, 0)
    groups: Swap = []
    pos = _MANIFEST.size
    try:
        for _ in range(count):
            new, k = _GROUP.unpack_from(raw, pos)
            pos += _GROUP.size
            groups.append((new, list(struct.unpack_from(f"<{k}q", raw, pos))))
            pos += 8 * k
    except struct.error:
        raise CorruptRecordError("compaction swap manifest is truncated", path, pos) from None
    if pos != len(raw):
        raise CorruptRecordError("compaction swap manifest has trailing bytes", path, pos)
    if any(new < -1 or any(b < 0 for b in old) for new, old in groups):
        # Base offsets name files: a negative one would name none of ours.
        raise CorruptRecordError("compaction swap manifest names a negative base offset", path, _MANIFEST.size)
    return groups


def remove_leftovers(directory: str, temporaries: bool = False) -> int:
    """Delete unfinished cleaner output (``.cleaned``, ``.swap``), ``.deleted`` files and the
    aborted-transaction indexes of segments an earlier swap replaced (their ``.log`` is gone); with
    ``temporaries`` also the temporary files of atomic replacements a crash interrupted (only safe when
    nothing is being written: at the writer's open, under its lock)."""
    n = 0
    with os.scandir(directory) as it:
        names = [e.name for e in it]
    for name in names:
        if name == SWAP_MANIFEST_FILE:
            continue  # a committed swap: rolled forward by finish_interrupted_swap, never deleted
        if CLEANED_SUFFIX in name or name.endswith(SWAP_SUFFIX) or SWAP_SUFFIX + "." in name \
                or name.endswith(DELETED_SUFFIX) or (temporaries and name.endswith(TMP_SUFFIX)) \
                or _replaced_txn_index(directory, name):
            try:
                os.unlink(os.path.join(directory, name))
                n += 1
            except FileNotFoundError:
                pass
    return n


def _replaced_txn_index(directory: str, name: str) -> bool:
    """Whether ``name`` is the aborted-transaction index of a segment whose log is gone (a swap replaced it:
    see :data:`_UNLINKED_SUFFIXES`). A segment's log is created before its index and goes only by maintenance
    (which the caller excludes), so a live index's log exists when looked for now, even if the directory
    listing, made while appends may roll, missed it."""
    stem = name[:-len(TXN_INDEX_SUFFIX)]
    return name.endswith(TXN_INDEX_SUFFIX) and len(stem) == 20 and stem.isdigit() \
        and not os.path.exists(os.path.join(directory, stem + LOG_SUFFIX))


def roll_forward(directory: str, groups: Swap) -> None:
    """Finish a committed swap; idempotent, so a crash during it is finished by the next open.

    Each group's new log is renamed in before the segments it replaces are unlinked, so a reader listing
    the directory meanwhile always finds every surviving offset in some segment.
    """
    for new_base, old_bases in groups:
        if new_base >= 0:
            for suffix in SEGMENT_SUFFIXES:
                src = segment_path(directory, new_base, suffix + SWAP_SUFFIX)
                if os.path.exists(src):
                    os.replace(src, segment_path(directory, new_base, suffix))
        for base in old_bases:
            if base == new_base:
                continue
            for suffix in _UNLINKED_SUFFIXES:
                try:
                    os.unlink(segment_path(directory, base, suffix))
                except FileNotFoundError:
                    pass
    fsync_dir(directory)


def finish_interrupted_swap(directory: str) -> None:
    """At writer open (under the writer lock): roll a committed swap forward, and delete uncommitted
    cleaner output (roll back) and interrupted temporary files."""
    manifest = read_manifest(directory)
    changed = manifest is not None
    if manifest is not None:
        log.warning("%s: finishing a compaction swap interrupted by a crash (%d group(s))", directory,
                    len(manifest))
        roll_forward(directory, manifest)
        os.unlink(os.path.join(directory, SWAP_MANIFEST_FILE))
    if remove_leftovers(directory, temporaries=True):
        log.info("%s: removed unfinished compaction output", directory)
        changed = True
    if changed:  # every writer open passes here: with nothing done there is nothing to make durable
        fsync_dir(directory)
