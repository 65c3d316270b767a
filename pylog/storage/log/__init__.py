"""The parts of a partition (:class:`pylog.partition.Partition` wires them; its docstring numbers the invariants).

Each module owns one concern and states the invariants it keeps: :mod:`.writer_lock` (the ``flock`` and
turn-taking), :mod:`.local_log` (the segment list, readers' refresh and reads), :mod:`.loader` (opening as the
writer, recovery, interrupted swaps), :mod:`.durability` (checkpoint, recovery point, rolls, flushes, the failed
state), :mod:`.append` (batch bounds, encoding, idempotent producers), :mod:`.maintenance` (retention,
delete-records, the view side of compaction swaps) and :mod:`.waiting` (waking readers). The parts never call
each other's private names and never import :mod:`pylog.partition`; the partition passes each what it needs.
"""
