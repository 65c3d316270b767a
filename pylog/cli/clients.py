"""``pylog produce`` and ``pylog consume``: the console producer and consumer.

Both speak the same two formats, so ``consume --format json | produce --format json`` copies records:

- **text**: one record per line. ``produce`` reads a line's bytes as the value (with ``--key-separator``,
  the bytes before the first separator are the key); ``consume`` prints the value, optionally preceded by
  timestamp, partition, offset, headers and key.
- **json**: one object per line, ``{"key", "value", "headers": [[name, value], ...], "partition",
  "timestamp"}`` (``consume`` adds ``topic``, ``offset``, ``timestamp_type``). Bytes that are UTF-8 are
  strings; other bytes are ``{"base64": "..."}``; a null value is a tombstone.

``consume --group`` commits only what it has printed and flushed (at most every :data:`_COMMIT_EVERY`
seconds and when it stops), so a reader that goes away (``| head``) or Ctrl-C loses nothing for the group.
"""

from __future__ import annotations

import argparse
import codecs
import io
import json
import os
import select
import signal
import stat
import sys
import threading
import time
from typing import Any, Callable, Iterator, NamedTuple, TextIO

from ..clients.consumer import ConsumerRecord
from ..errors import BadInputLineError, PylogError
from ..structs import TopicPartition
from .base import CommandError, ExitCode, key_value, non_negative, open_store, positive, timestamp_ms
from .output import bytes_from_json, json_bytes, text_of

__all__ = ["register"]

#: Records between two waits for the producer's futures (bounds the futures held in memory).
_PRODUCE_CHUNK = 10_000
#: How long one poll of ``consume`` waits for records (ms): also how often ``--follow`` looks at its pipe.
_POLL_MS = 200
#: Least time between two commits of ``consume --group`` (seconds); it also commits when it stops.
_COMMIT_EVERY = 1.0
#: How long ``consume --group`` without ``--follow`` waits for partitions another member still holds (s).
_PENDING_WAIT = 10.0


def register(sub: Any) -> None:
    p = sub.add_parser("produce", help="send records read from stdin, one per line",
                       description="Send stdin's lines to TOPIC as records (text: the line is the value; json: "
                                   "one object per line, as `pylog consume --format json` prints them). Prints "
                                   "a summary: records, bytes, partitions and offsets.")
    p.add_argument("store")
    p.add_argument("topic")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--key-separator", metavar="SEP",
                   help="text: each line is KEY SEP VALUE (split at the first SEP; \\t allowed); a line "
                        "without SEP is an error")
    p.add_argument("--header", type=key_value, action="append", default=[], metavar="NAME=VALUE",
                   help="a header added to every record; repeatable")
    p.add_argument("--partition", type=non_negative, help="send every record to this partition (default: by "
                                                           "key, Kafka's murmur2; key-less records stick)")
    p.add_argument("--null-marker", metavar="TEXT", help="text: a value equal to TEXT is sent as null (a "
                                                          "tombstone)")
    p.add_argument("--acks", choices=("0", "1", "all"), default="1",
                   help="1: appended (default); all: fsynced before the summary; 0: don't wait for offsets")
    p.add_argument("--compression", choices=("none", "lz4"), default="none")
    p.add_argument("--linger-ms", type=non_negative, default=0, help="wait this long to batch records")
    p.set_defaults(run=_produce)

    c = sub.add_parser("consume", help="print records of a topic",
                       description="Print TOPIC's records from the start (or --from latest, --offset, "
                                   "--timestamp), or as a member of a consumer group (--group: from the group's "
                                   "committed offsets, committing what it printed). Without --follow it stops "
                                   "at the log end it found; with it, it waits for new records until Ctrl-C or "
                                   "until the reader of its output goes away. The record count goes to stderr.")
    c.add_argument("store")
    c.add_argument("topic")
    start = c.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start", choices=("earliest", "latest"), default="earliest",
                       help="where to start (with --group: where a partition without a committed offset "
                            "starts); default earliest")
    start.add_argument("--offset", type=non_negative, help="start at this offset in each partition read (an "
                                                           "offset below the log start starts there)")
    start.add_argument("--timestamp", type=timestamp_ms, metavar="TIME",
                       help="start at the first record at or after TIME (ms since the epoch or ISO 8601)")
    c.add_argument("--partition", type=non_negative, action="append", metavar="N",
                   help="only this partition; repeatable (default: all)")
    c.add_argument("--group", help="consume as a member of this consumer group and commit what is printed")
    c.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted",
                   help="read_committed: only records of committed transactions, up to the last stable offset "
                        "(default read_uncommitted: every record, as kafka-console-consumer)")
    c.add_argument("--max-messages", type=positive, metavar="N", help="stop after N records")
    c.add_argument("-f", "--follow", action="store_true", help="keep waiting for new records, like tail -f")
    c.add_argument("--format", choices=("text", "json"), default="text")
    for field in ("timestamp", "partition", "offset", "headers", "key"):
        c.add_argument(f"--print-{field}", action="store_true", help=f"text: print the {field} (tab-separated)")
    c.add_argument("--key-separator", default="\t", metavar="SEP",
                   help="text: between key and value with --print-key (default tab)")
    c.add_argument("--null-marker", default="null", metavar="TEXT", help="text: how a null key or value prints")
    c.set_defaults(run=_consume)


