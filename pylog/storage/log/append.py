"""Turning an append call into batches: batch bounds, encoding, when to roll, and idempotent producers.

Invariants (numbered as in :mod:`pylog.partition`):
1. Offsets are dense (as written) and strictly increasing: each batch is encoded at the offset after the
   previous one (:meth:`Appender.encode_runs`), and a batch whose last offset would overflow the segment's
   relative offsets rolls first (:func:`should_roll`).
9. Every batch of a call is encoded and checked against ``max.message.bytes`` before any is written, so a
   call that fails validation appends nothing. A repeated idempotent producer call (a retry) is recognised
   by the producer table (:mod:`pylog.storage.producer_state`) and not appended again; a retry of a call
   that failed part-way appends only the batches that did not land.

:class:`Appender` owns the idempotent-producer table; it is used under the partition's append lock.
Nothing here writes a file except the producer snapshot.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple, Sequence

import numpy as np

from ...config import TopicConfig
from ...errors import InvalidRecordError, RecordTooLargeError
from ..filenames import SEGMENT_SNAPSHOT_SUFFIX, remove_segment_snapshots, segment_path
from ..producer_state import SNAPSHOT_FILE, ProducerState
from ..records import (CODEC_LZ4, CODEC_NONE, HEADER_SIZE, RECORD_OVERHEAD, BatchHeader, EncodeOptions, encode_parts,
                       encode_runs_packed,
                       now_ms, part_cuts, slice_parts)
from .batches import Data, EncodedBatch, Headers, Timestamps, nbytes
from ..txn_index import marker_record
from .local_log import LocalLog
from .txn import load_state, replay
from .segments import S, SegmentLike

__all__ = ["Appender", "Columns", "should_roll", "batches_fitting", "SEQ_MOD"]

log = logging.getLogger("pylog.partition")

_MAX_RELATIVE = 0xFFFFFFFF
#: compression.type values stored lz4 compressed: Kafka's codecs (a topic made by a Kafka client may name any).
_COMPRESSED = ("lz4", "gzip", "snappy", "zstd")
#: Producer sequence numbers wrap here.
SEQ_MOD = 1 << 31
#: A drain's batches go through the one-pass packed encoder only when they hold at least this many records
#: on average (see :meth:`Appender.encode_runs`).
PACKED_RECORDS_PER_BATCH = 4


class Columns(NamedTuple):
    """The records of one append call, as columns: value and key lengths (-1 for null) and their data
    parts (``contiguous``: one buffer per column; else one part per non-null item), timestamps, headers."""
    n: int
    vlens: np.ndarray
    vparts: list[Data]
    klens: np.ndarray | None
    kparts: list[Data]
    timestamps: Timestamps | None
    headers: Headers | None
    contiguous: bool

    def data_bytes(self) -> int | None:
        """Key + value bytes when cheap to know (contiguous columns), else None."""
        if not self.contiguous:
            return None
        return sum(map(nbytes, self.vparts)) + sum(map(nbytes, self.kparts))

    def after(self, skip: int) -> "Columns":
        """The records from ``skip`` on."""
        vlens, vparts = slice_parts(self.vlens, self.vparts, skip, self.n, self.contiguous)
        klens, kparts = self.klens, self.kparts
        if klens is not None:
            klens, kparts = slice_parts(klens, kparts, skip, self.n, self.contiguous)
        return Columns(self.n - skip, vlens, vparts, klens, kparts,
                       None if self.timestamps is None else self.timestamps[skip:],
                       None if self.headers is None else self.headers[skip:], self.contiguous)


class Appender:
    """Batch layout and encoding for one partition, and its idempotent-producer table."""

    def __init__(self, name: str, directory: str, config: TopicConfig) -> None:
        self.name = name  # "topic-number", for messages
        self.directory = directory
        self.config = config
        self._producers: ProducerState | None = None  # loaded on the first idempotent append

    def check_keys(self, cols: Columns, topic: str) -> None:
        """A compacted topic needs a key on every record."""
        if self.config.compact and (cols.klens is None or int(cols.klens.min()) < 0):
            raise InvalidRecordError(f"{topic} is compacted: every record needs a key")

    def codec(self, requested: str | None = None) -> int:
        setting = self.config["compression.type"]
        if setting == "producer":
            setting = requested or "none"
        if setting in ("none", "uncompressed"):
            return CODEC_NONE
        if setting not in _COMPRESSED:
            raise InvalidRecordError(f"compression {setting!r} is not supported (lz4 or none)")
        return CODEC_LZ4  # a topic set to one of Kafka's other codecs is stored with pylog's one codec

    def batch_bounds(self, cols: Columns, batch_size: int | None = None) -> list[tuple[int, int]]:
        """Split records [0, n) into runs whose encoded size stays within max.message.bytes, and within
        ``batch_size`` bytes (a producer's ``batch_size``, Kafka's ``batch.size``) when given: at least one
        record per run, so a record larger than ``batch_size`` is a batch of its own. Sizes are counted
        before compression, with the records' estimated overhead (never below what is written)."""
        limit = self.config["max.message.bytes"]
        if batch_size is not None and batch_size < limit:
            limit = batch_size
        return batch_bounds(limit - HEADER_SIZE, cols.n, cols.vlens, cols.klens, cols.headers, cols.data_bytes())

    # ------------------------------------------------------------------ idempotence

    def producer_state(self, local: LocalLog[S]) -> ProducerState:
        """The idempotent-producer table, loaded on first use: the snapshot, then the batch headers after it."""
        state = self._producers
        if state is None:
            state, start = load_state(self.directory, local.segments[-1].next_offset)
            # The aborted-transaction index is made to match the log as the headers are replayed.
            replay(state, local, start, repair=True)
            self._producers = state
        return state

    def snapshot_producers(self, end_offset: int, durable: bool = True, rolled: bool = False,
                           shipping: bool = True) -> None:
        """Write the producer table's snapshot (if loaded) as of ``end_offset``. At a roll (``rolled``) of a
        topic with ``remote.storage.enable``, also keep it as ``<end_offset>.snapshot`` (a hard link: the
        next snapshot replaces ``producer.snapshot`` by rename), which the rolled segment is shipped with
        (docs/ARCHITECTURE.md, "Tiered storage", point 5); the upload thread removes it once shipped.
        Without ``shipping`` (the store has no remote location: nothing ships, so nothing removes them) only
        the newest is kept: the one an upload thread catching up later ships with the last closed segment,
        which is the producer state a restore takes (the segments before it ship without one)."""
        if self._producers is not None:
            self._producers.expire(now_ms(), self.config["producer.id.expiration.ms"])
            self._producers.write_snapshot(self.directory, end_offset, durable=durable)
            if rolled and self.config["remote.storage.enable"]:
                _keep_segment_snapshot(self.directory, end_offset)
                if not shipping:
                    remove_segment_snapshots(self.directory, end_offset - 1)

    def forget_producers(self) -> None:
        """Another writer may append idempotent batches before this handle writes again: reload then."""
        self._producers = None

    # ------------------------------------------------------------------ encoding

    def encode_runs(self, first: int, bounds: list[tuple[int, int]], cols: Columns,
                    producer: tuple[int, int, int] | None = None,
                    compression: str | None = None, transactional: bool = False) -> list[EncodedBatch]:
        """Encode records [start, stop) of each bound as one batch, the first at offset ``first``, halving
        any batch that comes out over max.message.bytes; a single record that does not fit raises
        RecordTooLargeError."""
        codec = self.codec(compression)
        log_append = self.config.log_append_time
        max_bytes = self.config["max.message.bytes"]
        now = now_ms()
        n, vlens, vparts, klens, kparts, timestamps, headers, contiguous = cols
        pid, epoch, seq = producer if producer is not None else (-1, -1, -1)
        out: list[EncodedBatch] = []
        todo = list(reversed(bounds))
        base = first
        # Many batches (a producer's batch_size): where each record's data starts, found once, not per batch.
        vcuts = kcuts = None
        stamp = now
        if len(bounds) > 1:
            vcuts = part_cuts(vlens, contiguous)
            kcuts = None if klens is None else part_cuts(klens, contiguous)
            if isinstance(timestamps, np.ndarray) and timestamps.dtype == np.int64 and not log_append:
                raw = timestamps.tobytes()
                if n and raw[:8] * n == raw:
                    # One stamp for all (a producer's drain): each batch is given it as its default
                    # timestamp instead of a column to look at, which writes the same bytes.
                    stamp = int(timestamps[0])
                    timestamps = None
        if len(bounds) > 1 and n >= PACKED_RECORDS_PER_BATCH * len(bounds) and headers is None and (
                not contiguous and codec == CODEC_NONE and (timestamps is None or isinstance(timestamps, np.ndarray))):
            # A producer's drain cut at batch_size: every batch in one compiled pass, into one buffer that
            # the writer writes with one writev (:meth:`BatchWriter.write`); declined inputs go on below.
            # Not for batches of a record or two (records near or over batch_size): copying their values
            # into a fresh buffer costs more than the batch-by-batch path, which writes them where they are.
            packed = encode_runs_packed(vlens, vparts, klens, kparts, timestamps, [stop for _, stop in bounds],
                                        EncodeOptions(first, stamp, codec, log_append, pid, epoch, seq, False,
                                                      transactional), max_bytes)
            if packed is not None:
                data, heads = packed
                pos = 0
                for h in heads:
                    end = pos + h.size
                    out.append(EncodedBatch([data[pos:end]], h))
                    pos = end
                return out
        while todo:
            start, stop = todo.pop()
            if start == 0 and stop == n:
                vl, vp, kl, kp = vlens, vparts, klens, kparts
            else:
                vl, vp = slice_parts(vlens, vparts, start, stop, contiguous, vcuts)
                kl, kp = (None, []) if klens is None else slice_parts(klens, kparts, start, stop, contiguous, kcuts)
            # Options built positionally (EncodeOptions' field order): this runs for every batch written.
            parts, h = encode_parts(
                value_lengths=vl, value_data=vp, key_lengths=kl, key_data=kp,
                timestamps=None if timestamps is None else timestamps[start:stop],
                headers=None if headers is None else headers[start:stop],
                options=EncodeOptions(base, stamp, codec, log_append, pid, epoch,
                                      -1 if pid < 0 else (seq + start) % SEQ_MOD, False, transactional))
            if h.size > max_bytes:
                if stop - start == 1:
                    raise RecordTooLargeError(
                        f"record {start} needs {h.size} bytes, over max.message.bytes ({max_bytes}) of {self.name}")
                mid = (start + stop) // 2
                todo.extend([(mid, stop), (start, mid)])
                continue
            out.append(EncodedBatch(parts, h))
            base = h.next_offset
        return out


    def encode_marker(self, first: int, producer_id: int, epoch: int, commit: bool,
                      coordinator_epoch: int) -> EncodedBatch:
        """A transaction marker at offset ``first``: a control batch of one record, uncompressed, sequence -1
        (Kafka's control batches)."""
        key, value = marker_record(commit, coordinator_epoch)
        parts, h = encode_parts(values=[value], keys=[key], options=EncodeOptions(
            first, now_ms(), CODEC_NONE, self.config.log_append_time, producer_id, epoch, -1, True, True))
        return EncodedBatch(parts, h)


