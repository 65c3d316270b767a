"""Bad input raises a pylog.PylogError that says what to do, never a foreign exception.

Each test is one scenario a caller can hit. The errors that replaced a builtin ``ValueError``/``TypeError``
stay instances of it (``InvalidArgumentError`` is both, ``InvalidRecordError`` is a ``TypeError``), so
``except ValueError`` written against older pylog still matches; the tests check that too.

Run: ``python -m pytest tests/test_errors.py -q``
"""

from __future__ import annotations

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
