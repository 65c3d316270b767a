"""``pylog health STORE``: is the store being maintained, and are its consumer groups keeping up?

There is no broker whose cleaner thread one could ask about. Retention and compaction run in a background
thread of each process that has the store open (``store.cleaner_status()`` and ``store.check_health()``
in that process). Each such thread also publishes its status under ``<store>/__cleaners/``
(:mod:`pylog.maintenance.cleaner_registry`), and this command checks:

- **cleaners**: one row per process with its cleaner enabled. Unhealthy when a live process's cleaner
  thread died (the row shows its last error), has not written its heartbeat for longer than
  ``--cleaner-stale-ms`` (hung), or gave up on a partition. A process that died without closing the store
  is only a warning.
- **who maintains each partition**: the process holding its writer lock (from ``/proc/locks``). A
  partition nobody writes is maintained by nobody; that is by design (``pylog retention`` / ``compact``
  do it on demand) and only a warning. A partition written by a process that publishes no cleaner (its
  cleaner is disabled) is named as such.
- **retention overdue**: segments past ``retention.ms`` for longer than ``--grace-ms`` (default: the
  store's default retention check interval) in a partition a live process writes. Its cleaner should
  have deleted them: the disk is filling. Unhealthy.
- **compaction**: per compacted partition, the dirty ratio and when a cleaning last reached it (from its
  cleaner checkpoint). Unhealthy when records are older than ``max.compaction.lag.ms`` + grace yet
  uncompacted in a written partition, or the dirty ratio exceeds ``--max-dirty-ratio``.
- **consumer groups**: total lag per group (unhealthy above ``--max-lag``) and lead; a negative lead
  means retention deleted records the group had not consumed yet. Unhealthy; only a warning for a topic with
  ``remote.storage.enable``, whose records below the local log start may be in the bucket (not read here).

Exit 0 when healthy, 1 when unhealthy; warnings alone do not fail.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from .. import __version__
from ..accel import describe
from ..maintenance.cleaner_status import error_summary
from ..maintenance.cleaner_registry import HEARTBEAT_S, PublishedCleaner
from ..maintenance.compaction import cleanable_range
from ..config import STORE_SETTINGS
from ..storage.filenames import OFFSETS_TOPIC, SWAP_MANIFEST_FILE
from ..partition import Partition, internals
from ..storage.records import now_ms
from ..storage.retention import deletable_prefix
from .base import ExitCode, non_negative, open_store, partition_writers
from .output import Table, format_bytes, format_ms

__all__ = ["register"]

_DEFAULT_GRACE_MS = STORE_SETTINGS["log.retention.check.interval.ms"].default
#: Six missed heartbeats: long enough for a busy process, short enough to page someone.
_DEFAULT_STALE_MS = int(6 * HEARTBEAT_S * 1000)


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
    h.add_argument("--cleaner-stale-ms", type=non_negative, default=_DEFAULT_STALE_MS, metavar="MS",
                   help="unhealthy when a live process's cleaner has not written its status for MS "
                        f"(default {_DEFAULT_STALE_MS}; cleaners write every {HEARTBEAT_S:g} s)")
    h.set_defaults(run=_health)


class _Findings:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.warnings: list[str] = []


def _check_partition(p: Partition, writers: dict[str, int | None] | None, now: int, grace: int,
                     max_dirty: float | None, found: _Findings, table: Table, store_path: str,
                     cleaner_pids: set[int]) -> None:
    cfg = p.config
    name = f"{p.topic}-{p.number}"
    pid = None if writers is None else writers.get(p.directory)
    ask = ": is its cleaner running?"
    if internals(p).transient:
        writer, maintained, who = "shared", True, "every store with a cleaner maintains it in turn"
    elif writers is None:
        writer, maintained, who = "?", True, "its writer is unknown (no /proc/locks)"
    elif pid is None:
        writer, maintained, who = "-", False, "no process writes it"
    elif pid in cleaner_pids:
        writer, maintained, who = f"pid {pid}", True, f"pid {pid} writes it"
        ask = ": its cleaner is alive; is it stuck (see the cleaners above)?"
    else:
        writer, maintained, who = f"pid {pid}", True, f"pid {pid} writes it"
        ask = " and runs no live cleaner (log_cleaner_enable=False, or its thread died)"
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
                found.problems.append(f"{msg}; {who}{ask}")
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
                                  f"ms) + {grace} ms are not compacted; {who}{ask}")
        if max_dirty is not None and rng.dirty_ratio > max_dirty:
            found.problems.append(f"{name}: dirty ratio {rng.dirty_ratio:.2f} > {max_dirty}")
        if os.path.exists(os.path.join(p.directory, SWAP_MANIFEST_FILE)) and not maintained:
            found.warnings.append(f"{name}: a compaction swap was interrupted; the next writer to open the "
                                  "partition finishes it")
    table.add_row(name, ",".join(cfg["cleanup.policy"]), writer, retention, dirty, last_cleaned)


def _check_cleaners(cleaners: list[PublishedCleaner], stale_ms: int, found: _Findings, out: TextIO) -> None:
    if not cleaners:
        print("cleaners: none published (no process has the store open with its cleaner enabled)", file=out)
        return
    table = Table("CLEANER", "PROCESS", "THREAD", "HEARTBEAT", "LAST-RUN", "RUNS", "PARTITIONS", "UNCLEANABLE")
    for c in cleaners:
        st = c.status
        age = c.heartbeat_age()
        who = f"pid {c.pid} ({c.name})"
        thread = "?" if st is None else ("alive" if st.alive else ("disabled" if not st.enabled else "dead"))
        last = None if st is None or st.last_run_end is None else format_ms(int(st.last_run_end * 1000))
        table.add_row(c.pid, "alive" if c.process_alive else "dead", thread,
                      None if age is None else f"{age:.1f}s ago", last, None if st is None else st.runs,
                      len(c.partitions), None if st is None else len(st.uncleanable))
        if not c.process_alive:
            found.warnings.append(f"cleaner of {who}: the process died without closing the store (the entry "
                                  "goes when a store next opens with its cleaner)")
            continue
        if st is None:
            found.warnings.append(f"cleaner of {who}: status unreadable: {c.error}")
            continue
        if st.enabled and not st.alive:
            found.problems.append(f"cleaner of {who}: the thread is dead; retention and compaction stopped in "
                                  f"that process. Last error: {error_summary(st.last_error)}")
        elif age is not None and age * 1000 > stale_ms:
            found.problems.append(f"cleaner of {who}: no heartbeat for {age:.1f} s (> {stale_ms} ms): the thread "
                                  "is stuck, or the process is stopped")
        for key, text in sorted(st.uncleanable.items()):
            found.problems.append(f"cleaner of {who} gave up on {key}: {error_summary(text)}")
        if st.cleanings:
            print(f"compaction of {who}: {st.cleanings} cleaning(s) removed {st.records_removed} record(s) "
                  f"({st.tombstones_removed} tombstones, {st.aborted_removed} of aborted transactions, "
                  f"{st.markers_removed} transaction markers)", file=out)
        if st.remote_enabled:
            lag = int(sum(st.remote_lag.values()))
            print(f"remote storage of {who}: {st.remote_segments_shipped} segment(s), {st.remote_bytes_shipped} "
                  f"bytes shipped; {lag} closed segment(s) waiting; {st.remote_failures} failed pass(es)", file=out)
            if st.remote_last_error is not None and st.remote_failures:
                found.warnings.append(f"remote storage of {who}: last upload error (retried with back-off): "
                                      f"{error_summary(st.remote_last_error)}")
    table.print(out)


def _health(args: argparse.Namespace, out: TextIO) -> ExitCode:
    found = _Findings()
    now = now_ms()
    with open_store(args.store) as store:
        # Which code path this process runs (compiled or pure Python): the first thing to know about speed.
        print(f"pylog {__version__}: {describe()}", file=out)
        parts = [p for name in store.topics() for p in store.topic(name).partitions]
        writers = partition_writers(p.directory for p in parts)
        cleaners = store.cleaners()
        _check_cleaners(cleaners, args.cleaner_stale_ms, found, out)
        cleaner_pids = {c.pid for c in cleaners if c.process_alive and c.status is not None and c.status.alive}
        table = Table("PARTITION", "POLICY", "WRITER", "RETENTION", "DIRTY", "LAST-CLEANED")
        for p in parts:
            if not p.segments:
                continue  # never written: nothing to maintain
            _check_partition(p, writers, now, args.grace_ms, args.max_dirty_ratio, found, table, args.store,
                             cleaner_pids)
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
                    if v.lead < 0 and tp.topic in store and store.topic(tp.topic).config["remote.storage.enable"]:
                        # opened without the bucket, the log start is the local one (docs/OPERATIONS.md)
                        found.warnings.append(f"group {group}: {tp.topic}-{tp.partition} committed offset "
                                              f"{v.committed} is below the local log start {v.log_start_offset}; "
                                              f"{tp.topic} ships to remote storage (remote.storage.enable), where "
                                              f"those {-v.lead} record(s) may be: not checked here")
                    elif v.lead < 0:
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
