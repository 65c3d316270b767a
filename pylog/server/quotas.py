"""Client quotas in ``pylog serve``: produce and fetch byte rates and the request quota per user and client id,
enforced as a Kafka broker does (delay the response, report ``throttle_time_ms``), measured by pylog's quota
code (:class:`pylog.clients.quotas.QuotaManager`: Kafka's sampled rate and throttle-time formula).

Quotas are set per entity, Kafka's names (``kafka-configs --entity-type users/clients``)::

    {"user=alice": {"producer_byte_rate": 1e6}, "user=alice,client-id=etl": {"consumer_byte_rate": 5e6},
     "client-id=<default>": {"request_percentage": 50}, "user=<default>": {...}}

Each quota type (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``) of a request by
(user, client id) comes from the most specific entity that sets it, in Kafka's order: user and client id,
user and default client id, user, default user and client id, default user and default client id, default
user, client id, default client id. The clients that entity covers share one budget (all of alice's client ids
share ``user=alice``; a ``<default>`` entity gives each user or client id its own budget).

Invariants:
- Produce records the request's record bytes, Fetch the response's record bytes, every request (but the long
  polls: Fetch, JoinGroup, SyncGroup, whose waiting is not work) its handling time in percent-seconds (a
  Produce answered once fsynced: until its handler hands its answer on, the fsync wait not counted); the
  response is then delayed by the largest throttle time of the three, capped at the quota window (Kafka's
  cap), and carries it in ``throttle_time_ms``. Nothing is refused.
- A request of a (user, client id) with no quota costs a dict lookup (the resolution is cached, bounded); one
  with quotas adds at most two clock reads (before and after its handler, the second shared by its records)
  and O(1) recording per quota (:class:`~pylog.clients.quotas.QuotaManager`).
- At most :data:`MAX_BUDGETS` budgets are kept: a ``<default>`` client-id entity gives every client id its own,
  and a client may send a new client id with each request. Past the bound the oldest quarter is forgotten (a
  forgotten budget's window starts over on its client's next request), as Kafka expires idle quota sensors.
- Without SASL the user is ``ANONYMOUS`` (Kafka's unauthenticated principal).
- DescribeClientQuotas and AlterClientQuotas read and change the entities on the event loop (as every use of
  this object); a change forgets every resolution and budget (they are rebuilt on the next request). A
  server with no quota at all measures nothing.
- AlterClientQuotas changes persist: the changes since the ``quotas`` setting (:attr:`ServerQuotas.changes`,
  a removal recorded as None) are saved with :attr:`ServerQuotas.save` (the store's ``__quotas`` file,
  :mod:`pylog.storage.quota_file`) before they take effect and are answered, one AlterClientQuotas at a time;
  a change that cannot be saved is answered with an error and not made. A restarted server applies the saved
  changes over its ``quotas`` setting.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any, Awaitable, Callable, Mapping

from ..clients.quotas import CONSUME, PRODUCE, REQUEST, QuotaManager
from ..errors import InvalidConfigError, PylogError

__all__ = ["ServerQuotas", "QUOTA_TYPES", "MAX_BUDGETS", "parse_entity"]

#: A handler's answer may be a future of it (a Produce answered once fsynced: see pylog.server.connection).
Handler = Callable[[Any, Any], Awaitable["dict | asyncio.Future[dict] | None"]]

#: Kafka's quota config names -> the QuotaManager kind each limits.
QUOTA_TYPES = {"producer_byte_rate": PRODUCE, "consumer_byte_rate": CONSUME, "request_percentage": REQUEST}
DEFAULT = "<default>"
#: APIs whose handling time is mostly waiting (long polls): not charged to the request quota.
_WAITING_APIS = frozenset((1, 11, 14))
_PRODUCE, _FETCH = 0, 1
_CACHE_MAX = 100_000
#: Budgets (manager keys and kinds) set from the entities at most (see the module docstring).
MAX_BUDGETS = 100_000


def parse_entity(text: str) -> tuple[str | None, str | None]:
    """``"user=alice,client-id=etl"`` -> ("alice", "etl"); a part left out is None, ``<default>`` is kept.
    :raises InvalidConfigError: for anything else."""
    user = client = None
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else []
    if not parts or len(parts) > 2:
        raise InvalidConfigError(f"quota entity {text!r}: expected user=<name>, client-id=<id> or both")
    for p in parts:
        kind, sep, name = p.partition("=")
        if not sep or not name:
            raise InvalidConfigError(f"quota entity {text!r}: {p!r} is not user=<name> or client-id=<id>")
        if kind == "user" and user is None:
            user = name
        elif kind == "client-id" and client is None:
            client = name
        else:
            raise InvalidConfigError(f"quota entity {text!r}: unknown or repeated {kind!r}")
    return user, client


class ServerQuotas:
    """The quotas of one server (see the module docstring)."""

    def __init__(self, entities: Mapping[str, Mapping[str, float]], window_num: int = 11,
                 window_size_s: float = 1.0,
                 changes: Mapping[tuple[str | None, str | None], Mapping[str, float | None]] | None = None) -> None:
        """``changes``: those AlterClientQuotas saved (see the module docstring), applied over ``entities``.

        :raises InvalidConfigError: for a malformed entity, an unknown quota type or a rate that is not a
        positive number."""
        self.manager = QuotaManager(window_num, window_size_s)
        self.max_delay = window_num * window_size_s
        self._entities: dict[tuple[str | None, str | None], dict[str, float]] = {}
        for text, quotas in entities.items():
            entity = parse_entity(text)
            if not isinstance(quotas, Mapping):
                raise InvalidConfigError(f"quota entity {text!r}: expected a mapping of quota types to numbers")
            for name, value in quotas.items():
                kind = QUOTA_TYPES.get(name)
                if kind is None:
                    raise InvalidConfigError(f"quota entity {text!r}: unknown quota {name!r} (one of "
                                             f"{', '.join(QUOTA_TYPES)})")
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or value <= 0:
                    raise InvalidConfigError(f"quota entity {text!r}: {name} must be a positive number, got "
                                             f"{value!r}")
                self._entities.setdefault(entity, {})[kind] = float(value)
        #: AlterClientQuotas' changes since the setting, by Kafka's quota names, and how they are saved (the server
        #: sets it; None: not saved).
        self.changes: dict[tuple[str | None, str | None], dict[str, float | None]] = {}
        self.save: Callable[[dict[tuple[str | None, str | None], dict[str, float | None]]], Awaitable[None]] | None \
            = None
        self.alter_lock = asyncio.Lock()
        self._resolved: dict[tuple[str, str, str], str | None] = {}
        self._keys: dict[tuple[str, str], tuple[str | None, str | None, str | None]] = {}  # see keys()
        # (manager key, kind) limits set from the entities, oldest first (a dict: ordered, bounded by MAX_BUDGETS)
        self._applied: dict[tuple[str, str], None] = {}
        for entity, saved in (changes or {}).items():
            unknown = [name for name in saved if name not in QUOTA_TYPES]
            if unknown:
                raise InvalidConfigError(f"saved client quotas of {entity!r}: unknown quota {unknown[0]!r}")
            self.alter(entity, {QUOTA_TYPES[name]: value for name, value in saved.items()})
            self.changes[entity] = dict(saved)

    def key(self, user: str, client_id: str, kind: str) -> str | None:
        """The budget (a manager key) that ``kind`` traffic of (user, client id) records into, or None."""
        ck = (user, client_id, kind)
        if ck in self._resolved:
            return self._resolved[ck]
        key = None
        for u, c in ((user, client_id), (user, DEFAULT), (user, None), (DEFAULT, client_id), (DEFAULT, DEFAULT),
                     (DEFAULT, None), (None, client_id), (None, DEFAULT)):
            limit = self._entities.get((u, c), {}).get(kind)
            if limit is not None:
                parts = []
                if u is not None:
                    parts.append(f"user={user}")
                if c is not None:
                    parts.append(f"client-id={client_id}")
                key = ",".join(parts)
                if self.manager.quota(key, kind) is None:
                    if len(self._applied) >= MAX_BUDGETS:
                        self._forget_oldest()
                    self.manager.set_quota(key, kind, limit)
                    self._applied[(key, kind)] = None
                break
        if len(self._resolved) >= _CACHE_MAX:
            self._resolved.clear()
        self._resolved[ck] = key
        return key

    def _forget_oldest(self) -> None:
        """Forget the oldest quarter of the budgets (a client cycling client ids would otherwise grow them without
        bound) and every resolution, some of which name them: they are resolved, and set, again when used."""
        for key, kind in list(itertools.islice(self._applied, max(1, len(self._applied) // 4))):
            self.manager.set_quota(key, kind, None)
            del self._applied[(key, kind)]
        self._resolved.clear()
        self._keys.clear()

    def budgets(self) -> int:
        """How many budgets (key and kind) the entities have set so far: for tests and the operator."""
        return len(self._applied)

    def entities(self) -> dict[tuple[str | None, str | None], dict[str, float]]:
        """(user, client id) -> {kind: limit}, ``<default>`` for a default entity and None for a part left out."""
        return {entity: dict(quotas) for entity, quotas in self._entities.items()}

    def alter(self, entity: tuple[str | None, str | None], changes: Mapping[str, float | None]) -> None:
        """Set (or, for None, remove) ``entity``'s limits by kind; takes effect on the next request. On the event
        loop (as every use of this object)."""
        quotas = self._entities.setdefault(entity, {})
        for kind, value in changes.items():
            if value is None:
                quotas.pop(kind, None)
            else:
                quotas[kind] = float(value)
        if not quotas:
            del self._entities[entity]
        for key, kind in self._applied:  # resolved again from the new entities (the windows start over)
            self.manager.set_quota(key, kind, None)
        self._applied.clear()
        self._resolved.clear()
        self._keys.clear()

    def handlers(self) -> dict[int, Handler]:
        """DescribeClientQuotas (48) and AlterClientQuotas (49). Changes last until the server stops: the
        ``quotas`` setting is what a restart starts from (docs/SERVER.md, "Quotas")."""
        apis = _QuotaApis(self)
        return {48: apis.describe, 49: apis.alter}

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        """``handlers`` with the quotas measured and enforced around each."""
        return {k: self._throttled(k, h) for k, h in handlers.items()}

    def keys(self, user: str, client_id: str) -> tuple[str | None, str | None, str | None]:
        """The budgets (manager keys, or None) of (user, client id) for produce bytes, consume bytes and request
        time: :meth:`key` of each kind, resolved once per (user, client id) and cached (bounded, emptied by
        :meth:`alter`), so that a request pays one dict lookup."""
        entity = (user, client_id)
        keys = self._keys.get(entity)
        if keys is None:
            keys = (self.key(user, client_id, PRODUCE), self.key(user, client_id, CONSUME),
                    self.key(user, client_id, REQUEST))
            if len(self._keys) >= _CACHE_MAX:
                self._keys.clear()
            self._keys[entity] = keys
        return keys

    def _throttled(self, api_key: int, handler: Handler) -> Handler:
        charge_time = api_key not in _WAITING_APIS
        # The byte quota this API records (Produce: the request's records, Fetch: the response's), if any: its
        # index in keys() and its kind.
        byte_index = 0 if api_key == _PRODUCE else 1 if api_key == _FETCH else -1
        byte_kind = PRODUCE if api_key == _PRODUCE else CONSUME
        size_of = _request_bytes if api_key == _PRODUCE else _response_bytes
        entities, keys_of, manager, max_delay = self._entities, self.keys, self.manager, self.max_delay

        async def throttled(req: Any, conn: Any) -> "dict | asyncio.Future[dict] | None":
            if not entities:
                return await handler(req, conn)  # no quota at all: nothing to measure
            user = conn.principal
            keys = keys_of("ANONYMOUS" if user is None else user, req.client_id or "")
            time_key = keys[2] if charge_time else None
            # One clock read before (only when the handling time is charged) and one after, shared by the records.
            started = manager.clock() if time_key is not None else 0.0
            answer: Any = await handler(req, conn)
            byte_key = keys[byte_index] if byte_index >= 0 else None
            if byte_key is None and time_key is None:
                return answer  # nothing measured: a pending Produce answer goes to the connection as it is
            # A Produce answered once fsynced (pylog.server.connection) returns its answer pending: it is measured
            # now (its bytes are the request's; its handling time ends here, the fsync wait is not work, as Kafka
            # does not charge purgatory), and handed on pending unless delayed, so the connection keeps pipelining.
            if isinstance(answer, asyncio.Future) and byte_index != 0:
                answer = await answer  # only a Produce's answer stays pending (its bytes are the request's)
            pending: asyncio.Future[dict] | None = answer if isinstance(answer, asyncio.Future) else None
            resp: dict | None = answer if pending is None else None
            now = manager.clock()
            delay = 0.0
            if byte_key is not None and (resp is not None or byte_index == 0):
                delay = manager.record(byte_key, byte_kind, size_of(req, resp), now)
            if time_key is not None:
                time_delay = manager.record(time_key, REQUEST, (now - started) * 100.0, now)
                if time_delay > delay:
                    delay = time_delay
            if delay <= 0:
                return answer
            if pending is not None:
                resp = await pending
            delay = min(delay, max_delay)
            if resp is not None and "throttle_time_ms" in resp:
                resp["throttle_time_ms"] = int(delay * 1000)
            await asyncio.sleep(delay)  # Kafka delays the response (the client waits on it, this connection too)
            return resp
        return throttled


def _request_bytes(req: Any, resp: dict | None) -> int:
    """A Produce request's record bytes."""
    total = 0
    for td in req.body.get("topic_data") or ():
        for pd in td.get("partition_data") or ():
            records = pd.get("records")
            if records is not None:
                total += len(records)
    return total


