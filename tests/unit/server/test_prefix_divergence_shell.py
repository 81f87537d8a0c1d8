"""What the shell does with ``Ready.prefix_diverged`` (quorum/server/raft_manager.py,
docs/architecture.md#a-committed-prefix-that-diverges): a controller stops with one message;
a broker empties its local metadata log, deletes its snapshots and restarts the core at
offset 0, then hands its image over to be rebuilt."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from quorum.errors import ErrorCode
from quorum.metadata.batch import encode_batch
from quorum.metadata.records import NoOpRecord
from quorum.raft.election import ElectionState
from quorum.raft.messages import DivergingEpoch, FetchRequest, FetchResponse, SnapshotId
from quorum.raft.prefix_divergence import PrefixDivergence
from quorum.server.driver import Clock
from quorum.server.raft_manager import CommittedPrefixDivergedError, RaftManager, StartupError
from quorum.storage import SegmentedLog
from quorum.storage.snapshots import list_snapshots, snapshot_path
from tests.unit.raft.test_raft_node import VOTERS, Context

BATCHES = [
    encode_batch(base_offset=i, epoch=1, timestamp_ms=0, records=[NoOpRecord()]) for i in range(4)
]


def diverged(
    node_id: int, election: ElectionState | None = None
) -> tuple[Context, PrefixDivergence]:
    """A node whose log (four committed batches) the leader says diverges at offset 1."""
    ctx = Context(node_id=node_id, election=election, batches=tuple(BATCHES))
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    ctx.deliver(fetch.destination, FetchResponse(ErrorCode.NONE, 1, 1, 4, 0), fetch.correlation_id)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    assert ctx.node.high_watermark == 4
    answer = FetchResponse(ErrorCode.NONE, 1, 2, 3, 0, diverging_epoch=DivergingEpoch(1, 1))
    ctx.deliver(1, answer, fetch.correlation_id)
    divergence = ctx.poll().prefix_diverged
    assert divergence is not None
    return ctx, divergence


class FakeDriver:
    """Runs ``call_in_loop`` functions at once (the loop owns the node in production)."""

    def __init__(self) -> None:
        self.calls = 0

    async def call_in_loop(self, function: Any) -> Any:
        self.calls += 1
        return function()


class FakeSnapshotter:
    bytes_since = 123

    def due(self) -> bool:
        return False


def manager(tmp_path: Path, ctx: Context, segments: SegmentedLog | None = None) -> RaftManager:
    return RaftManager(
        config=cast(Any, None),
        security=cast(Any, None),
        cluster_id="test-cluster-id",
        directory=tmp_path,
        segments=cast(Any, segments),
        clock=Clock(),
        node=ctx.node,
        peers=cast(Any, None),
        driver=cast(Any, FakeDriver()),
        snapshotter=cast(Any, FakeSnapshotter()),
        logger=structlog.get_logger("test"),
    )


def test_a_controller_stops_with_one_message(tmp_path: Path) -> None:
    ctx, divergence = diverged(2, ElectionState(1, 1, None, VOTERS))
    assert not divergence.recoverable
    with pytest.raises(CommittedPrefixDivergedError) as raised:
        manager(tmp_path, ctx).prefix_diverged(divergence)
    assert isinstance(raised.value, StartupError)  # the CLI prints it and exits 1
    assert str(raised.value) == divergence.describe()
    assert "below this node's high watermark 4" in str(raised.value)


def test_a_broker_discards_its_log_and_snapshots_then_fetches_from_zero(tmp_path: Path) -> None:
    ctx, divergence = diverged(7)
    assert divergence.recoverable
    segments = SegmentedLog.open(tmp_path)
    segments.append(BATCHES)
    segments.flush()
    snapshot_path(tmp_path, SnapshotId(2, 1)).write_bytes(b"a snapshot of the lost prefix")
    raft = manager(tmp_path, ctx, segments)
    handed_over: list[PrefixDivergence] = []
    raft.on_log_discarded = handed_over.append

    async def run() -> None:
        raft.prefix_diverged(divergence)
        raft.maybe_take_snapshot(cast(Any, None))  # refused while discarding: no snapshot task
        await asyncio.gather(*raft._background)

    asyncio.run(run())
    assert handed_over == [divergence]
    assert (segments.log_start_offset, segments.log_end_offset) == (0, 0)
    assert list_snapshots(tmp_path) == []
    assert raft.snapshotter.bytes_since == 0
    assert (ctx.node.log_end_offset, ctx.node.high_watermark) == (0, 0)
    (fetch,) = ctx.sent(ctx.poll(), FetchRequest)
    assert (fetch.message.fetch_offset, fetch.message.last_fetched_epoch) == (0, 0)  # type: ignore[union-attr]
    segments.close()
