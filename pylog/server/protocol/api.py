"""Kafka request/response framing over the compiled schemas: headers, dispatch by (api key, version),
the versions pylog serves, and error responses.

A *frame* is what follows the 4-byte big-endian size prefix on the wire. Requests are parsed from a frame;
responses are encoded to a whole frame *including* the size prefix (:func:`encode_response`) or to a list
of parts for a vectored write (:func:`encode_response_parts`: large RECORDS values are passed by
reference, never copied).

Headers: request header v1 (api_key int16, api_version int16, correlation_id int32, client_id nullable
string) in non-flexible versions, v2 (v1 + tagged fields; client_id stays a non-compact string) in
flexible ones. Response header v0 (correlation_id) or v1 (+ tagged fields) in flexible versions, except
ApiVersions, whose response header is always v0 (clients must read it before knowing the version), and
whose body is encoded as v0 whenever its error_code is not 0 (kafka-python and the Java client read an
ApiVersions error response as v0, whatever version they sent).

What a server does when parsing fails:

* :class:`~pylog.errors.UnknownApiKeyError` (an api key pylog has no schema for): close the connection,
  as Kafka brokers do.
* :class:`~pylog.errors.UnsupportedApiVersionError` for ApiVersions: answer with
  :func:`unsupported_version_response` (ApiVersions v0, error UNSUPPORTED_VERSION, our api_keys, so the
  client retries with a version we serve). For any other API the same function returns None: close the
  connection, as Kafka brokers do; there is no schema to answer in a version we do not know, and clients
  only send versions ApiVersions advertised.
* :class:`~pylog.errors.ProtocolError` (malformed body): close the connection.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Callable, Iterable, Protocol

from pylog.errors import ProtocolError, UnknownApiKeyError, UnsupportedApiVersionError

from . import primitives as P
from .codes import ErrorCode
from .messages import ALL_APIS
from .schema import Api, Field, Struct, compile_struct, struct_budget

#: A request may decode 4,096 structures plus one per 8 bytes of its frame (see schema.struct_budget): every
#: request a client sends holds fewer (a Fetch partition takes 28+ bytes, a produced partition its records),
#: while a crafted one of 3-byte structs would otherwise cost ~83 times its size in memory.
_STRUCTS_BASE = 4096
_BYTES_PER_STRUCT = 8

__all__ = [
    "ApiKey", "APIS", "RequestHeader", "Request", "parse_request", "encode_response", "encode_response_parts",
    "encode_request", "parse_response", "supported_versions", "api_versions_body",
    "unsupported_version_response", "error_response", "codec", "UNSERVED_APIS", "REFUSED_APIS",
]


class ApiKey(enum.IntEnum):
    """The api keys pylog has schemas for (Kafka's numbers)."""
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68


#: Every API with a schema, by key.
APIS: dict[int, Api] = {a.key: a for a in ALL_APIS}
assert set(APIS) == set(ApiKey)

#: APIs with schemas only so that a request can be answered with an error (partition reassignments) or that need a
#: leader-epoch cache pylog does not keep: not advertised by :func:`supported_versions` unless asked. Kafka clients
#: check ApiVersions before sending an admin request, so they report these as not supported by the broker themselves
#: (the clearest message); one that sends anyway gets the response with UNSUPPORTED_VERSION in every error field.
UNSERVED_APIS: frozenset[int] = frozenset({ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.ALTER_PARTITION_REASSIGNMENTS})

#: APIs advertised by ApiVersions but always answered with an error: Kafka's own answer of a broker without
#: the feature (SECURITY_DISABLED from a broker without an authorizer for the ACL APIs; for the SCRAM
#: credential APIs, whose users come from the server's users file), with a message saying why. api key ->
#: (error code, error message). Advertised because the clients then report Kafka's error and its message
#: instead of a generic "not supported by the broker".
REFUSED_APIS: dict[int, tuple[int, str]] = {
    ApiKey.DESCRIBE_ACLS: (ErrorCode.SECURITY_DISABLED, "pylog serve has no ACLs (no authorizer): every "
                           "authenticated user may read and write every topic"),
    ApiKey.CREATE_ACLS: (ErrorCode.SECURITY_DISABLED, "pylog serve has no ACLs (no authorizer): every "
                         "authenticated user may read and write every topic"),
    ApiKey.DELETE_ACLS: (ErrorCode.SECURITY_DISABLED, "pylog serve has no ACLs (no authorizer): every "
                         "authenticated user may read and write every topic"),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (ErrorCode.SECURITY_DISABLED, "pylog serve's SASL users come from "
                                             "its users file (--sasl-users), not from the cluster"),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (ErrorCode.SECURITY_DISABLED, "pylog serve's SASL users come from its "
                                          "users file (--sasl-users): edit it and restart the server"),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (ErrorCode.UNSUPPORTED_VERSION, "pylog serve does not implement KIP-848's "
                                      "consumer group protocol: set group.protocol=classic"),
}


class RequestHeader:
    """A request's header: what :func:`encode_response` needs to answer it."""
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestHeader) and (
            (self.api_key, self.api_version, self.correlation_id, self.client_id)
            == (other.api_key, other.api_version, other.correlation_id, other.client_id))

    __hash__ = None  # type: ignore[assignment]


