"""pylog.server.protocol: round trips of every API and version, differential checks against kafka-python's
and aiokafka's codecs, hostile input, framing and error responses."""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
import random
import struct
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog.errors import PylogError, ProtocolError, UnknownApiKeyError, UnsupportedApiVersionError
from pylog.server.protocol import (
    APIS, UNSERVED_APIS, ApiKey, ErrorCode, Request, RequestHeader, encode_request, encode_response,
    encode_response_parts, error_response, parse_request, parse_response, supported_versions,
    unsupported_version_response,
)
from pylog.server.protocol import codes, primitives as P
from pylog.server.protocol.schema import Field, Struct, default_for

CASES = [(key, v) for key, api in sorted(APIS.items()) for v in range(api.versions[0], api.versions[1] + 1)]
IDS = [f"{APIS[k].name}-v{v}" for k, v in CASES]

_INT_RANGES = {"int8": (-128, 127), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
               "int64": (-2**63, 2**63 - 1), "uint16": (0, 2**16 - 1)}


def _in(v: int, r: tuple[int, int]) -> bool:
    return r[0] <= v <= r[1]


# ------------------------------------------------------------------------------------ random values

def rand_scalar(t: str, rnd: random.Random, nullable: bool):
    if nullable and rnd.random() < 0.2:
        return None
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return rnd.choice([lo, hi, 0, -1 if lo < 0 else 1, rnd.randint(lo, hi)])
    if t == "bool":
        return rnd.random() < 0.5
    if t == "float64":
        return rnd.uniform(-1e9, 1e9)
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    if t == "string":
        return "".join(rnd.choice("ab-._ZéΩ漢😀") for _ in range(rnd.randint(0, 12)))
    if t in ("bytes", "records"):
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 20)))
    raise AssertionError(t)


def rand_struct(fields, version: int, rnd: random.Random, depth: int = 0) -> dict:
    d = {}
    for f in fields:
        if not _in(version, f.versions):
            continue
        d[f.name] = rand_field(f, version, rnd, depth)
    return d


def rand_field(f: Field, version: int, rnd: random.Random, depth: int):
    nullable = _in(version, f.nullable)
    if f.array:
        if nullable and rnd.random() < 0.2:
            return None
        n = rnd.randint(0, 3 if depth < 2 else 1)
        e = f.elem()
        if isinstance(e, Struct):
            return [rand_struct(e.fields, version, rnd, depth + 1) for _ in range(n)]
        return [rand_scalar(e, rnd, False) for _ in range(n)]
    if isinstance(f.type, Struct):
        return rand_struct(f.type.fields, version, rnd, depth + 1)
    return rand_scalar(f.type, rnd, nullable or f.type == "records")


def norm(x):
    """Comparable form: memoryview -> bytes, kafka-python's containers -> dicts."""
    if isinstance(x, memoryview):
        return bytes(x)
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [norm(v) for v in x]
    return x


def check_decoded(fields, version: int, sent: dict, got: dict, path: str = "") -> None:
    """``got`` (decoded) holds every schema field; those in the version equal what was sent."""
    for f in fields:
        assert f.name in got, f"{path}.{f.name} missing"
        if not _in(version, f.versions):
            assert norm(got[f.name]) == norm(default_for(f, version)), f"{path}.{f.name}"
            continue
        s, g = sent[f.name], got[f.name]
        if _in(version, f.tagged) and s == default_for(f, version):
            continue
        if isinstance(f.type, Struct) and f.array and s is not None:
            assert len(s) == len(g), f"{path}.{f.name}"
            for a, b in zip(s, g, strict=True):
                check_decoded(f.type.fields, version, a, b, f"{path}.{f.name}[]")
        elif isinstance(f.type, Struct) and not f.array:
            check_decoded(f.type.fields, version, s, g, f"{path}.{f.name}")
        elif f.type == "float64":
            assert g == s
        else:
            assert norm(g) == norm(s), f"{path}.{f.name}: {g!r} != {s!r}"


