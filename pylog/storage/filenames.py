"""Every file-name rule of a store, in one place.

A segment is named by its base offset, zero-padded to 20 digits (Kafka's rule), so a directory listing
sorts segments by offset. Suffixes mark a file's role and, for the compaction swap, its state.

Topic names and the store root. A topic is the directory ``<store>/<name>``, next to pylog's own entries
in the root. Invariants:

- Every entry pylog itself keeps in the store root is one of :data:`ROOT_FILES`, a temporary file of one
  of them (``<file>.<pid>-<thread>.tmp``, see :func:`pylog.storage.fileio.atomic_write`), a name starting with
  :data:`INTERNAL_PREFIX` (``__consumer_offsets``, ``__consumer_groups``, ``__cleaners``, ``__acls``, ``__quotas``,
  ``__transaction_state``, ``__transactions``), or a name
  starting with ``.`` (``.deleting-*``, a topic being deleted). A new root entry must fit one of these.
- A user topic name is Kafka's (1..249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..``) minus those four
  kinds, so it can never be taken for, or overwrite, any of pylog's entries, and never leaves the root.
- Every name pylog derives from a topic name (the ``.deleting-`` rename target, a group's partition
  owner lock file) fits :data:`NAME_MAX`.
- Legacy topics: stores written by versions before this rule let users create any name matching
  ``^[A-Za-z0-9._-]{1,249}$`` (which, through ``$``, also allowed one trailing newline) other than ``.``,
  ``..`` and the three internal names, e.g. ``.hidden``, ``__metrics`` or ``producer.ids.bak``. Such a
  topic that already exists (its ``topic.json`` is there) stays usable -- listed, opened, read, written,
  deleted (:func:`legacy_topic_name`) -- but no new topic is created under such a name. Excepted: pylog's
  own entries (:data:`ROOT_FILES`, :data:`INTERNAL_NAMES`) and deletion leftovers (:func:`is_deletion_leftover`);
  a legacy topic whose name happens to be exactly ``.deleting-<anything>-<32 hex digits>`` is taken for a
  leftover and removed when the store is opened (not supported).
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import InvalidGroupError, StorePathError

__all__ = [
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIMEINDEX_SUFFIX", "TXN_INDEX_SUFFIX", "CLEANED_SUFFIX", "SWAP_SUFFIX",
    "DELETED_SUFFIX",
    "TMP_SUFFIX", "LOCK_FILE", "WANT_FILE", "CHECKPOINT_FILE", "CLEANER_CHECKPOINT_FILE", "SWAP_MANIFEST_FILE",
    "TOPIC_FILE",
    "STORE_FILE", "PRODUCER_IDS_FILE", "ACLS_FILE", "QUOTAS_FILE", "ROOT_FILES", "DELETING_PREFIX", "INTERNAL_PREFIX",
    "NAME_MAX",
    "MAX_TOPIC_LENGTH", "TOPIC_NAME_RULE",
    "segment_stem", "segment_path", "parse_base_offset", "list_segment_bases", "valid_topic_name",
    "legal_name", "topic_name_problem", "is_internal_topic", "deleting_name", "INTERNAL_NAMES",
    "legacy_topic_name", "is_deletion_leftover", "check_group_id",
    "OFFSETS_TOPIC", "GROUPS_DIR", "NOTIFY_FILE", "CLEANERS_DIR", "TRANSACTION_STATE_TOPIC", "TRANSACTIONS_DIR",
    "COORDINATOR_EPOCH_FILE", "TRANSIENT_TOPICS", "SEGMENT_SNAPSHOT_SUFFIX", "list_segment_snapshots",
    "remove_segment_snapshots", "refuse_bucket_path",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
#: A segment's aborted-transaction index (pylog/storage/txn_index.py): only once an abort was written there.
TXN_INDEX_SUFFIX = ".txnindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"
#: ``<end offset>.snapshot``: the producer snapshot written when the segment ending there rolled, kept (for
#: topics with tiered storage) until that segment is shipped with it (Kafka keeps one per segment alike).
SEGMENT_SNAPSHOT_SUFFIX = ".snapshot"

LOCK_FILE = ".lock"
#: Writers waiting for a partition hold a shared flock on it: the holder hands over
#: (PartitionInternals.handover_wanted).
WANT_FILE = ".want"
CHECKPOINT_FILE = "partition.checkpoint"
#: The log cleaner's per-partition state: the horizons of its cleanings (the last one is the first dirty offset).
CLEANER_CHECKPOINT_FILE = "cleaner.checkpoint"
#: Present only while a compaction swap is committed but not finished: names the group being replaced.
SWAP_MANIFEST_FILE = "cleaner.swap"
TOPIC_FILE = "topic.json"
STORE_FILE = "pylog.store"
#: A partition's shared wake-up counter (pylog/storage/notify.py).
NOTIFY_FILE = "notify"
#: The consumer groups' committed offsets (a compacted topic) and their membership directories.
OFFSETS_TOPIC = "__consumer_offsets"
GROUPS_DIR = "__consumer_groups"
#: The transaction coordinator's state (a compacted topic, Kafka's name) and its lock directory: one lock file
#: per transactional id and the coordinator epoch counter (pylog/clients/transactions.py).
TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTIONS_DIR = "__transactions"
COORDINATOR_EPOCH_FILE = "coordinator.epoch"
#: Internal topics every process appends to in turn (take the writer lock, append, hand it back).
TRANSIENT_TOPICS = (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
#: Each process's cleaner status and liveness lock (pylog/maintenance/cleaner_registry.py).
CLEANERS_DIR = "__cleaners"
#: The ACLs of ``pylog serve``'s authorizer (pylog/storage/acl_file.py): a file, reserved like the names above.
ACLS_FILE = "__acls"
#: The client quotas AlterClientQuotas set in ``pylog serve`` (pylog/storage/quota_file.py): a file, reserved too.
QUOTAS_FILE = "__quotas"
#: The store-wide producer id counter (Store.new_producer_id).
PRODUCER_IDS_FILE = "producer.ids"
#: The files pylog keeps in the store root (see the invariants above).
ROOT_FILES = (STORE_FILE, PRODUCER_IDS_FILE)
#: A topic being deleted is renamed to ``.deleting-...`` first; opening a store removes such leftovers.
DELETING_PREFIX = ".deleting-"
#: Prefix of the names pylog keeps for its own topics and directories; users cannot create topics named so.
INTERNAL_PREFIX = "__"
#: pylog's own entries with that prefix; no user (nor legacy) topic can be written, altered or deleted so.
INTERNAL_NAMES = (OFFSETS_TOPIC, GROUPS_DIR, CLEANERS_DIR, ACLS_FILE, QUOTAS_FILE, TRANSACTION_STATE_TOPIC,
                  TRANSACTIONS_DIR)
#: Longest file name (bytes) of Linux file systems (ext4, xfs, btrfs, tmpfs).
NAME_MAX = 255
#: Kafka's longest topic name.
MAX_TOPIC_LENGTH = 249
#: The rule, as error messages and the docs state it.
TOPIC_NAME_RULE = (f"1-{MAX_TOPIC_LENGTH} of [A-Za-z0-9._-], not starting with '.' or '{INTERNAL_PREFIX}', "
                   f"and not {' or '.join(ROOT_FILES)} (nor one of those followed by '.')")

# fullmatch: '$' would also match before a trailing newline.
_LEGAL_RE = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_TOPIC_LENGTH)
# The rule of earlier versions: re.match(r"^[A-Za-z0-9._-]{1,249}$"), whose '$' let one trailing newline in.
_OLD_LEGAL_RE = re.compile(r"[A-Za-z0-9._-]{1,%d}\n?" % MAX_TOPIC_LENGTH)
# What deleting_name makes (a uuid4().hex token), and what earlier versions made (the same, untruncated).
_LEFTOVER_RE = re.compile(re.escape(DELETING_PREFIX) + r".+-[0-9a-f]{32}", re.DOTALL)


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


def refuse_bucket_path(path: str) -> str:
    """``path``, unless it is a bucket's location (``s3://``, ``s3a://``), which is refused rather than made a
    directory ``s3:``. :raises StorePathError:"""
    if path.lower().startswith(("s3://", "s3a://")):
        raise StorePathError(f"{path}: a bucket is not a store directory; pylog.attach(location) reads what a "
                             "store shipped there, pylog.restore(location, directory) copies it")
    return path


def list_segment_snapshots(directory: str) -> list[int]:
    """Sorted end offsets of the ``<end offset>.snapshot`` files in ``directory``."""
    n = len(SEGMENT_SNAPSHOT_SUFFIX)
    ends = [int(name[:20]) for name in os.listdir(directory) if len(name) == 20 + n
            and name.endswith(SEGMENT_SNAPSHOT_SUFFIX) and name.isascii() and name[:20].isdigit()]
    ends.sort()
    return ends


def remove_segment_snapshots(directory: str, through: int) -> int:
    """Remove the ``<end offset>.snapshot`` files with ``end offset <= through`` (their segments were shipped or
    deleted); returns how many went."""
    gone = 0
    for end in list_segment_snapshots(directory):
        if end > through:
            break
        try:
            os.unlink(segment_path(directory, end, SEGMENT_SNAPSHOT_SUFFIX))
            gone += 1
        except FileNotFoundError:
            pass
    return gone


def list_segment_bases(directory: str) -> list[int]:
    """Sorted base offsets of the ``.log`` files in ``directory``."""
    bases = [int(name[:20]) for name in os.listdir(directory) if _is_segment_log(name)]
    bases.sort()
    return bases


def legal_name(name: object) -> bool:
    """Kafka's topic rule: ``[A-Za-z0-9._-]``, 1..249 characters, not ``.`` or ``..``. Such a name is one
    safe path component (it never leaves its directory); it may still be one of pylog's root entries."""
    return isinstance(name, str) and _LEGAL_RE.fullmatch(name) is not None and name not in (".", "..")


