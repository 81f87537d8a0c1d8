"""Spec-anchored unit tests of the pure Raft core (KIP-595, KIP-996, KIP-516).

A ``Context`` drives one ``RaftNode`` by hand: deliver an envelope, poll, look at what the
Ready asks to persist and send. Each test quotes the rule it checks.
"""

from __future__ import annotations

import random

import pytest

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.metadata.batch import decode_batch, encode_batch
from quorum.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    LeaderChangeMessage,
    NoOpRecord,
)
from quorum.raft.accumulator import BatchAccumulator
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    RequestFailed,
    RequestHeader,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.node import NotLeaderError, RaftNode, Ready
from quorum.raft.state import (
    CandidateState,
    FollowerState,
    IllegalStateError,
    IllegalTransitionError,
    LeaderState,
    ProspectiveState,
    UnattachedState,
    check_transition,
)

CLUSTER = "test-cluster-id"
HEADER = RequestHeader(CLUSTER, METADATA_TOPIC_ID, 0)
VOTERS = frozenset({1, 2, 3})


class Context:
    def __init__(
        self,
        node_id: int = 1,
        voters: frozenset[int] = VOTERS,
        election: ElectionState | None = None,
        batches: tuple[object, ...] = (),
        config: RaftConfig | None = None,
    ) -> None:
        self.now_ms = 0
        self.node = RaftNode(
            node_id=node_id,
            voters=voters,
            cluster_id=CLUSTER,
            config=config or RaftConfig(),
            rng=random.Random(0),
            now_ms=0,
            election_state=election,
            batches=list(batches),  # type: ignore[arg-type]
        )
        self.next_correlation = 10_000
        self.readies: list[Ready] = []

    def deliver(self, source: int, message: Message, correlation_id: int | None = None) -> None:
        if correlation_id is None:
            self.next_correlation += 1
            correlation_id = self.next_correlation
        self.node.step(Envelope(source, self.node.node_id, correlation_id, message), self.now_ms)

    def poll(self, advance_ms: int = 0) -> Ready:
        self.now_ms += advance_ms
        ready = self.node.poll(self.now_ms)
        self.node.advance(ready)
        self.readies.append(ready)
        return ready

    def sent(self, ready: Ready, kind: type) -> list[Envelope]:
        return [e for e in ready.messages_to_send if isinstance(e.message, kind)]

    def elect(self) -> None:
        """Make this node leader of the next epoch with votes from 2 and 3."""
        ready = self.poll(advance_ms=2 * self.node.config.election_timeout_ms)
        for request in self.sent(ready, VoteRequest):
            self.deliver(
                request.destination,
                VoteResponse(ErrorCode.NONE, None, self.node.epoch, True, True),
                request.correlation_id,
            )
        ready = self.poll()
        assert isinstance(self.node.state, CandidateState)
        for request in self.sent(ready, VoteRequest):
            self.deliver(
                request.destination,
                VoteResponse(ErrorCode.NONE, None, self.node.epoch, True),
                request.correlation_id,
            )
        self.poll()
        assert self.node.is_leader()


def vote_request(
    epoch: int,
    candidate: int,
    last_epoch: int = 0,
    last_offset: int = 0,
    *,
    pre_vote: bool = False,
    voter: int = 1,
) -> VoteRequest:
    return VoteRequest(HEADER, epoch, candidate, last_epoch, last_offset, pre_vote, voter)


def fetch_request(
    replica: int,
    epoch: int,
    offset: int,
    last_epoch: int,
    header: RequestHeader = HEADER,
    max_wait_ms: int = 0,
) -> FetchRequest:
    return FetchRequest(header, replica, epoch, offset, last_epoch, max_wait_ms, 1 << 20)


def test_fresh_voter_persists_its_primordial_state() -> None:
    ctx = Context()
    ready = ctx.poll()
    assert ready.election_to_persist == ElectionState(0, None, None, VOTERS)


def test_single_voter_elects_itself_and_commits_leader_change() -> None:
    """KIP-595: a leader writes a LeaderChangeMessage at the start of its epoch and commits
    nothing before an entry of its own epoch is on a majority (here: itself, once durable)."""
    ctx = Context(voters=frozenset({1}))
    ctx.poll(advance_ms=2000)
    ctx.poll()
    assert ctx.node.is_leader()
    committed = [b for r in ctx.readies for b in r.committed_batches]
    assert committed, "the leader change was never committed"
    decoded = decode_batch(committed[0].data)
    assert decoded.control
    assert decoded.records == (LeaderChangeMessage(1, 1, (1,)),)


