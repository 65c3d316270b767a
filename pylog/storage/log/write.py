"""Writing an append call's batches to the active segment: idempotent producers' retries, rolls, the failure a
write leaves behind, publishing to readers and the flush policy.

Invariants (numbered as in :mod:`pylog.partition`):
1. Offsets are dense and strictly increasing: a call's batches are encoded from the active segment's next
   offset on (:meth:`~pylog.storage.log.append.Appender.encode_runs`) and written in order; a roll starts the
   new segment at that same offset.
2. A reader never sees part of a batch: readers are told of new batches (:class:`~.waiting.Waiters`) only
   after they are wholly written, whether or not the flush after them succeeds.
8. A write that failed and could not be cut back (the file's size is not what the writer left), or a log
   file changed under the writer, fails the partition (``Durability.failed``): it refuses work until the
   store is reopened, instead of renumbering or losing offsets.
9. Every batch of a call is encoded and checked before any is written, so a call that fails validation
   appends nothing; an idempotent producer's retry of a call that landed is not appended again, and the
   batches of a call that failed part-way are recorded as they land, so its retry appends only the rest. The
   batches that go into one segment are written together (:meth:`~pylog.segment.Segment.append_batches`): a
   failed write of them is cut back whole, so a call lands up to a segment boundary or not at all.

:meth:`BatchWriter.write` runs under the partition's append lock, in the handle that holds the writer lock
(the partition takes both before calling it).
"""

from __future__ import annotations

import os
from typing import Callable, Generic

from ... import metrics
from ...errors import CorruptRecordError, LogFailedError
from ..fileio import raise_fault
from .append import SEQ_MOD, Appender, Columns, batches_fitting, should_roll
from .batches import EncodedBatch
from ..txn_index import AbortedTxn, append_index, index_path, truncate_index
from .durability import Durability
from .local_log import LocalLog
from .segments import S
from .waiting import Waiters

__all__ = ["BatchWriter"]


