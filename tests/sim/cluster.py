"""A simulated KRaft cluster driving the real ``RaftNode`` (Kafka's RaftEventSimulationTest,
TigerBeetle's VOPR): one seed decides every delay, loss, crash and timer.

Each ``SimNode`` is the driver loop of ``quorum.raft.node`` carrying out the production driver's
plan (``quorum.raft.ready_plan``: a leader's Fetch responses leave before its fsync, the rest
after it; large proposals split the same way) on a simulated disk: what a Ready asks to persist
sits in a page cache until a simulated fsync completes; a crash loses the page cache and keeps
the disk, also when the early sends already went out. Messages go through ``Network``; a
request to a crashed node comes back as ``RequestFailed`` (connection refused), and so does a
request a node held unanswered when it crashed (a parked long-poll Fetch: connection reset, as
the kernel closes a dead process's sockets); a request on a cut link simply vanishes.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import ConfigRecord, ConfigResourceType
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
from quorum.raft.messages import Envelope, Message, RequestFailed, SnapshotId
from quorum.raft.node import NotLeaderError, RaftNode, Ready
from quorum.raft.ready_plan import ReadyPlan, plan_ready, propose_in_batches
from quorum.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    ReplicaKey,
    VoterNode,
    VoterSet,
    voter_changes_in,
)
from tests.sim.invariants import Invariants
from tests.sim.network import Network
from tests.sim.scheduler import EventScheduler, SimulationError

CLUSTER_ID = "sim-cluster-AAAAAAAAAAAA"
# Where the simulated admin tool (AddRaftVoter / RemoveRaftVoter) sends from.
ADMIN_ID = 77
TRACE_LINES_MAX = 60
# Small enough that the client's three-record proposals span two batches: they are split by
# ``propose_in_batches`` as the production driver splits a large non-atomic result.
RECORDS_PER_BATCH_MAX = 2
# Small enough that a node catching up applies its committed backlog over several Readies,
# stepping what arrives in between (``RaftConfig.committed_records_per_ready_max``).
COMMITTED_RECORDS_PER_READY_MAX = 4
# What the production driver hands every node before each turn: wall-clock minus monotonic
# milliseconds (``RaftNode.wall_clock_offset_ms``), here about 2023-11-14. Not zero, so a batch
# stamped with the monotonic clock alone shows (the checker "I21 batch timestamps").
WALL_CLOCK_OFFSET_MS = 1_700_000_000_000


def sim_config(**changes: Any) -> RaftConfig:
    """Kafka's defaults, except batches of at most ``RECORDS_PER_BATCH_MAX`` records and at
    most ``COMMITTED_RECORDS_PER_READY_MAX`` committed records handed out per Ready."""
    changes.setdefault("committed_records_per_ready_max", COMMITTED_RECORDS_PER_READY_MAX)
    return RaftConfig(records_per_batch_max=RECORDS_PER_BATCH_MAX, **changes)


@dataclass
class Unsafe:
    """Test-only switches of the driver that break the protocol (negative controls)."""

    # Send messages and report entries durable before the fsync completes.
    ack_before_fsync: bool = False
    # Persist the epoch but not the vote cast in it (a node forgets whom it voted for).
    skip_vote_persist: bool = False
    # Serve a read on any node that believes it leads at its high watermark, without
    # confirming leadership through a read fence (a stale leader answers stale reads).
    reads_without_fence: bool = False
    # Hand the nodes no wall-clock offset: batches carry the monotonic clock alone.
    monotonic_batch_timestamps: bool = False


@dataclass
class Read:
    """A linearizable read: every write committed before ``committed_end`` was invoked."""

    committed_end: int
    epoch: int = -1
    fence: int = -1


@dataclass
class Proposal:
    node_id: int
    epoch: int
    last_offset: int
    value: str


@dataclass
class ClientStats:
    proposed: int = 0
    acknowledged: int = 0
    failed: int = 0
    rejected: int = 0
    acked: list[Proposal] = field(default_factory=list)
    reads_served: int = 0
    reads_aborted: int = 0  # the node stopped leading first: the client retries elsewhere


class SimNode:
    def __init__(
        self,
        cluster: SimCluster,
        node_id: int,
        is_voter: bool,
        *,
        controller: bool | None = None,
        bootstrap: VoterSet | None = None,
    ) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.is_voter = is_voter
        # A controller keeps election state and may vote; in a dynamic quorum (KIP-853) it may
        # start as an observer and be added later (``bootstrap`` empty).
        self.controller = is_voter if controller is None else controller
        self.directory_id: Uuid | None = (
            Uuid.random(cluster.rng) if cluster.dynamic and self.controller else None
        )
        self.bootstrap = bootstrap
        self.disk_snapshot_voters: tuple[int, VoterSet] | None = None
        # How far durable_voter_set scanned the disk log, and the last voter set found there.
        self._voters_scan: tuple[int, VoterSet | None] = (0, None)
        self.raft: RaftNode | None = None
        self.incarnation = 0
        # The disk: survives crashes. A snapshot holds the committed log before its end
        # offset (the simulator keeps those batches to check it against the committed log).
        self.disk_election: ElectionState | None = None
        self.disk_batches: list[LogBatch] = []
        self.disk_snapshot: SnapshotId | None = None
        self.disk_snapshot_batches: tuple[LogBatch, ...] = ()
        self._verified_count = 0  # disk batches checked against the committed log
        # Volatile.
        self.inbox: deque[Envelope] = deque()
        self.proposals: deque[list[ConfigRecord]] = deque()
        self.outstanding: list[Proposal] = []
        self.read_requests: deque[Read] = deque()
        self.pending_reads: list[Read] = []
        self.busy = False
        self._page_cache: list[ReadyPlan] = []
        # Whether what sits in the page cache was partly sent already (the early sends).
        self._sent_early = False
        self._wake_at: int | None = None
        self._wake_token = 0

    # ----- disk views for the checkers ------------------------------------------------------

    def disk_start_offset(self) -> int:
        return self.disk_snapshot.end_offset if self.disk_snapshot else 0

    def disk_end_offset(self) -> int:
        return self.disk_batches[-1].end_offset if self.disk_batches else self.disk_start_offset()

    def verified_disk_end(self, committed: dict[int, LogBatch]) -> int:
        """End offset of the longest disk prefix equal to the committed log."""
        batches = self.disk_batches
        while self._verified_count < len(batches):
            batch = batches[self._verified_count]
            known = committed.get(batch.base_offset)
            if known is None:
                break
            if known != batch:
                return batch.base_offset
            self._verified_count += 1
        if self._verified_count:
            return batches[self._verified_count - 1].end_offset
        return self.disk_start_offset()

    # ----- lifecycle ------------------------------------------------------------------------

    @property
    def key(self) -> ReplicaKey:
        return ReplicaKey(self.node_id, self.directory_id)

    def durable_voter_set(self) -> VoterSet:
        """The voter set this node would use after a crash: the latest VotersRecord on its
        disk, else its snapshot's, else its bootstrap."""
        scanned, found = self._voters_scan
        for batch in self.disk_batches[scanned:]:
            _, voters = voter_changes_in(batch)
            if voters is not None:
                found = voters
        self._voters_scan = (len(self.disk_batches), found)
        if found is not None:
            return found
        if self.disk_snapshot_voters is not None:
            return self.disk_snapshot_voters[1]
        return self.bootstrap_voters()

    def _disk_log_rewritten(self) -> None:
        """The disk log lost batches (truncation, snapshot, wipe): scan it again."""
        self._voters_scan = (0, None)

    def disk_log_position(self) -> tuple[int, int]:
        """(last epoch, end offset) of the durable log: what a vote request compares."""
        if self.disk_batches:
            last = self.disk_batches[-1]
            return last.epoch, last.end_offset
        if self.disk_snapshot is not None:
            return self.disk_snapshot.epoch, self.disk_snapshot.end_offset
        return 0, 0

    def bootstrap_voters(self) -> VoterSet:
        if self.bootstrap is not None:
            return self.bootstrap
        return VoterSet.static(self.cluster.voter_ids)

    def wipe(self) -> None:
        """Kafka's killAndDeletePersistentState: a crashed controller's disk is lost; it is
        formatted again with a new directory id and no bootstrap voters (F15)."""
        assert self.raft is None
        self.disk_election = None
        self.disk_batches = []
        self.disk_snapshot = None
        self.disk_snapshot_batches = ()
        self.disk_snapshot_voters = None
        self._verified_count = 0
        self._disk_log_rewritten()
        self.directory_id = Uuid.random(self.cluster.rng)
        self.bootstrap = VoterSet()
        # A new replica: its epochs start again (I2 holds per replica, not per node id).
        self.cluster.invariants.last_durable_epoch.pop(self.node_id, None)
        self.cluster.trace("wipe", self.node_id, f"new directory {self.directory_id}")

    def start(self) -> None:
        cluster = self.cluster
        self.incarnation += 1
        self.raft = RaftNode(
            node_id=self.node_id,
            voters=self.bootstrap_voters(),
            cluster_id=CLUSTER_ID,
            config=cluster.config,
            rng=random.Random(cluster.rng.getrandbits(64)),
            now_ms=cluster.scheduler.now_ms,
            election_state=self.disk_election,
            batches=list(self.disk_batches),
            snapshot=self.disk_snapshot,
            directory_id=self.directory_id,
            kraft_version=KRAFT_VERSION_DYNAMIC if cluster.dynamic else KRAFT_VERSION_STATIC,
            snapshot_voters=self.disk_snapshot_voters,
            bootstrap_ids=cluster.initial_voter_ids if cluster.dynamic else (),
            persists_election=self.controller,
        )
        if not cluster.unsafe.monotonic_batch_timestamps:
            self.raft.wall_clock_offset_ms = cluster.wall_clock_offset_ms
        cluster.trace("start", self.node_id, f"incarnation {self.incarnation}")
        self.schedule_wake(cluster.scheduler.now_ms)

    def crash(self) -> None:
        self.raft = None
        self.inbox.clear()
        self.proposals.clear()
        self.busy = False
        if self._sent_early:
            self.cluster.crashes_after_early_send += 1
        self._sent_early = False
        self._page_cache.clear()  # lost: never fsynced, though the early sends went out
        self._wake_token += 1
        self._wake_at = None
        for proposal in self.outstanding:
            self.cluster.client.failed += 1
            del proposal
        self.outstanding.clear()
        self.cluster.trace("crash", self.node_id, "")

    # ----- the driver loop ------------------------------------------------------------------

    def schedule_wake(self, at_ms: int) -> None:
        if self.raft is None:
            return
        if self._wake_at is not None and self._wake_at <= at_ms:
            return
        self._wake_at = at_ms
        self._wake_token += 1
        token = self._wake_token
        self.cluster.scheduler.at(at_ms, "wake", lambda: self._wake(token))

    def _wake(self, token: int) -> None:
        if token != self._wake_token or self.raft is None:
            return
        self._wake_at = None
        if self.busy:
            return  # the fsync completion wakes us
        raft = self.raft
        now = self.cluster.scheduler.now_ms
        while self.inbox:
            raft.step(self.inbox.popleft(), now)
        while self.proposals:
            records = self.proposals.popleft()
            try:
                placed = propose_in_batches(raft, records, now)
            except NotLeaderError:
                self.cluster.client.rejected += 1
                continue
            if len(records) > self.cluster.config.records_per_batch_max:
                self.cluster.proposals_split += 1
            value = records[0].resource_name
            self.outstanding.append(Proposal(self.node_id, placed.epoch, placed.last_offset, value))
        self._start_reads(raft)
        ready = raft.poll(now)
        for event in ready.events:
            self.cluster.trace(event.name, self.node_id, str(event.fields))
        # The production driver's plan: a leader's Fetch responses leave before its fsync.
        plan = plan_ready(ready)
        for envelope in plan.send_before_flush:
            self.cluster.send(envelope)
        self.cluster.sent_before_flush += len(plan.send_before_flush)
        if not plan.needs_flush:
            self._finish(ready, plan)
            return
        self._page_cache.append(plan)
        self._sent_early = self._sent_early or bool(plan.send_before_flush)
        fsync_ms = self.cluster.fsync_latency_ms()
        if self.cluster.unsafe.ack_before_fsync:
            incarnation = self.incarnation
            self.cluster.scheduler.after(fsync_ms, "fsync", lambda: self._fsync_done(incarnation))
            self._finish(ready, plan)
            return
        self.busy = True
        incarnation = self.incarnation

        def done() -> None:
            if self.incarnation != incarnation or self.raft is None:
                return
            self._fsync_done(incarnation)
            self.busy = False
            self._finish(ready, plan)

        self.cluster.scheduler.after(fsync_ms, "fsync", done)

    def _fsync_done(self, incarnation: int) -> None:
        if self.incarnation != incarnation or self.raft is None:
            return
        inv = self.cluster.invariants
        for plan in self._page_cache:
            election = plan.election_to_persist
            if election is not None:
                if self.cluster.unsafe.skip_vote_persist and election.leader_id is None:
                    election = ElectionState(election.epoch, None, None, election.voters)
                self.disk_election = election
                inv.on_durable_election(self, election.epoch)
            if plan.truncate_to is not None:
                inv.on_durable_truncate(self, plan.truncate_to, self._disk_committed_floor())
                keep = [b for b in self.disk_batches if b.base_offset < plan.truncate_to]
                self.disk_batches = keep
                self._disk_log_rewritten()
                self._verified_count = min(self._verified_count, len(keep))
            for batch in plan.entries_to_append:
                assert batch.base_offset == self.disk_end_offset(), (batch, self.disk_end_offset())
                self.disk_batches.append(batch)
        self._page_cache.clear()
        self._sent_early = False

    def _start_reads(self, raft: RaftNode) -> None:
        client = self.cluster.client
        while self.read_requests:
            read = self.read_requests.popleft()
            if self.cluster.unsafe.reads_without_fence:
                if raft.is_leader():
                    self.cluster.invariants.on_read_served(self, raft.high_watermark, read)
                    client.reads_served += 1
                else:
                    client.reads_aborted += 1
                continue
            try:
                read.epoch, read.fence = raft.read_barrier()
            except NotLeaderError:
                client.reads_aborted += 1
                continue
            self.pending_reads.append(read)

    def _settle_reads(self, raft: RaftNode) -> None:
        """Serve the reads whose fence a majority confirmed (``RaftNode.read_index``)."""
        client = self.cluster.client
        still: list[Read] = []
        for read in self.pending_reads:
            try:
                index = raft.read_index(read.epoch, read.fence)
            except NotLeaderError:
                client.reads_aborted += 1
                continue
            if index is None:
                still.append(read)
                continue
            self.cluster.invariants.on_read_served(self, index, read)
            client.reads_served += 1
        self.pending_reads = still

    def _disk_committed_floor(self) -> int:
        raft = self.raft
        return raft.high_watermark if raft is not None else 0

    def _finish(self, ready: Ready, plan: ReadyPlan) -> None:
        raft = self.raft
        assert raft is not None
        cluster = self.cluster
        for envelope in plan.send_after_flush:
            cluster.send(envelope)
        cluster.invariants.on_high_watermark_exposed(self, plan.high_watermark)
        if plan.committed_batches:
            cluster.invariants.on_committed(self, plan.committed_batches)
            self._settle_proposals(plan.high_watermark)
        raft.advance(ready)
        self._settle_reads(raft)
        if ready.snapshot_to_fetch is not None:
            leader_id, snapshot = ready.snapshot_to_fetch
            incarnation = self.incarnation
            cluster.scheduler.after(
                cluster.rng.randint(5, 30),
                "fetch_snapshot",
                lambda: self._fetch_snapshot(incarnation, leader_id, snapshot),
            )
        divergence = ready.prefix_diverged
        if divergence is not None:
            # quorum/raft/prefix_divergence.py, as RaftManager carries it out: an observer
            # discards its log and snapshot and fetches again; a voter's process stops.
            cluster.prefix_divergences += 1
            if not divergence.recoverable:
                cluster.trace("stopped", self.node_id, "committed prefix diverged")
                cluster.crash(self.node_id)
                return
            incarnation = self.incarnation
            cluster.scheduler.after(
                cluster.rng.randint(1, 20),
                "discard_diverged_log",
                lambda: self._discard_diverged_log(incarnation),
            )
        self.schedule_wake(cluster.scheduler.now_ms if self.inbox else ready.next_poll_at_ms)

    def _discard_diverged_log(self, incarnation: int) -> None:
        """An observer's shell empties its log and snapshot, then restarts the core at 0."""
        raft = self.raft
        if raft is None or self.incarnation != incarnation:
            return
        if self.busy:
            self.cluster.scheduler.after(
                1, "discard_diverged_log", lambda: self._discard_diverged_log(incarnation)
            )
            return
        self.disk_batches = []
        self.disk_snapshot = None
        self.disk_snapshot_batches = ()
        self.disk_snapshot_voters = None
        self._verified_count = 0
        self._disk_log_rewritten()
        raft.discard_diverged_log(self.cluster.scheduler.now_ms)
        self.cluster.invariants.on_log_discarded(self)
        self.cluster.trace("diverged_log_discarded", self.node_id, "")
        self.schedule_wake(self.cluster.scheduler.now_ms)

    # ----- snapshots --------------------------------------------------------------------------

    def take_snapshot(self) -> None:
        """Snapshot everything applied, then drop the log it covers (Kafka's log cleaning)."""
        raft = self.raft
        if raft is None or self.busy:
            return
        end = raft.high_watermark
        start = self.disk_start_offset()
        if end <= start or end > self.disk_end_offset() or not raft.log.is_batch_boundary(end):
            return
        covered = [b for b in self.disk_batches if b.end_offset <= end]
        content = self.disk_snapshot_batches + tuple(covered)
        self.cluster.invariants.on_snapshot(self, tuple(covered), end)
        snapshot = SnapshotId(end, covered[-1].epoch)
        self.disk_snapshot = snapshot
        self.disk_snapshot_batches = content
        if self.cluster.dynamic:
            history = raft.voter_history
            self.disk_snapshot_voters = (
                history.kraft_version_before(end),
                history.voters_before(end),
            )
        self.disk_batches = [b for b in self.disk_batches if b.base_offset >= end]
        self._verified_count = 0
        self._disk_log_rewritten()
        raft.compact(snapshot)
        self.cluster.trace("snapshot", self.node_id, f"end {end} epoch {snapshot.epoch}")

    def _fetch_snapshot(self, incarnation: int, leader_id: int, snapshot: SnapshotId) -> None:
        """FetchSnapshot from the leader (the simulator copies its snapshot after a delay)."""
        raft = self.raft
        if raft is None or self.incarnation != incarnation:
            return
        if self.busy:
            self.cluster.scheduler.after(
                1, "fetch_snapshot", lambda: self._fetch_snapshot(incarnation, leader_id, snapshot)
            )
            return
        leader = self.cluster.nodes[leader_id]
        now = self.cluster.scheduler.now_ms
        link_up = (leader_id, self.node_id) not in self.cluster.network.faults.blocked
        if leader.disk_snapshot != snapshot or not link_up:
            raft.snapshot_fetch_failed(now)
        else:
            self.cluster.invariants.on_snapshot(
                self, leader.disk_snapshot_batches, snapshot.end_offset
            )
            self.disk_snapshot = snapshot
            self.disk_snapshot_batches = leader.disk_snapshot_batches
            self.disk_snapshot_voters = leader.disk_snapshot_voters
            self.disk_batches = []
            self._verified_count = 0
            self._disk_log_rewritten()
            raft.install_snapshot(snapshot, now, voters=leader.disk_snapshot_voters)
            self.cluster.snapshots_installed += 1
            self.cluster.trace("snapshot_installed", self.node_id, f"end {snapshot.end_offset}")
        self.schedule_wake(now)

    def _settle_proposals(self, high_watermark: int) -> None:
        client = self.cluster.client
        committed = self.cluster.invariants.committed
        still: list[Proposal] = []
        for proposal in self.outstanding:
            if proposal.last_offset >= high_watermark:
                still.append(proposal)
                continue
            batch = self.cluster.batch_containing(committed, proposal.last_offset)
            if batch is not None and batch.epoch == proposal.epoch:
                client.acknowledged += 1
                client.acked.append(proposal)
            else:
                client.failed += 1
        self.outstanding = still


