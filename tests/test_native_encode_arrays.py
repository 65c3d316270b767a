"""Timestamps as a numpy column (what a producer's drain passes: one stamp for all its records, or each record's
own) through the compiled encoder: the same bytes and errors as the pure-Python reference
(``encode_parts_pure``). Before, the compiled encoder declined every array and every producer drain was
encoded by the pure path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import PylogError
from pylog.accel import REASON, native
from pylog.storage.records import column_parts, encode_parts
from pylog.storage.records import encode as encode_module
from pylog.storage.records.encode import encode_parts_pure

pytestmark = pytest.mark.skipif(native is None, reason=f"compiled extension not live: {REASON}")

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _outcome(fn, *args, **kw):
    try:
        parts, header = fn(*args, **kw)
    except PylogError as exc:
        return "error", type(exc), str(exc)
    return b"".join(bytes(p) for p in parts), tuple(header)


@settings(max_examples=200, deadline=None)
@given(st.integers(17, 60), st.data(), st.sampled_from(["one", "each", "edges"]),
       st.sampled_from([np.int64, np.int32, np.int16, np.uint8]), st.booleans(), st.booleans())
def test_a_timestamp_column_encodes_the_same_on_both_paths(n, data, kind, dtype, keyed, log_append_time):
    values = [b"v%d" % i for i in range(n)]
    keys = [b"k%d" % i for i in range(n)] if keyed else None
    if kind == "one":
        ts = np.full(n, data.draw(st.integers(0, 1 << 45)))
    elif kind == "each":
        ts = np.array(data.draw(st.lists(st.integers(0, 1 << 45), min_size=n, max_size=n)))
    else:  # int64's limits: deltas wrap as numpy's do
        ts = np.array(data.draw(st.lists(st.sampled_from([-(1 << 63), (1 << 63) - 1, 0, -1]), min_size=n,
                                         max_size=n)))
    info = np.iinfo(dtype)
    ts = np.clip(ts, info.min, info.max).astype(dtype)
    opts = dict(base_offset=data.draw(st.integers(0, 1 << 40)), default_timestamp=data.draw(INT64),
                log_append_time=log_append_time)
    vl, vp = column_parts(values, n, "values")
    kl, kp = column_parts(keys, n, "keys") if keyed else (None, [])
    # As a partition's append passes them: length columns and lists of parts (the compiled encoder's input).
    cols = dict(value_lengths=vl, value_data=vp, key_lengths=kl, key_data=kp, timestamps=ts)
    assert _outcome(encode_parts, **cols, **opts) == _outcome(encode_parts_pure, **cols, **opts)
    assert _outcome(encode_parts, values, keys, ts, **opts) == _outcome(encode_parts_pure, values, keys, ts, **opts)


@pytest.mark.parametrize("ts", [np.zeros(20, np.float64), np.zeros((20, 1), np.int64), np.zeros(19, np.int64),
                                np.array(["1"] * 20)])
def test_a_timestamp_column_the_encoder_refuses_raises_the_references_error(ts):
    values = [b"v%d" % i for i in range(20)]
    assert _outcome(encode_parts, values, None, ts, default_timestamp=5) == \
        _outcome(encode_parts_pure, values, None, ts, default_timestamp=5)
    assert _outcome(encode_parts, values, None, ts, default_timestamp=5)[0] == "error"


def test_a_drain_stamped_column_is_encoded_by_the_compiled_encoder(monkeypatch):
    calls = []
    real = encode_module._native_encode

    def counting(*args):
        got = real(*args)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(encode_module, "_native_encode", counting)
    values = [b"v%d" % i for i in range(100)]
    encode_parts(values, None, np.full(100, 1_700_000_000_000, np.int64), default_timestamp=1)
    encode_parts(values, None, np.arange(100, dtype=np.int64), default_timestamp=1)
    assert calls == [True, True]
