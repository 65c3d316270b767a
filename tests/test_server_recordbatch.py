"""Kafka v2 record batches <-> pylog (pylog/server/recordbatch.py, compression.py, native/kafka.c).

Round trips through a real partition; every codec, with batches built by kafka-python's and aiokafka's own
record code and ours read back by their readers (which check the CRC); the compiled and pure paths called
explicitly in one process on random and hostile input (same columns, same bytes, same error class and
message); hostile batches (truncated, bit flips with the CRC recomputed, huge counts and lengths, a
decompression bomb) raise only PylogError subclasses."""

from __future__ import annotations

import importlib
import struct
import sys
import zlib

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylog
from pylog.accel import REASON, native
from pylog.errors import (CorruptBatchError, InvalidBatchError, PylogError, RecordTooLargeError,
                          UnsupportedCompressionError, UnsupportedMagicError)
from pylog.server import compression, recordbatch as rb
from pylog.storage.records import BatchView, encode_batch
from pylog.storage.records.views import records_pure

kp = pytest.importorskip("kafka.record.default_records")
try:
    aiok = importlib.import_module("aiokafka.record.default_records")
except ImportError:  # pragma: no cover
    aiok = None

needs_native = pytest.mark.skipif(native is None, reason=f"compiled extension not live: {REASON}")
MAX = 1 << 24

blobs = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=3)


def kafka_python_batch(records, codec=0, producer=(-1, -1, -1), base_offset=0, builder_module=kp):
    """Bytes of one v2 batch built by a client library's own builder from (timestamp, key, value, headers)."""
    pid, epoch, seq = producer
    b = builder_module.DefaultRecordBatchBuilder(2, codec, False, pid, epoch, seq, 1 << 30)
    for i, (ts, k, v, h) in enumerate(records):
        assert b.append(i, timestamp=ts, key=k, value=v, headers=list(h)) is not None
    out = bytearray(b.build())
    if base_offset:
        out[0:8] = struct.pack(">q", base_offset)
    return bytes(out)


def read_with(module, data):
    """(offset, timestamp, key, value, headers) of every record of ``data``'s batches, read by a client library
    (which checks each batch's CRC), plus each batch's (producer id, epoch, base sequence, attributes bits)."""
    out, meta = [], []
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        batch = module.DefaultRecordBatch(bytearray(data[pos:pos + 12 + length]))
        assert batch.validate_crc()
        meta.append((batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                     batch.timestamp_type, batch.is_control_batch))
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)))
        pos += 12 + length
    return out, meta


def columns_records(kb):
    """(timestamp, key, value, headers) of a KafkaBatch's columns."""
    vs = split(kb.value_data, kb.value_lengths)
    ks = [None] * len(kb) if kb.key_lengths is None else split(kb.key_data, kb.key_lengths)
    hs = [()] * len(kb) if kb.headers is None else kb.headers
    return list(zip(kb.timestamps.tolist(), ks, vs, hs, strict=True))


def split(data, lengths):
    out, pos = [], 0
    for n in lengths.tolist():
        if n < 0:
            out.append(None)
        else:
            out.append(bytes(data[pos:pos + n]))
            pos += n
    assert pos == len(data)
    return out


def fix_crc(batch: bytearray) -> bytearray:
    batch[17:21] = struct.pack(">I", crc32c.crc32c(bytes(batch[21:])))
    return batch


kafka_records = st.lists(st.tuples(st.integers(0, 1 << 45), blobs, blobs, header_lists), min_size=1, max_size=25)


# ------------------------------------------------------------------------------------------- decoding


@settings(max_examples=150, deadline=None)
@given(records=kafka_records, producer=st.sampled_from([(-1, -1, -1), (5, 0, 0), (1 << 40, 3, (1 << 31) - 5)]))
def test_decode_what_kafka_python_builds(records, producer):
    data = kafka_python_batch(records, producer=producer)
    [kb] = rb.decode_batches(data, MAX)
    assert columns_records(kb) == [(t, k, v, tuple(h)) for t, k, v, h in records]
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == producer
    assert kb.producer == (None if producer[0] < 0 else producer)
    assert (kb.key_lengths is None) == all(k is None for _, k, _, _ in records)
    assert (kb.headers is None) == all(not h for *_, h in records)
    assert kb.size == len(data) and not kb.is_transactional and not kb.is_control and kb.timestamp_type == 0


