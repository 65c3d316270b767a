"""Options of the ``pylog`` Spark source and sink: parsed and checked once, by name, as Spark's Kafka source does.

Spark hands a data source its options as a case-insensitive ``str -> str`` mapping. This module turns
them into frozen, picklable dataclasses (:class:`ReadOptions`, :class:`WriteOptions`) and resolves the
offset specifications against a store (:func:`resolve_offset`). Nothing here imports PySpark, so the
parsing is testable without a JVM.

Invariants:
- Every option is checked where it is parsed: an unknown name, a value of the wrong form, a missing
  required option or two options that exclude each other raise :class:`InvalidOptionError` naming the
  option (Spark shows the message to the user unchanged, inside its own error). Names are shown in their
  documented camelCase spelling (Spark lower-cases them); an unknown one as given, with the closest known.
- Options of Spark's Kafka source or sink that pylog has no use for where they are given (``kafka.*``,
  consumer tuning, trigger pacing in batch reads, the other side's options) are accepted and ignored, with
  one warning per process naming them, so a Kafka job's option map works unchanged. pylog's own options
  where they do not apply stay errors.
- Per-partition JSON must name exactly the partitions a query reads (:func:`check_partitions_named`), as
  the Kafka source requires.
- A path with a URL scheme other than ``file:`` and (batch reads) ``s3:`` is refused, naming the scheme: a
  store is a directory on a local or shared filesystem, or a location in a bucket that a store shipped its
  segments to (tiered storage, read through ``pylog.attach``; ``remote.storage.*`` options say how to reach it).
- Offsets follow the Kafka source's conventions: in per-partition JSON ``-2`` means earliest and ``-1``
  latest; timestamps are milliseconds since the epoch; a timestamp resolves to the first offset whose
  record timestamp is >= it (the time index's answer), and an ending timestamp with no such record to
  the log end.
- Resolving never reads records: it looks at log start/end offsets and the time index only.
- ``kafka.isolation.level`` is the one ``kafka.*`` option a read uses (Spark's Kafka source hands it to its
  consumer): ``read_uncommitted`` (the default, as for Spark's Kafka source and Kafka's consumer) or
  ``read_committed``; anything else is an error. Writes ignore it, as every ``kafka.*`` option.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import DataLossError, InvalidOptionError  # defined here before pylog.errors: importable from here too
from ..partition import ISOLATION_LEVELS
from ..store import OFFSETS_TOPIC, is_store

__all__ = [
    "InvalidOptionError", "DataLossError", "OffsetSpec", "Subscription", "ReadOptions", "WriteOptions",
    "parse_read_options", "parse_write_options", "resolve_offset", "store_path", "check_partitions_named",
    "known_options", "ISOLATION_LEVEL",
    "EARLIEST", "LATEST", "EXACTLY_ONCE", "AT_LEAST_ONCE", "DELIVERY_GUARANTEES",
]

log = logging.getLogger("pylog.spark")

#: Per-partition JSON offsets: the Kafka source's markers for "the log start" and "the log end".
EARLIEST = -2
LATEST = -1

#: The sink's ``deliveryGuarantee`` values (Flink's Kafka sink has the same option and names).
EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
DELIVERY_GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)

#: Default wait for a partition's writer lock held by another task or application (ms).
DEFAULT_LOCK_TIMEOUT_MS = 60_000

#: The Kafka consumer setting Spark's Kafka source takes as ``kafka.isolation.level``; reads use it.
ISOLATION_LEVEL = "kafka.isolation.level"


# The option names each mode uses, canonical spelling. Spark hands options over with lower-cased names
# (its CaseInsensitiveDict), so names are matched lower-cased and errors show the canonical spelling.
_SUBSCRIBE = ("subscribe", "subscribePattern", "assign")
#: Reaching a bucket (an ``s3://`` path: docs/SPARK.md), named as ``pylog.open``'s settings.
_REMOTE = ("remote.storage.endpoint.url", "remote.storage.region", "remote.storage.profile",
           "remote.storage.request.timeout.ms", "remote.storage.max.attempts", "remote.storage.read.chunk.bytes",
           "remote.storage.read.cache.bytes")
_BATCH_READ = _SUBSCRIBE + (
    "path", "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "minPartitions", "maxRecordsPerPartition", "failOnDataLoss", "includeHeaders", "filterPushdown",
) + _REMOTE
_STREAM_ONLY = ("maxOffsetsPerTrigger",)
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "filterPushdown") + _REMOTE
_WRITE = ("path", "topic", "lockTimeoutMs", "checkpointLocation", "autoCreateTopics", "numPartitions",
          "deliveryGuarantee", "transactionTimeoutMs")

# Options of Spark's Kafka source and sink that pylog accepts and ignores, so that a Kafka job's option map
# works unchanged (the Kafka source ignores options it does not use, too). Any ``kafka.*`` option (the Kafka
# client's own settings) is ignored as well. Each parse logs one warning naming what it ignored.
#: Kafka-client tuning, meaningless without a broker: ignored by reads and writes.
_KAFKA_CLIENT = ("kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
                 "groupIdPrefix")
#: Trigger pacing: the Kafka source ignores all three in batch queries (with a warning), as pylog does.
_TRIGGER = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
#: The Kafka source's options, which its sink ignores (and so does pylog's).
_KAFKA_SOURCE = tuple(n for n in _BATCH_READ if n != "filterPushdown" and n not in _REMOTE) + _TRIGGER + _KAFKA_CLIENT
_KAFKA_PREFIX = "kafka."

_IGNORED = {
    "batch reads": _KAFKA_CLIENT + _TRIGGER + ("topic",),
    "streaming reads": _KAFKA_CLIENT + ("minOffsetsPerTrigger", "maxTriggerDelay", "topic"),
    "reads": _KAFKA_CLIENT + ("minOffsetsPerTrigger", "maxTriggerDelay", "topic"),
    "writes": tuple(dict.fromkeys(_KAFKA_SOURCE)),
}
_CANONICAL = {n.lower(): n for n in _BATCH_READ + _STREAM_ONLY + _WRITE + _KAFKA_SOURCE}
_IGNORED_NAMES = tuple(dict.fromkeys(n for names in _IGNORED.values() for n in names))
_warned: set[tuple[str, ...]] = set()  # ignored-option sets already logged by this process

#: URL schemes of remote filesystems that a pylog store cannot be on (yet): named in the error.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends in each partition.

    ``kind`` is one of ``earliest``, ``latest``, ``offsets`` (``per_partition`` maps ``(topic, partition)``
    to an offset, -2 or -1), ``timestamp`` (``timestamp`` applies to every partition) or ``timestamps``
    (``per_partition`` maps to a timestamp). ``option`` names the option it came from, for errors.
    """

    kind: str
    option: str
    timestamp: int | None = None
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Subscription:
    """Which partitions a query reads: ``subscribe`` (topics), ``subscribePattern`` (a regex matching whole
    topic names) or ``assign`` (explicit topic partitions)."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """True if ``topic`` belongs to the subscription (assign: one of its partitions' topics)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return not is_internal(topic) and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class ReadOptions:
    """Parsed options of a batch or streaming read (docs/SPARK.md describes each one)."""

    path: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_by_timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    filter_pushdown: bool = False
    max_offsets_per_trigger: int | None = None
    #: ``remote.storage.*`` settings for an ``s3://`` path, as ``(name, value)`` pairs (empty for a directory).
    remote: tuple[tuple[str, str], ...] = ()
    #: Kafka's isolation level (``kafka.isolation.level``): read_committed reads stop at the last stable offset
    #: and skip aborted transactions' records; neither level returns transaction markers.
    isolation_level: str = "read_uncommitted"

    @property
    def committed(self) -> bool:
        return self.isolation_level == "read_committed"


@dataclass(frozen=True)
class WriteOptions:
    """Parsed options of a write: the store, the topic (which beats a ``topic`` column, as in Kafka's sink),
    how long to wait for a partition lock, and whether missing topics are created (``autoCreateTopics``,
    with ``numPartitions`` partitions: the broker settings ``auto.create.topics.enable`` and
    ``num.partitions`` of a Kafka cluster)."""

    path: str
    topic: str | None
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    auto_create_topics: bool = False
    num_partitions: int = 1
    #: ``deliveryGuarantee``: ``exactly-once`` or ``at-least-once``; None (not given): exactly-once for streams,
    #: at-least-once for batch writes (docs/SPARK.md, "Exactly-once streaming writes").
    delivery_guarantee: str | None = None
    #: ``transactionTimeoutMs``: the exactly-once sink's transaction timeout; None: the store's
    #: ``transaction.max.timeout.ms``.
    transaction_timeout_ms: int | None = None


# ------------------------------------------------------------------------------------------------ parsing


def _normalise(options: Mapping[str, str], allowed: tuple[str, ...], mode: str) -> dict[str, str]:
    """Options keyed by canonical name, without those ignored here (see ``_IGNORED``; one warning names
    them). An unknown name raises InvalidOptionError suggesting the closest known one; a pylog option used
    where it does not apply raises InvalidOptionError saying where it does."""
    allowed_lower = {a.lower() for a in allowed}
    ignored_lower = {n.lower() for n in _IGNORED[mode]} - allowed_lower
    out: dict[str, str] = {}
    ignored: list[str] = []
    for key, value in options.items():
        low = key.lower()
        name = _CANONICAL.get(low)
        if low.startswith(_KAFKA_PREFIX) or low in ignored_lower:
            ignored.append(name or key)
            continue
        if name is None:
            raise InvalidOptionError(key, f"unknown option for {mode}{_suggest(low, allowed)}")
        if low not in allowed_lower:
            where = ("streaming reads" if name in _STREAM_ONLY else "batch reads" if name in _BATCH_ONLY
                     else "writes" if name in _WRITE else "reads")
            raise InvalidOptionError(name, f"applies to {where} only, not to {mode}")
        if value is None:
            continue
        out[name] = str(value)
    if ignored:
        _warn_ignored(tuple(sorted(ignored)), mode)
    return out


def known_options() -> tuple[str, ...]:
    """Every option name pylog's source and sink know, canonical spelling: those used, and the Kafka
    source's and sink's that are accepted and ignored (besides any ``kafka.*``)."""
    return tuple(dict.fromkeys(_CANONICAL.values()))


def _suggest(low: str, allowed: tuple[str, ...]) -> str:
    """`` (did you mean 'X'?)`` for the known option closest to ``low``, else the list of known ones."""
    names = {n.lower(): n for n in allowed + _IGNORED_NAMES}
    close = difflib.get_close_matches(low, list(names), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {names[close[0]]!r}?"
    return f" (known: {', '.join(sorted(allowed))})"


def _warn_ignored(names: tuple[str, ...], mode: str) -> None:
    if (mode, *names) in _warned:
        return
    _warned.add((mode, *names))
    log.warning("pylog: ignoring option%s %s for %s (Kafka settings pylog has no use for; see the options "
                "table in docs/SPARK.md)", "s" if len(names) > 1 else "", ", ".join(names), mode)


def store_path(options: Mapping[str, str], remote_ok: bool = False) -> str:
    """The store directory from the ``path`` option (``load(path)`` / ``save(path)``), absolute; with
    ``remote_ok`` (batch reads) also a location ``s3://bucket/prefix``, returned as given.

    :raises InvalidOptionError: when no path is given, it is a remote URL (``s3a://``, ``hdfs://``...; an
        ``s3://`` one without ``remote_ok``) or it is not a pylog store (a read or write never creates a store).
    """
    raw = options.get("path")
    if not raw:
        raise InvalidOptionError("path", "give the store directory: .load(path) / .save(path)")
    url = _URL.match(raw)
    scheme = url.group(1).lower() if url else ""
    if scheme == "s3" and remote_ok:
        return raw
    if scheme in ("s3", "s3a", "s3n"):
        raise InvalidOptionError("path", f"{raw!r}: " + (
            "batch reads only read a bucket (pylog.attach); writes and streaming reads need the store directory"
            if scheme == "s3" else
            f"{scheme}:// paths are not supported: {scheme}:// is Hadoop's S3 filesystem, whose fs.s3a.* settings "
            "pylog does not use (it reads the "
            "bucket itself, with boto3): write s3://bucket/prefix, the store's remote.storage.location, and give "
            "remote.storage.endpoint.url / region / profile as options or AWS_* in the executors' environment"))
    if url and url.group(1).lower() != "file":
        raise InvalidOptionError("path", f"{raw!r}: a pylog store must be on a local or shared (mounted) "
                                 f"filesystem; {url.group(1)}:// paths are not supported. Give the directory "
                                 "as a local path, on a filesystem every executor mounts")
    path = raw[len("file://"):] if raw.startswith("file://") else raw[len("file:"):] if raw.startswith("file:") else raw
    path = os.path.abspath(path)
    if not is_store(path):
        raise InvalidOptionError("path", f"{path} is not a pylog store (no store file; is it visible here?)")
    return path


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise InvalidOptionError(name, f"expected true or false, got {raw!r}")


def _int(opts: Mapping[str, str], name: str, minimum: int) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(name, f"expected an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidOptionError(name, f"must be >= {minimum}, got {value}")
    return value


def _json_object(opts: Mapping[str, str], name: str) -> dict[str, Any]:
    raw = opts[name]
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidOptionError(name, f"not valid JSON ({exc}): {raw!r}") from None
    if not isinstance(doc, dict):
        raise InvalidOptionError(name, f"expected a JSON object, got {raw!r}")
    return doc


def _per_partition(opts: Mapping[str, str], name: str, *,
                   allow_markers: tuple[int, ...] | None) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": n, ...}, ...}`` as ``{(topic, 0): n}``; markers (-2/-1) allowed as listed."""
    out: dict[tuple[str, int], int] = {}
    for topic, parts in _json_object(opts, name).items():
        if not isinstance(parts, dict):
            raise InvalidOptionError(name, f"topic {topic!r}: expected an object of partition -> value")
        for p, v in parts.items():
            try:
                number = int(p)
            except (TypeError, ValueError):
                raise InvalidOptionError(name, f"topic {topic!r}: partition {p!r} is not an integer") from None
            if not isinstance(v, int) or isinstance(v, bool):
                raise InvalidOptionError(name, f"{topic}-{number}: expected an integer, got {v!r}")
            if v < 0 and (allow_markers is None or v not in allow_markers):
                allowed = "" if not allow_markers else " (or " + ", ".join(map(str, allow_markers)) + ")"
                raise InvalidOptionError(name, f"{topic}-{number}: {v} is not a valid value; use >= 0{allowed}")
            out[(topic, number)] = v
    return out


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [n for n in _SUBSCRIBE if n in opts]
    if len(given) != 1:
        what = "none was given" if not given else "got " + ", ".join(given)
        raise InvalidOptionError("subscribe", f"give exactly one of subscribe, subscribePattern, assign; {what}")
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise InvalidOptionError(kind, "no topic given")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise InvalidOptionError(kind, f"not a valid regular expression ({exc}): {raw!r}") from None
        return Subscription(kind, pattern=raw)
    doc = _json_object(opts, kind)
    assigned: list[tuple[str, int]] = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                  for p in parts):
            raise InvalidOptionError(kind, f"topic {topic!r}: expected a list of partition numbers, got {parts!r}")
        assigned.extend((topic, p) for p in parts)
    if not assigned:
        raise InvalidOptionError(kind, "no partition given")
    return Subscription(kind, assigned=tuple(sorted(set(assigned))))


def _offset_spec(opts: Mapping[str, str], side: str, default: str, streaming: bool) -> OffsetSpec:
    """The starting or ending spec: ``{side}Timestamp`` beats ``{side}OffsetsByTimestamp`` beats
    ``{side}Offsets`` (the Kafka source's precedence)."""
    ts_name, by_ts_name, off_name = f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"
    if ts_name in opts:
        ts = _int(opts, ts_name, 0)
        return OffsetSpec("timestamp", ts_name, timestamp=ts)
    if by_ts_name in opts:
        return OffsetSpec("timestamps", by_ts_name, per_partition=_per_partition(opts, by_ts_name, allow_markers=None))
    raw = opts.get(off_name, default).strip()
    low = raw.lower()
    if low in ("earliest", "latest"):
        if not streaming and side == "starting" and low == "latest":
            raise InvalidOptionError(off_name, "'latest' is not allowed for batch queries (nothing would be read)")
        if side == "ending" and low == "earliest":
            raise InvalidOptionError(off_name, "'earliest' is not allowed as the end of a query")
        return OffsetSpec(low, off_name)
    if not raw.startswith("{"):
        raise InvalidOptionError(off_name, f"expected earliest, latest or per-partition JSON, got {raw!r}")
    markers = (EARLIEST, LATEST) if side == "starting" else (LATEST,)
    per = _per_partition(opts, off_name, allow_markers=markers)
    if not streaming and side == "starting" and any(v == LATEST for v in per.values()):
        raise InvalidOptionError(off_name, "-1 (latest) is not allowed as a batch query's start")
    return OffsetSpec("offsets", off_name, per_partition=per)


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None = False) -> ReadOptions:
    """Parse and check the options of ``spark.read`` (``streaming=False``) or ``spark.readStream`` (True).

    ``streaming=None`` is for when the kind of read is not known yet (``DataSource.schema()``): options of
    either kind are accepted, and the reader checks again once it is known.

    :raises InvalidOptionError: naming the first bad option.
    """
    allowed: tuple[str, ...]
    if streaming is None:
        mode, allowed = "reads", _BATCH_READ + _STREAM_ONLY
    elif streaming:
        # The bucket's options pass here so that a stream of a bucket is refused for what it is (below, by
        # store_path) rather than for the options that come with it; on a directory they are refused after.
        mode, allowed = "streaming reads", tuple(n for n in _BATCH_READ if n not in _BATCH_ONLY) + _STREAM_ONLY \
            + _REMOTE
    else:
        mode, allowed = "batch reads", _BATCH_READ
    isolation = _isolation_level(options)
    opts = _normalise({k: v for k, v in options.items() if k.lower() != ISOLATION_LEVEL}, allowed, mode)
    path = store_path(opts, remote_ok=not streaming)
    remote = tuple((n, opts[n]) for n in _REMOTE if n in opts)
    if remote and not path.lower().startswith("s3://"):
        raise InvalidOptionError(remote[0][0], "applies to a path s3://bucket/prefix only (a read of the bucket)")
    strategy = opts.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidOptionError("startingOffsetsByTimestampStrategy", f"expected error or latest, got {strategy!r}")
    lenient = streaming is None or streaming
    return ReadOptions(
        path=path,
        subscription=_subscription(opts),
        starting=_offset_spec(opts, "starting", "latest" if streaming else "earliest", lenient),
        ending=OffsetSpec("latest", "endingOffsets") if streaming else _offset_spec(opts, "ending", "latest", False),
        starting_by_timestamp_strategy=strategy,
        min_partitions=_int(opts, "minPartitions", 1),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", 1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        filter_pushdown=_bool(opts, "filterPushdown", False),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", 1),
        remote=remote,
        isolation_level=isolation,
    )