def batch_bounds(limit: int, n: int, vlens: np.ndarray, klens: np.ndarray | None,
                 headers: Headers | None, data_bytes: int | None = None) -> list[tuple[int, int]]:
    """Split records [0, n) into runs whose encoded body stays within ``limit`` bytes.

    ``data_bytes``, when the caller knows it (columnar appends), is the key + value bytes.
    """
    if headers is None:  # cheap upper bound first: most appends fit in one batch
        if data_bytes is None:
            data_bytes = int(vlens.sum()) + (int(klens.sum()) if klens is not None else 0) + 2 * n
        if data_bytes + RECORD_OVERHEAD * n <= limit:
            return [(0, n)]
    sizes = np.maximum(vlens, 0).astype(np.int64) + RECORD_OVERHEAD
    if klens is not None:
        sizes += np.maximum(klens, 0)
    if headers is not None:
        # An estimate (UTF-8 keys, msgpack's worst-case prefixes); encoded batches are checked exactly.
        sizes += np.fromiter((sum(len(k.encode()) + len(v or b"") + 11 for k, v in h) + 5 if h else 1
                              for h in headers), np.int64, n)
    total = int(sizes.sum())
    if total <= limit:
        return [(0, n)]
    cum = np.cumsum(sizes)
    bounds = []
    start = 0
    base = 0
    # A run holds at most this many records (each is counted at least RECORD_OVERHEAD bytes): each search
    # looks at that window of ``cum`` only, which stays in cache (a search over a whole drain's does not).
    most = max(limit, 0) // RECORD_OVERHEAD + 1
    while start < n:
        stop = start + int(cum[start:start + most].searchsorted(base + limit, side="right"))
        stop = max(stop, start + 1)
        bounds.append((start, stop))
        base = int(cum[stop - 1])
        start = stop
    return bounds


