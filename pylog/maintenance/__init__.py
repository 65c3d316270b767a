"""The maintenance layer: the log cleaner (compaction), the background cleaner thread and its status files.

Modules: :mod:`~pylog.maintenance.compaction`, :mod:`~pylog.maintenance.cleaner`,
:mod:`~pylog.maintenance.cleaner_status`, :mod:`~pylog.maintenance.cleaner_registry`.

May import: the storage layer and the shared modules (:mod:`pylog.config`, :mod:`pylog.errors`,
:mod:`pylog.structs`). Never the clients, the store or the applications (checked by ``lint-imports``).
"""
