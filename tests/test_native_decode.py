"""The compiled decode path (native/decode.c) against its pure-Python reference (pylog/storage/records/views.py):
batch layouts, ``Partition.read()``'s records and the consumer's rows are equal on random valid batches, and
truncated, bit-flipped and length-lying bodies (their CRC recomputed, so the body checks are what catches them)
raise the same error on both paths. Both paths are called explicitly, in one process."""

from __future__ import annotations

import gc
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import CorruptRecordError, PylogError, Record
from pylog.accel import REASON, native
from pylog.clients.consumer import ConsumerRecord
from pylog.storage.records import CODEC_LZ4, BatchView, encode_batch, parse_header
from pylog.storage.records import views
from pylog.storage.records.format import (ATTR_HEADERS, ATTR_KEYS, ATTR_OFFSET_DELTAS, ATTR_TIMESTAMPS, CODEC_MASK,
                                          HEADER_SIZE, LENGTH_PREFIX, pack_header)

pytestmark = pytest.mark.skipif(native is None, reason=f"compiled extension not live: {REASON}")

blobs = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=3)


@st.composite
def columns(draw, n):
    """A key or value column: varying lengths with nulls, one length for all, or all null."""
    kind = draw(st.sampled_from(["varying", "uniform", "null"]))
    if kind == "uniform":
        size = draw(st.integers(0, 24))
        return [draw(st.binary(min_size=size, max_size=size)) for _ in range(n)]
    if kind == "null":
        return [None] * n
    return draw(st.lists(blobs, min_size=n, max_size=n))


@st.composite
def batches(draw):
    """An encoded batch and what went into it: keys (none, null, uniform, varying), values, timestamps,
    headers, offset deltas with gaps (as compaction writes them), lz4 and LogAppendTime."""
    n = draw(st.integers(1, 30))
    values = draw(columns(n))
    keys = draw(st.one_of(st.none(), columns(n)))
    ts = draw(st.one_of(st.none(), st.lists(st.integers(0, 1 << 60), min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=n, max_size=n)))
    deltas = None
    if draw(st.booleans()):
        gaps = draw(st.lists(st.integers(1, 1000), min_size=n - 1, max_size=n - 1))
        deltas = np.cumsum([0, *gaps]).astype(np.int32)
    raw = encode_batch(values, keys, ts, headers, base_offset=draw(st.integers(0, 1 << 50)),
                       default_timestamp=draw(st.integers(0, 1 << 45)), codec=draw(st.sampled_from([0, CODEC_LZ4])),
                       log_append_time=draw(st.booleans()), offset_deltas=deltas)
    return raw


def _layout_both(body, header):
    """Both layouts of a body, as ("ok", layout) or ("error", class, reason)."""
    out = []
    for fn in (views.batch_layout_pure, views.batch_layout_native):
        try:
            out.append(("ok", fn(body, header.record_count, header.attributes, header.last_offset_delta, "f", 7)))
        except PylogError as exc:
            out.append(("error", type(exc), exc.reason, exc.path, exc.position))
    return out


def _record_fields(records):
    return [(type(r), tuple(r)) for r in records]


@settings(max_examples=300, deadline=None)
@given(batches(), st.data())
def test_records_equal_on_both_paths(raw, data):
    view = BatchView.from_buffer(raw)
    n = view.count
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    pure_layout, native_layout = _layout_both(view.body, view.header)
    assert pure_layout == native_layout and pure_layout[0] == "ok"
    for a, b in ((0, None), (start, stop)):
        pure = views.records_pure(view, "topic", 3, a, b)
        fast = views.records_native(view, "topic", 3, a, b)
        assert _record_fields(fast) == _record_fields(pure)
        assert all(type(r) is Record for r in fast)
        # Records of atoms hold no cycle: off the collector's lists (the point of the compiled path).
        assert not any(gc.is_tracked(r) for r in fast)


@settings(max_examples=150, deadline=None)
@given(st.lists(batches(), min_size=1, max_size=4), st.data(),
       st.sampled_from(["none", "keys", "values", "both", "json"]))
def test_consumer_rows_equal_on_both_paths(raws, data, deserializers):
    base = 0
    slices = []
    for raw in raws:
        h = parse_header(raw)
        buf = bytearray(raw)
        struct.pack_into("<q", buf, 0, base)  # consecutive batches, as a partition holds them
        view = BatchView.from_buffer(bytes(buf), verify_crc=False)
        a = data.draw(st.integers(0, h.record_count - 1))
        b = data.draw(st.integers(a + 1, h.record_count))
        slices.append((view, a, b))
        base += h.last_offset_delta + 1
    calls: dict[str, list] = {"pure": [], "native": []}

    def des(which, tag):
        def f(b):
            calls[which].append((tag, b))
            return [b.hex()] if deserializers == "json" else b[::-1]
        return f

    for which, fn in (("pure", views.consumer_rows_pure), ("native", views.consumer_rows_native)):
        kd = des(which, "k") if deserializers in ("keys", "both", "json") else None
        vd = des(which, "v") if deserializers in ("values", "both", "json") else None
        rows = fn(slices, "topic", 5, ConsumerRecord, kd, vd)
        calls[which + "_rows"] = rows
    pure, fast = calls["pure_rows"], calls["native_rows"]
    assert [tuple(r) for r in fast] == [tuple(r) for r in pure]
    assert all(type(r) is ConsumerRecord for r in fast)
    assert calls["native"] == calls["pure"]  # same deserializer calls, in the same order
    # A row holding a list can be part of a cycle: it stays tracked. Rows of atoms do not.
    assert all(gc.is_tracked(r) == (deserializers == "json" and (r.key is not None or r.value is not None))
               for r in fast)
    assert views.payload_bytes(slices) == sum(max(r.serialized_key_size, 0) + max(r.serialized_value_size, 0)
                                              for r in pure)


