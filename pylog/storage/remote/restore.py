"""A store's files beyond its partitions, in the bucket and back: shipping the store marker, each topic's
``topic.json`` and the groups' committed offsets (:mod:`.group_offsets`), and restoring a whole store
directory from a location.

Invariants:
- The store marker and ``topic.json`` are shipped byte for byte (each carries its own CRC, which the store
  checks when it opens the restored copy); these and the group offsets are replaced in the bucket only
  conditionally (``If-Match`` on the version read) and only when they changed, so two shippers never
  interleave halves of two versions.
- :func:`restore_store` returns the shipped group offsets, checked, without writing them: committing them
  into the restored store's ``__consumer_offsets`` takes a store (:func:`pylog.restore.restore` does it).
- :func:`restore_store` writes only into an absent or empty directory, and each partition as
  :meth:`RemoteLog.restore <pylog.storage.remote.remote_log.RemoteLog.restore>` does: every file checked
  against the manifest before it is renamed into place, the checkpoint dirty so the first writer
  re-validates every batch. A partition never shipped is restored empty; what was appended after the last
  shipped segment (the unshipped tail) is not in the bucket and is not restored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ...errors import RemoteDataCorruptError, RemoteObjectMissingError, StorePathError
from ..fileio import atomic_write, fsync_dir
from ..filenames import STORE_FILE, TOPIC_FILE, valid_topic_name
from .download import stub_partition
from .group_offsets import MAX_GROUP_OFFSETS_BYTES, GroupOffsets, decode_group_offsets
from .layout import GROUP_OFFSETS, STORE_MARKER, manifest_name, topic_file
from .objects import ObjectStore
from .remote_log import RemoteLog

__all__ = ["ship_store_metadata", "restore_store", "RestoredStore"]

#: The store marker and a topic.json are small JSON documents; larger objects are refused as damage.
_MAX_METADATA_BYTES = 1 << 20


@dataclass
class RestoredStore:
    """What :func:`restore_store` rebuilt: per topic, per partition, the offsets restored ``[start, end)``."""

    directory: str
    partitions: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    #: The groups' committed offsets as last shipped (empty when none were).
    group_offsets: GroupOffsets = field(default_factory=dict)


def ship_store_metadata(objects: ObjectStore, root: str, topics: list[str], group_offsets: bytes | None = None) -> int:
    """Ship the store marker of the store at ``root``, the ``topic.json`` of each of ``topics`` and (when given)
    the group offsets object (:func:`~.group_offsets.encode_group_offsets`) where the bucket's copy differs.
    Returns how many objects were written.

    :raises RemoteConflictError: when another process changed one of them meanwhile.
    """
    written = 0
    files = [(STORE_MARKER, _read_small(os.path.join(root, STORE_FILE)), _MAX_METADATA_BYTES)]
    files += [(topic_file(t), _read_small(os.path.join(root, t, TOPIC_FILE)), _MAX_METADATA_BYTES) for t in topics]
    if group_offsets is not None:
        files.append((GROUP_OFFSETS, group_offsets, MAX_GROUP_OFFSETS_BYTES))
    for name, local, bound in files:
        try:
            remote, etag = objects.get(name, max_bytes=bound)
        except RemoteObjectMissingError:
            remote, etag = None, None
        if remote == local:
            continue
        objects.put_replacing(name, local, etag)  # only over the version compared (or where there is none)
        written += 1
    return written


def _read_small(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(_MAX_METADATA_BYTES + 1)


def restore_store(objects: ObjectStore, directory: str, attach: bool = False) -> RestoredStore:
    """Rebuild the store shipped to ``objects`` in ``directory`` (absent or empty): the marker, every topic's
    ``topic.json`` and every partition (:meth:`RemoteLog.restore`).

    With ``attach``, the partitions are not downloaded: each gets only an empty segment at its remote log end
    and a clean checkpoint with its log start there (:func:`~.download.stub_partition`), so a read-only store
    opened on ``directory`` with the location reads every shipped offset from the bucket (a read-only attach:
    ``pylog.attach``), as of the manifests read now.

    :raises StorePathError: when ``directory`` holds files.
    :raises RemoteObjectMissingError: when the location holds no store marker.
    :raises RemoteDataCorruptError: when a shipped file does not check.
    """
    os.makedirs(directory, exist_ok=True)
    if os.listdir(directory):
        raise StorePathError(f"restore needs an empty directory, {directory} holds files (a restore that failed "
                             "leaves its checked files and no store marker: remove the directory and run it again)")
    marker = _get_metadata(objects, STORE_MARKER)
    result = RestoredStore(directory)
    for topic in sorted(objects.folders("")):
        if not valid_topic_name(topic) or objects.head(topic_file(topic)) is None:
            continue  # not a topic this store shipped
        raw = _get_metadata(objects, topic_file(topic))
        partitions = _partition_count(raw, objects.url(topic_file(topic)))
        os.makedirs(os.path.join(directory, topic))
        result.partitions[topic] = {}
        for p in range(partitions):
            target = os.path.join(directory, topic, str(p))
            if attach:
                m = RemoteLog(objects, topic, p).manifest()
                stub_partition(m, target)
                result.partitions[topic][p] = (m.log_start_offset, m.end_offset)
                continue
            if objects.head(manifest_name(topic, p)) is None:
                os.makedirs(target)  # never shipped: restored empty
                result.partitions[topic][p] = (0, 0)
                continue
            m = RemoteLog(objects, topic, p).restore(target)
            result.partitions[topic][p] = (m.log_start_offset, m.end_offset)
        atomic_write(os.path.join(directory, topic, TOPIC_FILE), raw)
    if objects.head(GROUP_OFFSETS) is not None:
        raw, _ = objects.get(GROUP_OFFSETS, max_bytes=MAX_GROUP_OFFSETS_BYTES)
        result.group_offsets = decode_group_offsets(raw, objects.url(GROUP_OFFSETS))
    atomic_write(os.path.join(directory, STORE_FILE), marker)  # last: a half-restored directory is no store
    fsync_dir(directory)
    return result


def _get_metadata(objects: ObjectStore, name: str) -> bytes:
    if objects.head(name) is None:
        raise RemoteObjectMissingError("no such object: nothing was shipped here", objects.url(name))
    raw, _ = objects.get(name, max_bytes=_MAX_METADATA_BYTES)
    return raw


def _partition_count(raw: bytes, where: str) -> int:
    """The partition count of a shipped ``topic.json`` (the store checks the rest, CRC included, on open)."""
    try:
        doc = json.loads(raw)
        count = doc["partitions"]
    except (ValueError, TypeError, KeyError):
        raise RemoteDataCorruptError("topic.json is not a topic file", where, 0) from None
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1_000_000:
        raise RemoteDataCorruptError(f"topic.json names {count!r:.40} partitions", where, 0)
    return count
