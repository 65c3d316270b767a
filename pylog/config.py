"""Topic and store configuration with Kafka's names, meanings and (where they make sense in-process) defaults.

Invariants:
- Every setting is declared once, in :data:`SETTINGS`; nothing else in the package hard-codes a default.
- A :class:`TopicConfig` only ever holds known names with validated, normalised values; unknown names and
  bad values raise :class:`~pylog.errors.InvalidConfigError` naming the setting.
- Values given as strings (from a CLI or a JSON file) are parsed with the same rules as typed values.
- Values read back from a topic's ``topic.json`` (:func:`stored_config`) that earlier versions accepted but
  the current ranges do not (an int beyond a Java long, a NaN ratio) are clamped into range with a logged
  warning rather than making the topic unopenable; values set through the API are checked strictly.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from .errors import InvalidConfigError

__all__ = ["Setting", "SETTINGS", "TopicConfig", "STORE_SETTINGS", "REMOTE_STORAGE_SETTINGS", "LONG_MAX",
           "stored_config", "parse_value", "local_retention"]

log = logging.getLogger("pylog.config")

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

#: A segment's log file holds positions as unsigned 32-bit numbers in its offset index, and relative
#: offsets likewise; Kafka caps segment.bytes at Int.MaxValue for the same reason.
MAX_SEGMENT_BYTES = INT_MAX


@dataclass(frozen=True)
class Setting:
    """One configuration entry: its type, default, allowed range and meaning."""

    name: str
    kind: str  # "int", "float", "str", "list", "bool"
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


def _s(name: str, kind: str, default: Any, doc: str, **kw: Any) -> Setting:
    return Setting(name, kind, default, doc, **kw)


_DAY_MS = 24 * 3600 * 1000

#: Topic-level settings (store-wide defaults may be given to :func:`pylog.open`).
SETTINGS: dict[str, Setting] = {s.name: s for s in [
    _s("segment.bytes", "int", 1 << 30, "Roll to a new segment when the active one would exceed this many bytes.",
       minimum=14, maximum=MAX_SEGMENT_BYTES),
    _s("segment.ms", "int", 7 * _DAY_MS, "Roll when the active segment's first batch is older than this (ms).",
       minimum=1),
    _s("segment.index.bytes", "int", 10 * 1024 * 1024,
       "Preallocated size of each offset index (bytes); a full index forces a roll.", minimum=4096,
       maximum=INT_MAX),
    _s("index.interval.bytes", "int", 4096, "Add an index entry every this many bytes of log data.", minimum=0,
       maximum=INT_MAX),
    _s("retention.ms", "int", 7 * _DAY_MS,
       "Delete segments whose newest record is older than this (ms); -1 keeps forever.", minimum=-1),
    _s("retention.bytes", "int", -1, "Delete oldest segments while the partition is larger than this; -1 is unlimited.",
       minimum=-1),
    _s("cleanup.policy", "list", ("delete",), "delete, compact, or both (comma separated).",
       choices=("delete", "compact")),
    _s("min.cleanable.dirty.ratio", "float", 0.5, "Compact only when dirty bytes / total bytes exceed this.",
       minimum=0.0, maximum=1.0),
    _s("delete.retention.ms", "int", _DAY_MS, "Keep tombstones this long after compaction first reaches them (ms).",
       minimum=0),
    _s("min.compaction.lag.ms", "int", 0, "A record stays uncompacted at least this long (ms).", minimum=0),
    _s("max.compaction.lag.ms", "int", LONG_MAX, "A record becomes eligible for compaction at most this late (ms).",
       minimum=1),
    _s("max.message.bytes", "int", 1048588, "Largest record batch a partition accepts (bytes).", minimum=64,
       maximum=INT_MAX),
    _s("compression.type", "str", "producer",
       "Codec for stored batches: none/uncompressed, lz4, or producer (keep what the writer chose); Kafka's "
       "gzip, snappy and zstd are accepted and stored as lz4, pylog's one codec.",
       choices=("producer", "none", "uncompressed", "lz4", "gzip", "snappy", "zstd")),
    _s("flush.messages", "int", LONG_MAX, "fsync after this many records; 1 makes every append durable.", minimum=1),
    _s("flush.ms", "int", LONG_MAX, "fsync when this long has passed since the last fsync (ms), checked on append.",
       minimum=0),
    _s("producer.id.expiration.ms", "int", _DAY_MS, "Forget an idempotent producer's sequence numbers after it "
       "has not written for this long (ms).", minimum=1),
    _s("message.timestamp.type", "str", "CreateTime", "CreateTime keeps the writer's timestamps; LogAppendTime stamps "
       "the append time.", choices=("CreateTime", "LogAppendTime")),
    # Tiered storage (KIP-405): docs/ARCHITECTURE.md, "Tiered storage".
    _s("remote.storage.enable", "bool", False, "Ship the topic's closed, fsynced segments to the store's "
       "remote.storage.location; local copies then go by local.retention.*, the whole log by retention.*. Not "
       "with cleanup.policy compact."),
    _s("local.retention.ms", "int", -2, "With remote.storage.enable: delete local copies of shipped segments "
       "whose newest record is older than this (ms); -2: retention.ms; -1: keep forever.", minimum=-2),
    _s("local.retention.bytes", "int", -2, "With remote.storage.enable: delete local copies of the oldest "
       "shipped segments while the local log is larger than this; -2: retention.bytes; -1: unlimited.",
       minimum=-2),
]}

#: Store-level settings that are not per topic.
STORE_SETTINGS: dict[str, Setting] = {s.name: s for s in [
    _s("log.retention.check.interval.ms", "int", 300_000, "How often the background thread enforces retention (ms).",
       minimum=1),
    _s("max.open.descriptors", "int", 0, "File descriptors the store's partitions may hold open at once (each "
       "written partition holds about 10): past it, those used least recently let go of their files (a writer "
       "hands its lock over) and open them again on their next use. 0: half the process's RLIMIT_NOFILE.",
       minimum=0),
    _s("lock.timeout.ms", "int", 0,
       "How long a writer waits for another writer's partition lock (ms); 0 fails at once.", minimum=0),
    _s("log.cleaner.enable", "bool", True, "Run the background thread that enforces retention and compacts the "
       "partitions this store writes."),
    _s("log.cleaner.backoff.ms", "int", 15_000, "How often the background thread looks for partitions to compact (ms).",
       minimum=1),
    _s("log.cleaner.dedupe.buffer.size", "int", 128 * 1024 * 1024, "Memory for the cleaner's key -> offset map, "
       "workspace included (bytes); a pass holds at most this / 64 distinct keys.", minimum=1024),
    _s("num.partitions", "int", 1, "Partitions of a topic that a producer made with allow_auto_create_topics "
       "creates.", minimum=1, maximum=1_000_000),
    _s("offsets.topic.num.partitions", "int", 8, "Partitions of the internal __consumer_offsets topic, used when "
       "the first consumer group creates it.", minimum=1, maximum=1000),
    _s("offsets.topic.segment.bytes", "int", 16 * 1024 * 1024, "segment.bytes of __consumer_offsets, used when "
       "the first consumer group creates it (small, so compaction keeps it short).", minimum=1024),
    _s("transaction.state.log.num.partitions", "int", 8, "Partitions of the internal __transaction_state topic, "
       "used when the first transactional producer creates it.", minimum=1, maximum=1000),
    _s("transaction.state.log.segment.bytes", "int", 16 * 1024 * 1024, "segment.bytes of __transaction_state, used "
       "when the first transactional producer creates it.", minimum=1024),
    _s("transaction.max.timeout.ms", "int", 900_000, "Largest transaction_timeout_ms a transactional producer may "
       "ask for (ms).", minimum=1, maximum=INT_MAX),
    _s("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000, "How often a store open for "
       "writing (with log.cleaner.enable) aborts transactions open longer than their timeout (ms).", minimum=1),
    _s("transactional.id.expiration.ms", "int", 604_800_000, "Forget a transactional id (its state and coordinator "
       "lock file) whose last transaction ended this long ago (ms), at the timeout sweep; its next "
       "init_transactions starts afresh.", minimum=1, maximum=INT_MAX),
]}

#: Settings of the object store behind tiered storage (pylog.storage.remote), per client: the bucket, how to
#: reach it and how long to wait. Endpoint, region and credentials left empty come from boto3's standard
#: chain (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ~/.aws profiles).
REMOTE_STORAGE_SETTINGS: dict[str, Setting] = {s.name: s for s in [
    _s("remote.storage.location", "str", "", "Where shipped segments live: s3://bucket/prefix (the prefix may be "
       "empty)."),
    _s("remote.storage.endpoint.url", "str", "", "The S3 API's URL (an S3-compatible store, a local test server); "
       "empty: AWS_ENDPOINT_URL or AWS's own."),
    _s("remote.storage.region", "str", "", "The bucket's region; empty: AWS_REGION or the profile's."),
    _s("remote.storage.profile", "str", "", "The AWS credentials profile; empty: the default chain."),
    _s("remote.storage.request.timeout.ms", "int", 30_000, "Connecting, and waiting for each piece of an "
       "answer, gives up after this long (ms), per attempt.", minimum=1, maximum=INT_MAX),
    _s("remote.storage.max.attempts", "int", 4, "Attempts per request (the first included) for throttling, 5xx "
       "answers, timeouts and dropped connections, with the S3 client's jittered exponential back-off.",
       minimum=1, maximum=20),
    _s("remote.storage.payload.signing.enabled", "bool", False, "Sign each upload's body with SHA-256 "
       "(botocore's payload_signing_enabled) on http endpoints too. Off: a PUT sends UNSIGNED-PAYLOAD with the "
       "CRC-32C pylog computed while checking the segment (x-amz-checksum-crc32c), as botocore does over https; "
       "S3, MinIO and Ceph refuse a body that does not match it. On costs ~0.5 ms of CPU per MB shipped; for an "
       "http endpoint whose server ignores checksums (moto does) it is what refuses a body damaged on the way."),
    _s("remote.storage.read.chunk.bytes", "int", 1 << 20, "Remote reads fetch and cache shipped logs in aligned "
       "pieces of this many bytes (at least what a read asks for).", minimum=4096, maximum=1 << 30),
    _s("remote.storage.read.cache.bytes", "int", 64 << 20, "Memory for the pieces of shipped logs that remote "
       "reads fetched, least recently used dropped first; 0 keeps none.", minimum=0, maximum=LONG_MAX),
    _s("remote.log.manager.task.interval.ms", "int", 30_000, "How often the upload thread looks for closed "
       "segments to ship and applies remote retention (ms).", minimum=1, maximum=LONG_MAX),
    _s("remote.log.manager.copier.priority", "str", "idle", "CPU priority of the upload passes while the "
       "lag is at most remote.log.manager.copier.max.lag.bytes: idle (Linux SCHED_IDLE for the pass's thread: a "
       "core only when the store's other work leaves one, so shipping yields to appends and reads) or normal "
       "(the process's own priority). Above the lag, passes run at normal priority.", choices=("idle", "normal")),
    _s("remote.log.manager.copier.max.lag.bytes", "int", 1 << 30, "Closed segments waiting for upload (bytes of "
       "log, over the store's partitions with remote storage) up to which passes run at "
       "remote.log.manager.copier.priority; above it at normal priority, so a busy machine delays shipping by "
       "at most about this much (plus the active segments).", minimum=0, maximum=LONG_MAX),
    _s("remote.log.manager.copier.max.delay.ms", "int", 30_000, "While the store's shipping partitions keep "
       "growing, lowered-priority passes wait for a pause in the appends, but closed segments wait at most this "
       "long (ms) for one; 0 ships at once. Does not apply above remote.log.manager.copier.max.lag.bytes or "
       "with remote.log.manager.copier.priority normal.", minimum=0, maximum=LONG_MAX),
    _s("remote.log.manager.task.retry.backoff.ms", "int", 500, "First wait before a partition whose upload "
       "failed is tried again (ms); doubled per failure up to remote.log.manager.task.retry.backoff.max.ms.",
       minimum=1, maximum=LONG_MAX),
    _s("remote.log.manager.task.retry.backoff.max.ms", "int", 30_000, "Longest wait between tries of a "
       "partition whose uploads keep failing (ms).", minimum=1, maximum=LONG_MAX),
]}



def parse_value(setting: Setting, value: Any) -> Any:
    """``value`` as ``setting`` stores it (an int, float, bool, string or list, by ``setting.kind``), read
    by the rules every user-given value follows (strings are accepted, e.g. from properties files).

    Raises :class:`~pylog.errors.InvalidConfigError` (naming the setting) when the value does not fit."""
    name = setting.name
    try:
        if setting.kind == "int":
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, str):
                value = int(value.strip())
            elif isinstance(value, float):
                if not value.is_integer():
                    raise TypeError
                value = int(value)
            elif not isinstance(value, int):
                raise TypeError
            if not -LONG_MAX - 1 <= value <= LONG_MAX:  # Kafka's int settings are Java longs at most
                raise InvalidConfigError(f"{name}: {value!r} does not fit a Java long (at most {LONG_MAX}, "
                                         "which already means 'forever' for a time in ms)")
        elif setting.kind == "float":
            if isinstance(value, bool):
                raise TypeError
            value = float(value.strip()) if isinstance(value, str) else float(value)
            if not math.isfinite(value):  # NaN passes every minimum/maximum comparison
                raise ValueError
        elif setting.kind == "bool":
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                value = value.strip().lower() == "true"
            elif not isinstance(value, bool):
                raise TypeError
        elif setting.kind == "str":
            if not isinstance(value, str):
                raise TypeError
            value = value.strip()
        elif setting.kind == "list":
            if isinstance(value, str):
                value = tuple(v.strip() for v in value.split(",") if v.strip())
            elif isinstance(value, (list, tuple)):
                value = tuple(str(v).strip() for v in value)
            else:
                raise TypeError
            if not value:
                raise InvalidConfigError(f"{name}: must name at least one of {', '.join(setting.choices or ())}")
            value = tuple(sorted(set(value)))
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{name}: expected {setting.kind}, got {value!r}") from None
    if setting.minimum is not None and value < setting.minimum:
        raise InvalidConfigError(f"{name}: {value!r} is below the minimum {setting.minimum}")
    if setting.maximum is not None and value > setting.maximum:
        raise InvalidConfigError(f"{name}: {value!r} is above the maximum {setting.maximum}")
    if setting.choices is not None:
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if item not in setting.choices:
                raise InvalidConfigError(f"{name}: {item!r} is not one of {', '.join(setting.choices)}")
    return value


def _clamped(setting: Setting, value: Any) -> Any:
    """``value`` moved into what :func:`parse_value` accepts, when earlier versions accepted it but this one does
    not: an int beyond a Java long (or the setting's range), a non-finite float (NaN compared false with
    every bound; in ``min.cleanable.dirty.ratio`` it made every dirty partition compactable, as 0.0 does).
    Any other value is returned as it is (and judged by :func:`parse_value`)."""
    lo = setting.minimum
    hi = setting.maximum
    if setting.kind == "int" and type(value) is int:
        lo = -LONG_MAX - 1 if lo is None else max(int(lo), -LONG_MAX - 1)
        hi = LONG_MAX if hi is None else min(int(hi), LONG_MAX)
        return lo if value < lo else hi if value > hi else value
    if setting.kind == "float" and type(value) is float and not math.isfinite(value):
        if math.isnan(value):
            return lo if lo is not None else 0.0
        return (hi if hi is not None else 1.7976931348623157e308) if value > 0 else \
            (lo if lo is not None else -1.7976931348623157e308)
    return value


def stored_config(overrides: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``overrides`` as read from ``source`` (a topic's ``topic.json``), parsed like :func:`validate` but
    with numbers that earlier versions stored and the current ranges refuse clamped into range (see
    :func:`_clamped`), each with a warning that names the file, the setting and how to set it for good.

    :raises InvalidConfigError: for anything else wrong (an unknown name, a value of the wrong kind).
    """
    fixed: dict[str, Any] = {}
    for key, value in overrides.items():
        setting = SETTINGS.get(key)
        new = _clamped(setting, value) if setting is not None else value
        if new is not value:
            log.warning("pylog: %s: %s = %r is out of range (an earlier version stored it); using %r. To keep a "
                        "value of your choice, set it with store.alter_topic_config(topic, {%r: ...})",
                        source, key, value, new, key)
        fixed[key] = new
    return validate(fixed)


