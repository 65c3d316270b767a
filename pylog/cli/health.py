"""``pylog health STORE``: is the store being maintained, and are its consumer groups keeping up?

There is no broker whose cleaner thread one could ask about. Retention and compaction run in a background
thread of each process that writes a partition, and that thread's status (alive, last run, last error and
the partitions it gave up on) lives in that process: ``store.cleaner_status()`` and
``store.check_health()`` there, which is what an application should export as metrics. A separate process
such as this command can only see what a stopped or failing cleaner leaves behind on disk, and that is
what it checks:

- **who maintains each partition**: the process holding its writer lock (from ``/proc/locks``). A
  partition nobody writes is maintained by nobody; that is by design (``pylog retention`` / ``compact``
  do it on demand) and only a warning.
- **retention overdue**: segments past ``retention.ms`` for longer than ``--grace-ms`` (default: the
  store's default retention check interval) in a partition a live process writes. Its cleaner should
  have deleted them: the disk is filling. Unhealthy.
- **compaction**: per compacted partition, the dirty ratio and when a cleaning last reached it (from its
  cleaner checkpoint). Unhealthy when records are older than ``max.compaction.lag.ms`` + grace yet
  uncompacted in a written partition, or the dirty ratio exceeds ``--max-dirty-ratio``.
- **consumer groups**: total lag per group (unhealthy above ``--max-lag``) and lead; a negative lead
  means retention deleted records the group had not consumed yet. Unhealthy.

Exit 0 when healthy, 1 when unhealthy; warnings alone do not fail.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from ..compaction import cleanable_range
from ..config import STORE_SETTINGS
from ..filenames import OFFSETS_TOPIC, SWAP_MANIFEST_FILE
from ..partition import Partition
from ..records import now_ms
from ..retention import deletable_prefix
from .base import ExitCode, non_negative, open_store, partition_writers
from .output import Table, format_bytes, format_ms

__all__ = ["register"]

_DEFAULT_GRACE_MS = STORE_SETTINGS["log.retention.check.interval.ms"].default


def register(sub: Any) -> None:
    h = sub.add_parser("health", help="maintenance (retention, compaction) and consumer lag checks; exit 1 when "
                                      "unhealthy",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("store")
    h.add_argument("--max-lag", type=non_negative, metavar="N", help="unhealthy when a group's total lag exceeds N")
    h.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="check only these groups; repeatable (default: all)")
    h.add_argument("--max-dirty-ratio", type=float, metavar="R",
                   help="unhealthy when a compacted partition's dirty ratio exceeds R (0..1)")
    h.add_argument("--grace-ms", type=non_negative, default=_DEFAULT_GRACE_MS, metavar="MS",
                   help="how long past its deadline maintenance may be before it counts as overdue (default "
                        f"{_DEFAULT_GRACE_MS}, the default log.retention.check.interval.ms; use the interval "
                        "your writers are configured with)")
    h.set_defaults(run=_health)


class _Findings:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.warnings: list[str] = []


def _check_partition(p: Partition, writers: dict[str, int | None] | None, now: int, grace: int,
                     max_dirty: float | None, found: _Findings, table: Table, store_path: str) -> None:
    cfg = p.config
    name = f"{p.topic}-{p.number}"
    pid = None if writers is None else writers.get(p.directory)
    if p.transient:
        writer, maintained, who = "shared", True, "every store with a cleaner maintains it in turn"
    elif writers is None:
        writer, maintained, who = "?", True, "its writer is unknown (no /proc/locks)"
    elif pid is None:
        writer, maintained, who = "-", False, "no process writes it"
    else:
        writer, maintained, who = f"pid {pid}", True, f"pid {pid} writes it"
    retention = dirty = last_cleaned = None
    if "delete" in cfg["cleanup.policy"]:
        segs = p.segments
        n, _ = deletable_prefix(segs, p.log_start_offset, now - grace, cfg["retention.ms"], -1)
        retention = "ok"
        if n:
            size = sum(s.size for s in segs[:n])
            retention = f"{n} overdue"
            msg = f"{name}: {n} segment(s) ({format_bytes(size)}) past retention.ms for more than {grace} ms"
            if maintained:
                found.problems.append(f"{msg}; {who}: is its cleaner running (log_cleaner_enable, "
                                      "store.check_health())?")
            else:
                found.warnings.append(f"{msg}; {who}, so no cleaner maintains it: `pylog retention {store_path} "
                                      f"{p.topic}` deletes them")
    if cfg.compact and p.segments:  # a partition nobody has written yet has no segment at all
        rng = cleanable_range(p, now=now)
        dirty = f"{rng.dirty_ratio:.2f}"
        horizons = rng.checkpoint.horizons
        last_cleaned = format_ms(horizons[-1][1]) if horizons else "never"
        if maintained and cleanable_range(p, now=now - grace).overdue:
            found.problems.append(f"{name}: records older than max.compaction.lag.ms ({cfg['max.compaction.lag.ms']} "
                                  f"ms) + {grace} ms are not compacted; {who}: is its cleaner running?")
        if max_dirty is not None and rng.dirty_ratio > max_dirty:
            found.problems.append(f"{name}: dirty ratio {rng.dirty_ratio:.2f} > {max_dirty}")
        if os.path.exists(os.path.join(p.directory, SWAP_MANIFEST_FILE)) and not maintained:
            found.warnings.append(f"{name}: a compaction swap was interrupted; the next writer to open the "
                                  "partition finishes it")
    table.add_row(name, ",".join(cfg["cleanup.policy"]), writer, retention, dirty, last_cleaned)


def _health(args: argparse.Namespace, out: TextIO) -> ExitCode:
    found = _Findings()
    now = now_ms()
    with open_store(args.store) as store:
        parts = [p for name in store.topics() for p in store.topic(name).partitions]
        writers = partition_writers(p.directory for p in parts)
        print("cleaner: runs inside each process that writes a partition; its thread's status (alive, last run, "
              "last error) is in that process (store.cleaner_status()). From disk:", file=out)
        table = Table("PARTITION", "POLICY", "WRITER", "RETENTION", "DIRTY", "LAST-CLEANED")
        for p in parts:
            if not p.segments:
                continue  # never written: nothing to maintain
            _check_partition(p, writers, now, args.grace_ms, args.max_dirty_ratio, found, table, args.store)
        if parts:
            table.print(out)
        else:
            print(f"no topics in {store.path}", file=out)
        groups = args.group or store.consumer_groups()
        if groups:
            gt = Table("GROUP", "MEMBERS", "TOTAL-LAG", "MIN-LEAD")
            for group in groups:
                lags = store.group_lag(group) if OFFSETS_TOPIC in store else {}
                total = sum(v.lag for v in lags.values())
                min_lead = min((v.lead for v in lags.values()), default=None)
                gt.add_row(group, len(store.describe_consumer_group(group).members), total, min_lead)
                if args.max_lag is not None and total > args.max_lag:
                    found.problems.append(f"group {group}: total lag {total} > --max-lag {args.max_lag}")
                for tp, v in sorted(lags.items()):
                    if v.lead < 0:
                        found.problems.append(f"group {group}: {tp.topic}-{tp.partition} committed offset "
                                              f"{v.committed} is below the log start {v.log_start_offset}: "
                                              f"{-v.lead} record(s) were deleted before the group read them")
            gt.print(out)
    for w in found.warnings:
        print(f"warning: {w}", file=out)
    for problem in found.problems:
        print(f"problem: {problem}", file=out)
    print("health: " + ("ok" if not found.problems else f"{len(found.problems)} problem(s)"), file=out)
    return ExitCode.OK if not found.problems else ExitCode.PROBLEMS
