"""The compiled batch encoder (native/encode.c) against its pure-Python reference (records/encode.py).

Both implementations run in this process: :func:`encode_parts` (which hands the common inputs to
``native.encode_columns``) and :func:`encode_parts_pure`; :func:`column_parts` and
:func:`column_parts_pure`. On random valid inputs they must give the same bytes and the same
:class:`BatchHeader`; on bad inputs the same :class:`PylogError` subclass.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog import accel
from pylog.errors import InvalidRecordError, PylogError
from pylog.storage.records import CODEC_LZ4, CODEC_NONE, BatchView, encode, encode_batch
from pylog.storage.records.encode import (EncodeOptions, column_parts, column_parts_pure, encode_parts,
                                          encode_parts_pure)

pytestmark = pytest.mark.skipif(not encode.NATIVE_ENCODE,
                                reason=f"compiled encoder not live: {accel.REASON}")

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

item = st.one_of(st.none(), st.binary(max_size=120), st.binary(max_size=40).map(bytearray))
items = st.lists(item, min_size=1, max_size=60)
timestamp = st.one_of(st.integers(0, 1 << 45), st.integers(I64_MIN, I64_MAX), st.none())
header_row = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))), max_size=2)
options = st.builds(
    EncodeOptions, base_offset=st.integers(0, 1 << 62), default_timestamp=st.integers(0, 1 << 45),
    codec=st.sampled_from([CODEC_NONE, CODEC_LZ4]), log_append_time=st.booleans(),
    producer_id=st.integers(-1, 1 << 62), producer_epoch=st.integers(-1, 32767),
    base_sequence=st.integers(-1, (1 << 31) - 1), control=st.booleans())


def _outcome(fn, *args, **kwargs):
    """``(bytes, header)`` of an encode, or the class of the PylogError it raised."""
    try:
        parts, header = fn(*args, **kwargs)
    except PylogError as exc:
        return type(exc)
    return b"".join(parts), header


@st.composite
def batches(draw):
    values = draw(items)
    n = len(values)
    keys = draw(st.one_of(st.none(), st.lists(item, min_size=n, max_size=n), st.just([None] * n)))
    timestamps = draw(st.one_of(st.none(), st.lists(timestamp, min_size=n, max_size=n),
                                st.lists(st.just(1_700_000_000_000), min_size=n, max_size=n)))
    headers = draw(st.one_of(st.none(), st.lists(header_row, min_size=n, max_size=n)))
    return values, keys, timestamps, headers, draw(options)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_both_encoders_write_the_same_batch(batch):
    values, keys, timestamps, headers, opts = batch
    fast = _outcome(encode_parts, values, keys, timestamps, headers, options=opts)
    pure = _outcome(encode_parts_pure, values, keys, timestamps, headers, options=opts)
    assert fast == pure
    if isinstance(fast, tuple):
        view = BatchView.from_buffer(fast[0])
        assert view.header == fast[1]
        assert view.records()[0].value == values[0]


@settings(max_examples=200, deadline=None)
@given(batches())
def test_both_encoders_agree_on_columns_with_parts(batch):
    """The partition's path: length columns plus lists of parts (what column_parts returns)."""
    values, keys, timestamps, headers, opts = batch
    vl, vp = column_parts(values, len(values), "values")
    kl, kp = column_parts(keys, len(values), "keys")
    assert (vl.tobytes(), vp) == (column_parts_pure(values, len(values), "values")[0].tobytes(),
                                  column_parts_pure(values, len(values), "values")[1])
    kw = dict(value_lengths=vl, value_data=vp, key_lengths=kl, key_data=kp, options=opts)
    assert _outcome(encode_parts, timestamps=timestamps, headers=headers, **kw) == \
        _outcome(encode_parts_pure, timestamps=timestamps, headers=headers, **kw)


