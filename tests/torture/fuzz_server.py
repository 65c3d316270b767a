"""Fuzz ``pylog serve``'s hostile-input surface: the request decoder, the produce record batches, a live server.

Issue 19: bad input from the network gets Kafka's error code or a closed connection, never a crash of the
server or a record written half. Three kinds of inputs:

- ``decoder``: request frames (what follows the size prefix) of every API and version pylog has a schema
  for, built with ``pylog.server.protocol.encode_request`` from bodies generated from the schemas, plus the
  frames real clients sent (kafka-python, confluent-kafka, aiokafka: ``server_corpus.txt``, recorded by
  ``--record-corpus``), mutated: bit flips, byte overwrites, truncation, extension, chunks removed or
  duplicated, length and count fields (found by their small values) set to huge / negative / off-by-one
  values, array counts of 2**31-1 (int32 and compact varint), over-long varints, splices from other
  requests, the header's api key / version swapped (a body parsed by another schema). ``parse_request``
  must return a Request or raise ``ProtocolError`` (or a subclass); the records of a decoded Produce go on
  through ``recordbatch.decode_batches``, which may only raise ``PylogError`` subclasses.
- ``batch``: Produce requests whose record batches are mutated (varints, lengths, counts, codecs,
  compressed sections) with the CRC re-computed half the time, so the mutations reach the record parser.
- ``live``: ``pylog.serve(path, port=0)`` on a temporary store, sockets to 127.0.0.1 sending bursts of
  valid produces (acks 1 and all), mutated frames, garbage, size prefixes above the limit or negative,
  partial frames then a disconnect, valid requests followed by garbage, and many connections dropped
  mid-request. After each burst a fresh connection must get ApiVersions and Metadata answered; after each
  round the server is stopped and the store checked: ``Partition.check`` finds nothing, every acknowledged
  record is there, every stored record is a whole batch the harness sent (values name their batch and its
  size: a batch is stored whole or not at all), and nothing of a partially sent frame was appended. At
  the end ``python -m pylog verify STORE`` must pass.

Outcomes of a decoder / batch input: ``decoded``, ``protocol:<reason>`` (the ProtocolError's reason with
numbers blanked), ``batch:<PylogError class>``; violations: ``foreign`` (any other exception), ``hang``
(longer than ``TIME_LIMIT_S``, SIGALRM), ``memory`` (tracemalloc's peak for the input above
``MEM_FACTOR`` x the frame's size + ``MEM_CONST``: the decoder allocated more than the bytes it was given
justify). Live violations: ``unresponsive`` (a health check unanswered), ``server-died``, ``store``
(check problems, lost acked records, half batches, records of partial frames).

Usage::

    python tests/torture/fuzz_server.py --short            # CI: ~30-60 s
    python tests/torture/fuzz_server.py --full             # >= 1,000,000 mutated requests + live rounds
    python tests/torture/fuzz_server.py --repro decoder:SEED:INDEX
    python tests/torture/fuzz_server.py --record-corpus tests/torture/server_corpus.txt

A violation raises AssertionError naming kind, seed and input; ``--repro KIND:SEED:INDEX`` reruns a decoder
or batch input in this process and shows the traceback (``live:SEED:ROUND`` reruns a live round).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run as a script

import crc32c  # noqa: E402

import pylog  # noqa: E402
from pylog.errors import ProtocolError, PylogError  # noqa: E402
from pylog.server import compression, protocol, recordbatch  # noqa: E402
from pylog.server.protocol import APIS, encode_request, parse_request  # noqa: E402
from pylog.server.protocol.schema import Field, Struct  # noqa: E402

CORPUS = os.path.join(HERE, "server_corpus.txt")
#: Seconds one decoder input may take (a few hundred bytes decode in microseconds; the machine may be loaded).
TIME_LIMIT_S = 10
#: The decoder's memory bound per input: tracemalloc peak <= MEM_FACTOR * len(frame) + MEM_CONST. A decoded
#: request is dicts and lists: a 3-byte compact struct becomes a ~200-byte dict, so the factor is generous.
MEM_FACTOR = 256
MEM_CONST = 256 << 10
#: Largest decompressed section decode_batches accepts here (the server's max_batch_bytes, 64 MiB by default):
#: decompression may legitimately allocate up to about twice this (the output and its copy) whatever the frame's
#: size, so inputs whose records reached decode_batches get 2 * MAX_BATCH more memory allowance.
MAX_BATCH = 256 << 10
WORKERS = 2
FULL_COUNTS = {"decoder": 1_000_000, "batch": 150_000, "live": 200}
SHORT_COUNTS = {"decoder": 50_000, "batch": 10_000, "live": 15}
#: Bursts per live round (the store is checked after each round).
BURSTS_PER_ROUND = 5
#: APIs a live burst never sends mutated: they delete or reconfigure data (DeleteTopics, DeleteRecords,
#: AlterConfigs) or create files in proportion to a number in the request (CreateTopics, CreatePartitions),
#: which would make the store checks meaningless or the run unbounded; the decoder kind covers them.
LIVE_EXCLUDED = {19, 20, 21, 33, 37}

BIG_INTS = [0x7FFFFFFF, 0x7FFFFFFE, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x7FFF, 0x8000, 0xFFFF, 0xFFFE, 0x1000,
            0x10000, 0x100000]
BIG_VARINTS = [b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff", b"\x80\x80\x80\x80\x80\x01",
               b"\xff" * 10 + b"\x01", b"\xfe\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x10", b"\x81\x80\x80\x80\x00"]


class Hang(BaseException):
    """Raised by the worker's alarm: an input took longer than TIME_LIMIT_S."""


