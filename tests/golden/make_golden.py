#!/usr/bin/env python3
"""Write pylog's golden on-disk files from docs/FORMAT.md, without pylog.

The files under ``tests/golden/`` are the reference every implementation of the format (pylog's encoder and
decoders, an accelerator, any later reader) must read and write byte for byte; ``manifest.json`` says what
each one decodes to. This script builds them from the byte tables of docs/FORMAT.md using only the standard
library (``struct``, ``json``) and the ``crc32c`` and ``lz4`` packages: it never imports pylog, so a mistake
in pylog's encoder cannot hide here too (tests/test_golden.py checks the imports). Its tiny msgpack writer
follows the msgpack spec's smallest-encoding rule, as every msgpack writer pylog uses does.

    python tests/golden/make_golden.py            # rewrite the committed files
    python tests/golden/make_golden.py --out DIR  # write them elsewhere (the test compares the two)

Changing the output of this script changes the on-disk format: it must stay byte-identical to the files
already committed (tests/test_golden.py re-runs it and compares).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys

import crc32c as _crc32c
import lz4.block as _lz4

#: Timestamps of the golden records: 2023-11-14T22:13:20Z and a few ms after.
T0 = 1_700_000_000_000
TOPIC = "events"
#: Topic configuration overrides of the golden store: small index interval so a short segment has
#: index entries; producers never expire, so the snapshot keeps them whatever the date the test runs.
TOPIC_CONFIG = {"index.interval.bytes": 100, "producer.id.expiration.ms": 1 << 62}
INDEX_INTERVAL = TOPIC_CONFIG["index.interval.bytes"]
#: segment.index.bytes of the live indexes (files/live.*): what a writer that hands over leaves.
LIVE_INDEX_BYTES = 4096  # the smallest the config allows


def crc32c(data: bytes, value: int = 0) -> int:
    return _crc32c.crc32c(data, value)


def checked(body: bytes) -> bytes:
    """A small metadata file: ``body`` followed by its CRC-32C (uint32 LE)."""
    return body + struct.pack("<I", crc32c(body))


# ------------------------------------------------------------------------------------------------ msgpack

def mp(obj: object) -> bytes:
    """msgpack, smallest encoding of each value (the spec's rule); str is UTF-8 ``str``, bytes is ``bin``."""
    if obj is None:
        return b"\xc0"
    if obj is True:
        return b"\xc3"
    if obj is False:
        return b"\xc2"
    if isinstance(obj, int):
        if 0 <= obj < 0x80:
            return bytes([obj])
        if -32 <= obj < 0:
            return struct.pack("b", obj)
        if obj >= 0:
            for limit, code, fmt in ((0xFF, 0xCC, ">B"), (0xFFFF, 0xCD, ">H"), (0xFFFFFFFF, 0xCE, ">I")):
                if obj <= limit:
                    return bytes([code]) + struct.pack(fmt, obj)
            return b"\xcf" + struct.pack(">Q", obj)
        for limit, code, fmt in ((-0x80, 0xD0, ">b"), (-0x8000, 0xD1, ">h"), (-0x80000000, 0xD2, ">i")):
            if obj >= limit:
                return bytes([code]) + struct.pack(fmt, obj)
        return b"\xd3" + struct.pack(">q", obj)
    if isinstance(obj, float):
        return b"\xcb" + struct.pack(">d", obj)  # always float64
    if isinstance(obj, str):
        raw = obj.encode("utf-8")
        n = len(raw)
        head = (bytes([0xA0 | n]) if n < 32 else b"\xd9" + struct.pack(">B", n) if n < 0x100
                else b"\xda" + struct.pack(">H", n) if n < 0x10000 else b"\xdb" + struct.pack(">I", n))
        return head + raw
    if isinstance(obj, bytes):
        n = len(obj)
        head = (b"\xc4" + struct.pack(">B", n) if n < 0x100 else b"\xc5" + struct.pack(">H", n) if n < 0x10000
                else b"\xc6" + struct.pack(">I", n))
        return head + obj
    if isinstance(obj, (list, tuple)):
        n = len(obj)
        head = (bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n) if n < 0x10000
                else b"\xdd" + struct.pack(">I", n))
        return head + b"".join(mp(x) for x in obj)
    if isinstance(obj, dict):
        n = len(obj)
        head = (bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n) if n < 0x10000
                else b"\xdf" + struct.pack(">I", n))
        return head + b"".join(mp(k) + mp(v) for k, v in obj.items())
    raise TypeError(f"no msgpack encoding for {type(obj).__name__}")


