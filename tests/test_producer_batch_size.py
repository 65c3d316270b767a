"""The producer's ``batch_size`` (Kafka's ``batch.size``): a drain's records of one partition are cut into batches
of at most ``batch_size`` bytes (one record at least; a larger record is a batch of its own), written by one
append call. Checked on the log files' batches (tests/storetools.py's walker), on the compiled and the
pure-Python paths, which write the same bytes.

Run: ``python -m pytest tests/test_producer_batch_size.py -q``
"""

from __future__ import annotations

import glob
import os
import random

import numpy as np
import pytest

import pylog
from pylog import accel
from pylog.clients import accumulator, partitioner, producer as producer_module
from pylog.errors import RecordTooLargeError
from pylog.partition import internals
from pylog.storage.records import encode
from storetools import log_batches, read_all

PATHS = ["compiled", "pure"]


def _pure(mp: pytest.MonkeyPatch) -> None:
    """Every compiled step of the send and append paths off: the pure-Python reference runs."""
    for module in (accumulator, partitioner, producer_module):
        mp.setattr(module, "_native", None)
    mp.setattr(encode, "_native_encode", None)
    mp.setattr(encode, "_native_lengths", None)
    mp.setattr(encode, "_native_batches", None)


def _path(mp: pytest.MonkeyPatch, path: str) -> None:
    if path == "pure":
        _pure(mp)
    elif accel.native is None or not encode.NATIVE_ENCODE:
        pytest.skip(f"compiled extension not live: {accel.REASON}")


def _batches(root: str, topic: str, number: int = 0) -> list:
    logs = sorted(glob.glob(os.path.join(root, topic, str(number), "*.log")))
    assert logs
    return [h for path in logs for _, h in log_batches(path)]


def _records(n: int, seed: int) -> tuple[list[bytes], list[bytes | None]]:
    """Distinct values of 0-300 bytes (a few of 5,000: larger than any batch_size tried here), keys, some null."""
    rnd = random.Random(seed)
    values = [rnd.randbytes(5000 if i % 997 == 0 else rnd.randrange(0, 300)) for i in range(n)]
    keys = [None if i % 7 == 0 else b"k%d" % i for i in range(n)]
    return values, keys


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("batch_size", [1, 700, 16384])
def test_a_producers_drains_are_cut_into_batches_no_larger_than_batch_size(tmp_path, path, batch_size):
    values, keys = _records(6000, batch_size)
    with pytest.MonkeyPatch.context() as mp:
        _path(mp, path)
        with pylog.open(tmp_path, log_cleaner_enable=False) as store:
            store.create_topic("t")
            with store.producer(acks=1, linger_ms=50, batch_size=batch_size, buffer_memory=1 << 26) as producer:
                futures = [producer.send("t", v, key=k) for v, k in zip(values, keys, strict=True)]
                producer.flush()
                offsets = [f.get(10).offset for f in futures]
            got = read_all(store.topic("t").partition(0))
    assert offsets == list(range(len(values)))
    assert [(r.key, r.value) for r in got] == list(zip(keys, values, strict=True))
    batches = _batches(str(tmp_path), "t")
    assert sum(h.record_count for h in batches) == len(values)
    for h in batches:
        assert h.size <= batch_size or h.record_count == 1, h
    # A record larger than batch_size is a batch of its own (as in Kafka), not refused.
    big = {i for i, v in enumerate(values) if len(v) + 64 > batch_size}
    assert big or batch_size > 5064
    starts = {h.base_offset: h for h in batches}
    assert all(i in starts and starts[i].record_count == 1 for i in big)
    if batch_size == 1:
        assert len(batches) == len(values)
    else:
        # Cut, not one batch per drain: the records' bytes over batch_size, with room for half-empty batches.
        total = sum(map(len, values)) + sum(len(k) for k in keys if k is not None)
        assert len(batches) > total // batch_size


@pytest.mark.parametrize("path", PATHS)
def test_one_call_cut_at_batch_size_is_appended_whole_and_its_retry_not_again(tmp_path, path):
    values, keys = _records(3000, 3)
    with pytest.MonkeyPatch.context() as mp:
        _path(mp, path)
        with pylog.open(tmp_path, log_cleaner_enable=False) as store:
            store.create_topic("t")
            part = store.topic("t").partition(0)
            producer = (store.new_producer_id(), 0, 0)
            ts = np.full(len(values), 1_700_000_000_000, np.int64)
            first = internals(part).append_values_in_turn(values, keys, ts, None, producer, None, 4096)
            again = internals(part).append_values_in_turn(values, keys, ts, None, producer, None, 4096)
            assert first == again == 0
            assert part.log_end_offset == len(values)
            # One record over max.message.bytes fails the whole call: nothing of it is appended (invariant 9).
            store.alter_topic_config("t", {"max.message.bytes": "4000"})
            with pytest.raises(RecordTooLargeError):
                internals(part).append_values_in_turn([b"a" * 100] * 50 + [b"b" * 5000], None, None, None, None,
                                                      None, 1000)
            assert part.log_end_offset == len(values)
            got = read_all(part)
    assert [(r.key, r.value) for r in got] == list(zip(keys, values, strict=True))
    batches = _batches(str(tmp_path), "t")
    assert len(batches) > 20
    assert all(h.size <= 4096 or h.record_count == 1 for h in batches)
    # The producer's sequence numbers run on across the call's batches.
    assert [h.base_sequence for h in batches] == [h.base_offset for h in batches]


def test_the_compiled_and_pure_paths_write_the_same_batches(tmp_path):
    if accel.native is None or not encode.NATIVE_ENCODE:
        pytest.skip(f"compiled extension not live: {accel.REASON}")
    values, keys = _records(4000, 4)
    headers = [[("h", b"%d" % i)] if i % 5 == 0 else [] for i in range(len(values))]
    ts = np.arange(len(values), dtype=np.int64) + 1_700_000_000_000
    files = []
    for path in PATHS:
        root = tmp_path / path
        with pytest.MonkeyPatch.context() as mp:
            _path(mp, path)
            with pylog.open(root, log_cleaner_enable=False) as store:
                store.create_topic("t")
                part = store.topic("t").partition(0)
                producer = (store.new_producer_id(), 0, 0)
                for lo, hi, size in ((0, 1000, 16384), (1000, 2500, 1500), (2500, 4000, 100_000)):
                    internals(part).append_values_in_turn(values[lo:hi], keys[lo:hi], ts[lo:hi], headers[lo:hi],
                                                          (producer[0], 0, lo), None, size)
                # One stamp for all, as a producer's drain gives: each batch carries it, no timestamp column.
                internals(part).append_values_in_turn(values, None, np.full(len(values), 1234, np.int64), None,
                                                      (producer[0], 0, 4000), None, 2000)
                stamps = [r.timestamp for r in read_all(part)]
        assert stamps == ts.tolist() + [1234] * len(values)
        files.append([open(p, "rb").read() for p in sorted(glob.glob(str(root / "t" / "0" / "*.log")))])
    assert files[0] == files[1]
    batches = _batches(str(tmp_path / "pure"), "t")
    assert len(batches) > 10
    assert all(h.first_timestamp == h.max_timestamp == 1234 and h.attributes & 0x80 == 0
               for h in batches if h.base_offset >= 4000)
