"""quorum/wire/raft.py and quorum/wire/quorum_description.py: core messages <-> protobuf, through
real serialized bytes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.limits import PREFERRED_SUCCESSORS_MAX
from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.records import LeaderChangeMessage, NoOpRecord
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    ReplicaState,
    RequestFailed,
    RequestHeader,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from quorum.rpc.v1 import raft_pb2
from quorum.wire import quorum_description
from quorum.wire import raft as transport
from quorum.wire.scalars import MalformedMessageError

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
TOPIC_ID = Uuid.parse("ah0vHnqLTD2eDxEiM0RVZg")
HEADER = RequestHeader(CLUSTER_ID, METADATA_TOPIC_ID, 0)
WALL_OFFSET_MS = 1_700_000_000_000


def to_wall(monotonic_ms: int) -> int:
    return monotonic_ms + WALL_OFFSET_MS


def from_wall(wall_ms: int) -> int:
    return wall_ms - WALL_OFFSET_MS


def over_the_wire(pb: Any) -> Any:
    """Serialize and parse again, as gRPC does."""
    return type(pb).FromString(pb.SerializeToString())


def batches() -> tuple[LogBatch, ...]:
    first = encode_batch(
        base_offset=0,
        epoch=1,
        timestamp_ms=1,
        records=[LeaderChangeMessage(1, 1, (1, 2, 3))],
        control=True,
    )
    second = encode_batch(
        base_offset=1, epoch=1, timestamp_ms=2, records=[NoOpRecord(), NoOpRecord()]
    )
    return (first, second)


REQUESTS = [
    VoteRequest(HEADER, 5, 1, 4, 17, False, 2),
    VoteRequest(RequestHeader(CLUSTER_ID, TOPIC_ID, 0), 6, 3, 0, 0, True, -1),
    BeginQuorumEpochRequest(HEADER, 1, 5, 3),
    EndQuorumEpochRequest(HEADER, 1, 5, (3, 2)),
    EndQuorumEpochRequest(HEADER, 1, 5, ()),
    FetchRequest(HEADER, 2, 5, 100, 4, 500, 8 * 1024 * 1024),
    FetchRequest(HEADER, -1, 0, 0, 0, 0, 0),  # a tool fetching without being a replica
    DescribeQuorumRequest(HEADER),
    DescribeQuorumRequest(RequestHeader(CLUSTER_ID, TOPIC_ID, 0)),
]

RESPONSES = [
    VoteResponse(ErrorCode.NONE, None, 5, True),
    VoteResponse(ErrorCode.NONE, 2, 5, False, pre_vote=True),
    VoteResponse(ErrorCode.FENCED_LEADER_EPOCH, 1, 7, False),
    BeginQuorumEpochResponse(ErrorCode.NONE, 1, 5),
    BeginQuorumEpochResponse(ErrorCode.INCONSISTENT_VOTER_SET, None, 0),
    EndQuorumEpochResponse(ErrorCode.NONE, None, 6),
    FetchResponse(ErrorCode.NONE, 1, 5, 3, 0, None, batches()),
    FetchResponse(ErrorCode.NONE, 1, 5, 3, 0, DivergingEpoch(3, 42)),
    FetchResponse(ErrorCode.NONE, 1, 5, 0, 0, DivergingEpoch(0, 0)),
    FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, None, 5, -1, 0),
    DescribeQuorumResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, None, 3, 10),
    DescribeQuorumResponse(
        ErrorCode.NONE,
        1,
        5,
        3,
        (
            ReplicaState(1, 3, 900, 900),
            ReplicaState(2, 3, 880, 870),
            ReplicaState(3, -1, None, None),
        ),
        (ReplicaState(7, 1, 850, None),),
    ),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=repr)
def test_every_request_survives_the_wire(request_: transport.CoreRequest) -> None:
    pb = over_the_wire(transport.request_to_proto(request_))
    assert transport.request_from_proto(pb) == request_


@pytest.mark.parametrize("response", RESPONSES, ids=repr)
def test_every_response_survives_the_wire(response: transport.CoreResponse) -> None:
    pb = over_the_wire(transport.response_to_proto(response, to_wall_ms=to_wall))
    assert transport.response_from_proto(pb, from_wall_ms=from_wall) == response


def test_none_ids_are_minus_one_on_the_wire() -> None:
    pb = transport.response_to_proto(FetchResponse(ErrorCode.NONE, None, 5, 3, 0))
    assert isinstance(pb, raft_pb2.FetchResponse)
    assert pb.current_leader.leader_id == -1
    pb_vote = transport.response_to_proto(VoteResponse(ErrorCode.NONE, None, 5, True))
    assert isinstance(pb_vote, raft_pb2.VoteResponse)
    assert pb_vote.leader_id == -1


def test_diverging_epoch_is_absent_unless_set() -> None:
    plain = transport.response_to_proto(FetchResponse(ErrorCode.NONE, 1, 5, 3, 0))
    assert isinstance(plain, raft_pb2.FetchResponse)
    assert not over_the_wire(plain).HasField("diverging_epoch")
    # An epoch-0, offset-0 divergence is all default values and must still be present.
    zero = transport.response_to_proto(
        FetchResponse(ErrorCode.NONE, 1, 5, 3, 0, DivergingEpoch(0, 0))
    )
    assert over_the_wire(zero).HasField("diverging_epoch")


def test_batches_keep_their_bytes() -> None:
    sent = batches()
    pb = over_the_wire(
        transport.response_to_proto(FetchResponse(ErrorCode.NONE, 1, 5, 3, 0, None, sent))
    )
    assert [b.data for b in pb.batches] == [b.data for b in sent]
    assert [(b.base_offset, b.epoch, b.record_count) for b in pb.batches] == [(0, 1, 1), (1, 1, 2)]


def test_error_message_defaults_to_something_actionable() -> None:
    pb = transport.response_to_proto(FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 7, 3, 0))
    assert pb.error_message == "this node does not lead epoch 7; the leader is node 2"
    ok = transport.response_to_proto(FetchResponse(ErrorCode.NONE, 2, 7, 3, 0))
    assert ok.error_message == ""
    given_message = transport.response_to_proto(
        VoteResponse(ErrorCode.INCONSISTENT_VOTER_SET, None, 1, False), "node 9 is not a voter"
    )
    assert given_message.error_message == "node 9 is not a voter"
    for code in ErrorCode:
        message = transport.default_error_message(code, None, 3)
        assert (message == "") == (code is ErrorCode.NONE)
        assert "{" not in message


# ----- DescribeQuorum ------------------------------------------------------------------------


def describe_response() -> DescribeQuorumResponse:
    return DescribeQuorumResponse(
        ErrorCode.NONE,
        1,
        5,
        42,
        (ReplicaState(1, 42, 1000, 1000), ReplicaState(2, 40, 990, 950)),
        (ReplicaState(100, -1, None, None),),
    )


def test_describe_quorum_response_carries_what_the_server_knows() -> None:
    directory_id = Uuid.parse("ILZ5MPTeRWakmJu99uBJCA")
    pb = over_the_wire(
        transport.response_to_proto(
            describe_response(),
            cluster_id=CLUSTER_ID,
            topic_id=TOPIC_ID,
            to_wall_ms=to_wall,
            endpoints={1: ["CONTROLLER://127.0.0.1:19091"], 2: ["CONTROLLER://127.0.0.1:19092"]},
            directory_ids={1: directory_id},
        )
    )
    assert pb.cluster_id == CLUSTER_ID
    assert pb.topic_id == TOPIC_ID.bytes
    assert pb.partition_index == 0
    assert list(pb.current_voters[0].endpoints) == ["CONTROLLER://127.0.0.1:19091"]
    assert pb.current_voters[0].directory_id == directory_id.bytes
    assert pb.current_voters[1].directory_id == b""
    assert pb.current_voters[1].last_caught_up_timestamp_ms == to_wall(950)
    assert pb.observers[0].last_fetch_timestamp_ms == -1
    assert list(pb.observers[0].endpoints) == []

    description = quorum_description.describe_quorum_from_proto(pb)
    assert description == quorum_description.QuorumDescription(
        error_code=ErrorCode.NONE,
        error_message="",
        cluster_id=CLUSTER_ID,
        topic_id=TOPIC_ID,
        partition=0,
        leader_id=1,
        leader_epoch=5,
        high_watermark=42,
        voters=(
            quorum_description.ReplicaDescription(
                1, directory_id, 42, to_wall(1000), to_wall(1000), ("CONTROLLER://127.0.0.1:19091",)
            ),
            quorum_description.ReplicaDescription(
                2, ZERO_UUID, 40, to_wall(990), to_wall(950), ("CONTROLLER://127.0.0.1:19092",)
            ),
        ),
        observers=(quorum_description.ReplicaDescription(100, ZERO_UUID, -1, None, None),),
    )


def test_describe_quorum_response_needs_a_clock_conversion() -> None:
    with pytest.raises(TypeError, match="to_wall_ms"):
        transport.response_to_proto(describe_response())


def test_without_from_wall_ms_describe_times_stay_wall_clock() -> None:
    pb = transport.response_to_proto(describe_response(), to_wall_ms=to_wall)
    assert isinstance(pb, raft_pb2.DescribeQuorumResponse)
    decoded = transport.response_from_proto(pb)
    assert isinstance(decoded, DescribeQuorumResponse)
    assert decoded.voters[0].last_fetch_ms == to_wall(1000)


def test_a_tool_describe_request_means_this_cluster_and_the_metadata_log() -> None:
    pb = over_the_wire(quorum_description.tool_describe_quorum_request())
    assert pb.cluster_id == ""
    assert pb.topic_id == b""
    assert transport.request_from_proto(pb, local_cluster_id=CLUSTER_ID) == DescribeQuorumRequest(
        HEADER
    )
    # Without a local cluster id the empty one stays; the core then answers
    # INCONSISTENT_CLUSTER_ID rather than guessing.
    assert transport.request_from_proto(pb) == DescribeQuorumRequest(
        RequestHeader("", METADATA_TOPIC_ID, 0)
    )
    # A cluster id the caller did give is never replaced.
    given = raft_pb2.DescribeQuorumRequest(cluster_id="other", topic_id=b"")
    request = transport.request_from_proto(given, local_cluster_id=CLUSTER_ID)
    assert request.header.cluster_id == "other"


def test_describe_quorum_from_proto_with_an_empty_topic_id() -> None:
    pb = raft_pb2.DescribeQuorumResponse(
        error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER), leader_id=-1, leader_epoch=3
    )
    description = quorum_description.describe_quorum_from_proto(pb)
    assert description.topic_id is None
    assert description.leader_id is None
    assert description.voters == ()


# ----- malformed input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pb", "field"),
    [
        (raft_pb2.VoteRequest(cluster_id=CLUSTER_ID, topic_id=b"short"), "topic_id"),
        (raft_pb2.BeginQuorumEpochRequest(cluster_id=CLUSTER_ID), "topic_id"),
        (raft_pb2.EndQuorumEpochRequest(topic_id=b"x" * 17), "topic_id"),
        (raft_pb2.FetchRequest(topic_id=b""), "topic_id"),
        (raft_pb2.DescribeQuorumRequest(topic_id=b"x" * 15), "topic_id"),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, str) else value,
)
def test_malformed_requests_name_the_field(pb: Any, field: str) -> None:
    with pytest.raises(MalformedMessageError) as raised:
        transport.request_from_proto(pb)
    assert raised.value.field == field
    assert type(pb).__name__ in str(raised.value)
    assert isinstance(raised.value, ValueError)


def fetch_response_pb(**fields: Any) -> raft_pb2.FetchResponse:
    fields.setdefault("current_leader", raft_pb2.LeaderIdAndEpoch(leader_id=1, leader_epoch=5))
    return raft_pb2.FetchResponse(**fields)


@pytest.mark.parametrize(
    ("pb", "field"),
    [
        (raft_pb2.VoteResponse(error_code=12345), "error_code"),
        (raft_pb2.BeginQuorumEpochResponse(error_code=9999), "error_code"),
        (raft_pb2.EndQuorumEpochResponse(leader_id=-2), "leader_id"),
        (raft_pb2.FetchResponse(), "current_leader"),
        (
            fetch_response_pb(current_leader=raft_pb2.LeaderIdAndEpoch(leader_id=-5)),
            "current_leader.leader_id",
        ),
        (
            fetch_response_pb(batches=[raft_pb2.Batch(base_offset=0, epoch=1, record_count=0)]),
            "batches[0].record_count",
        ),
        (
            fetch_response_pb(
                batches=[
                    raft_pb2.Batch(base_offset=0, epoch=1, record_count=1),
                    raft_pb2.Batch(base_offset=-1, epoch=1, record_count=1),
                ]
            ),
            "batches[1].base_offset",
        ),
        (
            fetch_response_pb(batches=[raft_pb2.Batch(base_offset=0, epoch=-1, record_count=1)]),
            "batches[0].epoch",
        ),
        (
            fetch_response_pb(snapshot_id=raft_pb2.SnapshotId(end_offset=-10, epoch=2)),
            "snapshot_id",
        ),
        (
            raft_pb2.DescribeQuorumResponse(
                current_voters=[raft_pb2.ReplicaState(replica_id=1, last_fetch_timestamp_ms=-3)]
            ),
            "current_voters[0].last_fetch_timestamp_ms",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_malformed_responses_name_the_field(pb: Any, field: str) -> None:
    with pytest.raises(MalformedMessageError) as raised:
        transport.response_from_proto(pb)
    assert raised.value.field == field


def test_describe_quorum_from_proto_refuses_a_bad_directory_id() -> None:
    pb = raft_pb2.DescribeQuorumResponse(
        leader_id=1, observers=[raft_pb2.ReplicaState(replica_id=4, directory_id=b"abc")]
    )
    with pytest.raises(MalformedMessageError) as raised:
        quorum_description.describe_quorum_from_proto(pb)
    assert raised.value.field == "observers[0].directory_id"


def test_non_messages_are_our_bug() -> None:
    with pytest.raises(TypeError):
        transport.request_to_proto(RequestFailed())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        transport.response_to_proto(RequestFailed())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        transport.request_from_proto(raft_pb2.VoteResponse())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        transport.response_from_proto(raft_pb2.VoteRequest())  # type: ignore[arg-type]


# ----- property: any representable message survives --------------------------------------------

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
NODE_ID = st.none() | st.integers(min_value=0, max_value=2**31 - 1)
ERRORS = st.sampled_from(list(ErrorCode))
UUIDS = st.builds(Uuid, st.integers(min_value=0, max_value=2**64 - 1), st.integers(0, 2**64 - 1))
HEADERS = st.builds(RequestHeader, st.text(max_size=30), UUIDS, INT32)


@given(
    st.one_of(
        st.builds(VoteRequest, HEADERS, INT32, INT32, INT32, INT64, st.booleans(), INT32),
        st.builds(BeginQuorumEpochRequest, HEADERS, INT32, INT32, INT32),
        st.builds(EndQuorumEpochRequest, HEADERS, INT32, INT32, st.tuples(INT32, INT32)),
        st.builds(FetchRequest, HEADERS, INT32, INT32, INT64, INT32, INT32, INT32),
        st.builds(DescribeQuorumRequest, HEADERS),
    )
)
def test_any_request_survives_the_wire(request_: transport.CoreRequest) -> None:
    assert transport.request_from_proto(over_the_wire(transport.request_to_proto(request_))) == (
        request_
    )


LOG_BATCHES = st.builds(
    LogBatch,
    st.integers(0, 2**62),
    st.integers(0, 2**31 - 1),
    st.integers(1, 2**31 - 1),
    st.binary(max_size=64),
)


@given(
    st.one_of(
        st.builds(VoteResponse, ERRORS, NODE_ID, INT32, st.booleans(), st.booleans()),
        st.builds(BeginQuorumEpochResponse, ERRORS, NODE_ID, INT32),
        st.builds(EndQuorumEpochResponse, ERRORS, NODE_ID, INT32),
        st.builds(
            FetchResponse,
            ERRORS,
            NODE_ID,
            INT32,
            INT64,
            INT64,
            st.none() | st.builds(DivergingEpoch, INT32, INT64),
            st.lists(LOG_BATCHES, max_size=3).map(tuple),
        ),
    )
)
def test_any_response_survives_the_wire(response: transport.CoreResponse) -> None:
    pb = over_the_wire(transport.response_to_proto(response))
    assert transport.response_from_proto(pb) == response


def test_fetch_response_with_snapshot_id_round_trips() -> None:
    message = FetchResponse(ErrorCode.NONE, 1, 4, 100, 80, snapshot_id=SnapshotId(80, 3))
    pb = over_the_wire(transport.response_to_proto(message))
    assert transport.response_from_proto(pb) == message


def test_too_many_preferred_successors_are_malformed() -> None:
    """An EndQuorumEpoch names at most PREFERRED_SUCCESSORS_MAX successors (quorum/limits.py):
    a longer list is refused before the core iterates it (issue #12)."""
    ok = raft_pb2.EndQuorumEpochRequest(
        cluster_id=CLUSTER_ID,
        topic_id=METADATA_TOPIC_ID.bytes,
        preferred_successors=list(range(PREFERRED_SUCCESSORS_MAX)),
    )
    assert len(transport.request_from_proto(ok).preferred_successors) == PREFERRED_SUCCESSORS_MAX  # type: ignore[union-attr]
    ok.preferred_successors.append(1)
    with pytest.raises(MalformedMessageError) as raised:
        transport.request_from_proto(ok)
    assert raised.value.field == "preferred_successors"
    assert str(PREFERRED_SUCCESSORS_MAX) in str(raised.value)
