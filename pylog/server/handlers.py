"""The Kafka requests a pylog store answers: one coroutine per API, each turning a decoded request body into a
response body (dicts named as Kafka's message specs name the fields, in snake_case; see
:mod:`pylog.server.protocol`).

Layout of the work:
- Appends (Produce) and everything that may block on the disk or on another process's lock (topic creation
  and deletion, producer ids, retention) run in the server's storage thread pool, never on the event loop; a
  request's appends go there in one hop. The fsyncs of ``acks=all`` go to the process's group commit
  (:mod:`pylog.storage.group_commit`) once the request's appends are done: one fsync of a partition covers
  every request that appended to it before the fsync started, and partitions are fsynced in parallel.
- Reads (Fetch, ListOffsets) run in the read thread pool: a cold segment page faults on the disk, and a large
  response takes milliseconds to build; the loop only waits for them. Metadata runs in the storage pool (it
  may create a topic). A Fetch with too little to return waits in
  :class:`~pylog.server.waiting.FetchWaiters`, on the loop.

Invariants:
- A Produce either appends a partition's batches or answers that partition with an error code; a batch is
  never appended half (pylog's append is all-or-nothing per call before anything is written) and never
  twice for an idempotent producer's retry (pylog's producer state, as for its own producers).
- A response never claims more than happened: ``acks=all`` is answered after an fsync of each partition that
  started after the request's append to it (a partition whose fsync failed is answered with the error),
  ``acks=1`` after the append (flushed per the topic's ``flush.messages`` / ``flush.ms``), ``acks=0`` not at all.
- Every failure of one partition, topic or group is that item's error code; a bug in a handler is answered
  with UNKNOWN_SERVER_ERROR by the connection (:mod:`pylog.server.connection`), never a dropped server.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import metrics
from ..errors import (CorruptRecordError, DESCRIPTOR_ERRNOS, OffsetOutOfRangeError, PylogError, TopicExistsError,
                      UnknownTopicError)
from ..store import is_internal_topic, topic_name_problem
from ..partition import Partition, internals
from . import metering, recordbatch
from .errormap import code_for
from .authorizer import CLUSTER_NAME
from .operations import CLUSTER, NOT_REQUESTED, TOPIC
from .protocol import codes as E
from .turns import TURN_WAIT_MS
from .state import ServerState
from .transactions import produce_check
from .produce_queue import AppendQueue, Produce, answered


__all__ = ["DataHandlers"]

#: Of one partition of a Produce: its response entry, its new log end (None: nothing appended), and the
#: partition to fsync before answering (acks=all, or the topic's flush policy; else None).
Outcome = tuple[dict, "int | None", "Partition | None"]

log = logging.getLogger("pylog.server")

#: A fetch reads at most this many records per partition per response (its byte limits usually bind first).
_MAX_FETCH_RECORDS = 1_000_000
#: The most a fetch response carries whatever the client asks (Kafka's broker ``fetch.max.bytes``, 55 MiB): a
#: response is built whole in memory before it is written.
_FETCH_MAX_BYTES = 55 << 20
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


class DataHandlers:
    """ApiVersions, Metadata, Produce, Fetch, ListOffsets, FindCoordinator and InitProducerId."""

    def __init__(self, state: ServerState) -> None:
        self.s = state
        #: The damage last logged per partition (see _read_one): a client retrying its Fetch logs it once.
        self._damage_logged: dict[tuple[str, int], str] = {}

    # ------------------------------------------------------------------ helpers

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or UnknownTopicError for a missing topic or partition number."""
        if not isinstance(topic, str) or (topic_name_problem(topic, internal_ok=True) is not None
                                          and topic not in self.s.store):
            raise UnknownTopicError(f"no topic {topic!r}")
        t = self.s.store.topic(topic)
        if not 0 <= index < t.num_partitions:
            raise UnknownTopicError(f"topic {topic!r} has no partition {index} (it has {t.num_partitions})")
        return t.partition(index)

    # ------------------------------------------------------------------ ApiVersions

    async def api_versions(self, req: Any, conn: Any) -> dict:
        return {"error_code": E.NONE, "api_keys": self.s.api_keys, "throttle_time_ms": 0}

    # ------------------------------------------------------------------ Metadata

    async def metadata(self, req: Any, conn: Any) -> dict:
        b = req.body
        requested = b.get("topics")
        names = None if requested is None or (req.api_version == 0 and not requested) else \
            [t["name"] for t in requested]
        allow_create = self.s.config.auto_create_topics and b.get("allow_auto_topic_creation", True)
        topics = await self.s.run(self._topics_metadata, names, allow_create)
        if b.get("include_topic_authorized_operations"):
            for t in topics:
                if t.get("error_code") == E.NONE:
                    t["topic_authorized_operations"] = self.s.authorized_operations(conn, TOPIC, t["name"])
        host, port = self.s.advertised
        return {"throttle_time_ms": 0,
                "brokers": [{"node_id": 0, "host": host, "port": port, "rack": None}],
                "cluster_id": self.s.cluster_id, "controller_id": 0, "topics": topics,
                "cluster_authorized_operations": self.s.authorized_operations(conn, CLUSTER, CLUSTER_NAME)
                if b.get("include_cluster_authorized_operations") else NOT_REQUESTED}

    def _topics_metadata(self, names: list | None, allow_create: bool) -> list[dict]:
        """In the storage pool (it may create topics): each topic's entry, every topic's when ``names`` is None.
        At most ``auto_create_topics_per_request`` topics are created; the others named get
        UNKNOWN_TOPIC_OR_PARTITION (the client asks again)."""
        if names is None:
            names = self.s.store.topics()
        creations = [self.s.config.auto_create_topics_per_request if allow_create else 0]
        return [self._topic_metadata(name, creations) for name in names]

    def _topic_metadata(self, name: Any, creations: list[int]) -> dict:
        store = self.s.store
        entry: dict[str, Any] = {"name": name, "is_internal": False, "partitions": [],
                                 "topic_authorized_operations": NOT_REQUESTED}
        if not isinstance(name, str):
            entry.update(error_code=E.INVALID_TOPIC_EXCEPTION, name="")
            return entry
        if name not in store:
            problem = topic_name_problem(name)
            if problem is not None:
                entry["error_code"] = E.INVALID_TOPIC_EXCEPTION
                return entry
            if creations[0] <= 0:
                entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                return entry
            creations[0] -= 1
            try:
                if not self._auto_create(name):
                    entry["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION
                    return entry
            except PylogError as exc:
                entry["error_code"] = code_for(exc)
                return entry
        try:
            count = store.topic(name).num_partitions
        except PylogError as exc:
            entry["error_code"] = code_for(exc)
            return entry
        entry["is_internal"] = is_internal_topic(name)
        entry["error_code"] = E.NONE
        entry["partitions"] = [{"error_code": E.NONE, "partition_index": i, "leader_id": 0, "leader_epoch": 0,
                                "replica_nodes": [0], "isr_nodes": [0], "offline_replicas": []}
                               for i in range(count)]
        return entry

    def _auto_create(self, name: str) -> bool:
        """Create ``name`` with the server's ``num_partitions`` (the store's ``num.partitions`` by default);
        False when the server's creation limits refuse (logged, rate-limited)."""
        store = self.s.store
        partitions = self.s.default_partitions()
        refused = self.s.creations.refusal(1, partitions)
        if refused is not None:
            self.s.rlog.log(logging.WARNING, "auto-create refused", "pylog serve: not auto-creating topic %r: %s",
                            name, refused[0])
            return False
        try:
            store.create_topic(name, partitions=partitions)
            self.s.rlog.log(logging.INFO, "auto-create", "pylog serve: created topic %r (auto-create: a Metadata "
                            "request named it)", name)
        except TopicExistsError:
            pass  # another request or process created it first
        return True

    # ------------------------------------------------------------------ Produce

    async def produce(self, req: Any, conn: Any) -> "dict | asyncio.Future[dict] | None":
        b = req.body
        acks = b["acks"]
        topic_data = b["topic_data"] or []
        code = E.NONE
        message = None
        if acks not in (0, 1, -1):
            code, message = E.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {acks}"
        if code != E.NONE:
            results = [{"name": td["name"], "partition_responses": [
                {"index": pd["index"], "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
                 "log_start_offset": -1, "error_message": message} for pd in td["partition_data"] or []]}
                for td in topic_data]
        else:
            work = [(td["name"], pd["index"], pd["records"]) for td in topic_data for pd in td["partition_data"] or []]
            wait_ms = min(max(0, b.get("timeout_ms") or 0), TURN_WAIT_MS)
            # The answer keeps names and counts only: not the records (memoryviews of the request's frame), so an
            # answer owed holds no request data once appended.
            answer: asyncio.Future[dict] = asyncio.get_running_loop().create_future()
            self._appends_of(conn).add(Produce((work, acks, wait_ms, conn.principal, b.get("transactional_id")),
                                                [(topic, index) for topic, index, _ in work],
                                                [(td["name"], len(td["partition_data"] or [])) for td in topic_data],
                                                answer))
            del work
            if acks != 0:
                # Answered once appended (and, for acks=all, fsynced); the connection handles its next requests
                # meanwhile (their appends go to the storage pool together, and may share this one's fsyncs) and
                # sends the answers in order.
                return answer
            results = (await answer)["responses"]
        if acks == 0:
            if any(p["error_code"] != E.NONE for r in results for p in r["partition_responses"]):
                # acks=0 has no answer to carry the error: Kafka closes the connection, so the client notices
                # (and refreshes its metadata) instead of losing every later record silently.
                log.info("pylog serve: closing the connection from %s: an acks=0 produce failed", conn.client_host)
                conn.abort()
            return None
        return {"responses": results, "throttle_time_ms": 0}

    def _appends_of(self, conn: Any) -> AppendQueue:
        queue = conn.appends
        if queue is None:
            queue = conn.appends = AppendQueue(self.append_queued, self.s)
        assert isinstance(queue, AppendQueue)
        return queue

    def append_queued(self, batch: list[Produce]) -> None:
        """In the storage pool: the appends of consecutive Produce requests of one connection (see
        :class:`~pylog.server.produce_queue.AppendQueue`), then, from this thread, what follows them: the fetches
        waiting for those partitions woken (on the loop), each answer handed to the loop, and the fsyncs the answers
        wait for (acks=all, or where the topic's ``flush.messages`` / ``flush.ms`` asked for one) given to the group
        commit at once, one submission for the whole batch (see :mod:`pylog.storage.group_commit`); those answers
        are handed to the loop once it has fsynced every partition the batch asked for (a partition whose fsync
        failed is answered with its error). The loop is not woken between the appends and the fsyncs: that hop was a
        large share of a small request's cost and latency."""
        try:
            outcomes = self.append_requests([p.take_request() for p in batch])
        except Exception as error:  # noqa: BLE001 - a bug, or out of descriptors: each partition says so
            storage = isinstance(error, OSError) and error.errno in DESCRIPTOR_ERRNOS
            if not storage:
                log.error("pylog serve: appending a produce request failed", exc_info=error)
            code = E.KAFKA_STORAGE_ERROR if storage else E.UNKNOWN_SERVER_ERROR
            outcomes = [[(_failed({"index": index, "base_offset": -1, "log_append_time_ms": -1,
                                   "log_start_offset": -1}, code, str(error)), None, None) for _, index in p.keys]
                        for p in batch]
        waiters, post = self.s.waiters, self.s.post
        woken = [(topic, index, end) for p, outcome in zip(batch, outcomes, strict=True)
                 for (topic, index), (_, end, _) in zip(p.keys, outcome, strict=True)
                 if end is not None and waiters.waiting_on(topic, index)]
        if woken:
            post(self._woken, woken)
        durable: list[tuple[Produce, list[dict], list[tuple[dict, Partition]]]] = []
        to_sync: dict[int, Partition] = {}  # by id(): two requests of the batch to one partition share its fsync
        for p, outcome in zip(batch, outcomes, strict=True):
            it = iter(outcome)
            results = [{"name": name, "partition_responses": [next(it)[0] for _ in range(count)]}
                       for name, count in p.topics]
            syncs = [(entry, part) for entry, _, part in outcome if part is not None]
            if not syncs:
                post(answered, p.answer, results)
                continue
            durable.append((p, results, syncs))
            for _, part in syncs:
                to_sync[id(part)] = part
        if durable:
            parts = list(to_sync.values())
            self.s.when_durable(parts, lambda errors: self._fsynced(durable, parts, errors))

    def _woken(self, woken: list[tuple[str, int, int]]) -> None:
        """On the loop: the fetches waiting for partitions a storage thread just appended to."""
        appended = self.s.waiters.appended
        for topic, index, end in woken:
            appended(topic, index, end)

    def _fsynced(self, durable: list[tuple[Produce, list[dict], list[tuple[dict, Partition]]]],
                 parts: list[Partition], errors: list[BaseException | None]) -> None:
        """On the loop, once the group commit has fsynced (or failed to) the partitions of a batch of Produce
        requests: their answers."""
        failed = {id(part): exc for part, exc in zip(parts, errors, strict=True) if exc is not None}
        for p, results, syncs in durable:
            if p.acks == -1:
                self.s.acks_all_requests += 1
            for entry, part in syncs:
                exc = failed.get(id(part)) if failed else None
                if exc is None:
                    continue
                if not isinstance(exc, PylogError):
                    log.error("pylog serve: fsync of %s-%d failed", part.topic, part.number, exc_info=exc)
                entry.update(error_code=code_for(exc) if isinstance(exc, PylogError) else E.UNKNOWN_SERVER_ERROR,
                             error_message=str(exc), base_offset=-1, log_append_time_ms=-1)
            answered(p.answer, results)

    def append_requests(self, requests: list[tuple[list[tuple[str, int, Any]], int, int, str | None, str | None]]
                        ) -> list[list[Outcome]]:
        """In the storage pool: the appends of consecutive Produce requests of one connection, in order (see
        :class:`~pylog.server.produce_queue.AppendQueue`); per request, per partition its response entry, its new
        log end (None when nothing was appended) and the partition to fsync before the answer (acks=all, or the
        topic's flush policy asks for it; None when nothing was appended): the fsyncs are left to the group commit,
        after the appends. Each request comes with its ``wait_ms``: how long to wait for a writer of another process
        to hand a partition over (see :mod:`pylog.server.turns`), and ``principal``: the connection's user, who must
        own the batches' producer id (:class:`~pylog.server.state.ProducerOwners`), and its ``transactional_id``
        (None: not a transactional producer), which a transactional batch's partition must have been added to
        (:func:`pylog.server.transactions.produce_check`)."""
        return [[self._append_guarded(topic, index, records, acks, wait_ms, principal, txn_id)
                 for topic, index, records in work] for work, acks, wait_ms, principal, txn_id in requests]

    def _append_guarded(self, topic: str, index: int, records: Any, acks: int, wait_ms: int,
                        principal: str | None, txn_id: str | None) -> Outcome:
        """:meth:`_append_one`, whose unexpected failure (out of descriptors, a bug) is that partition's error
        only: the other partitions and requests of the hop were appended, and answering them with an error would
        have their clients send the records again."""
        try:
            return self._append_one(topic, index, records, acks, wait_ms, principal, txn_id)
        except Exception as exc:  # noqa: BLE001 - this partition's answer says so
            storage = isinstance(exc, OSError) and exc.errno in DESCRIPTOR_ERRNOS
            if not storage:
                log.error("pylog serve: produce to %s-%s failed", topic, index, exc_info=exc)
            entry = {"index": index, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1}
            return _failed(entry, E.KAFKA_STORAGE_ERROR if storage else E.UNKNOWN_SERVER_ERROR, str(exc)), None, None

    def _append_one(self, topic: str, index: int, records: Any, acks: int, wait_ms: int,
                    principal: str | None, txn_id: str | None) -> Outcome:
        entry: dict[str, Any] = {"index": index, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1}
        if isinstance(topic, str) and is_internal_topic(topic):
            return _failed(entry, E.INVALID_TOPIC_EXCEPTION, f"{topic!r} is an internal topic of pylog: it cannot "
                           "be produced to"), None, None
        if records is None:
            return _failed(entry, E.CORRUPT_MESSAGE, "a produce request without records"), None, None
        try:
            part = self.partition(topic, index)
            batches = recordbatch.decode_batches(records, self.s.config.max_batch_bytes)
            if len(batches) != 1:
                # Kafka's rule for Produce v3+: exactly one batch per partition, so that a partition's answer
                # covers all of it (a second batch failing after the first was appended could not be told).
                return _failed(entry, E.INVALID_RECORD, f"a produce request must carry exactly one record batch "
                               f"per partition, got {len(batches)}"), None, None
            for batch in batches:
                if batch.is_control:
                    return _failed(entry, E.INVALID_RECORD, "clients may not produce control batches"), None, None
                if batch.is_transactional:
                    refused = (E.INVALID_TXN_STATE, "a transactional batch in a produce request without a "
                               "transactional id") if txn_id is None else produce_check(
                        self.s.store, txn_id, batch.producer_id, batch.producer_epoch, topic, index)
                    if refused is not None:  # KIP-890: only to partitions added to the open transaction
                        return _failed(entry, *refused), None, None
                if part.config.compact and (errors := _keyless_records(batch)):
                    # Kafka's answer (KIP-467): the batch is refused and each record without a key named, so the
                    # client fails those records and may send the others again.
                    entry["record_errors"] = errors
                    return _failed(entry, E.INVALID_RECORD, f"{len(errors)} of the batch's {batch.record_count} "
                                   f"records have no key: {topic}-{index} is compacted"), None, None
                if batch.producer_id >= 0 and not self.s.producer_owners.claim(batch.producer_id, principal):
                    # Another principal's producer id: appending would let this client fence (or corrupt the
                    # sequence of) a producer it does not own.
                    return _failed(entry, E.INVALID_PRODUCER_ID_MAPPING, f"producer id {batch.producer_id} "
                                   "belongs to another principal"), None, None
            first = None
            part.wait_to_write(wait_ms)  # a pylog producer of another process hands it over (pylog.server.turns)
            try:
                for batch in batches:
                    offset = recordbatch.append_batch(part, batch, in_turn=True, flush_policy=False)
                    if first is None:
                        first = offset
            finally:
                # Another writer (a pylog producer) waiting for its turn gets it now. The fsync comes later (the
                # group commit): a handle that let the writer lock go still fsyncs its appends, by file name.
                internals(part).pass_turn()  # never raises: the append's outcome is decided
                if part.is_writer:
                    self.s.turns.note(part)  # handed over once another writer asks, even if idle from now on
            entry.update(error_code=E.NONE, base_offset=first)
        except PylogError as exc:
            entry.update(error_code=code_for(exc), error_message=str(exc))
            log.debug("pylog serve: produce to %s-%s: %s", topic, index, exc)
            return entry, None, None
        # acks=all, or the topic's flush.messages / flush.ms asking for an fsync now: by the group commit, before
        # the answer (as the append's own flush would have done, but shared with other requests).
        to_sync = part if acks == -1 or _flush_due(part) else None
        # Appended: what follows only reports, and must not turn the answer into an error (a client that is not
        # idempotent would send the records again).
        try:
            entry["log_start_offset"] = part.log_start_offset
            if part.config.log_append_time and first is not None:
                entry["log_append_time_ms"] = _timestamp_at(part, first)
            return entry, part.log_end_offset, to_sync
        except PylogError:
            log.debug("pylog serve: after a produce to %s-%s", topic, index, exc_info=True)
            return entry, None, to_sync

    # ------------------------------------------------------------------ Fetch

    async def fetch(self, req: Any, conn: Any) -> dict:
        """Read every partition asked for; with less than ``min_bytes``, wait (up to ``max_wait_ms``) for an append
        to a partition that was read to its end, then read again. A partition whose read was cut by a byte limit
        (or had no budget left) is not waited on: waiting cannot add to what it returns, and its data already
        there would end every wait at once."""
        b = req.body
        loop = asyncio.get_running_loop()
        max_wait = max(0, b["max_wait_ms"]) / 1000.0
        min_bytes = b["min_bytes"]
        max_bytes = min(b.get("max_bytes", _FETCH_MAX_BYTES), _FETCH_MAX_BYTES)
        deadline = loop.time() + max_wait
        topics = b["topics"] or []
        # The most the answer can hold: what the partitions may each return, in all, up to max_bytes (a consumer
        # of a few partitions asks for 50 MiB but at most 1 MiB per partition by default).
        wanted = min(max_bytes, sum(max(0, pr.get("partition_max_bytes", max_bytes)) for t in topics
                                    for pr in t["partitions"] or []))
        committed = b.get("isolation_level", 0) == 1  # READ_COMMITTED

        async def read() -> tuple[list[dict], int, dict]:
            # The answer's records are held until it is written: they come out of the server's pool
            # (queued_max_request_bytes), so many fetchers that do not read their answers cannot take more.
            # While the answer is built it is held twice, the segments' batches read and the Kafka batches made of
            # them: twice its budget comes out of the pool until then.
            conn.keep_answer_bytes(0)
            budget = await conn.take_answer_bytes(2 * wanted) // 2
            got = await self.s.read(self._read_all, topics, budget, committed)
            conn.keep_answer_bytes(got[1])
            return got

        while True:
            responses, total, wants = await read()
            remaining = deadline - loop.time()
            if total >= min_bytes or not wants or remaining <= 0 or conn.closing:
                break
            # Every wanted offset is at its partition's log end as read: the wait ends only on a new append.
            if not await self.s.waiters.wait(wants, remaining):
                responses, total, wants = await read()
                break
        if metrics.state.on and total:
            metering.fetched(responses)
        return {"throttle_time_ms": 0, "error_code": E.NONE, "session_id": 0, "responses": responses}

    def _read_all(self, topics: list[dict], max_bytes: int, committed: bool = False) -> tuple[list[dict], int, dict]:
        total = 0
        wants: dict[tuple[str, int], tuple[Partition, int]] = {}
        responses = []
        for t in topics:
            name = t["topic"]
            parts = []
            for pr in t["partitions"] or []:
                # Kafka's rule: only the first partition with data may exceed the limits (by its first batch, so
                # that a record larger than them is still consumed); later ones stop at the response's limit.
                entry, size, part, next_offset = self._read_one(name, pr, max(0, max_bytes - total), total == 0,
                                                                committed)
                total += size
                parts.append(entry)
                if part is not None and next_offset is not None:
                    wants[(name, pr["partition"])] = (part, next_offset)
            responses.append({"topic": name, "partitions": parts})
        return responses, total, wants

    def _read_one(self, topic: str, pr: dict, budget: int, at_least_one: bool,
                  committed: bool = False) -> tuple[dict, int, Partition | None, int | None]:
        """The partition's entry, its records' size, and (its handle, the offset after what was returned) when it
        was read to its log end, so that an append there can add to the response; (None, None) otherwise.
        ``at_least_one``: nothing was returned yet, so one record is returned even beyond the limits.
        ``committed`` (READ_COMMITTED): batches below the last stable offset only, with the aborted transactions
        among them listed (Kafka's rule: the client drops their records and skips the markers itself)."""
        index, offset = pr["partition"], pr["fetch_offset"]
        entry: dict[str, Any] = {"partition_index": index, "high_watermark": -1, "last_stable_offset": -1,
                                 "log_start_offset": -1, "aborted_transactions": None,
                                 "preferred_read_replica": -1, "records": b""}
        try:
            part = self.partition(topic, index)
            start, end = part.log_start_offset, part.log_end_offset
            entry.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
            if offset < start or offset > end:
                entry["error_code"] = E.OFFSET_OUT_OF_RANGE
                return entry, 0, None, None
            entry["error_code"] = E.NONE
            limit = min(pr.get("partition_max_bytes", budget), budget)
            if offset == end:
                return entry, 0, part, end
            if limit <= 0:
                return entry, 0, None, None
            lso = end
            if committed:
                lso = part.last_stable_offset
                entry["last_stable_offset"] = lso
                if offset >= lso:
                    return entry, 0, part, end  # a transaction holds the rest back: its marker ends the wait
            def read() -> list:
                before = internals(part).view()
                # Markers included: a Kafka client moves past them itself (docs/FORMAT.md, "Transactions").
                got = _within(internals(part).read_with_markers(offset, _MAX_FETCH_RECORDS, max(1, limit)), limit,
                              at_least_one)
                if committed:
                    got = [s for s in got if s[0].header.base_offset < lso]  # no batch straddles the LSO
                    stop = got[-1][0].header.next_offset if got else offset
                    entry["aborted_transactions"] = [{"producer_id": pid, "first_offset": first} for pid, first in
                                                     internals(part).aborted_transactions(offset, stop,
                                                                                                  before)]
                return got

            # Read again when a segment of the records read went before their aborts were looked up.
            slices = internals(part).on_current_view(f"a Fetch at offset {offset}", read)
            if not slices:
                return entry, 0, None, None
            # One part per slice, not joined: the response's encoder writes the parts as they are (a join would
            # hold a second copy of up to the whole response while it is built).
            encode = recordbatch.encode_slice
            parts = [encode(v, a, b) for v, a, b in slices if b > a]
            entry["records"] = parts
            after = _offset_after(parts[-1]) if parts else offset
            return entry, sum(map(len, parts)), (part if after >= end else None), (after if after >= end else None)
        except OffsetOutOfRangeError:
            entry["error_code"] = E.OFFSET_OUT_OF_RANGE
        except PylogError as exc:
            entry["error_code"] = code_for(exc)
            if isinstance(exc, CorruptRecordError) and self._damage_logged.get((topic, index)) != str(exc):
                # Damage in the store: the client sees only CORRUPT_MESSAGE, the operator learns the file here.
                self._damage_logged[(topic, index)] = str(exc)
                log.warning("pylog serve: fetch from %s-%s: %s (pylog verify STORE lists the damage)", topic,
                            index, exc)
            log.debug("pylog serve: fetch from %s-%s: %s", topic, index, exc)
        return entry, 0, None, None

    # ------------------------------------------------------------------ ListOffsets

    async def list_offsets(self, req: Any, conn: Any) -> dict:
        def lookups() -> list[dict]:
            committed = req.body.get("isolation_level", 0) == 1  # READ_COMMITTED: "latest" is the LSO
            return [{"name": t["name"], "partitions": [self._offset_for(t["name"], pr, req.api_version, committed)
                                                       for pr in t["partitions"] or []]}
                    for t in req.body["topics"] or []]
        return {"throttle_time_ms": 0, "topics": await self.s.read(lookups)}

    def _offset_for(self, topic: str, pr: dict, version: int, committed: bool = False) -> dict:
        index, ts = pr["partition_index"], pr["timestamp"]
        entry: dict[str, Any] = {"partition_index": index, "timestamp": -1, "offset": -1, "leader_epoch": 0}
        try:
            part = self.partition(topic, index)
            if ts == LATEST:
                offset = part.last_stable_offset if committed else part.log_end_offset
            elif ts == EARLIEST:
                offset = part.log_start_offset
            elif ts == MAX_TIMESTAMP:
                offset, found = _max_timestamp_offset(part)
                entry["timestamp"] = found
            elif ts < 0:  # Kafka's answer to a timestamp that is neither a time nor -1, -2 or -3
                entry["error_code"] = E.INVALID_REQUEST
                return entry
            else:
                at = part.offset_for_timestamp(ts)
                offset = -1 if at is None else at
                if at is not None:
                    entry["timestamp"] = _timestamp_at(part, at)
            if committed and ts not in (LATEST, EARLIEST) and offset >= 0 and offset >= part.last_stable_offset:
                # Kafka's rule: under READ_COMMITTED a lookup by time never names an offset a read_committed
                # consumer cannot read yet (at or past the LSO: a record of a transaction still open).
                offset, entry["timestamp"] = -1, -1
            entry.update(error_code=E.NONE, offset=offset)
            if version == 0:
                entry["old_style_offsets"] = [offset] if offset >= 0 else []
        except PylogError as exc:
            entry["error_code"] = code_for(exc)
        return entry

    # ------------------------------------------------------------------ FindCoordinator, InitProducerId

    async def find_coordinator(self, req: Any, conn: Any) -> dict:
        b = req.body
        host, port = self.s.advertised
        keys = b.get("coordinator_keys")
        key_type = b.get("key_type", 0)

        def one(key: str) -> dict:
            if key_type not in (0, 1):
                return {"key": key, "error_code": E.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1,
                        "error_message": f"unknown coordinator key_type {key_type}"}
            # key_type 1: this node is every transactional id's coordinator too (pylog.server.transactions).
            return {"key": key, "error_code": E.NONE, "node_id": 0, "host": host, "port": port, "error_message": None}

        if keys:  # v4+: a batch of keys
            return {"throttle_time_ms": 0, "coordinators": [one(k) for k in keys]}
        out = one(b.get("key", ""))
        out.pop("key")
        out["throttle_time_ms"] = 0
        return out

    async def init_producer_id(self, req: Any, conn: Any) -> dict:
        """InitProducerId without a transactional id (with one: :mod:`pylog.server.transactions`)."""
        # Without a transactional id Kafka always hands out a new id, whatever id and epoch the request names
        # (KIP-360's epoch bump is for transactional producers): echoing a claimed id would let a client take
        # an id the store has not issued yet and fence its future owner.
        try:
            pid = await self.s.run(self.s.store.new_producer_id)
        except PylogError as exc:
            return {"throttle_time_ms": 0, "error_code": code_for(exc), "producer_id": -1, "producer_epoch": -1}
        self.s.producer_owners.issued(pid, conn.principal)
        return {"throttle_time_ms": 0, "error_code": E.NONE, "producer_id": pid, "producer_epoch": 0}


def _flush_due(part: Partition) -> bool:
    try:
        return internals(part).flush_due()
    except PylogError:  # a store closing under the call: its close fsyncs
        return False


def _keyless_records(batch: recordbatch.KafkaBatch) -> list[dict]:
    """ProduceResponse ``record_errors`` for the records of ``batch`` without a key (none: an empty list)."""
    klens = batch.key_lengths
    at = range(batch.record_count) if klens is None else (klens < 0).nonzero()[0].tolist()
    return [{"batch_index": i, "batch_index_error_message": "Compacted topic cannot accept message without key"}
            for i in at]


def _failed(entry: dict, code: int, message: str) -> dict:
    entry.update(error_code=code, error_message=message)
    return entry


def _within(slices: list, limit: int, at_least_one: bool) -> list:
    """``read_slices`` output cut to about ``limit`` bytes of Kafka batches (Kafka's fetch limits: nothing past
    the limit, except one record when ``at_least_one``: the first partition of a response with data, whatever
    its size; at least one record of every partition gave librdkafka responses beyond its ``fetch.max.bytes``,
    which it refuses as "Invalid response size" and reconnects). ``read_slices`` stops only after the batch that
    crosses its ``max_bytes``, up to twice the limit with large batches; librdkafka then stalls between fetches
    (its default ``max.partition.fetch.bytes`` of 1 MiB answered with 2 MB: 0.39 M rec/s against 1.36 M/s when
    cut).
    A slice's size is estimated from its pylog batch (the Kafka encoding of a record is within a few bytes of
    pylog's), plus a batch header. The estimate is of the batch decompressed: answers are uncompressed Kafka
    batches, and estimating an lz4-stored batch by its stored size gave librdkafka twice its ``fetch.max.bytes``
    for records that compress to half."""
    out: list = []
    total = 0
    for view, a, b in slices:
        h = view.header
        per = h.decompressed_size / max(1, h.record_count)
        size = _KAFKA_BATCH_OVERHEAD + per * (b - a)
        if total + size > limit:
            fit = int((limit - total - _KAFKA_BATCH_OVERHEAD) // per) if per > 0 else 0
            if fit <= 0 and not out and at_least_one:
                fit = 1
            if fit > 0:
                out.append((view, a, a + min(fit, b - a)))
            break
        out.append((view, a, b))
        total += size
    return out


#: A Kafka v2 batch's header (61 bytes) plus slack for varint widths that differ from pylog's.
_KAFKA_BATCH_OVERHEAD = 64


def _offset_after(kafka_batch: bytes) -> int:
    """The offset after a Kafka v2 batch's last record: baseOffset (bytes 0-8) + lastOffsetDelta (23-27) + 1."""
    return int.from_bytes(kafka_batch[0:8], "big", signed=True) + \
        int.from_bytes(kafka_batch[23:27], "big", signed=True) + 1


def _timestamp_at(part: Partition, offset: int) -> int:
    recs = part.read(offset, max_records=1)
    return recs[0].timestamp if recs else -1


def _max_timestamp_offset(part: Partition) -> tuple[int, int]:
    """ListOffsets' MAX_TIMESTAMP (-3): the offset and timestamp of the record with the largest timestamp (the
    first such), by the time index: the first offset whose timestamp reaches the largest one."""
    end = part.log_end_offset
    if end == part.log_start_offset:
        return -1, -1
    at = part.offset_for_timestamp(part.max_timestamp())
    if at is None:
        return -1, -1
    return at, _timestamp_at(part, at)
