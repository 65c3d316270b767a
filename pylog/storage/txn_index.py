"""Transactions on disk: the commit/abort marker record and the per-segment aborted-transaction index.

A transaction's batches carry attribute bit 4 (transactional) and their producer's id and epoch; it ends
with a **marker**: a control batch (bits 4 and 5) from the same producer holding one record whose key says
commit or abort and whose value carries the coordinator's epoch (Kafka's ``EndTransactionMarker``; the
bytes are Kafka's, big-endian, so ``pylog serve`` hands them to Kafka clients unchanged: docs/FORMAT.md,
"Transaction markers").

Every abort is also an entry of the **aborted-transaction index** (``<base>.txnindex``, Kafka's
``.txnindex``) of the segment the abort marker is written to: ``(producer id, first offset, last offset,
last stable offset)``, where ``first offset`` is the transaction's first record and ``last offset`` the
marker's. A ``read_committed`` reader drops a transactional batch of producer P at offset o when an entry
of P has ``first <= o <= last``; the entries it needs are in the index files of the segments from the one
its read starts in on (a marker never precedes its transaction's records).

Invariants:
- Entries of one file are in increasing ``last offset`` order (markers are appended in offset order).
- The entry is written (and fsynced) *before* its marker batch, so a reader that sees the marker always
  finds the entry; an entry whose marker never landed (a crash, a failed write) has ``last offset`` at or
  past the log end and is dropped by the next writer (:func:`truncate_index`) before it appends.
- Each entry has its own CRC-32C. In the index of the partition's active segment, bytes after the last whole
  entry (a torn tail), or else a last whole entry that fails its checksum, or a file of at most a header and
  an entry without its header (the first write, which creates it, torn), are a write torn by a crash
  before its fsync (its marker was never written, as the entry is fsynced first; the writer drops it before
  it appends again or rolls) and end the readable entries. Any other entry that fails its checksum, and a
  torn tail in a sealed segment's index, is damage and raises :class:`~pylog.errors.CorruptRecordError`
  (:func:`read_index`): skipping it would hand an aborted transaction's records to read_committed readers
  as committed ones. The readers that tolerate a torn last entry check that no abort marker with an entry
  follows it in the log (one there means the entry was whole once: damage; a commit marker, or an abort of a
  transaction with no record in the partition, has no entry and says nothing).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from ..errors import CorruptRecordError
from .filenames import TXN_INDEX_SUFFIX
from .records import crc32c

__all__ = ["AbortedTxn", "TXN_INDEX_SUFFIX", "marker_record", "parse_marker", "read_index", "read_index_tail",
           "append_index", "truncate_index", "write_index", "scan_index", "TXN_INDEX_HEADER_SIZE",
           "TXN_INDEX_ENTRY_SIZE", "index_path", "remove_index", "decode_index", "MAX_INDEX_BYTES", "MARKER_ABORT",
           "MARKER_COMMIT"]

_MAGIC = b"PLTI"
_VERSION = 1
_HEAD = struct.Struct("<4sHH")
_ENTRY = struct.Struct("<qqqq")
_ENTRY_SIZE = _ENTRY.size + 4
#: Sizes of the file's header and of one entry (docs/FORMAT.md), for tools that show the bytes.
TXN_INDEX_HEADER_SIZE = _HEAD.size
TXN_INDEX_ENTRY_SIZE = _ENTRY_SIZE
#: Readers cap an index file at this size (a million entries and more).
MAX_INDEX_BYTES = 64 << 20
#: Marker record key: version (int16, 0) and type (int16): Kafka's ControlRecordType, big-endian.
MARKER_ABORT = 0
MARKER_COMMIT = 1
_KEY = struct.Struct(">hh")
#: Marker record value: version (int16, 0) and the coordinator epoch (int32), big-endian.
_VALUE = struct.Struct(">hi")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def marker_record(commit: bool, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """The ``(key, value)`` of a commit or abort marker record."""
    return _KEY.pack(0, MARKER_COMMIT if commit else MARKER_ABORT), _VALUE.pack(0, coordinator_epoch)


def parse_marker(key: bytes | None, value: bytes | None) -> tuple[bool, int]:
    """``(commit, coordinator epoch)`` of a marker record.

    :raises CorruptRecordError: for any other key or value (readers never guess).
    """
    if key is None or value is None or len(key) != _KEY.size or len(value) < _VALUE.size:
        raise CorruptRecordError("a control record that is not a transaction marker")
    version, kind = _KEY.unpack(key)
    vversion, epoch = _VALUE.unpack_from(value)
    if version != 0 or vversion != 0 or kind not in (MARKER_ABORT, MARKER_COMMIT):
        raise CorruptRecordError(f"unknown transaction marker version {version}/{vversion} or type {kind}")
    return kind == MARKER_COMMIT, epoch


def index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")


def remove_index(directory: str, base_offset: int) -> None:
    """Remove the index of a segment retention deleted (when it has one)."""
    try:
        os.unlink(index_path(directory, base_offset))
    except FileNotFoundError:
        pass


def read_index(path: str, active: bool = False) -> list[AbortedTxn]:
    """The checked entries of an index file ([] when there is none); with ``active`` (the index of the
    partition's active segment) a torn tail or a last whole entry that fails its checksum ends them (see the
    module's invariants; :func:`read_index_tail` says whether one did).

    :raises CorruptRecordError: when the file's header is not an index's, or an entry that may not be torn
        fails its checksum or is cut short.
    """
    return read_index_tail(path, active)[0]


def read_index_tail(path: str, active: bool = False) -> tuple[list[AbortedTxn], str | None]:
    """:func:`read_index`, and what was dropped from the end, if anything (only with ``active``: a torn tail,
    or a damaged last entry with no bytes after it): the caller then checks that no abort marker follows the
    entries kept (a marker there makes what was dropped damage)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_INDEX_BYTES)
    except FileNotFoundError:
        return [], None
    if active and len(raw) <= _HEAD.size + _ENTRY_SIZE and not _has_header(raw):
        # The file is created with its header and first entry in one write: a crash before its fsync can
        # leave it empty or cut short anywhere, a torn write as any other (its marker was never written).
        return [], f"has a torn first write ({len(raw)} bytes, no header)"
    if not raw:
        return [], None
    out: list[AbortedTxn] = []
    entries = scan_index(raw, path)
    whole = _HEAD.size + len(entries) * _ENTRY_SIZE
    for i, (entry, ok) in enumerate(entries):
        if not ok:
            if active and whole == len(raw) and i == len(entries) - 1:
                return out, "entry checksum mismatch"
            raise CorruptRecordError("aborted-transaction index entry checksum mismatch: the aborted transactions "
                                     "it holds cannot be told from committed ones", path,
                                     _HEAD.size + i * _ENTRY_SIZE)
        out.append(entry)
    if whole < len(raw):
        # A sealed index has whole entries only (a roll drops a torn tail first): these bytes were an entry,
        # whose abort marker may be in the log, and reading on without it would hand its records out.
        torn = f"ends in a torn entry ({len(raw) - whole} of {_ENTRY_SIZE} bytes)"
        if active:
            return out, torn
        raise CorruptRecordError(f"aborted-transaction index {torn}: the aborted transactions it held cannot be "
                                 "told from committed ones", path, whole)
    return out, None


