"""The Kafka wire protocol for ``pylog serve``: primitive types, a schema DSL compiled to fast per-version
codecs, every served API's request and response schema, header framing, and Kafka's error codes.

Pure Python, no I/O. Entry points (all in :mod:`.api`): :func:`parse_request`, :func:`encode_response`
(/ :func:`encode_response_parts` for vectored writes), :func:`supported_versions`,
:func:`unsupported_version_response`, :func:`error_response`; :class:`ErrorCode` in :mod:`.codes`.
Messages are dicts keyed by Kafka's field names in snake_case (see :mod:`.schema` for defaults and what
decoded dicts hold).

Versions served (ApiVersions advertises these; clients pick min(their max, ours)); the maxima stay below
the versions that replace topic names with topic ids or batch several groups/keys in one request:

=====================  ======  ==========================================================
API (key)              range   why that bound
=====================  ======  ==========================================================
Produce (0)            3-9     v3: record batch v2 only; v10+ adds tagged leader hints
Fetch (1)              4-12    v4: record batch v2 only; v13+ topic ids
ListOffsets (2)        1-7     v1: Kafka 4's minimum; v8+ tiered-storage timestamps
Metadata (3)           0-12    v13+ (KIP-1102) rebootstrap error
OffsetCommit (8)       2-8     v2: Kafka 4's minimum; v9+ KIP-848 member epochs
OffsetFetch (9)        1-7     v8+ batches groups
FindCoordinator (10)   0-3     v4+ batches keys
JoinGroup (11)         0-7     v8+ adds a reason, not needed
Heartbeat (12)         0-4
LeaveGroup (13)        0-4     v5 adds a reason
SyncGroup (14)         0-5
DescribeGroups (15)    0-5
ListGroups (16)        0-4
SaslHandshake (17)     0-1
ApiVersions (18)       0-4
CreateTopics (19)      2-7
DeleteTopics (20)      1-5     v6+ topic ids
DeleteRecords (21)     0-2
InitProducerId (22)    0-4
DescribeConfigs (32)   1-4
AlterConfigs (33)      0-2
SaslAuthenticate (36)  0-2
CreatePartitions (37)  0-3
DeleteGroups (42)      0-2
=====================  ======  ==========================================================

Admin and operations APIs beyond those: AlterReplicaLogDirs (34) 1-2, DescribeLogDirs (35) 1-4 (v5 adds
cordoned dirs), ElectLeaders (43) 0-2, IncrementalAlterConfigs (44) 0-1, ListPartitionReassignments (46) 0,
OffsetDelete (47) 0, DescribeClientQuotas (48) 0-1, AlterClientQuotas (49) 0-1, DescribeCluster (60) 0-1 (v2
adds fenced brokers), DescribeProducers (61) 0, DescribeTransactions (65) 0, ListTransactions (66) 0-1;
DescribeAcls / CreateAcls / DeleteAcls (29-31) 1-3, served with the authorizer and otherwise refused with
SECURITY_DISABLED (:data:`REFUSED_APIS`); and, advertised but always refused,
Describe/AlterUserScramCredentials (50, 51) 0.

The transaction APIs: InitProducerId (22) 0-4 with a transactional id, AddPartitionsToTxn (24) 0-3,
AddOffsetsToTxn (25) 0-3, EndTxn (26) 0-3, TxnOffsetCommit (28) 0-3. What the clients send against these bounds
(InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit): librdkafka 2.16 4, 0, 0, 1, 3;
kafka-python 3.0 4, 3, 3, 3, 3; aiokafka 0.14 0 each. AddPartitionsToTxn v4+ is KIP-890's broker-to-coordinator
batch, which no client sends; EndTxn v5, InitProducerId v5+ and TxnOffsetCommit v5 are KIP-890 part 2 (an epoch
bump per transaction), not implemented.

OffsetForLeaderEpoch (23) 2-4 and AlterPartitionReassignments (45) 0 have schemas (so :func:`error_response` can
answer them), but they are not advertised by default (:data:`UNSERVED_APIS`).
"""

from pylog.errors import ProtocolError, UnknownApiKeyError, UnsupportedApiVersionError

from .api import (
    APIS,
    REFUSED_APIS,
    UNSERVED_APIS,
    ApiKey,
    Request,
    RequestHeader,
    api_versions_body,
    codec,
    encode_request,
    encode_response,
    encode_response_parts,
    error_response,
    parse_request,
    parse_response,
    supported_versions,
    unsupported_version_response,
)
from .codes import RETRIABLE, ErrorCode, is_retriable

__all__ = [
    "APIS", "REFUSED_APIS", "UNSERVED_APIS", "ApiKey", "Request", "RequestHeader", "api_versions_body", "codec",
    "encode_request", "encode_response", "encode_response_parts", "error_response", "parse_request",
    "parse_response", "supported_versions", "unsupported_version_response", "RETRIABLE", "ErrorCode",
    "is_retriable", "ProtocolError", "UnknownApiKeyError", "UnsupportedApiVersionError",
]
