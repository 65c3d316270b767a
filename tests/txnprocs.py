"""A transactional producer in a child process, driven through a pipe, that a test can SIGKILL at any point
(tests/test_transactions_process.py, tests/torture/tx_money.py).

The child (forked: it starts in milliseconds) opens its own store and runs one command at a time:
``("init",)``, ``("begin",)``, ``("send", topic, partition, value)``, ``("offsets", group, topic, partition,
offset)``, ``("commit",)``, ``("abort",)``, ``("flush",)``; it answers ``("ok", result)`` or ``("err", error
class name, message)``. :meth:`ProducerProcess.call` waits for the answer (the handshake: no sleeps);
:meth:`ProducerProcess.start_call` sends a command without waiting, so the test can kill the child while
it runs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import pylog
from pylog.structs import TopicPartition

#: Longest wait for one answer of the child (seconds): a hang guard, not a timing assertion.
ANSWER_TIMEOUT = 120


def _serve(conn: Any, path: str, transactional_id: str, timeout_ms: int) -> None:
    # The cleaner enabled, as an application's store has it: its thread keeps the transaction state partitions
    # between appends and hands them over to the other processes that wait for them.
    store = pylog.open(path)
    producer = store.producer(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms)
    while True:
        cmd = conn.recv()
        try:
            result = _run(producer, cmd)
        except Exception as exc:  # reported to the test, which decides what it means
            conn.send(("err", type(exc).__name__, str(exc)[:300]))
            continue
        conn.send(("ok", result))
        if cmd[0] == "exit":
            producer.close()
            store.close()
            return


def _run(producer: Any, cmd: tuple) -> Any:
    op = cmd[0]
    if op == "init":
        return producer.init_transactions()
    if op == "begin":
        return producer.begin_transaction()
    if op == "send":
        _, topic, partition, value = cmd
        return producer.send(topic, value, partition=partition).get(ANSWER_TIMEOUT).offset
    if op == "send_many":
        _, topic, items = cmd
        futures = [producer.send(topic, value, key=key, partition=partition) for partition, key, value in items]
        return [f.get(ANSWER_TIMEOUT).offset for f in futures]
    if op == "offsets":
        _, group, topic, partition, offset = cmd
        return producer.send_offsets_to_transaction({TopicPartition(topic, partition): offset}, group)
    if op == "commit":
        return producer.commit_transaction()
    if op == "abort":
        return producer.abort_transaction()
    if op == "exit":
        return None
    raise ValueError(f"unknown command {cmd!r}")


class ProducerProcess:
    """A forked child running a transactional producer on the store at ``path``."""

    def __init__(self, path: str, transactional_id: str, timeout_ms: int = 60_000) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, path, transactional_id, timeout_ms), daemon=True)
        self.process.start()
        child.close()

    def call(self, *cmd: Any) -> Any:
        """Run ``cmd`` in the child and return its result. :raises ChildError: what the child raised."""
        self.start_call(*cmd)
        return self.answer()

    def start_call(self, *cmd: Any) -> None:
        self._conn.send(cmd)

    def answer(self) -> Any:
        if not self._conn.poll(ANSWER_TIMEOUT):
            raise TimeoutError(f"the producer child gave no answer within {ANSWER_TIMEOUT} s")
        got = self._conn.recv()
        if got[0] == "err":
            raise ChildError(got[1], got[2])
        return got[1]

    def kill(self) -> None:
        """SIGKILL the child and reap it."""
        if self.process.pid is not None and self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(ANSWER_TIMEOUT)
        self._conn.close()

    def stop(self) -> None:
        """Close the producer and the store in the child and let it exit."""
        try:
            self.call("exit")
        finally:
            self.process.join(ANSWER_TIMEOUT)
            self._conn.close()


class ChildError(Exception):
    """What the child raised: ``kind`` is the exception's class name (e.g. "ProducerFencedError")."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
