"""What ``pylog top`` draws: rates from consecutive :class:`~pylog.cli.top_sources.Sample` s, their history as
sparklines, and the screen as ``rich`` tables.

Invariants:
- A rate is the difference of two cumulative counts over the monotonic time between their samples. A count
  that went backwards (a server restarted, a topic created again) gives no rate for that interval (shown as
  ``-``), never a negative one; the first sample gives none either.
- Latency quantiles are those of the requests answered between two samples, interpolated within the
  histogram's buckets as Prometheus' ``histogram_quantile`` does; none when no request was answered.
- History is bounded: the last :data:`HISTORY` rates per row, whatever the run's length.
- Everything drawn is plain text (rich ``Text``, never markup): a topic named ``[red]`` shows as it is.
- On a narrow screen the sparklines narrow, then go, then the least telling columns go (each table names
  them in order): a number is shown whole or not at all, never cut short.
- Rows are ordered by what needs a look first: topics by records/s, groups by lag, highest first (then by name),
  so that on a screen too short for every row the ones cut off at the bottom are the quiet ones.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import deque
from typing import Any, Deque, Iterable, Sequence

from .output import format_bytes
from .top_sources import RequestSample, Sample

try:
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text
    HAVE_RICH = True
except ImportError:  # pylog top says it needs rich (pylog.cli.top); the rest of the CLI works without it
    HAVE_RICH = False

__all__ = ["HAVE_RICH", "HISTORY", "History", "sparkline", "rate", "histogram_quantile", "render", "SPARK_UNICODE",
           "SPARK_ASCII"]

#: Rates kept per row (one per refresh) for the sparklines.
HISTORY = 60
#: How many of them a sparkline shows.
SPARK_WIDTH = 30
#: A narrower sparkline says nothing: the column is left out.
_SPARK_MIN = 8
SPARK_UNICODE = "▁▂▃▄▅▆▇█"
#: For terminals that cannot show the blocks (a non-UTF-8 locale over SSH).
SPARK_ASCII = "_.-=+*#@"


def rate(before: float | None, now: float | None, seconds: float) -> float | None:
    """``(now - before) / seconds``; None when either is unknown, time did not pass, or the count went back."""
    if before is None or now is None or seconds <= 0 or now < before:
        return None
    return (now - before) / seconds


def sparkline(values: Iterable[float | None], width: int = SPARK_WIDTH, ramp: str = SPARK_UNICODE) -> str:
    """The last ``width`` values as one character each, scaled from 0 to their maximum (a space for None).
    All zero: the lowest character throughout (there is data, and it is flat)."""
    tail = list(values)[-width:]
    top = max((v for v in tail if v is not None), default=0.0)
    chars = []
    for v in tail:
        if v is None:
            chars.append(" ")
        elif top <= 0:
            chars.append(ramp[0])
        else:
            chars.append(ramp[min(len(ramp) - 1, int(max(v, 0.0) / top * (len(ramp) - 1) + 0.5))])
    return "".join(chars).rjust(width)  # a steady width from the first refresh on: the newest on the right


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram ``[(upper bound, count), ...]`` (ascending, last +inf),
    as Prometheus computes it: linear within the bucket holding the rank; the highest finite bound when the
    rank falls in the +inf bucket; None when the histogram is empty."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def _delta_buckets(before: RequestSample, now: RequestSample) -> list[tuple[float, float]] | None:
    """The histogram of the requests answered between two samples, or None after a reset."""
    if len(before.buckets) != len(now.buckets) or now.count < before.count:
        return None
    return [(b, c - c0) for (b, c), (_, c0) in zip(now.buckets, before.buckets, strict=True)]


class _Row:
    """One row's current values and the history of the value its sparkline draws."""

    def __init__(self) -> None:
        self.history: Deque[float | None] = deque(maxlen=HISTORY)
        self.values: dict[str, Any] = {}