# ------------------------------------------------------------------------------------- valid requests

_ALPHABET = "abcxyz-._09"


def _in(v: int, r: tuple[int, int]) -> bool:
    return r[0] <= v <= r[1]


def kafka_batch(records: list[tuple[bytes | None, bytes | None, list]], codec: int = 0,
                base_ts: int = 1_700_000_000_000, producer: tuple[int, int, int] = (-1, -1, -1),
                attrs: int = 0) -> bytes:
    """A Kafka v2 record batch of ``records`` ((key, value, headers) each), CRC-32C computed."""
    body = bytearray()
    put = recordbatch._put_varint
    for i, (key, value, headers) in enumerate(records):
        rec = bytearray(b"\x00")
        put(rec, i * 3)
        put(rec, i)
        for b in (key, value):
            if b is None:
                put(rec, -1)
            else:
                put(rec, len(b))
                rec += b
        put(rec, len(headers))
        for hk, hv in headers:
            kb = hk.encode()
            put(rec, len(kb))
            rec += kb
            if hv is None:
                put(rec, -1)
            else:
                put(rec, len(hv))
                rec += hv
        put(body, len(rec))
        body += rec
    section = compression.compress(codec, bytes(body)) if codec else bytes(body)
    n = len(records)
    tail = struct.pack(">hiqqqhii", codec | attrs, n - 1, base_ts, base_ts + 3 * (n - 1), producer[0], producer[1],
                       producer[2], n) + section
    return struct.pack(">qiibI", 0, len(tail) + 9, 0, 2, crc32c.crc32c(tail)) + tail


def random_batch(rng: random.Random) -> bytes:
    recs = []
    for _ in range(rng.choice((1, 1, 2, 3, 5))):
        key = None if rng.random() < 0.4 else rng.randbytes(rng.randrange(12))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(40))
        headers = [("h" + str(j), None if rng.random() < 0.2 else rng.randbytes(rng.randrange(6)))
                   for j in range(rng.choice((0, 0, 1, 2)))]
        recs.append((key, value, headers))
    codec = rng.choice((0, 0, 0, 1, 2, 3, 4))
    if codec and not compression.available(codec):
        codec = 0
    pid = rng.choice(((-1, -1, -1), (rng.randrange(1000), 0, rng.randrange(100))))
    return kafka_batch(recs, codec, producer=pid)


def _gen_prim(rng: random.Random, t: str, name: str) -> Any:
    if t in ("int8", "int16", "int32", "int64", "uint16"):
        bits = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint16": 16}[t]
        lo = 0 if t == "uint16" else -(1 << bits)
        hi = (1 << bits) - 1
        return rng.choice((0, 1, -1 if lo else 2, rng.randint(0, min(hi, 100)), rng.randint(lo, hi)))
    if t == "bool":
        return rng.random() < 0.5
    if t == "float64":
        return rng.random()
    if t == "string":
        if name in ("name", "topic", "topic_name"):
            return rng.choice(("fz", "fz", "other", "__consumer_offsets", ""))
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(10))) + rng.choice(("", "", "é", "\u2603"))
    if t == "bytes":
        return rng.randbytes(rng.randrange(24))
    if t == "uuid":
        return rng.randbytes(16)
    raise ValueError(t)


def gen_struct(rng: random.Random, fields: tuple[Field, ...], version: int, api_key: int, depth: int = 0) -> dict:
    """A random body for ``fields`` at ``version``: every field present in the version, a few tagged ones."""
    d: dict = {}
    for f in fields:
        if not _in(version, f.versions):
            continue
        if _in(version, f.tagged) and rng.random() < 0.5:
            continue
        nullable = _in(version, f.nullable)
        if f.array:
            if nullable and rng.random() < 0.1:
                d[f.name] = None
                continue
            e = f.elem()
            n = rng.choice((0, 1, 1, 2, 3)) if depth < 3 else 0
            if isinstance(e, Struct):
                d[f.name] = [gen_struct(rng, e.fields, version, api_key, depth + 1) for _ in range(n)]
            else:
                d[f.name] = [_gen_prim(rng, e, f.name) for _ in range(n)]
        elif isinstance(f.type, Struct):
            d[f.name] = gen_struct(rng, f.type.fields, version, api_key, depth + 1)
        elif f.type == "records":
            n = rng.choice((1, 1, 2))
            d[f.name] = None if rng.random() < 0.05 else b"".join(random_batch(rng) for _ in range(n))
        elif nullable and rng.random() < 0.15:
            d[f.name] = None
        else:
            d[f.name] = _gen_prim(rng, f.type, f.name)
    return d


def generated_frames(rng: random.Random, per_version: int = 3) -> list[tuple[str, bytes]]:
    """Valid frames (no size prefix) of every API and version with a schema, ``per_version`` of each."""
    out = []
    for key, api in sorted(APIS.items()):
        for v in range(api.versions[0], api.versions[1] + 1):
            made = 0
            for _ in range(per_version * 4):
                body = gen_struct(rng, api.request, v, key)
                cid = rng.choice((None, "", "fuzz-client", "c" * rng.randrange(40)))
                try:
                    frame = encode_request(key, v, rng.randrange(1 << 31), cid, body)[4:]
                    parse_request(frame)  # the generator's output must be valid
                except ProtocolError:
                    continue
                out.append((f"gen:{api.name}:v{v}", frame))
                made += 1
                if made >= per_version:
                    break
    return out