@settings(max_examples=200, deadline=None)
@given(batches(), st.booleans(), st.booleans())
def test_both_encoders_agree_on_one_buffer_columns(batch, as_view, large):
    """``pylog serve``'s path: a Kafka batch's values and keys as one buffer each (small ones go to the
    compiled encoder, those over NATIVE_COPY_BYTES to the pure path) and its timestamps as an int64 column."""
    values, keys, timestamps, headers, opts = batch
    if large:
        values = [v if v is None else bytes(v) * (encode.NATIVE_COPY_BYTES // 8 + 1) for v in values]
    vl = np.array([-1 if v is None else len(v) for v in values], np.int32)
    vd = b"".join(v for v in values if v is not None)
    kl = kd = None
    if keys is not None:
        kl = np.array([-1 if k is None else len(k) for k in keys], np.int32)
        kd = b"".join(k for k in keys if k is not None)
    ts = None if timestamps is None else np.array([t if t is not None else 0 for t in timestamps], np.int64)
    wrap = memoryview if as_view else (lambda b: b)
    kw = dict(value_lengths=vl, value_data=[wrap(vd)], key_lengths=kl,
              key_data=[] if kd is None else [wrap(kd)], timestamps=ts, headers=headers, options=opts)
    assert _outcome(encode_parts, **kw) == _outcome(encode_parts_pure, **kw)


def test_the_compiled_encoder_takes_the_common_inputs():
    """Not a test that cannot fail: the C code must not decline the inputs it exists for."""
    values = [bytes([i % 256]) * 100 for i in range(1000)]
    keys = [b"k%07d" % i for i in range(1000)]
    vl, vp = column_parts(values, 1000, "values")
    kl, kp = column_parts(keys, 1000, "keys")
    got = accel.native.encode_columns(vl, vp, kl, kp, list(range(1000)), None, 5, 7, 0, -1, -1, -1)
    assert got is not None
    hdr, body, fields = got
    parts, header = encode_parts_pure(values, keys, list(range(1000)), base_offset=5, default_timestamp=7)
    assert hdr + body == b"".join(parts) and tuple(fields) == tuple(header)


bad_item = st.one_of(st.text(min_size=1, max_size=3), st.integers(), st.floats(),
                     st.builds(lambda: memoryview(b"ab").cast("H")),
                     st.builds(lambda: [b"x"]))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_bad_inputs_raise_the_same_error_on_both_paths(data):
    values = data.draw(st.lists(st.binary(min_size=1, max_size=30), min_size=17, max_size=40))
    n = len(values)
    where = data.draw(st.sampled_from(["value", "key", "key count", "timestamp", "timestamp count", "header",
                                       "lengths", "parts"]))
    keys = timestamps = headers = None
    kw: dict = {}
    if where == "value":
        values[data.draw(st.integers(0, n - 1))] = data.draw(bad_item)
    elif where == "key":
        keys = [b"k"] * n
        keys[data.draw(st.integers(0, n - 1))] = data.draw(bad_item)
    elif where == "key count":
        keys = [b"k"] * data.draw(st.sampled_from([n - 1, n + 1]))
    elif where == "timestamp":
        timestamps = [0] * n
        bad = data.draw(st.one_of(st.text("abc", min_size=1), st.just(1 << 70)))
        timestamps[data.draw(st.integers(0, n - 1))] = bad
    elif where == "timestamp count":
        timestamps = [0] * data.draw(st.sampled_from([n - 1, n + 1]))
    elif where == "header":
        headers = [[]] * n
        headers[data.draw(st.integers(0, n - 1))] = [(data.draw(st.sampled_from([b"k", 3])), b"v")]
    else:
        lengths = np.array([len(v) for v in values], np.int32)
        if where == "lengths":
            lengths[data.draw(st.integers(0, n - 1))] = data.draw(st.one_of(st.integers(-(1 << 31), -2),
                                                                            st.integers(1 << 30, (1 << 31) - 1)))
        else:
            lengths[data.draw(st.integers(0, n - 1))] += data.draw(st.sampled_from([-1, 1]))
        kw = dict(value_lengths=lengths, value_data=values)
        values = None
    args = (values, keys, timestamps, headers)
    fast = _exception(encode_parts, *args, default_timestamp=1, **kw)
    pure = _exception(encode_parts_pure, *args, default_timestamp=1, **kw)
    assert fast == pure
    assert fast is not None and issubclass(fast, PylogError)


def _exception(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except PylogError as exc:
        return type(exc)
    return None


# ------------------------------------------------------------------------------------------ read_columns

needs_join = pytest.mark.skipif(getattr(accel.native, "join_buffers", None) is None,
                                reason=f"compiled join not live: {accel.REASON}")

part = st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(bytearray),
                 st.binary(max_size=300).map(lambda b: memoryview(b)[1:]))


@needs_join
@settings(max_examples=200, deadline=None)
@given(st.lists(part, max_size=20))
def test_join_buffers_is_bytes_join(parts):
    got = accel.native.join_buffers(parts)
    assert type(got) is bytes and got == b"".join(parts)


@needs_join
def test_join_buffers_of_huge_page_sizes_and_bad_items():
    big = [bytes([i]) * ((3 << 20) + i) for i in range(3)]  # 9 MiB: advised to use huge pages
    assert accel.native.join_buffers(big) == b"".join(big)
    with pytest.raises(TypeError):
        accel.native.join_buffers([b"a", 3])
    with pytest.raises(TypeError):
        accel.native.join_buffers((b"a",))


_DIGEST = """
import hashlib, sys, pylog
from pylog.errors import InvalidRecordError, PylogError
out = []
with pylog.open(sys.argv[1]) as store:
    p = store.topic("t").partition(0)
    for offset, most in ((0, 100_000), (1234, 7), (2500, 100_000), (0, 1), (30_500, 10), (59_000, 10)):
        try:
            c = p.read_columns(offset, max_records=most)
        except PylogError as exc:
            out.append(type(exc).__name__)
            continue
        h = hashlib.sha256()
        for a in (c.offsets, c.timestamps, c.timestamp_types, c.key_lengths, c.value_lengths):
            h.update(a.tobytes())
        h.update(c.key_data); h.update(c.value_data); h.update(repr(c.headers).encode())
        out.append(h.hexdigest())
print(pylog.ACCELERATED, *out)
"""


def _digests(path, pure):
    import subprocess
    import sys
    env = dict(os.environ, PYLOG_PURE_PYTHON="1" if pure else "0")
    out = subprocess.run([sys.executable, "-c", _DIGEST, str(path)], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out[0] == str(not pure)
    return out[1:]


@needs_join
@pytest.mark.parametrize("damage", [False, True])
def test_read_columns_is_the_same_on_both_paths(tmp_path, damage):
    """Large reads (over the huge-page threshold), small ones, keys with nulls, headers; with a damaged
    batch the same error (or the same records before it) on both paths."""
    import pylog
    path = tmp_path / "s"
    with pylog.open(path) as store:
        store.create_topic("t")
        p = store.topic("t").partition(0)
        for i in range(60):
            n = 1000
            p.append_values([bytes([i]) * 100] * n, keys=[None if j % 7 == 0 else b"k%d" % j for j in range(n)],
                            timestamps=[1000 + j for j in range(n)],
                            headers=[[("h", b"%d" % j)] for j in range(n)] if i % 10 == 3 else None)
        seg = p.segments[-1].log_path
    if damage:
        with open(seg, "r+b") as f:
            f.seek(os.path.getsize(seg) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0x40]))
    fast, pure = _digests(path, pure=False), _digests(path, pure=True)
    assert fast == pure
    assert ("CorruptRecordError" in fast) == damage


@pytest.mark.parametrize("options", [{"producer_epoch": 1 << 20}, {"base_sequence": 1 << 40}, {"base_offset": 1 << 63},
                                     {"producer_id": -(1 << 64)}])
def test_header_fields_out_of_range_raise_invalid_record_error_on_both_paths(options):
    # struct.error escaped the pure encoder before (found by tests/torture/fuzz_native.py's api kind)
    with pytest.raises(InvalidRecordError, match="out of range"):
        encode_parts_pure([b"a"], **options)
    with pytest.raises(InvalidRecordError, match="out of range"):
        encode_batch([b"a"], **options)


def test_a_strided_memoryview_value_raises_invalid_record_error_on_both_paths():
    strided = memoryview(b"abcdef")[::2]
    for fn in (encode_parts_pure, encode_batch):
        with pytest.raises(InvalidRecordError, match="contiguous"):
            fn([strided, b"x"])


@pytest.mark.parametrize("headers", [["x"], [[("h",)]], [[1]], [7], [[(b"k", b"v", b"w")]]])
def test_malformed_headers_raise_invalid_record_error_on_both_paths(headers):
    # ValueError/TypeError escaped before (fuzz_native's api kind, seed 20261126, input 104339)
    for fn in (encode_parts_pure, encode_batch):
        with pytest.raises(InvalidRecordError):
            fn([b"v"], headers=headers)


@st.composite
def runs(draw):
    """An append call's records cut into runs (a producer's drain cut at batch_size), as lists of items."""
    values = draw(st.lists(st.one_of(st.none(), st.binary(max_size=60)), min_size=1, max_size=80))
    n = len(values)
    keys = draw(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.binary(max_size=12)), min_size=n, max_size=n)))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=8))) if n > 1 else []
    stops = [*cuts, n]
    ts = draw(st.one_of(st.none(), st.just(np.full(n, 1_700_000_000_000, np.int64)),
                        st.lists(st.integers(I64_MIN, I64_MAX), min_size=n, max_size=n).map(
                            lambda t: np.array(t, np.int64))))
    opts = EncodeOptions(base_offset=draw(st.integers(0, 1 << 62)), default_timestamp=draw(st.integers(0, 1 << 45)),
                         log_append_time=draw(st.booleans()), producer_id=draw(st.integers(-1, 1 << 62)),
                         producer_epoch=draw(st.integers(-1, 32767)),
                         base_sequence=draw(st.integers(0, (1 << 31) - 1)), transactional=draw(st.booleans()))
    return values, keys, stops, ts, opts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_an_append_calls_batches_encoded_at_once_are_those_encoded_one_by_one(case):
    values, keys, stops, ts, opts = case
    vlens, vparts = column_parts(values, len(values), "values")
    klens, kparts = column_parts(keys, len(values), "keys")
    packed = encode.encode_runs_packed(vlens, vparts, klens, kparts, ts, stops, opts, 1 << 30)
    assert packed is not None
    data, headers = packed
    expect, want_headers, start, base = [], [], 0, opts.base_offset
    for stop in stops:
        seq = -1 if opts.producer_id < 0 else (opts.base_sequence + start) % (1 << 31)
        parts, h = encode_parts_pure(values[start:stop], None if keys is None else keys[start:stop],
                                     None if ts is None else ts[start:stop],
                                     options=opts._replace(base_offset=base, base_sequence=seq))
        expect.append(b"".join(parts))
        want_headers.append(h)
        start, base = stop, h.next_offset
    assert bytes(data) == b"".join(expect)
    assert headers == want_headers


