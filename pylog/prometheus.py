"""Prometheus exposition of pylog's metrics (:mod:`pylog.metrics` names them): for an application's own
registry, for ``pylog serve --metrics-port`` and for the ``pylog metrics STORE`` exporter.

Public API::

    import pylog, pylog.prometheus
    store = pylog.open("data")
    pylog.prometheus.register(store)          # into prometheus_client's default REGISTRY (or registry=...)
    # or a registry of its own and an HTTP endpoint serving /metrics and /health:
    endpoint = pylog.prometheus.start_http_server(pylog.prometheus.registry(store), port=9308)

Needs the ``metrics`` extra (``prometheus-client``); without it every entry point raises
:class:`~pylog.errors.MetricsUnavailableError`, and the rest of pylog works as before (nothing records).

This module sits above the server and below the applications (it reads the store, the clients and the
server; the command line imports it, nothing below does). The recorders it exposes live in the shared
:mod:`pylog.metrics`, which every layer may count into without depending on the library.

Invariants:
1. One :class:`PylogCollector` yields every pylog metric once per scrape: the process's counters and
   histograms (recorded on the hot paths), the live clients' and servers' gauges, and the store's gauges
   read from its files at scrape time (never on a hot path).
2. A scrape reads; it never writes the store, takes a writer lock, or waits for one. It reads the partitions
   this process writes through their writer handles and the others through a read-only handle of the store,
   so it never takes a place in the store's descriptor budget from a partition being written.
3. A scrape's cost grows with the partitions (one look at each one's files, ~15-20 us) and the series
   (~3.5 us each to format, the library's); a store of 1,000 partitions is ~7,000 series and ~50 ms of CPU
   formatted whole. The endpoints (:class:`MetricsEndpoint`) format through :class:`Exposition`, which
   reuses the library's text of a family equal to the previous scrape's: the per-partition families of a
   store whose partitions did not change cost a comparison, not a formatting (benchmarks/bench_metrics.py
   measures it). Its text is always ``generate_latest``'s, byte for byte.
4. Registering turns recording on (:func:`pylog.metrics.enable`); counters count from then on.
"""

from __future__ import annotations

import gc
import http.server
import itertools
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from . import __version__, metrics
from .accel import ACCELERATED
from .clients.consumer import Consumer
from .clients.producer import Producer
from .errors import MetricsUnavailableError, PylogError, UnknownTopicError
from .maintenance.cleaner_registry import PublishedCleaner
from .storage.handles import descriptor_limit
from .store import Store
from .topic import opened_partitions

if TYPE_CHECKING:  # not imported at run time: the command line would pay for the server at every start
    from .server import Server

try:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                        Metric as _PromMetric)
    from prometheus_client.registry import REGISTRY, CollectorRegistry
    from prometheus_client.samples import Sample
    AVAILABLE = True
except ImportError:  # the metrics extra is not installed
    AVAILABLE = False

__all__ = ["AVAILABLE", "PylogCollector", "register", "registry", "start_http_server", "MetricsEndpoint",
           "exposition", "Exposition", "store_health", "server_health", "require"]

#: A /health answer: (healthy, text).
Health = Callable[[], "tuple[bool, str]"]


def require() -> None:
    """Raise :class:`MetricsUnavailableError` unless ``prometheus-client`` is installed."""
    if not AVAILABLE:
        raise MetricsUnavailableError("metrics need the prometheus-client library: "
                                      "pip install 'pylog-embedded[metrics]'")


