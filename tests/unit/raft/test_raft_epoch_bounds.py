"""Issue 28: one voter's message moves no node's epoch more than ``EPOCH_JUMP_MAX`` above the
highest epoch it has seen (quorum/raft/epoch_bounds.py), and a node left far behind still
rejoins once a majority of voters answer it with the higher epoch. Driven through step/poll."""

from __future__ import annotations

import pytest

from quorum import limits
from quorum.errors import ErrorCode
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
from quorum.raft.epoch_bounds import EpochBounds
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.node import Ready
from quorum.raft.state import LeaderState, ProspectiveState
from quorum.wire.raft import response_to_proto
from tests.unit.raft.test_raft_hostile import follower_of_1
from tests.unit.raft.test_raft_node import HEADER, VOTERS, Context, fetch_request, vote_request

JUMP = limits.EPOCH_JUMP_MAX
FAR = 2**30  # the forged BeginQuorumEpoch moved a quorum by about this much


def refusals(ready: Ready) -> list[str]:
    return [str(e.fields["reason"]) for e in ready.events if e.name == "epoch_jump_refused"]


def only_answer(ctx: Context, kind: type) -> Message:
    (envelope,) = ctx.sent(ctx.poll(), kind)
    return envelope.message


def test_the_bound_is_what_the_limits_say() -> None:
    assert RaftConfig().epoch_jump_max == limits.EPOCH_JUMP_MAX
    assert 0 < limits.EPOCH_JUMP_MAX < limits.EPOCH_MAX


# ----- requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "kind"),
    [
        (BeginQuorumEpochRequest(HEADER, 3, 5 + FAR, 2), BeginQuorumEpochResponse),
        (BeginQuorumEpochRequest(HEADER, 3, 5 + JUMP + 1, 2), BeginQuorumEpochResponse),
        (vote_request(5 + FAR, 3, last_epoch=5, last_offset=99, voter=2), VoteResponse),
        (
            vote_request(5 + FAR, 3, last_epoch=5, last_offset=99, voter=2, pre_vote=True),
            VoteResponse,
        ),
        (EndQuorumEpochRequest(HEADER, 3, 5 + FAR, (2,)), EndQuorumEpochResponse),
    ],
    ids=["begin-epoch-far", "begin-epoch-just-past", "vote", "pre-vote", "end-epoch"],
)
def test_a_request_beyond_the_bound_is_refused_and_changes_nothing(
    request_: Message, kind: type
) -> None:
    ctx = follower_of_1(epoch=5)
    before = ctx.node.state
    ctx.deliver(3, request_)
    ready = ctx.poll()
    (envelope,) = ctx.sent(ready, kind)
    response = envelope.message
    assert response.error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    assert not getattr(response, "vote_granted", False)
    assert ready.election_to_persist is None
    assert ctx.node.state == before and (ctx.node.epoch, ctx.node.leader_id) == (5, 1)
    # The person reading either side learns both epochs and the bound.
    (reason,) = refusals(ready)
    claimed = str(getattr(request_, "candidate_epoch", getattr(request_, "leader_epoch", 0)))
    for text in (claimed, "epoch 5", f"EPOCH_JUMP_MAX ({JUMP})"):
        assert text in reason
        assert text in response.error_message  # type: ignore[union-attr]
    assert response_to_proto(response).error_message == reason  # type: ignore[arg-type]
    assert ctx.node.epoch_jumps_refused == 1


def test_a_request_at_the_bound_is_followed() -> None:
    ctx = follower_of_1(epoch=5)
    ctx.deliver(3, BeginQuorumEpochRequest(HEADER, 3, 5 + JUMP, 2))
    response = only_answer(ctx, BeginQuorumEpochResponse)
    assert response.error_code is ErrorCode.NONE  # type: ignore[union-attr]
    assert (ctx.node.epoch, ctx.node.leader_id) == (5 + JUMP, 3)
    assert ctx.node.epoch_jumps_refused == 0


def test_a_leader_refuses_a_fetch_far_ahead_and_asks_that_voter_again() -> None:
    """A Fetch claiming an epoch far ahead is refused and moves nothing; the leader still asks
    that voter again with its next BeginQuorumEpoch (it may be an honest voter a liar walked
    up), whose answer moves the leader by the bound at most (next test)."""
    ctx = Context()
    ctx.elect()
    leader = ctx.node.state_as(LeaderState)
    leader.acknowledged.update({2, 3})
    ctx.deliver(2, fetch_request(2, 1 + FAR, 0, 0))
    ready = ctx.poll()
    (envelope,) = ctx.sent(ready, FetchResponse)
    assert envelope.message.error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    assert refusals(ready) and 2 not in leader.acknowledged and 3 in leader.acknowledged
    assert leader.voters[2].log_end_offset == -1
    assert ctx.node.is_leader() and ctx.node.epoch == 1
    ready = ctx.poll(advance_ms=ctx.node.config.begin_quorum_epoch_resend_ms)
    assert [r.destination for r in ctx.sent(ready, BeginQuorumEpochRequest)] == [2]


def test_requests_walk_the_epoch_at_most_one_bound_each() -> None:
    """The bound is per message: what each one may do is bounded, not how many are sent."""
    ctx = follower_of_1(epoch=5)
    for step in range(1, 4):
        ctx.deliver(3, BeginQuorumEpochRequest(HEADER, 3, 5 + step * JUMP + 1, 2))
        assert only_answer(ctx, BeginQuorumEpochResponse).error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
        ctx.deliver(3, BeginQuorumEpochRequest(HEADER, 3, 5 + step * JUMP, 2))
        assert only_answer(ctx, BeginQuorumEpochResponse).error_code is ErrorCode.NONE  # type: ignore[union-attr]
    assert ctx.node.epoch == 5 + 3 * JUMP


