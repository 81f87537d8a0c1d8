"""Elections: the Vote RPC with KIP-996's pre-vote, and the timers of prospective and candidate
voters (docs/architecture.md#epochs-and-elections, #pre-vote).

A voter whose election or fetch timeout fires becomes Prospective and asks for pre-votes for
epoch + 1 without changing anything durable; only a pre-vote majority makes it a Candidate,
which raises the epoch, votes for itself and asks for votes. A voter grants one vote per epoch
to a candidate whose log is at least as up to date as its own, and neither a pre-vote nor a
vote while it hears a live leader (leader stickiness, docs/architecture.md#hostile-peers).
"""

from __future__ import annotations

from collections.abc import Sequence

from quorum import limits
from quorum.errors import ErrorCode
from quorum.raft.context import RaftContext, Transitions
from quorum.raft.inflight import InflightRequest, RequestKind
from quorum.raft.leader import LeaderState
from quorum.raft.majority import VoteResult, vote_result
from quorum.raft.messages import Envelope, VoteRequest, VoteResponse
from quorum.raft.quorum_epoch import maybe_voter_ahead
from quorum.raft.state import CandidateState, FollowerState, ProspectiveState, UnattachedState
from quorum.raft.validation import addressee_problem, candidate_problem, vote_request_problem


def has_live_leader(ctx: RaftContext) -> bool:
    """Whether this node leads, or heard its leader within the fetch timeout (and its
    connection was not refused since): then it grants no pre-vote and no vote."""
    state = ctx.state
    if isinstance(state, LeaderState):
        return True
    return isinstance(state, FollowerState) and state.has_live_leader(
        ctx.now_ms, ctx.config.fetch_timeout_ms
    )


def campaigns_first(ctx: RaftContext, request: VoteRequest) -> bool:
    """Whether this voter, in the first round of its own pre-vote, refuses a pre-vote to
    a candidate of a higher id whose log ends where its own does (the request was found
    up to date). Two voters that lost the leader together (its process died: both
    connections reset at once) start their pre-votes within milliseconds; each granting
    the other's made both candidates of one epoch, and the split vote cost an election
    timeout (about 1.3 s). So the lower id goes first: the higher grants it. Only in
    the first round: once that is lost (the lower id cannot reach a majority, say over a
    one-way link), this voter grants as before, so the higher id is never kept from
    winning for long. Safety does not rest on pre-votes; the simulator checks liveness."""
    state = ctx.state
    return (
        ctx.config.pre_vote_lower_id_first
        and isinstance(state, ProspectiveState)
        and state.retries == 1
        and state.backoff_until_ms is None
        and request.candidate_id > ctx.node_id
        and (request.last_offset_epoch, request.last_offset)
        == (ctx.log.last_fetched_epoch, ctx.log.log_end_offset)
    )


