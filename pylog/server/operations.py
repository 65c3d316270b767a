"""Kafka's authorized operations (KIP-430) as ``pylog serve`` answers them: DescribeTopics (Metadata with
``include_topic_authorized_operations``), DescribeCluster and DescribeGroups report, as a bit field of
Kafka's ``AclOperation`` codes, what the client may do with the resource.

Without the authorizer (``--authorizer``) every client that connected (authenticated, when SASL is required)
may do everything Kafka allows on the resource type, as a Kafka broker without an authorizer answers; with
it, the operations its ACLs allow the client's principal from its host. On a store opened read-only the
operations that write are refused and so never reported.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["NOT_REQUESTED", "TOPIC", "CLUSTER", "GROUP", "authorized_operations"]

#: The value of an authorized-operations field that was not asked for (Kafka's ``Integer.MIN_VALUE``).
NOT_REQUESTED = -2147483648

# Kafka's AclOperation codes (org.apache.kafka.common.acl.AclOperation).
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12

TOPIC, CLUSTER, GROUP = "topic", "cluster", "group"

#: The operations Kafka supports per resource type (AclEntry.supportedOperations).
_SUPPORTED = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    CLUSTER: (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE),
    GROUP: (READ, DELETE, DESCRIBE),
}
#: What a read-only store still allows.
_READ_ONLY = frozenset({READ, DESCRIBE, DESCRIBE_CONFIGS})


def authorized_operations(resource: str, read_only: bool, allowed: Callable[[int], bool] | None = None) -> int:
    """The bit field (bit n set: AclOperation n allowed) of what a client may do with a ``resource``
    (TOPIC, CLUSTER or GROUP) of a store opened ``read_only`` or not; ``allowed(op)``: the authorizer's decision
    for the client's principal (None: no authorizer, everything allowed)."""
    ops = _SUPPORTED[resource]
    return sum(1 << op for op in ops if (not read_only or op in _READ_ONLY) and (allowed is None or allowed(op)))
