"""What makes a peer's request or response unusable, as pure functions of the message and the
node's context: they read, never change (docs/architecture.md#hostile-peers). Each returns
what is wrong ("" or None when nothing is), and the handler answers with it.

Requests are checked in Kafka's order: the header (cluster id, topic id, partition) first, then
the voter set, then the fields; an epoch older than this node's is not hostile and is answered
FENCED_LEADER_EPOCH by the handler itself, without a log line.
"""

from __future__ import annotations

from quorum import limits
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.raft.context import RaftContext
from quorum.raft.leader import LeaderState
from quorum.raft.messages import (
    AddRaftVoterRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    Message,
    RemoveRaftVoterRequest,
    RequestHeader,
    UpdateRaftVoterRequest,
    VoteRequest,
)
from quorum.raft.voters import ReplicaKey


def header_error(
    header: RequestHeader, cluster_id: str, metadata_topic_id: Uuid | None
) -> ErrorCode:
    """The header of every Raft request: this cluster, the metadata topic (by its id, or the
    sentinel every node accepts), partition 0."""
    if not header.cluster_id or header.cluster_id != cluster_id:
        return ErrorCode.INCONSISTENT_CLUSTER_ID
    if header.topic_id not in (METADATA_TOPIC_ID, metadata_topic_id):
        return ErrorCode.UNKNOWN_TOPIC_ID
    if header.partition != 0:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def epoch_acceptable(epoch: int, current_epoch: int) -> bool:
    """Whether a peer's request may move a node at ``current_epoch`` to ``epoch``: any epoch up
    to ``EPOCH_MAX``, above it only the node's epoch or the next one, never past ``INT32_MAX``
    (docs/architecture.md#hostile-peers). One forged message cannot strand the quorum at an
    epoch with no room left to elect."""
    return epoch <= limits.INT32_MAX and (epoch <= limits.EPOCH_MAX or epoch <= current_epoch + 1)


def vote_request_problem(request: VoteRequest, node_id: int, current_epoch: int) -> str:
    """What makes a Vote request invalid ("" if nothing)."""
    if request.candidate_id == node_id:
        return "names this node as the candidate"
    if request.candidate_epoch < 0 or request.last_offset < 0 or request.last_offset_epoch < 0:
        return "negative epoch or offset"
    if request.last_offset_epoch > request.candidate_epoch:
        return "last offset epoch above the candidate epoch"
    if request.candidate_epoch > limits.INT32_MAX or not (
        request.pre_vote or epoch_acceptable(request.candidate_epoch, current_epoch)
    ):
        # A pre-vote moves no epoch: it only needs to be representable.
        return f"candidate epoch {request.candidate_epoch} beyond the epoch limit"
    return ""


def addressee_problem(
    ctx: RaftContext, voter_id: int, voter_directory_id: Uuid | None
) -> tuple[ErrorCode, str]:
    """Whether this node may act as the voter a Vote or BeginQuorumEpoch is addressed to.
    A static quorum: only its voters. A dynamic one (KIP-853): any controller, voter or
    not, as its own voter set may be stale, as long as the request names this replica:
    the same node id and, when both are known, the same directory (INVALID_VOTER_KEY)."""
    if voter_id != ctx.node_id:
        return ErrorCode.INCONSISTENT_VOTER_SET, f"addressed to node {voter_id}"
    if not ctx.is_dynamic:
        if not ctx.is_voter:
            return ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a voter"
        return ErrorCode.NONE, ""
    if not ctx.persists_election:
        return ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a controller"
    mine = ctx.local_key.directory_id
    if voter_directory_id is not None and mine is not None and voter_directory_id != mine:
        return (
            ErrorCode.INVALID_VOTER_KEY,
            f"addressed to voter {voter_id}:{voter_directory_id}, but this node's "
            f"directory id is {mine} (its disk was formatted again)",
        )
    return ErrorCode.NONE, ""


def candidate_problem(ctx: RaftContext, request: VoteRequest) -> tuple[ErrorCode, str]:
    """Whether the candidate may ask this node. A static quorum: only its voters. A dynamic
    one: a voter of this node's set, or a replica whose log is strictly ahead of this
    node's (it may hold a voter set this node has not fetched yet, KIP-853); a removed
    controller, or a wiped one under a new directory id, is refused."""
    key = ReplicaKey(request.candidate_id, request.candidate_directory_id)
    if ctx.voter_set.is_voter(key):
        return ErrorCode.NONE, ""
    log = ctx.log
    if ctx.is_dynamic and (request.last_offset_epoch, request.last_offset) > (
        log.last_fetched_epoch,
        log.log_end_offset,
    ):
        return ErrorCode.NONE, ""
    return (
        ErrorCode.INCONSISTENT_VOTER_SET,
        f"candidate {key} is not a voter of {ctx.voter_set!r}",
    )


