"""The schema engine: a compact DSL for Kafka API messages and a compiler from it to fast per-version
decoders and encoders.

A message is a list of fields, each made with :func:`F`::

    F("acks", "int16")                                    # in every version
    F("transactional_id", "string", "3+", nullable="3+")  # from version 3, null allowed from 3
    F("topic_data", [F("name", "string"), ...])           # an array of structs: the type is the field list
    F("current_leader", S(F(...), ...), "12+", tag=1)     # a single struct, a tagged field from v12
    F("broker_ids", "[]int32")                            # an array of a primitive type

Types are Kafka's: int8, int16, int32, int64, uint16, float64, bool, uuid, string, bytes, records, ``[]T``.
Version ranges are Kafka's strings: ``"3+"``, ``"0-4"``, ``"none"``. A field with ``tag`` is a tagged field
(flexible versions only) in ``tagged`` versions (default: all its versions). Names are Kafka's field names in
snake_case. This mirrors Kafka's JSON message specs (clients/src/main/resources/common/message/), keeping
only what the wire format needs.

:func:`compile_struct` turns a field list at one version into Python source (exec'd once) for a decoder
``(buf, pos, end) -> (dict, pos)`` and an encoder ``(out, parts, dict) -> None``; callers cache the
results per (api, version, direction). Invariants of the generated code:

* Decoding checks every length against the bytes left before slicing or allocating; array counts are
  bounded by ``remaining // minimum element size``; errors are :class:`~pylog.errors.ProtocolError` with the
  field's dotted path and byte position. Unknown tagged fields are skipped; known ones must use exactly
  their declared size.
* A decoded struct is a dict holding *every* field of the schema: fields absent from the version (or
  tagged fields not sent) hold their default, so handlers read ``body["x"]`` whatever the version.
* Encoding takes each field from the dict, a missing key meaning its default (the spec's default, else
  0 / False / "" / [] / the zero UUID, or None where the field is nullable in that version). Fields absent
  from the version are ignored; tagged fields are written only when they differ from their default.
  RECORDS values (bytes-like, or a list/tuple of bytes-like parts) of 4 KiB or more are not copied: they
  are appended to ``parts`` by reference after the bytes encoded so far (``out`` is flushed into ``parts``).
"""

from __future__ import annotations

import struct
import threading
import uuid
from dataclasses import dataclass, field as dc_field
from typing import Any, Callable, Sequence

from pylog.errors import ProtocolError

from . import primitives as P

__all__ = ["F", "S", "Field", "Struct", "Api", "parse_versions", "compile_struct", "default_for",
           "BIG_RECORDS"]

#: RECORDS values at least this long are passed through to the output parts instead of copied.
BIG_RECORDS = 4096

_NEVER = (1, 0)           # an empty version range
_MISSING: Any = object()


def parse_versions(spec: str | None) -> tuple[int, int]:
    """Kafka's version range string -> (lo, hi) inclusive; "none"/None -> an empty range."""
    if spec is None or spec == "none":
        return _NEVER
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def _in(v: int, r: tuple[int, int]) -> bool:
    return r[0] <= v <= r[1]


@dataclass(frozen=True)
class Struct:
    """A struct type: its fields, in wire order."""
    fields: tuple["Field", ...]


def S(*fields: "Field") -> Struct:
    """A single (non-array) nested struct type."""
    return Struct(tuple(fields))


_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "uint32": "I",
          "float64": "d", "bool": "?"}
_ZERO: dict[str, Any] = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0,
                         "float64": 0.0, "bool": False, "string": "", "bytes": b"", "records": None,
                         "uuid": P.ZERO_UUID}
_PRIMS = set(_ZERO)


@dataclass(frozen=True)
class Field:
    """One field of a message: see the module docstring. ``type`` is a primitive name, ``"[]prim"``, or
    a :class:`Struct` (``array`` says whether it is an array of that struct)."""
    name: str
    type: str | Struct
    array: bool
    versions: tuple[int, int]
    nullable: tuple[int, int]
    tag: int | None
    tagged: tuple[int, int]
    default: Any = dc_field(default=_MISSING)

    def elem(self) -> str | Struct:
        """The element type of an array (a primitive name or a Struct)."""
        if isinstance(self.type, Struct):
            return self.type
        return self.type[2:]


