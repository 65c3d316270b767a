"""pylog's metrics: their names, meanings and labels (one table), and the recorders the hot paths count into.

Every metric pylog exposes is one :class:`Metric` in :data:`METRICS`: its Prometheus name, kind, help text,
labels, and the Kafka JMX name it stands for (docs/OPERATIONS.md, "Metrics", prints the same table). Names
follow Prometheus' conventions: a ``pylog_`` prefix, base units in the name (``_seconds``, ``_bytes``),
``_total`` on counters, histograms in seconds or bytes.

This module is a shared one (below storage, beside :mod:`pylog.config`): any layer may count into it, and it
imports nothing optional. Exposition (the ``prometheus_client`` library, the ``metrics`` extra) is
:mod:`pylog.prometheus`'s, at the top, which reads these recorders and the store's files at scrape time.

Invariants:
1. Recording costs one call per batch or request, never one per record: the hot paths (appends, a drain, a
   request) add a batch's counts at once.
2. Nothing is recorded unless :func:`enable` was called (``pylog.prometheus`` calls it); the check is one
   attribute read (:data:`state`). Disabled recorders keep what they had.
3. Counters and histograms only grow during a process's life (:meth:`Counter.inc` refuses a negative
   amount); they start at zero in every process. Gauges are read when scraped, from the files or the live
   objects, and survive a restart when the files hold them (offsets, sizes, committed offsets, cleaner
   state published under ``__cleaners/``).
4. A recorder is thread-safe: one lock per recorder, held only for the addition.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = ["Metric", "METRICS", "BY_NAME", "Counter", "Histogram", "enable", "enabled", "state",
           "LATENCY_BUCKETS", "SIZE_BUCKETS", "FSYNC_BUCKETS", "counter", "histogram", "recorders",
           "count_append", "handed_out", "fsynced", "track", "tracked"]

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

#: Request latencies, seconds: 0.5 ms to 10 s (Kafka's request TotalTimeMs spans that).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: fsync latencies, seconds: 0.1 ms (a cache-backed device) to 5 s (a stalled disk).
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: Batch sizes, bytes: 256 B to 16 MiB, powers of four.
SIZE_BUCKETS = tuple(float(256 * 4 ** i) for i in range(9))


@dataclass(frozen=True)
class Metric:
    """One exposed metric: ``name`` (Prometheus), ``kind`` (counter, gauge, histogram), ``help``, ``labels``,
    ``kafka`` (the Kafka JMX metric it corresponds to, "" when Kafka has none), ``source`` (where its value
    comes from: ``store`` read from the files at scrape time, ``server`` / ``producer`` / ``consumer`` /
    ``process`` counted by that part of a running process), and ``buckets`` for a histogram."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    kafka: str
    source: str
    buckets: tuple[float, ...] = ()


def _m(name: str, kind: str, labels: str, source: str, kafka: str, help: str,
       buckets: tuple[float, ...] = ()) -> Metric:
    return Metric(name, kind, help, tuple(labels.split()) if labels else (), kafka, source, buckets)


_TP = "topic partition"
_GTP = "group topic partition"

