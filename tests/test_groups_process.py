"""Consumer groups across real processes: three members split six partitions, one is SIGKILLed, its
partitions move to the survivors, and with commit-after-process no record is lost.

Members are separate interpreters (``subprocess``), so membership and ownership rest on nothing but the
OS file locks in the store. Every wait has a deadline; every child is killed in a ``finally``.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pylog

from storetools import wait_for

TOPIC = "t"
PARTITIONS = 6
# Longer than any wait below: a member that dies is found by its released lock (every heartbeat), never by
# a session running out, and a member slowed down by a loaded machine is never taken for dead.
SESSION_MS = 600_000
HEARTBEAT_MS = 200
MAX_POLL = 50

# A member: consumes with commit-after-process. Each poll's records are written to its output file (one
# write per poll) before the commit, so a kill between the two is what makes duplicates, never losses.
# It reports its assignment on stdout whenever it changes.
WORKER = textwrap.dedent("""
    import json, os, sys
    import pylog
    path, out_path, name = sys.argv[1], sys.argv[2], sys.argv[3]
    store = pylog.open(path, log_cleaner_enable=False)
    c = store.consumer(TOPIC, group_id="g", client_id=name, auto_offset_reset="earliest",
                       enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                       heartbeat_interval_ms=HEARTBEAT_MS, max_poll_records=MAX_POLL)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    last = None
    while True:
        got = c.poll(timeout_ms=50)
        owned = sorted(tp.partition for tp in c.assignment() if tp not in c.pending())
        if owned != last:
            last = owned
            print("owned", json.dumps(owned), flush=True)
        if got:
            lines = "".join(f"{r.partition} {r.offset} {r.value.decode()}\\n" for recs in got.values() for r in recs)
            os.write(fd, lines.encode())
            c.commit()
