"""A partition's transactions as readers and the writer see them: the last stable offset (LSO), the aborted
transactions of a read's range, filtering a read by isolation level, and rebuilding the aborted-transaction
index after a crash.

Invariants:
- Readers never see a control batch as records, at either isolation level (Kafka never hands control
  records to applications); a read_committed read stops at the LSO and drops every transactional batch
  whose producer's transaction was aborted (an entry of the aborted-transaction index covers it, see
  :mod:`pylog.storage.txn_index`).
- The aborted transactions a read_committed read applies are never newer than the segment files it read:
  index files are read by name, and a compaction swap replaces them (a later cleaning drops the entries of
  aborted batches it removed; retention deletes them), so after the lookup a read checks that every segment
  it went through is still the file its name holds (:func:`check_unreplaced`), and otherwise raises
  :class:`~pylog.storage.segment_file.SegmentReplacedError` to be run again on the current view. A swap
  renames a segment's log before its indexes, and a cleaned segment holds no aborted batch: a log still in
  place after the index read means that index was the log's own or an older one, which has every entry a
  newer one has for the same batches.
- A read that only met batches it must drop says how far it got (``next offset``), so a consumer moves past
  them instead of reading them again forever.
- :class:`TxnTracker` works from the files alone (the producer snapshot, then the batch headers after it),
  so a reader in another process than the writer computes the same LSO as the writer; it continues from the
  last batch it replayed, so a read costs only the headers appended since the previous one.
- The check of the active index's torn tail (:func:`active_entries`) replays the producer state at most once
  per torn tail and partition handle (:class:`TornTailMemo`): later reads go on from the batch it stopped at.
- The writer, when it loads its producer state (before its first producer append or marker), drops index
  entries whose marker is not in the log and adds those of abort markers in the replayed range that the
  index lacks (:func:`replay`).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import weakref
from dataclasses import replace
from typing import Any, Callable, Iterable, Literal, MutableMapping

from ...errors import CorruptRecordError, InvalidArgumentError
from ..producer_state import ProducerEntry, ProducerState
from ..segment_file import SegmentReplacedError
from ..segment_read import ReadSlice
from ..records.format import ATTR_CONTROL, ATTR_TRANSACTIONAL
from ..txn_index import AbortedTxn, append_index, index_path, parse_marker, read_index, read_index_tail, truncate_index
from .local_log import LocalLog
from .segments import S

__all__ = ["TxnTracker", "SealedEntries", "IsolationLevel", "ISOLATION_LEVELS", "check_isolation", "aborted_in",
           "TornTailMemo", "active_entries", "missing_entries", "repair_before_roll",
           "filter_slices", "replay", "load_state", "isolated_read", "check_unreplaced", "View"]

log = logging.getLogger("pylog.partition")

IsolationLevel = Literal["read_uncommitted", "read_committed"]
#: Cached index entries of sealed segments, by segment object (weakly: they go with the segment).
SealedEntries = MutableMapping[Any, list[AbortedTxn]]
#: Kafka's isolation levels, as kafka-python names them.
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def check_isolation(level: object) -> bool:
    """True for read_committed. :raises InvalidArgumentError: for anything but Kafka's two levels."""
    if level not in ISOLATION_LEVELS:
        raise InvalidArgumentError(f"isolation_level must be one of {ISOLATION_LEVELS}, got {level!r}")
    return level == "read_committed"


def load_state(directory: str, end: int) -> tuple[ProducerState, int]:
    """The producer snapshot and its offset, or an empty state from offset 0 when it is missing, damaged
    or past ``end``."""
    try:
        snap = ProducerState.read_snapshot(directory)
    except CorruptRecordError as exc:
        log.warning("%s: ignoring the producer snapshot (%s); rebuilding from the log", directory, exc)
        snap = None
    return snap if snap is not None and snap[1] <= end else (ProducerState(), 0)