def test_batches_encoded_at_once_decline_what_they_do_not_take():
    values = [b"a" * 10, None, b"b" * 20]
    vlens, vparts = column_parts(values, 3, "values")
    opts = EncodeOptions(default_timestamp=5)
    ok = encode.encode_runs_packed(vlens, vparts, None, [], None, [1, 3], opts, 1 << 20)
    assert ok is not None and len(ok[1]) == 2
    for args in ((vlens, vparts, None, [], None, [1, 3], opts, 64 + 8 + 20 - 1),  # a batch over max_bytes
                 (vlens, vparts, None, [], None, [1, 3], opts._replace(codec=CODEC_LZ4), 1 << 20),
                 (vlens, vparts, None, [], [5, 5, 5], [1, 3], opts, 1 << 20),  # timestamps not an int64 array
                 (vlens, vparts, None, [], None, [2, 1, 3], opts, 1 << 20),  # runs out of order
                 (vlens, vparts, None, [], None, [1, 2], opts, 1 << 20),  # runs short of the records
                 (vlens, vparts[:1], None, [], None, [1, 3], opts, 1 << 20),  # a part missing
                 (vlens, [b"a" * 10, b"b" * 19], None, [], None, [1, 3], opts, 1 << 20),  # a part that lies
                 (vlens, [b"a" * 10, "b" * 20], None, [], None, [1, 3], opts, 1 << 20)):  # not bytes
        assert encode.encode_runs_packed(*args) is None