class Request(RequestHeader):
    """A parsed request: the header's fields and ``body``, a dict of the API's request fields (every field
    of the schema is present; see :mod:`.schema`). RECORDS values are memoryviews into the frame."""
    __slots__ = ("body",)

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 body: dict) -> None:
        super().__init__(api_key, api_version, correlation_id, client_id)
        self.body = body

    @property
    def header(self) -> RequestHeader:
        return RequestHeader(self.api_key, self.api_version, self.correlation_id, self.client_id)

    @property
    def api_name(self) -> str:
        return APIS[self.api_key].name

    def __repr__(self) -> str:
        return (f"Request({self.api_name} v{self.api_version}, correlation_id={self.correlation_id}, "
                f"client_id={self.client_id!r}, body={self.body!r})")


class _HasHeader(Protocol):
    api_key: int
    api_version: int
    correlation_id: int


_Decoder = Callable[[Any, int, int], "tuple[dict, int]"]
_Encoder = Callable[[bytearray, list, dict], None]
_CODECS: dict[tuple[int, int, bool], tuple[_Decoder, _Encoder]] = {}


def codec(api_key: int, version: int, request: bool) -> tuple[_Decoder, _Encoder]:
    """The compiled (decoder, encoder) of an API's request or response at ``version`` (cached)."""
    key = (api_key, version, request)
    c = _CODECS.get(key)
    if c is None:
        api = APIS[api_key]
        if not api.versions[0] <= version <= api.versions[1]:
            raise ProtocolError(f"{api.name} v{version} is not supported (v{api.versions[0]}-{api.versions[1]})")
        fields = api.request if request else api.response
        c = compile_struct(fields, version, api.is_flexible(version),
                           api.name + ("Request" if request else "Response"))
        _CODECS[key] = c
    return c


_HDR = struct.Struct(">hhi")
_I32 = struct.Struct(">i")


def _view(frame: Any) -> memoryview:
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    return mv


