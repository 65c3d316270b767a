"""``pylog dump PATH...``: kafka-dump-log for pylog files.

A ``.log`` segment is read batch by batch straight from the file, trusting nothing: each batch's header is
checked, its CRC computed and compared, and its body decoded; each line shows the batch's offsets,
position, size, timestamps, codec, producer fields and whether it is valid (``--records`` adds one line per
record). A bad CRC or body is reported and the walk goes on (the header's length still finds the next
batch); a header that does not check or a batch cut short ends the walk (nothing after it can be found).
Every problem is listed at the end with the file and byte position, and the exit code is 1.

An ``.index`` or ``.timeindex`` file is printed entry by entry; offset index entries are checked against
the segment's ``.log`` beside it (each must point at the start of the batch with its offset). A ``.txnindex``
file (aborted transactions) is printed entry by entry, each entry's checksum checked (a damaged one makes
read_committed reads raise, unless it is a torn write: docs/FORMAT.md "Aborted-transaction index").

Transactions: a batch line says ``isTransactional``; with ``--records`` a transaction marker (control batch)
prints as ``endTxnMarker: COMMIT`` or ``ABORT`` with its coordinator epoch, as kafka-dump-log does. A file
shows every batch whatever its transaction's outcome; with ``--records --isolation-level read_committed``
only the records a read_committed reader gets are printed (none of an aborted or still open transaction,
none at or past the last stable offset, no marker): those are asked of the partition the segment is in
(its store, opened read-only), so the file must be in its store's directory.

On the active segment of a partition being written, the last batch may be in flight and show as torn.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any, Callable, Iterator, TextIO

from ..errors import CorruptRecordError, PylogError
from ..storage.filenames import INDEX_SUFFIX, LOG_SUFFIX, STORE_FILE, TIMEINDEX_SUFFIX, TXN_INDEX_SUFFIX
from ..index import OffsetIndex, TimeIndex
from ..partition import ISOLATION_LEVELS, Partition
from ..storage.records import (CODEC_LZ4, HEADER_SIZE, BatchHeader, BatchView, batch_crc, check_header, parse_header)
from ..storage.txn_index import TXN_INDEX_ENTRY_SIZE, TXN_INDEX_HEADER_SIZE, parse_marker, scan_index
from ..store import Store
from .base import CommandError, ExitCode
from .output import text_of

__all__ = ["register", "dump_log"]

_CODECS = {0: "none", CODEC_LZ4: "lz4"}


def register(sub: Any) -> None:
    d = sub.add_parser("dump", help="print a segment's batches (or an index's entries), checking each",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("paths", nargs="+", metavar="PATH", help="a .log, .index, .timeindex or .txnindex file")
    d.add_argument("--records", action="store_true", help="also print every record: offset, timestamp, key, "
                                                           "value, headers")
    d.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default="read_uncommitted",
                   help="with --records, Kafka's: read_uncommitted (default) prints every record, markers "
                        "too; read_committed only what a read_committed reader gets (asks the segment's store)")
    d.set_defaults(run=_dump)


def _dump(args: argparse.Namespace, out: TextIO) -> ExitCode:
    problems: list[str] = []
    for i, path in enumerate(args.paths):
        if i:
            print(file=out)
        print(f"Dumping {path}", file=out)
        if path.endswith(LOG_SUFFIX):
            if args.records and args.isolation_level == "read_committed":
                with _committed_filter(path) as shown:
                    problems += dump_log(path, out, True, shown)
            else:
                problems += dump_log(path, out, args.records)
        elif path.endswith(INDEX_SUFFIX) or path.endswith(TIMEINDEX_SUFFIX):
            problems += _dump_index(path, out)
        elif path.endswith(TXN_INDEX_SUFFIX):
            problems += _dump_txn_index(path, out)
        else:
            problems.append(f"{path}: not a .log, .index, .timeindex or .txnindex file")
    if problems:
        print(f"{len(problems)} problem(s):", file=out)
        for p in problems:
            print(f"  {p}", file=out)
    return ExitCode.PROBLEMS if problems else ExitCode.OK


def _base_offset_of(path: str) -> int | None:
    stem = os.path.basename(path).split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def _batch_line(pos: int, h: BatchHeader, crc_ok: bool, error: str | None) -> str:
    last_seq = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} position: {pos} "
            f"size: {h.size} {'LogAppendTime' if h.timestamp_type else 'CreateTime'}: {h.max_timestamp} "
            f"firstTimestamp: {h.first_timestamp} codec: {_CODECS.get(h.codec, h.codec)} bodySize: {h.body_size} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} baseSequence: {h.base_sequence} "
            f"lastSequence: {last_seq} isTransactional: {str(h.is_transactional).lower()} "
            f"isControl: {str(h.is_control).lower()} crc: {h.crc} "
            f"crcValid: {str(crc_ok).lower()} isValid: {str(crc_ok and error is None).lower()}"
            + (f" error: {error}" if error else ""))


def _record_lines(view: BatchView, shown: Callable[[int], bool] | None = None) -> list[str]:
    lines = []
    records = [r for r in view.records() if shown is None or shown(r.offset)]
    if view.header.is_control:  # a transaction marker, decoded as kafka-dump-log does
        for r in records:
            try:
                commit, epoch = parse_marker(r.key, r.value)
                what = f"endTxnMarker: {'COMMIT' if commit else 'ABORT'} coordinatorEpoch: {epoch}"
            except CorruptRecordError as exc:
                what = f"control record that is no transaction marker ({exc})"
            lines.append(f"| offset: {r.offset} {what}")
        return lines
    for r in records:
        headers = ",".join(f"{text_of(k.encode(), escape=True)}:{text_of(v, escape=True)}" for k, v in r.headers)
        lines.append(f"| offset: {r.offset} timestamp: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
                     f"valueSize: {-1 if r.value is None else len(r.value)} headers: [{headers}] "
                     f"key: {text_of(r.key, escape=True)} value: {text_of(r.value, escape=True)}")
    return lines


@contextlib.contextmanager
def _committed_filter(path: str) -> Iterator[Callable[[int], bool]]:
    """Whether a read_committed reader gets the record at an offset, asked in increasing offset order, of the
    partition holding segment ``path`` (``<store>/<topic>/<n>/<base>.log``, its store opened read-only).

    :raises CommandError: when ``path`` is not in a store's partition directory.
    """
    directory = os.path.dirname(os.path.abspath(path))
    root, topic, number = os.path.dirname(os.path.dirname(directory)), os.path.basename(os.path.dirname(directory)), \
        os.path.basename(directory)
    if not number.isdigit() or not os.path.isfile(os.path.join(root, STORE_FILE)):
        raise CommandError(f"{path}: --isolation-level read_committed asks the partition the segment is in, but "
                           f"this file is not in a store's <store>/<topic>/<partition>/ directory")
    try:
        with Store(root, read_only=True) as store:
            offsets = _committed_offsets(store.topic(topic).partition(int(number)))
            nxt = [next(offsets, None)]

            def shown(offset: int) -> bool:
                while nxt[0] is not None and nxt[0] < offset:
                    nxt[0] = next(offsets, None)
                return nxt[0] == offset

            yield shown
    except PylogError as exc:
        raise CommandError(f"{path}: cannot read its partition read_committed: {exc}") from exc


def _committed_offsets(p: Partition, batch: int = 10_000) -> Iterator[int]:
    """The offsets a read_committed reader of ``p`` gets, from its log start, in order."""
    pos = p.log_start_offset
    while True:
        offsets = p.read_columns(pos, max_records=batch, isolation_level="read_committed").offsets
        if not len(offsets):
            return
        yield from offsets.tolist()
        pos = int(offsets[-1]) + 1


def dump_log(path: str, out: TextIO, records: bool = False, shown: Callable[[int], bool] | None = None) -> list[str]:
    """Print ``path``'s batches to ``out`` (with ``records``, the records too: those ``shown(offset)`` says, when
    given); returns the problems found (``path @ byte N: what``)."""
    problems: list[str] = []
    name_base = _base_offset_of(path)
    batches = count = 0
    prev_last = None if name_base is None else name_base - 1
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            head = os.pread(fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                problems.append(f"{path} @ byte {pos}: torn batch: header cut to {len(head)} of {HEADER_SIZE} bytes")
                break
            h = parse_header(head)
            try:
                check_header(h)
            except CorruptRecordError as exc:
                problems.append(f"{path} @ byte {pos}: corrupt batch header: {exc.reason}; nothing after it can "
                                "be read")
                break
            raw = os.pread(fd, min(h.size, size - pos), pos)  # a damaged length must not allocate 2 GiB
            if len(raw) < h.size:
                problems.append(f"{path} @ byte {pos}: torn batch: {len(raw)} of {h.size} bytes present")
                break
            crc_ok = batch_crc(raw) == h.crc
            error = None
            view = None
            try:
                view = BatchView.from_buffer(raw, 0, header=h, verify_crc=False)
                view.headers()  # the headers section decodes
            except CorruptRecordError as exc:
                error = exc.reason
            print(_batch_line(pos, h, crc_ok, error), file=out)
            if not crc_ok:
                problems.append(f"{path} @ byte {pos}: batch checksum mismatch (stored {h.crc}, computed "
                                f"{batch_crc(raw)})")
            elif error is not None:
                problems.append(f"{path} @ byte {pos}: {error}")
            if prev_last is not None and h.base_offset <= prev_last:
                problems.append(f"{path} @ byte {pos}: base offset {h.base_offset} not above {prev_last}")
            prev_last = h.last_offset
            if records and view is not None and crc_ok and error is None:
                try:
                    for line in _record_lines(view, shown):
                        print(line, file=out)
                except CorruptRecordError as exc:
                    problems.append(f"{path} @ byte {pos}: {exc.reason}")
            batches += 1
            count += h.record_count
            pos += h.size
    print(f"{batches} batch(es), {count} record(s), {size} bytes", file=out)
    return problems


def _dump_txn_index(path: str, out: TextIO) -> list[str]:
    """Print an aborted-transaction index entry by entry (kafka-dump-log's ``--transaction-index`` lines), with
    each entry's checksum checked."""
    with open(path, "rb") as f:
        raw = f.read(64 << 20)
    try:
        entries = scan_index(raw, path)
    except CorruptRecordError as exc:
        return [str(exc)]
    for e, ok in entries:
        print(f"version: 1 producerId: {e.producer_id} firstOffset: {e.first_offset} lastOffset: {e.last_offset} "
              f"lastStableOffset: {e.last_stable_offset} crcValid: {str(ok).lower()}", file=out)
    print(f"{len(entries)} aborted transaction(s)", file=out)
    # A damaged entry's fields are not to be trusted: it is named by its position. Readers raise on it unless it
    # is a torn write (the active segment's last entry with no abort marker after it), which the writer drops.
    problems = [f"{path} @ byte {TXN_INDEX_HEADER_SIZE + i * TXN_INDEX_ENTRY_SIZE}: entry {i} fails its checksum "
                "(read_committed reads raise CorruptRecordError, unless it is a torn write: the active segment's "
                "last entry with no abort marker after it)" for i, (_, ok) in enumerate(entries) if not ok]
    whole = TXN_INDEX_HEADER_SIZE + len(entries) * TXN_INDEX_ENTRY_SIZE
    if len(raw) > whole:
        problems.append(f"{path} @ byte {whole}: torn entry ({len(raw) - whole} of {TXN_INDEX_ENTRY_SIZE} bytes; "
                        "read_committed reads raise CorruptRecordError, unless it is a torn write: the active "
                        "segment's, with no abort marker after the entries that check)")
    return problems


def _dump_index(path: str, out: TextIO) -> list[str]:
    problems: list[str] = []
    base = _base_offset_of(path)
    if base is None:
        return [f"{path}: the file name does not give a base offset"]
    cls = OffsetIndex if path.endswith(INDEX_SUFFIX) else TimeIndex
    try:
        index = cls.open(path, base)
    except CorruptRecordError as exc:
        return [str(exc)]
    try:
        a, b = index.entries()
        print(f"{cls.__name__}: base offset {base}, {len(a)} entries of {index.capacity}, "
              f"{'sealed' if index.sealed else 'live'}", file=out)
        log_path = path[: -len(INDEX_SUFFIX)] + LOG_SUFFIX if cls is OffsetIndex else None
        fd = None
        if log_path is not None and os.path.exists(log_path):
            fd = os.open(log_path, os.O_RDONLY)
        try:
            for x, y in zip(a.tolist(), b.tolist(), strict=True):
                if cls is OffsetIndex:
                    print(f"offset: {base + x} position: {y}", file=out)
                    if fd is not None:
                        head = os.pread(fd, HEADER_SIZE, y)
                        found = parse_header(head).base_offset if len(head) == HEADER_SIZE else None
                        if found != base + x:
                            problems.append(f"{path}: entry for offset {base + x} points at byte {y} of {log_path}, "
                                            f"where the batch has base offset {found}")
                else:
                    print(f"timestamp: {x} offset: {base + y}", file=out)
        finally:
            if fd is not None:
                os.close(fd)
    finally:
        index.close()
    return problems