# -------------------------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("key,version", CASES, ids=IDS)
def test_round_trip_every_api_and_version(key, version):
    api = APIS[key]
    rnd = random.Random(key * 1000 + version)
    for _ in range(30):
        body = rand_struct(api.request, version, rnd)
        frame = encode_request(key, version, rnd.randint(-2**31, 2**31 - 1), rand_scalar("string", rnd, True), body)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        req = parse_request(frame[4:])
        assert (req.api_key, req.api_version) == (key, version)
        check_decoded(api.request, version, body, req.body, api.name + "Request")

        resp = rand_struct(api.response, version, rnd)
        if key == ApiKey.API_VERSIONS:
            resp["error_code"] = 0       # error responses are v0 bodies: test_api_versions_error_is_v0
        out = encode_response(req, resp)
        assert struct.unpack(">i", out[:4])[0] == len(out) - 4
        corr, got = parse_response(key, version, out[4:])
        assert corr == req.correlation_id
        check_decoded(api.response, version, resp, got, api.name + "Response")
        # parts form: the same bytes
        assert b"".join(bytes(p) for p in encode_response_parts(req, resp)) == out


def _strategy(fields, version: int, depth: int = 0):
    parts = {}
    for f in fields:
        if not _in(version, f.versions):
            continue
        parts[f.name] = _field_strategy(f, version, depth)
    return st.fixed_dictionaries(parts)


def _scalar_strategy(t: str, nullable: bool):
    if t in _INT_RANGES:
        s = st.integers(*_INT_RANGES[t])
    elif t == "bool":
        s = st.booleans()
    elif t == "float64":
        s = st.floats(allow_nan=False)
    elif t == "uuid":
        s = st.uuids()
    elif t == "string":
        s = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
    else:
        s = st.binary(max_size=40)
    return st.one_of(st.none(), s) if nullable else s


def _field_strategy(f: Field, version: int, depth: int):
    nullable = _in(version, f.nullable)
    if f.array:
        e = f.elem()
        inner = _strategy(e.fields, version, depth + 1) if isinstance(e, Struct) else _scalar_strategy(e, False)
        s = st.lists(inner, max_size=3 if depth < 2 else 1)
        return st.one_of(st.none(), s) if nullable else s
    if isinstance(f.type, Struct):
        return _strategy(f.type.fields, version, depth + 1)
    return _scalar_strategy(f.type, nullable or f.type == "records")


_HYPO_CASES = [(k, v) for k, v in CASES if k in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.JOIN_GROUP,
                                                 ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.OFFSET_FETCH)
               and v in (APIS[k].versions[0], APIS[k].versions[1], APIS[k].flexible)]


@pytest.mark.parametrize("key,version", _HYPO_CASES, ids=[f"{APIS[k].name}-v{v}" for k, v in _HYPO_CASES])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip_hypothesis(key, version, data):
    api = APIS[key]
    body = data.draw(_strategy(api.request, version))
    req = parse_request(encode_request(key, version, 1, "c", body)[4:])
    check_decoded(api.request, version, body, req.body)
    resp = data.draw(_strategy(api.response, version))
    if key == ApiKey.API_VERSIONS:
        resp["error_code"] = 0
    _, got = parse_response(key, version, encode_response(req, resp)[4:])
    check_decoded(api.response, version, resp, got)


def test_missing_keys_take_defaults():
    h = RequestHeader(ApiKey.FETCH, 12, 5, None)
    _, got = parse_response(1, 12, encode_response(h, {"responses": [{"topic": "t", "partitions": [{}]}]})[4:])
    p = got["responses"][0]["partitions"][0]
    assert p["last_stable_offset"] == -1 and p["log_start_offset"] == -1 and p["records"] is None
    assert p["preferred_read_replica"] == -1 and p["aborted_transactions"] is None
    assert got["session_id"] == 0 and got["error_code"] == 0


def test_encode_errors_are_protocol_errors():
    h = RequestHeader(ApiKey.HEARTBEAT, 0, 1, None)
    with pytest.raises(ProtocolError):
        encode_response(h, {"error_code": 1 << 20})
    with pytest.raises(ProtocolError):
        encode_response(RequestHeader(ApiKey.METADATA, 1, 1, None), {"brokers": [{"host": None}]})


# --------------------------------------------------------------------------- differential: kafka-python

def _kp_classes():
    from kafka.protocol import api_message
    out = {}
    for modname in ("kafka.protocol.metadata", "kafka.protocol.consumer", "kafka.protocol.admin",
                    "kafka.protocol.producer"):
        mod = importlib.import_module(modname)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, api_message.ApiMessage) and getattr(cls, "_json", None) is not None:
                out[(cls.API_KEY, cls.type)] = cls
    return out


