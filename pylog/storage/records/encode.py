"""Encoding record batches: from Python lists or from columns to the bytes of :mod:`.format`.

Invariants:
- :func:`encode_parts` only produces batches that :func:`~.format.check_header` and
  :class:`~.views.BatchView` accept, and decoding returns exactly what was encoded (keys, values, nulls,
  headers, timestamps).
- Every input is checked before it is trusted: columns that disagree in length, non-bytes items, lengths
  below -1, headers that are not ``(str, bytes | None)`` pairs (or whose keys UTF-8 cannot encode),
  timestamps that are not int64s, unknown codecs, offsets past int64 and batches over the format's size
  limit (before compression too) raise :class:`~pylog.errors.InvalidRecordError`, never a foreign
  exception or a batch a reader would refuse.
- Work is per batch (numpy arrays, one ``struct`` call, bytes joins), never a Python loop per record on
  the common paths: this runs for every append.
- With the compiled accelerator (:mod:`pylog.accel`), :func:`column_parts` and :func:`encode_parts` hand
  the common inputs (items exactly bytes, bytearray or None; lists of parts; dense offsets) to
  ``native.column_lengths`` / ``native.encode_columns``, which lay out the batch in one output buffer with
  its CRC. They decline (return None) any input they do not handle exactly as the code here does, and this
  code then runs: the bytes written and the errors raised are the same on both paths.
- :func:`encode_runs_packed` (compiled only) encodes an append call's many batches (a producer's drain cut at
  ``batch_size``) in one call, into one buffer, each batch byte for byte what :func:`encode_parts` gives for
  its records; it declines (None) whatever it does not handle, and the caller encodes batch by batch.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Sequence

import lz4.block as _lz4
import msgpack
import numpy as np

from ...accel import native
from ...errors import InvalidRecordError
from .format import (ATTR_CONTROL, ATTR_HEADERS, ATTR_KEYS, ATTR_LOG_APPEND_TIME, ATTR_OFFSET_DELTAS,
                     ATTR_TIMESTAMPS, ATTR_TRANSACTIONAL, CODEC_LZ4, CODEC_MASK, CODEC_NONE, HEADER_SIZE, I32, I64,
                     LENGTH_PREFIX, MAGIC, MAX_BATCH_SIZE, MAX_OFFSET, BatchHeader, length_stats, pack_header)
from .record import now_ms

__all__ = ["EncodeOptions", "encode_parts", "encode_batch", "encode_columns", "column_parts", "slice_parts",
           "encode_parts_pure", "column_parts_pure", "part_cuts", "header_pairs", "header_rows", "HeaderRows",
           "NATIVE_ENCODE", "encode_runs_packed"]

_LENGTH_STRUCTS: dict[int, struct.Struct] = {}  # "<{n}i" packers for length columns, by n
# The compiled functions, or None in pure Python (or with a build older than them).
_native_lengths = getattr(native, "column_lengths", None)
_native_encode = getattr(native, "encode_columns", None)
_native_batches = getattr(native, "encode_batches", None)
#: Whether :func:`encode_parts` and :func:`column_parts` have their compiled path.
NATIVE_ENCODE: bool = _native_encode is not None and _native_lengths is not None


class EncodeOptions(NamedTuple):
    """The per-batch settings of :func:`encode_parts`: everything about a batch but its records.

    Immutable (a NamedTuple rather than a frozen dataclass: one is built per encoded batch, and a
    NamedTuple is built in a third of the time); ``options._replace(codec=CODEC_LZ4)`` derives another.
    """

    #: Offset of the batch's first record (an appender stamps it again with ``stamp_base_offset``).
    base_offset: int = 0
    #: Timestamp (ms) of records given none, and of every record with ``log_append_time``; None: now.
    default_timestamp: int | None = None
    #: ``CODEC_NONE`` or ``CODEC_LZ4`` (an incompressible body is stored plain).
    codec: int = CODEC_NONE
    #: LogAppendTime: the batch carries ``default_timestamp`` for all its records, no timestamp column.
    log_append_time: bool = False
    #: Idempotent producer fields (-1: none).
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    #: A control batch (transaction markers).
    control: bool = False
    #: A transactional batch (attribute bit 4): part of a producer's transaction (docs/FORMAT.md).
    transactional: bool = False


_DEFAULT_OPTIONS = EncodeOptions()
#: Column buffers up to this many bytes in all go to the compiled encoder, which copies them into one buffer:
#: a copy of this size costs a few microseconds, the pure path's fixed cost ~25 (a Kafka client's Produce per
#: partition batch of a few dozen records, appended by ``pylog serve``, is this case). Larger ones are written
#: uncopied by the pure path.
NATIVE_COPY_BYTES = 64 * 1024


# -------------------------------------------------------------------------------------------- columns


_BYTES_OR_NONE = (bytes, bytearray, memoryview, type(None))
_NOTHING = object()


def column_parts(items: Sequence[Any] | None, n: int, what: str) -> tuple[Any, list]:
    """``(lengths, parts)`` of a key or value column given as ``n`` items (bytes-like or None): what
    :func:`column_parts_pure` returns, by one compiled pass over the items when they are all exactly bytes,
    bytearray or None (the common case)."""
    if _native_lengths is not None and items is not None and len(items) == n:
        got = _native_lengths(items)
        if got is not None:
            raw, nulls = got
            if nulls:
                return np.frombuffer(raw, I32), [v for v in items if v is not None]
            return np.frombuffer(raw, I32), items if isinstance(items, list) else list(items)
    return column_parts_pure(items, n, what)


def column_parts_pure(items: Sequence[Any] | None, n: int, what: str) -> tuple[Any, list]:
    """``(lengths, parts)`` of a key or value column given as ``n`` items (bytes-like or None).

    ``lengths`` is an int32 array with -1 for None (None when ``items`` is None: no column), ``parts`` the
    non-null items in order, ready to be joined (or written) as the column's data section. The lengths are
    packed by one C-level ``struct`` call when no item is None, the common case.

    :raises InvalidRecordError: when ``items`` does not hold ``n`` items (``what`` names the column).
    """
    if items is None:
        return None, []
    if len(items) != n:
        raise InvalidRecordError(f"{what}: {len(items)} items for {n} records")
    try:
        # struct packs the lengths from a C-level map in one call: faster than numpy.fromiter here.
        st = _LENGTH_STRUCTS.get(n)
        if st is None:
            if len(_LENGTH_STRUCTS) > 64:
                _LENGTH_STRUCTS.clear()
            st = _LENGTH_STRUCTS[n] = struct.Struct(f"<{n}i")
        lengths = np.frombuffer(st.pack(*map(len, items)), I32)
        parts = items if isinstance(items, list) else list(items)
    except (TypeError, struct.error) as exc:
        bad = next((v for v in items if not isinstance(v, _BYTES_OR_NONE)), _NOTHING)
        if bad is not _NOTHING:
            raise InvalidRecordError(f"{what} must be bytes or None, got {type(bad).__name__}: serialize them "
                                     "first (e.g. str.encode())") from exc
        lengths = np.fromiter((-1 if v is None else len(v) for v in items), I32, n)
        parts = [v for v in items if v is not None]
    return lengths, parts


def header_pairs(h: Any) -> tuple:
    """One record's headers as a tuple of ``(str, bytes | None)`` pairs (bytearray and memoryview values
    become bytes), what the encoder writes and the decoder gives back.

    :raises InvalidRecordError: for anything else: not an iterable of pairs (a str, a dict's keys, a bare
        int), a pair of the wrong length, a key that is not a ``str`` or cannot be UTF-8 encoded (a lone
        surrogate), a value that is not bytes-like or None. The message shows the offending item.
    """
    if isinstance(h, (str, bytes, bytearray, memoryview, dict)):
        raise InvalidRecordError(f"a record's headers must be a list of (str, bytes | None) pairs, got {h!r:.80}")
    out = []
    try:
        for pair in h:
            k, v = pair
            if not isinstance(k, str) or not (v is None or isinstance(v, (bytes, bytearray, memoryview))):
                raise InvalidRecordError(f"a header must be a (str, bytes | None) pair, got {pair!r:.80}")
            out.append((k, bytes(v) if isinstance(v, (bytearray, memoryview)) else v))
    except (TypeError, ValueError):  # not iterable, or an item that is not a pair
        raise InvalidRecordError(f"a record's headers must be a list of (str, bytes | None) pairs, got "
                                 f"{h!r:.80}") from None
    for k, _ in out:
        if not k.isascii():
            try:
                k.encode()
            except UnicodeEncodeError as exc:  # msgpack writes keys as UTF-8 text
                raise InvalidRecordError(f"header key {k!r:.80} cannot be encoded as UTF-8: {exc.reason}") from None
    return tuple(out)


class HeaderRows(list):
    """Headers :func:`header_rows` checked, one tuple of pairs per record: the encoder takes them (and their
    slices, which stay of this type) without checking them again."""

    __slots__ = ()

    def __getitem__(self, i: Any) -> Any:
        got = list.__getitem__(self, i)
        return HeaderRows(got) if isinstance(i, slice) else got


def header_rows(headers: Sequence[Any] | None, n: int) -> HeaderRows | None:
    """The headers of ``n`` records checked by :func:`header_pairs`, one tuple per record (empty for a
    record without headers), or None when no record has any.

    :raises InvalidRecordError: when ``headers`` is not a sequence of ``n`` items, or an item is bad.
    """
    if headers is None:
        return None
    if type(headers) is HeaderRows and len(headers) == n:
        return headers if any(headers) else None
    try:
        count = len(headers)
    except TypeError:
        raise InvalidRecordError(f"headers must be a list with one list of pairs per record, got "
                                 f"{type(headers).__name__}") from None
    if isinstance(headers, (str, bytes, bytearray, memoryview, dict)):
        raise InvalidRecordError(f"headers must be a list with one list of pairs per record, got {headers!r:.80}")
    if count != n:
        raise InvalidRecordError(f"headers: {count} items for {n} records")
    rows = HeaderRows([header_pairs(h) if h else () for h in headers])
    return rows if any(rows) else None


def _headers_blob(headers: Sequence[Any] | None, n: int) -> bytes | None:
    """The msgpack headers section of ``n`` records, or None when no record has headers. No limit on the
    number of headers besides the batch's size (Kafka has none either): the decoder bounds what it reads
    by the section's length alone (:meth:`~.views.BatchView.headers`)."""
    rows = header_rows(headers, n)
    if rows is None:
        return None
    try:
        return msgpack.packb(rows, use_bin_type=True)
    except (ValueError, OverflowError) as exc:  # an item of 4 GiB or more: msgpack's own limit
        raise InvalidRecordError(f"headers exceed the format's limit: {exc}") from None


