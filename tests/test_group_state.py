"""pylog/storage/group_state.py: the coordinator's saved groups file read back exactly, and every damaged or
hostile file refused with CorruptRecordError (never another exception, never a wrong group)."""

from __future__ import annotations

import random

import msgpack
import pytest

import pylog
from pylog.errors import CorruptRecordError, ReadOnlyStoreError, RecordTooLargeError
from pylog.storage.group_state import MAX_BYTES, SavedGroup, SavedMember, decode_groups, encode_groups, read_groups, write_groups
from pylog.storage.fileio import checked, encode_doc

MEMBER = SavedMember("m-1", "inst", "cli", "/127.0.0.1", 10_000, 20_000, [("range", b"\x00\x01"), ("rr", b"")], b"as")
GROUPS = [SavedGroup("g", 3, "consumer", "range", "m-1", [MEMBER]),
          SavedGroup("empty", 9, "consumer", None, None, [])]


def _doc() -> dict:
    return msgpack.unpackb(encode_groups(GROUPS)[5:], raw=False)


def test_saved_groups_round_trip_through_the_file(tmp_path):
    write_groups(str(tmp_path), encode_groups(GROUPS))
    assert read_groups(str(tmp_path)) == GROUPS
    assert read_groups(str(tmp_path / "none")) == []


def test_store_saves_and_reads_back_the_coordinator_groups_and_a_read_only_store_refuses(tmp_path):
    """The group-state API pylog serve uses (Store.coordinator_groups / replace_coordinator_groups) writes the
    same file as write_groups and reads it back; a read-only store refuses to write and keeps the file."""
    with pylog.open(tmp_path) as store:
        assert store.coordinator_groups() == []
        store.replace_coordinator_groups(GROUPS)
        assert store.coordinator_groups() == GROUPS
    assert read_groups(str(tmp_path)) == GROUPS
    with pylog.open(tmp_path, read_only=True) as store:
        with pytest.raises(ReadOnlyStoreError):
            store.replace_coordinator_groups([])
        assert store.coordinator_groups() == GROUPS


def test_groups_too_large_to_read_back_are_not_saved_and_the_previous_file_stays(tmp_path):
    # Member metadata is what clients send: enough of it made a file larger than read_groups reads, and the next
    # start lost every group (a checksum mismatch over the first MAX_BYTES).
    write_groups(str(tmp_path), encode_groups(GROUPS))
    big = SavedMember("m-1", None, "cli", "/127.0.0.1", 10_000, 20_000, [("range", b"x" * MAX_BYTES)], b"")
    with pytest.raises(RecordTooLargeError):
        write_groups(str(tmp_path), encode_groups([SavedGroup("huge", 1, "consumer", "range", "m-1", [big])]))
    assert read_groups(str(tmp_path)) == GROUPS


def _mutations():
    def set_(path, value):
        def f(doc):
            target = doc
            for k in path[:-1]:
                target = target[k]
            target[path[-1]] = value
            return doc
        return f
    g0, m0 = ("groups", 0), ("groups", 0, "members", 0)
    yield "no groups", lambda d: {"x": 1}
    yield "groups not a list", set_(("groups",), {"a": 1})
    yield "bool generation", set_((*g0, "generation"), True)
    yield "negative generation", set_((*g0, "generation"), -1)
    yield "empty group id", set_((*g0, "group_id"), "")
    yield "leader not a member", set_((*g0, "leader"), "ghost")
    yield "members with no protocol name", set_((*g0, "protocol_name"), None)
    yield "member id empty", set_((*m0, "member_id"), "")
    yield "session timeout too large", set_((*m0, "session_timeout_ms"), 1 << 40)
    yield "assignment not bytes", set_((*m0, "assignment"), "text")
    yield "protocol not a pair", set_((*m0, "protocols"), [["range"]])
    yield "protocol metadata not bytes", set_((*m0, "protocols"), [["range", 5]])
    yield "member not a map", set_((*g0, "members"), [[1, 2]])
    yield "duplicate member", lambda d: (d["groups"][0]["members"].append(dict(d["groups"][0]["members"][0])), d)[1]
    yield "duplicate group", lambda d: (d["groups"].append(dict(d["groups"][1])), d)[1]


@pytest.mark.parametrize("name,mutate", list(_mutations()), ids=[n for n, _ in _mutations()])
def test_saved_groups_of_the_wrong_shape_are_refused(name, mutate):
    body = encode_doc(b"PLKG", 1, mutate(_doc()))
    with pytest.raises(CorruptRecordError):
        decode_groups(body, "x")


def test_damaged_saved_groups_files_raise_only_corrupt_record_error(tmp_path):
    """Random byte flips and cuts of a valid file (CRC recomputed, so the decoder itself is exercised): each
    decodes to valid groups or raises CorruptRecordError."""
    good = encode_groups(GROUPS)
    rng = random.Random(25)
    for _ in range(2000):
        body = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        if rng.random() < 0.2:
            del body[rng.randrange(len(body)):]
        try:
            groups = decode_groups(bytes(body), "x")
        except CorruptRecordError:
            continue
        assert all(isinstance(g, SavedGroup) and all(isinstance(m, SavedMember) for m in g.members) for g in groups)
    (tmp_path / "__consumer_groups").mkdir()
    (tmp_path / "__consumer_groups" / ".coordinator").write_bytes(checked(good)[:-1])
    with pytest.raises(CorruptRecordError):
        read_groups(str(tmp_path))
