"""tx_money through ``pylog serve``: the money transfers of tests/torture/tx_money.py made by confluent-kafka's
transactional producers against a ``pylog serve`` process, with the server and the producers SIGKILLed at
random points.

The same accounts, transfers, sequence numbers and checks as tx_money.py (its ``Ledger``: a read_committed
reader of the store, in the main process, beside the server): each mover process is a librdkafka transactional
producer (``transactional.id`` ``mover-<w>``) that sends a transaction's debit and credit records and its
sequence number as the offset of group ``mover-<w>`` (``send_offsets_to_transaction``), then commits, or aborts
about one time in seven. A mover starts from its group's committed offset, fetched through the server by a
read_committed consumer (OffsetFetch with ``require_stable``: never an offset an open transaction is about to
replace). Any error of its client ends the mover process (a fatal or abortable librdkafka error, a commit whose
outcome is unknown); the main process starts it again, and its ``init_transactions`` ends what it left. A mover
that ends no transaction for ``STALL_S`` is SIGKILLed and restarted the same way: after the server was killed,
librdkafka 2.16 producers sometimes wait in ``send_offsets_to_transaction`` or ``commit_transaction`` with the
server up and idle ("No brokers available for Transactions"; with KIP-1102's re-bootstrap on, often; off, as
here, rarely), past their own timeouts. The counts report those (``stalled movers``).

The main process SIGKILLs, at a random moment, either a mover or the server (restarted at once on the same
port: the clients reconnect), then checks as tx_money.py does: no transfer stays half-visible, the balances sum
to the initial total, no record is seen twice, no record of a transaction its producer aborted is visible, and
each mover's committed sequence numbers are 1, 2, ... with no gap and no repeat (its offsets moved exactly with
its records).

Usage::

    python tests/torture/tx_money_server.py --short    # CI: 8 kills (half of them the server's)
    python tests/torture/tx_money_server.py --full     # 200 kills; prints the counts
    python tests/torture/tx_money_server.py --full --seed 7 --kills 500

``run(mode, workdir, seed, kills)`` returns the counts and raises AssertionError naming the violation. With
``TX_MONEY_DEBUG=1`` in the environment, each mover incarnation's librdkafka transaction log
(``mover-<w>-<n>.log``) and the server's DEBUG log (``server.log``) are kept in the work directory.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run as a script

import pylog  # noqa: E402
from tx_money import INITIAL, SEQ_TOPIC, SETTLE_S, TOPIC, Ledger, _aborted, final_check  # noqa: E402

MODES = {
    # accounts, partitions, producers, kills, max delay before a kill (s), share of the kills that hit the server
    "short": dict(accounts=20, partitions=4, producers=2, kills=8, delay=0.5, server_share=0.5),
    "full": dict(accounts=50, partitions=6, producers=3, kills=200, delay=0.6, server_share=0.4),
}
#: The longest a client call may take: a server restart happens within it.
CALL_S = 60
#: A mover that ended no transaction for this long is stalled (see the module docstring): killed and restarted.
STALL_S = 15.0


def _mover(bootstrap: str, workdir: str, w: int, incarnation: int, seed: int, accounts: int, partitions: int,
           ready: Any) -> None:
    """A confluent-kafka transactional producer process: transfers until SIGKILLed or a client error."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    try:
        group = f"mover-{w}"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                             "enable.auto.commit": False, "log_level": 0})
        debug = {}
        if os.environ.get("TX_MONEY_DEBUG"):  # librdkafka's transaction log of each incarnation, in the workdir
            import logging
            logger = logging.getLogger(f"mover-{w}-{incarnation}")
            logger.addHandler(logging.FileHandler(os.path.join(workdir, f"mover-{w}-{incarnation}.log")))
            logger.setLevel(logging.DEBUG)
            debug = {"debug": "eos,msg", "logger": logger}
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group, "linger.ms": 2,
                             "transaction.timeout.ms": 60_000, "metadata.recovery.strategy": "none",
                             "log_level": 0 if not debug else 7, **debug})
        producer.init_transactions(CALL_S)
        committed = consumer.committed([TopicPartition(SEQ_TOPIC, w)], CALL_S)[0].offset
        seq = max(0, committed)
        progress = os.path.join(workdir, f"progress-{w}")
        with open(progress, "w"):
            pass
        ready.send("ready")
        rng = random.Random(seed)
        aborted_log = open(os.path.join(workdir, f"aborted-{w}.txt"), "a")
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
                    producer.produce(TOPIC, value, key=str(acct).encode(), partition=acct % partitions)
                    producer.poll(0)  # serve delivery reports as a real application does
            producer.send_offsets_to_transaction([TopicPartition(SEQ_TOPIC, w, seq + 1)],
                                                 consumer.consumer_group_metadata(), CALL_S)
            if rng.random() < 1 / 7:
                aborted_log.write(txn + "\n")
                aborted_log.flush()
                os.fsync(aborted_log.fileno())  # before the abort: a kill after it must still know
                producer.abort_transaction(CALL_S)
            else:
                producer.commit_transaction(CALL_S)
                seq += 1
            os.utime(progress)  # a transaction ended: the main process's stall watch sees it
    except KafkaException:
        os._exit(3)  # the main process starts another incarnation, whose init_transactions ends this one's