def slice_parts(lengths: np.ndarray, parts: list, start: int, stop: int, contiguous: bool,
                cuts: np.ndarray | None = None) -> tuple[np.ndarray, list]:
    """Lengths and data parts of records [start, stop) of a column whose null items have no part.
    ``cuts``, from :func:`part_cuts` of the same column, makes it O(stop - start) (a call cut into many
    batches slices each of them)."""
    lens = lengths[start:stop]
    if cuts is not None:
        lo, hi = int(cuts[start]), int(cuts[stop])
        if contiguous:
            return lens, [memoryview(parts[0])[lo:hi]] if parts else []
        return lens, parts[lo:hi]
    if contiguous:
        clipped = np.maximum(lengths, 0)
        lo = int(clipped[:start].sum())
        hi = lo + int(clipped[start:stop].sum())
        return lens, [memoryview(parts[0])[lo:hi]] if parts else []
    present = lengths >= 0
    lo = int(present[:start].sum())
    hi = lo + int(present[start:stop].sum())
    return lens, parts[lo:hi]


def part_cuts(lengths: np.ndarray, contiguous: bool) -> np.ndarray:
    """Where each record's data starts in a column's parts, and where the last ends (n + 1 items): the
    byte position in the one buffer (``contiguous``), else the index of its part (nulls have none)."""
    steps = np.maximum(lengths, 0).astype(np.int64) if contiguous else (lengths >= 0)
    cuts = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(steps, out=cuts[1:])
    return cuts


