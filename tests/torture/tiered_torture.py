"""Tiered storage kill torture: a store shipping to S3 (moto's server on 127.0.0.1) SIGKILLed over and over,
inside its uploads, its manifest commits, its local deletions and its group offsets uploads (issue 28).

Run before a release with ``python tests/torture/tiered_torture.py --full`` (>= 300 kills, counts per path);
CI runs ``--short --seed N`` from ``.ci/run`` (about 30 kills, a minute or two). ``run(mode, workdir, seed)``
is the entry point of both. The moto server runs in a process of its own (tests/s3_server.py
``MotoProcess``), bounded by the run's lifetime.

The child (forked over and over, each a new process of the application) opens the store with
``remote.storage.location``, an upload thread every few milliseconds (``remote.log.manager.task.interval.ms``)
and two topics with ``remote.storage.enable``, small segments and ``local.retention.bytes`` 0 (a local copy
goes as soon as its segment is shipped):

- ``keep``: ``retention.ms``/``retention.bytes`` -1: every record ever flushed must stay readable, from the
  bucket once its local copy is gone;
- ``trim``: ``retention.bytes`` a few segments: remote retention drops shipped segments (manifest first, then
  the objects; a kill between leaves orphans below the log start).

In a loop it appends records whose content is a pure function of their offset (tests/torture/torture.py
``content``), half of them as an idempotent producer (so producer snapshots are kept and shipped), flushes
(then reports the flushed end), enforces retention (local deletion of shipped segments), and commits a
consumer group's offset (which the upload thread ships as ``group.offsets``), reporting each value before and
after the commit.

Paths (where a kill lands; counted by the child's wrappers, only in the child, in memory shared with the
parent, as tests/torture/torture.py does):

====================== =====================================================================================
path                   inside
====================== =====================================================================================
segment_ship           ``RemoteLog.ship_segment``: the local segment read and checked, its objects, the commit
object_put             ``ObjectStore.put_new``: a segment's log, index, time index, snapshot or txnindex PUT
between_put_and_commit after an object PUT returned, before the next PUT or the manifest's commit began
manifest_commit        ``RemoteLog.commit``: the manifest read and its conditional write (If-Match)
local_delete           the local log's head deletion (local retention of shipped segments, after the commit)
remote_retention       ``RemoteLog.enforce_retention``: the manifest commit, then the objects' deletion
store_metadata         shipping the store marker, the topics' files and the group offsets
group_offsets_put      the conditional PUT of ``group.offsets``
====================== =====================================================================================

Half the kills are made by the child itself at the k-th operation inside a chosen path (an S3 request, a file
operation, or entering or leaving a nested path): before it, after it, or (requests) during it (a timer
fires while the request is on the wire). The other half by the parent after a random delay.

After every kill the parent checks (half the time after a writer recovered the store and ran a whole upload
pass, after which every closed segment must be shipped and, after local retention, no local copy of a
shipped segment left: a kill's leftovers never wedge shipping; otherwise the next child recovers it):

* each partition's remote manifest decodes (magic, version, CRC, invariants);
* ``pylog verify STORE --remote LOCATION`` finds no problem (orphans left by kills are not problems);
* read through the store (local segments and, below them, the bucket), every flushed record is there,
  byte-identical, offsets dense from the log start to the log end, nothing that was never appended; the
  local log end is at or past the remote end (what was shipped is never lost locally); ``keep``'s log start
  stays 0 and ``trim``'s never moves back;
* every few kills (and after the last), ``pylog.restore`` from the bucket into a new directory gives each
  partition exactly the manifest's ``[log start, end)`` with the same records (a prefix of the local log),
  and the restored group offset is one the child committed.

Prints kills per path, the orphan objects seen, and a summary line (kills, acknowledged, lost 0, garbage 0). Any
violation raises AssertionError naming the seed, the kill and where it landed.
"""

from __future__ import annotations

import functools
import io
import logging
import multiprocessing
import os
import random
import shutil
import signal
import sys
import threading
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: s3_server
sys.path.insert(0, HERE)  # torture's child machinery and record contents

import pylog  # noqa: E402
import pylog.maintenance.remote_upload as remote_upload  # noqa: E402
import pylog.storage.log.maintenance as log_maintenance  # noqa: E402
from pylog.cli import main as pylog_cli  # noqa: E402
from pylog.partition import internals  # noqa: E402
from pylog.storage.remote import ObjectStore, RemoteLog  # noqa: E402
from pylog.storage.remote.layout import GROUP_OFFSETS, parse_segment_object, partition_prefix  # noqa: E402
from pylog.structs import OffsetAndMetadata, TopicPartition  # noqa: E402
from s3_server import MotoProcess  # noqa: E402
import torture  # noqa: E402
from torture import Child, append_expected, read_report, verify_log, write_report  # noqa: E402

