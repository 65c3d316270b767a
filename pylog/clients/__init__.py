"""The clients: producer, consumer, consumer groups (with their assignors), partitioner and quotas.

Modules: the two clients, :mod:`~pylog.clients.producer` and :mod:`~pylog.clients.consumer`, over their
parts: :mod:`~pylog.clients.drain` (the producer's writing side), :mod:`~pylog.clients.groups`
(membership), :mod:`~pylog.clients.offsets` (committed offsets), and below them
:mod:`~pylog.clients.accumulator`, :mod:`~pylog.clients.assignors`, :mod:`~pylog.clients.partitioner`,
:mod:`~pylog.clients.quotas` and :mod:`~pylog.clients.storeview` (what a client may use of the store it is
given). No part imports a client (setup.cfg's clients contract).

May import: the maintenance and storage layers and the shared modules (:mod:`pylog.config`,
:mod:`pylog.errors`, :mod:`pylog.structs`). Never :mod:`pylog.store` nor the applications: a client is
handed the store object (and what else it needs: quotas, committed offsets) by :class:`pylog.store.Store`,
which sits above the clients (checked by ``lint-imports``).
"""
