"""What ``pylog top`` shows, read from a store or scraped from a Prometheus endpoint: one :class:`Sample` per
refresh.

A sample holds cumulative counts (records and bytes per topic, requests per API) and current values (lag per
group, the cleaners' state); :mod:`pylog.cli.top_view` turns two consecutive samples into rates.

- :class:`StoreSource` reads a store through its public API, from any process, on a read-only handle: the
  partitions' log end offsets and segment sizes, the groups' lag (``store.group_lag``) and members, the
  cleaners every process publishes (``store.cleaners()``). A store has no bytes-in counter, so the source
  keeps one: the bytes appended to each partition's log files since the previous look (the growth of the
  segment that was active then, plus every segment rolled since). A topic that another process deleted and
  created again is read afresh (a new store handle), not through the old topic's partitions.
- :class:`ScrapeSource` scrapes a Prometheus text endpoint (``pylog serve --metrics-port``, ``pylog metrics``)
  and reads the metrics :mod:`pylog.metrics` names (parsed with ``prometheus_client``'s parser): log end
  offsets, bytes in and out, requests and their latency histogram per API, lag, cleaners. An answer it cannot
  read (down, too large, not the text format) is a problem line of that sample, not the end of the view.

Invariants:
- A source only reads: it never takes a writer lock, creates a file or changes a committed offset.
- The cumulative counts of one source never go backwards while the log ends only grow; a log end that went
  back (a topic deleted and created again, a repaired partition) is seen by the view as a reset (no rate for
  that interval), never as a negative rate.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..errors import PylogError
from ..maintenance.cleaner_registry import PublishedCleaner
from ..storage.filenames import OFFSETS_TOPIC, is_internal_topic
from ..partition import Partition
from .base import open_store_for_scans
from .output import format_bytes

try:
    from prometheus_client.parser import text_string_to_metric_families
    HAVE_PARSER = True
except ImportError:  # the metrics extra is not installed: --bootstrap says so (pylog.cli.top)
    HAVE_PARSER = False

__all__ = ["Sample", "TopicSample", "GroupSample", "CleanerSample", "RequestSample", "StoreSource", "ScrapeSource",
           "HAVE_PARSER", "MAX_SCRAPE_BYTES", "scrape_url", "parse_exposition",
           "sample_of"]

#: The largest /metrics answer read (a store of 100,000 partitions answers ~30 MiB); beyond, a problem line.
MAX_SCRAPE_BYTES = 64 << 20


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
    #: Bytes of the partitions' segment files now (None when the source does not say).
    size_bytes: int | None = None


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
    #: Figures of the whole source for the header line (a server's connections, event loop busy ratio).
    header: list[str] = field(default_factory=list)


class StoreSource:
    """Samples of the store at ``path``, opened read-only with the whole descriptor budget (see the module
    docstring); :meth:`close` closes it (or use it as a context manager). Not thread-safe: one caller.

    A store handle keeps the topics it opened; a topic another process deleted and created again (its
    directory is another one) would be read through the old topic's partitions. So each sample checks that
    every topic's directory is the one first seen, and opens the store afresh when one is not.
    """

    def __init__(self, path: str, internal: bool = False) -> None:
        self.path = path
        self.internal = internal
        self._stack = contextlib.ExitStack()
        self.store = self._stack.enter_context(open_store_for_scans(path))
        self.label = self.store.path
        #: topic -> its directory and that directory's (device, inode) when first looked at through this handle.
        self._dirs: dict[str, tuple[str, tuple[int, int]]] = {}
        #: (topic, partition) -> (base offset, size) of its active segment at the last look.
        self._active: dict[tuple[str, int], tuple[int, int]] = {}
        self._bytes: dict[str, int] = {}

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "StoreSource":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def sample(self) -> Sample:
        out = Sample(at=time.monotonic())
        names = [n for n in self.store.topics() if self.internal or not is_internal_topic(n)]
        if any(_identity(self._dirs[n][0]) not in (None, self._dirs[n][1]) for n in names if n in self._dirs):
            self._reopen()
        for name in names:
            try:
                out.topics[name] = self._topic(name)
            except (PylogError, OSError) as exc:  # deleted under us, a damaged or unreadable file: shown, not fatal
                out.problems.append(f"topic {name}: {exc}")
        for group in self.store.consumer_groups():
            try:
                out.groups[group] = self._group(group)
            except (PylogError, OSError) as exc:
                out.problems.append(f"group {group}: {exc}")
        out.cleaners = [_cleaner(c) for c in self.store.cleaners()]
        out.header.append(_disk(self.store.path))
        return out

    def _reopen(self) -> None:
        """A fresh read-only handle (the old one's topics are stale); counts of topics kept go on from theirs."""
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.store = self._stack.enter_context(open_store_for_scans(self.path))
        self._dirs.clear()
        self._active.clear()  # the next look at each partition counts no bytes: nothing known to compare with

    def _topic(self, name: str) -> TopicSample:
        topic = self.store.topic(name)
        if name not in self._dirs:
            identity = _identity(topic.directory)
            if identity is not None:
                self._dirs[name] = (topic.directory, identity)
        end = size = 0
        for p in topic.partitions:
            end += p.log_end_offset  # first: a reader looks for new segments and records here
            self._bytes[name] = self._bytes.get(name, 0) + self._appended(p)
            size += p.size_bytes()
        return TopicSample(topic.num_partitions, end, self._bytes.get(name, 0), size_bytes=size)

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


def _disk(path: str) -> str:
    """The file system holding the store: how full it is (appends fail at 100%: docs/OPERATIONS.md, "Disk full")."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return f"disk: {exc.strerror}"
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    used = 100 * (1 - free / total) if total else 0.0
    return f"disk {used:.0f}% used, {format_bytes(free)} free"


def _identity(path: str) -> tuple[int, int] | None:
    """``path``'s (device, inode), None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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


#: Scraped series: metric sample name -> [(labels, value)].
Series = dict[str, list[tuple[dict[str, str], float]]]


class ScrapeSource:
    """Samples scraped from ``url`` (see the module docstring). ``timeout`` bounds each scrape (seconds)."""

    def __init__(self, url: str, label: str, timeout: float = 5.0) -> None:
        self.url = url
        self.label = label
        self.timeout = timeout

    def sample(self) -> Sample:
        try:
            text = self._fetch()
        except (OSError, ValueError, UnicodeDecodeError) as exc:  # URLError and HTTPError are OSErrors
            out = Sample(at=time.monotonic())
            out.problems.append(f"scraping {self.url}: {exc}")
            return out
        return sample_of(text, self.url)

    def _fetch(self) -> str:
        with urllib.request.urlopen(self.url, timeout=self.timeout) as answer:  # noqa: S310 - http(s) only
            body = answer.read(MAX_SCRAPE_BYTES + 1)
        if len(body) > MAX_SCRAPE_BYTES:
            raise ValueError(f"the answer is larger than {MAX_SCRAPE_BYTES} bytes")
        return body.decode("utf-8")


def sample_of(text: str, where: str) -> Sample:
    """The sample an exposition ``text`` holds; text that is not Prometheus' format, or values that are not
    numbers where counts belong (NaN, infinities, a bucket bound that is no number), give an empty sample with
    a problem line naming ``where``."""
    out = Sample(at=time.monotonic())
    try:
        series = parse_exposition(text)
        _topics_from(series, out)
        _groups_from(series, out)
        _requests_from(series, out)
        _cleaners_from(series, out)
        for name, what, scale, unit in (("pylog_server_connections", "connections", 1, ""),
                                        ("pylog_server_event_loop_busy_ratio", "event loop busy", 100, "%")):
            for _, value in series.get(name, ()):
                out.header.append(f"{what} {value * scale:.0f}{unit}")
    except (ValueError, OverflowError) as exc:  # int() of NaN or an infinity, float() of a bad bound
        return Sample(at=out.at, problems=[f"scraping {where}: {exc}"])
    return out


def scrape_url(address: str) -> str:
    """The /metrics URL of ``HOST:PORT`` (or of a URL given whole). :raises ValueError: for anything else."""
    if address.startswith(("http://", "https://")):
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT (the port of `pylog serve --metrics-port`)")
    return f"http://{host}:{port}/metrics"


def parse_exposition(text: str) -> Series:
    """Prometheus' text format as series by sample name (samples whose value is NaN or infinite left out).
    :raises ValueError: for text that is not that format."""
    series: Series = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            value = float(s.value)
            if math.isfinite(value):  # no count, offset or lag is NaN or infinite: such a sample says nothing
                series[s.name].append((s.labels, value))
    return series


def _sums(series: Series, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, value in series.get(name, ()):
        out[tuple(labels.get(k, "") for k in keys)] += value
    return out


def _topics_from(series: Series, out: Sample) -> None:
    ends = series.get("pylog_log_end_offset", ())
    partitions: dict[str, int] = defaultdict(int)
    for labels, _ in ends:
        partitions[labels.get("topic", "")] += 1
    end = _sums(series, "pylog_log_end_offset", "topic")
    bytes_in = _sums(series, "pylog_topic_bytes_in_total", "topic")
    records_out = _sums(series, "pylog_topic_records_out_total", "topic")
    bytes_out = _sums(series, "pylog_topic_bytes_out_total", "topic")
    sizes = _sums(series, "pylog_log_size_bytes", "topic")
    for (topic,), value in end.items():
        if is_internal_topic(topic):
            continue
        key = (topic,)
        size = sizes.get(key)
        out.topics[topic] = TopicSample(partitions[topic], int(value), int(bytes_in.get(key, 0)),
                                        int(records_out.get(key, 0)), int(bytes_out.get(key, 0)),
                                        None if size is None else int(size))


def _groups_from(series: Series, out: Sample) -> None:
    lag = _sums(series, "pylog_group_lag", "group")
    parts: dict[str, int] = defaultdict(int)
    lead: dict[str, float] = {}
    for labels, _ in series.get("pylog_group_lag", ()):
        parts[labels.get("group", "")] += 1
    for labels, value in series.get("pylog_group_lead", ()):
        g = labels.get("group", "")
        lead[g] = min(value, lead.get(g, value))
    members = _sums(series, "pylog_group_members", "group")
    for (group,) in set(lag) | set(members):
        m = members.get((group,))
        out.groups[group] = GroupSample(None if m is None else int(m), parts[group], int(lag.get((group,), 0)),
                                        None if group not in lead else int(lead[group]))


def _requests_from(series: Series, out: Sample) -> None:
    counts = _sums(series, "pylog_server_requests_total", "api")
    errors = _sums(series, "pylog_server_request_errors_total", "api")
    buckets: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for labels, value in series.get("pylog_server_request_duration_seconds_bucket", ()):
        buckets[labels.get("api", "")].append((float(labels.get("le", "+Inf")), value))
    for (api,), count in counts.items():
        out.requests[api] = RequestSample(count, errors.get((api,), 0.0), sorted(buckets.get(api, [])))


def _cleaners_from(series: Series, out: Sample) -> None:
    def by_pid(name: str) -> dict[str, float]:
        return {labels.get("pid", ""): value for labels, value in series.get(name, ())}
    alive = by_pid("pylog_cleaner_alive")
    age = by_pid("pylog_cleaner_heartbeat_age_seconds")
    last = by_pid("pylog_cleaner_last_run_timestamp_seconds")
    runs = by_pid("pylog_cleaner_runs_total")
    uncleanable = by_pid("pylog_cleaner_uncleanable_partitions")
    for pid in sorted(alive, key=lambda p: (len(p), p)):
        out.cleaners.append(CleanerSample(
            name=f"pid {pid}", process_alive=None, thread="alive" if alive[pid] else "dead",
            heartbeat_age=age.get(pid), last_run=last.get(pid) or None,
            runs=None if pid not in runs else int(runs[pid]),
            uncleanable=None if pid not in uncleanable else int(uncleanable[pid])))
