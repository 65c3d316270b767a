"""Per-layer micro-benchmarks (pytest-benchmark). In the default run they execute once as plain tests
(``--benchmark-disable`` in setup.cfg); time them with::

    python -m pytest tests/test_bench_micro.py --benchmark-enable --benchmark-only
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import pylog
from pylog.index import OffsetIndex
from pylog.storage.records import BatchView, RecordColumns, encode_batch, encode_columns

VALUES = [os.urandom(100) for _ in range(1000)]
KEYS = [os.urandom(8) for _ in range(1000)]


def test_encode_batch_from_lists(benchmark):
    raw = benchmark(encode_batch, VALUES, KEYS)
    assert BatchView.from_buffer(raw).count == 1000


def test_encode_batch_from_columns(benchmark):
    vl = np.full(1000, 100, np.int32)
    vd = b"".join(VALUES)
    raw = benchmark(encode_columns, vl, vd)
    assert len(raw) > 100_000


def test_decode_batch_to_records(benchmark):
    raw = encode_batch(VALUES, KEYS)
    recs = benchmark(lambda: BatchView.from_buffer(raw).records())
    assert recs[999].value == VALUES[999]


def test_decode_batch_to_columns(benchmark):
    raw = encode_batch(VALUES, KEYS)
    cols = benchmark(lambda: RecordColumns.concat_views([(BatchView.from_buffer(raw), 0, 1000)], None, -1))
    assert cols.value_data == b"".join(VALUES)


def test_offset_index_lookup(benchmark, tmp_path):
    idx = OffsetIndex.create(str(tmp_path / "0.index"), 0, 1 << 20)
    for i in range(1, 100_000):
        idx.append(i * 10, i * 4096)
    assert benchmark(idx.lookup, 555_555) == (555_550, 55_555 * 4096)
    idx.close()


@pytest.fixture
def partition(tmp_path):
    store = pylog.open(tmp_path)
    p = store.create_topic("t").partition(0)
    yield p
    store.close()


def test_partition_append_values(benchmark, partition):
    first = benchmark(partition.append_values, VALUES, KEYS)
    assert partition.log_end_offset == first + 1000


def test_partition_read_one_record(benchmark, partition):
    for _ in range(20):
        partition.append_values(VALUES, KEYS)
    recs = benchmark(partition.read, 12_345, 1)
    assert recs[0].offset == 12_345


def test_partition_read_columns(benchmark, partition):
    for _ in range(20):
        partition.append_values(VALUES, KEYS)
    cols = benchmark(partition.read_columns, 0, 20_000)
    assert len(cols) == 20_000
