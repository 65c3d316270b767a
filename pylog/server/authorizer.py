"""``pylog serve``'s authorizer: Kafka's ACL model (KIP-11, ``AclAuthorizer`` / ``StandardAuthorizer``) over the
entries a store keeps (:mod:`pylog.storage.acl_file`), and the ACL APIs' matching rules.

An entry grants or denies a principal (``User:<name>``, or ``User:*`` for everyone) from a host (an address,
or ``*``) an operation on a resource: a topic, a group, the cluster (``kafka-cluster``) or a transactional id,
named literally (``*`` being every resource of the type) or by a prefix.

Decision for (principal, host, operation, resource), in Kafka's order:

1. a principal in ``super.users`` is allowed everything;
2. the entries whose resource pattern matches (LITERAL equal name, LITERAL ``*``, PREFIXED prefix of the name)
   are gathered; none at all: allowed iff ``allow.everyone.if.no.acl.found``;
3. a DENY entry for the principal (or ``User:*``), the host (or ``*``) and the operation (or ALL) refuses;
4. else an ALLOW entry for them allows, where the operation may also be one that implies it: READ, WRITE,
   DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies everything;
5. else refused.

Invariants:
- Every change (CreateAcls, DeleteAcls) is written to the store (atomically, fsynced) before it is answered and
  before it takes effect; changes are serialised by one lock, so two admin clients never lose each other's.
- Decisions are cached per (principal, host, operation, resource type, name) (by user name for
  :meth:`Authorizer.authorize_user`, the per-request path: a cached decision is one dict lookup); the caches are
  replaced on every change and bounded (:data:`_CACHE_MAX` entries each), so a decision never outlives the
  entries it came from.
- Without SASL every client is ``User:ANONYMOUS`` (Kafka's name for an unauthenticated principal).
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Iterable

from ..errors import InvalidArgumentError
from ..store import MAX_ACLS, AclEntry, Store, check_acl_entry

__all__ = ["Authorizer", "ResourceType", "PatternType", "Operation", "Permission", "ANONYMOUS", "CLUSTER_NAME",
           "principal_of", "parse_principals"]

ANONYMOUS = "User:ANONYMOUS"
#: The one cluster resource's name (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
#: The most decisions cached before the cache is emptied.
_CACHE_MAX = 100_000


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: operation -> the operations an ALLOW entry may name to allow it (Kafka's implied operations).
_ALLOWED_BY: dict[int, frozenset[int]] = {op: frozenset((op, Operation.ALL)) for op in Operation}
_ALLOWED_BY[Operation.DESCRIBE] = frozenset((Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                             Operation.ALTER, Operation.ALL))
_ALLOWED_BY[Operation.DESCRIBE_CONFIGS] = frozenset((Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
                                                     Operation.ALL))


def principal_of(user: str | None) -> str:
    """The Kafka principal of a connection authenticated as ``user`` (None: not authenticated)."""
    return ANONYMOUS if user is None else f"User:{user}"


def parse_principals(text: str | Iterable[str] | None) -> frozenset[str]:
    """``super.users``: Kafka's ``User:alice;User:bob`` (or a list of such). :raises InvalidArgumentError:
    for a principal that is not ``User:<name>``."""
    if text is None:
        return frozenset()
    items = [p.strip() for p in (text.split(";") if isinstance(text, str) else text)]
    out = set()
    for p in items:
        if not p:
            continue
        if not p.startswith("User:") or len(p) == 5:
            raise InvalidArgumentError(f"super.users: {p!r} is not a principal of the form User:<name>")
        out.add(p)
    return frozenset(out)


class Authorizer:
    """Decisions and ACL management over ``store``'s entries (see the module docstring). Thread-safe: changes
    run in the server's storage pool, decisions on the event loop."""

    def __init__(self, store: Store, super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._lock = threading.Lock()
        self._entries: list[AclEntry] = []
        # One tuple, replaced whole on a change (a decision on the loop never mixes two generations, and one
        # computed from the old entries lands in the old, discarded cache): resource type -> literal name ->
        # entries; resource type -> prefixed entries; the decision cache by principal; the decision cache by
        # user name (authorize_user: a connection's user, no principal string built per request).
        self._view: tuple[dict[int, dict[str, list[AclEntry]]], dict[int, list[AclEntry]],
                          dict[tuple[str, str, int, int, str], bool],
                          dict[tuple[str | None, str, int, int, str], bool]] = ({}, {}, {}, {})
        self._index(store.acls())

    # ------------------------------------------------------------------ decisions

    def is_super(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``op`` on the resource (see the module docstring)."""
        key = (principal, host, op, rtype, name)
        view = self._view
        cached = view[2].get(key)
        if cached is None:
            cached = self._remember(view, view[2], key, principal, host, op, rtype, name)
        return cached

    def authorize_user(self, user: str | None, host: str, op: int, rtype: int, name: str) -> bool:
        """:meth:`authorize` for the principal of a connection authenticated as ``user`` (None: not
        authenticated; see :func:`principal_of`): the per-request check, one dict lookup once decided."""
        key = (user, host, op, rtype, name)
        view = self._view
        cached = view[3].get(key)
        if cached is None:
            cached = self._remember(view, view[3], key, principal_of(user), host, op, rtype, name)
        return cached

    def _remember(self, view: tuple, cache: dict, key: tuple, principal: str, host: str, op: int, rtype: int,
                  name: str) -> bool:
        allowed = self._decide(view, principal, host, op, rtype, name)
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = allowed
        return allowed

    def _decide(self, view: tuple, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = _matching(view[0], view[1], rtype, name)
        if not matching:
            return self.allow_everyone_if_no_acl_found
        applies = [e for e in matching if e.principal in (principal, WILDCARD_PRINCIPAL)
                   and e.host in (host, WILDCARD)]
        if any(e.permission == Permission.DENY and e.operation in (op, Operation.ALL) for e in applies):
            return False
        allowed_by = _ALLOWED_BY.get(op, frozenset((op, Operation.ALL)))
        return any(e.permission == Permission.ALLOW and e.operation in allowed_by for e in applies)

    def authorize_any(self, principal: str, host: str, op: int, rtype: int) -> bool:
        """Whether ``principal`` may do ``op`` on some resource of type ``rtype`` (Kafka's
        ``authorizeByResourceType``, used by InitProducerId: IDEMPOTENT_WRITE on the cluster or WRITE on any
        topic): a super user; an ALLOW entry for the principal, host and operation whose pattern is not refused
        by a DENY of the same kind on the wildcard or on that pattern; or, with
        ``allow.everyone.if.no.acl.found``, no entry of that resource type at all."""
        if principal in self.super_users:
            return True
        with self._lock:
            entries = [e for e in self._entries if e.resource_type == rtype]
        if not entries:
            return self.allow_everyone_if_no_acl_found
        allowed_by = _ALLOWED_BY.get(op, frozenset((op, Operation.ALL)))
        for e in entries:
            if (e.permission == Permission.ALLOW and e.operation in allowed_by
                    and e.principal in (principal, WILDCARD_PRINCIPAL) and e.host in (host, WILDCARD)
                    and self.authorize(principal, host, op, rtype, e.resource_name)):
                return True
        return False

    def _index(self, entries: list[AclEntry]) -> None:
        literal: dict[int, dict[str, list[AclEntry]]] = {}
        prefixed: dict[int, list[AclEntry]] = {}
        for e in entries:
            if e.pattern_type == PatternType.LITERAL:
                literal.setdefault(e.resource_type, {}).setdefault(e.resource_name, []).append(e)
            else:
                prefixed.setdefault(e.resource_type, []).append(e)
        self._entries = list(entries)
        self._view = (literal, prefixed, {}, {})

    # ------------------------------------------------------------------ the ACL APIs (in the storage pool)

    def create(self, creations: list[dict]) -> list[tuple[int, str | None]]:
        """CreateAcls: each creation's (error code, message); the valid ones are added (an entry already there
        is not added twice) and written to the store in one replace."""
        results: list[tuple[int, str | None]] = []
        with self._lock:
            entries = list(self._entries)
            present = set(entries)
            for c in creations:
                entry, problem = _entry_of(c)
                if problem is not None:
                    results.append((_INVALID_REQUEST, problem))
                    continue
                assert entry is not None
                if entry not in present:
                    if len(entries) >= MAX_ACLS:
                        results.append((_INVALID_REQUEST, f"this store keeps at most {MAX_ACLS} ACLs"))
                        continue
                    entries.append(entry)
                    present.add(entry)
                results.append((0, None))
            if len(entries) != len(self._entries):
                self.store.replace_acls(entries)
                self._index(entries)
        return results

    def describe(self, flt: dict) -> list[AclEntry]:
        """DescribeAcls: the entries matching the filter (the request's ``*_filter`` fields)."""
        with self._lock:
            entries = list(self._entries)
        return [e for e in entries if _matches_filter(e, flt)]

    def delete(self, filters: list[dict]) -> list[list[AclEntry]]:
        """DeleteAcls: per filter, the entries it removed (an entry matching two filters is reported by each);
        the store is written once, before the answer."""
        with self._lock:
            entries = list(self._entries)
            out = [[e for e in entries if _matches_filter(e, f)] for f in filters]
            doomed = {e for matched in out for e in matched}
            if doomed:
                kept = [e for e in entries if e not in doomed]
                self.store.replace_acls(kept)
                self._index(kept)
        return out


_INVALID_REQUEST = 42


def _matching(literal_index: dict[int, dict[str, list[AclEntry]]], prefixed_index: dict[int, list[AclEntry]],
              rtype: int, name: str) -> list[AclEntry]:
    """The entries whose resource pattern matches (LITERAL equal or ``*``, PREFIXED a prefix of ``name``)."""
    out: list[AclEntry] = []
    literal = literal_index.get(rtype)
    if literal:
        out.extend(literal.get(name, ()))
        if name != WILDCARD:
            out.extend(literal.get(WILDCARD, ()))
    for e in prefixed_index.get(rtype, ()):
        if name.startswith(e.resource_name):
            out.append(e)
    return out


def _entry_of(c: dict) -> tuple[AclEntry | None, str | None]:
    """A CreateAcls creation as an entry, or the reason it is refused (Kafka's checks: no ANY/MATCH/UNKNOWN
    codes, a cluster resource named kafka-cluster, a principal of the form User:<name>)."""
    fields = (c.get("resource_type"), c.get("resource_name"), c.get("resource_pattern_type", PatternType.LITERAL),
              c.get("principal"), c.get("host"), c.get("operation"), c.get("permission_type"))
    problem = check_acl_entry(fields)
    if problem is not None:
        return None, f"invalid ACL: {problem}"
    entry = AclEntry(*fields)  # type: ignore[arg-type]
    if entry.resource_type == ResourceType.CLUSTER and entry.resource_name != CLUSTER_NAME:
        return None, f"the cluster resource is named {CLUSTER_NAME!r}"
    return entry, None


def _matches_filter(e: AclEntry, f: dict[str, Any]) -> bool:
    """Kafka's AclBindingFilter: ANY (1) matches every value of an enum, None every name/principal/host; the
    pattern type ANY matches both kinds with the name equal, MATCH what would apply to that resource name
    (LITERAL equal or ``*``, PREFIXED a prefix of it)."""
    rtype = f.get("resource_type_filter")
    if rtype != ResourceType.ANY and rtype != e.resource_type:
        return False
    for value, want in ((e.principal, f.get("principal_filter")), (e.host, f.get("host_filter"))):
        if want is not None and want != value:
            return False
    op, perm = f.get("operation"), f.get("permission_type")
    if op != Operation.ANY and op != e.operation:
        return False
    if perm != Permission.ANY and perm != e.permission:
        return False
    name, ptype = f.get("resource_name_filter"), f.get("pattern_type_filter", PatternType.LITERAL)
    if ptype == PatternType.MATCH:
        if name is None:
            return True
        if e.pattern_type == PatternType.LITERAL:
            return e.resource_name in (name, WILDCARD)
        return name.startswith(e.resource_name)
    if ptype != PatternType.ANY and ptype != e.pattern_type:
        return False
    return name is None or name == e.resource_name
