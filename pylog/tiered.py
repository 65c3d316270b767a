"""A store from the bucket it was shipped to (tiered storage, issue 28): rebuilt on disk (:func:`restore`, what
``pylog restore`` runs, exported as ``pylog.restore``), or attached read-only with no local store at all
(:func:`attach`, ``pylog.attach``; what the Spark source opens for an ``s3://`` path).

Invariants:
- Writes only into an absent or empty directory (:func:`pylog.storage.remote.restore_store`: every file
  checked against its manifest before it is renamed into place, the store marker last).
- The groups' committed offsets shipped beside the segments (``group.offsets``) are committed into the
  restored store's ``__consumer_offsets`` once it is a store; a restore interrupted before that leaves a
  store without them: restore again into a new directory.
- An attached store holds no record locally: a private temporary directory with the store marker, the
  topics' files, one empty segment per partition at its remote log end (below which every read falls
  through to the bucket) and the groups' shipped committed offsets, committed there before it is opened
  read-only; it is removed when the store closes. It sees what was shipped when it was
  opened (the manifests then); attach again to see later uploads.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import tempfile
from typing import Any

from .errors import InvalidArgumentError
from .partition import Partition, internals
from .storage.counter import advance_to
from .storage.fileio import write_faults
from .storage.filenames import PRODUCER_IDS_FILE
from .storage.producer_state import ProducerDescription
from .storage.remote import ObjectStore, RestoredStore, restore_store
from .store import Store

__all__ = ["restore", "attach", "AttachedStore", "REMOTE_SCHEME", "is_remote_location"]

log = logging.getLogger("pylog.remote")

#: The scheme of a location in a bucket: boto3's and the AWS CLI's ``s3://bucket/prefix``, the form
#: ``remote.storage.location`` takes (docs/SPARK.md says why not Hadoop's ``s3a://``).
REMOTE_SCHEME = "s3://"


def is_remote_location(path: str) -> bool:
    """Whether ``path`` names a location in a bucket (``s3://...``) rather than a directory."""
    return path[:len(REMOTE_SCHEME)].lower() == REMOTE_SCHEME


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
    restored = restore_store(_objects(location, options), directory)
    with Store(directory, log_cleaner_enable=False) as store:
        # The producer id counter is not shipped: start it past every id the restored partitions remember, or
        # the next producer gets one of theirs, and its batches are taken for duplicates (dropped) or refused.
        producers = [(p, d) for t in store.topics() for p in store.topic(t).partitions
                     for d in internals(p).describe_producers()]
        if producers:
            with write_faults("restoring the producer id counter", "the store's producers may reuse ids"):
                advance_to(os.path.join(directory, PRODUCER_IDS_FILE), "producer id file",
                           max(d.producer_id for _, d in producers) + 1)
        _abort_open_transactions(producers)
        _commit_group_offsets(store, restored)
    return restored


def _commit_group_offsets(store: Store, restored: RestoredStore) -> None:
    """Commit the groups' shipped offsets into the store just restored (or stubbed for an attach)."""
    for group, offsets in sorted(restored.group_offsets.items()):
        store.commit_offsets(group, offsets)


def _abort_open_transactions(producers: list[tuple[Partition, ProducerDescription]]) -> None:
    """Abort the transactions open in the restored partitions. Their coordinator state (``__transaction_state``)
    is not shipped, so nothing would ever end them: each would hold its partition's last stable offset, and
    every read_committed reader, there for good. Whatever ended them in the lost store came after the last
    shipped segment, past the recovery point: aborted, as a coordinator aborts a transaction it has no trace of."""
    marked: dict[int, Partition] = {}
    for p, d in producers:
        if d.current_txn_start_offset < 0:
            continue
        log.warning("restore: aborting the transaction of producer %d left open at offset %d of %s-%d (its "
                    "coordinator state is not shipped)", d.producer_id, d.current_txn_start_offset, p.topic, p.number)
        internals(p).append_marker(d.producer_id, d.producer_epoch, False, max(d.coordinator_epoch, 0))
        marked[id(p)] = p
    for p in marked.values():  # one flush per partition, after all of its markers
        p.flush()


class AttachedStore(Store):
    """A read-only :class:`~pylog.store.Store` over a location in a bucket (see :func:`attach`); closing it
    removes its temporary directory, and so does the interpreter's exit if it was never closed."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        # At exit rather than when collected: a partition or consumer kept after the store was dropped still
        # reads from the directory.
        self._remove_at_exit = functools.partial(shutil.rmtree, self.path, True)
        atexit.register(self._remove_at_exit)

    @property
    def read_only_reason(self) -> str:
        return f"the store attached from {self.settings['remote.storage.location']} (pylog.attach) is read-only"

    @property
    def read_only_remedy(self) -> str:
        return "pylog.restore(location, directory) copies it into a store that can"

    def close(self) -> None:
        try:
            super().close()
        finally:
            atexit.unregister(self._remove_at_exit)
            shutil.rmtree(self.path, ignore_errors=True)


def attach(location: str, **options: Any) -> AttachedStore:
    """Open the store shipped to ``location`` (``s3://bucket/prefix``) read-only, with no local store:
    ``read``, ``read_columns``, consumers and the Spark source read every shipped offset from the bucket,
    CRC-checked, through the read cache. It sees what was shipped when it was opened, the groups' committed
    offsets included (``committed_offsets``; a consumer with a ``group_id`` and ``enable_auto_commit=False``
    that calls ``assign()`` starts at them). Nothing can be written: joining a group, committing,
    producing raise :class:`~pylog.errors.ReadOnlyStoreError` naming the attach.

    :param options: ``remote.storage.*`` settings other than the location, and store settings, as
        :func:`pylog.open` takes them (``remote_storage_endpoint_url=...``).
    :raises RemoteObjectMissingError: when nothing was shipped to ``location``.
    :raises RemoteStorageError: when the bucket cannot be read.
    """
    if not is_remote_location(location):
        raise InvalidArgumentError(f"attach takes a location s3://bucket/prefix, got {location!r:.200}")
    directory = tempfile.mkdtemp(prefix="pylog-attach-")
    try:
        restored = restore_store(_objects(location, options), directory, attach=True)
        if restored.group_offsets:
            with Store(directory, log_cleaner_enable=False) as store:
                _commit_group_offsets(store, restored)
        return AttachedStore(directory, read_only=True, remote_storage_location=location,
                             **{"log_cleaner_enable": False, **options})
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _objects(location: str, options: dict[str, Any]) -> ObjectStore:
    """The bucket of ``location`` with the ``remote.storage.*`` settings among ``options`` (pylog.open's names)."""
    settings = {name: v for k, v in options.items() if (name := k.replace("_", ".")).startswith("remote.storage.")}
    settings["remote.storage.location"] = location
    return ObjectStore.from_settings(settings)
