"""``pylog groups [list|describe|reset-offsets|delete]``: kafka-consumer-groups for a store.

``pylog groups STORE [GROUP...]`` (no action) is ``groups describe``. Lag is log end - committed offset
(records the group has still to consume); lead is committed offset - log start (records retention may
still delete before the group falls off the log; negative: it already has).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..errors import RebalanceInProgressError, UnknownTopicError
from ..storage.filenames import OFFSETS_TOPIC
from ..store import Store
from ..structs import TopicPartition
from .base import CommandError, ExitCode, non_negative, open_store, timestamp_ms
from .output import Table

__all__ = ["register", "ACTIONS"]

ACTIONS = ("list", "describe", "reset-offsets", "delete")


def register(sub: Any) -> None:
    g = sub.add_parser("groups", help="consumer groups: list, describe (lag, lead, owners), reset offsets, delete",
                       description="Consumer groups of a store. `pylog groups STORE [GROUP...]` is `pylog groups "
                                   "describe STORE [GROUP...]`.")
    actions = g.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="one line per group: generation, members, total lag")
    ls.add_argument("store")
    ls.set_defaults(run=_list)
    d = actions.add_parser("describe", help="members, and per partition: committed offset, log start and end, "
                                            "lag, lead and owner")
    d.add_argument("store")
    d.add_argument("groups", nargs="*", metavar="group", help="only these groups (default: all)")
    d.set_defaults(run=_describe)
    r = actions.add_parser("reset-offsets", help="set a group's committed offsets (the group must have no live "
                                                 "members); prints the plan, commits with --execute",
                           description="Plan new committed offsets for GROUP and, with --execute, commit them. "
                                       "Refused (exit 1) while the group has live members: stop them first.")
    r.add_argument("store")
    r.add_argument("group")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-timestamp", type=timestamp_ms, metavar="TIME",
                    help="the first offset at or after TIME (ms since the epoch or ISO 8601; the log end if none)")
    to.add_argument("--to-offset", type=non_negative, metavar="N", help="offset N (kept within the log)")
    r.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]",
                   help="the partitions to reset: a topic, or some of its partitions; repeatable "
                        "(default: every partition the group has committed offsets for)")
    r.add_argument("--execute", action="store_true", help="commit the plan (without it: a dry run)")
    r.set_defaults(run=_reset)
    rm = actions.add_parser("delete", help="forget groups with no live members: their committed offsets and "
                                           "membership files")
    rm.add_argument("store")
    rm.add_argument("groups", nargs="+", metavar="group")
    rm.set_defaults(run=_delete)


def _committed(store: Store, group: str) -> dict:
    """The group's lag per committed partition; nothing (and no offsets topic created) in a store where no
    group ever committed."""
    return store.group_lag(group) if OFFSETS_TOPIC in store else {}


def _list(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        names = store.consumer_groups()
        if not names:
            print(f"no consumer groups in {store.path}", file=out)
            return ExitCode.OK
        table = Table("GROUP", "GENERATION", "STRATEGY", "MEMBERS", "PARTITIONS", "TOTAL-LAG")
        for group in names:
            desc = store.describe_consumer_group(group)
            lag = _committed(store, group)
            table.add_row(group, desc.generation, desc.protocol or None, len(desc.members), len(lag),
                          sum(v.lag for v in lag.values()))
        table.print(out)
    return ExitCode.OK


def _log_range(store: Store, tp: TopicPartition) -> tuple[int | None, int | None]:
    """The partition's log start and end offsets; (None, None) when its topic is gone."""
    try:
        p = store.topic(tp.topic).partition(tp.partition)
    except UnknownTopicError:  # deleted since the group's assignment was made
        return None, None
    return p.log_start_offset, p.log_end_offset


