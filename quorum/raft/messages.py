"""The messages the Raft core consumes and produces (KIP-595 shapes, keyed by topic id).

These are the core's own frozen dataclasses; ``quorum/server/transport.py`` is the only place that
maps them to and from protobuf. Ids that Kafka encodes as ``-1`` ("none") are ``None`` here.

Every request carries ``cluster_id``, ``topic_id`` and ``partition`` (KIP-516 "Compatibility with
KIP-500": Raft RPCs are keyed by the metadata topic's id, the sentinel ``METADATA_TOPIC_ID``
until the real one is known).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch


@dataclass(frozen=True, slots=True)
class RequestHeader:
    cluster_id: str
    topic_id: Uuid
    partition: int


# ----- Vote (KIP-595; pre_vote from KIP-996) --------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoteRequest:
    header: RequestHeader
    candidate_epoch: (
        int  # the epoch the candidate runs in (for a pre-vote: the one it would run in)
    )
    candidate_id: int
    last_offset_epoch: int  # epoch of the last batch in the candidate's log
    last_offset: int  # the candidate's log end offset
    pre_vote: bool
    voter_id: int  # the voter this request is addressed to


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int  # the responder's current epoch
    vote_granted: bool
    pre_vote: bool = False


# ----- BeginQuorumEpoch / EndQuorumEpoch --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    header: RequestHeader
    leader_id: int
    leader_epoch: int
    voter_id: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    header: RequestHeader
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]  # most caught-up voters first


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int


# ----- Fetch ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchRequest:
    header: RequestHeader
    replica_id: int  # a voter's id, or an observer's (broker) id
    current_leader_epoch: int  # the epoch the fetcher believes current
    fetch_offset: int  # the fetcher's log end offset
    last_fetched_epoch: int  # epoch of the batch just before fetch_offset (0 if none)
    max_wait_ms: int  # long-poll bound
    max_bytes: int
    high_watermark: int = 0  # what the fetcher knows; behind the leader's = answer at once
    read_fence: int = 0  # the newest read fence seen from this leader in this epoch (echoed)


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot (KIP-630): it holds every record before ``end_offset``; the last of them has
    ``epoch``. Its file is ``{end_offset:020d}-{epoch:010d}.checkpoint``."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: DivergingEpoch | None = None
    batches: tuple[LogBatch, ...] = ()
    # Set when the fetcher is behind the leader's log start: fetch this snapshot first.
    snapshot_id: SnapshotId | None = None
    read_fence: int = 0  # the leader's newest read fence; the fetcher echoes it


# ----- DescribeQuorum -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    header: RequestHeader


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int  # -1 when unknown
    last_fetch_ms: int | None  # in the core's clock; the shell converts to wall time
    last_caught_up_ms: int | None


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()


# ----- transport signals -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The driver could not deliver an outbound request or got no answer (connection refused,
    deadline exceeded). Lets the core retry sooner than its own request timeout.

    ``peer_gone``: the operating system said at once that nobody is there - the connection was
    refused, or reset or closed while the request waited for its answer - as when the peer's
    process died. A deadline (a slow or cut network) is not that: it says nothing about the
    peer."""

    reason: str = ""
    peer_gone: bool = False


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | DescribeQuorumRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | DescribeQuorumResponse
    | RequestFailed
)
Message = Request | Response


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message in flight between two nodes.

    Requests the core sends carry a ``correlation_id`` it chose; the driver delivers the answer
    back as an envelope with the same id. Requests the driver hands in carry an id the driver
    chose; the core answers with an envelope carrying that id, addressed to ``source``.
    """

    source: int
    destination: int
    correlation_id: int
    message: Message = field(repr=True)

    @property
    def is_request(self) -> bool:
        return isinstance(
            self.message,
            VoteRequest
            | BeginQuorumEpochRequest
            | EndQuorumEpochRequest
            | FetchRequest
            | DescribeQuorumRequest,
        )
