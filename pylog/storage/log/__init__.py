"""The parts of a partition (:class:`pylog.partition.Partition` wires them; its docstring numbers the invariants).

Each module owns one concern and states the invariants it keeps (the numbers are the partition's):

- :mod:`.writer_lock` (:class:`~.writer_lock.WriterLock`): the ``flock`` on ``.lock`` and turn-taking (4);
- :mod:`.local_log` (:class:`~.local_log.LocalLog`): the segment list, the log start, readers' refresh and reads
  (1, 2, 7);
- :mod:`.loader`: opening as the writer, recovery, interrupted swaps (3, 10);
- :mod:`.durability` (:class:`~.durability.Durability`): checkpoint, recovery point, rolls and their background
  fsync, flushes, the failed state (3, 5, 8);
- :mod:`.append` (:class:`~.append.Appender`): batch bounds, encoding, idempotent producers (1, 9);
  :mod:`.write` (:class:`~.write.BatchWriter`): writing a call's batches, rolls, the failure a write leaves,
  waking readers, the flush policy (1, 2, 8, 9); :mod:`.batches`: the write path's types;
- :mod:`.arguments`: the public API's arguments checked (a :class:`~pylog.errors.PylogError` before any lock
  is taken or byte written) and an append call's records shaped into the appender's columns (9);
- :mod:`.txn`: transactions' state (ongoing transactions, the last stable offset, the aborted-transaction index);
- :mod:`.maintenance`: retention, delete-records, the view side of compaction swaps (5, 6); with tiered storage,
  local retention deletes only shipped segments;
- :mod:`.remote_reads` (:class:`~.remote_reads.RemoteReads`): reads below the local log start served from the
  shipped segments (tiered storage), lock-free (1, 2, 7 across the boundary). The upload thread
  (:mod:`pylog.maintenance.remote_upload`) holds no lock while shipping and notes the remote end under the
  append lock (:meth:`~.internals.PartitionInternals.note_remote`), which local retention reads under it;
- :mod:`.waiting` (:class:`~.waiting.Waiters`): waking readers that wait for appends, here and in other processes;
  :mod:`.checks`: the full check;
- :mod:`.segments`: how the parts see a segment (:class:`~.segments.SegmentLike`), generic in its type;
- :mod:`.internals` (:class:`~.internals.PartitionInternals`): the partition's internal API, what pylog's own
  layers need beyond the public one, reached through :func:`pylog.partition.internals`, not exported (4, 6).

The parts never call each other's private names and never import :mod:`pylog.partition` or :mod:`pylog.segment`
(checked by ``lint-imports``); the partition passes each what it needs.
"""
