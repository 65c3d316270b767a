"""The consumer's options (kafka-python's ``KafkaConsumer`` names): their defaults and their checks.

:func:`consumer_config` is what :class:`~pylog.clients.consumer.Consumer` does with its keyword options
before it takes any state: it never sees the consumer, only the options and whether the store is read-only.

Invariants:
- Every option a consumer takes has a default in :data:`DEFAULTS` (``Consumer.DEFAULT_CONFIG`` is a
  read-only view of it); an unknown option, or a value out of its range, raises
  :class:`~pylog.errors.InvalidConfigError` (:class:`~pylog.errors.InvalidGroupError` for a bad group id)
  before anything is made.
- A consumer with a ``group_id`` and ``enable_auto_commit`` on a read-only store is refused
  (:class:`~pylog.errors.ReadOnlyStoreError`): it could not take the commits it would make.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InvalidConfigError, ReadOnlyStoreError
from ..storage.filenames import check_group_id
from .assignors import AbstractPartitionAssignor, RangePartitionAssignor, RoundRobinPartitionAssignor, assignor_named

__all__ = ["DEFAULTS", "consumer_config"]

DEFAULTS: dict[str, Any] = {
    "group_id": None,
    "client_id": None,
    "key_deserializer": None,
    "value_deserializer": None,
    "auto_offset_reset": "latest",
    "enable_auto_commit": True,
    "auto_commit_interval_ms": 5000,
    "max_poll_records": 500,
    "fetch_max_bytes": 52_428_800,
    "consumer_timeout_ms": float("inf"),
    "metadata_max_age_ms": 300_000,
    "session_timeout_ms": 10_000,
    "heartbeat_interval_ms": 3_000,
    "partition_assignment_strategy": (RangePartitionAssignor, RoundRobinPartitionAssignor),
    #: Kafka's: read_committed stops at each partition's last stable offset and skips aborted transactions.
    "isolation_level": "read_uncommitted",
}


def consumer_config(configs: Mapping[str, Any], read_only: bool, read_only_reason: str
                    ) -> tuple[dict[str, Any], list[type[AbstractPartitionAssignor]]]:
    """The options ``configs`` over :data:`DEFAULTS`, checked, and the assignment strategies they name.

    ``read_only``, ``read_only_reason``: the store's (see :class:`~pylog.clients.storeview.StoreView`).
    :raises InvalidConfigError, ReadOnlyStoreError: see the module docstring.
    """
    unknown = set(configs) - set(DEFAULTS)
    if unknown:
        raise InvalidConfigError(f"unknown consumer option(s) {sorted(unknown)} (pylog.KafkaConsumer takes "
                                 "kafka-python's broker options too, and ignores them)")
    cfg = dict(DEFAULTS, **configs)
    strategies = cfg["partition_assignment_strategy"]
    try:
        strategies = [assignor_named(a) for a in ([strategies] if isinstance(strategies, str) else strategies)]
    except (TypeError, ValueError) as exc:
        raise InvalidConfigError(f"partition_assignment_strategy: {exc}") from None
    if not strategies:
        raise InvalidConfigError("partition_assignment_strategy needs at least one strategy")
    for name in ("session_timeout_ms", "heartbeat_interval_ms", "auto_commit_interval_ms"):
        if not isinstance(cfg[name], (int, float)) or isinstance(cfg[name], bool) or cfg[name] <= 0:
            raise InvalidConfigError(f"{name} must be a positive number, got {cfg[name]!r}")
    if cfg["heartbeat_interval_ms"] >= cfg["session_timeout_ms"]:
        raise InvalidConfigError("heartbeat_interval_ms must be lower than session_timeout_ms")
    if cfg["group_id"] is not None:
        check_group_id(cfg["group_id"])  # InvalidGroupError (an InvalidConfigError too)
    if cfg["auto_offset_reset"] not in ("earliest", "latest", "none", "smallest", "largest"):
        raise InvalidConfigError(f"auto_offset_reset must be earliest, latest or none, got "
                                 f"{cfg['auto_offset_reset']!r}")
    if cfg["group_id"] is not None and read_only and cfg["enable_auto_commit"]:
        raise ReadOnlyStoreError(
            f"group {cfg['group_id']!r}: {read_only_reason} and cannot take commits; pass "
            "enable_auto_commit=False and assign() partitions (they start from the group's "
            "committed offsets), or leave out group_id")
    if cfg["isolation_level"] not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError(f"isolation_level must be read_uncommitted or read_committed, got "
                                 f"{cfg['isolation_level']!r}")
    return cfg, strategies