def should_roll(config: TopicConfig, seg: SegmentLike, h: BatchHeader) -> bool:
    """Whether batch ``h`` goes into a new segment rather than the active ``seg``."""
    if seg.size + h.size > config["segment.bytes"]:
        return True
    first = seg.first_timestamp
    if first is not None and h.max_timestamp - first > _roll_age(config):
        return True
    if h.last_offset - seg.base_offset > _MAX_RELATIVE:
        return True
    return seg.index_full


def _keep_segment_snapshot(directory: str, end_offset: int) -> None:
    """Link the producer snapshot just written as ``<end_offset>.snapshot``; a failure only costs the shipped
    segment its snapshot (a restore then rebuilds the state from batch headers), so it is logged, not raised."""
    target = segment_path(directory, end_offset, SEGMENT_SNAPSHOT_SUFFIX)
    try:
        try:
            os.unlink(target)  # one left by an earlier roll at this offset (a log cut back and rolled again)
        except FileNotFoundError:
            pass
        os.link(os.path.join(directory, SNAPSHOT_FILE), target)
    except OSError as exc:
        log.warning("%s: the producer snapshot at %d is not kept for tiered storage: %s", directory, end_offset, exc)


def _roll_age(config: TopicConfig) -> int:
    # A compacted topic also rolls by max.compaction.lag.ms: the cleaner never touches the active
    # segment, so a record could otherwise wait longer than promised (Kafka does the same).
    return min(config["segment.ms"], config["max.compaction.lag.ms"]) if config.compact else config["segment.ms"]


def batches_fitting(config: TopicConfig, seg: SegmentLike, headers: Sequence[BatchHeader]) -> int:
    """How many of ``headers`` from the first go into ``seg`` one after the other without a roll, the first
    being known to (it is written whatever :func:`should_roll` says when ``seg`` is empty): what
    :func:`should_roll` would say before each, judged once for the run (its conditions only grow along it).
    An index with fewer free entries than there are batches stops the run at one batch: the caller then
    writes batch by batch, asking :func:`should_roll` each time."""
    if len(headers) < 2 or seg.index_room() < len(headers):
        return 1
    limit = config["segment.bytes"] - seg.size
    age = _roll_age(config)
    first = seg.first_timestamp
    if first is None:
        first = headers[0].max_timestamp
    last_relative = seg.base_offset + _MAX_RELATIVE
    used = headers[0].size
    count = 1
    for h in headers[1:]:
        used += h.size
        if used > limit or h.max_timestamp - first > age or h.last_offset > last_relative:
            break
        count += 1
    return count
