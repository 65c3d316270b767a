"""The groups ``pylog serve``'s coordinator holds: :class:`GroupTable`, their bounds and their saved state.

The table owns which groups exist in memory (``max_groups``; Empty groups are dropped to make room), how many
bytes their members hold (``max_member_bytes``), the lock that serialises each group's store writes (commits,
deletion: :meth:`GroupTable.group_io`) and the copy of each group's last stable (or empty) state that a
restarted server takes over (``Store.coordinator_groups`` / ``replace_coordinator_groups``, written by the
server's storage pool). It never
changes a group's membership: that is :mod:`pylog.server.coordinator`'s.

Invariants:
- At most ``max_groups`` groups are held; :meth:`GroupTable.make_room` drops only Empty groups with no member,
  no pending member and no store write under way, and a dropped group's committed offsets stay in the store.
- ``member_bytes()`` is the sum of every held group's ``held_bytes``, each recounted by :meth:`recount` after
  any change of its members, protocols or assignments.
- The saved state is written version by version, newest last: a write finds the newest snapshot and skips a
  version already written, so a slow write never overwrites a newer one (one writer at a time, a lock).
- Everything but :meth:`write_state` and the blocking readers runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from concurrent.futures import Executor
from typing import Any, AsyncIterator, Callable, Iterator, TypeVar

from ..errors import PylogError, RateLimitedLog
from ..store import SavedGroup, SavedMember
from .group import DEAD, EMPTY, STABLE, Group, Member, member_size

__all__ = ["GroupTable"]

log = logging.getLogger("pylog.server.coordinator")
#: Refusals a flood repeats (max_groups, member bytes): one line per 10 s, with the count left out.
rlog = RateLimitedLog(log)
#: After a scan for Empty groups to drop found none, new groups are refused without scanning for this long (s):
#: a flood of JoinGroups at ``max_groups`` would otherwise scan every group for each.
_FULL_RESCAN_S = 1.0

_T = TypeVar("_T")


class GroupTable:
    """The coordinator's groups by id, bounded, with their saved state (see the module docstring).

    :param store: the store (its path holds the saved state; ``describe_consumer_group`` tells pylog's own
        members).
    :param max_groups: groups held at once (None: no limit).
    :param max_member_bytes: bytes the members of all groups may hold (None: no limit).
    :param executor: where blocking store calls and the saved state's writes run (None: the loop's default).
    """

    def __init__(self, store: Any, *, max_groups: int | None = None, max_member_bytes: int | None = None,
                 executor: Executor | None = None) -> None:
        self.store = store
        self.max_groups = max_groups
        self.max_member_bytes = max_member_bytes
        self._executor = executor
        self._groups: dict[str, Group] = {}
        self._member_bytes = 0  # the sum of every group's held_bytes
        self._full_until = 0.0  # loop time until which make_room does not scan again (see _FULL_RESCAN_S)
        #: group id -> [lock, users]: serialises a group's store writes (commits, deletion).
        self._io_locks: dict[str, list[Any]] = {}
        self._closed = False
        #: Each group's last saved stable (or empty) state, and (version, groups) of the latest snapshot
        #: of them (immutable); the writer (the executor) writes a version once, the newest it finds (see save).
        self._saved: dict[str, SavedGroup] = {}
        self._snapshot: tuple[int, tuple[SavedGroup, ...]] = (0, ())
        self._written_version = 0
        self._write_queued = False
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ the groups

    @property
    def closed(self) -> bool:
        return self._closed

    def get(self, group_id: Any) -> Group | None:
        return self._groups.get(group_id) if isinstance(group_id, str) else None

    def __iter__(self) -> Iterator[Group]:
        return iter(list(self._groups.values()))

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, group_id: str) -> Group:
        """A new Empty group (the caller made room for it first: :meth:`make_room`)."""
        g = self._groups[group_id] = Group(group_id)
        return g

    def drop(self, group_id: str) -> None:
        """Forget ``group_id`` (deleted): Dead from now on, and no longer in the saved state."""
        g = self._groups.pop(group_id, None)
        if g is not None:
            g.state = DEAD
        self.forget(group_id)

    def close(self) -> list[Group]:
        """Stop holding groups: the last snapshot is written once more if its write failed; returns the groups
        that were held, for the coordinator to answer their waiting members."""
        self._closed = True
        if self._snapshot[0] > self._written_version:
            self._queue_write()  # a failed earlier write: once more (the server drains its executor on stop)
        groups = list(self._groups.values())
        self._groups.clear()
        return groups

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in the executor (a blocking store call)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @contextlib.asynccontextmanager
    async def group_io(self, group_id: str) -> AsyncIterator[None]:
        """Hold ``group_id``'s store-write lock (commits and deletion of one group land in order)."""
        entry = self._io_locks.get(group_id)
        if entry is None:
            entry = self._io_locks[group_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._io_locks[group_id]

    def pylog_members(self, group_id: str) -> int:
        """How many live members pylog's own (file-lock) consumers have in the group; blocking."""
        return len(self.store.describe_consumer_group(group_id).members)

    # ------------------------------------------------------------------ bounds

    def make_room(self) -> bool:
        """Whether one more group fits under ``max_groups``, after dropping Empty groups (no members, none asked
        to join again, no commit or deletion under way) when it is reached: all those that never completed a
        join phase (a JoinGroup flood with new group ids leaves only those), else the oldest tenth of the
        others. A dropped group's committed offsets stay in the store (as pylog's own groups' do); only its
        generation is forgotten, as Kafka forgets an Empty group whose offsets expired. One scan per drop of
        many groups, and none for :data:`_FULL_RESCAN_S` after one that found nothing to drop, so a flood costs
        amortised O(1) per JoinGroup."""
        if self.max_groups is None or len(self._groups) < self.max_groups:
            return True
        now = asyncio.get_running_loop().time()
        if now < self._full_until:
            return False
        idle = [g for g in self._groups.values()
                if g.state == EMPTY and not g.members and not g.pending and g.group_id not in self._io_locks]
        drop = [g for g in idle if g.generation_id == 0] or idle[:max(1, self.max_groups // 10)]
        saved = False
        for g in drop:
            g.cancel_join_timer()
            g.state = DEAD
            del self._groups[g.group_id]
            saved = self._saved.pop(g.group_id, None) is not None or saved
        if saved:
            self._snapshot_changed()
        if drop:
            rlog.log(logging.INFO, "groups dropped", "coordinator: %d empty group(s) dropped to stay within "
                     "max_groups=%d", len(drop), self.max_groups)
        else:
            self._full_until = now + _FULL_RESCAN_S
        return len(self._groups) < self.max_groups

    def member_bytes(self) -> int:
        """The bytes the members of all groups are counted with (``max_member_bytes`` bounds them)."""
        return self._member_bytes

    def recount(self, g: Group) -> None:
        """Count ``g``'s members again after a change of its members, protocols or assignments (a group's
        own count, so a change counted late is made right by the group's next recount)."""
        held = sum(member_size(m) for m in g.members.values())
        self._member_bytes += held - g.held_bytes
        g.held_bytes = held

    def over_member_bytes(self, g: Group, more: int, what: str, client_id: str, client_host: str) -> bool:
        """Whether ``more`` bytes of members would take the groups past ``max_member_bytes`` (logged)."""
        if self.max_member_bytes is None or self._member_bytes + more <= self.max_member_bytes:
            return False
        rlog.log(logging.WARNING, "member bytes", "group %r: %s from client %r (%s) refused: the groups' members "
                 "would hold more than max_member_bytes (%d)", g.group_id, what, client_id, client_host,
                 self.max_member_bytes)
        return True

    # ------------------------------------------------------------------ saved state

    async def load(self) -> list[Group]:
        """Take over the groups saved in the store (before serving any request): each comes back in the state
        it was saved in (Stable with its members, assignments and generation, or Empty); returns them (the
        coordinator starts their members' sessions). A damaged file is logged and ignored (every group starts
        empty, clients rejoin); a group that pylog's own consumers took over meanwhile is left to them."""
        try:
            saved = await self.run(self.store.coordinator_groups)
        except (PylogError, OSError) as exc:
            log.warning("the coordinator's saved groups cannot be read (%s); every group starts empty", exc)
            return []
        restored = []
        for sg in saved:
            if sg.members:
                try:
                    live = await self.run(self.pylog_members, sg.group_id)
                except (PylogError, OSError):
                    live = 1
                if live:
                    log.warning("group %r: not restored: pylog consumers use it through the store", sg.group_id)
                    continue
            g = self._groups[sg.group_id] = Group(sg.group_id, state=STABLE if sg.members else EMPTY,
                                                  generation_id=sg.generation, protocol_type=sg.protocol_type,
                                                  protocol_name=sg.protocol_name, leader_id=sg.leader)
            for sm in sg.members:
                m = Member(sm.member_id, sm.group_instance_id, sm.client_id, sm.client_host, sm.session_timeout_ms,
                           sm.rebalance_timeout_ms, sg.protocol_type or "", list(sm.protocols), sm.assignment)
                g.members[m.member_id] = m
                if m.group_instance_id is not None:
                    g.static[m.group_instance_id] = m.member_id
            self.recount(g)
            self._saved[sg.group_id] = sg
            restored.append(g)
        if saved:
            log.info("coordinator: restored %d group(s) (%d member(s)) from the store", len(self._saved),
                     sum(len(g.members) for g in self._saved.values()))
        return restored

    def save(self, g: Group) -> None:
        """Record ``g``'s state (Stable or Empty) as the one a restarted server takes over, and queue a write."""
        self._saved[g.group_id] = SavedGroup(
            g.group_id, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id if g.members else None,
            [SavedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                         m.rebalance_timeout_ms, list(m.protocols), m.assignment) for m in g.members.values()])
        self._snapshot_changed()

    def forget(self, group_id: str) -> None:
        if self._saved.pop(group_id, None) is not None:
            self._snapshot_changed()

    def _snapshot_changed(self) -> None:
        if self.store.read_only:
            return
        # One attribute, replaced whole: the writer thread reads a version and its groups together.
        self._snapshot = (self._snapshot[0] + 1, tuple(self._saved.values()))
        if not self._write_queued:
            self._queue_write()

    def _queue_write(self) -> None:
        self._write_queued = True
        fut = asyncio.get_running_loop().run_in_executor(self._executor, self.write_state)
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # write_state logs its own failures

    def write_state(self) -> bool:
        """Write the newest snapshot of the saved groups (blocking; the server's storage pool runs it), unless
        it is written already; False when the file system refused (logged; the next change tries again)."""
        with self._write_lock:
            self._write_queued = False  # cleared first: a change from now on queues another write
            version, groups = self._snapshot
            if version <= self._written_version:
                return True
            try:
                self.store.replace_coordinator_groups(groups)
            except (PylogError, OSError) as exc:
                log.warning("the coordinator's groups could not be saved (%s): a restart would lose their "
                            "membership", exc)
                return False
            self._written_version = version
            return True
