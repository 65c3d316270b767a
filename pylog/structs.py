"""The small value types the clients share, shaped like kafka-python's (``kafka.structs``).

Invariant: plain named tuples (immutable, hashable, cheap); no behaviour.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["TopicPartition", "OffsetAndMetadata", "RecordMetadata", "ConsumerRecord", "OffsetAndTimestamp",
           "ConsumerGroupMetadata"]


class TopicPartition(NamedTuple):
    """A partition of a topic."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset (the next record to consume) with free-form metadata, and the leader epoch of the
    record before it when a Kafka client committed it (Kafka's ``committedLeaderEpoch``; -1: unknown, what
    pylog's own consumers commit)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class RecordMetadata(NamedTuple):
    """Where a produced record landed; what ``producer.send(...).get()`` returns.

    ``offset`` is -1 for ``acks=0`` (the producer does not wait to learn it).
    """

    topic: str
    partition: int
    topic_partition: TopicPartition
    offset: int
    timestamp: int
    log_start_offset: int
    checksum: None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class ConsumerRecord(NamedTuple):
    """One consumed record: kafka-python's ``ConsumerRecord`` fields."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    #: ``(key, value)`` pairs, as a tuple (kafka-python gives a list)
    headers: tuple
    checksum: None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int


class OffsetAndTimestamp(NamedTuple):
    """An offset found by its timestamp: what ``consumer.offsets_for_times(...)`` maps each partition to."""

    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership as of a moment: what ``consumer.group_metadata()`` returns, to pass to
    ``producer.send_offsets_to_transaction`` (Kafka's and kafka-python's ``ConsumerGroupMetadata``)."""

    group_id: str | None
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
