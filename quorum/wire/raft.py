"""The one place that maps the Raft core's messages to and from protobuf
(docs/conventions.md#wire): ``QuorumService`` requests and responses, and voter changes.

The core speaks the frozen dataclasses of ``quorum.raft.messages``; the wire is
``proto/quorum/rpc/v1/raft.proto``. This module is pure: no channels, no clocks (the caller
passes ``to_wall_ms``), no I/O. Conventions of the mapping:

- Ids, Uuids and error codes as ``quorum/wire/scalars.py`` says. Ids the core keeps as plain
  ints (``voter_id``, ``replica_id``: ``-1`` for "unknown" or "a tool") pass through unchanged.
  An error code this build does not know is malformed: the core could not act on it anyway.
- ``LogBatch`` <-> ``Batch``, ``DivergingEpoch`` <-> ``EpochEndOffset`` (absent = ``None``,
  told apart with ``HasField``).

What this module checks, and what it leaves to the core. A message that cannot be expressed as a
core message at all (a topic id that is not 16 bytes, a batch with ``record_count`` 0, an
unknown error code, a leader id of -7) raises ``MalformedMessageError`` naming the message and
the field: the servicer answers such a request with INVALID_ARGUMENT, the driver treats such a
response as a failed request. Values that fit the core's types but break protocol rules (a
negative epoch or offset in a request) pass through: the core answers them with INVALID_REQUEST,
as its ``handle_*_request`` docstrings document, and drops a response that breaks them
(docs/architecture.md#hostile-peers). A repeated field is bounded here before anything iterates
it (``preferred_successors``: ``PREFERRED_SUCCESSORS_MAX``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from quorum import limits
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import BrokerEndpoint, InvalidRecordError
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    RemoveRaftVoterRequest,
    ReplicaState,
    RequestHeader,
    SnapshotId,
    UpdateRaftVoterRequest,
    VoterChangeRequest,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.rpc.v1 import raft_pb2
from quorum.wire.scalars import (
    NO_ID,
    MalformedMessageError,
    directory_id_from_wire,
    directory_id_to_wire,
    error_from_wire,
    id_from_wire,
    id_to_wire,
    timestamp_from_wire,
    uuid_from_wire,
)

__all__ = [
    "CoreRequest",
    "CoreResponse",
    "MalformedMessageError",
    "RequestProto",
    "ResponseProto",
    "VoterChangeProto",
    "default_error_message",
    "request_from_proto",
    "request_to_proto",
    "response_from_proto",
    "response_to_proto",
    "voter_change_from_proto",
    "voter_change_response_from_proto",
    "voter_change_response_to_proto",
    "voter_change_to_proto",
]

CoreRequest: TypeAlias = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | DescribeQuorumRequest
)
CoreResponse: TypeAlias = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | DescribeQuorumResponse
)
RequestProto: TypeAlias = (
    raft_pb2.VoteRequest
    | raft_pb2.BeginQuorumEpochRequest
    | raft_pb2.EndQuorumEpochRequest
    | raft_pb2.FetchRequest
    | raft_pb2.DescribeQuorumRequest
)
ResponseProto: TypeAlias = (
    raft_pb2.VoteResponse
    | raft_pb2.BeginQuorumEpochResponse
    | raft_pb2.EndQuorumEpochResponse
    | raft_pb2.FetchResponse
    | raft_pb2.DescribeQuorumResponse
)


def _header_from_wire(
    message_type: str, cluster_id: str, topic_id: bytes, partition_index: int
) -> RequestHeader:
    return RequestHeader(
        cluster_id, uuid_from_wire(message_type, "topic_id", topic_id), partition_index
    )


# ----- requests ----------------------------------------------------------------------------------


def request_to_proto(msg: CoreRequest) -> RequestProto:
    """The protobuf form of a request the core sends."""
    if not isinstance(msg, CoreRequest):
        raise TypeError(f"not a request of the Raft core: {msg!r}")
    cluster_id = msg.header.cluster_id
    topic_id = msg.header.topic_id.bytes
    partition_index = msg.header.partition
    match msg:
        case VoteRequest():
            return raft_pb2.VoteRequest(
                cluster_id=cluster_id,
                topic_id=topic_id,
                partition_index=partition_index,
                candidate_epoch=msg.candidate_epoch,
                candidate_id=msg.candidate_id,
                last_offset_epoch=msg.last_offset_epoch,
                last_offset=msg.last_offset,
                pre_vote=msg.pre_vote,
                voter_id=msg.voter_id,
                candidate_directory_id=directory_id_to_wire(msg.candidate_directory_id),
                voter_directory_id=directory_id_to_wire(msg.voter_directory_id),
            )
        case BeginQuorumEpochRequest():
            return raft_pb2.BeginQuorumEpochRequest(
                cluster_id=cluster_id,
                topic_id=topic_id,
                partition_index=partition_index,
                leader_id=msg.leader_id,
                leader_epoch=msg.leader_epoch,
                voter_id=msg.voter_id,
                voter_directory_id=directory_id_to_wire(msg.voter_directory_id),
            )
        case EndQuorumEpochRequest():
            return raft_pb2.EndQuorumEpochRequest(
                cluster_id=cluster_id,
                topic_id=topic_id,
                partition_index=partition_index,
                leader_id=msg.leader_id,
                leader_epoch=msg.leader_epoch,
                preferred_successors=msg.preferred_successors,
            )
        case FetchRequest():
            return raft_pb2.FetchRequest(
                cluster_id=cluster_id,
                topic_id=topic_id,
                partition_index=partition_index,
                replica_id=msg.replica_id,
                current_leader_epoch=msg.current_leader_epoch,
                fetch_offset=msg.fetch_offset,
                last_fetched_epoch=msg.last_fetched_epoch,
                max_wait_ms=msg.max_wait_ms,
                max_bytes=msg.max_bytes,
                high_watermark=msg.high_watermark,
                read_fence=msg.read_fence,
                replica_directory_id=directory_id_to_wire(msg.replica_directory_id),
            )
        case DescribeQuorumRequest():
            return raft_pb2.DescribeQuorumRequest(
                cluster_id=cluster_id, topic_id=topic_id, partition_index=partition_index
            )
    raise TypeError(f"not a request of the Raft core: {msg!r}")


def request_from_proto(pb: RequestProto, *, local_cluster_id: str | None = None) -> CoreRequest:
    """The core's form of a request received from a peer or a tool.

    A DescribeQuorumRequest may leave ``topic_id`` empty (it then means METADATA_TOPIC_ID) and
    ``cluster_id`` empty (it is then replaced by ``local_cluster_id`` when given; tools do not
    know the cluster id). Every other request must carry a 16-byte topic id.

    Raises ``MalformedMessageError`` (see the module docstring).
    """
    match pb:
        case raft_pb2.VoteRequest():
            return VoteRequest(
                header=_header_from_wire(
                    "VoteRequest", pb.cluster_id, pb.topic_id, pb.partition_index
                ),
                candidate_epoch=pb.candidate_epoch,
                candidate_id=pb.candidate_id,
                last_offset_epoch=pb.last_offset_epoch,
                last_offset=pb.last_offset,
                pre_vote=pb.pre_vote,
                voter_id=pb.voter_id,
                candidate_directory_id=directory_id_from_wire(
                    "VoteRequest", "candidate_directory_id", pb.candidate_directory_id
                ),
                voter_directory_id=directory_id_from_wire(
                    "VoteRequest", "voter_directory_id", pb.voter_directory_id
                ),
            )
        case raft_pb2.BeginQuorumEpochRequest():
            return BeginQuorumEpochRequest(
                header=_header_from_wire(
                    "BeginQuorumEpochRequest", pb.cluster_id, pb.topic_id, pb.partition_index
                ),
                leader_id=pb.leader_id,
                leader_epoch=pb.leader_epoch,
                voter_id=pb.voter_id,
                voter_directory_id=directory_id_from_wire(
                    "BeginQuorumEpochRequest", "voter_directory_id", pb.voter_directory_id
                ),
            )
        case raft_pb2.EndQuorumEpochRequest():
            if len(pb.preferred_successors) > limits.PREFERRED_SUCCESSORS_MAX:
                raise MalformedMessageError(
                    "EndQuorumEpochRequest",
                    "preferred_successors",
                    f"{len(pb.preferred_successors)} entries, at most "
                    f"{limits.PREFERRED_SUCCESSORS_MAX} allowed",
                )
            return EndQuorumEpochRequest(
                header=_header_from_wire(
                    "EndQuorumEpochRequest", pb.cluster_id, pb.topic_id, pb.partition_index
                ),
                leader_id=pb.leader_id,
                leader_epoch=pb.leader_epoch,
                preferred_successors=tuple(pb.preferred_successors),
            )
        case raft_pb2.FetchRequest():
            return FetchRequest(
                header=_header_from_wire(
                    "FetchRequest", pb.cluster_id, pb.topic_id, pb.partition_index
                ),
                replica_id=pb.replica_id,
                current_leader_epoch=pb.current_leader_epoch,
                fetch_offset=pb.fetch_offset,
                last_fetched_epoch=pb.last_fetched_epoch,
                max_wait_ms=pb.max_wait_ms,
                max_bytes=pb.max_bytes,
                high_watermark=pb.high_watermark,
                read_fence=pb.read_fence,
                replica_directory_id=directory_id_from_wire(
                    "FetchRequest", "replica_directory_id", pb.replica_directory_id
                ),
            )
        case raft_pb2.DescribeQuorumRequest():
            cluster_id = pb.cluster_id
            if not cluster_id and local_cluster_id is not None:
                cluster_id = local_cluster_id
            topic_id = (
                uuid_from_wire("DescribeQuorumRequest", "topic_id", pb.topic_id)
                if pb.topic_id
                else METADATA_TOPIC_ID
            )
            return DescribeQuorumRequest(RequestHeader(cluster_id, topic_id, pb.partition_index))
    raise TypeError(f"not a QuorumService request: {type(pb).__name__}")


# ----- responses ---------------------------------------------------------------------------------

_ERROR_MESSAGES: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.INCONSISTENT_CLUSTER_ID: (
        "the request's cluster_id is not this node's; every node must be formatted with the "
        "same --cluster-id"
    ),
    ErrorCode.UNKNOWN_TOPIC_ID: (
        "the request's topic_id is neither METADATA_TOPIC_ID nor the metadata topic's assigned id"
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "the metadata log has only partition 0",
    ErrorCode.INCONSISTENT_VOTER_SET: (
        "the sender or the receiver is not a voter in this node's controller.quorum.voters; "
        "every node must list the same voters"
    ),
    ErrorCode.INVALID_REQUEST: "the request has a negative or inconsistent field",
    ErrorCode.FENCED_LEADER_EPOCH: "the request's epoch is older than this node's epoch {epoch}",
    ErrorCode.UNKNOWN_LEADER_EPOCH: (
        "the request's epoch is newer than this node's epoch {epoch}; retry once it has caught up"
    ),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "this node does not lead epoch {epoch}; {leader}",
}


def default_error_message(error_code: ErrorCode, leader_id: int | None, leader_epoch: int) -> str:
    """A message a person can act on for ``error_code`` ("" for NONE), used when the caller of
    ``response_to_proto`` gives none."""
    if error_code is ErrorCode.NONE:
        return ""
    leader = "no leader is known" if leader_id is None else f"the leader is node {leader_id}"
    template = _ERROR_MESSAGES.get(error_code, error_code.name)
    return template.format(epoch=leader_epoch, leader=leader)


def _batch_to_wire(batch: LogBatch) -> raft_pb2.Batch:
    return raft_pb2.Batch(
        base_offset=batch.base_offset,
        epoch=batch.epoch,
        record_count=batch.record_count,
        data=batch.data,
    )


def _batch_from_wire(index: int, pb: raft_pb2.Batch) -> LogBatch:
    for field, value, minimum in (
        ("base_offset", pb.base_offset, 0),
        ("epoch", pb.epoch, 0),
        ("record_count", pb.record_count, 1),
    ):
        if value < minimum:
            raise MalformedMessageError(
                "FetchResponse", f"batches[{index}].{field}", f"{value} < {minimum}"
            )
    return LogBatch(pb.base_offset, pb.epoch, pb.record_count, pb.data)


def _replica_to_wire(
    replica: ReplicaState,
    to_wall_ms: Callable[[int], int],
    endpoints: Mapping[int, Sequence[str]],
    directory_ids: Mapping[int, Uuid],
) -> raft_pb2.ReplicaState:
    directory_id = replica.directory_id or directory_ids.get(replica.replica_id, ZERO_UUID)
    own = [f"{e.name}://{e.host}:{e.port}" for e in replica.endpoints]
    return raft_pb2.ReplicaState(
        replica_id=replica.replica_id,
        log_end_offset=replica.log_end_offset,
        last_fetch_timestamp_ms=(
            NO_ID if replica.last_fetch_ms is None else to_wall_ms(replica.last_fetch_ms)
        ),
        last_caught_up_timestamp_ms=(
            NO_ID if replica.last_caught_up_ms is None else to_wall_ms(replica.last_caught_up_ms)
        ),
        endpoints=own or list(endpoints.get(replica.replica_id, ())),
        directory_id=b"" if directory_id == ZERO_UUID else directory_id.bytes,
    )


def response_to_proto(
    msg: CoreResponse,
    error_message: str = "",
    *,
    cluster_id: str = "",
    topic_id: Uuid = METADATA_TOPIC_ID,
    partition: int = 0,
    to_wall_ms: Callable[[int], int] | None = None,
    endpoints: Mapping[int, Sequence[str]] | None = None,
    directory_ids: Mapping[int, Uuid] | None = None,
    leader_endpoint: str = "",
) -> ResponseProto:
    """The protobuf form of the core's answer to a request.

    ``error_message`` defaults to the core response's own ``error_message`` (an epoch jump), else
    ``default_error_message``, when the response carries an error.
    The keyword arguments after it are used only for a DescribeQuorumResponse, whose wire form
    holds what the core does not know: the responder's ``cluster_id``, the ``topic_id`` the log
    is known by (the metadata topic's assigned id once written, else METADATA_TOPIC_ID) and
    ``partition``; ``to_wall_ms`` (required there) converts the core's monotonic
    ``last_fetch_ms`` / ``last_caught_up_ms`` to wall-clock ms since the Unix epoch; and
    ``endpoints`` (``LISTENER://host:port`` strings) and ``directory_ids`` per replica id, for
    the replicas the server knows them for (voters). Replicas missing from the maps get none
    (a replica's own ``endpoints`` and ``directory_id`` from the core come first).
    ``leader_endpoint`` ("host:port" of the leader the response names, KIP-853) goes into the
    Vote and Fetch responses.
    """
    if not isinstance(msg, CoreResponse):
        raise TypeError(f"not a response of the Raft core: {msg!r}")
    if not error_message:
        # The core's own explanation (an epoch jump) first, else the code's generic one.
        error_message = getattr(msg, "error_message", "") or default_error_message(
            msg.error_code, msg.leader_id, msg.leader_epoch
        )
    match msg:
        case VoteResponse():
            return raft_pb2.VoteResponse(
                error_code=int(msg.error_code),
                error_message=error_message,
                leader_id=id_to_wire(msg.leader_id),
                leader_epoch=msg.leader_epoch,
                vote_granted=msg.vote_granted,
                pre_vote=msg.pre_vote,
                leader_endpoint=leader_endpoint,
            )
        case BeginQuorumEpochResponse():
            return raft_pb2.BeginQuorumEpochResponse(
                error_code=int(msg.error_code),
                error_message=error_message,
                leader_id=id_to_wire(msg.leader_id),
                leader_epoch=msg.leader_epoch,
            )
        case EndQuorumEpochResponse():
            return raft_pb2.EndQuorumEpochResponse(
                error_code=int(msg.error_code),
                error_message=error_message,
                leader_id=id_to_wire(msg.leader_id),
                leader_epoch=msg.leader_epoch,
            )
        case FetchResponse():
            pb = raft_pb2.FetchResponse(
                error_code=int(msg.error_code),
                error_message=error_message,
                high_watermark=msg.high_watermark,
                log_start_offset=msg.log_start_offset,
                current_leader=raft_pb2.LeaderIdAndEpoch(
                    leader_id=id_to_wire(msg.leader_id), leader_epoch=msg.leader_epoch
                ),
                batches=[_batch_to_wire(batch) for batch in msg.batches],
                read_fence=msg.read_fence,
                leader_endpoint=leader_endpoint,
            )
            if msg.diverging_epoch is not None:
                pb.diverging_epoch.epoch = msg.diverging_epoch.epoch
                pb.diverging_epoch.end_offset = msg.diverging_epoch.end_offset
            if msg.snapshot_id is not None:
                pb.snapshot_id.end_offset = msg.snapshot_id.end_offset
                pb.snapshot_id.epoch = msg.snapshot_id.epoch
            return pb
        case DescribeQuorumResponse():
            if to_wall_ms is None:
                raise TypeError("a DescribeQuorumResponse needs to_wall_ms to convert its times")
            endpoints = endpoints or {}
            directory_ids = directory_ids or {}
            return raft_pb2.DescribeQuorumResponse(
                error_code=int(msg.error_code),
                error_message=error_message,
                cluster_id=cluster_id,
                topic_id=topic_id.bytes,
                partition_index=partition,
                leader_id=id_to_wire(msg.leader_id),
                leader_epoch=msg.leader_epoch,
                high_watermark=msg.high_watermark,
                current_voters=[
                    _replica_to_wire(r, to_wall_ms, endpoints, directory_ids) for r in msg.voters
                ],
                observers=[
                    _replica_to_wire(r, to_wall_ms, endpoints, directory_ids) for r in msg.observers
                ],
            )
    raise TypeError(f"not a response of the Raft core: {msg!r}")


def _replica_from_wire(
    field: str, pb: raft_pb2.ReplicaState, from_wall_ms: Callable[[int], int] | None
) -> ReplicaState:
    last_fetch = timestamp_from_wire(
        "DescribeQuorumResponse", f"{field}.last_fetch_timestamp_ms", pb.last_fetch_timestamp_ms
    )
    last_caught_up = timestamp_from_wire(
        "DescribeQuorumResponse",
        f"{field}.last_caught_up_timestamp_ms",
        pb.last_caught_up_timestamp_ms,
    )
    if from_wall_ms is not None:
        last_fetch = None if last_fetch is None else from_wall_ms(last_fetch)
        last_caught_up = None if last_caught_up is None else from_wall_ms(last_caught_up)
    return ReplicaState(pb.replica_id, pb.log_end_offset, last_fetch, last_caught_up)


def response_from_proto(
    pb: ResponseProto, *, from_wall_ms: Callable[[int], int] | None = None
) -> CoreResponse:
    """The core's form of a peer's answer.

    For a DescribeQuorumResponse, ``from_wall_ms`` converts the wire's wall-clock times back to
    the core's clock; without it they stay wall-clock ms. (The core never sends DescribeQuorum;
    tools read that response with ``describe_quorum_from_proto`` of
    quorum/wire/quorum_description.py, which keeps everything the wire says.) A FetchResponse's
    ``snapshot_id`` (KIP-630: fetch this snapshot) needs a non-negative end offset and epoch.

    Raises ``MalformedMessageError`` (see the module docstring).
    """
    match pb:
        case raft_pb2.VoteResponse():
            return VoteResponse(
                error_code=error_from_wire("VoteResponse", pb.error_code),
                leader_id=id_from_wire("VoteResponse", "leader_id", pb.leader_id),
                leader_epoch=pb.leader_epoch,
                vote_granted=pb.vote_granted,
                pre_vote=pb.pre_vote,
            )
        case raft_pb2.BeginQuorumEpochResponse():
            return BeginQuorumEpochResponse(
                error_code=error_from_wire("BeginQuorumEpochResponse", pb.error_code),
                leader_id=id_from_wire("BeginQuorumEpochResponse", "leader_id", pb.leader_id),
                leader_epoch=pb.leader_epoch,
            )
        case raft_pb2.EndQuorumEpochResponse():
            return EndQuorumEpochResponse(
                error_code=error_from_wire("EndQuorumEpochResponse", pb.error_code),
                leader_id=id_from_wire("EndQuorumEpochResponse", "leader_id", pb.leader_id),
                leader_epoch=pb.leader_epoch,
            )
        case raft_pb2.FetchResponse():
            if not pb.HasField("current_leader"):
                raise MalformedMessageError(
                    "FetchResponse", "current_leader", "missing (it is always set)"
                )
            snapshot_id = None
            if pb.HasField("snapshot_id"):
                if pb.snapshot_id.end_offset < 0 or pb.snapshot_id.epoch < 0:
                    raise MalformedMessageError(
                        "FetchResponse", "snapshot_id", "negative end offset or epoch"
                    )
                snapshot_id = SnapshotId(pb.snapshot_id.end_offset, pb.snapshot_id.epoch)
            diverging_epoch = None
            if pb.HasField("diverging_epoch"):
                diverging_epoch = DivergingEpoch(
                    pb.diverging_epoch.epoch,
                    pb.diverging_epoch.end_offset,
                )
            return FetchResponse(
                error_code=error_from_wire("FetchResponse", pb.error_code),
                leader_id=id_from_wire(
                    "FetchResponse", "current_leader.leader_id", pb.current_leader.leader_id
                ),
                leader_epoch=pb.current_leader.leader_epoch,
                high_watermark=pb.high_watermark,
                log_start_offset=pb.log_start_offset,
                diverging_epoch=diverging_epoch,
                batches=tuple(_batch_from_wire(i, batch) for i, batch in enumerate(pb.batches)),
                snapshot_id=snapshot_id,
                read_fence=pb.read_fence,
            )
        case raft_pb2.DescribeQuorumResponse():
            return DescribeQuorumResponse(
                error_code=error_from_wire("DescribeQuorumResponse", pb.error_code),
                leader_id=id_from_wire("DescribeQuorumResponse", "leader_id", pb.leader_id),
                leader_epoch=pb.leader_epoch,
                high_watermark=pb.high_watermark,
                voters=tuple(
                    _replica_from_wire(f"current_voters[{i}]", r, from_wall_ms)
                    for i, r in enumerate(pb.current_voters)
                ),
                observers=tuple(
                    _replica_from_wire(f"observers[{i}]", r, from_wall_ms)
                    for i, r in enumerate(pb.observers)
                ),
            )
    raise TypeError(f"not a QuorumService response: {type(pb).__name__}")


# ----- voter changes (KIP-853) -------------------------------------------------------------------


def _endpoints_from_wire(message_type: str, pbs: Sequence[Any]) -> tuple[BrokerEndpoint, ...]:
    if len(pbs) > limits.VOTER_ENDPOINTS_MAX:
        raise MalformedMessageError(
            message_type,
            "endpoints",
            f"{len(pbs)} endpoints, at most {limits.VOTER_ENDPOINTS_MAX} allowed",
        )
    try:
        return tuple(BrokerEndpoint(e.name, e.host, e.port) for e in pbs)
    except InvalidRecordError as exc:
        raise MalformedMessageError(message_type, "endpoints", str(exc)) from None


def _endpoints_to_wire(endpoints: Sequence[BrokerEndpoint]) -> list[raft_pb2.VoterEndpoint]:
    return [raft_pb2.VoterEndpoint(name=e.name, host=e.host, port=e.port) for e in endpoints]


VoterChangeProto: TypeAlias = (
    raft_pb2.AddRaftVoterRequest | raft_pb2.RemoveRaftVoterRequest | raft_pb2.UpdateRaftVoterRequest
)


def voter_change_from_proto(pb: VoterChangeProto) -> VoterChangeRequest:
    """The core's form of an AddRaftVoter, RemoveRaftVoter or UpdateRaftVoter request. Raises
    ``MalformedMessageError`` (a directory id that is not 16 bytes, a bad endpoint)."""
    name = type(pb).__name__
    directory_id = uuid_from_wire(name, "voter_directory_id", pb.voter_directory_id)
    match pb:
        case raft_pb2.AddRaftVoterRequest():
            return AddRaftVoterRequest(
                pb.cluster_id,
                pb.voter_id,
                directory_id,
                _endpoints_from_wire(name, pb.endpoints),
                pb.timeout_ms,
            )
        case raft_pb2.RemoveRaftVoterRequest():
            return RemoveRaftVoterRequest(pb.cluster_id, pb.voter_id, directory_id)
        case raft_pb2.UpdateRaftVoterRequest():
            for field in ("kraft_version_min", "kraft_version_max"):
                if not 0 <= getattr(pb, field) <= 32767:
                    raise MalformedMessageError(name, field, "not a kraft.version (0..32767)")
            return UpdateRaftVoterRequest(
                pb.cluster_id,
                pb.current_leader_epoch,
                pb.voter_id,
                directory_id,
                _endpoints_from_wire(name, pb.endpoints),
                pb.kraft_version_min,
                pb.kraft_version_max,
            )
    raise TypeError(f"not a voter change request: {name}")


def voter_change_to_proto(msg: VoterChangeRequest) -> VoterChangeProto:
    """The protobuf form of a voter change request (the admin client and a voter send them)."""
    match msg:
        case AddRaftVoterRequest():
            return raft_pb2.AddRaftVoterRequest(
                cluster_id=msg.cluster_id,
                timeout_ms=msg.timeout_ms,
                voter_id=msg.voter_id,
                voter_directory_id=msg.voter_directory_id.bytes,
                endpoints=_endpoints_to_wire(msg.endpoints),
            )
        case RemoveRaftVoterRequest():
            return raft_pb2.RemoveRaftVoterRequest(
                cluster_id=msg.cluster_id,
                voter_id=msg.voter_id,
                voter_directory_id=msg.voter_directory_id.bytes,
            )
        case UpdateRaftVoterRequest():
            return raft_pb2.UpdateRaftVoterRequest(
                cluster_id=msg.cluster_id,
                current_leader_epoch=msg.current_leader_epoch,
                voter_id=msg.voter_id,
                voter_directory_id=msg.voter_directory_id.bytes,
                endpoints=_endpoints_to_wire(msg.endpoints),
                kraft_version_min=msg.kraft_version_min,
                kraft_version_max=msg.kraft_version_max,
            )
    raise TypeError(f"not a voter change request: {msg!r}")


def voter_change_response_to_proto(
    msg: VoterChangeResponse, leader_endpoint: str = ""
) -> raft_pb2.VoterChangeResponse:
    return raft_pb2.VoterChangeResponse(
        error_code=int(msg.error_code),
        error_message=msg.error_message
        or default_error_message(msg.error_code, msg.leader_id, msg.leader_epoch),
        leader_id=id_to_wire(msg.leader_id),
        leader_epoch=msg.leader_epoch,
        leader_endpoint=leader_endpoint,
        high_watermark=msg.high_watermark,
    )


def voter_change_response_from_proto(pb: raft_pb2.VoterChangeResponse) -> VoterChangeResponse:
    return VoterChangeResponse(
        error_from_wire("VoterChangeResponse", pb.error_code),
        pb.error_message,
        id_from_wire("VoterChangeResponse", "leader_id", pb.leader_id),
        pb.leader_epoch,
        pb.high_watermark,
    )