def F(name: str, type: str | Struct | Sequence[Field], versions: str = "0+", *, nullable: str | None = None,
      tag: int | None = None, tagged: str | None = None, default: Any = _MISSING) -> Field:
    """A field; ``type`` a primitive name, ``"[]prim"``, a list of fields (array of structs) or ``S(...)``."""
    array = False
    t: str | Struct
    if isinstance(type, Struct):
        t = type
    elif isinstance(type, str):
        if type.startswith("[]"):
            array = True
            if type[2:] not in _PRIMS:
                raise ValueError(f"field {name}: unknown element type {type}")
        elif type not in _PRIMS:
            raise ValueError(f"field {name}: unknown type {type}")
        t = type
    else:
        t = Struct(tuple(type))
        array = True
    vr = parse_versions(versions)
    return Field(name, t, array, vr, parse_versions(nullable), tag,
                 (parse_versions(tagged) if tagged is not None else vr) if tag is not None else _NEVER, default)


@dataclass(frozen=True)
class Api:
    """One Kafka API: key, name, the versions pylog serves, the first flexible version (None if none is
    served) and the request and response field lists."""
    key: int
    name: str
    versions: tuple[int, int]
    flexible: int | None
    request: tuple[Field, ...]
    response: tuple[Field, ...]

    def __init__(self, key: int, name: str, versions: tuple[int, int], flexible: int | None,
                 request: Sequence[Field], response: Sequence[Field]) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "versions", versions)
        object.__setattr__(self, "flexible", flexible)
        object.__setattr__(self, "request", tuple(request))
        object.__setattr__(self, "response", tuple(response))

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version >= self.flexible


def default_for(f: Field, version: int) -> Any:
    """The value a missing ``f`` takes at ``version`` (a fresh list/dict for containers)."""
    if f.default is not _MISSING:
        return f.default
    if _in(version, f.nullable):
        return None
    if f.array:
        return []
    if isinstance(f.type, Struct):
        return {g.name: default_for(g, version) for g in f.type.fields}
    return _ZERO[f.type]


# ------------------------------------------------------------------------------------------------ compiler

_READ = {  # (type, compact, nullable) -> reader name in the namespace
    ("string", False, False): "read_string", ("string", False, True): "read_nstring",
    ("string", True, False): "read_cstring", ("string", True, True): "read_cnstring",
    ("bytes", False, False): "read_bytes", ("bytes", False, True): "read_nbytes",
    ("bytes", True, False): "read_cbytes", ("bytes", True, True): "read_cnbytes",
}
_WRITE = {
    ("string", False, False): "write_string", ("string", False, True): "write_nstring",
    ("string", True, False): "write_cstring", ("string", True, True): "write_cnstring",
    ("bytes", False, False): "write_bytes", ("bytes", False, True): "write_nbytes",
    ("bytes", True, False): "write_cbytes", ("bytes", True, True): "write_cnbytes",
}


def _count(buf: Any, pos: int, end: int, where: str, compact: bool, nullable: bool, min_size: int
           ) -> tuple[int, int]:
    """An array's element count (-1: null), bounded by the bytes left."""
    if compact:
        if pos < end and buf[pos] < 0x80:
            n = buf[pos] - 1
            pos += 1
        else:
            n, pos = P.read_uvarint(buf, pos, end, where)
            n -= 1
    else:
        if end - pos < 4:
            raise P.short(pos, 4, end - pos, where)
        n = P.I32.unpack_from(buf, pos)[0]
        pos += 4
        if n < -1:
            raise ProtocolError(f"negative array length {n}", pos - 4, where)
    if n < 0:
        if not nullable:
            raise ProtocolError("null for a non-nullable array", pos, where)
        return -1, pos
    if n > (end - pos) // min_size:
        raise ProtocolError(f"array of {n} elements cannot fit in {end - pos} bytes", pos, where)
    return n, pos


