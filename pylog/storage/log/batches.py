"""What an append hands the storage core, typed: the write path's types from the partition's append methods
down to :meth:`pylog.segment.Segment.append`.

:class:`~pylog.partition.Partition`'s append methods (and :class:`~pylog.partition.PartitionInternals`' in-turn
ones, for the producer and ``pylog serve``'s Produce) take these; :mod:`.append` turns a call into
:class:`Columns` and then into :class:`EncodedBatch` es, which the partition writes with
``Segment.append(batch.header, batch.parts, ...)``. The types name what each argument holds so that mypy
follows a record from ``Producer.send()`` or a Kafka Produce request to the segment's ``writev`` with no
``Any`` at the storage boundary. :mod:`pylog.partition` re-exports them for the layers above.

Invariants: nothing here does anything; the aliases are unions of concrete types (no ``Any``). :data:`Data`
(a bytes-like buffer) is :mod:`pylog.storage.fileio`'s, what its ``write_all`` takes.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence, TypeAlias

import numpy as np

from ..fileio import Data, nbytes
from ..records import BatchHeader

__all__ = ["Data", "RecordHeaders", "Headers", "Timestamps", "EncodedBatch", "nbytes"]

#: One record's headers: ``(key, value)`` pairs, a value None for a header without one.
RecordHeaders: TypeAlias = Sequence[tuple[str, bytes | None]]

#: The headers of an append call's records, one item per record (None or empty: no headers).
Headers: TypeAlias = Sequence[RecordHeaders | None]

#: The timestamps of an append call's records in ms since the epoch, one per record: a sequence (a None item
#: takes the append time) or an integer numpy array.
Timestamps: TypeAlias = Sequence[int | None] | np.ndarray


class EncodedBatch(NamedTuple):
    """One batch ready to write: its parts (the header's bytes, then the body's parts, written with one
    ``writev``) and its parsed header (offsets, size, timestamps)."""
    parts: list[Data]
    header: BatchHeader

