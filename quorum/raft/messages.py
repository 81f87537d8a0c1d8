"""The messages the Raft core consumes and produces (KIP-595 shapes, keyed by topic id).

These are the core's own frozen dataclasses; ``quorum/wire/raft.py`` is the only place that
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
from quorum.metadata.records import BrokerEndpoint


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
    # KIP-853: the directory ids of the candidate and of the addressee (None: not known, as in
    # a static quorum). An addressee whose own directory differs answers INVALID_VOTER_KEY.
    candidate_directory_id: Uuid | None = None
    voter_directory_id: Uuid | None = None


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int  # the responder's current epoch
    vote_granted: bool
    pre_vote: bool = False
    # A person's explanation of a refusal, when there is more to say than the code (an epoch
    # jump, quorum.raft.epoch_bounds); the wire's error_message. Not part of equality.
    error_message: str = field(default="", compare=False)


# ----- BeginQuorumEpoch / EndQuorumEpoch --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    header: RequestHeader
    leader_id: int
    leader_epoch: int
    voter_id: int
    voter_directory_id: Uuid | None = None  # KIP-853, as in VoteRequest


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int
    # As VoteResponse's.
    error_message: str = field(default="", compare=False)


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
    # As VoteResponse's.
    error_message: str = field(default="", compare=False)


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
    # KIP-853: the directory id of the fetcher's metadata log. A voter's id fetching from
    # another directory is an observer (a wiped disk is not the voter it replaced).
    replica_directory_id: Uuid | None = None


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
    # As VoteResponse's.
    error_message: str = field(default="", compare=False)


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
    directory_id: Uuid | None = None  # KIP-853; None when unknown
    endpoints: tuple[BrokerEndpoint, ...] = ()  # a voter's, from the voter set


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error_code: ErrorCode
    leader_id: int | None
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()


# ----- voter changes (KIP-853) -------------------------------------------------------------------
#
# Handled by the leader only, one uncommitted change at a time; each is answered once the new
# VotersRecord commits (or fails). Kafka's AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter.


@dataclass(frozen=True, slots=True)
class AddRaftVoterRequest:
    cluster_id: str
    voter_id: int
    voter_directory_id: Uuid
    endpoints: tuple[BrokerEndpoint, ...]  # where the new voter serves Raft RPCs
    timeout_ms: int  # how long the leader waits for it to catch up and for the commit


@dataclass(frozen=True, slots=True)
class RemoveRaftVoterRequest:
    cluster_id: str
    voter_id: int
    voter_directory_id: Uuid


@dataclass(frozen=True, slots=True)
class UpdateRaftVoterRequest:
    """A voter tells the leader its current endpoints and kraft.version range."""

    cluster_id: str
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: Uuid
    endpoints: tuple[BrokerEndpoint, ...]
    kraft_version_min: int
    kraft_version_max: int


@dataclass(frozen=True, slots=True)
class VoterChangeResponse:
    """The answer to AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter: Kafka's error code with
    a message a person can act on, and the leader this node knows (for NOT_LEADER_OR_FOLLOWER).
    ``high_watermark`` is the offset at which the change committed (0 when it did not)."""

    error_code: ErrorCode
    error_message: str
    leader_id: int | None
    leader_epoch: int
    high_watermark: int = 0


VoterChangeRequest = AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateRaftVoterRequest


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
    | AddRaftVoterRequest
    | RemoveRaftVoterRequest
    | UpdateRaftVoterRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | DescribeQuorumResponse
    | VoterChangeResponse
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
            | DescribeQuorumRequest
            | AddRaftVoterRequest
            | RemoveRaftVoterRequest
            | UpdateRaftVoterRequest,
        )
