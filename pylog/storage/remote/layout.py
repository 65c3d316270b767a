"""Object names of tiered storage: where each shipped file lives under a location (``s3://bucket/prefix``).

The bucket mirrors the store directory (docs/FORMAT.md, "Tiered storage objects")::

    <prefix>/pylog.store                                   the store marker, as on disk
    <prefix>/group.offsets                                 the groups' committed offsets (PLGO)
    <prefix>/<topic>/topic.json                            the topic's file, as on disk
    <prefix>/<topic>/<partition>/remote.manifest           the partition's remote manifest (PLRM)
    <prefix>/<topic>/<partition>/<base>-<crc>.log          a shipped segment's log, byte for byte
    <prefix>/<topic>/<partition>/<base>-<crc>.index        its sealed offset index
    <prefix>/<topic>/<partition>/<base>-<crc>.timeindex    its sealed time index
    <prefix>/<topic>/<partition>/<base>-<crc>.snapshot     the producer snapshot as of its end (optional)
    <prefix>/<topic>/<partition>/<base>-<crc>.txnindex     its aborted-transaction index (when it has entries)

``<base>`` is the segment's base offset, 20 digits, and ``<crc>`` the CRC-32C of its log file, 8 lower-case
hex digits. The name is deterministic (a re-upload after a crash writes the same keys, so it is
idempotent) and differs for different content at one base offset (a segment rewritten elsewhere never
replaces a shipped object that a manifest names).

Invariants: names are built and parsed only here; every name is relative to the location's prefix
(:meth:`pylog.storage.remote.objects.ObjectStore.key` adds it).
"""

from __future__ import annotations

from ..filenames import STORE_FILE
from ..filenames import TOPIC_FILE as _TOPIC_FILE
from ..filenames import segment_stem

__all__ = ["STORE_MARKER", "TOPIC_FILE", "MANIFEST", "GROUP_OFFSETS", "SEGMENT_SUFFIXES", "topic_file",
           "partition_prefix", "manifest_name", "segment_object", "parse_segment_object"]

STORE_MARKER = STORE_FILE
TOPIC_FILE = _TOPIC_FILE
MANIFEST = "remote.manifest"
#: The groups' committed offsets: an object at the prefix, where topics are folders (so never taken for one).
GROUP_OFFSETS = "group.offsets"
#: The files of one shipped segment, in upload order (the log first: the rest are worthless without it).
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".snapshot", ".txnindex")


def topic_file(topic: str) -> str:
    return f"{topic}/{TOPIC_FILE}"


def partition_prefix(topic: str, partition: int) -> str:
    return f"{topic}/{partition}/"


def manifest_name(topic: str, partition: int) -> str:
    return partition_prefix(topic, partition) + MANIFEST


def segment_object(topic: str, partition: int, base_offset: int, log_crc: int, suffix: str) -> str:
    """Name of one file of a shipped segment (``suffix`` one of :data:`SEGMENT_SUFFIXES`)."""
    return f"{partition_prefix(topic, partition)}{segment_stem(base_offset)}-{log_crc:08x}{suffix}"


def parse_segment_object(name: str) -> tuple[int, int, str] | None:
    """``(base offset, log CRC, suffix)`` of a name :func:`segment_object` made (the last path part), or
    None for any other name."""
    leaf = name.rpartition("/")[2]
    stem, dot, ext = leaf.partition(".")
    if len(stem) != 29 or stem[20] != "-" or not stem[:20].isdigit() or "." + ext not in SEGMENT_SUFFIXES:
        return None
    try:
        crc = int(stem[21:], 16)
    except ValueError:
        return None
    if stem[21:] != f"{crc:08x}":
        return None
    return int(stem[:20]), crc, dot + ext
