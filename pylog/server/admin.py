"""Kafka's admin requests on a pylog store: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DeleteRecords, OffsetDelete, DescribeCluster and DescribeLogDirs; the
single-node answers of ElectLeaders, AlterReplicaLogDirs, ListPartitionReassignments, ListTransactions and
DescribeTransactions; and the refusals of :data:`~pylog.server.protocol.REFUSED_APIS` (ACLs, SCRAM users).

Each maps onto the store's own call (``create_topic``, ``delete_topic``, ``Topic.add_partitions``,
``alter_topic_config``, ``delete_records``), run in the server's storage thread pool, so names, configs and
internal topics are checked exactly as the library checks them, and a Kafka admin client and ``pylog topics``
see the same store.

Invariants:
- One item's failure is that item's error code and message; the others go on.
- ``validate_only`` requests change nothing (they run the same checks against a scratch config).
- The store is single-node: a replication factor other than -1 or 1, or a manual replica assignment naming
  another broker, is refused with INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT. Its one log
  directory is the store's path; node 0 is the leader of every partition (no election is ever needed) and no
  reassignment or transaction is ever in progress.
- Config changes go through ``store.alter_topic_config`` (checked as the library checks them). Broker configs
  are the store's, fixed when it is opened: DescribeConfigs lists them under Kafka's broker names (topic
  settings under their broker synonyms, e.g. ``log.retention.ms``), read-only; AlterConfigs and
  IncrementalAlterConfigs refuse each one as Kafka refuses a config it cannot update dynamically.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

from ..config import REMOTE_STORAGE_SETTINGS, SETTINGS, STORE_SETTINGS, TopicConfig
from ..errors import InvalidGroupError, PylogError, RebalanceInProgressError, TopicExistsError
from ..structs import TopicPartition
from ..store import check_group_id, is_internal_topic, topic_name_problem
from .group import DEAD, EMPTY
from .errormap import code_for
from .authorizer import CLUSTER_NAME
from .operations import CLUSTER, NOT_REQUESTED
from .limits import check_client_config
from .protocol import REFUSED_APIS, error_response
from .protocol import codes as E
from .state import ServerState


__all__ = ["AdminHandlers"]

#: DescribeConfigs resource types.
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
#: DescribeConfigs config sources (Kafka's DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG).
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
#: Kafka's broker config for each topic setting (its LogConfig synonyms): what a broker's defaults are named.
BROKER_SYNONYMS = {
    "segment.bytes": "log.segment.bytes", "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes", "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes", "cleanup.policy": "log.cleanup.policy",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms", "max.message.bytes": "message.max.bytes",
    "compression.type": "compression.type", "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms", "producer.id.expiration.ms": "producer.id.expiration.ms",
    "message.timestamp.type": "log.message.timestamp.type",
}
#: Kafka's broker config for each setting of ``pylog serve`` (:class:`~pylog.server.settings.ServerConfig`
#: attribute) that Kafka has: DescribeConfigs for the broker reports what the running server uses.
SERVER_SETTINGS = {
    "auto.create.topics.enable": "auto_create_topics", "socket.request.max.bytes": "max_request_bytes",
    "connections.max.idle.ms": "connections_max_idle_ms", "queued.max.request.bytes": "queued_max_request_bytes",
    "max.connections": "max_connections", "max.connections.per.ip": "max_connections_per_ip",
    "group.max.size": "group_max_size", "socket.receive.buffer.bytes": "socket_receive_buffer_bytes",
    "connection.failed.authentication.delay.ms": "connection_failed_authentication_delay_ms",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
}
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
#: Topic configs Kafka 3.x accepts and ignores (``message.format.version`` has no effect since 3.0's
#: inter-broker protocol): accepted and dropped here too, so that clients setting them work (librdkafka 0092).
IGNORED_TOPIC_CONFIGS = frozenset({"message.format.version"})
#: IncrementalAlterConfigs operations.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


class AdminHandlers:
    def __init__(self, state: ServerState) -> None:
        self.s = state

    # ------------------------------------------------------------------ CreateTopics

    async def create_topics(self, req: Any, conn: Any) -> dict:
        b = req.body
        validate_only = bool(b.get("validate_only", False))
        results = []
        for t in b["topics"] or []:
            results.append(await self.s.run(self._create_one, t, validate_only))
        return {"throttle_time_ms": 0, "topics": results}

    def _create_one(self, t: dict, validate_only: bool) -> dict:
        name = t["name"]
        store = self.s.store
        out: dict[str, Any] = {"name": name, "error_code": E.NONE, "error_message": None,
                               "num_partitions": -1, "replication_factor": -1, "configs": None}
        try:
            n = t["num_partitions"]
            rf = t["replication_factor"]
            if t.get("assignments"):
                nodes = {node for a in t["assignments"] for node in a["broker_ids"]}
                if nodes - {0}:
                    return _fail(out, E.INVALID_REPLICA_ASSIGNMENT, "this pylog server is the only broker (node 0)")
                if n != -1:
                    return _fail(out, E.INVALID_REQUEST, "give either num_partitions or assignments, not both")
                n = len(t["assignments"])
            if n == -1:
                n = self.s.default_partitions()
            if rf not in (-1, 1):
                return _fail(out, E.INVALID_REPLICATION_FACTOR,
                             f"replication factor {rf}: a pylog store keeps one copy (use 1 or -1)")
            if not isinstance(n, int) or n < 1:
                return _fail(out, E.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {n}")
            cap = self.s.config.max_partitions_per_topic
            if n > cap:
                return _fail(out, E.INVALID_PARTITIONS, f"{n} partitions: this server creates at most {cap} per "
                             "topic (max_partitions_per_topic)")
            config = {c["name"]: c["value"] for c in t["configs"] or [] if c["name"] not in IGNORED_TOPIC_CONFIGS}
            problem = topic_name_problem(name)
            if problem is not None:
                return _fail(out, E.INVALID_TOPIC_EXCEPTION, problem)
            check_client_config(config)
            if validate_only:
                TopicConfig(config, store.defaults)  # raises InvalidConfigError as create_topic would
                if name in store:
                    raise TopicExistsError(f"topic {name!r} already exists")
            else:
                if name in store:
                    raise TopicExistsError(f"topic {name!r} already exists")
                refused = self._creation_refused(1, n)
                if refused is not None:
                    return _fail(out, *refused)
                store.create_topic(name, partitions=n, config=config)
            out.update(num_partitions=n, replication_factor=1,
                       configs=[_config_entry(k, v, SOURCE_TOPIC) for k, v in
                                TopicConfig(config, store.defaults).items()])
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    def _creation_refused(self, topics: int, partitions: int) -> tuple[int, str] | None:
        """In the storage pool: None when the server's creation limits allow ``topics`` new topics with
        ``partitions`` partitions in all (counted); else the error code and message (logged, rate-limited)."""
        refused = self.s.creations.refusal(topics, partitions)
        if refused is None:
            return None
        message, throttled = refused
        self.s.rlog.log(logging.WARNING, "creation refused", "pylog serve: creation refused: %s", message)
        return (E.THROTTLING_QUOTA_EXCEEDED if throttled else E.POLICY_VIOLATION), message

    # ------------------------------------------------------------------ DeleteTopics

    async def delete_topics(self, req: Any, conn: Any) -> dict:
        b = req.body
        names = b.get("topic_names")
        if names is None:  # v6+: topics by name or id (ids are not supported: pylog topics have none)
            names = [t.get("name") for t in b.get("topics") or []]
        results = []
        for name in names or []:
            results.append(await self.s.run(self._delete_one, name))
        return {"throttle_time_ms": 0, "responses": results}

    def _delete_one(self, name: Any) -> dict:
        out: dict[str, Any] = {"name": name, "error_code": E.NONE, "error_message": None}
        if not isinstance(name, str):
            return _fail(out, E.UNKNOWN_TOPIC_ID, "pylog topics have no ids: delete them by name")
        try:
            if name not in self.s.store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
            refused = self.s.creations.deletion_refusal(self.s.store.topic(name).num_partitions)
            if refused is not None:
                self.s.rlog.log(logging.WARNING, "deletion refused", "pylog serve: deletion refused: %s", refused)
                return _fail(out, E.THROTTLING_QUOTA_EXCEEDED, refused)
            self.s.store.delete_topic(name)
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    # ------------------------------------------------------------------ CreatePartitions

    async def create_partitions(self, req: Any, conn: Any) -> dict:
        b = req.body
        validate_only = bool(b.get("validate_only", False))
        results = []
        for t in b["topics"] or []:
            results.append(await self.s.run(self._grow_one, t, validate_only))
        return {"throttle_time_ms": 0, "results": results}

    def _grow_one(self, t: dict, validate_only: bool) -> dict:
        name, count = t["name"], t["count"]
        out: dict[str, Any] = {"name": name, "error_code": E.NONE, "error_message": None}
        try:
            if name not in self.s.store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
            topic = self.s.store.topic(name)
            cap = self.s.config.max_partitions_per_topic
            if isinstance(count, int) and count > cap:
                return _fail(out, E.INVALID_PARTITIONS, f"{count} partitions: this server grows a topic to at most "
                             f"{cap} (max_partitions_per_topic)")
            if count <= topic.num_partitions:
                return _fail(out, E.INVALID_PARTITIONS, f"topic {name!r} has {topic.num_partitions} partitions; the "
                             f"new count must be larger, got {count}")
            for a in t.get("assignments") or []:
                if set(a["broker_ids"]) - {0}:
                    return _fail(out, E.INVALID_REPLICA_ASSIGNMENT, "this pylog server is the only broker (node 0)")
            if is_internal_topic(name):
                return _fail(out, E.INVALID_TOPIC_EXCEPTION, f"{name!r} is an internal topic of pylog")
            if not validate_only:
                refused = self._creation_refused(0, count - topic.num_partitions)
                if refused is not None:
                    return _fail(out, *refused)
                topic.add_partitions(count)
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    # ------------------------------------------------------------------ DescribeConfigs / AlterConfigs

    async def describe_configs(self, req: Any, conn: Any) -> dict:
        resources = req.body["resources"] or []
        results = await self.s.run(lambda: [self._describe_one(r, req.api_version) for r in resources])
        return {"throttle_time_ms": 0, "results": results}

    def _describe_one(self, r: dict, version: int) -> dict:
        rtype, rname, keys = r["resource_type"], r["resource_name"], r.get("configuration_keys")
        out: dict[str, Any] = {"error_code": E.NONE, "error_message": None, "resource_type": rtype,
                               "resource_name": rname, "configs": []}
        store = self.s.store
        try:
            if rtype == TOPIC_RESOURCE:
                if not isinstance(rname, str) or rname not in store:
                    return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {rname!r}")
                cfg = store.topic(rname).config
                items = [(k, cfg[k], SOURCE_TOPIC if cfg.is_override(k) else SOURCE_DEFAULT) for k in cfg]
            elif rtype == BROKER_RESOURCE:
                items = self._broker_configs()
            else:
                return _fail(out, E.INVALID_REQUEST, f"resource type {rtype} is not described by pylog serve "
                             "(topics: 2, broker: 4)")
            if keys is not None:
                wanted = set(keys)
                items = [i for i in items if i[0] in wanted]
            # Broker configs are read-only: fixed when the store is opened.
            out["configs"] = [_config_entry(k, v, src, version, rtype == BROKER_RESOURCE) for k, v, src in items]
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    def _broker_configs(self) -> list[tuple[str, Any, int]]:
        """(Kafka's name, value, source) of every broker config: the store's topic defaults under their
        broker synonyms, the store's settings (``num.partitions`` as the server uses it: its own setting when
        given), the server's settings Kafka has, the group coordinator's settings, broker.id."""
        store, coordinator, config = self.s.store, self.s.coordinator, self.s.config
        given = store.defaults
        cfg = TopicConfig(None, given)
        items = [(BROKER_SYNONYMS[k], cfg[k], SOURCE_STATIC_BROKER if k in given else SOURCE_DEFAULT)
                 for k in SETTINGS if k in BROKER_SYNONYMS]
        table = {**STORE_SETTINGS, **REMOTE_STORAGE_SETTINGS}
        items += [(k, v, SOURCE_DEFAULT if v == table[k].default else SOURCE_STATIC_BROKER)
                  for k, v in store.settings.items() if k != "num.partitions"]
        partitions = self.s.default_partitions()
        items.append(("num.partitions", partitions, SOURCE_DEFAULT if partitions == table["num.partitions"].default
                      else SOURCE_STATIC_BROKER))
        defaults = type(config)()
        items += [(k, getattr(config, a), SOURCE_DEFAULT if getattr(config, a) == getattr(defaults, a)
                   else SOURCE_STATIC_BROKER) for k, a in SERVER_SETTINGS.items()]
        group = {"group.initial.rebalance.delay.ms": coordinator.initial_rebalance_delay_ms,
                 "group.min.session.timeout.ms": coordinator.min_session_timeout_ms,
                 "group.max.session.timeout.ms": coordinator.max_session_timeout_ms,
                 "offset.metadata.max.bytes": coordinator.max_metadata_bytes}
        items += [(k, v, SOURCE_STATIC_BROKER) for k, v in group.items()]
        items.append(("broker.id", 0, SOURCE_STATIC_BROKER))
        return sorted(items)

    async def alter_configs(self, req: Any, conn: Any) -> dict:
        b = req.body
        validate_only = bool(b.get("validate_only", False))
        results = []
        for r in b["resources"] or []:
            results.append(await self.s.run(self._alter_one, r, validate_only))
        return {"throttle_time_ms": 0, "responses": results}

    def _alter_one(self, r: dict, validate_only: bool) -> dict:
        rtype, rname = r["resource_type"], r["resource_name"]
        out: dict[str, Any] = {"error_code": E.NONE, "error_message": None, "resource_type": rtype,
                               "resource_name": rname}
        store = self.s.store
        try:
            if rtype == BROKER_RESOURCE:
                return self._refuse_broker_change(out, [c["name"] for c in r["configs"] or []])
            if rtype != TOPIC_RESOURCE:
                return _fail(out, E.INVALID_REQUEST, "pylog serve alters topic configs only (resource type 2)")
            if not isinstance(rname, str) or rname not in store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {rname!r}")
            # AlterConfigs replaces the whole set of overrides (Kafka's non-incremental semantics): keys not
            # given return to their defaults.
            topic = store.topic(rname)
            wanted = {c["name"]: c["value"] for c in r["configs"] or []
                      if c["value"] is not None and c["name"] not in IGNORED_TOPIC_CONFIGS}
            check_client_config(wanted)
            new = TopicConfig(wanted, store.defaults)
            if not validate_only:
                dropped = [k for k in topic.config.overrides if k not in wanted]
                store.alter_topic_config(rname, new.overrides, remove=dropped)
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    def _refuse_broker_change(self, out: dict, names: list[Any]) -> dict:
        """Kafka's answer to changing broker configs it cannot update dynamically (INVALID_REQUEST, "Cannot
        update these configs dynamically"), naming each config: every broker config of pylog serve is the
        store's, fixed when it is opened. No config named: nothing to change, no error (as Kafka)."""
        if not names:
            return out
        known = {k for k, _, _ in self._broker_configs()}
        fixed = sorted({str(n) for n in names if n in known})
        unknown = sorted({str(n) for n in names if n not in known})
        parts = []
        if fixed:
            parts.append(f"Cannot update these configs dynamically: {', '.join(fixed)} (pylog serve's broker "
                         "configs are the store's, set when it is opened: pylog.open(path, **defaults) before "
                         "pylog.serve(store); topic configs can be altered per topic)")
        if unknown:
            parts.append(f"Unknown broker configs: {', '.join(unknown)}")
        return _fail(out, E.INVALID_REQUEST, "; ".join(parts))

    # ------------------------------------------------------------------ IncrementalAlterConfigs

    async def incremental_alter_configs(self, req: Any, conn: Any) -> dict:
        b = req.body
        validate_only = bool(b.get("validate_only", False))
        results = []
        for r in b["resources"] or []:
            results.append(await self.s.run(self._alter_incrementally, r, validate_only))
        return {"throttle_time_ms": 0, "responses": results}

    def _alter_incrementally(self, r: dict, validate_only: bool) -> dict:
        rtype, rname = r["resource_type"], r["resource_name"]
        out: dict[str, Any] = {"error_code": E.NONE, "error_message": None, "resource_type": rtype,
                               "resource_name": rname}
        store = self.s.store
        try:
            if rtype == BROKER_RESOURCE:
                return self._refuse_broker_change(out, [c["name"] for c in r["configs"] or []])
            if rtype != TOPIC_RESOURCE:
                return _fail(out, E.INVALID_REQUEST, "pylog serve alters topic configs only (resource type 2)")
            if not isinstance(rname, str) or rname not in store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {rname!r}")
            cfg = store.topic(rname).config
            changes: dict[str, Any] = {}
            remove: set[str] = set()
            seen: set[str] = set()
            for c in r["configs"] or []:
                key, op, value = c["name"], c["config_operation"], c["value"]
                if key in seen:  # Kafka refuses a key named twice in one resource
                    return _fail(out, E.INVALID_REQUEST, f"{key!r} is given more than once")
                seen.add(key)
                if key in IGNORED_TOPIC_CONFIGS:
                    continue
                setting = SETTINGS.get(key)
                if setting is None:
                    return _fail(out, E.INVALID_CONFIG, f"unknown topic config {key!r}")
                if op == OP_SET:
                    if value is None:
                        return _fail(out, E.INVALID_REQUEST, f"SET {key!r} needs a value")
                    changes[key] = value
                elif op == OP_DELETE:
                    remove.add(key)
                elif op in (OP_APPEND, OP_SUBTRACT):
                    if setting.kind != "list":
                        return _fail(out, E.INVALID_CONFIG, f"{key!r} is not a list: APPEND and SUBTRACT apply "
                                     "to list-valued configs (e.g. cleanup.policy)")
                    items = [v.strip() for v in (value or "").split(",") if v.strip()]
                    current = list(changes.get(key, cfg[key]))
                    if op == OP_APPEND:
                        new = current + [v for v in items if v not in current]
                    else:
                        new = [v for v in current if v not in items]
                    changes[key] = new  # an empty list is refused by the config check (InvalidConfigError)
                else:
                    return _fail(out, E.INVALID_REQUEST, f"unknown config operation {op} for {key!r}")
            check_client_config(changes)
            kept = {k: v for k, v in cfg.overrides.items() if k not in remove}
            TopicConfig({**kept, **changes}, store.defaults)  # raises InvalidConfigError, as the store would
            if not validate_only and (changes or remove):
                store.alter_topic_config(rname, changes, remove=remove - set(changes))
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    # ------------------------------------------------------------------ DescribeCluster

    async def describe_cluster(self, req: Any, conn: Any) -> dict:
        host, port = self.s.advertised
        return {"throttle_time_ms": 0, "error_code": E.NONE, "error_message": None,
                "endpoint_type": req.body.get("endpoint_type", 1), "cluster_id": self.s.cluster_id,
                "controller_id": 0, "brokers": [{"broker_id": 0, "host": host, "port": port, "rack": None}],
                "cluster_authorized_operations": self.s.authorized_operations(conn, CLUSTER, CLUSTER_NAME)
                if req.body.get("include_cluster_authorized_operations") else NOT_REQUESTED}

    # ------------------------------------------------------------------ OffsetDelete

    async def offset_delete(self, req: Any, conn: Any) -> dict:
        b = req.body
        group_id = b["group_id"]
        wanted = [(t["name"], p["partition_index"]) for t in b["topics"] or [] for p in t["partitions"] or []]

        def top(code: int) -> dict:
            return {"error_code": code, "throttle_time_ms": 0, "topics": []}

        try:
            check_group_id(group_id)
        except InvalidGroupError:
            return top(E.INVALID_GROUP_ID)
        coordinator = self.s.coordinator
        live = coordinator.group_state(group_id) not in (None, EMPTY, DEAD)
        subscribed = coordinator.subscribed_topics(group_id)
        if live and subscribed is None:  # members of another protocol type (Kafka: NON_EMPTY_GROUP)
            return top(E.NON_EMPTY_GROUP)
        codes = await self.s.run(self._delete_offsets, group_id, wanted, subscribed or set(), live)
        if isinstance(codes, int):
            return top(codes)
        topics: dict[Any, list[dict]] = {}
        for (name, index), code in zip(wanted, codes, strict=True):
            topics.setdefault(name, []).append({"partition_index": index, "error_code": code})
        return {"error_code": E.NONE, "throttle_time_ms": 0,
                "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}

    def _delete_offsets(self, group_id: str, wanted: list[tuple[Any, Any]], subscribed: set[str],
                        live: bool) -> int | list[int]:
        store = self.s.store
        if not live and not store.committed_offsets(group_id) and \
                not store.describe_consumer_group(group_id).members:
            return E.GROUP_ID_NOT_FOUND
        pylog_topics = {t for m in store.describe_consumer_group(group_id).members for t in m.topics}
        codes: list[int] = []
        doomed: list[TopicPartition] = []
        for name, index in wanted:
            if name in subscribed or name in pylog_topics:
                codes.append(E.GROUP_SUBSCRIBED_TO_TOPIC)
            elif not isinstance(name, str) or name not in store or not 0 <= index < store.topic(name).num_partitions:
                codes.append(E.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                codes.append(E.NONE)
                doomed.append(TopicPartition(name, index))
        if doomed:
            try:
                store.delete_committed_offsets(group_id, doomed)
            except RebalanceInProgressError:  # a pylog consumer subscribed in between
                return [E.GROUP_SUBSCRIBED_TO_TOPIC if c == E.NONE else c for c in codes]
            except PylogError as exc:
                return [code_for(exc) if c == E.NONE else c for c in codes]
        return codes

    # ------------------------------------------------------------------ DescribeLogDirs / AlterReplicaLogDirs

    async def describe_log_dirs(self, req: Any, conn: Any) -> dict:
        # The store's absolute path only to a local, unauthenticated client of a server without the authorizer
        # (today's behaviour) or to a super user: others get its directory's name (the path tells an attacker
        # about the host's layout).
        s = self.s
        full = s.is_super_user(conn.principal) or (s.authorizer is None and s.config.sasl_credentials is None)
        return await s.run(self._describe_log_dirs, req.body.get("topics"), full)

    def _describe_log_dirs(self, wanted: list[dict] | None, full_path: bool) -> dict:
        store = self.s.store
        if wanted is None:
            pairs = [(name, None) for name in store.topics()]
        else:
            pairs = [(t["topic"], t["partitions"]) for t in wanted]
        topics = []
        for name, indexes in pairs:
            if not isinstance(name, str) or name not in store:
                continue  # Kafka leaves out partitions the broker does not host
            topic = store.topic(name)
            n = topic.num_partitions
            parts = [{"partition_index": i, "partition_size": topic.partition(i).size_bytes(), "offset_lag": 0,
                      "is_future_key": False}
                     for i in (range(n) if indexes is None else sorted(set(indexes))) if 0 <= i < n]
            if parts:
                topics.append({"name": name, "partitions": parts})
        log_dir = os.path.realpath(store.path)
        try:
            usage = shutil.disk_usage(store.path)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        return {"throttle_time_ms": 0, "error_code": E.NONE, "results": [
            {"error_code": E.NONE, "log_dir": log_dir if full_path else os.path.basename(log_dir), "topics": topics,
             "total_bytes": total, "usable_bytes": usable}]}

    async def alter_replica_log_dirs(self, req: Any, conn: Any) -> dict:
        """The store's path is the only log dir: moving a partition there is done already; elsewhere is
        LOG_DIR_NOT_FOUND."""
        return await self.s.run(self._alter_replica_log_dirs, req)

    def _alter_replica_log_dirs(self, req: Any) -> dict:
        here = os.path.realpath(self.s.store.path)
        results: dict[str, list[dict]] = {}
        for d in req.body["dirs"] or []:
            path = d["path"]
            ok = isinstance(path, str) and os.path.realpath(path) == here
            for t in d["topics"] or []:
                name = t["name"]
                known = isinstance(name, str) and name in self.s.store
                n = self.s.store.topic(name).num_partitions if known else 0
                for i in t["partitions"] or []:
                    code = E.UNKNOWN_TOPIC_OR_PARTITION if not 0 <= i < n else (
                        E.NONE if ok else E.LOG_DIR_NOT_FOUND)
                    results.setdefault(name, []).append({"partition_index": i, "error_code": code})
        return {"throttle_time_ms": 0, "results": [{"topic_name": n, "partitions": ps} for n, ps in results.items()]}

    # ------------------------------------------------------------------ single-node answers

    async def elect_leaders(self, req: Any, conn: Any) -> dict:
        """Node 0 leads every partition, its only replica: no election is needed (ELECTION_NOT_NEEDED per
        partition named, as Kafka answers for a partition whose preferred leader leads); unknown partitions get
        UNKNOWN_TOPIC_OR_PARTITION. ``topic_partitions`` null (every partition): nothing to report."""
        return await self.s.run(self._elect_leaders, req)

    def _elect_leaders(self, req: Any) -> dict:
        store = self.s.store
        results = []
        for t in req.body["topic_partitions"] or []:
            name = t["topic"]
            n = store.topic(name).num_partitions if isinstance(name, str) and name in store else 0
            results.append({"topic": name, "partition_result": [
                {"partition_id": i, "error_code": E.ELECTION_NOT_NEEDED if 0 <= i < n else E.UNKNOWN_TOPIC_OR_PARTITION,
                 "error_message": None} for i in t["partitions"] or []]})
        return {"throttle_time_ms": 0, "error_code": E.NONE, "replica_election_results": results}

    async def list_partition_reassignments(self, req: Any, conn: Any) -> dict:
        return {"throttle_time_ms": 0, "error_code": E.NONE, "error_message": None, "topics": []}

    async def list_transactions(self, req: Any, conn: Any) -> dict:
        return {"throttle_time_ms": 0, "error_code": E.NONE, "unknown_state_filters": [], "transaction_states": []}

    async def describe_transactions(self, req: Any, conn: Any) -> dict:
        return {"throttle_time_ms": 0, "transaction_states": [
            {"error_code": E.TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": tid, "transaction_state": "",
             "topics": []} for tid in req.body["transactional_ids"] or []]}

    # ------------------------------------------------------------------ refusals

    async def refuse(self, req: Any, conn: Any) -> dict:
        """An API of :data:`~pylog.server.protocol.REFUSED_APIS`: its error code and message in every error
        field of the response, mirroring the request's items."""
        code, message = REFUSED_APIS[req.api_key]
        body = error_response(req, code, message)
        if req.api_key == DESCRIBE_USER_SCRAM_CREDENTIALS:
            # The error goes per user only: librdkafka (2.x) frees a top-level error message it did not
            # allocate and crashes the client process. Describing every user (null) lists none.
            body["error_code"], body["error_message"] = E.NONE, None
        return body

    def handlers(self) -> dict[int, Any]:
        """api key -> handler for the APIs of this module added after CreateTopics ... DeleteRecords."""
        out: dict[int, Any] = {
            34: self.alter_replica_log_dirs, 35: self.describe_log_dirs, 43: self.elect_leaders,
            44: self.incremental_alter_configs, 46: self.list_partition_reassignments, 47: self.offset_delete,
            60: self.describe_cluster, 65: self.describe_transactions, 66: self.list_transactions,
        }
        out.update({k: self.refuse for k in REFUSED_APIS})
        return out

    # ------------------------------------------------------------------ DeleteRecords

    async def delete_records(self, req: Any, conn: Any) -> dict:
        topics = []
        for t in req.body["topics"] or []:
            parts = []
            for p in t["partitions"] or []:
                parts.append(await self.s.run(self._trim_one, t["name"], p["partition_index"], p["offset"]))
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _trim_one(self, name: str, index: int, offset: int) -> dict:
        out: dict[str, Any] = {"partition_index": index, "low_watermark": -1, "error_code": E.NONE}
        store = self.s.store
        try:
            if not isinstance(name, str) or name not in store:
                out["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                return out
            topic = store.topic(name)
            if not 0 <= index < topic.num_partitions:
                out["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                return out
            part = topic.partition(index)
            if offset == -1:  # Kafka: up to the high watermark
                offset = part.log_end_offset
            if offset < 0 or offset > part.log_end_offset:
                out["error_code"] = E.OFFSET_OUT_OF_RANGE
                return out
            store.delete_records(name, index, offset)
            out["low_watermark"] = part.log_start_offset
        except PylogError as exc:
            out["error_code"] = code_for(exc)
        return out


def _fail(out: dict, code: int, message: str) -> dict:
    out["error_code"], out["error_message"] = code, message
    return out


def _config_entry(name: str, value: Any, source: int, version: int = 1, read_only: bool = False) -> dict:
    text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
    if isinstance(value, (list, tuple)):
        text = ",".join(str(v) for v in value)
    return {"name": name, "value": text, "read_only": read_only, "is_default": source == SOURCE_DEFAULT,
            "config_source": source, "is_sensitive": False, "synonyms": [], "config_type": 0,
            "documentation": None}

