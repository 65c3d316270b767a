"""Bad input raises a pylog.PylogError that says what to do, never a foreign exception.

Each test is one scenario a caller can hit. The errors that replaced a builtin ``ValueError``/``TypeError``
stay instances of it (``InvalidArgumentError`` is both, ``InvalidRecordError`` is a ``TypeError``), so
``except ValueError`` written against older pylog still matches; the tests check that too.

Run: ``python -m pytest tests/test_errors.py -q``
"""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest

import pylog
from pylog.errors import InvalidArgumentError


@pytest.fixture
def store(tmp_path):
    with pylog.open(str(tmp_path / "s"), log_cleaner_enable=False) as s:
        yield s


def test_create_topic_with_negative_partition_count_raises_invalid_argument(store):
    with pytest.raises(InvalidArgumentError, match="partitions") as info:
        store.create_topic("t", partitions=-1)
    assert isinstance(info.value, ValueError)  # what it raised before
    assert "t" not in store.topics()


def test_send_to_a_partition_the_topic_does_not_have_raises_invalid_argument(store):
    store.create_topic("t")
    with store.producer() as producer:
        with pytest.raises(InvalidArgumentError, match="partition 7") as info:
            producer.send("t", b"x", partition=7)
        assert isinstance(info.value, ValueError)


def test_seek_to_a_negative_offset_raises_invalid_argument(store):
    store.create_topic("t")
    tp = pylog.TopicPartition("t", 0)
    with store.consumer() as consumer:
        consumer.assign([tp])
        with pytest.raises(InvalidArgumentError, match="offset"):
            consumer.seek(tp, -5)


def test_append_values_with_a_non_bytes_value_raises_invalid_record(store):
    p = store.create_topic("t").partition(0)
    with pytest.raises(pylog.InvalidRecordError, match="bytes") as info:
        p.append_values([123])
    assert isinstance(info.value, TypeError)  # what it raised before
    assert p.log_end_offset == 0


def test_record_with_a_str_value_raises_invalid_record():
    with pytest.raises(pylog.InvalidRecordError, match="encode"):
        pylog.Record(value="abc")
    with pytest.raises(pylog.InvalidRecordError, match="encode"):
        pylog.Record(value=b"v", key="k")
    assert pylog.Record(value=None, key=bytearray(b"k")).key == b"k"


def test_open_a_file_instead_of_a_directory_raises_a_pylog_error(tmp_path):
    path = tmp_path / "passwd"
    path.write_bytes(b"root:x:0:0\n")
    with pytest.raises(pylog.PylogError, match="not a directory") as info:
        pylog.open(str(path))
    assert isinstance(info.value, FileExistsError)  # what it raised before
    assert path.read_bytes() == b"root:x:0:0\n"