def _value_column(values: Sequence[bytes | None] | None, value_lengths: np.ndarray | None,
                  value_data: Any) -> tuple[np.ndarray, list]:
    """``(lengths, parts)`` of the values, given as a list or as a column; at least one."""
    if value_lengths is not None:
        vlens = np.ascontiguousarray(value_lengths, dtype=I32)
        vparts = value_data if isinstance(value_data, list) else [value_data if value_data is not None else b""]
    else:
        if values is None:
            raise InvalidRecordError("no values given")
        vlens, vparts = column_parts(values, len(values), "values")
    if len(vlens) == 0:
        raise InvalidRecordError("a batch needs at least one record")
    return vlens, vparts


def _key_column(keys: Sequence[bytes | None] | None, key_lengths: np.ndarray | None, key_data: Any,
                n: int) -> tuple[bytes | None, list, int, int]:
    """``(lengths as bytes, parts, min length, data bytes)`` of the keys; ``(None, [], 0, 0)`` when the batch
    needs no key column (no keys given, or all of them null)."""
    klens: np.ndarray | None
    if key_lengths is not None:
        klens = np.ascontiguousarray(key_lengths, dtype=I32)
        if len(klens) != n:
            raise InvalidRecordError(f"keys: {len(klens)} lengths for {n} records")
        kparts = key_data if isinstance(key_data, list) else [key_data if key_data is not None else b""]
    else:
        klens, kparts = column_parts(keys, n, "keys")
    if klens is None:
        return None, [], 0, 0
    kraw = klens.tobytes()
    kmin, kbytes, kuniform = length_stats(kraw, n)
    if kuniform and kmin == -1:
        return None, [], 0, 0  # all keys null: no column at all
    return kraw, kparts, kmin, kbytes


