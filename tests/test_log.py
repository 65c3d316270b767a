"""pylog.store / pylog.topic: the store, topics, and the public API contract."""

from __future__ import annotations

import json
import os

import pytest

import pylog


def test_public_api_contract(tmp_path):
    with pylog.open(tmp_path / "s") as store:
        store.create_topic("events", partitions=3, config={"segment.bytes": 1 << 20})
        p = store.topic("events").partition(0)
        first = p.append([pylog.Record(value=b"v", key=b"k", headers=[("h", b"x")], timestamp=1700000000000)])
        second = p.append_values([b"v1", b"v2"], keys=[b"a", b"b"], timestamps=None)
        assert (first, second) == (0, 1)
        recs = p.read(first, max_records=100)
        assert [(r.offset, r.key, r.value) for r in recs] == [(0, b"k", b"v"), (1, b"a", b"v1"), (2, b"b", b"v2")]
        assert recs[0].headers == (("h", b"x"),) and recs[0].topic == "events" and recs[0].partition == 0
        assert p.offset_for_timestamp(1700000000000) == 0
        assert (p.log_start_offset, p.log_end_offset) == (0, 3)
        cols = p.read_columns(first, max_records=100_000)
        assert cols.offsets.tolist() == [0, 1, 2] and cols.value_data == b"vv1v2"
        p.flush()
        assert p.read(3) == []
        with pytest.raises(pylog.OffsetOutOfRangeError):
            p.read(4)
        assert store.topics() == ["events"]
        store.delete_topic("events")
        assert store.topics() == []


def test_topic_name_rules(tmp_path):
    with pylog.open(tmp_path) as store:
        for bad in ["", ".", "..", "a/b", "../x", "x" * 250, "sp ace", "é"]:
            with pytest.raises(pylog.InvalidTopicError):
                store.create_topic(bad)
        store.create_topic("ok._-X" + "y" * 243)
        with pytest.raises(pylog.TopicExistsError):
            store.create_topic("ok._-X" + "y" * 243)
        with pytest.raises(pylog.UnknownTopicError):
            store.topic("missing")
        with pytest.raises(pylog.UnknownTopicError):
            store.topic("ok._-X" + "y" * 243).partition(1)


def test_topics_created_by_another_handle_are_seen(tmp_path):
    with pylog.open(tmp_path) as a, pylog.open(tmp_path) as b:
        a.create_topic("t", partitions=2)
        a.topic("t").partition(1).append_values([b"x"])
        a.topic("t").partition(1).flush()
        assert b.topics() == ["t"]
        assert b.topic("t").partition(1).read(0)[0].value == b"x"
        a.topic("t").add_partitions(4)
        assert b.topic("t").partition(3).log_end_offset == 0


def test_config_persists_and_alters(tmp_path):
    with pylog.open(tmp_path, retention_ms=1000) as store:
        store.create_topic("t", config={"segment.bytes": 4096})
        store.alter_topic_config("t", {"max.message.bytes": 2048})
    with pylog.open(tmp_path) as store:
        cfg = store.topic("t").config
        assert cfg["segment.bytes"] == 4096 and cfg["max.message.bytes"] == 2048
    doc = json.loads((tmp_path / "t" / "topic.json").read_text())
    assert doc["config"] == {"max.message.bytes": 2048, "segment.bytes": 4096}


def test_a_damaged_topic_file_is_reported(tmp_path):
    with pylog.open(tmp_path) as store:
        store.create_topic("t")
    path = tmp_path / "t" / "topic.json"
    path.write_text(path.read_text().replace('"partitions": 1', '"partitions": 7'))
    with pylog.open(tmp_path) as store:
        with pytest.raises(pylog.CorruptRecordError, match="checksum"):
            store.topic("t")


def test_closed_store_refuses_work(tmp_path):
    store = pylog.open(tmp_path)
    p = store.create_topic("t").partition(0)
    store.close()
    with pytest.raises(pylog.StoreClosedError):
        store.topic("t")
    with pytest.raises(pylog.StoreClosedError):
        p.append_values([b"x"])


def test_interrupted_topic_deletion_is_finished_on_open(tmp_path):
    from pylog.storage.filenames import deleting_name
    leftover = deleting_name("t", "0123456789abcdef" * 2)  # as delete_topic names it (a uuid4 hex token)
    os.makedirs(tmp_path / leftover / "0")
    with pylog.open(tmp_path) as store:
        assert store.topics() == []
    assert not (tmp_path / leftover).exists()


def test_close_goes_on_past_a_partition_that_fails(tmp_path, monkeypatch):
    """One partition whose close fails (a full disk) must not keep the others' writer locks held."""
    from pylog.partition import Partition

    path = tmp_path / "s"
    store = pylog.open(path)
    for name in ("a", "b", "c"):
        store.create_topic(name).partition(0).append_values([b"x"])
    real = Partition.close

    def close(self, discard=False):
        if self.topic == "a":
            real(self, discard)
            raise OSError(28, "No space left on device")
        real(self, discard)

    monkeypatch.setattr(Partition, "close", close)
    with pytest.raises(OSError):
        store.close()
    monkeypatch.undo()
    with pylog.open(path) as other:
        for name in ("b", "c"):
            p = other.topic(name).partition(0)
            p.append_values([b"y"])  # the lock was let go
            assert p.log_end_offset == 2


def test_topic_file_with_a_huge_partition_count_and_valid_crc_is_corrupt_not_a_memory_error(tmp_path):
    """topic.json is checksummed, but a count of 10**12 with a matching CRC used to size a list of 10**12
    slots when the topic opened (MemoryError; OverflowError for a longer number)."""
    from pylog.topic import write_topic_file
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        store.create_topic("t")
        directory = store.topic("t").directory
    for count in (10 ** 12, 10 ** 40):
        write_topic_file(directory, "t", count, {})
        with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
            with pytest.raises(pylog.CorruptRecordError):
                store.topic("t")


def test_producer_id_file_at_the_int64_limit_is_corrupt_not_a_struct_error(tmp_path):
    import struct
    from pylog.storage.records import crc32c
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as store:
        assert store.new_producer_id() == 0
        body = struct.pack("<q", (1 << 63) - 1)
        with open(os.path.join(store.path, "producer.ids"), "wb") as f:
            f.write(body + struct.pack("<I", crc32c(body)))
        with pytest.raises(pylog.CorruptRecordError):
            store.new_producer_id()
