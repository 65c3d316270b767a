"""Stores written by earlier versions stay usable under the stricter rules of this one.

Earlier versions (up to 75ff94c) let users create any topic matching ``^[A-Za-z0-9._-]{1,249}$`` (the
``$`` also let one trailing newline in) but the three internal names, stored config ints of any size and
NaN ratios, and named a group's directory by its id when the id matched that same pattern. The stores here
are laid out exactly as that code laid them out: a topic is its directory plus ``topic.json`` written by
``write_topic_file`` (unchanged since then; the file names the topic, so it is rewritten under the legacy
name rather than only renamed), and a group's directory holds the same files under another name. The
layout was checked once against stores written by the old code itself (see the h17 report).
"""

from __future__ import annotations

import logging
import os
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pylog
from pylog import InvalidConfigError, InvalidTopicError, OffsetAndMetadata, TopicExistsError, TopicPartition
from pylog.storage.filenames import (GROUPS_DIR, INTERNAL_NAMES, ROOT_FILES, deleting_name, is_deletion_leftover,
                             legacy_topic_name, valid_topic_name)
from pylog.clients.groups import _group_dirname
from pylog.topic import write_topic_file

#: Names earlier versions let users create and the current rule refuses.
LEGACY = [".hidden", "__metrics", "producer.ids.bak", "pylog.store.v2", "abc\n", ".deleting-orders", "x" * 248 + "\n"]


def _open(path, **kw):
    kw.setdefault("log_cleaner_enable", False)
    return pylog.open(path, **kw)


def _values(store, topic):
    return [r.value for r in store.topic(topic).partition(0).read(0, max_records=1000)]


def _legacy_topic(root, name, values, config=None):
    """Add topic ``name`` with ``values`` to the store at ``root`` as an earlier version wrote it."""
    with _open(root) as store:
        store.create_topic("template")
        store.topic("template").partition(0).append_values(values)
    os.rename(os.path.join(root, "template"), os.path.join(root, name))
    write_topic_file(os.path.join(root, name), name, 1, config or {})


@pytest.mark.parametrize("name", LEGACY)
def test_topic_an_earlier_version_created_under_a_now_refused_name_stays_usable_and_deletable(tmp_path, name):
    # Was: missing from topics() (but for '__metrics'), InvalidTopicError from topic(), send() and
    # delete_topic(): the data was on disk and unreachable; '.deleting-orders' was erased by every open.
    root = tmp_path / "s"
    _legacy_topic(root, name, [b"old"])
    with _open(root) as store:
        assert store.topics() == [name] and name in store
        assert _values(store, name) == [b"old"]
        with store.producer() as p:
            p.send(name, b"sent").get(10)
        store.topic(name).partition(0).append_values([b"appended"])
        with pytest.raises((InvalidTopicError, TopicExistsError)):  # no new topic under such a name
            store.create_topic(name)
    with _open(root) as store:  # survives reopening (and the leftover sweep)
        assert store.topics() == [name]
        assert _values(store, name) == [b"old", b"sent", b"appended"]
        store.delete_topic(name)
        assert store.topics() == [] and name not in store
        with pytest.raises(InvalidTopicError):  # still not creatable once it is gone
            store.create_topic(name)
    assert sorted(os.listdir(root)) == sorted(ROOT_FILES)


def test_only_exact_deletion_leftovers_are_swept_and_pylog_names_are_never_legacy_topics(tmp_path):
    root = tmp_path / "s"
    _legacy_topic(root, ".deleting-orders", [b"keep"])
    # An interrupted deletion: the topic directory, topic.json and all, renamed as delete_topic renames it.
    _legacy_topic(root, "doomed", [b"gone"])
    os.rename(os.path.join(root, "doomed"), os.path.join(root, deleting_name("doomed", uuid.uuid4().hex)))
    with _open(root) as store:
        assert store.topics() == [".deleting-orders"] and _values(store, ".deleting-orders") == [b"keep"]
    assert set(os.listdir(root)) - set(ROOT_FILES) == {".deleting-orders"}
    for name in (*INTERNAL_NAMES, *ROOT_FILES):
        assert not legacy_topic_name(name)
    with _open(root) as store:
        for name in INTERNAL_NAMES[1:]:  # directories, not topics: never listed nor written
            assert name not in store.topics()