KP = _kp_classes()


def _kp_norm(x):
    x = norm(x)
    if isinstance(x, dict):
        return {k: _kp_norm(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_kp_norm(v) for v in x]
    return x


def _sub(ours: dict, theirs: dict, path=""):
    """Every field kafka-python decoded equals ours (kafka-python only lists the version's fields)."""
    for k, v in theirs.items():
        if k == "authorized_operations" and k not in ours:   # kafka-python renames these
            k = next(n for n in ours if n.endswith("authorized_operations"))
        assert k in ours, f"{path}.{k} unknown to us"
        o = ours[k]
        if isinstance(v, set) or (v is None and k.endswith("authorized_operations")):
            continue    # kafka-python turns authorized-operations bit fields into sets; bytes are compared
        if v is None and isinstance(o, dict):
            continue    # a tagged struct not sent: kafka-python says None, we give its defaults
        if isinstance(v, dict):
            _sub(o, v, f"{path}.{k}")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            assert len(o) == len(v)
            for a, b in zip(o, v, strict=True):
                _sub(a, b, f"{path}.{k}[]")
        else:
            assert _kp_norm(o) == v, f"{path}.{k}: ours {o!r} kafka-python {v!r}"


# The APIs kafka-python has classes for (it has none for SaslHandshake and SaslAuthenticate: it frames them
# by hand); the others are covered by the aiokafka differential below and the round trips above.
KP_CASES = [(k, v) for k, v in CASES if (k, "request") in KP or (k, "response") in KP]


@pytest.mark.parametrize("key,version", KP_CASES, ids=[f"{APIS[k].name}-v{v}" for k, v in KP_CASES])
def test_differential_kafka_python(key, version):
    api = APIS[key]
    rnd = random.Random(7 * key + version)
    for direction in ("request", "response"):
        cls = KP.get((key, direction))
        if cls is None:
            continue
        fields = api.request if direction == "request" else api.response
        for _ in range(10):
            body = rand_struct(fields, version, rnd)
            if key == ApiKey.API_VERSIONS and direction == "response":
                body["error_code"] = 0       # error responses are v0 bodies: test_api_versions_error_is_v0
            if direction == "request":
                frame = encode_request(key, version, 9, "x", body)
                req = parse_request(frame[4:])
                hdr_len = 4 + 8 + 2 + 1 + (1 if api.is_flexible(version) else 0)
                data = frame[hdr_len:]
                ours = req.body
            else:
                h = RequestHeader(key, version, 9, None)
                frame = encode_response(h, body)
                flexible_header = api.is_flexible(version) and key != ApiKey.API_VERSIONS
                data = frame[8 + (1 if flexible_header else 0):]
                ours = parse_response(key, version, frame[4:])[1]
            theirs = cls.decode(data, version=version)
            _sub(ours, _kp_norm(theirs.to_dict(json=False)), api.name + direction)
            # kafka-python re-encoding what it decoded gives our bytes
            for slot in ("_header", "_min_version", "_max_version"):
                if not hasattr(theirs, slot) or slot == "_header":
                    object.__setattr__(theirs, slot, None)
            assert bytes(theirs.encode(version=version)) == bytes(data)


# -------------------------------------------------------------------------------- differential: aiokafka

def _aio_structs():
    """The request structs aiokafka's Request builders actually send, and their responses (aiokafka also
    defines structs it never sends, e.g. ListOffsets v4/v5 with an int64 leader epoch, unlike Kafka)."""
    import aiokafka.protocol as ap
    from aiokafka.protocol.api import Request as ARequest
    out = {}
    for mi in pkgutil.iter_modules(ap.__path__):
        mod = importlib.import_module("aiokafka.protocol." + mi.name)
        for _, builder in inspect.getmembers(mod, inspect.isclass):
            if issubclass(builder, ARequest) and builder is not ARequest and hasattr(builder, "_CLASSES"):
                for cls in builder._CLASSES:
                    out[(cls.API_KEY, cls.API_VERSION, "request")] = cls
                    if cls.RESPONSE_TYPE.API_VERSION == cls.API_VERSION:   # DescribeGroups v3 reads v2's
                        out[(cls.API_KEY, cls.API_VERSION, "response")] = cls.RESPONSE_TYPE
    return out


AIO = _aio_structs()
AIO_CASES = sorted((k, v, d) for (k, v, d) in AIO if k in APIS and _in(v, APIS[k].versions))


def test_aiokafka_cases_cover_the_main_apis():
    assert {k for k, _, _ in AIO_CASES} >= {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18}


@pytest.mark.parametrize("key,version,direction", AIO_CASES,
                         ids=[f"{APIS[k].name}-v{v}-{d}" for k, v, d in AIO_CASES])
def test_differential_aiokafka(key, version, direction):
    """aiokafka's hand-written structs decode our bytes and re-encode them to the same bytes."""
    api = APIS[key]
    cls = AIO[(key, version, direction)]
    rnd = random.Random(key * 31 + version)
    fields = api.request if direction == "request" else api.response
    for _ in range(10):
        body = rand_struct(fields, version, rnd)
        if key == ApiKey.API_VERSIONS and direction == "response":
            body["error_code"] = 0
        if direction == "request":
            frame = encode_request(key, version, 9, "x", body)
            data = frame[4 + 8 + 2 + 1 + (1 if api.is_flexible(version) else 0):]
        else:
            frame = encode_response(RequestHeader(key, version, 9, None), body)
            flexible_header = api.is_flexible(version) and key != ApiKey.API_VERSIONS
            data = frame[8 + (1 if flexible_header else 0):]
        buf = io.BytesIO(data)
        theirs = cls.decode(buf)
        assert buf.tell() == len(data), "aiokafka left bytes unread"
        assert bytes(theirs.encode()) == bytes(data)


def test_aiokafka_request_decoded_by_us():
    """Requests built by aiokafka's own request builders parse, with the values it sent."""
    from aiokafka.protocol.api import RequestHeader_v1, RequestHeader_v2
    from aiokafka.protocol.fetch import FetchRequest_v11
    from aiokafka.protocol.metadata import MetadataRequest_v5
    fetch = FetchRequest_v11(-1, 500, 1, 1000, 1, 0, -1, [("t", [(0, 3, 42, -1, 1024)])], [], "rack")
    meta = MetadataRequest_v5(["a", "b"], True)
    for req, hdr_cls in ((fetch, RequestHeader_v1), (meta, RequestHeader_v1)):
        frame = hdr_cls(req, correlation_id=77, client_id="aio").encode() + req.encode()
        r = parse_request(frame)
        assert r.correlation_id == 77 and r.client_id == "aio"
    assert RequestHeader_v2  # flexible headers are covered by the kafka-python test
    r = parse_request(RequestHeader_v1(fetch, 1, "a").encode() + fetch.encode())
    p = r.body["topics"][0]["partitions"][0]
    assert (r.body["max_wait_ms"], p["fetch_offset"], p["partition_max_bytes"], r.body["rack_id"]) == (500, 42, 1024,
                                                                                                         "rack")


# ---------------------------------------------------------------------------------------- hostile input

def _valid_frames():
    rnd = random.Random(1)
    for key, version in CASES:
        body = rand_struct(APIS[key].request, version, rnd)
        yield key, version, encode_request(key, version, 3, "cid", body)[4:]


VALID = list(_valid_frames())


def test_truncations_raise_protocol_error_only():
    for _key, _version, frame in VALID:
        for cut in range(len(frame)):
            with pytest.raises(ProtocolError):
                parse_request(frame[:cut])


def test_trailing_bytes_are_ignored_as_kafka_brokers_ignore_them():
    for _key, _version, frame in VALID:
        assert parse_request(frame + b"\x01\x00\x00").body == parse_request(frame).body


def test_librdkafka_metadata_v12_all_topics_request_decodes():
    # What confluent-kafka 2.16's AdminClient.list_topics() sends: three bytes past the spec's fields.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    req = parse_request(frame)
    assert (req.api_key, req.api_version, req.client_id) == (3, 12, "rdkafka")
    assert req.body["topics"] is None and req.body["allow_auto_topic_creation"] is False


def test_random_mutations_decode_or_raise_protocol_error():
    rnd = random.Random(2)
    t0 = time.perf_counter()
    for _key, _version, frame in VALID:
        for _ in range(40):
            b = bytearray(frame)
            for _ in range(rnd.randint(1, 4)):
                i = rnd.randrange(len(b))
                b[i] = rnd.choice([0x00, 0xFF, 0x7F, 0x80, rnd.getrandbits(8)])
            try:
                parse_request(bytes(b))
            except ProtocolError:
                pass
    assert time.perf_counter() - t0 < 30


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(CASES))
def test_arbitrary_bodies(body, case):
    key, version = case
    frame = struct.pack(">hhi", key, version, 1) + b"\xff\xff" + (b"\x00" if APIS[key].is_flexible(version) else b"")
    try:
        parse_request(frame + body)
    except ProtocolError:
        pass