@needs_native
@settings(max_examples=300, deadline=None)
@given(records=kafka_records)
def test_parse_records_native_equals_pure(records):
    data = kafka_python_batch(records)
    section, base_ts = data[61:], struct.unpack_from(">q", data, 27)[0]
    assert rb.parse_records_pure(section, len(records), base_ts) == rb.parse_records_native(
        section, len(records), base_ts)


def _parse_both(section, count, base_ts):
    out = []
    for fn in (rb.parse_records_pure, rb.parse_records_native):
        try:
            out.append(("ok", fn(section, count, base_ts)))
        except PylogError as exc:
            out.append(("error", type(exc), str(exc)))
    return out


@needs_native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=kafka_records, data=st.data())
def test_hostile_sections_fail_alike_on_both_paths(records, data):
    raw = bytearray(kafka_python_batch(records)[61:])
    kind = data.draw(st.sampled_from(["flip", "cut", "splice", "count", "garbage"]))
    count = len(records)
    if kind == "flip" and raw:
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "cut":
        del raw[data.draw(st.integers(0, len(raw))):]
    elif kind == "splice":
        i = data.draw(st.integers(0, len(raw)))
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=12))
    elif kind == "count":
        count = data.draw(st.sampled_from([0, -1, count - 1, count + 1, 1 << 31, 1 << 62, -(1 << 63)]))
    else:
        raw = bytearray(data.draw(st.binary(max_size=200)))
        count = data.draw(st.integers(-2, 40))
    a, b = _parse_both(bytes(raw), count, 1000)
    assert a == b
    if a[0] == "error":
        assert issubclass(a[1], CorruptBatchError)