def _unescape(sep: str) -> str:
    return codecs.decode(sep, "unicode_escape") if "\\" in sep else sep


# ---------------------------------------------------------------------------------------------- produce

class _Outgoing(NamedTuple):
    value: bytes | None
    key: bytes | None
    headers: list[Any]  # (name, bytes | None) pairs; Producer.send accepts None values
    partition: int | None
    timestamp: int | None


def _stdin_lines() -> Iterator[bytes]:
    """Lines of stdin as bytes, without their line end (``\\n`` or ``\\r\\n``)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (e.g. replaced in a test)
        lines: Iterator[bytes] = (line.encode("utf-8", "surrogateescape") for line in sys.stdin)
    else:
        lines = iter(stream)
    for line in lines:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


def _text_parser(args: argparse.Namespace) -> Callable[[bytes], _Outgoing]:
    sep = _unescape(args.key_separator).encode() if args.key_separator is not None else None
    null = args.null_marker.encode() if args.null_marker is not None else None
    headers = [(k, v.encode()) for k, v in args.header]

    def parse(line: bytes) -> _Outgoing:
        key = None
        if sep is not None:
            key, found, line = line.partition(sep)
            if not found:
                raise BadInputLineError(f"no key separator {args.key_separator!r}")
        value = None if null is not None and line == null else line
        return _Outgoing(value, key, headers, args.partition, None)

    return parse


def _json_parser(args: argparse.Namespace) -> Callable[[bytes], _Outgoing]:
    extra = [(k, v.encode()) for k, v in args.header]

    def parse(line: bytes) -> _Outgoing:
        try:
            doc = json.loads(line)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            raw = doc.get("headers") or []
            pairs = raw.items() if isinstance(raw, dict) else raw
            headers = []
            for pair in pairs:
                if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise ValueError("headers must be [[name, value], ...] or {name: value}")
                headers.append((pair[0], bytes_from_json(pair[1], f"header {pair[0]!r}")))
            partition = args.partition if args.partition is not None else doc.get("partition")
            timestamp = doc.get("timestamp")
            for name, v in (("partition", partition), ("timestamp", timestamp)):
                if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                    raise ValueError(f"{name} must be an integer")
            return _Outgoing(bytes_from_json(doc.get("value"), "value"), bytes_from_json(doc.get("key"), "key"),
                             headers + extra, partition, timestamp)
        except ValueError as exc:  # json.JSONDecodeError is one
            raise BadInputLineError(str(exc)) from None

    return parse


class _Sent:
    """What a produce run sent: counts, bytes and, per partition, the first and last offsets."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.partitions: dict[int, list[int]] = {}  # partition -> [records, first offset, last offset]

    def collect(self, futures: list[Any]) -> None:
        """Wait for ``futures`` (in send order), count them and empty the list."""
        for f in futures:
            meta = f.get()
            self.records += 1
            self.bytes += max(meta.serialized_value_size, 0) + max(meta.serialized_key_size, 0)
            st = self.partitions.get(meta.partition)
            if st is None:
                self.partitions[meta.partition] = [1, meta.offset, meta.offset]
            else:
                st[0] += 1
                st[2] = meta.offset
        futures.clear()

    def summary(self, topic: str, seconds: float) -> str:
        lines = [f"produced {self.records} record(s), {self.bytes} bytes, to {topic} in {seconds:.2f} s"]
        for number, (count, first, last) in sorted(self.partitions.items()):
            where = f"offsets {first}-{last}" if first >= 0 else "offsets not awaited (acks=0)"
            lines.append(f"  partition {number}: {count} record(s), {where}")
        return "\n".join(lines)


