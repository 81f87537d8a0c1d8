"""Checkers that run beside the simulated cluster (docs/invariants.md I1-I8, I13, I14, I18,
I21).

They read the nodes' volatile state and their simulated disks; they never change either. Each
violation raises ``SimulationError`` naming the invariant, so a failing seed says what broke.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quorum.metadata.batch import LogBatch, decode_log_batch
from quorum.raft.majority import majority_size
from quorum.raft.state import LeaderState
from tests.sim.scheduler import SimulationError

if TYPE_CHECKING:
    from tests.sim.cluster import Read, SimCluster, SimNode


class Invariants:
    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        # I1: the one leader of each epoch.
        self.leader_of_epoch: dict[int, int] = {}
        # I5: the committed log as first seen applied anywhere: base offset -> batch.
        self.committed: dict[int, LogBatch] = {}
        self.committed_end = 0
        # Per node incarnation: last epoch and high watermark seen (I2, I3).
        self.last_epoch: dict[tuple[int, int], int] = {}
        self.last_durable_epoch: dict[int, int] = {}
        self.last_high_watermark: dict[tuple[int, int], int] = {}
        # The ``lost_write`` scenario makes the quorum lose a committed write on purpose (a
        # Fetch forged with a voter's key, issue 28): I4 cannot hold there, and the committed
        # log is rewritten from the lost offset on (``rewrites`` counts it) instead of I5
        # failing. Every other scenario keeps both.
        self.lost_writes_allowed = False
        self.rewrites = 0

    def fail(self, invariant: str, detail: str) -> None:
        raise SimulationError(f"{invariant} violated: {detail}")

    # ----- called by the harness at the moments they concern --------------------------------

    def on_committed(self, node: SimNode, batches: tuple[LogBatch, ...]) -> None:
        """I5 committed prefixes agree; the committed log has no gaps."""
        for batch in batches:
            known = self.committed.get(batch.base_offset)
            if (
                self.lost_writes_allowed
                and batch.base_offset < self.committed_end
                and known != batch
            ):
                self._rewrite_from(batch.base_offset)
                known = None
            if known is None:
                if batch.base_offset != self.committed_end:
                    self.fail(
                        "I5 (committed log contiguous)",
                        f"node {node.node_id} committed offset {batch.base_offset}, "
                        f"committed end is {self.committed_end}",
                    )
                self._check_timestamp(batch)
                self.committed[batch.base_offset] = batch
                self.committed_end = batch.end_offset
            elif known != batch:
                self.fail(
                    "I5 (committed prefixes agree)",
                    f"node {node.node_id} committed {batch!r} (epoch {batch.epoch}) at "
                    f"{batch.base_offset}, another node committed epoch {known.epoch} there",
                )

    def _check_timestamp(self, batch: LogBatch) -> None:
        """I21: a batch carries its leader's wall-clock append time (the simulated wall clock
        is the virtual clock plus the cluster's offset), whoever built it."""
        offset_ms = self.cluster.wall_clock_offset_ms
        appended_ms = decode_log_batch(batch).timestamp_ms - offset_ms
        if not 0 <= appended_ms <= self.cluster.scheduler.now_ms:
            self.fail(
                "I21 (batch timestamps are wall-clock)",
                f"batch at offset {batch.base_offset} (epoch {batch.epoch}) carries "
                f"{appended_ms + offset_ms}, not a wall-clock time between {offset_ms} and "
                f"{offset_ms + self.cluster.scheduler.now_ms}",
            )

    def _rewrite_from(self, offset: int) -> None:
        """The quorum lost what was committed from ``offset`` on (lost_write scenario)."""
        self.committed = {
            b: batch for b, batch in self.committed.items() if batch.end_offset <= offset
        }
        self.committed_end = max((b.end_offset for b in self.committed.values()), default=0)
        self.rewrites += 1

    def on_snapshot(self, node: SimNode, added: tuple[LogBatch, ...], end_offset: int) -> None:
        """I13: a snapshot holds exactly the committed log before its end offset. ``added``:
        the batches it holds beyond the node's previous snapshot (checked when that was made),
        or every batch of a snapshot fetched from a leader."""
        if end_offset > self.committed_end:
            self.fail(
                "I13 (snapshot of committed data only)",
                f"node {node.node_id} snapshots up to {end_offset}, committed only "
                f"{self.committed_end}",
            )
        for batch in added:
            if self.committed.get(batch.base_offset) != batch:
                self.fail(
                    "I13 (snapshot equals the committed log)",
                    f"node {node.node_id}'s snapshot up to {end_offset} holds {batch!r}, which "
                    "is not the committed batch at that offset",
                )
        if added and added[-1].end_offset != end_offset:
            self.fail("I13 (snapshot end)", f"node {node.node_id}: {added[-1]!r} vs {end_offset}")

    def on_durable_truncate(self, node: SimNode, offset: int, high_watermark: int) -> None:
        """I7: no truncation below the high watermark."""
        if offset < high_watermark:
            self.fail(
                "I7 (no truncation below the high watermark)",
                f"node {node.node_id} truncated to {offset} below its high watermark "
                f"{high_watermark}",
            )

    def on_log_discarded(self, node: SimNode) -> None:
        """An observer discarded a diverged log (quorum/raft/prefix_divergence.py): its high
        watermark starts again from 0 (I3 holds from there on)."""
        self.last_high_watermark.pop((node.node_id, node.incarnation), None)

    def on_durable_election(self, node: SimNode, epoch: int) -> None:
        """I2: the persisted epoch never goes back."""
        last = self.last_durable_epoch.get(node.node_id, 0)
        if epoch < last:
            self.fail("I2 (persisted epoch monotonic)", f"node {node.node_id}: {last} -> {epoch}")
        self.last_durable_epoch[node.node_id] = epoch

    def on_high_watermark_exposed(self, node: SimNode, high_watermark: int) -> None:
        """I8: a leader never commits beyond what it has made durable itself."""
        if node.raft is not None and node.raft.is_leader():
            durable = node.disk_end_offset()
            if high_watermark > durable:
                self.fail(
                    "I8 (commit is durable)",
                    f"leader {node.node_id} exposes high watermark {high_watermark} but has "
                    f"only {durable} on disk",
                )

    def on_read_served(self, node: SimNode, index: int, read: Read) -> None:
        """I17: a read is served at an offset covering every write committed before the read
        began (so an acknowledged write is never missing from a later read)."""
        if index < read.committed_end:
            self.fail(
                "I17 (linearizable reads)",
                f"node {node.node_id} served a read at offset {index}; writes up to "
                f"{read.committed_end} were committed before the read began",
            )

    # ----- after every event ----------------------------------------------------------------

    def check(self) -> None:
        cluster = self.cluster
        for node in cluster.nodes.values():
            raft = node.raft
            if raft is None:
                continue
            nid = node.node_id
            # I1: at most one leader per epoch.
            if isinstance(raft.state, LeaderState):
                holder = self.leader_of_epoch.setdefault(raft.epoch, nid)
                if holder != nid:
                    self.fail(
                        "I1 (one leader per epoch)",
                        f"nodes {holder} and {nid} both lead epoch {raft.epoch}",
                    )
            # I2: epochs never go back within an incarnation (across restarts, the persisted
            # epoch is checked by on_durable_election: an epoch never made durable was never
            # acted upon outside the node).
            key = (nid, node.incarnation)
            if raft.epoch < self.last_epoch.get(key, 0):
                self.fail(
                    "I2 (epoch monotonic)", f"node {nid}: {self.last_epoch[key]} -> {raft.epoch}"
                )
            self.last_epoch[key] = raft.epoch
            # I13: the in-memory log starts where the node's snapshot ends.
            if raft.log.log_start_offset != node.disk_start_offset():
                self.fail(
                    "I13 (snapshot at log start)",
                    f"node {nid} log starts at {raft.log.log_start_offset}, its snapshot ends at "
                    f"{node.disk_start_offset()}",
                )
            # I3: the high watermark never goes back within an incarnation.
            hw = raft.high_watermark
            if hw < self.last_high_watermark.get(key, 0):
                self.fail(
                    "I3 (high watermark monotonic)",
                    f"node {nid}: {self.last_high_watermark[key]} -> {hw}",
                )
            self.last_high_watermark[key] = hw
        self.check_majority_holds_committed()

    def check_majority_holds_committed(self) -> None:
        """I4 and I6: every committed batch is on the disks of a majority of voters, with the
        same contents: nothing committed can be lost, whatever crashes next."""
        if self.committed_end == 0 or self.lost_writes_allowed:
            return
        cluster = self.cluster
        if cluster.dynamic:
            self.check_voter_sets_hold_committed()
            return
        holding = 0
        for node in cluster.voters():
            if node.verified_disk_end(self.committed) >= self.committed_end:
                holding += 1
        if holding < cluster.majority:
            self.fail(
                "I4 (a majority holds the committed log)",
                f"only {holding} of {len(cluster.voter_ids)} voters hold offsets below "
                f"{self.committed_end} on disk",
            )

    def check_voter_sets_hold_committed(self) -> None:
        """I18 (I4 for a voter set that changes): no two majorities of different voter sets
        can commit conflicting entries. A replica whose disk lacks part of the committed log
        must not be electable: among the voters of the set it would use after a crash (the
        latest on its disk; in memory too while it runs), the ones that would grant it a vote
        (itself, and every replica whose durable log is not ahead of its log) must not be a
        majority. A voter key no replica has any more (a wiped disk's old directory id)
        cannot vote. With one change at a time this holds; two concurrent changes break it."""
        cluster = self.cluster
        controllers = [node for node in cluster.nodes.values() if node.controller]
        lacking = [
            n for n in controllers if n.verified_disk_end(self.committed) < self.committed_end
        ]
        if not lacking:
            return
        positions = [(node.key, node.disk_log_position()) for node in controllers]
        for node in lacking:
            views = [(node.durable_voter_set(), node.disk_log_position())]
            raft = node.raft
            if raft is not None and raft.log.log_end_offset < self.committed_end:
                views.append((raft.voter_set, (raft.log.last_fetched_epoch, raft.log_end_offset)))
            for voters, position in views:
                if not voters.is_voter(node.key):
                    continue  # it would not run for election
                granting = [
                    key
                    for key, other in positions
                    if voters.is_voter(key) and (key == node.key or other <= position)
                ]
                if len(granting) >= majority_size(len(voters)):
                    self.fail(
                        "I18 (no two majorities of different voter sets commit conflicting "
                        "entries)",
                        f"node {node.node_id} lacks committed offsets below "
                        f"{self.committed_end} yet voters {[str(k) for k in granting]}, a "
                        f"majority of its voter set {voters!r}, would elect it",
                    )