#: Every metric, in the order of docs/OPERATIONS.md's table.
METRICS: tuple[Metric, ...] = (
    # --- the log, per partition: read from the store's files when scraped
    _m("pylog_log_start_offset", GAUGE, _TP, "store", "kafka.log:type=Log,name=LogStartOffset",
       "First offset of the partition's log (the log start)."),
    _m("pylog_log_end_offset", GAUGE, _TP, "store", "kafka.log:type=Log,name=LogEndOffset",
       "Offset the partition's next record gets (the log end)."),
    _m("pylog_log_size_bytes", GAUGE, _TP, "store", "kafka.log:type=Log,name=Size",
       "Bytes of the partition's segment files (logs; indexes not counted)."),
    _m("pylog_log_segments", GAUGE, _TP, "store", "kafka.log:type=Log,name=NumLogSegments",
       "Segments of the partition."),
    # --- traffic per topic: counted where records are appended and read, once per batch
    _m("pylog_topic_records_in_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec",
       "Records appended to the topic by this process (server produce, producers, direct appends)."),
    _m("pylog_topic_bytes_in_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec",
       "Bytes of record batches appended to the topic by this process, as stored."),
    _m("pylog_topic_records_out_total", COUNTER, "topic", "process", "",
       "Records handed out from the topic by this process (server fetches, consumer polls)."),
    _m("pylog_topic_bytes_out_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec",
       "Bytes of record batches handed out from the topic by this process (server fetches, consumer polls)."),
    # --- pylog serve's requests
    _m("pylog_server_requests_total", COUNTER, "api", "server",
       "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*",
       "Requests answered, per Kafka API (Produce, Fetch, ...)."),
    _m("pylog_server_request_errors_total", COUNTER, "api error", "server",
       "kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=*,error=*",
       "Error codes in answers, per API and Kafka error name (each partition's or item's code counted)."),
    _m("pylog_server_request_duration_seconds", HISTOGRAM, "api", "server",
       "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=*",
       "Time from a request's frame taken off the queue to its answer ready, per API.", LATENCY_BUCKETS),
    _m("pylog_server_event_loop_busy_ratio", GAUGE, "", "server",
       "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent (1 - it)",
       "Share of the time since the previous scrape the event loop's thread spent on the CPU (1 - Kafka's idle "
       "percent)."),
    _m("pylog_server_event_loop_busy_seconds_total", COUNTER, "", "server",
       "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent (its complement, summed)",
       "CPU seconds of the event loop's thread."),
    _m("pylog_server_connections", GAUGE, "", "server",
       "kafka.server:type=socket-server-metrics,name=connection-count",
       "Open client connections."),
    _m("pylog_server_connections_created_total", COUNTER, "", "server",
       "kafka.server:type=socket-server-metrics,name=connection-creation-total",
       "Client connections accepted."),
    _m("pylog_server_authentications_total", COUNTER, "", "server",
       "kafka.server:type=socket-server-metrics,name=successful-authentication-total",
       "Successful SASL authentications."),
    _m("pylog_server_authentication_failures_total", COUNTER, "", "server",
       "kafka.server:type=socket-server-metrics,name=failed-authentication-total",
       "Failed SASL handshakes and authentications."),
    _m("pylog_server_throttle_time_seconds_total", COUNTER, "api", "server",
       "kafka.server:type=Produce, Fetch or Request,name=throttle-time",
       "Throttle time reported to clients by quotas (throttle_time_ms), summed, per API."),
    _m("pylog_server_throttled_requests_total", COUNTER, "api", "server", "",
       "Answers with a non-zero throttle_time_ms, per API."),
    # --- durability
    _m("pylog_log_flush_duration_seconds", HISTOGRAM, "", "process",
       "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs",
       "fsyncs of segment logs (flush, acks=all, flush.messages/flush.ms, rolls); _count is the fsync count.",
       FSYNC_BUCKETS),
    # --- consumer groups: committed offsets from the store, members/generation from the store or server
    _m("pylog_group_committed_offset", GAUGE, _GTP, "store", "kafka.coordinator.group (Burrow: offset)",
       "The group's committed offset for the partition."),
    _m("pylog_group_lag", GAUGE, _GTP, "store", "kafka.consumer:records-lag (Burrow: lag)",
       "Log end offset minus the committed offset: records the group has still to consume."),
    _m("pylog_group_lead", GAUGE, _GTP, "store", "kafka.consumer:records-lead",
       "Committed offset minus the log start offset: records retention may delete before the group loses any."),
    _m("pylog_group_members", GAUGE, "group", "store",
       "kafka.coordinator.group:type=GroupMetadataManager (member count)",
       "Live members of the group (the server's members, or an embedded group's live member files)."),
    _m("pylog_group_generation", GAUGE, "group", "store", "",
       "The group's generation; it grows by one per rebalance (survives restarts for embedded groups)."),
    _m("pylog_group_rebalances_total", COUNTER, "group", "server",
       "kafka.server:type=group-coordinator-metrics,name=rebalance-total",
       "Rebalances completed (new generations) by pylog serve's coordinator."),
    # --- the log cleaner (retention, compaction), from the status every cleaner publishes under __cleaners/
    _m("pylog_cleaner_alive", GAUGE, "pid", "store", "kafka.log:type=LogCleaner,name=DeadThreadCount (1 - it)",
       "1 while the cleaner thread of process pid is alive (and its process too), else 0."),
    _m("pylog_cleaner_heartbeat_age_seconds", GAUGE, "pid", "store", "",
       "Seconds since the cleaner of process pid last published its status (every 5 s when healthy)."),
    _m("pylog_cleaner_last_run_timestamp_seconds", GAUGE, "pid", "store",
       "kafka.log:type=LogCleanerManager,name=time-since-last-run-ms",
       "Unix time the cleaner's last pass ended."),
    _m("pylog_cleaner_runs_total", COUNTER, "pid", "store", "", "Passes the cleaner has run since its store opened."),
    _m("pylog_cleaner_cleaned_bytes_total", COUNTER, "pid", "store",
       "kafka.log:type=LogCleaner,name=cleaner-recopy-percent (bytes read by cleanings)",
       "Bytes the cleaner read to compact, since its store opened."),
    _m("pylog_cleaner_deleted_bytes_total", COUNTER, "pid", "store", "",
       "Bytes of segments retention deleted, since its store opened."),
    _m("pylog_cleaner_aborted_records_removed_total", COUNTER, "pid", "store", "",
       "Records of aborted transactions compaction removed, since its store opened."),
    _m("pylog_cleaner_markers_removed_total", COUNTER, "pid", "store", "",
       "Transaction markers compaction removed (delete.retention.ms after their transaction's last record "
       "went), since its store opened."),
    _m("pylog_cleaner_uncleanable_partitions", GAUGE, "pid", "store",
       "kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count",
       "Partitions the cleaner gave up on after an error (cleaning failures)."),
    _m("pylog_cleaner_dirty_ratio", GAUGE, _TP, "store", "kafka.log:type=LogCleanerManager,name=max-dirty-percent",
       "Dirty ratio of a compacted partition at the cleaner's last look (0 to 1)."),
    # --- tiered storage (remote.storage.enable): counted by the upload thread and remote reads, per topic
    _m("pylog_remote_segments_shipped_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=RemoteCopyRequestsPerSec",
       "Segments the upload thread shipped to the remote log and committed."),
    _m("pylog_remote_bytes_shipped_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec",
       "Bytes of segment logs the upload thread shipped (indexes not counted)."),
    _m("pylog_remote_failures_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=RemoteCopyErrorsPerSec",
       "Partition upload passes that failed (each retried after a back-off)."),
    _m("pylog_remote_reads_total", COUNTER, "topic", "process",
       "kafka.server:type=BrokerTopicMetrics,name=RemoteFetchRequestsPerSec",
       "Reads served from the remote log (offsets below the local log start)."),
    # --- producers (pylog's Producer / KafkaProducer) in this process, per client_id
    _m("pylog_producer_records_sent_total", COUNTER, "client_id", "producer",
       "kafka.producer:type=producer-metrics,name=record-send-total", "Records the producers appended."),
    _m("pylog_producer_bytes_sent_total", COUNTER, "client_id", "producer",
       "kafka.producer:type=producer-metrics,name=outgoing-byte-total",
       "Bytes appended, as buffer_memory counts them (keys, values, headers, a per-record overhead)."),
    _m("pylog_producer_batch_size_bytes", HISTOGRAM, "client_id", "producer",
       "kafka.producer:type=producer-metrics,name=batch-size-avg",
       "Bytes of each partition append of a drain (Kafka's batch), as buffer_memory counts them.", SIZE_BUCKETS),
    _m("pylog_producer_record_queue_time_seconds", HISTOGRAM, "client_id", "producer",
       "kafka.producer:type=producer-metrics,name=record-queue-time-avg",
       "Time a drain's oldest record waited between send() and the drain.", LATENCY_BUCKETS),
    _m("pylog_producer_buffer_available_bytes", GAUGE, "client_id", "producer",
       "kafka.producer:type=producer-metrics,name=buffer-available-bytes",
       "buffer_memory minus the bytes sent and not yet appended."),
    _m("pylog_producer_throttle_time_seconds_total", COUNTER, "client_id", "producer",
       "kafka.producer:type=producer-metrics,name=produce-throttle-time-avg (summed)",
       "Time drains waited for the client's producer_byte_rate quota."),
    # --- consumers (pylog's Consumer / KafkaConsumer) in this process, per client_id
    _m("pylog_consumer_records_consumed_total", COUNTER, "client_id", "consumer",
       "kafka.consumer:type=consumer-fetch-manager-metrics,name=records-consumed-total",
       "Records poll() returned."),
    _m("pylog_consumer_bytes_consumed_total", COUNTER, "client_id", "consumer",
       "kafka.consumer:type=consumer-fetch-manager-metrics,name=bytes-consumed-total",
       "Record bytes (keys and values) poll() returned."),
    _m("pylog_consumer_fetch_duration_seconds", HISTOGRAM, "client_id", "consumer",
       "kafka.consumer:type=consumer-fetch-manager-metrics,name=fetch-latency-avg",
       "Time a poll() that returned records spent reading them.", LATENCY_BUCKETS),
    _m("pylog_consumer_records_lag_max", GAUGE, "client_id", "consumer",
       "kafka.consumer:type=consumer-fetch-manager-metrics,name=records-lag-max",
       "Largest lag (log end - position) over the consumer's assigned partitions."),
    _m("pylog_consumer_records_lead_min", GAUGE, "client_id", "consumer",
       "kafka.consumer:type=consumer-fetch-manager-metrics,name=records-lead-min",
       "Smallest lead (position - log start) over the consumer's assigned partitions."),
    # --- the process
    _m("pylog_info", GAUGE, "version accelerated", "process", "kafka.server:type=app-info",
       "1, labelled with pylog's version and whether the compiled accelerator is live."),
    _m("pylog_scrape_duration_seconds", GAUGE, "", "store", "",
       "Time the last collection of the store's gauges took."),
)

