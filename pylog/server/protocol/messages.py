"""Every API pylog serve speaks, request and response, in the DSL of :mod:`.schema`.

Transcribed from Kafka's JSON message specs (clients/src/main/resources/common/message/*Request.json and
*Response.json, Kafka 4.x), keeping only the versions pylog serves (``Api.versions``) and the fields those
versions have; field names are Kafka's in snake_case. Version ranges are Kafka's, except that an upper
bound at or past the highest version served is written open (``"0+"``). The versions chosen (see
docs in :mod:`pylog.server.protocol`) stay below those that replace topic names with topic ids.
"""

from __future__ import annotations

from .schema import Api, F, S

# fmt: off

PRODUCE = Api(0, 'Produce', (3, 9), flexible=9, request=[
    F('transactional_id', 'string', '3+', nullable='3+'),
    F('acks', 'int16'),
    F('timeout_ms', 'int32'),
    F('topic_data', [
        F('name', 'string'),
        F('partition_data', [
            F('index', 'int32'),
            F('records', 'records', nullable='0+'),
        ]),
    ]),
], response=[
    F('responses', [
        F('name', 'string'),
        F('partition_responses', [
            F('index', 'int32'),
            F('error_code', 'int16'),
            F('base_offset', 'int64'),
            F('log_append_time_ms', 'int64', '2+', default=-1),
            F('log_start_offset', 'int64', '5+', default=-1),
            F('record_errors', [
                F('batch_index', 'int32', '8+'),
                F('batch_index_error_message', 'string', '8+', nullable='8+'),
            ], '8+'),
            F('error_message', 'string', '8+', nullable='8+'),
        ]),
    ]),
    F('throttle_time_ms', 'int32', '1+', default=0),
])

FETCH = Api(1, 'Fetch', (4, 12), flexible=12, request=[
    F('cluster_id', 'string', '12+', nullable='12+', tag=0),
    F('replica_id', 'int32', default=-1),
    F('max_wait_ms', 'int32'),
    F('min_bytes', 'int32'),
    F('max_bytes', 'int32', '3+', default=2147483647),
    F('isolation_level', 'int8', '4+', default=0),
    F('session_id', 'int32', '7+', default=0),
    F('session_epoch', 'int32', '7+', default=-1),
    F('topics', [
        F('topic', 'string'),
        F('partitions', [
            F('partition', 'int32'),
            F('current_leader_epoch', 'int32', '9+', default=-1),
            F('fetch_offset', 'int64'),
            F('last_fetched_epoch', 'int32', '12+', default=-1),
            F('log_start_offset', 'int64', '5+', default=-1),
            F('partition_max_bytes', 'int32'),
        ]),
    ]),
    F('forgotten_topics_data', [
        F('topic', 'string', '7+'),
        F('partitions', '[]int32', '7+'),
    ], '7+'),
    F('rack_id', 'string', '11+', default=''),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('error_code', 'int16', '7+'),
    F('session_id', 'int32', '7+', default=0),
    F('responses', [
        F('topic', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
            F('high_watermark', 'int64'),
            F('last_stable_offset', 'int64', '4+', default=-1),
            F('log_start_offset', 'int64', '5+', default=-1),
            F('diverging_epoch', S(
                F('epoch', 'int32', '12+', default=-1),
                F('end_offset', 'int64', '12+', default=-1),
            ), '12+', tag=0),
            F('current_leader', S(
                F('leader_id', 'int32', '12+', default=-1),
                F('leader_epoch', 'int32', '12+', default=-1),
            ), '12+', tag=1),
            F('snapshot_id', S(
                F('end_offset', 'int64', default=-1),
                F('epoch', 'int32', default=-1),
            ), '12+', tag=2),
            F('aborted_transactions', [
                F('producer_id', 'int64', '4+'),
                F('first_offset', 'int64', '4+'),
            ], '4+', nullable='4+'),
            F('preferred_read_replica', 'int32', '11+', default=-1),
            F('records', 'records', nullable='0+'),
        ]),
    ]),
])