def validate(overrides: Mapping[str, Any] | None, table: Mapping[str, Setting] = SETTINGS) -> dict[str, Any]:
    """Return ``overrides`` parsed and checked against ``table``.

    :raises InvalidConfigError: on an unknown name or a bad value.
    """
    out: dict[str, Any] = {}
    if overrides is not None and not isinstance(overrides, Mapping):
        raise InvalidConfigError(f"a configuration must be a mapping of setting names to values, got "
                                 f"{type(overrides).__name__} {overrides!r:.60}")
    for key, value in (overrides or {}).items():
        setting = table.get(key)
        if setting is None:
            raise InvalidConfigError(f"unknown configuration {key!r}")
        out[key] = parse_value(setting, value)
    return out


def _check_tiering(values: Mapping[str, Any]) -> None:
    """Kafka's rules for KIP-405's settings: no remote storage for compacted topics (compaction rewrites
    sealed segments; shipped ones are immutable, with dense offsets), and local retention within the total."""
    if not values["remote.storage.enable"]:
        return
    if "compact" in values["cleanup.policy"]:
        raise InvalidConfigError("remote.storage.enable: not allowed with cleanup.policy compact (shipped "
                                 "segments are never rewritten)")
    for kind in ("ms", "bytes"):
        local, total = values[f"local.retention.{kind}"], values[f"retention.{kind}"]
        if local == -2 or total == -1:
            continue
        if local == -1 or local > total:
            raise InvalidConfigError(f"local.retention.{kind}: {local} keeps more local data than "
                                     f"retention.{kind} ({total}) keeps the log")