class SimCluster:
    def __init__(
        self,
        *,
        seed: int,
        voters: int = 3,
        observers: int = 1,
        config: RaftConfig | None = None,
        unsafe: Unsafe | None = None,
        events_max: int = 200_000,
        fsync_ms_max: int = 2,
        spares: int = 0,
        dynamic: bool = False,
    ) -> None:
        """``dynamic``: a KIP-853 quorum (kraft.version 1, directory ids, the voter set in the
        log) whose ``voters`` were formatted with --initial-controllers; ``spares`` more
        controllers start as observers (--no-initial-controllers), to be added."""
        self.seed = seed
        self.dynamic = dynamic
        self.rng = random.Random(seed)
        self.config = config or sim_config()
        self.unsafe = unsafe or Unsafe()
        self.fsync_ms_max = fsync_ms_max
        self.wall_clock_offset_ms = WALL_CLOCK_OFFSET_MS
        self.scheduler = EventScheduler(events_max)
        self.network = Network(random.Random(self.rng.getrandbits(64)))
        self.voter_ids = list(range(1, voters + 1))
        self.initial_voter_ids = tuple(self.voter_ids)
        self.spare_ids = list(range(voters + 1, voters + 1 + spares))
        self.observer_ids = list(range(100, 100 + observers))
        self.majority = voters // 2 + 1
        self.nodes: dict[int, SimNode] = {}
        for nid in self.voter_ids:
            self.nodes[nid] = SimNode(self, nid, True)
        if dynamic:
            bootstrap = VoterSet(VoterNode(self.nodes[nid].key) for nid in self.voter_ids)
            for nid in self.voter_ids:
                self.nodes[nid].bootstrap = bootstrap
        for nid in self.spare_ids:
            self.nodes[nid] = SimNode(self, nid, False, controller=True, bootstrap=VoterSet())
        for nid in self.observer_ids:
            self.nodes[nid] = SimNode(self, nid, False, bootstrap=VoterSet() if dynamic else None)
        # The simulated admin tool's voter-change answers, by correlation id.
        self.admin_answers: dict[int, Message] = {}
        self.reconfiguration_outcomes: dict[str, int] = {}
        self._admin_correlation_id = 2_000_000_000
        self.invariants = Invariants(self)
        self.client = ClientStats()
        self._trace: deque[str] = deque(maxlen=TRACE_LINES_MAX)
        self._client_interval_ms: int | None = None
        self._client_counter = 0
        self._snapshot_interval_ms: int | None = None
        self.snapshots_taken = 0
        self.snapshots_installed = 0
        # Requests delivered to a live node and not answered yet, by destination: a crash
        # resets their connections (``crash``).
        self._open_requests: dict[int, dict[tuple[int, int], Envelope]] = {}
        # The production driver's plan at work: messages sent before the flush, crashes between
        # such early sends and the fsync, proposals split into several batches.
        self.sent_before_flush = 0
        self.crashes_after_early_send = 0
        self.proposals_split = 0
        # Committed prefixes found diverging (quorum/raft/prefix_divergence.py): observers that
        # discarded their log, voters stopped.
        self.prefix_divergences = 0

    # ----- tracing --------------------------------------------------------------------------

    def trace(self, what: str, node_id: int, detail: str) -> None:
        self._trace.append(f"{self.scheduler.now_ms:>7}ms node {node_id:<3} {what} {detail}")

    def trace_tail(self) -> str:
        return "\n".join(self._trace)

    # ----- network --------------------------------------------------------------------------

    def fsync_latency_ms(self) -> int:
        if self.unsafe.ack_before_fsync:
            return self.rng.randint(5, 50)  # a slow disk makes the race visible
        return self.rng.randint(0, self.fsync_ms_max)

    def send(self, envelope: Envelope) -> None:
        if not envelope.is_request:
            self._open_requests.get(envelope.source, {}).pop(
                (envelope.destination, envelope.correlation_id), None
            )
        elif (envelope.source, envelope.destination) in self.network.faults.refused:
            self._fail_back(envelope, "connection refused")
            return
        for delay in self.network.deliveries(envelope.source, envelope.destination):
            self.scheduler.after(delay, "deliver", lambda e=envelope: self._deliver(e))

    def _fail_back(self, request: Envelope, reason: str) -> None:
        """The OS answers ``request`` at once: nobody is there (``RequestFailed.peer_gone``)."""
        failed = Envelope(
            request.destination,
            request.source,
            request.correlation_id,
            RequestFailed(reason, peer_gone=True),
        )
        self.scheduler.after(1, reason.replace(" ", "_"), lambda: self._deliver(failed))

    def _deliver(self, envelope: Envelope) -> None:
        if (envelope.source, envelope.destination) in self.network.faults.blocked:
            return  # a partition also drops what was already in flight
        if envelope.destination == ADMIN_ID and not envelope.is_request:
            self.admin_answers[envelope.correlation_id] = envelope.message
            return
        node = self.nodes.get(envelope.destination)
        if node is None:
            return  # an answer to the hostile peer's own id: it does not listen
        if node.raft is None:
            if envelope.is_request:
                self._fail_back(envelope, "connection refused")
            return
        if envelope.is_request:
            key = (envelope.source, envelope.correlation_id)
            self._open_requests.setdefault(envelope.destination, {})[key] = envelope
        node.inbox.append(envelope)
        node.schedule_wake(self.scheduler.now_ms)

    # ----- client ---------------------------------------------------------------------------

    def start_client(self, interval_ms: int) -> None:
        """Propose a small atomic batch to the current leader every ``interval_ms``."""
        self._client_interval_ms = interval_ms
        self.scheduler.after(interval_ms, "client", self._client_tick)

    def start_snapshots(self, interval_ms: int) -> None:
        """Every node snapshots its committed state at random moments, about every
        ``interval_ms``, and drops the log before it."""
        self._snapshot_interval_ms = interval_ms
        for node_id in self.nodes:
            self.scheduler.after(
                self.rng.randint(1, interval_ms), "snapshot", lambda n=node_id: self._snapshot(n)
            )

    def _snapshot(self, node_id: int) -> None:
        if self._snapshot_interval_ms is None:
            return
        node = self.nodes[node_id]
        before = node.disk_snapshot
        node.take_snapshot()
        if node.disk_snapshot != before:
            self.snapshots_taken += 1
        self.scheduler.after(
            self.rng.randint(self._snapshot_interval_ms // 2, self._snapshot_interval_ms * 3 // 2),
            "snapshot",
            lambda: self._snapshot(node_id),
        )

    def stop_client(self) -> None:
        self._client_interval_ms = None

    def _client_tick(self) -> None:
        if self._client_interval_ms is None:
            return
        leader = self.leader()
        if leader is not None:
            self._client_counter += 1
            n = self._client_counter
            records = [
                ConfigRecord(ConfigResourceType.TOPIC, f"p{n}", "k", str(i))
                for i in range(1 + n % 3)
            ]
            leader.proposals.append(records)
            leader.schedule_wake(self.scheduler.now_ms)
            self.client.proposed += 1
        # Every third tick, a read on a node that believes it leads - a deposed leader cut off
        # from the others included, which is where a stale read would come from. (Each read
        # answers the parked Fetches at once: more often costs simulator time, not coverage.)
        leaders = [n for n in self.live() if n.raft is not None and n.raft.is_leader()]
        if leaders and self._client_counter % 3 == 0:
            node = self.rng.choice(leaders)
            node.read_requests.append(Read(self.invariants.committed_end))
            node.schedule_wake(self.scheduler.now_ms)
        self.scheduler.after(self._client_interval_ms, "client", self._client_tick)

    def send_admin(self, destination: int, request: Message) -> int:
        """Send a voter-change request from the admin tool; its answer lands in
        ``admin_answers`` under the returned correlation id (nothing if it is lost)."""
        self._admin_correlation_id += 1
        self.send(Envelope(ADMIN_ID, destination, self._admin_correlation_id, request))
        return self._admin_correlation_id

    @staticmethod
    def batch_containing(committed: dict[int, LogBatch], offset: int) -> LogBatch | None:
        for base in range(offset, max(-1, offset - 10_001), -1):
            batch = committed.get(base)
            if batch is not None:
                return batch if batch.end_offset > offset else None
        return None

    # ----- views ----------------------------------------------------------------------------

    def voters(self) -> list[SimNode]:
        return [self.nodes[v] for v in self.voter_ids]

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.raft is not None]

    def leader(self) -> SimNode | None:
        """The live leader of the highest epoch, if any."""
        best: SimNode | None = None
        for node in self.live():
            raft = node.raft
            assert raft is not None
            if raft.is_leader() and (best is None or raft.epoch > best.raft.epoch):  # type: ignore[union-attr]
                best = node
        return best

    def has_leader(self) -> bool:
        return self.leader() is not None

    def max_epoch(self) -> int:
        return max((n.raft.epoch for n in self.live() if n.raft is not None), default=0)

    # ----- running --------------------------------------------------------------------------

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()

    def _run_one(self) -> bool:
        try:
            label = self.scheduler.run_one()
            if label is None:
                return False
            self.invariants.check()
        except AssertionError as exc:
            raise SimulationError(
                f"seed {self.seed}: {type(exc).__name__}: {exc}\n"
                f"at {self.scheduler.now_ms} ms after {self.scheduler.events_run} events; "
                f"network: {self.network.faults.describe()}\n"
                f"trace tail:\n{self.trace_tail()}"
            ) from exc
        return True

    def run_for(self, duration_ms: int) -> None:
        end = self.scheduler.now_ms + duration_ms
        while True:
            next_at = self.scheduler.next_at_ms()
            if next_at is None or next_at > end:
                self.scheduler.now_ms = end
                return
            self._run_one()

    def run_until(self, condition: Callable[[], bool], timeout_ms: int, what: str) -> int:
        """Run until ``condition`` holds; returns the virtual time it took."""
        start = self.scheduler.now_ms
        end = start + timeout_ms
        while not condition():
            next_at = self.scheduler.next_at_ms()
            if next_at is None or next_at > end:
                raise SimulationError(
                    f"seed {self.seed}: liveness: {what} not reached within {timeout_ms} ms\n"
                    f"nodes: {[repr(n.raft) for n in self.live()]}\n"
                    f"trace tail:\n{self.trace_tail()}"
                )
            self._run_one()
        return self.scheduler.now_ms - start

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].crash()
        # The dead process's connections are closed: what it held unanswered fails at once
        # (unless the link is cut: then nothing reaches the sender, not even the reset).
        for envelope in self._open_requests.pop(node_id, {}).values():
            if (node_id, envelope.source) not in self.network.faults.blocked:
                self._fail_back(envelope, "connection reset")

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.raft is None:
            node.start()
