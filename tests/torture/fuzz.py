"""Fuzz every decoder of bytes pylog reads from disk: only PylogError may escape, nothing hangs or balloons.

For each decoder below, valid inputs are made with pylog's own writers, then mutated: bit flips, byte
overwrites, truncation, extension, chunk insertion/removal, length and count fields set to lies, and (half
the time) the file's checksum RE-COMPUTED, so the hostile content gets past the CRC and reaches the parser.
Structured decoders also get mutations of their decoded content re-encoded: msgpack documents with NaN and
infinite floats, huge ints, bools/strings where ints belong, nested maps and arrays as map keys; JSON files
with NaN/Infinity, 10**40, wrong types. Each input is fed to the decoder the way the library reads it
(through the public or module API: ``BatchView.from_buffer`` and every accessor, ``OffsetIndex.open``,
``read_checkpoint``, ``ProducerState.read_snapshot``, ``describe_group``, ``published_cleaners``, pylog serve's
``group_state.read_groups``, the transaction coordinator's ``txn_state.decode_state``,
``pylog.open`` + ``store.topic`` + reads, ...).

Each input's outcome is one of:

- ``accepted``: decoded (the mutation kept it valid, or the decoder accepts it);
- ``rejected``: a :class:`pylog.PylogError` subclass (the class is counted too);
- violations: ``foreign`` (any other exception), ``hang`` (the input took longer than ``TIME_LIMIT_S``,
  enforced by ``SIGALRM`` in the worker), ``memory`` (``MemoryError`` under the worker's address-space
  limit: ``RLIMIT_AS`` is set to its size at start + ``MEMORY_HEADROOM``, so an allocation a length field
  claims, not the input justifies, fails).

Inputs are run in at most two worker processes (forked, niced). Usage::

    python tests/torture/fuzz.py --full     # >= 1,000,000 inputs; prints counts per decoder and outcome
    python tests/torture/fuzz.py --short    # CI: a few thousand inputs
    python tests/torture/fuzz.py --full --seed 7 --only batch,index

``run(mode, workdir, seed)`` returns the counts and raises AssertionError naming decoder, seed, input
number and the exception of the first violations. A violation is reproduced with
``python tests/torture/fuzz.py --repro DECODER:SEED:INDEX``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from typing import Any, Callable

import msgpack
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run as a script

import pylog  # noqa: E402
from pylog import PylogError  # noqa: E402
from pylog.storage import checkpoint as _checkpoint  # noqa: E402
from pylog.maintenance import compaction as _compaction  # noqa: E402
from pylog.storage import swap as _swap  # noqa: E402
from pylog.clients import groups as _groups  # noqa: E402
from pylog.clients import offsets as _offsets  # noqa: E402
from pylog.storage import group_state as _groupstate  # noqa: E402
from pylog.maintenance.cleaner_registry import _MAGIC as _STATUS_MAGIC, published_cleaners  # noqa: E402
from pylog.storage.fileio import checked, encode_doc  # noqa: E402
from pylog.storage.filenames import (CHECKPOINT_FILE, CLEANER_CHECKPOINT_FILE, CLEANERS_DIR, GROUPS_DIR,  # noqa: E402
                             STORE_FILE, SWAP_MANIFEST_FILE, TOPIC_FILE)
from pylog.index import OffsetIndex, TimeIndex  # noqa: E402
from pylog.storage.producer_state import SNAPSHOT_FILE, ProducerState  # noqa: E402
from pylog.storage.records import (CODEC_LZ4, BatchView, RecordColumns, batch_crc, crc32c,  # noqa: E402
                           encode_batch)

#: Seconds one input may take before it counts as a hang (generous: the machine is shared and loaded).
TIME_LIMIT_S = 20
#: Address space a worker may grow by beyond its size at start.
MEMORY_HEADROOM = 768 << 20
WORKERS = 2
#: Disk a worker's scratch directory may use (checked every 200 inputs): the templates are a few KB.
DISK_LIMIT = 256 << 20

#: Inputs per decoder: full mode (>= 1,000,000 in total); short mode runs 1/SHORT_DIVISOR of each.
FULL_COUNTS = {
    "batch": 420_000, "index": 90_000, "checkpoint": 40_000, "producer_snapshot": 90_000, "group_state": 80_000,
    "group_member": 30_000, "offset_commit": 90_000, "cleaner_status": 40_000, "cleaner_checkpoint": 30_000,
    "swap_manifest": 30_000, "topic_file": 30_000, "store_marker": 20_000, "producer_ids": 15_000,
    "segment": 15_000, "coordinator_groups": 30_000, "txn_state": 30_000,
}
SHORT_DIVISOR = 250

INTERESTING_INTS = [0, 1, -1, 2, 7, 63, 64, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32,
                    (1 << 63) - 1, -(1 << 63), (1 << 63) - 2, (1 << 62), -(1 << 31), (1 << 64) - 1]


class Hang(BaseException):
    """Raised by the worker's alarm: an input took longer than TIME_LIMIT_S."""


# ------------------------------------------------------------------------------------------ byte mutations