""").replace("TOPIC", repr(TOPIC)).replace("SESSION_MS", str(SESSION_MS)).replace(
    "HEARTBEAT_MS", str(HEARTBEAT_MS)).replace("MAX_POLL", str(MAX_POLL))


class Member:
    def __init__(self, store_dir: str, out: str, name: str) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, store_dir, out, name],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.owned: list[int] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("owned "):
                self.owned = json.loads(line[6:])

    def update(self) -> None:
        if self.proc.poll() is not None and self.proc.returncode != -9:
            pytest.fail(f"member exited with {self.proc.returncode}: {self.proc.stderr.read()[-3000:]}")

    def consumed(self) -> list[tuple[int, int]]:
        try:
            with open(self.out) as f:
                return [(int(p), int(o)) for p, o, _ in (line.split() for line in f if line.endswith("\n"))]
        except FileNotFoundError:
            return []

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def _wait_for(cond, timeout: float, what: str, members: list[Member]) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        for m in members:
            m.update()
        if cond():
            return time.monotonic() - t0
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what}; owned: {[m.owned for m in members]}")


def _produce(store: pylog.Store, start: int, n: int, partitions: int = PARTITIONS) -> None:
    with store.producer(linger_ms=0) as p:
        for i in range(start, start + n):
            p.send(TOPIC, b"%d" % i, partition=i % partitions)


def test_three_processes_split_six_partitions_and_survive_a_sigkill(tmp_path):
    store_dir = str(tmp_path / "store")
    with pylog.open(store_dir, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions=PARTITIONS)
        _produce(store, 0, 3000)
        members = [Member(store_dir, str(tmp_path / f"out{i}"), f"m{i}") for i in range(3)]
        try:
            _wait_for(lambda: sorted(len(m.owned) for m in members) == [2, 2, 2], 60, "2 partitions each", members)
            assert sorted(p for m in members for p in m.owned) == list(range(PARTITIONS))
            desc = store.describe_consumer_group("g")
            assert len(desc.members) == 3 and sorted(len(m.assignment) for m in desc.members) == [2, 2, 2]

            # Let the victim consume something, then kill it mid-stream while more records arrive. Records
            # sent now reach every member: the first to join may have consumed (and committed) the first
            # 3,000 all by itself before the others came.
            victim = members[0]
            _produce(store, 3000, 600)
            _wait_for(lambda: len(victim.consumed()) > 0, 60, "the victim to consume", members)
            moved = set(victim.owned)
            victim.kill()
            survivors = members[1:]
            _produce(store, 3600, 2400)
            # Detection by the dead member's released lock (a heartbeat probes it): the session timeout is
            # far longer than this wait, so partitions moving at all proves it.
            _wait_for(lambda: sorted(len(m.owned) for m in survivors) == [3, 3], 120,
                      "the victim's partitions to move", survivors)
            assert set(survivors[0].owned) | set(survivors[1].owned) == set(range(PARTITIONS))
            assert moved <= set(survivors[0].owned) | set(survivors[1].owned)

            want = {(i % PARTITIONS, i // PARTITIONS) for i in range(6000)}
            every = lambda: {po for m in members for po in m.consumed()}  # noqa: E731
            _wait_for(lambda: want <= every(), 60, "every record to be consumed", survivors)
            # The survivors commit after writing: every partition's commit reaches the log end.
            _wait_for(lambda: all(v.lag == 0 for v in store.group_lag("g").values()), 30, "the last commits",
                      survivors)
            for m in survivors:
                m.kill()
            seen = collections.Counter(po for m in members for po in m.consumed())
            assert set(seen) == want  # nothing lost, nothing invented
            dups = {po: n for po, n in seen.items() if n > 1}
            # Duplicates only from the killed member's uncommitted tail: its partitions, at most one poll.
            assert all(p in moved for p, _ in dups), dups
            assert sum(n - 1 for n in dups.values()) <= MAX_POLL, len(dups)
            lag = store.group_lag("g")
            assert sorted(tp.partition for tp in lag) == list(range(PARTITIONS))
            assert all(v.committed == v.log_end_offset == 1000 and v.lead == 1000 for v in lag.values()), lag
        finally:
            for m in members:
                m.kill()


def test_two_groups_in_two_processes_each_see_every_record(tmp_path):
    store_dir = str(tmp_path / "store")
    code = textwrap.dedent("""
        import sys, pylog
        with pylog.open(sys.argv[1], log_cleaner_enable=False) as s:
            # Until all 900 are in (the timeout only guards against a hang), then nothing more may come.
            c = s.consumer("t", group_id=sys.argv[2], auto_offset_reset="earliest", consumer_timeout_ms=60_000)
            n = 0
            for _ in c:
                n += 1
                if n == 900:
                    break
            n += sum(len(recs) for recs in c.poll(timeout_ms=0).values())
            c.close()
            print(n)
    """)
    with pylog.open(store_dir, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions=3)
        _produce(store, 0, 900, partitions=3)
    procs = [subprocess.Popen([sys.executable, "-c", code, store_dir, g], stdout=subprocess.PIPE, text=True)
             for g in ("a", "b")]
    try:
        outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert outs == ["900", "900"]
    with pylog.open(store_dir, log_cleaner_enable=False) as store:
        for g in ("a", "b"):
            assert sum(om.offset for om in store.committed_offsets(g).values()) == 900


# An auto-committing member that records, in one append-only file, every poll's records ("r <p> <o>", one
# write per poll, after the poll returned) and every commit once it has returned ("c <p> <o>" for each
# partition committed; auto-commits come through commit(), spied on here, the real one still doing it).
# Plain writes outlive a SIGKILL. The file may so miss the very last commit (killed between its return and
# the write): then fewer records come again than the file allows, never more.
AUTO_WORKER = textwrap.dedent("""
    import os, sys, pylog
    path, out_path = sys.argv[1], sys.argv[2]
    store = pylog.open(path, log_cleaner_enable=False)
    c = store.consumer(TOPIC, group_id="auto", auto_offset_reset="earliest", enable_auto_commit=True,
                       auto_commit_interval_ms=20, max_poll_records=MAX_POLL)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    real_commit = c.commit

    def commit(offsets=None):
        real_commit(offsets)
        if offsets:
            os.write(fd, "".join(f"c {tp.partition} {getattr(om, 'offset', om)}\\n"
                                 for tp, om in offsets.items()).encode())

    c.commit = commit
    while True:
        got = c.poll(timeout_ms=50)
        if got:
            os.write(fd, "".join(f"r {r.partition} {r.offset}\\n" for recs in got.values() for r in recs).encode())