# ----- responses --------------------------------------------------------------------------------


def test_one_voter_answering_far_ahead_moves_nobody_far() -> None:
    """A lying voter answers this node's Fetch with an epoch far ahead: dropped, however
    often."""
    ctx = follower_of_1(epoch=5)
    for _ in range(3):
        (fetch,) = ctx.sent(ctx.readies[-1], FetchRequest)
        ctx.deliver(
            1,
            FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 3, 5 + FAR, 0, 0),
            fetch.correlation_id,
        )
        ready = ctx.poll(advance_ms=ctx.node.config.retry_backoff_ms)
        assert (ctx.node.epoch, ctx.node.leader_id) == (5, 1)
        assert ready.election_to_persist is None
    assert ctx.node.epoch_jumps_refused == 3


def test_a_voter_far_ahead_brings_the_leader_up_by_the_bound_only() -> None:
    """A voter answers the leader's BeginQuorumEpoch from an epoch far ahead (FENCED): a liar,
    or an honest voter a liar walked up one bound per forged request. Sticky followers would
    leave the latter out for good, so the leader resigns and steps up by EPOCH_JUMP_MAX, no
    further: followed within a few elections, and a lie costs what a forged request costs."""
    leader = Context()
    leader.elect()
    ready = leader.poll(advance_ms=leader.node.config.begin_quorum_epoch_resend_ms)
    (request,) = [r for r in leader.sent(ready, BeginQuorumEpochRequest) if r.destination == 2]
    leader.deliver(
        2,
        BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, None, 1 + FAR),
        request.correlation_id,
    )
    ready = leader.poll()
    assert refusals(ready)
    assert not leader.node.is_leader() and leader.node.leader_id is None
    assert leader.node.epoch == 1 + JUMP
    assert ready.election_to_persist is not None and ready.election_to_persist.epoch == 1 + JUMP


def rejoin_by_pre_vote(voters: frozenset[int], answers: dict[int, int]) -> Context:
    """Node 1 at epoch 5 loses its leader and asks for pre-votes; each voter in ``answers``
    rejects it naming node 3 the leader of that voter's epoch."""
    ctx = Context(node_id=1, voters=voters, election=ElectionState(5, 2, None, voters))
    ready = ctx.poll(advance_ms=ctx.node.config.fetch_timeout_ms)
    assert ctx.node.state_as(ProspectiveState) is not None
    requests = {r.destination: r for r in ctx.sent(ready, VoteRequest)}
    for voter, epoch in answers.items():
        ctx.deliver(
            voter,
            VoteResponse(ErrorCode.NONE, 3, epoch, False, True),
            requests[voter].correlation_id,
        )
        ctx.poll()
    return ctx


def test_a_node_left_far_behind_rejoins_once_a_majority_vouches() -> None:
    """The honest rare case: the cluster ran more than EPOCH_JUMP_MAX elections while node 1
    was away. One voter's answer is not enough; a majority's is."""
    far = 5 + JUMP + 500
    ctx = rejoin_by_pre_vote(VOTERS, {2: far})
    assert ctx.node.epoch == 5 and ctx.node.epoch_jumps_refused == 1
    ctx = rejoin_by_pre_vote(VOTERS, {2: far, 3: far})
    assert (ctx.node.epoch, ctx.node.leader_id) == (far, 3)
    assert ctx.node.epoch_jumps_refused == 1  # only the first answer, before the majority
    # And requests near the vouched epoch are followed: a later leader's BeginQuorumEpoch.
    ctx.deliver(2, BeginQuorumEpochRequest(HEADER, 2, far + 7, 1))
    assert only_answer(ctx, BeginQuorumEpochResponse).error_code is ErrorCode.NONE  # type: ignore[union-attr]
    assert (ctx.node.epoch, ctx.node.leader_id) == (far + 7, 2)


def test_a_liar_cannot_make_up_a_majority_of_five() -> None:
    """Five voters: a majority is three, so node 1 needs three of the other four. A liar's
    answer counts once whatever it claims; the vouched epoch is the honest ones'."""
    voters = frozenset({1, 2, 3, 4, 5})
    honest, lie = 5 + 3, 5 + FAR
    ctx = rejoin_by_pre_vote(voters, {2: lie, 3: honest, 4: honest})
    assert ctx.node.epoch == honest  # within the bound: followed as always
    bounds = EpochBounds(JUMP)
    for source, epoch in ((2, lie), (3, lie), (4, 7), (5, 9)):
        bounds.vouch(source, epoch, {2, 3, 4, 5})
    # The third largest claim: even two lying voters of five vouch for nothing alone.
    assert bounds.vouched_epoch({2, 3, 4, 5}, 5) == 9
    bounds.vouch(2, lie + 1, {3, 4, 5})  # not a voucher (left the voter set): ignored
    bounds.forget_all_but({3, 4, 5})
    assert bounds.vouched_epoch({3, 4, 5}, 4) == 7


def test_a_new_observer_finds_a_cluster_far_ahead() -> None:
    """A broker with an empty log starts at epoch 0; a cluster that lived through more than
    EPOCH_JUMP_MAX elections is found once two of the three controllers answered it."""
    far = JUMP + 77
    ctx = Context(node_id=7)
    for _ in range(4):
        ready = ctx.poll(advance_ms=ctx.node.config.retry_backoff_ms)
        for fetch in ctx.sent(ready, FetchRequest):
            ctx.deliver(
                fetch.destination,
                FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, far, 0, 0),
                fetch.correlation_id,
            )
        if ctx.node.leader_id == 2:
            break
    assert (ctx.node.epoch, ctx.node.leader_id) == (far, 2)
    assert ctx.node.epoch_jumps_refused == 1
