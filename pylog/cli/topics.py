"""``pylog topics [list|create|delete|describe]``: kafka-topics for a store.

``pylog topics STORE`` (no action) is ``topics list STORE``.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..config import SETTINGS
from ..errors import PartitionLockedError, TopicExistsError
from ..storage.filenames import OFFSETS_TOPIC, is_internal_topic
from ..store import Store
from .base import CommandError, ExitCode, key_value, open_store, partition_writers, positive
from .output import Table

__all__ = ["register", "ACTIONS"]

ACTIONS = ("list", "create", "delete", "describe")


def register(sub: Any) -> None:
    p = sub.add_parser("topics", help="list, create, delete and describe topics",
                       description="Topics of a store. `pylog topics STORE` is `pylog topics list STORE`.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="topics with their partitions, offsets, segments and sizes")
    ls.add_argument("store")
    ls.add_argument("--all", action="store_true", help="also pylog's internal topics (__consumer_offsets)")
    ls.set_defaults(run=_list)
    c = actions.add_parser("create", help="create a topic (and the store, if there is none yet)")
    c.add_argument("store")
    c.add_argument("topic")
    c.add_argument("--partitions", type=positive, default=1, help="number of partitions (default 1)")
    c.add_argument("--config", type=key_value, action="append", default=[], metavar="NAME=VALUE",
                   help="a topic setting, Kafka's name (e.g. cleanup.policy=compact); repeatable")
    c.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    c.set_defaults(run=_create)
    d = actions.add_parser("delete", help="delete topics and all their data (refused while another process "
                                          "writes them)")
    d.add_argument("store")
    d.add_argument("topics", nargs="+", metavar="topic")
    d.set_defaults(run=_delete)
    ds = actions.add_parser("describe", help="partitions (log start/end, segments, bytes, writer) and config, "
                                             "overrides marked")
    ds.add_argument("store")
    ds.add_argument("topics", nargs="*", metavar="topic", help="only these topics (default: all but internal ones)")
    ds.add_argument("--all", action="store_true", help="also pylog's internal topics (__consumer_offsets)")
    ds.set_defaults(run=_describe)


def _visible(names: list[str], show_all: bool) -> list[str]:
    """The user's topics; pylog's internal ones (``__consumer_offsets``) only with ``--all``."""
    return names if show_all else [n for n in names if not is_internal_topic(n)]


def _list(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        names = _visible(store.topics(), args.all)
        if not names:
            print(f"no topics in {store.path}", file=out)
        for name in names:
            topic = store.topic(name)
            overrides = topic.config.overrides
            print(f"{name}  partitions={topic.num_partitions}"
                  + (f"  config: {_overrides(overrides)}" if overrides else ""), file=out)
            for p in topic.partitions:
                print(f"  {p.number}: offsets [{p.log_start_offset}, {p.log_end_offset})  segments={len(p.segments)}"
                      f"  bytes={p.size_bytes()}", file=out)
    return ExitCode.OK


def _create(args: argparse.Namespace, out: TextIO) -> ExitCode:
    config = dict(args.config)  # values are parsed by the library's own rules (InvalidConfigError)
    with open_store(args.store, create=True) as store:
        try:
            topic = store.create_topic(args.topic, args.partitions, config)
        except TopicExistsError:
            if not args.if_not_exists:
                raise
            print(f"topic {args.topic} already exists", file=out)
            return ExitCode.OK
        overrides = topic.config.overrides
        print(f"created topic {topic.name}: {topic.num_partitions} partition(s)"
              + (f"; config: {_overrides(overrides)}" if overrides else ""), file=out)
    return ExitCode.OK


def _delete(args: argparse.Namespace, out: TextIO) -> ExitCode:
    locked = 0
    with open_store(args.store) as store:
        for name in args.topics:
            if name == OFFSETS_TOPIC:
                raise CommandError(f"{name} holds every consumer group's committed offsets; remove groups with "
                                   "`pylog groups delete`")
            store.topic(name)  # UnknownTopicError before anything is deleted
        for name in args.topics:
            try:
                store.delete_topic(name)
            except PartitionLockedError:
                locked += 1
                print(f"{name}: locked by another writer, not deleted", file=out)
                continue
            print(f"deleted topic {name}", file=out)
    return ExitCode.OK if not locked else ExitCode.PROBLEMS


def _value(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def _overrides(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in sorted(overrides.items()))


def describe_topic(store: Store, name: str, out: TextIO) -> None:
    """Print one topic's partitions and its effective configuration."""
    topic = store.topic(name)
    cfg = topic.config
    print(f"topic {name}: {topic.num_partitions} partition(s), cleanup.policy {_value(cfg['cleanup.policy'])}",
          file=out)
    parts = topic.partitions
    writers = partition_writers(p.directory for p in parts)
    table = Table("PARTITION", "LOG-START", "LOG-END", "LSO", "SEGMENTS", "BYTES", "WRITER")
    for p in parts:
        if writers is None:
            writer = "?"
        else:
            pid = writers.get(p.directory)
            writer = "-" if pid is None else f"pid {pid}"
        table.add_row(p.number, p.log_start_offset, p.log_end_offset, p.last_stable_offset, len(p.segments),
                      p.size_bytes(), writer)
    table.print(out)
    config = Table("CONFIG", "VALUE", "SOURCE")
    for key in SETTINGS:
        config.add_row(key, _value(cfg[key]), "topic *" if cfg.is_override(key) else "default")
    config.print(out)


def _describe(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        names = args.topics or _visible(store.topics(), args.all)
        if not names:
            print(f"no topics in {store.path}", file=out)
        for i, name in enumerate(names):
            if i:
                print(file=out)
            describe_topic(store, name, out)
        if names:
            print("(defaults are pylog's: store-wide defaults an application passes to pylog.open() are not kept "
                  "on disk, so they are not shown)", file=out)
    return ExitCode.OK