LIST_OFFSETS = Api(2, 'ListOffsets', (1, 7), flexible=6, request=[
    F('replica_id', 'int32'),
    F('isolation_level', 'int8', '2+'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('current_leader_epoch', 'int32', '4+', default=-1),
            F('timestamp', 'int64'),
        ]),
    ]),
], response=[
    F('throttle_time_ms', 'int32', '2+'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
            F('timestamp', 'int64', '1+', default=-1),
            F('offset', 'int64', '1+', default=-1),
            F('leader_epoch', 'int32', '4+', default=-1),
        ]),
    ]),
])

METADATA = Api(3, 'Metadata', (0, 12), flexible=9, request=[
    F('topics', [
        F('topic_id', 'uuid', '10+'),
        F('name', 'string', nullable='10+'),
    ], nullable='1+'),
    F('allow_auto_topic_creation', 'bool', '4+', default=True),
    F('include_cluster_authorized_operations', 'bool', '8-10'),
    F('include_topic_authorized_operations', 'bool', '8+'),
], response=[
    F('throttle_time_ms', 'int32', '3+'),
    F('brokers', [
        F('node_id', 'int32'),
        F('host', 'string'),
        F('port', 'int32'),
        F('rack', 'string', '1+', nullable='1+'),
    ]),
    F('cluster_id', 'string', '2+', nullable='2+'),
    F('controller_id', 'int32', '1+', default=-1),
    F('topics', [
        F('error_code', 'int16'),
        F('name', 'string', nullable='12+'),
        F('topic_id', 'uuid', '10+'),
        F('is_internal', 'bool', '1+', default=False),
        F('partitions', [
            F('error_code', 'int16'),
            F('partition_index', 'int32'),
            F('leader_id', 'int32'),
            F('leader_epoch', 'int32', '7+', default=-1),
            F('replica_nodes', '[]int32'),
            F('isr_nodes', '[]int32'),
            F('offline_replicas', '[]int32', '5+'),
        ]),
        F('topic_authorized_operations', 'int32', '8+', default=-2147483648),
    ]),
    F('cluster_authorized_operations', 'int32', '8-10', default=-2147483648),
])

OFFSET_COMMIT = Api(8, 'OffsetCommit', (2, 8), flexible=8, request=[
    F('group_id', 'string'),
    F('generation_id_or_member_epoch', 'int32', '1+', default=-1),
    F('member_id', 'string', '1+'),
    F('group_instance_id', 'string', '7+', nullable='7+'),
    F('retention_time_ms', 'int64', '2-4', default=-1),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('committed_offset', 'int64'),
            F('committed_leader_epoch', 'int32', '6+', default=-1),
            F('committed_metadata', 'string', nullable='0+'),
        ]),
    ]),
], response=[
    F('throttle_time_ms', 'int32', '3+'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
        ]),
    ]),
])

OFFSET_FETCH = Api(9, 'OffsetFetch', (1, 7), flexible=6, request=[
    F('group_id', 'string'),
    F('topics', [
        F('name', 'string'),
        F('partition_indexes', '[]int32'),
    ], nullable='2+'),
    F('require_stable', 'bool', '7+', default=False),
], response=[
    F('throttle_time_ms', 'int32', '3+'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('committed_offset', 'int64'),
            F('committed_leader_epoch', 'int32', '5+', default=-1),
            F('metadata', 'string', nullable='0+'),
            F('error_code', 'int16'),
        ]),
    ]),
    F('error_code', 'int16', '2+', default=0),
])

FIND_COORDINATOR = Api(10, 'FindCoordinator', (0, 3), flexible=3, request=[
    F('key', 'string'),
    F('key_type', 'int8', '1+', default=0),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('error_code', 'int16'),
    F('error_message', 'string', '1+', nullable='1+'),
    F('node_id', 'int32'),
    F('host', 'string'),
    F('port', 'int32'),
])

