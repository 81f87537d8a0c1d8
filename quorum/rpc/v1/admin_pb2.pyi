from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicRef(_message.Message):
    __slots__ = ("name", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatableTopic]
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatableTopic, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatableTopic(_message.Message):
    __slots__ = ("name", "num_partitions", "replication_factor", "assignments", "configs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_partitions: int
    replication_factor: int
    assignments: _containers.RepeatedCompositeFieldContainer[CreatableReplicaAssignment]
    configs: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[CreatableReplicaAssignment, _Mapping]]] = ..., configs: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...

class CreatableReplicaAssignment(_message.Message):
    __slots__ = ("partition_index", "broker_ids")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_index: _Optional[int] = ..., broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    topics: _containers.RepeatedCompositeFieldContainer[CreatableTopicResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[CreatableTopicResult, _Mapping]]] = ...) -> None: ...

class CreatableTopicResult(_message.Message):
    __slots__ = ("name", "topic_id", "creation_offset", "error_code", "error_message", "num_partitions", "replication_factor", "configs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    CREATION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    creation_offset: int
    error_code: int
    error_message: str
    num_partitions: int
    replication_factor: int
    configs: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., creation_offset: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., configs: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DeletableTopic]
    def __init__(self, topics: _Optional[_Iterable[_Union[DeletableTopic, _Mapping]]] = ...) -> None: ...

class DeletableTopic(_message.Message):
    __slots__ = ("name", "topic_id", "expected_topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    expected_topic_id: bytes
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., expected_topic_id: _Optional[bytes] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    topics: _containers.RepeatedCompositeFieldContainer[DeletableTopicResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[DeletableTopicResult, _Mapping]]] = ...) -> None: ...

class DeletableTopicResult(_message.Message):
    __slots__ = ("name", "topic_id", "error_code", "error_message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    error_code: int
    error_message: str
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics", "timeout_ms", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsTopic]
    timeout_ms: int
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatePartitionsTopic, _Mapping]]] = ..., timeout_ms: _Optional[int] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreatePartitionsTopic(_message.Message):
    __slots__ = ("name", "count", "assignments", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    assignments: _containers.RepeatedCompositeFieldContainer[CreatePartitionsAssignment]
    topic_id: bytes
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[CreatePartitionsAssignment, _Mapping]]] = ..., topic_id: _Optional[bytes] = ...) -> None: ...

class CreatePartitionsAssignment(_message.Message):
    __slots__ = ("broker_ids",)
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    results: _containers.RepeatedCompositeFieldContainer[CreatePartitionsTopicResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., results: _Optional[_Iterable[_Union[CreatePartitionsTopicResult, _Mapping]]] = ...) -> None: ...

class CreatePartitionsTopicResult(_message.Message):
    __slots__ = ("name", "error_code", "error_message", "topic_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    error_code: int
    error_message: str
    topic_id: bytes
    def __init__(self, name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., topic_id: _Optional[bytes] = ...) -> None: ...

class DescribeTopicsRequest(_message.Message):
    __slots__ = ("topics", "min_metadata_offset")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MIN_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicRef]
    min_metadata_offset: int
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicRef, _Mapping]]] = ..., min_metadata_offset: _Optional[int] = ...) -> None: ...

class DescribeTopicsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    topics: _containers.RepeatedCompositeFieldContainer[DescribeTopicResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[DescribeTopicResult, _Mapping]]] = ...) -> None: ...

