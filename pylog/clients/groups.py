"""Consumer groups without a server: membership, assignment and partition ownership.

On disk, under the store::

    __consumer_offsets/             committed offsets: a compacted topic, key (group, topic, partition)
    __consumer_groups/<group>/      one directory per group
        group.lock                  flock'd while a member changes the group (join, leave, rebalance)
        state                       the current generation: members, subscriptions, assignment (CRC'd)
        members/<member id>         one file per member, flock'd by that member for its whole life
        owners/<topic>-<p>.lock     flock'd by the member consuming that partition

Group ids are any non-empty text that UTF-8 can encode (no lone surrogates), as in Kafka: an id reaches
the disk only as a msgpack string (in commit keys and the state file) and, when it is not a safe file
name, as a digest (see :func:`_group_dirname`), so no id can name a path outside its group's directory.

Invariants:
- A member is alive exactly while its member file is locked. The lock ends with the process (or the
  consumer's close), so a member that crashed is noticed by the next member that looks (every
  ``heartbeat_interval_ms``, which must be below ``session_timeout_ms``) and the group rebalances.
- The state file changes only under ``group.lock``, every change increments the generation, and every
  member computes its part of the assignment from that one file, so members never disagree for longer
  than it takes them to read it.
- A member reads a partition only while holding the partition's owner lock, and gives the lock up only
  after committing (with auto-commit) and calling the rebalance listener. So at any time at most one
  member of a group consumes a partition, and the next owner starts where the previous one's last
  commit left off. A member that stops polling keeps its partitions until it polls, closes or dies;
  nobody takes them from under it. Different groups share nothing but the offsets topic.
- A group member's commit is accepted only for partitions whose owner lock it holds; otherwise
  :class:`~pylog.errors.CommitFailedError`.
- Committed offsets are not this module's: :mod:`pylog.clients.offsets` keeps them (records of
  ``__consumer_offsets``); a member only decides whose commit is accepted (the rule above).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, NamedTuple, Sequence


from .assignors import AbstractPartitionAssignor, assignor_named
from ..errors import CorruptRecordError, InvalidConfigError, RebalanceInProgressError, UnknownTopicError
from ..storage.fileio import (checked, decode_doc, encode_doc, in_range, raise_if_gone, read_checked, try_flock,
                              unchecked, write_checked, write_faults)
from ..storage.filenames import GROUPS_DIR, NAME_MAX, OFFSETS_TOPIC, check_group_id, legacy_topic_name, legal_name
from ..structs import TopicPartition
from .storeview import StoreView


__all__ = ["OFFSETS_TOPIC", "GROUPS_DIR", "GroupMember", "GroupDescription",
           "MemberDescription", "PartitionLag", "describe_group", "list_group_dirs", "remove_group_dir",
           "check_group_id"]

log = logging.getLogger("pylog.groups")  # logger names are what operators filter on: unchanged by the move

#: First bytes of a group's state file and of a member file (layouts in docs/FORMAT.md).
STATE_MAGIC = b"PLGS"
MEMBER_MAGIC = b"PLGM"
_FORMAT_VERSION = 1
#: Largest state or member file read (a corrupt length can never make us allocate more).
_MAX_META_BYTES = 16 * 1024 * 1024
_MEMBER_ID_BAD = re.compile(r"[^A-Za-z0-9._-]")
_INT64_MAX = (1 << 63) - 1
_PARTITION_MAX = (1 << 31) - 1


def _group_dirname(group_id: str, store_path: str) -> str:
    # Readable where the id is a safe file name (Kafka's topic characters, not '.' or '..'); a digest
    # otherwise ('%' is not one of those characters, so the two kinds never collide). The id itself is
    # kept in the state file. Groups have a directory of their own, so no store-root name matters here.
    if legal_name(group_id) and len(group_id) <= 200:
        return group_id
    # Earlier versions' rule ('$' matched before a trailing newline) named such a group's directory by the
    # id itself: an existing one keeps its state (generation, members) there; new ones get the digest.
    if group_id.endswith("\n") and legal_name(group_id[:-1]) and len(group_id) <= 200 \
            and os.path.isdir(os.path.join(store_path, GROUPS_DIR, group_id)):
        return group_id
    return "%" + hashlib.blake2b(group_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _owner_lock_name(tp: TopicPartition) -> str:
    """``<topic>-<partition>.lock``, or for a topic name too long for that (up to 249 characters are
    allowed) ``%<digest of the topic>-<partition>.lock``: a name within NAME_MAX either way."""
    name = f"{tp.topic}-{tp.partition}.lock"
    if len(name) <= NAME_MAX:
        return name
    return f"%{hashlib.blake2b(tp.topic.encode(), digest_size=16).hexdigest()}-{tp.partition}.lock"


def encode_group_doc(magic: bytes, doc: Any) -> bytes:
    """The body of a group file (``magic`` is :data:`STATE_MAGIC` or :data:`MEMBER_MAGIC`): ``doc`` encoded
    in this version's format. Public for tools and tests that write such files."""
    return encode_doc(magic, _FORMAT_VERSION, doc)


