"""Hostile peers against the pure Raft core (issue #12; docs/invariants.md I15, I16): every
message a peer may send is data. A message the protocol forbids is answered with Kafka's error
code and logged once (``request_rejected``); a response that breaks the protocol is dropped
(``response_rejected``); the node never raises and its durable state does not move where it
must not. The bounds come from ``quorum/limits.py`` (``EPOCH_MAX``, ``OBSERVERS_TRACKED_MAX``,
``FETCH_PURGATORY_MAX``)."""

from __future__ import annotations

import random
import time

import pytest

from quorum import limits
from quorum.errors import ErrorCode
from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
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
    Message,
    RequestHeader,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.node import RaftNode, Ready
from quorum.raft.state import FollowerState, LeaderState, ProspectiveState, ResignedState
from tests.unit.raft.test_raft_node import HEADER, VOTERS, Context, fetch_request, vote_request


def answer(ctx: Context, kind: type) -> Message:
    (envelope,) = ctx.sent(ctx.poll(), kind)
    return envelope.message


def follower_of_1(epoch: int = 5) -> Context:
    """Node 2, following node 1 in ``epoch``, with a live leader (a successful Fetch)."""
    ctx = Context(node_id=2, election=ElectionState(epoch, 1, None, VOTERS))
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    ctx.deliver(1, FetchResponse(ErrorCode.NONE, 1, epoch, 0, 0), fetch.correlation_id)
    ctx.poll()
    assert ctx.node.state_as(FollowerState) is not None
    return ctx


def rejected(ready: Ready, name: str = "request_rejected") -> list[str]:
    return [str(e.fields.get("reason")) for e in ready.events if e.name == name]


# ----- BeginQuorumEpoch: the one-RPC crash of the issue -------------------------------------


def test_begin_quorum_epoch_naming_the_receiver_is_refused() -> None:
    ctx = follower_of_1()
    for epoch in (5, 6, 5 + limits.EPOCH_JUMP_MAX):
        ctx.deliver(9, BeginQuorumEpochRequest(HEADER, 2, epoch, 2))
        ready = ctx.poll()
        (response,) = ctx.sent(ready, BeginQuorumEpochResponse)
        assert response.message.error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
        assert any("this node as the leader" in r for r in rejected(ready))
        assert ready.election_to_persist is None
    assert (ctx.node.epoch, ctx.node.leader_id) == (5, 1)


@pytest.mark.parametrize("receiver_state", ["follower", "leader", "resigned", "prospective"])
def test_begin_quorum_epoch_naming_another_leader_of_the_epoch_is_refused(
    receiver_state: str,
) -> None:
    """The epoch already has a leader this node knows (itself, when it leads or led it): a
    second one breaks I1, so the request is INVALID_REQUEST and nothing changes."""
    if receiver_state == "follower":
        ctx, intruder = follower_of_1(), 3
    elif receiver_state == "prospective":
        ctx, intruder = follower_of_1(), 3
        ctx.poll(advance_ms=ctx.node.config.fetch_timeout_ms)  # fetch timeout: prospective
        assert ctx.node.state_as(ProspectiveState) is not None
    else:
        ctx, intruder = Context(), 2
        ctx.elect()
        if receiver_state == "resigned":
            ctx.node.resign(ctx.now_ms)
            ctx.poll()
            assert ctx.node.state_as(ResignedState) is not None
    epoch, state = ctx.node.epoch, ctx.node.state.name
    ctx.deliver(intruder, BeginQuorumEpochRequest(HEADER, intruder, epoch, ctx.node.node_id))
    ready = ctx.poll()
    (response,) = ctx.sent(ready, BeginQuorumEpochResponse)
    assert response.message.error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    assert any("one leader per epoch" in r for r in rejected(ready))
    assert (ctx.node.epoch, ctx.node.state.name) == (epoch, state)


