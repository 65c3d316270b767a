"""kafka-python's ``ConsumerRebalanceListener``: the callbacks a consumer group member runs around a rebalance.

A plain base class with no state: :class:`pylog.clients.consumer.Consumer` calls the two methods of whatever
listener ``subscribe(listener=...)`` was given (this class, a subclass, or any object with both methods), from
the thread that polls, revoked partitions first.
"""

from __future__ import annotations

from ..structs import TopicPartition

__all__ = ["ConsumerRebalanceListener"]


class ConsumerRebalanceListener:
    """Callbacks around a group rebalance (kafka-python's ``ConsumerRebalanceListener``); subclass it, or
    pass any object with these two methods to ``subscribe(listener=...)``.

    As in kafka-python, ``on_partitions_revoked`` gets every partition of the previous assignment and
    ``on_partitions_assigned`` every partition of the new one (partitions that stay with this member
    appear in both, and keep their positions). Revoked partitions are still owned during the revoke
    callback, so committing offsets there works.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Called before the partitions of the previous assignment are given up."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Called once the new assignment is known (before its partitions are read)."""