def _response_bytes(req: Any, resp: dict | None) -> int:
    """A Fetch response's record bytes."""
    total = 0
    for t in (resp or {}).get("responses") or []:
        for p in t.get("partitions") or []:
            records = p.get("records")
            if isinstance(records, list):
                total += sum(map(len, records))
            elif records is not None:
                total += len(records)
    return total


# --------------------------------------------------------------------------- DescribeClientQuotas, AlterClientQuotas

_NAMES = {kind: name for name, kind in QUOTA_TYPES.items()}
_USER, _CLIENT = "user", "client-id"
#: DescribeClientQuotas match types: a name, the default entity, any named (not default) entity.
_EXACT, _MATCH_DEFAULT, _SPECIFIED = 0, 1, 2
_INVALID_REQUEST = 42
_UNKNOWN_SERVER_ERROR = -1


def _entity_of(components: list[dict]) -> tuple[str | None, str | None] | str:
    """An AlterClientQuotas entity as (user, client id) (a null name is ``<default>``), or what is wrong."""
    user = client = None
    for c in components:
        kind, name = c.get("entity_type"), c.get("entity_name")
        value = DEFAULT if name is None else name
        if kind == _USER and user is None:
            user = value
        elif kind == _CLIENT and client is None:
            client = value
        else:
            return f"entity type {kind!r} is unknown or repeated (pylog serve has user and client-id quotas)"
    if user is None and client is None:
        return "an entity needs a user, a client-id or both"
    return user, client