#: The structures (array elements of struct type) one request may still decode, per thread: see
#: :func:`struct_budget`. Unset (None) outside parse_request: responses and tools decode without a budget.
_BUDGET = threading.local()


def struct_budget(n: int | None) -> None:
    """Allow the decoding that follows, on this thread, at most ``n`` struct array elements in all (None: no
    limit). A decoded struct is a dict of a few hundred bytes while its encoding can be 3 bytes, so the count
    bounds a request's memory by its size: parse_request allows 4,096 + one per 8 bytes of frame."""
    _BUDGET.left = n


def _spend(n: int, pos: int, where: str) -> None:
    left = getattr(_BUDGET, "left", None)
    if left is None:
        return
    left -= n
    if left < 0:
        raise ProtocolError(f"an array of {n} structures takes this request past the structures a request of its "
                            "size may hold (4,096 plus one per 8 bytes, and at most the server's max_request_items)",
                            pos, where)
    _BUDGET.left = left


def _fixed_array(buf: Any, pos: int, end: int, where: str, compact: bool, nullable: bool, code: str,
                 size: int) -> tuple[list | None, int]:
    n, pos = _count(buf, pos, end, where, compact, nullable, size)
    if n < 0:
        return None, pos
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), pos + n * size


def _var_array(buf: Any, pos: int, end: int, where: str, compact: bool, nullable: bool, read: Callable,
               min_size: int) -> tuple[list | None, int]:
    n, pos = _count(buf, pos, end, where, compact, nullable, min_size)
    if n < 0:
        return None, pos
    out = []
    for _ in range(n):
        v, pos = read(buf, pos, end, where)
        out.append(v)
    return out, pos


def _w_count(out: bytearray, x: Any, compact: bool, nullable: bool) -> bool:
    """Writes an array's count; False when x is None (null written)."""
    if x is None:
        if not nullable:
            raise ProtocolError("None for a non-nullable array")
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return False
    if compact:
        P.write_uvarint(out, len(x) + 1)
    else:
        out += P.I32.pack(len(x))
    return True


def _w_fixed_array(out: bytearray, x: Any, compact: bool, nullable: bool, code: str) -> None:
    if _w_count(out, x, compact, nullable):
        out += struct.pack(f">{len(x)}{code}", *x)


def _w_var_array(out: bytearray, x: Any, compact: bool, nullable: bool, write: Callable) -> None:
    if _w_count(out, x, compact, nullable):
        for e in x:
            write(out, e)


def _w_records(out: bytearray, parts: list, r: Any, compact: bool) -> None:
    if r is None:
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return
    many = isinstance(r, (list, tuple))
    n = sum(map(len, r)) if many else len(r)
    if compact:
        P.write_uvarint(out, n + 1)
    else:
        out += P.I32.pack(n)
    if n < BIG_RECORDS:
        if many:
            for p in r:
                out += p
        else:
            out += r
        return
    parts.append(bytes(out))        # only the small bytes before the blob are copied
    out.clear()
    if many:
        parts.extend(r)
    else:
        parts.append(r)


def _read_tags(buf: Any, pos: int, end: int, where: str, known: dict, into: dict) -> int:
    n, pos = P.read_uvarint(buf, pos, end, where)
    if n > (end - pos) // 2:
        raise ProtocolError(f"{n} tagged fields cannot fit in {end - pos} bytes", pos, where)
    for _ in range(n):
        tag, pos = P.read_uvarint(buf, pos, end, where)
        size, pos = P.read_uvarint(buf, pos, end, where)
        if size > end - pos:
            raise P.short(pos, size, end - pos, f"{where}<tag {tag}>")
        k = known.get(tag)
        if k is not None:
            name, read = k
            value, p = read(buf, pos, pos + size)
            if p != pos + size:
                raise ProtocolError(f"tagged field {name} used {p - pos} of its {size} bytes", pos, where)
            into[name] = value
        pos += size
    return pos


def _w_tags(out: bytearray, tags: list) -> None:
    P.write_uvarint(out, len(tags))
    for tag, data in tags:
        P.write_uvarint(out, tag)
        P.write_uvarint(out, len(data))
        out += data


