"""Transactions in the log cleaner: what a cleaning keeps of transactional batches and markers, and the
aborted-transaction index of a cleaned segment (Kafka's ``CleanedTransactionMetadata``).

A cleaning only ever rewrites segments wholly below the last stable offset (:mod:`.compaction` caps its
range there), so every transactional batch it meets belongs to a transaction that has ended: aborted when
an entry of the aborted-transaction indexes (:mod:`pylog.storage.txn_index`) covers it, committed
otherwise. The entries come from every segment's index from the log start on (an abort marker, with its
entry, may lie beyond the cleaned range, even in the active segment).

Invariants:
1. A batch of an aborted transaction is removed, and its records never enter the offset map (an aborted
   record must not supersede the committed one of its key).
2. A control batch's record never enters the offset map and is never removed by key, null-key or
   tombstone rules; a marker goes only when no batch of its transaction is left (none was met by this
   cleaning, which reads every segment from the log start up to the marker) and ``delete.retention.ms``
   has passed both since a cleaning first reached its offset and since the last cleaning that met a
   batch of its transaction (:meth:`CleanerCheckpoint.marker_held
   <pylog.maintenance.cleaner_checkpoint.CleanerCheckpoint.marker_held>`). A control batch that is not a
   transaction marker is always kept. So a transaction's marker outlives its last record: rebuilding the
   producer state from the log never sees a transaction left open by compaction.
3. A cleaned segment's index holds the entries of the abort markers it keeps whose transaction's batches
   this cleaning met (and removed): readers holding the segment list from before the swap still drop
   them; once no batch of the transaction is met, the entry goes (its marker may stay a while, which
   Kafka clients accept: an entry without batches drops nothing).
4. Decisions are made in offset order, one batch after the other, from the log start: the caller feeds
   every batch of the cleaned segments, dropped or kept, in order.
5. An index that cannot be read, or that contradicts a marker (an abort marker after records taken for
   committed, a commit marker inside an aborted range), stops the cleaning before anything is swapped
   (``CorruptRecordError``; the cleaner reports the partition uncleanable).
"""

from __future__ import annotations

import bisect

import numpy as np

from ..errors import CorruptRecordError
from ..partition import Partition
from ..storage.records import BatchHeader, BatchView
from ..storage.records.format import ATTR_CONTROL, ATTR_TRANSACTIONAL
from ..storage.log.txn import active_entries
from ..storage.txn_index import AbortedTxn, parse_marker
from .cleaner_checkpoint import CleanerCheckpoint

__all__ = ["TxnCleaning", "aborted_entries"]


def aborted_entries(partition: Partition, upper: int) -> list[AbortedTxn]:
    """The aborted transactions with a record below ``upper``, from the index of every segment, in marker
    order. Stops, like Kafka's ``collectAbortedTransactions``, after the first entry whose last stable
    offset is at or past ``upper`` (no later abort can cover an offset below it)."""
    out: list[AbortedTxn] = []
    segs = partition.segments
    for seg in segs:
        # A damaged header or entry raises: no cleaning with an index it cannot read (an aborted record taken
        # for a committed one could supersede the committed record of its key); a damaged last entry of the
        # active segment's index is a torn write only when no abort marker with an entry follows
        # (active_entries), as for every reader.
        entries = active_entries(segs, seg, partition.directory)
        for e in entries:
            if e.first_offset < upper:
                out.append(e)
            if e.last_stable_offset >= upper:
                return out
    return out


def _inconsistent(what: str, producer_id: int, offset: int) -> CorruptRecordError:
    return CorruptRecordError(f"the {what} marker of producer {producer_id} at offset {offset} contradicts the "
                              "aborted-transaction index; nothing is cleaned")