class DescribeTopicResult(_message.Message):
    __slots__ = ("name", "topic_id", "error_code", "error_message", "is_internal", "creation_offset", "partitions", "configs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    CREATION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    error_code: int
    error_message: str
    is_internal: bool
    creation_offset: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    configs: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., is_internal: _Optional[bool] = ..., creation_offset: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ..., configs: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition_index", "leader_id", "leader_epoch", "replica_nodes", "isr_nodes", "offline_replicas")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICA_NODES_FIELD_NUMBER: _ClassVar[int]
    ISR_NODES_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: _containers.RepeatedScalarFieldContainer[int]
    isr_nodes: _containers.RepeatedScalarFieldContainer[int]
    offline_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_index: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replica_nodes: _Optional[_Iterable[int]] = ..., isr_nodes: _Optional[_Iterable[int]] = ..., offline_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("exclude_internal", "min_metadata_offset", "cursor", "page_topics_max")
    EXCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    MIN_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOPICS_MAX_FIELD_NUMBER: _ClassVar[int]
    exclude_internal: bool
    min_metadata_offset: int
    cursor: str
    page_topics_max: int
    def __init__(self, exclude_internal: _Optional[bool] = ..., min_metadata_offset: _Optional[int] = ..., cursor: _Optional[str] = ..., page_topics_max: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "topics", "next_cursor")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    topics: _containers.RepeatedCompositeFieldContainer[TopicListing]
    next_cursor: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[TopicListing, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class TopicListing(_message.Message):
    __slots__ = ("name", "topic_id", "is_internal", "creation_offset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    CREATION_OFFSET_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    is_internal: bool
    creation_offset: int
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., is_internal: _Optional[bool] = ..., creation_offset: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ("min_metadata_offset",)
    MIN_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    min_metadata_offset: int
    def __init__(self, min_metadata_offset: _Optional[int] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "cluster_id", "brokers", "controllers", "metadata_topic_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    cluster_id: str
    brokers: _containers.RepeatedCompositeFieldContainer[DescribeClusterBroker]
    controllers: _containers.RepeatedCompositeFieldContainer[DescribeClusterController]
    metadata_topic_id: bytes
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., cluster_id: _Optional[str] = ..., brokers: _Optional[_Iterable[_Union[DescribeClusterBroker, _Mapping]]] = ..., controllers: _Optional[_Iterable[_Union[DescribeClusterController, _Mapping]]] = ..., metadata_topic_id: _Optional[bytes] = ...) -> None: ...

class DescribeClusterBroker(_message.Message):
    __slots__ = ("broker_id", "host", "port", "rack", "is_fenced", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    IS_FENCED_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    host: str
    port: int
    rack: str
    is_fenced: bool
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., rack: _Optional[str] = ..., is_fenced: _Optional[bool] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class DescribeClusterController(_message.Message):
    __slots__ = ("node_id", "host", "port")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    host: str
    port: int
    def __init__(self, node_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_id", "broker_id", "incarnation_id", "listeners", "rack")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    LISTENERS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    broker_id: int
    incarnation_id: bytes
    listeners: _containers.RepeatedCompositeFieldContainer[BrokerListener]
    rack: str
    def __init__(self, cluster_id: _Optional[str] = ..., broker_id: _Optional[int] = ..., incarnation_id: _Optional[bytes] = ..., listeners: _Optional[_Iterable[_Union[BrokerListener, _Mapping]]] = ..., rack: _Optional[str] = ...) -> None: ...

class BrokerListener(_message.Message):
    __slots__ = ("name", "host", "port")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    name: str
    host: str
    port: int
    def __init__(self, name: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "broker_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    broker_epoch: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "current_metadata_offset", "want_fence", "want_shut_down")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WANT_FENCE_FIELD_NUMBER: _ClassVar[int]
    WANT_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., current_metadata_offset: _Optional[int] = ..., want_fence: _Optional[bool] = ..., want_shut_down: _Optional[bool] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "is_caught_up", "is_fenced", "should_shut_down")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    IS_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    IS_FENCED_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., is_caught_up: _Optional[bool] = ..., is_fenced: _Optional[bool] = ..., should_shut_down: _Optional[bool] = ...) -> None: ...

class AllocateProducerIdsRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AllocateProducerIdsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "producer_id_start", "producer_id_len")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_START_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_LEN_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    producer_id_start: int
    producer_id_len: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., producer_id_start: _Optional[int] = ..., producer_id_len: _Optional[int] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "topics")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[AlterPartitionTopicData]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[AlterPartitionTopicData, _Mapping]]] = ...) -> None: ...

class AlterPartitionTopicData(_message.Message):
    __slots__ = ("topic_id", "partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionPartitionData]
    def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionPartitionData, _Mapping]]] = ...) -> None: ...

class AlterPartitionPartitionData(_message.Message):
    __slots__ = ("partition_index", "leader_epoch", "new_isr", "partition_epoch")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    leader_epoch: int
    new_isr: _containers.RepeatedScalarFieldContainer[int]
    partition_epoch: int
    def __init__(self, partition_index: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., partition_epoch: _Optional[int] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "topics")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    topics: _containers.RepeatedCompositeFieldContainer[AlterPartitionTopicResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[AlterPartitionTopicResult, _Mapping]]] = ...) -> None: ...

