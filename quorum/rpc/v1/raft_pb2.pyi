from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VoteRequest(_message.Message):
    __slots__ = ("cluster_id", "topic_id", "partition_index", "candidate_epoch", "candidate_id", "last_offset_epoch", "last_offset", "pre_vote", "voter_id", "candidate_directory_id", "voter_directory_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    topic_id: bytes
    partition_index: int
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool
    voter_id: int
    candidate_directory_id: bytes
    voter_directory_id: bytes
    def __init__(self, cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., candidate_epoch: _Optional[int] = ..., candidate_id: _Optional[int] = ..., last_offset_epoch: _Optional[int] = ..., last_offset: _Optional[int] = ..., pre_vote: _Optional[bool] = ..., voter_id: _Optional[int] = ..., candidate_directory_id: _Optional[bytes] = ..., voter_directory_id: _Optional[bytes] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader_id", "leader_epoch", "vote_granted", "pre_vote", "leader_endpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    VOTE_GRANTED_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    pre_vote: bool
    leader_endpoint: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., vote_granted: _Optional[bool] = ..., pre_vote: _Optional[bool] = ..., leader_endpoint: _Optional[str] = ...) -> None: ...

class BeginQuorumEpochRequest(_message.Message):
    __slots__ = ("cluster_id", "topic_id", "partition_index", "leader_id", "leader_epoch", "voter_id", "voter_directory_id", "leader_endpoint")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    topic_id: bytes
    partition_index: int
    leader_id: int
    leader_epoch: int
    voter_id: int
    voter_directory_id: bytes
    leader_endpoint: str
    def __init__(self, cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[bytes] = ..., leader_endpoint: _Optional[str] = ...) -> None: ...

class BeginQuorumEpochResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader_id", "leader_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    leader_id: int
    leader_epoch: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class EndQuorumEpochRequest(_message.Message):
    __slots__ = ("cluster_id", "topic_id", "partition_index", "leader_id", "leader_epoch", "preferred_successors")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_SUCCESSORS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    topic_id: bytes
    partition_index: int
    leader_id: int
    leader_epoch: int
    preferred_successors: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., preferred_successors: _Optional[_Iterable[int]] = ...) -> None: ...

class EndQuorumEpochResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader_id", "leader_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    leader_id: int
    leader_epoch: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("cluster_id", "topic_id", "partition_index", "replica_id", "current_leader_epoch", "fetch_offset", "last_fetched_epoch", "max_wait_ms", "max_bytes", "high_watermark", "read_fence", "replica_directory_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    READ_FENCE_FIELD_NUMBER: _ClassVar[int]
    REPLICA_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    topic_id: bytes
    partition_index: int
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int
    high_watermark: int
    read_fence: int
    replica_directory_id: bytes
    def __init__(self, cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., replica_id: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., max_bytes: _Optional[int] = ..., high_watermark: _Optional[int] = ..., read_fence: _Optional[int] = ..., replica_directory_id: _Optional[bytes] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("base_offset", "epoch", "record_count", "data")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    epoch: int
    record_count: int
    data: bytes
    def __init__(self, base_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., record_count: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class LeaderIdAndEpoch(_message.Message):
    __slots__ = ("leader_id", "leader_epoch")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    leader_id: int
    leader_epoch: int
    def __init__(self, leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class EpochEndOffset(_message.Message):
    __slots__ = ("epoch", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class SnapshotId(_message.Message):
    __slots__ = ("end_offset", "epoch")
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    end_offset: int
    epoch: int
    def __init__(self, end_offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "high_watermark", "log_start_offset", "current_leader", "diverging_epoch", "snapshot_id", "batches", "read_fence", "leader_endpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    READ_FENCE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    high_watermark: int
    log_start_offset: int
    current_leader: LeaderIdAndEpoch
    diverging_epoch: EpochEndOffset
    snapshot_id: SnapshotId
    batches: _containers.RepeatedCompositeFieldContainer[Batch]
    read_fence: int
    leader_endpoint: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., current_leader: _Optional[_Union[LeaderIdAndEpoch, _Mapping]] = ..., diverging_epoch: _Optional[_Union[EpochEndOffset, _Mapping]] = ..., snapshot_id: _Optional[_Union[SnapshotId, _Mapping]] = ..., batches: _Optional[_Iterable[_Union[Batch, _Mapping]]] = ..., read_fence: _Optional[int] = ..., leader_endpoint: _Optional[str] = ...) -> None: ...

class DescribeQuorumRequest(_message.Message):
    __slots__ = ("cluster_id", "topic_id", "partition_index")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    topic_id: bytes
    partition_index: int
    def __init__(self, cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ...) -> None: ...

class ReplicaState(_message.Message):
    __slots__ = ("replica_id", "log_end_offset", "last_fetch_timestamp_ms", "last_caught_up_timestamp_ms", "endpoints", "directory_id")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCH_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CAUGHT_UP_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp_ms: int
    last_caught_up_timestamp_ms: int
    endpoints: _containers.RepeatedScalarFieldContainer[str]
    directory_id: bytes
    def __init__(self, replica_id: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., last_fetch_timestamp_ms: _Optional[int] = ..., last_caught_up_timestamp_ms: _Optional[int] = ..., endpoints: _Optional[_Iterable[str]] = ..., directory_id: _Optional[bytes] = ...) -> None: ...

class DescribeQuorumResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "cluster_id", "topic_id", "partition_index", "leader_id", "leader_epoch", "high_watermark", "current_voters", "observers")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VOTERS_FIELD_NUMBER: _ClassVar[int]
    OBSERVERS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    cluster_id: str
    topic_id: bytes
    partition_index: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    observers: _containers.RepeatedCompositeFieldContainer[ReplicaState]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., high_watermark: _Optional[int] = ..., current_voters: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ..., observers: _Optional[_Iterable[_Union[ReplicaState, _Mapping]]] = ...) -> None: ...

class FetchSnapshotRequest(_message.Message):
    __slots__ = ("cluster_id", "topic_id", "partition_index", "replica_id", "current_leader_epoch", "snapshot_id", "position", "max_bytes")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INDEX_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    topic_id: bytes
    partition_index: int
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int
    def __init__(self, cluster_id: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partition_index: _Optional[int] = ..., replica_id: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., snapshot_id: _Optional[_Union[SnapshotId, _Mapping]] = ..., position: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FetchSnapshotResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "current_leader", "snapshot_id", "size", "position", "unaligned_records")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    UNALIGNED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    current_leader: LeaderIdAndEpoch
    snapshot_id: SnapshotId
    size: int
    position: int
    unaligned_records: bytes
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., current_leader: _Optional[_Union[LeaderIdAndEpoch, _Mapping]] = ..., snapshot_id: _Optional[_Union[SnapshotId, _Mapping]] = ..., size: _Optional[int] = ..., position: _Optional[int] = ..., unaligned_records: _Optional[bytes] = ...) -> None: ...

class VoterEndpoint(_message.Message):
    __slots__ = ("name", "host", "port")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    name: str
    host: str
    port: int
    def __init__(self, name: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class AddRaftVoterRequest(_message.Message):
    __slots__ = ("cluster_id", "timeout_ms", "voter_id", "voter_directory_id", "endpoints")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    timeout_ms: int
    voter_id: int
    voter_directory_id: bytes
    endpoints: _containers.RepeatedCompositeFieldContainer[VoterEndpoint]
    def __init__(self, cluster_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[bytes] = ..., endpoints: _Optional[_Iterable[_Union[VoterEndpoint, _Mapping]]] = ...) -> None: ...

class RemoveRaftVoterRequest(_message.Message):
    __slots__ = ("cluster_id", "voter_id", "voter_directory_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    voter_id: int
    voter_directory_id: bytes
    def __init__(self, cluster_id: _Optional[str] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[bytes] = ...) -> None: ...

class UpdateRaftVoterRequest(_message.Message):
    __slots__ = ("cluster_id", "current_leader_epoch", "voter_id", "voter_directory_id", "endpoints", "kraft_version_min", "kraft_version_max")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    VOTER_ID_FIELD_NUMBER: _ClassVar[int]
    VOTER_DIRECTORY_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    KRAFT_VERSION_MIN_FIELD_NUMBER: _ClassVar[int]
    KRAFT_VERSION_MAX_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: bytes
    endpoints: _containers.RepeatedCompositeFieldContainer[VoterEndpoint]
    kraft_version_min: int
    kraft_version_max: int
    def __init__(self, cluster_id: _Optional[str] = ..., current_leader_epoch: _Optional[int] = ..., voter_id: _Optional[int] = ..., voter_directory_id: _Optional[bytes] = ..., endpoints: _Optional[_Iterable[_Union[VoterEndpoint, _Mapping]]] = ..., kraft_version_min: _Optional[int] = ..., kraft_version_max: _Optional[int] = ...) -> None: ...

class VoterChangeResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader_id", "leader_epoch", "leader_endpoint", "high_watermark")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEADER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    leader_id: int
    leader_epoch: int
    leader_endpoint: str
    high_watermark: int
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., leader_endpoint: _Optional[str] = ..., high_watermark: _Optional[int] = ...) -> None: ...