class TxnCleaning:
    """One cleaning pass's view of transactions (see the module docstring); fed batches in offset order."""

    def __init__(self, entries: list[AbortedTxn], checkpoint: CleanerCheckpoint, now: int,
                 retention_ms: int) -> None:
        # Per producer, its aborted transactions in offset order (a producer's transactions follow each other)
        # and their first offsets, for a binary search; and each by its marker.
        self._ranges: dict[int, list[AbortedTxn]] = {}
        for e in sorted(entries, key=lambda e: e.first_offset):
            self._ranges.setdefault(e.producer_id, []).append(e)
        self._firsts = {pid: [e.first_offset for e in es] for pid, es in self._ranges.items()}
        self._by_marker = {(e.producer_id, e.last_offset): e for e in entries}
        self._checkpoint = checkpoint
        self._now = now
        self._retention_ms = retention_ms
        self._met_aborts: set[tuple[int, int]] = set()  # (producer id, marker offset) of aborts whose batches were met
        self._open_commits: set[int] = set()  # producers whose (committed) transaction's batches were met
        self._index: list[AbortedTxn] = []
        #: Marker offsets of the transactions whose batches this pass met: [lowest, highest], or None.
        self.met: tuple[int, int] | None = None
        self.markers_removed = 0
        self.aborted_removed = 0

    def aborted(self, producer_id: int, offset: int) -> AbortedTxn | None:
        """The aborted transaction of ``producer_id`` that the batch at ``offset`` belongs to, if any."""
        firsts = self._firsts.get(producer_id)
        if not firsts:
            return None
        i = bisect.bisect_right(firsts, offset) - 1
        e = self._ranges[producer_id][i] if i >= 0 else None
        return e if e is not None and offset <= e.last_offset else None

    def unmapped(self, views: list[BatchView]) -> np.ndarray:
        """Per record of ``views``, whether its key stays out of the offset map (invariants 1 and 2)."""
        out = [(h.attributes & ATTR_CONTROL != 0) or (h.attributes & ATTR_TRANSACTIONAL != 0
                                                      and self.aborted(h.producer_id, h.base_offset) is not None)
               for h in (v.header for v in views)]
        return np.repeat(np.array(out, bool), [v.header.record_count for v in views])

    def _met(self, marker: int) -> None:
        self.met = (marker, marker) if self.met is None else (min(self.met[0], marker), max(self.met[1], marker))

    def drop_batch(self, h: BatchHeader) -> bool:
        """A data batch met: whether it goes whole (it belongs to an aborted transaction)."""
        if not h.attributes & ATTR_TRANSACTIONAL:
            return False
        e = self.aborted(h.producer_id, h.base_offset)
        if e is None:
            self._open_commits.add(h.producer_id)
            return False
        self._met_aborts.add((e.producer_id, e.last_offset))
        self._met(e.last_offset)
        self.aborted_removed += h.record_count
        return True

    def keep_control(self, view: BatchView) -> bool:
        """A control batch met: whether it stays (invariant 2); an abort marker it keeps whose transaction's
        batches were met adds its entry to the cleaned segment's index (invariant 3)."""
        h = view.header
        try:
            rec = view.records(None, -1, 0, 1)[0]
            commit, _ = parse_marker(rec.key, rec.value)
        except CorruptRecordError:
            # Not a marker: kept, as Kafka keeps control records of unknown types; it still ends its producer's
            # transaction (pylog.storage.producer_state), so what came before it was not aborted.
            self._open_commits.discard(h.producer_id)
            return True
        offset = h.base_offset
        if commit:
            if self.aborted(h.producer_id, offset) is not None:
                raise _inconsistent("commit", h.producer_id, offset)  # an entry says this transaction aborted
            met = h.producer_id in self._open_commits
            self._open_commits.discard(h.producer_id)
        else:
            if h.producer_id in self._open_commits:
                raise _inconsistent("abort", h.producer_id, offset)  # its records were taken for committed ones
            met = (h.producer_id, offset) in self._met_aborts
            if met:
                self._index.append(self._by_marker[(h.producer_id, offset)])
        if met:
            self._met(offset)
            return True
        if self._checkpoint.marker_held(offset, self._now, self._retention_ms) or \
                self._now - int(self._checkpoint.first_reached(np.array([offset], np.int64), self._now)[0]) \
                <= self._retention_ms:
            return True
        self.markers_removed += 1
        return False

    def take_index(self) -> list[AbortedTxn]:
        """The entries for the cleaned segment whose batches were fed since the last call."""
        out, self._index = self._index, []
        return out