PATHS = ("segment_ship", "object_put", "between_put_and_commit", "manifest_commit", "local_delete",
         "remote_retention", "store_metadata", "group_offsets_put")
_PIDX = {name: i for i, name in enumerate(PATHS)}
#: Paths a self-kill aims at (between_put_and_commit is hit by entering it: its first operation).
TARGETS = PATHS
TOPICS = ("keep", "trim")
SEGMENT_BYTES = 4096
TOPIC_CONFIG = {"remote.storage.enable": True, "segment.bytes": SEGMENT_BYTES, "index.interval.bytes": 512,
                "local.retention.bytes": 0, "retention.ms": -1}
CONFIGS = {"keep": {**TOPIC_CONFIG, "retention.bytes": -1},
           "trim": {**TOPIC_CONFIG, "retention.bytes": 6 * SEGMENT_BYTES}}
GROUP = "reader"
MODES = {
    # kills, kills per round (each round a new store and bucket: the checks read everything, so a store that
    # grew through hundreds of kills would make each check slower), restore checked every N kills, max parent
    # delay (s)
    "short": dict(kills=30, round=30, restore_every=5, delay=1.5),
    "full": dict(kills=300, round=50, restore_every=10, delay=2.0),
}
#: How long a child may take to kill itself at its hook before the parent kills it (the hook's path may not
#: come round: e.g. group offsets unchanged).
HOOK_WAIT_S = 8.0
#: The moto server's lifetime cap (s): longer than any run.
SERVER_LIFETIME_S = 4 * 3600

_S3_OPS = ("put_new", "put_replacing", "get", "head", "delete", "list", "download")
_FILE_OPS = ("write", "writev", "fsync", "fdatasync", "ftruncate", "replace", "rename", "unlink", "rmdir")


def remote_options(location: str, endpoint: str) -> dict[str, Any]:
    return {"remote_storage_location": location, "remote_storage_endpoint_url": endpoint,
            "remote_storage_request_timeout_ms": 10_000, "remote_storage_max_attempts": 2}


# ----------------------------------------------------------------------------- child-side instrumentation


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _Probe(torture._Probe):
    """torture.py's probe (per-thread depth inside each path, the shared count of threads inside each, the
    self-kill switch) over this torture's paths, where entering or leaving a nested path counts as an
    operation too, and a request can be killed while it is on the wire."""

    def __init__(self, inside: Any, target: str | None, k: int, how: str, seed: int) -> None:
        super().__init__(inside, None, k, how, seed)
        self.target = _PIDX[target] if target else -1

    def enter(self, i: int) -> None:
        super().enter(i)
        self.operation(None)

    def leave(self, i: int) -> None:
        if self.depth()[i] > 0:
            self.operation(None)
            super().leave(i)

    def operation(self, real: Callable | None, *args: Any, **kwargs: Any) -> Any:
        """Run ``real`` (None: entering or leaving a path), unless it is the k-th operation inside the target
        path in this thread: then die before, after or while it runs."""
        if not self.counted():
            return real(*args, **kwargs) if real is not None else None
        if real is None or self.how == "before":
            _die()
        if self.how == "during":
            threading.Timer(self.rng.uniform(0, 0.02), _die).start()
        try:
            return real(*args, **kwargs)
        finally:
            _die()