#: Metric by name.
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
# Names reserved for issue 27 (transactions), so the scheme has room:
# pylog_transactions_*_total, pylog_log_last_stable_offset. Tiered storage (issue 28) counts pylog_remote_*.


class _State:
    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on = False


#: ``state.on``: whether recording is on (invariant 2). Hot paths test it before recording.
state = _State()


def enable(on: bool = True) -> None:
    """Turn recording on (or off) in this process; :mod:`pylog.prometheus` turns it on when asked to export."""
    state.on = on


def enabled() -> bool:
    """Whether recording is on."""
    return state.on


class Counter:
    """A counter per label values (a tuple, in the metric's label order): only grows."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0; a negative one raises ValueError: counters never go backwards)."""
        if amount < 0:
            raise ValueError(f"{self.metric.name}: a counter cannot decrease ({amount})")
        with self._lock:
            self._values[labels] = self._values.get(labels, 0) + amount

    def values(self) -> list[tuple[tuple[str, ...], float]]:
        """A snapshot: (label values, total) pairs."""
        with self._lock:
            return list(self._values.items())


class Histogram:
    """Bucketed observations per label values: cumulative counts are computed when read, not when recorded."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric
        self.bounds = metric.buckets
        self._series: dict[tuple[str, ...], list[float]] = {}  # per-bucket counts (+Inf last), then sum
        self._lock = threading.Lock()

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            row = self._series.get(labels)
            if row is None:
                row = self._series[labels] = [0.0] * (len(self.bounds) + 2)
            row[i] += 1
            row[-1] += value

    def counts(self) -> list[tuple[tuple[str, ...], float]]:
        """A snapshot: (label values, observations) pairs."""
        with self._lock:
            return [(k, sum(v[:-1])) for k, v in self._series.items()]

    def values(self) -> list[tuple[tuple[str, ...], list[tuple[str, float]], float]]:
        """A snapshot: (label values, cumulative [(upper bound, count)] ending with "+Inf", sum) triples."""
        with self._lock:
            rows = [(k, list(v)) for k, v in self._series.items()]
        out = []
        for labels, row in rows:
            total, buckets = 0.0, []
            for bound, n in zip([*map(_bound, self.bounds), "+Inf"], row[:-1], strict=True):
                total += n
                buckets.append((bound, total))
            out.append((labels, buckets, row[-1]))
        return out


def _bound(b: float) -> str:
    return repr(float(b))


_recorders: dict[str, Counter | Histogram] = {}
_recorders_lock = threading.Lock()


def counter(name: str) -> Counter:
    """The process's recorder of counter ``name`` (one of :data:`METRICS`)."""
    rec = _recorder(name)
    assert isinstance(rec, Counter)
    return rec


