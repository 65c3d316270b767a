"""The handler table of ``pylog serve``: which coroutine answers each Kafka API, and the checks around them.

:func:`install` fills :attr:`ServerState.handlers <pylog.server.state.ServerState.handlers>` once, before the
first connection: the data APIs (:mod:`pylog.server.handlers`), the admin APIs (:mod:`pylog.server.admin`),
the group APIs (the coordinator's methods), the transaction APIs and DescribeProducers
(:mod:`pylog.server.transactions`), the quota APIs and, with the authorizer, the ACL APIs; then wraps
them in the authorizer's checks (:mod:`pylog.server.access`) and the quotas' throttling
(:mod:`pylog.server.quotas`).

Invariants:
- Only the API keys :func:`pylog.server.protocol.supported_versions` names are in the table (a request for
  another is refused by the connection before any handler).
- With the authorizer on, every handler is wrapped by :class:`~pylog.server.access.Access` (each item checked,
  refused items answered with ``*_AUTHORIZATION_FAILED``); every handler is wrapped by the quotas last, so a
  throttled answer is measured after the authorizer decided.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import protocol
from .access import Access, AclHandlers
from .admin import AdminHandlers
from .coordinator import GroupCoordinator
from .handlers import DataHandlers
from .operations import GROUP
from .state import Handler, ServerState
from .transactions import TxnHandlers

__all__ = ["install"]

#: The group APIs: Kafka API key -> the coordinator's method answering it.
_GROUP_APIS = ((8, "offset_commit"), (9, "offset_fetch"), (11, "join_group"), (12, "heartbeat"),
               (13, "leave_group"), (14, "sync_group"), (15, "describe_groups"), (16, "list_groups"),
               (42, "delete_groups"))


def install(state: ServerState) -> None:
    """Fill ``state.handlers``: every supported API's handler, wrapped by the authorizer and the quotas."""
    data, admin = DataHandlers(state), AdminHandlers(state)
    txn = TxnHandlers(state, data.partition)
    groups = {k: _group_handler(state.coordinator, name) for k, name in _GROUP_APIS}
    groups[15] = _with_group_operations(state, groups[15])
    handlers: dict[int, Handler] = {
        0: data.produce, 1: data.fetch, 2: data.list_offsets, 3: data.metadata, 10: data.find_coordinator,
        18: data.api_versions, 19: admin.create_topics, 20: admin.delete_topics, 21: admin.delete_records,
        22: _init_producer_id(data, txn), 32: admin.describe_configs, 33: admin.alter_configs,
        37: admin.create_partitions, **groups, **admin.handlers(), **txn.handlers(),
    }
    supported = protocol.supported_versions()
    handlers.update(state.quotas.handlers())
    if state.authorizer is not None:
        handlers.update(AclHandlers(state, state.authorizer).handlers())
        # (Access types answers as dicts; the Produce handler's future of one passes through it as is.)
        handlers = Access(state, state.authorizer).wrap(  # type: ignore[assignment]
            {k: h for k, h in handlers.items() if k in supported})  # type: ignore[misc]
    state.handlers = state.quotas.wrap({k: h for k, h in handlers.items() if k in supported})


def _init_producer_id(data: DataHandlers, txn: TxnHandlers) -> Handler:
    """InitProducerId: the transaction coordinator's with a transactional id, else a new idempotent producer id."""
    async def handler(req: Any, conn: Any) -> dict:
        if req.body.get("transactional_id") is not None:
            return await txn.init_producer_id(req, conn)
        return await data.init_producer_id(req, conn)
    handler.__name__ = "init_producer_id"
    return handler


def _with_group_operations(state: ServerState, describe: Handler) -> Handler:
    """DescribeGroups answering ``include_authorized_operations`` (the coordinator knows no principals)."""
    async def handler(req: Any, conn: Any) -> "dict | asyncio.Future[dict] | None":
        result = await describe(req, conn)
        if isinstance(result, dict) and req.body.get("include_authorized_operations"):
            for g in result.get("groups") or ():
                if g.get("error_code") == 0 and isinstance(g.get("group_id"), str):
                    g["authorized_operations"] = state.authorized_operations(conn, GROUP, g["group_id"])
        return result
    handler.__name__ = "describe_groups"
    return handler


def _group_handler(coordinator: GroupCoordinator, name: str) -> Handler:
    """A group API's handler: the coordinator's method, given the client's id and host."""
    method = getattr(coordinator, name)

    async def handler(req: Any, conn: Any) -> dict | None:
        result: dict | None = await method(req.body, req.api_version, client_id=req.client_id or "",
                                           client_host=conn.client_host)
        return result

    handler.__name__ = name
    return handler
