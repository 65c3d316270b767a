"""A store's directory: the path a store may have, its marker file, the topic directories in it, and the
leftovers of interrupted topic deletions.

:class:`pylog.store.Store` calls these with its path; they hold no state and never see the store.

Invariants:
- A directory is a store when it holds the marker ``pylog.store`` (:data:`~pylog.storage.filenames.STORE_FILE`):
  a JSON document with its format, version and the CRC-32C of both (docs/FORMAT.md). A marker that fails any
  check raises :class:`~pylog.errors.CorruptRecordError`; one is written (atomically) only where none exists
  and the caller allows creating.
- A store's path is a directory, or does not exist yet under directories (:func:`check_store_path`).
- A topic is a directory named by Kafka's rule minus pylog's root entries, or an existing legacy name
  (:func:`~pylog.storage.filenames.legacy_topic_name`), holding ``topic.json``; a name that is neither never
  becomes a path (:func:`topic_dir`), so a topic directory never escapes the store nor takes the place of
  the marker, a deletion leftover or an internal directory.
- Only names exactly as :func:`~pylog.storage.filenames.deleting_name` makes them are removed as leftovers.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil

from ..errors import CorruptRecordError, InvalidTopicError, StorePathError, UnknownStoreError
from .fileio import atomic_write
from .filenames import (OFFSETS_TOPIC, STORE_FILE, TOPIC_FILE, is_deletion_leftover, is_internal_topic,
                        legacy_topic_name, topic_name_problem)
from .records import crc32c

__all__ = ["check_store_path", "check_marker", "remove_leftovers", "is_store", "topic_dir", "topic_names",
           "holds_topic", "check_not_internal", "no_topic_hint"]

_FORMAT = "pylog-store"
_VERSION = 1


def check_store_path(path: str) -> None:
    """A store's path must be a directory or not exist yet, under directories. :raises StorePathError:"""
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return
        probe = parent
    if probe and not os.path.isdir(probe):
        where = "" if probe == path else f" ({probe} is a file)"
        raise StorePathError(f"{path} is not a pylog store: it is not a directory{where}, and a store is one: pass "
                             "the store's directory, or a path that does not exist yet to create one")


def check_marker(path: str, read_only: bool, create: bool) -> None:
    """Check the marker of the store at ``path``; write one where there is none, unless ``read_only`` or not
    ``create``. :raises UnknownStoreError: for a missing marker not to be written. :raises CorruptRecordError:"""
    marker = os.path.join(path, STORE_FILE)
    body = {"format": _FORMAT, "version": _VERSION}
    try:
        with builtins.open(marker, "rb") as f:
            doc = json.loads(f.read(4096))
    except (FileNotFoundError, NotADirectoryError):
        if read_only:
            raise UnknownStoreError(f"no pylog store at {path} (no {STORE_FILE}); a read-only open "
                                    "creates nothing: check the path") from None
        if not create:
            raise UnknownStoreError(f"no pylog store at {path} (no {STORE_FILE}), and create=False: "
                                    "check the path, or open it with pylog.open(path) to create one") from None
        doc = dict(body, crc32c=crc32c(json.dumps(body, sort_keys=True).encode()))
        atomic_write(marker, (json.dumps(doc, sort_keys=True) + "\n").encode())
        return
    except (ValueError, RecursionError):
        raise CorruptRecordError("store marker is not JSON", marker) from None
    if (not isinstance(doc, dict) or doc.get("format") != _FORMAT
            or doc.get("crc32c") != crc32c(json.dumps({k: doc.get(k) for k in body}, sort_keys=True).encode())):
        raise CorruptRecordError("not a pylog store marker (format or checksum)", marker)
    if doc.get("version") != _VERSION:
        raise CorruptRecordError(f"store format version {doc.get('version')} is not supported", marker)


def is_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a pylog store visible from here (its marker file), without opening it."""
    return os.path.isfile(os.path.join(path, STORE_FILE))


def remove_leftovers(path: str) -> None:
    """Finish deletions a crash interrupted: only names exactly as :func:`deleting_name` makes them (a
    legacy topic may be named ``.deleting-orders``)."""
    with os.scandir(path) as it:
        for entry in it:
            if is_deletion_leftover(entry.name) and entry.is_dir():
                shutil.rmtree(entry.path, ignore_errors=True)


def _is_legacy(path: str, name: object) -> bool:
    """An existing topic whose name an earlier version allowed and the current rule refuses."""
    return isinstance(name, str) and legacy_topic_name(name) \
        and os.path.isfile(os.path.join(path, name, TOPIC_FILE))


def topic_dir(path: str, name: str, internal_ok: bool = True) -> str:
    """The directory of topic ``name`` in the store at ``path``. :raises InvalidTopicError: for a name that
    is not a topic's (an existing legacy topic's is, with ``internal_ok``)."""
    problem = topic_name_problem(name, internal_ok)
    if problem is not None and not (internal_ok and _is_legacy(path, name)):
        raise InvalidTopicError(problem)
    return os.path.join(path, name)


def topic_names(path: str) -> list[str]:
    """Names of the topics in the store at ``path`` (whoever created them), sorted."""
    names = []
    with os.scandir(path) as it:
        for entry in it:
            if entry.is_dir() and (topic_name_problem(entry.name, internal_ok=True) is None
                                   or legacy_topic_name(entry.name)) \
                    and os.path.exists(os.path.join(entry.path, TOPIC_FILE)):
                names.append(entry.name)
    return sorted(names)


def holds_topic(path: str, name: object) -> bool:
    """Whether the store at ``path`` has a topic named ``name``."""
    if not isinstance(name, str):  # no topic is named by anything but a str
        return False
    return (topic_name_problem(name, internal_ok=True) is None or legacy_topic_name(name)) and \
        os.path.exists(os.path.join(path, name, TOPIC_FILE))


def check_not_internal(name: str, what: str) -> None:
    """:raises InvalidTopicError: for an internal topic, which cannot be ``what`` ("deleted", "altered")."""
    if is_internal_topic(name):
        hint = "; delete a group's offsets with delete_consumer_group" if name == OFFSETS_TOPIC else ""
        raise InvalidTopicError(f"{name!r} is an internal topic of pylog: it cannot be {what}{hint}")


def no_topic_hint(path: str, name: str) -> str:
    """What a user reads when a topic is missing: how to create it, in code and on the command line."""
    return (f"no topic {name!r} in the store {path}: create it first with store.create_topic({name!r}, "
            f"partitions=1) or `pylog topics create {path} {name} --partitions 1`, or make the producer with "
            "allow_auto_create_topics=True")