def _header(key, version, flexible):
    return struct.pack(">hhih", key, version, 1, -1) + (b"\x00" if flexible else b"")


def test_huge_array_count_fails_at_once():
    # Metadata v1: topics int32 count 2**31-1 with 10 bytes left
    frame = _header(3, 1, False) + struct.pack(">i", 2**31 - 1) + b"\x00" * 10
    t0 = time.perf_counter()
    with pytest.raises(ProtocolError, match="cannot fit"):
        parse_request(frame)
    # compact (Metadata v9): unsigned varint count 2**32-1
    frame = _header(3, 9, True) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(ProtocolError, match="cannot fit"):
        parse_request(frame)
    # primitive arrays too (OffsetFetch v1 partition_indexes)
    frame = _header(9, 1, False) + b"\x00\x01g" + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 2**31 - 1)
    with pytest.raises(ProtocolError, match="cannot fit"):
        parse_request(frame + b"\x00" * 8)
    # tagged fields count
    frame = _header(18, 3, False) + b"\xff\xff\xff\x0f"
    with pytest.raises(ProtocolError):
        parse_request(frame)
    assert time.perf_counter() - t0 < 0.05


def test_bad_lengths():
    with pytest.raises(ProtocolError, match="negative string length"):
        parse_request(struct.pack(">hhih", 3, 1, 1, -2))
    with pytest.raises(ProtocolError, match="negative array length"):
        parse_request(_header(3, 1, False) + struct.pack(">i", -5))
    with pytest.raises(ProtocolError, match="non-nullable array"):
        parse_request(_header(3, 0, False) + struct.pack(">i", -1))   # null topics only from v1
    assert parse_request(_header(3, 1, False) + struct.pack(">i", -1)).body["topics"] is None
    with pytest.raises(ProtocolError, match="negative records length"):
        parse_request(_header(0, 3, False) + b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
                      + b"\x00\x01t" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00" + struct.pack(">i", -3))
    with pytest.raises(ProtocolError, match="varint longer"):
        parse_request(_header(18, 3, True) + b"\x80\x80\x80\x80\x80\x80")


def test_invalid_utf8():
    frame = struct.pack(">hhih", 18, 0, 1, 2) + b"\xff\xfe"
    with pytest.raises(ProtocolError, match="UTF-8") as e:
        parse_request(frame)
    assert e.value.position == 10 and isinstance(e.value, PylogError)


def test_error_says_where():
    frame = _header(3, 1, False) + struct.pack(">i", 1) + b"\x00\x09ab"
    with pytest.raises(ProtocolError) as e:
        parse_request(frame)
    assert e.value.field == "MetadataRequest.topics[].name" and e.value.position == 16


def test_unknown_tagged_fields_skipped():
    # ApiVersions v3 request, header with a tag, body with an unknown tag 7 (3 bytes)
    frame = (struct.pack(">hhih", 18, 3, 4, 1) + b"c" + b"\x01\x05\x01z"
             + b"\x02n\x02v" + b"\x01\x07\x03abc")
    r = parse_request(frame)
    assert r.body["client_software_name"] == "n" and r.client_id == "c"


def test_known_tagged_field_decoded_and_size_checked():
    h = RequestHeader(ApiKey.FETCH, 12, 1, None)
    leader = {"leader_id": 4, "leader_epoch": 9}
    body = {"responses": [{"topic": "t", "partitions": [{"current_leader": leader}]}]}
    _, got = parse_response(1, 12, encode_response(h, body)[4:])
    assert got["responses"][0]["partitions"][0]["current_leader"] == leader
    assert got["responses"][0]["partitions"][0]["diverging_epoch"] == {"epoch": -1, "end_offset": -1}


# ----------------------------------------------------------------------------------------------- framing

def test_unknown_api_key():
    with pytest.raises(UnknownApiKeyError) as e:
        parse_request(struct.pack(">hhih", 999, 0, 42, -1))
    assert e.value.header.correlation_id == 42 and e.value.header.api_key == 999


def test_unsupported_version_of_other_api():
    with pytest.raises(UnsupportedApiVersionError) as e:
        parse_request(struct.pack(">hhih", 1, 13, 5, -1) + b"junk")
    assert e.value.header.api_version == 13
    assert unsupported_version_response(e.value.header) is None


@pytest.mark.parametrize("version", [5, 99])
def test_unsupported_api_versions_is_answered_with_v0(version):
    from kafka.protocol.metadata import ApiVersionsResponse
    with pytest.raises(UnsupportedApiVersionError) as e:
        parse_request(struct.pack(">hhih", 18, version, 11, 1) + b"c" + b"\x00whatever")
    out = unsupported_version_response(e.value.header)
    assert struct.unpack(">ii", out[:8]) == (len(out) - 4, 11)    # response header v0
    resp = ApiVersionsResponse.decode(out[8:], version=0)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}[18] == (0, 4)


