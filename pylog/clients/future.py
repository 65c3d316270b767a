"""The future :meth:`pylog.clients.producer.Producer.send` returns: :class:`FutureRecordMetadata`.

Invariants:
- A future reads only its accumulation's completion state (:mod:`pylog.clients.accumulator`), which does
  not change once ``done`` is set: ``get()``, ``succeeded()`` and the other readers take no lock.
- A callback or errback runs exactly once: at once when the accumulation is complete, else once it is,
  by whichever of the adder and the completing drain takes it from the list.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import ProducerTimeoutError
from ..structs import RecordMetadata
from .accumulator import Accumulation

__all__ = ["FutureRecordMetadata"]

class FutureRecordMetadata:
    """The eventual :class:`~pylog.structs.RecordMetadata` of one sent record (kafka-python's future).

    Made by :meth:`Producer.send` only: two slots (the record's accumulation and its index in it) and no
    ``__init__``, because one is made per record on the hot path.
    """

    __slots__ = ("_acc", "_i")
    _acc: Accumulation
    _i: int

    @property
    def is_done(self) -> bool:
        return self._acc.done

    def succeeded(self) -> bool:
        return self._acc.done and self._acc.error_of(self._i) is None

    def failed(self) -> bool:
        return self._acc.done and self._acc.error_of(self._i) is not None

    @property
    def exception(self) -> BaseException | None:
        return self._acc.error_of(self._i) if self._acc.done else None

    @property
    def value(self) -> RecordMetadata | None:
        return self.get(0) if self.succeeded() else None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: forever) for the record's metadata.

        :raises ProducerTimeoutError: on timeout; the drain's error when the append failed.
        """
        acc = self._acc
        if not acc.wait(timeout):
            raise ProducerTimeoutError(f"record not appended to {acc.topic} within {timeout} s")
        return acc.metadata(self._i)

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(record_metadata, *args, **kwargs)`` when the record is appended (at once if it is)."""
        return self._add(False, fn, args, kwargs)

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "FutureRecordMetadata":
        """Call ``fn(exception, *args, **kwargs)`` if the append fails (at once if it did)."""
        return self._add(True, fn, args, kwargs)

    def _add(self, on_error: bool, fn: Callable[..., Any], args: tuple, kwargs: dict) -> "FutureRecordMetadata":
        acc = self._acc
        entry = (self._i, on_error, fn, args, kwargs)
        if not acc.done:
            acc.callbacks.append(entry)
            if not acc.done:
                return self
            try:
                acc.callbacks.remove(entry)
            except ValueError:
                return self  # complete() took it and ran it
        acc.run_callback(*entry)
        return self