def mutate_bytes(rng: random.Random, data: bytes, fields: list[tuple[int, int]] | None = None) -> bytes:
    """One to three generic mutations of ``data``; ``fields`` are (offset, width) of known integer fields
    (lengths, counts) that get lies (huge, negative, off by one) written into them."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.randrange(8)
        if kind == 0 and b:  # bit flips
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and b:  # random bytes overwritten
            i = rng.randrange(len(b))
            for j in range(i, min(len(b), i + rng.randint(1, 8))):
                b[j] = rng.randrange(256)
        elif kind == 2 and b:  # truncation
            del b[rng.randrange(len(b)):]
        elif kind == 3:  # extension
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        elif kind == 4 and b:  # chunk removed or duplicated
            i = rng.randrange(len(b))
            n = rng.randint(1, 16)
            if rng.random() < 0.5:
                del b[i:i + n]
            else:
                b[i:i] = b[i:i + n]
        elif kind in (5, 6, 7) and b:  # an integer field (a known one when given) set to a lie
            if fields and kind != 7:
                off, width = rng.choice(fields)
            else:
                width = rng.choice((1, 2, 4, 8))
                off = rng.randrange(max(1, len(b) - width + 1))
            if off + width > len(b):
                continue
            v = rng.choice(INTERESTING_INTS) + rng.choice((0, 0, 1, -1))
            old = int.from_bytes(b[off:off + width], "little")
            v = rng.choice((v, old + rng.randint(-3, 3), old * 2, old + 4096))
            b[off:off + width] = (v % (1 << (8 * width))).to_bytes(width, "little")
    return bytes(b)


def fix_checked(body_with_crc: bytes) -> bytes:
    """Re-frame a :func:`pylog.storage.fileio.checked` file so its trailing CRC matches whatever precedes it."""
    return checked(body_with_crc[:-4]) if len(body_with_crc) >= 4 else body_with_crc


# ------------------------------------------------------------------------------------- structured content

class Map:
    """A msgpack map given as pairs, so keys may be unhashable (maps, arrays): what Python cannot build."""

    def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
        self.pairs = pairs


def pack(obj: Any) -> bytes:
    """msgpack of ``obj`` where :class:`Map` and dict keys may be anything msgpack can encode."""
    if isinstance(obj, Map) or isinstance(obj, dict):
        pairs = obj.pairs if isinstance(obj, Map) else list(obj.items())
        n = len(pairs)
        head = bytes([0x80 | n]) if n < 16 else (b"\xde" + struct.pack(">H", n))
        return head + b"".join(pack(k) + pack(v) for k, v in pairs)
    if isinstance(obj, list):
        n = len(obj)
        head = bytes([0x90 | n]) if n < 16 else (b"\xdc" + struct.pack(">H", n) if n < 65536 else
                                                    b"\xdd" + struct.pack(">I", n))
        return head + b"".join(pack(x) for x in obj)
    if isinstance(obj, int) and not isinstance(obj, bool) and not -(1 << 63) <= obj < (1 << 64):
        obj = (1 << 64) - 1
    return msgpack.packb(obj, use_bin_type=True)


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    """A value of the wrong kind for almost any field."""
    r = rng.randrange(16)
    if r == 0:
        return float("nan")
    if r == 1:
        return rng.choice((float("inf"), float("-inf")))
    if r == 2:
        return rng.choice(INTERESTING_INTS)
    if r == 3:
        return rng.choice((True, False, None))
    if r == 4:
        return rng.choice(("", "x", "t-0", "../../etc", "\udcff"[:0] + "é" * 3, "a" * 300))
    if r == 5:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))
    if r == 6:
        return rng.uniform(-1e300, 1e300)
    if r == 7 and depth < 3:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r == 8 and depth < 3:
        return Map([(hostile_value(rng, depth + 1), hostile_value(rng, depth + 1)) for _ in range(rng.randint(0, 3))])
    if r == 9 and depth < 3:  # a map or array as a map key
        return Map([(rng.choice(([1, 2], Map([("a", 1)]), [], Map([]))), hostile_value(rng, depth + 1))])
    if r == 10:
        return [0] * rng.choice((0, 4, 5, 6, 1000))
    if r == 11:
        return -rng.randint(1, 1 << 40)
    if r == 12:
        return rng.randint(0, 1 << 40)
    if r == 13 and depth < 8:  # deep nesting
        v: Any = 1
        for _ in range(rng.randint(1, 100)):  # msgpack's own limit is far deeper; the packer here recurses
            v = [v]
        return v
    return rng.choice((0, 1, -1, "", None))


def _nodes(obj: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every node of a decoded document (dict keys and list indexes)."""
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_nodes(v, path + (k,)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_nodes(v, path + (i,)))
    return out


def mutate_doc(rng: random.Random, doc: Any) -> Any:
    """``doc`` (decoded msgpack/JSON of plain dicts/lists) with a few nodes replaced by hostile values, a key
    replaced by an unhashable one, or a node deleted/duplicated. May return a :class:`Map` tree."""
    doc = json.loads(json.dumps(doc, default=lambda o: o.hex() if isinstance(o, bytes) else repr(o)))
    for _ in range(rng.choice((1, 1, 2, 3))):
        paths = _nodes(doc)
        path = rng.choice(paths)
        if not path:
            if rng.random() < 0.1:
                doc = hostile_value(rng)
                break
            continue
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        r = rng.random()
        if r < 0.7:
            parent[last] = hostile_value(rng)
        elif r < 0.8:
            del parent[last]
        elif r < 0.9 and isinstance(parent, list):
            parent.append(parent[last])
        elif isinstance(parent, dict):  # the key itself becomes a map or an array
            value = parent.pop(last)
            pairs = list(parent.items()) + [(rng.choice(([last], Map([(last, 1)]), 1.5, None, True)), value)]
            parent.clear()
            return _replace(doc, path[:-1], Map(pairs))
    return doc