class BatchWriter(Generic[S]):
    """Writes a partition's append calls to its active segment (see the module docstring)."""

    def __init__(self, topic: str, name: str, local: LocalLog[S], durability: Durability[S], appender: Appender,
                 waiters: Waiters, roll: Callable[[], S]) -> None:
        self.topic = topic  # for the metrics
        self.name = name  # "topic-number", for messages (and the metrics' row of this partition)
        #: This partition's records and bytes appended in this process, for the metrics (pylog.metrics).
        self.metrics_row: list[int] | None = None
        self._local = local
        self._durability = durability
        self._appender = appender
        self._waiters = waiters
        self._roll = roll  # seals the active segment and starts a new one at its next offset; returns it

    def write(self, cols: Columns, bounds: list[tuple[int, int]], producer: tuple[int, int, int] | None,
              compression: str | None, flush_policy: bool, batch_size: int | None = None,
              transactional: bool = False) -> int:
        """Append ``cols`` (cut at ``bounds``, checked by the caller) as batches; returns the first record's
        offset (that of the original call, for an idempotent producer's retry). ``flush_policy``: fsync
        here when ``flush.messages`` / ``flush.ms`` ask for it. ``batch_size``: what ``bounds`` were cut
        at (:meth:`~.append.Appender.batch_bounds`), to cut a retry's rest alike."""
        appender = self._appender
        skip, earlier = 0, None
        if producer is not None:
            state = appender.producer_state(self._local)
            skip, earlier = state.check(producer[0], producer[1], producer[2], cols.n, transactional)
            if skip == cols.n:
                assert earlier is not None
                return earlier  # a retry of a call that landed
            if skip:
                # A retry of a call that failed part-way: its first batches landed; append the rest.
                cols = cols.after(skip)
                producer = (producer[0], producer[1], (producer[2] + skip) % SEQ_MOD)
                bounds = appender.batch_bounds(cols, batch_size)
        first = self._local.segments[-1].next_offset
        # Every batch is encoded and checked against max.message.bytes before any is written, so a call
        # that fails validation appends nothing. An I/O error part-way (at a later segment: a segment's
        # batches are written together, and cut back together) leaves the batches written before it; for an
        # idempotent producer they are recorded as they land, so its retry appends only the rest.
        encoded = appender.encode_runs(first, bounds, cols, producer, compression, transactional)
        written = 0
        try:
            done = 0
            while done < len(encoded):
                # As many batches as go into the active segment with one writev (one batch when a roll
                # comes between).
                wrote = self._write_batches(encoded[done:] if done else encoded)
                for batch in encoded[done:done + wrote]:
                    written += batch.header.record_count
                if producer is not None:
                    state.rebuild([batch.header for batch in encoded[done:done + wrote]])
                done += wrote
        except BaseException:
            # Batches that landed before the error still count and wake readers; no flush now, whose own
            # error would replace the one that stopped the call.
            if written:
                self._after_append(written, flush=False)
            raise
        if metrics.state.on:  # under the append lock: only this writer adds to its row (pylog.metrics)
            metrics.count_append(self, written, encoded[0].header.size if len(encoded) == 1 else
                                 sum(batch.header.size for batch in encoded))
        self._after_append(written, flush=flush_policy)
        return first if earlier is None else earlier

    def write_marker(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int) -> int:
        """Append a transaction marker for ``producer_id`` (ending its open transaction, if any); returns its
        offset. An abort's aborted-transaction index entry is written first, in the segment that will hold
        the marker, and taken back when the marker could not be written (:mod:`pylog.storage.txn_index`).

        :raises ProducerFencedError, TransactionCoordinatorFencedError:
        """
        appender = self._appender
        state = appender.producer_state(self._local)
        state.check_marker(producer_id, epoch, coordinator_epoch)
        seg = self._local.segments[-1]
        batch = appender.encode_marker(seg.next_offset, producer_id, epoch, commit, coordinator_epoch)
        h = batch.header
        if seg.size and should_roll(appender.config, seg, h):
            seg = self._roll()  # first: the index entry goes with the segment that holds the marker
        ongoing = state.ongoing()
        first = ongoing.pop(producer_id, -1)
        path = None
        if not commit and first >= 0:
            path = index_path(self._local.directory, seg.base_offset)
            append_index(path, AbortedTxn(producer_id, first, h.base_offset,
                                          min(ongoing.values()) if ongoing else h.next_offset))
        try:
            self._write_batches([batch])
        except BaseException:
            if path is not None:
                truncate_index(path, h.base_offset)
            raise
        state.end_txn(producer_id, epoch, coordinator_epoch, h.max_timestamp)
        self._after_append(1)
        return h.base_offset

    def _write_batches(self, batches: list[EncodedBatch]) -> int:
        """Write the first of ``batches`` (after a roll when it does not go into the active segment) and the
        ones after it that go into the same segment (:func:`~.append.batches_fitting`), with one ``writev``;
        returns how many were written. None of them is written when it raises."""
        h = batches[0].header
        dur = self._durability
        dur.check_not_failed()
        seg = self._local.segments[-1]
        config = self._appender.config
        if seg.size and should_roll(config, seg, h):
            seg = self._roll()  # starts at seg.next_offset, the base offset already in the header
        count = batches_fitting(config, seg, [batch.header for batch in batches])
        try:
            if count == 1:
                seg.append(h, batches[0].parts, h.max_timestamp)
            else:
                seg.append_batches([batch.header for batch in batches[:count]],
                                   [part for batch in batches[:count] for part in batch.parts])
        except CorruptRecordError as exc:
            # The file changed under this writer: appending on would renumber or lose offsets.
            dur.failed = f"its active log file was changed under the writer: {exc}"
            raise LogFailedError(f"{self.name}: {dur.failed}; nothing from offset {h.base_offset} on was appended "
                                 f"and the partition refuses work until the store is reopened "
                                 f"(`pylog verify` reports what the file still holds)") from exc
        except OSError as exc:
            if seg.size != os.stat(seg.log_path).st_size:
                dur.failed = f"write failed and could not be rolled back: {exc}"
                state, then = "the partition refuses work until the store is reopened", "reopen the store"
            else:
                state, then = "the partition is unchanged and takes appends again", "retry"
            raise_fault(exc, f"appending to {self.name}",
                        f"nothing from offset {h.base_offset} on was appended (earlier batches of the same call "
                        f"were); {state}", then)
        return count

    def _after_append(self, n: int, flush: bool = True) -> None:
        # Readers in other processes: the batches are visible from here on (they read up to the file size),
        # whether or not the flush below succeeds.
        self._waiters.publish()
        dur = self._durability
        dur.unflushed += n
        config = self._appender.config
        try:
            if flush and dur.flush_due(config["flush.messages"], config["flush.ms"]):
                dur.flush_writer()
        finally:
            # Waiters in this process, whatever the flush did: the records are there to read.
            self._waiters.wake_local()