class Server:
    """A ``pylog serve`` process on a fixed port, SIGKILLed and restarted on demand."""

    def __init__(self, path: str) -> None:
        self.path = path
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        deadline = time.monotonic() + 60
        while True:  # the port of the killed one may linger for a moment
            extra = ["--log-level", "DEBUG"] if os.environ.get("TX_MONEY_DEBUG") else []
            proc = subprocess.Popen([sys.executable, "-m", "pylog", "serve", self.path, "--port", str(self.port),
                                     *extra], stderr=subprocess.PIPE, text=True)
            assert proc.stderr is not None
            lines = []
            for line in proc.stderr:
                lines.append(line)
                if re.search(r"listening on", line):
                    threading.Thread(target=self._drain, args=(proc,), daemon=True).start()
                    self.proc = proc
                    return
            proc.wait(10)
            assert time.monotonic() < deadline, "pylog serve did not start:\n" + "".join(lines[-20:])
            time.sleep(0.2)

    def _drain(self, proc: subprocess.Popen) -> None:
        """Read the server's log so its pipe never fills (kept in the workdir with TX_MONEY_DEBUG)."""
        keep = open(os.path.join(os.path.dirname(self.path), "server.log"), "a") if os.environ.get(
            "TX_MONEY_DEBUG") else None
        for line in proc.stderr or ():
            if keep is not None:
                keep.write(line)
                keep.flush()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(60)
            self.proc = None


def run(mode: str, workdir: str, seed: int | None = None, kills: int | None = None) -> Counter:
    cfg = dict(MODES[mode])
    if kills is not None:
        cfg["kills"] = kills
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    print(f"tx_money_server {mode}: seed {seed}, {cfg}", flush=True)
    path = os.path.join(workdir, "store")
    accounts, partitions, producers = cfg["accounts"], cfg["partitions"], cfg["producers"]
    with pylog.open(path, log_cleaner_enable=False) as store:
        store.create_topic(TOPIC, partitions)
        store.create_topic(SEQ_TOPIC, producers)
        with store.producer(transactional_id="deposit") as bank:
            bank.init_transactions()
            bank.begin_transaction()
            for a in range(accounts):
                value = json.dumps({"txn": "deposit", "n": accounts, "w": -1, "seq": 0, "k": a, "a": a,
                                    "d": INITIAL}).encode()
                bank.send(TOPIC, value, key=str(a).encode(), partition=a % partitions)
            bank.commit_transaction()
    server = Server(path)
    server.start()
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds librdkafka's threads
    ledger = Ledger(path, partitions)
    movers: list[Any] = [None] * producers
    incarnations = [0] * producers
    counts: Counter = Counter()

    def start(w: int) -> None:
        while True:
            incarnations[w] += 1
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_mover, args=(server.bootstrap, workdir, w, incarnations[w],
                                                    rng.randrange(1 << 30), accounts, partitions, theirs),
                               daemon=True)
            proc.start()
            theirs.close()
            got = ours.poll(CALL_S * 2)
            ours.close()
            if got:
                movers[w] = proc
                return
            assert proc.exitcode == 3, f"mover {w} did not start within {CALL_S * 2} s"
            counts["mover errors"] += 1  # its client failed while starting (a server just killed): again

    def restart_failed() -> None:
        for w, proc in enumerate(movers):
            if not proc.is_alive():
                assert proc.exitcode == 3, f"mover {w} died with exit code {proc.exitcode}"
                counts["mover errors"] += 1
                start(w)

    def settle() -> None:
        """tx_money's Ledger.settle, restarting movers that ended by themselves (their transaction stays open
        until a new incarnation's init_transactions) and those stalled in a client call."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            ledger.read()
            half = ledger.half_visible()
            if not half:
                return
            assert time.monotonic() < deadline, f"transactions stayed half-visible for {SETTLE_S} s: {half[:5]}"
            restart_failed()
            for w in range(producers):
                try:
                    idle = time.time() - os.stat(os.path.join(workdir, f"progress-{w}")).st_mtime
                except FileNotFoundError:
                    continue
                if idle > STALL_S and movers[w].is_alive():
                    kill(w)
                    counts["stalled movers"] += 1
                    start(w)
            time.sleep(0.05)

    def kill(w: int) -> None:
        try:
            os.kill(movers[w].pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended by itself (a client error): counted when restarted
            pass
        movers[w].join(60)

    try:
        for w in range(producers):
            start(w)
        started = time.monotonic()
        for i in range(cfg["kills"]):
            time.sleep(rng.uniform(0.0, cfg["delay"]))  # a random kill point in the movers' loops
            if rng.random() < cfg["server_share"]:
                server.kill()
                counts["server kills"] += 1
                server.start()
            else:
                w = rng.randrange(producers)
                if movers[w].is_alive():
                    kill(w)
                    counts["producer kills"] += 1
                    start(w)  # its init_transactions aborts (or completes) what the killed one left
            restart_failed()
            settle()
            ledger.check(accounts, _aborted(workdir, producers))
            if (i + 1) % 25 == 0:
                print(f"  {i + 1} kills, {len(ledger.txns)} committed transactions, {time.monotonic() - started:.0f} s",
                      flush=True)
        for w in range(producers):
            if movers[w].is_alive():
                kill(w)
        server.kill()
        final_check(path, workdir, producers, accounts, ledger, counts)
    finally:
        for proc in movers:
            if proc is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
                proc.join(60)
        server.kill()
        ledger.store.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--full", action="store_const", const="full", dest="mode")
    mode.add_argument("--short", action="store_const", const="short", dest="mode")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--kills", type=int)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="tx_money_server-")
    try:
        started = time.monotonic()
        counts = run(args.mode, workdir, args.seed, args.kills)
        print(f"tx_money_server {args.mode}: OK in {time.monotonic() - started:.0f} s: {dict(counts)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