def _components(entity: tuple[str | None, str | None]) -> list[dict]:
    return [{"entity_type": kind, "entity_name": None if name == DEFAULT else name}
            for kind, name in ((_USER, entity[0]), (_CLIENT, entity[1])) if name is not None]


def _matches(entity: tuple[str | None, str | None], filters: list[dict], strict: bool) -> bool:
    parts: dict[Any, str] = {kind: name for kind, name in ((_USER, entity[0]), (_CLIENT, entity[1]))
                             if name is not None}
    for f in filters:
        name, match_type = parts.get(f.get("entity_type")), f.get("match_type")
        if name is None:
            return False
        if match_type == _EXACT and name != f.get("match"):
            return False
        if match_type == _MATCH_DEFAULT and name != DEFAULT:
            return False
        if match_type == _SPECIFIED and name == DEFAULT:
            return False
    return not strict or set(parts) == {f.get("entity_type") for f in filters}


class _QuotaApis:
    """DescribeClientQuotas and AlterClientQuotas over a :class:`ServerQuotas` (see ServerQuotas.handlers)."""

    def __init__(self, quotas: ServerQuotas) -> None:
        self.q = quotas

    async def describe(self, req: Any, conn: Any) -> dict:
        filters = req.body.get("components") or []
        for f in filters:
            if f.get("entity_type") not in (_USER, _CLIENT) or f.get("match_type") not in (_EXACT, _MATCH_DEFAULT,
                                                                                          _SPECIFIED):
                return {"throttle_time_ms": 0, "error_code": _INVALID_REQUEST, "entries": None, "error_message":
                        f"unknown entity type or match type in {f!r}"}
        entries = [{"entity": _components(entity), "values": [{"key": _NAMES[kind], "value": value}
                                                              for kind, value in quotas.items()]}
                   for entity, quotas in self.q.entities().items()
                   if quotas and _matches(entity, filters, bool(req.body.get("strict")))]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}

    async def alter(self, req: Any, conn: Any) -> dict:
        validate_only = bool(req.body.get("validate_only"))
        results: list[dict] = []
        valid: list[tuple[tuple[str | None, str | None], dict[str, float | None], int]] = []
        for e in req.body.get("entries") or []:
            entity = _entity_of(e.get("entity") or [])
            problem = entity if isinstance(entity, str) else None
            changes: dict[str, float | None] = {}
            for op in e.get("ops") or []:
                if problem is not None:  # the first problem is the entry's answer
                    break
                kind = QUOTA_TYPES.get(op.get("key"))
                value = op.get("value")
                if kind is None:
                    problem = f"unknown quota {op.get('key')!r} (one of {', '.join(QUOTA_TYPES)})"
                elif not op.get("remove") and not (isinstance(value, float) and math.isfinite(value) and value > 0):
                    problem = f"{op.get('key')} must be a positive number, got {value!r}"
                else:
                    changes[kind] = None if op.get("remove") else value
            if problem is None and not validate_only:
                assert not isinstance(entity, str)
                valid.append((entity, changes, len(results)))
            results.append({"error_code": _INVALID_REQUEST if problem else 0, "error_message": problem,
                            "entity": e.get("entity") or []})
        if valid:
            async with self.q.alter_lock:
                await self._save_and_alter(valid, results)
        return {"throttle_time_ms": 0, "entries": results}

    async def _save_and_alter(self, valid: list[tuple[tuple[str | None, str | None], dict[str, float | None], int]],
                              results: list[dict]) -> None:
        """Save the changes with the earlier ones, then make them; if they cannot be saved, answer their entries
        with the reason and make none of them."""
        saved = {entity: dict(quotas) for entity, quotas in self.q.changes.items()}
        for entity, changes, _ in valid:
            saved.setdefault(entity, {}).update({_NAMES[kind]: value for kind, value in changes.items()})
        if self.q.save is not None:
            try:
                await self.q.save(saved)
            except (PylogError, OSError) as exc:
                for _, _, i in valid:
                    results[i].update(error_code=_UNKNOWN_SERVER_ERROR, error_message=f"not saved: {exc}")
                return
        self.q.changes = saved
        for entity, changes, _ in valid:
            self.q.alter(entity, changes)