_BASE_NS: dict[str, Any] = {name: getattr(P, name) for name in P.__all__}
_BASE_NS.update(_count=_count, _spend=_spend, _fixed_array=_fixed_array, _var_array=_var_array, _w_count=_w_count,
                _w_fixed_array=_w_fixed_array, _w_var_array=_w_var_array, _w_records=_w_records,
                _read_tags=_read_tags, _w_tags=_w_tags, _short=P.short, ProtocolError=ProtocolError,
                _uuid=uuid)


class _Gen:
    """Accumulates generated functions (source lines) and the constants they use."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(_BASE_NS)
        self.n = 0

    def const(self, value: Any) -> str:
        self.n += 1
        name = f"_k{self.n}"
        self.ns[name] = value
        return name

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def min_size(fields: Sequence[Field], version: int, flexible: bool) -> int:
    """The fewest bytes a struct's encoding takes at ``version``."""
    size = 1 if flexible else 0
    for f in fields:
        if not _in(version, f.versions) or _in(version, f.tagged):
            continue
        size += _min_field(f, version, flexible)
    return size


def _min_field(f: Field, version: int, flexible: bool) -> int:
    if f.array:
        return 1 if flexible else 4
    if isinstance(f.type, Struct):
        return min_size(f.type.fields, version, flexible)
    t = f.type
    if t in _FIXED:
        return struct.calcsize(">" + _FIXED[t])
    if t == "uuid":
        return 16
    if t == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4       # bytes, records


def _elem_min(f: Field, version: int, flexible: bool) -> int:
    e = f.elem()
    if isinstance(e, Struct):
        return max(1, min_size(e.fields, version, flexible))
    if e in _FIXED:
        return struct.calcsize(">" + _FIXED[e])
    if e == "uuid":
        return 16
    if e == "string":
        return 1 if flexible else 2
    return 1 if flexible else 4


def _scalar_reader(g: _Gen, t: str, compact: bool, nullable: bool) -> str:
    """The name of a reader (buf, pos, end, where) for a non-array, non-struct type."""
    if t in _FIXED:
        s = struct.Struct(">" + _FIXED[t])
        name = g.fresh("_rf")
        g.lines += [
            f"def {name}(buf, pos, end, where):",
            f"    if end - pos < {s.size}:",
            f"        raise _short(pos, {s.size}, end - pos, where)",
            f"    return {g.const(s)}.unpack_from(buf, pos)[0], pos + {s.size}",
            "",
        ]
        return name
    if t == "uuid":
        return "read_uuid"
    if t == "records":
        if not nullable:
            raise ValueError("records fields must be nullable")   # as in every Kafka spec
        return "read_crecords" if compact else "read_records"
    return _READ[(t, compact, nullable)]


def _scalar_writer(g: _Gen, t: str, compact: bool, nullable: bool) -> str:
    if t in _FIXED:
        name = g.fresh("_wf")
        g.lines += [f"def {name}(out, x):", f"    out += {g.const(struct.Struct('>' + _FIXED[t]))}.pack(x)", ""]
        return name
    if t == "uuid":
        return "write_uuid"
    return _WRITE[(t, compact, nullable)]


def compile_struct(fields: Sequence[Field], version: int, flexible: bool, where: str
                   ) -> tuple[Callable[[Any, int, int], tuple[dict, int]], Callable[[bytearray, list, dict], None]]:
    """Compiles a decoder and an encoder for ``fields`` at ``version`` (see the module docstring)."""
    g = _Gen()
    dec = _gen_decoder(g, fields, version, flexible, where)
    enc = _gen_encoder(g, fields, version, flexible, where)
    src = "\n".join(g.lines)
    exec(compile(src, f"<pylog protocol {where} v{version}>", "exec"), g.ns)  # noqa: S102 - our own source
    return g.ns[dec], g.ns[enc]