def _has_header(raw: bytes) -> bool:
    """``raw`` starts with an index file's header (magic and version)."""
    return len(raw) >= _HEAD.size and _HEAD.unpack_from(raw)[:2] == (_MAGIC, _VERSION)


def scan_index(raw: bytes, path: str = "") -> list[tuple[AbortedTxn, bool]]:
    """Every whole entry of an index file's bytes ``raw``, with whether its checksum checks (``pylog dump``
    shows them all; :func:`read_index` raises on a bad one that is not a torn write). Bytes after the last
    whole entry are a torn tail.

    :raises CorruptRecordError: when ``raw`` does not start with an index's header.
    """
    if not _has_header(raw):
        raise CorruptRecordError("not an aborted-transaction index (magic/version)", path, 0)
    out = []
    for pos in range(_HEAD.size, len(raw) - _ENTRY_SIZE + 1, _ENTRY_SIZE):
        body = raw[pos:pos + _ENTRY.size]
        out.append((AbortedTxn(*_ENTRY.unpack(body)),
                    struct.unpack_from("<I", raw, pos + _ENTRY.size)[0] == crc32c(body)))
    return out


def decode_index(raw: bytes, where: str) -> list[AbortedTxn]:
    """The entries of a whole index file's bytes, strictly (tiered storage ships and reads sealed ones): every
    entry whole and checking, in ``last offset`` order; ``b""`` is an empty index.

    :raises CorruptRecordError: on a bad header, a torn or damaged entry, or entries out of order.
    """
    if not raw:
        return []
    entries = scan_index(raw, where)  # checks the header
    if (len(raw) - _HEAD.size) % _ENTRY_SIZE or len(raw) > MAX_INDEX_BYTES:
        raise CorruptRecordError(f"aborted-transaction index of {len(raw)} bytes is not whole entries", where, 0)
    out: list[AbortedTxn] = []
    for i, (txn, ok) in enumerate(entries):
        pos = _HEAD.size + i * _ENTRY_SIZE
        if not ok:
            raise CorruptRecordError("aborted-transaction index entry checksum mismatch", where, pos)
        if out and txn.last_offset <= out[-1].last_offset or not txn.first_offset <= txn.last_offset:
            raise CorruptRecordError("aborted-transaction index entries out of order", where, pos)
        out.append(txn)
    return out