JOIN_GROUP = Api(11, 'JoinGroup', (0, 7), flexible=6, request=[
    F('group_id', 'string'),
    F('session_timeout_ms', 'int32'),
    F('rebalance_timeout_ms', 'int32', '1+', default=-1),
    F('member_id', 'string'),
    F('group_instance_id', 'string', '5+', nullable='5+'),
    F('protocol_type', 'string'),
    F('protocols', [
        F('name', 'string'),
        F('metadata', 'bytes'),
    ]),
], response=[
    F('throttle_time_ms', 'int32', '2+'),
    F('error_code', 'int16'),
    F('generation_id', 'int32', default=-1),
    F('protocol_type', 'string', '7+', nullable='7+'),
    F('protocol_name', 'string', nullable='7+'),
    F('leader', 'string'),
    F('member_id', 'string'),
    F('members', [
        F('member_id', 'string'),
        F('group_instance_id', 'string', '5+', nullable='5+'),
        F('metadata', 'bytes'),
    ]),
])

HEARTBEAT = Api(12, 'Heartbeat', (0, 4), flexible=4, request=[
    F('group_id', 'string'),
    F('generation_id', 'int32'),
    F('member_id', 'string'),
    F('group_instance_id', 'string', '3+', nullable='3+'),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('error_code', 'int16'),
])

LEAVE_GROUP = Api(13, 'LeaveGroup', (0, 4), flexible=4, request=[
    F('group_id', 'string'),
    F('member_id', 'string', '0-2'),
    F('members', [
        F('member_id', 'string', '3+'),
        F('group_instance_id', 'string', '3+', nullable='3+'),
    ], '3+'),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('error_code', 'int16'),
    F('members', [
        F('member_id', 'string', '3+'),
        F('group_instance_id', 'string', '3+', nullable='3+'),
        F('error_code', 'int16', '3+'),
    ], '3+'),
])

SYNC_GROUP = Api(14, 'SyncGroup', (0, 5), flexible=4, request=[
    F('group_id', 'string'),
    F('generation_id', 'int32'),
    F('member_id', 'string'),
    F('group_instance_id', 'string', '3+', nullable='3+'),
    F('protocol_type', 'string', '5+', nullable='5+'),
    F('protocol_name', 'string', '5+', nullable='5+'),
    F('assignments', [
        F('member_id', 'string'),
        F('assignment', 'bytes'),
    ]),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('error_code', 'int16'),
    F('protocol_type', 'string', '5+', nullable='5+'),
    F('protocol_name', 'string', '5+', nullable='5+'),
    F('assignment', 'bytes'),
])

DESCRIBE_GROUPS = Api(15, 'DescribeGroups', (0, 5), flexible=5, request=[
    F('groups', '[]string'),
    F('include_authorized_operations', 'bool', '3+'),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('groups', [
        F('error_code', 'int16'),
        F('group_id', 'string'),
        F('group_state', 'string'),
        F('protocol_type', 'string'),
        F('protocol_data', 'string'),
        F('members', [
            F('member_id', 'string'),
            F('group_instance_id', 'string', '4+', nullable='4+'),
            F('client_id', 'string'),
            F('client_host', 'string'),
            F('member_metadata', 'bytes'),
            F('member_assignment', 'bytes'),
        ]),
        F('authorized_operations', 'int32', '3+', default=-2147483648),
    ]),
])

LIST_GROUPS = Api(16, 'ListGroups', (0, 5), flexible=3, request=[
    F('states_filter', '[]string', '4+'),
    F('types_filter', '[]string', '5+'),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('error_code', 'int16'),
    F('groups', [
        F('group_id', 'string'),
        F('protocol_type', 'string'),
        F('group_state', 'string', '4+'),
        F('group_type', 'string', '5+'),
    ]),
])

SASL_HANDSHAKE = Api(17, 'SaslHandshake', (0, 1), flexible=None, request=[
    F('mechanism', 'string'),
], response=[
    F('error_code', 'int16'),
    F('mechanisms', '[]string'),
])

