"""What a client may use of the store it is handed: :class:`StoreView`.

The store (:class:`pylog.store.Store`) sits above the clients: it makes producers, consumers and the
committed-offsets table and hands each the store object and what else it needs (its quota manager, its
committed offsets, a way to create the internal offsets topic). A client never imports :mod:`pylog.store`;
it types its store as this protocol, which names the store's public members the clients call, so the
import graph stays layered (``lint-imports``) and a client cannot reach into the store's internals.

:class:`AutoCreatingStore` is the store as a producer made with ``allow_auto_create_topics`` sees it.

Invariants: every member listed here is public API of :class:`pylog.store.Store`, documented there; an
:class:`AutoCreatingStore` passes every call to its store, and only a lookup of a missing topic differs (it
creates the topic).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Protocol

from ..errors import TopicExistsError, UnknownTopicError
from ..topic import Topic

__all__ = ["StoreView", "CreatingStore", "AutoCreatingStore", "internal_topic", "CreateInternalTopic"]

#: The store's logger: a topic created on a lookup is the store's doing.
log = logging.getLogger("pylog.store")

#: The store's way of creating one of its internal topics (which its public ``create_topic`` refuses):
#: ``(name, partitions, config) -> Topic``.
CreateInternalTopic = Callable[[str, int, Mapping[str, Any]], Topic]
#: segment.index.bytes of the internal compacted topics every process appends to in turn: their segments are
#: small, and each append re-opens the active segment's indexes as a writer, which costs in proportion to
#: their size; index entries are dense (every 512 bytes) so that re-opening scans few batches past the last.
_INTERNAL_INDEX_BYTES = 64 * 1024


def internal_topic(store: "StoreView", create: CreateInternalTopic, name: str, prefix: str) -> Topic:
    """The internal compacted topic ``name``, created on first use with the store settings
    ``<prefix>.num.partitions`` and ``<prefix>.segment.bytes`` (another process may create it first)."""
    try:
        return store.topic(name)
    except UnknownTopicError:
        settings = store.settings
        try:
            return create(name, settings[prefix + ".num.partitions"],
                          {"cleanup.policy": "compact", "segment.bytes": settings[prefix + ".segment.bytes"],
                           "segment.index.bytes": _INTERNAL_INDEX_BYTES, "index.interval.bytes": 512})
        except TopicExistsError:  # another process created it first
            return store.topic(name)


class StoreView(Protocol):
    """The public part of :class:`pylog.store.Store` the clients use."""

    #: The store's directory (absolute).
    path: str
    #: Opened with ``read_only=True``: every writing call raises ReadOnlyStoreError.
    read_only: bool

    @property
    def read_only_reason(self) -> str:
        """What makes the store read-only, for messages ("the store DIR was opened with read_only=True")."""
        ...

    @property
    def settings(self) -> dict[str, Any]:
        """Store-level settings (e.g. ``offsets.topic.num.partitions``)."""
        ...

    @property
    def closed(self) -> bool:
        """Whether the store was closed."""
        ...

    def __contains__(self, name: object) -> bool:
        """Whether the store has a topic of that name."""
        ...

    def topic(self, name: str) -> Topic:
        """The named topic. :raises UnknownTopicError:"""
        ...

    def topics(self) -> list[str]:
        """Names of the topics in the store, sorted."""
        ...

    def new_producer_id(self) -> int:
        """A producer id no other producer of this store has had, in any process."""
        ...


class CreatingStore(StoreView, Protocol):
    """A store that also creates topics (:class:`pylog.store.Store`), for :class:`AutoCreatingStore`."""

    def create_topic(self, name: str, partitions: int = 1) -> Topic:
        """Create a topic. :raises TopicExistsError:"""
        ...


class AutoCreatingStore:
    """``store`` as a producer made with ``allow_auto_create_topics`` sees it (a :class:`StoreView`):
    looking up a missing topic creates it with the store's ``num.partitions``. Two producers racing to
    create one topic both end up with the same topic."""

    def __init__(self, store: CreatingStore) -> None:
        self._store = store
        self.path = store.path
        self.read_only = store.read_only

    @property
    def settings(self) -> dict[str, Any]:
        return self._store.settings

    @property
    def read_only_reason(self) -> str:
        return self._store.read_only_reason

    @property
    def closed(self) -> bool:
        return self._store.closed

    def __contains__(self, name: object) -> bool:
        return name in self._store

    def topic(self, name: str) -> Topic:
        try:
            return self._store.topic(name)
        except UnknownTopicError:
            try:
                topic = self._store.create_topic(name, self._store.settings["num.partitions"])
            except TopicExistsError:  # another producer (or process) created it meanwhile
                return self._store.topic(name)
            log.info("created topic %r with %d partition(s) (allow_auto_create_topics)", name, topic.num_partitions)
            return topic

    def topics(self) -> list[str]:
        return self._store.topics()

    def new_producer_id(self) -> int:
        return self._store.new_producer_id()
