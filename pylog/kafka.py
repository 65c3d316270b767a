"""kafka-python's names over a store: :class:`KafkaProducer` and :class:`KafkaConsumer`.

A kafka-python program runs after changing only its import (``from pylog.kafka import KafkaProducer``, or
``from pylog import KafkaProducer``): the constructors take kafka-python's keyword arguments, and
``bootstrap_servers`` names the store instead of brokers: a path, ``pylog:///path``, a
:class:`~pylog.store.Store`, or a one-item list of one of those.

Invariants:
- A store given by path is opened with ``create=False`` (a mistyped path is refused, never turned into a
  new store) and belongs to the client: closed by its ``close()``. A :class:`Store` passed in stays the
  caller's and stays open.
- Every kafka-python constructor keyword is accepted. Those pylog implements keep kafka-python's meaning;
  broker-only ones (network, security, metrics reporting, timeouts of requests to a broker) are ignored,
  and each ignored name is logged once per process (``pylog.kafka`` logger, WARNING), so a loop making
  clients does not repeat it. A name kafka-python does not have raises InvalidConfigError.
- These classes are the native :class:`~pylog.clients.producer.Producer` and
  :class:`~pylog.clients.consumer.Consumer` (subclasses): everything else behaves as documented there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from typing import Any, Iterable, Iterator

from .clients.consumer import Consumer
from .clients.producer import Producer
from .errors import InvalidConfigError, UnknownStoreError
from .store import AutoCreatingStore, Store, group_offsets, quota_manager, transaction_coordinator

__all__ = ["KafkaProducer", "KafkaConsumer", "open_bootstrap", "split_kafka_configs", "PRODUCER_IGNORED",
           "CONSUMER_IGNORED"]

log = logging.getLogger("pylog.kafka")

_SCHEME = "pylog://"
#: ``host:port`` or ``host`` names that say a broker was meant (checked only when no such path exists).
_BROKER_LIKE = re.compile(r"^(localhost|[\w.-]+:\d+)(,[\w.-]+:\d+)*$")

#: Settings of any kafka-python client that only mean something with a broker: accepted, ignored, logged.
_BROKER_ONLY = frozenset({
    "api_version", "api_version_auto_timeout_ms", "bootstrap_timeout_ms", "client_dns_lookup",
    "connections_max_idle_ms", "kafka_client", "max_in_flight_requests_per_connection", "metric_reporters",
    "metrics_enabled", "metrics_num_samples", "metrics_sample_window_ms", "proxy_url", "receive_buffer_bytes",
    "receive_message_max_bytes", "reconnect_backoff_max_ms", "reconnect_backoff_ms", "request_timeout_ms",
    "sasl_kerberos_domain_name", "sasl_kerberos_name", "sasl_kerberos_service_name", "sasl_mechanism",
    "sasl_oauth_token_provider", "sasl_plain_password", "sasl_plain_username", "security_protocol", "selector",
    "send_buffer_bytes", "socket_options", "socks5_proxy", "ssl_cafile", "ssl_certfile", "ssl_check_hostname",
    "ssl_ciphers", "ssl_context", "ssl_crlfile", "ssl_keyfile", "ssl_password",
})
#: kafka-python producer settings pylog ignores (with the warning): the broker's and the metadata refresh.
PRODUCER_IGNORED = _BROKER_ONLY | {"metadata_max_age_ms"}
#: kafka-python's default: how long its retries of a record may last in all (ms).
_DELIVERY_TIMEOUT_MS = 120_000
#: kafka-python consumer settings pylog ignores (with the warning): the broker's and the fetch tuning a
#: local read does not need. ``max_poll_interval_ms``: a member that stops polling keeps its partitions.
CONSUMER_IGNORED = _BROKER_ONLY | {
    "fetch_min_bytes", "fetch_max_wait_ms", "max_partition_fetch_bytes", "max_poll_interval_ms", "client_rack",
    "group_instance_id", "default_offset_commit_callback", "enable_incremental_fetch_sessions",
    "metric_group_prefix", "retry_backoff_ms",
}
#: Consumer settings accepted silently when they ask for what pylog always does, with the value that does.
_CONSUMER_ALWAYS = {"check_crcs": True, "exclude_internal_topics": True, "allow_auto_create_topics": None}

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_ignored(kind: str, names: Iterable[str]) -> None:
    """Log the ignored names this process has not logged yet (one warning)."""
    with _warned_lock:
        new = sorted(set(names) - _warned)
        _warned.update(new)
    if new:
        log.warning("pylog %s: ignoring %s: they configure a connection to a Kafka broker, and pylog runs "
                    "in-process without one", kind, ", ".join(new))


def open_bootstrap(bootstrap_servers: Any) -> tuple[Store, bool]:
    """The store ``bootstrap_servers`` names and whether the caller opened it (and so must close it).

    :raises InvalidConfigError: when it names brokers or nothing usable.
    :raises UnknownStoreError: for a path that holds no store (nothing is created).
    """
    target = bootstrap_servers
    if isinstance(target, (list, tuple)):
        if len(target) != 1:
            raise InvalidConfigError(f"bootstrap_servers={bootstrap_servers!r}: pylog reads one store; pass its "
                                     "directory (a path, 'pylog:///path' or a pylog.Store)")
        target = target[0]
    if isinstance(target, Store):
        return target, False
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str) or not target:
        raise InvalidConfigError(f"bootstrap_servers={bootstrap_servers!r}: pass the store's directory (a path, "
                                 "'pylog:///path' or a pylog.Store)")
    path = target[len(_SCHEME):] if target.startswith(_SCHEME) else target
    if not target.startswith(_SCHEME) and _BROKER_LIKE.match(target) and not os.path.exists(target):
        raise InvalidConfigError(f"bootstrap_servers={target!r} looks like a Kafka broker address; pylog has no "
                                 "broker: pass the store's directory instead, e.g. bootstrap_servers="
                                 "'pylog:///var/lib/app/pylog-data' (create one with pylog.open(path))")
    try:
        return Store(path, create=False), True
    except UnknownStoreError as exc:
        raise UnknownStoreError(f"bootstrap_servers={target!r}: {exc}") from None


def split_kafka_configs(kind: str, configs: dict[str, Any], native: Iterable[str],
                        ignored: frozenset[str] | set[str]) -> dict[str, Any]:
    """The settings of ``configs`` that go to the native client; logs the ignored ones.

    :raises InvalidConfigError: for a name kafka-python's client of that ``kind`` does not have either."""
    native = set(native)
    out, dropped, unknown = {}, [], []
    for name, value in configs.items():
        if name in native:
            out[name] = value
        elif name in ignored:
            dropped.append(name)
        else:
            unknown.append(name)
    if unknown:
        raise InvalidConfigError(f"unknown {kind} option(s) {sorted(unknown)}: neither kafka-python's nor pylog's")
    _warn_ignored(kind, dropped)
    return out