@given(st.text(st.sampled_from("0123456789abcdefgilnt._-\n"), min_size=1, max_size=249))
def test_a_name_is_either_valid_legacy_a_leftover_or_refused_never_two_of_them(name):
    token = uuid.uuid4().hex
    assert is_deletion_leftover(deleting_name(name, token)) and not legacy_topic_name(deleting_name(name, token))
    kinds = [valid_topic_name(name), legacy_topic_name(name), is_deletion_leftover(name)]
    assert sum(kinds) <= 1


def test_stored_config_beyond_the_current_ranges_loads_clamped_with_a_warning(tmp_path, caplog):
    # Was: InvalidConfigError "retention.ms: expected int, got 10**20" from topic(): unopenable topic.
    root = tmp_path / "s"
    _legacy_topic(root, "cfgbig", [b"x"], {"retention.ms": 10**20, "min.cleanable.dirty.ratio": float("nan")})
    with caplog.at_level(logging.WARNING, logger="pylog.config"), _open(root) as store:
        cfg = store.topic("cfgbig").config
        assert cfg["retention.ms"] == (1 << 63) - 1 and cfg["min.cleanable.dirty.ratio"] == 0.0
        assert _values(store, "cfgbig") == [b"x"]
        warned = " ".join(r.getMessage() for r in caplog.records)
        assert "topic.json" in warned and "retention.ms" in warned and "min.cleanable.dirty.ratio" in warned
        assert "alter_topic_config" in warned
        # Set through the API, the same values are still refused, saying why.
        with pytest.raises(InvalidConfigError, match="Java long"):
            store.alter_topic_config("cfgbig", {"retention.ms": 10**20})
        with pytest.raises(InvalidConfigError, match="Java long"):
            store.create_topic("new", config={"retention.ms": 10**20})
        with pytest.raises(InvalidConfigError):
            store.alter_topic_config("cfgbig", {"min.cleanable.dirty.ratio": float("nan")})
        store.alter_topic_config("cfgbig", {"retention.ms": -1})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pylog.config"), _open(root) as store:
        assert store.topic("cfgbig").config["retention.ms"] == -1  # the clamped ratio was written back too
        assert not caplog.records


def test_group_id_with_a_trailing_newline_keeps_the_directory_an_earlier_version_made(tmp_path):
    # Was: such an id mapped to a new digest-named directory, orphaning the old one (generation 0).
    root = tmp_path / "s"
    group = "g\n"
    with _open(root) as store:
        store.create_topic("t")
        store.topic("t").partition(0).append_values([b"a", b"b"])
        with store.consumer("t", group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as c:
            while not c.assignment():
                c.poll(timeout_ms=10)
            c.commit({TopicPartition("t", 0): OffsetAndMetadata(1, "")})
        generation = store.describe_consumer_group(group).generation
    assert generation > 0
    groups = os.path.join(root, GROUPS_DIR)
    (digest,) = os.listdir(groups)  # today's name for the id; the earlier versions' name is the id itself
    os.rename(os.path.join(groups, digest), os.path.join(groups, group))
    with _open(root) as store:
        assert store.describe_consumer_group(group).generation == generation
        assert store.consumer_groups() == [group]
        with store.consumer("t", group_id=group, enable_auto_commit=False) as c:
            got = []
            while not got:
                got = [r.value for recs in c.poll(timeout_ms=10).values() for r in recs]
            assert got == [b"b"] and store.describe_consumer_group(group).generation > generation
        assert os.listdir(groups) == [group]
        store.delete_consumer_group(group)
        assert os.listdir(groups) == [] and store.consumer_groups() == []
    # A new group of such an id still gets the digest-named directory.
    assert _group_dirname("h\n", str(root)).startswith("%")