def _field_decoder(g: _Gen, f: Field, version: int, flexible: bool, where: str) -> str:
    """A function (buf, pos, end) -> (value, pos) for one field (used for tagged fields)."""
    name = g.fresh("_tf")
    body = _read_lines(g, f, version, flexible, f"{where}.{f.name}", "v")
    g.lines += [f"def {name}(buf, pos, end):", *["    " + x for x in body], "    return v, pos", ""]
    return name


def _read_lines(g: _Gen, f: Field, version: int, flexible: bool, path: str, var: str) -> list[str]:
    """Lines reading field ``f`` into ``var`` (not for fixed-width groups)."""
    nullable = _in(version, f.nullable)
    if f.array:
        e = f.elem()
        if isinstance(e, Struct):
            child = _gen_decoder(g, e.fields, version, flexible, path + "[]")
            mn = _elem_min(f, version, flexible)
            return [
                f"n, pos = _count(buf, pos, end, {path!r}, {flexible}, {nullable}, {mn})",
                "if n < 0:",
                f"    {var} = None",
                "else:",
                f"    _spend(n, pos, {path!r})",
                f"    {var} = []",
                f"    app = {var}.append",
                "    for _ in range(n):",
                f"        x, pos = {child}(buf, pos, end)",
                "        app(x)",
            ]
        if e in _FIXED:
            code = _FIXED[e]
            return [f"{var}, pos = _fixed_array(buf, pos, end, {path!r}, {flexible}, {nullable}, {code!r}, "
                    f"{struct.calcsize('>' + code)})"]
        reader = _scalar_reader(g, e, flexible, False)
        return [f"{var}, pos = _var_array(buf, pos, end, {path!r}, {flexible}, {nullable}, {reader}, "
                f"{_elem_min(f, version, flexible)})"]
    if isinstance(f.type, Struct):
        if nullable:
            raise ValueError(f"{path}: nullable structs are not supported")
        child = _gen_decoder(g, f.type.fields, version, flexible, path)
        return [f"{var}, pos = {child}(buf, pos, end)"]
    reader = _scalar_reader(g, f.type, flexible, nullable)
    return [f"{var}, pos = {reader}(buf, pos, end, {path!r})"]


def _default_expr(g: _Gen, f: Field, version: int) -> str:
    """An expression for ``f``'s default at ``version``: a literal, or a fresh copy of a container."""
    d = default_for(f, version)
    if isinstance(d, list) and not d:
        return "[]"
    if isinstance(d, (list, dict)):
        return f"_deepcopy({g.const(d)})"
    if d is None or isinstance(d, (bool, int, float, str)):
        return repr(d)
    return g.const(d)


def _deepcopy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy(v) for v in d]
    return d


_BASE_NS["_deepcopy"] = _deepcopy


def _gen_decoder(g: _Gen, fields: Sequence[Field], version: int, flexible: bool, where: str) -> str:
    name = g.fresh("_dec")
    body: list[str] = []
    out_items: list[str] = []
    tagged: list[Field] = []
    group: list[tuple[Field, str]] = []

    def flush() -> None:
        if not group:
            return
        fmt = ">" + "".join(_FIXED[f.type] for f, _ in group)  # type: ignore[index]
        s = struct.Struct(fmt)
        first = f"{where}.{group[0][0].name}"
        names = ", ".join(v for _, v in group) + ("," if len(group) == 1 else "")
        body.extend([
            f"if end - pos < {s.size}:",
            f"    raise _short(pos, {s.size}, end - pos, {first!r})",
            f"{names} = {g.const(s)}.unpack_from(buf, pos)",
            f"pos += {s.size}",
        ])
        group.clear()

    for i, f in enumerate(fields):
        var = f"v{i}"
        if not _in(version, f.versions):
            out_items.append(f"{f.name!r}: {_default_expr(g, f, version)}")
            continue
        if _in(version, f.tagged):
            if not flexible:
                raise ValueError(f"{where}.{f.name}: tagged field in a non-flexible version")
            tagged.append(f)
            out_items.append(f"{f.name!r}: {_default_expr(g, f, version)}")
            continue
        out_items.append(f"{f.name!r}: {var}")
        if not f.array and isinstance(f.type, str) and f.type in _FIXED:
            group.append((f, var))
            continue
        flush()
        body.extend(_read_lines(g, f, version, flexible, f"{where}.{f.name}", var))
    flush()
    body.append("d = {" + ", ".join(out_items) + "}")
    if flexible:
        known_name = g.fresh("_known")
        table = {f.tag: (f.name, _field_decoder(g, f, version, flexible, where)) for f in tagged}
        g.lines.append(f"{known_name} = {{" + ", ".join(f"{t}: ({n!r}, {fn})" for t, (n, fn) in table.items())
                       + "}")
        g.lines.append("")
        body.append(f"pos = _read_tags(buf, pos, end, {where + '<tags>'!r}, {known_name}, d)")
    g.lines += [f"def {name}(buf, pos, end):", *["    " + x for x in body], "    return d, pos", ""]
    return name