class PylogCollector:
    """A ``prometheus_client`` collector of every pylog metric: the process's, and those of ``store`` (a Store)
    and/or ``server`` (a :class:`~pylog.server.Server`, whose store it reads once it serves)."""

    def __init__(self, store: Store | None = None, server: Server | None = None) -> None:
        require()
        self._store = store
        self._server = server
        self._busy_lock = threading.Lock()
        self._busy_last: dict[int, tuple[float, float]] = {}  # id(server) -> (wall, cpu) at the last scrape
        #: A read-only Store per store path, for the partitions this process does not write (see _store_gauges);
        #: closed by close() or when the collector is collected.
        self._views: dict[str, Store] = {}
        self._views_lock = threading.Lock()
        weakref.finalize(self, _close_all, self._views)
        #: The per-partition label dicts of the previous scrape, reused by the next (see _Families.labels).
        self._labels: dict[tuple[str, ...], dict[str, str]] = {}
        #: What the previous scrape read of each partition read through the view, with its files' stamp.
        self._looked: dict[tuple[str, str, int], _Looked] = {}

    def close(self) -> None:
        """Close the read-only handles the scrapes opened (the collector opens them again if scraped)."""
        with self._views_lock:
            _close_all(self._views)

    def _view(self, store: Store) -> Store:
        """The store to read the partitions this process does not write through: ``store`` itself when it is
        read-only, else a read-only handle of the same path. Reading them through ``store`` would make them its
        most recently used partitions: past its descriptor budget, every scrape would make the partitions it
        writes let go of their files (and writer locks)."""
        if store.read_only:
            return store
        with self._views_lock:
            view = self._views.get(store.path)
            if view is None or view.closed:
                view = self._views[store.path] = Store(store.path, read_only=True,
                                                       max_open_descriptors=max(1, descriptor_limit() // 4))
            return view

    def describe(self) -> list:
        return []  # not described up front: the registry then never collects at registration

    def collect(self) -> Iterator[_PromMetric]:
        # The cyclic GC paused while the samples are made: a store of 1,000 partitions makes ~8,000 of them
        # (each a tuple and a dict), and the collections they would set off scan all the process's objects.
        paused = gc.isenabled()
        gc.disable()
        try:
            families = self._families()
        finally:
            if paused:
                gc.enable()
        yield from families.done()

    def _families(self) -> "_Families":
        began = time.perf_counter()
        families = _Families(self._labels)
        families.gauge("pylog_info", (__version__, "true" if ACCELERATED else "false"), 1)
        for rec in metrics.recorders():
            families.recorded(rec)
        servers: list[Server] = metrics.tracked("server")
        if self._server is not None and self._server not in servers:
            servers.append(self._server)
        for producer in metrics.tracked("producer"):
            _producer_gauges(families, producer)
        for consumer in metrics.tracked("consumer"):
            _consumer_gauges(families, consumer)
        store = self._store if self._store is not None else (self._server.store if self._server else None)
        held: dict[str, tuple[int, int]] = {}  # group -> (generation, members) from a server of this store
        for server in servers:
            self._server_gauges(families, server, held if server.store is store else None)
        if store is not None and not store.closed:
            self._looked = _store_gauges(families, store, self._view(store), held, self._looked)
            families.gauge("pylog_scrape_duration_seconds", (), time.perf_counter() - began)
        self._labels = families.labels_made
        return families

    def _server_gauges(self, families: "_Families", server: Server, held: dict[str, tuple[int, int]] | None) -> None:
        cpu = server.loop_cpu_seconds()
        if cpu is None:
            return
        families.gauge("pylog_server_connections", (), server.resources()["connections"])
        families.counter("pylog_server_event_loop_busy_seconds_total", (), cpu)
        now = time.monotonic()
        with self._busy_lock:
            last = self._busy_last.get(id(server))
            self._busy_last[id(server)] = (now, cpu)
        if last is not None and now > last[0]:
            families.gauge("pylog_server_event_loop_busy_ratio", (), min(1.0, max(0.0, (cpu - last[1]) /
                                                                                  (now - last[0]))))
        for group, generation, members, rebalances in server.group_counts():
            families.counter("pylog_group_rebalances_total", (group,), rebalances)
            if held is not None:
                held[group] = (generation, members)


def _close_all(views: dict[str, Store]) -> None:
    for view in list(views.values()):
        view.close()
    views.clear()


class _Families:
    """The metric families of one scrape, by name (each made on first use, with its table entry's help)."""

    def __init__(self, labels_before: dict[tuple[str, ...], dict[str, str]]) -> None:
        self._families: dict[str, Any] = {}
        self._labels_before = labels_before
        #: The label dicts this scrape used, by their values: the next scrape's labels_before.
        self.labels_made: dict[tuple[str, ...], dict[str, str]] = {}

    def labels(self, names: tuple[str, ...], values: tuple[str, ...]) -> dict[str, str]:
        """The label dict of ``names`` = ``values``: the previous scrape's same dict when it had one. Thousands
        of per-partition samples are made again every scrape; the same dict object saves making it, and makes
        comparing a family with the previous scrape's (:class:`Exposition`) an identity check per label set.
        Callers never change a label dict."""
        made = self._labels_before.get(values)
        if made is None:
            made = dict(zip(names, values, strict=True))
        self.labels_made[values] = made
        return made

    def _family(self, name: str) -> Any:
        fam = self._families.get(name)
        if fam is None:
            m = metrics.BY_NAME[name]
            kind = {metrics.COUNTER: CounterMetricFamily, metrics.GAUGE: GaugeMetricFamily,
                    metrics.HISTOGRAM: HistogramMetricFamily}[m.kind]
            fam = self._families[name] = kind(name, m.help, labels=m.labels)
        return fam

    def gauge(self, name: str, labels: tuple[str, ...], value: float) -> None:
        self._family(name).add_metric(labels, value)

    def counter(self, name: str, labels: tuple[str, ...], value: float) -> None:
        self._family(name).add_metric(labels, value)

    def many(self, name: str, labels: list[dict[str, str]], values: Sequence[float]) -> None:
        """Samples of gauge ``name``, one per label dict (keyed by the metric's label names) and value: the bulk
        path of the per-partition gauges (a scrape of 1,000 partitions adds 7,000 samples)."""
        self._family(name).samples.extend(map(Sample, itertools.repeat(name), labels, values))

    def recorded(self, rec: metrics.Counter | metrics.Histogram) -> None:
        name = rec.metric.name
        if isinstance(rec, metrics.Histogram):
            for labels, buckets, total in rec.values():
                self._family(name).add_metric(labels, buckets, total)
        else:
            for labels, value in rec.values():
                self._family(name).add_metric(labels, value)

    def done(self) -> Iterable[_PromMetric]:
        return self._families.values()


def _producer_gauges(families: _Families, producer: Producer) -> None:
    try:
        available = producer.config["buffer_memory"] - producer.metrics()["buffered_bytes"]
    except PylogError:
        return
    families.gauge("pylog_producer_buffer_available_bytes", (_client(producer.config),), max(0, available))


def _consumer_gauges(families: _Families, consumer: Consumer) -> None:
    try:
        # Read from the scrape's thread while the consumer's own may poll: a change under way (a rebalance)
        # makes this scrape skip the consumer rather than fail.
        report = consumer.metrics()
    except (PylogError, RuntimeError, KeyError):
        return
    fetch = report["consumer-fetch-manager-metrics"]
    label = (_client(consumer.config),)
    if fetch.get("records-lag-max") is not None:
        families.gauge("pylog_consumer_records_lag_max", label, fetch["records-lag-max"])
    leads = [v["lead"] for v in report.values() if isinstance(v, dict) and v.get("lead") is not None]
    if leads:
        families.gauge("pylog_consumer_records_lead_min", label, min(leads))


def _client(config: Any) -> str:
    client_id = config.get("client_id")
    return "" if client_id is None else str(client_id)


_TP, _GTP = ("topic", "partition"), ("group", "topic", "partition")


#: (the partition's active segment file, the stamp of its files, (log start, log end, size, segments)).
_Looked = tuple[str, tuple[int, ...], tuple[int, int, int, int]]
#: Seconds a partition's files must have been left alone before their stamp is trusted (see _files_stamp).
_SETTLED = 1.0


def _files_stamp(directory: str, active: str) -> tuple[int, ...] | None:
    """The identity of a partition's files whose change means its gauges may have changed: its directory's
    (an entry made, removed or renamed: a roll, a checkpoint rewritten when segments are deleted or swapped or
    the log start moves, a topic recreated) and its active segment's (appends). None when either changed
    within :data:`_SETTLED` seconds: a file system keeps modification times to a clock tick, so a change made
    later in the same tick would leave a stamp taken now unchanged (the "racy" case); only settled files are
    trusted, and when either is gone (a roll and retention, a topic deleted: the caller looks again)."""
    try:
        d, a = os.stat(directory), os.stat(active)
    except OSError:
        return None
    if time.time() - max(d.st_mtime, a.st_mtime) < _SETTLED:
        return None
    return d.st_ino, d.st_mtime_ns, a.st_ino, a.st_size, a.st_mtime_ns


def _store_gauges(families: _Families, store: Store, view: Store, held: dict[str, tuple[int, int]],
                  looked_before: dict[tuple[str, str, int], _Looked]) -> dict[tuple[str, str, int], _Looked]:
    """The store's gauges from its files: offsets, sizes and segments per partition, groups' progress and
    membership, the published cleaners. A partition this process writes is read through its writer handle
    (exact, and no file to look at); the others through ``view`` (see PylogCollector._view), but only when
    their files' stamp (:func:`_files_stamp`: two ``stat`` calls) moved since ``looked_before``, the previous
    scrape's looks: an idle partition's gauges are the previous scrape's. Returns this scrape's looks."""
    looked: dict[tuple[str, str, int], _Looked] = {}
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    labels: list[dict[str, str]] = []
    starts, ends, sizes, counts = [], [], [], []
    for name in view.topics():
        try:
            topic = view.topic(name)
            written = {p.number: p for p in opened_partitions(store.topic(name)) if p.is_writer} \
                if view is not store else {}
        except (UnknownTopicError, PylogError):  # deleted meanwhile
            continue
        for number in range(topic.num_partitions):
            try:
                p = written.get(number)
                if p is not None:
                    start, end = p.offsets()
                    segments = p.segments
                    size, count = sum(s.size for s in segments), len(segments)
                else:
                    p = topic.partition(number)
                    key = (view.path, name, number)
                    before = looked_before.get(key)
                    stamp = None if before is None else _files_stamp(p.directory, before[0])
                    if stamp is not None and before is not None and stamp == before[1]:
                        start, end, size, count = before[2]
                        looked[key] = before
                    else:
                        start, end = p.offsets()
                        segments = p.segments
                        size, count = sum(s.size for s in segments), len(segments)
                        # The stamp taken after the look: a change made meanwhile is too recent for a stamp
                        # (None: _SETTLED), so no stamp is ever older than the values kept with it.
                        if segments:
                            active = segments[-1].log_path
                            stamp = _files_stamp(p.directory, active)
                            if stamp is not None:
                                looked[key] = (active, stamp, (start, end, size, count))
            except (PylogError, OSError):  # deleted or damaged meanwhile: the next scrape sees it again
                continue
            offsets[(name, number)] = (start, end)
            labels.append(families.labels(_TP, (name, str(number))))
            starts.append(start)
            ends.append(end)
            sizes.append(size)
            counts.append(count)
    for metric, values in (("pylog_log_start_offset", starts), ("pylog_log_end_offset", ends),
                           ("pylog_log_size_bytes", sizes), ("pylog_log_segments", counts)):
        families.many(metric, labels, values)
    _group_gauges(families, view, offsets, held)
    _cleaner_gauges(families, view.cleaners())
    return looked


def _group_gauges(families: _Families, store: Store, offsets: dict[tuple[str, int], tuple[int, int]],
                  held: dict[str, tuple[int, int]]) -> None:
    """Committed offset, lag and lead per partition (as ``store.group_lag``: negative commits and partitions
    of deleted topics left out), generation and members per group (the server's when it holds the group)."""
    labels: list[dict[str, str]] = []
    committed_at, lags, leads = [], [], []
    for group in store.consumer_groups():
        try:
            committed = store.committed_offsets(group)
        except PylogError:
            continue
        for tp, om in committed.items():
            bounds = offsets.get((tp.topic, tp.partition))
            if bounds is None or om.offset < 0:
                continue
            labels.append(families.labels(_GTP, (group, tp.topic, str(tp.partition))))
            committed_at.append(om.offset)
            lags.append(max(0, bounds[1] - om.offset))
            leads.append(om.offset - bounds[0])
        if group not in held:
            try:
                desc = store.describe_consumer_group(group)
            except PylogError:
                continue
            held[group] = (desc.generation, len(desc.members))
    for metric, values in (("pylog_group_committed_offset", committed_at), ("pylog_group_lag", lags),
                           ("pylog_group_lead", leads)):
        families.many(metric, labels, values)
    for group, (generation, members) in held.items():
        families.gauge("pylog_group_generation", (group,), generation)
        families.gauge("pylog_group_members", (group,), members)


def _cleaner_gauges(families: _Families, cleaners: list[PublishedCleaner]) -> None:
    now = time.time()
    dirty: dict[str, tuple[float, float]] = {}  # "topic-partition" -> (heartbeat, ratio): the latest report
    for c in cleaners:
        pid, status = (str(c.pid),), c.status
        families.gauge("pylog_cleaner_alive", pid, int(c.process_alive and status is not None and status.alive))
        age = c.heartbeat_age(now)
        if age is not None:
            families.gauge("pylog_cleaner_heartbeat_age_seconds", pid, age)
        if status is None:
            continue
        if status.last_run_end is not None:
            families.gauge("pylog_cleaner_last_run_timestamp_seconds", pid, status.last_run_end)
        families.counter("pylog_cleaner_runs_total", pid, status.runs)
        families.counter("pylog_cleaner_cleaned_bytes_total", pid, status.bytes_read)
        families.counter("pylog_cleaner_deleted_bytes_total", pid, status.bytes_deleted)
        families.counter("pylog_cleaner_aborted_records_removed_total", pid, status.aborted_removed)
        families.counter("pylog_cleaner_markers_removed_total", pid, status.markers_removed)
        families.gauge("pylog_cleaner_uncleanable_partitions", pid, len(status.uncleanable))
        for tp, ratio in status.dirty_ratios.items():
            seen = c.heartbeat or 0.0
            if tp not in dirty or dirty[tp][0] < seen:
                dirty[tp] = (seen, ratio)
    for tp, (_, ratio) in sorted(dirty.items()):
        topic, _, number = tp.rpartition("-")
        families.gauge("pylog_cleaner_dirty_ratio", (topic, number), ratio)


def register(store: Store | None = None, registry: Any = None, server: Server | None = None) -> "PylogCollector":
    """Add pylog's metrics (the process's, and ``store``'s or ``server``'s) to ``registry`` (default:
    ``prometheus_client.REGISTRY``, which an application's existing ``/metrics`` endpoint serves) and turn
    recording on. Returns the collector (``registry.unregister(it)`` removes it; its ``close()`` closes the
    read-only handle of the store its scrapes opened).

    :raises MetricsUnavailableError: without the ``metrics`` extra."""
    require()
    collector = PylogCollector(store, server)
    (REGISTRY if registry is None else registry).register(collector)
    metrics.enable()
    return collector


def registry(store: Store | None = None, server: Server | None = None) -> Any:
    """A new ``CollectorRegistry`` holding only pylog's metrics (see :func:`register`)."""
    require()
    reg = CollectorRegistry(auto_describe=False)
    register(store, reg, server)
    return reg


def exposition(reg: Any) -> bytes:
    """``reg``'s metrics in Prometheus' text format (each call formats every family: see :class:`Exposition`
    for an endpoint's repeated scrapes)."""
    require()
    return bytes(generate_latest(reg))


class Exposition:
    """``reg``'s metrics in Prometheus' text format, scrape after scrape: each family's text is the library's
    (``generate_latest`` of that family alone; the text format is the families' texts one after the other), and
    a family whose samples, type and help equal the previous scrape's reuses that scrape's text instead of
    formatting its samples again. Formatting is most of a scrape's cost (~3.5 us a series), and a store's
    per-partition families (thousands of series) mostly stay the same from one second to the next; a family
    with one sample changed is formatted whole again, so the text is always exactly ``generate_latest(reg)``'s.
    Scrapes run one at a time (a lock: concurrent scrapers would only do the same work twice)."""

    def __init__(self, reg: Any) -> None:
        require()
        self._registry = reg
        self._lock = threading.Lock()
        self._previous: dict[str, tuple[_PromMetric, bytes]] = {}  # family name -> (family, its text)

    def __call__(self) -> bytes:
        with self._lock:
            previous, texts, kept = self._previous, [], {}
            for family in self._registry.collect():
                old = previous.get(family.name)
                if old is not None and old[0].type == family.type and old[0].samples == family.samples \
                        and old[0].documentation == family.documentation:
                    text = old[1]
                else:
                    text = generate_latest(_OneFamily(family))
                kept[family.name] = (family, text)
                texts.append(text)
            self._previous = kept
            return b"".join(texts)


class _OneFamily:
    """A collector of one family, for ``generate_latest``."""

    def __init__(self, family: _PromMetric) -> None:
        self._family = family

    def collect(self) -> list[_PromMetric]:
        return [self._family]


class MetricsEndpoint:
    """An HTTP endpoint serving ``/metrics`` (the registry, text format) and ``/health`` (200 "ok", or 503 and
    why) on ``host:port``, in daemon threads; :meth:`close` stops it."""

    def __init__(self, reg: Any, host: str = "127.0.0.1", port: int = 0, health: Health | None = None) -> None:
        require()
        handler = type("Handler", (_Handler,), {"exposition": staticmethod(Exposition(reg)),
                                                "health": staticmethod(health or _always_ok)})
        self._httpd = http.server.ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        address = self._httpd.server_address
        self.host, self.port = str(address[0]), int(address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="pylog-metrics-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> "MetricsEndpoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def start_http_server(reg: Any, port: int = 0, host: str = "127.0.0.1",
                      health: Health | None = None) -> MetricsEndpoint:
    """Serve ``reg`` (e.g. :func:`registry`) on ``http://host:port/metrics`` and a ``/health`` probe.
    ``health`` returns (healthy, text); by default always healthy. Port 0 picks a free one (``.port``)."""
    return MetricsEndpoint(reg, host, port, health)


def _always_ok() -> tuple[bool, str]:
    return True, "ok"


def store_health(store: Store) -> Health:
    """A /health check of ``store``: open, its directory listable, and its own cleaner healthy."""
    def check() -> tuple[bool, str]:
        if store.closed:
            return False, "store closed"
        try:
            store.topics()  # raises when the directory is gone or unreadable
            store.check_health()  # CleanerError: this process's cleaner died or gave up on a partition
        except (PylogError, OSError) as exc:
            return False, str(exc)
        return True, "ok"
    return check


def server_health(server: Server) -> Health:
    """A /health check of ``server``: serving, and its store healthy (see :func:`store_health`)."""
    def check() -> tuple[bool, str]:
        store = server.store
        if server.loop_cpu_seconds() is None or store is None:
            return False, "not serving"
        return store_health(store)()
    return check


class _Handler(http.server.BaseHTTPRequestHandler):
    exposition: Callable[[], bytes]  # set by MetricsEndpoint's subclass
    health: Health = staticmethod(_always_ok)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body, status, ctype = self.exposition(), 200, CONTENT_TYPE_LATEST
            except Exception as exc:  # a failed collection is a 500 with its reason, not a dead endpoint
                body, status, ctype = f"collection failed: {exc}\n".encode(), 500, "text/plain; charset=utf-8"
        elif path == "/health":
            try:
                ok, text = self.health()
            except Exception as exc:
                ok, text = False, f"health check failed: {exc}"
            body, status, ctype = (text + "\n").encode(), 200 if ok else 503, "text/plain; charset=utf-8"
        else:
            body, status, ctype = b"not found: /metrics and /health are served\n", 404, "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        pass  # a scrape a second would flood stderr
