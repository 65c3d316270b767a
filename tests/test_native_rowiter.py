"""The consumer's rows built one at a time (native ``consumer_row_iter``, native/decode.c's RowIter) against the
pure-Python reference (``views.consumer_rows_pure``): the same rows, the same deserializer calls, the same errors,
on random valid batches and on damaged ones; and what the iterator promises on its own (how many rows are
left, the offset after the last row taken, ``close()``, a row that raises being tried again, a deserializer
calling back into it). Both paths are called explicitly, in one process."""

from __future__ import annotations

import gc
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import PylogError
from pylog.accel import REASON, native
from pylog.clients.consumer import ConsumerRecord
from pylog.storage.records import HEADER_SIZE, BatchView, encode_batch, parse_header
from pylog.storage.records import views
from test_native_decode import _mutate, _mutations, _rebatch, _uncompressed, batches

pytestmark = pytest.mark.skipif(native is None or views.consumer_row_iter is None,
                                reason=f"compiled extension not live: {REASON}")


def _slices(raws: list[bytes], data) -> list[tuple[BatchView, int, int]]:
    """Consecutive batches (as a partition holds them), each sliced at random."""
    base = 0
    out = []
    for raw in raws:
        h = parse_header(raw)
        buf = bytearray(raw)
        struct.pack_into("<q", buf, 0, base)
        view = BatchView.from_buffer(bytes(buf), verify_crc=False)
        a = data.draw(st.integers(0, h.record_count))
        b = data.draw(st.integers(a, h.record_count))  # empty slices too: the iterator passes them
        out.append((view, a, b))
        base += h.last_offset_delta + 1
    return out


def _outcome(fn) -> tuple:
    try:
        return "ok", [tuple(r) for r in fn()]
    except (PylogError, TypeError, ValueError) as exc:  # TypeError/ValueError: arguments the decoder refuses
        return "error", type(exc), str(exc)


@settings(max_examples=150, deadline=None)
@given(st.lists(batches(), min_size=1, max_size=4), st.data(), st.sampled_from(["none", "keys", "values", "both"]))
def test_row_iter_gives_the_references_rows_and_deserializer_calls(raws, data, deserializers):
    slices = _slices(raws, data)
    calls: dict[str, list] = {"pure": [], "native": []}

    def des(which, tag):
        def f(b):
            calls[which].append((tag, b))
            return b[::-1]
        return f

    got = {}
    for which in ("pure", "native"):
        kd = des(which, "k") if deserializers in ("keys", "both") else None
        vd = des(which, "v") if deserializers in ("values", "both") else None
        if which == "pure":
            got[which] = views.consumer_rows_pure(slices, "topic", 5, ConsumerRecord, kd, vd)
        else:
            it = views.consumer_row_iter_native(slices, "topic", 5, ConsumerRecord, kd, vd)
            rows = []
            left = it.__length_hint__()
            assert left == sum(b - a for _, a, b in slices)
            for r in it:
                rows.append(r)
                left -= 1
                assert it.__length_hint__() == left
                assert it.next_offset == r.offset + 1
            got[which] = rows
    assert [tuple(r) for r in got["native"]] == [tuple(r) for r in got["pure"]]
    assert all(type(r) is ConsumerRecord for r in got["native"])
    assert calls["native"] == calls["pure"]
    assert not any(gc.is_tracked(r) for r in got["native"])  # rows of atoms: off the collector's lists


@settings(max_examples=150, deadline=None)
@given(batches(), _mutations(), st.data())
def test_row_iter_over_a_damaged_body_raises_the_references_error(raw, mutation, data):
    """A body whose lengths lie (CRC recomputed), after a good batch: the iterator gives what decode_rows
    (the list path, itself checked against the reference in test_native_decode.py) gives, rows or the same
    error, and the reference's rows when a view of the damaged batch can be built at all."""
    good = BatchView.from_buffer(raw)
    header, body = _uncompressed(raw)
    bad = _rebatch(header, _mutate(body, header, mutation))
    h = parse_header(bad)
    n = h.record_count
    a = data.draw(st.integers(0, max(n, 0)))
    b = data.draw(st.integers(a, max(n, a)))
    try:
        view = BatchView.from_buffer(bad)
        headers = view.headers()
    except PylogError:
        view, headers = None, None
    parts = [(good.body, good.header, 0, good.count, good.headers()),
             (memoryview(bad)[HEADER_SIZE:], h, a, b, headers)]
    native_outcome = _outcome(lambda: list(native.consumer_row_iter(parts, "t", 0, ConsumerRecord, None, None)))
    assert native_outcome == _outcome(lambda: _decode_rows(parts))
    if view is not None:
        slices = [(good, 0, good.count), (view, a, b)]
        assert native_outcome == _outcome(lambda: views.consumer_rows_pure(slices, "t", 0, ConsumerRecord))


