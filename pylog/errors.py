"""The closed set of errors pylog raises.

Every error a caller can see derives from :class:`PylogError`, so ``except pylog.PylogError`` catches
them all, bad arguments too (:class:`InvalidArgumentError`, :class:`InvalidRecordError`: also the builtin
``ValueError``/``TypeError`` they replaced, so older ``except`` clauses still match). Errors about data
on disk carry the file path and the byte position so a post-mortem can go straight to the bytes.

The file system's refusals of a write (a full disk, a read-only mount, missing permissions) are raised
as :class:`DiskFullError`, :class:`ReadOnlyStoreError` and :class:`StorePermissionError` (each a
:class:`StorageError`): PylogErrors that are also :class:`OSError` (with the refusal's ``errno``,
``strerror`` and ``filename``, and the original error as ``__cause__``), so code that caught ``OSError``
before keeps working.

Two helpers for reporting the OS's refusals go with them, outside ``__all__`` (the closed set of errors):
:data:`DESCRIPTOR_ERRNOS` (the errnos of running out of file descriptors) and :class:`RateLimitedLog` (a
failure that repeats for every request is logged at most once per interval, with the count of those left out).
"""

from __future__ import annotations

import errno
import logging
import threading
import time

__all__ = [
    "PylogError",
    "CorruptRecordError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "TopicExistsError",
    "UnknownTopicError",
    "PartitionLockedError",
    "InvalidConfigError",
    "InvalidTopicError",
    "InvalidGroupError",
    "InvalidRecordError",
    "StoreClosedError",
    "LogFailedError",
    "CleanerError",
    "ProducerFencedError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "ConcurrentTransactionsError",
    "InvalidTransactionTimeoutError",
    "TransactionalIdNotFoundError",
    "OutOfOrderSequenceError",
    "CommitFailedError",
    "RebalanceInProgressError",
    "StorageError",
    "DiskFullError",
    "TooManyOpenFilesError",
    "ReadOnlyStoreError",
    "StorePermissionError",
    "UnknownStoreError",
    "InvalidArgumentError",
    "StorePathError",
    "ConsumerStoppedError",
    "ProducerTimeoutError",
    "NoOffsetForPartitionError",
    "InvalidOptionError",
    "DataLossError",
    "SinkTransactionLostError",
    "ProtocolError",
    "UnknownApiKeyError",
    "UnsupportedApiVersionError",
    "CorruptBatchError",
    "InvalidBatchError",
    "UnsupportedMagicError",
    "UnsupportedCompressionError",
    "AuthenticationError",
    "UnsupportedSaslMechanismError",
    "IllegalSaslStateError",
    "SecurityConfigError",
    "MetricsUnavailableError",
    "JvmReaderUnavailableError",
    "SparkConnectUnavailableError",
    "RemoteStorageError",
    "RemoteConflictError",
    "RemoteObjectMissingError",
    "RemoteDataCorruptError",
]


class PylogError(Exception):
    """Base class of every error pylog raises on purpose."""


class CorruptRecordError(PylogError):
    """Bytes on disk (or handed to a decoder) are not a valid pylog structure.

    Raised when a batch's length, magic, checksum or offsets do not check, or an index/checkpoint file
    is damaged and cannot be rebuilt. ``path`` and ``position`` locate the bad bytes (``None`` when the
    bytes did not come from a file).
    """

    def __init__(self, message: str, path: str | None = None, position: int | None = None) -> None:
        self.path = path
        self.position = position
        where = ""
        if path is not None:
            where = f" [{path}" + (f" @ byte {position}" if position is not None else "") + "]"
        elif position is not None:
            where = f" [@ byte {position}]"
        super().__init__(message + where)
        self.reason = message