# ---------------------------------------------------------------------------------------- record batches

# Attribute bits (FORMAT.md, "Attributes").
CODEC_LZ4 = 1
LOG_APPEND_TIME = 1 << 3
TRANSACTIONAL = 1 << 4
CONTROL = 1 << 5
HAS_KEYS = 1 << 6
HAS_TIMESTAMPS = 1 << 7
HAS_HEADERS = 1 << 8
HAS_OFFSET_DELTAS = 1 << 9
HEADER = struct.Struct("<qIBIHiqqqhiiI3x")
assert HEADER.size == 64


def batch(base_offset: int, values: list, keys: list | None = None, timestamps: list | None = None,
          headers: list | None = None, *, offset_deltas: list | None = None, lz4: bool = False,
          append_time: int | None = None, producer: tuple[int, int, int] = (-1, -1, -1),
          control: bool = False, transactional: bool = False) -> bytes:
    """One record batch, laid out as FORMAT.md's header and body tables say, with the canonical choices
    of "Canonical encoding" (a column is present only when it carries information)."""
    n = len(values)
    keys = keys if keys is not None else [None] * n
    attrs = 0
    sections = []
    if offset_deltas is not None and offset_deltas != list(range(n)):
        attrs |= HAS_OFFSET_DELTAS
        sections.append(struct.pack(f"<{n}i", *offset_deltas))
    last_delta = offset_deltas[-1] if offset_deltas is not None else n - 1
    if append_time is not None:
        attrs |= LOG_APPEND_TIME
        first_ts = max_ts = append_time
    else:
        assert timestamps is not None and len(timestamps) == n
        first_ts, max_ts = timestamps[0], max(timestamps)
        if any(t != first_ts for t in timestamps):
            attrs |= HAS_TIMESTAMPS
            sections.append(struct.pack(f"<{n}q", *(t - first_ts for t in timestamps)))
    if any(k is not None for k in keys):
        attrs |= HAS_KEYS
        sections.append(struct.pack(f"<{n}i", *(-1 if k is None else len(k) for k in keys)))
    sections.append(struct.pack(f"<{n}i", *(-1 if v is None else len(v) for v in values)))
    if attrs & HAS_KEYS:
        sections.append(b"".join(k for k in keys if k is not None))
    sections.append(b"".join(v for v in values if v is not None))
    if headers is not None and any(headers):
        attrs |= HAS_HEADERS
        sections.append(mp([[[k, v] for k, v in row] for row in headers]))
    if control:
        attrs |= CONTROL
    if transactional:
        attrs |= TRANSACTIONAL
    body = b"".join(sections)
    stored = body
    if lz4:
        compressed = _lz4.compress(body, mode="default", store_size=False)
        if len(compressed) < len(body):  # otherwise stored plain, codec 0
            attrs |= CODEC_LZ4
            stored = compressed
    pid, epoch, seq = producer
    head = bytearray(HEADER.pack(base_offset, 64 + len(stored) - 12, 1, 0, attrs, last_delta, first_ts, max_ts,
                                 pid, epoch, seq, n, len(body)))
    whole = bytes(head) + stored
    crc = crc32c(whole[17:], crc32c(whole[:8]))
    struct.pack_into("<I", head, 13, crc)
    return bytes(head) + stored


def parse_header(raw: bytes, pos: int = 0) -> dict:
    names = ("base_offset", "batch_length", "magic", "crc", "attributes", "last_offset_delta", "first_timestamp",
             "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count", "body_size")
    return dict(zip(names, HEADER.unpack_from(raw, pos)))


# ------------------------------------------------------------------------------------------------ indexes