def _entry(txn: AbortedTxn) -> bytes:
    body = _ENTRY.pack(*txn)
    return body + struct.pack("<I", crc32c(body))


def append_index(path: str, txn: AbortedTxn) -> None:
    """Append one entry (creating the file with its header) and fsync it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        head = b""
        if size < _HEAD.size:
            head, size = _HEAD.pack(_MAGIC, _VERSION, 0), 0
        else:
            size = _HEAD.size + (size - _HEAD.size) // _ENTRY_SIZE * _ENTRY_SIZE  # past a torn tail
        os.pwrite(fd, head + _entry(txn), size)
        os.ftruncate(fd, size + len(head) + _ENTRY_SIZE)
        os.fsync(fd)
    finally:
        os.close(fd)


def truncate_index(path: str, log_end: int) -> list[AbortedTxn]:
    """Drop the entries of the active segment's index ``path`` whose marker is not in the log (``last offset
    >= log_end``) and a torn tail (a damaged last entry included); returns the entries kept. A file with a
    bad header is rewritten empty; the writer's replay never gets here with one (it checks the index first,
    :func:`~pylog.storage.log.txn.active_entries`, and raises: its entries may be older than the replay
    reaches).

    :raises CorruptRecordError: when an entry before the last fails its checksum: damage, not a torn write,
        and the aborts it holds may be older than the replay reaches, so nothing is rewritten.
    """
    try:
        entries = read_index(path, active=True)
    except CorruptRecordError:
        with open(path, "rb") as f:
            if _has_header(f.read(_HEAD.size)):
                raise  # the header checks: an entry before the last is damaged
        entries = []
    kept = [e for e in entries if e.last_offset < log_end]
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return kept
    want = _HEAD.size + len(kept) * _ENTRY_SIZE
    if size != want or len(kept) != len(entries):
        write_index(path, kept)
    return kept


def write_index(path: str, entries: list[AbortedTxn]) -> None:
    """Write ``entries`` (in ``last offset`` order) as the whole file ``path``, header included, and fsync
    it: rewriting an index in place (:func:`truncate_index`) or the index of a cleaned segment, which the
    compaction swap renames in with its log."""
    raw = _HEAD.pack(_MAGIC, _VERSION, 0) + b"".join(map(_entry, entries))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, raw, 0)
        os.ftruncate(fd, len(raw))
        os.fsync(fd)
    finally:
        os.close(fd)