def _replace(doc: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = new
    return doc


def to_jsonable(obj: Any) -> Any:
    """A :class:`Map` tree as JSON can hold it (JSON keys are strings: unhashable keys become their repr)."""
    if isinstance(obj, Map):
        return {str(k) if not isinstance(k, str) else k: to_jsonable(v) for k, v in obj.pairs}
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    return obj


# ----------------------------------------------------------------------------------------------- decoders

class Decoder:
    """One on-disk structure: ``seeds`` valid inputs, ``make`` one (maybe mutated) input from a seed,
    ``feed`` runs the library's reader on it inside ``work`` (a per-worker scratch directory)."""

    name = ""

    def __init__(self, work: str) -> None:
        self.work = work
        os.makedirs(work, exist_ok=True)
        self.seeds: list[Any] = self.make_seeds()

    def make_seeds(self) -> list[Any]:
        raise NotImplementedError

    def make(self, rng: random.Random) -> Any:
        raise NotImplementedError

    def feed(self, data: Any) -> None:
        raise NotImplementedError


def _batch_seeds() -> list[bytes]:
    rng = random.Random(1)
    out = []
    for i in range(24):
        n = rng.choice((1, 2, 3, 10, 50))
        values = [None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 5, 40))))
                  for _ in range(n)]
        keys = None if i % 3 == 0 else [None if rng.random() < 0.2 else b"k%d" % rng.randrange(5) for _ in range(n)]
        ts = None if i % 4 == 0 else [1_700_000_000_000 + rng.randrange(-5000, 5000) for _ in range(n)]
        headers = None if i % 2 else [[("h", b"x"), ("n", None)] if rng.random() < 0.5 else [] for _ in range(n)]
        deltas = None
        if i % 5 == 1:
            deltas = sorted(rng.sample(range(n * 3), n))
            deltas = [d - deltas[0] for d in deltas]
        codec = CODEC_LZ4 if i % 2 == 0 else 0
        if i % 6 == 0:
            values = [b"z" * 200] * n  # compressible: the lz4 body is much smaller than the batch
        out.append(encode_batch(values, keys, ts, headers, codec=codec, offset_deltas=deltas,
                                base_offset=rng.choice((0, 5, 1 << 40)), log_append_time=i % 7 == 3,
                                producer_id=rng.choice((-1, 3)), base_sequence=rng.randrange(100)))
    return out


#: (offset, width) of the batch header's integer fields (records.py's layout)
_BATCH_FIELDS = [(0, 8), (8, 4), (12, 1), (17, 2), (19, 4), (23, 8), (31, 8), (39, 8), (47, 2), (49, 4), (53, 4),
                 (57, 4), (61, 3)]


def _fix_batch(b: bytes) -> bytes:
    if len(b) < 64:
        return b
    raw = bytearray(b)
    struct.pack_into("<I", raw, 13, batch_crc(raw))
    return bytes(raw)