API_VERSIONS = Api(18, 'ApiVersions', (0, 4), flexible=3, request=[
    F('client_software_name', 'string', '3+'),
    F('client_software_version', 'string', '3+'),
], response=[
    F('error_code', 'int16'),
    F('api_keys', [
        F('api_key', 'int16'),
        F('min_version', 'int16'),
        F('max_version', 'int16'),
    ]),
    F('throttle_time_ms', 'int32', '1+'),
    F('supported_features', [
        F('name', 'string', '3+'),
        F('min_version', 'int16', '3+'),
        F('max_version', 'int16', '3+'),
    ], '3+', tag=0),
    F('finalized_features_epoch', 'int64', '3+', tag=1, default=-1),
    F('finalized_features', [
        F('name', 'string', '3+'),
        F('max_version_level', 'int16', '3+'),
        F('min_version_level', 'int16', '3+'),
    ], '3+', tag=2),
    F('zk_migration_ready', 'bool', '3+', tag=3, default=False),
])

CREATE_TOPICS = Api(19, 'CreateTopics', (2, 7), flexible=5, request=[
    F('topics', [
        F('name', 'string'),
        F('num_partitions', 'int32'),
        F('replication_factor', 'int16'),
        F('assignments', [
            F('partition_index', 'int32'),
            F('broker_ids', '[]int32'),
        ]),
        F('configs', [
            F('name', 'string'),
            F('value', 'string', nullable='0+'),
        ]),
    ]),
    F('timeout_ms', 'int32', default=60000),
    F('validate_only', 'bool', '1+', default=False),
], response=[
    F('throttle_time_ms', 'int32', '2+'),
    F('topics', [
        F('name', 'string'),
        F('topic_id', 'uuid', '7+'),
        F('error_code', 'int16'),
        F('error_message', 'string', '1+', nullable='0+'),
        F('topic_config_error_code', 'int16', '5+', tag=0),
        F('num_partitions', 'int32', '5+', default=-1),
        F('replication_factor', 'int16', '5+', default=-1),
        F('configs', [
            F('name', 'string', '5+'),
            F('value', 'string', '5+', nullable='5+'),
            F('read_only', 'bool', '5+'),
            F('config_source', 'int8', '5+', default=-1),
            F('is_sensitive', 'bool', '5+'),
        ], '5+', nullable='5+'),
    ]),
])

DELETE_TOPICS = Api(20, 'DeleteTopics', (1, 5), flexible=4, request=[
    F('topic_names', '[]string'),
    F('timeout_ms', 'int32'),
], response=[
    F('throttle_time_ms', 'int32', '1+'),
    F('responses', [
        F('name', 'string'),
        F('error_code', 'int16'),
        F('error_message', 'string', '5+', nullable='5+'),
    ]),
])

DELETE_RECORDS = Api(21, 'DeleteRecords', (0, 2), flexible=2, request=[
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('offset', 'int64'),
        ]),
    ]),
    F('timeout_ms', 'int32'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('low_watermark', 'int64'),
            F('error_code', 'int16'),
        ]),
    ]),
])

INIT_PRODUCER_ID = Api(22, 'InitProducerId', (0, 4), flexible=2, request=[
    F('transactional_id', 'string', nullable='0+'),
    F('transaction_timeout_ms', 'int32'),
    F('producer_id', 'int64', '3+', default=-1),
    F('producer_epoch', 'int16', '3+', default=-1),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('producer_id', 'int64', default=-1),
    F('producer_epoch', 'int16'),
])

OFFSET_FOR_LEADER_EPOCH = Api(23, 'OffsetForLeaderEpoch', (2, 4), flexible=4, request=[
    F('replica_id', 'int32', '3+', default=-2),
    F('topics', [
        F('topic', 'string'),
        F('partitions', [
            F('partition', 'int32'),
            F('current_leader_epoch', 'int32', '2+', default=-1),
            F('leader_epoch', 'int32'),
        ]),
    ]),
], response=[
    F('throttle_time_ms', 'int32', '2+'),
    F('topics', [
        F('topic', 'string'),
        F('partitions', [
            F('error_code', 'int16'),
            F('partition', 'int32'),
            F('leader_epoch', 'int32', '1+', default=-1),
            F('end_offset', 'int64', default=-1),
        ]),
    ]),
])