class AlterPartitionTopicResult(_message.Message):
    __slots__ = ("topic_id", "partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionPartitionResult]
    def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionPartitionResult, _Mapping]]] = ...) -> None: ...

class AlterPartitionPartitionResult(_message.Message):
    __slots__ = ("partition_index", "error_code", "error_message", "leader_id", "leader_epoch", "isr", "partition_epoch")
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition_index: int
    error_code: int
    error_message: str
    leader_id: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    partition_epoch: int
    def __init__(self, partition_index: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., partition_epoch: _Optional[int] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("resources", "validate_only", "incremental")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[AlterConfigsResource]
    validate_only: bool
    incremental: bool
    def __init__(self, resources: _Optional[_Iterable[_Union[AlterConfigsResource, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., incremental: _Optional[bool] = ...) -> None: ...

class AlterConfigsResource(_message.Message):
    __slots__ = ("resource_type", "resource_name", "configs")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    configs: _containers.RepeatedCompositeFieldContainer[AlterableConfig]
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[AlterableConfig, _Mapping]]] = ...) -> None: ...

class AlterableConfig(_message.Message):
    __slots__ = ("name", "op", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    op: int
    value: str
    def __init__(self, name: _Optional[str] = ..., op: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    results: _containers.RepeatedCompositeFieldContainer[AlterConfigsResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., results: _Optional[_Iterable[_Union[AlterConfigsResult, _Mapping]]] = ...) -> None: ...

class AlterConfigsResult(_message.Message):
    __slots__ = ("resource_type", "resource_name", "error_code", "error_message")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("election_type", "all_partitions", "partitions")
    ELECTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    ALL_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    election_type: int
    all_partitions: bool
    partitions: _containers.RepeatedCompositeFieldContainer[ElectLeadersPartition]
    def __init__(self, election_type: _Optional[int] = ..., all_partitions: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[ElectLeadersPartition, _Mapping]]] = ...) -> None: ...

class ElectLeadersPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    results: _containers.RepeatedCompositeFieldContainer[ElectLeadersResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., results: _Optional[_Iterable[_Union[ElectLeadersResult, _Mapping]]] = ...) -> None: ...

class ElectLeadersResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "leader")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    leader: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader: _Optional[int] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[int] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[int] = ..., permission_type: _Optional[int] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[int] = ..., principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[int] = ..., permission_type: _Optional[int] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations",)
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, creations: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class AclCreationResult(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    results: _containers.RepeatedCompositeFieldContainer[AclCreationResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., results: _Optional[_Iterable[_Union[AclCreationResult, _Mapping]]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsFilterResult(_message.Message):
    __slots__ = ("error_code", "error_message", "matching_acls")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MATCHING_ACLS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    matching_acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., matching_acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "filter_results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FILTER_RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    filter_results: _containers.RepeatedCompositeFieldContainer[DeleteAclsFilterResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., filter_results: _Optional[_Iterable[_Union[DeleteAclsFilterResult, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter", "min_metadata_offset")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MIN_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    filter: AclFilter
    min_metadata_offset: int
    def __init__(self, filter: _Optional[_Union[AclFilter, _Mapping]] = ..., min_metadata_offset: _Optional[int] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "acls")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    acls: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., acls: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("resources", "include_synonyms", "include_documentation", "min_metadata_offset")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SYNONYMS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DOCUMENTATION_FIELD_NUMBER: _ClassVar[int]
    MIN_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[DescribeConfigsResource]
    include_synonyms: bool
    include_documentation: bool
    min_metadata_offset: int
    def __init__(self, resources: _Optional[_Iterable[_Union[DescribeConfigsResource, _Mapping]]] = ..., include_synonyms: _Optional[bool] = ..., include_documentation: _Optional[bool] = ..., min_metadata_offset: _Optional[int] = ...) -> None: ...

class DescribeConfigsResource(_message.Message):
    __slots__ = ("resource_type", "resource_name", "configuration_keys")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATION_KEYS_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    configuration_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., configuration_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    results: _containers.RepeatedCompositeFieldContainer[DescribeConfigsResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., results: _Optional[_Iterable[_Union[DescribeConfigsResult, _Mapping]]] = ...) -> None: ...

class DescribeConfigsResult(_message.Message):
    __slots__ = ("resource_type", "resource_name", "error_code", "error_message", "configs")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    resource_type: int
    resource_name: str
    error_code: int
    error_message: str
    configs: _containers.RepeatedCompositeFieldContainer[DescribedConfig]
    def __init__(self, resource_type: _Optional[int] = ..., resource_name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[DescribedConfig, _Mapping]]] = ...) -> None: ...