def replay(state: ProducerState, local: LocalLog[S], start: int, repair: bool = False) -> None:
    """Replay the batch headers from offset ``start`` to the log end into ``state``. With ``repair`` (the
    writer loading its state) the aborted-transaction index is made to match the log: entries past the log
    end dropped, the aborts of the replayed range that it lacks added."""
    segs, bases = local.view
    if repair and segs:
        # Only the active segment's index can hold an entry whose marker is missing: a marker is in the
        # segment its entry names, and every earlier segment ends below the log end. A damaged entry that was
        # not a torn write raises first (active_entries): dropping it would lose an abort the replay may not
        # reach (it starts at the producer snapshot).
        active_entries(segs, segs[-1], local.directory)
        truncate_index(index_path(local.directory, segs[-1].base_offset), segs[-1].next_offset)
    for seg in segs[max(0, bisect.bisect_right(bases, start) - 1):]:
        headers = (h for _, h in seg.batch_headers() if h.last_offset >= start)
        if not repair:
            state.rebuild(headers)
            continue
        path = index_path(local.directory, seg.base_offset)
        known = {e.last_offset for e in read_index(path)}
        for h in headers:
            if h.is_control and h.producer_id >= 0 and h.base_offset not in known:
                first = state.ongoing().get(h.producer_id, -1)
                if first >= 0 and not _is_commit(local, h.base_offset):
                    others = [f for p, f in state.ongoing().items() if p != h.producer_id]
                    append_index(path, AbortedTxn(h.producer_id, first, h.base_offset,
                                                  min(others) if others else h.next_offset))
            state.rebuild([h])


def _is_commit(local: LocalLog[S], offset: int) -> bool:
    """Whether the marker at ``offset`` commits. A control record that is not a marker (a caller that set the
    control bit itself) ends nothing that could be aborted: it is logged and taken as no abort."""
    return _commits(local.slices(offset, 1, 1 << 16, True), local.name, offset)


def _commits(slices: list[ReadSlice], name: str, offset: int) -> bool:
    """:func:`_is_commit` of the control batch at ``offset``, the first of ``slices``."""
    view, a, _ = slices[0]
    rec = view.records(None, -1, a, a + 1)[0]
    try:
        return parse_marker(rec.key, rec.value)[0]
    except CorruptRecordError as exc:
        log.warning("%s: the control batch at offset %d is not a transaction marker (%s)", name, offset, exc)
        return True