def test_begin_quorum_epoch_of_a_non_voter_leader_or_to_an_observer_is_refused() -> None:
    ctx = follower_of_1()
    ctx.deliver(7, BeginQuorumEpochRequest(HEADER, 7, 9, 2))
    assert answer(ctx, BeginQuorumEpochResponse).error_code is ErrorCode.INCONSISTENT_VOTER_SET  # type: ignore[union-attr]
    observer = Context(node_id=7)
    observer.poll()
    observer.deliver(1, BeginQuorumEpochRequest(HEADER, 1, 9, 7))
    response = answer(observer, BeginQuorumEpochResponse)
    assert response.error_code is ErrorCode.INCONSISTENT_VOTER_SET  # type: ignore[union-attr]
    assert ctx.node.epoch == 5 and observer.node.epoch == 0


# ----- epochs stay representable ------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "refusal"),
    [
        (limits.EPOCH_MAX + 1, "beyond the epoch limit"),
        (limits.INT32_MAX, "more than EPOCH_JUMP_MAX"),  # also more than the jump bound
    ],
)
def test_a_vote_beyond_the_epoch_limit_is_refused(epoch: int, refusal: str) -> None:
    start = limits.EPOCH_MAX - 10  # within EPOCH_JUMP_MAX of EPOCH_MAX
    ctx = Context(election=ElectionState(start, None, None, VOTERS))
    ctx.poll()
    ctx.deliver(2, vote_request(epoch, 2))
    ready = ctx.poll()
    (response,) = ctx.sent(ready, VoteResponse)
    assert response.message.error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    assert not response.message.vote_granted  # type: ignore[union-attr]
    assert ctx.node.epoch == start and ready.election_to_persist is None
    reasons = rejected(ready) + rejected(ready, "epoch_jump_refused")
    assert any(refusal in r for r in reasons), reasons


def test_above_epoch_max_epochs_grow_one_at_a_time() -> None:
    """Up to EPOCH_MAX a message may jump; past it only the next epoch is accepted, so the last
    million epochs are left for real elections."""
    ctx = Context(election=ElectionState(limits.EPOCH_MAX, None, None, VOTERS))
    ctx.poll()
    ctx.deliver(2, vote_request(limits.EPOCH_MAX + 2, 2))
    assert answer(ctx, VoteResponse).error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    ctx.deliver(2, vote_request(limits.EPOCH_MAX + 1, 2))
    response = answer(ctx, VoteResponse)
    assert response.vote_granted  # type: ignore[union-attr]
    assert ctx.node.epoch == limits.EPOCH_MAX + 1


def test_a_node_at_int32_max_runs_no_election_and_does_not_crash() -> None:
    ctx = Context(
        voters=frozenset({1}), election=ElectionState(limits.INT32_MAX, None, None, frozenset({1}))
    )
    for _ in range(5):
        ready = ctx.poll(advance_ms=3 * ctx.node.config.election_timeout_ms)
        assert (
            ready.election_to_persist is None or ready.election_to_persist.epoch <= limits.INT32_MAX
        )
    assert ctx.node.epoch == limits.INT32_MAX and not ctx.node.is_leader()
    assert any(e.name == "epoch_exhausted" for r in ctx.readies for e in r.events)


def test_responses_may_carry_epochs_above_epoch_max() -> None:
    """A response answers this node's own request on its own connection to a voter: a node
    left behind above EPOCH_MAX catches up through it (requests move it one epoch at a time)."""
    ctx = follower_of_1(epoch=limits.EPOCH_MAX + 5)
    (fetch,) = ctx.sent(ctx.readies[-1], FetchRequest)
    epoch = limits.EPOCH_MAX + 50
    ctx.deliver(
        1, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 3, epoch, 0, 0), fetch.correlation_id
    )
    ctx.poll()
    assert (ctx.node.epoch, ctx.node.leader_id) == (epoch, 3)


# ----- leader stickiness ----------------------------------------------------------------------


