"""The clients: producer, consumer, consumer groups (with their assignors), partitioner and quotas.

Modules: :mod:`~pylog.clients.producer`, :mod:`~pylog.clients.consumer`, :mod:`~pylog.clients.groups`,
:mod:`~pylog.clients.assignors`, :mod:`~pylog.clients.partitioner`, :mod:`~pylog.clients.quotas`,
:mod:`~pylog.clients.storeview` (what a client may use of the store it is given).

May import: the maintenance and storage layers and the shared modules (:mod:`pylog.config`,
:mod:`pylog.errors`, :mod:`pylog.structs`). Never :mod:`pylog.store` nor the applications: a client is
handed the store object (and what else it needs: quotas, committed offsets) by :class:`pylog.store.Store`,
which sits above the clients (checked by ``lint-imports``).
"""