def _describe(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        names = list(args.groups) or store.consumer_groups()
        if not names:
            print(f"no consumer groups in {store.path}", file=out)
        for i, group in enumerate(names):
            if i:
                print(file=out)
            desc = store.describe_consumer_group(group)
            lags = _committed(store, group)
            print(f"{group}  generation={desc.generation}  strategy={desc.protocol or '-'}  "
                  f"members={len(desc.members)}", file=out)
            owners: dict[TopicPartition, str] = {}
            for m in desc.members:
                owners.update((tp, m.member_id) for tp in m.assignment)
                parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"
                print(f"  member {m.member_id} (client {m.client_id or '-'}, pid {m.pid}): {parts}", file=out)
            if not desc.members and not lags and not desc.generation:
                print("  no such group: no members and no committed offsets", file=out)
            tps = sorted(set(lags) | set(owners))
            if tps:
                table = Table("TOPIC", "PARTITION", "COMMITTED", "LOG-START", "LOG-END", "LAG", "LEAD", "OWNER")
                for tp in tps:
                    lag = lags.get(tp)
                    if lag is None:  # assigned, nothing committed yet
                        table.add_row(tp.topic, tp.partition, None, *_log_range(store, tp), None, None,
                                      owners.get(tp))
                    else:
                        table.add_row(tp.topic, tp.partition, lag.committed, lag.log_start_offset,
                                      lag.log_end_offset, lag.lag, lag.lead, owners.get(tp))
                table.print(out)
            print(f"  total lag {sum(v.lag for v in lags.values())}", file=out)
    return ExitCode.OK


def _targets(store: Store, group: str, specs: list[str]) -> list[TopicPartition]:
    """The partitions named by ``--topic`` specs, or every partition the group has committed offsets for."""
    if not specs:
        tps = sorted(_committed(store, group))
        if not tps:
            raise CommandError(f"group {group!r} has no committed offsets: name the partitions with --topic")
        return tps
    out: list[TopicPartition] = []
    for spec in specs:
        name, _, numbers = spec.partition(":")
        topic = store.topic(name)
        if numbers:
            try:
                wanted = [int(n) for n in numbers.split(",")]
            except ValueError:
                raise CommandError(f"--topic {spec}: partitions must be numbers, e.g. {name}:0,2",
                                   ExitCode.USAGE) from None
            for n in wanted:
                topic.partition(n)  # UnknownTopicError for a partition it lacks
        else:
            wanted = list(range(topic.num_partitions))
        out.extend(TopicPartition(name, n) for n in wanted)
    return sorted(set(out))


def _refuse_if_live(store: Store, group: str, what: str) -> None:
    members = store.describe_consumer_group(group).members
    if members:
        pids = ", ".join(str(m.pid) for m in members)
        raise CommandError(f"group {group!r} has {len(members)} live member(s) (pid {pids}): stop them before "
                           f"{what}", ExitCode.PROBLEMS)


def _reset(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        _refuse_if_live(store, args.group, "resetting its offsets")
        current = _committed(store, args.group)
        plan: dict[TopicPartition, int] = {}
        table = Table("TOPIC", "PARTITION", "LOG-START", "LOG-END", "CURRENT", "NEW")
        for tp in _targets(store, args.group, args.topic):
            p = store.topic(tp.topic).partition(tp.partition)
            start, end = p.log_start_offset, p.log_end_offset
            if args.to_earliest:
                new = start
            elif args.to_latest:
                new = end
            elif args.to_timestamp is not None:
                found = p.offset_for_timestamp(args.to_timestamp)
                new = end if found is None else found
            else:
                new = min(max(args.to_offset, start), end)
            plan[tp] = new
            lag = current.get(tp)
            table.add_row(tp.topic, tp.partition, start, end, None if lag is None else lag.committed, new)
        table.print(out)
        if not args.execute:
            print(f"dry run: nothing committed for group {args.group} (add --execute to commit)", file=out)
            return ExitCode.OK
        try:
            store.commit_offsets(args.group, plan)
        except RebalanceInProgressError as exc:  # a member joined since the check above
            raise CommandError(str(exc), ExitCode.PROBLEMS) from None
        print(f"committed new offsets for {len(plan)} partition(s) of group {args.group}", file=out)
    return ExitCode.OK


def _delete(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        known = set(store.consumer_groups())
        for group in args.groups:
            if group not in known:
                raise CommandError(f"no consumer group {group!r} in {store.path}")
        for group in args.groups:
            _refuse_if_live(store, group, "deleting it")
        for group in args.groups:
            try:
                n = store.delete_consumer_group(group)
            except RebalanceInProgressError as exc:
                raise CommandError(str(exc), ExitCode.PROBLEMS) from None
            print(f"deleted group {group} ({n} committed offset(s))", file=out)
    return ExitCode.OK