def corpus_frames(path: str = CORPUS) -> list[tuple[str, bytes]]:
    """The recorded real clients' frames: lines ``client api_key api_version hex``."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            client, key, version, hexdata = line.split()
            out.append((f"{client}:{APIS[int(key)].name}:v{version}", bytes.fromhex(hexdata)))
    return out


_TEMPLATES: list[tuple[str, bytes]] | None = None


def templates() -> list[tuple[str, bytes]]:
    """Every seed frame (generated with a fixed seed, so inputs are reproducible, plus the corpus)."""
    global _TEMPLATES
    if _TEMPLATES is None:
        _TEMPLATES = generated_frames(random.Random(19)) + corpus_frames()
    return _TEMPLATES


# ------------------------------------------------------------------------------------------ mutations

_LEN_CACHE: dict[bytes, list[tuple[int, int]]] = {}


def length_like(frame: bytes) -> list[tuple[int, int]]:
    """(offset, width) of what may be lengths and counts: small big-endian int16/int32 values and one-byte
    values 1..40 (compact lengths, count + 1); the mutations aim lies at them."""
    got = _LEN_CACHE.get(frame)
    if got is None:
        got = []
        n = len(frame)
        for i in range(8, n):
            if i + 4 <= n and frame[i] == 0 and frame[i + 1] == 0 and frame[i + 2] == 0 and frame[i + 3] <= 64:
                got.append((i, 4))
            if i + 2 <= n and frame[i] == 0 and frame[i + 1] <= 64:
                got.append((i, 2))
            if 1 <= frame[i] <= 40:
                got.append((i, 1))
        got.append((8, 2))  # the client id's length
        if len(_LEN_CACHE) < 20_000:
            _LEN_CACHE[frame] = got
    return got


def mutate_frame(rng: random.Random, frame: bytes, others: list[tuple[str, bytes]]) -> bytes:
    """One to three mutations of a request frame (see the module docstring)."""
    b = bytearray(frame)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.randrange(12)
        if kind == 0 and b:  # bit flips
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and b:  # bytes overwritten
            i = rng.randrange(len(b))
            for j in range(i, min(len(b), i + rng.randint(1, 8))):
                b[j] = rng.randrange(256)
        elif kind == 2 and b:  # truncation
            del b[rng.randrange(len(b)):]
        elif kind == 3:  # extension: random bytes, or zeros / 0xff (nulls, empty arrays, -1 lengths)
            n = rng.randint(1, 64)
            b += rng.choice((rng.randbytes(n), bytes(n), b"\xff" * n, b"\x01" * n))
        elif kind == 4 and b:  # a chunk removed or duplicated
            i = rng.randrange(len(b))
            n = rng.randint(1, 16)
            if rng.random() < 0.5:
                del b[i:i + n]
            else:
                b[i:i] = b[i:i + n]
        elif kind in (5, 6, 7) and len(b) > 8:  # a length or count set to a lie
            off, width = rng.choice(length_like(bytes(b)))
            if off + width > len(b):
                continue
            if width == 1:  # compact: a huge or long varint in place of the byte
                b[off:off + 1] = rng.choice(BIG_VARINTS + [bytes([rng.randrange(256)]), b"\x00", b"\x80"])
            else:
                old = int.from_bytes(b[off:off + width], "big")
                v = rng.choice(BIG_INTS + [-1, -2, old + 1, old - 1, old * 2, old + 4096, 0])
                b[off:off + width] = (v % (1 << (8 * width))).to_bytes(width, "big")
        elif kind == 8 and len(b) > 8:  # array count 2**31-1 (int32 or compact) at a length-like offset
            off, width = rng.choice(length_like(bytes(b)))
            if off + width <= len(b):
                b[off:off + width] = b"\x7f\xff\xff\xff" if width == 4 else b"\x80\x80\x80\x80\x08"
        elif kind == 9 and others:  # a splice from another request
            other = rng.choice(others)[1]
            i, j = rng.randrange(len(other) + 1), rng.randrange(len(other) + 1)
            chunk = other[min(i, j):max(i, j)]
            at = rng.randrange(len(b) + 1)
            if rng.random() < 0.5:
                b[at:at + len(chunk)] = chunk
            else:
                b[at:at] = chunk
        elif kind == 10 and len(b) >= 4:  # another api key / version for the same body
            key = rng.choice(list(APIS) + [rng.randrange(-5, 80)])
            api = APIS.get(key)
            v = rng.randint(api.versions[0] - 1, api.versions[1] + 1) if api else rng.randrange(20)
            b[0:4] = struct.pack(">hh", key, v)
        elif kind == 11 and b:  # a random big-endian int anywhere
            width = rng.choice((2, 4, 8))
            off = rng.randrange(max(1, len(b) - width + 1))
            v = rng.choice(BIG_INTS + [-1, rng.getrandbits(8 * width)])
            b[off:off + width] = (v % (1 << (8 * width))).to_bytes(width, "big")[:max(0, len(b) - off)]
    return bytes(b)


def mutate_batch(rng: random.Random, batch: bytes) -> bytes:
    """A record batch mutated (header fields, record varints, section bytes), CRC re-computed half the time."""
    b = bytearray(batch)
    for _ in range(rng.choice((1, 1, 2, 3))):
        kind = rng.randrange(6)
        if kind == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and len(b) > 61:  # a header field: length, magic, attributes, last delta, count
            off, width = rng.choice(((8, 4), (16, 1), (21, 2), (23, 4), (57, 4), (27, 8), (43, 8), (53, 4)))
            v = rng.choice(BIG_INTS + [-1, 0, 1, 2, 5, 7, 8])
            b[off:off + width] = (v % (1 << (8 * width))).to_bytes(width, "big")
        elif kind == 2 and len(b) > 61:  # a record varint (in the section) made huge, negative or long
            i = rng.randrange(61, len(b))
            b[i:i + 1] = rng.choice(BIG_VARINTS + [b"\x01", b"\x03", b"\x7f", b"\x00"])
        elif kind == 3 and b:
            del b[rng.randrange(len(b)):]
        elif kind == 4:
            b += rng.randbytes(rng.randint(1, 32))
        elif kind == 5 and len(b) > 61:
            i = rng.randrange(61, len(b))
            b[i] = rng.randrange(256)
    if len(b) >= 61 and rng.random() < 0.5:
        if len(b) >= 12 and rng.random() < 0.7:
            b[8:12] = struct.pack(">i", len(b) - 12)
        b[17:21] = struct.pack(">I", crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def make_input(kind: str, rng: random.Random) -> bytes:
    temps = templates()
    if kind == "decoder":
        name, frame = rng.choice(temps)
        return mutate_frame(rng, frame, temps)
    # batch: a Produce request of a random version whose partitions' records are mutated batches
    v = rng.randint(*APIS[0].versions)
    parts = []
    for p in range(rng.choice((1, 1, 2))):
        batches = [random_batch(rng) for _ in range(rng.choice((1, 1, 2)))]
        k = rng.randrange(len(batches))
        batches[k] = mutate_batch(rng, batches[k])
        parts.append({"index": p, "records": b"".join(batches)})
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "fz", "partition_data": parts}]}
    return encode_request(0, v, rng.randrange(1 << 31), "fuzz", body)[4:]


# ------------------------------------------------------------------------------------ decoder workers

def reason_of(exc: ProtocolError) -> str:
    return re.sub(r"-?\d+", "#", exc.reason)[:60]


def feed(frame: bytes, reached: list | None = None) -> str:
    """The outcome of one frame through the decoder (and decode_batches for Produce); raises on a violation.
    ``reached`` gets an item appended when records went into decode_batches."""
    try:
        req = parse_request(bytearray(frame))  # a bytearray, as the connection passes it
    except ProtocolError as exc:
        return f"protocol:{type(exc).__name__}:{reason_of(exc)}"
    if req.api_key == 0:
        for td in req.body["topic_data"] or []:
            for pd in td["partition_data"] or []:
                if pd["records"] is None:
                    continue
                if reached is not None:
                    reached.append(1)
                try:
                    recordbatch.decode_batches(pd["records"], MAX_BATCH)
                except PylogError as exc:
                    return f"batch:{type(exc).__name__}"
    return "decoded"


def _input_rng(seed: int, kind: str, index: int) -> random.Random:
    return random.Random(f"{seed}:{kind}:{index}")


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


def run_one(kind: str, seed: int, index: int) -> tuple[str, str | None, int]:
    """(outcome, violation detail or None, traced peak bytes) of input ``index``."""
    frame = make_input(kind, _input_rng(seed, kind, index))
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    reached: list = []
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        outcome = feed(frame, reached)
        detail = None
    except Hang:
        outcome, detail = "hang", f"took over {TIME_LIMIT_S} s ({len(frame)} bytes)"
    except MemoryError:
        outcome, detail = "memory", traceback.format_exc(limit=-4)
    except Exception as exc:  # noqa: BLE001 - the point: any other exception is a violation
        outcome, detail = "foreign", f"{type(exc).__name__}: {exc}"[:300] + "\n" + traceback.format_exc(limit=-4)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    peak = tracemalloc.get_traced_memory()[1] - before
    if detail is None and peak > MEM_FACTOR * len(frame) + MEM_CONST + (2 * MAX_BATCH if reached else 0):
        outcome, detail = "memory", f"traced peak {peak} bytes for a {len(frame)}-byte frame"
    return outcome, detail, peak


def _warm_up() -> None:
    """Compile every codec and import every codec's package before memory is measured (one-time costs)."""
    for key, api in APIS.items():
        for v in range(api.versions[0], api.versions[1] + 1):
            protocol.codec(key, v, True)
    for _, frame in templates():
        feed(frame)


