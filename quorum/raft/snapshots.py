"""Snapshots in the core (KIP-630; docs/architecture.md#snapshots): a local snapshot compacts
the in-memory log, and a follower behind the leader's log start installs the leader's snapshot
that its shell downloaded (``Ready.snapshot_to_fetch``, asked for by ``quorum.raft.follower``).
The files are the shell's (``quorum/server/snapshotting.py``); the core keeps offsets, epochs
and the voter set a snapshot holds consistent.
"""

from __future__ import annotations

from quorum.raft.context import RaftContext
from quorum.raft.fetcher import Fetcher
from quorum.raft.messages import SnapshotId
from quorum.raft.state import FollowerState, LeaderState
from quorum.raft.voters import VoterSet


class Snapshots:
    """Compaction, and installing or giving up the leader's snapshot."""

    __slots__ = ("_ctx", "_fetcher")

    def __init__(self, ctx: RaftContext, fetcher: Fetcher) -> None:
        self._ctx = ctx
        self._fetcher = fetcher

    def compact(self, snapshot: SnapshotId) -> None:
        """``RaftNode.compact``: the log drops what a durable local snapshot covers."""
        ctx = self._ctx
        assert snapshot.end_offset <= ctx.applied_offset, (snapshot, ctx.applied_offset)
        assert snapshot.end_offset <= ctx.log.high_watermark, (snapshot, ctx.log)
        ctx.log.delete_before(snapshot.end_offset)
        ctx.voter_history.compact_to(snapshot.end_offset)
        assert ctx.log.snapshot_epoch == snapshot.epoch, (snapshot, ctx.log)
        ctx.emit("log_compacted", log_start_offset=snapshot.end_offset)

    def install_snapshot(self, snapshot: SnapshotId, voters: tuple[int, VoterSet] | None) -> None:
        """``RaftNode.install_snapshot``: the log starts again at the snapshot's end."""
        ctx = self._ctx
        assert not isinstance(ctx.state, LeaderState), "a leader never loads a snapshot (I13)"
        ctx.log.reset_to_snapshot(snapshot.end_offset, snapshot.epoch)
        if voters is not None:
            ctx.voter_history.reset(voters[1], voters[0], from_log=True)
        else:
            ctx.voter_history.reset(
                ctx.bootstrap_voters, ctx.bootstrap_kraft_version, from_log=False
            )
        ctx.voter_set_changed("snapshot installed")
        ctx.durable_end_offset = snapshot.end_offset
        ctx.applied_offset = snapshot.end_offset
        self._fetcher.fetching_snapshot = None
        self._fetcher.retry_now(ctx.now_ms)
        follower = ctx.state
        if isinstance(follower, FollowerState):
            follower.fetch_succeeded(ctx.now_ms, ctx.config.fetch_timeout_ms)
        ctx.emit("snapshot_installed", end_offset=snapshot.end_offset, epoch=snapshot.epoch)

    def snapshot_fetch_failed(self) -> None:
        """``RaftNode.snapshot_fetch_failed``: fetch again after the retry backoff (the leader
        names its current snapshot)."""
        ctx = self._ctx
        self._fetcher.fetching_snapshot = None
        self._fetcher.retry_after(ctx.now_ms, ctx.config.retry_backoff_ms)