def test_api_versions_error_is_v0():
    """Clients (kafka-python, Java) read an ApiVersions response with an error as a v0 body."""
    from kafka.protocol.metadata import ApiVersionsResponse
    out = encode_response(RequestHeader(18, 3, 8, None), {"error_code": 7, "api_keys": [
        {"api_key": 0, "min_version": 3, "max_version": 9}], "throttle_time_ms": 5})
    assert parse_response(18, 0, out[4:])[1]["api_keys"] == [{"api_key": 0, "min_version": 3, "max_version": 9}]
    assert ApiVersionsResponse.decode(out[8:], version=3).error_code == 7


def test_api_versions_response_header_is_v0_even_when_flexible():
    h = RequestHeader(18, 3, 8, None)
    out = encode_response(h, {"api_keys": [{"api_key": 0, "min_version": 3, "max_version": 9}]})
    assert out[4:8] == struct.pack(">i", 8) and out[8:10] == b"\x00\x00"   # straight into error_code
    assert encode_response(RequestHeader(3, 9, 8, None), {})[8] == 0        # others: header v1 tags


def test_supported_versions():
    sv = supported_versions()
    assert sv[0] == (3, 9) and sv[1] == (4, 12) and sv[3] == (0, 12) and sv[9] == (1, 7) and sv[10] == (0, 3)
    assert not set(sv) & UNSERVED_APIS
    assert supported_versions(include=[26])[26] == (0, 3)
    # kafka-python infers a broker version from what we advertise; a 2.x+ one enables everything it needs
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions
    assert infer_broker_version_from_api_versions(sv) >= (2, 8)