def _exercise_batch(v: BatchView) -> None:
    n = v.count
    v.offsets()
    v.timestamps()
    v.headers()
    v.records()
    v.records(start=n // 2)
    v.value_lengths
    v.key_lengths
    cols = RecordColumns.concat_views([(v, 0, n)], "t", 0)
    cols.to_records()
    cols.value_offsets
    if n > 1:
        RecordColumns.concat_views([(v, 0, 1), (v, 1, n)], "t", 0).to_records()


class BatchDecoder(Decoder):
    name = "batch"

    def make_seeds(self) -> list[Any]:
        return _batch_seeds()

    def make(self, rng: random.Random) -> Any:
        seed = rng.choice(self.seeds)
        if rng.random() < 0.25:  # a body-level mutation: lengths and deltas inside the (uncompressed) body
            raw = bytearray(seed)
            if raw[17] & 7 == 0 and len(raw) > 68:
                i = rng.randrange(64, len(raw) - 3)
                struct.pack_into("<i", raw, i, rng.choice(INTERESTING_INTS + [-2, -1, 0, 1]) % (1 << 32) - (1 << 31)
                                 if rng.random() < 0.5 else rng.choice((-1, 0, 1, 2, 1 << 30)))
                data = bytes(raw)
            else:
                data = mutate_bytes(rng, seed)
        else:
            data = mutate_bytes(rng, seed, _BATCH_FIELDS)
        return _fix_batch(data) if rng.random() < 0.6 else data

    def feed(self, data: Any) -> None:
        _exercise_batch(BatchView.from_buffer(data))
        if len(data) > 8:
            _exercise_batch(BatchView.from_buffer(b"\0" * 8 + data, 8))


class IndexDecoder(Decoder):
    name = "index"

    def make_seeds(self) -> list[Any]:
        out = []
        for cls in (OffsetIndex, TimeIndex):
            for sealed in (True, False):
                for n in (0, 1, 5, 40):
                    path = os.path.join(self.work, "seed.index")
                    a = np.arange(1, n + 1, dtype=np.int64) * 3 + (1_700_000_000_000 if cls is TimeIndex else 0)
                    b = np.arange(1, n + 1, dtype=np.int64) * 100
                    cls.write_file(path, 1000, a, b, n + 8, sealed, max_timestamp=1_700_000_000_999)
                    with open(path, "rb") as f:
                        out.append((cls, f.read()))
        return out

    def make(self, rng: random.Random) -> Any:
        cls, seed = rng.choice(self.seeds)
        data = bytearray(mutate_bytes(rng, seed, [(4, 2), (6, 2), (8, 8), (16, 4), (20, 4), (28, 8)]))
        if len(data) >= 64 and rng.random() < 0.6:  # re-checksum the header and (sealed) the entries
            cap, count = struct.unpack_from("<II", data, 16)
            asz = cls.A.itemsize
            if rng.random() < 0.7 and 64 + cap * (asz + 4) <= len(data) and count <= cap:
                col_a = bytes(data[64:64 + count * asz])
                col_b = bytes(data[64 + cap * asz:64 + cap * asz + count * 4])
                struct.pack_into("<I", data, 24, crc32c(col_b, crc32c(col_a)))
            struct.pack_into("<I", data, 60, crc32c(bytes(data[:60])))
        return cls, bytes(data)

    def feed(self, data: Any) -> None:
        cls, raw = data
        path = os.path.join(self.work, "00000000000000001000.index")
        with open(path, "wb") as f:
            f.write(raw)
        idx = cls.open(path, 1000)
        try:
            for probe in (0, 1, 7, 1 << 31, 1_700_000_000_050, -1):
                if cls is OffsetIndex and 0 <= probe < 1 << 32:
                    idx.lookup(probe)
                elif cls is TimeIndex:
                    idx.lookup(probe)
            idx.last_entry()
            idx.entries()
            idx.take_in_appended(1 << 20)
        finally:
            idx.close()


class _CheckedFileDecoder(Decoder):
    """A file framed by :func:`pylog.storage.fileio.checked` whose body is a fixed binary layout."""

    filename = ""
    fields: list[tuple[int, int]] = []

    def make(self, rng: random.Random) -> Any:
        seed = rng.choice(self.seeds)
        data = mutate_bytes(rng, seed, self.fields)
        return fix_checked(data) if rng.random() < 0.6 else data

    def write(self, data: bytes, directory: str | None = None) -> str:
        path = os.path.join(directory or self.work, self.filename)
        with open(path, "wb") as f:
            f.write(data)
        return path


class CheckpointDecoder(_CheckedFileDecoder):
    name = "checkpoint"
    filename = CHECKPOINT_FILE
    fields = [(4, 2), (6, 2), (8, 8), (16, 8), (24, 8)]

    def make_seeds(self) -> list[Any]:
        out = []
        for cp in (_checkpoint.Checkpoint(), _checkpoint.Checkpoint(10, 5, True, 3),
                   _checkpoint.Checkpoint((1 << 62), 1 << 40, False, 1 << 20)):
            path = os.path.join(self.work, self.filename)
            _checkpoint.write_checkpoint(path, cp, durable=False)
            with open(path, "rb") as f:
                out.append(f.read())
        return out

    def feed(self, data: Any) -> None:
        _checkpoint.read_checkpoint(self.write(data))


class CleanerCheckpointDecoder(_CheckedFileDecoder):
    name = "cleaner_checkpoint"
    filename = CLEANER_CHECKPOINT_FILE
    fields = [(4, 2), (6, 2), (8, 4), (12, 8), (20, 8)]

    def make_seeds(self) -> list[Any]:
        out = []
        for hz in ([], [(10, 1000)], [(10, 1000), (50, 2000), (1 << 40, 3000)]):
            cp = _compaction.CleanerCheckpoint(list(hz))
            out.append(checked(cp.encode()))
        out.append(checked(_compaction.CleanerCheckpoint([(10, 1000)], [(3, 9, 1000), (12, 12, 2000)]).encode()))
        return out

    def feed(self, data: Any) -> None:
        self.write(data)
        cp = _compaction.read_cleaner_checkpoint(self.work)
        cp.reached(100, 5, 0)


class SwapManifestDecoder(_CheckedFileDecoder):
    name = "swap_manifest"
    filename = SWAP_MANIFEST_FILE
    fields = [(4, 2), (8, 4), (12, 8), (20, 4)]

    def make_seeds(self) -> list[Any]:
        out = []
        for groups in ([], [(0, [0, 10, 20])], [(-1, [5]), (30, [30, 40])]):
            _swap.write_manifest(self.work, groups)
            with open(os.path.join(self.work, self.filename), "rb") as f:
                out.append(f.read())
        return out

    def feed(self, data: Any) -> None:
        self.write(data)
        _swap.read_manifest(self.work)


class _DocDecoder(_CheckedFileDecoder):
    """A checked file whose body is a magic, maybe a version, then msgpack: content mutations re-encode."""

    prefix_len = 5  # magic + version byte (encode_doc)

    def make_seeds(self) -> list[Any]:
        return [checked(b) for b in self.bodies()]

    def bodies(self) -> list[bytes]:
        raise NotImplementedError

    def make(self, rng: random.Random) -> Any:
        seed = rng.choice(self.seeds)
        if rng.random() < 0.5:
            body = seed[:-4]
            doc = msgpack.unpackb(body[self.prefix_len:], raw=False, strict_map_key=False)
            body = body[:self.prefix_len] + pack(mutate_doc(rng, doc))
            data = checked(body)
            if rng.random() < 0.2:
                data = fix_checked(mutate_bytes(rng, data))
            return data
        return super().make(rng)


class ProducerSnapshotDecoder(_DocDecoder):
    name = "producer_snapshot"
    filename = SNAPSHOT_FILE
    prefix_len = 8
    fields = [(4, 2), (6, 2)]

    def bodies(self) -> list[bytes]:
        out = []
        for n in (0, 1, 3):
            st = ProducerState()
            for pid in range(n):
                for k in range(pid + 2):
                    st.update(pid, 1, 10 * k, 10 * k + 4, 100 * k, 100 * k + 4, 1_700_000_000_000 + k)
            st.write_snapshot(self.work, 1000, durable=False)
            with open(os.path.join(self.work, self.filename), "rb") as f:
                out.append(f.read()[:-4])
        return out

    def feed(self, data: Any) -> None:
        self.write(data)
        got = ProducerState.read_snapshot(self.work)
        if got is not None:
            state, _ = got
            for pid in list(state.producers)[:3]:
                with contextlib.suppress(PylogError):
                    state.check(pid, state.producers[pid].epoch, 0, 1)
                state.update(pid, 1, 0, 0, 5000, 5000, 1)
            state.expire(2_000_000_000_000, 1000)


class GroupStateDecoder(_DocDecoder):
    name = "group_state"
    filename = "state"

    def make_seeds(self) -> list[Any]:
        self.dir = os.path.join(self.work, GROUPS_DIR, "g")
        os.makedirs(os.path.join(self.dir, "members"), exist_ok=True)
        with open(os.path.join(self.dir, "members", "m1-abc"), "wb") as f:
            f.write(b"")  # a member file nobody locks: a dead member
        return super().make_seeds()

    def bodies(self) -> list[bytes]:
        docs = [{"group_id": "g", "generation": 1, "protocol": "range", "members": {}, "assignment": {}},
                {"group_id": "g", "generation": 7, "protocol": "sticky",
                 "members": {"m1-abc": {"client_id": "c", "pid": 12, "topics": ["t", "u"]},
                             "m2-def": {"client_id": "d", "pid": 13, "topics": ["t"]}},
                 "assignment": {"m1-abc": [["t", 0], ["u", 1]], "m2-def": [["t", 1]]}}]
        return [_groups.encode_group_doc(_groups.STATE_MAGIC, d) for d in docs]

    def feed(self, data: Any) -> None:
        self.write(data, self.dir)
        _groups.describe_group(self.work, "g")
        _groups.list_group_dirs(self.work)


class GroupMemberDecoder(_DocDecoder):
    """A live member's file, read by another member's rebalance (GroupMember._probe)."""

    name = "group_member"
    filename = "ghost-1"

    def make_seeds(self) -> list[Any]:
        self.store = pylog.open(os.path.join(self.work, "store"), log_cleaner_enable=False)
        self.member = _groups.GroupMember(self.store, "g", "me", [], 10_000, 1_000)
        os.makedirs(self.member.members_dir, exist_ok=True)
        return super().make_seeds()

    def bodies(self) -> list[bytes]:
        docs = [{"client_id": "c", "pid": 5, "topics": ["t"], "strategies": ["range", "sticky"]},
                {"client_id": "", "pid": 0, "topics": [], "strategies": []}]
        return [_groups.encode_group_doc(_groups.MEMBER_MAGIC, d) for d in docs]

    def feed(self, data: Any) -> None:
        path = os.path.join(self.member.members_dir, self.filename)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX)  # alive: its document is read
            os.write(fd, data)
            doc = self.member.probe(self.filename, remove_dead=True)
            _groups.common_protocol({"ghost-1": doc}, ["range"])
        finally:
            os.close(fd)