class Voting:
    """The Vote RPC and the prospective and candidate states' timers."""

    __slots__ = ("_ctx", "_transitions")

    def __init__(self, ctx: RaftContext, transitions: Transitions) -> None:
        self._ctx = ctx
        self._transitions = transitions

    # ----- requests -------------------------------------------------------------------------

    def _vote_response(self, granted: bool, error: ErrorCode, pre_vote: bool) -> VoteResponse:
        ctx = self._ctx
        return VoteResponse(error, ctx.leader_id, ctx.epoch, granted, pre_vote)

    def handle_vote_request(
        self, envelope: Envelope, request: VoteRequest, header_error: ErrorCode
    ) -> None:
        """Errors: INCONSISTENT_CLUSTER_ID, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
        INCONSISTENT_VOTER_SET (candidate or addressee not a voter here), INVALID_REQUEST
        (negative fields, this node named as the candidate, a last offset epoch above the
        candidate epoch, a candidate epoch this node may not move to), FENCED_LEADER_EPOCH
        (candidate epoch below ours). A voter with a live leader rejects a Vote for a higher
        epoch without error and without moving (leader stickiness)."""
        ctx = self._ctx
        error = header_error
        reason = ""
        if error is ErrorCode.NONE:
            error, reason = addressee_problem(ctx, request.voter_id, request.voter_directory_id)
        if error is ErrorCode.NONE:
            error, reason = candidate_problem(ctx, request)
        if error is ErrorCode.NONE:
            reason = vote_request_problem(request, ctx.node_id, ctx.epoch)
            if reason:
                error = ErrorCode.INVALID_REQUEST
        if error is ErrorCode.NONE and request.candidate_epoch < ctx.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH  # stale, not hostile: no log line
        if error is not ErrorCode.NONE:
            if reason:
                ctx.reject(envelope, error, reason)
            ctx.reply(envelope, self._vote_response(False, error, request.pre_vote))
            return
        ours = (ctx.log.last_fetched_epoch, ctx.log.log_end_offset)
        up_to_date = (request.last_offset_epoch, request.last_offset) >= ours
        if request.pre_vote:
            maybe_voter_ahead(ctx, request.candidate_id, request.candidate_epoch - 1)
            granted = up_to_date and not has_live_leader(ctx) and not campaigns_first(ctx, request)
            if granted:
                ctx.emit("pre_vote_granted", candidate_id=request.candidate_id)
            ctx.reply(envelope, self._vote_response(granted, ErrorCode.NONE, True))
            return
        if request.candidate_epoch > ctx.epoch and has_live_leader(ctx):
            maybe_voter_ahead(ctx, request.candidate_id, request.candidate_epoch)
            # Leader stickiness (etcd's check-quorum lease, KIP-996's rule for pre-votes applied
            # to votes): a voter that heard its leader within the fetch timeout neither bumps
            # its epoch nor votes. A real candidate won a pre-vote majority of voters without a
            # live leader, so it does not need this one; a forged Vote cannot depose a healthy
            # leader. A leader that resigned (EndQuorumEpoch) does not count as live.
            ctx.emit(
                "vote_rejected_live_leader",
                candidate_id=request.candidate_id,
                candidate_epoch=request.candidate_epoch,
            )
            ctx.reply(envelope, self._vote_response(False, ErrorCode.NONE, False))
            return
        if request.candidate_epoch > ctx.epoch:
            self._transitions.transition_to_unattached(
                request.candidate_epoch, "vote request with higher epoch"
            )
        state = ctx.state
        granted = False
        if isinstance(state, UnattachedState | ProspectiveState) and state.leader_id is None:
            if state.voted_id == request.candidate_id:
                # Checked again: the vote may have been cast for a forged request in this
                # candidate's name that claimed a longer log (no authentication yet).
                granted = up_to_date
            elif state.voted_id is None and up_to_date:
                granted = True
                self._transitions.transition_to_unattached(
                    state.epoch, f"voted for {request.candidate_id}", request.candidate_id
                )
        if granted:
            ctx.emit("vote_granted", candidate_id=request.candidate_id)
        ctx.reply(envelope, self._vote_response(granted, ErrorCode.NONE, False))

    # ----- responses ------------------------------------------------------------------------

    def election_for(self, kind: RequestKind) -> ProspectiveState | CandidateState | None:
        """The state a (pre-)vote request of ``kind`` was sent for, if the node is still in
        that role: pre-votes belong to a prospective node, votes to a candidate."""
        state = self._ctx.state
        if kind is RequestKind.PRE_VOTE:
            return state if isinstance(state, ProspectiveState) else None
        if kind is RequestKind.VOTE:
            return state if isinstance(state, CandidateState) else None
        return None

    def handle_vote_response(
        self, envelope: Envelope, response: VoteResponse, inflight: InflightRequest
    ) -> None:
        if response.error_code not in (ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH):
            return
        if self._transitions.observe_epoch(
            response.leader_epoch, response.leader_id, "vote response", envelope.source
        ):
            return
        election = self.election_for(inflight.kind)
        if election is None:
            return
        if response.error_code is ErrorCode.NONE and response.vote_granted:
            election.granted.add(envelope.source)
        else:
            election.rejected.add(envelope.source)
            if (
                isinstance(election, ProspectiveState)
                and response.leader_id is not None
                and response.leader_id != self._ctx.node_id
                and response.leader_epoch == election.epoch
            ):
                election.leader_hint = response.leader_id
        if isinstance(election, ProspectiveState):
            self.maybe_finish_pre_vote(election)
        else:
            self.maybe_finish_election(election)

    def vote_request_failed(self, inflight: InflightRequest) -> None:
        """A (pre-)vote request of the current epoch got no answer: ask that voter again after
        the retry backoff, unless it answered meanwhile."""
        election = self.election_for(inflight.kind)
        if election is not None:
            voter = inflight.destination
            if voter not in election.granted and voter not in election.rejected:
                election.retry_at_ms[voter] = self._ctx.now_ms + self._ctx.config.retry_backoff_ms

    def _tally(self, granted: set[int], rejected: set[int]) -> VoteResult:
        """The outcome of a (pre-)vote over the voter set in force now (it may have changed
        since the requests left: only its members count)."""
        voters = self._ctx.voters
        return vote_result(len(voters), granted & voters, rejected & voters)

    def maybe_finish_pre_vote(self, state: ProspectiveState) -> None:
        result = self._tally(state.granted, state.rejected)
        if result is VoteResult.WON:
            self._transitions.transition_to_candidate("pre-vote won", state.retries)
        elif state.leader_hint is not None and not (
            state.leader_resigned and state.leader_hint == state.leader_id
        ):
            # A voter still hears a leader of our epoch: go back and fetch from it (KIP-996: a
            # prospective voter that learns of the epoch's leader follows it). Not only once
            # the pre-vote is lost: a node whose own link to the leader is down would wait
            # forever for that leader's answer, and meanwhile, neither following nor a
            # candidate, grant pre-votes that depose a live leader.
            self._transitions.transition_to_follower(
                state.epoch, state.leader_hint, "pre-vote rejected"
            )
        elif result is VoteResult.LOST and state.backoff_until_ms is None:
            state.backoff_until_ms = self._ctx.now_ms + self._ctx.backoff_ms(state.retries)

    def maybe_finish_election(self, state: CandidateState) -> None:
        result = self._tally(state.granted, state.rejected)
        if result is VoteResult.WON:
            self._transitions.transition_to_leader(state)
        elif result is VoteResult.LOST and state.backoff_until_ms is None:
            state.backoff_until_ms = self._ctx.now_ms + self._ctx.backoff_ms(state.retries)

    # ----- sending and timers ---------------------------------------------------------------

    def request_pre_votes(self, state: ProspectiveState) -> None:
        ctx = self._ctx
        state.granted.add(ctx.node_id)
        self._send_vote_requests(sorted(ctx.voters - {ctx.node_id}), pre_vote=True)
        self.maybe_finish_pre_vote(state)

    def request_votes(self, state: CandidateState) -> None:
        ctx = self._ctx
        self._send_vote_requests(sorted(ctx.voters - {ctx.node_id}), pre_vote=False)
        self.maybe_finish_election(state)

    def _send_vote_requests(self, voters: Sequence[int], *, pre_vote: bool) -> None:
        ctx = self._ctx
        candidate_epoch = ctx.epoch + 1 if pre_vote else ctx.epoch
        if candidate_epoch > limits.INT32_MAX:
            ctx.emit("epoch_exhausted", reason="no epoch left to run an election in")
            return
        for voter in voters:
            ctx.send(
                voter,
                VoteRequest(
                    ctx.header(),
                    candidate_epoch,
                    ctx.node_id,
                    ctx.log.last_fetched_epoch,
                    ctx.log.log_end_offset,
                    pre_vote,
                    voter,
                    ctx.local_key.directory_id,
                    ctx.voter_set.directory_id(voter),
                ),
                RequestKind.PRE_VOTE if pre_vote else RequestKind.VOTE,
            )

    def _retry_vote_requests(
        self, state: ProspectiveState | CandidateState, *, pre_vote: bool
    ) -> None:
        due = sorted(v for v, at in state.retry_at_ms.items() if at <= self._ctx.now_ms)
        for voter in due:
            del state.retry_at_ms[voter]
        if due:
            self._send_vote_requests(due, pre_vote=pre_vote)

    def poll_candidate(self, state: CandidateState) -> None:
        now = self._ctx.now_ms
        if state.backoff_until_ms is not None:
            if now >= state.backoff_until_ms:
                self._transitions.transition_to_prospective(
                    "election lost", retries=state.retries + 1
                )
            return
        if now >= state.election_deadline_ms:
            state.backoff_until_ms = now + self._ctx.backoff_ms(state.retries)
            return
        self._retry_vote_requests(state, pre_vote=False)

    def poll_prospective(self, state: ProspectiveState) -> None:
        ctx = self._ctx
        now = ctx.now_ms
        if state.backoff_until_ms is not None:
            if now >= state.backoff_until_ms:
                state.start_next_round(ctx.election_deadline(now))
                self.request_pre_votes(state)
            return
        if now >= state.election_deadline_ms:
            state.backoff_until_ms = now + ctx.backoff_ms(state.retries)
            return
        self._retry_vote_requests(state, pre_vote=True)

    @staticmethod
    def timers_ms(state: ProspectiveState | CandidateState) -> list[int]:
        """When a prospective or candidate voter must poll next: its backoff, or its election
        deadline and the retries of failed requests."""
        if state.backoff_until_ms is not None:
            return [state.backoff_until_ms]
        return [state.election_deadline_ms, *state.retry_at_ms.values()]