def _worker(args: tuple[str, int, int, int]) -> tuple[str, Counter, list, dict]:
    kind, seed, start, stop = args
    with contextlib.suppress(OSError):
        os.nice(5)
    signal.signal(signal.SIGALRM, _on_alarm)
    logging_off()
    _warm_up()
    tracemalloc.start()
    counts: Counter = Counter()
    bad: list = []
    worst = {"peak": 0, "ratio": 0.0, "seconds": 0.0}
    for i in range(start, stop):
        t = time.perf_counter()
        outcome, detail, peak = run_one(kind, seed, i)
        worst["seconds"] = max(worst["seconds"], time.perf_counter() - t)
        worst["peak"] = max(worst["peak"], peak)
        counts[outcome] += 1
        if detail is not None and len(bad) < 5:
            bad.append((kind, seed, i, outcome, detail))
    tracemalloc.stop()
    return kind, counts, bad, worst


def logging_off() -> None:
    logging.getLogger("pylog").setLevel(logging.CRITICAL + 1)
    logging.getLogger("pylog").propagate = False


# ------------------------------------------------------------------------------------ corpus recorder

def record_corpus(out_path: str, per_key: int = 2, max_frame: int = 3072) -> None:
    """Run short kafka-python, confluent-kafka and aiokafka sessions against a server on a temporary store and
    save the request frames they sent (at most ``per_key`` per client, API and version, each at most
    ``max_frame`` bytes) to ``out_path``. Frames are seen through a hook on the connection's parse_request."""
    import asyncio
    import threading

    seen: dict[tuple[str, int, int], list[bytes]] = {}
    current = ["?"]
    lock = threading.Lock()
    real_parse = protocol.parse_request

    def hook(frame: Any) -> Any:
        data = bytes(frame)
        if 8 <= len(data) <= max_frame and struct.unpack_from(">h", data)[0] in APIS:
            key, version = struct.unpack_from(">hh", data)
            with lock:
                got = seen.setdefault((current[0], key, version), [])
                if len(got) < per_key and data not in got:
                    got.append(data)
        return real_parse(frame)

    protocol.parse_request = hook  # the connection looks it up on the package at each call
    try:
        with tempfile.TemporaryDirectory(prefix="pylog-corpus-") as tmp, \
                pylog.serve(os.path.join(tmp, "store"), port=0, group_initial_rebalance_delay_ms=50) as srv:
            bs = srv.bootstrap_servers
            current[0] = "kafka-python"
            import kafka
            from kafka.admin import NewTopic
            admin = kafka.KafkaAdminClient(bootstrap_servers=bs)
            admin.create_topics([NewTopic("rec", 2, 1)])
            admin.list_groups()
            admin.close()
            for codec in (None, "gzip", "lz4"):
                p = kafka.KafkaProducer(bootstrap_servers=bs, acks="all", compression_type=codec, linger_ms=5)
                for i in range(6):
                    p.send("rec", value=b"kp-%d" % i, key=None if i % 2 else b"k%d" % i,
                           headers=[("h", b"x")] if i % 3 == 0 else [])
                p.flush()
                p.close()
            c = kafka.KafkaConsumer("rec", bootstrap_servers=bs, group_id="kp-group", auto_offset_reset="earliest",
                                    consumer_timeout_ms=3000)
            for n, _ in enumerate(c):
                if n >= 10:
                    break
            c.commit()
            c.close()

            current[0] = "confluent-kafka"
            import confluent_kafka
            import confluent_kafka.admin
            p = confluent_kafka.Producer({"bootstrap.servers": bs, "enable.idempotence": True,
                                          "compression.type": "zstd", "linger.ms": 5})
            for i in range(6):
                p.produce("rec", value=b"ck-%d" % i, key=b"k%d" % i, headers={"h": b"y"})
            p.flush(10)
            c = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": "ck-group",
                                          "auto.offset.reset": "earliest"})
            c.subscribe(["rec"])
            deadline = time.monotonic() + 8
            got = 0
            while got < 10 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and not m.error():
                    got += 1
            c.commit(asynchronous=False)
            c.close()
            with contextlib.suppress(confluent_kafka.KafkaException):  # Metadata v12 rejected: see docs/TESTING.md
                confluent_kafka.admin.AdminClient({"bootstrap.servers": bs}).list_topics(timeout=3)

            current[0] = "aiokafka"
            import aiokafka

            async def session() -> None:
                p = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, compression_type="snappy")
                await p.start()
                for i in range(6):
                    await p.send_and_wait("rec", b"ak-%d" % i, key=b"k")
                await p.stop()
                c = aiokafka.AIOKafkaConsumer("rec", bootstrap_servers=bs, group_id="ak-group",
                                              auto_offset_reset="earliest")
                await c.start()
                await c.getmany(timeout_ms=3000)
                await c.commit()
                await c.stop()

            asyncio.run(session())
    finally:
        protocol.parse_request = real_parse
    lines = ["# Request frames (no size prefix) real clients sent to pylog serve: client api_key api_version hex.",
             "# Recorded by: python tests/torture/fuzz_server.py --record-corpus tests/torture/server_corpus.txt"]
    for (client, key, version), frames in sorted(seen.items()):
        for data in frames:
            lines.append(f"{client} {key} {version} {data.hex()}")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"recorded {sum(map(len, seen.values()))} frames of {len(seen)} (client, api, version) to {out_path}")