def test_request_decoded_from_kafka_python_header_v2():
    from kafka.protocol.metadata import MetadataRequest
    r = MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=True)
    r.with_header(correlation_id=123, client_id="kp")
    req = parse_request(bytes(r.encode(header=True)))
    assert (req.correlation_id, req.client_id, req.api_version) == (123, "kp", 12)
    assert req.body["topics"] is None and req.body["allow_auto_topic_creation"] is False


def test_produce_decode_is_zero_copy_and_fast():
    blob = bytes(range(256)) * 4096          # 1 MiB
    frame = encode_request(0, 9, 1, "p", {"acks": -1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": blob}]}]})
    view = memoryview(frame)[4:]
    r = parse_request(view)
    rec = r.body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(rec, memoryview) and rec.obj is frame and rec == blob
    t0 = time.perf_counter()
    for _ in range(1000):
        parse_request(view)
    assert (time.perf_counter() - t0) / 1000 < 200e-6


def test_fetch_response_passes_records_by_reference():
    big = b"r" * 100_000
    parts_in = [b"a" * 5000, b"b" * 5000]
    h = RequestHeader(1, 11, 2, None)
    body = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": big},
                                                         {"partition_index": 1, "records": parts_in},
                                                         {"partition_index": 2, "records": b"small"}]}]}
    parts = encode_response_parts(h, body)
    assert any(p is big for p in parts) and any(p is parts_in[0] for p in parts)
    out = encode_response(h, body)
    assert len(out) == sum(map(len, parts)) and struct.unpack(">i", out[:4])[0] == len(out) - 4
    _, got = parse_response(1, 11, out[4:])
    ps = got["responses"][0]["partitions"]
    assert ps[0]["records"] == big and ps[1]["records"] == b"".join(parts_in) and ps[2]["records"] == b"small"