@needs_native
@pytest.mark.parametrize("section,message,cls", [
    (b"\x0e\x00\x00\x02\x01\x01\x00\x00", "record 0: offset delta 1, expected 0", InvalidBatchError),
    (b"\x10\x00\x00\x00\x01\x01\x00\x00", "record 0: length 8 does not fit the 7 bytes left", CorruptBatchError),
    (b"\x10\x00\x00\x00\x01\x01\x02\x01\x01", "record 0: header key length -1", InvalidBatchError),
    (b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01", "record 0: header key is not UTF-8", InvalidBatchError),
    (b"\x0e\x00\x00\xff\xff\xff\xff\xff\x00", "record 0: malformed varint", CorruptBatchError),
    (b"\x0e\x00\x00\x00\x03\x01\x00\x00\x00", "record 0: key length -2 does not fit the record", CorruptBatchError),
    (b"\x10\x00\x00\x00\x01\x01\x00\x00\x00\x00", "record 0: 2 bytes left over", CorruptBatchError),
    (b"\x0c\x00\x00\x00\x01\x01\x00\x00\x00", "2 bytes after the last of 1 records", CorruptBatchError),
    (b"\x0c\x00\x00\x00\x01\x01", "1 records cannot fit in 6 bytes", CorruptBatchError),
    (b"\x0c\x00\x00\x00\x01\x01\x04\x00\x00", "record 0: header count 2 does not fit the record", CorruptBatchError),
])
def test_specific_errors_on_both_paths(section, message, cls):
    a, b = _parse_both(section, 1, 0)
    assert a == b == ("error", cls, message)


@needs_native
@pytest.mark.parametrize("count", [1 << 63, 1 << 64, -(1 << 64), 1 << 100, False, np.int64(-3)])
def test_counts_outside_int64_are_corrupt_batch_on_both_paths(count):
    # The compiled path raised OverflowError for a count no int64 holds (and wrote False as 0).
    a, b = _parse_both(b"\x0c\x00\x00\x00\x01\x01\x00", count, 0)
    assert a == b == ("error", CorruptBatchError, f"{count} records cannot fit in 7 bytes")


@needs_native
@pytest.mark.parametrize("base_ts", [1 << 63, 1 << 64, (1 << 64) + 5, -(1 << 63) - 1, -(1 << 70)])
def test_base_timestamp_outside_int64_wraps_on_both_paths(base_ts):
    # The reference wraps base_timestamp + delta to int64; the compiled path raised OverflowError.
    section = b"\x0c\x00\x04\x00\x01\x01\x00"  # timestamp delta 2
    a, b = _parse_both(section, 1, base_ts)
    assert a == b
    assert np.frombuffer(a[1][4], "<i8").tolist() == [rb._wrap64(base_ts + 2)]


@needs_native
@pytest.mark.parametrize("count", [True, np.int32(1)])
def test_bytes_after_the_last_record_name_the_count_as_given(count):
    # The compiled path wrote True as 1 (found by fuzz_native's kafka_parse_records calls).
    a, b = _parse_both(b"\x0c\x00\x00\x00\x01\x01\x00\x00", count, 0)
    assert a == b == ("error", CorruptBatchError, f"1 bytes after the last of {count} records")


def test_zigzag_extremes_round_trip():
    # Timestamp deltas at the int64 limits (kafka-python writes them as 10-byte varlongs).
    records = [(0, None, b"a", []), ((1 << 63) - 1, None, b"b", [])]
    [kb] = rb.decode_batches(kafka_python_batch(records), MAX)
    assert kb.timestamps.tolist() == [0, (1 << 63) - 1]


# ------------------------------------------------------------------------------------------- codecs


def _codec_builders():
    out = [("kafka-python", kp, c) for c in (0, 1, 3)]
    codec_mod = importlib.import_module("kafka.codec")
    if codec_mod.has_snappy():
        out.append(("kafka-python", kp, 2))
    if codec_mod.has_zstd():
        out.append(("kafka-python", kp, 4))
    if aiok is not None:
        out += [("aiokafka", aiok, c) for c in range(5)]
    return out


@pytest.mark.parametrize("lib,module,codec", _codec_builders())
def test_every_codec_from_client_builders(lib, module, codec):
    records = [(1_700_000_000_000 + i, None if i % 3 else b"k%d" % i, b"value-%d" % i * (i % 7),
                [("h", b"x")] if i % 11 == 0 else []) for i in range(500)]
    data = kafka_python_batch(records, codec=codec, builder_module=module)
    [kb] = rb.decode_batches(data, MAX)
    assert kb.codec == codec
    assert columns_records(kb) == [(t, k, v, tuple(h)) for t, k, v, h in records]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compression_round_trip_and_bounds(codec):
    data = bytes(range(256)) * 300
    z = compression.compress(codec, data)
    assert compression.decompress(codec, z, len(data)) == data
    with pytest.raises(RecordTooLargeError):
        compression.decompress(codec, z, len(data) - 1)
    with pytest.raises(CorruptBatchError):
        compression.decompress(codec, z[: len(z) // 2], 1 << 24)


def test_xerial_snappy_framing():
    data = bytes(range(256)) * 1000
    z = compression.compress_xerial(data, block_size=4096)
    assert z.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.SNAPPY, z, len(data)) == data
    with pytest.raises(RecordTooLargeError):
        compression.decompress(compression.SNAPPY, z, len(data) - 1)
    with pytest.raises(CorruptBatchError):
        compression.decompress(compression.SNAPPY, z[:-3], 1 << 24)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bomb_stops_at_max_size(codec):
    records = [(0, None, b"\0" * (1 << 20), [])] * 64  # 64 MiB of zeros, a few hundred KB compressed at most
    data = kafka_python_batch_raw(records, codec)
    assert len(data) < 4 << 20  # snappy compresses zeros about 21:1, the others far more
    with pytest.raises(RecordTooLargeError):
        rb.decode_batches(data, 1 << 20)


def kafka_python_batch_raw(records, codec):
    """A batch compressed with our compress() (kafka-python may lack snappy/zstd)."""
    plain = bytearray(kafka_python_batch(records))
    section = compression.compress(codec, bytes(plain[61:]))
    out = plain[:61] + section
    out[8:12] = struct.pack(">i", len(out) - 12)
    out[21:23] = struct.pack(">h", codec)
    return bytes(fix_crc(out))


def test_missing_cramjam_is_unsupported_compression(monkeypatch):
    data = kafka_python_batch_raw([(0, None, b"x", [])], compression.ZSTD)
    monkeypatch.setattr(compression, "_cramjam", None)
    real = importlib.import_module

    def no_cramjam(name, *a):
        if name == "cramjam":
            raise ImportError("no cramjam")
        return real(name, *a)

    monkeypatch.setattr(compression.importlib, "import_module", no_cramjam)
    with pytest.raises(UnsupportedCompressionError, match=r'pip install "pylog-embedded\[server\]"') as exc:
        rb.decode_batches(data, MAX)
    assert rb.kafka_error_code(exc.value) == 76
    assert not compression.available(compression.SNAPPY) and compression.available(compression.LZ4)


# ---------------------------------------------------------------------------------------- batch checks


def test_several_batches_back_to_back():
    a = kafka_python_batch([(1, b"k", b"v", [])], producer=(3, 0, 0))
    b = kafka_python_batch([(2, None, b"w", []), (3, None, None, [])], codec=1, producer=(3, 0, 1))
    out = rb.decode_batches(a + b, MAX)
    assert [len(x) for x in out] == [1, 2] and [x.base_sequence for x in out] == [0, 1]
    assert rb.decode_batches(b"", MAX) == []


def test_batch_level_errors():
    good = bytearray(kafka_python_batch([(1, b"k", b"v", []), (2, None, b"w", [])]))
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CorruptBatchError, match="CRC") as exc:
        rb.decode_batches(bytes(bad), MAX)
    assert rb.kafka_error_code(exc.value) == 2
    for cut in (5, 16, 17, 60, len(good) - 1):
        with pytest.raises(CorruptBatchError, match="truncated"):
            rb.decode_batches(bytes(good[:cut]), MAX)
    for magic in (0, 1, 3):
        m = bytearray(good)
        m[16] = magic
        with pytest.raises(UnsupportedMagicError) as exc:
            rb.decode_batches(bytes(m), MAX)
        assert rb.kafka_error_code(exc.value) == 43
    huge = bytearray(good)
    huge[57:61] = struct.pack(">i", (1 << 31) - 1)
    huge[23:27] = struct.pack(">i", (1 << 31) - 2)
    with pytest.raises(CorruptBatchError, match="cannot fit"):
        rb.decode_batches(bytes(fix_crc(huge)), MAX)
    zero = bytearray(good)
    zero[57:61] = struct.pack(">i", 0)
    with pytest.raises(InvalidBatchError) as exc:
        rb.decode_batches(bytes(fix_crc(zero)), MAX)
    assert rb.kafka_error_code(exc.value) == 87
    lod = bytearray(good)
    lod[23:27] = struct.pack(">i", 5)
    with pytest.raises(InvalidBatchError):
        rb.decode_batches(bytes(fix_crc(lod)), MAX)
    codec = bytearray(good)
    codec[21:23] = struct.pack(">h", 5)
    with pytest.raises(UnsupportedCompressionError):
        rb.decode_batches(bytes(fix_crc(codec)), MAX)
    short = bytearray(good)
    short[8:12] = struct.pack(">i", 10)
    with pytest.raises(CorruptBatchError, match="below the header"):
        rb.decode_batches(bytes(short), MAX)
    with pytest.raises(RecordTooLargeError):
        rb.decode_batches(bytes(good), 5)
    gz = bytearray(good)
    gz[21:23] = struct.pack(">h", 1)  # claims gzip, holds plain records
    with pytest.raises(CorruptBatchError, match="gzip"):
        rb.decode_batches(bytes(fix_crc(gz)), MAX)


@settings(max_examples=300, deadline=None)
@given(records=kafka_records, data=st.data())
def test_hostile_batches_raise_only_pylog_errors(records, data):
    raw = bytearray(kafka_python_batch(records, codec=data.draw(st.sampled_from([0, 1, 3]))))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        fix_crc(raw)
    try:
        rb.decode_batches(bytes(raw), 1 << 16)
    except PylogError as exc:
        assert rb.kafka_error_code(exc) in (2, 10, 43, 76, 87)


# ------------------------------------------------------------------------------------------- encoding


@st.composite
def pylog_batches(draw):
    """A pylog batch (keys, values, timestamps, headers, compaction gaps, lz4, LogAppendTime, producer fields)
    and a slice of it."""
    n = draw(st.integers(1, 30))
    values = draw(st.lists(blobs, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(blobs, min_size=n, max_size=n)))
    ts = draw(st.one_of(st.none(), st.lists(st.integers(0, 1 << 50), min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(header_lists, min_size=n, max_size=n)))
    deltas = None
    if draw(st.booleans()):
        gaps = draw(st.lists(st.integers(1, 1000), min_size=n - 1, max_size=n - 1))
        deltas = np.cumsum([0, *gaps]).astype(np.int32)
    pid = draw(st.sampled_from([-1, 0, 7, 1 << 50]))
    raw = encode_batch(values, keys, ts, headers, base_offset=draw(st.integers(0, 1 << 50)),
                       default_timestamp=draw(st.integers(0, 1 << 45)), codec=draw(st.sampled_from([0, 1])),
                       log_append_time=draw(st.booleans()), offset_deltas=deltas, producer_id=pid,
                       producer_epoch=-1 if pid < 0 else draw(st.integers(0, 32767)),
                       base_sequence=-1 if pid < 0 else draw(st.integers(0, (1 << 31) - 1)))
    view = BatchView.from_buffer(raw)
    start = draw(st.integers(0, n - 1))
    stop = draw(st.integers(start + 1, n))
    return view, start, stop


@settings(max_examples=300, deadline=None)
@given(sl=pylog_batches())
def test_encoded_slices_read_back_by_kafka_python(sl):
    view, a, b = sl
    data = rb.encode_slice_pure(view, a, b)
    got, [meta] = read_with(kp, data)
    recs = records_pure(view, None, -1, a, b)
    assert got == [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in recs]
    h = view.header
    seq = -1 if h.base_sequence < 0 else (h.base_sequence + recs[0].offset - h.base_offset) % (1 << 31)
    assert meta == (recs[0].offset, h.producer_id, h.producer_epoch, seq, h.timestamp_type, False)


@needs_native
@settings(max_examples=400, deadline=None)
@given(sl=pylog_batches(), epoch=st.sampled_from([0, 5, -1]))
def test_encode_slice_native_equals_pure(sl, epoch):
    view, a, b = sl
    assert rb.encode_slice_native(view, a, b, epoch) == rb.encode_slice_pure(view, a, b, epoch)


@needs_native
def test_encode_slice_refuses_bad_ranges_alike():
    view = BatchView.from_buffer(encode_batch([b"a", b"b"]))
    for fn in (rb.encode_slice_pure, rb.encode_slice_native):
        with pytest.raises(ValueError):
            fn(view, 1, 1)
    with pytest.raises(ValueError):
        rb.encode_slice_native(view, 0, 3)


@needs_native
@pytest.mark.parametrize("start,stop", [(-1, 2), (-2, -1), (0, 3), (1, 5), (-5, 9)])
def test_encode_slice_out_of_range_is_value_error_on_both_paths(start, stop):
    # The pure path used to slice with Python's negative indexes: (-2, -1) gave a batch with base offset -2.
    view = BatchView.from_buffer(encode_batch([b"a", b"b"]))
    for fn in (rb.encode_slice_pure, rb.encode_slice_native):
        with pytest.raises(ValueError, match=rf"^records {start}:{stop} of a batch of 2$"):
            fn(view, start, stop)


@needs_native
@pytest.mark.parametrize("epoch", [1 << 31, -(1 << 31) - 1, 1 << 40])
def test_leader_epoch_outside_int32_is_overflow_error_on_both_paths(epoch):
    # The compiled path wrote the low 32 bits of the epoch; the reference raised struct.error.
    view = BatchView.from_buffer(encode_batch([b"a", b"b"]))
    for fn in (rb.encode_slice_pure, rb.encode_slice_native):
        with pytest.raises(OverflowError, match="leader epoch"):
            fn(view, 0, 2, epoch)


@needs_native
@pytest.mark.parametrize("field,value", [("base_sequence", (1 << 63) - 1), ("base_sequence", 1 << 31),
                                         ("base_sequence", -(1 << 31) - 1), ("producer_epoch", 1 << 20),
                                         ("producer_epoch", -(1 << 15) - 1), ("base_offset", (1 << 63) - 1)])
def test_encode_slice_refuses_header_fields_past_their_width(field, value):
    # A header a BatchView cannot hold (check_header and the fixed-width fields bound them), passed directly:
    # the compiled path wrapped base_sequence + delta and base_offset + delta in signed int64 arithmetic and
    # wrote truncated fields instead of refusing.
    view = BatchView.from_buffer(encode_batch([b"a", b"b"], offset_deltas=np.array([0, 5], np.int32),
                                              producer_id=3, producer_epoch=1, base_sequence=7))
    header = view.header._replace(**{field: value})
    with pytest.raises(OverflowError):
        native.kafka_encode_slice(view.body, header, 1, 2, None, 0)


# Python 3.12+ only (a Python class's __buffer__): defined only there, so 3.11 collects nothing (CI fails on skips).
if sys.version_info >= (3, 12):
    @needs_native
    def test_encode_slice_headers_list_shrunk_by_buffer_export():
        # The headers list's size was checked before the body's buffer was taken; a __buffer__ clearing the list
        # then had the C read rows past its end.
        view = BatchView.from_buffer(encode_batch([b"a", b"b"], headers=[[("k", b"v")], []]))
        hlist = view.headers()

        class Body:
            def __buffer__(self, flags):
                hlist.clear()
                return memoryview(view.body)

        with pytest.raises(TypeError, match="headers must be"):
            native.kafka_encode_slice(Body(), view.header, 0, 2, hlist, 0)


# ------------------------------------------------------------------------------------ partition round trip


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_produce_then_fetch_round_trip(tmp_path, codec):
    records = [(1_700_000_000_000 + i * 3, b"key-%d" % i if i % 2 else None, b"%0100d" % i,
                [("trace", b"t%d" % i)] if i % 4 == 0 else []) for i in range(1000)]
    store = pylog.open(str(tmp_path / "s"))
    try:
        store.create_topic("t", partitions=1)
        p = store.topic("t").partition(0)
        first = 0
        for chunk in range(0, 1000, 250):
            data = kafka_python_batch_raw(records[chunk:chunk + 250], codec) if codec else kafka_python_batch(
                records[chunk:chunk + 250], producer=(9, 2, chunk))
            [kb] = rb.decode_batches(data, MAX)
            assert rb.append_batch(p, kb) == first
            if kb.producer is not None:  # a retry of the same batch lands once, at the same offset
                assert rb.append_batch(p, kb) == first
            first += 250
        assert p.log_end_offset == 1000
        fetched = rb.encode_slices(p.read_slices(0, 10_000, 1 << 24))
        got, meta = read_with(kp, fetched)
        assert got == [(i, t, k, v, tuple(h)) for i, (t, k, v, h) in enumerate(records)]
        if not codec:
            assert [m[1:4] for m in meta] == [(9, 2, c) for c in range(0, 1000, 250)]
        mid = rb.encode_slices(p.read_slices(310, 5, 1 << 24))
        got, meta = read_with(kp, mid)
        assert [g[0] for g in got] == list(range(310, 315))
        if not codec:
            assert meta[0][3] == 310  # 60 records into the batch whose base sequence is 250
        if aiok is not None:
            assert read_with(aiok, fetched)[0] == read_with(kp, fetched)[0]
    finally:
        store.close()


def test_kafka_error_codes():
    assert rb.kafka_error_code(CorruptBatchError("x")) == 2
    assert rb.kafka_error_code(InvalidBatchError("x")) == 87
    assert rb.kafka_error_code(UnsupportedMagicError("x")) == 43
    assert rb.kafka_error_code(UnsupportedCompressionError("x")) == 76
    assert rb.kafka_error_code(RecordTooLargeError("x")) == 10
    assert rb.kafka_error_code(ValueError("x")) == -1


def test_gzip_concatenated_members():
    a, b = b"a" * 1000, b"b" * 1000
    z = zlib.compress(a, wbits=31) + compression.compress(1, b)
    assert compression.decompress(1, z, 2000) == a + b
    with pytest.raises(RecordTooLargeError):
        compression.decompress(1, z, 1999)
