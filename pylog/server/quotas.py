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
  polls: Fetch, JoinGroup, SyncGroup, whose waiting is not work) its handling time in percent-seconds; the
  response is then delayed by the largest throttle time of the three, capped at the quota window (Kafka's
  cap), and carries it in ``throttle_time_ms``. Nothing is refused.
- A request of a (user, client id) with no quota costs a dict lookup (the resolution is cached, bounded).
- Without SASL the user is ``ANONYMOUS`` (Kafka's unauthenticated principal).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Awaitable, Callable, Mapping

from ..clients.quotas import CONSUME, PRODUCE, REQUEST, QuotaManager
from ..errors import InvalidConfigError

__all__ = ["ServerQuotas", "QUOTA_TYPES", "parse_entity"]

Handler = Callable[[Any, Any], Awaitable[dict | None]]

#: Kafka's quota config names -> the QuotaManager kind each limits.
QUOTA_TYPES = {"producer_byte_rate": PRODUCE, "consumer_byte_rate": CONSUME, "request_percentage": REQUEST}
DEFAULT = "<default>"
#: APIs whose handling time is mostly waiting (long polls): not charged to the request quota.
_WAITING_APIS = frozenset((1, 11, 14))
_PRODUCE, _FETCH = 0, 1
_CACHE_MAX = 100_000


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
                 window_size_s: float = 1.0) -> None:
        """:raises InvalidConfigError: for a malformed entity, an unknown quota type or a rate that is not a
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
        self._resolved: dict[tuple[str, str, str], str | None] = {}

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
                    self.manager.set_quota(key, kind, limit)
                break
        if len(self._resolved) >= _CACHE_MAX:
            self._resolved.clear()
        self._resolved[ck] = key
        return key

    def wrap(self, handlers: dict[int, Handler]) -> dict[int, Handler]:
        """``handlers`` with the quotas measured and enforced around each."""
        return {k: self._throttled(k, h) for k, h in handlers.items()}

    def _throttled(self, api_key: int, handler: Handler) -> Handler:
        charge_time = api_key not in _WAITING_APIS

        async def throttled(req: Any, conn: Any) -> dict | None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            resp = await handler(req, conn)
            user = conn.principal if conn.principal is not None else "ANONYMOUS"
            client = req.client_id or ""
            delay = 0.0
            record = self.manager.record
            if api_key == _PRODUCE:
                key = self.key(user, client, PRODUCE)
                if key is not None:
                    delay = record(key, PRODUCE, _produce_bytes(req.body))
            elif api_key == _FETCH and resp is not None:
                key = self.key(user, client, CONSUME)
                if key is not None:
                    delay = record(key, CONSUME, _fetch_bytes(resp))
            if charge_time:
                key = self.key(user, client, REQUEST)
                if key is not None:
                    delay = max(delay, record(key, REQUEST, (loop.time() - started) * 100.0))
            if delay > 0:
                delay = min(delay, self.max_delay)
                if resp is not None and "throttle_time_ms" in resp:
                    resp["throttle_time_ms"] = int(delay * 1000)
                await asyncio.sleep(delay)  # Kafka delays the response (the client waits on it)
            return resp
        return throttled


def _produce_bytes(body: dict) -> int:
    return sum(len(pd["records"]) for td in body.get("topic_data") or [] for pd in td.get("partition_data") or []
               if pd.get("records") is not None)


def _fetch_bytes(resp: dict) -> int:
    total = 0
    for t in resp.get("responses") or []:
        for p in t.get("partitions") or []:
            records = p.get("records")
            if isinstance(records, list):
                total += sum(map(len, records))
            elif records is not None:
                total += len(records)
    return total
