"""Every bound of the record batch decoder against what the encoder accepts: anything appendable is readable.

The decoder (pylog/storage/records/format.py's check_header, views.py's batch layout and headers section,
and their compiled counterparts in native/decode.c) refuses a batch past a set of bounds. For each bound,
the tests here encode batches at it (and, where the encoder can be asked to, past it) through both encoders
(the pure reference and ``encode_parts``, compiled when the accelerator is live) and decode them through
both decoders: a batch the encoder writes decodes, on both paths, to exactly what went in; a batch past a
bound is refused by the encoder with an InvalidRecordError, never written to be refused by the reader.

pylog <= 0.1.0 broke this for headers: its decoder capped msgpack arrays at max(record count, 16) items, so
a record with 17 headers was appended and then every read of it raised CorruptRecordError.
"""

from __future__ import annotations

import numpy as np
import pytest

import pylog
from pylog import InvalidRecordError
from pylog.accel import native
from pylog.clients.consumer import ConsumerRecord
from pylog.storage.records import (CODEC_LZ4, MAX_BATCH_SIZE, MAX_OFFSET, BatchView, RecordColumns, check_header,
                                   encode_parts, parse_header)
from pylog.storage.records import views
from pylog.storage.records.encode import encode_parts_pure
from pylog.storage.records.format import LZ4_MAX_RATIO

ENCODERS = {"pure": encode_parts_pure, "accelerated": encode_parts}
needs_native = pytest.mark.skipif(native is None, reason="compiled extension not live")
DECODERS = ["pure", pytest.param("native", marks=needs_native)]
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def _encode(encoder: str, values, keys=None, timestamps=None, headers=None, **options) -> bytes:
    parts, h = ENCODERS[encoder](values, keys, timestamps, headers, **options)
    raw = b"".join(parts)
    check_header(parse_header(raw))  # what every reader checks first
    assert h == parse_header(raw)
    return raw


def _decoded(raw: bytes, decoder: str) -> list[tuple]:
    """``(offset, timestamp, key, value, headers)`` of each record of ``raw``, through ``decoder``'s records,
    consumer rows and (pure) columns, which must agree."""
    view = BatchView.from_buffer(raw)
    layout = (views.batch_layout_pure if decoder == "pure" else views.batch_layout_native)
    layout(view.body, view.count, view.header.attributes, view.header.last_offset_delta, None, None)
    records = (views.records_pure if decoder == "pure" else views.records_native)(view, "t", 0)
    rows = (views.consumer_rows_pure if decoder == "pure" else views.consumer_rows_native)(
        [(view, 0, view.count)], "t", 0, ConsumerRecord)
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in rows] == got
    cols = RecordColumns.concat_views([(view, 0, view.count)], "t", 0)
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in cols.to_records()] == got
    return got


def _expected(values, keys=None, timestamps=None, headers=None, base_offset=0, default_timestamp=0) -> list[tuple]:
    n = len(values)
    keys = keys or [None] * n
    timestamps = timestamps or [default_timestamp] * n
    headers = headers or [[]] * n
    return [(base_offset + i, timestamps[i], keys[i], values[i], tuple(tuple(h) for h in headers[i]))
            for i in range(n)]


def _round_trip(encoder: str, decoder: str, values, keys=None, timestamps=None, headers=None, **options) -> bytes:
    options.setdefault("default_timestamp", 0)
    raw = _encode(encoder, values, keys, timestamps, headers, **options)
    want = _expected(values, keys, timestamps, headers, options.get("base_offset", 0), options["default_timestamp"])
    assert _decoded(raw, decoder) == want
    return raw


# ------------------------------------------------------------------------------------- headers section

@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("per_record", [0, 1, 15, 16, 17, 255, 65535, 65536])
def test_headers_per_record_at_every_msgpack_array_bound_read_back(encoder, decoder, per_record):
    # fixarray holds 15 items, array16 65535; the old decoder capped every array at max(count, 16).
    headers = [[("", None)] * per_record, [("k", b"v")]]
    _round_trip(encoder, decoder, [b"a", b"b"], headers=headers)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_records_with_more_headers_than_records_read_back_in_a_large_batch(encoder, decoder):
    n = 40
    headers = [[(f"h{j}", bytes([j])) for j in range(i)] for i in range(n)]
    _round_trip(encoder, decoder, [bytes([i]) for i in range(n)], headers=headers, codec=CODEC_LZ4)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("size", [0, 31, 32, 255, 256, 65535, 65536])