# -------------------------------------------------------------------------------------- error responses

@pytest.mark.parametrize("key,version", CASES, ids=IDS)
def test_error_response_every_api(key, version):
    rnd = random.Random(key + 100 * version)
    body = rand_struct(APIS[key].request, version, rnd)
    req = parse_request(encode_request(key, version, 4, None, body)[4:])
    err = error_response(req, ErrorCode.UNSUPPORTED_VERSION)
    _, got = parse_response(key, version, encode_response(req, err)[4:])   # encodable, and decodes
    codes_seen = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("error_code", "partition_error_code"):
                    codes_seen.append(v)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(err)
    assert all(c == 35 for c in codes_seen)


def test_error_response_mirrors_request():
    req = parse_request(encode_request(0, 9, 1, None, {"acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": b"x"}, {"index": 3, "records": None}]}]})[4:])
    err = error_response(req, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    assert err == {"responses": [{"name": "a", "partition_responses": [{"index": 0, "error_code": 29},
                                                                       {"index": 3, "error_code": 29}]}]}
    req = parse_request(encode_request(26, 3, 1, None, {"transactional_id": "t"})[4:])
    assert error_response(req, 35) == {"error_code": 35}
    body = {"v3_and_below_topics": [{"name": "t", "partitions": [1, 2]}]}
    req = parse_request(encode_request(24, 2, 1, None, body)[4:])
    assert error_response(req, 48)["results_by_topic_v3_and_below"][0]["results_by_partition"] == [
        {"partition_index": 1, "partition_error_code": 48}, {"partition_index": 2, "partition_error_code": 48}]
    req = parse_request(encode_request(15, 0, 1, None, {"groups": ["g1", "g2"]})[4:])
    assert [g["group_id"] for g in error_response(req, 16)["groups"]] == ["g1", "g2"]


def test_request_object():
    req = parse_request(encode_request(12, 4, 77, "me", {"group_id": "g"})[4:])
    assert isinstance(req, Request) and req.header == RequestHeader(12, 4, 77, "me") and req.api_name == "Heartbeat"
    assert req.body["group_instance_id"] is None


# ---------------------------------------------------------------------------------------- primitives, codes

@given(st.integers(-2**31, 2**31 - 1))
def test_varint(n):
    out = bytearray()
    P.write_varint(out, n)
    assert P.read_varint(bytes(out), 0, len(out), "x") == (n, len(out))


@given(st.integers(-2**63, 2**63 - 1))
def test_varlong(n):
    out = bytearray()
    P.write_varlong(out, n)
    assert P.read_varlong(bytes(out), 0, len(out), "x") == (n, len(out))


@given(st.integers(0, 2**32 - 1))
def test_uvarint(n):
    out = bytearray()
    P.write_uvarint(out, n)
    assert len(out) == P.uvarint_size(n)
    assert P.read_uvarint(bytes(out), 0, len(out), "x") == (n, len(out))


def test_varint_overlong_and_truncated():
    with pytest.raises(ProtocolError):
        P.read_uvarint(b"\xff\xff\xff\xff\x7f", 0, 5, "x")      # > 32 bits
    with pytest.raises(ProtocolError):
        P.read_varlong(b"\x80" * 11, 0, 11, "x")
    with pytest.raises(ProtocolError):
        P.read_varint(b"\x80", 0, 1, "x")


def test_error_codes_match_kafka():
    assert (codes.NONE, codes.UNKNOWN_SERVER_ERROR, codes.OFFSET_OUT_OF_RANGE, codes.NOT_COORDINATOR) == (0, -1, 1, 16)
    assert (codes.UNSUPPORTED_VERSION, codes.INVALID_REQUEST, codes.PRODUCER_FENCED, codes.UNKNOWN_TOPIC_ID) == (
        35, 42, 90, 100)
    assert codes.is_retriable(codes.NOT_COORDINATOR) and not codes.is_retriable(codes.INVALID_CONFIG)
    import kafka.errors as KE
    by_code = {c.errno: c for c in vars(KE).values() if isinstance(c, type)
               and issubclass(c, KE.BrokerResponseError) and isinstance(getattr(c, "errno", None), int)}
    for e in ErrorCode:
        if e in by_code:
            assert by_code[e].retriable == (e in codes.RETRIABLE), e.name
