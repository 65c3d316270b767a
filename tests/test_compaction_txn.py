"""Compaction of transactional logs (pylog.maintenance.compaction_txn): the cleaner stops at the last stable
offset, removes aborted transactions' records, keeps markers while their transaction has records and
``delete.retention.ms`` after, rewrites the aborted-transaction index of what it cleans, and a SIGKILL at any
file operation of such a cleaning is recovered.

Run: ``python -m pytest tests/test_compaction_txn.py -q``
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import signal
import threading

import pytest

import pylog
from storetools import abandon, append_foreign_control
from pylog.maintenance.cleaner_checkpoint import CleanerCheckpoint, read_cleaner_checkpoint, write_cleaner_checkpoint
from pylog.maintenance.compaction import clean_partition, cleanable_range
from pylog.partition import internals
from pylog.storage.producer_state import SNAPSHOT_FILE
from pylog.storage.records import now_ms
from pylog.storage.txn_index import index_path, read_index

TOPIC = "t"
DAY_MS = 86_400_000  # delete.retention.ms's default
BUFFER = 1 << 22
KEYS = [b"a", b"b", b"c", b"d", b"\x00\x00\x00\x00", b"\x00\x00\x00\x01"]  # the last two: a marker's key bytes


def _store(path, **cfg):
    return pylog.open(str(path), log_cleaner_enable=False, **cfg)


def _partition(store, **cfg):
    store.create_topic(TOPIC, config={"cleanup.policy": "compact", **cfg})
    return store.topic(TOPIC).partition(0)


class Model:
    """The records a partition holds, by offset: ``(key, value, fate)`` with fate "plain", "open",
    "commit", "abort" or "marker"; each marker's transaction (its records' offsets), the cleanings' ends."""

    def __init__(self) -> None:
        self.recs: dict[int, tuple[bytes, bytes, str]] = {}
        self.txn_of_marker: dict[int, list[int]] = {}
        self.open: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
        self.aborts: dict[int, tuple[int, int, int]] = {}  # marker offset -> (producer id, first, marker)
        self.end = 0  # the previous cleaning's end

    def lso(self, log_end: int) -> int:
        firsts = [offs[0] for offs in self.open.values()]
        return min(firsts) if firsts else log_end

    def values(self, committed: bool, lso: int) -> list[bytes]:
        return [v for o, (_, v, fate) in sorted(self.recs.items()) if fate != "marker"
                and (not committed or (fate in ("plain", "commit") and o < lso))]

    def markers(self) -> list[int]:
        return sorted(o for o, (_, _, fate) in self.recs.items() if fate == "marker")

    def clean(self, end: int) -> set[tuple[int, int, int]]:
        """Apply a cleaning up to ``end`` (a cleaning more than delete.retention.ms after the previous one);
        returns the aborted-transaction index entries the cleaned segments keep."""
        latest = {k: o for o, (k, _, fate) in sorted(self.recs.items()) if o < end and fate in ("plain", "commit")}
        before = set(self.recs)
        kept_entries = set()
        for o, (k, _, fate) in sorted(self.recs.items()):
            if o >= end:
                continue
            if fate == "marker":
                met = any(d in before for d in self.txn_of_marker[o])  # its records were still there
                if not met and o < self.end:  # first reached by an earlier cleaning, long enough ago
                    del self.recs[o]
                elif met and o in self.aborts:
                    kept_entries.add(self.aborts[o])
            elif fate == "abort" or latest[k] != o:
                del self.recs[o]
        self.end = end
        return kept_entries


def _build(p, store, model: Model, rng: random.Random, steps: int, pids: list[int], seqs: dict[int, int]) -> None:
    """Interleave transactional appends of several producers, commits, aborts, plain appends and rolls."""
    for step in range(steps):
        kind = rng.random()
        pid = rng.choice(pids)
        end = p.log_end_offset
        if kind < 0.45:
            n = rng.randint(1, 3)
            keys = [rng.choice(KEYS) for _ in range(n)]
            vals = [b"%d-%d-%d" % (end, step, i) for i in range(n)]
            first = p.append_values(vals, keys, producer=(pid, 0, seqs[pid]), transactional=True)
            seqs[pid] += n
            model.open.setdefault(pid, []).extend(range(first, first + n))
            model.recs.update({first + i: (keys[i], vals[i], "open") for i in range(n)})
        elif kind < 0.7 and pid in model.open:
            commit = rng.random() < 0.5
            at = internals(p).append_marker(pid, 0, commit=commit)
            offs = model.open.pop(pid)
            for o in offs:
                model.recs[o] = (model.recs[o][0], model.recs[o][1], "commit" if commit else "abort")
            model.recs[at] = (b"", b"", "marker")
            model.txn_of_marker[at] = offs
            if not commit:
                model.aborts[at] = (pid, offs[0], at)
        elif kind < 0.9:
            k = rng.choice(KEYS)
            v = b"p%d-%d" % (end, step)
            model.recs[p.append_values([v], [k])] = (k, v, "plain")
        else:
            p.roll()