def test_header_keys_and_values_at_every_msgpack_length_bound_read_back(encoder, decoder, size):
    # fixstr holds 31 bytes, str8 255, str16 65535; bin8 255, bin16 65535: each boundary on both sides.
    headers = [[("k" * size, b"v" * size), ("\u00e9" * (size // 2), None)]]
    _round_trip(encoder, decoder, [b"x"], headers=headers)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_a_headers_section_larger_than_the_rest_of_the_batch_reads_back(encoder, decoder):
    _round_trip(encoder, decoder, [None], headers=[[("k", b"\xff" * (1 << 20))] * 3])


# ------------------------------------------------------------------------------------- header fields

@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_the_record_count_bound_is_reached_by_a_batch_of_null_values(encoder, decoder):
    # check_header: count <= body_size // 4. Null values without keys or timestamps take 4 bytes each.
    n = 100_000
    raw = _round_trip(encoder, decoder, [None] * n)
    h = parse_header(raw)
    assert h.record_count == h.body_size // 4 == n


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_the_last_offset_may_be_the_largest_int64_and_no_more(encoder, decoder):
    # check_header: 0 <= base_offset <= MAX_OFFSET - last_offset_delta.
    values = [b"a", b"b", b"c"]
    _round_trip(encoder, decoder, values, base_offset=MAX_OFFSET - 2)
    _round_trip(encoder, decoder, values, base_offset=0)
    for base in (MAX_OFFSET - 1, -1):
        with pytest.raises(InvalidRecordError, match="out of range"):
            _encode(encoder, values, base_offset=base)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_timestamps_at_both_ends_of_int64_in_one_batch_read_back(encoder, decoder):
    # The deltas from the first timestamp wrap around int64 (numpy's and C's arithmetic alike); check_header
    # wants max_timestamp >= first_timestamp, which the encoder's max keeps.
    _round_trip(encoder, decoder, [b"a", b"b", b"c"], timestamps=[I64_MIN, I64_MAX, -1])
    _round_trip(encoder, decoder, [b"a", b"b"], timestamps=[I64_MAX, I64_MIN])
    with pytest.raises(InvalidRecordError):
        _encode(encoder, [b"a"], timestamps=[I64_MAX + 1])


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("pid, epoch, seq", [(I64_MAX, 32767, (1 << 31) - 1), (I64_MIN, -32768, -(1 << 31)),
                                             (0, 0, 0)])
def test_producer_fields_at_their_widths_read_back(encoder, decoder, pid, epoch, seq):
    raw = _round_trip(encoder, decoder, [b"a"] * 20, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    h = parse_header(raw)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (pid, epoch, seq)
    if epoch:  # one past the int16 the header holds
        with pytest.raises(InvalidRecordError, match="out of range"):
            _encode(encoder, [b"a"] * 20, producer_epoch=epoch + (1 if epoch > 0 else -1))


# ------------------------------------------------------------------------------------------ sizes

@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_the_most_compressible_body_stays_within_the_lz4_ratio_the_decoder_allows(encoder, decoder):
    # check_header: body_size <= stored * LZ4_MAX_RATIO + 64 for an lz4 body. Zeros compress best.
    values = [bytes(1 << 22), bytes(1 << 22)]
    raw = _round_trip(encoder, decoder, values, codec=CODEC_LZ4)
    h = parse_header(raw)
    assert h.codec == CODEC_LZ4 and h.body_size > 200 * (h.size - 64)  # near the ratio, within it
    assert h.body_size <= (h.size - 64) * LZ4_MAX_RATIO + 64


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("codec", [0, CODEC_LZ4])
def test_a_batch_over_the_format_limit_is_refused_by_the_encoder_before_it_is_built(encoder, codec):
    # check_header: batch_length <= MAX_BATCH_SIZE - 12 and an lz4 body_size <= MAX_BATCH_SIZE. The body
    # here would compress to a few MiB, but a reader refuses its body_size: the encoder must refuse it,
    # and before joining 2 GiB (the parts are one 64 MiB buffer, referenced 33 times).
    chunk = bytes(1 << 26)
    n = MAX_BATCH_SIZE // len(chunk) + 1
    lengths = np.full(n, len(chunk), np.int32)
    with pytest.raises(InvalidRecordError, match="exceeds the format's limit"):
        ENCODERS[encoder](value_lengths=lengths, value_data=[chunk] * n, codec=codec, default_timestamp=0)


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_empty_null_and_large_items_read_back(encoder, decoder):
    values = [b"", None, b"v" * (1 << 24), b"x"]
    keys = [None, b"", b"k" * 70_000, None]
    _round_trip(encoder, decoder, values, keys, timestamps=[5, 4, 3, 2])
    _round_trip(encoder, decoder, values, keys, log_append_time=True, default_timestamp=77)


# ------------------------------------------------------------------------------------ through a store

def test_a_record_with_many_headers_reads_back_through_every_reader(tmp_path):
    headers = [(f"h{i}", bytes([i % 256]) * i) for i in range(300)]
    with pylog.open(tmp_path) as store:
        p = store.create_topic("t").partition(0)
        p.append_values([b"one", b"two"], headers=[headers, [("x", None)] * 17])
        producer = store.producer()
        producer.send("t", b"three", headers=headers[:40]).get(30)
        producer.close()
        got = [r.headers for r in p.read(0)]
        assert got == [tuple(headers), (("x", None),) * 17, tuple(headers[:40])]
        assert p.read_columns(0).headers == got
        consumer = store.consumer("t", auto_offset_reset="earliest")
        assert [r.headers for r in consumer.poll(timeout_ms=5000)[pylog.TopicPartition("t", 0)]] == got
        consumer.close()
        assert p.check() == []


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_offset_deltas_up_to_the_largest_int32_read_back_and_no_further(encoder, decoder):
    # batch_layout: deltas strictly increasing from 0 to last_offset_delta (an int32); compaction writes gaps.
    deltas = np.array([0, 5, (1 << 31) - 1], np.int64)
    raw = _encode(encoder, [b"a", None, b"c"], offset_deltas=deltas, base_offset=7, default_timestamp=0)
    assert [(o, v) for o, _, _, v, _ in _decoded(raw, decoder)] == [(7, b"a"), (12, None), (7 + (1 << 31) - 1, b"c")]
    for bad in ([0, 1 << 31], [0, (1 << 32) + 1], [1, 2], [0, 0], [0.0, 1.5]):
        with pytest.raises(InvalidRecordError, match="offset deltas"):
            _encode(encoder, [b"a", b"b"], offset_deltas=np.array(bad))