@contextlib.contextmanager
def _closed_on_error(store: Store, owned: bool) -> Iterator[None]:
    """A client that fails to start closes the store it opened (one passed in stays open)."""
    try:
        yield
    except BaseException:
        if owned:
            store.close()
        raise


def _strategy(strategy: Any) -> Any:
    """kafka-python's assignor classes (``kafka.coordinator.assignors.*``) as their names, which pylog's
    own assignors share; anything else as it is."""
    name = getattr(strategy, "name", None)
    if isinstance(strategy, type) and isinstance(name, str) and not strategy.__module__.startswith("pylog."):
        return name
    return strategy


def _partitioner(partitioner: Any) -> Any:
    """kafka-python 3's partitioner objects: its ``DefaultPartitioner`` is pylog's default (the same murmur2
    placement of keys, a sticky partition for key-less records), so None; a function of kafka-python 2's
    shape ``fn(key_bytes, all_partitions, available_partitions)`` as it is.

    :raises InvalidConfigError: for another object that is not such a function."""
    if partitioner is None or (type(partitioner).__name__ == "DefaultPartitioner"
                                and type(partitioner).__module__.startswith("kafka.partitioner")):
        return None
    if not callable(partitioner):
        raise InvalidConfigError(f"partitioner={partitioner!r}: pylog calls a function fn(key_bytes, "
                                 "all_partitions, available_partitions) -> partition")
    return partitioner


