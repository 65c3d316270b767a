"""``pylog verify`` (with ``--remote``, the bucket the store ships to as well), ``pylog retention``, ``pylog
compact`` and ``pylog delete-records``.

Verification opens partitions as a reader (no lock, nothing written), so it is safe on a live store.
Maintenance commands become the partitions' writer for the moment they run: a partition another process
writes is reported as locked (its writer's own background thread maintains it) and the exit code is 1.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence, TextIO

from ..errors import PartitionLockedError, PylogError
from ..store import Store
from .base import ExitCode, non_negative, open_store, partition_writers
from .output import Progress, report_partition
from .remote_check import client_options, objects_of, verify_remote

__all__ = ["register", "verify"]


def register(sub: Any) -> None:
    v = sub.add_parser("verify", help="check every batch (CRC) and index of a store; exit 1 on any problem",
                       description="Full integrity check of every segment and index, as a reader (safe on a live "
                                   "store). Prints one line per partition and every problem with its file and "
                                   "byte position; exit 1 on any problem. A progress bar shows on a terminal.")
    v.add_argument("store", nargs="?", default=".", help="the store (default: the current directory)")
    v.add_argument("topics", nargs="*", metavar="topic", help="only these topics (default: all)")
    v.add_argument("--remote", metavar="LOCATION", default="",
                   help="also check the bucket the store ships to (s3://bucket/prefix, its remote.storage.location) "
                        "against its remote manifests, as `pylog verify-remote` does")
    v.add_argument("--full", action="store_true", help="with --remote: download every object and check its CRC-32C")
    client_options(v)
    v.set_defaults(run=_verify)
    r = sub.add_parser("retention", help="enforce retention now")
    r.add_argument("store")
    r.add_argument("topic", nargs="?", help="only this topic (default: all)")
    r.set_defaults(run=_retention)
    c = sub.add_parser("compact", help="compact a topic now, whatever its dirty ratio")
    c.add_argument("store")
    c.add_argument("topic")
    c.add_argument("--partition", type=int, help="only this partition")
    c.set_defaults(run=_compact)
    d = sub.add_parser("delete-records", help="delete the records below OFFSET (Kafka's DeleteRecords)")
    d.add_argument("store")
    d.add_argument("topic")
    d.add_argument("partition", type=non_negative)
    d.add_argument("offset", type=non_negative)
    d.set_defaults(run=_delete_records)
    rp = sub.add_parser("repair", help="cut a damaged partition's log at its first bad batch (drops what follows)",
                        description="Become the partition's writer and re-validate its active segment (or, after "
                                    "a crash, every segment from the recovery point), cutting the log at the first "
                                    "batch that fails its checks; the records from there on are dropped and their "
                                    "offsets given to the next appends. For a partition whose appends are refused "
                                    "because its active segment is damaged in the middle after a clean close. Run "
                                    "`pylog verify` first, and copy the partition directory if what follows the "
                                    "damage matters.")
    rp.add_argument("store")
    rp.add_argument("topic")
    rp.add_argument("partition", type=non_negative)
    rp.set_defaults(run=_repair)


def verify(store: Store, topic_names: Sequence[str], out: TextIO) -> int:
    """Check every partition of ``topic_names`` (all when empty), printing a line per partition and each
    problem; returns the number of problems. A partition that cannot even be opened counts as one."""
    problems = 0
    parts = []
    for name in topic_names or store.topics():
        try:
            parts.extend(store.topic(name).partitions)
        except PylogError as exc:  # e.g. a damaged topic.json
            problems += 1
            print(f"{name}: cannot be opened\n  {exc}", file=out)
    with Progress("verify", sum(p.size_bytes() for p in parts), " bytes") as progress:
        for p in parts:
            # Looked up just before each check: writers taking turns hold the lock only now and then.
            writers = partition_writers([p.directory])
            try:
                found = p.check(writer_active=None if writers is None else writers.get(p.directory) is not None)
            except (PylogError, OSError) as exc:
                found = [str(exc)]
            problems += len(found)
            report_partition(out, f"{p.topic}-{p.number}", f"{len(p.segments)} segments", p.log_start_offset,
                             p.log_end_offset, found)
            progress.advance(p.size_bytes())
    print("verify: " + ("no problems" if not problems else f"{problems} problem(s)"), file=out)
    return problems


def _verify(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        problems = verify(store, args.topics, out)
    if args.remote:
        problems += verify_remote(objects_of(args.remote, args), args.topics, args.full, out)
    return ExitCode.OK if not problems else ExitCode.PROBLEMS


def _retention(args: argparse.Namespace, out: TextIO) -> ExitCode:
    locked = 0
    with open_store(args.store) as store:
        for r in store.enforce_retention(args.topic):
            if r.reasons == ["locked"]:
                locked += 1
                print(f"{r.topic}-{r.partition}: locked by another writer, skipped", file=out)
            elif r.reasons == ["damaged"]:
                locked += 1
                print(f"{r.topic}-{r.partition}: damaged, skipped (`pylog verify` shows the damage, "
                      f"`pylog repair STORE {r.topic} {r.partition}` cuts the log there)", file=out)
            else:
                print(f"{r.topic}-{r.partition}: deleted {len(r.deleted_segments)} segment(s), {r.bytes_deleted} "
                      f"bytes ({','.join(r.reasons) or 'nothing due'}); log start {r.log_start_offset}", file=out)
    return ExitCode.OK if not locked else ExitCode.PROBLEMS


def _compact(args: argparse.Namespace, out: TextIO) -> ExitCode:
    locked = 0
    with open_store(args.store) as store:
        topic = args.topic
        numbers = [args.partition] if args.partition is not None else range(store.topic(topic).num_partitions)
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
                txn = (f", {r.aborted_removed} of aborted transactions, {r.markers_removed} transaction markers"
                       if r.aborted_removed or r.markers_removed else "")
                print(f"{r.topic}-{r.partition}: read {r.records_read} records, kept {r.records_written}, removed "
                      f"{r.records_removed} ({r.tombstones_removed} tombstones{txn}); segments {r.segments_before} "
                      f"-> {r.segments_after}; {r.seconds:.2f} s", file=out)
    return ExitCode.OK if not locked else ExitCode.PROBLEMS


def _delete_records(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        start = store.delete_records(args.topic, args.partition, args.offset)
        print(f"{args.topic}-{args.partition}: log start offset {start}", file=out)
    return ExitCode.OK


def _repair(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        p = store.topic(args.topic).partition(args.partition)
        try:
            stats = p.repair()
        except PartitionLockedError:
            print(f"{args.topic}-{args.partition}: locked by another writer; stop it first", file=out)
            return ExitCode.PROBLEMS
        if not stats:
            print(f"{args.topic}-{args.partition}: nothing to repair", file=out)
        else:
            print(f"{args.topic}-{args.partition}: {stats['segments_validated']} segment(s) validated, "
                  f"{stats['bytes_dropped']} byte(s) dropped, {stats['segments_deleted']} segment(s) deleted; "
                  f"log end offset {p.log_end_offset}", file=out)
    return ExitCode.OK