def index_file(magic: bytes, base_offset: int, a: list, b: list, a_fmt: str, max_timestamp: int) -> bytes:
    """A sealed (trimmed, checksummed) index: capacity = count, at least 1 slot."""
    count = len(a)
    capacity = max(count, 1)
    col_a = struct.pack(f"<{count}{a_fmt}", *a) + bytes(struct.calcsize(a_fmt) * (capacity - count))
    col_b = struct.pack(f"<{count}I", *b) + bytes(4 * (capacity - count))
    entries_crc = crc32c(struct.pack(f"<{count}I", *b), crc32c(struct.pack(f"<{count}{a_fmt}", *a)))
    head = struct.pack("<4sHHqIIIq24x", magic, 1, 1, base_offset, capacity, count, entries_crc, max_timestamp)
    head += struct.pack("<I", crc32c(head))
    return head + col_a + col_b


def live_index_file(magic: bytes, base_offset: int, a: list, b: list, a_fmt: str, max_bytes: int) -> bytes:
    """A live (unsealed) index as a writer leaves it: preallocated to ``max_bytes``, header count 0 (the
    entries were appended in place after the file was created), no entries CRC, max timestamp -1."""
    capacity = max(1, (max_bytes - 64) // (struct.calcsize(a_fmt) + 4))
    count = len(a)
    col_a = struct.pack(f"<{count}{a_fmt}", *a) + bytes(struct.calcsize(a_fmt) * (capacity - count))
    col_b = struct.pack(f"<{count}I", *b) + bytes(4 * (capacity - count))
    head = struct.pack("<4sHHqIIIq24x", magic, 1, 0, base_offset, capacity, 0, 0, -1)
    head += struct.pack("<I", crc32c(head))
    return head + col_a + col_b


def segment_indexes(log: bytes, base_offset: int) -> tuple[list, list, int]:
    """Offset and time index entries of a segment by FORMAT.md's rule, and its max timestamp."""
    offset_entries, time_entries = [], []
    pos = since = 0
    max_ts = -1
    while pos < len(log):
        h = parse_header(log, pos)
        rel = h["base_offset"] - base_offset
        if pos > 0 and since >= INDEX_INTERVAL:
            offset_entries.append((rel, pos))
            if not time_entries or max_ts > time_entries[-1][0]:
                time_entries.append((max_ts, rel))
            since = 0
        size = h["batch_length"] + 12
        since += size
        max_ts = max(max_ts, h["max_timestamp"])
        pos += size
    return offset_entries, time_entries, max_ts


# ------------------------------------------------------------------------------------------- the content

#: The append calls that make the golden segment, one batch each (as ``Partition.append_values`` takes them).
APPENDS = [
    dict(values=[b"v0", None, b"", b"value three"], keys=[b"k0", None, b"key-2", b""],
         timestamps=[T0, T0 + 5, T0 + 3, T0 + 10],
         headers=[[("h", b"x")], [], [("a", None), ("b", b"\x00\x01")], []], producer=[7, 2, 0]),
    dict(values=[b"lz4 compresses this repeated text, again and again and again. %d" % i for i in range(6)],
         keys=[b"user-%d" % (i % 3) for i in range(6)], timestamps=[T0 + 20] * 6, compression="lz4"),
    dict(values=[b"x" * 30, b"y" * 30], timestamps=[T0 + 15, T0 + 15], producer=[7, 2, 4]),
    dict(values=[b"late-1", b"late-2", None], keys=[b"a", b"b", b"c"], timestamps=[T0 + 1, T0 + 2, T0 + 2]),
    dict(values=[None], keys=[b"k0"], timestamps=[T0 + 30], producer=[9, 0, 0]),
    dict(values=[b"last" * 10], keys=[b"z"], timestamps=[T0 + 40], headers=[[("trace", b"\x01\x02\x03")]]),
]

#: Batches kept as files of their own: the features a store's append path does not write.
STANDALONE = {
    "log_append_time": dict(base_offset=0, values=[b"one", b"two", b"three"], append_time=T0 + 1000),
    "control": dict(base_offset=50, values=[b"\x00\x00\x00\x01"], keys=[b"\x00\x00\x00\x00"], timestamps=[T0 + 60],
                    producer=(11, 3, -1), control=True),
    # A transaction (FORMAT.md, "Transactions"): two records of producer 12 epoch 2, then its commit marker:
    # key = version 0, type 1 (commit), value = version 0, coordinator epoch 5, both big-endian (Kafka's).
    "transactional": dict(base_offset=300, values=[b"debit", b"credit"], keys=[b"acct-1", b"acct-2"],
                          timestamps=[T0 + 80, T0 + 81], producer=(12, 2, 0), transactional=True),
    "commit_marker": dict(base_offset=302, values=[struct.pack(">hi", 0, 5)], keys=[struct.pack(">hh", 0, 1)],
                          timestamps=[T0 + 82], producer=(12, 2, -1), control=True, transactional=True),
    "offset_deltas": dict(base_offset=100, values=[b"kept-0", None, b"kept-5"], keys=[b"p", b"q", b"r"],
                          timestamps=[T0 + 70, T0 + 72, T0 + 75], offset_deltas=[0, 2, 5]),
    # More headers per record than the record count and than 16 (a fixarray's limit): pylog <= 0.1.0 wrote
    # such batches and then could not read them (its decoder capped arrays at max(count, 16) items).
    "many_headers": dict(base_offset=200, values=[b"v0", b"v1", None], keys=[b"k", None, b"k2"],
                         timestamps=[T0 + 80, T0 + 80, T0 + 81],
                         headers=[[(f"h{i}", bytes([i])) for i in range(17)], [],
                                  [(f"trace-{i:02d}" + ("-" * 30 if i == 39 else ""), None if i % 2 else b"s" * i)
                                   for i in range(40)]]),
    "consumer_offsets": dict(
        base_offset=0,
        keys=[mp([1, "billing", TOPIC, 0]), mp([1, "billing", TOPIC, 1])],
        values=[mp([1, 15, "checkpoint after batch 6", T0 + 90, 3, "billing-member-1"]), None],
        timestamps=[T0 + 90, T0 + 91]),
}


def records_of(calls: list, first_offset: int = 0) -> list:
    """The records the segment's appends hold, in the manifest's notation."""
    out = []
    offset = first_offset
    for call in calls:
        n = len(call["values"])
        keys = call.get("keys") or [None] * n
        headers = call.get("headers") or [[]] * n
        for i in range(n):
            out.append(record(offset, call["timestamps"][i], 0, keys[i], call["values"][i], headers[i]))
            offset += 1
    return out


def record(offset: int, timestamp: int, timestamp_type: int, key: bytes | None, value: bytes | None,
           headers: list) -> dict:
    return {"offset": offset, "timestamp": timestamp, "timestamp_type": timestamp_type, "key": hx(key),
            "value": hx(value), "headers": [[k, hx(v)] for k, v in headers]}


def hx(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def jsonable(obj: object) -> object:
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, (list, tuple)):
        return [jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    return obj


def build() -> dict[str, bytes]:
    """Every golden file by relative path, ``manifest.json`` included."""
    files: dict[str, bytes] = {}
    manifest: dict = {"about": "Golden files of pylog's on-disk format version 1, written by make_golden.py from "
                               "docs/FORMAT.md. Bytes are hex strings; null is a null key, value or header value.",
                      "T0": T0, "batches": {}, "files": {}}

    # -- the store: one topic, one partition, one segment of len(APPENDS) batches, closed cleanly
    log = b""
    offset = 0
    producers: dict[int, dict] = {}
    for call in APPENDS:
        n = len(call["values"])
        pid, epoch, seq = call.get("producer", (-1, -1, -1))
        log += batch(offset, call["values"], call.get("keys"), call["timestamps"], call.get("headers"),
                     lz4=call.get("compression") == "lz4", producer=(pid, epoch, seq))
        if pid >= 0:  # producer_state: ranges that continue both sequence and offset merge
            e = producers.setdefault(pid, {"epoch": epoch, "last_timestamp": -1, "batches": []})
            last = e["batches"][-1] if e["batches"] else None
            if last is not None and seq == last[1] + 1 and offset == last[3] + 1:
                last[1], last[3] = seq + n - 1, offset + n - 1
            else:
                e["batches"].append([seq, seq + n - 1, offset, offset + n - 1])
            e["last_timestamp"] = max(e["last_timestamp"], max(call["timestamps"]))
        offset += n
    end = offset
    oentries, tentries, max_ts = segment_indexes(log, 0)
    part = f"store/{TOPIC}/0/"
    stem = "0" * 20
    files[part + stem + ".log"] = log
    files[part + stem + ".index"] = index_file(b"PLXO", 0, [r for r, _ in oentries], [p for _, p in oentries],
                                               "I", -1)
    files[part + stem + ".timeindex"] = index_file(b"PLXT", 0, [t for t, _ in tentries], [r for _, r in tentries],
                                                   "q", max_ts)
    # Closed cleanly: recovery point = log end, log start 0, swap generation 0.
    files[part + "partition.checkpoint"] = checked(struct.pack("<4sHHqqq4x", b"PLCK", 1, 1, end, 0, 0))
    snapshot = {"offset": end, "producers": [[pid, e["epoch"], e["last_timestamp"], e["batches"]]
                                             for pid, e in producers.items()]}
    files[part + "producer.snapshot"] = checked(struct.pack("<4sHH", b"PLPS", 1, 0) + mp(snapshot))
    topic_doc = {"format": "pylog-topic", "version": 1, "name": TOPIC, "partitions": 1, "config": TOPIC_CONFIG}
    topic_doc["crc32c"] = crc32c(json.dumps(topic_doc, sort_keys=True, separators=(",", ":")).encode())
    files[f"store/{TOPIC}/topic.json"] = (json.dumps(topic_doc, indent=2, sort_keys=True) + "\n").encode()
    marker = {"format": "pylog-store", "version": 1}
    marker["crc32c"] = crc32c(json.dumps(marker, sort_keys=True).encode())  # default separators (see FORMAT.md)
    files["store/pylog.store"] = (json.dumps(marker, sort_keys=True) + "\n").encode()
    manifest["store"] = {
        "path": "store", "topic": TOPIC, "partition": 0, "config": TOPIC_CONFIG,
        "appends": jsonable(APPENDS), "records": records_of(APPENDS), "log_start_offset": 0, "log_end_offset": end,
        "batch_positions": batch_positions(log),
        "offset_index": {"file": part + stem + ".index", "entries": oentries, "max_timestamp": -1},
        "time_index": {"file": part + stem + ".timeindex", "entries": tentries, "max_timestamp": max_ts},
        "checkpoint": {"file": part + "partition.checkpoint", "recovery_point": end, "log_start_offset": 0,
                       "clean": True, "swap_generation": 0},
        "producer_snapshot": {"file": part + "producer.snapshot", **snapshot},
        "topic_file": {"file": f"store/{TOPIC}/topic.json", "partitions": 1, "config": TOPIC_CONFIG},
        "store_marker": {"file": "store/pylog.store"},
    }

    # -- batches of their own: the first two segment batches, and what a store's appends never write
    positions = batch_positions(log)
    for name, i in (("plain", 0), ("lz4", 1)):
        raw = log[positions[i]:positions[i + 1] if i + 1 < len(positions) else len(log)]
        call = APPENDS[i]
        first = sum(len(c["values"]) for c in APPENDS[:i])
        files[f"batches/{name}.bin"] = raw
        manifest["batches"][name] = {
            "file": f"batches/{name}.bin", "encode": jsonable(dict(call, base_offset=first)),
            "header": parse_header(raw), "records": records_of([call], first)}
    for name, spec in STANDALONE.items():
        raw = batch(spec["base_offset"], spec["values"], spec.get("keys"), spec.get("timestamps"), spec.get("headers"),
                    offset_deltas=spec.get("offset_deltas"), append_time=spec.get("append_time"),
                    producer=spec.get("producer", (-1, -1, -1)), control=spec.get("control", False),
                    transactional=spec.get("transactional", False))
        files[f"batches/{name}.bin"] = raw
        n = len(spec["values"])
        deltas = spec.get("offset_deltas") or list(range(n))
        keys = spec.get("keys") or [None] * n
        ts = [spec["append_time"]] * n if "append_time" in spec else spec["timestamps"]
        manifest["batches"][name] = {
            "file": f"batches/{name}.bin", "encode": jsonable(spec), "header": parse_header(raw),
            "records": [record(spec["base_offset"] + deltas[i], ts[i], 1 if "append_time" in spec else 0, keys[i],
                               spec["values"][i], (spec.get("headers") or [[]] * n)[i]) for i in range(n)]}
    manifest["batches"]["consumer_offsets"]["commits"] = [
        {"group": "billing", "topic": TOPIC, "partition": 0, "offset": 15, "metadata": "checkpoint after batch 6",
         "commit_time_ms": T0 + 90, "generation": 3, "member_id": "billing-member-1"},
        {"group": "billing", "topic": TOPIC, "partition": 1, "offset": None}]

    # -- the same segment's indexes as a writer that hands over (release_writer) leaves them: live
    live = {"segment.index.bytes": LIVE_INDEX_BYTES}
    files["files/live.index"] = live_index_file(b"PLXO", 0, [r for r, _ in oentries], [p for _, p in oentries],
                                                "I", LIVE_INDEX_BYTES)
    files["files/live.timeindex"] = live_index_file(b"PLXT", 0, [t for t, _ in tentries],
                                                    [r for _, r in tentries], "q", LIVE_INDEX_BYTES)
    manifest["files"]["live.index"] = {"file": "files/live.index", "config": live, "entries": oentries,
                                       "of": "store"}
    manifest["files"]["live.timeindex"] = {"file": "files/live.timeindex", "config": live, "entries": tentries,
                                           "of": "store"}

    # -- small metadata files
    dirty = {"recovery_point": 12, "log_start_offset": 4, "clean": False, "swap_generation": 3}
    files["files/partition.checkpoint"] = checked(struct.pack("<4sHHqqq4x", b"PLCK", 1, 0, 12, 4, 3))
    manifest["files"]["partition.checkpoint"] = {"file": "files/partition.checkpoint", **dirty}

    horizons = [[10, T0], [25, T0 + 60_000], [40, T0 + 120_000]]
    files["files/cleaner.checkpoint"] = checked(struct.pack("<4sHHq", b"PLCC", 1, len(horizons), 0) + b"".join(
        struct.pack("<qq", e, t) for e, t in horizons))
    manifest["files"]["cleaner.checkpoint"] = {"file": "files/cleaner.checkpoint", "horizons": horizons}
    # Version 2: with the transaction horizons (first marker, last marker, time) after the horizons; their
    # count in the header's last 8 bytes.
    txn_horizons = [[12, 30, T0 + 60_000], [31, 31, T0 + 120_000]]
    files["files/txn.cleaner.checkpoint"] = checked(
        struct.pack("<4sHHq", b"PLCC", 2, len(horizons), len(txn_horizons))
        + b"".join(struct.pack("<qq", e, t) for e, t in horizons)
        + b"".join(struct.pack("<qqq", a, b, t) for a, b, t in txn_horizons))
    manifest["files"]["txn.cleaner.checkpoint"] = {"file": "files/txn.cleaner.checkpoint", "horizons": horizons,
                                                   "txn_horizons": txn_horizons}

    groups = [[0, [0, 12]], [20, [20]], [-1, [30, 35]]]
    raw = struct.pack("<4sHHI", b"PLCS", 1, 0, len(groups))
    for new, old in groups:
        raw += struct.pack("<qI", new, len(old)) + struct.pack(f"<{len(old)}q", *old)
    files["files/cleaner.swap"] = checked(raw)
    manifest["files"]["cleaner.swap"] = {"file": "files/cleaner.swap", "groups": groups}

    # The aborted-transaction index (PLTI): two aborted transactions, 36-byte entries each with its CRC.
    aborted = [[12, 300, 310, 305], [13, 303, 320, 321]]
    raw = struct.pack("<4sHH", b"PLTI", 1, 0)
    for entry in aborted:
        body = struct.pack("<qqqq", *entry)
        raw += body + struct.pack("<I", crc32c(body))
    files["files/aborted.txnindex"] = raw
    manifest["files"]["aborted.txnindex"] = {
        "file": "files/aborted.txnindex",
        "entries": [dict(zip(("producer_id", "first_offset", "last_offset", "last_stable_offset"), e))
                    for e in aborted]}
    # A producer snapshot with an open transaction (6-item entry) next to a plain idempotent producer.
    txn_snapshot = {"offset": 330, "producers": [[12, 2, T0 + 82, [[0, 1, 300, 301]], 325, 5],
                                                 [9, 0, T0 + 30, [[0, 0, 7, 7]]]]}
    files["files/txn.producer.snapshot"] = checked(struct.pack("<4sHH", b"PLPS", 1, 0) + mp(txn_snapshot))
    manifest["files"]["txn.producer.snapshot"] = {"file": "files/txn.producer.snapshot", **txn_snapshot}

    # A transactional id's state record in __transaction_state: an Ongoing transaction over two partitions of
    # the golden topic and one group's offsets partition.
    txn_state = [12, 3, 60000, 1, [["__consumer_offsets", 5], [TOPIC, 0], [TOPIC, 1]], ["billing"], T0 + 100,
                 T0 + 105, 4]
    files["files/txn.state.key"] = mp([1, "payments-1"])
    files["files/txn.state"] = checked(b"PLTX" + bytes([1]) + mp(txn_state))
    manifest["files"]["txn.state"] = {
        "file": "files/txn.state", "key_file": "files/txn.state.key", "transactional_id": "payments-1",
        **dict(zip(("producer_id", "producer_epoch", "timeout_ms", "state", "partitions", "groups", "start_ms",
                    "update_ms", "coordinator_epoch"), txn_state))}

    files["files/producer.ids"] = checked(struct.pack("<q", 42))
    manifest["files"]["producer.ids"] = {"file": "files/producer.ids", "next_id": 42}

    state = {"group_id": "billing", "generation": 3, "protocol": "range",
             "members": {"billing-member-1": {"client_id": "biller", "pid": 4242, "topics": [TOPIC]},
                         "billing-member-2": {"client_id": "biller", "pid": 4343, "topics": [TOPIC]}},
             "assignment": {"billing-member-1": [[TOPIC, 0]], "billing-member-2": [[TOPIC, 1]]}}
    files["files/group.state"] = checked(b"PLGS" + bytes([1]) + mp(state))
    manifest["files"]["group.state"] = {"file": "files/group.state", "magic": "PLGS", "document": state}
    member = {"client_id": "biller", "pid": 4242, "topics": [TOPIC], "strategies": ["range", "roundrobin"]}
    files["files/group.member"] = checked(b"PLGM" + bytes([1]) + mp(member))
    manifest["files"]["group.member"] = {"file": "files/group.member", "magic": "PLGM", "document": member}

    # pylog serve's coordinator groups: one Stable group (a static and a dynamic member), one Empty group.
    sub = bytes.fromhex("0000000000010006") + TOPIC.encode() + bytes.fromhex("ffffffff")
    coordinator = {"groups": [
        {"group_id": "billing-kafka", "generation": 4, "protocol_type": "consumer", "protocol_name": "range",
         "leader": "rdkafka-1",
         "members": [{"member_id": "rdkafka-1", "group_instance_id": "biller-a", "client_id": "rdkafka",
                      "client_host": "/127.0.0.1", "session_timeout_ms": 45000, "rebalance_timeout_ms": 300000,
                      "protocols": [["range", sub], ["roundrobin", sub]], "assignment": b"\x00\x01"},
                     {"member_id": "kafkajs-2", "group_instance_id": None, "client_id": "kafkajs",
                      "client_host": "/127.0.0.1", "session_timeout_ms": 30000, "rebalance_timeout_ms": 60000,
                      "protocols": [["range", sub]], "assignment": b""}]},
        {"group_id": "idle", "generation": 7, "protocol_type": "consumer", "protocol_name": None, "leader": None,
         "members": []}]}
    files["files/coordinator.groups"] = checked(b"PLKG" + bytes([1]) + mp(coordinator))
    manifest["files"]["coordinator.groups"] = {"file": "files/coordinator.groups", "magic": "PLKG",
                                               "document": jsonable(coordinator)}

    # Not sort_keys: the order of a msgpack document's keys is part of its bytes (FORMAT.md).
    status = {"pid": 4242, "heartbeat": 1_700_000_100.5, "partitions": [f"{TOPIC}-0", f"{TOPIC}-1"], "status": {
        "enabled": True, "alive": True, "started_at": 1_700_000_000.25, "last_run_start": 1_700_000_090.0,
        "last_run_end": 1_700_000_090.75, "runs": 12, "last_error": "CorruptRecordError: batch checksum mismatch",
        "last_error_at": 1_700_000_050.5, "uncleanable": {f"{TOPIC}-1": "CorruptRecordError: batch checksum mismatch"},
        "bytes_read": 123456, "bytes_written": 65432, "records_read": 5000, "records_written": 2500,
        "records_removed": 2500, "tombstones_removed": 40, "cleanings": 11, "segments_deleted": 3,
        "bytes_deleted": 4_294_967_296, "dirty_ratios": {f"{TOPIC}-0": 0.375}}}
    files["files/cleaner.status"] = checked(b"PLCS" + bytes([1]) + mp(status))
    manifest["files"]["cleaner.status"] = {"file": "files/cleaner.status", "magic": "PLCS", "document": status}

    # The ACL file (`<store>/__acls`): Kafka's codes; a literal topic ALLOW, a prefixed DENY for everyone on one
    # host, a cluster ALTER for a non-ASCII user name.
    acls = {"acls": [[2, TOPIC, 3, "User:alice", "*", 3, 3],
                     [3, "billing-", 4, "User:*", "10.0.0.9", 2, 2],
                     [4, "kafka-cluster", 3, "User:jos\u00e9", "*", 7, 3]]}
    files["files/acls"] = checked(b"PLAC" + bytes([1]) + mp(acls))
    manifest["files"]["acls"] = {"file": "files/acls", "magic": "PLAC", "document": acls}

    # The client quota file (`<store>/__quotas`): AlterClientQuotas' changes; a user and client id pair, the
    # default client id's request quota removed (nil), a non-ASCII user.
    quotas = {"quotas": [["alice", "etl", {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2.5e6}],
                         [None, "<default>", {"request_percentage": None}],
                         ["jos\u00e9", None, {"request_percentage": 50.0}]]}
    files["files/quotas"] = checked(b"PLQU" + bytes([1]) + mp(quotas))
    manifest["files"]["quotas"] = {"file": "files/quotas", "magic": "PLQU", "document": quotas}

    # The remote manifest (tiered storage: `<prefix>/<topic>/<p>/remote.manifest` in a bucket), version 2: the
    # golden store's segment shipped with its producer snapshot (as of its end) and no aborted-transaction
    # index, then one more segment without a snapshot but with the golden aborted-transaction index; three
    # commits so far (epoch 3), log start 0.
    seg0 = [0, end, max_ts, len(log), crc32c(log)]
    for name in (stem + ".index", stem + ".timeindex", "producer.snapshot"):
        raw = files[part + name]
        seg0 += [len(raw), crc32c(raw)]
    seg1 = [end, end + 2, max_ts + 5, 200, 0xDEADBEEF, 64 + 8, 0x01020304, 64 + 12, 0x0A0B0C0D, -1, 0]
    txnindex = files["files/aborted.txnindex"]
    remote = {"topic": TOPIC, "partition": 0, "epoch": 3, "log_start_offset": 0,
              "segments": [seg0 + [-1, 0], seg1 + [len(txnindex), crc32c(txnindex)]]}
    files["files/remote.manifest"] = checked(b"PLRM" + bytes([2]) + mp(remote))
    manifest["files"]["remote.manifest"] = {"file": "files/remote.manifest", "magic": "PLRM", "version": 2,
                                            "document": remote}
    # Version 1, as written before aborted-transaction indexes were shipped (entries of eleven numbers): still
    # read, each segment's index unknown.
    remote_v1 = {"topic": TOPIC, "partition": 0, "epoch": 3, "log_start_offset": 0, "segments": [seg0, seg1]}
    files["files/remote.manifest.v1"] = checked(b"PLRM" + bytes([1]) + mp(remote_v1))
    manifest["files"]["remote.manifest.v1"] = {"file": "files/remote.manifest.v1", "magic": "PLRM", "version": 1,
                                               "document": remote_v1}

    # The groups' committed offsets in a bucket (tiered storage: `<prefix>/group.offsets`): sorted by group,
    # topic, partition; a Kafka client's commit with its leader epoch, a pylog one (-1), a negative commit.
    group_offsets = {"offsets": [["audit", TOPIC, 0, -1, "", -1], ["billing", TOPIC, 0, 42, "after batch 7", 5],
                                 ["billing", TOPIC, 1, 9, "", -1]]}
    files["files/group.offsets"] = checked(b"PLGO" + bytes([1]) + mp(group_offsets))
    manifest["files"]["group.offsets"] = {"file": "files/group.offsets", "magic": "PLGO", "document": group_offsets}

    files["manifest.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    return files


def batch_positions(log: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(log):
        out.append(pos)
        pos += parse_header(log, pos)["batch_length"] + 12
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="directory to write into (default: next to this script)")
    args = parser.parse_args(argv)
    for rel, data in sorted(build().items()):
        path = os.path.join(args.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