def _timestamp_column(timestamps: Sequence[int | None] | np.ndarray, n: int,
                      default_timestamp: int) -> tuple[int, int, np.ndarray | None]:
    """``(first timestamp, max timestamp, deltas from the first or None when all are equal)`` of the
    given timestamps (None items take ``default_timestamp``).

    :raises InvalidRecordError: unless there are ``n`` of them, each an integer in int64 or None (a str,
        a float or a bool is refused, not converted: ``"1"`` and ``1.5`` are mistakes, not milliseconds).
    """
    if isinstance(timestamps, np.ndarray):
        if timestamps.dtype.kind != "i" or timestamps.ndim != 1:
            raise InvalidRecordError(f"timestamps must be integer milliseconds, got an array of {timestamps.dtype}")
        ts_arr = timestamps.astype(I64, copy=False)
    else:
        ts_arr = _timestamp_array(timestamps, n, default_timestamp)
    if len(ts_arr) != n:
        raise InvalidRecordError(f"timestamps: {len(ts_arr)} items for {n} records")
    first_ts = int(ts_arr[0])
    raw_ts = ts_arr.tobytes()
    if raw_ts[:8] * n == raw_ts:
        # One timestamp for every record (a producer's drain stamps its batch once): no column. A
        # memcmp finds it faster than numpy's min and max, which cost ~12 us for a one-record batch.
        return first_ts, first_ts, None
    return first_ts, int(ts_arr.max()), ts_arr - first_ts


def _timestamp_array(timestamps: Sequence[Any], n: int, default_timestamp: int) -> np.ndarray:
    """The int64 array of ``n`` timestamps given as a sequence of ints and Nones (see :func:`_timestamp_column`)."""
    try:
        count = len(timestamps)
    except TypeError:
        raise InvalidRecordError(f"timestamps must be a list of int milliseconds or None, got "
                                 f"{type(timestamps).__name__}") from None
    if count != n:  # before fromiter, which would drop extra items or raise ValueError
        raise InvalidRecordError(f"timestamps: {count} items for {n} records")
    # The common case, Python ints all: one C-level conversion whose dtype says they were ints.
    try:
        arr = np.array(timestamps)
    except (ValueError, TypeError, OverflowError):  # ragged nesting, an int beyond numpy's: checked below
        arr = None
    if arr is not None and arr.dtype.kind == "i" and arr.ndim == 1:
        return arr.astype(I64, copy=False)
    bad = next((t for t in timestamps if t is not None and (type(t) is bool or not isinstance(t, (int, np.integer)))),
               _NOTHING)
    if bad is not _NOTHING:
        raise InvalidRecordError(f"timestamps must be int milliseconds or None, got {type(bad).__name__} {bad!r:.40}")
    try:
        return np.fromiter((default_timestamp if t is None else t for t in timestamps), I64, n)
    except OverflowError as exc:
        raise InvalidRecordError(f"timestamps must fit int64 milliseconds ({exc})") from None


def _offset_column(offset_deltas: np.ndarray, n: int) -> tuple[np.ndarray | None, int]:
    """``(offset deltas, or None when they are dense after all; last offset delta)``."""
    given = np.asarray(offset_deltas)
    if given.dtype.kind not in "iu" or (len(given) and int(given.max()) > 0x7FFFFFFF):
        # Checked before the int32 cast, which would wrap 2**32 + 1 to 1 and pass as a valid delta.
        raise InvalidRecordError("offset deltas must be integers that fit an int32")
    deltas = np.ascontiguousarray(given, dtype=I32)
    if len(deltas) != n or deltas[0] != 0 or (n > 1 and not (np.diff(deltas) > 0).all()):
        raise InvalidRecordError("offset deltas must start at 0 and strictly increase")
    last_delta = int(deltas[-1])
    return (None if last_delta == n - 1 else deltas), last_delta


