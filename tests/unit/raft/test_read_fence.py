"""Linearizable reads on the leader (Raft thesis section 6.4, ReadIndex) confirmed by read
fences instead of clocks (docs/architecture.md#linearizable-reads).

The rule under test: a read started at time r may be served at the leader's high watermark only
once a majority of voters echoed a fence that a FetchResponse built after r carried, and only
once the leader committed an entry of its own epoch.
"""

from __future__ import annotations

import pytest

from quorum.errors import ErrorCode
from quorum.raft.messages import BeginQuorumEpochRequest, FetchRequest, FetchResponse
from quorum.raft.node import NotLeaderError
from tests.unit.raft.test_raft_node import HEADER, Context


def fetch(replica: int, offset: int, hw: int, fence: int, max_wait_ms: int = 500) -> FetchRequest:
    return FetchRequest(HEADER, replica, 1, offset, 1, max_wait_ms, 1 << 20, hw, fence)


def leader_with_commit() -> tuple[Context, int]:
    """Node 1 leads epoch 1 and committed its LeaderChangeMessage (2 fetched it)."""
    ctx = Context()
    ctx.elect()
    end = ctx.node.log_end_offset
    ctx.deliver(2, fetch(2, end, 0, 0, max_wait_ms=0))
    ctx.poll()
    assert ctx.node.high_watermark == end
    return ctx, end


def responses(ctx: Context) -> list[FetchResponse]:
    return [e.message for e in ctx.sent(ctx.poll(), FetchResponse)]  # type: ignore[misc]


def test_a_read_waits_for_a_majority_to_echo_a_fence_handed_out_after_it_began() -> None:
    ctx, end = leader_with_commit()
    # An echo of the newest fence before the read began proves nothing about the read.
    epoch, fence = ctx.node.read_barrier()
    assert (epoch, fence) == (1, 1)
    assert ctx.node.read_index(epoch, fence) is None
    ctx.deliver(3, fetch(3, end, end, 1))  # claims fence 1 before any response carried it
    assert responses(ctx) == []  # parked
    assert ctx.node.read_index(epoch, fence) is None
    ctx.deliver(2, fetch(2, end, end, 0, max_wait_ms=0))
    (answer,) = responses(ctx)
    assert answer.read_fence == fence
    assert ctx.node.read_index(epoch, fence) is None  # 2 has not echoed it yet
    ctx.deliver(2, fetch(2, end, end, fence))  # 2 echoes: with the leader, a majority
    ctx.poll()
    assert ctx.node.read_index(epoch, fence) == end


def test_parked_voter_fetches_are_answered_at_once_with_the_new_fence() -> None:
    ctx, end = leader_with_commit()
    ctx.deliver(2, fetch(2, end, end, 0))
    assert responses(ctx) == []  # parked: nothing new
    _, fence = ctx.node.read_barrier()
    (answer,) = responses(ctx)
    assert answer.error_code is ErrorCode.NONE and answer.read_fence == fence
    # A second read before any response carried a newer fence shares... a new one: the parked
    # answer above carried fence 1, so a read starting now needs fence 2.
    _, second = ctx.node.read_barrier()
    assert second == fence + 1
    # Two reads before any response share one fence.
    _, third = ctx.node.read_barrier()
    assert third == second


def test_an_echo_of_a_fence_not_handed_out_yet_counts_only_up_to_the_newest() -> None:
    ctx, end = leader_with_commit()
    ctx.deliver(2, fetch(2, end, end, 99, max_wait_ms=0))  # forged or buggy: fence 99
    ctx.poll()
    epoch, fence = ctx.node.read_barrier()
    assert fence == 1
    assert ctx.node.read_index(epoch, fence) is None, "an echo from before the read counted"


def test_no_read_before_the_epoch_committed_its_first_entry() -> None:
    """A new leader's high watermark may not cover what an earlier leader committed until its
    own LeaderChangeMessage commits: a read waits for that too."""
    ctx = Context()
    ctx.elect()
    epoch, fence = ctx.node.read_barrier()
    end = ctx.node.log_end_offset
    ctx.deliver(2, fetch(2, 0, 0, fence, max_wait_ms=0))  # echoes, but has nothing yet
    ctx.poll()
    assert ctx.node.high_watermark == 0
    assert ctx.node.read_index(epoch, fence) is None
    ctx.deliver(2, fetch(2, end, 0, fence, max_wait_ms=0))
    ctx.poll()
    assert ctx.node.read_index(epoch, fence) == end


def test_a_deposed_leader_never_confirms_a_read() -> None:
    ctx, _ = leader_with_commit()
    epoch, fence = ctx.node.read_barrier()
    ctx.deliver(3, BeginQuorumEpochRequest(HEADER, 3, 2, 1))  # node 3 leads epoch 2
    ctx.poll()
    with pytest.raises(NotLeaderError):
        ctx.node.read_index(epoch, fence)
    with pytest.raises(NotLeaderError):
        ctx.node.read_barrier()


def test_a_single_voter_confirms_its_own_reads() -> None:
    ctx = Context(voters=frozenset({1}))
    ctx.poll(advance_ms=2 * ctx.node.config.election_timeout_ms)
    ctx.poll()
    ctx.poll()
    assert ctx.node.is_leader()
    epoch, fence = ctx.node.read_barrier()
    assert ctx.node.read_index(epoch, fence) == ctx.node.high_watermark > 0


def test_a_follower_echoes_the_newest_fence_of_its_leader() -> None:
    ctx = Context(node_id=2)
    ctx.deliver(1, BeginQuorumEpochRequest(HEADER, 1, 1, 2))
    ready = ctx.poll()
    (request,) = ctx.sent(ready, FetchRequest)
    assert request.message.read_fence == 0  # type: ignore[attr-defined]
    ctx.deliver(1, FetchResponse(ErrorCode.NONE, 1, 1, 0, 0, read_fence=7), request.correlation_id)
    (request,) = ctx.sent(ctx.poll(), FetchRequest)
    assert request.message.read_fence == 7  # type: ignore[attr-defined]
    # A lower fence later (reordered) never lowers the echo.
    ctx.deliver(1, FetchResponse(ErrorCode.NONE, 1, 1, 0, 0, read_fence=3), request.correlation_id)
    (request,) = ctx.sent(ctx.poll(), FetchRequest)
    assert request.message.read_fence == 7  # type: ignore[attr-defined]