class KafkaProducer(Producer):
    """kafka-python's ``KafkaProducer`` over a store: ``KafkaProducer(bootstrap_servers="/path", ...)``.

    ``retries=float("inf")`` (kafka-python 3's default) becomes as many retries as fit in
    ``delivery_timeout_ms`` at ``retry_backoff_ms`` each; the native producer takes an int.

    As in kafka-python, ``allow_auto_create_topics`` defaults to True: a send to a missing topic creates
    it with the store's ``num.partitions``. ``transactional_id`` and ``transaction_timeout_ms`` make it a
    transactional producer (``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
    ``commit_transaction``, ``abort_transaction``: see :class:`~pylog.clients.producer.Producer`)."""

    def __init__(self, **configs: Any) -> None:
        auto_create = bool(configs.pop("allow_auto_create_topics", True))
        if "partitioner" in configs:
            configs["partitioner"] = _partitioner(configs["partitioner"])
        delivery_timeout = configs.pop("delivery_timeout_ms", _DELIVERY_TIMEOUT_MS)
        if configs.get("retries") == float("inf"):  # kafka-python 3's default: retry until delivery_timeout_ms
            backoff = configs.get("retry_backoff_ms", Producer.DEFAULT_CONFIG["retry_backoff_ms"])
            configs["retries"] = int(delivery_timeout // max(1, backoff))
        store, owned = open_bootstrap(configs.pop("bootstrap_servers", None))
        with _closed_on_error(store, owned):
            native = split_kafka_configs("producer", configs, Producer.DEFAULT_CONFIG, PRODUCER_IGNORED)
            view = AutoCreatingStore(store) if auto_create else store
            super().__init__(view, quotas=quota_manager(store), transactions=transaction_coordinator(store), **native)
        self._owned_store = store if owned else None
        #: The store this producer writes to.
        self.store = store

    def close(self, timeout: float | None = None) -> None:
        """Flush and stop (see :meth:`Producer.close`), then close the store if this producer opened it."""
        try:
            super().close(timeout)
        finally:
            if self._owned_store is not None:
                self._owned_store.close()


class KafkaConsumer(Consumer):
    """kafka-python's ``KafkaConsumer`` over a store: ``KafkaConsumer("orders", bootstrap_servers="/path",
    group_id="g", ...)``. A consumer never creates topics: a subscribed topic that does not exist yet is
    picked up once it does (within ``metadata_max_age_ms``)."""

    def __init__(self, *topics: str, **configs: Any) -> None:
        for name, ok in _CONSUMER_ALWAYS.items():
            if name in configs:
                value = configs.pop(name)
                if ok is not None and value not in (ok if isinstance(ok, tuple) else (ok,)):
                    raise InvalidConfigError(f"{name}={value!r}: pylog always works as with {name}="
                                             f"{ok[0] if isinstance(ok, tuple) else ok!r}")
        if "partition_assignment_strategy" in configs:
            strategies = configs["partition_assignment_strategy"]
            if not isinstance(strategies, str):
                configs["partition_assignment_strategy"] = [_strategy(s) for s in strategies]
        store, owned = open_bootstrap(configs.pop("bootstrap_servers", None))
        with _closed_on_error(store, owned):
            native = split_kafka_configs("consumer", configs, Consumer.DEFAULT_CONFIG, CONSUMER_IGNORED)
            offsets = group_offsets(store) if native.get("group_id") is not None else None
            super().__init__(store, *topics, quotas=quota_manager(store), offsets=offsets, **native)
        self._owned_store = store if owned else None
        #: The store this consumer reads.
        self.store = store

    def close(self, autocommit: bool = True) -> None:
        """Commit, leave the group and stop (see :meth:`Consumer.close`), then close the store if this
        consumer opened it."""
        try:
            super().close(autocommit)
        finally:
            if self._owned_store is not None:
                self._owned_store.close()
