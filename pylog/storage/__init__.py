"""The storage core's helpers: everything below :mod:`pylog.partition`, :mod:`pylog.segment` and :mod:`pylog.index`.

Modules: :mod:`~pylog.storage.log` (the partition's parts), the segment's helpers
(:mod:`~pylog.storage.segment_append`, :mod:`~pylog.storage.segment_check`,
:mod:`~pylog.storage.segment_tail`, :mod:`~pylog.storage.segment_read`, :mod:`~pylog.storage.segment_file`),
:mod:`~pylog.storage.records` (the batch format), and the files beside them (checkpoint, producer_state, swap,
syncer, group_commit, notify, handles, fileio, filenames, retention's rule, the ACL and quota files, the store's
directory: store_dir).

May import: itself and the shared modules (:mod:`pylog.config`, :mod:`pylog.errors`, :mod:`pylog.structs`).
Never the storage core above it, the maintenance layer, the clients, the store or the applications (checked
by ``lint-imports``; the interim exceptions are listed in setup.cfg's ``ignore_imports``).
"""
