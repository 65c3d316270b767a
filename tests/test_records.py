"""pylog.storage.records: batch encoding round trips, columns, and validation of hostile bytes."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import CorruptRecordError, InvalidRecordError, Record
from pylog.storage.records import (CODEC_LZ4, HEADER_SIZE, BatchView, RecordColumns, check_header, encode_batch,
                           encode_columns, parse_header, stamp_base_offset)

blobs = st.one_of(st.none(), st.binary(max_size=64))
header_lists = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    values = draw(st.lists(blobs, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(blobs, min_size=n, max_size=n)))
    ts = draw(st.one_of(st.none(), st.lists(st.integers(0, 1 << 50), min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=n, max_size=n)))
    codec = draw(st.sampled_from([0, CODEC_LZ4]))
    return values, keys, ts, headers, codec


@settings(max_examples=200, deadline=None)
@given(batches(), st.integers(0, 1 << 40))
def test_round_trip_records_and_columns(batch, base):
    values, keys, ts, headers, codec = batch
    raw = encode_batch(values, keys, ts, headers, base_offset=base, default_timestamp=123, codec=codec)
    view = BatchView.from_buffer(raw)
    n = len(values)
    recs = view.records("t", 2)
    assert [r.value for r in recs] == values
    assert [r.key for r in recs] == (keys if keys is not None else [None] * n)
    assert [r.offset for r in recs] == list(range(base, base + n))
    assert [r.timestamp for r in recs] == (ts if ts is not None else [123] * n)
    want_headers = [tuple(map(tuple, h)) if h else () for h in headers] if headers else [()] * n
    assert [r.headers for r in recs] == want_headers
    cols = RecordColumns.concat_views([(view, 0, n)], "t", 2)
    assert cols.to_records() == recs
    assert cols.values() == values


@settings(max_examples=100, deadline=None)
@given(batches(), st.data())
def test_slices_of_a_batch_match_the_whole(batch, data):
    values, keys, ts, headers, codec = batch
    view = BatchView.from_buffer(encode_batch(values, keys, ts, headers, codec=codec))
    n = len(values)
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    whole = view.records()
    assert view.records(None, -1, a, b) == whole[a:b]
    assert RecordColumns.concat_views([(view, a, b)], None, -1).to_records() == whole[a:b]


@settings(max_examples=100, deadline=None)
@given(batches(), st.data())
def test_one_slice_and_the_general_path_agree(batch, data):
    """concat_views of one slice takes its own path: it must agree with records() and with the general
    path (the same records as two slices), for compacted batches (offset gaps) and LogAppendTime too."""
    values, keys, ts, headers, codec = batch
    n = len(values)
    gaps = data.draw(st.lists(st.integers(1, 5), min_size=n - 1, max_size=n - 1))
    deltas = np.cumsum([0] + gaps).astype(np.int32) if data.draw(st.booleans()) else None
    log_append = data.draw(st.booleans())
    view = BatchView.from_buffer(encode_batch(values, keys, ts, headers, codec=codec, offset_deltas=deltas,
                                              log_append_time=log_append, default_timestamp=77, base_offset=9))
    a = data.draw(st.integers(0, n))
    b = data.draw(st.integers(a, n))
    m = data.draw(st.integers(a, b))
    one = RecordColumns.concat_views([(view, a, b)], "t", 1)
    two = RecordColumns.concat_views([(view, a, m), (view, m, b)], "t", 1)
    assert one.to_records() == two.to_records() == view.records("t", 1, a, b)
    for name in ("offsets", "timestamps", "timestamp_types", "key_lengths", "value_lengths"):
        assert getattr(one, name).tolist() == getattr(two, name).tolist(), name
        assert getattr(one, name).dtype == getattr(two, name).dtype, name
    assert (one.key_data, one.value_data, one.headers) == (two.key_data, two.value_data, two.headers)


def test_columns_of_several_batches_concatenate():
    one = BatchView.from_buffer(encode_batch([b"a", b"bb"], keys=[b"k", None], base_offset=10, default_timestamp=5))
    two = BatchView.from_buffer(encode_batch([None, b"ccc"], timestamps=[7, 9], base_offset=12))
    cols = RecordColumns.concat_views([(one, 1, 2), (two, 0, 2)], "t", 0)
    assert cols.offsets.tolist() == [11, 12, 13]
    assert cols.timestamps.tolist() == [5, 7, 9]
    assert cols.value_lengths.tolist() == [2, -1, 3]
    assert cols.value_data == b"bbccc"
    assert cols.key_lengths.tolist() == [-1, -1, -1]
    assert cols.value_offsets.tolist() == [0, 2, 2, 5]


def test_encode_columns_equals_encode_lists():
    values = [b"x" * i for i in range(10)]
    lens = np.array([len(v) for v in values], np.int32)
    a = encode_columns(lens, b"".join(values), default_timestamp=1)
    b = encode_batch(values, default_timestamp=1)
    assert a == b


def test_stamped_base_offset_keeps_the_crc_valid():
    raw = bytearray(encode_batch([b"v"]))
    stamp_base_offset(raw, 99)
    assert BatchView.from_buffer(bytes(raw)).records()[0].offset == 99


def test_incompressible_lz4_batch_is_stored_plain():
    import os
    raw = encode_batch([os.urandom(200)], codec=CODEC_LZ4)
    assert parse_header(raw).codec == 0


def test_record_constructor_and_pickle():
    r = Record(value=b"v", key=b"k", headers=[("h", b"x")], timestamp=5)
    assert (r.value, r.key, r.headers, r.timestamp, r.offset) == (b"v", b"k", (("h", b"x"),), 5, -1)
    assert pickle.loads(pickle.dumps(r)) == r
    assert r._asdict()["value"] == b"v"


@pytest.mark.parametrize("bad", [
    dict(values=["str"]),
    dict(values=[b"a"], keys=[b"a", b"b"]),
    dict(values=[b"a"], headers=[[("h", "not bytes")]]),
    dict(values=[]),
])
def test_bad_input_is_rejected(bad):
    with pytest.raises((InvalidRecordError, TypeError)):
        encode_batch(**bad)


def _corrupt(raw: bytes, at: int, fmt: str, value: int) -> bytes:
    buf = bytearray(raw)
    struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


@pytest.mark.parametrize("at,fmt,value", [
    (8, "<I", (1 << 31) - 1),   # batch length 2^31 - 1
    (8, "<I", 3),               # too short
    (12, "<B", 9),              # magic
    (17, "<H", 0x8000),         # unknown attribute bit
    (17, "<H", 0x0007),         # unknown codec
    (53, "<i", -5),             # negative record count
    (53, "<i", 1 << 30),        # huge record count
    (57, "<I", 1 << 31),        # body size lie
    (19, "<i", -1),             # last offset delta below count - 1
])
def test_hostile_headers_raise_corrupt_record(at, fmt, value):
    raw = _corrupt(encode_batch([b"abc"] * 4, keys=[b"k"] * 4), at, fmt, value)
    with pytest.raises(CorruptRecordError):
        BatchView.from_buffer(raw)


def test_flipped_body_byte_fails_the_crc():
    raw = bytearray(encode_batch([b"abc"] * 4))
    raw[HEADER_SIZE + 2] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="checksum"):
        BatchView.from_buffer(bytes(raw))


def test_lengths_that_do_not_add_up_are_caught_even_with_a_valid_crc():
    from pylog.storage.records import batch_crc
    raw = bytearray(encode_batch([b"abc", b"de"]))
    struct.pack_into("<i", raw, HEADER_SIZE, 4)  # first value length 3 -> 4
    struct.pack_into("<I", raw, 13, batch_crc(raw))
    with pytest.raises(CorruptRecordError, match="add up"):
        BatchView.from_buffer(bytes(raw))


def test_lz4_body_size_lie_is_caught():
    from pylog.storage.records import batch_crc
    raw = bytearray(encode_batch([b"a" * 1000] * 10, codec=CODEC_LZ4))
    assert parse_header(raw).codec == CODEC_LZ4
    struct.pack_into("<I", raw, 57, parse_header(raw).body_size + 1)
    struct.pack_into("<I", raw, 13, batch_crc(raw))
    with pytest.raises(CorruptRecordError):
        BatchView.from_buffer(bytes(raw))


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=300))
def test_random_bytes_never_decode_silently(junk):
    try:
        h = parse_header(junk.ljust(HEADER_SIZE, b"\0"))
        check_header(h)
        BatchView.from_buffer(junk)
    except CorruptRecordError:
        # Only pylog's own error counts: a struct.error or IndexError here would mean a lost guard.
        return
    pytest.fail("random bytes decoded as a batch")


def test_batch_whose_last_offset_passes_int64_is_corrupt_not_overflow():
    """A batch with a valid CRC whose base offset is 2^63-1 (so its records' offsets do not fit int64)
    used to pass the header check and raise OverflowError from BatchView.offsets()."""
    from pylog.storage.records import batch_crc
    for values, deltas in (([b"a", b"b"], None), ([b"a", b"b"], [0, 5])):
        raw = bytearray(encode_batch(values, offset_deltas=deltas))
        struct.pack_into("<q", raw, 0, (1 << 63) - 1)
        struct.pack_into("<I", raw, 13, batch_crc(raw))
        with pytest.raises(CorruptRecordError, match="exceeds"):
            BatchView.from_buffer(bytes(raw))
    # The largest base offset whose records still fit decodes.
    raw = bytearray(encode_batch([b"a", b"b"]))
    struct.pack_into("<q", raw, 0, (1 << 63) - 2)
    struct.pack_into("<I", raw, 13, batch_crc(raw))
    assert BatchView.from_buffer(bytes(raw)).offsets().tolist() == [(1 << 63) - 2, (1 << 63) - 1]