def test_repeated_epoch_plus_one_votes_do_not_depose_a_live_leader() -> None:
    """A follower that heard its leader within the fetch timeout neither bumps its epoch nor
    votes (etcd's check-quorum lease); the leader does not step down either."""
    follower = follower_of_1()
    leader = Context()
    leader.elect()
    for i in range(20):
        follower.deliver(3, vote_request(6 + i, 3, last_epoch=5, last_offset=10, voter=2))
        response = answer(follower, VoteResponse)
        assert not response.vote_granted  # type: ignore[union-attr]
        leader.deliver(3, vote_request(2 + i, 3, last_epoch=1, last_offset=10))
        assert not answer(leader, VoteResponse).vote_granted  # type: ignore[union-attr]
    assert (follower.node.epoch, follower.node.leader_id) == (5, 1)
    assert leader.node.is_leader() and leader.node.epoch == 1


def test_after_end_quorum_epoch_the_follower_votes_again() -> None:
    """Graceful handover keeps working: the leader said it resigned, so it is not live."""
    ctx = follower_of_1()
    ctx.deliver(1, EndQuorumEpochRequest(HEADER, 1, 5, (3, 2)))
    assert answer(ctx, EndQuorumEpochResponse).error_code is ErrorCode.NONE  # type: ignore[union-attr]
    ctx.deliver(3, vote_request(6, 3, last_epoch=5, last_offset=10, voter=2))
    assert answer(ctx, VoteResponse).vote_granted  # type: ignore[union-attr]
    assert ctx.node.epoch == 6


# ----- other refusals -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (vote_request(3, 1, voter=1), ErrorCode.INVALID_REQUEST),  # the receiver as candidate
        (vote_request(3, 9), ErrorCode.INCONSISTENT_VOTER_SET),
        (vote_request(-1, 2), ErrorCode.INVALID_REQUEST),
        (EndQuorumEpochRequest(HEADER, 1, 5, ()), ErrorCode.INVALID_REQUEST),  # names receiver
        (EndQuorumEpochRequest(HEADER, 2, 5, (3, 3)), ErrorCode.INVALID_REQUEST),
        (EndQuorumEpochRequest(HEADER, 2, 5, (9,)), ErrorCode.INVALID_REQUEST),
        (EndQuorumEpochRequest(HEADER, 2, limits.INT32_MAX, ()), ErrorCode.INVALID_REQUEST),
        (EndQuorumEpochRequest(HEADER, 9, 5, ()), ErrorCode.INCONSISTENT_VOTER_SET),
    ],
)
def test_forbidden_requests_change_nothing(request_: Message, code: ErrorCode) -> None:
    ctx = Context()
    ctx.poll()
    before = ctx.node.state
    ctx.deliver(2, request_)
    ready = ctx.poll()
    (response,) = ready.messages_to_send
    assert response.message.error_code is code  # type: ignore[union-attr]
    assert ready.election_to_persist is None and ctx.node.state == before
    assert rejected(ready) or rejected(ready, "epoch_jump_refused")


@pytest.mark.parametrize(
    "request_",
    [
        fetch_request(1, 1, 0, 0),  # claims to be the leader itself
        fetch_request(-5, 1, 0, 0),
        FetchRequest(HEADER, 2, 1, 0, 0, 0, 1 << 20, -1),
        FetchRequest(HEADER, 2, 1, 0, 0, 0, 1 << 20, 5),  # high watermark past its log end
    ],
)
def test_forbidden_fetches_are_refused_and_move_no_progress(request_: FetchRequest) -> None:
    ctx = Context()
    ctx.elect()
    ctx.deliver(2, request_)
    response = answer(ctx, FetchResponse)
    assert response.error_code is ErrorCode.INVALID_REQUEST  # type: ignore[union-attr]
    leader = ctx.node.state_as(LeaderState)
    assert leader.voters[2].log_end_offset == -1 and not leader.observers