def test_producer_made_from_a_path_string_says_to_open_the_store(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"pylog\.open\(path\)\.producer"):
        pylog.Producer(str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # nothing was created at the path


def test_consumer_made_from_a_topic_string_says_to_open_the_store(tmp_path):
    with pytest.raises(InvalidArgumentError, match=r"pylog\.open\(path\)\.consumer"):
        pylog.Consumer("orders", group_id="g")


def test_subscribe_with_topics_and_pattern_raises_invalid_argument(store):
    with store.consumer() as consumer:
        with pytest.raises(InvalidArgumentError, match="not both"):
            consumer.subscribe(["t"], pattern="t.*")


def test_moved_errors_keep_their_old_import_paths():
    from pylog.clients.consumer import NoOffsetForPartitionError
    from pylog.clients.producer import ProducerTimeoutError
    from pylog.maintenance.compaction import CleanerStoppedError
    from pylog.cli.base import CommandError
    import pylog.errors as errors
    assert ProducerTimeoutError is errors.ProducerTimeoutError is pylog.ProducerTimeoutError
    assert NoOffsetForPartitionError is errors.NoOffsetForPartitionError is pylog.NoOffsetForPartitionError
    assert CleanerStoppedError is errors.CleanerStoppedError
    assert CommandError is errors.CommandError
    assert issubclass(CommandError, pylog.PylogError)


def test_delete_records_before_a_negative_offset_raises_invalid_argument(store):
    p = store.create_topic("t").partition(0)
    p.append_values([b"a", b"b"])
    with pytest.raises(InvalidArgumentError, match="before_offset"):
        store.delete_records("t", 0, -1)
    with pytest.raises(InvalidArgumentError, match="before_offset"):
        p.delete_records("1")
    assert p.log_start_offset == 0


def test_set_quota_for_a_non_str_client_id_raises_invalid_argument(store):
    with pytest.raises(InvalidArgumentError, match="client_id") as info:
        store.set_quota(42, producer_byte_rate=1000)
    assert isinstance(info.value, TypeError)  # what it raised before


def test_append_of_something_that_is_not_a_record_raises_invalid_record(store):
    p = store.create_topic("t").partition(0)
    with pytest.raises(pylog.InvalidRecordError, match="pylog.Record"):
        p.append([b"a bare value"])
    assert p.log_end_offset == 0


def test_partition_for_key_with_no_partitions_raises_invalid_argument():
    from pylog.clients.partitioner import partition_for_key
    with pytest.raises(InvalidArgumentError, match="num_partitions"):
        partition_for_key(b"k", 0)


def test_open_a_path_under_a_file_raises_a_pylog_error(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(pylog.PylogError, match="is a file") as info:
        pylog.open(str(tmp_path / "file" / "store"))
    assert isinstance(info.value, NotADirectoryError)  # what it raised before


def test_assign_a_topic_name_instead_of_partitions_raises_invalid_argument(store):
    store.create_topic("t")
    with store.consumer() as consumer:
        with pytest.raises(InvalidArgumentError, match="TopicPartition"):
            consumer.assign("t")
        consumer.assign([("t", 0)])  # a plain pair still works
        assert consumer.assignment() == {pylog.TopicPartition("t", 0)}


# ------------------------------------------------------------------------ headers, offsets, timestamps

#: Record headers of every wrong shape found by a hostile test (each raised AttributeError, TypeError,
#: ValueError or UnicodeEncodeError from append_values or the producer's drain before).
BAD_HEADERS = {
    "not-iterable": 5,
    "a-str": "ab",
    "a-dict": {"a": b"v"},
    "a-pair-of-three": [("a", b"b", b"c")],
    "a-pair-of-one": [("a",)],
    "an-item-that-is-not-a-pair": [5],
    "an-int-key": [(1, b"v")],
    "a-none-key": [(None, b"v")],
    "a-key-with-a-lone-surrogate": [("\ud800", b"v")],
    "a-str-value": [("a", "v")],
    "an-int-value": [("a", 1)],
    "nested-one-level-too-deep": [[("a", b"v")]],
}


@pytest.mark.parametrize("headers", list(BAD_HEADERS.values()), ids=list(BAD_HEADERS))
def test_append_values_with_bad_headers_raises_invalid_record_and_appends_nothing(store, headers):
    p = store.create_topic("t").partition(0)
    with pytest.raises(pylog.InvalidRecordError, match="header") as info:
        p.append_values([b"v"], headers=[headers])
    assert isinstance(info.value, TypeError)
    with pytest.raises(pylog.InvalidRecordError, match="header"):
        p.append_columns(np.array([1], np.int32), b"v", headers=[headers])
    assert p.log_end_offset == 0


@pytest.mark.parametrize("headers", list(BAD_HEADERS.values()), ids=list(BAD_HEADERS))
def test_send_with_bad_headers_raises_invalid_record_at_send(store, headers):
    store.create_topic("t")
    with store.producer() as producer:
        with pytest.raises(pylog.InvalidRecordError, match="header"):
            producer.send("t", b"v", headers=headers)
        producer.flush()
    assert store.topic("t").partition(0).log_end_offset == 0


def test_append_values_with_headers_that_are_not_a_list_per_record_raises_invalid_record(store):
    p = store.create_topic("t").partition(0)
    for headers in (5, "ab", [[("a", b"v")]] * 2):
        with pytest.raises(pylog.InvalidRecordError, match="headers"):
            p.append_values([b"v"], headers=headers)
    assert p.log_end_offset == 0


@pytest.mark.parametrize("offset", [None, 1.5, "1", True], ids=["none", "float", "str", "bool"])
def test_read_at_an_offset_that_is_not_an_int_raises_invalid_argument(store, offset):
    p = store.create_topic("t").partition(0)
    p.append_values([b"a", b"b", b"c"])
    for read in (p.read, p.read_columns, p.read_slices):
        with pytest.raises(InvalidArgumentError, match="offset must be an int"):
            read(offset)
    assert [r.offset for r in p.read(np.int64(1))] == [1, 2]  # numpy's ints are ints


def test_read_with_a_max_records_that_is_not_an_int_raises_invalid_argument(store):
    p = store.create_topic("t").partition(0)
    p.append_values([b"a"])
    with pytest.raises(InvalidArgumentError, match="max_records"):
        p.read(0, max_records=2.5)


@pytest.mark.parametrize("timestamp", ["1", 1.5, 1 << 64], ids=["str", "float", "beyond-int64"])
def test_append_with_a_timestamp_that_is_not_int64_milliseconds_raises_invalid_record(store, timestamp):
    p = store.create_topic("t").partition(0)
    with pytest.raises(pylog.InvalidRecordError, match="timestamps"):
        p.append_values([b"a", b"b"], timestamps=[1000, timestamp])
    with pytest.raises(pylog.InvalidRecordError, match="timestamps"):
        p.append_values([b"a"], timestamps=[timestamp])
    with pytest.raises(pylog.InvalidRecordError, match="timestamps"):
        p.append_values([b"a"], timestamps=[True])
    assert p.log_end_offset == 0
    with pytest.raises(pylog.InvalidRecordError, match="timestamps"):
        p.append_columns(np.array([1], np.int32), b"a", timestamps=np.array([1.5]))
    p.append_values([b"a", b"b"], timestamps=[None, np.int64(7)])  # None takes the append time
    assert p.read(0)[1].timestamp == 7


# ------------------------------------------------------------------------------------ topics and store

@pytest.mark.parametrize("config", [[1], "segment.bytes=1", 5], ids=["list", "str", "int"])
def test_create_topic_with_a_config_that_is_not_a_mapping_raises_invalid_config(store, config):
    with pytest.raises(pylog.InvalidConfigError, match="mapping"):
        store.create_topic("t", config=config)
    assert "t" not in store.topics()


def test_create_topic_with_more_partitions_than_a_topic_file_allows_raises_at_once(store):
    # 2**31 made directories until the disk filled: the bound was only checked when topic.json was read.
    with pytest.raises(InvalidArgumentError, match="partitions must be an int in") as info:
        store.create_topic("t", partitions=2 ** 31)
    assert isinstance(info.value, ValueError)
    assert "t" not in store.topics() and not os.path.exists(os.path.join(store.path, "t", "0"))


def test_add_partitions_beyond_the_bound_raises_at_once_and_adds_none(store):
    topic = store.create_topic("t", partitions=2)
    for total in (2 ** 31, "3", 2.5):
        with pytest.raises(InvalidArgumentError, match="total must be an int in"):
            topic.add_partitions(total)
    assert topic.num_partitions == 2 and sorted(os.listdir(topic.directory)) == ["0", "1", "topic.json"]


def test_close_after_the_store_directory_vanished_raises_storage_error(tmp_path):
    store = pylog.open(str(tmp_path / "s"), log_cleaner_enable=False)
    store.create_topic("t", partitions=2).partition(0).append_values([b"a"])
    shutil.rmtree(tmp_path / "s")
    with pytest.raises(pylog.StorageError, match="is gone") as info:
        store.close()  # FileNotFoundError before
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOENT
    assert store.closed
    store.close()  # idempotent


def test_consumer_close_after_the_store_directory_vanished_raises_storage_error(tmp_path):
    store = pylog.open(str(tmp_path / "s"), log_cleaner_enable=False)
    store.create_topic("t", partitions=2).partition(0).append_values([b"a"])
    consumer = store.consumer("t", group_id="g", auto_offset_reset="earliest")
    assert len(consumer.poll(timeout_ms=5000)) == 1
    shutil.rmtree(tmp_path / "s")
    with pytest.raises(pylog.StorageError, match="leaving group 'g': its directory .* is gone"):
        consumer.close()  # FileNotFoundError before
    consumer.close()  # closed all the same: idempotent
    with pytest.raises(pylog.StorageError, match="is gone"):
        store.close()