def test_vote_is_persisted_in_the_same_ready_as_the_grant() -> None:
    """KIP-595: "the voter persists its vote before sending the response"."""
    ctx = Context()
    ctx.poll()
    ctx.deliver(2, vote_request(1, 2))
    ready = ctx.poll()
    assert ready.election_to_persist == ElectionState(1, None, 2, VOTERS)
    (response,) = ctx.sent(ready, VoteResponse)
    assert response.message.vote_granted  # type: ignore[union-attr]


def test_one_vote_per_epoch() -> None:
    ctx = Context()
    ctx.poll()
    ctx.deliver(2, vote_request(1, 2))
    ctx.poll()
    ctx.deliver(3, vote_request(1, 3))
    (response,) = ctx.sent(ctx.poll(), VoteResponse)
    assert not response.message.vote_granted  # type: ignore[union-attr]


def test_vote_rejected_for_a_less_up_to_date_log() -> None:
    """Raft 5.4.1: grant only if the candidate's log is at least as up to date."""
    batch = encode_batch(base_offset=0, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
    ctx = Context(election=ElectionState(1, None, None, VOTERS), batches=(batch,))
    ctx.poll()
    ctx.deliver(2, vote_request(2, 2, last_epoch=0, last_offset=0))
    (response,) = ctx.sent(ctx.poll(), VoteResponse)
    assert not response.message.vote_granted  # type: ignore[union-attr]
    assert ctx.node.epoch == 2  # the higher epoch is still adopted


def test_pre_vote_changes_nothing_durable() -> None:
    """KIP-996: a pre-vote neither bumps the epoch nor records a vote."""
    ctx = Context(election=ElectionState(3, None, None, VOTERS))
    ctx.poll()
    ctx.deliver(2, vote_request(4, 2, pre_vote=True))
    ready = ctx.poll()
    assert ready.election_to_persist is None
    assert ctx.node.epoch == 3
    (response,) = ctx.sent(ready, VoteResponse)
    assert response.message.vote_granted  # type: ignore[union-attr]


def test_follower_with_a_live_leader_rejects_pre_vote() -> None:
    """KIP-996: a follower that fetched from its leader within the fetch timeout rejects
    pre-votes, so a rejoining isolated node cannot disturb a healthy leader."""
    ctx = Context(election=ElectionState(1, 2, None, VOTERS))
    ready = ctx.poll()
    (fetch,) = ctx.sent(ready, FetchRequest)
    ctx.deliver(2, FetchResponse(ErrorCode.NONE, 2, 1, 0, 0), fetch.correlation_id)
    ctx.poll()
    ctx.deliver(3, vote_request(2, 3, pre_vote=True))
    (response,) = ctx.sent(ctx.poll(), VoteResponse)
    assert not response.message.vote_granted  # type: ignore[union-attr]
    assert response.message.leader_id == 2  # type: ignore[union-attr]


def _following_2_with_a_fetch_in_flight(ctx: Context) -> Envelope:
    """Node 1 follows 2 in epoch 1, has fetched once, and has its next Fetch in flight."""
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    ctx.deliver(2, FetchResponse(ErrorCode.NONE, 2, 1, 0, 0), fetch.correlation_id)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    return fetch


def test_a_reset_leader_connection_starts_a_pre_vote_without_waiting_for_the_fetch_timeout() -> (
    None
):
    """Failover (RaftConfig.election_on_connection_loss): a Fetch whose connection to the
    leader is refused or reset means the leader's process is most likely gone; the follower
    starts a pre-vote within election_backoff_base_ms instead of the 2 s fetch timeout, and
    grants pre-votes itself meanwhile."""
    ctx = Context(election=ElectionState(1, 2, None, VOTERS))
    fetch = _following_2_with_a_fetch_in_flight(ctx)
    ctx.deliver(2, RequestFailed("UNAVAILABLE", peer_gone=True), fetch.correlation_id)
    ctx.poll()
    assert isinstance(ctx.node.state, FollowerState)
    ctx.deliver(3, vote_request(2, 3, pre_vote=True))
    (response,) = ctx.sent(ctx.poll(), VoteResponse)
    assert response.message.vote_granted  # type: ignore[union-attr]
    ready = ctx.poll(advance_ms=ctx.node.config.election_backoff_base_ms)
    assert isinstance(ctx.node.state, ProspectiveState)
    assert ctx.node.epoch == 1
    assert {r.destination for r in ctx.sent(ready, VoteRequest)} == {2, 3}


def test_a_fetch_deadline_is_not_a_lost_leader() -> None:
    """A Fetch that merely timed out (a slow or cut network) says nothing about the leader:
    the follower waits out the fetch timeout and keeps denying pre-votes until then."""
    ctx = Context(election=ElectionState(1, 2, None, VOTERS))
    fetch = _following_2_with_a_fetch_in_flight(ctx)
    ctx.deliver(2, RequestFailed("DEADLINE_EXCEEDED"), fetch.correlation_id)
    ctx.poll(advance_ms=ctx.node.config.election_backoff_base_ms)
    assert isinstance(ctx.node.state, FollowerState)
    ctx.deliver(3, vote_request(2, 3, pre_vote=True))
    (response,) = ctx.sent(ctx.poll(), VoteResponse)
    assert not response.message.vote_granted  # type: ignore[union-attr]


def test_a_pre_vote_rejection_naming_the_leader_sends_the_node_back_to_it() -> None:
    """KIP-996: a prospective voter that learns of its epoch's leader from a VoteResponse
    follows it at once, without waiting for the other answers (its own link to the leader
    may be the broken one: waiting would leave it granting pre-votes meanwhile)."""
    ctx = Context(election=ElectionState(1, 2, None, VOTERS))
    fetch = _following_2_with_a_fetch_in_flight(ctx)
    ctx.deliver(2, RequestFailed("UNAVAILABLE", peer_gone=True), fetch.correlation_id)
    ready = ctx.poll(advance_ms=ctx.node.config.election_backoff_base_ms)
    assert isinstance(ctx.node.state, ProspectiveState)
    (to_3,) = [r for r in ctx.sent(ready, VoteRequest) if r.destination == 3]
    ctx.deliver(3, VoteResponse(ErrorCode.NONE, 2, 1, False, True), to_3.correlation_id)
    ctx.poll()
    assert isinstance(ctx.node.state, FollowerState)
    assert ctx.node.state.leader_id == 2 and ctx.node.epoch == 1


def test_election_timeout_starts_pre_vote_not_candidacy() -> None:
    ctx = Context()
    ctx.poll()
    ready = ctx.poll(advance_ms=2000)
    assert isinstance(ctx.node.state, ProspectiveState)
    assert ctx.node.epoch == 0
    requests = ctx.sent(ready, VoteRequest)
    assert {r.destination for r in requests} == {2, 3}
    assert all(r.message.pre_vote and r.message.candidate_epoch == 1 for r in requests)  # type: ignore[union-attr]


def test_leader_commits_only_after_its_epoch_is_on_a_majority() -> None:
    """KIP-595: the high watermark moves only once the leader's epoch start offset (its
    LeaderChangeMessage) is replicated to a majority."""
    ctx = Context()
    ctx.elect()
    leader = ctx.node
    assert leader.high_watermark == 0
    end = leader.log_end_offset
    ctx.deliver(2, fetch_request(2, 1, 0, 0))
    ctx.poll()
    assert leader.high_watermark == 0  # follower 2 has nothing yet
    ctx.deliver(2, fetch_request(2, 1, end, 1))
    ready = ctx.poll()
    assert leader.high_watermark == end
    assert ready.committed_batches


def test_adaptive_batching_grows_the_open_batch_while_one_is_uncommitted() -> None:
    """An idle leader seals a proposal at the next poll; while that batch is uncommitted,
    later proposals share one open batch, sealed once the high watermark passes the earlier
    batch and the open one is adaptive_batch_age_min_ms old (or at the linger). So batches
    grow with the load, not with the poll rate; a lone proposal never waits."""
    ctx = Context()
    ctx.elect()
    leader = ctx.node
    end = leader.log_end_offset
    for follower in (2, 3):
        ctx.deliver(follower, fetch_request(follower, 1, end, 1))
    ctx.poll()
    assert leader.high_watermark == end  # idle: nothing in flight
    record = ConfigRecord(ConfigResourceType.TOPIC, "a", "k", "v")
    first = leader.propose([record], ctx.now_ms)
    assert leader.open_batch_waits_until_ms(ctx.now_ms) is None  # sealed at the next poll
    ready = ctx.poll()
    assert [b.base_offset for b in ready.entries_to_append] == [first.base_offset]
    assert leader.open_batch_waits_until_ms(ctx.now_ms) is None  # no open batch
    second = leader.propose([record], ctx.now_ms)
    # The first batch is in flight: what is proposed until the linger joins the second's.
    linger_end = ctx.now_ms + leader.config.append_linger_ms
    assert leader.open_batch_waits_until_ms(ctx.now_ms) == linger_end
    third = leader.propose([record], ctx.now_ms)
    assert not ctx.poll().entries_to_append  # the first batch is not committed yet
    ctx.deliver(2, fetch_request(2, 1, first.last_offset + 1, 1))
    ready = ctx.poll(advance_ms=1)
    assert leader.high_watermark == first.last_offset + 1
    # The open batch waited under load: held until it is adaptive_batch_age_min_ms old, and
    # the leader asks to be polled then.
    age_min_ms = leader.config.adaptive_batch_age_min_ms
    assert 0 < age_min_ms < leader.config.append_linger_ms
    assert not ready.entries_to_append
    assert ready.next_poll_at_ms <= ctx.now_ms - 1 + age_min_ms
    assert leader.open_batch_waits_until_ms(ctx.now_ms) == ctx.now_ms - 1 + age_min_ms
    ready = ctx.poll(advance_ms=age_min_ms - 1)
    assert [(b.base_offset, b.record_count) for b in ready.entries_to_append] == [
        (second.base_offset, 2)
    ]
    assert third.last_offset == second.base_offset + 1
    assert leader.open_batch_waits_until_ms(ctx.now_ms) is None
    fourth = leader.propose([record], ctx.now_ms)
    ready = ctx.poll(advance_ms=leader.config.append_linger_ms)  # nobody acknowledges: linger
    assert [b.base_offset for b in ready.entries_to_append] == [fourth.base_offset]
    # All committed, a lone proposal is sealed at the next poll: no hold without load.
    ctx.deliver(2, fetch_request(2, 1, fourth.last_offset + 1, 1))
    ctx.poll()
    assert leader.high_watermark == fourth.last_offset + 1
    fifth = leader.propose([record], ctx.now_ms)
    assert [b.base_offset for b in ctx.poll().entries_to_append] == [fifth.base_offset]


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (RequestHeader("other-cluster", METADATA_TOPIC_ID, 0), ErrorCode.INCONSISTENT_CLUSTER_ID),
        (RequestHeader("", METADATA_TOPIC_ID, 0), ErrorCode.INCONSISTENT_CLUSTER_ID),
        (RequestHeader(CLUSTER, Uuid(7, 7), 0), ErrorCode.UNKNOWN_TOPIC_ID),
        (RequestHeader(CLUSTER, METADATA_TOPIC_ID, 1), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
    ids=["wrong_cluster", "empty_cluster", "unknown_topic_id", "wrong_partition"],
)
def test_fetch_header_errors(header: RequestHeader, error: ErrorCode) -> None:
    ctx = Context()
    ctx.elect()
    before = (ctx.node.epoch, ctx.node.log_end_offset, ctx.node.high_watermark)
    ctx.deliver(2, fetch_request(2, 1, 0, 0, header=header))
    (response,) = ctx.sent(ctx.poll(), FetchResponse)
    assert response.message.error_code is error  # type: ignore[union-attr]
    assert (ctx.node.epoch, ctx.node.log_end_offset, ctx.node.high_watermark) == before


def test_vote_header_errors_change_nothing() -> None:
    ctx = Context()
    ctx.poll()
    bad = VoteRequest(RequestHeader("x", METADATA_TOPIC_ID, 0), 5, 2, 0, 0, False, 1)
    ctx.deliver(2, bad)
    ready = ctx.poll()
    assert ready.election_to_persist is None
    assert ctx.node.epoch == 0
    (response,) = ctx.sent(ready, VoteResponse)
    assert response.message.error_code is ErrorCode.INCONSISTENT_CLUSTER_ID  # type: ignore[union-attr]


def test_vote_from_a_non_voter_is_inconsistent_voter_set() -> None:
    ctx = Context()
    ctx.poll()
    ctx.deliver(9, vote_request(1, 9))
    (response,) = ctx.sent(ctx.poll(), VoteResponse)
    assert response.message.error_code is ErrorCode.INCONSISTENT_VOTER_SET  # type: ignore[union-attr]
    assert ctx.node.epoch == 0


def test_metadata_topic_id_is_accepted_once_known() -> None:
    """KIP-516: RPCs keep accepting the sentinel and also take the assigned id."""
    ctx = Context()
    ctx.elect()
    real = Uuid(123, 456)
    ctx.node.set_metadata_topic_id(real)
    ctx.deliver(2, fetch_request(2, 1, 0, 0, header=RequestHeader(CLUSTER, real, 0)))
    (response,) = ctx.sent(ctx.poll(), FetchResponse)
    assert response.message.error_code is ErrorCode.NONE  # type: ignore[union-attr]


def test_fetch_with_stale_epoch_is_fenced_and_future_epoch_unknown() -> None:
    ctx = Context(election=ElectionState(4, None, None, VOTERS))
    ctx.elect()
    epoch = ctx.node.epoch
    ctx.deliver(2, fetch_request(2, epoch - 1, 0, 0))
    (stale,) = ctx.sent(ctx.poll(), FetchResponse)
    assert stale.message.error_code is ErrorCode.FENCED_LEADER_EPOCH  # type: ignore[union-attr]
    assert stale.message.leader_id == 1  # type: ignore[union-attr]
    ctx.deliver(2, fetch_request(2, epoch + 1, 0, 0))
    (future,) = ctx.sent(ctx.poll(), FetchResponse)
    assert future.message.error_code is ErrorCode.UNKNOWN_LEADER_EPOCH  # type: ignore[union-attr]


def test_divergent_follower_gets_diverging_epoch_and_truncates() -> None:
    """KIP-595 "Fetch": the leader answers a fetch whose last_fetched_epoch does not match
    with diverging_epoch; the follower truncates to the end of that epoch."""
    common = encode_batch(base_offset=0, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
    stray = encode_batch(base_offset=1, epoch=2, timestamp_ms=0, records=[NoOpRecord()])
    follower = Context(
        node_id=2, election=ElectionState(3, 1, None, VOTERS), batches=(common, stray)
    )
    ready = follower.poll()
    (fetch,) = follower.sent(ready, FetchRequest)
    assert fetch.message.fetch_offset == 2  # type: ignore[union-attr]
    follower.deliver(
        1,
        FetchResponse(ErrorCode.NONE, 1, 3, 1, 0, diverging_epoch=_diverging(1, 1)),
        fetch.correlation_id,
    )
    ready = follower.poll()
    assert ready.truncate_to == 1
    assert follower.node.log_end_offset == 1
    (again,) = follower.sent(ready, FetchRequest)
    assert again.message.fetch_offset == 1  # type: ignore[union-attr]
    assert again.message.last_fetched_epoch == 1  # type: ignore[union-attr]


def _diverging(epoch: int, end_offset: int) -> DivergingEpoch:
    return DivergingEpoch(epoch, end_offset)


def test_leader_detects_divergence_from_last_fetched_epoch() -> None:
    ctx = Context(election=ElectionState(2, None, None, VOTERS))
    ctx.elect()  # epoch 3; the log holds only its leader change at offset 0
    ctx.deliver(2, fetch_request(2, 3, 5, 2))
    (response,) = ctx.sent(ctx.poll(), FetchResponse)
    diverging = response.message.diverging_epoch  # type: ignore[union-attr]
    assert diverging is not None
    assert diverging.end_offset == 0


def test_follower_never_truncates_below_its_high_watermark() -> None:
    common = encode_batch(base_offset=0, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
    follower = Context(node_id=2, election=ElectionState(1, 1, None, VOTERS), batches=(common,))
    ready = follower.poll()
    (fetch,) = follower.sent(ready, FetchRequest)
    follower.deliver(1, FetchResponse(ErrorCode.NONE, 1, 1, 1, 0), fetch.correlation_id)
    ready = follower.poll()
    assert follower.node.high_watermark == 1
    (fetch,) = follower.sent(ready, FetchRequest)
    # A diverging epoch below the high watermark means the quorum lost committed data (I7
    # forbids the truncation): never asserted on, never truncated; a voter reports it for its
    # shell to stop (quorum/raft/prefix_divergence.py) and fetches no more.
    follower.deliver(
        1,
        FetchResponse(ErrorCode.NONE, 1, 1, 1, 0, diverging_epoch=_diverging(0, 0)),  # type: ignore[arg-type]
        fetch.correlation_id,
    )
    ready = follower.poll()
    assert ready.truncate_to is None
    assert follower.node.log_end_offset == 1
    assert ready.prefix_diverged is not None and not ready.prefix_diverged.recoverable
    assert any(e.name == "committed_prefix_diverged" for e in ready.events)
    assert not follower.sent(follower.poll(advance_ms=10_000), FetchRequest)


def test_a_long_committed_backlog_is_handed_out_over_several_readies() -> None:
    """A follower that learns of many committed batches at once gets at most
    committed_records_per_ready_max records per Ready (at least one batch, however large),
    asks to be polled again at once for the rest, and steps what arrives in between: a vote
    request is answered before the rest of the backlog is handed out."""
    follower = Context(
        node_id=2,
        election=ElectionState(1, 1, None, VOTERS),
        config=RaftConfig(committed_records_per_ready_max=3),
    )
    (fetch,) = follower.sent(follower.poll(), FetchRequest)
    batches, offset = [], 0
    for size in (1, 1, 1, 2, 5, 1):
        records = [NoOpRecord()] * size
        batches.append(encode_batch(base_offset=offset, epoch=1, timestamp_ms=0, records=records))
        offset += size
    response = FetchResponse(ErrorCode.NONE, 1, 1, offset, 0, batches=tuple(batches))
    follower.deliver(1, response, fetch.correlation_id)
    handed: list[list[int]] = []
    answered_with: list[int] = []
    for _ in range(10):
        ready = follower.poll()
        if not ready.committed_batches:
            break
        handed.append([b.record_count for b in ready.committed_batches])
        assert ready.high_watermark == offset
        more = sum(map(sum, handed)) < offset
        assert (ready.next_poll_at_ms == follower.now_ms) == more
        if follower.sent(ready, VoteResponse):
            answered_with = handed[-1]
        if len(handed) == 1:
            follower.deliver(3, vote_request(2, 3, 1, offset, pre_vote=True, voter=2))
    assert handed == [[1, 1, 1], [2], [5], [1]]
    assert answered_with == [2]  # the pre-vote, with the next share, not after the backlog


def test_propose_on_a_follower_raises_not_leader() -> None:
    ctx = Context(node_id=2, election=ElectionState(1, 1, None, VOTERS))
    ctx.poll()
    with pytest.raises(NotLeaderError) as excinfo:
        ctx.node.propose([NoOpRecord()], 0)
    assert excinfo.value.leader_id == 1
    assert excinfo.value.retriable


def test_proposal_is_one_atomic_batch_at_the_offsets_promised() -> None:
    ctx = Context(voters=frozenset({1}))
    ctx.poll(advance_ms=2000)
    ctx.poll()
    records = [ConfigRecord(ConfigResourceType.TOPIC, "t", "k", str(i)) for i in range(5)]
    placed = ctx.node.propose(records, ctx.now_ms)
    ready = ctx.poll()
    (batch,) = ready.entries_to_append
    assert batch.base_offset == placed.base_offset
    assert batch.last_offset == placed.last_offset
    assert decode_batch(batch.data).records == tuple(records)


def test_begin_quorum_epoch_makes_a_follower() -> None:
    ctx = Context()
    ctx.poll()
    ctx.deliver(2, BeginQuorumEpochRequest(HEADER, 2, 5, 1))
    ready = ctx.poll()
    assert isinstance(ctx.node.state, FollowerState)
    assert ready.election_to_persist == ElectionState(5, 2, None, VOTERS)


def test_end_quorum_epoch_first_successor_runs_at_once() -> None:
    """KIP-595: the first preferred successor starts its election immediately."""
    ctx = Context(election=ElectionState(1, 2, None, VOTERS))
    ctx.poll()
    ctx.deliver(2, EndQuorumEpochRequest(HEADER, 2, 1, (1, 3)))
    ready = ctx.poll()
    assert isinstance(ctx.node.state, ProspectiveState)
    assert {r.destination for r in ctx.sent(ready, VoteRequest)} == {2, 3}


def test_graceful_resign_sends_end_quorum_epoch_with_successors() -> None:
    ctx = Context()
    ctx.elect()
    ctx.node.resign(ctx.now_ms)
    ready = ctx.poll()
    ends = ctx.sent(ready, EndQuorumEpochRequest)
    assert {e.destination for e in ends} == {2, 3}
    assert set(ends[0].message.preferred_successors) == {2, 3}  # type: ignore[union-attr]
    with pytest.raises(NotLeaderError):
        ctx.node.propose([NoOpRecord()], ctx.now_ms)


def test_check_quorum_resigns_a_leader_nobody_fetches_from() -> None:
    ctx = Context()
    ctx.elect()
    ctx.poll(advance_ms=ctx.node.config.check_quorum_timeout_ms + 1)
    assert not ctx.node.is_leader()


def test_leader_writes_no_op_when_idle() -> None:
    ctx = Context(voters=frozenset({1}))
    ctx.poll(advance_ms=2000)
    ctx.poll()
    end = ctx.node.log_end_offset
    ready = ctx.poll(advance_ms=ctx.node.config.idle_interval_ms)
    (batch,) = ready.entries_to_append
    assert batch.base_offset == end
    assert decode_batch(batch.data).records == (NoOpRecord(),)


def test_describe_quorum_on_leader_and_follower() -> None:
    ctx = Context()
    ctx.elect()
    ctx.deliver(2, fetch_request(2, 1, 1, 1))
    ctx.poll()
    ctx.deliver(99, DescribeQuorumRequest(HEADER))
    (response,) = ctx.sent(ctx.poll(), DescribeQuorumResponse)
    message = response.message
    assert isinstance(message, DescribeQuorumResponse)
    assert message.leader_id == 1
    assert [v.replica_id for v in message.voters] == [1, 2, 3]
    assert message.voters[1].log_end_offset == 1
    follower = Context(node_id=2, election=ElectionState(1, 1, None, VOTERS))
    follower.poll()
    follower.deliver(99, DescribeQuorumRequest(HEADER))
    (answer,) = follower.sent(follower.poll(), DescribeQuorumResponse)
    assert answer.message.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER  # type: ignore[union-attr]
    assert answer.message.leader_id == 1  # type: ignore[union-attr]


def test_restart_as_former_leader_resigns() -> None:
    """A leader that crashed can never lead its old epoch again."""
    ctx = Context(election=ElectionState(4, 1, 1, VOTERS))
    assert ctx.node.state.name == "resigned"
    assert not ctx.node.is_leader()


def test_state_table_refuses_illegal_transitions() -> None:
    unattached = UnattachedState(2, 3, 0)
    with pytest.raises(IllegalTransitionError, match="vote changed"):
        check_transition(unattached, UnattachedState(2, 2, 0), local_id=1)
    with pytest.raises(IllegalTransitionError, match="epoch goes back"):
        check_transition(unattached, UnattachedState(1, None, 0), local_id=1)
    with pytest.raises(IllegalTransitionError, match="unattached -> leader"):
        check_transition(
            unattached, LeaderState(2, 1, 0, {}, BatchAccumulator(2, RaftConfig())), local_id=1
        )
    follower = FollowerState(2, 3, None, 0)
    with pytest.raises(IllegalTransitionError, match="leader changed"):
        check_transition(follower, FollowerState(2, 2, None, 0), local_id=1)
    check_transition(follower, FollowerState(3, 2, None, 0), local_id=1)


def test_observer_finds_the_leader_through_any_voter() -> None:
    ctx = Context(node_id=100)
    ready = ctx.poll()
    (fetch,) = ctx.sent(ready, FetchRequest)
    ctx.deliver(
        fetch.destination,
        FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 3, 2, 0, 0),
        fetch.correlation_id,
    )
    ready = ctx.poll()
    assert isinstance(ctx.node.state, FollowerState)
    assert ctx.node.leader_id == 3
    assert ready.election_to_persist is None  # observers persist nothing


def test_proposals_that_overflow_the_open_batch_seal_it_and_keep_every_record() -> None:
    """A proposal that does not fit in the open batch seals it and starts a new one; every
    record lands at the offsets promised (a regression: the second part was once lost)."""
    config = RaftConfig(records_per_batch_max=10, adaptive_batching=False)
    ctx = Context(voters=frozenset({1}), config=config)
    ctx.poll(advance_ms=2000)
    ctx.poll()
    first = ctx.node.propose(
        [ConfigRecord(ConfigResourceType.TOPIC, "a", "k", str(i)) for i in range(8)], ctx.now_ms
    )
    second = ctx.node.propose(
        [ConfigRecord(ConfigResourceType.TOPIC, "b", "k", str(i)) for i in range(5)], ctx.now_ms
    )
    assert second.base_offset == first.last_offset + 1
    assert ctx.node.next_offset() == second.last_offset + 1
    ready = ctx.poll()
    appended = [b for b in ready.entries_to_append if b.base_offset >= first.base_offset]
    assert [(b.base_offset, b.record_count) for b in appended] == [
        (first.base_offset, 8),
        (second.base_offset, 5),
    ]


def test_parked_fetch_is_answered_when_the_leader_steps_down() -> None:
    """A long-poll Fetch waits in the leader's fetch purgatory; when the leader loses its
    epoch, the purgatory goes with its state and the fetcher is told NOT_LEADER_OR_FOLLOWER
    by the leader of the old epoch."""
    ctx = Context()
    ctx.elect()
    end = ctx.node.log_end_offset
    ctx.deliver(2, fetch_request(2, 1, end, 1))
    ctx.poll()
    hw = ctx.node.high_watermark
    assert hw == end
    ctx.deliver(2, FetchRequest(HEADER, 2, 1, end, 1, 500, 1 << 20, hw))
    assert ctx.sent(ctx.poll(), FetchResponse) == []  # parked: nothing new for the fetcher
    ctx.deliver(3, BeginQuorumEpochRequest(HEADER, 3, 2, 1))  # node 3 leads epoch 2
    (answer,) = ctx.sent(ctx.poll(), FetchResponse)
    assert answer.destination == 2
    message = answer.message
    assert isinstance(message, FetchResponse)
    assert (message.error_code, message.leader_id, message.leader_epoch) == (
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        1,
        1,
    )
    assert not ctx.node.is_leader() and ctx.node.state_as(LeaderState) is None


def test_high_watermark_news_waits_the_notify_delay_per_fetcher() -> None:
    """A parked Fetch whose only news is a higher high watermark is answered
    ``high_watermark_notify_delay_ms`` after the high watermark passed what *that* fetcher
    knows, not after a delay that began with another fetcher's news: writes a few
    milliseconds apart then carry the high watermark along with their data instead of
    costing each follower a second Fetch round. New data answers at once."""
    ctx = Context()
    ctx.elect()
    delay = ctx.node.config.high_watermark_notify_delay_ms
    assert delay == 5
    epoch = ctx.node.epoch
    end = ctx.node.log_end_offset
    for voter in (2, 3):  # both catch up and learn the high watermark
        ctx.deliver(voter, fetch_request(voter, epoch, end, epoch))
    ctx.poll()
    hw = ctx.node.high_watermark
    assert hw == end

    def parked_fetch(voter: int, offset: int, known_hw: int) -> FetchRequest:
        return FetchRequest(HEADER, voter, epoch, offset, epoch, 500, 1 << 20, known_hw)

    def answered(ready: Ready) -> list[int]:
        return sorted(e.destination for e in ctx.sent(ready, FetchResponse))

    ctx.node.propose([NoOpRecord()], ctx.now_ms)
    ctx.poll()  # appended (and durable: the context advances every Ready)
    new_end = ctx.node.log_end_offset
    assert new_end > end
    # Voter 2 has the batch: the high watermark passes it, and voter 2 parks behind it.
    ctx.deliver(2, parked_fetch(2, new_end, hw))
    assert answered(ctx.poll()) == []
    assert ctx.node.high_watermark == new_end
    # 3 ms later voter 3 has it too and parks, also behind.
    ctx.now_ms += 3
    ctx.deliver(3, parked_fetch(3, new_end, hw))
    assert answered(ctx.poll()) == []
    # Voter 2's news is now the delay old, voter 3's is not yet.
    assert answered(ctx.poll(advance_ms=delay - 3)) == [2]
    assert answered(ctx.poll(advance_ms=2)) == []
    assert answered(ctx.poll(advance_ms=1)) == [3]
    # New data answers a parked Fetch at once, with the high watermark along.
    for voter in (2, 3):
        ctx.deliver(voter, parked_fetch(voter, new_end, new_end))
    assert answered(ctx.poll()) == []
    ctx.node.propose([NoOpRecord()], ctx.now_ms)
    ready = ctx.poll()
    assert answered(ready) == [2, 3]
    for envelope in ctx.sent(ready, FetchResponse):
        assert isinstance(envelope.message, FetchResponse)
        assert envelope.message.high_watermark == new_end
        assert envelope.message.batches


def test_a_header_error_is_reported_once() -> None:
    ctx = Context()
    ctx.poll()
    ctx.deliver(2, VoteRequest(RequestHeader(CLUSTER, METADATA_TOPIC_ID, 3), 1, 2, 0, 0, False, 1))
    ready = ctx.poll()
    assert [e.name for e in ready.events] == ["request_rejected"]
    (response,) = ctx.sent(ready, VoteResponse)
    assert response.message.error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[union-attr]


def test_state_as_answers_only_for_the_current_role() -> None:
    ctx = Context(node_id=2, election=ElectionState(1, 1, None, VOTERS))
    assert ctx.node.state_as(FollowerState) is ctx.node.state
    assert ctx.node.state_as(LeaderState) is None
    with pytest.raises(IllegalStateError):
        ctx.node.transition_to_resigned("only a leader resigns")


def test_batches_are_stamped_with_the_wall_clock_the_driver_gives() -> None:
    """Kafka stamps a batch with its append time. The core's clock is the driver's monotonic
    one, so the driver hands it the offset to the wall clock (``wall_clock_offset_ms``); the
    LeaderChangeMessage, NoOps and proposals all carry now + that offset."""
    ctx = Context(voters=frozenset({1}))
    wall_offset = 1_764_000_000_000
    ctx.node.wall_clock_offset_ms = wall_offset
    ctx.poll(advance_ms=2000)
    ctx.poll()
    assert ctx.node.is_leader()
    ctx.node.propose([NoOpRecord()], ctx.now_ms)
    ctx.poll(advance_ms=30)
    ctx.poll()
    ctx.poll(advance_ms=ctx.node.config.idle_interval_ms)
    ctx.poll()
    batches = [decode_batch(b.data) for r in ctx.readies for b in r.committed_batches]
    assert len(batches) >= 3  # the leader change, the proposal, an idle NoOp
    for batch in batches:
        assert wall_offset <= batch.timestamp_ms <= wall_offset + ctx.now_ms, batch
