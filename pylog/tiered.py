"""A store rebuilt from the bucket it was shipped to (tiered storage, issue 28): :func:`restore`, what
``pylog restore`` runs, exported as ``pylog.restore``.

Invariants:
- Writes only into an absent or empty directory (:func:`pylog.storage.remote.restore_store`: every file
  checked against its manifest before it is renamed into place, the store marker last).
- The groups' committed offsets shipped beside the segments (``group.offsets``) are committed into the
  restored store's ``__consumer_offsets`` once it is a store; a restore interrupted before that leaves a
  store without them: restore again into a new directory.
"""

from __future__ import annotations

from typing import Any

from .storage.remote import ObjectStore, RestoredStore, restore_store
from .store import Store

__all__ = ["restore"]


def restore(location: str, directory: str, **options: Any) -> RestoredStore:
    """Rebuild the store shipped to ``location`` (``s3://bucket/prefix``) in ``directory`` (absent or empty):
    topics and their configurations, every shipped segment with its indexes, aborted-transaction indexes and
    the latest producer snapshot, and the groups' committed offsets. What was appended after the last shipped
    segment is not in the bucket and not restored (docs/GUARANTEES.md, the recovery point objective).

    :param options: the ``remote.storage.*`` settings other than the location, as :func:`pylog.open` takes
        them (``remote_storage_endpoint_url=...``, ``remote_storage_region=...``).
    :raises StorePathError: when ``directory`` holds files.
    :raises RemoteObjectMissingError: when nothing was shipped to ``location``.
    :raises RemoteDataCorruptError: when a shipped file does not check. :raises RemoteStorageError:
    """
    settings = {k.replace("_", "."): v for k, v in options.items()}
    settings["remote.storage.location"] = location
    restored = restore_store(ObjectStore.from_settings(settings), directory)
    if restored.group_offsets:
        with Store(directory, log_cleaner_enable=False) as store:
            for group, offsets in sorted(restored.group_offsets.items()):
                store.commit_offsets(group, offsets)
    return restored