def _produce(args: argparse.Namespace, out: TextIO) -> ExitCode:
    parse = _json_parser(args) if args.format == "json" else _text_parser(args)
    acks: int | str = "all" if args.acks == "all" else int(args.acks)
    sent = _Sent()
    bad: str | None = None
    interrupted = False
    with open_store(args.store) as store:
        topic = store.topic(args.topic)
        if args.partition is not None and args.partition >= topic.num_partitions:
            raise CommandError(f"topic {args.topic} has no partition {args.partition} "
                               f"(it has {topic.num_partitions})")
        started = time.monotonic()
        with store.producer(acks=acks, linger_ms=args.linger_ms,
                            compression_type=None if args.compression == "none" else args.compression) as producer:
            pending: list[Any] = []
            lineno = 0
            try:
                for line in _stdin_lines():
                    lineno += 1  # counted here, not by enumerate: the except clauses below report it
                    rec = parse(line)
                    pending.append(producer.send(args.topic, rec.value, key=rec.key, headers=rec.headers or None,
                                                 partition=rec.partition, timestamp_ms=rec.timestamp))
                    if len(pending) >= _PRODUCE_CHUNK:
                        sent.collect(pending)
            except (BadInputLineError, PylogError, ValueError) as exc:  # a bad line, or a record the producer refuses
                bad = f"stdin line {lineno}: {exc}; stopped there"
            except KeyboardInterrupt:
                interrupted = True
            producer.flush()
            sent.collect(pending)
        print(sent.summary(args.topic, time.monotonic() - started), file=out)
    if bad is not None:
        raise CommandError(bad)
    return ExitCode.INTERRUPTED if interrupted else ExitCode.OK


# ---------------------------------------------------------------------------------------------- consume

def _text_formatter(args: argparse.Namespace) -> Callable[[ConsumerRecord], str]:
    null = args.null_marker
    key_sep = _unescape(args.key_separator)

    def fmt(r: ConsumerRecord) -> str:
        fields = []
        if args.print_timestamp:
            fields.append(f"{'LogAppendTime' if r.timestamp_type else 'CreateTime'}:{r.timestamp}")
        if args.print_partition:
            fields.append(f"Partition:{r.partition}")
        if args.print_offset:
            fields.append(f"Offset:{r.offset}")
        if args.print_headers:
            fields.append(",".join(f"{k}:{text_of(v, null)}" for k, v in r.headers) or "NO_HEADERS")
        value = text_of(r.value, null)
        if args.print_key:
            value = text_of(r.key, null) + key_sep + value
        fields.append(value)
        return "\t".join(fields) + "\n"

    return fmt


def _json_line(r: ConsumerRecord) -> str:
    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                       "timestamp_type": "LogAppendTime" if r.timestamp_type else "CreateTime",
                       "key": json_bytes(r.key), "value": json_bytes(r.value),
                       "headers": [[k, json_bytes(v)] for k, v in r.headers]}, ensure_ascii=False) + "\n"


def _reader_gone(out: TextIO) -> bool:
    """True when ``out`` is a pipe whose reading end is closed (``consume -f | head`` after head quit)."""
    try:
        fd = out.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR (reader gone) is reported whatever the mask
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


class _Run:
    """One consume run: the consumer, what was printed, and the group commits of what was printed."""

    def __init__(self, args: argparse.Namespace, consumer: Any, out: TextIO) -> None:
        self.args = args
        self.consumer = consumer
        self.out = out
        self.fmt = _json_line if args.format == "json" else _text_formatter(args)
        self.printed = 0
        self.done: dict[TopicPartition, int] = {}  # next offset after the last printed record
        self.committed: dict[TopicPartition, int] = {}
        self.last_commit = time.monotonic()

    def remaining(self) -> int | None:
        return None if self.args.max_messages is None else self.args.max_messages - self.printed

    def poll(self) -> bool:
        """Print one poll's records; False when the poll returned none."""
        left = self.remaining()
        batch = self.consumer.poll(timeout_ms=_POLL_MS, max_records=min(500, left) if left is not None else None)
        if batch:
            fmt, write = self.fmt, self.out.write
            for tp, recs in batch.items():
                write("".join(map(fmt, recs)))
                self.printed += len(recs)
                self.done[tp] = recs[-1].offset + 1
            self.out.flush()
        if self.args.group is not None and time.monotonic() - self.last_commit >= _COMMIT_EVERY:
            self.commit()
        return bool(batch)

    def commit(self) -> None:
        """Commit, for a group, the offsets after the records printed (and flushed) so far."""
        self.last_commit = time.monotonic()
        todo = {tp: off for tp, off in self.done.items() if self.committed.get(tp) != off}
        if self.args.group is None or not todo:
            return
        self.consumer.commit(todo)
        self.committed.update(todo)


