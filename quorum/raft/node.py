"""The pure KRaft node: messages and clock readings in, one ``Ready`` out.

``RaftNode`` performs no I/O and reads no clock: the driver (the asyncio shell in production,
the deterministic simulator in tests) passes ``now_ms`` to every call and carries out what
``poll`` returns. The driver loop is::

    node.step(envelope, now_ms)          # any number of times
    ready = node.poll(now_ms)
    persist ready.election_to_persist    # durable (fsync) BEFORE anything is sent
    truncate to ready.truncate_to, append ready.entries_to_append, fsync
    send ready.messages_to_send
    apply ready.committed_batches
    node.advance(ready)                  # tells the core the above is durable
    wait until ready.next_poll_at_ms or the next envelope

Protocol (KIP-595 with KIP-996 pre-vote and KIP-516 topic ids): see docs/architecture.md.

The node routes messages and timers to the epoch state of its role (``quorum.raft.state``).
What only a leader keeps is on its ``LeaderState`` (``quorum.raft.leader``: replica progress,
check quorum, the high-watermark rule, the ``BatchAccumulator`` and the ``FetchPurgatory``);
the fetching side of followers and observers is a ``Fetcher``; requests awaiting an answer are
``InflightRequests``; majorities are counted in ``quorum.raft.majority``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from quorum import limits
from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.records import (
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    Record,
    encode_record,
)
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
from quorum.raft.epoch_bounds import EpochBounds, explained, request_epoch, vouchers
from quorum.raft.fetcher import Fetcher
from quorum.raft.inflight import InflightRequest, InflightRequests, RequestKind
from quorum.raft.leader import LeaderState, PendingVoterChange
from quorum.raft.log import FetchPosition, RaftLog
from quorum.raft.majority import VoteResult, vote_result
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    Message,
    RemoveRaftVoterRequest,
    RequestFailed,
    RequestHeader,
    SnapshotId,
    UpdateRaftVoterRequest,
    VoterChangeResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.prefix_divergence import PrefixDivergence, committed_in_epoch
from quorum.raft.state import (
    CandidateState,
    EpochState,
    FollowerState,
    IllegalStateError,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    check_transition,
    election_state_of,
)
from quorum.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    ReplicaKey,
    VoterNode,
    VoterSet,
    VoterSetHistory,
    voter_changes_in,
)


class NotLeaderError(Exception):
    """A proposal reached a node that is not the leader. Retriable elsewhere."""

    retriable: ClassVar[bool] = True
    refresh_leader = True

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader: {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class BatchTooLargeError(ValueError):
    """One proposal does not fit in one batch (records or bytes over the limit)."""

    retriable: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class RaftEvent:
    """A fact worth one log line (``became_leader``, ``vote_granted``, ...). The core does not
    log; the driver renders these, and the simulator keeps them in its trace."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ready:
    """What the driver must do, in this order.

    1. ``election_to_persist`` and then ``truncate_to`` / ``entries_to_append`` must be durable
       (fsynced) BEFORE any of ``messages_to_send`` leaves the node: votes, acknowledgements
       and fetch offsets promise durability.
    2. Send ``messages_to_send``.
    3. Apply ``committed_batches`` (offsets below ``high_watermark``), in order.
    4. Call ``RaftNode.advance(ready)``; only then step or poll again.
    5. Poll again at ``next_poll_at_ms`` at the latest.
    """

    election_to_persist: ElectionState | None
    truncate_to: int | None
    entries_to_append: tuple[LogBatch, ...]
    messages_to_send: tuple[Envelope, ...]
    committed_batches: tuple[LogBatch, ...]
    high_watermark: int
    next_poll_at_ms: int
    events: tuple[RaftEvent, ...]
    # Fetch this snapshot from this leader, then call ``install_snapshot`` (or
    # ``snapshot_fetch_failed``): this node is behind the leader's log start.
    snapshot_to_fetch: tuple[int, SnapshotId] | None = None
    # The leader's answer would cut the committed prefix (quorum.raft.prefix_divergence): a
    # voter's shell stops the process; an observer's discards its local log, snapshots and
    # image, then calls ``discard_diverged_log``. No Fetch goes out until then.
    prefix_diverged: PrefixDivergence | None = None

    @property
    def needs_flush(self) -> bool:
        return bool(self.entries_to_append) or self.truncate_to is not None


@dataclass(frozen=True, slots=True)
class Proposal:
    """Where a proposal will land if the epoch that accepted it commits it."""

    epoch: int
    base_offset: int
    last_offset: int