def _install(probe: _Probe) -> None:
    """Wrap the paths' functions and the operations counted (in this child only)."""

    def marked(fn: Callable, path: str, before: Callable[[], None] = lambda: None,
               after: Callable[[], None] = lambda: None) -> Callable:
        i = _PIDX[path]

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            before()
            probe.enter(i)
            try:
                return fn(*args, **kwargs)
            finally:
                probe.leave(i)
                after()
        return call

    between, ship = _PIDX["between_put_and_commit"], _PIDX["segment_ship"]

    def end_between() -> None:
        probe.leave(between)

    def begin_between() -> None:  # an object PUT of a segment's ship returned (or failed)
        if probe.depth()[ship] > 0:
            probe.enter(between)

    RemoteLog.ship_segment = marked(RemoteLog.ship_segment, "segment_ship", after=end_between)  # type: ignore
    RemoteLog.commit = marked(RemoteLog.commit, "manifest_commit", before=end_between)  # type: ignore
    RemoteLog.enforce_retention = marked(RemoteLog.enforce_retention, "remote_retention")  # type: ignore
    ObjectStore.put_new = marked(ObjectStore.put_new, "object_put", end_between, begin_between)  # type: ignore
    log_maintenance._delete_head = marked(log_maintenance._delete_head, "local_delete")
    remote_upload.ship_store_metadata = marked(remote_upload.ship_store_metadata, "store_metadata")
    put_replacing, gidx = ObjectStore.put_replacing, _PIDX["group_offsets_put"]

    @functools.wraps(put_replacing)
    def put_replacing_marked(self: ObjectStore, name: str, *args: Any, **kwargs: Any) -> Any:
        if name != GROUP_OFFSETS:
            return put_replacing(self, name, *args, **kwargs)
        probe.enter(gidx)
        try:
            return put_replacing(self, name, *args, **kwargs)
        finally:
            probe.leave(gidx)
    ObjectStore.put_replacing = put_replacing_marked  # type: ignore[method-assign]

    if probe.target < 0:
        return
    for name in _S3_OPS:  # the requests, counted inside the target path
        real = getattr(ObjectStore, name)
        setattr(ObjectStore, name, functools.wraps(real)(functools.partialmethod(probe_call, probe, real)))
    for name in _FILE_OPS:
        real = getattr(os, name)
        setattr(os, name, functools.partial(probe.operation, real))


def probe_call(self: Any, probe: _Probe, real: Callable, *args: Any, **kwargs: Any) -> Any:
    return probe.operation(real, self, *args, **kwargs)


# ----------------------------------------------------------------------------- the child


def child(root: str, report: str, seed: int, say: Callable[[bytes], None], location: str, endpoint: str) -> None:
    rng = random.Random(seed)
    rep = read_report(report, {"flushed": {t: 0 for t in TOPICS}, "commits": [], "committed": 0})
    # Both ways a pass runs (a SCHED_IDLE thread of its own, or the upload thread at normal priority over the
    # lag bound) and short waits for a pause in the appends (which never pause here: the default 30 s would
    # leave the upload paths unvisited for most of a child's life).
    store = pylog.open(root, log_cleaner_enable=False,
                       remote_log_manager_task_interval_ms=rng.choice((5, 20, 60)),
                       remote_log_manager_copier_max_delay_ms=rng.choice((0, 20, 200)),
                       remote_log_manager_copier_max_lag_bytes=rng.choice((0, 1 << 30)),
                       remote_log_manager_task_retry_backoff_ms=20,
                       remote_log_manager_task_retry_backoff_max_ms=200, **remote_options(location, endpoint))
    parts = {t: store.topic(t).partition(0) for t in TOPICS}
    for p in parts.values():
        assert p.try_become_writer()
    ends = {t: p.log_end_offset for t, p in parts.items()}
    # Half the appends are an idempotent producer's (a new one per child): the partitions then keep producer
    # snapshots, which segments are shipped and restored with.
    pid, sequences = rng.randrange(1, 1 << 40), {t: 0 for t in TOPICS}
    say(b"R")
    said = False
    while True:
        for t, p in parts.items():
            if t == "keep" and rng.random() < 0.7:
                continue
            n = rng.randint(1, 10)
            if rng.random() < 0.5:
                ends[t] = append_expected(p, ends[t], n, producer=(pid, 0, sequences[t]))
                sequences[t] += n
            else:
                ends[t] = append_expected(p, ends[t], n)
        roll = rng.random()
        if roll < 0.35:
            for t, p in parts.items():
                p.flush()
                rep["flushed"][t] = ends[t]
            write_report(report, rep)
        elif roll < 0.45:
            for p in parts.values():
                p.enforce_retention()
        elif roll < 0.5:
            value = rep["committed"] + 1 + rng.randrange(5)
            rep["commits"].append(value)  # before the commit: a kill inside it may have committed it
            write_report(report, rep)
            store.commit_offsets(GROUP, {TopicPartition("keep", 0): OffsetAndMetadata(value, "")})
            rep["committed"] = value
            write_report(report, rep)
        if not said:
            say(b"A")
            said = True
        time.sleep(rng.uniform(0, 0.01))  # pacing: the bucket's size grows with every kill


# ----------------------------------------------------------------------------- the parent