def refuses_leader_outside_voters(ctx: RaftContext, leader_id: int) -> bool:
    """Whether a BeginQuorumEpoch or EndQuorumEpoch from ``leader_id`` is refused because
    the leader is not in this node's voter set: always in a static quorum; in a dynamic one
    (KIP-853) whenever this node is itself a voter of its set. The exception KIP-853 needs:
    a node outside its own voter set (an observer, a controller being added) may hold a set
    older than the leader's, the one that names both of them, and follows such a leader. A
    voter whose set is stale learns the new leader from the other voters' answers (Fetch,
    Vote), never from the leader's own claim
    (docs/security.md#a-leader-outside-the-voter-set)."""
    return leader_id not in ctx.voters and (not ctx.is_dynamic or ctx.is_voter)


def leader_claim_problem(ctx: RaftContext, leader_id: int, leader_epoch: int) -> str:
    """What is wrong with a peer's claim that ``leader_id`` leads ``leader_epoch`` ("" if
    nothing); the voter-set check comes first."""
    if leader_epoch < 0 or leader_id < 0:
        return "negative leader id or epoch"
    if leader_id == ctx.node_id:
        return "names this node as the leader: only this node can say so"
    if not epoch_acceptable(leader_epoch, ctx.epoch):
        return f"leader epoch {leader_epoch} beyond the epoch limit"
    known = ctx.known_leader()
    if leader_epoch == ctx.epoch and known is not None and known != leader_id:
        return f"epoch {leader_epoch} is led by node {known} (one leader per epoch)"
    return ""


def end_quorum_epoch_problem(
    ctx: RaftContext, request: EndQuorumEpochRequest
) -> tuple[ErrorCode, str]:
    """Why an EndQuorumEpoch with a valid header is refused: INCONSISTENT_VOTER_SET (leader
    not a voter, or this node not one), INVALID_REQUEST (as for BeginQuorumEpoch, or successors
    that are not distinct other voters)."""
    dynamic = ctx.is_dynamic
    if not dynamic and (request.leader_id not in ctx.voters or not ctx.is_voter):
        return ErrorCode.INCONSISTENT_VOTER_SET, "leader or this node not a voter"
    if dynamic and not ctx.persists_election:
        return ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a controller"
    if refuses_leader_outside_voters(ctx, request.leader_id):
        return ErrorCode.INCONSISTENT_VOTER_SET, "leader not a voter"
    reason = leader_claim_problem(ctx, request.leader_id, request.leader_epoch)
    successors = request.preferred_successors
    # A dynamic quorum's successors may include voters this node does not know yet.
    known = ctx.voters - {request.leader_id} if not dynamic else None
    if not reason and (
        len(successors) > max(len(ctx.voters), limits.PREFERRED_SUCCESSORS_MAX)
        or len(set(successors)) != len(successors)
        or request.leader_id in successors
        or (known is not None and not set(successors) <= known)
    ):
        reason = "preferred successors are not distinct other voters"
    return (ErrorCode.INVALID_REQUEST, reason) if reason else (ErrorCode.NONE, "")


def fetch_request_problem(request: FetchRequest, node_id: int) -> str:
    """What makes a Fetch request invalid ("" if nothing)."""
    if (
        request.fetch_offset < 0
        or request.last_fetched_epoch < 0
        or request.max_wait_ms < 0
        or request.current_leader_epoch < 0
        or request.high_watermark < 0
        or request.read_fence < 0
    ):
        return "negative offset, epoch or wait"
    if request.replica_id < 0:
        return f"replica id {request.replica_id} is not a node id"
    if request.replica_id == node_id:
        return "claims to come from this node"
    if request.last_fetched_epoch > request.current_leader_epoch:
        return "last fetched epoch above the fetcher's epoch"
    if request.high_watermark > request.fetch_offset:
        return "high watermark above the fetch offset (the fetcher's log end)"
    return ""


