"""What ``pylog top`` shows, read from a store or scraped from a Prometheus endpoint: one :class:`Sample` per
refresh.

A sample holds cumulative counts (records and bytes per topic, requests per API) and current values (lag per
group, the cleaners' state); :mod:`pylog.cli.top_view` turns two consecutive samples into rates.

- :class:`StoreSource` reads a store through its public API, from any process, on a read-only handle: the
  partitions' log end offsets and segment sizes, the groups' lag (``store.group_lag``) and members, the
  cleaners every process publishes (``store.cleaners()``). A store has no bytes-in counter, so the source
  keeps one: the bytes appended to each partition's log files since the previous look (the growth of the
  segment that was active then, plus every segment rolled since).

Invariants:
- A source only reads: it never takes a writer lock, creates a file or changes a committed offset.
- The cumulative counts of one source never go backwards while the log ends only grow; a log end that went
  back (a topic deleted and created again, a repaired partition) is seen by the view as a reset (no rate for
  that interval), never as a negative rate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import PylogError
from ..maintenance.cleaner_registry import PublishedCleaner
from ..storage.filenames import OFFSETS_TOPIC, is_internal_topic
from ..storage.partition import Partition
from ..store import Store

__all__ = ["Sample", "TopicSample", "GroupSample", "CleanerSample", "RequestSample", "StoreSource"]


@dataclass
class TopicSample:
    partitions: int
    #: The sum of the partitions' log end offsets: every record ever appended (records in, cumulative).
    end_offset: int
    #: Bytes appended since the source started (store), or the server's bytes-in counter.
    bytes_in: int
    #: Records and bytes fetched by consumers (only a server counts them; None from a store).
    records_out: int | None = None
    bytes_out: int | None = None


@dataclass
class GroupSample:
    members: int | None
    #: Partitions the group has committed offsets for.
    partitions: int
    #: Total lag (log end - committed offset, summed over those partitions).
    lag: int
    #: The smallest lead (committed offset - log start); negative: retention deleted records unread.
    min_lead: int | None


@dataclass
class CleanerSample:
    name: str
    #: Whether the process that runs it is alive (None: unknown).
    process_alive: bool | None
    #: "alive", "dead", "disabled" or "?" (status unreadable).
    thread: str
    heartbeat_age: float | None
    #: time.time() of the end of its last run.
    last_run: float | None
    runs: int | None
    uncleanable: int | None
    #: The highest dirty ratio of the compacted partitions it writes.
    max_dirty_ratio: float | None = None


@dataclass
class RequestSample:
    """One API's requests since the server started: a count and its latency histogram."""

    count: float
    errors: float
    #: (upper bound in seconds, cumulative count), ascending, the last bound +inf.
    buckets: list[tuple[float, float]]


@dataclass
class Sample:
    #: time.monotonic() when it was taken.
    at: float
    topics: dict[str, TopicSample] = field(default_factory=dict)
    groups: dict[str, GroupSample] = field(default_factory=dict)
    cleaners: list[CleanerSample] = field(default_factory=list)
    #: Per API (server only).
    requests: dict[str, RequestSample] = field(default_factory=dict)
    #: What could not be read this time (shown under the tables).
    problems: list[str] = field(default_factory=list)


class StoreSource:
    """Samples of a store opened read-only (see the module docstring). Not thread-safe: one caller."""

    def __init__(self, store: Store, internal: bool = False) -> None:
        self.store = store
        self.label = store.path
        self.internal = internal
        #: (topic, partition) -> (base offset, size) of its active segment at the last look.
        self._active: dict[tuple[str, int], tuple[int, int]] = {}
        self._bytes: dict[str, int] = {}

    def sample(self) -> Sample:
        out = Sample(at=time.monotonic())
        for name in self.store.topics():
            if is_internal_topic(name) and not self.internal:
                continue
            try:
                out.topics[name] = self._topic(name)
            except PylogError as exc:  # deleted under us, or a damaged file: shown, not fatal
                out.problems.append(f"topic {name}: {exc}")
        for group in self.store.consumer_groups():
            try:
                out.groups[group] = self._group(group)
            except PylogError as exc:
                out.problems.append(f"group {group}: {exc}")
        out.cleaners = [_cleaner(c) for c in self.store.cleaners()]
        return out

    def _topic(self, name: str) -> TopicSample:
        partitions = self.store.topic(name).partitions
        end = 0
        for p in partitions:
            end += p.log_end_offset  # first: a reader looks for new segments and records here
            self._bytes[name] = self._bytes.get(name, 0) + self._appended(p)
        return TopicSample(len(partitions), end, self._bytes.get(name, 0))

    def _appended(self, p: Partition) -> int:
        """Bytes appended to ``p``'s log files since the last look: what the segment active then grew by,
        plus every segment after it. 0 at the first look, and when that segment was deleted or compacted since
        (retention and compaction only shrink the log: they are not bytes in)."""
        segments = p.segments
        key = (p.topic, p.number)
        before = self._active.get(key)
        if not segments:
            self._active.pop(key, None)
            return 0
        self._active[key] = (segments[-1].base_offset, segments[-1].size)
        if before is None:
            return 0
        base, size = before
        if not any(s.base_offset == base for s in segments):
            return 0
        return max(0, sum(s.size for s in segments if s.base_offset >= base) - size)

    def _group(self, group: str) -> GroupSample:
        lags = self.store.group_lag(group) if OFFSETS_TOPIC in self.store else {}
        members = len(self.store.describe_consumer_group(group).members)
        return GroupSample(members, len(lags), sum(v.lag for v in lags.values()),
                           min((v.lead for v in lags.values()), default=None))


def _cleaner(c: PublishedCleaner) -> CleanerSample:
    st = c.status
    if st is None:
        thread = "?"
    else:
        thread = "alive" if st.alive else ("disabled" if not st.enabled else "dead")
    return CleanerSample(
        name=f"pid {c.pid}", process_alive=c.process_alive, thread=thread, heartbeat_age=c.heartbeat_age(),
        last_run=None if st is None else st.last_run_end, runs=None if st is None else st.runs,
        uncleanable=None if st is None else len(st.uncleanable),
        max_dirty_ratio=max(st.dirty_ratios.values(), default=None) if st is not None else None)