# ------------------------------------------------------------------------------------------ live server

LIVE_MAX_REQUEST = 256 << 10  # the live server's max_request_bytes: oversized prefixes are cheap to try


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def roundtrip(addr: tuple[str, int], data: bytes, timeout: float = 5.0, expect: int = 1) -> list[bytes] | None:
    """Send ``data`` on a fresh connection and read up to ``expect`` response frames; None when the server
    closed the connection (or it timed out) before they all came."""
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(data)
        out = []
        try:
            for _ in range(expect):
                head = _recv_exact(s, 4)
                if head is None:
                    return None
                body = _recv_exact(s, struct.unpack(">i", head)[0])
                if body is None:
                    return None
                out.append(body)
        except (socket.timeout, ConnectionError):
            return None
        return out


def _drain(sock: socket.socket, timeout: float) -> str:
    """Read until the server closes or ``timeout``: 'closed', 'open' (still answering / waiting), 'reset'."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return "closed"
    except socket.timeout:
        return "open"
    except ConnectionError:
        return "reset"


class LiveState:
    """What the harness sent to the live server and what it was told was appended."""

    def __init__(self) -> None:
        self.batches: dict[str, int] = {}  # batch id -> records in it (every produce the harness built)
        self.acked: set[str] = set()  # batch ids whose partition response was NONE
        self.partial: set[str] = set()  # batch ids only ever sent cut short: must never be stored
        self.n = 0
        # The values of the whole, valid batches inside the template Produce requests to "fz" that the "mutated"
        # action starts from: a mutation the server may rightly ignore (the client id, the correlation id, bytes
        # after the body, which Kafka brokers ignore too) leaves such a batch whole and appendable.
        self.template_values: set[bytes | None] = set()
        for _, frame in templates():
            try:
                req = protocol.parse_request(frame)
            except ProtocolError:
                continue
            if req.api_key != 0:
                continue
            for td in req.body["topic_data"] or []:
                if td["name"] != "fz":
                    continue
                for pd in td["partition_data"] or []:
                    try:
                        for b in recordbatch.decode_batches(pd["records"] or b"", MAX_BATCH):
                            data, lens = bytes(b.value_data), b.value_lengths
                            pos = 0
                            for n in lens.tolist():
                                self.template_values.add(None if n < 0 else data[pos:pos + n])
                                pos += max(n, 0)
                    except PylogError:
                        continue

    def produce_frame(self, rng: random.Random, tag: str, acks: int = 1) -> tuple[bytes, list[tuple[int, str]]]:
        """A valid Produce (size prefix included) of one batch per partition, values naming the batch."""
        v = rng.randint(*APIS[0].versions)
        parts, ids = [], []
        for p in rng.sample((0, 1), rng.choice((1, 2))):
            self.n += 1
            bid = f"{tag}{self.n}"
            count = rng.randint(1, 4)
            recs = [(None if rng.random() < 0.5 else b"k", f"{bid}/{i}/{count}".encode(),
                     [("h", b"v")] if rng.random() < 0.2 else []) for i in range(count)]
            codec = rng.choice((0, 0, 1, 3))
            self.batches[bid] = count
            parts.append({"index": p, "records": kafka_batch(recs, codec)})
            ids.append((p, bid))
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
                "topic_data": [{"name": "fz", "partition_data": parts}]}
        return encode_request(0, v, rng.randrange(1 << 31), "fuzz-live", body), ids

    def note_response(self, frame: bytes, resp: bytes, ids: list[tuple[int, str]]) -> None:
        version = struct.unpack_from(">h", frame, 6)[0]
        _, body = protocol.parse_response(0, version, resp)
        codes = {pr["index"]: pr["error_code"] for t in body["responses"] for pr in t["partition_responses"]}
        for p, bid in ids:
            if codes.get(p) == 0:
                self.acked.add(bid)


def _health(addr: tuple[str, int], rng: random.Random) -> str | None:
    """None when a fresh connection gets ApiVersions v3 and Metadata v1 answered, else what went wrong."""
    frames = (encode_request(18, 3, 1, "health", {"client_software_name": "fz", "client_software_version": "1"})
              + encode_request(3, 1, 2, "health", {"topics": [{"name": "fz"}]}))
    try:
        got = roundtrip(addr, frames, timeout=15.0, expect=2)
    except OSError as exc:
        return f"health check: {exc!r}"
    if got is None:
        return "health check: connection closed before ApiVersions and Metadata were answered"
    _, av = protocol.parse_response(18, 3, got[0])
    _, md = protocol.parse_response(3, 1, got[1])
    if av["error_code"] != 0 or md["topics"][0]["error_code"] != 0:
        return f"health check: errors {av['error_code']}, {md['topics'][0]['error_code']}"
    return None


def live_burst(addr: tuple[str, int], rng: random.Random, st: LiveState, counts: Counter) -> None:
    """One burst of hostile traffic (see the module docstring); exceptions of the client side are counted."""
    temps = [t for t in templates() if struct.unpack_from(">h", t[1])[0] not in LIVE_EXCLUDED]
    for _ in range(40):
        action = rng.choice(("produce", "produce", "mutated", "mutated", "mutated", "mutated_produce", "garbage",
                             "oversize", "partial", "valid_then_garbage", "many_drops", "pipelined"))
        counts["live:" + action] += 1
        try:
            if action == "produce":
                frame, ids = st.produce_frame(rng, "p", acks=rng.choice((1, -1)))
                got = roundtrip(addr, frame, timeout=15.0)
                if got is None:
                    counts["live:produce-unanswered"] += 1
                else:
                    st.note_response(frame, got[0], ids)
            elif action in ("mutated", "mutated_produce"):
                if action == "mutated":
                    frame = rng.choice(temps)[1]
                else:
                    frame = st.produce_frame(rng, "m")[0][4:]
                bad = mutate_frame(rng, frame, temps)
                prefix = struct.pack(">i", len(bad)) if rng.random() < 0.9 else rng.randbytes(4)
                with socket.create_connection(addr, timeout=5) as s:
                    s.sendall(prefix + bad)
                    counts["live:mutated->" + _drain(s, rng.choice((0.05, 0.3)))] += 1
            elif action == "garbage":
                with socket.create_connection(addr, timeout=5) as s:
                    s.sendall(rng.randbytes(rng.randint(1, 2048)))
                    _drain(s, 0.05)
            elif action == "oversize":
                size = rng.choice((0x7FFFFFFF, LIVE_MAX_REQUEST + 1, 1 << 30, -1, -0x80000000, -2))
                with socket.create_connection(addr, timeout=5) as s:
                    s.sendall(struct.pack(">i", size) + rng.randbytes(rng.randrange(64)))
                    outcome = _drain(s, 5.0)
                    counts["live:oversize->" + outcome] += 1
                    if outcome == "open":
                        counts["live:oversize-not-closed"] += 1
            elif action == "partial":
                frame, ids = st.produce_frame(rng, "x")
                st.partial.update(bid for _, bid in ids)
                with socket.create_connection(addr, timeout=5) as s:
                    s.sendall(frame[:rng.randrange(len(frame))])
                    if rng.random() < 0.5:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
            elif action == "valid_then_garbage":
                frame, ids = st.produce_frame(rng, "g")
                with socket.create_connection(addr, timeout=15) as s:
                    s.sendall(frame + rng.randbytes(rng.randint(1, 64)))
                    head = _recv_exact(s, 4)
                    if head is not None:
                        body = _recv_exact(s, struct.unpack(">i", head)[0])
                        if body is not None:
                            st.note_response(frame, body, ids)
                    _drain(s, 0.05)
            elif action == "many_drops":
                socks = []
                for _ in range(rng.randint(10, 60)):
                    s = socket.create_connection(addr, timeout=5)
                    frame, ids = st.produce_frame(rng, "x")
                    st.partial.update(bid for _, bid in ids)
                    s.sendall(frame[:rng.randrange(len(frame))])
                    socks.append(s)
                for s in socks:
                    if rng.random() < 0.5:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()
            elif action == "pipelined":  # several valid produces, then a mutated frame, on one connection
                frames = [st.produce_frame(rng, "q") for _ in range(rng.randint(2, 5))]
                bad = mutate_frame(rng, rng.choice(temps)[1], temps)
                data = b"".join(f for f, _ in frames) + struct.pack(">i", len(bad)) + bad
                with socket.create_connection(addr, timeout=15) as s:
                    s.sendall(data)
                    for f, ids in frames:
                        head = _recv_exact(s, 4)
                        if head is None:
                            break
                        body = _recv_exact(s, struct.unpack(">i", head)[0])
                        if body is None:
                            break
                        st.note_response(f, body, ids)
                    _drain(s, 0.05)
        except OSError as exc:  # the client side of a reset connection; the health check decides
            counts["live:client-" + type(exc).__name__] += 1


def check_store(path: str, st: LiveState) -> list[str]:
    """The store after the server stopped: Partition.check clean, acked batches all there, every stored
    record a whole batch the harness sent, nothing of a partially sent frame."""
    problems: list[str] = []
    seen: Counter = Counter()
    with pylog.open(path) as store:
        topic = store.topic("fz")
        for p in range(topic.num_partitions):
            part = topic.partition(p)
            problems += [f"fz-{p}: {x}" for x in part.check(writer_active=False)]
            offset = part.log_start_offset
            while offset < part.log_end_offset:
                recs = part.read(offset, max_records=5000)
                if not recs:
                    problems.append(f"fz-{p}: nothing read at {offset} below the end {part.log_end_offset}")
                    break
                for r in recs:
                    if r.value in st.template_values:
                        continue  # a whole batch of a template Produce whose mutation left it valid
                    try:
                        bid, i, n = bytes(r.value).decode().split("/")
                        ok = st.batches.get(bid) == int(n) and 0 <= int(i) < int(n)
                    except (ValueError, AttributeError, UnicodeDecodeError):
                        ok = False
                    if not ok:
                        problems.append(f"fz-{p}@{r.offset}: a record the harness never sent: {r.value!r}")
                        continue
                    seen[bid] += 1
                offset = recs[-1].offset + 1
    for bid in st.acked - set(seen):
        problems.append(f"acknowledged batch {bid} is not in the store")
    for bid, c in seen.items():
        if c % st.batches[bid]:
            problems.append(f"batch {bid}: {c} of its {st.batches[bid]} records stored (a batch written half)")
        if bid in st.partial:
            problems.append(f"batch {bid} was only sent cut short, yet {c} of its records are stored")
    return problems[:20]


def run_live(bursts: int, seed: int, workdir: str, verbose: bool = False) -> tuple[Counter, list]:
    """``bursts`` bursts against a live server, in rounds of BURSTS_PER_ROUND (a server each); violations."""
    path = os.path.join(workdir, "live-store")
    with pylog.open(path) as store:
        if "fz" not in store:
            store.create_topic("fz", partitions=2)
    st = LiveState()
    counts: Counter = Counter()
    bad: list = []
    logging_off()
    rounds = max(1, (bursts + BURSTS_PER_ROUND - 1) // BURSTS_PER_ROUND)
    done = 0
    for rnd in range(rounds):
        rng = random.Random(f"{seed}:live:{rnd}")
        srv = pylog.serve(path, port=0, auto_create_topics=False, max_request_bytes=LIVE_MAX_REQUEST)
        addr = (srv.host, srv.port)
        try:
            for _ in range(min(BURSTS_PER_ROUND, bursts - done)):
                live_burst(addr, rng, st, counts)
                done += 1
                counts["live:bursts"] += 1
                if srv._thread is None or not srv._thread.is_alive():
                    bad.append(("live", seed, rnd, "server-died", "the server thread ended"))
                    break
                problem = _health(addr, rng)
                if problem is not None:
                    bad.append(("live", seed, rnd, "unresponsive", problem))
                    break
        finally:
            srv.close()
        problems = check_store(path, st)
        counts["live:store-checks"] += 1
        if problems:
            bad.append(("live", seed, rnd, "store", "\n".join(problems)))
        if verbose:
            print(f"  live round {rnd + 1}/{rounds}: {done} bursts, {len(st.acked)} batches acked", flush=True)
        if bad:
            break
    cli = subprocess.run([sys.executable, "-m", "pylog", "verify", path], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    counts["live:verify-exit-" + str(cli.returncode)] += 1
    if cli.returncode != 0:
        bad.append(("live", seed, -1, "store", f"pylog verify exited {cli.returncode}: {cli.stdout[-800:]}"
                                               f"{cli.stderr[-800:]}"))
    counts["live:acked-batches"] = len(st.acked)
    counts["live:partial-batches"] = len(st.partial)
    return counts, bad


# ------------------------------------------------------------------------------------------------ runs

VIOLATIONS = ("foreign", "hang", "memory", "unresponsive", "server-died", "store")


def _jobs(counts: dict[str, int], seed: int, chunk: int) -> list[tuple[str, int, int, int]]:
    return [(kind, seed, start, min(n, start + chunk)) for kind, n in counts.items() if kind != "live"
            for start in range(0, n, chunk)]


def run(mode: str, workdir: str, seed: int | None = None, only: list[str] | None = None,
        workers: int = WORKERS, verbose: bool = False) -> dict:
    """Run every kind (``only``: some); returns ``{kind: {outcome: count}}`` plus totals, rates and the
    worst per-input time and memory. Raises AssertionError naming kind, seed and input of violations."""
    if mode not in ("full", "short"):
        raise ValueError(mode)
    seed = random.randrange(1 << 30) if seed is None else seed
    counts = {k: v for k, v in (FULL_COUNTS if mode == "full" else SHORT_COUNTS).items() if only is None or k in only}
    chunk = 20_000 if mode == "full" else 1_500
    result: dict[str, Counter] = {k: Counter() for k in counts}
    worst = {"peak": 0, "seconds": 0.0}
    violations: list = []
    t0 = time.monotonic()
    timing: dict[str, float] = {}
    jobs = _jobs(counts, seed, chunk)
    if jobs:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, maxtasksperchild=1) as pool:
            for kind, c, bad, w in pool.imap_unordered(_worker, jobs):
                result[kind].update(c)
                violations.extend(bad)
                worst["peak"] = max(worst["peak"], w["peak"])
                worst["seconds"] = max(worst["seconds"], w["seconds"])
                if verbose:
                    done = sum(sum(result[k].values()) for k in result if k != "live")
                    print(f"  [{time.monotonic() - t0:7.0f} s] {kind}: {sum(result[kind].values())} done, "
                          f"{done} in all", flush=True)
    timing["requests_s"] = time.monotonic() - t0
    if "live" in counts:
        t1 = time.monotonic()
        c, bad = run_live(counts["live"], seed, workdir, verbose)
        result["live"].update(c)
        violations.extend(bad)
        timing["live_s"] = time.monotonic() - t1
    out: dict = {k: dict(v) for k, v in result.items()}
    n = sum(sum(result[k].values()) for k in result if k != "live")
    out["_inputs"] = n
    out["_seed"] = seed
    out["_seconds"] = round(time.monotonic() - t0, 1)
    out["_rate"] = round(n / timing["requests_s"]) if n else 0
    out["_live_seconds"] = round(timing.get("live_s", 0.0), 1)
    out["_worst"] = worst
    if violations:
        lines = [f"violations (seed {seed}); reproduce one with --repro KIND:SEED:INDEX"]
        shown: set = set()
        for kind, s, i, outcome, detail in violations:
            if (kind, outcome) not in shown:
                shown.add((kind, outcome))
                lines.append(f"- {kind}:{s}:{i} {outcome}: {detail}")
        raise AssertionError("\n".join(lines))
    return out


def summary(result: dict) -> str:
    lines = []
    for kind in ("decoder", "batch"):
        if kind not in result:
            continue
        c = result[kind]
        total = sum(c.values())
        groups: Counter = Counter()
        for k, v in c.items():
            groups[k.split(":")[0] if k.startswith(("protocol", "batch")) else k] += v
        lines.append(f"{kind:8s} {total:9d} inputs, {sum(c.get(k, 0) for k in VIOLATIONS)} violations  "
                     f"({', '.join(f'{k} {v}' for k, v in sorted(groups.items()))})")
        for k, v in sorted(c.items(), key=lambda kv: -kv[1])[:12]:
            lines.append(f"    {v:9d}  {k}")
        lines.append(f"    ... {len(c)} distinct outcomes")
    if "live" in result:
        c = result["live"]
        lines.append("live     " + ", ".join(f"{k[5:]} {v}" for k, v in sorted(c.items())))
    w = result["_worst"]
    lines.append(f"TOTAL {result['_inputs']} mutated requests at {result['_rate']}/s, 0 violations; worst input "
                 f"{w['seconds'] * 1000:.1f} ms, {w['peak'] >> 10} KiB traced peak; live {result['_live_seconds']} s; "
                 f"seed {result['_seed']}, {result['_seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--full", action="store_true")
    g.add_argument("--short", action="store_true")
    g.add_argument("--repro", metavar="KIND:SEED:INDEX", help="rerun one input (decoder/batch) or round (live)")
    g.add_argument("--record-corpus", metavar="PATH", help="record real clients' request frames to PATH")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--only", help="comma-separated kinds: decoder,batch,live")
    ap.add_argument("--workers", type=int, default=WORKERS)
    args = ap.parse_args(argv)
    if args.record_corpus:
        record_corpus(args.record_corpus)
        return 0
    with tempfile.TemporaryDirectory(prefix="pylog-fuzz-server-") as workdir:
        if args.repro:
            kind, s, i = args.repro.split(":")
            if kind == "live":
                counts, bad = run_live(BURSTS_PER_ROUND * (int(i) + 1), int(s), workdir, verbose=True)
                print(counts, bad)
                return 1 if bad else 0
            frame = make_input(kind, _input_rng(int(s), kind, int(i)))
            print(f"{len(frame)} bytes: {frame.hex()}")
            tracemalloc.start()
            print("outcome:", feed(frame), "traced peak:", tracemalloc.get_traced_memory()[1])
            return 0
        only = args.only.split(",") if args.only else None
        try:
            result = run("full" if args.full else "short", workdir, args.seed, only, min(args.workers, WORKERS),
                         verbose=args.full)
        except AssertionError as exc:
            print(exc)
            return 1
        print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
