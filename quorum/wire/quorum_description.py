"""DescribeQuorum as tools see it (Kafka's ``QuorumInfo``): everything the answer says, for
``metaquorum quorum describe`` (quorum/tools/quorum_describe.py) and the AdminClient's
``describe_quorum``. Pure, like every codec of ``quorum.wire``."""

from __future__ import annotations

from dataclasses import dataclass

from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID, Uuid
from quorum.rpc.v1 import raft_pb2
from quorum.wire.scalars import error_from_wire, id_from_wire, timestamp_from_wire, uuid_from_wire

__all__ = [
    "QuorumDescription",
    "ReplicaDescription",
    "describe_quorum_from_proto",
    "tool_describe_quorum_request",
]


def tool_describe_quorum_request() -> raft_pb2.DescribeQuorumRequest:
    """The DescribeQuorum request of a tool that knows neither the cluster id nor the topic id:
    both empty, so the receiving node uses its own (see ``request_from_proto``)."""
    return raft_pb2.DescribeQuorumRequest(cluster_id="", topic_id=b"", partition_index=0)


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One replica in a DescribeQuorum answer, with everything the wire carries."""

    replica_id: int
    directory_id: Uuid  # ZERO_UUID when unknown
    log_end_offset: int  # -1 when unknown
    last_fetch_timestamp_ms: int | None  # wall clock, ms since the Unix epoch
    last_caught_up_timestamp_ms: int | None
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """A DescribeQuorum answer as a tool or the admin client sees it (Kafka's ``QuorumInfo``)."""

    error_code: ErrorCode
    error_message: str
    cluster_id: str
    topic_id: Uuid | None  # None when the responder left it empty
    partition: int
    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaDescription, ...] = ()
    observers: tuple[ReplicaDescription, ...] = ()


def _replica_description_from_wire(field: str, pb: raft_pb2.ReplicaState) -> ReplicaDescription:
    message_type = "DescribeQuorumResponse"
    directory_id = (
        uuid_from_wire(message_type, f"{field}.directory_id", pb.directory_id)
        if pb.directory_id
        else ZERO_UUID
    )
    return ReplicaDescription(
        replica_id=pb.replica_id,
        directory_id=directory_id,
        log_end_offset=pb.log_end_offset,
        last_fetch_timestamp_ms=timestamp_from_wire(
            message_type, f"{field}.last_fetch_timestamp_ms", pb.last_fetch_timestamp_ms
        ),
        last_caught_up_timestamp_ms=timestamp_from_wire(
            message_type, f"{field}.last_caught_up_timestamp_ms", pb.last_caught_up_timestamp_ms
        ),
        endpoints=tuple(pb.endpoints),
    )


def describe_quorum_from_proto(pb: raft_pb2.DescribeQuorumResponse) -> QuorumDescription:
    """Everything a DescribeQuorum answer says, for ``quorum describe`` and the admin client.

    Raises ``MalformedMessageError`` (see the module docstring).
    """
    message_type = "DescribeQuorumResponse"
    return QuorumDescription(
        error_code=error_from_wire(message_type, pb.error_code),
        error_message=pb.error_message,
        cluster_id=pb.cluster_id,
        topic_id=uuid_from_wire(message_type, "topic_id", pb.topic_id) if pb.topic_id else None,
        partition=pb.partition_index,
        leader_id=id_from_wire(message_type, "leader_id", pb.leader_id),
        leader_epoch=pb.leader_epoch,
        high_watermark=pb.high_watermark,
        voters=tuple(
            _replica_description_from_wire(f"current_voters[{i}]", r)
            for i, r in enumerate(pb.current_voters)
        ),
        observers=tuple(
            _replica_description_from_wire(f"observers[{i}]", r) for i, r in enumerate(pb.observers)
        ),
    )