class OffsetOutOfRangeError(PylogError):
    """The requested offset is below the partition's log start or above its log end."""

    def __init__(self, message: str, offset: int | None = None, log_start_offset: int | None = None,
                 log_end_offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(PylogError):
    """A single record (or batch) is larger than the topic's ``max.message.bytes``."""


class TopicExistsError(PylogError):
    """``create_topic`` was asked for a topic that already exists."""


class UnknownTopicError(PylogError):
    """The named topic (or partition) does not exist in the store."""


class InvalidTopicError(PylogError):
    """A topic name is not allowed, or the topic is pylog's own and cannot be changed this way.

    Names are Kafka's (1..249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..``) except those pylog keeps for its
    own entries in the store directory: names starting with ``.`` or ``__``, and ``pylog.store`` and
    ``producer.ids`` (alone or followed by ``.``). Internal topics (``__consumer_offsets``) can be read but
    not created, deleted, altered or written to by a producer.
    """


class PartitionLockedError(PylogError):
    """Another writer (thread, process or store handle) holds the partition's exclusive write lock."""


class InvalidConfigError(PylogError):
    """A configuration name is unknown or its value is out of range / of the wrong type."""


class InvalidArgumentError(PylogError, ValueError, TypeError):
    """An argument of a call is out of range or of the wrong kind (a negative partition count, a partition
    number the topic does not have, a negative offset, a string where a store belongs); the message names
    the argument and what to pass.

    Also a :class:`ValueError` and a :class:`TypeError`: these calls raised one of the two before, so code
    that caught either keeps working."""


class InvalidGroupError(InvalidConfigError):
    """A consumer group id is not usable: it must be a non-empty ``str`` that can be encoded as UTF-8 (no
    lone surrogates). Any other text is allowed, as in Kafka. An :class:`InvalidConfigError` too, since a
    bad ``group_id`` was one before this class existed."""


class InvalidRecordError(PylogError, TypeError):
    """A record cannot be appended as given (e.g. a value that is not bytes, wrong column lengths, a
    key-less record on a compacted topic).

    Also a :class:`TypeError`, so code that caught the ``TypeError`` a non-bytes value raised before
    keeps working."""


class StoreClosedError(PylogError):
    """The store (or partition) was closed and cannot be used any more."""


class LogFailedError(PylogError):
    """A write failed half-way and could not be rolled back; the partition refuses work until reopened."""


class CleanerError(PylogError):
    """The background cleaner died or cannot clean some partitions; :meth:`Store.check_health` raises it."""


class ProducerFencedError(PylogError):
    """An idempotent producer wrote with an epoch older than its current one (a newer instance took over)."""


class InvalidTxnStateError(PylogError):
    """A producer's batch or marker does not fit the state of its transaction (Kafka's INVALID_TXN_STATE): a
    non-transactional batch while its transaction is open, or a transactional one without a producer id."""


class TransactionCoordinatorFencedError(PylogError):
    """A transaction marker from a coordinator epoch older than one already written to the partition."""


class InvalidProducerEpochError(PylogError):
    """A transactional call with an epoch newer than the coordinator's for its transactional id (Kafka's
    INVALID_PRODUCER_EPOCH): not a fenced producer but one that does not match the coordinator's state."""


class InvalidProducerIdMappingError(PylogError):
    """A transactional call whose producer id is not the one its transactional id maps to (Kafka's
    INVALID_PRODUCER_ID_MAPPING): the producer never called init_transactions, or the id was re-initialised
    under a new producer id."""


class ConcurrentTransactionsError(PylogError):
    """The transactional id's coordinator lock stayed held by another process or thread for the whole wait
    (Kafka's CONCURRENT_TRANSACTIONS, retriable): another call for that id is completing a transaction."""


class InvalidTransactionTimeoutError(InvalidConfigError):
    """``transaction_timeout_ms`` outside 1..``transaction.max.timeout.ms`` (Kafka's
    INVALID_TRANSACTION_TIMEOUT)."""


class TransactionalIdNotFoundError(PylogError):
    """No transaction state for that transactional id (Kafka's TRANSACTIONAL_ID_NOT_FOUND): it never called
    init_transactions in this store."""


class OutOfOrderSequenceError(PylogError):
    """An idempotent producer's batch does not follow its last appended sequence number (a record was lost
    between producer and log, or the batch is not a retry of a recent one)."""


class CommitFailedError(PylogError):
    """An offset commit for a partition this group member does not own (any more): the group rebalanced
    and the partition moved to another member, or the consumer left the group."""


class RebalanceInProgressError(PylogError):
    """A group operation could not complete because the group's membership kept changing (its lock
    could not be taken within the consumer's ``session_timeout_ms``)."""


class StorageError(PylogError, OSError):
    """A write the file system refused (the base of :class:`DiskFullError` and :class:`ReadOnlyStoreError`).
    Also an :class:`OSError`: ``errno``, ``strerror`` and ``filename`` are the refusal's (None when pylog
    itself refused, e.g. a read-only handle), and ``str()`` is the message, which says what state the
    operation left and what to do."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple:
        # OSError pickles its args only; errno and friends must survive a trip to another process too.
        return (_rebuild, (type(self), str(self), self.errno, self.strerror, self.filename))


def _rebuild(cls: type, message: str, errno: int | None, strerror: str | None, filename: str | None) -> OSError:
    err = cls(message)
    err.errno, err.strerror, err.filename = errno, strerror, filename
    return err


class DiskFullError(StorageError):
    """The file system holding the store is full (``ENOSPC``) or the user's quota is used up (``EDQUOT``).

    What was being written did not take effect unless the message says otherwise (an append names the
    offsets that did land; a partition whose write could not be undone refuses work until reopened, as
    :class:`LogFailedError` says). Free space, e.g. ``pylog retention`` / ``pylog delete-records``, then
    retry."""


class TooManyOpenFilesError(StorageError):
    """The process (``EMFILE``) or the system (``ENFILE``) ran out of file descriptors while opening a
    partition's or a segment's files. Nothing was appended, read or changed by the call that raised it, and
    the partition is not failed: once descriptors are free again (the store closes those of the partitions
    used least recently, within its ``max.open.descriptors`` budget) the same call succeeds. Raise the
    limit (``ulimit -n``) or lower ``max.open.descriptors`` to leave more for the rest of the process."""


class ReadOnlyStoreError(StorageError):
    """A write to a store that cannot be written: the file system is mounted read-only (``EROFS``), or
    the store was opened with ``pylog.open(path, read_only=True)`` (then ``errno`` is None and nothing
    was attempted). Read it through a read-only handle; to write, remount the file system read-write
    (or open the store without ``read_only``)."""


class StorePermissionError(ReadOnlyStoreError):
    """The store's files or directories may not be written by this user (``EACCES``, ``EPERM``). Open it
    with ``read_only=True`` to read it, or give this user write access to the whole store directory."""


class UnknownStoreError(PylogError):
    """``pylog.open(path, read_only=True)`` found no pylog store at ``path`` (a read-only open never
    creates one): check the path."""


class StorePathError(UnknownStoreError, FileExistsError, NotADirectoryError):
    """``pylog.open(path)`` was given a path that is a file, or under one: pass the store's directory.
    Also a :class:`FileExistsError` and a :class:`NotADirectoryError`, what such paths raised before."""


class ConsumerStoppedError(StoreClosedError):
    """An asyncio consumer (:class:`pylog.aio.AIOKafkaConsumer`) was stopped (aiokafka's name): ``async for``
    ends and ``getone()`` / ``getmany()`` raise it; make a new consumer to read again."""


class ProducerTimeoutError(PylogError, TimeoutError):
    """A future's ``get(timeout)`` or ``flush(timeout)`` ran out of time (kafka-python's KafkaTimeoutError).
    Wait longer, or look why the partition's writer is slow (another process holding its lock, a slow disk)."""


class NoOffsetForPartitionError(PylogError):
    """A partition has no position and ``auto_offset_reset="none"`` forbids choosing one: ``seek()`` the
    partition, commit an offset for the group, or use ``auto_offset_reset="earliest"``/``"latest"``."""


# ------------------------------------------------------------------------------------ the Spark source's

class InvalidOptionError(InvalidConfigError):
    """A Spark option of the ``pylog`` source or sink is unknown, malformed, missing or conflicting.

    ``option`` is the option's canonical name (as documented, e.g. ``startingOffsets``). Exported from
    :mod:`pylog.spark`.
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"option {option!r}: {message}")
        self.option = option


class DataLossError(OffsetOutOfRangeError):
    """Offsets a query should read are gone (retention, delete-records) or the log is shorter than expected.

    Raised when ``failOnDataLoss`` is true (the default); with ``failOnDataLoss=false`` the range is
    skipped with a warning instead. Exported from :mod:`pylog.spark`.
    """


class SinkTransactionLostError(PylogError):
    """A transaction of a micro-batch the exactly-once Spark sink had decided was aborted before the driver
    could commit it (its ``transactionTimeoutMs`` passed while the query was down): that task's rows of the
    batch are lost. Restart queries within the timeout, or raise it. Exported from :mod:`pylog.spark`.
    """


# ---------------------------------------------------------------------------------------- pylog serve's

class ProtocolError(PylogError):
    """Bytes received by ``pylog serve`` are not a valid Kafka protocol message (a length past the end of
    the frame, a negative length other than -1 for null, invalid UTF-8, trailing garbage), or a message
    to encode does not fit its schema. ``position`` is the byte offset in the frame where decoding failed
    (``None`` when encoding) and ``field`` the dotted path of the field being read (``None`` if unknown).
    The server answers such a request by closing the connection, as Kafka brokers do.
    """

    def __init__(self, message: str, position: int | None = None, field: str | None = None) -> None:
        where = ""
        if field is not None:
            where += f" in {field}"
        if position is not None:
            where += f" @ byte {position}"
        super().__init__(message + where)
        self.reason = message
        self.position = position
        self.field = field


class UnknownApiKeyError(ProtocolError):
    """A request's api key is not one ``pylog serve`` knows. ``header`` is the request's parsed header
    (api_key, api_version, correlation_id, client_id); the server closes the connection, as Kafka does."""

    def __init__(self, message: str, header: object) -> None:
        super().__init__(message)
        self.header = header


class UnsupportedApiVersionError(ProtocolError):
    """A request's version of a known API is not one ``pylog serve`` serves. ``header`` is the request's
    parsed header. ApiVersions requests get an UNSUPPORTED_VERSION answer (so the client retries with a
    version we serve); for other APIs the server closes the connection, as Kafka does."""

    def __init__(self, message: str, header: object) -> None:
        super().__init__(message)
        self.header = header
class CorruptBatchError(CorruptRecordError):
    """A Kafka record batch received over the wire (``pylog serve``) does not decode: truncated, a CRC that
    does not match, a varint or length past its bounds, a compressed section that does not decompress. The
    server answers Kafka's ``CORRUPT_MESSAGE`` (2), which clients retry (the bytes may have been damaged in
    transit)."""


class InvalidBatchError(CorruptBatchError):
    """A Kafka record batch that decodes but breaks Kafka's rules for what a producer sends (offset deltas
    other than 0..n-1, a record count that disagrees with the records, a null or non-UTF-8 header key, no
    records). The server answers ``INVALID_RECORD`` (87), which clients do not retry."""


class UnsupportedMagicError(InvalidBatchError):
    """A record batch of message format v0 or v1 (magic 0 or 1, or an unknown magic): ``pylog serve`` takes
    only magic 2. The server answers ``UNSUPPORTED_FOR_MESSAGE_FORMAT`` (43)."""


class UnsupportedCompressionError(PylogError):
    """A record batch compressed with a codec this installation cannot decompress (snappy or zstd without
    the optional ``cramjam`` package, or a codec number Kafka does not define). The server answers
    ``UNSUPPORTED_COMPRESSION_TYPE`` (76); the message says what to install."""
# ------------------------------------------------------------------------------------ the Kafka server's

class AuthenticationError(PylogError):
    """A client of ``pylog serve`` failed SASL authentication: a wrong user name or password, a bad SCRAM proof
    or nonce, a malformed SASL token (Kafka's SASL_AUTHENTICATION_FAILED, error code 58).

    The message is safe to send to the client: it never holds a password, and an unknown user and a wrong
    password read the same."""


class UnsupportedSaslMechanismError(AuthenticationError):
    """A client asked for a SASL mechanism the server does not have enabled (Kafka's
    UNSUPPORTED_SASL_MECHANISM, error code 33); the message lists the enabled ones."""


class IllegalSaslStateError(AuthenticationError):
    """A SASL request came at a point of the exchange where it is not allowed: a second handshake, a token
    after the exchange ended or failed (Kafka's ILLEGAL_SASL_STATE, error code 34)."""


class SecurityConfigError(InvalidConfigError):
    """The server's SASL credentials file or a TLS certificate, key or CA file is missing, unreadable or
    malformed; the message names the file (or the entry) and what is wrong with it, never a password."""


class MetricsUnavailableError(PylogError, ImportError):
    """Metrics were asked for (``pylog serve --metrics-port``, ``pylog metrics``, :mod:`pylog.prometheus`) but
    the ``prometheus-client`` library is not installed: ``pip install pylog-embedded[metrics]``."""


class JvmReaderUnavailableError(PylogError):
    """Spark's JVM reader of the pylog format cannot be built here (:mod:`pylog.jvm`): no JDK (``javac``, ``jar``),
    no pyspark, or a failed compile; the message says which. Spark then reads with the Python data source."""


class SparkConnectUnavailableError(PylogError, ImportError):
    """A Spark Connect session was asked for (``pylog.spark.session(remote=...)``) but PySpark's Connect client
    lacks its dependencies (grpcio, grpcio-status, googleapis-common-protos, zstandard, ...); the message names
    them: ``pip install "pyspark[connect]"`` (``pylog-embedded[spark]`` includes it)."""


class RemoteStorageError(PylogError):
    """The object store behind tiered storage failed or refused a request (unreachable, timed out, throttled
    past the retries, access denied, no such bucket, missing credentials or the ``boto3`` package).

    ``key`` names the object (``s3://bucket/key``) and ``code`` the store's error code (``"SlowDown"``,
    ``"AccessDenied"``; ``None`` when no answer came). Nothing was changed in the bucket's committed state
    by the failed request beyond what the message says; a retry is safe (uploads are idempotent).
    """

    def __init__(self, message: str, key: str | None = None, code: str | None = None) -> None:
        super().__init__(message + (f" [{key}]" if key else ""))
        self.key = key
        self.code = code


class RemoteConflictError(RemoteStorageError):
    """A conditional write lost: another process changed the remote manifest (or wrote the object) since it
    was read. The caller re-reads and decides again; pylog's own commits do so a bounded number of times."""


class RemoteObjectMissingError(RemoteStorageError):
    """An object the remote manifest names (or a restore needs) is not in the bucket."""


class RemoteDataCorruptError(CorruptRecordError):
    """Bytes read from the object store do not match the checksum, size or format the manifest and
    docs/FORMAT.md promise (``path`` is the object's ``s3://`` address). Never returned as data."""


# -------------------------------------------------------------------------- internal: never seen by callers

class CommandError(PylogError):
    """Ends a CLI command: ``pylog: <message>`` goes to stderr and ``code`` becomes the exit code
    (:class:`pylog.cli.base.ExitCode`; 3, "could not run", unless given)."""

    def __init__(self, message: str, code: int = 3) -> None:
        super().__init__(message)
        self.code = code


class BadInputLineError(PylogError):
    """An input line the CLI producer cannot parse: reported with its line number, and producing stops there."""


class CleanerStoppedError(PylogError):
    """A cleaning was interrupted because its store is closing; nothing was swapped in."""


#: The errnos of running out of file descriptors (the process's ``EMFILE``, the system's ``ENFILE``).
DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


class RateLimitedLog:
    """Log the same kind of trouble at most once per ``interval`` seconds, with how many were not logged
    in between: a failure that repeats for every request (out of descriptors) must not flood the log."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self.logger = logger
        self.interval = interval
        self._next: dict[str, float] = {}
        self._dropped: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` was logged less than ``interval`` seconds ago; True when logged."""
        now = time.monotonic()
        with self._lock:
            if now < self._next.get(key, 0.0):
                self._dropped[key] = self._dropped.get(key, 0) + 1
                return False
            self._next[key] = now + self.interval
            dropped = self._dropped.pop(key, 0)
        if dropped:
            msg += f" ({dropped} more like it in the last {self.interval:.0f} s not logged)"
        self.logger.log(level, msg, *args)
        return True