class CoordinatorGroupsDecoder(_DocDecoder):
    """pylog serve's saved groups (__consumer_groups/.coordinator), loaded when a server starts."""

    name = "coordinator_groups"
    filename = _groupstate.GROUPS_FILE

    def make_seeds(self) -> list[Any]:
        self.dir = os.path.join(self.work, GROUPS_DIR)
        os.makedirs(self.dir, exist_ok=True)
        return super().make_seeds()

    def bodies(self) -> list[bytes]:
        sub = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"
        m1 = _groupstate.SavedMember("m1", "inst-1", "c", "/127.0.0.1", 10_000, 30_000, [("range", sub)], b"\x00\x01")
        m2 = _groupstate.SavedMember("m2", None, "d", "/127.0.0.1", 6_000, 6_000, [("range", sub), ("rr", b"")], b"")
        return [_groupstate.encode_groups([]),
                _groupstate.encode_groups([_groupstate.SavedGroup("g", 3, "consumer", "range", "m1", [m1, m2]),
                                           _groupstate.SavedGroup("e", 9, "consumer", None, None, [])])]

    def feed(self, data: Any) -> None:
        self.write(data, self.dir)
        for g in _groupstate.read_groups(self.work):
            assert g.leader is None or g.leader in {m.member_id for m in g.members}
        _groups.list_group_dirs(self.work)  # the file is not taken for a group's directory


class CleanerStatusDecoder(_DocDecoder):
    name = "cleaner_status"
    filename = "123-abcd.status"

    def make_seeds(self) -> list[Any]:
        self.dir = os.path.join(self.work, CLEANERS_DIR)
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "123-abcd.lock"), "wb"):
            pass
        return super().make_seeds()

    def bodies(self) -> list[bytes]:
        from pylog.maintenance.cleaner_status import CleanerStatus
        from dataclasses import asdict
        st = asdict(CleanerStatus(alive=True, started_at=1.5, runs=3, last_error="boom", uncleanable={"t-0": "x"},
                                  dirty_ratios={"t-1": 0.25}))
        docs = [{"pid": 123, "heartbeat": 1_700_000_000.5, "partitions": ["t-0", "t-1"], "status": st},
                {"pid": 123, "heartbeat": 1.0, "partitions": [], "status": {}}]
        return [encode_doc(_STATUS_MAGIC, 1, d) for d in docs]

    def feed(self, data: Any) -> None:
        self.write(data, self.dir)
        for e in published_cleaners(self.work):
            e.heartbeat_age()
            if e.status is not None:
                e.status.healthy
                sorted(e.status.uncleanable.items())
                sorted(e.status.dirty_ratios.items())


