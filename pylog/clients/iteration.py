"""Iterating a consumer (``for record in consumer``): each poll's records handed out through a C-level chain
of iterators, and the consumer's positions brought up to date as they are taken.

:class:`RecordChain` is the consumer's iteration state (:class:`~pylog.clients.consumer.Consumer` holds
one); it never sees the consumer: it gets the poll to draw from and the consumer's positions as arguments.

Invariants:
- At most one chunk is being handed out (``cur``): (partition, records, their list iterator), or
  (partition, None, an iterator building the rows as they are taken). Records are never handed out
  twice nor skipped: :meth:`RecordChain.settle` moves the partition's position past exactly the records
  taken, and with ``cut`` ends the chunk's iterator, which the chain then passes over.
- A poll's chunk for a partition that was sought, paused or taken from the consumer since the poll (its
  position is not where the poll started, or it is no longer readable) is dropped, never handed out.
- Chunks start at ``max_poll_records`` records and grow up to ``CHUNK_GROWTH`` times that while the
  caller takes one chunk in about ``CHUNK_SECONDS``: the group's state is looked at between chunks.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Mapping, MutableMapping, Protocol, cast

from ..structs import ConsumerRecord, TopicPartition

__all__ = ["RecordChain", "CHUNK_GROWTH", "CHUNK_SECONDS"]

#: Iteration reads ahead in chunks of ``max_poll_records`` records, grown (up to ``CHUNK_GROWTH`` times that)
#: while the caller takes records fast enough that one chunk lasts about ``CHUNK_SECONDS``: the group's
#: state is looked at between chunks (a rebalance waits for this member at most one chunk's time, as with
#: ``max_poll_records``), and a fast reader pays the per-poll costs once per thousands of records.
CHUNK_GROWTH = 16
CHUNK_SECONDS = 0.01

#: ``(timeout_ms, max_records) -> {partition: records}``: a poll that moves no position, its records a list
#: or an iterator building them as taken (``consumer_row_iter``).
Poll = Callable[[float, int], Mapping[TopicPartition, Any]]


class _ListIterator(Protocol):
    """What ``iter()`` of a list is (``list_iterator``, which typing does not name): an iterator that says
    how many items it has left and can be moved to any index (:meth:`RecordChain.settle` uses both)."""

    def __next__(self) -> ConsumerRecord: ...
    def __iter__(self) -> Iterator[ConsumerRecord]: ...
    def __length_hint__(self) -> int: ...
    def __setstate__(self, index: int) -> None: ...


class RecordChain:
    """A consumer's iteration state; see the module docstring for what it guarantees."""

    __slots__ = ("cur",)

    def __init__(self) -> None:
        #: The chunk being handed out, see the module docstring; None between chunks.
        self.cur: tuple[TopicPartition, list[ConsumerRecord] | None, Any] | None = None

    def settle(self, positions: MutableMapping[TopicPartition, int | None], cut: bool = False) -> None:
        """Bring the position (in ``positions``) of the partition being iterated up to date; with ``cut``,
        end its iterator."""
        cur = self.cur
        if cur is None:
            return
        tp, recs, it = cur
        if recs is None:  # rows built as taken (consumer_row_iter)
            nxt = it.next_offset
            if nxt >= 0 and tp in positions:
                positions[tp] = nxt
            if cut or not it.__length_hint__():
                it.close()  # ends it: the chain moves on to the next poll's iterators
                self.cur = None
            return
        taken = len(recs) - it.__length_hint__()
        if taken and tp in positions:
            positions[tp] = recs[taken - 1].offset + 1
        if cut or taken == len(recs):
            it.__setstate__(len(recs))  # exhausts it: the chain moves on to the next poll's lists
            self.cur = None

    def chunks(self, poll: Poll, positions: Callable[[], MutableMapping[TopicPartition, int | None]],
               readable: Callable[[TopicPartition], bool], timeout_ms: float,
               max_poll_records: int) -> Iterator[Iterator[ConsumerRecord]]:
        """The iterators of every poll's records, for ``itertools.chain.from_iterable``; ends after
        ``timeout_ms`` without records. ``positions``: the consumer's positions now (it replaces the
        mapping at reassignments); ``readable``: whether a partition is neither paused nor pending."""
        base = limit = max_poll_records
        while True:
            deadline = None if timeout_ms == float("inf") else time.monotonic() + timeout_ms / 1000
            while True:
                step = 1000.0 if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
                batch = poll(step, limit)
                if batch:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    return
            began = time.perf_counter()
            taken = sum(len(recs) if isinstance(recs, list) else recs.__length_hint__() for recs in batch.values())
            starts = {tp: positions().get(tp) for tp in batch}
            for tp, recs in batch.items():
                self.settle(positions())
                lazy = not isinstance(recs, list)  # rows built as taken: the iterator knows its next_offset
                if positions().get(tp, -1) != starts[tp] or not readable(tp):
                    if lazy:
                        recs.close()
                    continue  # sought, paused or unassigned since the poll: drop these
                it = recs if lazy else cast(_ListIterator, iter(recs))  # a list_iterator: see _ListIterator
                self.cur = (tp, None if lazy else recs, it)
                yield it
            self.settle(positions())
            # The next chunk: as many records as this caller took in about CHUNK_SECONDS (see there).
            elapsed = time.perf_counter() - began
            fit = int(taken * CHUNK_SECONDS / elapsed) if elapsed > 0 else base * CHUNK_GROWTH
            limit = min(max(fit, base), base * CHUNK_GROWTH)