def histogram(name: str) -> Histogram:
    """The process's recorder of histogram ``name`` (one of :data:`METRICS`)."""
    rec = _recorder(name)
    assert isinstance(rec, Histogram)
    return rec


def _recorder(name: str) -> Counter | Histogram:
    with _recorders_lock:
        rec = _recorders.get(name)
        if rec is None:
            metric = BY_NAME[name]
            rec = _recorders[name] = Histogram(metric) if metric.kind == HISTOGRAM else Counter(metric)
        return rec


def recorders() -> Iterator[Counter | Histogram]:
    """The process's recorders created so far (what :mod:`pylog.prometheus` exposes)."""
    with _recorders_lock:
        return iter(list(_recorders.values()))


# ---------------------------------------------------------------------- the hooks the hot paths call


class _Traffic:
    """Records and bytes per topic in one direction, as rows of two counters: one per partition for appends
    (:func:`count_append`: the partition adds to its own row under its append lock, so no other lock and no
    lookup), one per topic for reads (:meth:`add`, under this table's lock). Rows are never removed (counters
    never go back); each metric is read through a :class:`_TrafficColumn`, summed per topic."""

    def __init__(self, records: str, nbytes: str) -> None:
        self._rows: dict[tuple[str, str], list[int]] = {}  # (topic, partition's name, or "" for add) -> the row
        self._lock = threading.Lock()
        with _recorders_lock:
            for i, name in enumerate((records, nbytes)):
                _recorders[name] = _TrafficColumn(BY_NAME[name], self, i)

    def row(self, topic: str, partition: str) -> list[int]:
        """The row of ``partition`` (its name) of ``topic`` (made on first use), for one writer to add to."""
        with self._lock:
            return self._rows.setdefault((topic, partition), [0, 0])

    def add(self, topic: str, records: int, nbytes: int) -> None:
        with self._lock:
            row = self._rows.get((topic, ""))
            if row is None:
                self._rows[(topic, "")] = [records, nbytes]
            else:
                row[0] += records
                row[1] += nbytes

    def column(self, i: int) -> list[tuple[tuple[str, ...], float]]:
        sums: dict[str, int] = {}
        with self._lock:
            rows = list(self._rows.items())
        for (topic, _), row in rows:
            sums[topic] = sums.get(topic, 0) + row[i]
        return [((topic,), total) for topic, total in sums.items()]