def _check_offsets(base_offset: int, last_delta: int) -> None:
    """:raises InvalidRecordError: unless every offset of the batch fits what a reader accepts
    (``0 <= base_offset`` and ``base_offset + last_delta <= MAX_OFFSET``, :func:`~.format.check_header`)."""
    if not 0 <= base_offset <= MAX_OFFSET - last_delta:
        raise InvalidRecordError(f"base offset {base_offset} + last offset delta {last_delta} is out of range "
                                 f"[0, {MAX_OFFSET}]")


def _sections(deltas: np.ndarray | None, ts_deltas: np.ndarray | None, kraw: bytes | None, vraw: bytes,
              kparts: list, vparts: list, hblob: bytes | None) -> tuple[list, int]:
    """The body's sections in the format's order (see :mod:`.format`), and the attribute bits that say
    which optional columns are present."""
    attrs = 0
    body_parts: list[Any] = []
    if deltas is not None:
        attrs |= ATTR_OFFSET_DELTAS
        body_parts.append(deltas.tobytes())
    if ts_deltas is not None:
        attrs |= ATTR_TIMESTAMPS
        body_parts.append(ts_deltas.tobytes())
    if kraw is not None:
        attrs |= ATTR_KEYS
        body_parts.append(kraw)
    body_parts.append(vraw)
    body_parts.extend(kparts)
    body_parts.extend(vparts)
    if hblob is not None:
        attrs |= ATTR_HEADERS
        body_parts.append(hblob)
    return body_parts, attrs


def _compressed(body_parts: list, body_size: int, attrs: int, codec: int) -> tuple[list, int]:
    """``(stored body parts, attributes)``: lz4-compressed when asked for and smaller, else as given."""
    if attrs & CODEC_MASK == CODEC_LZ4:
        body = body_parts[0] if len(body_parts) == 1 else b"".join(body_parts)
        compressed = _lz4.compress(body, store_size=False)
        if len(compressed) < body_size:
            return [compressed], attrs
        return body_parts, attrs & ~CODEC_MASK  # incompressible: store plain rather than grow
    if attrs & CODEC_MASK != CODEC_NONE:
        raise InvalidRecordError(f"unknown codec {codec}")
    return body_parts, attrs


# ------------------------------------------------------------------------------------------- batches


def encode_parts(
    values: Sequence[bytes | None] | None = None,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int | None] | np.ndarray | None = None,
    headers: Sequence[Any] | None = None,
    *,
    value_lengths: np.ndarray | None = None,
    value_data: Any = None,
    key_lengths: np.ndarray | None = None,
    key_data: Any = None,
    offset_deltas: np.ndarray | None = None,
    options: EncodeOptions | None = None,
    **settings: Any,
) -> tuple[list, BatchHeader]:
    """Encode one batch as ``([header bytes, *body parts], header)``: what :func:`encode_parts_pure` returns
    (see it for the arguments), through the compiled encoder when it is live and the input is a common one.

    The compiled encoder copies the batch into one buffer, so it runs only where the pure path would join
    the parts anyway (more than 16 of them: lists of items) or where the copy is small (column buffers of
    at most :data:`NATIVE_COPY_BYTES` in all); a few large column buffers are written uncopied by the pure
    path.
    """
    if settings:
        opts = EncodeOptions(**settings) if options is None else options._replace(**settings)
    else:
        opts = options if options is not None else _DEFAULT_OPTIONS
    if opts.default_timestamp is None:
        opts = opts._replace(default_timestamp=now_ms())  # once, for both paths
    if _native_encode is not None and offset_deltas is None:
        got = _encode_native(values, keys, timestamps, headers, value_lengths, value_data, key_lengths, key_data,
                             opts)
        if got is not None:
            return got
    return encode_parts_pure(values, keys, timestamps, headers, value_lengths=value_lengths, value_data=value_data,
                             key_lengths=key_lengths, key_data=key_data, offset_deltas=offset_deltas, options=opts)


