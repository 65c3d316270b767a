"""The group coordinator's saved state: Kafka clients' group membership kept across a restart of ``pylog serve``
(the file's format and its reading and writing; :meth:`pylog.store.Store.coordinator_groups` and
:meth:`~pylog.store.Store.replace_coordinator_groups` are the API ``pylog serve`` uses).

Kafka keeps each group's metadata (generation, protocol, leader, members with their subscriptions and
assignments) in ``__consumer_offsets``, written on every rebalance, so that a restarted or new coordinator
loads the groups as they were and their members carry on without rejoining. ``pylog serve`` keeps the same
in one file of the store, ``__consumer_groups/.coordinator`` (layout in docs/FORMAT.md: magic ``PLKG``, a
version byte, a msgpack document, CRC-32C). It is replaced atomically (written aside, fsynced, renamed)
whenever a group reaches a new stable generation, becomes empty or is deleted, and once more on a clean stop:
after a crash the file holds every group's last stable generation, as Kafka's log would.

Invariants:
- A file that cannot be read back exactly (checksum, magic, version, msgpack, or a document of the wrong
  shape: every type and range is checked) raises :class:`~pylog.errors.CorruptRecordError` from
  :func:`decode_groups`; the coordinator then starts with no groups, as before this file existed.
- :func:`write_groups` never writes a file :func:`read_groups` would not read back (over :data:`MAX_BYTES`).
- The file name starts with ``.``: no group's directory under ``__consumer_groups`` is named so (see
  :func:`pylog.clients.groups.list_group_dirs`), nor is any topic.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from ..errors import CorruptRecordError, InvalidGroupError, RecordTooLargeError
from .fileio import decode_doc, encode_doc, read_checked, write_checked
from .filenames import GROUPS_DIR, check_group_id

__all__ = ["GROUPS_FILE", "SavedMember", "SavedGroup", "groups_path", "encode_groups", "decode_groups",
           "read_groups", "write_groups"]

#: The file's name in the store's ``__consumer_groups`` directory.
GROUPS_FILE = ".coordinator"
MAGIC = b"PLKG"
VERSION = 1
#: Largest file read: a corrupt or hostile length never makes the server allocate more.
MAX_BYTES = 64 * 1024 * 1024
_INT32_MAX = (1 << 31) - 1


class SavedMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes


class SavedGroup(NamedTuple):
    group_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    #: Empty for an Empty group (kept for its generation).
    members: list[SavedMember]


def groups_path(store_path: str) -> str:
    return os.path.join(store_path, GROUPS_DIR, GROUPS_FILE)


def encode_groups(groups: list[SavedGroup]) -> bytes:
    """The file's body (without its CRC framing)."""
    doc = {"groups": [{"group_id": g.group_id, "generation": g.generation, "protocol_type": g.protocol_type,
                       "protocol_name": g.protocol_name, "leader": g.leader,
                       "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                    "client_id": m.client_id, "client_host": m.client_host,
                                    "session_timeout_ms": m.session_timeout_ms,
                                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                                    "protocols": [[n, meta] for n, meta in m.protocols],
                                    "assignment": m.assignment} for m in g.members]} for g in groups]}
    return encode_doc(MAGIC, VERSION, doc)


def _str(v: Any, nullable: bool = False) -> bool:
    return type(v) is str or nullable and v is None


def _int(v: Any, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _member(d: Any, path: str) -> SavedMember:
    if not (type(d) is dict and _str(d.get("member_id")) and d["member_id"]
            and _str(d.get("group_instance_id"), True) and _str(d.get("client_id")) and _str(d.get("client_host"))
            and _int(d.get("session_timeout_ms"), 0, _INT32_MAX) and _int(d.get("rebalance_timeout_ms"), 0, _INT32_MAX)
            and type(d.get("protocols")) is list and type(d.get("assignment")) is bytes):
        raise CorruptRecordError("coordinator groups: a member of the wrong shape", path, 0)
    protocols = []
    for p in d["protocols"]:
        if not (type(p) is list and len(p) == 2 and _str(p[0]) and type(p[1]) is bytes):
            raise CorruptRecordError("coordinator groups: a protocol of the wrong shape", path, 0)
        protocols.append((p[0], p[1]))
    return SavedMember(d["member_id"], d.get("group_instance_id"), d["client_id"], d["client_host"],
                       d["session_timeout_ms"], d["rebalance_timeout_ms"], protocols, d["assignment"])


def _group(d: Any, path: str) -> SavedGroup:
    if not (type(d) is dict and _int(d.get("generation"), 0, _INT32_MAX) and _str(d.get("protocol_type"), True)
            and _str(d.get("protocol_name"), True) and _str(d.get("leader"), True) and type(d.get("members")) is list):
        raise CorruptRecordError("coordinator groups: a group of the wrong shape", path, 0)
    try:
        group_id = check_group_id(d.get("group_id"))
    except InvalidGroupError:
        raise CorruptRecordError("coordinator groups: an invalid group id", path, 0) from None
    members = [_member(m, path) for m in d["members"]]
    ids = [m.member_id for m in members]
    instances = [m.group_instance_id for m in members if m.group_instance_id is not None]
    # Optional (nil) fields may also be missing: read with get.
    leader, ptype, pname = d.get("leader"), d.get("protocol_type"), d.get("protocol_name")
    if len(set(ids)) != len(ids) or len(set(instances)) != len(instances) \
            or (members and (leader not in ids or pname is None or ptype is None)):
        raise CorruptRecordError(f"coordinator groups: group {group_id!r} is inconsistent", path, 0)
    return SavedGroup(group_id, d["generation"], ptype, pname, leader if members else None, members)


def decode_groups(body: bytes, path: str) -> list[SavedGroup]:
    """The groups of a file body. :raises CorruptRecordError: on anything but exactly the documented shape."""
    doc = decode_doc(MAGIC, VERSION, body, path, "coordinator groups")
    if type(doc) is not dict or type(doc.get("groups")) is not list:
        raise CorruptRecordError("coordinator groups: not a document of groups", path, 0)
    groups = [_group(g, path) for g in doc["groups"]]
    if len({g.group_id for g in groups}) != len(groups):
        raise CorruptRecordError("coordinator groups: a group is listed twice", path, 0)
    return groups


def read_groups(store_path: str) -> list[SavedGroup]:
    """The saved groups; [] without a file. :raises CorruptRecordError: for a damaged file."""
    path = groups_path(store_path)
    body = read_checked(path, MAX_BYTES, "coordinator groups")
    return [] if body is None else decode_groups(body, path)


def write_groups(store_path: str, body: bytes) -> None:
    """Replace the file with ``body`` (from :func:`encode_groups`), crash-safe: written aside, fsynced,
    renamed, the directory fsynced. :raises DiskFullError, ReadOnlyStoreError, StorageError: as the
    file system refuses (the previous file is then kept). :raises RecordTooLargeError: for a body that
    :func:`read_groups` would not read back (over :data:`MAX_BYTES`); nothing is written."""
    if len(body) + 4 > MAX_BYTES:
        # Read back only up to MAX_BYTES: a larger file would lose every group at the next start. (Member metadata
        # is the client's: a few clients with megabytes of it reach this.) The previous file stays.
        raise RecordTooLargeError(f"the coordinator's groups take {len(body)} bytes, more than the {MAX_BYTES} its "
                                  "file may hold: not saved (the previous file is kept)")
    os.makedirs(os.path.join(store_path, GROUPS_DIR), exist_ok=True)
    write_checked(groups_path(store_path), body)