class OffsetCommitDecoder(Decoder):
    """A record of __consumer_offsets (key, value), as CommittedOffsets folds it into its table."""

    name = "offset_commit"

    def make_seeds(self) -> list[Any]:
        from pylog.structs import OffsetAndMetadata, TopicPartition
        return [(_offsets.offset_key("g", TopicPartition("t", p)), _offsets.offset_value(OffsetAndMetadata(o, m), 3, "m"))
                for p, o, m in ((0, 0, ""), (5, 1 << 40, "meta"))]

    def make(self, rng: random.Random) -> Any:
        key, value = rng.choice(self.seeds)
        r = rng.random()
        if r < 0.4:
            key = pack(mutate_doc(rng, msgpack.unpackb(key, raw=False)))
        elif r < 0.8:
            value = pack(mutate_doc(rng, msgpack.unpackb(value, raw=False)))
        else:
            key, value = mutate_bytes(rng, key), mutate_bytes(rng, value)
        if rng.random() < 0.05:
            value = None
        return key, value

    def feed(self, data: Any) -> None:
        got = _offsets.decode_commit(*data)
        if got is not None:
            (g, t, p), om = got
            table = {(g, t, p): om}
            {_offsets.TopicPartition(t, p): om for (g, t, p), om in table.items()}


class TxnStateDecoder(Decoder):
    """A record of __transaction_state (key, PLTX value), as TransactionLog folds it into its table."""

    name = "txn_state"

    def make_seeds(self) -> list[Any]:
        from pylog.storage.txn_state import TransactionMetadata, TxnState, state_key, state_value
        from pylog.structs import TopicPartition
        metas = [TransactionMetadata("app", 0, 0, 60_000, TxnState.EMPTY),
                 TransactionMetadata("payments-1", 12, 3, 900_000, TxnState.ONGOING,
                                     frozenset([TopicPartition("t", 0), TopicPartition("__consumer_offsets", 5)]),
                                     frozenset(["g"]), 1_700_000_000_000, 1_700_000_000_005, 4)]
        return [(state_key(m.transactional_id), state_value(m)) for m in metas]

    def make(self, rng: random.Random) -> Any:
        key, value = rng.choice(self.seeds)
        r = rng.random()
        if r < 0.3:
            key = pack(mutate_doc(rng, msgpack.unpackb(key, raw=False)))
        elif r < 0.8:  # the document mutated and the CRC recomputed: the hostile content reaches the checks
            doc = mutate_doc(rng, msgpack.unpackb(value[5:-4], raw=False))
            value = fix_checked(value[:5] + pack(doc) + b"\0\0\0\0")
        else:
            key, value = mutate_bytes(rng, key), mutate_bytes(rng, value, [(4, 1)])
        if rng.random() < 0.05:
            value = None
        return key, value

    def feed(self, data: Any) -> None:
        from pylog.storage.txn_state import decode_state
        tid, meta = decode_state(*data)
        if meta is not None:
            sorted(meta.partitions), meta.state.kafka_name, meta.open


class _StoreDecoder(Decoder):
    """Inputs read by opening a store directory (a fresh copy of a template made with pylog)."""

    def template(self) -> str:
        tpl = os.path.join(self.work, "template")
        if not os.path.exists(tpl):
            with pylog.open(tpl, log_cleaner_enable=False) as store:
                store.create_topic("t", 2, {"segment.bytes": 4096, "retention.ms": 10 ** 12})
                p = store.topic("t").partition(0)
                rng = random.Random(3)
                for i in range(30):
                    n = rng.randint(1, 5)
                    p.append_values([b"v%d" % i * rng.randint(1, 20)] * n, keys=[b"k%d" % i] * n if i % 2 else None,
                                    timestamps=[1_700_000_000_000 + i * 10 + j for j in range(n)])
                p.append([pylog.Record(b"x", b"k", [("h", b"y")], 1_700_000_000_000)])
                store.new_producer_id()
        return tpl

    def fresh(self) -> str:
        d = os.path.join(self.work, "store")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.template(), d)
        return d

    @staticmethod
    def read_everything(store: pylog.Store) -> None:
        for name in store.topics():
            t = store.topic(name)
            # Not every partition topic.json claims: opening a partition creates its directory and files,
            # so a count of 65,535 (CRC-valid) costs minutes and disk (reported, not fixed here).
            for p in [t.partition(i) for i in range(min(t.num_partitions, 4))]:
                pos = p.log_start_offset
                for _ in range(1000):
                    recs = p.read(pos, max_records=7)
                    if not recs:
                        break
                    pos = recs[-1].offset + 1
                p.read_columns(p.log_start_offset)
                p.offset_for_timestamp(0)
                p.offset_for_timestamp(1_700_000_000_000)


def mutate_json_file(rng: random.Random, seed: bytes, checksum: Callable[[dict], int]) -> bytes:
    """A mutated JSON file with a ``crc32c`` field: most often its decoded content mutated and the checksum
    re-computed by ``checksum`` (so the mutation reaches the parser), else its bytes mutated."""
    if rng.random() < 0.6:
        doc = to_jsonable(mutate_doc(rng, json.loads(seed)))
        if isinstance(doc, dict):
            with contextlib.suppress(Exception):
                doc["crc32c"] = checksum(doc)
        try:
            return json.dumps(doc).encode()
        except (ValueError, TypeError):
            return seed
    return mutate_bytes(rng, seed)


class TopicFileDecoder(_StoreDecoder):
    name = "topic_file"

    def make_seeds(self) -> list[Any]:
        with open(os.path.join(self.template(), "t", TOPIC_FILE), "rb") as f:
            return [f.read()]

    def make(self, rng: random.Random) -> Any:
        from pylog.topic import _canonical
        return mutate_json_file(rng, rng.choice(self.seeds), lambda doc: crc32c(_canonical(doc)))

    def feed(self, data: Any) -> None:
        d = os.path.join(self.work, "store")
        if not os.path.exists(os.path.join(d, STORE_FILE)):
            self.fresh()
        with open(os.path.join(d, "t", TOPIC_FILE), "wb") as f:
            f.write(data)
        with pylog.open(d, log_cleaner_enable=False) as store:
            self.read_everything(store)