def _start_positions(args: argparse.Namespace, consumer: Any, store: Any,
                     tps: list[TopicPartition]) -> list[TopicPartition]:
    """Seek each partition where the arguments say; returns those whose start (``--offset``, ``--timestamp``)
    lies past their log end (they start at the end)."""
    past = []
    if args.offset is not None:
        for tp in tps:
            p = store.topic(tp.topic).partition(tp.partition)
            if args.offset > p.log_end_offset:
                past.append(tp)
            consumer.seek(tp, min(max(args.offset, p.log_start_offset), p.log_end_offset))
    elif args.timestamp is not None:
        for tp, found in consumer.offsets_for_times({tp: args.timestamp for tp in tps}).items():
            if found is None:
                past.append(tp)
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, found.offset)
    elif args.start == "latest":
        consumer.seek_to_end(*tps)
    else:
        consumer.seek_to_beginning(*tps)
    return past


def _group_caught_up(run: _Run, waited_since: list[float]) -> bool:
    """Without --follow, for a group member: is every partition it owns read to its log end, with none
    pending? Partitions another member still holds are waited for :data:`_PENDING_WAIT` seconds."""
    metrics = run.consumer.metrics()
    parts = [m for m in metrics.values() if "owned" in m]  # the partitions (not the metric groups)
    if any(m["owned"] and (m["lag"] is None or m["lag"] > 0) for m in parts):
        return False
    pending = sum(1 for m in parts if not m["owned"])
    if not pending:
        return True
    if not waited_since:
        waited_since.append(time.monotonic())
    if time.monotonic() - waited_since[0] < _PENDING_WAIT:
        return False
    print(f"pylog: {pending} partition(s) assigned here are still held by another member of group "
          f"{run.args.group}; stopping without them", file=sys.stderr)
    return True


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm() -> Callable[[], None]:
    """Make SIGTERM (``kill``, a service manager stopping us) end a consume as Ctrl-C does: commit, leave
    the group. Returns what puts the previous handler back (nothing to do outside the main thread, where
    handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)

    return restore


def _end_of(p: Any, isolation_level: str) -> int:
    """Where a consume without ``--follow`` stops in ``p``: the log end, or read_committed's last stable offset."""
    return p.last_stable_offset if isolation_level == "read_committed" else p.log_end_offset


def _consume(args: argparse.Namespace, out: TextIO) -> ExitCode:
    if args.group is not None and (args.partition or args.offset is not None or args.timestamp is not None):
        raise CommandError("--group reads the partitions the group assigns, from its committed offsets: "
                           "--partition, --offset and --timestamp do not apply (see `pylog groups "
                           "reset-offsets`)", ExitCode.USAGE)
    with open_store(args.store) as store:
        topic = store.topic(args.topic)
        numbers = args.partition if args.partition else range(topic.num_partitions)
        tps = [TopicPartition(args.topic, n) for n in dict.fromkeys(numbers)]
        consumer = store.consumer(group_id=args.group, client_id="pylog-consume", enable_auto_commit=False,
                                  auto_offset_reset=args.start, isolation_level=args.isolation_level)
        run = _Run(args, consumer, out)
        ends: dict[TopicPartition, int] | None = None
        waited: list[float] = []
        restore_sigterm = _stop_on_sigterm()
        try:
            if args.group is None:
                consumer.assign(tps)  # raises for a partition the topic lacks
                past = _start_positions(args, consumer, store, tps)
                ends = {tp: _end_of(store.topic(tp.topic).partition(tp.partition), args.isolation_level)
                        for tp in tps}
                if past:
                    where = ", ".join(f"{tp.topic}-{tp.partition} (log end {ends[tp]})" for tp in past)
                    asked = f"offset {args.offset}" if args.offset is not None \
                        else "no record at or after the timestamp"
                    if args.follow:
                        print(f"pylog: {asked}: past the end of {where}; waiting there for new records",
                              file=sys.stderr)
                    elif len(past) == len(tps):
                        raise CommandError(f"{asked}: past the end of {where}, so there is nothing to print; "
                                           "use --follow to wait for new records, or --from earliest")
                    else:
                        print(f"pylog: {asked}: past the end of {where}; nothing to print there", file=sys.stderr)
            else:
                consumer.subscribe([args.topic])
            while run.remaining() != 0:
                # Without --follow, assigned partitions stop at the log ends found at the start (or when a
                # poll finds nothing more: compaction may have removed the last offsets below the end).
                if ends is not None and not args.follow and all(consumer.position(tp) >= e for tp, e in ends.items()):
                    break
                if run.poll():
                    continue
                if args.follow:
                    if _reader_gone(out):
                        break
                elif ends is not None or _group_caught_up(run, waited):
                    break
        except KeyboardInterrupt:
            pass  # Ctrl-C (or SIGTERM) is how --follow ends; a plain consume stopped early ends the same way
        except BrokenPipeError:
            pass  # the reader went away (consume | head): what it read is committed below
        finally:
            try:
                run.commit()
            finally:
                consumer.close(autocommit=False)
                restore_sigterm()
        print(f"Processed a total of {run.printed} messages", file=sys.stderr)
    return ExitCode.OK
