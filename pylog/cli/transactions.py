"""``pylog transactions STORE``: kafka-transactions' ``list`` and ``describe`` for a store.

One line per transactional id with its coordinator state (Kafka's names: Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort), producer id and epoch, timeout, how long its open transaction
has been open, and the partitions in it. ``--open`` shows only ids with a transaction open or being ended.
Each partition's last stable offset is in ``pylog topics describe`` (column LSO).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..storage.records import now_ms
from .base import ExitCode, open_store
from .output import Table

__all__ = ["register"]


def register(sub: Any) -> None:
    t = sub.add_parser("transactions", help="transactional ids: state, producer id/epoch, age, partitions",
                       description="The transaction coordinator's state of each transactional id of a store "
                                   "(kafka-transactions list/describe). Partitions' LSOs: `pylog topics describe`.")
    t.add_argument("store")
    t.add_argument("ids", nargs="*", metavar="transactional-id", help="only these ids (default: all)")
    t.add_argument("--open", action="store_true", help="only ids with a transaction open or being ended")
    t.set_defaults(run=_transactions)


def _transactions(args: argparse.Namespace, out: TextIO) -> ExitCode:
    with open_store(args.store) as store:
        metas = [m for m in store.list_transactions()
                 if (not args.ids or m.transactional_id in args.ids) and (m.open or not args.open)]
        if not metas:
            print(f"no {'open ' if args.open else ''}transactions in {store.path}", file=out)
            return ExitCode.OK
        now = now_ms()
        table = Table("TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "OPEN-FOR-S", "PARTITIONS")
        for m in metas:
            age = round((now - m.start_ms) / 1000, 1) if m.open and m.start_ms >= 0 else None
            parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(m.partitions)) if m.open else None
            table.add_row(m.transactional_id, m.state.kafka_name, m.producer_id, m.producer_epoch, m.timeout_ms,
                          age, parts or None)
        table.print(out)
    return ExitCode.OK