def local_retention(config: Mapping[str, Any]) -> tuple[int, int]:
    """``(ms, bytes)`` that local copies are kept by: ``local.retention.*`` with remote storage on (-2 meaning
    the ``retention.*`` value), else ``retention.*``."""
    ms, nbytes = config["retention.ms"], config["retention.bytes"]
    if not config["remote.storage.enable"]:
        return ms, nbytes
    lms, lbytes = config["local.retention.ms"], config["local.retention.bytes"]
    return (ms if lms == -2 else lms), (nbytes if lbytes == -2 else lbytes)


class TopicConfig(Mapping[str, Any]):
    """An immutable view of a topic's effective configuration: overrides over store defaults over Kafka's.

    Attribute-style access uses underscores: ``cfg.segment_bytes`` is ``cfg["segment.bytes"]``.
    """

    __slots__ = ("_overrides", "_defaults", "_values")

    def __init__(self, overrides: Mapping[str, Any] | None = None,
                 defaults: Mapping[str, Any] | None = None) -> None:
        self._defaults = validate(defaults)
        self._overrides = validate(overrides)
        values = {k: s.default for k, s in SETTINGS.items()}
        values.update(self._defaults)
        values.update(self._overrides)
        if values["max.compaction.lag.ms"] < values["min.compaction.lag.ms"]:
            raise InvalidConfigError("max.compaction.lag.ms must be >= min.compaction.lag.ms")
        _check_tiering(values)
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name.replace("_", ".")]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def overrides(self) -> dict[str, Any]:
        """The topic's own overrides (what ``topic.json`` stores)."""
        return dict(self._overrides)

    def is_override(self, key: str) -> bool:
        """True when ``key`` is set on the topic itself rather than inherited."""
        return key in self._overrides

    def with_overrides(self, changes: Mapping[str, Any]) -> "TopicConfig":
        """A new config with ``changes`` merged into the topic overrides."""
        merged = dict(self._overrides)
        merged.update(changes)
        return TopicConfig(merged, self._defaults)

    @property
    def compact(self) -> bool:
        return "compact" in self._values["cleanup.policy"]

    @property
    def log_append_time(self) -> bool:
        return self._values["message.timestamp.type"] == "LogAppendTime"

    def __repr__(self) -> str:
        return f"TopicConfig({self._overrides!r})"


def split_store_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split :func:`pylog.open` keyword options into (topic defaults, store settings), validating both.

    Keyword names may use underscores for dots (``segment_bytes=...``).
    """
    topic: dict[str, Any] = {}
    store: dict[str, Any] = {}
    for key, value in options.items():
        name = key.replace("_", ".")
        if name in SETTINGS:
            topic[name] = value
        elif name in STORE_SETTINGS or name in REMOTE_STORAGE_SETTINGS:
            store[name] = value
        else:
            raise InvalidConfigError(f"unknown configuration {key!r}")
    TopicConfig(None, topic)  # validates each value and the cross-setting rules (compaction lags)
    table = {**STORE_SETTINGS, **REMOTE_STORAGE_SETTINGS}
    store_values = {k: s.default for k, s in table.items()}
    store_values.update(validate(store, table))
    return topic, store_values