def test_consumer_rows_match_the_documented_shape():
    raw = encode_batch([b"12", None], [None, b"k2"], headers=[[("h\u00e9", b"xy")], []], base_offset=10,
                       default_timestamp=99)
    view = BatchView.from_buffer(raw)
    for fn in (views.consumer_rows_pure, views.consumer_rows_native):
        rows = fn([(view, 0, 2)], "t", 1, ConsumerRecord, None, json.loads)
        # "h\u00e9" is 3 bytes of UTF-8, b"xy" 2: a header size of 5; a null key's size is -1
        assert rows == [("t", 1, 10, 99, 0, None, 12, (("h\u00e9", b"xy"),), None, -1, 2, 5),
                        ("t", 1, 11, 99, 0, b"k2", None, (), None, 2, -1, 0)]


def test_a_failing_deserializer_raises_its_own_error_on_both_paths():
    raw = encode_batch([b"1", b"x", b"3"], default_timestamp=1)
    view = BatchView.from_buffer(raw)

    def des(b):
        return int(b)

    for fn in (views.consumer_rows_pure, views.consumer_rows_native):
        with pytest.raises(ValueError):
            fn([(view, 0, 3)], "t", 0, ConsumerRecord, None, des)


def test_native_records_refuse_a_range_outside_the_batch():
    view = BatchView.from_buffer(encode_batch([b"a", b"b"], default_timestamp=1))
    assert views.records_native(view, None, -1, 2, 1) == views.records_pure(view, None, -1, 2, 1) == []
    with pytest.raises(ValueError):
        views.records_native(view, None, -1, 0, 3)
    with pytest.raises(ValueError):
        views.records_native(view, None, -1, -1, 1)


# ----------------------------------------------------------------------------------- hostile bodies


def _uncompressed(raw: bytes) -> tuple[object, bytes]:
    """Header and body of a batch (decompressed when lz4)."""
    view = BatchView.from_buffer(raw)
    return view.header, bytes(view.body)


def _rebatch(header, body: bytes) -> bytes:
    """An uncompressed batch of ``body`` under ``header``'s fields, sizes and CRC recomputed: a body that
    lies only where the length checks must catch it."""
    attrs = header.attributes & ~CODEC_MASK
    fields = (header.base_offset, HEADER_SIZE + len(body) - LENGTH_PREFIX, header.magic, 0, attrs,
              *header[5:12], len(body))
    hdr, _ = pack_header(fields, [body])
    return hdr + body


def _both_views(batch: bytes):
    """Outcome of the whole read (from_buffer on the live path, then each path's records) and both layouts."""
    header = parse_header(batch)
    layouts = _layout_both(batch[HEADER_SIZE:], header)
    try:
        view = BatchView.from_buffer(batch)
    except PylogError as exc:
        return layouts, ("error", type(exc)), ("error", type(exc))
    out = []
    for fn in (views.records_pure, views.records_native):
        try:
            out.append(("ok", _record_fields(fn(view, "t", 0))))
        except PylogError as exc:
            out.append(("error", type(exc)))
    return layouts, out[0], out[1]


def _mutations():
    """Ways to damage a body: cut it, flip a bit, rewrite an int32 of its length or delta columns."""
    return st.one_of(
        st.tuples(st.just("truncate"), st.integers(0, 1 << 16)),
        st.tuples(st.just("flip"), st.integers(0, 1 << 20)),
        st.tuples(st.just("int32"), st.integers(0, 1 << 16),
                  st.sampled_from([-(1 << 31), -2, -1, 0, 1, 7, 1 << 20, (1 << 31) - 1])),
        st.tuples(st.just("shift"), st.integers(0, 1 << 16), st.integers(-3, 3)),
    )


