"""Expiry of transactional ids (``transactional.id.expiration.ms``, pylog/clients/transactions.py ``expire``): an
idle id's state becomes a tombstone in __transaction_state and its lock file goes, so a client cycling through
ids leaves a bounded store; an id with an open transaction never expires."""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import replace

import pytest

import pylog
import pylog.clients.transactions as transactions
from pylog.clients.transactions import TxnState
from pylog.errors import (InvalidConfigError, InvalidProducerIdMappingError, ProducerFencedError,
                          TransactionalIdNotFoundError)
from pylog.storage.records import now_ms
from pylog.store import transaction_coordinator
from pylog.structs import TopicPartition as TP

TTL = 1000
DAY = 86_400_000


@pytest.fixture
def store(tmp_path):
    # Small state segments, so compaction (which leaves the active segment alone) reaches most records.
    s = pylog.open(tmp_path / "s", log_cleaner_enable=False, transactional_id_expiration_ms=TTL,
                   transaction_state_log_segment_bytes=1024)
    s.create_topic("t", 3)
    yield s
    s.close()


def _lock_files(store):
    d = os.path.join(store.path, "__transactions")
    return sorted(n for n in os.listdir(d) if n.endswith(".lock")) if os.path.isdir(d) else []


def _state_records(store):
    """Records of __transaction_state: (below the active segments, in them)."""
    below = active = 0
    for p in store.topic("__transaction_state").partitions:
        base = p.segments[-1].base_offset
        for r in p.read(p.log_start_offset, max_records=1 << 20):
            below += r.offset < base
            active += r.offset >= base
    return below, active


def _committed_once(c, tid):
    pid, epoch = c.init_producer_id(tid, 60_000)
    c.add_partitions(tid, pid, epoch, [TP("t", 0)])
    c.end_txn(tid, pid, epoch, True)
    return pid, epoch


def test_an_idle_id_expires_once_idle_past_the_setting_and_stays_gone_after_a_reopen(store, tmp_path):
    c = transaction_coordinator(store)
    _committed_once(c, "app")
    last = c.describe("app").update_ms
    assert c.expire(now=last + TTL) == []  # not yet: idle exactly the setting
    assert c.describe("app").state == TxnState.COMPLETE_COMMIT and _lock_files(store) == ["app.lock"]
    assert c.expire(now=last + TTL + 1) == ["app"]
    with pytest.raises(TransactionalIdNotFoundError):
        c.describe("app")
    assert store.list_transactions() == [] and _lock_files(store) == []
    store.close()
    with pylog.open(tmp_path / "s", log_cleaner_enable=False) as again:  # the tombstone is read as absence
        with pytest.raises(TransactionalIdNotFoundError):
            transaction_coordinator(again).describe("app")


def test_an_expired_id_starts_afresh_and_its_old_incarnation_is_refused(store):
    c = transaction_coordinator(store)
    old_pid, old_epoch = _committed_once(c, "app")
    c.init_producer_id("app", 60_000)  # epoch 1
    assert c.expire(now=now_ms() + TTL + 1) == ["app"]
    pid, epoch = c.init_producer_id("app", 60_000)
    assert pid != old_pid and epoch == 0
    meta = c.describe("app")
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.EMPTY, pid, 0)
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("app", old_pid, old_epoch + 1, [TP("t", 1)])
    c.add_partitions("app", pid, epoch, [TP("t", 1)])  # the fresh incarnation works as any new one
    c.end_txn("app", pid, epoch, True)
    assert c.describe("app").state == TxnState.COMPLETE_COMMIT


def test_a_library_producer_whose_id_expired_gets_a_fatal_error_and_a_new_one_works(store):
    with store.producer(transactional_id="app") as p:
        p.init_transactions()
        assert transaction_coordinator(store).expire(now=now_ms() + TTL + 1) == ["app"]
        p.begin_transaction()
        p.send("t", b"late", partition=0)
        with pytest.raises(ProducerFencedError) as err:  # fatal, as after a fence: the id is no longer its
            p.flush()
            p.commit_transaction()
        assert isinstance(err.value.__cause__, InvalidProducerIdMappingError)
        with pytest.raises(ProducerFencedError):
            p.begin_transaction()
    with store.producer(transactional_id="app") as again:
        again.init_transactions()
        again.begin_transaction()
        again.send("t", b"fresh", partition=0)
        again.commit_transaction()
    assert [r.value for r in store.topic("t").partition(0).read(0, isolation_level="read_committed")] == [b"fresh"]


def test_an_open_or_half_ended_transaction_never_expires(store):
    c = transaction_coordinator(store)
    pid, epoch = c.init_producer_id("open", 900_000)
    c.add_partitions("open", pid, epoch, [TP("t", 0)])
    ppid, pepoch = c.init_producer_id("ending", 900_000)
    c.add_partitions("ending", ppid, pepoch, [TP("t", 1)])
    store._txn_log.append(replace(c.describe("ending"), state=TxnState.PREPARE_ABORT), True, 1000)
    c.init_producer_id("idle", 60_000)
    assert c.expire(now=now_ms() + 10 * DAY) == ["idle"]
    assert c.describe("open").state == TxnState.ONGOING
    assert c.describe("ending").state == TxnState.PREPARE_ABORT
    assert _lock_files(store) == ["ending.lock", "open.lock"]