def response_problem(ctx: RaftContext, message: Message, source: int) -> str:
    """What makes a response unusable whatever it answers ("" if nothing): a leader outside
    the voter set, a leader of our own epoch other than the one we know, negative offsets.

    ``EPOCH_MAX`` binds requests, which anyone can send. A response comes back on this
    node's own connection to a configured voter, answering a request of its own, and may
    carry any epoch a voter reached: that is how a node left behind above ``EPOCH_MAX``
    (where requests move it one epoch at a time) catches up."""
    epoch: int = getattr(message, "leader_epoch", 0)
    leader_id: int | None = getattr(message, "leader_id", None)
    if epoch < 0 and not isinstance(message, DescribeQuorumResponse):
        return f"negative leader epoch {epoch}"
    if epoch > limits.INT32_MAX:
        return f"leader epoch {epoch} beyond INT32_MAX"
    if leader_id is not None and leader_id not in ctx.voters and not ctx.is_dynamic:
        # A dynamic quorum's leader may be outside this node's voter set: it may have been
        # added by a VotersRecord not fetched yet, or be leaving (removed, not committed).
        return f"leader {leader_id} is not a voter"
    known = ctx.known_leader()
    if (
        epoch == ctx.epoch
        and leader_id is not None
        and known is not None
        # unless the leader we knew denies it: see RaftNode.observe_epoch
        and known not in (leader_id, source)
    ):
        return f"names node {leader_id} as leader of epoch {epoch}, led by node {known}"
    if isinstance(message, FetchResponse):
        if message.high_watermark < 0 or message.log_start_offset < 0:
            return "negative high watermark or log start offset"
        diverging = message.diverging_epoch
        if diverging is not None and (diverging.epoch < 0 or diverging.end_offset < 0):
            return "negative diverging epoch or end offset"
        snapshot = message.snapshot_id
        if snapshot is not None and (snapshot.epoch < 0 or snapshot.end_offset < 0):
            return "negative snapshot id"
    return ""


def voter_change_problem(
    ctx: RaftContext,
    request: AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateRaftVoterRequest,
    leader: LeaderState | None,
) -> tuple[ErrorCode, str] | None:
    """Why a voter change (KIP-853) cannot start now, in Kafka's order of checks, or None."""
    if not request.cluster_id or request.cluster_id != ctx.cluster_id:
        return ErrorCode.INCONSISTENT_CLUSTER_ID, "the request names another cluster"
    epoch = ctx.epoch
    if leader is None:
        return (
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"node {ctx.node_id} is not the leader (leader: {ctx.leader_id}, epoch "
            f"{epoch}); send voter changes to the leader",
        )
    if isinstance(request, UpdateRaftVoterRequest):
        if request.current_leader_epoch < epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, f"epoch {epoch} is current"
        if request.current_leader_epoch > epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {epoch} is current"
    unsafe = ctx.config.unsafe_allow_concurrent_voter_changes
    if leader.voter_change is not None and not unsafe:
        return (
            ErrorCode.REQUEST_TIMED_OUT,
            f"the leader is still working on the voter change "
            f"{leader.voter_change.describe()}; one change at a time: retry once it is done",
        )
    high_watermark = ctx.log.high_watermark
    if high_watermark <= leader.epoch_start_offset:
        return (
            ErrorCode.REQUEST_TIMED_OUT,
            f"leader {ctx.node_id} has not committed its epoch {epoch} yet (fencing "
            "the changes of earlier leaders); retry in a moment",
        )
    if not ctx.is_dynamic:
        return (
            ErrorCode.UNSUPPORTED_VERSION,
            f"this quorum's voter set is static (kraft.version "
            f"{ctx.voter_history.kraft_version()}: controller.quorum.voters); voters can only "
            "be added or removed in a quorum formatted with --standalone or "
            "--initial-controllers (kraft.version 1)",
        )
    latest = ctx.voter_history.latest_offset()
    if latest is not None and latest >= high_watermark and not unsafe:
        return (
            ErrorCode.REQUEST_TIMED_OUT,
            f"the voter set written at offset {latest} is not committed yet (high "
            f"watermark {high_watermark}); one change at a time: retry shortly",
        )
    key = ReplicaKey(request.voter_id, request.voter_directory_id)
    if request.voter_id < 0 or request.voter_directory_id == ZERO_UUID:
        return (
            ErrorCode.INVALID_REQUEST,
            f"voter {key}: a voter needs a node id >= 0 and its directory id (the "
            "directory.id in its meta.properties)",
        )
    voter_set = ctx.voter_set
    voters = [str(k) for k in voter_set.voter_keys()]
    match request:
        case AddRaftVoterRequest():
            if request.voter_id in ctx.voters:
                return (
                    ErrorCode.DUPLICATE_VOTER,
                    f"node {request.voter_id} is already a voter ({voters}); to replace "
                    "its directory, remove the old voter first",
                )
            if not request.endpoints:
                return ErrorCode.INVALID_REQUEST, f"voter {key}: no endpoint given"
        case RemoveRaftVoterRequest():
            current = voter_set.voter(request.voter_id)
            if current is None or current.key != key:
                return ErrorCode.VOTER_NOT_FOUND, f"{key} is not a voter; the voters are {voters}"
            if len(voter_set) == 1:
                return ErrorCode.INVALID_REQUEST, f"{key} is the last voter"
        case UpdateRaftVoterRequest():
            current = voter_set.voter(request.voter_id)
            if current is None or current.key != key:
                return ErrorCode.VOTER_NOT_FOUND, f"{key} is not a voter; the voters are {voters}"
            if not request.endpoints:
                return ErrorCode.INVALID_REQUEST, f"voter {key}: no endpoint given"
    return None
