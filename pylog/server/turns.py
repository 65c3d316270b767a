"""The partitions the server writes in turns, handed over promptly to a pylog writer of another process.

Kafka clients' appends take a partition's writer lock as a writer taking turns (``in_turn``, see
:meth:`pylog.partition.Partition.wait_to_write`): a pylog producer or ``pylog produce`` in another
process asks for the lock (a shared ``flock`` on ``.want``) and the server hands it over after its append.
A server that goes idle after its last append would never look again, and the other process would wait out
its ``max_block_ms``. So :class:`Turns` remembers the partitions the server appended to and
:meth:`Turns.sweep` (every :data:`SWEEP_S` seconds, in the storage pool, while any is held) hands over those
another writer waits for, and lets go of the lock of those idle for :data:`IDLE_RELEASE_S`, so that the set
it looks at stays the partitions written lately (two system calls each per sweep; with thousands held the
server sweeps less often, so that sweeping takes at most a twentieth of one storage thread: a sweep waits
:data:`SWEEP_DUTY` times its own duration before the next). A sweep skips the
partitions appended to within the last :data:`SWEEP_S`: their append looked for a waiting writer itself (see
:meth:`Turns.note`), so a waiting writer is seen within two sweeps at the latest.

Invariants:
- A partition is handed over only between the server's appends (the sweep takes the partition's locks
  without blocking, as :meth:`~pylog.partition.PartitionInternals.hand_over` does), never during a retention
  or compaction pass; what the handover leaves is the partition's own hand-over (a clean checkpoint; the
  active segment fsynced by name at the next flush or close).
- The server appends only as a writer taking turns: before an append it waits (up to the request's
  timeout, at most :data:`TURN_WAIT_MS`) for a writer of another process to hand the lock back, asking it to.
- A sweep never raises for one partition: a partition it could not look at (out of descriptors for its
  ``.want`` probe) stays held and is looked at again by the next sweep.

Thread-safety: :meth:`Turns.note` and :meth:`Turns.sweep` may be called from any thread.
"""

from __future__ import annotations

import threading
import time

from ..errors import PylogError
from ..partition import Partition, internals

__all__ = ["Turns", "SWEEP_S", "SWEEP_DUTY", "IDLE_RELEASE_S", "TURN_WAIT_MS"]

#: How often the server looks whether another writer waits for a partition it holds (seconds); a pylog
#: producer's idle look is as frequent.
SWEEP_S = 0.01
#: A partition the server has not appended to for this long is let go of (seconds). Letting go and taking the
#: lock back cost ~0.6 ms of CPU and ~2.5 ms of the storage pool's time (a producer snapshot and checkpoint
#: written, the segment and indexes opened again), so a partition written every second or two must not pay it
#: per append: with 1 s, a confluent-kafka producer to 500 partitions had ~400 of them let go of and reopened
#: in a 3 s run (a third of the server's storage CPU). Holding costs one sweep probe (two system calls, ~2.5 us)
#: per partition per sweep meanwhile, which a server stops paying this long after its last append.
IDLE_RELEASE_S = 10.0
#: A sweep is followed by a pause of at least this many times its own duration (and at least :data:`SWEEP_S`):
#: sweeping takes at most a twentieth of a storage thread. 500 partitions held cost ~1.5 ms a sweep, so a writer
#: of another process waiting for one of them is seen within ~30 ms instead of ~10.
SWEEP_DUTY = 19
#: The longest a produce waits for another process's writer to hand a partition back (ms).
TURN_WAIT_MS = 5_000


class Turns:
    """The partitions the server holds for its appends, with when it last appended to each."""

    def __init__(self) -> None:
        self._held: dict[Partition, float] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def note(self, part: Partition) -> None:
        """The server just appended to ``part`` (in turn) and then looked whether another writer waits for it
        (:meth:`~pylog.partition.PartitionInternals.hand_over`): the sweep leaves it alone for :data:`SWEEP_S`."""
        with self._lock:
            self._held[part] = time.monotonic()

    def sweep(self, now: float | None = None) -> None:
        """Hand over each held partition another writer waits for; let go of those idle for
        :data:`IDLE_RELEASE_S`; forget those the server no longer holds. Never blocks on a partition.
        ``now``: the ``time.monotonic()`` to judge idleness by (the current one by default)."""
        if now is None:
            now = time.monotonic()
        with self._lock:
            held = list(self._held.items())
        for part, last in held:
            if now - last < SWEEP_S:
                # Appended to since the last sweep, and looked at by that append's own hand-over (the append
                # notes the partition after it): looked at again by the next append or the next sweep. Under
                # load, when most held partitions are appended to between sweeps, a sweep costs little.
                continue
            try:
                if part.is_writer:
                    if now - last >= IDLE_RELEASE_S:
                        internals(part).release_turn(blocking=False)
                    else:
                        internals(part).hand_over()
                gone = not part.is_writer
            except PylogError:  # a closed store, a deleted topic: nothing left to hand over
                gone = True
            except OSError:  # out of descriptors for the hand-over probe: still held, looked at again next sweep
                continue
            if gone:
                with self._lock:
                    if self._held.get(part) == last:  # not appended to again meanwhile
                        del self._held[part]
