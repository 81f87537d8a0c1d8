"""Issue 28: a committed prefix that diverges from the leader's log (quorum/raft/
prefix_divergence.py). The issue's lost write, on real ``RaftNode``s driven through step/poll:
a Fetch forged in a voter's name makes the leader commit what only it holds, an observer
applies it, the leader dies, the other voters elect a leader without it. The observer is told
to truncate below its high watermark: it used to drop that answer and fetch again forever; now
it discards its log and fetches the quorum's again (a voter stops instead), never loops."""

from __future__ import annotations

import random

import pytest

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.records import ConfigRecord, ConfigResourceType, NoOpRecord
from quorum.raft.election import ElectionState
from quorum.raft.messages import (
    DivergingEpoch,
    Envelope,
    FetchRequest,
    FetchResponse,
    RequestFailed,
    SnapshotId,
)
from quorum.raft.node import RaftNode, Ready
from quorum.raft.state import ProspectiveState
from tests.unit.raft.test_raft_node import VOTERS, Context, fetch_request


class Net:
    """Nodes that pass their messages to each other; a node in ``down`` is dead (a request to
    it fails at once, as a refused connection does)."""

    def __init__(self, *nodes: Context) -> None:
        self.nodes = {ctx.node.node_id: ctx for ctx in nodes}
        self.down: set[int] = set()
        self.readies: dict[int, list[Ready]] = {n: [] for n in self.nodes}

    def run(self, rounds: int, advance_ms: int = 10) -> None:
        for _ in range(rounds):
            for node_id, ctx in self.nodes.items():
                if node_id in self.down:
                    continue
                ready = ctx.poll(advance_ms=advance_ms)
                self.readies[node_id].append(ready)
                for envelope in ready.messages_to_send:
                    self._deliver(envelope)

    def _deliver(self, envelope: Envelope) -> None:
        target = self.nodes.get(envelope.destination)
        if target is None or envelope.destination in self.down:
            if envelope.is_request and envelope.source not in self.down:
                source = self.nodes[envelope.source]
                failed = RequestFailed("connection refused", peer_gone=True)
                source.deliver(envelope.destination, failed, envelope.correlation_id)
            return
        target.deliver(envelope.source, envelope.message, envelope.correlation_id)

    def committed(self, node_id: int) -> list[LogBatch]:
        return [b for r in self.readies[node_id] for b in r.committed_batches]


def topic_record(name: str) -> ConfigRecord:
    return ConfigRecord(ConfigResourceType.TOPIC, name, "k", "v")


def lose_a_write() -> tuple[Net, Context, LogBatch]:
    """Leader 1 (epoch 1) with follower 2 and observer 7; voter 3 is down. Node 2 goes down,
    a Fetch forged in its name claims the leader's log end, and the leader commits a batch
    only it holds; the observer applies it. Then leader 1 dies and nodes 2 and 3 come back:
    node 2 wins epoch 2 with a log that lacks the batch. Returns the net (node 1 down), the
    observer and the lost batch."""
    leader, follower, voter_3, observer = (Context(node_id=n) for n in (1, 2, 3, 7))
    leader.elect()
    net = Net(leader, follower, voter_3, observer)
    net.down = {3}
    net.run(200)  # BeginQuorumEpoch is resent every fetch timeout / 2
    assert follower.node.leader_id == 1 and observer.node.leader_id == 1
    assert observer.node.high_watermark > 0
    net.down = {2, 3}
    proposal = leader.node.propose([topic_record("lost")], leader.now_ms)
    net.run(3)
    end = leader.node.log_end_offset
    # The stolen certificate: node 2 "has" everything the leader has.
    leader.deliver(2, fetch_request(2, 1, end, 1))
    net.run(20)
    assert leader.node.high_watermark >= end > proposal.last_offset
    assert observer.node.high_watermark > proposal.last_offset
    assert follower.node.log_end_offset <= proposal.base_offset  # node 2 never had it
    (lost,) = [b for b in net.committed(7) if b.base_offset == proposal.base_offset]
    net.down = {1}
    return net, observer, lost


def test_an_observer_discards_a_diverged_log_and_converges_to_the_quorum() -> None:
    net, observer, lost = lose_a_write()
    net.run(600)  # nodes 2 and 3 elect node 2; the observer's Fetch at node 1 fails over
    assert net.nodes[2].node.is_leader() and net.nodes[2].node.epoch == 2
    divergences = [r.prefix_diverged for r in net.readies[7] if r.prefix_diverged is not None]
    (divergence,) = divergences  # once, not a loop of refused answers
    assert divergence.recoverable and divergence.leader_id == 2 and divergence.leader_epoch == 2
    assert divergence.truncate_to < divergence.high_watermark
    events = [e for r in net.readies[7] for e in r.events if e.name == "committed_prefix_diverged"]
    assert len(events) == 1 and "lost" in str(events[0].fields["message"])
    # Until its shell discards the log, the observer fetches nothing and times nothing out.
    assert observer.node.rebuilding_committed_prefix
    before = len(net.readies[7])
    net.run(300)
    assert not any(
        isinstance(e.message, FetchRequest)
        for r in net.readies[7][before:]
        for e in r.messages_to_send
    )
    assert observer.node.leader_id == 2
    # The shell emptied the log, snapshots and image: the core starts again at offset 0.
    observer.node.discard_diverged_log(observer.now_ms)
    assert (observer.node.log_end_offset, observer.node.high_watermark) == (0, 0)
    mark = len(net.readies[7])
    net.run(60)
    rebuilt = [b for r in net.readies[7][mark:] for b in r.committed_batches]
    leader_log = log_batches(net.nodes[2].node)
    assert rebuilt == [b for b in leader_log if b.end_offset <= net.nodes[2].node.high_watermark]
    assert lost not in rebuilt and rebuilt[0].base_offset == 0
    assert not observer.node.rebuilding_committed_prefix
    assert any(e.name == "committed_prefix_rebuilt" for r in net.readies[7] for e in r.events)
    # And it follows the new leader from then on.
    net.nodes[2].node.propose([topic_record("after")], net.nodes[2].now_ms)
    net.run(30)
    assert log_batches(observer.node) == log_batches(net.nodes[2].node)


