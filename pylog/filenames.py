"""Every file-name rule of a store, in one place.

A segment is named by its base offset, zero-padded to 20 digits (Kafka's rule), so a directory listing
sorts segments by offset. Suffixes mark a file's role and, for the compaction swap, its state.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIMEINDEX_SUFFIX", "CLEANED_SUFFIX", "SWAP_SUFFIX", "DELETED_SUFFIX",
    "TMP_SUFFIX", "LOCK_FILE", "WANT_FILE", "CHECKPOINT_FILE", "CLEANER_CHECKPOINT_FILE", "SWAP_MANIFEST_FILE", "TOPIC_FILE",
    "STORE_FILE",
    "segment_stem", "segment_path", "parse_base_offset", "list_segment_bases", "valid_topic_name",
    "OFFSETS_TOPIC", "GROUPS_DIR", "NOTIFY_FILE", "CLEANERS_DIR",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"

LOCK_FILE = ".lock"
#: Writers waiting for a partition hold a shared flock on it: the holder hands over (Partition.handover_wanted).
WANT_FILE = ".want"
CHECKPOINT_FILE = "partition.checkpoint"
#: The log cleaner's per-partition state: the horizons of its cleanings (the last one is the first dirty offset).
CLEANER_CHECKPOINT_FILE = "cleaner.checkpoint"
#: Present only while a compaction swap is committed but not finished: names the group being replaced.
SWAP_MANIFEST_FILE = "cleaner.swap"
TOPIC_FILE = "topic.json"
STORE_FILE = "pylog.store"
#: A partition's shared wake-up counter (pylog/notify.py).
NOTIFY_FILE = "notify"
#: The consumer groups' committed offsets (a compacted topic) and their membership directories.
OFFSETS_TOPIC = "__consumer_offsets"
GROUPS_DIR = "__consumer_groups"
#: Each process's cleaner status and liveness lock (pylog/cleaner_registry.py).
CLEANERS_DIR = "__cleaners"

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def segment_stem(base_offset: int) -> str:
    """``00000000000000000042`` for base offset 42."""
    return f"{base_offset:020d}"


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    """Path of the file with ``suffix`` for the segment at ``base_offset`` in ``directory``."""
    return os.path.join(directory, segment_stem(base_offset) + suffix)


def _is_segment_log(name: str) -> bool:
    # String tests, not a regex: a partition of thousands of segments is listed each time a writer takes
    # its turn.
    return len(name) == 24 and name.endswith(LOG_SUFFIX) and name.isascii() and name[:20].isdigit()


def parse_base_offset(name: str) -> int | None:
    """Base offset of a ``.log`` file name, or None for any other name."""
    return int(name[:20]) if _is_segment_log(name) else None


def list_segment_bases(directory: str) -> list[int]:
    """Sorted base offsets of the ``.log`` files in ``directory``."""
    bases = [int(name[:20]) for name in os.listdir(directory) if _is_segment_log(name)]
    bases.sort()
    return bases


def valid_topic_name(name: str) -> bool:
    """Kafka's rule: ``[A-Za-z0-9._-]``, 1..249 characters, not ``.`` or ``..``; so no name leaves the store."""
    return isinstance(name, str) and bool(_TOPIC_RE.match(name)) and name not in (".", "..")