def _encode_native(values: Sequence[bytes | None] | None, keys: Sequence[bytes | None] | None,
                   timestamps: Any, headers: Sequence[Any] | None, value_lengths: np.ndarray | None,
                   value_data: Any, key_lengths: np.ndarray | None, key_data: Any,
                   opts: EncodeOptions) -> tuple[list, BatchHeader] | None:
    """:func:`encode_parts` by the compiled encoder, or None for an input it leaves to the pure path."""
    assert _native_encode is not None
    if (value_lengths is None and key_lengths is None and isinstance(values, (list, tuple))
            and len(values) + (len(keys) if isinstance(keys, (list, tuple)) else 0 if keys is None else 17) <= 16):
        return None  # at most 16 parts (items, less the nulls): left to the pure path below, decided before a pass
    vlens: Any
    klens: Any
    if value_lengths is not None:
        if not isinstance(value_data, list):
            return None  # one column buffer: the pure path writes it uncopied
        vlens, vparts = value_lengths, value_data
    elif values is not None:
        vlens, vparts = column_parts(values, len(values), "values")
    else:
        return None
    n = len(vlens)
    if key_lengths is not None:
        klens = key_lengths
        kparts = key_data if isinstance(key_data, list) else [key_data if key_data is not None else b""]
    else:
        klens, kparts = column_parts(keys, n, "keys")
    if len(vparts) + len(kparts) <= 16:
        if not _small(vparts, kparts):
            return None  # a few large parts: the pure path writes them uncopied
        if (value_lengths is not None or key_lengths is not None) and not _lengths_match(vlens, vparts, klens,
                                                                                          kparts):
            # Lengths given by the caller over a few small buffers (the route for small copies): the compiled
            # encoder sizes its output by them, so a lying one (2**30 over a few bytes) would allocate that
            # much before its own check; the pure path checks the bytes before joining anything. (Checked
            # for a few parts only: many parts are a list of items whose lengths were taken from them.)
            return None
    (base_offset, default_ts, codec, log_append_time, producer_id, producer_epoch, base_sequence, control,
     transactional) = opts
    if not n or type(codec) is not int:
        # No records, or a codec that is not an int: the pure path raises, after any error it finds first in
        # the columns (the compiled route would fail on the codec before looking at them).
        return None
    try:
        hblob = _headers_blob(headers, n)
    except InvalidRecordError:
        return None  # the pure path raises it, after any error it finds first
    attrs = (codec & CODEC_MASK) | (ATTR_LOG_APPEND_TIME if log_append_time else 0) | (ATTR_CONTROL if control else 0) \
        | (ATTR_TRANSACTIONAL if transactional else 0)
    ts: Any = None if log_append_time else timestamps
    if isinstance(ts, np.ndarray):
        # An int64 column (a producer's drain stamps its records with one): the compiled encoder takes a
        # list, or None with default_ts for one timestamp shared by all (what the pure path finds too).
        if ts.dtype.kind != "i" or ts.ndim != 1 or len(ts) != n:
            return None  # the pure path raises
        ts = ts.astype(I64, copy=False)
        raw = ts.tobytes()
        if n and raw[:8] * n == raw:
            ts, default_ts = None, int(ts[0])
        else:
            ts = ts.tolist()
    got = _native_encode(vlens, vparts, klens, kparts, ts, hblob, base_offset, default_ts, attrs, producer_id,
                         producer_epoch, base_sequence)
    if got is None:
        return None
    hdr, body, fields = got
    if hdr is not None:
        return [hdr, body], _new_header(BatchHeader, fields)
    body_size = fields[12]
    body_parts, attrs = _compressed([body], body_size, fields[4], codec)
    total = HEADER_SIZE + memoryview(body_parts[0]).nbytes
    if total > MAX_BATCH_SIZE:
        raise InvalidRecordError(f"batch of {total} bytes exceeds the format's limit")
    hdr, header = pack_header((*fields[:1], total - LENGTH_PREFIX, *fields[2:4], attrs, *fields[5:]), body_parts)
    return [hdr, *body_parts], header


