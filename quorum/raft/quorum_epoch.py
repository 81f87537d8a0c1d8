"""A leader's announcements: BeginQuorumEpoch ("I lead epoch E", re-sent until every voter
acknowledged) and EndQuorumEpoch (a resigning leader's hand-over, with preferred successors),
and the Resigned state's timer (docs/architecture.md#check-quorum-and-resignation).
"""

from __future__ import annotations

from quorum.errors import ErrorCode
from quorum.raft.context import RaftContext, Transitions
from quorum.raft.inflight import RequestKind
from quorum.raft.leader import LeaderState
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
)
from quorum.raft.state import FollowerState, ResignedState
from quorum.raft.validation import (
    addressee_problem,
    end_quorum_epoch_problem,
    leader_claim_problem,
    refuses_leader_outside_voters,
)


def maybe_voter_ahead(ctx: RaftContext, voter_id: int, voter_epoch: int) -> None:
    """A voter's request says it is in an epoch above the one this node leads. Sticky
    leaders (see ``Voting.handle_vote_request``) would leave such a voter out for good: it
    cannot win (the others hear a live leader) nor follow an older epoch. So the leader asks it
    again, with its next BeginQuorumEpoch resend; a voter really ahead answers
    FENCED_LEADER_EPOCH with its epoch and the leader moves up (etcd lets such a node depose
    the leader the same way). A forged request costs one BeginQuorumEpoch to the real voter
    per resend interval, which it simply acknowledges."""
    leader = ctx.state
    if isinstance(leader, LeaderState) and voter_epoch > leader.epoch and voter_id in leader.voters:
        leader.acknowledged.discard(voter_id)


