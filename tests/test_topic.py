"""pylog.topic: the topic file, partition growth and the topic's partitions.

Topics are made through a store (``store.create_topic``), as users make them; the topic file functions
are exercised directly.
"""

from __future__ import annotations

import json
import os

import pytest

import pylog
from pylog.errors import (CorruptRecordError, InvalidConfigError, InvalidTopicError, ReadOnlyStoreError,
                          UnknownTopicError)
from pylog.topic import Topic, call_each, read_topic_file, write_topic_file


@pytest.fixture
def store(tmp_path):
    s = pylog.open(str(tmp_path / "store"))
    yield s
    s.close()


def test_topic_file_round_trips_name_count_and_overrides(tmp_path):
    write_topic_file(str(tmp_path), "events", 3, {"retention.ms": 1000, "cleanup.policy": ("compact", "delete")})
    doc = read_topic_file(str(tmp_path))
    assert (doc["name"], doc["partitions"]) == ("events", 3)
    assert doc["config"] == {"retention.ms": 1000, "cleanup.policy": "compact,delete"}


def test_topic_file_missing_is_an_unknown_topic_error(tmp_path):
    with pytest.raises(UnknownTopicError):
        read_topic_file(str(tmp_path))


def _edit(directory, change):
    path = os.path.join(str(directory), "topic.json")
    doc = json.load(open(path))
    change(doc)
    open(path, "w").write(json.dumps(doc))


def test_topic_file_edited_by_hand_without_its_checksum_is_a_corrupt_record_error(tmp_path):
    write_topic_file(str(tmp_path), "events", 3, {})
    _edit(tmp_path, lambda d: d.update(partitions=2))
    with pytest.raises(CorruptRecordError, match="checksum"):
        read_topic_file(str(tmp_path))


@pytest.mark.parametrize("raw", [b"", b"{", b"[1, 2]", b'{"format": "other", "version": 1}',
                                 b"[" * 100_000, b"\xff\xfe"],
                         ids=["empty", "truncated", "list", "foreign", "deep", "binary"])
def test_topic_file_that_is_not_a_topic_file_is_a_corrupt_record_error(tmp_path, raw):
    open(tmp_path / "topic.json", "wb").write(raw)
    with pytest.raises(CorruptRecordError):
        read_topic_file(str(tmp_path))


@pytest.mark.parametrize("count", [0, -1, 1 << 21, 1.5, "3", True, None])
def test_topic_file_with_an_impossible_partition_count_is_a_corrupt_record_error(tmp_path, count):
    # Written with a valid checksum: only the count check can refuse it (a huge one must not allocate).
    write_topic_file(str(tmp_path), "events", count, {})
    with pytest.raises(CorruptRecordError, match="partition count"):
        read_topic_file(str(tmp_path))


def test_topic_add_partitions_grows_the_topic_and_keeps_existing_data(store):
    topic = store.create_topic("events", partitions=2)
    topic.partition(1).append([pylog.Record(value=b"kept")])
    topic.add_partitions(5)
    assert topic.num_partitions == 5
    assert len(topic.partitions) == 5
    assert read_topic_file(topic.directory)["partitions"] == 5
    assert sorted(os.listdir(topic.directory)) == ["0", "1", "2", "3", "4", "topic.json"]
    assert topic.end_offsets() == {0: 0, 1: 1, 2: 0, 3: 0, 4: 0}
    assert topic.beginning_offsets() == {i: 0 for i in range(5)}


@pytest.mark.parametrize("total", [1, 2, 3])
def test_topic_add_partitions_never_shrinks(store, total):
    topic = store.create_topic("events", partitions=3)
    with pytest.raises(InvalidConfigError):
        topic.add_partitions(total)
    assert topic.num_partitions == 3
    assert read_topic_file(topic.directory)["partitions"] == 3


def test_topic_add_partitions_to_an_internal_topic_is_refused(store, tmp_path):
    config = store.create_topic("events").config
    internal = Topic("__consumer_offsets", str(tmp_path / "offsets"), config, 1)
    with pytest.raises(InvalidTopicError):
        internal.add_partitions(1000)
    assert internal.num_partitions == 1 and not os.path.exists(tmp_path / "offsets")


def test_topic_add_partitions_in_a_read_only_store_is_refused(tmp_path):
    with pylog.open(str(tmp_path)) as s:
        s.create_topic("events", partitions=1)
    with pylog.open(str(tmp_path), read_only=True) as ro:
        with pytest.raises(ReadOnlyStoreError):
            ro.topic("events").add_partitions(2)
    assert read_topic_file(str(tmp_path / "events"))["partitions"] == 1


def test_topic_sees_partitions_another_handle_added(tmp_path):
    with pylog.open(str(tmp_path)) as a, pylog.open(str(tmp_path)) as b:
        a.create_topic("events", partitions=1)
        seen_by_b = b.topic("events")
        a.topic("events").add_partitions(3)
        # Asking for a partition past the count it knows makes the topic read its file again.
        assert seen_by_b.partition(2).number == 2
        assert seen_by_b.num_partitions == 3


@pytest.mark.parametrize("number", [-1, 3, 10**9, "0", 1.0, None])
def test_topic_partition_out_of_range_is_an_unknown_topic_error(store, number):
    topic = store.create_topic("events", partitions=3)
    with pytest.raises(UnknownTopicError):
        topic.partition(number)


def test_topic_partition_is_opened_once_and_lives_in_its_numbered_directory(store):
    topic = store.create_topic("events", partitions=2)
    p = topic.partition(1)
    assert topic.partition(1) is p
    assert (p.topic, p.number) == ("events", 1)
    assert isinstance(topic, Topic) and repr(topic) == "Topic('events', partitions=2)"


class _Item:
    def __init__(self, name, error=None):
        self.name, self.error, self.calls = name, error, []

    def close(self, *args):
        self.calls.append(args)
        if self.error is not None:
            raise self.error


def test_call_each_calls_every_item_and_raises_the_first_error_at_the_end(caplog):
    first, second = RuntimeError("first"), OSError("second")
    items = [_Item("a", first), _Item("b"), _Item("c", second), _Item("d")]
    with pytest.raises(RuntimeError) as info:
        call_each(items, "close", True)
    assert info.value is first
    assert all(item.calls == [(True,)] for item in items)
    assert "second" in caplog.text


def test_call_each_of_items_that_all_succeed_raises_nothing():
    items = [_Item("a"), _Item("b")]
    call_each(items, "close")
    assert [item.calls for item in items] == [[()], [()]]