class StoreMarkerDecoder(_StoreDecoder):
    name = "store_marker"

    def make_seeds(self) -> list[Any]:
        with open(os.path.join(self.template(), STORE_FILE), "rb") as f:
            return [f.read()]

    def make(self, rng: random.Random) -> Any:
        return mutate_json_file(rng, rng.choice(self.seeds), lambda doc: crc32c(json.dumps(
            {k: doc.get(k) for k in ("format", "version")}, sort_keys=True).encode()))

    def feed(self, data: Any) -> None:
        d = os.path.join(self.work, "store")
        if not os.path.exists(os.path.join(d, "t")):
            self.fresh()
        with open(os.path.join(d, STORE_FILE), "wb") as f:
            f.write(data)
        pylog.open(d, log_cleaner_enable=False).close()


class ProducerIdsDecoder(_StoreDecoder):
    name = "producer_ids"

    def make_seeds(self) -> list[Any]:
        out = []
        for v in (0, 5, 1 << 40):
            body = struct.pack("<q", v)
            out.append(body + struct.pack("<I", crc32c(body)))
        return out

    def make(self, rng: random.Random) -> Any:
        data = mutate_bytes(rng, rng.choice(self.seeds), [(0, 8)])
        return fix_checked(data) if rng.random() < 0.6 else data

    def feed(self, data: Any) -> None:
        d = os.path.join(self.work, "store")
        if not hasattr(self, "store"):
            self.fresh()
            self.store = pylog.open(d, log_cleaner_enable=False)
        with open(os.path.join(d, "producer.ids"), "wb") as f:
            f.write(data)
        self.store.new_producer_id()


class SegmentDecoder(_StoreDecoder):
    """A partition's files (log segments, indexes, checkpoint, snapshot) damaged, then the store opened and
    every record read: the path a reader of a damaged store takes."""

    name = "segment"

    def make_seeds(self) -> list[Any]:
        tpl = self.template()
        pdir = os.path.join(tpl, "t", "0")
        out = []
        for name in sorted(os.listdir(pdir)):
            if name.endswith((".log", ".index", ".timeindex")) or name in (CHECKPOINT_FILE, SNAPSHOT_FILE):
                with open(os.path.join(pdir, name), "rb") as f:
                    out.append((name, f.read()))
        return out

    def make(self, rng: random.Random) -> Any:
        name, seed = rng.choice([s for s in self.seeds if s[0].endswith(".log")] if rng.random() < 0.7 else self.seeds)
        if name.endswith(".log") and len(seed) > 64:
            # damage one batch and re-checksum it: walk the batches to find their starts
            starts = []
            pos = 0
            while pos + 12 <= len(seed):
                starts.append(pos)
                pos += struct.unpack_from("<I", seed, pos + 8)[0] + 12
            s = rng.choice(starts)
            end = s + struct.unpack_from("<I", seed, s + 8)[0] + 12
            batch = mutate_bytes(rng, seed[s:end], _BATCH_FIELDS)
            if rng.random() < 0.7:
                batch = _fix_batch(batch)
            return name, seed[:s] + batch + seed[end:]
        data = mutate_bytes(rng, seed)
        if name in (CHECKPOINT_FILE, SNAPSHOT_FILE) and rng.random() < 0.6:
            data = fix_checked(data)
        return name, data

    def feed(self, data: Any) -> None:
        name, raw = data
        d = self.fresh()
        with open(os.path.join(d, "t", "0", name), "wb") as f:
            f.write(raw)
        with pylog.open(d, log_cleaner_enable=False) as store:
            self.read_everything(store)
            p = store.topic("t").partition(0)
            with contextlib.suppress(PylogError):
                p.append_values([b"after"])  # becoming the writer recovers the partition
            self.read_everything(store)


DECODERS: dict[str, type[Decoder]] = {c.name: c for c in (
    BatchDecoder, IndexDecoder, CheckpointDecoder, ProducerSnapshotDecoder, GroupStateDecoder, GroupMemberDecoder,
    OffsetCommitDecoder, CleanerStatusDecoder, CleanerCheckpointDecoder, SwapManifestDecoder, TopicFileDecoder,
    StoreMarkerDecoder, ProducerIdsDecoder, SegmentDecoder, CoordinatorGroupsDecoder, TxnStateDecoder)}
assert set(DECODERS) == set(FULL_COUNTS)


# ------------------------------------------------------------------------------------------------ workers

def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _limit_memory() -> None:
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_HEADROOM, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _input_rng(seed: int, name: str, index: int) -> random.Random:
    return random.Random(f"{seed}:{name}:{index}")