class QuorumEpoch:
    """BeginQuorumEpoch and EndQuorumEpoch, both sides."""

    __slots__ = ("_ctx", "_transitions")

    def __init__(self, ctx: RaftContext, transitions: Transitions) -> None:
        self._ctx = ctx
        self._transitions = transitions

    # ----- BeginQuorumEpoch -----------------------------------------------------------------

    def send_begin_quorum_epochs(self, leader: LeaderState) -> None:
        """Tell the voters that have not acknowledged this epoch yet (every fetch timeout / 2)."""
        ctx = self._ctx
        if ctx.now_ms < leader.begin_quorum_epoch_resend_at_ms:
            return
        for voter in leader.nonacknowledging_voters():
            ctx.send(
                voter,
                BeginQuorumEpochRequest(
                    ctx.header(),
                    ctx.node_id,
                    leader.epoch,
                    voter,
                    ctx.voter_set.directory_id(voter),
                ),
                RequestKind.BEGIN_QUORUM_EPOCH,
            )
        leader.begin_quorum_epoch_resend_at_ms = (
            ctx.now_ms + ctx.config.begin_quorum_epoch_resend_ms
        )

    def handle_begin_quorum_epoch_request(
        self, envelope: Envelope, request: BeginQuorumEpochRequest, header_error: ErrorCode
    ) -> None:
        """Errors: header errors, INCONSISTENT_VOTER_SET (leader or addressee not a voter),
        INVALID_REQUEST (negative fields, an epoch beyond the epoch limit, this node named as
        leader, or another leader than the one this node knows for the current epoch),
        FENCED_LEADER_EPOCH (a leader of an older epoch)."""
        ctx = self._ctx
        error = header_error
        reason = ""
        if error is ErrorCode.NONE:
            error, reason = addressee_problem(ctx, request.voter_id, request.voter_directory_id)
        if error is ErrorCode.NONE and refuses_leader_outside_voters(ctx, request.leader_id):
            error, reason = ErrorCode.INCONSISTENT_VOTER_SET, "leader not a voter"
        if error is ErrorCode.NONE:
            reason = leader_claim_problem(ctx, request.leader_id, request.leader_epoch)
            if reason:
                error = ErrorCode.INVALID_REQUEST
        if error is ErrorCode.NONE and request.leader_epoch < ctx.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH  # stale, not hostile: no log line
        if reason:
            ctx.reject(envelope, error, reason)
        if error is ErrorCode.NONE:
            state = ctx.state
            if request.leader_epoch > state.epoch or not (
                isinstance(state, FollowerState) and state.leader_id == request.leader_id
            ):
                self._transitions.transition_to_follower(
                    request.leader_epoch, request.leader_id, "begin quorum epoch"
                )
        ctx.reply(envelope, BeginQuorumEpochResponse(error, ctx.leader_id, ctx.epoch))

    def handle_begin_quorum_epoch_response(
        self, envelope: Envelope, response: BeginQuorumEpochResponse
    ) -> None:
        if response.error_code not in (ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH):
            return
        if self._transitions.observe_epoch(
            response.leader_epoch, response.leader_id, "begin epoch response", envelope.source
        ):
            return
        leader = self._ctx.state
        if isinstance(leader, LeaderState) and response.error_code is ErrorCode.NONE:
            leader.acknowledged.add(envelope.source)

    # ----- EndQuorumEpoch -------------------------------------------------------------------

    def send_end_quorum_epoch(self, state: ResignedState) -> None:
        ctx = self._ctx
        for voter in sorted(state.unacknowledged):
            ctx.send(
                voter,
                EndQuorumEpochRequest(
                    ctx.header(), ctx.node_id, state.epoch, state.preferred_successors
                ),
                RequestKind.END_QUORUM_EPOCH,
            )
        state.end_quorum_epoch_resend_at_ms = ctx.now_ms + ctx.config.retry_backoff_ms * 10

    def handle_end_quorum_epoch_request(
        self, envelope: Envelope, request: EndQuorumEpochRequest, header_error: ErrorCode
    ) -> None:
        """The leader of ``leader_epoch`` resigned. A follower of it stops trusting it (so it
        grants pre-votes) and the first preferred successor starts an election at once; the
        others wait a backoff that grows with their place in the list.

        Errors: header errors, INCONSISTENT_VOTER_SET (leader not a voter, or this node is
        not one), INVALID_REQUEST (as for BeginQuorumEpoch, or successors that are not
        distinct other voters), FENCED_LEADER_EPOCH (an older epoch)."""
        ctx = self._ctx
        error = header_error
        reason = ""
        if error is ErrorCode.NONE:
            error, reason = end_quorum_epoch_problem(ctx, request)
        if error is ErrorCode.NONE and request.leader_epoch < ctx.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH  # stale, not hostile: no log line
        if reason:
            ctx.reject(envelope, error, reason)
        if error is ErrorCode.NONE:
            self._transitions.observe_epoch(
                request.leader_epoch, request.leader_id, "end quorum epoch"
            )
            follower = ctx.state
            if isinstance(follower, FollowerState) and follower.leader_id == request.leader_id:
                follower.last_fetch_success_ms = None
                follower.leader_resigned = True
                if ctx.node_id in request.preferred_successors:
                    position = request.preferred_successors.index(ctx.node_id)
                    delay = 0 if position == 0 else ctx.backoff_ms(position)
                    follower.fetch_deadline_ms = min(follower.fetch_deadline_ms, ctx.now_ms + delay)
            ctx.emit("leader_resigned", leader_id=request.leader_id)
        ctx.reply(envelope, EndQuorumEpochResponse(error, ctx.leader_id, ctx.epoch))

    def handle_end_quorum_epoch_response(
        self, envelope: Envelope, response: EndQuorumEpochResponse
    ) -> None:
        if self._transitions.observe_epoch(
            response.leader_epoch, response.leader_id, "end epoch response", envelope.source
        ):
            return
        resigned = self._ctx.state
        if isinstance(resigned, ResignedState):
            resigned.unacknowledged.discard(envelope.source)

    def poll_resigned(self, state: ResignedState) -> None:
        ctx = self._ctx
        now = ctx.now_ms
        if now >= state.election_deadline_ms:
            if ctx.is_voter:
                self._transitions.transition_to_prospective("resigned and no successor seen")
            else:
                # Removed from the voter set (KIP-853): look for the leader as an observer.
                self._transitions.transition_to_unattached(
                    state.epoch, "resigned, not a voter", ctx.node_id
                )
            return
        if state.unacknowledged and now >= state.end_quorum_epoch_resend_at_ms:
            self.send_end_quorum_epoch(state)