def parse_request(frame: bytes | bytearray | memoryview, max_structs: int | None = None) -> Request:
    """Parses one request frame (the bytes after the size prefix); at most ``max_structs`` struct array elements
    in all (topics, partitions, groups ...; None: the size-based budget only). Raises ProtocolError (or its
    subclasses UnknownApiKeyError / UnsupportedApiVersionError, carrying ``.header``) and nothing else."""
    buf = _view(frame)
    end = len(buf)
    if end < 8:
        raise P.short(0, 10, end, "request header")
    api_key, api_version, correlation_id = _HDR.unpack_from(buf, 0)
    client_id, pos = P.read_nstring(buf, 8, end, "request header.client_id")
    api = APIS.get(api_key)
    if api is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}",
                                 RequestHeader(api_key, api_version, correlation_id, client_id))
    if not api.versions[0] <= api_version <= api.versions[1]:
        raise UnsupportedApiVersionError(
            f"{api.name} v{api_version} is not supported (v{api.versions[0]}-{api.versions[1]})",
            RequestHeader(api_key, api_version, correlation_id, client_id))
    if api.flexible is not None and api_version >= api.flexible:
        pos = P.skip_tagged_fields(buf, pos, end, "request header<tags>")
    decode = codec(api_key, api_version, True)[0]
    budget = _STRUCTS_BASE + end // _BYTES_PER_STRUCT
    struct_budget(budget if max_structs is None else min(budget, max_structs))
    try:
        body, pos = decode(buf, pos, end)
    finally:
        struct_budget(None)
    # Bytes after the body are ignored, as Kafka's brokers ignore them: librdkafka 2.x sends three more than
    # the spec's fields in its Metadata v12 "all topics" request (AdminClient.list_topics), and a broker that
    # refused them would break that call. Every field the schema names was read and checked.
    return Request(api_key, api_version, correlation_id, client_id, body)


def _encode_body(api_key: int, version: int, request: bool, out: bytearray, body: dict) -> list:
    parts: list = []
    enc = codec(api_key, version, request)[1]
    try:
        enc(out, parts, body)
    except ProtocolError:
        raise
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError, KeyError) as e:
        api = APIS[api_key]
        kind = "request" if request else "response"
        raise ProtocolError(f"cannot encode {api.name} v{version} {kind}: {type(e).__name__}: {e}") from e
    if out:
        parts.append(out)
    return parts


def encode_response_parts(request: _HasHeader, body: dict) -> list:
    """The response frame to ``request`` (a Request or RequestHeader) as a list of bytes-like parts whose
    concatenation is the frame, size prefix included; RECORDS values of 4 KiB or more are parts of their
    own, not copies. For ``socket.sendmsg`` / ``writelines``."""
    api_key, version = request.api_key, request.api_version
    if api_key == ApiKey.API_VERSIONS and body.get("error_code"):
        version = 0     # clients read an ApiVersions error as a v0 body, whatever version they asked for
    out = bytearray(8)
    _I32.pack_into(out, 4, request.correlation_id)
    api = APIS[api_key]
    if api.flexible is not None and version >= api.flexible and api_key != ApiKey.API_VERSIONS:
        out.append(0)                        # response header v1: no tagged fields
    parts = _encode_body(api_key, version, False, out, body)
    size = sum(map(len, parts)) - 4
    first = parts[0]
    if isinstance(first, bytearray):
        _I32.pack_into(first, 0, size)
    else:                                    # flushed before a big RECORDS value
        parts[0] = _I32.pack(size) + first[4:]
    return parts


def encode_response(request: _HasHeader, body: dict) -> bytes:
    """The whole response frame to ``request``, size prefix included (RECORDS copied once, here)."""
    parts = encode_response_parts(request, body)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """A whole request frame, size prefix included (for tests and tools; the server only answers)."""
    api = APIS[api_key]
    out = bytearray(4)
    out += _HDR.pack(api_key, version, correlation_id)
    P.write_nstring(out, client_id)
    if api.flexible is not None and version >= api.flexible:
        out.append(0)
    parts = _encode_body(api_key, version, True, out, body)
    data = b"".join(parts)
    return _I32.pack(len(data) - 4) + data[4:]


def parse_response(api_key: int, version: int, frame: bytes | bytearray | memoryview) -> tuple[int, dict]:
    """Parses a response frame (after the size prefix) -> (correlation_id, body); for tests and tools."""
    buf = _view(frame)
    end = len(buf)
    if end < 4:
        raise P.short(0, 4, end, "response header")
    correlation_id = _I32.unpack_from(buf, 0)[0]
    pos = 4
    api = APIS[api_key]
    if api.flexible is not None and version >= api.flexible and api_key != ApiKey.API_VERSIONS:
        pos = P.skip_tagged_fields(buf, pos, end, "response header<tags>")
    if api_key == ApiKey.API_VERSIONS and end >= 6 and buf[4:6] != b"\x00\x00":
        version = 0     # an error response is a v0 body, as clients read it (see encode_response_parts)
    body, pos = codec(api_key, version, False)[0](buf, pos, end)
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes after the end of {api.name} v{version} response", pos)
    return correlation_id, body