def encode_runs_packed(vlens: np.ndarray, vparts: list, klens: np.ndarray | None, kparts: list,
                       timestamps: np.ndarray | None, stops: list[int], options: EncodeOptions,
                       max_bytes: int) -> tuple[memoryview, list[BatchHeader]] | None:
    """Records [0, stops[0]), [stops[0], stops[1]) ... as consecutive uncompressed batches in one buffer (each
    at the offset after the one before, from ``options.base_offset``; sequence numbers from
    ``options.base_sequence`` on, as :func:`encode_parts` of each run with ``base_sequence + start`` gives),
    and their headers; None when the compiled encoder is not live or declines the input: ``vparts``/``kparts``
    not one bytes/bytearray per non-null item, ``timestamps`` not None or an int64 array, a batch over
    ``max_bytes``, a codec, headers (not taken), a control batch (not taken either). Then the caller encodes
    batch by batch, which gives the same bytes or raises."""
    if _native_batches is None:
        return None
    (base_offset, default_ts, codec, log_append_time, producer_id, producer_epoch, base_sequence, control,
     transactional) = options
    if codec != CODEC_NONE or control or default_ts is None:
        return None
    if log_append_time:
        timestamps = None
    elif timestamps is not None and (not isinstance(timestamps, np.ndarray) or timestamps.dtype != I64):
        return None
    attrs = (ATTR_LOG_APPEND_TIME if log_append_time else 0) | (ATTR_TRANSACTIONAL if transactional else 0)
    got = _native_batches(vlens, vparts, klens, kparts, timestamps, stops, base_offset, default_ts, attrs,
                          producer_id, producer_epoch, base_sequence, max_bytes)
    if got is None:
        return None
    data, fields = got
    return memoryview(data), [_new_header(BatchHeader, f) for f in fields]


def _small(vparts: list, kparts: list) -> bool:
    """True when the column parts hold at most :data:`NATIVE_COPY_BYTES` in all (False for a part that is not
    contiguous bytes: the pure path raises for it)."""
    total = 0
    try:
        for part in vparts:
            total += memoryview(part).nbytes
        for part in kparts:
            total += memoryview(part).nbytes
    except (TypeError, BufferError):
        return False
    return total <= NATIVE_COPY_BYTES


def _lengths_match(vlens: Any, vparts: list, klens: Any, kparts: list) -> bool | None:
    """Whether the non-null lengths add up to exactly the bytes the column parts hold; None when they are not
    one-dimensional int lengths and contiguous bytes-like parts (the pure path says what is wrong then)."""
    try:
        claimed = 0
        for lens in (vlens, klens):
            if lens is not None:
                arr = np.asarray(lens)
                if arr.dtype.kind not in "iu" or arr.ndim != 1:
                    return None
                claimed += int(arr[arr > 0].sum(dtype=np.int64))
        held = 0
        for part in (*vparts, *kparts):
            view = memoryview(part)
            if not view.c_contiguous or view.itemsize != 1:
                return None
            held += view.nbytes
    except (TypeError, ValueError, BufferError):
        return None
    return claimed == held


_new_header = tuple.__new__