class _TrafficColumn(Counter):
    """The records (0) or bytes (1) of a :class:`_Traffic`, as a counter recorder to read."""

    def __init__(self, metric: Metric, traffic: _Traffic, i: int) -> None:
        super().__init__(metric)
        self._traffic, self._i = traffic, i

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        raise TypeError(f"{self.metric.name} is added to through pylog.metrics.appended / handed_out")

    def values(self) -> list[tuple[tuple[str, ...], float]]:
        return self._traffic.column(self._i)


class _ObservationCount(Counter):
    """A histogram's observations per label values, as a counter recorder to read: one observation per event
    records both (``pylog_server_requests_total`` is the request latency histogram's count, so a request costs
    one recording, not two)."""

    def __init__(self, metric: Metric, observed: Histogram) -> None:
        super().__init__(metric)
        self._observed = observed

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        raise TypeError(f"{self.metric.name} counts the observations of {self._observed.metric.name}")

    def values(self) -> list[tuple[tuple[str, ...], float]]:
        return self._observed.counts()


def _counted_by(name: str, observed: str) -> None:
    """Make counter ``name`` the observation count of histogram ``observed``."""
    hist = histogram(observed)
    with _recorders_lock:
        _recorders[name] = _ObservationCount(BY_NAME[name], hist)


_counted_by("pylog_server_requests_total", "pylog_server_request_duration_seconds")
_in = _Traffic("pylog_topic_records_in_total", "pylog_topic_bytes_in_total")
_out = _Traffic("pylog_topic_records_out_total", "pylog_topic_bytes_out_total")
_fsyncs = histogram("pylog_log_flush_duration_seconds")

#: Records and bytes a fetch or a poll handed out from one partition of a topic (once per read).
handed_out = _out.add


def count_append(writer: Any, records: int, nbytes: int) -> None:
    """One append call: ``records`` in batches of ``nbytes`` stored, by ``writer`` (a partition's batch writer:
    its ``topic``, ``name`` and ``metrics_row``). Called under the partition's append lock, the only place
    its row is added to (callers test state.on)."""
    row = writer.metrics_row
    if row is None:
        row = writer.metrics_row = _in.row(writer.topic, writer.name)
    row[0] += records
    row[1] += nbytes


def fsynced(seconds: float) -> None:
    """One fsync of a segment log that took ``seconds``."""
    _fsyncs.observe((), seconds)


#: Live producers, consumers and servers by kind, whose gauges (buffer available, lag max, connections...) are
#: read when scraped. Weak: tracking never keeps one alive; their counters are the recorders above, which
#: outlive them.
_tracked: "dict[str, weakref.WeakSet[Any]]" = {}
_tracked_lock = threading.Lock()


def track(kind: str, obj: object) -> None:
    """Remember ``obj`` (``kind``: "producer", "consumer", "server") for scrape-time gauges, while it lives."""
    with _tracked_lock:
        _tracked.setdefault(kind, weakref.WeakSet()).add(obj)


def tracked(kind: str) -> list[Any]:
    """The live tracked objects of ``kind``."""
    with _tracked_lock:
        found = _tracked.get(kind)
        return list(found) if found is not None else []