def test_a_spoofed_fetch_cannot_claim_more_than_the_leader_has() -> None:
    """Without authentication a Fetch claiming a voter's id is believed, but only within the
    leader's log: an offset past its end diverges and moves no progress nor the high watermark."""
    ctx = Context()
    ctx.elect()
    end = ctx.node.log_end_offset
    ctx.deliver(2, fetch_request(2, 1, end + 100, 1))
    response = answer(ctx, FetchResponse)
    assert response.diverging_epoch is not None  # type: ignore[union-attr]
    assert ctx.node.state_as(LeaderState).voters[2].log_end_offset == -1
    assert ctx.node.high_watermark == 0


def test_describe_quorum_of_another_cluster_reveals_nothing() -> None:
    ctx = Context()
    ctx.elect()
    for cluster in ("", "other"):
        ctx.deliver(-1, DescribeQuorumRequest(RequestHeader(cluster, HEADER.topic_id, 0)))
        response = answer(ctx, DescribeQuorumResponse)
        assert response.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID  # type: ignore[union-attr]
        assert (response.leader_id, response.leader_epoch, response.high_watermark) == (  # type: ignore[union-attr]
            None,
            -1,
            -1,
        )


# ----- responses that break the protocol --------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        FetchResponse(ErrorCode.NONE, 9, 6, 0, 0),  # a leader outside the voter set
        FetchResponse(ErrorCode.NONE, 1, -3, 0, 0),
        FetchResponse(ErrorCode.NONE, 1, 5, -1, 0),
        FetchResponse(ErrorCode.NONE, 1, 5, 0, 0, diverging_epoch=DivergingEpoch(-1, -7)),
        FetchResponse(ErrorCode.NONE, 1, 5, 0, 0, snapshot_id=SnapshotId(-1, 0)),
    ],
)
def test_forged_fetch_responses_are_dropped(response: FetchResponse) -> None:
    ctx = follower_of_1()
    (fetch,) = ctx.sent(ctx.readies[-1], FetchRequest)
    ctx.deliver(1, response, fetch.correlation_id)
    ready = ctx.poll()
    assert rejected(ready, "response_rejected")
    assert (ctx.node.epoch, ctx.node.leader_id) == (5, 1)


def test_a_vote_response_naming_another_leader_of_our_epoch_is_dropped() -> None:
    """A prospective node that followed node 1 in epoch 5 must not be told node 3 led it."""
    ctx = follower_of_1()
    ready = ctx.poll(advance_ms=ctx.node.config.fetch_timeout_ms)
    assert ctx.node.state_as(ProspectiveState) is not None
    requests = {r.destination: r for r in ctx.sent(ready, VoteRequest)}
    ctx.deliver(3, VoteResponse(ErrorCode.NONE, 3, 5, False, True), requests[3].correlation_id)
    ready = ctx.poll()
    assert rejected(ready, "response_rejected")
    assert (ctx.node.epoch, ctx.node.state.name) == (5, "prospective")
    # Node 1 itself says node 3 leads epoch 5: what made us follow 1 was wrong (a forged
    # BeginQuorumEpoch). Forget the leader, keep the vote, find the real one.
    ctx.deliver(1, VoteResponse(ErrorCode.NONE, 3, 5, False, True), requests[1].correlation_id)
    ctx.poll()
    assert (ctx.node.epoch, ctx.node.state.name, ctx.node.leader_id) == (5, "unattached", None)
    ctx.deliver(3, BeginQuorumEpochRequest(HEADER, 3, 5, 2))
    assert answer(ctx, BeginQuorumEpochResponse).error_code is ErrorCode.NONE  # type: ignore[union-attr]
    assert ctx.node.leader_id == 3


# ----- bounded state --------------------------------------------------------------------------


def test_observers_tracked_are_bounded_least_recently_heard_dropped() -> None:
    ctx = Context(config=RaftConfig(observers_tracked_max=100))
    ctx.elect()
    end = ctx.node.log_end_offset
    for replica in range(100, 400):
        ctx.deliver(replica, fetch_request(replica, 1, end, 1))
        ctx.now_ms += 1
        ctx.poll()
    observers = ctx.node.state_as(LeaderState).observers
    assert len(observers) == 100
    assert list(observers) == list(range(300, 400))


