"""The record batch format: encode, validate and decode batches, as whole columns.

A batch is the unit of writing, checksumming, compression and indexing. The package's modules, lowest
first (``setup.cfg``'s import-linter contract keeps them in this order):

- :mod:`.format`: the byte layout (header struct, magic, attribute bits, :func:`check_header`); the only
  module that knows where a batch's fields are. docs/FORMAT.md is the full specification.
- :mod:`.record`: the :class:`Record` type (and :func:`now_ms`, :func:`gc_paused`).
- :mod:`.encode`: :func:`encode_parts` and friends, with :class:`EncodeOptions` (a batch's settings).
- :mod:`.views`: the read side, :class:`BatchView`, :class:`RecordColumns`, :func:`checked_prefix`.

Every public name is re-exported here: import from ``pylog.storage.records``. This package knows nothing
about files, offsets assignment or topics.
"""

from __future__ import annotations

from .encode import (EncodeOptions, column_parts, encode_batch, encode_columns, encode_parts, encode_runs_packed,
                     header_pairs, header_rows, part_cuts, slice_parts)
from .format import (CODEC_LZ4, CODEC_NONE, CREATE_TIME, CRC_START, HEADER, HEADER_SIZE, LENGTH_PREFIX,
                     LOG_APPEND_TIME, MAGIC, MAX_BATCH_SIZE, MAX_OFFSET, RECORD_OVERHEAD, BatchHeader, batch_crc,
                     check_header, crc32c, parse_header, stamp_base_offset)
from .record import Record, gc_paused, now_ms
from .record import _rebuild_record as _rebuild_record  # what pickles of records name (see .record)
from .views import BatchView, RecordColumns, checked_prefix
from .views import consumer_row_iter, consumer_rows, payload_bytes, slices_count, slices_records

__all__ = [
    "Record", "RecordColumns", "BatchHeader", "BatchView", "EncodeOptions",
    "encode_batch", "encode_columns", "encode_parts", "encode_runs_packed", "check_header", "parse_header",
    "stamp_base_offset", "batch_crc",
    "checked_prefix", "column_parts", "part_cuts", "slice_parts", "header_pairs", "header_rows",
    "crc32c", "now_ms", "gc_paused",
    "HEADER", "HEADER_SIZE", "LENGTH_PREFIX", "CRC_START", "MAGIC", "CODEC_NONE", "CODEC_LZ4",
    "CREATE_TIME", "LOG_APPEND_TIME", "MAX_BATCH_SIZE", "MAX_OFFSET", "RECORD_OVERHEAD",
    "consumer_rows", "consumer_row_iter", "payload_bytes", "slices_count", "slices_records",
]