def _check(p, model: Model) -> None:
    lso = model.lso(p.log_end_offset)
    assert p.last_stable_offset == lso
    got_uncommitted = [r.value for r in p.read(0, max_records=10 ** 6)]
    assert got_uncommitted == model.values(False, lso)
    got_committed = [r.value for r in p.read(0, max_records=10 ** 6, isolation_level="read_committed")]
    assert got_committed == model.values(True, lso)


def _markers(p) -> list[int]:
    slices = internals(p).read_with_markers(0, 10 ** 6, 1 << 30)
    return [s[0].header.base_offset for s in slices if s[0].header.is_control]


def _entries(p, below: int | None = None) -> set[tuple[int, int, int]]:
    return {(e.producer_id, e.first_offset, e.last_offset) for seg in p.segments
            for e in read_index(index_path(p.directory, seg.base_offset))
            if below is None or e.last_offset < below}


def _clean(p, model: Model, now: int) -> None:
    """Clean by force at ``now`` and check everything against the model."""
    internals(p).sync_rolled()  # as the cleaning does first: the uncleanable offset is then the cleaning's
    uncleanable = cleanable_range(p, now).uncleanable
    lso = p.last_stable_offset
    assert uncleanable <= lso, "never cleans past the last stable offset"
    untouched = _entries(p) - _entries(p, below=uncleanable)
    res = clean_partition(p, BUFFER, now=now, force=True)
    if res.skipped is None:
        assert res.cleaned_up_to == uncleanable
        kept_entries = model.clean(uncleanable)
        assert _entries(p) == kept_entries | untouched
    _check(p, model)
    assert _markers(p) == model.markers()


@pytest.mark.parametrize("seed", range(4))
def test_compacting_transactions_keeps_read_committed_and_uncommitted_as_the_model_says(tmp_path, seed):
    """Committed, aborted and open transactions of three producers with plain records between, over many
    segments; each cleaning (forced, a few delete.retention.ms apart) is checked against the model: records
    and markers by offset, both isolation levels, the LSO and the index entries; then the open
    transactions end, more is appended, and it is cleaned again; finally the store is reopened after a
    crashed writer with its producer snapshot lost, and the state rebuilt from the compacted log agrees."""
    rng = random.Random(seed)
    store = _store(tmp_path, segment_bytes=700)
    try:
        p = _partition(store)
        pids = [store.new_producer_id() for _ in range(3)]
        seqs = dict.fromkeys(pids, 0)
        model = Model()
        now = now_ms()
        for rnd in range(3):
            _build(p, store, model, rng, 70, pids, seqs)
            p.roll()
            _check(p, model)
            _clean(p, model, now + rnd * 3 * DAY_MS)
            _clean(p, model, now + (rnd * 3 + 1) * DAY_MS + 1)  # the markers whose records went, now go too
            if rnd == 1:
                for pid in list(model.open):  # end what is open: the LSO moves and more can be cleaned
                    at = internals(p).append_marker(pid, 0, commit=pid == pids[0])
                    offs = model.open.pop(pid)
                    for o in offs:
                        model.recs[o] = model.recs[o][:2] + ("commit" if pid == pids[0] else "abort",)
                    model.recs[at] = (b"", b"", "marker")
                    model.txn_of_marker[at] = offs
                    if pid != pids[0]:
                        model.aborts[at] = (pid, offs[0], at)
        assert len(p.segments) > 4
        abandon(p)
        store.close()
        os.unlink(os.path.join(p.directory, SNAPSHOT_FILE))  # rebuilt from the compacted log's headers
        store = _store(tmp_path, segment_bytes=700)
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"after-reopen"], [b"a"])  # the writer loads its producer state
        model.recs[p.log_end_offset - 1] = (b"a", b"after-reopen", "plain")
        _check(p, model)
        with pylog.open(str(tmp_path), read_only=True) as reader:
            _check(reader.topic(TOPIC).partition(0), model)
    finally:
        store.close()


