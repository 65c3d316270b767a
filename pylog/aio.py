"""asyncio clients shaped like aiokafka's: :class:`AIOKafkaProducer` and :class:`AIOKafkaConsumer`.

Both take ``bootstrap_servers`` as :mod:`pylog.kafka` does (a store path, ``pylog:///path`` or a
:class:`~pylog.store.Store`) and aiokafka's keyword arguments, and wrap the synchronous clients.

How waiting reaches the event loop:

- **Producer.** ``send()`` queues the record with the synchronous producer (which never waits for I/O;
  with ``buffer_memory`` full it drains in place, as it does for any caller) and returns an
  :class:`asyncio.Future`. The producer's sender thread completes records in bulk; each completion is put
  on a queue, and one ``call_soon_threadsafe`` (one write to the loop's self-pipe) hands every completion
  queued since the last one to the loop: one wake-up per drain, not per record.
- **Consumer.** The synchronous :class:`~pylog.clients.consumer.Consumer` belongs to one worker thread
  (a single-thread executor per consumer: no thread per partition). A fetch that has to wait runs there:
  the worker sleeps in pylog's own wake-ups (the partition's condition variable for this process's
  appends, its notify futex for other processes', :mod:`pylog.storage.notify`), and the result reaches
  the loop through the executor's future. Nothing polls on a timer beyond what the synchronous consumer
  does (the notify slices): an idle async consumer costs what an idle synchronous one does
  (``benchmarks/bench_clients.py`` measures both).

Invariants:
- The synchronous consumer is used by one thread at a time: every call holds ``_lock``. The worker holds
  it only for one wait step (:data:`_STEP` seconds at most), so a ``seek()`` from another task while a
  fetch waits is delayed by at most that.
- Fetched records are buffered before they are handed out, and a partition's position only moves past a
  record once ``getone()`` / ``getmany()`` has returned it: a commit never covers a record the
  application has not seen, and a fetch whose awaiting task was cancelled loses nothing (its records are
  handed out by the next call).
- A ``seek*``, ``pause``, ``assign``, ``subscribe`` or ``unsubscribe`` drops what is buffered for the
  partitions it concerns, so a record from before the seek is never handed out after it.
- Rebalance listeners run in the worker thread, inside a fetch, as in aiokafka; a listener method that
  is a coroutine function runs on the event loop and the rebalance waits for it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from typing import Any, AsyncIterator, Callable, Iterable

from .clients.consumer import ConsumerRecord, OffsetAndTimestamp
from .clients.producer import FutureRecordMetadata
from .errors import ConsumerStoppedError
from .kafka import KafkaConsumer, KafkaProducer
from .structs import OffsetAndMetadata, RecordMetadata, TopicPartition

__all__ = ["AIOKafkaProducer", "AIOKafkaConsumer", "ConsumerStoppedError"]

#: Longest single wait of the consumer's worker (seconds): bounds how long a call from another task waits
#: for the consumer while a fetch sleeps, and how long stop() waits for a fetch under way.
_STEP = 0.1
#: aiokafka settings that mean nothing here, dropped without a warning: the event loop argument it
#: deprecated, and its fetch wait (``consumer_timeout_ms``: iteration never ends on a timeout here).
_AIO_ONLY = frozenset({"loop", "consumer_timeout_ms", "rebalance_timeout_ms"})


def _without_aio_only(configs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in configs.items() if k not in _AIO_ONLY}


class AIOKafkaProducer:
    """aiokafka's ``AIOKafkaProducer`` over a store: ``await producer.start()`` (or ``async with``),
    ``fut = await producer.send(topic, value)``, ``await producer.send_and_wait(...)``,
    ``await producer.stop()``.

    Options: :class:`pylog.kafka.KafkaProducer`'s (kafka-python's names), plus aiokafka's
    ``max_batch_size`` (``batch_size``).

    Transactions, as aiokafka has them: with ``transactional_id``, :meth:`start` initialises the
    transactions (fencing an earlier producer with that id); ``async with producer.transaction():`` begins
    one, commits it when the block ends and aborts it when the block raises; or ``begin_transaction()``
    and the coroutines ``send_offsets_to_transaction(offsets, group_id)``, ``commit_transaction()``,
    ``abort_transaction()``."""

    def __init__(self, **configs: Any) -> None:
        configs = _without_aio_only(configs)
        if "max_batch_size" in configs:
            configs["batch_size"] = configs.pop("max_batch_size")
        self._producer = KafkaProducer(**configs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: collections.deque[tuple[asyncio.Future, Any, bool]] = collections.deque()
        self._scheduled = False

    @property
    def producer(self) -> KafkaProducer:
        """The synchronous producer underneath (for its ``metrics()``, or to share with threads)."""
        return self._producer

    async def start(self) -> None:
        """Bind the producer to the running event loop (aiokafka connects here), and with a
        ``transactional_id`` initialise its transactions (aiokafka does too)."""
        self._loop = asyncio.get_running_loop()
        if self._producer.config["transactional_id"] is not None:
            await self._loop.run_in_executor(None, self._producer.init_transactions)

    def begin_transaction(self) -> None:
        """Open a transaction (see :meth:`pylog.clients.producer.Producer.begin_transaction`)."""
        self._producer.begin_transaction()

    async def commit_transaction(self) -> None:
        """Flush and commit the open transaction (see :meth:`pylog.clients.producer.Producer.commit_transaction`)."""
        await asyncio.get_running_loop().run_in_executor(None, self._producer.commit_transaction)

    async def abort_transaction(self) -> None:
        """Abort the open transaction (see :meth:`pylog.clients.producer.Producer.abort_transaction`)."""
        await asyncio.get_running_loop().run_in_executor(None, self._producer.abort_transaction)

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, OffsetAndMetadata | int],
                                          group_id: Any) -> None:
        """Commit a group's offsets with the open transaction (aiokafka's name; ``group_id`` a str or the
        consumer's group metadata)."""
        await asyncio.get_running_loop().run_in_executor(
            None, self._producer.send_offsets_to_transaction, offsets, group_id)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``async with producer.transaction():``: begin; commit at the end of the block, abort (and re-raise)
        when it raises."""
        self.begin_transaction()
        try:
            yield
        except BaseException:
            await self.abort_transaction()
            raise
        await self.commit_transaction()

    async def stop(self) -> None:
        """Flush every record sent, then close (and close the store if this producer opened it)."""
        await asyncio.get_running_loop().run_in_executor(None, self._producer.close)

    async def flush(self) -> None:
        """Wait until every record sent so far is appended (or fsynced, with ``acks="all"``)."""
        await asyncio.get_running_loop().run_in_executor(None, self._producer.flush)

    async def __aenter__(self) -> "AIOKafkaProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: list[tuple[str, bytes]] | None = None
                   ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns a future whose result is its :class:`RecordMetadata` (or whose
        exception is the error that stopped its append). Raises at once what ``Producer.send`` raises."""
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        fut: asyncio.Future[RecordMetadata] = loop.create_future()
        record = self._producer.send(topic, value, key=key, headers=headers, partition=partition,
                                     timestamp_ms=timestamp_ms)
        self._bridge(record, fut)
        return fut

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                            timestamp_ms: int | None = None, headers: list[tuple[str, bytes]] | None = None
                            ) -> RecordMetadata:
        """``await (await send(...))``: the record's metadata once it is appended."""
        return await (await self.send(topic, value, key, partition, timestamp_ms, headers))

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic``."""
        return self._producer.partitions_for(topic)

    def _bridge(self, record: FutureRecordMetadata, fut: asyncio.Future) -> None:
        record.add_callback(self._completed, fut, False)
        record.add_errback(self._completed, fut, True)

    def _completed(self, result: Any, fut: asyncio.Future, failed: bool) -> None:
        """Any thread: queue the outcome; wake the loop only if no wake-up is pending already."""
        self._done.append((fut, result, failed))
        if not self._scheduled:
            self._scheduled = True
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._complete_all)
            except RuntimeError:  # the loop was closed: nobody awaits these any more
                self._scheduled = False

    def _complete_all(self) -> None:
        """On the loop: set every queued outcome (the flag first: an outcome queued after is scheduled)."""
        self._scheduled = False
        done = self._done
        while done:
            fut, result, failed = done.popleft()
            if fut.done():  # cancelled by its awaiter
                continue
            if failed:
                fut.set_exception(result)
            else:
                fut.set_result(result)


class _LoopListener:
    """A rebalance listener called in the consumer's worker thread that runs the user's listener's
    coroutine methods on the event loop, waiting for them (aiokafka's listeners are ``async def``)."""

    def __init__(self, listener: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._listener = listener
        self._loop = loop

    def _call(self, name: str, partitions: set[TopicPartition]) -> None:
        result = getattr(self._listener, name)(partitions)
        if asyncio.iscoroutine(result):
            asyncio.run_coroutine_threadsafe(result, self._loop).result()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._call("on_partitions_revoked", revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._call("on_partitions_assigned", assigned)


class AIOKafkaConsumer:
    """aiokafka's ``AIOKafkaConsumer`` over a store. ``await consumer.start()`` (or ``async with``), then
    ``async for msg in consumer``, ``await consumer.getone()``, ``await consumer.getmany(timeout_ms=,
    max_records=)``, ``await consumer.commit()``, ``seek*``, ``await consumer.stop()``.

    Options: :class:`pylog.kafka.KafkaConsumer`'s (kafka-python's names); aiokafka's
    ``consumer_timeout_ms`` (its fetch wait) is dropped: ``async for`` runs until :meth:`stop`."""

    def __init__(self, *topics: str, **configs: Any) -> None:
        self._consumer = KafkaConsumer(**_without_aio_only(configs))
        self._topics = topics
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pylog-aio-consumer")
        self._buffer: dict[TopicPartition, collections.deque[ConsumerRecord]] = {}
        self._inflight: asyncio.Future | None = None
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Counts calls that dropped buffered records: a fetch that began before one is not stashed.
        self._epoch = 0
        self._inflight_epoch = 0  # _epoch when the fetch in _inflight began
        self._stashed: asyncio.Future | None = None  # the last fetch whose records _stash took in

    @property
    def consumer(self) -> KafkaConsumer:
        """The synchronous consumer underneath. Not thread-safe: use it only while no fetch is under way."""
        return self._consumer

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Subscribe to the topics given to the constructor (the group is joined by the first fetch)."""
        self._loop = asyncio.get_running_loop()
        if self._topics:
            self.subscribe(self._topics)

    async def stop(self) -> None:
        """Commit (with ``enable_auto_commit``), leave the group and close (and close the store if this
        consumer opened it). A fetch under way ends within a wait step; its records are dropped."""
        if self._stopped:
            return
        self._stopped = True
        await self._settle_inflight()
        self._buffer.clear()
        await self._run(self._consumer.close)
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> "AIOKafkaConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # ------------------------------------------------------------------ assignment

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """As :meth:`Consumer.subscribe`; ``listener`` methods may be coroutine functions."""
        if listener is not None:
            listener = _LoopListener(listener, self._loop or asyncio.get_running_loop())
        self._locked(self._consumer.subscribe, list(topics), pattern, listener, drop=None)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._locked(self._consumer.assign, list(partitions), drop=None)

    def unsubscribe(self) -> None:
        self._locked(self._consumer.unsubscribe, drop=None)

    def assignment(self) -> set[TopicPartition]:
        return self._locked(self._consumer.assignment)

    def subscription(self) -> set[str] | None:
        return self._locked(self._consumer.subscription)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._consumer.partitions_for_topic(topic)

    async def topics(self) -> set[str]:
        return self._consumer.topics()

    def highwater(self, partition: TopicPartition) -> int:
        return self._locked(self._consumer.highwater, partition)

    def last_stable_offset(self, partition: TopicPartition) -> int:
        """Without transactions every record is stable: the :meth:`highwater`."""
        return self.highwater(partition)

    # ------------------------------------------------------------------ positions

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._locked(self._consumer.seek, partition, offset, drop=[partition])

    async def seek_to_beginning(self, *partitions: TopicPartition) -> bool:
        self._locked(self._consumer.seek_to_beginning, *partitions, drop=list(partitions) or None)
        return True

    async def seek_to_end(self, *partitions: TopicPartition) -> bool:
        self._locked(self._consumer.seek_to_end, *partitions, drop=list(partitions) or None)
        return True

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]:
        """Move each partition (default: every assigned one) to its committed offset; returns them."""
        parts = list(partitions) or sorted(self.assignment())
        out: dict[TopicPartition, int | None] = {}
        for tp in parts:
            committed = await self.committed(tp)
            offset = committed if isinstance(committed, int) or committed is None else committed.offset
            out[tp] = offset
            if offset is not None:
                self.seek(tp, offset)
        return out

    async def position(self, partition: TopicPartition) -> int:
        return self._locked(self._consumer.position, partition)

    async def committed(self, partition: TopicPartition) -> int | OffsetAndMetadata | None:
        return await self._run(self._consumer.committed, partition)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._consumer.beginning_offsets(list(partitions))

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._consumer.end_offsets(list(partitions))

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._consumer.offsets_for_times(timestamps)

    def pause(self, *partitions: TopicPartition) -> None:
        self._locked(self._consumer.pause, *partitions, drop=list(partitions))

    def resume(self, *partitions: TopicPartition) -> None:
        self._locked(self._consumer.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._locked(self._consumer.paused)

    async def commit(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition: the records handed out
        so far) for the group, in the worker thread. :raises CommitFailedError, InvalidConfigError:"""
        await self._run(self._consumer.commit, offsets)

    # ------------------------------------------------------------------ reading

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of ``partitions``, default any assigned one), waiting as long as it takes.
        :raises ConsumerStoppedError: once :meth:`stop` was called."""
        while True:
            got = self._take(partitions, 1)
            if got:
                return next(iter(got.values()))[0]
            await self._fetch(partitions, None)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of ``partitions`` (default: every assigned one), at most ``max_records``
        (``max_poll_records``), waiting up to ``timeout_ms`` for some; ``{}`` when none came."""
        limit = self._consumer.config["max_poll_records"] if max_records is None else max_records
        got = self._take(partitions, limit)
        if got:
            return got
        await self._fetch(partitions, time.monotonic() + timeout_ms / 1000)
        return self._take(partitions, limit)

    def __aiter__(self) -> "AIOKafkaConsumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    # ------------------------------------------------------------------ the rest

    def metrics(self) -> dict[str, Any]:
        return self._locked(self._consumer.metrics)

    def bootstrap_connected(self) -> bool:
        return not self._stopped and self._consumer.bootstrap_connected()

    # ------------------------------------------------------------------ internals

    def _locked(self, fn: Callable[..., Any], *args: Any, drop: list[TopicPartition] | None | bool = False
                ) -> Any:
        """``fn(*args)`` holding the consumer; ``drop``: forget buffered records first (None: all of them)."""
        if drop is not False:
            self._epoch += 1
        if drop is None:
            self._buffer.clear()
        elif isinstance(drop, list):
            for tp in drop:
                self._buffer.pop(TopicPartition(*tp), None)
        with self._lock:
            return fn(*args)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the worker thread, holding the consumer."""
        await self._settle_inflight()

        def call() -> Any:
            with self._lock:
                return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _settle_inflight(self) -> None:
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            try:
                await asyncio.shield(inflight)
            except Exception:  # noqa: BLE001 - the fetch's own caller sees its error
                pass

    def _take(self, partitions: tuple[TopicPartition, ...], limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Hand out up to ``limit`` buffered records, moving each partition's position past them."""
        if self._stopped:
            raise ConsumerStoppedError("the consumer was stopped")
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        wanted = set(partitions)
        for tp in list(self._buffer):
            if limit <= 0:
                break
            if wanted and tp not in wanted:
                continue
            queue = self._buffer[tp]
            n = min(limit, len(queue))
            recs = [queue.popleft() for _ in range(n)]
            if not queue:
                del self._buffer[tp]
            else:
                self._buffer[tp] = self._buffer.pop(tp)  # to the back: the next call starts elsewhere
            with self._lock:
                self._consumer.seek(tp, recs[-1].offset + 1)
            out[tp] = recs
            limit -= n
        return out

    async def _fetch(self, partitions: tuple[TopicPartition, ...], deadline: float | None) -> None:
        """Fill the buffer: one fetch in the worker (waiting until ``deadline``; None: until records come),
        shared by every task that asks meanwhile."""
        if self._stopped:
            raise ConsumerStoppedError("the consumer was stopped")
        loop = asyncio.get_running_loop()
        inflight = self._inflight
        if inflight is not None and inflight.done() and self._stash(inflight):
            # A fetch that ended while nobody awaited it (its task was cancelled) and whose completion the
            # loop has not run yet: its records are buffered now rather than fetched a second time.
            if any(tp in self._buffer for tp in partitions) if partitions else self._buffer:
                return
        if inflight is None or inflight.done():
            inflight = self._inflight = loop.run_in_executor(self._executor, self._fetch_in_worker,
                                                             tuple(partitions), deadline)
            self._inflight_epoch = self._epoch
            inflight.add_done_callback(self._stash)
        await asyncio.shield(inflight)

    def _fetch_in_worker(self, partitions: tuple[TopicPartition, ...], deadline: float | None
                         ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """In the worker: poll in steps of at most :data:`_STEP` until records come, the deadline passes or
        the consumer is stopped; positions stay where they are (see :meth:`_take`)."""
        c = self._consumer
        while True:
            with self._lock:
                if self._stopped:
                    return {}
                step = _STEP if deadline is None else max(0.0, min(_STEP, deadline - time.monotonic()))
                others: set[TopicPartition] = set()
                if partitions:
                    others = c.assignment() - set(partitions) - c.paused()
                    c.pause(*others)
                try:
                    got = c.poll(timeout_ms=step * 1000, update_offsets=False)
                finally:
                    if others:
                        c.resume(*(others & c.assignment()))
            if got or (deadline is not None and time.monotonic() >= deadline):
                return got

    def _stash(self, fut: asyncio.Future) -> bool:
        """On the loop, once per fetch, when it ends (awaited or not): buffer its records, unless a seek,
        pause or reassignment came meanwhile (the positions did not move: they are fetched again). Buffered
        records of partitions a rebalance inside the fetch took away are dropped. Runs from the fetch's done
        callback or, when the next fetch comes first, from :meth:`_fetch`; False when it ran already."""
        if fut is not self._inflight or fut is self._stashed:
            return False
        self._stashed = fut
        if fut.cancelled() or fut.exception() is not None or self._stopped or self._inflight_epoch != self._epoch:
            return True
        got = fut.result()
        if self._buffer or got:
            with self._lock:
                assigned = self._consumer.assignment()
            for tp in [tp for tp in self._buffer if tp not in assigned]:
                del self._buffer[tp]
        for tp, recs in got.items():
            if recs and tp in assigned:
                self._buffer.setdefault(tp, collections.deque()).extend(recs)
        return True