def _decode_rows(parts) -> list:
    out: list = []
    for body, h, a, b, hs in parts:
        native.decode_rows(out, body, h, a, b, "t", 0, ConsumerRecord, hs, None, None)
    return out


def _view(n: int = 5, base: int = 100) -> BatchView:
    return BatchView.from_buffer(encode_batch([b"v%d" % i for i in range(n)], keys=[b"k%d" % i for i in range(n)],
                                              base_offset=base, default_timestamp=7))


def test_a_row_whose_deserializer_raises_is_tried_again_by_the_next_call():
    view = _view()
    fail = {"on": b"v2", "calls": 0}

    def vd(b: bytes) -> bytes:
        fail["calls"] += 1
        if b == fail["on"]:
            raise ValueError("bad value")
        return b.upper()

    it = views.consumer_row_iter_native([(view, 0, 5)], "t", 1, ConsumerRecord, None, vd)
    assert [next(it).value, next(it).value] == [b"V0", b"V1"]
    for _ in range(2):
        with pytest.raises(ValueError):
            next(it)
        assert it.next_offset == 102 and it.__length_hint__() == 3  # still before the failing row
    fail["on"] = None
    assert [r.value for r in it] == [b"V2", b"V3", b"V4"]
    assert it.next_offset == 105 and it.__length_hint__() == 0


def test_close_ends_the_iterator_where_it_stands():
    view = _view()
    it = views.consumer_row_iter_native([(view, 1, 5), (view, 0, 0)], "t", 1, ConsumerRecord)
    assert it.next_offset == -1
    assert next(it).offset == 101
    it.close()
    assert it.__length_hint__() == 0 and it.next_offset == 102
    assert list(it) == []
    it.close()  # twice is fine


def test_a_deserializer_calling_back_into_its_iterator_is_refused():
    view = _view()
    holder: list = []

    def vd(b: bytes) -> bytes:
        with pytest.raises(ValueError, match="already executing"):
            next(holder[0])
        with pytest.raises(ValueError, match="already executing"):
            holder[0].close()
        return b

    it = views.consumer_row_iter_native([(view, 0, 5)], "t", 1, ConsumerRecord, None, vd)
    holder.append(it)
    assert [r.offset for r in it] == [100, 101, 102, 103, 104]


def test_row_iter_refuses_arguments_outside_its_contract():
    view = _view()
    part = (view.body, view.header, 0, 5, None)
    with pytest.raises(TypeError):
        native.consumer_row_iter([part], "t", 0, ConsumerRecord, None)  # too few arguments
    with pytest.raises(TypeError):
        native.consumer_row_iter([part[:4]], "t", 0, ConsumerRecord, None, None)
    with pytest.raises(TypeError):
        native.consumer_row_iter([list(part)], "t", 0, ConsumerRecord, None, None)
    with pytest.raises(TypeError):
        native.consumer_row_iter(5, "t", 0, ConsumerRecord, None, None)
    with pytest.raises(TypeError):
        native.consumer_row_iter([part], "t", 0, "row", None, None)
    with pytest.raises(TypeError):  # checked when the part is reached, as decode_rows checks it
        list(native.consumer_row_iter([part], "t", 0, dict, None, None))
    with pytest.raises(ValueError):
        list(native.consumer_row_iter([(view.body, view.header, 0, 6, None)], "t", 0, tuple, None, None))
    with pytest.raises(TypeError):
        list(native.consumer_row_iter([(view.body, view.header[:5], 0, 5, None)], "t", 0, tuple, None, None))


def test_an_iterator_left_in_a_cycle_is_collected():
    view = _view()
    holder: list = []
    it = views.consumer_row_iter_native([(view, 0, 5)], "t", holder, tuple)
    holder.append(it)  # iterator -> partition list -> iterator
    next(it)
    del it, holder
    gc.collect()  # no crash, no leak (the fuzzer's LeakSanitizer run checks the latter)