class RaftNode:
    """One voter or observer of the ``__cluster_metadata`` quorum."""

    def __init__(
        self,
        *,
        node_id: int,
        voters: frozenset[int] | VoterSet,
        cluster_id: str,
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        election_state: ElectionState | None = None,
        batches: Sequence[LogBatch] = (),
        snapshot: SnapshotId | None = None,
        directory_id: Uuid | None = None,
        kraft_version: int = KRAFT_VERSION_STATIC,
        snapshot_voters: tuple[int, VoterSet] | None = None,
        bootstrap_ids: Sequence[int] = (),
        persists_election: bool | None = None,
    ) -> None:
        """``snapshot``: the newest local snapshot; ``batches`` then continue from its end.

        The voter set (KIP-853, ``quorum.raft.voters``): ``voters`` is the bootstrap set, a
        plain set of ids for the static ``controller.quorum.voters`` (``kraft_version`` 0) or a
        ``VoterSet`` with directory ids and endpoints (``storage format --standalone`` or
        ``--initial-controllers``, ``kraft_version`` 1), or empty for a node that learns it
        from the log (``--no-initial-controllers``, or a broker). ``snapshot_voters``, the
        kraft.version and voter set the snapshot holds, overrides it; every ``VotersRecord``
        in ``batches`` and in what the node appends later overrides both. ``directory_id``:
        this node's (``meta.properties``), None for a static quorum. ``bootstrap_ids``: whom
        an observer that knows no voter asks for the leader
        (``controller.quorum.bootstrap.servers``; the driver maps the ids to addresses).
        ``persists_election``: whether this node keeps election state durably and so may
        grant votes (controllers; default: whether it is a voter now)."""
        assert node_id >= 0
        self.node_id = node_id
        bootstrap = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        assert bootstrap or kraft_version >= KRAFT_VERSION_DYNAMIC or bootstrap_ids, (
            "a static voter set cannot be empty"
        )
        self._bootstrap_voters = bootstrap
        self._bootstrap_kraft_version = kraft_version
        self._bootstrap_ids = tuple(bootstrap_ids)
        self.local_key = ReplicaKey(node_id, directory_id)
        self.voter_history = VoterSetHistory(bootstrap, kraft_version)
        if snapshot_voters is not None:
            self.voter_history.reset(snapshot_voters[1], snapshot_voters[0], from_log=True)
        for batch in batches:
            self._add_voter_changes(batch)
        self.voter_set = self.voter_history.latest()
        self.voters: frozenset[int] = self.voter_set.ids
        self._is_voter = self.voter_set.is_voter(self.local_key)
        self.cluster_id = cluster_id
        self.config = config
        self._rng = rng
        self.log = RaftLog(
            list(batches),
            snapshot.end_offset if snapshot else 0,
            snapshot.epoch if snapshot else 0,
        )
        self.metadata_topic_id: Uuid | None = None
        self._now_ms = now_ms
        # Added to the node's clock to stamp batches (Kafka stamps a batch with its append
        # time): the driver's timers run on a monotonic clock, so it sets the difference to
        # the wall clock here before each turn; the simulator leaves 0.
        self.wall_clock_offset_ms = 0
        self._next_correlation_id = 1
        self._inflight = InflightRequests()
        self._fetcher = Fetcher()
        # The epoch in which a lost leader connection last shortened the fetch deadline
        # (``_leader_connection_lost``: once per epoch).
        self._connection_loss_epoch: int | None = None
        # Outputs collected until the next poll.
        self._out_messages: list[Envelope] = []
        self._out_entries: list[LogBatch] = []
        self._out_truncate: int | None = None
        self._out_election: ElectionState | None = None
        self._out_events: list[RaftEvent] = []
        self._out_snapshot: tuple[int, SnapshotId] | None = None
        self._out_divergence: PrefixDivergence | None = None
        self._awaiting_advance = False
        # Epochs voters vouched for, the ceiling one peer's message may not pass, refusals.
        self._epoch_bounds = EpochBounds(config.epoch_jump_max)
        # An observer that discarded a diverged log, until its committed log again reaches an
        # entry of the current leader's epoch (``rebuilding_committed_prefix``).
        self._rebuilding = False
        # Everything below this offset is durable on this node (fsynced by the driver).
        self.durable_end_offset = self.log.log_end_offset
        self._applied_offset = self.log.log_start_offset
        self._persisted = election_state
        self._persists_election = (
            persists_election if persists_election is not None else self._is_voter
        )
        self.state: EpochState = self._initial_state(election_state, now_ms)
        if election_state is None and self._persists_election:
            self._out_election = election_state_of(self.state, self._persisted_voters(), node_id)

    # ----- views ----------------------------------------------------------------------------

    @property
    def is_voter(self) -> bool:
        """Whether this replica (node id and directory id) is in the voter set in force."""
        return self._is_voter

    @property
    def kraft_version(self) -> int:
        return self.voter_history.kraft_version()

    @property
    def is_dynamic(self) -> bool:
        """Whether the voter set lives in the log (kraft.version 1) rather than in the static
        controller.quorum.voters."""
        return self.voter_history.kraft_version() >= KRAFT_VERSION_DYNAMIC

    def _persisted_voters(self) -> frozenset[int]:
        """The voters ``quorum-state`` records: the static set, so a restart with another
        controller.quorum.voters is caught; none for a quorum whose voters are in the log."""
        return frozenset() if self.is_dynamic else self.voters

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader this node knows of in its epoch (a prospective node trusts none)."""
        return None if self.is_prospective() else self.state.leader_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def epoch_jumps_refused(self) -> int:
        """Requests refused and responses dropped for an epoch more than ``epoch_jump_max``
        above the highest epoch this node has seen (a metric; quorum.raft.epoch_bounds)."""
        return self._epoch_bounds.refused

    @property
    def rebuilding_committed_prefix(self) -> bool:
        """Whether this observer is fetching its log again after discarding a diverged one
        (``discard_diverged_log``): True until the committed log it handed out reaches an
        entry of the current leader's epoch, and so holds everything the quorum committed.
        A broker keeps serving its old image meanwhile and then swaps in the new one."""
        return self._rebuilding or self._fetcher.diverged is not None

    # ----- the epoch state by role (Kafka's QuorumState accessors) ---------------------------

    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    def is_prospective(self) -> bool:
        return isinstance(self.state, ProspectiveState)

    def is_candidate(self) -> bool:
        return isinstance(self.state, CandidateState)

    def is_unattached(self) -> bool:
        return isinstance(self.state, UnattachedState)

    def is_resigned(self) -> bool:
        return isinstance(self.state, ResignedState)

    def maybe_leader_state(self) -> LeaderState | None:
        state = self.state
        return state if isinstance(state, LeaderState) else None

    def leader_state_or_raise(self) -> LeaderState:
        state = self.maybe_leader_state()
        if state is None:
            raise IllegalStateError(f"not the leader: {self.state!r}")
        return state

    def maybe_follower_state(self) -> FollowerState | None:
        state = self.state
        return state if isinstance(state, FollowerState) else None

    def maybe_prospective_state(self) -> ProspectiveState | None:
        state = self.state
        return state if isinstance(state, ProspectiveState) else None

    def maybe_candidate_state(self) -> CandidateState | None:
        state = self.state
        return state if isinstance(state, CandidateState) else None

    def maybe_resigned_state(self) -> ResignedState | None:
        state = self.state
        return state if isinstance(state, ResignedState) else None

    @property
    def snapshot_id(self) -> SnapshotId | None:
        """The snapshot the in-memory log starts after, if any."""
        if self.log.log_start_offset == 0:
            return None
        return SnapshotId(self.log.log_start_offset, self.log.snapshot_epoch)

    def __repr__(self) -> str:
        return f"RaftNode(id={self.node_id}, state={self.state!r}, log={self.log!r})"

    # ----- construction ---------------------------------------------------------------------

    def _initial_state(self, persisted: ElectionState | None, now_ms: int) -> EpochState:
        if persisted is None:
            # Observers persist nothing: the log tells them the epoch they had reached.
            return UnattachedState(
                self.log.last_fetched_epoch, None, self._election_deadline(now_ms)
            )
        assert persisted.epoch >= self.log.last_fetched_epoch, (
            "persisted epoch is behind the log",
            persisted,
            self.log,
        )
        if persisted.leader_id == self.node_id:
            # A leader that crashed can never lead its epoch again.
            return ResignedState(
                persisted.epoch, (), set(), self._election_deadline(now_ms), now_ms
            )
        if persisted.leader_id is not None:
            return FollowerState(
                persisted.epoch,
                persisted.leader_id,
                persisted.voted_id,
                now_ms + self.config.fetch_timeout_ms,
            )
        return UnattachedState(persisted.epoch, persisted.voted_id, self._election_deadline(now_ms))

    # ----- the driver API -------------------------------------------------------------------

    def step(self, envelope: Envelope, now_ms: int) -> None:
        """Hand the core one inbound message (a request for it, or a response to it)."""
        assert not self._awaiting_advance, "step() called before advance() of the last Ready"
        self._now_ms = max(self._now_ms, now_ms)
        if envelope.is_request:
            self._handle_request(envelope)
        else:
            inflight = self._inflight.pop(envelope.correlation_id)
            if inflight is not None:
                self._handle_response(envelope, inflight)
        self._check_invariants()

    def propose(self, records: Sequence[Record], now_ms: int) -> Proposal:
        """Queue ``records`` for one atomic batch of the current epoch. Raises
        ``NotLeaderError`` unless this node leads. The proposal is committed once the high
        watermark passes ``last_offset`` and the batch there still carries ``epoch``."""
        assert not self._awaiting_advance, "propose() called before advance()"
        self._now_ms = max(self._now_ms, now_ms)
        leader = self.maybe_leader_state()
        if leader is None:
            raise NotLeaderError(self.leader_id, self.epoch)
        if not records:
            raise BatchTooLargeError("a proposal needs at least one record")
        size = sum(len(encode_record(r)) for r in records)
        if len(records) > self.config.records_per_batch_max or size > self.config.batch_bytes_max:
            raise BatchTooLargeError(
                f"{len(records)} records / {size} bytes exceed one batch "
                f"({self.config.records_per_batch_max} records, "
                f"{self.config.batch_bytes_max} bytes)"
            )
        accumulator = leader.accumulator
        if not accumulator.is_empty() and not accumulator.fits(len(records), size):
            self._drain_accumulator(leader)
        base = self.log.log_end_offset + accumulator.record_count
        accumulator.append(records, size, self._now_ms)
        return Proposal(leader.epoch, base, base + len(records) - 1)

    def open_batch_waits_until_ms(self, now_ms: int, queued: int = 0) -> int | None:
        """While this leader's open batch waits to be drained (an earlier batch is not
        committed yet, or it is held to its minimum age), when it is drained at the latest:
        proposals made before then join it all the same, so a driver may gather a busy
        leader's operations and run them together (one turn for many) instead of one turn
        each. None when this node does not lead, or the next poll would drain the open batch
        (``queued``: records about to be proposed). Changes nothing."""
        leader = self.maybe_leader_state()
        if leader is None:
            return None
        return leader.accumulator.waits_until_ms(
            now_ms, in_flight=self._batch_in_flight(), queued=queued
        )

    def read_barrier(self) -> tuple[int, int]:
        """Start a linearizable read (Raft's ReadIndex, confirmed by read fences instead of
        clocks): returns ``(epoch, fence)`` for ``read_index``. Raises ``NotLeaderError``
        unless this node leads. The voters' parked Fetches are answered at once, so the fence
        leaves now and their next Fetches echo it within a round trip."""
        assert not self._awaiting_advance, "read_barrier() called before advance()"
        leader = self.maybe_leader_state()
        if leader is None:
            raise NotLeaderError(self.leader_id, self.epoch)
        fence = leader.new_read_fence()
        for voter in leader.voters:
            envelope = leader.fetch_purgatory.pop(voter)
            if envelope is not None:
                self._complete_fetch(envelope)
        return leader.epoch, fence

    def read_index(self, epoch: int, fence: int) -> int | None:
        """Where a read started by ``read_barrier`` in ``epoch`` may be served: this node's
        high watermark, once a majority echoed ``fence`` (no other leader committed anything
        before the read began) and this epoch has committed its first entry (so the high
        watermark covers every entry an earlier leader committed). None while waiting. Raises
        ``NotLeaderError`` once this node no longer leads ``epoch``: the read may be retried
        on the new leader."""
        leader = self.maybe_leader_state()
        if leader is None or leader.epoch != epoch:
            raise NotLeaderError(self.leader_id, self.epoch)
        if leader.confirmed_read_fence() < fence:
            return None
        if self.log.high_watermark <= leader.epoch_start_offset:
            return None
        return self.log.high_watermark

    def next_offset(self) -> int:
        """The offset the next proposed record will get (the leader's log end offset plus what
        waits in the open batch)."""
        leader = self.maybe_leader_state()
        pending = leader.accumulator.record_count if leader is not None else 0
        return self.log.log_end_offset + pending

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: hand leadership over through EndQuorumEpoch."""
        assert not self._awaiting_advance
        self._now_ms = max(self._now_ms, now_ms)
        if self.is_leader():
            self._resign("shutdown")

    def set_metadata_topic_id(self, topic_id: Uuid) -> None:
        """The metadata topic's own id, once its record is applied (KIP-516). Requests keyed
        by it are accepted from then on, besides the sentinel."""
        self.metadata_topic_id = topic_id

    def compact(self, snapshot: SnapshotId) -> None:
        """A local snapshot holding everything before ``snapshot.end_offset`` is durable: the
        in-memory log drops what it covers. Fetchers behind it are sent the snapshot."""
        assert not self._awaiting_advance
        assert snapshot.end_offset <= self._applied_offset, (snapshot, self._applied_offset)
        assert snapshot.end_offset <= self.log.high_watermark, (snapshot, self.log)
        self.log.delete_before(snapshot.end_offset)
        self.voter_history.compact_to(snapshot.end_offset)
        assert self.log.snapshot_epoch == snapshot.epoch, (snapshot, self.log)
        self._emit("log_compacted", log_start_offset=snapshot.end_offset)

    def install_snapshot(
        self,
        snapshot: SnapshotId,
        now_ms: int,
        voters: tuple[int, VoterSet] | None = None,
    ) -> None:
        """The driver fetched the leader's snapshot and made it the node's state (durably,
        with the local log emptied to start at its end): continue fetching after it.
        ``voters``: the kraft.version and voter set the snapshot holds (KIP-853); None for a
        snapshot of a static quorum, which holds none."""
        assert not self._awaiting_advance
        assert not self.is_leader(), "a leader never loads a snapshot (I13)"
        self._now_ms = max(self._now_ms, now_ms)
        self.log.reset_to_snapshot(snapshot.end_offset, snapshot.epoch)
        if voters is not None:
            self.voter_history.reset(voters[1], voters[0], from_log=True)
        else:
            self.voter_history.reset(
                self._bootstrap_voters, self._bootstrap_kraft_version, from_log=False
            )
        self._voter_set_changed("snapshot installed")
        self.durable_end_offset = snapshot.end_offset
        self._applied_offset = snapshot.end_offset
        self._fetcher.fetching_snapshot = None
        self._fetcher.retry_now(self._now_ms)
        follower = self.maybe_follower_state()
        if follower is not None:
            follower.fetch_succeeded(self._now_ms, self.config.fetch_timeout_ms)
        self._emit("snapshot_installed", end_offset=snapshot.end_offset, epoch=snapshot.epoch)

    def snapshot_fetch_failed(self, now_ms: int) -> None:
        """The snapshot download failed: fetch again (the leader names its current one)."""
        self._now_ms = max(self._now_ms, now_ms)
        self._fetcher.fetching_snapshot = None
        self._fetch_backoff()

    def discard_diverged_log(self, now_ms: int) -> None:
        """This observer's committed prefix diverged from the leader's (``Ready.prefix_diverged``)
        and its shell has discarded the local log, snapshots and image: start again empty at
        offset 0 and fetch everything from the leader, its snapshot first when it has one
        (quorum.raft.prefix_divergence). The high watermark starts again from 0 too: the
        committed log handed out from now on is the quorum's."""
        assert not self._awaiting_advance
        divergence = self._fetcher.diverged
        assert divergence is not None and divergence.recoverable, divergence
        self._now_ms = max(self._now_ms, now_ms)
        self.log = RaftLog()
        self.voter_history.reset(
            self._bootstrap_voters, self._bootstrap_kraft_version, from_log=False
        )
        self._voter_set_changed("diverged log discarded")
        self.metadata_topic_id = None  # it may have come from a lost record
        self.durable_end_offset = 0
        self._applied_offset = 0
        self._out_entries = []
        self._out_truncate = None
        self._fetcher.diverged = None
        self._fetcher.retry_now(self._now_ms)
        self._rebuilding = True
        follower = self.maybe_follower_state()
        if follower is not None:
            follower.fetch_succeeded(self._now_ms, self.config.fetch_timeout_ms)
        self._emit(
            "diverged_log_discarded",
            high_watermark_before=divergence.high_watermark,
            log_end_offset_before=divergence.log_end_offset,
            leader_id=divergence.leader_id,
        )

    def poll(self, now_ms: int) -> Ready:
        """Run timers, then hand out everything to persist, send and apply."""
        assert not self._awaiting_advance, "poll() called twice without advance()"
        self._now_ms = max(self._now_ms, now_ms)
        self._poll_state()
        self._maybe_advance_high_watermark()
        committed: list[LogBatch] = []
        if self.log.high_watermark > self._applied_offset:
            budget = self.config.committed_records_per_ready_max
            for batch in self.log.batches_between(self._applied_offset, self.log.high_watermark):
                if committed and budget < batch.record_count:
                    break  # the rest at the next poll, right away (_next_poll_at)
                committed.append(batch)
                budget -= batch.record_count
            self._applied_offset = (
                committed[-1].end_offset if committed else self.log.high_watermark
            )
        if (
            self._rebuilding
            and not self._fetcher.paused()
            and committed_in_epoch(self.log, self.epoch, self._applied_offset)
        ):
            self._rebuilding = False
            self._emit("committed_prefix_rebuilt", applied_offset=self._applied_offset)
        ready = Ready(
            election_to_persist=self._out_election,
            truncate_to=self._out_truncate,
            entries_to_append=tuple(self._out_entries),
            messages_to_send=tuple(self._out_messages),
            committed_batches=tuple(committed),
            high_watermark=self.log.high_watermark,
            next_poll_at_ms=self._next_poll_at(),
            events=tuple(self._out_events),
            snapshot_to_fetch=self._out_snapshot,
            prefix_diverged=self._out_divergence,
        )
        self._out_snapshot = None
        self._out_divergence = None
        self._out_election = None
        self._out_truncate = None
        self._out_entries = []
        self._out_messages = []
        self._out_events = []
        self._awaiting_advance = True
        self._check_invariants()
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver has persisted, sent and applied ``ready``."""
        assert self._awaiting_advance
        self._awaiting_advance = False
        if ready.election_to_persist is not None:
            self._persisted = ready.election_to_persist
        self.durable_end_offset = self.log.log_end_offset

    # ----- outputs --------------------------------------------------------------------------

    def _emit(self, name: str, **fields: Any) -> None:
        self._out_events.append(RaftEvent(name, {"epoch": self.epoch, **fields}))

    def _send(
        self, destination: int, message: Message, kind: RequestKind, timeout_ms: int = 0
    ) -> None:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        deadline = self._now_ms + (timeout_ms or self.config.request_timeout_ms)
        self._inflight.add(correlation_id, InflightRequest(destination, kind, self.epoch, deadline))
        self._out_messages.append(Envelope(self.node_id, destination, correlation_id, message))

    def _reply(self, request: Envelope, message: Message) -> None:
        self._out_messages.append(
            Envelope(self.node_id, request.source, request.correlation_id, message)
        )

    def _header(self) -> RequestHeader:
        return RequestHeader(self.cluster_id, self.metadata_topic_id or METADATA_TOPIC_ID, 0)

    def _append_local(self, batch: LogBatch) -> None:
        self.log.append(batch)
        self._out_entries.append(batch)
        if self._add_voter_changes(batch):
            self._voter_set_changed(f"voters record at offset {batch.base_offset}")

    def _add_voter_changes(self, batch: LogBatch) -> bool:
        """Record the kraft.version and voter set a control batch sets (KIP-853: in force from
        its offset on, committed or not). Returns whether it held a VotersRecord."""
        kraft_version, voters = voter_changes_in(batch)
        if kraft_version is None and voters is None:
            return False
        self.voter_history.add(batch.base_offset, kraft_version, voters)
        return voters is not None

    def _voter_set_changed(self, reason: str) -> None:
        """The voter set in force may have changed (appended, truncated, snapshot): update the
        views, the leader's replica progress, and tell the driver (its address book)."""
        new = self.voter_history.latest()
        if new == self.voter_set:
            return
        old = self.voter_set
        self.voter_set = new
        self.voters = new.ids
        self._is_voter = new.is_voter(self.local_key)
        leader = self.maybe_leader_state()
        if leader is not None:
            leader.update_voters(new.ids, self._now_ms)
        self._epoch_bounds.forget_all_but(self._vouchers()[0])
        self._emit(
            "voter_set_changed",
            voters=[str(key) for key in new.voter_keys()],
            previous=[str(key) for key in old.voter_keys()],
            reason=reason,
            is_voter=self._is_voter,
        )

    def _truncate_local(self, offset: int) -> None:
        if offset >= self.log.log_end_offset:
            return
        self.log.truncate_to(offset)
        if self.voter_history.truncate_to(offset):
            self._voter_set_changed(f"log truncated to {offset}")
        self._out_entries = [b for b in self._out_entries if b.base_offset < offset]
        self._out_truncate = (
            offset if self._out_truncate is None else min(self._out_truncate, offset)
        )
        self.durable_end_offset = min(self.durable_end_offset, offset)

    # ----- transitions ----------------------------------------------------------------------

    def _transition(self, new: EpochState, reason: str) -> None:
        check_transition(self.state, new, self.node_id)
        leader = self.maybe_leader_state()
        if leader is not None:
            self._abandon_leadership(leader)
        self.state = new
        if self._persists_election:
            durable = election_state_of(new, self._persisted_voters(), self.node_id)
            if durable != self._current_persisted():
                self._out_election = durable
        self._inflight.retain_fetches_of(new.epoch)
        self._emit(f"became_{new.name}", leader_id=new.leader_id, reason=reason)

    def _current_persisted(self) -> ElectionState | None:
        return self._out_election if self._out_election is not None else self._persisted

    def _abandon_leadership(self, leader: LeaderState) -> None:
        """Still in ``leader``'s epoch: answer its parked Fetches; its open batch is dropped
        with it (nothing in it was promised)."""
        for envelope in leader.fetch_purgatory.pop_all():
            self._reply(envelope, self._fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        change = leader.voter_change
        if change is not None:
            leader.voter_change = None
            self._answer_voter_change(
                change.envelope,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"node {self.node_id} stopped leading epoch {leader.epoch} before the voter "
                f"change {change.describe()} committed; it may still take effect: run "
                "`metaquorum quorum describe --status` and retry if it did not",
            )

    def _election_deadline(self, now_ms: int) -> int:
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self._rng.randrange(timeout)

    def _backoff_ms(self, retries: int) -> int:
        """Binary exponential backoff with full jitter, capped (Kafka's
        ``binaryExponentialElectionBackoffMs``)."""
        cap = min(
            self.config.election_backoff_max_ms,
            self.config.election_backoff_base_ms * (1 << min(retries, 20)),
        )
        return self._rng.randrange(cap + 1)

    def _become_unattached(self, epoch: int, reason: str, voted_id: int | None = None) -> None:
        self._transition(
            UnattachedState(epoch, voted_id, self._election_deadline(self._now_ms)), reason
        )

    def _become_follower(self, epoch: int, leader_id: int, reason: str) -> None:
        assert leader_id != self.node_id
        state = self.state
        same_epoch = state.epoch == epoch
        # The vote cast in this epoch stays (a candidate voted for itself).
        voted = getattr(state, "voted_id", None) if same_epoch else None
        if same_epoch and self.is_candidate():
            voted = self.node_id
        follower = self.maybe_follower_state()
        last_success = follower.last_fetch_success_ms if follower and same_epoch else None
        self._transition(
            FollowerState(
                epoch,
                leader_id,
                voted,
                self._now_ms + self.config.fetch_timeout_ms,
                last_success,
            ),
            reason,
        )
        self._fetcher.retry_now(self._now_ms)

    def _become_prospective(self, reason: str, retries: int = 1) -> None:
        state = self.state
        assert self.is_voter
        voted = getattr(state, "voted_id", None)
        leader = state.leader_id
        if self.is_resigned():
            voted = leader = self.node_id
        elif self.is_candidate():
            # An epoch it ran in: it voted for itself there.
            voted = self.node_id
        follower = self.maybe_follower_state()
        prospective = ProspectiveState(
            state.epoch,
            voted,
            leader,
            self._election_deadline(self._now_ms),
            retries=retries,
            leader_resigned=follower is not None and follower.leader_resigned,
        )
        self._transition(prospective, reason)
        self._request_pre_votes(prospective)

    def _become_candidate(self, reason: str, retries: int) -> None:
        epoch = self.epoch + 1
        if epoch > limits.INT32_MAX:
            # Unreachable through peers (epochs above EPOCH_MAX grow one at a time), but never
            # persist or send an epoch the wire cannot carry.
            self._emit("epoch_exhausted", reason="no epoch left to run an election in")
            return
        candidate = CandidateState(epoch, self._election_deadline(self._now_ms), retries=retries)
        self._transition(candidate, reason)
        candidate.granted.add(self.node_id)
        self._request_votes(candidate)

    def _become_leader(self, state: CandidateState) -> None:
        now = self._now_ms
        epoch_start = self.log.log_end_offset
        self._transition(
            LeaderState.elected(
                epoch=state.epoch,
                local_id=self.node_id,
                voters=self.voters,
                log_end_offset=epoch_start,
                now_ms=now,
                config=self.config,
            ),
            "won election",
        )
        records: list[Record] = [
            LeaderChangeMessage(self.node_id, state.epoch, tuple(sorted(self.voters)))
        ]
        history = self.voter_history
        if self.is_dynamic and history.latest_offset() is None and not history.base_from_log:
            # The voter set came from the bootstrap (storage format --standalone or
            # --initial-controllers): the first leader writes it into the log, as Kafka's
            # does, so every replica, snapshot and replay finds it there.
            records.append(KRaftVersionRecord(0, self.kraft_version))
            records.append(self.voter_set.to_record())
        self._append_local(
            encode_batch(
                base_offset=epoch_start,
                epoch=state.epoch,
                timestamp_ms=now + self.wall_clock_offset_ms,
                records=records,
                control=True,
            )
        )

    def _resign(self, reason: str) -> None:
        leader = self.leader_state_or_raise()
        self._drain_accumulator(leader)
        successors = leader.preferred_successors()
        resigned = ResignedState(
            leader.epoch,
            successors,
            set(successors),
            self._election_deadline(self._now_ms),
            self._now_ms,
        )
        self._transition(resigned, reason)
        self._send_end_quorum_epoch(resigned)

    def _observe_epoch(
        self, epoch: int, leader_id: int | None, reason: str, source: int | None = None
    ) -> bool:
        """React to an epoch and leader learned from any message (``source``: the node that
        answered, for responses). Returns True when the message's epoch is stale, or names a
        second leader of our epoch, and its contents must be ignored."""
        if epoch < self.epoch:
            return True
        known = self._known_leader() if epoch == self.epoch else None
        if known is not None and leader_id is not None and leader_id != known:
            if source == known and source != self.node_id:
                # The node we took for the leader of this epoch says another one leads it:
                # what told us otherwise was wrong (a forged BeginQuorumEpoch). Forget the
                # leader, keep the vote; the real one is found like after an election.
                self._become_unattached(
                    epoch, f"node {known} denies leading the epoch", self._voted_id()
                )
            return True
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.node_id:
                self._become_follower(epoch, leader_id, reason)
            else:
                self._become_unattached(epoch, reason)
            return False
        if leader_id is None or leader_id == self.node_id:
            return False
        prospective = self.maybe_prospective_state()
        if (
            self.is_unattached()
            or self.is_candidate()
            or (prospective is not None and leader_id != prospective.leader_id)
        ):
            self._become_follower(epoch, leader_id, reason)
        return False

    def _epoch_acceptable(self, epoch: int) -> bool:
        """Whether a peer's request may move this node to ``epoch``: any epoch up to
        ``EPOCH_MAX``, above it only this node's epoch or the next one, never past ``INT32_MAX``
        (docs/architecture.md#hostile-peers). One forged message cannot strand the quorum at
        an epoch with no room left to elect."""
        return epoch <= limits.INT32_MAX and (epoch <= limits.EPOCH_MAX or epoch <= self.epoch + 1)

    def _known_leader(self) -> int | None:
        """The leader of the current epoch this node knows of or persisted (itself when it
        led it): within one epoch it never changes (I1)."""
        return election_state_of(self.state, self.voters, self.node_id).leader_id

    def _reject(self, envelope: Envelope, error: ErrorCode, reason: str) -> None:
        """Log a refused request once, with the peer and the reason (the driver renders it)."""
        self._emit(
            "request_rejected",
            error=error.name,
            source=envelope.source,
            request=type(envelope.message).__name__,
            reason=reason,
        )

    def _drop_response(self, envelope: Envelope, reason: str) -> None:
        """A response that breaks the protocol is dropped and logged, never asserted on: the
        peer is at fault, not this node (docs/conventions.md#errors)."""
        self._emit(
            "response_rejected",
            source=envelope.source,
            response=type(envelope.message).__name__,
            reason=reason,
        )

    def _voted_id(self) -> int | None:
        return election_state_of(self.state, self.voters, self.node_id).voted_id

    # ----- request handlers -----------------------------------------------------------------

    def _validate_header(self, header: RequestHeader) -> ErrorCode:
        if not header.cluster_id or header.cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID
        if header.topic_id not in (METADATA_TOPIC_ID, self.metadata_topic_id):
            return ErrorCode.UNKNOWN_TOPIC_ID
        if header.partition != 0:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NONE

    def _handle_request(self, envelope: Envelope) -> None:
        message = envelope.message
        if isinstance(
            message, AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateRaftVoterRequest
        ):
            self.handle_voter_change_request(envelope, message)
            return
        assert isinstance(
            message,
            VoteRequest
            | BeginQuorumEpochRequest
            | EndQuorumEpochRequest
            | FetchRequest
            | DescribeQuorumRequest,
        )
        error = self._validate_header(message.header)
        jump = ""
        if error is not ErrorCode.NONE:
            self._reject(envelope, error, "request header")
        elif jump := self.epoch_jump_problem(epoch := request_epoch(message)):
            error = ErrorCode.INVALID_REQUEST
            self._epoch_jump_refused(envelope, jump)
            # A voter that far ahead may be one a liar walked up: a leader asks it again, and
            # its answer moves the leader up by the bound (``_handle_response``).
            self._maybe_voter_ahead(envelope.source, epoch or 0)
        # Each handler answers a header error (or an epoch jump) in its own response type,
        # changing nothing; it validates the rest of the request itself.
        match message:
            case VoteRequest():
                self.handle_vote_request(envelope, message, error)
            case BeginQuorumEpochRequest():
                self.handle_begin_quorum_epoch_request(envelope, message, error)
            case EndQuorumEpochRequest():
                self.handle_end_quorum_epoch_request(envelope, message, error)
            case FetchRequest():
                self.handle_fetch_request(envelope, message, error)
            case DescribeQuorumRequest():
                self.handle_describe_quorum_request(envelope, message, error)
            case _:  # pragma: no cover - is_request guards this
                raise AssertionError(message)
        if jump:  # the answer just queued says why, for a person
            self._out_messages[-1] = explained(self._out_messages[-1], envelope, jump)

    def _epoch_jump_refused(self, envelope: Envelope, reason: str) -> None:
        """Log a peer's message refused for its epoch (throttled by the driver, counted)."""
        kind = "request" if envelope.is_request else "response"
        name = type(envelope.message).__name__
        self._emit("epoch_jump_refused", source=envelope.source, **{kind: name}, reason=reason)

    def _vouchers(self) -> tuple[frozenset[int], int]:
        """Whose answers vouch for an epoch, and out of how many voters a majority counts."""
        return vouchers(self.voters, self.node_id, self._bootstrap_ids)

    def epoch_jump_problem(self, epoch: int | None) -> str:
        """Why a peer's ``epoch`` is refused: more than ``epoch_jump_max`` above the highest
        epoch this node has seen or a majority vouched for ("" if not; counts a refusal).
        Public for the shell's own handlers of epoch-carrying requests (FetchSnapshot)."""
        if epoch is None:
            return ""
        ceiling = self._epoch_bounds.ceiling(self.epoch, *self._vouchers())
        return self._epoch_bounds.problem(epoch, self.epoch, ceiling)

    def _vote_response(self, granted: bool, error: ErrorCode, pre_vote: bool) -> VoteResponse:
        return VoteResponse(error, self.leader_id, self.epoch, granted, pre_vote)

    def _log_is_up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        ours = (self.log.last_fetched_epoch, self.log.log_end_offset)
        return (last_epoch, last_offset) >= ours

    def _campaigns_first(self, request: VoteRequest) -> bool:
        """Whether this voter, in the first round of its own pre-vote, refuses a pre-vote to
        a candidate of a higher id whose log ends where its own does (the request was found
        up to date). Two voters that lost the leader together (its process died: both
        connections reset at once) start their pre-votes within milliseconds; each granting
        the other's made both candidates of one epoch, and the split vote cost an election
        timeout (about 1.3 s). So the lower id goes first: the higher grants it. Only in
        the first round: once that is lost (the lower id cannot reach a majority, say over a
        one-way link), this voter grants as before, so the higher id is never kept from
        winning for long. Safety does not rest on pre-votes; the simulator checks liveness."""
        state = self.state
        return (
            self.config.pre_vote_lower_id_first
            and isinstance(state, ProspectiveState)
            and state.retries == 1
            and state.backoff_until_ms is None
            and request.candidate_id > self.node_id
            and (request.last_offset_epoch, request.last_offset)
            == (self.log.last_fetched_epoch, self.log.log_end_offset)
        )

    def handle_vote_request(
        self, envelope: Envelope, request: VoteRequest, header_error: ErrorCode
    ) -> None:
        """Errors: INCONSISTENT_CLUSTER_ID, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION,
        INCONSISTENT_VOTER_SET (candidate or addressee not a voter here), INVALID_REQUEST
        (negative fields, this node named as the candidate, a last offset epoch above the
        candidate epoch, a candidate epoch this node may not move to: ``_epoch_acceptable``),
        FENCED_LEADER_EPOCH (candidate epoch below ours). A voter with a live leader rejects
        a Vote for a higher epoch without error and without moving (leader stickiness)."""
        error = header_error
        reason = ""
        if error is ErrorCode.NONE:
            error, reason = self._addressee_problem(request.voter_id, request.voter_directory_id)
        if error is ErrorCode.NONE:
            error, reason = self._candidate_problem(request)
        if error is ErrorCode.NONE:
            reason = self._vote_request_problem(request)
            if reason:
                error = ErrorCode.INVALID_REQUEST
        if error is ErrorCode.NONE and request.candidate_epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH  # stale, not hostile: no log line
        if error is not ErrorCode.NONE:
            if reason:
                self._reject(envelope, error, reason)
            self._reply(envelope, self._vote_response(False, error, request.pre_vote))
            return
        up_to_date = self._log_is_up_to_date(request.last_offset_epoch, request.last_offset)
        if request.pre_vote:
            self._maybe_voter_ahead(request.candidate_id, request.candidate_epoch - 1)
            granted = (
                up_to_date and not self._has_live_leader() and not self._campaigns_first(request)
            )
            if granted:
                self._emit("pre_vote_granted", candidate_id=request.candidate_id)
            self._reply(envelope, self._vote_response(granted, ErrorCode.NONE, True))
            return
        if request.candidate_epoch > self.epoch and self._has_live_leader():
            self._maybe_voter_ahead(request.candidate_id, request.candidate_epoch)
            # Leader stickiness (etcd's check-quorum lease, KIP-996's rule for pre-votes applied
            # to votes): a voter that heard its leader within the fetch timeout neither bumps
            # its epoch nor votes. A real candidate won a pre-vote majority of voters without a
            # live leader, so it does not need this one; a forged Vote cannot depose a healthy
            # leader. A leader that resigned (EndQuorumEpoch) does not count as live.
            self._emit(
                "vote_rejected_live_leader",
                candidate_id=request.candidate_id,
                candidate_epoch=request.candidate_epoch,
            )
            self._reply(envelope, self._vote_response(False, ErrorCode.NONE, False))
            return
        if request.candidate_epoch > self.epoch:
            self._become_unattached(request.candidate_epoch, "vote request with higher epoch")
        state = self.state
        granted = False
        if isinstance(state, UnattachedState | ProspectiveState) and state.leader_id is None:
            if state.voted_id == request.candidate_id:
                # Checked again: the vote may have been cast for a forged request in this
                # candidate's name that claimed a longer log (no authentication yet).
                granted = up_to_date
            elif state.voted_id is None and up_to_date:
                granted = True
                self._transition(
                    UnattachedState(
                        state.epoch,
                        request.candidate_id,
                        self._election_deadline(self._now_ms),
                    ),
                    f"voted for {request.candidate_id}",
                )
        if granted:
            self._emit("vote_granted", candidate_id=request.candidate_id)
        self._reply(envelope, self._vote_response(granted, ErrorCode.NONE, False))

    def _addressee_problem(
        self, voter_id: int, voter_directory_id: Uuid | None
    ) -> tuple[ErrorCode, str]:
        """Whether this node may act as the voter a Vote or BeginQuorumEpoch is addressed to.
        A static quorum: only its voters. A dynamic one (KIP-853): any controller, voter or
        not, as its own voter set may be stale, as long as the request names this replica:
        the same node id and, when both are known, the same directory (INVALID_VOTER_KEY)."""
        if voter_id != self.node_id:
            return ErrorCode.INCONSISTENT_VOTER_SET, f"addressed to node {voter_id}"
        if not self.is_dynamic:
            if not self.is_voter:
                return ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a voter"
            return ErrorCode.NONE, ""
        if not self._persists_election:
            return ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a controller"
        mine = self.local_key.directory_id
        if voter_directory_id is not None and mine is not None and voter_directory_id != mine:
            return (
                ErrorCode.INVALID_VOTER_KEY,
                f"addressed to voter {voter_id}:{voter_directory_id}, but this node's "
                f"directory id is {mine} (its disk was formatted again)",
            )
        return ErrorCode.NONE, ""

    def _candidate_problem(self, request: VoteRequest) -> tuple[ErrorCode, str]:
        """Whether the candidate may ask this node. A static quorum: only its voters. A dynamic
        one: a voter of this node's set, or a replica whose log is strictly ahead of this
        node's (it may hold a voter set this node has not fetched yet, KIP-853); a removed
        controller, or a wiped one under a new directory id, is refused."""
        key = ReplicaKey(request.candidate_id, request.candidate_directory_id)
        if self.voter_set.is_voter(key):
            return ErrorCode.NONE, ""
        if self.is_dynamic and (request.last_offset_epoch, request.last_offset) > (
            self.log.last_fetched_epoch,
            self.log.log_end_offset,
        ):
            return ErrorCode.NONE, ""
        return (
            ErrorCode.INCONSISTENT_VOTER_SET,
            f"candidate {key} is not a voter of {self.voter_set!r}",
        )

    def _maybe_voter_ahead(self, voter_id: int, voter_epoch: int) -> None:
        """A voter's request says it is in an epoch above the one this node leads. Sticky
        leaders (see ``handle_vote_request``) would leave such a voter out for good: it cannot
        win (the others hear a live leader) nor follow an older epoch. So the leader asks it
        again, with its next BeginQuorumEpoch resend; a voter really ahead answers
        FENCED_LEADER_EPOCH with its epoch and the leader moves up (etcd lets such a node
        depose the leader the same way). A forged request costs one BeginQuorumEpoch to the
        real voter per resend interval, which it simply acknowledges."""
        leader = self.maybe_leader_state()
        if leader is not None and voter_epoch > self.epoch and voter_id in leader.voters:
            leader.acknowledged.discard(voter_id)

    def _vote_request_problem(self, request: VoteRequest) -> str:
        """What makes a Vote request invalid ("" if nothing)."""
        if request.candidate_id == self.node_id:
            return "names this node as the candidate"
        if request.candidate_epoch < 0 or request.last_offset < 0 or request.last_offset_epoch < 0:
            return "negative epoch or offset"
        if request.last_offset_epoch > request.candidate_epoch:
            return "last offset epoch above the candidate epoch"
        if request.candidate_epoch > limits.INT32_MAX or not (
            request.pre_vote or self._epoch_acceptable(request.candidate_epoch)
        ):
            # A pre-vote moves no epoch: it only needs to be representable.
            return f"candidate epoch {request.candidate_epoch} beyond the epoch limit"
        return ""

    def _has_live_leader(self) -> bool:
        if self.is_leader():
            return True
        follower = self.maybe_follower_state()
        return follower is not None and follower.has_live_leader(
            self._now_ms, self.config.fetch_timeout_ms
        )

    def handle_begin_quorum_epoch_request(
        self, envelope: Envelope, request: BeginQuorumEpochRequest, header_error: ErrorCode
    ) -> None:
        """Errors: header errors, INCONSISTENT_VOTER_SET (leader or addressee not a voter),
        INVALID_REQUEST (negative fields, an epoch beyond the epoch limit, this node named as
        leader, or another leader than the one this node knows for the current epoch),
        FENCED_LEADER_EPOCH (a leader of an older epoch)."""
        error = header_error
        reason = ""
        if error is ErrorCode.NONE:
            error, reason = self._addressee_problem(request.voter_id, request.voter_directory_id)
        if error is ErrorCode.NONE and self._refuses_leader_outside_voters(request.leader_id):
            error, reason = ErrorCode.INCONSISTENT_VOTER_SET, "leader not a voter"
        if error is ErrorCode.NONE:
            reason = self._leader_claim_problem(request.leader_id, request.leader_epoch)
            if reason:
                error = ErrorCode.INVALID_REQUEST
        if error is ErrorCode.NONE and request.leader_epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH  # stale, not hostile: no log line
        if reason:
            self._reject(envelope, error, reason)
        if error is ErrorCode.NONE:
            follower = self.maybe_follower_state()
            if request.leader_epoch > self.epoch or not (
                follower is not None and follower.leader_id == request.leader_id
            ):
                self._become_follower(request.leader_epoch, request.leader_id, "begin quorum epoch")
        self._reply(envelope, BeginQuorumEpochResponse(error, self.leader_id, self.epoch))

    def _refuses_leader_outside_voters(self, leader_id: int) -> bool:
        """Whether a BeginQuorumEpoch or EndQuorumEpoch from ``leader_id`` is refused because
        the leader is not in this node's voter set: always in a static quorum; in a dynamic one
        (KIP-853) whenever this node is itself a voter of its set. The exception KIP-853 needs:
        a node outside its own voter set (an observer, a controller being added) may hold a set
        older than the leader's, the one that names both of them, and follows such a leader. A
        voter whose set is stale learns the new leader from the other voters' answers (Fetch,
        Vote), never from the leader's own claim
        (docs/security.md#a-leader-outside-the-voter-set)."""
        return leader_id not in self.voters and (not self.is_dynamic or self.is_voter)

    def _leader_claim_problem(self, leader_id: int, leader_epoch: int) -> str:
        """What is wrong with a peer's claim that ``leader_id`` leads ``leader_epoch`` ("" if
        nothing); the voter-set check comes first."""
        if leader_epoch < 0 or leader_id < 0:
            return "negative leader id or epoch"
        if leader_id == self.node_id:
            return "names this node as the leader: only this node can say so"
        if not self._epoch_acceptable(leader_epoch):
            return f"leader epoch {leader_epoch} beyond the epoch limit"
        known = self._known_leader()
        if leader_epoch == self.epoch and known is not None and known != leader_id:
            return f"epoch {leader_epoch} is led by node {known} (one leader per epoch)"
        return ""

    def handle_end_quorum_epoch_request(
        self, envelope: Envelope, request: EndQuorumEpochRequest, header_error: ErrorCode
    ) -> None:
        """The leader of ``leader_epoch`` resigned. A follower of it stops trusting it (so it
        grants pre-votes) and the first preferred successor starts an election at once; the
        others wait a backoff that grows with their place in the list.

        Errors: header errors, INCONSISTENT_VOTER_SET (leader not a voter, or this node is
        not one), INVALID_REQUEST (as for BeginQuorumEpoch, or successors that are not
        distinct other voters), FENCED_LEADER_EPOCH (an older epoch)."""
        error = header_error
        reason = ""
        if (
            error is ErrorCode.NONE
            and not self.is_dynamic
            and (request.leader_id not in self.voters or not self.is_voter)
        ):
            error, reason = ErrorCode.INCONSISTENT_VOTER_SET, "leader or this node not a voter"
        if error is ErrorCode.NONE and self.is_dynamic and not self._persists_election:
            error, reason = ErrorCode.INCONSISTENT_VOTER_SET, "this node is not a controller"
        if error is ErrorCode.NONE and self._refuses_leader_outside_voters(request.leader_id):
            error, reason = ErrorCode.INCONSISTENT_VOTER_SET, "leader not a voter"
        if error is ErrorCode.NONE:
            reason = self._leader_claim_problem(request.leader_id, request.leader_epoch)
            successors = request.preferred_successors
            # A dynamic quorum's successors may include voters this node does not know yet.
            known = self.voters - {request.leader_id} if not self.is_dynamic else None
            if not reason and (
                len(successors) > max(len(self.voters), limits.PREFERRED_SUCCESSORS_MAX)
                or len(set(successors)) != len(successors)
                or request.leader_id in successors
                or (known is not None and not set(successors) <= known)
            ):
                reason = "preferred successors are not distinct other voters"
            if reason:
                error = ErrorCode.INVALID_REQUEST
        if error is ErrorCode.NONE and request.leader_epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH  # stale, not hostile: no log line
        if reason:
            self._reject(envelope, error, reason)
        if error is ErrorCode.NONE:
            self._observe_epoch(request.leader_epoch, request.leader_id, "end quorum epoch")
            follower = self.maybe_follower_state()
            if follower is not None and follower.leader_id == request.leader_id:
                follower.last_fetch_success_ms = None
                follower.leader_resigned = True
                if self.node_id in request.preferred_successors:
                    position = request.preferred_successors.index(self.node_id)
                    delay = 0 if position == 0 else self._backoff_ms(position)
                    follower.fetch_deadline_ms = min(
                        follower.fetch_deadline_ms, self._now_ms + delay
                    )
            self._emit("leader_resigned", leader_id=request.leader_id)
        self._reply(envelope, EndQuorumEpochResponse(error, self.leader_id, self.epoch))

    def _fetch_response(
        self,
        error: ErrorCode = ErrorCode.NONE,
        *,
        diverging_epoch: DivergingEpoch | None = None,
        batches: tuple[LogBatch, ...] = (),
        snapshot_id: SnapshotId | None = None,
    ) -> FetchResponse:
        """Every FetchResponse this node sends: its epoch, the leader it knows (itself when
        it leads), its high watermark and log start, plus what the answer carries; a leader's
        carries its newest read fence too."""
        leader = self.maybe_leader_state()
        return FetchResponse(
            error,
            self.leader_id,
            self.epoch,
            self.log.high_watermark,
            self.log.log_start_offset,
            diverging_epoch,
            batches,
            snapshot_id,
            leader.fence_sent() if leader is not None else 0,
        )

    def handle_fetch_request(
        self, envelope: Envelope, request: FetchRequest, header_error: ErrorCode
    ) -> None:
        """Errors: header errors; INVALID_REQUEST (negative offsets, last_fetched_epoch above
        the fetcher's epoch, offset inside a batch); NOT_LEADER_OR_FOLLOWER (this node does not
        lead; the answer names the leader it knows); FENCED_LEADER_EPOCH (the fetcher is
        behind); UNKNOWN_LEADER_EPOCH (the fetcher is ahead). A divergent fetcher gets
        ``diverging_epoch`` and truncates."""
        error = header_error
        reason = ""
        if error is ErrorCode.NONE:
            reason = self._fetch_request_problem(request)
            if reason:
                error = ErrorCode.INVALID_REQUEST
                self._reject(envelope, error, reason)
        leader = self.maybe_leader_state()
        if error is ErrorCode.NONE:
            if request.current_leader_epoch > self.epoch:
                error = ErrorCode.UNKNOWN_LEADER_EPOCH
                self._maybe_voter_ahead(request.replica_id, request.current_leader_epoch)
            elif leader is None:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif request.current_leader_epoch < self.epoch:
                error = ErrorCode.FENCED_LEADER_EPOCH
        if error is not ErrorCode.NONE or leader is None:
            self._reply(envelope, self._fetch_response(error))
            return
        position = self.log.validate_offset_and_epoch(
            request.fetch_offset, request.last_fetched_epoch
        )
        if position.position is FetchPosition.SNAPSHOT:
            # Behind the log start, or diverging inside the snapshot: load it first (KIP-630).
            snapshot = SnapshotId(position.end_offset, position.epoch)
            self._reply(envelope, self._fetch_response(snapshot_id=snapshot))
            return
        if position.position is FetchPosition.DIVERGING:
            diverging = DivergingEpoch(position.epoch, position.end_offset)
            self._reply(envelope, self._fetch_response(diverging_epoch=diverging))
            return
        if not self.log.is_batch_boundary(request.fetch_offset):
            self._reply(envelope, self._fetch_response(ErrorCode.INVALID_REQUEST))
            return
        # A voter's id fetching from another directory (a wiped disk) is an observer.
        is_voter = self.voter_set.is_voter(
            ReplicaKey(request.replica_id, request.replica_directory_id)
        )
        leader.update_replica_state(
            request.replica_id,
            request.fetch_offset,
            self.log.log_end_offset,
            self._now_ms,
            self.config,
            voter=is_voter,
            directory_id=request.replica_directory_id,
        )
        if is_voter:
            leader.record_fence_echo(request.replica_id, request.read_fence)
            self._maybe_advance_high_watermark()
        elif leader.voter_change is not None:
            self._maybe_add_caught_up_voter(leader)
        old = leader.fetch_purgatory.pop(request.replica_id)
        if old is not None:
            self._complete_fetch(old)
        hw_news_now = (
            request.high_watermark < self.log.high_watermark
            and self.config.high_watermark_notify_delay_ms == 0
        )
        if (
            request.fetch_offset < self.log.log_end_offset
            or request.max_wait_ms == 0
            or hw_news_now
        ):
            self._complete_fetch(envelope)
        elif not is_voter and len(leader.fetch_purgatory) >= self.config.fetch_purgatory_max:
            # The purgatory is full of observers: answer at once instead of parking.
            self._complete_fetch(envelope)
        else:
            wait = min(request.max_wait_ms, self.config.fetch_max_wait_ms)
            # Only the high watermark may be news: it goes with the next data, or once it is
            # high_watermark_notify_delay_ms old for this fetcher.
            behind = request.high_watermark < self.log.high_watermark
            leader.fetch_purgatory.park(
                request.replica_id,
                envelope,
                self._now_ms + wait,
                news_since_ms=self._now_ms if behind else None,
            )

    def _fetch_request_problem(self, request: FetchRequest) -> str:
        """What makes a Fetch request invalid ("" if nothing)."""
        if (
            request.fetch_offset < 0
            or request.last_fetched_epoch < 0
            or request.max_wait_ms < 0
            or request.current_leader_epoch < 0
            or request.high_watermark < 0
            or request.read_fence < 0
        ):
            return "negative offset, epoch or wait"
        if request.replica_id < 0:
            return f"replica id {request.replica_id} is not a node id"
        if request.replica_id == self.node_id:
            return "claims to come from this node"
        if request.last_fetched_epoch > request.current_leader_epoch:
            return "last fetched epoch above the fetcher's epoch"
        if request.high_watermark > request.fetch_offset:
            return "high watermark above the fetch offset (the fetcher's log end)"
        return ""

    def _complete_fetch(self, envelope: Envelope) -> None:
        request = envelope.message
        assert isinstance(request, FetchRequest)
        max_bytes = min(request.max_bytes, self.config.fetch_max_bytes)
        batches = self.log.read(request.fetch_offset, max_bytes)
        self._reply(envelope, self._fetch_response(batches=batches))

    def handle_describe_quorum_request(
        self, envelope: Envelope, request: DescribeQuorumRequest, header_error: ErrorCode
    ) -> None:
        """Errors: header errors; NOT_LEADER_OR_FOLLOWER (only the leader knows replication;
        the answer names the leader)."""
        error = header_error
        leader = self.maybe_leader_state()
        if error is ErrorCode.NONE and leader is None:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if header_error is not ErrorCode.NONE:
            # A foreign request learns nothing about this quorum (I15).
            self._reply(envelope, DescribeQuorumResponse(error, None, -1, -1))
            return
        if error is not ErrorCode.NONE or leader is None:
            self._reply(
                envelope,
                DescribeQuorumResponse(error, self.leader_id, self.epoch, self.log.high_watermark),
            )
            return
        voters, observers = leader.describe_quorum(self._now_ms, self.log.log_end_offset)
        voter_set = self.voter_set
        voters = tuple(
            dataclasses.replace(
                v,
                directory_id=voter_set.directory_id(v.replica_id),
                endpoints=node.endpoints if (node := voter_set.voter(v.replica_id)) else (),
            )
            for v in voters
        )
        self._reply(
            envelope,
            DescribeQuorumResponse(
                ErrorCode.NONE,
                self.node_id,
                self.epoch,
                self.log.high_watermark,
                voters,
                observers,
            ),
        )

    # ----- voter changes (KIP-853) ----------------------------------------------------------

    def handle_voter_change_request(
        self,
        envelope: Envelope,
        request: AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateRaftVoterRequest,
    ) -> None:
        """AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter, on the leader, with Kafka's rules:
        one uncommitted voter change at a time; the leader first commits an entry of its own
        epoch (fencing changes a previous leader left uncommitted); a new voter first catches
        up as an observer (fetching from its own directory) to the leader's log end; the answer
        comes once the new ``VotersRecord`` is committed by the new voter set. A leader removed
        from the set keeps leading until the removal commits, then resigns.

        Errors: INCONSISTENT_CLUSTER_ID; NOT_LEADER_OR_FOLLOWER (names the leader this node
        knows); UNSUPPORTED_VERSION (a static quorum, kraft.version 0); REQUEST_TIMED_OUT
        (another change pending or uncommitted, this leader's epoch not committed yet, the new
        voter not caught up in time, the change not committed in time); DUPLICATE_VOTER (the
        node id is a voter already); VOTER_NOT_FOUND (no voter has this id and directory id);
        INVALID_REQUEST (no directory id or no endpoint given, removing the last voter);
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (UpdateRaftVoter of another epoch)."""
        leader = self.maybe_leader_state()
        problem = self._voter_change_problem(request, leader)
        if problem is not None:
            code, message = problem
            if code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT):
                self._reject(envelope, code, message)
            self._answer_voter_change(envelope, code, message)
            return
        assert leader is not None
        if leader.voter_change is not None:  # only with unsafe_allow_concurrent_voter_changes
            replaced, leader.voter_change = leader.voter_change, None
            self._answer_voter_change(replaced.envelope, ErrorCode.REQUEST_TIMED_OUT, "replaced")
        timeout_ms = limits.VOTER_CHANGE_TIMEOUT_MS_MAX
        if isinstance(request, AddRaftVoterRequest):
            timeout_ms = max(1, min(request.timeout_ms, timeout_ms))
        deadline_ms = self._now_ms + timeout_ms
        match request:
            case AddRaftVoterRequest():
                node = VoterNode(
                    ReplicaKey(request.voter_id, request.voter_directory_id), request.endpoints
                )
                leader.voter_change = PendingVoterChange(
                    "add", envelope, node, deadline_ms, catch_up_offset=self.log.log_end_offset
                )
                self._emit("voter_add_started", voter=str(node.key))
                self._maybe_add_caught_up_voter(leader)
            case RemoveRaftVoterRequest():
                key = ReplicaKey(request.voter_id, request.voter_directory_id)
                removed = self.voter_set.remove(key)
                assert removed is not None
                leader.voter_change = PendingVoterChange(
                    "remove", envelope, VoterNode(key), deadline_ms
                )
                self._append_voter_set(leader, removed)
            case UpdateRaftVoterRequest():
                node = VoterNode(
                    ReplicaKey(request.voter_id, request.voter_directory_id),
                    request.endpoints,
                    request.kraft_version_min,
                    request.kraft_version_max,
                )
                if self.voter_set.voter(request.voter_id) == node:
                    self._answer_voter_change(envelope, ErrorCode.NONE, "")
                    return
                updated = self.voter_set.update(node)
                assert updated is not None
                leader.voter_change = PendingVoterChange("update", envelope, node, deadline_ms)
                self._append_voter_set(leader, updated)

    def _voter_change_problem(
        self,
        request: AddRaftVoterRequest | RemoveRaftVoterRequest | UpdateRaftVoterRequest,
        leader: LeaderState | None,
    ) -> tuple[ErrorCode, str] | None:
        """Why a voter change cannot start now (Kafka's order of checks), or None."""
        if not request.cluster_id or request.cluster_id != self.cluster_id:
            return ErrorCode.INCONSISTENT_CLUSTER_ID, "the request names another cluster"
        if leader is None:
            return (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"node {self.node_id} is not the leader (leader: {self.leader_id}, epoch "
                f"{self.epoch}); send voter changes to the leader",
            )
        if isinstance(request, UpdateRaftVoterRequest):
            if request.current_leader_epoch < self.epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, f"epoch {self.epoch} is current"
            if request.current_leader_epoch > self.epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {self.epoch} is current"
        unsafe = self.config.unsafe_allow_concurrent_voter_changes
        if leader.voter_change is not None and not unsafe:
            return (
                ErrorCode.REQUEST_TIMED_OUT,
                f"the leader is still working on the voter change "
                f"{leader.voter_change.describe()}; one change at a time: retry once it is done",
            )
        if self.log.high_watermark <= leader.epoch_start_offset:
            return (
                ErrorCode.REQUEST_TIMED_OUT,
                f"leader {self.node_id} has not committed its epoch {self.epoch} yet (fencing "
                "the changes of earlier leaders); retry in a moment",
            )
        if not self.is_dynamic:
            return (
                ErrorCode.UNSUPPORTED_VERSION,
                f"this quorum's voter set is static (kraft.version {self.kraft_version}: "
                "controller.quorum.voters); voters can only be added or removed in a quorum "
                "formatted with --standalone or --initial-controllers (kraft.version 1)",
            )
        latest = self.voter_history.latest_offset()
        if latest is not None and latest >= self.log.high_watermark and not unsafe:
            return (
                ErrorCode.REQUEST_TIMED_OUT,
                f"the voter set written at offset {latest} is not committed yet (high "
                f"watermark {self.log.high_watermark}); one change at a time: retry shortly",
            )
        key = ReplicaKey(request.voter_id, request.voter_directory_id)
        if request.voter_id < 0 or request.voter_directory_id == ZERO_UUID:
            return (
                ErrorCode.INVALID_REQUEST,
                f"voter {key}: a voter needs a node id >= 0 and its directory id (the "
                "directory.id in its meta.properties)",
            )
        voters = [str(k) for k in self.voter_set.voter_keys()]
        match request:
            case AddRaftVoterRequest():
                if request.voter_id in self.voters:
                    return (
                        ErrorCode.DUPLICATE_VOTER,
                        f"node {request.voter_id} is already a voter ({voters}); to replace "
                        "its directory, remove the old voter first",
                    )
                if not request.endpoints:
                    return ErrorCode.INVALID_REQUEST, f"voter {key}: no endpoint given"
            case RemoveRaftVoterRequest():
                current = self.voter_set.voter(request.voter_id)
                if current is None or current.key != key:
                    return (
                        ErrorCode.VOTER_NOT_FOUND,
                        f"{key} is not a voter; the voters are {voters}",
                    )
                if len(self.voter_set) == 1:
                    return ErrorCode.INVALID_REQUEST, f"{key} is the last voter"
            case UpdateRaftVoterRequest():
                current = self.voter_set.voter(request.voter_id)
                if current is None or current.key != key:
                    return (
                        ErrorCode.VOTER_NOT_FOUND,
                        f"{key} is not a voter; the voters are {voters}",
                    )
                if not request.endpoints:
                    return ErrorCode.INVALID_REQUEST, f"voter {key}: no endpoint given"
        return None

    def _maybe_add_caught_up_voter(self, leader: LeaderState) -> None:
        """A pending AddRaftVoter whose new voter has fetched up to the leader's log end as of
        the request (from its own directory): append the new voter set."""
        change = leader.voter_change
        if change is None or change.kind != "add" or change.offset is not None:
            return
        assert change.catch_up_offset is not None
        progress = leader.observers.get(change.voter.node_id)
        if (
            progress is None
            or progress.directory_id != change.voter.key.directory_id
            or progress.log_end_offset < change.catch_up_offset
        ):
            return
        added = self.voter_set.add(change.voter)
        assert added is not None, (change, self.voter_set)
        self._append_voter_set(leader, added)

    def _append_voter_set(self, leader: LeaderState, voters: VoterSet) -> None:
        """Append ``voters`` as the new voter set (in force at once, KIP-853)."""
        change = leader.voter_change
        assert change is not None
        assert self.voter_set.differs_by_at_most_one(voters), (self.voter_set, voters)
        self._drain_accumulator(leader)
        offset = self.log.log_end_offset
        change.offset = offset
        self._append_local(
            encode_batch(
                base_offset=offset,
                epoch=leader.epoch,
                timestamp_ms=self._now_ms,
                records=[voters.to_record()],
                control=True,
            )
        )
        leader.idle_deadline_ms = self._now_ms + self.config.idle_interval_ms
        self._emit(
            "voter_change_appended", kind=change.kind, voter=str(change.voter.key), offset=offset
        )

    def _maybe_complete_voter_change(self, leader: LeaderState) -> None:
        """After the high watermark moved or time passed: answer a voter change that committed
        (and resign if this leader was removed) or expired."""
        change = leader.voter_change
        if change is None:
            return
        if change.offset is not None and self.log.high_watermark > change.offset:
            leader.voter_change = None
            self._emit("voter_change_committed", kind=change.kind, voter=str(change.voter.key))
            self._answer_voter_change(change.envelope, ErrorCode.NONE, "")
            if not self.is_voter:
                # Kafka's rule: a leader removed from the voter set leads until the removal
                # commits, then resigns.
                leader.resign_requested = True
            return
        if self._now_ms >= change.deadline_ms:
            leader.voter_change = None
            if change.offset is None:
                progress = leader.observers.get(change.voter.node_id)
                at = progress.log_end_offset if progress is not None else -1
                message = (
                    f"voter {change.voter.key} did not catch up in time: it fetched up to "
                    f"offset {at} of {change.catch_up_offset} (is it running as an observer, "
                    "formatted with --no-initial-controllers, with this directory id?)"
                )
            else:
                message = (
                    f"the voter set written at offset {change.offset} for "
                    f"{change.describe()} was not committed in time (high watermark "
                    f"{self.log.high_watermark}); it may still commit: describe the quorum"
                )
            self._emit("voter_change_timed_out", kind=change.kind, voter=str(change.voter.key))
            self._answer_voter_change(change.envelope, ErrorCode.REQUEST_TIMED_OUT, message)

    def _answer_voter_change(self, envelope: Envelope, error: ErrorCode, message: str) -> None:
        self._reply(
            envelope,
            VoterChangeResponse(
                error,
                message,
                self.leader_id,
                self.epoch,
                self.log.high_watermark if error is ErrorCode.NONE else 0,
            ),
        )

    # ----- response handlers ----------------------------------------------------------------

    def _handle_response(self, envelope: Envelope, inflight: InflightRequest) -> None:
        message = envelope.message
        if isinstance(message, RequestFailed):
            self._handle_request_failed(inflight, message)
            return
        problem = self._response_problem(message, envelope.source)
        if problem:
            self._drop_response(envelope, problem)
            if inflight.kind is RequestKind.FETCH:
                self._fetch_backoff()
            return
        error: ErrorCode = getattr(message, "error_code", ErrorCode.NONE)
        if error is ErrorCode.UNKNOWN_TOPIC_ID and self.metadata_topic_id is not None:
            # The peer does not know the metadata topic id we applied: one of us holds a record
            # the other lacks (a lost write, quorum.raft.prefix_divergence). Ask by the sentinel,
            # which every node accepts, so the divergence shows; replay sets the id again.
            self._emit(
                "metadata_topic_id_unknown",
                peer=envelope.source,
                topic_id=str(self.metadata_topic_id),
            )
            self.metadata_topic_id = None
        if (
            error is ErrorCode.INCONSISTENT_VOTER_SET
            and self.is_dynamic
            and isinstance(message, VoteResponse)
        ):
            # A voter refused us as a candidate: we are not in its voter set (removed, and we
            # do not know it yet). A plain rejection, naming the leader it follows: we follow
            # it too, and its log tells us (KIP-853).
            message = dataclasses.replace(message, error_code=ErrorCode.NONE, vote_granted=False)
            error = ErrorCode.NONE
        if error in (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INCONSISTENT_VOTER_SET):
            # The peer belongs to another cluster or another voter set: an operator must act.
            self._emit(error.name.lower(), peer=envelope.source, request=inflight.kind.value)
            if inflight.kind is RequestKind.FETCH:
                self._fetch_backoff()
            return
        answered_epoch: int = getattr(message, "leader_epoch", -1)
        self._epoch_bounds.vouch(envelope.source, answered_epoch, self._vouchers()[0])
        if jump := self.epoch_jump_problem(answered_epoch):
            # Unless a majority of voters answered with it, one voter cannot move us that far.
            self._epoch_jump_refused(envelope, jump)
            if inflight.kind is RequestKind.FETCH:
                self._fetch_backoff()
            elif (
                inflight.kind is RequestKind.BEGIN_QUORUM_EPOCH
                and inflight.epoch == self.epoch
                and error is ErrorCode.FENCED_LEADER_EPOCH
                and self.is_leader()
            ):
                # A voter that far ahead: a liar, or one a liar walked up (requests move a
                # node the bound at a time). Sticky followers would leave it out for good, so
                # the leader steps up by the bound, no further, and resigns: within (its epoch
                # - ours) / bound elections it is followed, and each lie costs one election
                # and the bound, as a forged request does.
                ceiling = self._epoch_bounds.ceiling(self.epoch, *self._vouchers())
                self._become_unattached(ceiling, "a voter is ahead beyond EPOCH_JUMP_MAX")
            return
        if inflight.epoch != self.epoch and inflight.kind is not RequestKind.FETCH:
            # An answer to a request sent in an older epoch: only its epoch news matters.
            epoch = getattr(message, "leader_epoch", -1)
            leader = getattr(message, "leader_id", None)
            if epoch > self.epoch:
                self._observe_epoch(epoch, leader, "stale response with higher epoch")
            return
        match message:
            case VoteResponse():
                self.handle_vote_response(envelope, message, inflight)
            case BeginQuorumEpochResponse():
                self.handle_begin_quorum_epoch_response(envelope, message)
            case EndQuorumEpochResponse():
                self.handle_end_quorum_epoch_response(envelope, message)
            case FetchResponse():
                self.handle_fetch_response(envelope, message, inflight)
            case DescribeQuorumResponse():  # pragma: no cover - the core never asks
                pass

    def _response_problem(self, message: Message, source: int) -> str:
        """What makes a response unusable whatever it answers ("" if nothing): a leader outside
        the voter set, a leader of our own epoch other than the one we know, negative offsets.

        ``EPOCH_MAX`` binds requests, which anyone can send. A response comes back on this
        node's own connection to a configured voter, answering a request of its own, and may
        carry any epoch a voter reached: that is how a node left behind above ``EPOCH_MAX``
        (where requests move it one epoch at a time) catches up."""
        epoch: int = getattr(message, "leader_epoch", 0)
        leader_id: int | None = getattr(message, "leader_id", None)
        if epoch < 0 and not isinstance(message, DescribeQuorumResponse):
            return f"negative leader epoch {epoch}"
        if epoch > limits.INT32_MAX:
            return f"leader epoch {epoch} beyond INT32_MAX"
        if leader_id is not None and leader_id not in self.voters and not self.is_dynamic:
            # A dynamic quorum's leader may be outside this node's voter set: it may have been
            # added by a VotersRecord not fetched yet, or be leaving (removed, not committed).
            return f"leader {leader_id} is not a voter"
        known = self._known_leader()
        if (
            epoch == self.epoch
            and leader_id is not None
            and known is not None
            # unless the leader we knew denies it: see _observe_epoch
            and known not in (leader_id, source)
        ):
            return f"names node {leader_id} as leader of epoch {epoch}, led by node {known}"
        if isinstance(message, FetchResponse):
            if message.high_watermark < 0 or message.log_start_offset < 0:
                return "negative high watermark or log start offset"
            diverging = message.diverging_epoch
            if diverging is not None and (diverging.epoch < 0 or diverging.end_offset < 0):
                return "negative diverging epoch or end offset"
            snapshot = message.snapshot_id
            if snapshot is not None and (snapshot.epoch < 0 or snapshot.end_offset < 0):
                return "negative snapshot id"
        return ""

    def _handle_request_failed(self, inflight: InflightRequest, failure: RequestFailed) -> None:
        if inflight.kind is RequestKind.FETCH:
            if failure.peer_gone:
                self._leader_connection_lost(inflight)
            self._fetch_backoff()
            return
        if inflight.epoch != self.epoch:
            return
        election = self._election_for(inflight.kind)
        if election is not None:
            voter = inflight.destination
            if voter not in election.granted and voter not in election.rejected:
                election.retry_at_ms[voter] = self._now_ms + self.config.retry_backoff_ms

    def _leader_connection_lost(self, inflight: InflightRequest) -> None:
        """A Fetch to our leader found it gone (connection refused or reset): its process most
        likely died. The follower stops counting it as live (so it grants pre-votes) and, once
        per epoch, moves its fetch deadline to a random moment within
        ``election_backoff_base_ms``, where ``poll_follower`` starts a pre-vote (a voter) or
        looks for the new leader among the voters (an observer: a broker) instead of waiting
        out the fetch timeout (``RaftConfig.election_on_connection_loss``). A Fetch that
        succeeds meanwhile puts the deadline back."""
        follower = self.maybe_follower_state()
        if (
            follower is None
            or inflight.destination != follower.leader_id
            or inflight.epoch != follower.epoch
        ):
            return
        follower.leader_unreachable = True
        if (
            not self.config.election_on_connection_loss
            or self._connection_loss_epoch == follower.epoch
        ):
            return
        self._connection_loss_epoch = follower.epoch
        pause = self._rng.randrange(self.config.election_backoff_base_ms + 1)
        follower.fetch_deadline_ms = min(follower.fetch_deadline_ms, self._now_ms + pause)
        self._emit("leader_connection_lost", leader_id=follower.leader_id, pre_vote_in_ms=pause)

    def _election_for(self, kind: RequestKind) -> ProspectiveState | CandidateState | None:
        """The state a (pre-)vote request of ``kind`` was sent for, if the node is still in
        that role: pre-votes belong to a prospective node, votes to a candidate."""
        if kind is RequestKind.PRE_VOTE:
            return self.maybe_prospective_state()
        if kind is RequestKind.VOTE:
            return self.maybe_candidate_state()
        return None

    def handle_vote_response(
        self, envelope: Envelope, response: VoteResponse, inflight: InflightRequest
    ) -> None:
        if response.error_code not in (ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH):
            return
        if self._observe_epoch(
            response.leader_epoch, response.leader_id, "vote response", envelope.source
        ):
            return
        election = self._election_for(inflight.kind)
        if election is None:
            return
        if response.error_code is ErrorCode.NONE and response.vote_granted:
            election.granted.add(envelope.source)
        else:
            election.rejected.add(envelope.source)
            if (
                isinstance(election, ProspectiveState)
                and response.leader_id is not None
                and response.leader_id != self.node_id
                and response.leader_epoch == election.epoch
            ):
                election.leader_hint = response.leader_id
        if isinstance(election, ProspectiveState):
            self._maybe_finish_pre_vote(election)
        else:
            self._maybe_finish_election(election)

    def _maybe_finish_pre_vote(self, state: ProspectiveState) -> None:
        result = self._tally(state.granted, state.rejected)
        if result is VoteResult.WON:
            self._become_candidate("pre-vote won", state.retries)
        elif state.leader_hint is not None and not (
            state.leader_resigned and state.leader_hint == state.leader_id
        ):
            # A voter still hears a leader of our epoch: go back and fetch from it (KIP-996: a
            # prospective voter that learns of the epoch's leader follows it). Not only once
            # the pre-vote is lost: a node whose own link to the leader is down would wait
            # forever for that leader's answer, and meanwhile, neither following nor a
            # candidate, grant pre-votes that depose a live leader.
            self._become_follower(state.epoch, state.leader_hint, "pre-vote rejected")
        elif result is VoteResult.LOST and state.backoff_until_ms is None:
            state.backoff_until_ms = self._now_ms + self._backoff_ms(state.retries)

    def _tally(self, granted: set[int], rejected: set[int]) -> VoteResult:
        """The outcome of a (pre-)vote over the voter set in force now (it may have changed
        since the requests left: only its members count)."""
        voters = self.voters
        return vote_result(len(voters), granted & voters, rejected & voters)

    def _maybe_finish_election(self, state: CandidateState) -> None:
        result = self._tally(state.granted, state.rejected)
        if result is VoteResult.WON:
            self._become_leader(state)
        elif result is VoteResult.LOST and state.backoff_until_ms is None:
            state.backoff_until_ms = self._now_ms + self._backoff_ms(state.retries)

    def handle_begin_quorum_epoch_response(
        self, envelope: Envelope, response: BeginQuorumEpochResponse
    ) -> None:
        if response.error_code not in (ErrorCode.NONE, ErrorCode.FENCED_LEADER_EPOCH):
            return
        if self._observe_epoch(
            response.leader_epoch, response.leader_id, "begin epoch response", envelope.source
        ):
            return
        leader = self.maybe_leader_state()
        if leader is not None and response.error_code is ErrorCode.NONE:
            leader.acknowledged.add(envelope.source)

    def handle_end_quorum_epoch_response(
        self, envelope: Envelope, response: EndQuorumEpochResponse
    ) -> None:
        if self._observe_epoch(
            response.leader_epoch, response.leader_id, "end epoch response", envelope.source
        ):
            return
        resigned = self.maybe_resigned_state()
        if resigned is not None:
            resigned.unacknowledged.discard(envelope.source)

    def handle_fetch_response(
        self, envelope: Envelope, response: FetchResponse, inflight: InflightRequest
    ) -> None:
        error = response.error_code
        if error not in (
            ErrorCode.NONE,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.FENCED_LEADER_EPOCH,
        ):
            self._fetch_backoff()
            return
        if self._observe_epoch(
            response.leader_epoch, response.leader_id, "fetch response", envelope.source
        ):
            return
        state = self.maybe_follower_state()
        if error is not ErrorCode.NONE or state is None:
            self._fetch_backoff()
            return
        if envelope.source != state.leader_id or response.leader_epoch != state.epoch:
            return
        state.fetch_succeeded(self._now_ms, self.config.fetch_timeout_ms)
        state.read_fence = max(state.read_fence, response.read_fence)
        if response.snapshot_id is not None:
            snapshot = response.snapshot_id
            if snapshot.epoch > state.epoch:
                self._drop_response(envelope, f"snapshot {snapshot} past the epoch")
                self._fetch_backoff()
                return
            if snapshot.end_offset < self.log.high_watermark:
                # Our log diverges inside the leader's snapshot, below what we saw committed.
                self._committed_prefix_diverged(
                    envelope, response, snapshot.end_offset, snapshot.epoch, via_snapshot=True
                )
                return
            self._fetcher.fetching_snapshot = snapshot
            self._out_snapshot = (envelope.source, snapshot)
            self._emit("snapshot_needed", end_offset=snapshot.end_offset, epoch=snapshot.epoch)
            return
        if response.diverging_epoch is not None:
            diverging = response.diverging_epoch
            _, our_end = self.log.end_offset_for_epoch(diverging.epoch)
            offset = min(diverging.end_offset, our_end)
            # Walk back to a batch boundary we share (a mismatch inside a batch cannot be
            # repaired partially).
            offset = max(offset, self.log.log_start_offset)
            while not self.log.is_batch_boundary(offset):
                offset -= 1
            if offset < self.log.high_watermark:
                # Only a leader that lost committed data (or a forged answer) says this.
                self._committed_prefix_diverged(
                    envelope, response, offset, diverging.epoch, via_snapshot=False
                )
                return
            self._emit(
                "fetch_diverged",
                truncate_to=offset,
                diverging_epoch=diverging.epoch,
                end_offset=diverging.end_offset,
            )
            self._truncate_local(offset)
            self._fetcher.retry_now(self._now_ms)
            return
        for batch in response.batches:
            if batch.base_offset != self.log.log_end_offset:
                break
            if batch.epoch < self.log.last_fetched_epoch or batch.epoch > state.epoch:
                break
            self._append_local(batch)
        self.log.update_high_watermark(min(response.high_watermark, self.log.log_end_offset))
        self._fetcher.retry_now(self._now_ms)

    def _committed_prefix_diverged(
        self,
        envelope: Envelope,
        response: FetchResponse,
        truncate_to: int,
        diverging_epoch: int,
        *,
        via_snapshot: bool,
    ) -> None:
        """The leader's answer would cut our log below its high watermark, which I7 forbids:
        stop fetching and hand the shell a ``PrefixDivergence`` (an observer recovers, a voter
        stops; quorum.raft.prefix_divergence). Never a loop of refused answers."""
        divergence = PrefixDivergence.of_answer(
            envelope.source,
            response,
            self.log,
            truncate_to,
            diverging_epoch,
            via_snapshot=via_snapshot,
            recoverable=not self._persists_election,
        )
        self._fetcher.diverged = divergence
        self._out_divergence = divergence
        self._emit("committed_prefix_diverged", **divergence.fields())

    # ----- timers (poll) --------------------------------------------------------------------

    def _poll_state(self) -> None:
        self._expire_inflight()
        match self.state:
            case LeaderState() as leader:
                self.poll_leader(leader)
            case CandidateState() as candidate:
                self.poll_candidate(candidate)
            case ProspectiveState() as prospective:
                self.poll_prospective(prospective)
            case FollowerState() as follower:
                self.poll_follower(follower)
            case UnattachedState() as unattached:
                self.poll_unattached(unattached)
            case ResignedState() as resigned:
                self.poll_resigned(resigned)

    def _expire_inflight(self) -> None:
        for inflight in self._inflight.pop_expired(self._now_ms):
            self._handle_request_failed(inflight, RequestFailed("request timed out"))

    def poll_leader(self, state: LeaderState) -> None:
        now = self._now_ms
        self._maybe_complete_voter_change(state)
        if state.resign_requested:
            self._resign("removed from the voter set")
            return
        # Check quorum: resign when a majority has been silent too long.
        fetched = state.fetched_voters(now, self.config.check_quorum_timeout_ms)
        if not state.has_quorum(fetched):
            self._emit("check_quorum_failed", alive=len(fetched))
            self._resign("check quorum failed")
            return
        if now >= state.begin_quorum_epoch_resend_at_ms:
            for voter in state.nonacknowledging_voters():
                self._send(
                    voter,
                    BeginQuorumEpochRequest(
                        self._header(),
                        self.node_id,
                        state.epoch,
                        voter,
                        self.voter_set.directory_id(voter),
                    ),
                    RequestKind.BEGIN_QUORUM_EPOCH,
                )
            state.begin_quorum_epoch_resend_at_ms = now + self.config.begin_quorum_epoch_resend_ms
        if state.accumulator.needs_drain(now, in_flight=self._batch_in_flight()):
            self._drain_accumulator(state)
        elif now >= state.idle_deadline_ms and state.accumulator.is_empty():
            self._append_local(
                encode_batch(
                    base_offset=self.log.log_end_offset,
                    epoch=state.epoch,
                    timestamp_ms=now + self.wall_clock_offset_ms,
                    records=[NoOpRecord()],
                )
            )
            state.idle_deadline_ms = now + self.config.idle_interval_ms
        # Long-poll fetches: answer those with data or past their wait, and those whose
        # high-watermark news is the notify delay old.
        for envelope in state.fetch_purgatory.pop_completable(
            now, self.log.log_end_offset, now - self.config.high_watermark_notify_delay_ms
        ):
            self._complete_fetch(envelope)

    def _drain_accumulator(self, leader: LeaderState) -> None:
        """Append the open batch, if any, to the log."""
        batch = leader.accumulator.drain(
            self.log.log_end_offset, self._now_ms, self._now_ms + self.wall_clock_offset_ms
        )
        if batch is None:
            return
        self._append_local(batch)
        leader.idle_deadline_ms = self._now_ms + self.config.idle_interval_ms

    def _maybe_advance_high_watermark(self) -> None:
        leader = self.maybe_leader_state()
        if leader is None:
            return
        if leader.maybe_update_high_watermark(self.log, self.durable_end_offset, self.config):
            # Fetchers learn the new high watermark from their parked fetches: with the next
            # data, or once the notify delay is over.
            self._schedule_high_watermark_notice(leader)
            self._maybe_complete_voter_change(leader)

    def _schedule_high_watermark_notice(self, leader: LeaderState) -> None:
        """The high watermark moved: each parked fetcher behind it has news from now on (and
        is answered at once when there is no notify delay)."""
        leader.fetch_purgatory.high_watermark_moved(self.log.high_watermark, self._now_ms)
        if self.config.high_watermark_notify_delay_ms == 0:
            for envelope in leader.fetch_purgatory.pop_completable(
                self._now_ms, self.log.log_end_offset, self._now_ms
            ):
                self._complete_fetch(envelope)

    def poll_candidate(self, state: CandidateState) -> None:
        now = self._now_ms
        if state.backoff_until_ms is not None:
            if now >= state.backoff_until_ms:
                self._become_prospective("election lost", retries=state.retries + 1)
            return
        if now >= state.election_deadline_ms:
            state.backoff_until_ms = now + self._backoff_ms(state.retries)
            return
        self._retry_vote_requests(state, pre_vote=False)

    def poll_prospective(self, state: ProspectiveState) -> None:
        now = self._now_ms
        if state.backoff_until_ms is not None:
            if now >= state.backoff_until_ms:
                state.start_next_round(self._election_deadline(now))
                self._request_pre_votes(state)
            return
        if now >= state.election_deadline_ms:
            state.backoff_until_ms = now + self._backoff_ms(state.retries)
            return
        self._retry_vote_requests(state, pre_vote=True)

    def _request_pre_votes(self, state: ProspectiveState) -> None:
        state.granted.add(self.node_id)
        self._send_vote_requests(sorted(self.voters - {self.node_id}), pre_vote=True)
        self._maybe_finish_pre_vote(state)

    def _request_votes(self, state: CandidateState) -> None:
        self._send_vote_requests(sorted(self.voters - {self.node_id}), pre_vote=False)
        self._maybe_finish_election(state)

    def _send_vote_requests(self, voters: Sequence[int], *, pre_vote: bool) -> None:
        candidate_epoch = self.epoch + 1 if pre_vote else self.epoch
        if candidate_epoch > limits.INT32_MAX:
            self._emit("epoch_exhausted", reason="no epoch left to run an election in")
            return
        for voter in voters:
            self._send(
                voter,
                VoteRequest(
                    self._header(),
                    candidate_epoch,
                    self.node_id,
                    self.log.last_fetched_epoch,
                    self.log.log_end_offset,
                    pre_vote,
                    voter,
                    self.local_key.directory_id,
                    self.voter_set.directory_id(voter),
                ),
                RequestKind.PRE_VOTE if pre_vote else RequestKind.VOTE,
            )

    def _retry_vote_requests(
        self, state: ProspectiveState | CandidateState, *, pre_vote: bool
    ) -> None:
        due = sorted(v for v, at in state.retry_at_ms.items() if at <= self._now_ms)
        for voter in due:
            del state.retry_at_ms[voter]
        if due:
            self._send_vote_requests(due, pre_vote=pre_vote)

    def poll_follower(self, state: FollowerState) -> None:
        now = self._now_ms
        if self._fetcher.paused():
            # The driver is downloading a snapshot from the leader, or discarding a diverged
            # log (or stopping this voter); it reports the outcome.
            state.fetch_deadline_ms = now + self.config.fetch_timeout_ms
            return
        if now >= state.fetch_deadline_ms:
            if self.is_voter:
                self._become_prospective(
                    "leader connection lost" if state.leader_unreachable else "fetch timeout"
                )
            else:
                # An observer - or a voter removed since it voted in this epoch: the vote stays.
                self._become_unattached(state.epoch, "fetch timeout", self._voted_id())
            return
        self._maybe_send_fetch(state.leader_id)

    def _may_fetch_now(self) -> bool:
        """No Fetch in flight and fetching not paused (a snapshot download, a diverged log)."""
        return not self._fetch_in_flight() and not self._fetcher.paused()

    def _fetch_backoff(self) -> None:
        """The last Fetch failed or was refused: wait the retry backoff before the next."""
        self._fetcher.retry_after(self._now_ms, self.config.retry_backoff_ms)

    def _batch_in_flight(self) -> bool:
        """Whether the log holds a batch not committed yet (adaptive batching waits for it)."""
        return self.log.high_watermark < self.log.log_end_offset

    def _fetch_in_flight(self) -> bool:
        return self._inflight.has(RequestKind.FETCH)

    def _maybe_send_fetch(self, destination: int) -> None:
        if self._fetch_in_flight() or not self._fetcher.may_fetch(self._now_ms):
            return
        self._send(
            destination,
            FetchRequest(
                self._header(),
                self.node_id,
                self.epoch,
                self.log.log_end_offset,
                self.log.last_fetched_epoch,
                self.config.fetch_max_wait_ms,
                self.config.fetch_max_bytes,
                self.log.high_watermark,
                follower.read_fence if (follower := self.maybe_follower_state()) else 0,
                self.local_key.directory_id,
            ),
            RequestKind.FETCH,
            timeout_ms=self.config.fetch_max_wait_ms + self.config.request_timeout_ms,
        )

    def poll_unattached(self, state: UnattachedState) -> None:
        if not self.is_voter:
            # Observers look for the leader by fetching from the voters in turn (or, knowing
            # none yet, from controller.quorum.bootstrap.servers).
            targets = (self.voters - {self.node_id}) or self._bootstrap_ids
            if (
                targets
                and not self._fetch_in_flight()
                and self._now_ms >= self._fetcher.retry_at_ms
            ):
                self._maybe_send_fetch(self._fetcher.next_observer_target(targets))
            return
        if self._now_ms >= state.election_deadline_ms:
            self._become_prospective("election timeout")

    def poll_resigned(self, state: ResignedState) -> None:
        now = self._now_ms
        if now >= state.election_deadline_ms:
            if self.is_voter:
                self._become_prospective("resigned and no successor seen")
            else:
                # Removed from the voter set (KIP-853): look for the leader as an observer.
                self._become_unattached(state.epoch, "resigned, not a voter", self.node_id)
            return
        if state.unacknowledged and now >= state.end_quorum_epoch_resend_at_ms:
            self._send_end_quorum_epoch(state)

    def _send_end_quorum_epoch(self, state: ResignedState) -> None:
        for voter in sorted(state.unacknowledged):
            self._send(
                voter,
                EndQuorumEpochRequest(
                    self._header(), self.node_id, state.epoch, state.preferred_successors
                ),
                RequestKind.END_QUORUM_EPOCH,
            )
        state.end_quorum_epoch_resend_at_ms = self._now_ms + self.config.retry_backoff_ms * 10

    def _next_poll_at(self) -> int:
        """The earliest timer of the current state (Kafka's ``poll()`` return value)."""
        now = self._now_ms
        deadlines = [now + self.config.fetch_timeout_ms]
        deadlines.extend(self._inflight.deadlines_ms())
        if self._applied_offset < self.log.high_watermark:
            deadlines.append(now)  # committed batches beyond this Ready's share
        state = self.state
        match state:
            case LeaderState():
                if self.durable_end_offset < self.log.log_end_offset:
                    # Our own entries count toward the high watermark once advance() says
                    # they are durable: look again right after that.
                    deadlines.append(now)
                deadlines.extend(state.timers_ms(now, self.config))
            case CandidateState() | ProspectiveState():
                if state.backoff_until_ms is not None:
                    deadlines.append(state.backoff_until_ms)
                else:
                    deadlines.append(state.election_deadline_ms)
                    deadlines.extend(state.retry_at_ms.values())
            case FollowerState():
                deadlines.append(state.fetch_deadline_ms)
                if self._may_fetch_now():
                    deadlines.append(self._fetcher.retry_at_ms)
            case UnattachedState():
                if self.is_voter:
                    deadlines.append(state.election_deadline_ms)
                elif self._may_fetch_now():
                    deadlines.append(self._fetcher.retry_at_ms)
            case ResignedState():
                deadlines.append(state.election_deadline_ms)
                if state.unacknowledged:
                    deadlines.append(state.end_quorum_epoch_resend_at_ms)
        return max(now, min(deadlines))

    # ----- invariants -----------------------------------------------------------------------

    def _check_invariants(self) -> None:
        self.log.check()
        assert self.epoch >= self.log.last_fetched_epoch, self
        assert self.durable_end_offset <= self.log.log_end_offset, self
        if self.is_leader():
            # A dynamic quorum's leader leads on after appending its own removal, until it
            # commits (KIP-853).
            assert self.is_voter or self.is_dynamic
