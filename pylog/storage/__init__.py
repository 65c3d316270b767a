"""The storage layer: topic -> partition -> segment -> index -> records, and the files beside them.

Modules: :mod:`~pylog.storage.records` (the batch format), :mod:`~pylog.storage.index`,
:mod:`~pylog.storage.segment` (its helpers :mod:`~pylog.storage.segment_check`,
:mod:`~pylog.storage.segment_tail`, :mod:`~pylog.storage.segment_read`, :mod:`~pylog.storage.segment_file`),
:mod:`~pylog.storage.partition`, :mod:`~pylog.storage.topic`, and their helpers (checkpoint, producer_state,
syncer, notify, fileio, filenames, retention's rule, swap recovery).

May import: itself and the shared modules (:mod:`pylog.config`, :mod:`pylog.errors`, :mod:`pylog.structs`).
Never the maintenance layer, the clients, the store or the applications (checked by ``lint-imports``).
"""