class Torture:
    """One round: a store and its bucket, the children that write them, and the checks after each kill."""

    def __init__(self, workdir: str, seed: int, server: MotoProcess) -> None:
        os.makedirs(workdir)
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.root = os.path.join(workdir, "store")
        self.report = os.path.join(workdir, "report")
        self.errfile = os.path.join(workdir, "child-errors")
        self.endpoint = server.endpoint
        self.location = f"s3://{server.bucket()}/store"
        self.objects = ObjectStore.from_settings({"remote.storage.location": self.location,
                                                  "remote.storage.endpoint.url": self.endpoint})
        self.min_start = {t: 0 for t in TOPICS}
        self.torture_paths = multiprocessing.RawArray("i", 16)
        #: What the last check found: orphan objects, restores checked (0 or 1), of them with a group offset.
        self.orphans_seen_now = self.restored_now = self.group_offsets_restored_now = 0
        #: Shipped segments with a producer snapshot, at the last check.
        self.snapshots_now = 0
        self.restores = 0
        with pylog.open(self.root, log_cleaner_enable=False, **remote_options(self.location, self.endpoint)) as s:
            for t in TOPICS:
                s.create_topic(t, 1, CONFIGS[t])

    def cycle(self, inside: Any, hook: tuple | None, delay: float) -> str:
        """One child, killed; returns how ("self" / "parent" / "parent, hook unfired")."""
        target, k, how = hook if hook else (None, 0, "before")
        seed = self.rng.randrange(1 << 30)

        def run_child(root: str, report: str, seed_: int, say: Callable[[bytes], None]) -> None:
            _install(_Probe(inside, target, k, how, seed_))
            child(root, report, seed_, say, self.location, self.endpoint)

        # torture.Child installs torture.py's own path counters too: they count into an array of their own.
        c = Child(run_child, self.root, self.report, seed, self.torture_paths, None, self.errfile)
        try:
            if hook:  # it may kill itself before it says anything: the upload thread starts with the store
                if c.wait(HOOK_WAIT_S) is None:
                    c.killed_by_parent()
                    return "parent, hook unfired"
                if c.status != -signal.SIGKILL:
                    raise AssertionError(f"child exit code {c.status}: {c.error()}")
                return "self"
            c.expect(b"R")
            c.expect(b"A")
            time.sleep(self.rng.uniform(0, delay))  # the kill's random moment, not a hand-shake
            c.killed_by_parent()
            return "parent"
        finally:
            c.close()

    def verify(self, recover: bool, restore: bool) -> dict[str, int]:
        rep = read_report(self.report, {"flushed": {t: 0 for t in TOPICS}, "commits": [], "committed": 0})
        opts = remote_options(self.location, self.endpoint)
        if recover:  # a writer recovers every partition, then finishes what the kill left
            with pylog.open(self.root, log_cleaner_enable=False, **opts) as store:
                parts = [store.topic(t).partition(0) for t in TOPICS]
                for p in parts:
                    assert p.try_become_writer(), f"{p.topic}: could not become the writer"
                    assert p.check() == [], f"{p.topic}: check() after recovery: {p.check()}"
                store.upload_to_remote()  # a whole pass (after the one its upload thread may be running)
                for p in parts:
                    self._check_caught_up(store, p)
        manifests = {t: RemoteLog(self.objects, t, 0).load()[0] for t in TOPICS}  # raises on a damaged one
        out = io.StringIO()
        code = pylog_cli(["verify", self.root, "--remote", self.location, "--endpoint-url", self.endpoint], out)
        assert code == 0, f"pylog verify --remote: exit {code}\n{out.getvalue()[-3000:]}"
        self.orphans_seen_now = self._orphans(manifests)
        self.snapshots_now = sum(s.snapshot_size >= 0 for m in manifests.values() for s in m.segments)
        self.restored_now = self.group_offsets_restored_now = 0
        checked = {}
        with pylog.open(self.root, read_only=True, **opts) as store:
            for t in TOPICS:
                p = store.topic(t).partition(0)
                m = manifests[t]
                # Every flushed record there, byte-identical, dense; the log start never moved back.
                start, leo = verify_log(p, rep["flushed"][t], self.min_start[t])
                assert leo >= m.end_offset, f"{t}: local log end {leo} is behind the remote end {m.end_offset}"
                if t == "keep":
                    assert start == 0, f"keep: log start {start}, nothing may be deleted"
                self.min_start[t] = start
                checked[t] = leo - start
        if restore:
            self._check_restore(manifests, rep)
        return checked

    def _check_caught_up(self, store: pylog.Store, p: pylog.Partition) -> None:
        """After a whole upload pass, whatever a kill left: every closed, fsynced segment is shipped (no
        leftover object or half-done commit wedges shipping), and local retention then deletes every local
        copy of a shipped segment (``local.retention.bytes`` 0)."""
        m = store.remote_log(p.topic, 0).manifest(refresh=True)
        synced = internals(p).synced_through
        closed_ends = [s.base_offset for s in p.segments[1:] if s.base_offset <= synced]
        if closed_ends:
            assert m.end_offset >= closed_ends[-1], \
                f"{p.topic}: after a pass the remote log ends at {m.end_offset}, closed segments at {closed_ends[-1]}"
        p.enforce_retention()
        if m.segments:
            first = p.segments[0].base_offset
            assert first == m.end_offset or len(p.segments) == 1 and first <= m.end_offset, \
                f"{p.topic}: local log starts at {first} after retention, the remote log ends at {m.end_offset}"

    def acked(self) -> int:
        """The records the children reported flushed (the last report's flushed ends)."""
        return sum(read_report(self.report, {"flushed": {}})["flushed"].values())

    def _orphans(self, manifests: dict) -> int:
        """Segment objects in the bucket that no manifest names (left by kills; the next ship or retention
        pass reuses or deletes them)."""
        n = 0
        for t, m in manifests.items():
            named = {(s.base_offset, s.log_crc) for s in m.segments}
            for info in self.objects.list(partition_prefix(t, 0)):
                parsed = parse_segment_object(info.key)
                n += parsed is not None and parsed[:2] not in named
        return n

    def _check_restore(self, manifests: dict, rep: dict) -> None:
        self.restores += 1
        self.restored_now = 1
        target = os.path.join(self.workdir, f"restored-{self.restores}")
        restored = pylog.restore(self.location, target, remote_storage_endpoint_url=self.endpoint)
        try:
            for t in TOPICS:
                m = manifests[t]
                got = restored.partitions.get(t, {}).get(0)
                want = (m.log_start_offset, m.end_offset)
                assert got == want or (got is None and not m.segments), \
                    f"{t}: restored offsets {got}, the manifest says [{want[0]}, {want[1]})"
            with pylog.open(target, log_cleaner_enable=False) as store:
                for t in TOPICS:
                    p = store.topic(t).partition(0)
                    m = manifests[t]
                    if m.segments:
                        assert (p.log_start_offset, p.log_end_offset) == (m.log_start_offset, m.end_offset), \
                            f"{t}: restored store has [{p.log_start_offset}, {p.log_end_offset}), " \
                            f"manifest [{m.log_start_offset}, {m.end_offset})"
                        verify_log(p, m.end_offset, m.log_start_offset)
                committed = store.committed_offsets(GROUP).get(TopicPartition("keep", 0))
                self.group_offsets_restored_now = int(committed is not None)
                if committed is not None:
                    assert committed.offset in rep["commits"], \
                        f"restored group offset {committed.offset} was never committed ({rep['commits'][-5:]})"
            out = io.StringIO()
            assert pylog_cli(["verify", target], out) == 0, f"verify of the restored store:\n{out.getvalue()}"
        finally:
            shutil.rmtree(target, ignore_errors=True)