class History:
    """Samples in, rows with rates and sparklines out. :meth:`add` one sample per refresh."""

    def __init__(self) -> None:
        self.last: Sample | None = None
        self.seconds: float | None = None
        self.topics: dict[str, _Row] = {}
        self.groups: dict[str, _Row] = {}
        self.requests: dict[str, _Row] = {}

    def add(self, sample: Sample) -> None:
        before = self.last
        dt = None if before is None else sample.at - before.at
        self.seconds = dt
        for name, t in sample.topics.items():
            prev = None if before is None else before.topics.get(name)
            row = self.topics.setdefault(name, _Row())
            row.values = {"partitions": t.partitions, "end": t.end_offset, "size": t.size_bytes}
            for key, attr in (("records_in", "end_offset"), ("bytes_in", "bytes_in"), ("records_out", "records_out"),
                              ("bytes_out", "bytes_out")):
                row.values[key] = _rate_of(getattr(prev, attr, None), getattr(t, attr), dt)
            row.history.append(row.values["records_in"])
        for name, g in sample.groups.items():
            row = self.groups.setdefault(name, _Row())
            row.values = {"members": g.members, "partitions": g.partitions, "lag": g.lag, "min_lead": g.min_lead}
            row.history.append(float(g.lag))
        for api, r in sample.requests.items():
            prev_r = None if before is None else before.requests.get(api)
            row = self.requests.setdefault(api, _Row())
            window = None if prev_r is None else _delta_buckets(prev_r, r)
            row.values = {
                "rate": _rate_of(getattr(prev_r, "count", None), r.count, dt),
                "errors": _rate_of(getattr(prev_r, "errors", None), r.errors, dt),
                "p50": None if window is None else histogram_quantile(0.5, window),
                "p99": None if window is None else histogram_quantile(0.99, window),
            }
            row.history.append(row.values["p99"])
        for rows, now in ((self.topics, sample.topics), (self.groups, sample.groups),
                          (self.requests, sample.requests)):
            for gone in set(rows) - set(now):
                del rows[gone]
        self.last = sample


def _rate_of(before: float | None, now: float | None, seconds: float | None) -> float | None:
    return None if seconds is None else rate(before, now, seconds)


# ------------------------------------------------------------------------------------------- drawing

def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"


def _per_s(v: float | None) -> str:
    return "-" if v is None else format_bytes(int(v)) + "/s"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


class _Section:
    """One table: named columns of text, and per row a history drawn as a sparkline in a last column as wide
    as the terminal leaves (up to :data:`SPARK_WIDTH`; left out when under :data:`_SPARK_MIN`): the numbers
    are never the ones cut short. ``none`` is what shows instead of a table without rows."""

    def __init__(self, title: str, *columns: str, history: str | None = None, left: tuple[str, ...] = (),
                 drop: tuple[str, ...] = (), spare: tuple[str, ...] = (), none: str = "none") -> None:
        self.title = title
        self.columns = columns
        self.history = history
        self.left = {0, *(i for i, c in enumerate(columns) if c in left)}
        #: The columns left out, in this order, while the table is wider than the screen.
        self.drop = drop
        #: The columns worth less than the sparkline: left out, in this order, to make room for it.
        self.spare = spare
        self.none = none
        self.rows: list[tuple[list[str], Iterable[float | None]]] = []

    def add(self, *cells: Any, history: Iterable[float | None] = ()) -> None:
        self.rows.append((["-" if c is None else str(c) for c in cells], history))

    def lines(self) -> int:
        """Screen lines it takes: title, blank, header, rule, rows, blank (or the one line of ``none``)."""
        return 5 + len(self.rows) if self.rows else 1

    def cap(self, rows: int) -> None:
        """At most ``rows`` rows, the last saying how many more there are (the rows are in order of interest)."""
        if len(self.rows) > rows:
            more = len(self.rows) - max(rows - 1, 0)
            self.rows[max(rows - 1, 0):] = [([f"(+{more} more)"] + [""] * (len(self.columns) - 1), ())]

    def renderable(self, width: int, ramp: str) -> Any:
        if not self.rows:
            return Text(f"{self.title}: {self.none}")
        widths = {i: max([len(c)] + [len(cells[i]) for cells, _ in self.rows]) for i, c in enumerate(self.columns)}

        def room() -> int:  # SIMPLE_HEAD: a space of padding each side of every column and one between columns
            return width - sum(widths.values()) - 3 * (len(widths) + 1)
        for names, wanted in ((self.spare, _SPARK_MIN + 3 if self.history else 0), (self.drop, 0)):
            for i in (self.columns.index(n) for n in names if n in self.columns):
                if room() >= wanted:
                    break
                widths.pop(i, None)
        spark = min(SPARK_WIDTH, room()) if self.history else 0
        t = Table(title=Text(self.title), title_justify="left", expand=False, box=box.SIMPLE_HEAD)
        for i, w in widths.items():
            t.add_column(Text(self.columns[i]), justify="left" if i in self.left else "right", no_wrap=True,
                         min_width=w)
        if spark >= _SPARK_MIN:
            t.add_column(Text(self.history or ""), no_wrap=True, min_width=spark)
        for cells, history in self.rows:
            extra = [Text(sparkline(history, spark, ramp) if history else "")] if spark >= _SPARK_MIN else []
            t.add_row(*(Text(cells[i]) for i in widths), *extra)
        return t