ADD_PARTITIONS_TO_TXN = Api(24, 'AddPartitionsToTxn', (0, 3), flexible=3, request=[
    F('v3_and_below_transactional_id', 'string'),
    F('v3_and_below_producer_id', 'int64'),
    F('v3_and_below_producer_epoch', 'int16'),
    F('v3_and_below_topics', [
        F('name', 'string'),
        F('partitions', '[]int32'),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results_by_topic_v3_and_below', [
        F('name', 'string'),
        F('results_by_partition', [
            F('partition_index', 'int32'),
            F('partition_error_code', 'int16'),
        ]),
    ]),
])

ADD_OFFSETS_TO_TXN = Api(25, 'AddOffsetsToTxn', (0, 3), flexible=3, request=[
    F('transactional_id', 'string'),
    F('producer_id', 'int64'),
    F('producer_epoch', 'int16'),
    F('group_id', 'string'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
])

END_TXN = Api(26, 'EndTxn', (0, 3), flexible=3, request=[
    F('transactional_id', 'string'),
    F('producer_id', 'int64'),
    F('producer_epoch', 'int16'),
    F('committed', 'bool'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
])

TXN_OFFSET_COMMIT = Api(28, 'TxnOffsetCommit', (0, 3), flexible=3, request=[
    F('transactional_id', 'string'),
    F('group_id', 'string'),
    F('producer_id', 'int64'),
    F('producer_epoch', 'int16'),
    F('generation_id', 'int32', '3+', default=-1),
    F('member_id', 'string', '3+', default=''),
    F('group_instance_id', 'string', '3+', nullable='3+'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('committed_offset', 'int64'),
            F('committed_leader_epoch', 'int32', '2+', default=-1),
            F('committed_metadata', 'string', nullable='0+'),
        ]),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
        ]),
    ]),
])

DESCRIBE_CONFIGS = Api(32, 'DescribeConfigs', (1, 4), flexible=4, request=[
    F('resources', [
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
        F('configuration_keys', '[]string', nullable='0+'),
    ]),
    F('include_synonyms', 'bool', '1+', default=False),
    F('include_documentation', 'bool', '3+', default=False),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results', [
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
        F('configs', [
            F('name', 'string'),
            F('value', 'string', nullable='0+'),
            F('read_only', 'bool'),
            F('config_source', 'int8', '1+', default=-1),
            F('is_sensitive', 'bool'),
            F('synonyms', [
                F('name', 'string', '1+'),
                F('value', 'string', '1+', nullable='0+'),
                F('source', 'int8', '1+'),
            ], '1+'),
            F('config_type', 'int8', '3+', default=0),
            F('documentation', 'string', '3+', nullable='0+'),
        ]),
    ]),
])

ALTER_CONFIGS = Api(33, 'AlterConfigs', (0, 2), flexible=2, request=[
    F('resources', [
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
        F('configs', [
            F('name', 'string'),
            F('value', 'string', nullable='0+'),
        ]),
    ]),
    F('validate_only', 'bool'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('responses', [
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
    ]),
])

SASL_AUTHENTICATE = Api(36, 'SaslAuthenticate', (0, 2), flexible=2, request=[
    F('auth_bytes', 'bytes'),
], response=[
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('auth_bytes', 'bytes'),
    F('session_lifetime_ms', 'int64', '1+', default=0),
])

CREATE_PARTITIONS = Api(37, 'CreatePartitions', (0, 3), flexible=2, request=[
    F('topics', [
        F('name', 'string'),
        F('count', 'int32'),
        F('assignments', [
            F('broker_ids', '[]int32'),
        ], nullable='0+'),
    ]),
    F('timeout_ms', 'int32'),
    F('validate_only', 'bool'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results', [
        F('name', 'string'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
    ]),
])

DELETE_GROUPS = Api(42, 'DeleteGroups', (0, 2), flexible=2, request=[
    F('groups_names', '[]string'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results', [
        F('group_id', 'string'),
        F('error_code', 'int16'),
    ]),
])


