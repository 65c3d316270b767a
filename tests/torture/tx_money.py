"""Money transfers as transactions, with producer processes SIGKILLed at random points (Redpanda's tx_money).

N accounts live in the partitions of topic ``accounts`` (account ``a`` in partition ``a % P``). A deposit
transaction gives each account its initial balance; then M producer processes (forked, each a transactional
producer with its own ``transactional_id``) loop: begin, a few transfers (a debit record in the payer's
partition, a credit record in the payee's: two partitions, mostly), the transaction's sequence number sent as
the offset of group ``mover-<w>`` (``send_offsets_to_transaction``), then commit, or abort about one time in
seven. A restarted producer continues from its group's committed offset, as a consume -> produce loop
continues from its input's committed offset.

The main process SIGKILLs a random producer at a random point (in a send, inside commit_transaction, in the
coordinator's marker writes...), restarts it (its ``init_transactions`` aborts or completes what the killed
one left), then reads every partition read_committed and checks:

- no transfer is half-visible once the transactions in flight have ended (a reader may see one leg of a
  transaction whose markers are being written: it waits, up to a bound, for the other);
- the balances sum to the initial total;
- no record is seen twice, and no record of a transaction its producer aborted is ever seen;
- exactly-once of the offsets: each producer's committed transactions carry the sequence numbers 1, 2, ...
  with no gap and no repeat (the group's offset moved exactly with the transaction's records).

Usage::

    python tests/torture/tx_money.py --full    # >= 200 kills, 4 producers; prints the counts
    python tests/torture/tx_money.py --short   # CI: about 10 kills, under a minute
    python tests/torture/tx_money.py --full --seed 7 --kills 500
    python tests/torture/tx_money.py --full --state-flush-messages 1000000   # the coordinator without fsyncs

``run(mode, workdir, seed, kills)`` returns the counts and raises AssertionError naming the violation.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run as a script

import pylog  # noqa: E402
from pylog.structs import TopicPartition  # noqa: E402

TOPIC = "accounts"
SEQ_TOPIC = "mover-seq"  # the "input" whose offsets each producer commits (one partition per producer)
MODES = {
    # accounts, partitions, producers, kills, max delay before a kill (s)
    "short": dict(accounts=20, partitions=4, producers=3, kills=10, delay=0.25),
    "full": dict(accounts=50, partitions=6, producers=4, kills=200, delay=0.4),
}
INITIAL = 1000
#: How long a half-visible transaction may stay so after its producer was restarted (s): a hang guard.
SETTLE_S = 60.0


def _mover(path: str, w: int, incarnation: int, seed: int, accounts: int, partitions: int, ready: Any) -> None:
    """A producer process: transfers forever (until SIGKILLed). Its store's cleaner thread is on, as in an
    application: it keeps transaction state partitions between appends and hands them to other processes."""
    store = pylog.open(path)
    producer = store.producer(transactional_id=f"mover-{w}")
    producer.init_transactions()
    group, tp = f"mover-{w}", TopicPartition(SEQ_TOPIC, w)
    om = store.committed_offsets(group).get(tp)
    seq = 0 if om is None else om.offset
    ready.send("ready")
    rng = random.Random(seed)
    aborted_log = open(os.path.join(os.path.dirname(path), f"aborted-{w}.txt"), "a")
    attempt = 0
    while True:
        attempt += 1
        txn = f"{w}.{incarnation}.{attempt}"
        transfers = rng.randint(1, 4)
        producer.begin_transaction()
        for k in range(transfers):
            a, b = rng.sample(range(accounts), 2)
            amount = rng.randint(1, 50)
            for acct, delta in ((a, -amount), (b, amount)):
                value = json.dumps({"txn": txn, "n": 2 * transfers, "w": w, "seq": seq + 1, "k": k, "a": acct,
                                    "d": delta}).encode()
                producer.send(TOPIC, value, key=str(acct).encode(), partition=acct % partitions)
        producer.send_offsets_to_transaction({tp: seq + 1}, group)
        if rng.random() < 1 / 7:
            aborted_log.write(txn + "\n")
            aborted_log.flush()
            os.fsync(aborted_log.fileno())  # before the abort: a kill after it must still know
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            seq += 1


class Ledger:
    """The main process's read_committed view of the accounts, read incrementally."""

    def __init__(self, path: str, partitions: int) -> None:
        self.store = pylog.open(path, read_only=True)
        self.positions = [0] * partitions
        self.records: Counter = Counter()  # (txn, k, account, delta) -> times seen
        self.txns: dict[str, list[dict]] = {}

    def read(self) -> None:
        topic = self.store.topic(TOPIC)
        for n, pos in enumerate(self.positions):
            p = topic.partition(n)
            while recs := p.read(pos, max_records=10_000, isolation_level="read_committed"):
                for r in recs:
                    doc = json.loads(r.value)
                    self.records[(doc["txn"], doc["k"], doc["a"], doc["d"])] += 1
                    self.txns.setdefault(doc["txn"], []).append(doc)
                pos = recs[-1].offset + 1
            self.positions[n] = pos

    def half_visible(self) -> list[str]:
        return [t for t, docs in self.txns.items() if len(docs) < docs[0]["n"]]

    def settle(self) -> None:
        """Read until no transaction is half-visible (its markers being written by a live producer or by
        the restarted one's init). :raises AssertionError: when one stays so for SETTLE_S."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            self.read()
            half = self.half_visible()
            if not half:
                return
            assert time.monotonic() < deadline, f"transactions stayed half-visible for {SETTLE_S} s: {half[:5]}"
            time.sleep(0.01)

    def check(self, accounts: int, aborted: set[str]) -> None:
        twice = [k for k, n in self.records.items() if n > 1]
        assert not twice, f"records seen more than once: {twice[:5]}"
        leaked = sorted(set(self.txns) & aborted)
        assert not leaked, f"records of aborted transactions are visible: {leaked[:5]}"
        balances = Counter()
        for docs in self.txns.values():
            for d in docs:
                balances[d["a"]] += d["d"]
        total = sum(balances.values())
        assert total == accounts * INITIAL, f"the balances sum to {total}, not {accounts * INITIAL}"
        by_mover: dict[int, Counter] = {}
        for t, docs in self.txns.items():
            if docs[0]["w"] >= 0:
                by_mover.setdefault(docs[0]["w"], Counter())[docs[0]["seq"]] += 1
        for w, seqs in by_mover.items():
            repeated = [s for s, n in seqs.items() if n > 1]
            assert not repeated, f"mover {w}: sequence numbers committed twice (offsets not exactly-once): {repeated}"
            assert sorted(seqs) == list(range(1, len(seqs) + 1)), \
                f"mover {w}: committed sequence numbers have a gap: {sorted(set(range(1, max(seqs) + 1)) - set(seqs))}"



def final_check(path: str, workdir: str, producers: int, accounts: int, ledger: "Ledger", counts: dict) -> None:
    """After the last kills: end what they left open (each mover's id initialised once more), check the ledger
    a last time and add the run's totals to ``counts``."""
    with pylog.open(path, log_cleaner_enable=False) as store:
        for w in range(producers):
            with store.producer(transactional_id=f"mover-{w}") as closing:
                closing.init_transactions()
    ledger.settle()
    ledger.check(accounts, _aborted(workdir, producers))
    counts["committed"] = len(ledger.txns) - 1
    counts["aborted"] = len(_aborted(workdir, producers))
    counts["records"] = sum(ledger.records.values())

def _aborted(workdir: str, producers: int) -> set[str]:
    out: set[str] = set()
    for w in range(producers):
        try:
            with open(os.path.join(workdir, f"aborted-{w}.txt")) as f:
                out.update(line.strip() for line in f if line.strip())
        except FileNotFoundError:
            pass
    return out


def run(mode: str, workdir: str, seed: int | None = None, kills: int | None = None,
        state_flush_messages: int | None = None) -> Counter:
    cfg = dict(MODES[mode])
    if kills is not None:
        cfg["kills"] = kills
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    flush = f", __transaction_state flush.messages={state_flush_messages}" if state_flush_messages else ""
    print(f"tx_money {mode}: seed {seed}, {cfg}{flush}", flush=True)
    path = os.path.join(workdir, "store")
    accounts, partitions, producers = cfg["accounts"], cfg["partitions"], cfg["producers"]
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions)
        store.create_topic(SEQ_TOPIC, producers)
        if state_flush_messages is not None:  # Kafka's behaviour: the coordinator leaves its fsyncs to the policy
            store.alter_topic_config("__transaction_state", {"flush.messages": state_flush_messages})
        with store.producer(transactional_id="deposit") as bank:
            bank.init_transactions()
            bank.begin_transaction()
            for a in range(accounts):
                value = json.dumps({"txn": "deposit", "n": accounts, "w": -1, "seq": 0, "k": a, "a": a,
                                    "d": INITIAL}).encode()
                bank.send(TOPIC, value, key=str(a).encode(), partition=a % partitions)
            bank.commit_transaction()
    ctx = multiprocessing.get_context("fork")
    ledger = Ledger(path, partitions)
    movers: list[Any] = [None] * producers
    incarnations = [0] * producers
    counts: Counter = Counter()

    def start(w: int) -> None:
        incarnations[w] += 1
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_mover, args=(path, w, incarnations[w], rng.randrange(1 << 30), accounts,
                                                partitions, theirs), daemon=True)
        proc.start()
        theirs.close()
        assert ours.poll(120), f"mover {w} did not start within 120 s"
        ours.recv()
        ours.close()
        movers[w] = proc

    def kill(w: int) -> None:
        os.kill(movers[w].pid, signal.SIGKILL)
        movers[w].join(60)

    try:
        for w in range(producers):
            start(w)
        started = time.monotonic()
        for i in range(cfg["kills"]):
            time.sleep(rng.uniform(0.0, cfg["delay"]))  # a random kill point in the movers' loops
            w = rng.randrange(producers)
            kill(w)
            counts["kills"] += 1
            start(w)  # its init_transactions aborts (or completes) what the killed one left
            ledger.settle()
            ledger.check(accounts, _aborted(workdir, producers))
            if (i + 1) % 25 == 0:
                print(f"  {i + 1} kills, {len(ledger.txns)} committed transactions, {time.monotonic() - started:.0f} s",
                      flush=True)
        for w in range(producers):
            kill(w)
        final_check(path, workdir, producers, accounts, ledger, counts)
    finally:
        for proc in movers:
            if proc is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
                proc.join(60)
        ledger.store.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--full", action="store_const", const="full", dest="mode")
    mode.add_argument("--short", action="store_const", const="short", dest="mode")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--kills", type=int)
    ap.add_argument("--state-flush-messages", type=int, metavar="N",
                    help="set flush.messages=N on __transaction_state (the coordinator does not fsync: SIGKILLs "
                         "must still leave every transaction all-or-nothing)")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="tx_money-")
    try:
        started = time.monotonic()
        counts = run(args.mode, workdir, args.seed, args.kills, args.state_flush_messages)
        print(f"tx_money {args.mode}: OK in {time.monotonic() - started:.0f} s: {dict(counts)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