def is_internal_topic(name: object) -> bool:
    """Whether ``name`` is one of pylog's own entries (:data:`INTERNAL_NAMES`: ``__consumer_offsets`` and
    the directories next to it). Other ``__``-names cannot be created (:func:`topic_name_problem`); one
    that exists is a legacy user topic (:func:`legacy_topic_name`)."""
    return isinstance(name, str) and name in INTERNAL_NAMES


def is_deletion_leftover(name: object) -> bool:
    """Whether ``name`` is what :func:`deleting_name` makes (``.deleting-<topic>-<32 hex digits>``): a
    topic directory whose deletion was interrupted, removed when the store is opened."""
    return isinstance(name, str) and _LEFTOVER_RE.fullmatch(name) is not None


def legacy_topic_name(name: object) -> bool:
    """Whether ``name`` is refused for new topics but was a legal topic name in earlier versions, so that
    stores they wrote may hold such a topic (see the module docstring): the store opens, reads, writes and
    deletes an existing one. False for names that are fine today."""
    return (isinstance(name, str) and _OLD_LEGAL_RE.fullmatch(name) is not None and name not in (".", "..")
            and topic_name_problem(name) is not None and name not in INTERNAL_NAMES and name not in ROOT_FILES
            and not is_deletion_leftover(name))