class TxnTracker:
    """The LSO of one partition from its files (see the module docstring); thread-safe."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._state: ProducerState | None = None
        self._next = 0  # the offset after the last batch replayed
        self._at: tuple[int, int] = (-1, 0)  # (segment base offset, file position) after that batch
        #: The aborted-transaction index entries of sealed segments, by segment object (see :func:`aborted_in`).
        self.sealed: SealedEntries = weakref.WeakKeyDictionary()
        #: The check of the active index's torn tail, if it has one (see :func:`aborted_in`).
        self.torn = TornTailMemo()

    def last_stable_offset(self, local: LocalLog[S]) -> int:
        with self._lock:
            segs, bases = local.view
            end = segs[-1].next_offset if segs else local.log_start
            state = self._state
            if state is None or self._next > end:  # first use, or the log was cut back under us
                state, self._next = load_state(self.directory, end)
                self._state, self._at = state, (-1, 0)
            if self._next < end:
                for seg in segs[max(0, bisect.bisect_right(bases, self._next) - 1):]:
                    pos = self._at[1] if self._at[0] == seg.base_offset else 0
                    size = seg.size
                    for _, h in seg.batch_headers(size, True, pos):
                        if h.last_offset >= self._next:
                            state.rebuild([h])
                    self._at = (seg.base_offset, size)
                self._next = end
            # Kafka clamps it to the log start: retention may delete an open transaction's first records.
            return max(state.last_stable_offset(end), local.log_start)

    def producers(self) -> dict[int, ProducerEntry]:
        """A copy of the producer table as of the last :meth:`last_stable_offset` ({} before the first)."""
        with self._lock:
            if self._state is None:
                return {}
            return {pid: replace(e, batches=list(e.batches)) for pid, e in self._state.producers.items()}


def aborted_in(local: LocalLog[S], start: int, end: int,
               sealed: SealedEntries | None = None, torn: TornTailMemo | None = None,
               ) -> dict[int, list[tuple[int, int]]]:
    """``{producer id: [(first offset, last offset), ...]}`` of the aborted transactions that cover some
    offset in ``[start, end)``, from the index files of the segments from ``start``'s on.

    Like Kafka's ``collectAbortedTransactions``, the scan stops at the first entry whose last stable offset
    is at or past ``end``: no transaction that began below ``end`` was open any more when it was written,
    so no later abort can cover the range. ``sealed`` caches the entries of sealed segments' indexes (only
    the active segment's index grows: an entry goes with the segment its marker is written to). It is keyed
    by the segment object, not its base offset: a compaction swap puts a new segment (and index) at an old
    base offset. A segment counts as sealed only if it was before its index was read: an entry appended
    just before the roll that sealed it must not be cached as missing. ``torn`` keeps the check of the active
    index's torn tail from one read to the next (:class:`TornTailMemo`).

    :raises FileNotFoundError: (:class:`SegmentReplacedError`) when a segment of the view has no index left and
        its log is gone: maintenance deleted it after the view was taken, so its aborted transactions may be
        gone too; the caller takes a new view (see :meth:`PartitionInternals.aborted
        <pylog.storage.log.internals.PartitionInternals.aborted>`)."""
    segs, bases = local.view
    out: dict[int, list[tuple[int, int]]] = {}
    for seg in segs[max(0, bisect.bisect_right(bases, start) - 1):]:
        entries = None if sealed is None else sealed.get(seg)
        if entries is None:
            immutable = seg.immutable
            entries = active_entries(segs, seg, local.directory, torn)
            if not entries and not os.path.exists(seg.log_path):
                # Deleted (retention, delete-records) or replaced (a swap's leftovers removed) after this view
                # was taken: its index may have gone with it, and a read of its records without their aborts
                # would hand out aborted records. The log goes first, so a log still there means the index
                # was read before any deletion.
                raise SegmentReplacedError(f"segment {seg.base_offset} of {local.name} was deleted under a "
                                           "read_committed read")
            if sealed is not None and immutable:
                if seg.inode is not None and not seg.same_file():
                    raise SegmentReplacedError(seg.log_path)  # the index read may be a newer file's: not cached
                sealed[seg] = entries
        for e in entries:
            if e.last_offset >= start and e.first_offset < end:
                out.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
            if e.last_stable_offset >= end:
                return out
    return out


def active_entries(segs: list[Any], seg: Any, directory: str, memo: TornTailMemo | None = None,
                   ) -> list[AbortedTxn]:
    """The entries of segment ``seg``'s index for a reader (:func:`~pylog.storage.txn_index.read_index`); ``seg``
    is one of ``segs``, the partition's segments in ``directory``, and when it is the last (the active segment)
    its torn tail or damaged last entry may be a torn write. A dropped last entry was torn only if no abort
    marker that has an entry follows the entries kept: an abort marker is appended after its entry's fsync,
    and a writer drops a torn entry before it appends another marker. A commit marker there says nothing
    (commits have no entry), nor does an abort of a transaction with no record in the partition (nor has it:
    a coordinator writes markers into every partition added to a transaction, records or not), so the torn
    entry may be a later abort's (:func:`_entry_abort_after`, which ``memo`` keeps from one call to the next).

    :raises CorruptRecordError: for a damaged entry, or a dropped last one that such an abort marker follows.
    """
    path = index_path(directory, seg.base_offset)
    entries, dropped = read_index_tail(path, seg is segs[-1])
    if dropped is not None:
        after = entries[-1].last_offset if entries else -1
        if _entry_abort_after(segs, directory, after, path, memo):
            raise CorruptRecordError(f"aborted-transaction index {dropped}, and an abort marker follows the "
                                     f"entries that check (after offset {after}): the aborted transactions it "
                                     "holds cannot be told from committed ones", path)
    return entries


class TornTailMemo:
    """What :func:`_entry_abort_after` found for the active segment's torn index tail, kept by the partition's
    :class:`TxnTracker` so that the read_committed reads after a crash (until the writer drops the torn tail)
    do not each scan the active segment and replay the producer state from the snapshot or the log start: one
    slot (the active segment, weakly; the entries' last offset ``after``; the file position scanned to; the
    producer state there, None while no abort marker followed, which needs none; whether an abort marker with
    an entry was found). Later calls go on from that position. Thread-safe (readers share it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.slot: tuple[weakref.ref[Any], int, int, ProducerState | None, bool] | None = None


def _entry_abort_after(segs: list[Any], directory: str, after: int, path: str,
                       memo: TornTailMemo | None = None) -> bool:
    """Whether the active segment (``segs[-1]``) holds, past offset ``after``, an abort marker that ends a
    transaction with records in the partition: one the writer wrote an index entry for (write_marker's rule,
    and :func:`replay`'s). Replays the batch headers into the producer state from the producer snapshot, or
    from the first segment when the snapshot is past ``after`` (it cannot tell the markers before it), and
    only when an abort marker follows at all. Only for a dropped last entry, which is rare: the writer drops it
    when it loads its producer state or rolls. With ``memo`` (a partition's readers) a later call for the same
    segment and entries goes on from where the previous one stopped."""
    if memo is None:
        return _abort_after_from(segs, directory, after, path, 0, None)[2]
    with memo.lock:
        slot, active = memo.slot, segs[-1]
        pos, state, found = 0, None, False
        if slot is not None and slot[1] == after and slot[2] <= active.file_size() and slot[0]() is active:
            pos, state, found = slot[2:]  # the same torn tail: go on from there (a cut-back log starts over)
        if not found:
            pos, state, found = _abort_after_from(segs, directory, after, path, pos, state)
        memo.slot = (weakref.ref(active), after, pos, state, found)
        return found


def _abort_after_from(segs: list[Any], directory: str, after: int, path: str, pos: int,
                      state: ProducerState | None) -> tuple[int, ProducerState | None, bool]:
    """:func:`_entry_abort_after` from file position ``pos`` of the active segment, with ``state`` the producer
    state there (None: not replayed yet, then from the snapshot or the log start when an abort marker follows);
    returns the position of the end of the last batch looked at, the state there and the verdict."""
    active = segs[-1]
    end = active.file_size()  # not the view's size: a marker appended since counts too
    headers = [(p, h) for p, h in active.batch_headers(end, True, pos)]
    stop = headers[-1][0] + headers[-1][1].size if headers else pos
    aborts = {h.base_offset for _, h in headers
              if h.is_control and h.base_offset > after and h.producer_id >= 0
              and not _commits(active.read(h.base_offset, 1, 1 << 16, end)[0], path, h.base_offset)}
    if state is None:
        if not aborts:  # the usual torn write: no abort marker at all after it, nothing to replay
            return stop, None, False
        state, start = load_state(directory, active.next_offset)
        if start > after + 1:
            state, start = ProducerState(), 0
        bases = [s.base_offset for s in segs]
        for s in segs[max(0, bisect.bisect_right(bases, start) - 1):-1]:
            state.rebuild(h for _, h in s.batch_headers(s.size, True) if h.last_offset >= start)
        headers = [(p, h) for p, h in active.batch_headers(end, True) if h.last_offset >= start]
        stop = headers[-1][0] + headers[-1][1].size if headers else 0
    for _, h in headers:
        if h.base_offset in aborts and _open_transaction(state, h) >= 0:
            return stop, state, True
        state.rebuild([h])
    return stop, state, False


def _open_transaction(state: ProducerState, marker: Any) -> int:
    """The first offset of the transaction that control batch ``marker`` ends for its producer in ``state`` (the
    state before it), or -1 when it ends none with records here (no open transaction, or a fenced epoch's
    marker): only then did the writer give an abort an index entry (write_marker's rule)."""
    entry = state.producers.get(marker.producer_id)
    if entry is None or marker.producer_epoch < entry.epoch:
        return -1
    return entry.txn_first_offset


def repair_before_roll(local: LocalLog[S]) -> None:
    """Before the writer seals its active segment (a roll): drop its index's torn tail (a damaged last entry
    with no abort marker after it included) and any entry whose marker is not in the log, as the writer's
    load does (:func:`replay`). A writer that never loaded its producer state (plain appends only) rolled a
    crash's torn write into a sealed index, where it is damage and failed every read_committed read. Damage
    is left as it is, for readers and ``pylog verify`` to report (raising here would stop plain appends)."""
    segs = local.segments
    if not segs:
        return
    seg = segs[-1]
    try:
        active_entries(segs, seg, local.directory)
    except CorruptRecordError:
        return
    truncate_index(index_path(local.directory, seg.base_offset), seg.next_offset)


def missing_entries(segs: list[Any], directory: str) -> list[str]:
    """For ``pylog verify``: the abort markers of ``segs`` (the partition's segments in ``directory``) that end a
    transaction with records in the partition, each of which the writer gave an index entry before writing
    it, whose segment's index has no entry for them (an index file cut on an entry's boundary, emptied or
    deleted): read_committed reads return those transactions' records. The producer state is replayed from
    the first segment (a transaction whose records retention or compaction removed counts as one without
    records: never reported). An index that does not read is left to :func:`active_entries`."""
    state = ProducerState()
    problems: list[str] = []
    for seg in segs:
        path = index_path(directory, seg.base_offset)
        try:
            known: set[int] | None = {e.last_offset for e in read_index(path, seg is segs[-1])}
        except CorruptRecordError:
            known = None
        for _, h in seg.batch_headers(seg.size, True):
            if h.is_control and h.producer_id >= 0 and known is not None and h.base_offset not in known:
                first = _open_transaction(state, h)
                if first >= 0 and not _commits(seg.read(h.base_offset, 1, 1 << 16)[0], path, h.base_offset):
                    problems.append(f"{path}: no entry for the abort marker of producer {h.producer_id} at "
                                    f"offset {h.base_offset} (its transaction has records from offset "
                                    f"{first}): read_committed reads return them as committed")
            state.rebuild([h])
    return problems


View = tuple[list[Any], list[int]]


def check_unreplaced(local: LocalLog[S], before: View, start: int, end: int) -> None:
    """Raise :class:`SegmentReplacedError` when a segment holding offsets of ``[start, end)`` that was read
    (opened), in the view ``before`` a read or in the current one, is no longer the file its name holds: the
    aborted transactions looked up by name since may have lost entries of aborted batches that the replaced
    file, which the read went through, still holds (see the module's invariants). Run it after the lookup."""
    for segs, bases in (before, local.view):
        for seg in segs[max(0, bisect.bisect_right(bases, start) - 1):]:
            if seg.base_offset >= end:
                break
            if seg.inode is not None and not seg.same_file():
                raise SegmentReplacedError(seg.log_path)


def _aborted(ranges: dict[int, list[tuple[int, int]]], producer_id: int, offset: int) -> bool:
    return any(f <= offset <= last for f, last in ranges.get(producer_id, ()))


def filter_slices(slices: Iterable[ReadSlice], committed: bool, lso: int,
                  aborted: dict[int, list[tuple[int, int]]]) -> tuple[list[ReadSlice], int]:
    """``(kept, next offset)``: the slices without control batches, and for a ``committed`` read, cut at
    ``lso`` and without aborted transactions' batches; ``next offset`` is where a read goes on (after the
    last slice looked at, or ``lso`` when the read reached it), -1 when no slice was looked at."""
    kept: list[ReadSlice] = []
    nxt = -1
    for s in slices:
        h = s[0].header
        if committed and h.base_offset >= lso:  # no batch straddles the LSO: it is a batch's first offset
            nxt = lso
            break
        nxt = h.next_offset
        attrs = h.attributes
        if not attrs & (ATTR_CONTROL | ATTR_TRANSACTIONAL):
            kept.append(s)
        elif not attrs & ATTR_CONTROL and not (committed and _aborted(aborted, h.producer_id, h.base_offset)):
            kept.append(s)
    return kept, nxt


def isolated_read(read: Callable[[int], list[ReadSlice]], local: LocalLog[S], tracker: TxnTracker, offset: int,
                  committed: bool, aborted_of: Callable[[int, int], dict[int, list[tuple[int, int]]]] | None = None,
                  ) -> tuple[list[ReadSlice], int]:
    """``(slices, next offset)`` of a read at ``offset`` filtered by isolation level (:func:`filter_slices`):
    ``read(position)`` reads the raw slices; reads go on past what was all dropped until something is kept,
    the log end or (``committed``) the LSO is reached. ``next offset`` is where the next read starts when
    the caller has no record to go on from (``offset`` when the read found nothing). ``aborted_of(start,
    end)`` gives the aborted transactions of a range (default :func:`aborted_in` over ``local``; tiered
    storage adds the shipped indexes')."""
    lso = tracker.last_stable_offset(local) if committed else -1
    pos = offset
    while True:
        before = local.view
        slices = read(pos)  # first, at ``offset``: raises OffsetOutOfRangeError as a plain read does
        if not slices or (committed and pos >= lso):
            return [], pos
        aborted_range = aborted_of or (lambda start, end: aborted_in(local, start, end, tracker.sealed, tracker.torn))
        aborted: dict[int, list[tuple[int, int]]] = {}
        if committed and any(s[0].header.attributes & ATTR_TRANSACTIONAL for s in slices):
            aborted = aborted_range(pos, lso)
            check_unreplaced(local, before, pos, slices[-1][0].header.next_offset)
        kept, nxt = filter_slices(slices, committed, lso, aborted)
        if kept or nxt <= pos:
            return kept, max(nxt, pos)
        pos = nxt
