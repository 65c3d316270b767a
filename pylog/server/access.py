"""Which ACL each Kafka request needs, checked before its handler runs (``pylog serve --authorizer``), and the
ACL APIs (CreateAcls, DescribeAcls, DeleteAcls) over :class:`~pylog.server.authorizer.Authorizer`.

The rules are Kafka's (``KafkaApis`` / KIP-11): Produce WRITE on the topic; Fetch READ; ListOffsets and Metadata
DESCRIBE (Metadata leaves out, when listing every topic, the topics the principal may not describe, and auto-creates a
topic only with CREATE on the cluster or the topic); OffsetCommit READ on the group and each topic; OffsetFetch
DESCRIBE on the group and each topic; FindCoordinator DESCRIBE on the group; JoinGroup, SyncGroup, Heartbeat and
LeaveGroup READ on the group; DescribeGroups DESCRIBE on each group; ListGroups every group with DESCRIBE on the
cluster, else those the principal may describe; DeleteGroups DELETE on each group; OffsetDelete DELETE on the group
and READ on each topic; CreateTopics CREATE on the cluster or the topic; DeleteTopics and DeleteRecords DELETE;
CreatePartitions ALTER; DescribeConfigs DESCRIBE_CONFIGS and AlterConfigs / IncrementalAlterConfigs ALTER_CONFIGS on
the topic (the cluster for broker configs); InitProducerId without a transactional id IDEMPOTENT_WRITE on the cluster
or WRITE on some topic; DescribeLogDirs, DescribeAcls and ListPartitionReassignments DESCRIBE on the cluster;
FindCoordinator for a transactional id DESCRIBE on it; InitProducerId with a transactional id, EndTxn and a
transactional Produce WRITE on the transactional id; AddPartitionsToTxn WRITE on the transactional id and on each
topic (a refused topic's partitions TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn
WRITE on the transactional id and READ on the group; TxnOffsetCommit those and READ on each topic;
DescribeTransactions DESCRIBE on each transactional id (its topics listed only where the principal may describe them);
ListTransactions the transactional ids the principal may describe; AlterReplicaLogDirs, ElectLeaders, CreateAcls and
DeleteAcls ALTER on the cluster; DescribeProducers READ on each topic; DescribeClientQuotas DESCRIBE_CONFIGS and
AlterClientQuotas ALTER_CONFIGS on the cluster.

Invariants:
- Every API the server serves has a rule here or is in :data:`UNCHECKED` (ApiVersions, the SASL exchange,
  DescribeCluster as in Kafka, and the APIs pylog always refuses: the SCRAM-credential APIs and KIP-848's
  ConsumerGroupHeartbeat); :meth:`Access.wrap` refuses a handler
  table with an API in neither, so a new API cannot slip in unchecked.
- A refused item (a topic, a group, a config resource) is answered with TOPIC_AUTHORIZATION_FAILED,
  GROUP_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED in its own entry, shaped by
  :func:`~pylog.server.protocol.error_response`; the handler sees only the items allowed, so a refused item
  is never touched. A request refused as a whole never reaches its handler.
- An ``acks=0`` produce with a refused topic closes the connection (Kafka's answer to any acks=0 failure).
- A request with every item allowed costs its decisions (each a dict lookup once cached, see
  :meth:`~pylog.server.authorizer.Authorizer.authorize_user`) and no coroutine besides its handler's: the hot
  rules return the handler's own coroutine.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Awaitable, Callable

from ..errors import InvalidArgumentError, PylogError
from .authorizer import CLUSTER_NAME, Authorizer, Operation, ResourceType, principal_of
from .errormap import code_for
from .protocol import Request, error_response
from .protocol import codes as E
from .state import ServerState


__all__ = ["Access", "AclHandlers", "UNCHECKED"]

#: (A Produce's handler answers with a future of its answer, once fsynced: see pylog.server.connection;
#: :meth:`Access._split` waits for it, the other rules pass it on as it is.)
Handler = Callable[[Any, Any], Awaitable[dict | None]]
#: A check: (request, connection, handler=the API's handler) -> the response.
Rule = Callable[..., Awaitable[dict | None]]

#: APIs answered without an ACL check (see the module docstring).
UNCHECKED = frozenset((17, 18, 36, 50, 51, 60, 68))

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN_ID = ResourceType.TRANSACTIONAL_ID
READ, WRITE, CREATE, DELETE = Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE
ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS = (Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                                                     Operation.ALTER_CONFIGS)
#: DescribeConfigs / AlterConfigs resource types: topic, broker.
_TOPIC_CONFIGS, _BROKER_CONFIGS = 2, 4
_FAILED: dict[int, int] = {TOPIC: E.TOPIC_AUTHORIZATION_FAILED, GROUP: E.GROUP_AUTHORIZATION_FAILED,
           CLUSTER: E.CLUSTER_AUTHORIZATION_FAILED, TXN_ID: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}


def _with_body(req: Request, body: dict) -> Request:
    return Request(req.api_key, req.api_version, req.correlation_id, req.client_id, body)


class Access:
    """The per-API checks of one server (see the module docstring)."""

    def __init__(self, state: ServerState, authorizer: Authorizer) -> None:
        self.s = state
        self.authorizer = authorizer
        self.rules: dict[int, Rule] = {
            0: self._produce, 1: self._items("topics", "responses", "topic", TOPIC, READ),
            2: self._items("topics", "topics", "name", TOPIC, DESCRIBE), 3: self._metadata,
            8: self._offset_commit, 9: self._offset_fetch, 10: self._find_coordinator,
            11: self._whole_group(READ), 12: self._whole_group(READ), 13: self._whole_group(READ),
            14: self._whole_group(READ), 15: self._items("groups", "groups", None, GROUP, DESCRIBE),
            16: self._list_groups, 19: self._create_topics,
            20: self._items("topic_names", "responses", None, TOPIC, DELETE),
            21: self._items("topics", "topics", "name", TOPIC, DELETE), 22: self._init_producer_id,
            29: self._whole_cluster(DESCRIBE), 30: self._whole_cluster(ALTER), 31: self._whole_cluster(ALTER),
            32: self._configs("results", DESCRIBE_CONFIGS), 33: self._configs("responses", ALTER_CONFIGS),
            34: self._whole_cluster(ALTER), 35: self._whole_cluster(DESCRIBE),
            37: self._items("topics", "results", "name", TOPIC, ALTER),
            42: self._items("groups_names", "results", None, GROUP, DELETE), 43: self._whole_cluster(ALTER),
            44: self._configs("responses", ALTER_CONFIGS), 46: self._whole_cluster(DESCRIBE),
            47: self._offset_delete, 61: self._items("topics", "topics", "name", TOPIC, READ),
            24: self._add_partitions_to_txn, 25: self._add_offsets_to_txn, 26: self._whole_txn_id(WRITE),
            28: self._txn_offset_commit, 65: self._describe_transactions, 66: self._list_transactions,
            48: self._whole_cluster(DESCRIBE_CONFIGS), 49: self._whole_cluster(ALTER_CONFIGS),
        }

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        """``handlers`` with each one's rule in front. :raises InvalidArgumentError: for an API with no rule."""
        missing = sorted(k for k in handlers if k not in self.rules and k not in UNCHECKED)
        if missing:
            raise InvalidArgumentError(f"no authorization rule for API keys {missing}")
        return {k: (h if k in UNCHECKED else self._guarded(self.rules[k], h)) for k, h in handlers.items()}

    @staticmethod
    def _guarded(rule: Rule, handler: Handler) -> Handler:
        return functools.partial(rule, handler=handler)  # the rule returns the handler's coroutine: no second one

    # ------------------------------------------------------------------ decisions

    def allowed(self, conn: Any, op: int, rtype: int, name: Any) -> bool:
        if not isinstance(name, str):
            return True  # a malformed name: the handler answers it (INVALID_TOPIC_EXCEPTION and the like)
        return self.authorizer.authorize_user(conn.principal, conn.client_host, op, rtype, name)

    def _topic_code(self, conn: Any, op: int, name: Any) -> int:
        return E.NONE if self.allowed(conn, op, TOPIC, name) else E.TOPIC_AUTHORIZATION_FAILED

    def _checked(self, req: Request, conn: Any, handler: Handler, arr: str, resp_arr: str,
                 code_of: Callable[[Any], int]) -> Awaitable[dict | None]:
        """The handler's answer to the items of ``req.body[arr]`` that ``code_of`` passes (E.NONE), with an
        error entry (:func:`error_response`) in ``resp_arr`` for each refused one. When every item passes (the
        usual case) this is the handler's own coroutine: a request pays the decisions, no extra coroutine."""
        for item in req.body.get(arr) or ():
            if code_of(item) != E.NONE:
                return self._split(req, conn, handler, arr, resp_arr, code_of)
        return handler(req, conn)

    async def _split(self, req: Request, conn: Any, handler: Handler, arr: str, resp_arr: str,
                     code_of: Callable[[Any], int]) -> dict | None:
        """:meth:`_checked` with some item refused."""
        items = req.body.get(arr) or []
        codes = [code_of(item) for item in items]
        allowed = [i for i, c in zip(items, codes, strict=True) if c == E.NONE]
        denied: dict[int, list] = {}
        for i, c in zip(items, codes, strict=True):
            if c != E.NONE:
                denied.setdefault(c, []).append(i)
        answer: Any = await handler(_with_body(req, {**req.body, arr: allowed}), conn)
        # A Produce answered once fsynced (pylog.server.connection): the refused items join its answer.
        resp: dict | None = await answer if isinstance(answer, asyncio.Future) else answer
        if not allowed and resp is not None:
            resp[resp_arr] = []  # Metadata v0 reads an empty list as "every topic"
        if resp is None:
            return None
        for code, group in denied.items():
            part = error_response(_with_body(req, {**req.body, arr: group}), code, _message(code))
            resp.setdefault(resp_arr, []).extend(part.get(resp_arr) or [])
        return resp

    def _items(self, arr: str, resp_arr: str, key: str | None, rtype: int, op: int) -> Rule:
        """A rule refusing each item of ``arr`` (named by its ``key`` field, or the item itself) without ``op``."""
        code = _FAILED[rtype]

        def rule(req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
            return self._checked(req, conn, handler, arr, resp_arr, lambda i: E.NONE if self.allowed(
                conn, op, rtype, i if key is None else i.get(key)) else code)
        return rule

    def _whole_group(self, op: int) -> Rule:
        def rule(req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
            if not self.allowed(conn, op, GROUP, req.body.get("group_id")):
                return _refused(req, E.GROUP_AUTHORIZATION_FAILED)
            return handler(req, conn)
        return rule

    def _whole_cluster(self, op: int) -> Rule:
        def rule(req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
            if not self.allowed(conn, op, CLUSTER, CLUSTER_NAME):
                return _refused(req, E.CLUSTER_AUTHORIZATION_FAILED)
            return handler(req, conn)
        return rule

    def _configs(self, resp_arr: str, op: int) -> Rule:
        def code_of(conn: Any, r: dict) -> int:
            rtype = r.get("resource_type")
            if rtype == _TOPIC_CONFIGS:
                return E.NONE if self.allowed(conn, op, TOPIC, r.get("resource_name")) else E.TOPIC_AUTHORIZATION_FAILED
            if rtype == _BROKER_CONFIGS:
                return E.NONE if self.allowed(conn, op, CLUSTER, CLUSTER_NAME) else E.CLUSTER_AUTHORIZATION_FAILED
            return E.NONE  # the handler refuses other resource types

        def rule(req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
            return self._checked(req, conn, handler, "resources", resp_arr, lambda r: code_of(conn, r))
        return rule

    # ------------------------------------------------------------------ data APIs

    def _produce(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        authorize, user, host = self.authorizer.authorize_user, conn.principal, conn.client_host  # allowed(), inlined
        txn_id = req.body.get("transactional_id")
        if txn_id is not None and not self.allowed(conn, WRITE, TXN_ID, txn_id):
            return self._produce_txn_refused(req, conn)
        for td in req.body.get("topic_data") or ():
            name = td.get("name")
            if isinstance(name, str) and not authorize(user, host, WRITE, TOPIC, name):
                return self._produce_refused(req, conn, handler)
        return handler(req, conn)

    async def _produce_refused(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        resp = await self._split(req, conn, handler, "topic_data", "responses",
                                 lambda td: self._topic_code(conn, WRITE, td.get("name")))
        if req.body.get("acks") == 0:
            conn.abort()  # acks=0 has no answer to carry the error (see the module docstring)
            return None
        return resp

    async def _produce_txn_refused(self, req: Request, conn: Any) -> dict | None:
        """A transactional Produce whose transactional id the principal may not write: every partition refused."""
        if req.body.get("acks") == 0:
            conn.abort()
            return None
        return error_response(req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              _message(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))

    async def _metadata(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        b = req.body
        requested = b.get("topics")
        if requested is None or (req.api_version == 0 and not requested):
            resp = await handler(req, conn)
            if resp is not None:
                resp["topics"] = [t for t in resp["topics"] if self.allowed(conn, DESCRIBE, TOPIC, t["name"])]
            return resp
        may_create = self.s.config.auto_create_topics and b.get("allow_auto_topic_creation", True) and \
            not self.allowed(conn, CREATE, CLUSTER, CLUSTER_NAME)
        store = self.s.store

        def code_of(t: dict) -> int:
            name = t.get("name")
            if not self.allowed(conn, DESCRIBE, TOPIC, name):
                return E.TOPIC_AUTHORIZATION_FAILED
            if may_create and isinstance(name, str) and not self.allowed(conn, CREATE, TOPIC, name) \
                    and name not in store:
                return E.TOPIC_AUTHORIZATION_FAILED  # Kafka: a topic the principal may not create
            return E.NONE
        return await self._checked(req, conn, handler, "topics", "topics", code_of)

    async def _init_producer_id(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        txn_id = req.body.get("transactional_id")
        if txn_id is not None and not self.allowed(conn, WRITE, TXN_ID, txn_id):
            return {"throttle_time_ms": 0, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1,
                    "producer_epoch": -1}
        if txn_id is None:
            principal, host = principal_of(conn.principal), conn.client_host
            a = self.authorizer
            if not (a.authorize(principal, host, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
                    or a.authorize_any(principal, host, WRITE, TOPIC)):
                return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1,
                        "producer_epoch": -1}
        return await handler(req, conn)

    def _create_topics(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        if self.allowed(conn, CREATE, CLUSTER, CLUSTER_NAME):
            return handler(req, conn)
        return self._checked(req, conn, handler, "topics", "topics",
                             lambda t: self._topic_code(conn, CREATE, t.get("name")))

    # ------------------------------------------------------------------ group APIs

    def _offset_commit(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        if not self.allowed(conn, READ, GROUP, req.body.get("group_id")):
            return _refused(req, E.GROUP_AUTHORIZATION_FAILED)
        return self._checked(req, conn, handler, "topics", "topics",
                             lambda t: self._topic_code(conn, READ, t.get("name")))

    async def _offset_fetch(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        if not self.allowed(conn, DESCRIBE, GROUP, req.body.get("group_id")):
            return error_response(req, E.GROUP_AUTHORIZATION_FAILED, _message(E.GROUP_AUTHORIZATION_FAILED))
        if req.body.get("topics") is None:  # every topic: those the principal may not describe are left out
            resp = await handler(req, conn)
            if resp is not None:
                resp["topics"] = [t for t in resp.get("topics") or [] if self.allowed(conn, DESCRIBE, TOPIC,
                                                                                       t["name"])]
            return resp
        return await self._checked(req, conn, handler, "topics", "topics",
                                   lambda t: self._topic_code(conn, DESCRIBE, t.get("name")))

    def _offset_delete(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        if not self.allowed(conn, DELETE, GROUP, req.body.get("group_id")):
            return _refused(req, E.GROUP_AUTHORIZATION_FAILED)
        return self._checked(req, conn, handler, "topics", "topics",
                             lambda t: self._topic_code(conn, READ, t.get("name")))

    async def _find_coordinator(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        b = req.body
        rtype = {0: GROUP, 1: TXN_ID}.get(b.get("key_type", 0))
        if rtype is not None and not self.allowed(conn, DESCRIBE, rtype, b.get("key")):
            code = _FAILED[rtype]
            return {"throttle_time_ms": 0, "error_code": code, "error_message": _message(code), "node_id": -1,
                    "host": "", "port": -1}
        return await handler(req, conn)

    async def _list_groups(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        resp = await handler(req, conn)
        if resp is not None and not self.allowed(conn, DESCRIBE, CLUSTER, CLUSTER_NAME):
            resp["groups"] = [g for g in resp.get("groups") or []
                              if self.allowed(conn, DESCRIBE, GROUP, g.get("group_id"))]
        return resp


    # ------------------------------------------------------------------ transaction APIs

    def _whole_txn_id(self, op: int) -> Rule:
        def rule(req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
            if not self.allowed(conn, op, TXN_ID, req.body.get("transactional_id")):
                return _refused(req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            return handler(req, conn)
        return rule

    def _add_partitions_to_txn(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        """Kafka's: WRITE on the transactional id, else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        WRITE on each topic, else that topic's partitions TOPIC_AUTHORIZATION_FAILED and all the others
        OPERATION_NOT_ATTEMPTED (nothing is added: a transaction gets all the partitions asked for or none)."""
        b = req.body
        if not self.allowed(conn, WRITE, TXN_ID, b.get("v3_and_below_transactional_id")):
            return _refused(req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        topics = b.get("v3_and_below_topics") or []
        if all(self.allowed(conn, WRITE, TOPIC, t.get("name")) for t in topics):
            return handler(req, conn)
        resp = error_response(req, E.OPERATION_NOT_ATTEMPTED)
        for t, r in zip(topics, resp["results_by_topic_v3_and_below"], strict=True):
            if not self.allowed(conn, WRITE, TOPIC, t.get("name")):
                for p in r["results_by_partition"]:
                    p["partition_error_code"] = E.TOPIC_AUTHORIZATION_FAILED
        return _answered(resp)

    def _add_offsets_to_txn(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        if not self.allowed(conn, WRITE, TXN_ID, req.body.get("transactional_id")):
            return _refused(req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.allowed(conn, READ, GROUP, req.body.get("group_id")):
            return _refused(req, E.GROUP_AUTHORIZATION_FAILED)
        return handler(req, conn)

    def _txn_offset_commit(self, req: Request, conn: Any, handler: Handler) -> Awaitable[dict | None]:
        if not self.allowed(conn, WRITE, TXN_ID, req.body.get("transactional_id")):
            return _refused(req, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not self.allowed(conn, READ, GROUP, req.body.get("group_id")):
            return _refused(req, E.GROUP_AUTHORIZATION_FAILED)
        return self._checked(req, conn, handler, "topics", "topics",
                             lambda t: self._topic_code(conn, READ, t.get("name")))

    async def _describe_transactions(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        """DESCRIBE on each transactional id; each answer lists only the topics the principal may describe."""
        resp = await self._checked(req, conn, handler, "transactional_ids", "transaction_states",
                                   lambda t: E.NONE if self.allowed(conn, DESCRIBE, TXN_ID, t)
                                   else E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        for state in (resp or {}).get("transaction_states") or ():
            state["topics"] = [t for t in state.get("topics") or [] if self.allowed(conn, DESCRIBE, TOPIC, t["topic"])]
        return resp

    async def _list_transactions(self, req: Request, conn: Any, handler: Handler) -> dict | None:
        """The transactions whose id the principal may describe (Kafka's filter)."""
        resp = await handler(req, conn)
        if resp is not None:
            resp["transaction_states"] = [t for t in resp.get("transaction_states") or []
                                          if self.allowed(conn, DESCRIBE, TXN_ID, t["transactional_id"])]
        return resp


async def _answered(resp: dict) -> dict:
    return resp


async def _refused(req: Request, code: int) -> dict:
    """A request refused as a whole: its error response (as an awaitable, what a rule returns)."""
    return error_response(req, code, _message(code))


def _message(code: int) -> str:
    names: dict[int, str] = {E.TOPIC_AUTHORIZATION_FAILED: "topic", E.GROUP_AUTHORIZATION_FAILED: "group",
                             E.CLUSTER_AUTHORIZATION_FAILED: "cluster",
                             E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id"}
    what = names.get(code, "resource")
    return f"not authorized: no ACL allows this principal this operation on the {what}"


class AclHandlers:
    """CreateAcls, DescribeAcls and DeleteAcls over the server's authorizer (checked by :class:`Access` first)."""

    def __init__(self, state: ServerState, authorizer: Authorizer) -> None:
        self.s = state
        self.authorizer = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {29: self.describe_acls, 30: self.create_acls, 31: self.delete_acls}

    async def create_acls(self, req: Any, conn: Any) -> dict:
        creations = req.body["creations"] or []
        try:
            results = await self.s.run(self.authorizer.create, creations)
        except PylogError as exc:
            return {"throttle_time_ms": 0, "results": [{"error_code": code_for(exc), "error_message": str(exc)}
                                                       for _ in creations]}
        return {"throttle_time_ms": 0, "results": [{"error_code": c, "error_message": m} for c, m in results]}

    async def describe_acls(self, req: Any, conn: Any) -> dict:
        entries = self.authorizer.describe(req.body)
        resources: dict[tuple[int, str, int], list[dict]] = {}
        for e in entries:
            resources.setdefault((e.resource_type, e.resource_name, e.pattern_type), []).append(
                {"principal": e.principal, "host": e.host, "operation": e.operation,
                 "permission_type": e.permission})
        return {"throttle_time_ms": 0, "error_code": E.NONE, "error_message": None, "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()]}

    async def delete_acls(self, req: Any, conn: Any) -> dict:
        filters = req.body["filters"] or []
        try:
            matched = await self.s.run(self.authorizer.delete, filters)
        except PylogError as exc:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": code_for(exc), "error_message": str(exc), "matching_acls": []} for _ in filters]}
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": E.NONE, "error_message": None, "matching_acls": [
                {"error_code": E.NONE, "error_message": None, "resource_type": e.resource_type,
                 "resource_name": e.resource_name, "pattern_type": e.pattern_type, "principal": e.principal,
                 "host": e.host, "operation": e.operation, "permission_type": e.permission} for e in found]}
            for found in matched]}