# ---- Admin and operations APIs beyond the core: served by pylog.server.admin (IncrementalAlterConfigs,
# DescribeCluster, OffsetDelete, DescribeLogDirs and the trivial answers of a single-node store), or here only so
# that error_response can answer them with Kafka's error codes instead of a dropped connection (see
# pylog.server.protocol.api.REFUSED_APIS).

INCREMENTAL_ALTER_CONFIGS = Api(44, 'IncrementalAlterConfigs', (0, 1), flexible=1, request=[
    F('resources', [
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
        F('configs', [
            F('name', 'string'),
            F('config_operation', 'int8'),
            F('value', 'string', nullable='0+'),
        ]),
    ]),
    F('validate_only', 'bool'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('responses', [
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
    ]),
])

DESCRIBE_CLUSTER = Api(60, 'DescribeCluster', (0, 1), flexible=0, request=[
    F('include_cluster_authorized_operations', 'bool'),
    F('endpoint_type', 'int8', '1+', default=1),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('endpoint_type', 'int8', '1+', default=1),
    F('cluster_id', 'string'),
    F('controller_id', 'int32', default=-1),
    F('brokers', [
        F('broker_id', 'int32'),
        F('host', 'string'),
        F('port', 'int32'),
        F('rack', 'string', nullable='0+'),
    ]),
    F('cluster_authorized_operations', 'int32', default=-2147483648),
])

OFFSET_DELETE = Api(47, 'OffsetDelete', (0, 0), flexible=None, request=[
    F('group_id', 'string'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
        ]),
    ]),
], response=[
    F('error_code', 'int16'),
    F('throttle_time_ms', 'int32'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
        ]),
    ]),
])

DESCRIBE_LOG_DIRS = Api(35, 'DescribeLogDirs', (1, 4), flexible=2, request=[
    F('topics', [
        F('topic', 'string'),
        F('partitions', '[]int32'),
    ], nullable='0+'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16', '3+'),
    F('results', [
        F('error_code', 'int16'),
        F('log_dir', 'string'),
        F('topics', [
            F('name', 'string'),
            F('partitions', [
                F('partition_index', 'int32'),
                F('partition_size', 'int64'),
                F('offset_lag', 'int64'),
                F('is_future_key', 'bool'),
            ]),
        ]),
        F('total_bytes', 'int64', '4+', default=-1),
        F('usable_bytes', 'int64', '4+', default=-1),
    ]),
])

DESCRIBE_ACLS = Api(29, 'DescribeAcls', (1, 3), flexible=2, request=[
    F('resource_type_filter', 'int8'),
    F('resource_name_filter', 'string', nullable='0+'),
    F('pattern_type_filter', 'int8', '1+', default=3),
    F('principal_filter', 'string', nullable='0+'),
    F('host_filter', 'string', nullable='0+'),
    F('operation', 'int8'),
    F('permission_type', 'int8'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('resources', [
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
        F('pattern_type', 'int8', '1+', default=3),
        F('acls', [
            F('principal', 'string'),
            F('host', 'string'),
            F('operation', 'int8'),
            F('permission_type', 'int8'),
        ]),
    ]),
])

CREATE_ACLS = Api(30, 'CreateAcls', (1, 3), flexible=2, request=[
    F('creations', [
        F('resource_type', 'int8'),
        F('resource_name', 'string'),
        F('resource_pattern_type', 'int8', '1+', default=3),
        F('principal', 'string'),
        F('host', 'string'),
        F('operation', 'int8'),
        F('permission_type', 'int8'),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results', [
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
    ]),
])

DELETE_ACLS = Api(31, 'DeleteAcls', (1, 3), flexible=2, request=[
    F('filters', [
        F('resource_type_filter', 'int8'),
        F('resource_name_filter', 'string', nullable='0+'),
        F('pattern_type_filter', 'int8', '1+', default=3),
        F('principal_filter', 'string', nullable='0+'),
        F('host_filter', 'string', nullable='0+'),
        F('operation', 'int8'),
        F('permission_type', 'int8'),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('filter_results', [
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('matching_acls', [
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
            F('resource_type', 'int8'),
            F('resource_name', 'string'),
            F('pattern_type', 'int8', '1+', default=3),
            F('principal', 'string'),
            F('host', 'string'),
            F('operation', 'int8'),
            F('permission_type', 'int8'),
        ]),
    ]),
])

ALTER_REPLICA_LOG_DIRS = Api(34, 'AlterReplicaLogDirs', (1, 2), flexible=2, request=[
    F('dirs', [
        F('path', 'string'),
        F('topics', [
            F('name', 'string'),
            F('partitions', '[]int32'),
        ]),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results', [
        F('topic_name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
        ]),
    ]),
])

ELECT_LEADERS = Api(43, 'ElectLeaders', (0, 2), flexible=2, request=[
    F('election_type', 'int8', '1+'),
    F('topic_partitions', [
        F('topic', 'string'),
        F('partitions', '[]int32'),
    ], nullable='0+'),
    F('timeout_ms', 'int32', default=60000),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16', '1+'),
    F('replica_election_results', [
        F('topic', 'string'),
        F('partition_result', [
            F('partition_id', 'int32'),
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
        ]),
    ]),
])

ALTER_PARTITION_REASSIGNMENTS = Api(45, 'AlterPartitionReassignments', (0, 0), flexible=0, request=[
    F('timeout_ms', 'int32', default=60000),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('replicas', '[]int32', nullable='0+'),
        ]),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('responses', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
        ]),
    ]),
])