def test_a_voter_stops_fetching_for_good() -> None:
    """A voter cannot rebuild its state machine here: it reports the divergence once for its
    shell to stop, and sends no Fetch again however long it waits (never a loop)."""
    batches = [
        encode_batch(base_offset=i, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
        for i in range(3)
    ]
    ctx = Context(node_id=2, election=ElectionState(1, 1, None, VOTERS), batches=tuple(batches))
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    ctx.deliver(1, FetchResponse(ErrorCode.NONE, 1, 1, 3, 0), fetch.correlation_id)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    assert ctx.node.high_watermark == 3
    ctx.deliver(
        1,
        FetchResponse(ErrorCode.NONE, 1, 2, 3, 0, diverging_epoch=DivergingEpoch(1, 1)),
        fetch.correlation_id,
    )
    ready = ctx.poll()
    divergence = ready.prefix_diverged
    assert divergence is not None and not divergence.recoverable
    assert (divergence.truncate_to, divergence.high_watermark) == (1, 3)
    assert "stops" in divergence.describe() and "restart" in divergence.describe()
    assert ready.truncate_to is None and ctx.node.log_end_offset == 3
    for _ in range(50):
        later = ctx.poll(advance_ms=500)
        assert not ctx.sent(later, FetchRequest) and later.prefix_diverged is None
    assert (
        not ctx.node.state_as(ProspectiveState) is not None
    )  # it does not start elections with that log either
    with pytest.raises(AssertionError):
        ctx.node.discard_diverged_log(ctx.now_ms)


def test_an_observer_sent_to_a_snapshot_below_its_high_watermark_recovers_from_it() -> None:
    """The leader's log diverges from ours inside its snapshot, which ends below what we saw
    committed: the same recovery, then the leader's snapshot first (KIP-630)."""
    batches = [
        encode_batch(base_offset=i, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
        for i in range(4)
    ]
    ctx = Context(node_id=7, batches=tuple(batches))
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    ctx.deliver(fetch.destination, FetchResponse(ErrorCode.NONE, 1, 1, 4, 0), fetch.correlation_id)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    assert ctx.node.high_watermark == 4 and ctx.node.leader_id == 1
    ctx.deliver(
        1,
        FetchResponse(ErrorCode.NONE, 1, 1, 6, 2, snapshot_id=SnapshotId(2, 1)),
        fetch.correlation_id,
    )
    ready = ctx.poll()
    assert ready.prefix_diverged is not None and ready.prefix_diverged.via_snapshot
    assert ready.snapshot_to_fetch is None
    ctx.node.discard_diverged_log(ctx.now_ms)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (0, 0)  # type: ignore[union-attr]
    ctx.deliver(
        1,
        FetchResponse(ErrorCode.NONE, 1, 1, 6, 2, snapshot_id=SnapshotId(2, 1)),
        fetch.correlation_id,
    )
    ready = ctx.poll()
    assert ready.snapshot_to_fetch == (1, SnapshotId(2, 1)) and ready.prefix_diverged is None
    ctx.node.install_snapshot(SnapshotId(2, 1), ctx.now_ms)
    assert ctx.node.rebuilding_committed_prefix  # until the leader's epoch 1 commits past it
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    tail = encode_batch(base_offset=2, epoch=1, timestamp_ms=0, records=[NoOpRecord()])
    ctx.deliver(1, FetchResponse(ErrorCode.NONE, 1, 1, 3, 2, batches=(tail,)), fetch.correlation_id)
    ready = ctx.poll()
    assert ready.committed_batches == (tail,)
    assert not ctx.node.rebuilding_committed_prefix


def test_a_metadata_topic_id_the_leader_never_had_does_not_hide_the_divergence() -> None:
    """The lost write may be the record that gave the metadata topic its id (KIP-516, written
    right after the first election): the new leader then refuses requests keyed by it
    (UNKNOWN_TOPIC_ID). The fetcher falls back to the sentinel every node accepts, so the
    leader's answer shows the divergence instead of being refused forever."""
    ctx = Context(node_id=7)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    ctx.deliver(fetch.destination, FetchResponse(ErrorCode.NONE, 1, 1, 0, 0), fetch.correlation_id)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    lost_id = Uuid.random(random.Random(7))
    ctx.node.set_metadata_topic_id(lost_id)
    ctx.deliver(1, FetchResponse(ErrorCode.UNKNOWN_TOPIC_ID, 1, 1, 0, 0), fetch.correlation_id)
    ready = ctx.poll(advance_ms=ctx.node.config.retry_backoff_ms)
    assert any(e.name == "metadata_topic_id_unknown" for e in ready.events)
    (fetch,) = ctx.sent(ready, FetchRequest)
    assert fetch.message.header.topic_id == METADATA_TOPIC_ID  # type: ignore[union-attr]


def log_batches(node: RaftNode) -> list[LogBatch]:
    """Every batch of ``node``'s in-memory log, in order."""
    return list(node.log.batches_between(node.log.log_start_offset, node.log.log_end_offset))