def run_one(dec: Decoder, seed: int, index: int) -> tuple[str, str | None]:
    """(outcome, detail) of input ``index``: accepted / rejected:<class> / foreign / hang / memory."""
    rng = _input_rng(seed, dec.name, index)
    try:
        data = dec.make(rng)
    except RecursionError:  # the generator nested a document too deep to re-encode here: mutate bytes
        data = dec.make(rng)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        dec.feed(data)
        return "accepted", None
    except PylogError as exc:
        return "rejected:" + type(exc).__name__, None
    except Hang:
        return "hang", f"took over {TIME_LIMIT_S} s"
    except MemoryError:
        return "memory", traceback.format_exc(limit=-4)
    except Exception as exc:  # noqa: BLE001 - the point: any other exception is a violation
        return "foreign", f"{type(exc).__name__}: {exc}"[:300] + "\n" + traceback.format_exc(limit=-3)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _disk_used(directory: str) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def _worker(args: tuple[str, str, int, int, int]) -> tuple[str, Counter, list]:
    name, workdir, seed, start, stop = args
    with contextlib.suppress(OSError):
        os.nice(10)
    signal.signal(signal.SIGALRM, _on_alarm)
    logging_off()
    work = tempfile.mkdtemp(prefix=f"{name}-", dir=workdir)
    dec = DECODERS[name](work)
    _limit_memory()
    counts: Counter = Counter()
    bad: list = []
    for i in range(start, stop):
        outcome, detail = run_one(dec, seed, i)
        if i % 200 == 0 and outcome not in ("hang", "memory", "foreign"):
            used = _disk_used(work)
            if used > DISK_LIMIT:  # a decoder that creates files in proportion to a count it read
                outcome, detail = "disk", f"scratch directory holds {used >> 20} MiB after this input"
                counts[outcome] += 1
                bad.append((name, seed, i, outcome, detail))
                break
        counts[outcome] += 1
        if detail is not None and len(bad) < 5:
            bad.append((name, seed, i, outcome, detail))
    store = getattr(dec, "store", None)
    if store is not None:
        store.close()
    shutil.rmtree(work, ignore_errors=True)
    return name, counts, bad


def logging_off() -> None:
    import logging
    logging.getLogger("pylog").setLevel(logging.CRITICAL + 1)
    logging.getLogger("pylog").propagate = False


def _jobs(counts: dict[str, int], workdir: str, seed: int, chunk: int) -> list[tuple[str, str, int, int, int]]:
    jobs = []
    for name, n in counts.items():
        for start in range(0, n, chunk):
            jobs.append((name, workdir, seed, start, min(n, start + chunk)))
    return jobs


def run(mode: str, workdir: str, seed: int | None = None, only: list[str] | None = None,
        workers: int = WORKERS) -> dict:
    """Fuzz every decoder (``only``: some) and return ``{decoder: {outcome: count}}`` plus ``"_total"``.

    :raises AssertionError: naming decoder, seed and input of the first violations (foreign exception,
        hang, memory).
    """
    if mode not in ("full", "short"):
        raise ValueError(mode)
    seed = random.randrange(1 << 30) if seed is None else seed
    counts = {k: (v if mode == "full" else max(20, v // SHORT_DIVISOR)) for k, v in FULL_COUNTS.items()
              if only is None or k in only}
    chunk = 5_000 if mode == "full" else 2_000
    ctx = multiprocessing.get_context("fork")
    result: dict[str, Counter] = {k: Counter() for k in counts}
    violations: list = []
    t0 = time.monotonic()
    with ctx.Pool(workers, maxtasksperchild=1) as pool:
        for name, c, bad in pool.imap_unordered(_worker, _jobs(counts, workdir, seed, chunk)):
            result[name].update(c)
            violations.extend(bad)
            if mode == "full":
                done = sum(sum(x.values()) for x in result.values())
                print(f"  [{time.monotonic() - t0:7.0f} s] {name}: {sum(result[name].values())} done, {done} in all",
                      flush=True)
    out: dict = {k: dict(v) for k, v in result.items()}
    out["_total"] = sum(sum(v.values()) for v in result.values())
    out["_seed"] = seed
    out["_seconds"] = round(time.monotonic() - t0, 1)
    if violations:
        per = {n: {k: c[k] for k in ("foreign", "hang", "memory", "disk") if c[k]} for n, c in result.items()}
        lines = [f"violations (seed {seed}) per decoder: { {n: v for n, v in per.items() if v} }; "
                 "reproduce one with --repro DECODER:SEED:INDEX"]
        shown: set = set()
        for name, s, i, outcome, detail in violations:
            if (name, outcome) not in shown:  # the first of each kind per decoder
                shown.add((name, outcome))
                lines.append(f"- {name}:{s}:{i} {outcome}: {detail}")
        raise AssertionError("\n".join(lines))
    return out


def summary(result: dict) -> str:
    lines = []
    for name in FULL_COUNTS:
        if name not in result:
            continue
        c = result[name]
        total = sum(c.values())
        bad = sum(c.get(k, 0) for k in ("foreign", "hang", "memory", "disk"))
        parts = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
        lines.append(f"{name:20s} {total:9d} inputs, {bad} violations  ({parts})")
    viol = sum(result[n].get(k, 0) for n in FULL_COUNTS if n in result for k in ("foreign", "hang", "memory", "disk"))
    lines.append(f"TOTAL {result['_total']} inputs, {viol} foreign exceptions/hangs/memory blow-ups, seed "
                 f"{result['_seed']}, {result['_seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--full", action="store_true")
    g.add_argument("--short", action="store_true")
    g.add_argument("--repro", metavar="DECODER:SEED:INDEX", help="run one input in this process and show it")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--only", help="comma-separated decoder names")
    ap.add_argument("--workers", type=int, default=WORKERS)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pylog-fuzz-") as workdir:
        if args.repro:
            name, s, i = args.repro.split(":")
            dec = DECODERS[name](os.path.join(workdir, name))
            data = dec.make(_input_rng(int(s), name, int(i)))
            print(repr(data)[:2000])
            dec.feed(data)
            print("no exception")
            return 0
        only = args.only.split(",") if args.only else None
        try:
            result = run("full" if args.full else "short", workdir, args.seed, only, min(args.workers, WORKERS))
        except AssertionError as exc:
            print(exc)
            return 1
        print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