def test_fetch_purgatory_is_bounded_for_observers_not_voters() -> None:
    ctx = Context(config=RaftConfig(fetch_purgatory_max=10))
    ctx.elect()
    end = ctx.node.log_end_offset
    ctx.deliver(2, fetch_request(2, 1, end, 1))  # lets the high watermark reach the log end
    ctx.poll()
    hw = ctx.node.high_watermark
    for replica in range(100, 130):
        ctx.deliver(replica, FetchRequest(HEADER, replica, 1, end, 1, 500, 1 << 20, hw))
    ctx.deliver(3, FetchRequest(HEADER, 3, 1, end, 1, 500, 1 << 20, hw))
    ready = ctx.poll()
    purgatory = ctx.node.state_as(LeaderState).fetch_purgatory
    assert len(purgatory) == 11 and 3 in purgatory
    assert len(ctx.sent(ready, FetchResponse)) == 20  # answered at once, not parked


def test_an_observer_id_flood_costs_o1_per_fetch() -> None:
    """20,000 distinct observer ids: the leader keeps at most OBSERVERS_TRACKED_MAX of them and
    a Fetch costs about the same at the end of the flood as at its start (it used to scan every
    observer: quadratic). No election happens."""
    ctx = Context()
    ctx.elect()
    end = ctx.node.log_end_offset
    node: RaftNode = ctx.node
    turns: list[float] = []
    for replica in range(1_000, 21_000):
        started = time.perf_counter()
        ctx.deliver(replica, fetch_request(replica, 1, end, 1))
        ctx.poll()
        turns.append(time.perf_counter() - started)
        if replica % 1_000 == 0:  # keep the voters fetching, as they would
            ctx.now_ms += 10
            for voter in (2, 3):
                ctx.deliver(voter, fetch_request(voter, 1, node.log_end_offset, 1))
                ctx.poll()
    assert node.is_leader() and node.epoch == 1
    assert len(node.state_as(LeaderState).observers) == limits.OBSERVERS_TRACKED_MAX
    first, last = sorted(turns[:2_000])[1_000], sorted(turns[-2_000:])[1_000]
    assert last < 5 * first + 0.000_5, (first, last)


# ----- a seeded fuzzer over the core's messages ---------------------------------------------------