""").replace("TOPIC", repr(TOPIC)).replace("MAX_POLL", str(MAX_POLL))


def _events(path: str) -> list[tuple[str, int, int]]:
    try:
        with open(path) as f:
            return [(k, int(p), int(o)) for k, p, o in (line.split() for line in f if line.endswith("\n"))]
    except FileNotFoundError:
        return []


def test_a_sigkilled_auto_committing_member_redelivers_only_what_it_polled_since_its_last_commit(tmp_path):
    store_dir = str(tmp_path / "store")
    out = str(tmp_path / "victim")
    total = 60_000
    with pylog.open(store_dir, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions=3)
        _produce(store, 0, total, partitions=3)
    victim = subprocess.Popen([sys.executable, "-c", AUTO_WORKER, store_dir, out], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # Killed once it has auto-committed and polled again after that commit, while it goes on polling.
        def polled_after_a_commit() -> bool:
            if victim.poll() is not None:
                pytest.fail(f"the member exited with {victim.returncode}: {victim.stderr.read()[-3000:]}")
            kinds = [k for k, _, _ in _events(out)]
            return "c" in kinds and "r" in kinds[kinds.index("c"):]
        assert wait_for(polled_after_a_commit, timeout=120), "the member never auto-committed and polled on"
        victim.kill()
        assert victim.wait(30) == -9
    finally:
        if victim.poll() is None:
            victim.kill()
        victim.wait(30)

    events = _events(out)
    victim_got = [(p, o) for k, p, o in events if k == "r"]
    assert len(victim_got) == len(set(victim_got)), "the member was handed a record twice"
    last_commit: dict[int, int] = {}
    for k, p, o in events:
        if k == "c":
            last_commit[p] = o
    # What it polled and never committed: the records that may come again, and only those.
    uncommitted = {(p, o) for p, o in victim_got if o >= last_commit.get(p, 0)}

    with pylog.open(store_dir, log_cleaner_enable=False) as store:
        committed = {tp.partition: om.offset for tp, om in store.committed_offsets("auto").items()}
        assert all(committed.get(p, 0) >= o for p, o in last_commit.items()), (committed, last_commit)
        # The next member of the group (after the dead one's lock is gone) consumes the rest.
        c = store.consumer(TOPIC, group_id="auto", auto_offset_reset="earliest", enable_auto_commit=True)
        want = {(i % 3, i // 3) for i in range(total)}
        missing = want - set(victim_got)
        survivor_got: list[tuple[int, int]] = []

        def consumed_everything() -> bool:
            for recs in c.poll(timeout_ms=100, max_records=5000).values():
                got = [(r.partition, r.offset) for r in recs]
                survivor_got.extend(got)
                missing.difference_update(got)
            return not missing
        assert wait_for(consumed_everything, timeout=120), "records lost: never delivered to the group"
        c.close()
    assert len(survivor_got) == len(set(survivor_got))
    again = set(victim_got) & set(survivor_got)
    print(f"\nauto-commit kill: the member polled {len(victim_got)}, {len(uncommitted)} since its last commit; "
          f"{len(again)} delivered again; committed {committed}, last seen commits {last_commit}")
    assert again <= uncommitted, sorted(again - uncommitted)[:10]
    assert len(again) <= len(uncommitted)
    assert set(victim_got) | set(survivor_got) == want  # nothing lost, nothing invented
