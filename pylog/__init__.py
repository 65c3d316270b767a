"""pylog: an embeddable, log-structured messaging library with Kafka's storage semantics.

    import pylog
    with pylog.open("./pylog-data") as store:
        store.create_topic("events", partitions=3)
        p = store.topic("events").partition(0)
        first = p.append_values([b"v1", b"v2"], keys=[b"a", b"b"])
        for rec in p.read(first):
            print(rec.offset, rec.key, rec.value)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .accel import ACCELERATED
from .clients.assignors import RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor
from .maintenance.cleaner_status import CleanerStatus
from .maintenance.cleaner_registry import PublishedCleaner
from .maintenance.compaction import CleanResult
from .config import TopicConfig
from .clients.consumer import (Consumer, ConsumerRebalanceListener, ConsumerRecord, NoOffsetForPartitionError,
                       OffsetAndTimestamp)
from .errors import (AuthenticationError, CorruptBatchError, IllegalSaslStateError, InvalidBatchError, ProtocolError,
                     JvmReaderUnavailableError, MetricsUnavailableError, SecurityConfigError, UnknownApiKeyError,
                     SparkConnectUnavailableError, UnsupportedApiVersionError,
                     UnsupportedCompressionError, UnsupportedMagicError, UnsupportedSaslMechanismError)
from .errors import (CleanerError, CommitFailedError, ConsumerStoppedError, CorruptRecordError, DiskFullError,
                     InvalidArgumentError, InvalidConfigError, StorePathError,
                     InvalidGroupError, InvalidRecordError, InvalidTopicError, LogFailedError, OffsetOutOfRangeError,
                     InvalidTxnStateError, OutOfOrderSequenceError, PartitionLockedError, ProducerFencedError,
                     PylogError, ReadOnlyStoreError, RebalanceInProgressError, RecordTooLargeError, StorageError,
                     StoreClosedError, StorePermissionError, TooManyOpenFilesError, TopicExistsError,
                     TransactionCoordinatorFencedError, UnknownStoreError,
                     UnknownTopicError)
from .errors import (ConcurrentTransactionsError, InvalidProducerEpochError, InvalidProducerIdMappingError,
                     InvalidTransactionTimeoutError, TransactionalIdNotFoundError)
from .errors import RemoteConflictError, RemoteDataCorruptError, RemoteObjectMissingError, RemoteStorageError
from .clients.groups import GroupDescription, MemberDescription, PartitionLag
from .store import Store, open
from .partition import Partition
from .clients.producer import FutureRecordMetadata, Producer, ProducerTimeoutError
from .kafka import KafkaConsumer, KafkaProducer
from .storage.records import Record, RecordColumns
from .storage.retention import RetentionResult
from .structs import OffsetAndMetadata, RecordMetadata, TopicPartition
from .topic import Topic
from .tiered import attach, restore

__version__ = "0.1.0"

__all__ = [
    "open", "restore", "attach", "Store", "Topic", "Partition", "Record", "RecordColumns", "TopicConfig",
    "PylogError", "CorruptRecordError", "OffsetOutOfRangeError", "RecordTooLargeError", "TopicExistsError",
    "UnknownTopicError", "PartitionLockedError", "InvalidConfigError", "InvalidTopicError", "InvalidRecordError",
    "InvalidGroupError", "StoreClosedError", "LogFailedError", "CleanerError", "ProducerFencedError",
    "InvalidTxnStateError", "TransactionCoordinatorFencedError", "InvalidProducerEpochError",
    "InvalidProducerIdMappingError", "ConcurrentTransactionsError", "InvalidTransactionTimeoutError",
    "TransactionalIdNotFoundError",
    "OutOfOrderSequenceError", "StorageError", "DiskFullError", "ReadOnlyStoreError", "StorePermissionError",
    "UnknownStoreError", "InvalidArgumentError", "StorePathError", "ConsumerStoppedError", "TooManyOpenFilesError",
    "CorruptBatchError", "InvalidBatchError", "UnsupportedMagicError", "UnsupportedCompressionError",
    "ProtocolError", "UnknownApiKeyError", "UnsupportedApiVersionError", "AuthenticationError",
    "UnsupportedSaslMechanismError", "IllegalSaslStateError", "SecurityConfigError", "MetricsUnavailableError",
    "JvmReaderUnavailableError", "SparkConnectUnavailableError",
    "RemoteStorageError", "RemoteConflictError", "RemoteObjectMissingError", "RemoteDataCorruptError",
    "CleanerStatus", "PublishedCleaner", "CleanResult", "RetentionResult",
    "Producer", "FutureRecordMetadata", "ProducerTimeoutError", "TopicPartition", "OffsetAndMetadata",
    "RecordMetadata", "Consumer", "ConsumerRecord", "OffsetAndTimestamp", "NoOffsetForPartitionError",
    "ConsumerRebalanceListener", "CommitFailedError", "RebalanceInProgressError", "RangePartitionAssignor",
    "RoundRobinPartitionAssignor", "StickyPartitionAssignor", "GroupDescription", "MemberDescription",
    "PartitionLag", "KafkaProducer", "KafkaConsumer", "serve",
    "ACCELERATED", "__version__",
]


if TYPE_CHECKING:
    from .server import Server


def serve(store: "Store | str", host: str = "127.0.0.1", port: int = 9092, **options: Any) -> "Server":
    """Serve ``store`` (a Store or a path) over Kafka's wire protocol from a background thread: see
    :func:`pylog.server.serve` (imported on first use, so ``import pylog`` stays light)."""
    from .server import serve as _serve
    return _serve(store, host=host, port=port, **options)