def test_records_whose_keys_are_a_markers_bytes_survive_the_markers_and_an_aborted_record(tmp_path):
    """A marker's record never enters the offset map (its key bytes are any user's too), and an aborted
    record never supersedes the committed one of its key."""
    with _store(tmp_path) as store:
        p = _partition(store)
        pid = store.new_producer_id()
        p.append_values([b"user-commit-key", b"user-abort-key"], [b"\x00\x00\x00\x01", b"\x00\x00\x00\x00"])
        p.append_values([b"committed"], [b"k"], producer=(pid, 0, 0), transactional=True)
        internals(p).append_marker(pid, 0, commit=True)
        p.append_values([b"aborted"], [b"k"], producer=(pid, 0, 1), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        p.roll()
        res = clean_partition(p, BUFFER, force=True)
        assert res.aborted_removed == 1 and res.markers_removed == 0
        assert [r.value for r in p.read(0)] == [b"user-commit-key", b"user-abort-key", b"committed"]
        assert [r.value for r in p.read(0, isolation_level="read_committed")] == \
            [b"user-commit-key", b"user-abort-key", b"committed"]
        assert _markers(p) == [3, 5]


def _committed_then_aborted_over_a_roll(store):
    """The partition of a new compacted topic holding ``committed`` then an aborted ``aborted`` of the same key,
    whose abort marker is in the next segment (the active one)."""
    p = _partition(store)
    pid = store.new_producer_id()
    p.append_values([b"committed"], [b"k"])
    p.append_values([b"aborted"], [b"k"], producer=(pid, 0, 0), transactional=True)
    p.roll()
    internals(p).append_marker(pid, 0, commit=False)
    return p


def test_an_index_contradicting_the_markers_stops_the_cleaning_before_anything_is_swapped(tmp_path):
    """An abort whose index entry is lost would let its records pass for committed ones (and supersede the
    committed record of their key): the abort marker gives it away and the cleaning stops, changing nothing;
    an index that cannot be read stops it too."""
    with _store(tmp_path) as store:
        p = _committed_then_aborted_over_a_roll(store)
        p.roll()
        index = index_path(p.directory, p.segments[1].base_offset)
        raw = open(index, "rb").read()
        os.unlink(index)
        with pytest.raises(pylog.errors.CorruptRecordError, match="abort marker of producer .* contradicts"):
            clean_partition(p, BUFFER, force=True)
        assert [r.value for r in p.read(0)] == [b"committed", b"aborted"]
        with open(index, "wb") as f:
            f.write(b"XXXX" + raw[4:])
        with pytest.raises(pylog.errors.CorruptRecordError, match="not an aborted-transaction index"):
            clean_partition(p, BUFFER, force=True)
        with open(index, "wb") as f:
            f.write(raw)
        clean_partition(p, BUFFER, force=True)
        assert [r.value for r in p.read(0)] == [b"committed"]
        assert [r.value for r in p.read(0, isolation_level="read_committed")] == [b"committed"]


def test_a_damaged_last_entry_of_the_active_index_that_its_abort_marker_follows_stops_the_cleaning(tmp_path):
    """The cleaner took a damaged last entry of the active segment's index for a torn write even with its abort
    marker after it, so the aborted record (in a cleaned segment) passed for a committed one and superseded the
    committed record of its key; readers refuse that index, and the cleaner now does too."""
    with _store(tmp_path) as store:
        p = _committed_then_aborted_over_a_roll(store)   # the abort's entry: the active segment's index's last
        p.append_values([b"later"], [b"other"])
        index = index_path(p.directory, p.segments[-1].base_offset)
        raw = bytearray(open(index, "rb").read())
        raw[8 + 20] ^= 0xFF
        with open(index, "wb") as f:
            f.write(raw)
        with pytest.raises(pylog.errors.CorruptRecordError, match="abort marker follows"):
            clean_partition(p, BUFFER, force=True)
        assert [r.value for r in p.read(0)] == [b"committed", b"aborted", b"later"]


def test_a_control_batch_that_is_no_marker_ends_its_transaction_for_the_cleaner_too(tmp_path):
    """A control batch that is not a transaction marker (pylog before transactions let a caller set the bit)
    ends its producer's transaction as the producer state says: the cleaner keeps it, keeps what came
    before it, and the producer's next, aborted transaction is no contradiction."""
    with _store(tmp_path) as store:
        p = _partition(store)
        pid = store.new_producer_id()
        p.append_values([b"t"], [b"k1"], producer=(pid, 0, 0), transactional=True)
        assert append_foreign_control(p, pid, b"not a marker") == 1
        abandon(p)
    with _store(tmp_path) as store:
        p = store.topic(TOPIC).partition(0)
        p.append_values([b"aborted"], [b"k1"], producer=(pid, 0, 1), transactional=True)
        internals(p).append_marker(pid, 0, commit=False)
        p.roll()
        res = clean_partition(p, BUFFER, force=True)
        assert res.aborted_removed == 1
        assert [r.value for r in p.read(0)] == [b"t"]
        assert _markers(p) == [1, 3]


def test_cleaning_stops_at_the_segment_of_the_last_stable_offset(tmp_path):
    """An open transaction's records, and everything after its first, stay as they are (they may still be
    aborted), however many segments follow."""
    with _store(tmp_path, segment_bytes=300) as store:
        p = _partition(store)
        pid = store.new_producer_id()
        p.append_values([b"old-%d" % i for i in range(20)], [b"k"] * 20)
        first = p.append_values([b"open"], [b"k"], producer=(pid, 0, 0), transactional=True)
        for i in range(20):
            p.append_values([b"new-%d" % i], [b"k"])
        p.roll()
        internals(p).sync_rolled()  # as a cleaning does first (else a pending background fsync bounds it)
        rng = cleanable_range(p)
        lso_segment = max(s.base_offset for s in p.segments if s.base_offset <= first)
        assert rng.uncleanable == lso_segment < p.segments[-1].base_offset
        clean_partition(p, BUFFER, force=True)
        values = [r.value for r in p.read(0, max_records=100)]
        assert b"open" in values and values[-20:] == [b"new-%d" % i for i in range(20)]
        assert values.count(b"old-19") == 1 and all(b"old-%d" % i not in values for i in range(5))
        internals(p).append_marker(pid, 0, commit=False)
        clean_partition(p, BUFFER, force=True)
        assert [r.value for r in p.read(0, max_records=100)] == [b"new-19"]


def test_a_marker_stays_delete_retention_ms_after_its_transactions_records_went(tmp_path):
    """A commit marker whose records a later cleaning superseded is kept by that cleaning, and by any other
    within delete.retention.ms of it; then it goes, and the checkpoint forgets the old range."""
    with _store(tmp_path) as store:
        p = _partition(store, **{"delete.retention.ms": 1000})
        pid = store.new_producer_id()
        p.append_values([b"txn"], [b"k"], producer=(pid, 0, 0), transactional=True)
        marker = internals(p).append_marker(pid, 0, commit=True)
        p.roll()
        t0 = 10 ** 12
        clean_partition(p, BUFFER, now=t0, force=True)
        assert _markers(p) == [marker]  # its record is there
        p.append_values([b"newer"], [b"k"])
        p.roll()
        clean_partition(p, BUFFER, now=t0 + 5000, force=True)  # the record goes: the marker was met
        assert [r.value for r in p.read(0)] == [b"newer"] and _markers(p) == [marker]
        assert read_cleaner_checkpoint(p.directory).txn_horizons == [(marker, marker, t0 + 5000)]
        clean_partition(p, BUFFER, now=t0 + 5900, force=True)
        assert _markers(p) == [marker]  # within delete.retention.ms of the cleaning that removed its record
        res = clean_partition(p, BUFFER, now=t0 + 6001, force=True)
        assert _markers(p) == [] and res.markers_removed == 1
        p.append_values([b"x"], [b"x"])
        p.roll()
        clean_partition(p, BUFFER, now=t0 + 9000, force=True)
        assert read_cleaner_checkpoint(p.directory).txn_horizons == []


def test_cleaner_checkpoint_with_transaction_horizons_round_trips_and_without_keeps_version_1(tmp_path):
    cp = CleanerCheckpoint([(10, 5), (20, 6)], [(3, 9, 7), (12, 12, 8)])
    assert cp.encode()[4:6] == b"\x02\x00"
    assert CleanerCheckpoint([(10, 5)]).encode()[4:6] == b"\x01\x00"
    write_cleaner_checkpoint(str(tmp_path), cp)
    assert read_cleaner_checkpoint(str(tmp_path)) == cp
    cp.met_transactions(40, 50, 10 ** 9, 1000)  # the old ranges are past delete.retention.ms: forgotten
    assert cp.txn_horizons == [(40, 50, 10 ** 9)]
    assert cp.marker_held(45, 10 ** 9 + 1000, 1000) and not cp.marker_held(45, 10 ** 9 + 1001, 1000)
    assert not cp.marker_held(51, 10 ** 9, 1000)


def test_many_transaction_horizons_merge_into_a_bounded_list_that_holds_longer_never_shorter():
    cp = CleanerCheckpoint()
    for i in range(200):
        cp.met_transactions(10 * i, 10 * i + 5, 1000 + i, 10 ** 9)
    assert len(cp.txn_horizons) == 64
    for i in range(200):  # every marker met is still held as long as its own cleaning holds it
        assert cp.marker_held(10 * i + 2, 1000 + i + 10 ** 9, 10 ** 9)


def test_retention_past_an_open_transactions_first_records_keeps_it_open_from_the_log_start(tmp_path):
    """Kafka clamps the LSO to the log start: deleting an open transaction's first records leaves it open,
    read_committed readers wait at the log start, and its abort still drops what remains of it."""
    with _store(tmp_path, segment_bytes=300) as store:
        store.create_topic(TOPIC)
        p = store.topic(TOPIC).partition(0)
        pid = store.new_producer_id()
        p.append_values([b"t0"], producer=(pid, 0, 0), transactional=True)
        p.roll()
        p.append_values([b"plain"])
        p.append_values([b"t1"], producer=(pid, 0, 1), transactional=True)
        p.roll()
        p.delete_records(1)
        assert p.log_start_offset == 1 and p.last_stable_offset == 1
        assert [r.value for r in p.read(1, isolation_level="read_committed")] == []
        internals(p).append_marker(pid, 0, commit=False)
        assert p.last_stable_offset == p.log_end_offset
        assert [r.value for r in p.read(1, isolation_level="read_committed")] == [b"plain"]
        assert [r.value for r in p.read(1)] == [b"plain", b"t1"]


# ------------------------------------------------------------------------- SIGKILL during such a cleaning


def _counted(src: str, dst: str = "") -> bool:
    """The file operations a kill lands on: every unlink, and the renames of the cleaner's own files and of
    the swap (not the index seals' temporary files, which are the same whatever the cleaning does)."""
    return not src.endswith(".tmp") or os.path.basename(dst) in ("cleaner.swap", "cleaner.checkpoint")


def _kill_at(countdown: int) -> list[int]:
    """From now on, count this process's counted os.replace and os.unlink calls, and SIGKILL it just before
    the ``countdown``-th (0: never). Returns the counter (a one-item list)."""
    left = [countdown]
    done = [0]

    def wrap(real, rename):
        def call(*args, **kwargs):
            if (_counted(str(args[0]), str(args[1])) if rename else True):
                done[0] += 1
                left[0] -= 1
                if left[0] == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return call
    os.replace = wrap(os.replace, True)  # type: ignore[assignment]
    os.unlink = wrap(os.unlink, False)  # type: ignore[assignment]
    return done


def _clean_child(path: str, countdown: int, now: int) -> None:
    store = _store(path, segment_bytes=700)
    p = store.topic(TOPIC).partition(0)
    _kill_at(countdown)
    clean_partition(p, BUFFER, now=now, force=True)
    os._exit(0)


def _counting_child(path: str, now: int, out) -> None:
    store = _store(path, segment_bytes=700)
    p = store.topic(TOPIC).partition(0)
    done = _kill_at(0)
    clean_partition(p, BUFFER, now=now, force=True)
    out.send(done[0])
    os._exit(0)


def _snapshot(p) -> tuple:
    return ([r.value for r in p.read(0, max_records=10 ** 6)],
            [r.value for r in p.read(0, max_records=10 ** 6, isolation_level="read_committed")],
            p.last_stable_offset, _markers(p))


@pytest.mark.parametrize("step", [pytest.param(1, marks=pytest.mark.slow), 6])
def test_sigkill_at_file_operations_of_a_transactional_cleaning_recovers(tmp_path, step):
    """A child cleans a transactional log (aborted records and markers removed, indexes rewritten) and is
    killed just before its 1st, 1+step-th, ... file rename or unlink (every one in the slow run); each time
    the reopened store reads (both isolation levels, LSO, markers) as before the cleaning or as after it,
    and a cleaning then gives the same result as an uninterrupted one."""
    src = tmp_path / "src"
    rng = random.Random(7)
    store = _store(src, segment_bytes=700)
    p = _partition(store)
    pids = [store.new_producer_id() for _ in range(3)]
    model = Model()
    _build(p, store, model, rng, 80, pids, dict.fromkeys(pids, 0))
    p.roll()
    store.close()
    now = now_ms()
    ctx = multiprocessing.get_context("fork")
    ref = tmp_path / "ref"
    shutil.copytree(src, ref)
    with _store(ref, segment_bytes=700) as store:
        before = _snapshot(store.topic(TOPIC).partition(0))
    recv, send = ctx.Pipe(False)
    child = ctx.Process(target=_counting_child, args=(str(ref), now, send))
    child.start()
    assert recv.poll(120), "the counting child hung"
    total = recv.recv()
    child.join(60)
    with _store(ref, segment_bytes=700) as store:
        after = _snapshot(store.topic(TOPIC).partition(0))
    assert before != after and total > 40
    outcomes = []
    for countdown in range(1, total + 1, step):
        work = tmp_path / f"k{countdown}"
        shutil.copytree(src, work)
        child = ctx.Process(target=_clean_child, args=(str(work), countdown, now))
        child.start()
        child.join(120)
        assert child.exitcode == -signal.SIGKILL, f"the cleaning child was not killed at {countdown}"
        with pylog.open(str(work), read_only=True) as reader:
            # What a lock-free reader sees of the crashed swap (some groups in, some not): between the two,
            # never an aborted record under read_committed (those of ``before`` are not aborted).
            mid = _snapshot(reader.topic(TOPIC).partition(0))
            for level in (0, 1):
                assert set(after[level]) <= set(mid[level]) <= set(before[level]), f"kill at {countdown}"
                assert sorted(mid[level], key=before[level].index) == mid[level]
        with _store(work, segment_bytes=700) as store:
            q = store.topic(TOPIC).partition(0)
            internals(q).ensure_writer()  # the writer open finishes (or undoes) the swap
            got = _snapshot(q)
            assert got in (before, after), f"kill at file operation {countdown}"
            outcomes.append(got == after)
            clean_partition(q, BUFFER, now=now, force=True)
            assert _snapshot(q) == after
            assert not [n for n in os.listdir(q.directory) if ".cleaned" in n or n.endswith(".swap")]
        shutil.rmtree(work)
    assert True in outcomes and False in outcomes  # kills landed before and after the swap's commit point


def test_readers_during_repeated_cleanings_never_see_an_aborted_record(tmp_path):
    """Reader threads (one on the writer's handle, one on a read-only store's, as another process would
    hold) read the whole log read_committed, again and again, while the writer appends transactions
    (aborted ones' values start with "ABORT"), commits, aborts and cleans them over and over: no read ever
    returns an aborted record or goes back in offsets."""

    store = _store(tmp_path, segment_bytes=600)
    reader_store = pylog.open(str(tmp_path), read_only=True)
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]
    try:
        p = _partition(store)
        pid = store.new_producer_id()
        r = reader_store.topic(TOPIC).partition(0)

        def follow(q) -> None:
            while not stop.is_set():
                pos, last = 0, -1
                try:
                    while True:
                        recs = q.read(pos, max_records=50, isolation_level="read_committed")
                        if not recs:
                            break
                        for rec in recs:
                            if rec.value.startswith(b"ABORT") or rec.offset <= last:
                                problems.append(f"offset {rec.offset}: {rec.value!r} after {last}")
                            last = rec.offset
                        pos = recs[-1].offset + 1
                except pylog.errors.OffsetOutOfRangeError:
                    continue
                reads[0] += 1

        threads = [threading.Thread(target=follow, args=(q,)) for q in (p, r)]
        for t in threads:
            t.start()
        rng = random.Random(3)
        seq = 0
        now = now_ms()
        for step in range(25):
            for _ in range(4):
                commit = rng.random() < 0.5
                vals = [(b"C-%d-%d" if commit else b"ABORT-%d-%d") % (step, i) for i in range(3)]
                p.append_values(vals, [rng.choice(KEYS) for _ in vals], producer=(pid, 0, seq), transactional=True)
                seq += len(vals)
                p.append_values([b"plain-%d" % step], [rng.choice(KEYS)])
                internals(p).append_marker(pid, 0, commit=commit)
            p.roll()
            clean_partition(p, BUFFER, now=now + step * 2 * DAY_MS, force=True)
        stop.set()
        for t in threads:
            t.join(60)
        assert not problems, problems[:5]
        assert reads[0] > 2
    finally:
        stop.set()
        reader_store.close()
        store.close()
