"""The group APIs of ``pylog serve`` that read or write the store: OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups and DeleteGroups (:class:`GroupOffsets`).

Committed offsets are the store's (``store.commit_offsets`` into ``__consumer_offsets``, the same offsets
pylog's own consumers and ``store.group_lag`` use); groups the coordinator does not hold are described from
the store (pylog's own consumer groups, or groups that only have committed offsets). Membership is not
changed here: a commit asks the coordinator's membership check (``check_commit``) whether its member id and
generation are current.

Invariants:
- A commit is checked and handed to the store under its group's store-write lock
  (:meth:`GroupTable.group_io <pylog.server.group_table.GroupTable.group_io>`), with no await in between, so a
  group's commits and its deletion land in the order they were checked.
- Only a group that is Empty here and has no live pylog member is deleted; its committed offsets go with it.
- Every store call runs in the executor (a commit may wait for ``__consumer_offsets``' writer lock held by
  another process); a failed one is answered with a Kafka error code, never raised to the connection.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..errors import (InvalidTopicError, PartitionLockedError, PylogError, RebalanceInProgressError,
                      RecordTooLargeError, UnknownTopicError)
from ..store import group_offsets
from ..structs import OffsetAndMetadata, TopicPartition
from .group import (CLASSIC_GROUP_TYPE, CONSUMER_PROTOCOL_TYPE, DEAD, EMPTY, STABLE, consumer_assignment,
                    consumer_metadata, valid_group_id)
from .group_table import GroupTable
from .protocol.codes import (  # Kafka's error codes
    UNKNOWN_SERVER_ERROR, NONE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE, COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, INVALID_COMMIT_OFFSET_SIZE, NON_EMPTY_GROUP,
    GROUP_ID_NOT_FOUND, UNSTABLE_OFFSET_COMMIT,
)

__all__ = ["GroupOffsets"]

log = logging.getLogger("pylog.server.coordinator")

#: The coordinator's check of a commit's (group id, generation, member id, group instance id): an error code.
CommitCheck = Callable[[str, int, str, "str | None"], int]


class GroupOffsets:
    """OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and DeleteGroups over ``table``'s groups and store.

    :param table: the coordinator's groups (and the store, the executor, each group's store-write lock).
    :param max_metadata_bytes: the longest commit metadata accepted (OFFSET_METADATA_TOO_LARGE beyond).
    :param check_commit: the membership check of a commit (NONE when its member and generation are current).
    """

    def __init__(self, table: GroupTable, max_metadata_bytes: int, check_commit: CommitCheck) -> None:
        self._table = table
        self.max_metadata_bytes = max_metadata_bytes
        self._check_commit = check_commit


    async def offset_commit(self, request: dict[str, Any], version: int, *, client_id: str = "",
                            client_host: str = "") -> dict[str, Any]:
        group_id = request.get("group_id")
        if version >= 1:
            generation = request.get("generation_id_or_member_epoch", request.get("generation_id", -1))
            member_id = request.get("member_id") or ""
        else:
            generation, member_id = -1, ""
        generation = -1 if generation is None else int(generation)
        instance_id = request.get("group_instance_id") if version >= 7 else None
        parts = [(t.get("name"), p.get("partition_index"), p.get("committed_offset"), p.get("committed_metadata"),
                  p.get("committed_leader_epoch", -1))
                 for t in request.get("topics") or () for p in t.get("partitions") or ()]

        def respond(codes: dict[tuple[Any, Any], int] | int) -> dict[str, Any]:
            topics: dict[Any, list[dict[str, Any]]] = {}
            for topic, partition, *_ in parts:
                code = codes if isinstance(codes, int) else codes.get((topic, partition), UNKNOWN_SERVER_ERROR)
                topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
            return {"throttle_time_ms": 0,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        if self._table.closed:
            return respond(NOT_COORDINATOR)
        if not valid_group_id(group_id):
            return respond(INVALID_GROUP_ID)
        assert isinstance(group_id, str)
        async with self._table.group_io(group_id):
            # Validated under the group's store lock, right before the write, so commits land in the
            # order they were checked (no await between the check and handing the write over).
            error = self._check_commit(group_id, generation, member_id, instance_id)
            if error != NONE:
                return respond(error)
            codes = await self._table.run(self._commit_blocking, group_id, parts)
        return respond(codes)

    def _commit_blocking(self, group_id: str,
                         parts: list[tuple[Any, Any, Any, Any, Any]]) -> dict[tuple[Any, Any], int]:
        codes: dict[tuple[Any, Any], int] = {}
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic, partition, offset, metadata, epoch in parts:
            key = (topic, partition)
            try:
                t = self._table.store.topic(topic)
            except (UnknownTopicError, InvalidTopicError):
                codes[key] = UNKNOWN_TOPIC_OR_PARTITION
                continue
            if type(partition) is not int or not 0 <= partition < t.num_partitions:
                codes[key] = UNKNOWN_TOPIC_OR_PARTITION
            elif metadata is not None and len(metadata.encode("utf-8", "surrogatepass")) > self.max_metadata_bytes:
                codes[key] = OFFSET_METADATA_TOO_LARGE
            else:
                # The leader epoch is kept for the client (its check of a truncated log after a leader change:
                # KIP-320); pylog's one leader never changes epochs, so nothing here depends on it.
                epoch = epoch if type(epoch) is int and -1 <= epoch < 1 << 31 else -1
                offsets[TopicPartition(topic, partition)] = OffsetAndMetadata(int(offset), metadata or "", epoch)
        if offsets:
            try:
                self._table.store.commit_offsets(group_id, offsets)
                code = NONE
            except RebalanceInProgressError:
                log.warning("group %r: offset commit refused: pylog consumers use the group through the store",
                            group_id)
                code = UNKNOWN_MEMBER_ID
            except PartitionLockedError as e:
                log.warning("group %r: offset commit failed: %s", group_id, e)
                code = COORDINATOR_NOT_AVAILABLE
            except RecordTooLargeError:
                code = INVALID_COMMIT_OFFSET_SIZE
            except (PylogError, OSError):
                log.exception("group %r: offset commit failed", group_id)
                code = UNKNOWN_SERVER_ERROR
            for tp in offsets:
                codes[tp] = code
        return codes

    async def offset_fetch(self, request: dict[str, Any], version: int, *, client_id: str = "",
                           client_host: str = "") -> dict[str, Any]:
        if version >= 8:
            groups = []
            for req in request.get("groups") or ():
                error, topics = await self._fetch_group(req.get("group_id"), req.get("topics"), version,
                                                        bool(request.get("require_stable")))
                groups.append({"group_id": req.get("group_id"), "topics": topics, "error_code": error})
            return {"throttle_time_ms": 0, "groups": groups}
        error, topics = await self._fetch_group(request.get("group_id"), request.get("topics"), version,
                                                bool(request.get("require_stable")))
        return {"throttle_time_ms": 0, "topics": topics, "error_code": error}

    async def _fetch_group(self, group_id: Any, wanted: list[dict[str, Any]] | None, version: int,
                           require_stable: bool = False) -> tuple[int, list[dict[str, Any]]]:
        """(group error, topics); before v2 a group error is reported on each requested partition. With
        ``require_stable`` (v7+: a read_committed consumer), a partition whose offset waits in an open
        transaction is answered UNSTABLE_OFFSET_COMMIT (retriable: the client asks again), as Kafka does."""
        error = NONE
        committed: dict[TopicPartition, OffsetAndMetadata] = {}
        unstable: set[TopicPartition] = set()
        if self._table.closed:
            error = NOT_COORDINATOR
        elif not valid_group_id(group_id):
            error = INVALID_GROUP_ID
        else:
            try:
                committed = await self._table.run(self._table.store.committed_offsets, group_id)
                if require_stable:
                    unstable = await self._table.run(group_offsets(self._table.store).pending, group_id)
            except (PylogError, OSError):
                log.exception("group %r: could not read committed offsets", group_id)
                error = COORDINATOR_NOT_AVAILABLE
        if error != NONE and version >= 2:
            return error, []
        part_error = error
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(committed):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        topics = []
        for t in wanted:
            name = t.get("name")
            parts = []
            for p in t.get("partition_indexes") or ():
                tp = TopicPartition(name, p)  # type: ignore[arg-type]
                om = None if tp in unstable else committed.get(tp)
                parts.append({"partition_index": p, "committed_offset": om.offset if om is not None else -1,
                              "committed_leader_epoch": om.leader_epoch if om is not None else -1,
                              "metadata": om.metadata if om is not None else "",
                              "error_code": UNSTABLE_OFFSET_COMMIT if tp in unstable else part_error})
            topics.append({"name": name, "partitions": parts})
        return NONE, topics

    # ------------------------------------------------------------------ ListGroups, DescribeGroups, DeleteGroups

    async def list_groups(self, request: dict[str, Any], version: int, *, client_id: str = "",
                          client_host: str = "") -> dict[str, Any]:
        if self._table.closed:
            return {"throttle_time_ms": 0, "error_code": NOT_COORDINATOR, "groups": []}
        states = {s.lower() for s in request.get("states_filter") or ()} if version >= 4 else set()
        types = {s.lower() for s in request.get("types_filter") or ()} if version >= 5 else set()
        listed: dict[str, tuple[str, str]] = {}
        for g in self._table:
            gid = g.group_id
            if g.state not in (DEAD, EMPTY):
                listed[gid] = (g.protocol_type or CONSUMER_PROTOCOL_TYPE, g.state)
        empty_here = {g.group_id for g in self._table if g.state == EMPTY}
        try:
            found = await self._table.run(self._list_store_groups, set(listed), empty_here, version >= 4)
        except (PylogError, OSError):
            log.exception("could not list the store's consumer groups")
            return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE, "groups": []}
        for gid, state in found.items():
            if gid not in listed:
                here = self._table.get(gid)
                listed[gid] = ((here.protocol_type if here is not None else None) or CONSUMER_PROTOCOL_TYPE, state)
        groups = [{"group_id": gid, "protocol_type": ptype, "group_state": state, "group_type": CLASSIC_GROUP_TYPE}
                  for gid, (ptype, state) in sorted(listed.items())
                  if (not states or state.lower() in states) and (not types or CLASSIC_GROUP_TYPE in types)]
        return {"throttle_time_ms": 0, "error_code": NONE, "groups": groups}

    def _list_store_groups(self, skip: set[str], also: set[str], with_state: bool) -> dict[str, str]:
        """The store's groups (and ``also``) not in ``skip``: Stable with live pylog members, else Empty."""
        out = {}
        for gid in sorted((set(self._table.store.consumer_groups()) | also) - skip):
            live = with_state and bool(self._table.pylog_members(gid))
            out[gid] = STABLE if live else EMPTY
        return out

    async def describe_groups(self, request: dict[str, Any], version: int, *, client_id: str = "",
                              client_host: str = "") -> dict[str, Any]:
        groups = [await self._describe(gid) for gid in request.get("groups") or ()]
        return {"throttle_time_ms": 0, "groups": groups}

    async def _describe(self, group_id: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": NONE, "group_id": group_id, "group_state": "", "protocol_type": "",
                               "protocol_data": "", "members": []}
        if self._table.closed:
            out["error_code"] = NOT_COORDINATOR
            return out
        if not valid_group_id(group_id):
            out["error_code"] = INVALID_GROUP_ID
            return out
        g = self._table.get(group_id)
        if g is not None and g.state not in (EMPTY, DEAD):
            stable = g.state == STABLE
            out.update(group_state=g.state, protocol_type=g.protocol_type or "",
                       protocol_data=(g.protocol_name or "") if stable else "",
                       members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "member_metadata": m.metadata(g.protocol_name) if stable else b"",
                                 "member_assignment": m.assignment if stable else b""}
                                for m in g.members.values()])
            return out
        try:
            desc, has_offsets = await self._table.run(self._describe_store_group, group_id)
        except (PylogError, OSError):
            log.exception("group %r: could not describe", group_id)
            out["error_code"] = COORDINATOR_NOT_AVAILABLE
            return out
        if desc.members:
            out.update(group_state=STABLE, protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_data=desc.protocol,
                       members=[{"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                                 "client_host": f"pid:{m.pid}", "member_metadata": consumer_metadata(m.topics),
                                 "member_assignment": consumer_assignment(m.assignment)} for m in desc.members])
        elif g is not None or has_offsets or desc.generation > 0:
            out.update(group_state=EMPTY, protocol_type=(g.protocol_type if g is not None else None)
                       or CONSUMER_PROTOCOL_TYPE)
        else:
            out.update(group_state=DEAD)  # Kafka's answer for a group it does not know (before v6)
        return out

    def _describe_store_group(self, group_id: str) -> tuple[Any, bool]:
        return self._table.store.describe_consumer_group(group_id), bool(self._table.store.committed_offsets(group_id))

    async def delete_groups(self, request: dict[str, Any], version: int, *, client_id: str = "",
                            client_host: str = "") -> dict[str, Any]:
        results = []
        for gid in request.get("groups_names") or ():
            results.append({"group_id": gid, "error_code": await self._delete(gid)})
        return {"throttle_time_ms": 0, "results": results}

    async def _delete(self, group_id: Any) -> int:
        if self._table.closed:
            return NOT_COORDINATOR
        if not valid_group_id(group_id):
            return INVALID_GROUP_ID
        async with self._table.group_io(group_id):
            g = self._table.get(group_id)
            if g is not None and g.state != EMPTY:
                return NON_EMPTY_GROUP
            if g is not None:
                self._table.drop(group_id)  # Dead from here: a JoinGroup during the deletion starts a new group
            try:
                return await self._table.run(self._delete_blocking, group_id, g is not None)
            except (PylogError, OSError):
                log.exception("group %r: could not delete", group_id)
                return UNKNOWN_SERVER_ERROR

    def _delete_blocking(self, group_id: str, known: bool) -> int:
        desc = self._table.store.describe_consumer_group(group_id)
        if desc.members:
            return NON_EMPTY_GROUP
        if not known and desc.generation == 0 and not self._table.store.committed_offsets(group_id):
            return GROUP_ID_NOT_FOUND
        try:
            self._table.store.delete_consumer_group(group_id)
        except RebalanceInProgressError:
            return NON_EMPTY_GROUP
        log.info("group %r deleted", group_id)
        return NONE