def topic_name_problem(name: object, internal_ok: bool = False) -> str | None:
    """What is wrong with ``name`` as a topic name, or None when it is fine. ``internal_ok`` lets
    :data:`INTERNAL_NAMES` through (pylog's own topics, which may be opened and read but not made by users)."""
    if not legal_name(name):
        return f"invalid topic name {name!r}: use {TOPIC_NAME_RULE}"
    assert isinstance(name, str)
    if name.startswith("."):
        return f"invalid topic name {name!r}: names starting with '.' are pylog's (e.g. topics being deleted); " \
               f"use {TOPIC_NAME_RULE}"
    if name.startswith(INTERNAL_PREFIX) and not (internal_ok and is_internal_topic(name)):
        return f"{name!r} is reserved for pylog's own use (the {INTERNAL_PREFIX!r} prefix); use {TOPIC_NAME_RULE}"
    for f in ROOT_FILES:
        if name == f or name.startswith(f + "."):
            return f"invalid topic name {name!r}: {f} is a file of the store itself; use {TOPIC_NAME_RULE}"
    return None


def valid_topic_name(name: object) -> bool:
    """Whether a user may create a topic ``name`` (see :func:`topic_name_problem` and :data:`TOPIC_NAME_RULE`)."""
    return topic_name_problem(name) is None


def deleting_name(topic: str, token: str) -> str:
    """The name a topic's directory is renamed to while it is deleted: ``.deleting-<topic>-<token>``, the
    topic part shortened so that the whole fits :data:`NAME_MAX` (a 249-character topic must be deletable)."""
    room = NAME_MAX - len(DELETING_PREFIX) - 1 - len(token)
    return f"{DELETING_PREFIX}{topic[:room]}-{token}"


def check_group_id(group_id: Any) -> str:
    """``group_id`` when it is usable, else :class:`~pylog.errors.InvalidGroupError`: a non-empty str that
    UTF-8 can encode (commit keys and the group's state file store it as UTF-8)."""
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupError(f"group_id must be a non-empty str, got {group_id!r}")
    try:
        group_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidGroupError(f"group_id must be a non-empty str that UTF-8 can encode, got {group_id!r} "
                                "(it has a lone surrogate, e.g. from a file name decoded with surrogateescape)") \
            from None
    return group_id