class DescribedConfig(_message.Message):
    __slots__ = ("name", "value", "source", "read_only", "is_sensitive", "synonyms", "config_type", "documentation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    IS_SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    SYNONYMS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_TYPE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: int
    read_only: bool
    is_sensitive: bool
    synonyms: _containers.RepeatedCompositeFieldContainer[DescribedConfigSynonym]
    config_type: int
    documentation: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[int] = ..., read_only: _Optional[bool] = ..., is_sensitive: _Optional[bool] = ..., synonyms: _Optional[_Iterable[_Union[DescribedConfigSynonym, _Mapping]]] = ..., config_type: _Optional[int] = ..., documentation: _Optional[str] = ...) -> None: ...

class DescribedConfigSynonym(_message.Message):
    __slots__ = ("name", "value", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    source: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[int] = ...) -> None: ...

class ClientQuotaEntityComponent(_message.Message):
    __slots__ = ("entity_type", "entity_name")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENTITY_NAME_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    entity_name: str
    def __init__(self, entity_type: _Optional[str] = ..., entity_name: _Optional[str] = ...) -> None: ...

class ClientQuotaOp(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: float
    def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class ClientQuotaAlteration(_message.Message):
    __slots__ = ("entity", "ops")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[ClientQuotaEntityComponent]
    ops: _containers.RepeatedCompositeFieldContainer[ClientQuotaOp]
    def __init__(self, entity: _Optional[_Iterable[_Union[ClientQuotaEntityComponent, _Mapping]]] = ..., ops: _Optional[_Iterable[_Union[ClientQuotaOp, _Mapping]]] = ...) -> None: ...

class AlterClientQuotasRequest(_message.Message):
    __slots__ = ("entries", "validate_only")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ClientQuotaAlteration]
    validate_only: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[ClientQuotaAlteration, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class AlterClientQuotasResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    results: _containers.RepeatedCompositeFieldContainer[AlterClientQuotasResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., results: _Optional[_Iterable[_Union[AlterClientQuotasResult, _Mapping]]] = ...) -> None: ...

class AlterClientQuotasResult(_message.Message):
    __slots__ = ("entity", "error_code", "error_message")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[ClientQuotaEntityComponent]
    error_code: int
    error_message: str
    def __init__(self, entity: _Optional[_Iterable[_Union[ClientQuotaEntityComponent, _Mapping]]] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ClientQuotaFilterComponent(_message.Message):
    __slots__ = ("entity_type", "match_type", "match")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCH_TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    match_type: int
    match: str
    def __init__(self, entity_type: _Optional[str] = ..., match_type: _Optional[int] = ..., match: _Optional[str] = ...) -> None: ...

class DescribeClientQuotasRequest(_message.Message):
    __slots__ = ("components", "strict", "min_metadata_offset")
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    MIN_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    components: _containers.RepeatedCompositeFieldContainer[ClientQuotaFilterComponent]
    strict: bool
    min_metadata_offset: int
    def __init__(self, components: _Optional[_Iterable[_Union[ClientQuotaFilterComponent, _Mapping]]] = ..., strict: _Optional[bool] = ..., min_metadata_offset: _Optional[int] = ...) -> None: ...

class DescribeClientQuotasResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_id", "controller_endpoint", "metadata_offset", "entries")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_id: int
    controller_endpoint: str
    metadata_offset: int
    entries: _containers.RepeatedCompositeFieldContainer[ClientQuotaEntry]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_id: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., metadata_offset: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[ClientQuotaEntry, _Mapping]]] = ...) -> None: ...

class ClientQuotaEntry(_message.Message):
    __slots__ = ("entity", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[ClientQuotaEntityComponent]
    values: _containers.ScalarMap[str, float]
    def __init__(self, entity: _Optional[_Iterable[_Union[ClientQuotaEntityComponent, _Mapping]]] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...
