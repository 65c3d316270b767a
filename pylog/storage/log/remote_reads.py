"""Reads below the local log start that fall through to the remote log (tiered storage, issue 28).

A part of the partition like the others (docs/ARCHITECTURE.md, "Tiered storage", point 4): the partition
asks it for the slices of an offset below its local log start, and it serves them from the shipped segment
holding the offset (:meth:`pylog.storage.remote.RemoteLog.read`: ranged GETs through the store's shared
chunk cache, every batch CRC-checked there) as the same ``(BatchView, start, stop)`` slices a local read
returns, so :meth:`Partition.read`, ``read_columns``, ``read_slices`` and the consumers need nothing else.

Invariants:
- Lock-free, like local reads: it reads nothing of the partition but the offset it is given; a
  :class:`RemoteLog` is thread-safe.
- Offsets stay dense and ordered across the boundary: a read returns records from ``offset`` on, in
  order, from one shipped segment, at most up to that segment's end; the next read continues there
  (remotely or, once at the local log start, locally). A shipped segment holds the same bytes as the local
  one it was shipped from, so records read on either side of the boundary are the same records.
"""

from __future__ import annotations

import logging

import numpy as np

from ... import metrics
from ...errors import RemoteStorageError
from ..records import BatchView
from ..remote import RemoteLog
from ..segment_read import ReadSlice

__all__ = ["RemoteReads"]

log = logging.getLogger("pylog.remote")


class RemoteReads:
    """The remote side of one partition's reads, over ``remote`` (the store's RemoteLog of the partition)."""

    def __init__(self, remote: RemoteLog) -> None:
        self.remote = remote

    def log_start(self) -> int | None:
        """The remote log start by the manifest last loaded (loaded on first use), None when nothing is shipped
        or the bucket cannot be reached (then the local log start is the start readers see; logged)."""
        try:
            m = self.remote.manifest()
        except RemoteStorageError as exc:
            log.warning("pylog: the remote log start of %s/%d is unknown (%s); using the local one",
                        self.remote.topic, self.remote.partition, exc)
            return None
        return m.log_start_offset if m.segments else None

    def log_start_with(self, local_start: int) -> int:
        """The log start readers see (Kafka's logStartOffset): the remote one when it is below ``local_start``."""
        start = self.log_start()
        return local_start if start is None else min(start, local_start)

    def delete_records(self, before_offset: int) -> None:
        """Raise the remote log start to ``before_offset`` (committed before the local log start moves, so
        records deleted are never served from the bucket again). :raises RemoteStorageError:"""
        self.remote.commit(lambda m: m.trimmed(before_offset))

    def aborted(self, start: int, end: int) -> dict[int, list[tuple[int, int]]]:
        """The aborted transactions covering ``[start, end)`` by the shipped aborted-transaction indexes
        (:meth:`RemoteLog.aborted`): with the local indexes', what a ``read_committed`` read below the local
        log start drops. :raises RemoteStorageError:"""
        return self.remote.aborted(start, end)

    def slices(self, offset: int, max_records: int, max_bytes: int) -> list[ReadSlice]:
        """Slices of the records from ``offset`` on, at most ``max_records`` (and about ``max_bytes``, at least
        the batch holding ``offset``), from the shipped segment holding it; control batches and transactional
        ones included, as a local read returns them (the isolation level's filter comes after, with
        :meth:`aborted`).

        :raises OffsetOutOfRangeError: when no shipped segment holds ``offset``.
        :raises RemoteStorageError, RemoteDataCorruptError: when the bucket fails or its bytes do not check.
        """
        got = self.remote.read(offset, max_bytes)
        if metrics.state.on:
            metrics.counter("pylog_remote_reads_total").inc((self.remote.topic,))
        data, pos, out, n = got.data, 0, [], 0
        while pos < len(data) and n < max_records:
            view = BatchView.from_buffer(data, pos, verify_crc=False)  # RemoteLog.read checked every batch
            h = view.header
            pos += h.size
            if h.base_offset + h.last_offset_delta < offset:
                continue
            a = 0
            if offset > h.base_offset:
                deltas = view.offset_deltas
                a = offset - h.base_offset if deltas is None else int(np.searchsorted(deltas, offset - h.base_offset))
            b = min(h.record_count, a + (max_records - n))
            out.append((view, a, b))
            n += b - a
        return out