def _isolation_level(options: Mapping[str, str]) -> str:
    """The read's ``kafka.isolation.level`` (any case of the name, as Spark lower-cases it), checked."""
    raw = next((v for k, v in options.items() if k.lower() == ISOLATION_LEVEL and v is not None), None)
    if raw is None:
        return "read_uncommitted"
    level = str(raw).strip().lower()
    if level not in ISOLATION_LEVELS:
        raise InvalidOptionError(ISOLATION_LEVEL, f"expected read_uncommitted or read_committed, got {raw!r}")
    return level


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse and check the options of ``df.write`` / ``df.writeStream``.

    :raises InvalidOptionError: naming the first bad option.
    """
    opts = _normalise(options, _WRITE, "writes")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidOptionError("topic", "empty topic name")
    timeout = _int(opts, "lockTimeoutMs", 0)
    create = _bool(opts, "autoCreateTopics", False)
    partitions = _int(opts, "numPartitions", 1)
    if partitions is not None and not create:
        raise InvalidOptionError("numPartitions", "only applies with autoCreateTopics=true (topics are not "
                                 "created otherwise)")
    guarantee = opts.get("deliveryGuarantee")
    if guarantee is not None:
        guarantee = guarantee.strip().lower()
        if guarantee not in DELIVERY_GUARANTEES:
            raise InvalidOptionError("deliveryGuarantee", f"expected one of {', '.join(DELIVERY_GUARANTEES)}, "
                                     f"got {opts['deliveryGuarantee']!r}")
    return WriteOptions(path=store_path(opts), topic=topic.strip() if topic else None,
                        lock_timeout_ms=DEFAULT_LOCK_TIMEOUT_MS if timeout is None else timeout,
                        auto_create_topics=create, num_partitions=1 if partitions is None else partitions,
                        delivery_guarantee=guarantee, transaction_timeout_ms=_int(opts, "transactionTimeoutMs", 1))


# --------------------------------------------------------------------------------------------- resolving


def resolve_offset(spec: OffsetSpec, topic: str, partition: int, log_start: int, log_end: int,
                   offset_for_timestamp: Any, *, strategy: str = "error") -> int:
    """The offset ``spec`` names for ``topic``-``partition`` whose log spans ``[log_start, log_end)``.

    ``offset_for_timestamp(ms)`` is the partition's time-index lookup (first offset with timestamp >= ms,
    or None). Partitions a per-partition spec does not name get the spec's side default: earliest for a
    start (an ``offsets`` spec) or the log end for an end. An ``offsets`` value is returned as given, so the
    caller can tell data loss (below the log start) from a bad request (beyond the log end).

    :raises InvalidOptionError: a starting timestamp with no record at or after it and strategy ``error``.
    """
    starting = spec.option.startswith("starting")
    kind = spec.kind
    if kind == "earliest":
        return log_start
    if kind == "latest":
        return log_end
    if kind == "offsets":
        value = spec.per_partition.get((topic, partition), EARLIEST if starting else LATEST)
        return log_start if value == EARLIEST else log_end if value == LATEST else value
    if kind == "timestamp":
        ts = spec.timestamp
    else:
        ts = spec.per_partition.get((topic, partition))
        if ts is None:
            return log_start if starting else log_end
    assert ts is not None
    found = offset_for_timestamp(ts)
    if found is not None:
        return max(found, log_start)
    if starting and strategy == "error":
        raise InvalidOptionError(spec.option, f"{topic}-{partition} has no record with a timestamp >= {ts}; "
                                 "use startingOffsetsByTimestampStrategy=latest to start at the log end")
    return log_end


def check_partitions_named(spec: OffsetSpec, partitions: Sequence[tuple[str, int]]) -> None:
    """Per-partition JSON (offsets or timestamps) must name exactly the partitions the query reads, as the
    Kafka source requires: a partition left out, or one that is not read, is an error naming them.

    :raises InvalidOptionError: naming ``spec.option``, the missing and the unknown partitions.
    """
    if spec.kind not in ("offsets", "timestamps"):
        return
    read, named = set(partitions), set(spec.per_partition)
    if read == named:
        return

    def names(tps: set[tuple[str, int]]) -> str:
        return ", ".join(f"{t}-{p}" for t, p in sorted(tps))

    problems = []
    if read - named:
        problems.append(f"missing {names(read - named)}")
    if named - read:
        problems.append(f"not read by this query (no such partition, or not subscribed): {names(named - read)}")
    markers = ""
    if spec.kind == "offsets":
        markers = (" (use -2 for earliest, -1 for latest)" if spec.option.startswith("starting")
                   else " (use -1 for latest)")
    raise InvalidOptionError(spec.option, f"must name every partition the query reads{markers}: "
                             + "; ".join(problems))


def is_internal(topic: str) -> bool:
    """Topics pylog itself keeps (consumer groups' offsets): never matched by a pattern."""
    return topic == OFFSETS_TOPIC or topic.startswith("__")
