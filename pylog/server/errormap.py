"""Which Kafka error code a pylog error becomes on the wire.

One table, so every handler answers the same failure with the same code, and a client library reacts to it
as it does to a broker's (retrying a retriable code, failing the send or the commit on the others).

Invariant: every exception maps to a code; an exception that is not a :class:`~pylog.errors.PylogError`
(a bug) is UNKNOWN_SERVER_ERROR, logged by the caller with its traceback.
"""

from __future__ import annotations

from .. import errors as pe
from .protocol import codes as E

__all__ = ["code_for"]

# Most specific first: the first class the exception is an instance of wins.
_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (pe.UnsupportedMagicError, E.UNSUPPORTED_FOR_MESSAGE_FORMAT),
    (pe.InvalidBatchError, E.INVALID_RECORD),
    (pe.CorruptBatchError, E.CORRUPT_MESSAGE),
    (pe.UnsupportedCompressionError, E.UNSUPPORTED_COMPRESSION_TYPE),
    (pe.DataLossError, E.OFFSET_OUT_OF_RANGE),
    (pe.OffsetOutOfRangeError, E.OFFSET_OUT_OF_RANGE),
    (pe.CorruptRecordError, E.CORRUPT_MESSAGE),
    (pe.UnknownTopicError, E.UNKNOWN_TOPIC_OR_PARTITION),
    (pe.InvalidGroupError, E.INVALID_GROUP_ID),
    (pe.InvalidTopicError, E.INVALID_TOPIC_EXCEPTION),
    (pe.TopicExistsError, E.TOPIC_ALREADY_EXISTS),
    (pe.RecordTooLargeError, E.MESSAGE_TOO_LARGE),
    (pe.OutOfOrderSequenceError, E.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (pe.ProducerFencedError, E.INVALID_PRODUCER_EPOCH),
    (pe.InvalidProducerEpochError, E.INVALID_PRODUCER_EPOCH),
    (pe.InvalidProducerIdMappingError, E.INVALID_PRODUCER_ID_MAPPING),
    (pe.ConcurrentTransactionsError, E.CONCURRENT_TRANSACTIONS),
    (pe.InvalidTransactionTimeoutError, E.INVALID_TRANSACTION_TIMEOUT),
    (pe.TransactionalIdNotFoundError, E.TRANSACTIONAL_ID_NOT_FOUND),
    (pe.InvalidTxnStateError, E.INVALID_TXN_STATE),
    (pe.TransactionCoordinatorFencedError, E.TRANSACTION_COORDINATOR_FENCED),
    (pe.PartitionLockedError, E.REQUEST_TIMED_OUT),
    (pe.StorePermissionError, E.TOPIC_AUTHORIZATION_FAILED),
    (pe.ReadOnlyStoreError, E.TOPIC_AUTHORIZATION_FAILED),
    (pe.StorageError, E.KAFKA_STORAGE_ERROR),
    (pe.LogFailedError, E.KAFKA_STORAGE_ERROR),
    (pe.StoreClosedError, E.BROKER_NOT_AVAILABLE),
    (pe.InvalidRecordError, E.INVALID_RECORD),
    (pe.InvalidConfigError, E.INVALID_CONFIG),
    (pe.InvalidArgumentError, E.INVALID_REQUEST),
)


def code_for(exc: BaseException) -> int:
    """The Kafka error code for ``exc``."""
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code
    return E.UNKNOWN_SERVER_ERROR
