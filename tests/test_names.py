"""Topic names and group ids: what is accepted, and that an accepted name is safe.

A topic is a directory next to pylog's own entries in the store root (pylog/storage/filenames.py lists them), and
a group has a directory under ``__consumer_groups`` and keys in ``__consumer_offsets``. The regression
tests below are the cases a torture run found; the two properties check any text at all: a name is either
refused with InvalidTopicError / InvalidGroupError, or it works end to end and touches nothing but its own
files.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pylog
from pylog.clients.consumer import group_member
from pylog import InvalidGroupError, InvalidTopicError, OffsetAndMetadata, TopicPartition
from pylog.storage.filenames import (CLEANERS_DIR, DELETING_PREFIX, GROUPS_DIR, NAME_MAX, OFFSETS_TOPIC, ROOT_FILES,
                             deleting_name, valid_topic_name)

LONGEST = "t" * 249


def _open(path, **kw):
    kw.setdefault("log_cleaner_enable", False)
    return pylog.open(path, **kw)


def _produce(store, topic, values, **kw):
    with store.producer(**kw) as p:
        for v in values:
            p.send(topic, v)
        p.flush()


def _values(store, topic):
    return [r.value for r in store.topic(topic).partition(0).read(0, max_records=10_000)]


# ------------------------------------------------------------------------------------- regression tests


def test_topic_named_like_a_deletion_leftover_is_refused_and_never_erased(tmp_path):
    # Was: accepted, served data, missing from topics(), and erased by the next open as a leftover.
    with _open(tmp_path / "s") as store:
        with pytest.raises(InvalidTopicError, match="starting with '.'"):
            store.create_topic(".deleting-orders")
        store.create_topic("orders")
        _produce(store, "orders", [b"a"])
    with _open(tmp_path / "s") as store:
        assert store.topics() == ["orders"] and _values(store, "orders") == [b"a"]
    assert sorted(os.listdir(tmp_path / "s")) == ["orders", "producer.ids", "pylog.store"]


def test_deleting_the_offsets_topic_is_refused_and_commits_survive(tmp_path):
    # Was: accepted; every group's committed offsets were gone and this handle's commits raised StoreClosedError.
    with _open(tmp_path / "s") as store:
        store.create_topic("t")
        tp = TopicPartition("t", 0)
        store.commit_offsets("g", {tp: 3})
        with pytest.raises(InvalidTopicError, match="delete_consumer_group"):
            store.delete_topic(OFFSETS_TOPIC)
        assert store.committed_offsets("g") == {tp: OffsetAndMetadata(3, "")}
        store.commit_offsets("g", {tp: 4})
    with _open(tmp_path / "s") as store:
        assert store.committed_offsets("g") == {tp: OffsetAndMetadata(4, "")}


def test_internal_topics_cannot_be_created_altered_or_written_but_can_be_read(tmp_path):
    with _open(tmp_path / "s") as store:
        store.create_topic("t")
        store.commit_offsets("g", {TopicPartition("t", 0): 1})
        for name in (OFFSETS_TOPIC, GROUPS_DIR, CLEANERS_DIR, "__transaction_state", "__mine"):
            with pytest.raises(InvalidTopicError, match="reserved"):
                store.create_topic(name)
        with pytest.raises(InvalidTopicError, match="internal"):
            store.alter_topic_config(OFFSETS_TOPIC, {"retention.ms": 1})
        with pytest.raises(InvalidTopicError, match="internal"):
            store.topic(OFFSETS_TOPIC).add_partitions(100)
        with pytest.raises(InvalidTopicError, match="internal"):
            store.delete_records(OFFSETS_TOPIC, 0, 1)
        with store.producer() as p:
            with pytest.raises(InvalidTopicError, match="internal"):
                p.send(OFFSETS_TOPIC, b"v", key=b"k")
            with pytest.raises(InvalidTopicError, match="internal"):
                p.send(OFFSETS_TOPIC, b"v")
        # Reading stays allowed (monitoring tools read the offsets topic), and it is still listed.
        assert OFFSETS_TOPIC in store.topics()
        assert sum(len(p.read(0)) for p in store.topic(OFFSETS_TOPIC).partitions) == 1
        assert store.committed_offsets("g") == {TopicPartition("t", 0): OffsetAndMetadata(1, "")}


def test_topic_named_like_the_producer_id_file_is_refused_and_producers_keep_working(tmp_path):
    # Was: the topic took the file's name and every later producer send failed with IsADirectoryError.
    with _open(tmp_path / "s") as store:
        for name in ("producer.ids", "producer.ids.123-456.tmp"):
            with pytest.raises(InvalidTopicError, match="producer.ids"):
                store.create_topic(name)
        store.create_topic("t")
        _produce(store, "t", [b"x"], enable_idempotence=True)
        assert _values(store, "t") == [b"x"]


def test_topic_named_like_the_store_marker_is_refused_with_invalid_topic_error(tmp_path):
    # Was: NotADirectoryError (a foreign exception) from create_topic, topic and delete_topic.
    with _open(tmp_path / "s") as store:
        for call in (store.create_topic, store.topic, store.delete_topic):
            for name in ("pylog.store", "pylog.store.1-2.tmp"):
                with pytest.raises(InvalidTopicError, match="pylog.store"):
                    call(name)
        assert "pylog.store" not in store
    with _open(tmp_path / "s") as store:  # the marker is intact
        assert store.topics() == []


@pytest.mark.parametrize("name", ["t\n", "t\r", "\nt", "t\x00", "t/", "t\n\n"])
def test_topic_name_with_a_trailing_newline_or_control_character_is_refused(tmp_path, name):
    # Was: "t\n" created a directory whose name ends in a newline ('$' matches before a trailing newline).
    with _open(tmp_path / "s") as store:
        with pytest.raises(InvalidTopicError):
            store.create_topic(name)
        with pytest.raises(InvalidTopicError):
            store.topic(name)
        assert name not in store
    assert os.listdir(tmp_path / "s") == ["pylog.store"]


def test_longest_topic_name_can_be_deleted(tmp_path):
    # Was: delete_topic failed with ENAMETOOLONG: ".deleting-" + name + "-" + uuid is 292 bytes.
    with _open(tmp_path / "s") as store:
        store.create_topic(LONGEST)
        _produce(store, LONGEST, [b"a"])
        store.delete_topic(LONGEST)
        assert store.topics() == [] and LONGEST not in store
    assert sorted(os.listdir(tmp_path / "s")) == ["producer.ids", "pylog.store"]


def test_longest_topic_name_can_be_consumed_in_a_group(tmp_path):
    # Was: OSError ENAMETOOLONG when a member took the partition: owners/<topic>-<p>.lock is 256 bytes.
    with _open(tmp_path / "s") as store:
        store.create_topic(LONGEST)
        _produce(store, LONGEST, [b"a", b"b"])
        with store.consumer(LONGEST, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as c:
            got = []
            for _ in range(50):
                got.extend(r.value for recs in c.poll(timeout_ms=20).values() for r in recs)
                if len(got) == 2:
                    break
            assert got == [b"a", b"b"]
            c.commit()
        assert store.committed_offsets("g") == {TopicPartition(LONGEST, 0): OffsetAndMetadata(2, "")}


def test_deleting_name_always_fits_and_is_never_a_topic():
    for topic in ("t", LONGEST, "a" * 200):
        name = deleting_name(topic, "f" * 32)
        assert len(name.encode()) <= NAME_MAX and name.startswith(DELETING_PREFIX) and not valid_topic_name(name)


@pytest.mark.parametrize("bad", ["", "\ud800", "g\udfff", None, 5, b"g"])
def test_unusable_group_ids_are_refused_with_invalid_group_error(tmp_path, bad):
    # Was: a lone surrogate got through and failed deep inside with UnicodeEncodeError (msgpack, UTF-8);
    # an empty id raised InvalidConfigError only in the consumer, and nothing in the store's admin calls.
    with _open(tmp_path / "s") as store:
        store.create_topic("t")
        tp = TopicPartition("t", 0)
        if bad is not None:  # a consumer without a group_id is fine
            with pytest.raises(InvalidGroupError, match="non-empty str"):
                store.consumer("t", group_id=bad)
        for call in (lambda: store.commit_offsets(bad, {tp: 1}), lambda: store.committed_offsets(bad),
                     lambda: store.describe_consumer_group(bad), lambda: store.delete_consumer_group(bad),
                     lambda: store.group_lag(bad)):
            with pytest.raises(InvalidGroupError, match="non-empty str"):
                call()
        assert store.consumer_groups() == []


def test_invalid_group_error_is_a_pylog_error_and_an_invalid_config_error():
    assert issubclass(pylog.InvalidGroupError, pylog.PylogError)
    assert issubclass(pylog.InvalidGroupError, pylog.InvalidConfigError)  # what a bad group_id raised before
    assert "InvalidGroupError" in pylog.__all__


@pytest.mark.parametrize("group", ["g\n", ".", "..", "../escape", "a/b", "__consumer_offsets", "pylog.store",
                                   ".deleting-x", "x" * 5000, "\x00", "é ü"])
def test_odd_group_ids_are_kept_apart_and_stay_inside_the_groups_directory(tmp_path, group):
    # Kafka allows any non-empty group id; pylog keeps them, hashing those that are not safe file names.
    with _open(tmp_path / "s") as store:
        _check_group_round_trip(tmp_path / "s", store, group)


# ------------------------------------------------------------------------------------- properties

#: Text of every kind: the legal characters (often), separators, control characters, '.', unicode,
#: surrogates; up to past NAME_MAX.
_ODD_CHARS = st.one_of(st.sampled_from("/\n\r\x00 .%\\:*?_\u00e9\u2028"), st.characters(codec=None),
                       st.characters(categories=["Cs"]))
_NAME_CHARS = st.one_of(st.sampled_from("abcXYZ019._-"), _ODD_CHARS)
_NAMES = st.one_of(st.text(st.sampled_from("abcXYZ019._-"), min_size=1, max_size=260),
                   st.text(_NAME_CHARS, max_size=300),
                   st.sampled_from([*ROOT_FILES, OFFSETS_TOPIC, GROUPS_DIR, CLEANERS_DIR, ".", "..",
                                    ".deleting-x", "a" * 249, "a" * 250]),
                   st.builds(lambda pre, rest: pre + rest, st.sampled_from([*ROOT_FILES, "__", ".", DELETING_PREFIX]),
                             st.text(_NAME_CHARS, max_size=20)),
                   st.builds(lambda a, odd, b: a + odd + b, st.text(st.sampled_from("abc._-"), max_size=5), _ODD_CHARS,
                             st.text(st.sampled_from("abc._-"), max_size=5)))


def _snapshot(path):
    """Every path under ``path`` (relative), with the size of each file."""
    out = {}
    for root, dirs, files in os.walk(path):
        rel = os.path.relpath(root, path)
        out[rel] = "dir"
        for f in files:
            full = os.path.join(root, f)
            out[os.path.join(rel, f)] = os.path.getsize(full) if not os.path.islink(full) else "link"
    return out


def _internal_store(path):
    """A store whose root holds every entry pylog makes there: marker, producer ids, offsets topic, a
    group's directory and the cleaner status. Returns the root's names."""
    with pylog.open(path) as store:  # the cleaner on: __cleaners
        store.create_topic("base")
        _produce(store, "base", [b"0"], enable_idempotence=True)  # producer.ids
        with store.consumer("base", group_id="base-g", enable_auto_commit=False) as c:  # __consumer_groups
            c.poll(timeout_ms=0)
        store.commit_offsets("base-g", {TopicPartition("base", 0): 1})  # __consumer_offsets
        store.create_topic("gone")
        store.delete_topic("gone")  # a .deleting- rename, removed again
    names = set(os.listdir(path)) - {"base"}
    assert names == {*ROOT_FILES, OFFSETS_TOPIC, GROUPS_DIR, CLEANERS_DIR}, names
    assert not any(valid_topic_name(n) for n in names)  # a new root entry must be kept from users too
    return names


@pytest.mark.slow
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=_NAMES)
def test_any_topic_name_is_refused_or_works_end_to_end_without_touching_anything_else(tmp_path, name):
    template = tmp_path / "template"
    if not template.exists():  # once per test: every example starts from a copy
        _internal_store(template)
    parent = tempfile.mkdtemp(dir=tmp_path)
    root = os.path.join(parent, "store")
    shutil.copytree(template, root)
    internal = set(os.listdir(root)) - {"base"}
    outside = set(os.listdir(parent))
    before = _snapshot(root)
    with _open(root) as store:
        try:
            store.create_topic(name)
        except InvalidTopicError:
            refused = True
        else:
            refused = False
        event("refused" if refused else "accepted")
        if refused:
            with store.producer() as p, pytest.raises(InvalidTopicError):
                p.send(name, b"v")
            assert name not in store.topics() or name == OFFSETS_TOPIC
            assert _snapshot(root) == before
            return
        # Not one of pylog's root entries, nor a name pylog gives one (a temporary file of a root file, a
        # topic being deleted, an internal directory to come).
        assert name not in internal and not name.startswith((".", "__"))
        assert not any(name == f or name.startswith(f + ".") for f in ROOT_FILES)
        _produce(store, name, [b"v1", b"v2"])
        assert _values(store, name) == [b"v1", b"v2"]
        assert name in store.topics() and name in store
        assert set(os.listdir(root)) == internal | {"base", name}
        added = set(_snapshot(root)) - set(before)
        assert all(p == name or p.startswith(name + os.sep) for p in added), added
    with _open(root) as store:  # after reopening: still there, nothing else touched
        assert name in store.topics() and _values(store, name) == [b"v1", b"v2"]
        assert _values(store, "base") == [b"0"] and store.committed_offsets("base-g")
        store.delete_topic(name)
        assert name not in store.topics() and name not in store
    after = _snapshot(root)
    assert {p for p in after if p.split(os.sep)[0] != GROUPS_DIR} == \
        {p for p in before if p.split(os.sep)[0] != GROUPS_DIR}  # every file back (groups: a new generation)
    assert set(os.listdir(parent)) == outside


def _check_group_round_trip(root, store, group):
    outside = set(os.listdir(os.path.dirname(root)))
    if "t" not in store:
        store.create_topic("t")
        _produce(store, "t", [b"a", b"b"])
    before = set(os.listdir(root))
    tp = TopicPartition("t", 0)
    with store.consumer("t", group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        got = []
        for _ in range(50):
            got.extend(r.value for recs in c.poll(timeout_ms=10).values() for r in recs)
            if len(got) == 2:
                break
        assert got == [b"a", b"b"]
        assert [m.member_id for m in store.describe_consumer_group(group).members] == [group_member(c).member_id]
        c.commit()
    assert store.committed_offsets(group) == {tp: OffsetAndMetadata(2, "")}
    assert group in store.consumer_groups()
    assert set(os.listdir(root)) <= before | {OFFSETS_TOPIC, GROUPS_DIR}  # nothing new in the root but these
    groups_dir = os.path.join(root, GROUPS_DIR)
    assert all(os.path.realpath(os.path.join(groups_dir, d)).startswith(groups_dir + os.sep)
               for d in os.listdir(groups_dir))
    assert set(os.listdir(os.path.dirname(root))) == outside


@pytest.mark.slow
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(group=st.one_of(_NAMES, st.text(st.characters(codec=None), min_size=1, max_size=3000)))
def test_any_group_id_is_refused_or_commits_and_lists_without_touching_anything_else(tmp_path, group):
    parent = tempfile.mkdtemp(dir=tmp_path)
    root = os.path.join(parent, "store")
    with _open(root) as store:
        store.create_topic("t")
        _produce(store, "t", [b"a", b"b"])
        store.commit_offsets("other", {TopicPartition("t", 0): 2})
        try:
            store.describe_consumer_group(group)
        except InvalidGroupError:
            event("refused")
            for call in (lambda: store.consumer("t", group_id=group),
                         lambda: store.commit_offsets(group, {TopicPartition("t", 0): 1}),
                         lambda: store.committed_offsets(group)):
                with pytest.raises(InvalidGroupError):
                    call()
            assert not group or any(0xD800 <= ord(ch) <= 0xDFFF for ch in group)
            return
        event("accepted")
        _check_group_round_trip(root, store, group)
    with _open(root) as store:
        assert store.committed_offsets(group) == {TopicPartition("t", 0): OffsetAndMetadata(2, "")}
        assert group in store.consumer_groups()
        assert store.committed_offsets("other") == {TopicPartition("t", 0): OffsetAndMetadata(2, "")}
        assert store.delete_consumer_group(group) == 1
        assert group not in store.consumer_groups() and store.committed_offsets(group) == {}
        assert store.consumer_groups() == ["other"]


def test_spark_sink_cannot_write_an_internal_topic(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from pylog.spark.options import parse_write_options
    from pylog.spark.writer import _TaskWriter

    with _open(tmp_path / "s") as store:
        store.commit_offsets("g", {TopicPartition("t", 0): 1})
        batch = pa.RecordBatch.from_pydict({"key": [b"k"], "value": [b"v"]})
        writer = _TaskWriter(store, parse_write_options({"path": str(tmp_path / "s"), "topic": OFFSETS_TOPIC}))
        with pytest.raises(InvalidTopicError, match="internal"):
            writer.add(batch)
        assert store.committed_offsets("g") == {TopicPartition("t", 0): OffsetAndMetadata(1, "")}
