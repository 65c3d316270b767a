"""The store's background maintenance thread (retention, compaction, timed flushes) and its health.

Seed 000 warns that a dead log-cleaner thread goes unnoticed until the disk fills. Here it cannot:

- :class:`~pylog.maintenance.cleaner_status.CleanerStatus` (``store.cleaner_status()``) reports whether the
  thread is alive, when it last ran, the last error with its traceback, bytes and records read and written,
  records and tombstones removed, segments and bytes deleted by retention, per-partition dirty ratios, and the
  partitions it gave up on.
- An error cleaning one partition is logged (``logging`` at ERROR, with the traceback), recorded, and that
  partition is marked uncleanable (Kafka does the same) while the thread goes on with the others.
- An error that escapes the loop kills the thread: it is logged and recorded, ``alive`` turns False, and
  ``store.check_health()`` raises :class:`~pylog.errors.CleanerError` from then on.
- Other processes see the same status, with a heartbeat, through the store's cleaner status file
  (:mod:`pylog.maintenance.cleaner_registry`, ``store.cleaners()``, ``pylog health``).

Invariants: the thread only maintains partitions this store already writes (it never takes a writer lock
another process might want next); it holds no lock while sleeping; ``stop()`` interrupts a cleaning at
the next batch block, leaving nothing half-swapped.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import replace
from typing import Any, Callable, Iterator

from .compaction import CleanerStoppedError, CleanResult, clean_partition
from ..errors import CleanerError, CorruptRecordError, StoreClosedError
from ..storage.retention import RetentionResult
from .cleaner_registry import CleanerPublisher
from .cleaner_status import CleanerStatus, error_summary
from .remote_upload import UploadCounts
from ..partition import Partition, internals


__all__ = ["Cleaner"]

log = logging.getLogger("pylog.cleaner")

#: Longest sleep of the thread between looks at the partitions (seconds).
_IDLE = 1.0


class Cleaner:
    """Runs retention every ``log.retention.check.interval.ms`` and compaction every ``log.cleaner.backoff.ms``
    over ``partitions()`` (the partitions the store writes), in one daemon thread."""

    def __init__(self, name: str, partitions: Callable[[], Iterator["Partition"]], settings: dict[str, Any],
                 publisher: "CleanerPublisher | None" = None) -> None:
        self._partitions = partitions
        #: Writes the status where other processes see it (pylog/maintenance/cleaner_registry.py); None: nowhere.
        self._publisher = publisher
        self.retention_interval = settings["log.retention.check.interval.ms"] / 1000
        self.backoff = settings["log.cleaner.backoff.ms"] / 1000
        self.buffer_bytes = settings["log.cleaner.dedupe.buffer.size"]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._status = CleanerStatus(enabled=bool(settings["log.cleaner.enable"]))
        #: Partitions found damaged (they refuse a writer) and warned about; see _skip_damaged.
        self._damaged: set[str] = set()
        self._thread: threading.Thread | None = None
        self._name = name

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if not self._status.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._main, name=f"pylog-cleaner {self._name}", daemon=True)
        self._status.started_at = time.time()
        self._status.alive = True
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    @property
    def thread(self) -> threading.Thread | None:
        """The cleaner's daemon thread once started (None before, or when the cleaner is disabled)."""
        return self._thread

    def stopping(self) -> bool:
        return self._stop.is_set()

    def _stopping_or_heartbeat(self) -> bool:
        """:meth:`stopping`, for a long cleaning to call between blocks; also keeps the heartbeat going."""
        self._heartbeat()
        return self._stop.is_set()

    def _heartbeat(self, force: bool = False, within: float | None = None) -> None:
        """Publish the status when the heartbeat is due, when ``within`` seconds passed since the last
        write, or now with ``force``. Cleaner thread only."""
        pub = self._publisher
        if pub is None or not (force or pub.due(within)):
            return
        parts = [f"{p.topic}-{p.number}" for p in self._partitions() if p.is_writer]
        pub.publish(self.status(), parts)

    # ------------------------------------------------------------------ status

    def status(self) -> CleanerStatus:
        with self._lock:
            st = replace(self._status, uncleanable=dict(self._status.uncleanable),
                         dirty_ratios=dict(self._status.dirty_ratios), remote_lag=dict(self._status.remote_lag))
        t = self._thread
        st.alive = t is not None and t.is_alive() and st.alive
        return st

    def check_health(self) -> None:
        st = self.status()
        if st.enabled and not st.alive and not self._stop.is_set():
            raise CleanerError(f"the pylog cleaner thread of {self._name} is not running; last error: "
                               f"{st.last_error or 'none recorded'}")
        if st.uncleanable:
            first = next(iter(st.uncleanable.items()))
            raise CleanerError(f"the cleaner gave up on {len(st.uncleanable)} partition(s) of {self._name}, "
                               f"e.g. {first[0]}: {error_summary(first[1])}")

    def _record_error(self, where: str, exc: BaseException, partition_key: str | None = None) -> None:
        text = "".join(traceback.format_exception(exc))
        with self._lock:
            self._status.last_error = f"{where}: {text}"
            self._status.last_error_at = time.time()
            if partition_key is not None:
                self._status.uncleanable[partition_key] = text

    def add_retention(self, r: RetentionResult) -> None:
        with self._lock:
            self._status.segments_deleted += len(r.deleted_segments)
            self._status.bytes_deleted += r.bytes_deleted

    def add_upload(self, key: str, counts: UploadCounts, error: str | None) -> None:
        """One partition's upload pass (:mod:`pylog.maintenance.remote_upload`), from the upload thread."""
        with self._lock:
            st = self._status
            st.remote_enabled = True
            st.remote_segments_shipped += counts.segments
            st.remote_bytes_shipped += counts.bytes
            st.segments_deleted += counts.remote_segments_deleted
            if error is not None:
                st.remote_failures += 1
                st.remote_last_error = f"upload of {key}: {error}"
                st.remote_last_error_at = time.time()
            if key != "store metadata":
                st.remote_lag[key] = float(counts.waiting)

    def add_cleaning(self, r: CleanResult) -> None:
        with self._lock:
            st = self._status
            st.dirty_ratios[f"{r.topic}-{r.partition}"] = r.dirty_ratio
            if r.skipped is not None:
                return
            st.cleanings += 1
            st.bytes_read += r.bytes_read
            st.bytes_written += r.bytes_written
            st.records_read += r.records_read
            st.records_written += r.records_written
            st.records_removed += r.records_removed
            st.tombstones_removed += r.tombstones_removed
            st.aborted_removed += r.aborted_removed
            st.markers_removed += r.markers_removed

    # ------------------------------------------------------------------ the thread

    def _main(self) -> None:
        try:
            next_retention = time.monotonic() + self.retention_interval
            next_clean = time.monotonic() + self.backoff
            self._heartbeat(force=True)
            while not self._stop.is_set():
                self._heartbeat()
                now = time.monotonic()
                wake = min(next_retention, next_clean)
                for p in self._partitions():
                    wake = min(wake, internals(p).flush_if_due())
                if now >= next_retention or now >= next_clean:
                    with self._lock:
                        self._status.last_run_start = time.time()
                    if now >= next_retention:
                        self.run_retention()
                        next_retention = time.monotonic() + self.retention_interval
                    if now >= next_clean:
                        self.run_compaction()
                        next_clean = time.monotonic() + self.backoff
                    with self._lock:
                        self._status.last_run_end = time.time()
                        self._status.runs += 1
                    self._heartbeat(within=1.0)  # news, but at most once a second however short the intervals
                    wake = min(next_retention, next_clean)
                # Partitions that start writing meanwhile are looked at within _IDLE seconds (flush.ms).
                self._stop.wait(min(max(0.0, wake - time.monotonic()), _IDLE))
        except BaseException as exc:
            self._record_error("cleaner thread died", exc)
            # Logged and recorded (status, check_health) rather than re-raised: threading's hook would
            # only print the same traceback again.
            log.error("pylog cleaner thread died; retention and compaction stopped", exc_info=exc)
        finally:
            with self._lock:
                self._status.alive = False
            if not self._stop.is_set():  # died, not stopped: the store removes its entry when it closes
                try:
                    self._heartbeat(force=True)  # the last word: dead, and why
                except Exception:  # noqa: BLE001 - a dying thread must not fail while reporting
                    log.exception("pylog cleaner: cannot publish its final status")

    def _each(self, compacted: bool) -> Iterator["Partition"]:
        with self._lock:
            skip = set(self._status.uncleanable)
        for p in self._partitions():
            if self._stop.is_set():
                return
            if (not (p.is_writer or internals(p).transient) or f"{p.topic}-{p.number}" in skip
                    or (compacted and not p.config.compact)):
                continue
            yield p

    def run_retention(self) -> None:
        for p in self._each(compacted=False):
            self._guarded(p, "retention", self.retain_partition)

    def run_compaction(self) -> None:
        for p in self._each(compacted=True):
            self._guarded(p, "compaction", self._compact)

    def retain_partition(self, p: "Partition") -> None:
        """One partition's retention pass, as :meth:`run_retention` makes it for each (under its error
        handling: a partition whose pass raises is recorded as uncleanable). Replaceable in tests."""
        self.add_retention(p.enforce_retention())

    def _compact(self, p: "Partition") -> None:
        self.add_cleaning(clean_partition(p, self.buffer_bytes, should_stop=self._stopping_or_heartbeat))

    def _skip_damaged(self, p: "Partition", what: str, exc: CorruptRecordError) -> None:
        key = f"{p.topic}-{p.number}"
        if key not in self._damaged:
            self._damaged.add(key)
            log.warning("pylog cleaner: %s of %s skipped until `pylog repair STORE %s %d`: %s", what, key,
                        p.topic, p.number, exc)

    def _guarded(self, p: "Partition", what: str, work: Callable[["Partition"], None]) -> None:
        """Run one partition's maintenance; an error marks the partition uncleanable, the thread goes on."""
        try:
            if not internals(p).transient:
                work(p)
                return
            # Written in turn by many handles: maintain it only while nobody else writes, then let go.
            with internals(p).writer_turn():
                held = p.is_writer
                if not held:
                    try:
                        if not p.try_become_writer():
                            return
                    except CorruptRecordError as exc:
                        # Damaged in the middle of its active segment: no handle may write it until a
                        # repair. Not the cleaner's failure: skip it this pass, try again the next (after a
                        # repair it works), warn once, and go on with the other partitions.
                        self._skip_damaged(p, what, exc)
                        return
                    self._damaged.discard(f"{p.topic}-{p.number}")
                try:
                    work(p)
                finally:
                    if not held:
                        p.release_writer()
        except (StoreClosedError, CleanerStoppedError):
            return
        except Exception as exc:
            key = f"{p.topic}-{p.number}"
            self._record_error(f"{what} of {key}", exc, key)
            log.error("pylog cleaner: %s of %s failed; skipping the partition from now on", what, key, exc_info=exc)
            self._heartbeat(force=True)
