"""Kafka's admin requests on a pylog store: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs and DeleteRecords.

Each maps onto the store's own call (``create_topic``, ``delete_topic``, ``Topic.add_partitions``,
``alter_topic_config``, ``delete_records``), run in the server's storage thread pool, so names, configs and
internal topics are checked exactly as the library checks them, and a Kafka admin client and ``pylog topics``
see the same store.

Invariants:
- One item's failure is that item's error code and message; the others go on.
- ``validate_only`` requests change nothing (they run the same checks against a scratch config).
- The store is single-node: a replication factor other than -1 or 1, or a manual replica assignment naming
  another broker, is refused with INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable

from ..config import SETTINGS, TopicConfig
from ..errors import PylogError, TopicExistsError
from ..storage.filenames import is_internal_topic, topic_name_problem
from .errormap import code_for
from .protocol import codes as E

if TYPE_CHECKING:
    from .server import ServerState

__all__ = ["AdminHandlers"]

#: DescribeConfigs resource types.
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
#: DescribeConfigs config sources.
SOURCE_TOPIC, SOURCE_DEFAULT = 1, 5


class AdminHandlers:
    def __init__(self, state: "ServerState") -> None:
        self.s = state

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.s.executor, fn, *args)

    # ------------------------------------------------------------------ CreateTopics

    async def create_topics(self, req: Any, conn: Any) -> dict:
        b = req.body
        validate_only = bool(b.get("validate_only", False))
        results = []
        for t in b["topics"] or []:
            results.append(await self.run(self._create_one, t, validate_only))
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
                n = store.settings["num.partitions"]
            if rf not in (-1, 1):
                return _fail(out, E.INVALID_REPLICATION_FACTOR,
                             f"replication factor {rf}: a pylog store keeps one copy (use 1 or -1)")
            if not isinstance(n, int) or n < 1:
                return _fail(out, E.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {n}")
            config = {c["name"]: c["value"] for c in t["configs"] or []}
            problem = topic_name_problem(name)
            if problem is not None:
                return _fail(out, E.INVALID_TOPIC_EXCEPTION, problem)
            if validate_only:
                TopicConfig(config, store.defaults)  # raises InvalidConfigError as create_topic would
                if name in store:
                    raise TopicExistsError(f"topic {name!r} already exists")
            else:
                store.create_topic(name, partitions=n, config=config)
            out.update(num_partitions=n, replication_factor=1,
                       configs=[_config_entry(k, v, SOURCE_TOPIC) for k, v in
                                TopicConfig(config, store.defaults).items()])
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    # ------------------------------------------------------------------ DeleteTopics

    async def delete_topics(self, req: Any, conn: Any) -> dict:
        b = req.body
        names = b.get("topic_names")
        if names is None:  # v6+: topics by name or id (ids are not supported: pylog topics have none)
            names = [t.get("name") for t in b.get("topics") or []]
        results = []
        for name in names or []:
            results.append(await self.run(self._delete_one, name))
        return {"throttle_time_ms": 0, "responses": results}

    def _delete_one(self, name: Any) -> dict:
        out: dict[str, Any] = {"name": name, "error_code": E.NONE, "error_message": None}
        if not isinstance(name, str):
            return _fail(out, E.UNKNOWN_TOPIC_ID, "pylog topics have no ids: delete them by name")
        try:
            if name not in self.s.store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
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
            results.append(await self.run(self._grow_one, t, validate_only))
        return {"throttle_time_ms": 0, "results": results}

    def _grow_one(self, t: dict, validate_only: bool) -> dict:
        name, count = t["name"], t["count"]
        out: dict[str, Any] = {"name": name, "error_code": E.NONE, "error_message": None}
        try:
            if name not in self.s.store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
            topic = self.s.store.topic(name)
            if count <= topic.num_partitions:
                return _fail(out, E.INVALID_PARTITIONS, f"topic {name!r} has {topic.num_partitions} partitions; the "
                             f"new count must be larger, got {count}")
            for a in t.get("assignments") or []:
                if set(a["broker_ids"]) - {0}:
                    return _fail(out, E.INVALID_REPLICA_ASSIGNMENT, "this pylog server is the only broker (node 0)")
            if not validate_only:
                if is_internal_topic(name):
                    return _fail(out, E.INVALID_TOPIC_EXCEPTION, f"{name!r} is an internal topic of pylog")
                topic.add_partitions(count)
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    # ------------------------------------------------------------------ DescribeConfigs / AlterConfigs

    async def describe_configs(self, req: Any, conn: Any) -> dict:
        results = [self._describe_one(r, req.api_version) for r in req.body["resources"] or []]
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
                items = [(k, v, SOURCE_DEFAULT) for k, v in store.defaults.items()]
            else:
                return _fail(out, E.INVALID_REQUEST, f"resource type {rtype} is not described by pylog serve "
                             "(topics: 2, broker: 4)")
            if keys is not None:
                wanted = set(keys)
                items = [i for i in items if i[0] in wanted]
            out["configs"] = [_config_entry(k, v, src, version) for k, v, src in items]
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    async def alter_configs(self, req: Any, conn: Any) -> dict:
        b = req.body
        validate_only = bool(b.get("validate_only", False))
        results = []
        for r in b["resources"] or []:
            results.append(await self.run(self._alter_one, r, validate_only))
        return {"throttle_time_ms": 0, "responses": results}

    def _alter_one(self, r: dict, validate_only: bool) -> dict:
        rtype, rname = r["resource_type"], r["resource_name"]
        out: dict[str, Any] = {"error_code": E.NONE, "error_message": None, "resource_type": rtype,
                               "resource_name": rname}
        store = self.s.store
        try:
            if rtype != TOPIC_RESOURCE:
                return _fail(out, E.INVALID_REQUEST, "pylog serve alters topic configs only (resource type 2)")
            if not isinstance(rname, str) or rname not in store:
                return _fail(out, E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {rname!r}")
            # AlterConfigs replaces the whole set of overrides (Kafka's non-incremental semantics): keys not
            # given return to their defaults.
            topic = store.topic(rname)
            wanted = {c["name"]: c["value"] for c in r["configs"] or [] if c["value"] is not None}
            new = TopicConfig(wanted, store.defaults)
            if not validate_only:
                reset = {k: SETTINGS[k].default for k in topic.config.overrides if k not in wanted}
                store.alter_topic_config(rname, {**reset, **new.overrides})
        except PylogError as exc:
            _fail(out, code_for(exc), str(exc))
        return out

    # ------------------------------------------------------------------ DeleteRecords

    async def delete_records(self, req: Any, conn: Any) -> dict:
        topics = []
        for t in req.body["topics"] or []:
            parts = []
            for p in t["partitions"] or []:
                parts.append(await self.run(self._trim_one, t["name"], p["partition_index"], p["offset"]))
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


def _config_entry(name: str, value: Any, source: int, version: int = 1) -> dict:
    text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
    if isinstance(value, (list, tuple)):
        text = ",".join(str(v) for v in value)
    return {"name": name, "value": text, "read_only": False, "is_default": source == SOURCE_DEFAULT,
            "config_source": source, "is_sensitive": False, "synonyms": [], "config_type": 0,
            "documentation": None}