def _write_lines(g: _Gen, f: Field, version: int, flexible: bool, path: str, x: str, out: str = "out"
                 ) -> list[str]:
    """Lines writing value ``x`` of field ``f`` to the bytearray ``out`` (``parts`` for big records)."""
    nullable = _in(version, f.nullable)
    if f.array:
        e = f.elem()
        if isinstance(e, Struct):
            child = _gen_encoder(g, e.fields, version, flexible, path + "[]")
            return [
                f"if _w_count({out}, {x}, {flexible}, {nullable}):",
                f"    for e in {x}:",
                f"        {child}({out}, parts, e)",
            ]
        if e in _FIXED:
            return [f"_w_fixed_array({out}, {x}, {flexible}, {nullable}, {_FIXED[e]!r})"]
        return [f"_w_var_array({out}, {x}, {flexible}, {nullable}, {_scalar_writer(g, e, flexible, False)})"]
    if isinstance(f.type, Struct):
        child = _gen_encoder(g, f.type.fields, version, flexible, path)
        return [f"{child}({out}, parts, {x} if {x} is not None else {{}})"]
    if f.type == "records":
        return [f"_w_records({out}, parts, {x}, {flexible})"]
    return [f"{_scalar_writer(g, f.type, flexible, nullable)}({out}, {x})"]


def _gen_encoder(g: _Gen, fields: Sequence[Field], version: int, flexible: bool, where: str) -> str:
    name = g.fresh("_enc")
    body: list[str] = []
    group: list[Field] = []
    tagged: list[Field] = []

    def get(f: Field) -> str:
        d = default_for(f, version)
        if isinstance(d, (list, dict)) or not isinstance(d, (int, float, str, bool, type(None))):
            return f"d.get({f.name!r}, {g.const(d)})"
        return f"d.get({f.name!r}, {d!r})"

    def flush() -> None:
        if not group:
            return
        s = struct.Struct(">" + "".join(_FIXED[f.type] for f in group))  # type: ignore[index]
        body.append(f"out += {g.const(s)}.pack({', '.join(get(f) for f in group)})")
        group.clear()

    for f in fields:
        if not _in(version, f.versions):
            continue
        if _in(version, f.tagged):
            tagged.append(f)
            continue
        if not f.array and isinstance(f.type, str) and f.type in _FIXED:
            group.append(f)
            continue
        flush()
        body.append(f"x = {get(f)}")
        body.extend(_write_lines(g, f, version, flexible, f"{where}.{f.name}", "x"))
    flush()
    if flexible:
        if not tagged:
            body.append("out.append(0)")
        else:
            body.append("tags = []")
            for f in sorted(tagged, key=lambda f: f.tag or 0):
                d = default_for(f, version)
                body.append(f"x = d.get({f.name!r})")
                cond = f"x is not None and x != {g.const(d)}"
                body.append(f"if {cond}:")
                body.append("    t = bytearray()")
                sub = _write_lines(g, f, version, flexible, f"{where}.{f.name}", "x", "t")
                body.extend("    " + ln for ln in sub)
                body.append(f"    tags.append(({f.tag}, t))")
            body.append("_w_tags(out, tags)")
    if not body:
        body.append("pass")
    g.lines += [f"def {name}(out, parts, d):", *["    " + x for x in body], ""]
    return name