# ------------------------------------------------------------------------------------------ ApiVersions

def supported_versions(include: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version pylog serves: what ApiVersions advertises. ``include`` None means
    every API except :data:`UNSERVED_APIS`; otherwise exactly the keys given."""
    keys = [k for k in APIS if k not in UNSERVED_APIS] if include is None else list(include)
    return {k: APIS[k].versions for k in sorted(keys)}


def api_versions_body(error_code: int = 0, include: Iterable[int] | None = None) -> dict:
    """An ApiVersions response body listing :func:`supported_versions` (``include`` as there)."""
    return {"error_code": error_code, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in supported_versions(include).items()]}


def unsupported_version_response(header: _HasHeader, include: Iterable[int] | None = None) -> bytes | None:
    """For an ApiVersions request in a version pylog does not serve: the ApiVersions v0 response frame
    (error UNSUPPORTED_VERSION, our api_keys) clients expect, to retry with a version we serve. None for
    any other API: close the connection (see the module docstring)."""
    if header.api_key != ApiKey.API_VERSIONS:
        return None
    h = RequestHeader(ApiKey.API_VERSIONS, 0, header.correlation_id, None)
    return encode_response(h, api_versions_body(ErrorCode.UNSUPPORTED_VERSION, include))


# ------------------------------------------------------------------------------------ error responses

# How a response mirrors its request, per API: (request array, response array, {response field: request
# field, "." being the element itself}, nested mirrors). Error responses are built from these so clients
# can match each topic/partition/group of their request to its error.
_Mirror = tuple[str, str, dict[str, str], tuple]
_MIRRORS: dict[int, tuple[_Mirror, ...]] = {
    ApiKey.PRODUCE: (("topic_data", "responses", {"name": "name"},
                      (("partition_data", "partition_responses", {"index": "index"}, ()),)),),
    ApiKey.FETCH: (("topics", "responses", {"topic": "topic"},
                    (("partitions", "partitions", {"partition_index": "partition"}, ()),)),),
    ApiKey.LIST_OFFSETS: (("topics", "topics", {"name": "name"},
                           (("partitions", "partitions", {"partition_index": "partition_index"}, ()),)),),
    ApiKey.METADATA: (("topics", "topics", {"name": "name"}, ()),),
    ApiKey.OFFSET_COMMIT: (("topics", "topics", {"name": "name"},
                            (("partitions", "partitions", {"partition_index": "partition_index"}, ()),)),),
    ApiKey.OFFSET_FETCH: (("topics", "topics", {"name": "name"},
                           (("partition_indexes", "partitions", {"partition_index": "."}, ()),)),),
    ApiKey.LEAVE_GROUP: (("members", "members", {"member_id": "member_id", "group_instance_id": "group_instance_id"},
                          ()),),
    ApiKey.DESCRIBE_GROUPS: (("groups", "groups", {"group_id": "."}, ()),),
    ApiKey.CREATE_TOPICS: (("topics", "topics", {"name": "name"}, ()),),
    ApiKey.DELETE_TOPICS: (("topic_names", "responses", {"name": "."}, ()),),
    ApiKey.DELETE_RECORDS: (("topics", "topics", {"name": "name"},
                             (("partitions", "partitions", {"partition_index": "partition_index"}, ()),)),),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (("topics", "topics", {"topic": "topic"},
                                      (("partitions", "partitions", {"partition": "partition"}, ()),)),),
    ApiKey.ADD_PARTITIONS_TO_TXN: (("v3_and_below_topics", "results_by_topic_v3_and_below", {"name": "name"},
                                    (("partitions", "results_by_partition", {"partition_index": "."}, ()),)),),
    ApiKey.TXN_OFFSET_COMMIT: (("topics", "topics", {"name": "name"},
                                (("partitions", "partitions", {"partition_index": "partition_index"}, ()),)),),
    ApiKey.DESCRIBE_CONFIGS: (("resources", "results", {"resource_type": "resource_type",
                                                        "resource_name": "resource_name"}, ()),),
    ApiKey.ALTER_CONFIGS: (("resources", "responses", {"resource_type": "resource_type",
                                                       "resource_name": "resource_name"}, ()),),
    ApiKey.CREATE_PARTITIONS: (("topics", "results", {"name": "name"}, ()),),
    ApiKey.DELETE_GROUPS: (("groups_names", "results", {"group_id": "."}, ()),),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (("resources", "responses", {"resource_type": "resource_type",
                                                                   "resource_name": "resource_name"}, ()),),
    ApiKey.OFFSET_DELETE: (("topics", "topics", {"name": "name"},
                            (("partitions", "partitions", {"partition_index": "partition_index"}, ()),)),),
    ApiKey.CREATE_ACLS: (("creations", "results", {}, ()),),
    ApiKey.DELETE_ACLS: (("filters", "filter_results", {}, ()),),
    ApiKey.ELECT_LEADERS: (("topic_partitions", "replica_election_results", {"topic": "topic"},
                            (("partitions", "partition_result", {"partition_id": "."}, ()),)),),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (("topics", "responses", {"name": "name"},
                                            (("partitions", "partitions", {"partition_index": "partition_index"},
                                              ()),)),),
    ApiKey.ALTER_CLIENT_QUOTAS: (("entries", "entries", {"entity": "entity"}, ()),),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (("users", "results", {"user": "name"}, ()),),
    # Deletions then upsertions, one result each, in that order (both mirrors extend "results").
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (("deletions", "results", {"user": "name"}, ()),
                                          ("upsertions", "results", {"user": "name"}, ())),
    ApiKey.DESCRIBE_PRODUCERS: (("topics", "topics", {"name": "name"},
                                 (("partition_indexes", "partitions", {"partition_index": "."}, ()),)),),
    ApiKey.DESCRIBE_TRANSACTIONS: (("transactional_ids", "transaction_states", {"transactional_id": "."}, ()),),
}

_ERROR_FIELDS = ("error_code", "partition_error_code")


def _mirror(req: dict, resp: dict, mirrors: tuple) -> None:
    for req_arr, resp_arr, fields, nested in mirrors:
        elems = req.get(req_arr) or []
        out = []
        for e in elems:
            r = {rf: (e if qf == "." else e.get(qf)) for rf, qf in fields.items()}
            r = {k: v for k, v in r.items() if v is not None}    # None (e.g. a topic id's name): default
            if nested and isinstance(e, dict):
                _mirror(e, r, nested)
            out.append(r)
        resp.setdefault(resp_arr, []).extend(out)


def _set_errors(fields: tuple[Field, ...], d: dict, code: int, message: str | None) -> None:
    for f in fields:
        if f.name in _ERROR_FIELDS:
            d[f.name] = code
        elif f.name == "error_message" and message is not None:
            d[f.name] = message
        elif isinstance(f.type, Struct) and f.name in d:
            sub = d[f.name]
            for e in (sub if f.array else [sub]) if sub is not None else ():
                if isinstance(e, dict):
                    _set_errors(f.type.fields, e, code, message)


def error_response(request: Request, error_code: int, error_message: str | None = None) -> dict:
    """A response body to ``request`` with every error code (top level, and per topic / partition / group
    / resource, mirroring the request's so clients can match them) set to ``error_code``, and every
    ``error_message`` field beside them to ``error_message`` when given; other fields take their defaults.
    For requests pylog does not serve (transactions, :data:`REFUSED_APIS`) or that failed as a whole."""
    body: dict = {}
    _mirror(request.body, body, _MIRRORS.get(request.api_key, ()))
    _set_errors(APIS[request.api_key].response, body, int(error_code), error_message)
    return body