LIST_PARTITION_REASSIGNMENTS = Api(46, 'ListPartitionReassignments', (0, 0), flexible=0, request=[
    F('timeout_ms', 'int32', default=60000),
    F('topics', [
        F('name', 'string'),
        F('partition_indexes', '[]int32'),
    ], nullable='0+'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('replicas', '[]int32'),
            F('adding_replicas', '[]int32'),
            F('removing_replicas', '[]int32'),
        ]),
    ]),
])

DESCRIBE_CLIENT_QUOTAS = Api(48, 'DescribeClientQuotas', (0, 1), flexible=1, request=[
    F('components', [
        F('entity_type', 'string'),
        F('match_type', 'int8'),
        F('match', 'string', nullable='0+'),
    ]),
    F('strict', 'bool'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('entries', [
        F('entity', [
            F('entity_type', 'string'),
            F('entity_name', 'string', nullable='0+'),
        ]),
        F('values', [
            F('key', 'string'),
            F('value', 'float64'),
        ]),
    ], nullable='0+'),
])

ALTER_CLIENT_QUOTAS = Api(49, 'AlterClientQuotas', (0, 1), flexible=1, request=[
    F('entries', [
        F('entity', [
            F('entity_type', 'string'),
            F('entity_name', 'string', nullable='0+'),
        ]),
        F('ops', [
            F('key', 'string'),
            F('value', 'float64'),
            F('remove', 'bool'),
        ]),
    ]),
    F('validate_only', 'bool'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('entries', [
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('entity', [
            F('entity_type', 'string'),
            F('entity_name', 'string', nullable='0+'),
        ]),
    ]),
])

DESCRIBE_USER_SCRAM_CREDENTIALS = Api(50, 'DescribeUserScramCredentials', (0, 0), flexible=0, request=[
    F('users', [
        F('name', 'string'),
    ], nullable='0+'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+'),
    F('results', [
        F('user', 'string'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
        F('credential_infos', [
            F('mechanism', 'int8'),
            F('iterations', 'int32'),
        ]),
    ]),
])

ALTER_USER_SCRAM_CREDENTIALS = Api(51, 'AlterUserScramCredentials', (0, 0), flexible=0, request=[
    F('deletions', [
        F('name', 'string'),
        F('mechanism', 'int8'),
    ]),
    F('upsertions', [
        F('name', 'string'),
        F('mechanism', 'int8'),
        F('iterations', 'int32'),
        F('salt', 'bytes'),
        F('salted_password', 'bytes'),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('results', [
        F('user', 'string'),
        F('error_code', 'int16'),
        F('error_message', 'string', nullable='0+'),
    ]),
])

DESCRIBE_PRODUCERS = Api(61, 'DescribeProducers', (0, 0), flexible=0, request=[
    F('topics', [
        F('name', 'string'),
        F('partition_indexes', '[]int32'),
    ]),
], response=[
    F('throttle_time_ms', 'int32'),
    F('topics', [
        F('name', 'string'),
        F('partitions', [
            F('partition_index', 'int32'),
            F('error_code', 'int16'),
            F('error_message', 'string', nullable='0+'),
            F('active_producers', [
                F('producer_id', 'int64'),
                F('producer_epoch', 'int32'),
                F('last_sequence', 'int32', default=-1),
                F('last_timestamp', 'int64', default=-1),
                F('coordinator_epoch', 'int32'),
                F('current_txn_start_offset', 'int64', default=-1),
            ]),
        ]),
    ]),
])

DESCRIBE_TRANSACTIONS = Api(65, 'DescribeTransactions', (0, 0), flexible=0, request=[
    F('transactional_ids', '[]string'),
], response=[
    F('throttle_time_ms', 'int32'),
    F('transaction_states', [
        F('error_code', 'int16'),
        F('transactional_id', 'string'),
        F('transaction_state', 'string'),
        F('transaction_timeout_ms', 'int32'),
        F('transaction_start_time_ms', 'int64'),
        F('producer_id', 'int64'),
        F('producer_epoch', 'int16'),
        F('topics', [
            F('topic', 'string'),
            F('partitions', '[]int32'),
        ]),
    ]),
])

LIST_TRANSACTIONS = Api(66, 'ListTransactions', (0, 1), flexible=0, request=[
    F('state_filters', '[]string'),
    F('producer_id_filters', '[]int64'),
    F('duration_filter', 'int64', '1+', default=-1),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('unknown_state_filters', '[]string'),
    F('transaction_states', [
        F('transactional_id', 'string'),
        F('producer_id', 'int64'),
        F('transaction_state', 'string'),
    ]),
])

# KIP-848's consumer group protocol: served only to refuse it (REFUSED_APIS; docs/SERVER.md says why).
CONSUMER_GROUP_HEARTBEAT = Api(68, 'ConsumerGroupHeartbeat', (0, 1), flexible=0, request=[
    F('group_id', 'string'),
    F('member_id', 'string'),
    F('member_epoch', 'int32'),
    F('instance_id', 'string', nullable='0+', default=None),
    F('rack_id', 'string', nullable='0+', default=None),
    F('rebalance_timeout_ms', 'int32', default=-1),
    F('subscribed_topic_names', '[]string', nullable='0+', default=None),
    F('subscribed_topic_regex', 'string', '1+', nullable='1+', default=None),
    F('server_assignor', 'string', nullable='0+', default=None),
    F('topic_partitions', [
        F('topic_id', 'uuid'),
        F('partitions', '[]int32'),
    ], nullable='0+', default=None),
], response=[
    F('throttle_time_ms', 'int32'),
    F('error_code', 'int16'),
    F('error_message', 'string', nullable='0+', default=None),
    F('member_id', 'string', nullable='0+', default=None),
    F('member_epoch', 'int32'),
    F('heartbeat_interval_ms', 'int32'),
    # A nullable struct (Assignment: TopicPartitions [TopicId uuid, Partitions []int32]), always null in pylog's
    # refusals; the schema DSL has no nullable structs, so only its presence byte is written: -1, null.
    F('assignment', 'int8', default=-1),
])

# fmt: on

ALL_APIS: tuple[Api, ...] = (
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    SASL_HANDSHAKE,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DELETE_RECORDS,
    INIT_PRODUCER_ID,
    OFFSET_FOR_LEADER_EPOCH,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    TXN_OFFSET_COMMIT,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    SASL_AUTHENTICATE,
    CREATE_PARTITIONS,
    DELETE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    DESCRIBE_CLUSTER,
    OFFSET_DELETE,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    ALTER_REPLICA_LOG_DIRS,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    CONSUMER_GROUP_HEARTBEAT,
)