def encode_parts_pure(
    values: Sequence[bytes | None] | None = None,
    keys: Sequence[bytes | None] | None = None,
    timestamps: Sequence[int | None] | np.ndarray | None = None,
    headers: Sequence[Any] | None = None,
    *,
    value_lengths: np.ndarray | None = None,
    value_data: Any = None,
    key_lengths: np.ndarray | None = None,
    key_data: Any = None,
    offset_deltas: np.ndarray | None = None,
    options: EncodeOptions | None = None,
    **settings: Any,
) -> tuple[list, BatchHeader]:
    """Encode one batch as ``([header bytes, *body parts], header)`` so a writer can ``writev`` it uncopied
    (the reference implementation: :func:`encode_parts` gives the same result, faster).

    Give either Python lists (``values``/``keys``) or columns (``value_lengths`` + ``value_data``, and
    likewise for keys): lengths are int32 with -1 for null, data is the concatenation of the non-null items
    (one bytes-like object, or a list of them to be joined). The batch's settings are ``options``, or
    :class:`EncodeOptions` fields given as keywords (``base_offset=``, ``codec=``...; over ``options``
    when both are given). ``timestamps`` default to ``default_timestamp`` (now, when ``None``); with
    ``log_append_time`` they are all replaced by ``default_timestamp``.

    :raises InvalidRecordError: when columns disagree in length or hold non-bytes items.
    """
    if settings:
        opts = EncodeOptions(**settings) if options is None else options._replace(**settings)
    else:
        opts = options if options is not None else _DEFAULT_OPTIONS
    # One unpacking, not a property lookup per use: this runs for every batch.
    (base_offset, default_ts, codec, log_append_time, producer_id, producer_epoch, base_sequence, control,
     transactional) = opts
    vlens, vparts = _value_column(values, value_lengths, value_data)
    n = len(vlens)
    # The common cases (no keys, one timestamp, dense offsets) skip the column helpers' calls.
    kparts: list
    if keys is None and key_lengths is None:
        kraw, kparts, kmin, kbytes = None, [], 0, 0
    else:
        kraw, kparts, kmin, kbytes = _key_column(keys, key_lengths, key_data, n)
    vraw = vlens.tobytes()
    vmin, vbytes, _ = length_stats(vraw, n)
    if default_ts is None:
        default_ts = now_ms()
    if timestamps is None or log_append_time:
        first_ts = max_ts = default_ts
        ts_deltas = None
    else:
        first_ts, max_ts, ts_deltas = _timestamp_column(timestamps, n, default_ts)
    deltas, last_delta = (None, n - 1) if offset_deltas is None else _offset_column(offset_deltas, n)
    _check_offsets(base_offset, last_delta)

    hblob = _headers_blob(headers, n)
    body_parts, attrs = _sections(deltas, ts_deltas, kraw, vraw, kparts, vparts, hblob)
    attrs |= codec & CODEC_MASK
    if log_append_time:
        attrs |= ATTR_LOG_APPEND_TIME
    if control:
        attrs |= ATTR_CONTROL
    if transactional:
        attrs |= ATTR_TRANSACTIONAL
    if vmin < -1 or kmin < -1:
        raise InvalidRecordError("lengths must be >= -1")
    fixed = 4 * n * (1 + (kraw is not None) + (ts_deltas is not None) * 2 + (deltas is not None))
    hbytes = len(hblob) if hblob is not None else 0
    if HEADER_SIZE + fixed + vbytes + kbytes + hbytes > MAX_BATCH_SIZE:
        # Before any join, and before compressing: a decoder refuses a body_size beyond the limit even
        # when its compressed bytes would fit (check_header), and the compiled encoder declines it too.
        raise InvalidRecordError(f"batch of {HEADER_SIZE + fixed + vbytes + kbytes + hbytes} bytes (before "
                                 f"compression) exceeds the format's limit of {MAX_BATCH_SIZE}")
    try:
        if len(body_parts) > 16:
            body_parts = [b"".join(body_parts)]  # many small items: one copy now beats a long iovec
        body_size = 0
        for part in body_parts:
            view = memoryview(part)
            if not view.c_contiguous:  # a strided memoryview: its bytes cannot be written as they are
                raise BufferError
            body_size += view.nbytes
    except (TypeError, BufferError):  # an item with a len() that is not contiguous bytes (a list, say)
        body_size = -1
    # Catch non-byte items (str, wide memoryviews) whose len() is not their byte size.
    if body_size - hbytes != fixed + vbytes + kbytes:
        raise InvalidRecordError("keys and values must be contiguous bytes-like objects of 1-byte items matching "
                                 "their lengths")

    body_parts, attrs = _compressed(body_parts, body_size, attrs, codec)
    total = HEADER_SIZE + sum(memoryview(part).nbytes for part in body_parts)
    if total > MAX_BATCH_SIZE:
        raise InvalidRecordError(f"batch of {total} bytes exceeds the format's limit")
    hdr, header = pack_header((base_offset, total - LENGTH_PREFIX, MAGIC, 0, attrs, last_delta, first_ts, max_ts,
                               producer_id, producer_epoch, base_sequence, n, body_size), body_parts)
    return [hdr, *body_parts], header


def encode_batch(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
                 timestamps: Sequence[int] | None = None, headers: Sequence[Any] | None = None,
                 **options: Any) -> bytes:
    """Encode one batch from Python lists and return its bytes (see :func:`encode_parts` for options)."""
    parts, _ = encode_parts(values, keys, timestamps, headers, **options)
    return b"".join(parts)


def encode_columns(value_lengths: np.ndarray, value_data: Any, key_lengths: np.ndarray | None = None,
                   key_data: Any = None, timestamps: np.ndarray | None = None, **options: Any) -> bytes:
    """Encode one batch from columns (int32 lengths, -1 for null, plus concatenated bytes)."""
    parts, _ = encode_parts(value_lengths=value_lengths, value_data=value_data, key_lengths=key_lengths,
                            key_data=key_data, timestamps=timestamps, **options)
    return b"".join(parts)