def render(history: History, source: str, interval: float, ramp: str = SPARK_UNICODE, width: int = 120,
           height: int | None = None) -> Any:
    """The whole screen, ``width`` columns wide: a header line, then topics, consumer groups, requests (when the
    source has any) and cleaners. With a ``height``, the topics and groups share what the rest leaves, each
    showing its rows of most interest and how many more there are: the cleaners stay on the screen."""
    last = history.last
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%H:%M:%S UTC")
    header = "  ".join([f"pylog top  {source}  {now}  every {interval:g} s", *([] if last is None else last.header),
                        "(q quits)"])
    topics, groups = _topics(history), _groups(history)
    rest = [s for s in (_requests(history), _cleaners(last)) if s is not None]
    problems = [f"problem: {p}" for p in ([] if last is None else last.problems)]
    if height is not None:
        header_lines = -(-len(header) // max(width, 1))
        fixed = header_lines + sum(s.lines() for s in rest) + len(problems) + sum(
            5 if s.rows else 1 for s in (topics, groups))  # their titles, headers and rules
        room = max(2, height - fixed)
        for_groups = min(len(groups.rows), max(1, room // 2))
        for_topics = max(1, room - for_groups)
        groups.cap(max(1, room - min(len(topics.rows), for_topics)))
        topics.cap(for_topics)
    sections = [topics, groups, *rest]
    return Group(Text(header), *(s.renderable(width, ramp) for s in sections), *map(Text, problems))


def _topics(history: History) -> _Section:
    last = history.last
    server = last is not None and any(t.records_out is not None for t in last.topics.values())
    out_columns = ("OUT-RECORDS/S", "OUT-BYTES/S") if server else ()
    topics = _Section("Topics", "TOPIC", "PARTITIONS", "LOG-END", "SIZE", "RECORDS/S", "BYTES/S", *out_columns,
                      history="RECORDS/S HISTORY", spare=("PARTITIONS", "SIZE"),
                      drop=("OUT-BYTES/S", "OUT-RECORDS/S", "LOG-END", "BYTES/S"))
    # busiest first, as top does (ties and the first refresh by name): the rows that matter stay on a short screen
    for name, row in sorted(history.topics.items(), key=lambda kv: (-(kv[1].values["records_in"] or 0), kv[0])):
        v = row.values
        out = [_num(v["records_out"]), _per_s(v["bytes_out"])] if server else []
        size = None if v["size"] is None else format_bytes(v["size"])
        topics.add(name, v["partitions"], v["end"], size, _num(v["records_in"]), _per_s(v["bytes_in"]), *out,
                   history=row.history)
    return topics


def _groups(history: History) -> _Section:
    groups = _Section("Consumer groups", "GROUP", "MEMBERS", "PARTITIONS", "LAG", "MIN-LEAD", history="LAG TREND",
                      spare=("PARTITIONS",), drop=("MEMBERS", "MIN-LEAD"))
    for name, row in sorted(history.groups.items(), key=lambda kv: (-kv[1].values["lag"], kv[0])):
        v = row.values
        groups.add(name, v["members"], v["partitions"], v["lag"], v["min_lead"], history=row.history)
    return groups


def _requests(history: History) -> _Section | None:
    if not history.requests:
        return None
    req = _Section("Requests", "API", "REQUESTS/S", "ERRORS/S", "P50-MS", "P99-MS", history="P99 HISTORY",
                   drop=("P50-MS", "ERRORS/S"))
    for api, row in sorted(history.requests.items()):
        v = row.values
        req.add(api, _num(v["rate"]), _num(v["errors"]), _ms(v["p50"]), _ms(v["p99"]), history=row.history)
    return req


def _cleaners(last: Sample | None) -> _Section:
    t = _Section("Cleaners", "CLEANER", "STATE", "HEARTBEAT", "LAST-RUN", "RUNS", "UNCLEANABLE", "DIRTY",
                 left=("STATE",), drop=("RUNS", "DIRTY", "LAST-RUN", "HEARTBEAT"),
                 none="none published (no process has the store open with its cleaner enabled)")
    for c in [] if last is None else last.cleaners:
        if c.process_alive is False:
            state = "process dead"
        else:  # "thread dead" when the process is known to live (a scrape says only alive or not)
            state = "thread dead" if c.thread == "dead" and c.process_alive else c.thread
        heartbeat = None if c.heartbeat_age is None else f"{c.heartbeat_age:.1f}s ago"
        last_run = None if c.last_run is None else _dt.datetime.fromtimestamp(
            c.last_run, _dt.timezone.utc).strftime("%H:%M:%SZ")
        dirty = None if c.max_dirty_ratio is None else f"{c.max_dirty_ratio:.2f}"
        t.add(c.name, state, heartbeat, last_run, c.runs, c.uncleanable, dirty)
    return t