def test_fuzzed_messages_never_crash_the_core() -> None:
    """Arbitrary well-formed messages with any ids and epochs, to every role; the core's own
    invariant checks run after every step. Bounded: a few thousand messages."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    ints = [-1, 0, 1, 2, 3, 4, 9, limits.EPOCH_MAX, limits.EPOCH_MAX + 1, limits.INT32_MAX]

    def any_int() -> int:
        return rng.choice(ints) if rng.random() < 0.7 else rng.randrange(-5, 50)

    def header() -> RequestHeader:
        return (
            HEADER
            if rng.random() < 0.9
            else RequestHeader(rng.choice(["", "x"]), HEADER.topic_id, 0)
        )

    def message() -> Message:
        kind = rng.randrange(9)
        leader = rng.choice([None, 1, 2, 3, 9])
        if kind == 0:
            return VoteRequest(
                header(), any_int(), any_int(), any_int(), any_int(), rng.random() < 0.5, any_int()
            )
        if kind == 1:
            return BeginQuorumEpochRequest(header(), any_int(), any_int(), any_int())
        if kind == 2:
            successors = tuple(any_int() for _ in range(rng.randrange(4)))
            return EndQuorumEpochRequest(header(), any_int(), any_int(), successors)
        if kind == 3:
            return FetchRequest(
                header(),
                any_int(),
                any_int(),
                any_int(),
                any_int(),
                any_int(),
                any_int(),
                any_int(),
            )
        if kind == 4:
            return DescribeQuorumRequest(header())
        if kind == 5:
            return VoteResponse(
                rng.choice(list(ErrorCode)),
                leader,
                any_int(),
                rng.random() < 0.5,
                rng.random() < 0.5,
            )
        if kind == 6:
            return BeginQuorumEpochResponse(rng.choice(list(ErrorCode)), leader, any_int())
        if kind == 7:
            return EndQuorumEpochResponse(rng.choice(list(ErrorCode)), leader, any_int())
        diverging = DivergingEpoch(any_int(), any_int()) if rng.random() < 0.2 else None
        snapshot = SnapshotId(any_int(), any_int()) if rng.random() < 0.1 else None
        return FetchResponse(
            rng.choice(list(ErrorCode)),
            leader,
            any_int(),
            any_int(),
            any_int(),
            diverging,
            (),
            snapshot,
        )

    try:
        for _ in range(30):
            ctx = Context(node_id=rng.choice([1, 7]))
            if ctx.node.is_voter and rng.random() < 0.5:
                ctx.elect()
            for _ in range(100):
                ready = ctx.poll(advance_ms=rng.randrange(0, 400))
                outstanding = [e.correlation_id for e in ready.messages_to_send]
                msg = message()
                is_request = isinstance(
                    msg,
                    (
                        VoteRequest,
                        BeginQuorumEpochRequest,
                        EndQuorumEpochRequest,
                        FetchRequest,
                        DescribeQuorumRequest,
                    ),
                )
                if not is_request and outstanding:
                    ctx.deliver(rng.choice([1, 2, 3]), msg, rng.choice(outstanding))
                elif is_request:
                    ctx.deliver(rng.choice([2, 3, 9]), msg)
                assert ctx.node.epoch <= limits.INT32_MAX
    except Exception as exc:
        raise AssertionError(f"fuzz seed {seed}: {exc!r}") from exc


def test_a_voter_stuck_above_a_sticky_leader_brings_it_up() -> None:
    """A voter whose epoch is above the live leader's (it lost an election the others never
    joined, or a forged message moved it) cannot win nor follow. Its pre-vote makes the leader
    ask it again with BeginQuorumEpoch; its FENCED_LEADER_EPOCH answer moves the leader up."""
    ctx = Context()
    ctx.elect()
    ctx.deliver(2, fetch_request(2, 1, ctx.node.log_end_offset, 1))
    ctx.deliver(3, fetch_request(3, 1, ctx.node.log_end_offset, 1))
    ctx.poll()
    ctx.deliver(3, vote_request(5, 3, last_epoch=1, last_offset=0, pre_vote=True))
    assert not answer(ctx, VoteResponse).vote_granted  # type: ignore[union-attr]
    ready = ctx.poll(advance_ms=ctx.node.config.begin_quorum_epoch_resend_ms)
    (begin,) = ctx.sent(ready, BeginQuorumEpochRequest)
    assert begin.destination == 3 and ctx.node.is_leader()
    ctx.deliver(
        3,
        BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, None, 4),
        begin.correlation_id,
    )
    ctx.poll()
    assert ctx.node.epoch == 4 and not ctx.node.is_leader()


def test_a_vote_cast_for_a_forged_request_is_not_granted_to_a_stale_candidate() -> None:
    """A forged Vote in node 2's name claimed a long log and got the vote of epoch 3; node 2's
    own request for epoch 3 with its real, shorter log is then refused (the vote stays cast, so
    nobody else gets it either: I1 holds, and no stale log becomes leader)."""
    batch = encode_batch(base_offset=0, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
    ctx = Context(election=ElectionState(1, None, None, VOTERS), batches=(batch,))
    ctx.poll()
    ctx.deliver(2, vote_request(3, 2, last_epoch=2, last_offset=100))
    assert answer(ctx, VoteResponse).vote_granted  # type: ignore[union-attr]
    ctx.deliver(2, vote_request(3, 2, last_epoch=0, last_offset=0))
    assert not answer(ctx, VoteResponse).vote_granted  # type: ignore[union-attr]
    ctx.deliver(3, vote_request(3, 3, last_epoch=1, last_offset=1))
    assert not answer(ctx, VoteResponse).vote_granted  # type: ignore[union-attr]