def test_an_id_whose_lock_is_held_is_left_for_the_next_sweep(store):
    c = transaction_coordinator(store)
    c.init_producer_id("app", 60_000)
    fd = os.open(os.path.join(store.path, "__transactions", "app.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert c.expire(now=now_ms() + TTL + 1) == []
    finally:
        os.close(fd)
    assert c.describe("app").state == TxnState.EMPTY
    assert c.expire(now=now_ms() + TTL + 1) == ["app"]


def test_a_waiter_that_locks_a_file_its_expiry_unlinked_takes_the_new_file(store, monkeypatch):
    c = transaction_coordinator(store)
    old_pid, _ = c.init_producer_id("app", 60_000)
    path = os.path.join(store.path, "__transactions", "app.lock")
    old_inode = os.stat(path).st_ino
    sweeper = transaction_coordinator(store)
    real = transactions.try_flock
    waiter: list[int] = []  # the inode of each file the waiter (c) tries to lock
    expiring = []

    def flock_after_an_expiry(fd):
        if expiring:  # the sweeper's own lock
            return real(fd)
        if not waiter:
            # The waiter has opened the old file; another coordinator expires the id (tombstone, unlink)
            # before the waiter's flock, which then succeeds on the unlinked file.
            expiring.append(True)
            assert sweeper.expire(now=now_ms() + TTL + 1) == ["app"]
            expiring.clear()
            assert not os.path.exists(path)
        waiter.append(os.fstat(fd).st_ino)
        return real(fd)

    monkeypatch.setattr(transactions, "try_flock", flock_after_an_expiry)
    pid, epoch = c.init_producer_id("app", 60_000)
    monkeypatch.undo()
    # The waiter let the unlinked file go and locked the one its path names now (a new file, which may
    # reuse the freed inode's number): two lock attempts, and the path names a file again.
    assert len(waiter) == 2 and waiter[0] == old_inode and os.path.exists(path)
    assert pid != old_pid and epoch == 0


def test_inits_racing_expiries_of_their_id_never_get_the_same_producer_id_and_epoch(store):
    # Threads of one process exclude each other through flock as processes do (a descriptor each). Were a
    # waiter to act on a lock file an expiry unlinked beside a newcomer on the next file, two inits would read
    # the same state and hand out the same (producer id, epoch).
    coordinators = [transaction_coordinator(store) for _ in range(3)]
    sweeper = transaction_coordinator(store)
    got: list[tuple[int, int]] = []
    expired = []
    errors = []
    done = threading.Event()

    def init(c):
        try:
            for _ in range(40):
                got.append(tuple(c.init_producer_id("racy", 60_000)))
        except Exception as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    def expire():
        while not done.is_set():
            expired.extend(sweeper.expire(now=now_ms() + TTL + 1))

    threads = [threading.Thread(target=init, args=(c,)) for c in coordinators]
    expirer = threading.Thread(target=expire)
    for t in [*threads, expirer]:
        t.start()
    for t in threads:
        t.join(120)
    done.set()
    expirer.join(120)
    assert errors == [] and len(got) == 120
    assert len(set(got)) == len(got), "two inits acted for the id at once"
    assert expired, "no expiry raced the inits"


def test_a_lock_file_left_without_a_state_is_removed_unless_held(store):
    c = transaction_coordinator(store)
    c.init_producer_id("gone", 60_000)
    c.init_producer_id("held", 60_000)
    # What an expiry killed between its tombstone and its unlink leaves: lock files without a state.
    for tid in ("gone", "held"):
        store._txn_log.append(c.describe(tid), True, 1000, tombstone=True)
    assert _lock_files(store) == ["gone.lock", "held.lock"]
    fd = os.open(os.path.join(store.path, "__transactions", "held.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert c.expire() == []
        assert _lock_files(store) == ["held.lock"]  # its holder is alive: left alone
    finally:
        os.close(fd)
    c.expire()
    assert _lock_files(store) == []


@pytest.mark.parametrize("rounds, ids", [(2, 60), pytest.param(4, 250, marks=pytest.mark.slow)])
def test_many_ids_created_and_expired_leave_bounded_state_records_and_no_lock_files(store, rounds, ids):
    c = transaction_coordinator(store)
    now = now_ms()
    for r in range(rounds):
        for i in range(ids):
            c.init_producer_id(f"app-{r}-{i}", 60_000)
        assert len(_lock_files(store)) == ids
        now = max(now, now_ms()) + TTL + 1
        assert len(c.expire(now=now)) == ids
        assert _lock_files(store) == [] and store.list_transactions() == []
        # Compaction keeps each tombstone delete.retention.ms (a day) after the first cleaning that reached
        # it, then drops it: two cleanings a day apart leave what the active segments hold.
        now += 1
        store.compact("__transaction_state", now=now)
        now += DAY + 1
        store.compact("__transaction_state", now=now)
        below, active = _state_records(store)
        # Compaction leaves the active segments alone (8 partitions of 1 KiB ones, about 8 records each):
        # below them stays at most the older state of each tombstone they hold, whatever the ids expired.
        assert below <= active <= 8 * 16, (r, below, active)
        assert store.list_transactions() == []


def test_the_setting_is_checked(tmp_path):
    with pytest.raises(InvalidConfigError, match="transactional.id.expiration.ms"):
        pylog.open(tmp_path / "s", transactional_id_expiration_ms=0)