def _mutate(body: bytes, header, mutation) -> bytes:
    kind = mutation[0]
    if kind == "truncate":
        return body[:mutation[1] % (len(body) + 1)]
    buf = bytearray(body)
    if kind == "flip":
        bit = mutation[1] % (8 * len(buf))
        buf[bit // 8] ^= 1 << (bit % 8)
        return bytes(buf)
    # The int32 columns (deltas and lengths): everything before the data sections.
    n = header.record_count
    a = header.attributes
    columns = n * (1 + (a & ATTR_KEYS != 0) + 2 * (a & ATTR_TIMESTAMPS != 0) + (a & ATTR_OFFSET_DELTAS != 0))
    at = 4 * (mutation[1] % columns)
    (old,) = struct.unpack_from("<i", buf, at)
    new = mutation[2] if kind == "int32" else max(-(1 << 31), min((1 << 31) - 1, old + mutation[2]))
    struct.pack_into("<i", buf, at, new)
    return bytes(buf)


@settings(max_examples=600, deadline=None)
@given(batches(), _mutations(), st.booleans())
def test_damaged_bodies_raise_the_same_error_on_both_paths(raw, mutation, keep_headers_flag):
    header, body = _uncompressed(raw)
    if not keep_headers_flag:
        header = header._replace(attributes=header.attributes ^ ATTR_HEADERS)  # a lying headers bit
    bad = _rebatch(header, _mutate(body, header, mutation))
    layouts, pure, fast = _both_views(bad)
    assert layouts[0] == layouts[1]
    assert pure == fast
    if layouts[0][0] == "error":
        assert layouts[0][1] is CorruptRecordError


@pytest.mark.parametrize("lengths, reason", [
    ([5, -2], "negative value length"),
    ([-(1 << 31), 1], "negative value length"),
    ([(1 << 31) - 1, (1 << 31) - 1], "record lengths do not add up to the body size"),
    ([3, 4], "record lengths do not add up to the body size"),  # one byte short
    ([2, 2], "record lengths do not add up to the body size"),  # data left over, no headers bit
])
def test_lying_value_lengths(lengths, reason):
    body = struct.pack("<2i", *lengths) + b"abcdef"
    header = parse_header(encode_batch([b"abc", b"def"], default_timestamp=1))
    layouts = _layout_both(body, header)
    assert layouts[0] == layouts[1] == ("error", CorruptRecordError, reason, "f", 7)


def test_counts_larger_than_the_body():
    header = parse_header(encode_batch([b"abc", b"def"], default_timestamp=1))
    for count in (3, 1 << 30, (1 << 31) - 1):
        h = header._replace(record_count=count, last_offset_delta=count - 1)
        layouts = _layout_both(b"\x00" * 8, h)
        assert layouts[0] == layouts[1]
        assert layouts[0][:2] == ("error", CorruptRecordError)


def test_timestamps_wrap_as_numpy_does():
    # Deltas at the int64 edges: the pure path adds with numpy's wrapping int64, the compiled one must agree.
    raw = encode_batch([b"a", b"b", b"c"], timestamps=[0, 1, 2], default_timestamp=0)
    header, body = _uncompressed(raw)
    buf = bytearray(body)
    struct.pack_into("<3q", buf, 0, (1 << 63) - 1, -(1 << 63), -1)
    header = header._replace(first_timestamp=(1 << 62), max_timestamp=(1 << 62))
    _, pure, fast = _both_views(_rebatch(header, bytes(buf)))
    assert pure == fast and pure[0] == "ok"


# Found by an independent review of native/decode.c (direct callers of the extension only: the readers pass
# checked headers and fresh lists, but the C code promises to check what it is given).

def _headered_view(n: int = 20) -> BatchView:
    return BatchView.from_buffer(encode_batch([b"v%d" % i for i in range(n)], keys=[b"k"] * n,
                                              headers=[[("h", b"x")]] * n))


def test_a_deserializer_that_empties_the_headers_list_cannot_crash_decode_rows():
    v = _headered_view()
    hdrs = v.headers()

    def clearing(b: bytes) -> bytes:
        hdrs.clear()  # Python code running mid-decode, changing the list the C loop reads
        return b

    out: list = []
    native.decode_rows(out, v.body, v.header, 0, 20, "t", 0, tuple, hdrs, None, clearing)
    assert [row[7] for row in out] == [(("h", b"x"),)] * 20


def test_a_record_count_that_would_overflow_the_size_check_is_corrupt_not_a_wild_read():
    with pytest.raises(CorruptRecordError, match="too small"):
        native.batch_layout(b"\0" * 4, 2**62 + 1, 0, 2**62, None, None)
    v = BatchView.from_buffer(encode_batch([b"a", b"b"]))
    lying = v.header._replace(record_count=2**62 + 1, last_offset_delta=2**62)
    with pytest.raises(CorruptRecordError, match="too small"):
        native.decode_records(v.body, lying, 0, 2, "t", 0, Record, None)


def test_a_row_holding_a_container_partition_stays_tracked_by_the_collector():
    v = BatchView.from_buffer(encode_batch([b"a", b"b"]))
    part: list = []
    out: list = []
    native.decode_rows(out, v.body, v.header, 0, 2, "t", part, tuple, None, None, None)
    assert all(gc.is_tracked(row) for row in out)