def _decode(magic: bytes, body: bytes, path: str, what: str) -> Any:
    return decode_doc(magic, _FORMAT_VERSION, body, path, what)


# ---------------------------------------------------------------------------------------------- membership

class PartitionLag(NamedTuple):
    """A group's progress on one partition (seed 000): lag = end - committed, lead = committed - start."""

    committed: int
    log_start_offset: int
    log_end_offset: int
    lag: int
    lead: int


@dataclass
class MemberDescription:
    member_id: str
    client_id: str
    pid: int
    topics: list[str]
    assignment: list[TopicPartition]


@dataclass
class GroupDescription:
    """What ``store.describe_consumer_group`` returns: the group's current generation."""

    group_id: str
    generation: int
    protocol: str
    members: list[MemberDescription] = field(default_factory=list)


def _read_state(path: str) -> dict[str, Any] | None:
    body = read_checked(path, _MAX_META_BYTES, "group state")
    if body is None:
        return None
    doc = _decode(STATE_MAGIC, body, path, "group state")
    if not _valid_state(doc):
        raise CorruptRecordError("group state: not a state document", path, 0)
    return doc


def _valid_member_id(m: Any) -> bool:
    """A member id as :class:`GroupMember` makes them: also a safe file name under ``members/``."""
    return type(m) is str and 0 < len(m) <= 255 and not _MEMBER_ID_BAD.search(m) and m not in (".", "..")


def _str_list(value: Any) -> bool:
    return type(value) is list and all(type(x) is str for x in value)


def _topic_list(value: Any) -> bool:
    return type(value) is list and all(type(x) is str and (legal_name(x) or legacy_topic_name(x)) for x in value)


def _valid_state(doc: Any) -> bool:
    """The shape :meth:`GroupMember._rebalance_locked` writes, with every type and range checked, so the
    readers below can index it without meeting a foreign exception (a state file is data from disk)."""
    if type(doc) is not dict or not in_range(doc.get("generation"), _INT64_MAX - 1):
        return False
    if type(doc.get("group_id", "")) is not str or type(doc.get("protocol", "")) is not str:
        return False
    members = doc.get("members", {})
    assignment = doc.get("assignment", {})
    if type(members) is not dict or type(assignment) is not dict:
        return False
    for m, d in members.items():
        if not (_valid_member_id(m) and type(d) is dict and type(d.get("client_id", "")) is str
                and in_range(d.get("pid", 0), _INT64_MAX, -_INT64_MAX - 1) and _topic_list(d.get("topics", []))):
            return False
    for m, tps in assignment.items():
        if not (_valid_member_id(m) and type(tps) is list):
            return False
        for tp in tps:
            if not (type(tp) is list and len(tp) == 2 and type(tp[0]) is str and in_range(tp[1], _PARTITION_MAX)):
                return False
    return True


def _valid_member_doc(doc: Any) -> bool:
    """A member file's document as :meth:`GroupMember._member_doc` writes it."""
    return (type(doc) is dict and type(doc.get("client_id", "")) is str
            and in_range(doc.get("pid", 0), _INT64_MAX, -_INT64_MAX - 1) and _topic_list(doc.get("topics", []))
            and _str_list(doc.get("strategies", [])))


