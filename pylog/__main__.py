"""The ``pylog`` command line: look inside a store and check it.

    pylog topics STORE            topics, partitions, segments, log start/end offsets, sizes
    pylog verify STORE [TOPIC]    full integrity check of every segment and index; exit 1 on any problem
    pylog retention STORE [TOPIC]                   enforce retention now; print what was deleted
    pylog compact STORE TOPIC [--partition N]       compact now (whatever the dirty ratio)
    pylog delete-records STORE TOPIC PARTITION OFFSET   make OFFSET the partition's log start
    pylog groups STORE [GROUP...] consumer groups: generation, live members and their partitions, and per
                                  partition committed offset, log end, lag and lead

``main(argv) -> int`` is the whole program (tested in-process); exit codes are :class:`ExitCode`.
Verification opens partitions as a reader (no lock, nothing written), so it is safe on a live store.
Maintenance commands become the partitions' writer for the moment they run: a partition another process
writes is reported as locked (its writer's own background thread maintains it) and the exit code is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from enum import IntEnum
from typing import Sequence, TextIO

from . import __version__
from .errors import PartitionLockedError, PylogError
from .filenames import STORE_FILE
from .log import Store

__all__ = ["main", "ExitCode"]


class ExitCode(IntEnum):
    OK = 0
    PROBLEMS = 1  # verify found damage
    USAGE = 2  # bad arguments (argparse's own code)
    ERROR = 3  # the store could not be read


def _topics(store: Store, out: TextIO) -> ExitCode:
    names = store.topics()
    if not names:
        print(f"no topics in {store.path}", file=out)
    for name in names:
        topic = store.topic(name)
        overrides = topic.config.overrides
        print(f"{name}  partitions={topic.num_partitions}"
              + (f"  config={overrides}" if overrides else ""), file=out)
        for p in topic.partitions:
            print(f"  {p.number}: offsets [{p.log_start_offset}, {p.log_end_offset})  segments={len(p.segments)}"
                  f"  bytes={p.size_bytes()}", file=out)
    return ExitCode.OK


def _verify(store: Store, topic_names: Sequence[str], out: TextIO) -> ExitCode:
    problems = 0
    for name in topic_names or store.topics():
        for p in store.topic(name).partitions:
            found = p.check()
            problems += len(found)
            status = "ok" if not found else f"{len(found)} problem(s)"
            print(f"{name}-{p.number}: {len(p.segments)} segments, offsets [{p.log_start_offset}, "
                  f"{p.log_end_offset}): {status}", file=out)
            for line in found:
                print(f"  {line}", file=out)
    print("verify: " + ("no problems" if not problems else f"{problems} problem(s)"), file=out)
    return ExitCode.OK if not problems else ExitCode.PROBLEMS


def _retention(store: Store, topic: str | None, out: TextIO) -> ExitCode:
    locked = 0
    for r in store.enforce_retention(topic):
        if r.reasons == ["locked"]:
            locked += 1
            print(f"{r.topic}-{r.partition}: locked by another writer, skipped", file=out)
        else:
            print(f"{r.topic}-{r.partition}: deleted {len(r.deleted_segments)} segment(s), {r.bytes_deleted} bytes"
                  f" ({','.join(r.reasons) or 'nothing due'}); log start {r.log_start_offset}", file=out)
    return ExitCode.OK if not locked else ExitCode.PROBLEMS


def _compact(store: Store, topic: str, partition: int | None, out: TextIO) -> ExitCode:
    numbers = [partition] if partition is not None else range(store.topic(topic).num_partitions)
    locked = 0
    for number in numbers:
        try:
            [r] = store.compact(topic, number)
        except PartitionLockedError:
            locked += 1
            print(f"{topic}-{number}: locked by another writer, skipped", file=out)
            continue
        if r.skipped:
            print(f"{r.topic}-{r.partition}: skipped: {r.skipped}", file=out)
        else:
            print(f"{r.topic}-{r.partition}: read {r.records_read} records, kept {r.records_written}, removed "
                  f"{r.records_removed} ({r.tombstones_removed} tombstones); segments {r.segments_before} -> "
                  f"{r.segments_after}; {r.seconds:.2f} s", file=out)
    return ExitCode.OK if not locked else ExitCode.PROBLEMS


def _groups(store: Store, groups: Sequence[str], out: TextIO) -> ExitCode:
    names = list(groups) or store.consumer_groups()
    if not names:
        print(f"no consumer groups in {store.path}", file=out)
    for group in names:
        desc = store.describe_consumer_group(group)
        print(f"{group}  generation={desc.generation}  strategy={desc.protocol or '-'}  members={len(desc.members)}",
              file=out)
        for m in desc.members:
            parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"
            print(f"  member {m.member_id} (pid {m.pid}): {parts}", file=out)
        total = 0
        for tp, lag in store.group_lag(group).items():
            total += lag.lag
            print(f"  {tp.topic}-{tp.partition}: committed {lag.committed}  log end {lag.log_end_offset}  "
                  f"lag {lag.lag}  lead {lag.lead}", file=out)
        print(f"  total lag {total}", file=out)
    return ExitCode.OK


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="pylog", description="Look inside a pylog store.")
    parser.add_argument("--version", action="version", version=f"pylog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("topics", help="list topics with their partitions, offsets and sizes")
    t.add_argument("store")
    v = sub.add_parser("verify", help="check every segment and index; exit 1 on any problem")
    v.add_argument("store")
    v.add_argument("topics", nargs="*", help="only these topics (default: all)")
    r = sub.add_parser("retention", help="enforce retention now")
    r.add_argument("store")
    r.add_argument("topic", nargs="?", help="only this topic (default: all)")
    c = sub.add_parser("compact", help="compact a topic now, whatever its dirty ratio")
    c.add_argument("store")
    c.add_argument("topic")
    c.add_argument("--partition", type=int, help="only this partition")
    d = sub.add_parser("delete-records", help="delete the records below OFFSET (Kafka's DeleteRecords)")
    d.add_argument("store")
    d.add_argument("topic")
    d.add_argument("partition", type=_non_negative)
    d.add_argument("offset", type=_non_negative)
    g = sub.add_parser("groups", help="consumer groups: members, assignment, committed offsets and lag")
    g.add_argument("store")
    g.add_argument("groups", nargs="*", help="only these groups (default: all)")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.store, STORE_FILE)):  # never create a store by looking at it
        print(f"pylog: {args.store} is not a pylog store (no {STORE_FILE})", file=sys.stderr)
        return ExitCode.ERROR
    try:
        with Store(args.store, log_cleaner_enable=False) as store:
            if args.command == "topics":
                return _topics(store, out)
            if args.command == "retention":
                return _retention(store, args.topic, out)
            if args.command == "compact":
                return _compact(store, args.topic, args.partition, out)
            if args.command == "groups":
                return _groups(store, args.groups, out)
            if args.command == "delete-records":
                start = store.delete_records(args.topic, args.partition, args.offset)
                print(f"{args.topic}-{args.partition}: log start offset {start}", file=out)
                return ExitCode.OK
            return _verify(store, args.topics, out)
    except PylogError as exc:
        print(f"pylog: {exc}", file=sys.stderr)
        return ExitCode.ERROR


def run() -> None:
    """Console-script entry: ``main()`` with a quiet exit when the output pipe closes (``pylog ... | head``)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = ExitCode.OK
    sys.exit(code)


if __name__ == "__main__":
    run()