def run(mode: str, workdir: str, seed: int | None = None, kills: int | None = None,
        log: Callable[[str], None] = lambda s: None) -> dict:
    """Run the torture in ``mode`` ("full" or "short") under ``workdir``, against a moto server of its own.
    Returns counts: ``kills``, ``inside`` (kills that landed inside each path), ``self_kills``,
    ``parent_kills``, ``acked`` (flushed records at the end), ``checks_with_orphans`` (kills after which the bucket held
    segment objects no manifest named), ``orphans_max``, ``snapshots_max`` (shipped segments with a producer
    snapshot, at most, at a check), ``restores``, ``rounds``, ``seconds``,
    ``seed``. Raises AssertionError naming the seed, the kill and where it landed on any violation."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'full' or 'short', got {mode!r}")
    plan = MODES[mode]
    total = plan["kills"] if kills is None else kills
    seed = random.randrange(1 << 31) if seed is None else seed
    inside = multiprocessing.RawArray("i", len(PATHS))
    counts: dict[str, Any] = {"kills": 0, "inside": {p: 0 for p in PATHS}, "outside": 0, "self_kills": 0,
                              "parent_kills": 0, "hooks_unfired": 0, "acked": 0, "lost": 0, "garbage": 0,
                              "verify_seconds": 0.0, "rounds": 0, "checks_with_orphans": 0, "orphans_max": 0,
                              "snapshots_max": 0,
                              "restores": 0,
                              "group_offsets_restored": 0, "seed": seed}
    t0 = time.monotonic()
    with MotoProcess(SERVER_LIFETIME_S) as server:
        rng = random.Random(f"{seed}-plan")
        hooks = acked = 0
        tt: Torture | None = None
        for n in range(1, total + 1):
            if (n - 1) % plan["round"] == 0:
                if tt is not None:
                    acked += tt.acked()
                tt = Torture(os.path.join(workdir, f"round-{(n - 1) // plan['round'] + 1}"), rng.randrange(1 << 30),
                             server)
                counts["rounds"] += 1
            for i in range(len(PATHS)):
                inside[i] = 0
            hook = None
            if rng.random() < 0.5:  # the targets in turn, so each gets its share of the self-kills
                hook = (TARGETS[hooks % len(TARGETS)], rng.randint(1, 6), rng.choice(("before", "after", "during")))
                hooks += 1
            recover = rng.random() < 0.5
            restore = n % plan["restore_every"] == 0 or n % plan["round"] == 0 or n == total
            where = "?"
            try:
                how = tt.cycle(inside, hook, plan["delay"])
                landed = [p for i, p in enumerate(PATHS) if inside[i] > 0]
                where = ",".join(landed) or "outside every path"
                t1 = time.monotonic()
                checked = tt.verify(recover, restore)
                counts["verify_seconds"] += time.monotonic() - t1
            except Exception as exc:  # a failed check, or an error reading the store back: both violations
                raise AssertionError(
                    f"tiered torture seed={seed} kill #{n} "
                    f"({'self-kill at ' + repr(hook) if hook else 'killed by the parent'}; landed inside: {where}; "
                    f"{'recovered by the parent' if recover else 'left for the next child'}): "
                    f"{exc if isinstance(exc, AssertionError) else repr(exc)}\n"
                    f"rerun: python {os.path.abspath(__file__)} --{mode} --seed {seed}") from exc
            for p in landed:
                counts["inside"][p] += 1
            counts["outside"] += not landed
            counts["kills"] += 1
            counts["self_kills"] += how == "self"
            counts["parent_kills"] += how != "self"
            counts["hooks_unfired"] += how == "parent, hook unfired"
            if n % 10 == 0:
                log(f"  {n} kills ({time.monotonic() - t0:.0f}s, {counts['verify_seconds']:.0f}s of them checking; "
                    f"records checked: {checked})")
            counts["checks_with_orphans"] += tt.orphans_seen_now > 0
            counts["orphans_max"] = max(counts["orphans_max"], tt.orphans_seen_now)
            counts["snapshots_max"] = max(counts["snapshots_max"], tt.snapshots_now)
            counts["restores"] += tt.restored_now
            counts["group_offsets_restored"] += tt.group_offsets_restored_now
        counts["acked"] = acked + (tt.acked() if tt is not None else 0)
    counts["seconds"] = round(time.monotonic() - t0, 1)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = torture.mode_parser(__doc__, "release mode: >= 300 kills", "CI mode: about 30 kills")
    ap.add_argument("--kills", type=int, default=None, help="instead of the mode's number")
    args = ap.parse_args(argv)
    # Recoveries and failed uploads (a kill's leftovers) log warnings by the dozen: expected here.
    logging.getLogger("pylog").setLevel(logging.CRITICAL)
    counts = torture.in_workdir(args.workdir, "pylog-tiered-torture-", lambda workdir: run(
        "full" if args.full else "short", workdir, args.seed, args.kills, log=lambda s: print(s, flush=True)))
    print("kills that landed inside each path:")
    for p in PATHS:
        print(f"  {p:24s} {counts['inside'][p]}")
    print(f"  {'(outside every path)':24s} {counts['outside']}")
    print(f"tiered torture: {counts['kills']} kills in {counts['rounds']} round(s) ({counts['self_kills']} "
          f"self-kills inside a path, {counts['parent_kills']} by the parent, {counts['hooks_unfired']} of them when "
          f"a hook's path did not come round), {counts['restores']} restores checked "
          f"({counts['group_offsets_restored']} with the group's offset), orphan objects after "
          f"{counts['checks_with_orphans']} kills (at most {counts['orphans_max']}), up to {counts['snapshots_max']} "
          f"shipped segments with a producer snapshot, {counts['acked']} acknowledged "
          f"records, lost {counts['lost']}, garbage {counts['garbage']}, in {counts['seconds']}s, seed "
          f"{counts['seed']}: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