class GroupMember:
    """One consumer's membership in a group (used by :class:`~pylog.clients.consumer.Consumer`; not thread-safe).

    ``poll()`` is called on every consumer poll: it notices a new generation with one ``stat``, and every
    ``heartbeat_interval_ms`` probes the other members' locks to notice the dead.
    """

    def __init__(self, store: StoreView, group_id: str, client_id: str,
                 strategies: Sequence[type[AbstractPartitionAssignor]], session_timeout_ms: int,
                 heartbeat_interval_ms: int) -> None:
        self.group_id = check_group_id(group_id)
        self._store = store
        self.directory = os.path.join(store.path, GROUPS_DIR, _group_dirname(group_id, store.path))
        self.members_dir = os.path.join(self.directory, "members")
        self._owners_dir = os.path.join(self.directory, "owners")
        self._state_path = os.path.join(self.directory, "state")
        self.client_id = client_id
        self.member_id = (_MEMBER_ID_BAD.sub("_", client_id)[:100] or "pylog") + "-" + uuid.uuid4().hex
        self.strategies = [s.name for s in strategies]
        self.session_timeout = session_timeout_ms / 1000
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.generation = -1
        self.protocol = ""
        self.topics: list[str] = []
        #: this member's partitions in the current generation (owned or not yet)
        self.assignment: list[TopicPartition] = []
        self._owned: dict[TopicPartition, int] = {}  # partition -> fd holding its owner lock
        self._member_fd: int | None = None
        self._stamp: tuple | None = None
        self._next_heartbeat = 0.0

    # -- locks

    def _group_lock(self) -> int:
        """Take ``group.lock``, waiting up to the session timeout. :raises RebalanceInProgressError:"""
        fd = os.open(os.path.join(self.directory, "group.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.session_timeout
        delay = 0.0005
        while not try_flock(fd):
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RebalanceInProgressError(f"group {self.group_id!r}: group.lock was held for longer than "
                                               f"session_timeout_ms")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        return fd

    @contextlib.contextmanager
    def _group_locked(self) -> Iterator[None]:
        """Hold ``group.lock`` for a block (see :meth:`_group_lock`)."""
        fd = self._group_lock()
        try:
            yield
        finally:
            self._unlock(fd)

    @staticmethod
    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    @property
    def joined(self) -> bool:
        return self._member_fd is not None

    def owns(self, tp: TopicPartition) -> bool:
        """True while this member holds ``tp``'s owner lock (may read it and commit for it)."""
        return tp in self._owned

    def acquire(self, tp: TopicPartition) -> bool:
        """Take ``tp``'s owner lock if its previous owner has let it go; True when this member owns it."""
        if tp in self._owned:
            return True
        fd = os.open(os.path.join(self._owners_dir, _owner_lock_name(tp)), os.O_RDWR | os.O_CREAT, 0o644)
        if try_flock(fd):
            self._owned[tp] = fd
            return True
        os.close(fd)
        return False

    def release(self, tp: TopicPartition) -> None:
        fd = self._owned.pop(tp, None)
        if fd is not None:
            self._unlock(fd)

    # -- membership

    def _member_doc(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "pid": os.getpid(), "topics": sorted(self.topics),
                "strategies": self.strategies}

    def _write_member_file(self) -> None:
        assert self._member_fd is not None
        data = checked(encode_group_doc(MEMBER_MAGIC, self._member_doc()))
        os.ftruncate(self._member_fd, 0)
        os.pwrite(self._member_fd, data, 0)

    def join(self, topics: Sequence[str]) -> None:
        """Become a member subscribing to ``topics`` and rebalance the group.

        :raises InvalidConfigError: when no assignment strategy is common to all members.
        :raises ReadOnlyStoreError, StorePermissionError, DiskFullError: when the group's directory cannot be
            written (a read-only mount, missing permissions, a full disk): the member did not join.
        """
        with write_faults(f"joining group {self.group_id!r}", "this consumer did not join the group"):
            os.makedirs(self.members_dir, exist_ok=True)
            os.makedirs(self._owners_dir, exist_ok=True)
            self.topics = sorted(set(topics))
            self._join_locked()

    def _join_locked(self) -> None:
        with self._group_locked():
            path = os.path.join(self.members_dir, self.member_id)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            if not try_flock(fd):  # nobody else knows the name yet
                os.close(fd)
                raise RebalanceInProgressError(f"could not lock the new member file {path}")
            self._member_fd = fd
            try:
                self._write_member_file()
                self._rebalance_locked()
            except BaseException:
                self._drop_member_file()
                raise

    def _drop_member_file(self) -> None:
        if self._member_fd is not None:
            try:
                os.unlink(os.path.join(self.members_dir, self.member_id))
            except FileNotFoundError:
                pass
            self._unlock(self._member_fd)
            self._member_fd = None

    def update_subscription(self, topics: Sequence[str]) -> None:
        """Change the topics this member subscribes to (and rebalance) when they differ."""
        topics = sorted(set(topics))
        if topics == self.topics:
            return
        self.topics = topics
        with self._group_locked():
            self._write_member_file()
            self._rebalance_locked()

    def leave(self) -> None:
        """Release every owner lock, leave the group and let the others rebalance without this member."""
        for tp in list(self._owned):
            self.release(tp)
        if self._member_fd is None:
            return
        try:
            with self._group_locked():
                self._drop_member_file()
                self._rebalance_locked()
        except FileNotFoundError as exc:
            if not os.path.isdir(self.directory):  # nothing is left to leave: let go of the member file
                os.close(self._member_fd)
                self._member_fd = None
                self.assignment = []
            raise_if_gone(exc, f"leaving group {self.group_id!r}", self.directory,
                          "this consumer let go of its locks and left")
            raise
        self.assignment = []

    def _live_members(self) -> dict[str, dict[str, Any]]:
        """Members whose files are locked, read under the group lock; files of dead members are removed."""
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(os.listdir(self.members_dir)):
            if name == self.member_id:
                if self._member_fd is not None:
                    out[name] = self._member_doc()
                continue
            doc = self.probe(name, remove_dead=True)
            if doc is not None:
                out[name] = doc
        return out

    def probe(self, name: str, remove_dead: bool) -> dict[str, Any] | None:
        """The member's document if it is alive, else None (and its file removed, with ``remove_dead``)."""
        path = os.path.join(self.members_dir, name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            if try_flock(fd):
                if remove_dead:
                    log.info("group %r: member %s is gone", self.group_id, name)
                    os.unlink(path)  # while locked: a live member never has its file removed
                return None
            if not remove_dead:
                return {}
            raw = os.pread(fd, _MAX_META_BYTES, 0)
        finally:
            os.close(fd)  # also releases our lock, if we took it
        try:
            doc = _decode(MEMBER_MAGIC, unchecked(raw, path, "group member file"), path, "group member file")
            if not _valid_member_doc(doc):
                raise CorruptRecordError("group member file: not a member document", path, 0)
        except CorruptRecordError as exc:
            log.warning("group %r: %s; treating the member as subscribing to nothing", self.group_id, exc)
            return {"client_id": "", "pid": 0, "topics": [], "strategies": []}
        return doc

    def _rebalance_locked(self) -> None:
        """Compute and write the next generation (under ``group.lock``)."""
        try:
            state = _read_state(self._state_path) or {}
        except CorruptRecordError as exc:
            log.warning("group %r: %s; starting a new state", self.group_id, exc)
            state = {}
        members = self._live_members()
        protocol = common_protocol(members, self.strategies if self._member_fd is not None else None)
        subs = {m: list(d.get("topics") or ()) for m, d in members.items()}
        counts = {}
        for t in sorted({t for ts in subs.values() for t in ts}):
            try:
                counts[t] = self._store.topic(t).num_partitions
            except (UnknownTopicError, CorruptRecordError):
                continue
        previous = {m: [TopicPartition(*tp) for tp in tps] for m, tps in (state.get("assignment") or {}).items()}
        assignment = assignor_named(protocol).assign(subs, counts, previous) if members else {}
        doc = {"group_id": self.group_id, "generation": int(state.get("generation", 0)) + 1, "protocol": protocol,
               "members": {m: {"client_id": d.get("client_id", ""), "pid": d.get("pid", 0), "topics": subs[m]}
                           for m, d in members.items()},
               "assignment": {m: [list(tp) for tp in tps] for m, tps in assignment.items()}}
        # Not fsynced: after a power loss every member is gone and the next join starts a new generation.
        write_checked(self._state_path, encode_group_doc(STATE_MAGIC, doc), durable=False)

    def poll(self) -> list[TopicPartition] | None:
        """Look for a new generation (and, when due, for dead members). Returns this member's new
        assignment when the generation changed, else None."""
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.heartbeat_interval
            self._heartbeat()
        for _ in range(2):
            try:
                st = os.stat(self._state_path)
                stamp: tuple | None = (st.st_ino, st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                stamp = None
            if stamp is not None and stamp == self._stamp:
                return None
            try:
                state = _read_state(self._state_path)
            except CorruptRecordError as exc:
                log.warning("group %r: %s; rebalancing", self.group_id, exc)
                state = None
            if state is not None and self.member_id in (state.get("members") or {}):
                break
            # No state, or one without us (an operator removed our file or the state): join again.
            self._rejoin()
        else:
            raise RebalanceInProgressError(f"group {self.group_id!r}: this member is missing from the state "
                                           "it just wrote")
        self._stamp = stamp
        if state["generation"] == self.generation:
            return None
        self.generation = state["generation"]
        self.protocol = state.get("protocol", "")
        mine = (state.get("assignment") or {}).get(self.member_id) or []
        self.assignment = [TopicPartition(t, p) for t, p in mine]
        return list(self.assignment)

    def _rejoin(self) -> None:
        with self._group_locked():
            path = os.path.join(self.members_dir, self.member_id)
            if not os.path.exists(path):
                if self._member_fd is not None:
                    self._unlock(self._member_fd)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try_flock(fd)
                self._member_fd = fd
                self._write_member_file()
            self._rebalance_locked()

    def _heartbeat(self) -> None:
        """Probe the other members of the current generation; rebalance when one of them died."""
        try:
            state = _read_state(self._state_path)
        except CorruptRecordError:
            return  # poll() deals with it
        if state is None:
            return
        others = [m for m in (state.get("members") or {}) if m != self.member_id]
        if all(self.probe(m, remove_dead=False) is not None for m in others):
            return
        with self._group_locked():
            self._rebalance_locked()


def common_protocol(members: Mapping[str, Mapping[str, Any]], mine: Sequence[str] | None) -> str:
    """The first strategy of the first member (by id) that every member supports."""
    lists = [list(d.get("strategies") or ()) for _, d in sorted(members.items())]
    lists = [ls for ls in lists if ls]
    if not lists:
        return (mine or ["range"])[0]
    common = set(lists[0]).intersection(*map(set, lists[1:]))
    for s in lists[0]:
        if s in common:
            return s
    raise InvalidConfigError(f"the group's members have no partition assignment strategy in common: {lists}")


# ---------------------------------------------------------------------------------------------- inspection

def list_group_dirs(store_path: str) -> list[str]:
    """Group ids that have a membership directory (read from their state files). Names starting with ``.``
    are not groups' (no group directory is named so): ``pylog serve`` keeps its coordinator's groups there."""
    root = os.path.join(store_path, GROUPS_DIR)
    out = []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    for name in names:
        if name.startswith("."):
            continue
        try:
            state = _read_state(os.path.join(root, name, "state"))
        except CorruptRecordError:
            state = None
        if state is not None and isinstance(state.get("group_id"), str):
            out.append(state["group_id"])
        elif not name.startswith("%"):
            out.append(name)
    return out


def remove_group_dir(store_path: str, group_id: str) -> None:
    """Remove ``group_id``'s membership directory (for deleting a group that has no live members)."""
    directory = os.path.join(store_path, GROUPS_DIR, _group_dirname(check_group_id(group_id), store_path))
    shutil.rmtree(directory, ignore_errors=True)


def describe_group(store_path: str, group_id: str) -> GroupDescription:
    """The group's current generation, members (only live ones) and assignment.

    A member is live while its process holds the exclusive ``flock`` on its member file. ``flock`` has no
    test operation (``fcntl``'s F_GETLK sees POSIX locks, not these; ``/proc/locks`` hides other PID
    namespaces'), so each member is probed with a momentary non-blocking *shared* lock, also on a
    read-only store: it fails against a live member, and concurrent describers (shared with shared) do
    not take each other's probes for a live member."""
    directory = os.path.join(store_path, GROUPS_DIR, _group_dirname(check_group_id(group_id), store_path))
    state = _read_state(os.path.join(directory, "state")) or {}
    desc = GroupDescription(group_id, int(state.get("generation", 0)), str(state.get("protocol", "")))
    assignment = state.get("assignment") or {}
    for m, d in sorted((state.get("members") or {}).items()):
        try:
            # Read-only: flock needs no write access, and a store on read-only media must be describable.
            fd = os.open(os.path.join(directory, "members", m), os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # live: its member holds the exclusive lock
        else:
            continue  # dead; the next member to look will rebalance
        finally:
            os.close(fd)
        desc.members.append(MemberDescription(m, d.get("client_id", ""), d.get("pid", 0), list(d.get("topics") or ()),
                                              [TopicPartition(t, p) for t, p in assignment.get(m) or ()]))
    return desc
