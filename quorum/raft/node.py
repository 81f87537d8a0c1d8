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

Protocol (KIP-595 with KIP-996 pre-vote, KIP-516 topic ids, KIP-853 voter changes): see
docs/architecture.md#the-raft-protocol.

This module keeps the driver API, the dispatch of messages and timers, and the transitions
between epoch states (``quorum.raft.state``). Each concern works on the shared
``RaftContext`` (``quorum.raft.context``) in a module of its own:

- ``voting``: Vote and pre-vote, the prospective and candidate timers;
- ``quorum_epoch``: BeginQuorumEpoch, EndQuorumEpoch, the resigned timer;
- ``replication``: the leader's Fetch handling, purgatory, high watermark, read fences,
  proposals into the accumulator, check-quorum, DescribeQuorum;
- ``follower``: the fetching of followers and observers, divergence, a lost leader;
- ``snapshots``: compaction and installing the leader's snapshot;
- ``reconfiguration``: AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter (KIP-853);
- ``validation``: what makes a request or response unusable, as pure functions.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from quorum import limits
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import KRaftVersionRecord, LeaderChangeMessage, Record
from quorum.raft.config import RaftConfig
from quorum.raft.context import RaftContext, StateT
from quorum.raft.election import ElectionState
from quorum.raft.epoch_bounds import explained, request_epoch
from quorum.raft.follower import FollowerFetching
from quorum.raft.inflight import InflightRequest, RequestKind
from quorum.raft.log import RaftLog
from quorum.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    RemoveRaftVoterRequest,
    RequestFailed,
    SnapshotId,
    UpdateRaftVoterRequest,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.quorum_epoch import QuorumEpoch, maybe_voter_ahead
from quorum.raft.ready import BatchTooLargeError, NotLeaderError, Proposal, RaftEvent, Ready
from quorum.raft.reconfiguration import (
    AddVoterHandler,
    RemoveVoterHandler,
    UpdateVoterHandler,
    VoterChanges,
)
from quorum.raft.replication import Replication
from quorum.raft.snapshots import Snapshots
from quorum.raft.state import (
    CandidateState,
    EpochState,
    FollowerState,
    IllegalStateError,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
    check_transition,
    election_state_of,
)
from quorum.raft.validation import header_error, response_problem
from quorum.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    ReplicaKey,
    VoterSet,
    VoterSetHistory,
    voter_changes_in,
)
from quorum.raft.voting import Voting

__all__ = [
    "BatchTooLargeError",
    "NotLeaderError",
    "Proposal",
    "RaftEvent",
    "RaftNode",
    "Ready",
]


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
        self.config = config
        self.cluster_id = cluster_id
        bootstrap = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        assert bootstrap or kraft_version >= KRAFT_VERSION_DYNAMIC or bootstrap_ids, (
            "a static voter set cannot be empty"
        )
        self.local_key = ReplicaKey(node_id, directory_id)
        history = VoterSetHistory(bootstrap, kraft_version)
        if snapshot_voters is not None:
            history.reset(snapshot_voters[1], snapshot_voters[0], from_log=True)
        for batch in batches:
            changed_version, changed_voters = voter_changes_in(batch)
            if changed_version is not None or changed_voters is not None:
                history.add(batch.base_offset, changed_version, changed_voters)
        log = RaftLog(
            list(batches),
            snapshot.end_offset if snapshot else 0,
            snapshot.epoch if snapshot else 0,
        )
        self.ctx = ctx = RaftContext(
            node_id=node_id,
            local_key=self.local_key,
            cluster_id=cluster_id,
            config=config,
            rng=rng,
            now_ms=now_ms,
            log=log,
            voter_history=history,
            bootstrap_voters=bootstrap,
            bootstrap_kraft_version=kraft_version,
            bootstrap_ids=bootstrap_ids,
        )
        ctx.persists_election = persists_election if persists_election is not None else ctx.is_voter
        self._voting = Voting(ctx, self)
        self._quorum_epoch = QuorumEpoch(ctx, self)
        self._voter_changes = VoterChanges(ctx)
        self._add_voter = AddVoterHandler(ctx, self._voter_changes)
        self._remove_voter = RemoveVoterHandler(ctx, self._voter_changes)
        self._update_voter = UpdateVoterHandler(ctx, self._voter_changes)
        self._replication = Replication(ctx, self, self._quorum_epoch, self._voter_changes)
        self._follower = FollowerFetching(ctx, self)
        self._snapshots = Snapshots(ctx, self._follower.fetcher)
        self._awaiting_advance = False
        self._persisted = election_state
        ctx.state = self._initial_state(election_state, now_ms)
        if election_state is None and ctx.persists_election:
            ctx.election = election_state_of(ctx.state, self._persisted_voters(), node_id)

    def _initial_state(self, persisted: ElectionState | None, now_ms: int) -> EpochState:
        ctx = self.ctx
        if persisted is None:
            # Observers persist nothing: the log tells them the epoch they had reached.
            return UnattachedState(ctx.log.last_fetched_epoch, None, ctx.election_deadline(now_ms))
        assert persisted.epoch >= ctx.log.last_fetched_epoch, (
            "persisted epoch is behind the log",
            persisted,
            ctx.log,
        )
        if persisted.leader_id == self.node_id:
            # A leader that crashed can never lead its epoch again.
            return ResignedState(persisted.epoch, (), set(), ctx.election_deadline(now_ms), now_ms)
        if persisted.leader_id is not None:
            return FollowerState(
                persisted.epoch,
                persisted.leader_id,
                persisted.voted_id,
                now_ms + self.config.fetch_timeout_ms,
            )
        return UnattachedState(persisted.epoch, persisted.voted_id, ctx.election_deadline(now_ms))

    # ----- views ----------------------------------------------------------------------------

    @property
    def state(self) -> EpochState:
        """The epoch state of this node's role (``quorum.raft.state``)."""
        return self.ctx.state

    def state_as(self, role: type[StateT]) -> StateT | None:
        """The epoch state if this node is in ``role`` (``node.state_as(FollowerState)``),
        else None: Kafka's ``maybeLeaderState``, ``maybeFollowerState``, ... in one."""
        state = self.ctx.state
        return state if isinstance(state, role) else None

    def is_leader(self) -> bool:
        """Whether this node leads its epoch (the one role question the shells ask)."""
        return isinstance(self.ctx.state, LeaderState)

    @property
    def epoch(self) -> int:
        return self.ctx.state.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader this node knows of in its epoch (a prospective node trusts none)."""
        return self.ctx.leader_id

    @property
    def log(self) -> RaftLog:
        """The in-memory log (read it only; the core changes it)."""
        return self.ctx.log

    @property
    def high_watermark(self) -> int:
        return self.ctx.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.ctx.log.log_end_offset

    @property
    def durable_end_offset(self) -> int:
        """Everything below this offset is durable on this node (``advance``)."""
        return self.ctx.durable_end_offset

    @property
    def voter_history(self) -> VoterSetHistory:
        return self.ctx.voter_history

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in force (KIP-853: the latest in the log, committed or not)."""
        return self.ctx.voter_set

    @property
    def voters(self) -> frozenset[int]:
        return self.ctx.voters

    @property
    def is_voter(self) -> bool:
        """Whether this replica (node id and directory id) is in the voter set in force."""
        return self.ctx.is_voter

    @property
    def kraft_version(self) -> int:
        return self.ctx.voter_history.kraft_version()

    @property
    def is_dynamic(self) -> bool:
        """Whether the voter set lives in the log (kraft.version 1) rather than in the static
        controller.quorum.voters."""
        return self.ctx.is_dynamic

    @property
    def metadata_topic_id(self) -> Uuid | None:
        return self.ctx.metadata_topic_id

    @property
    def wall_clock_offset_ms(self) -> int:
        """Added to the node's clock to stamp batches with the wall clock (the driver sets it
        before each turn; see ``RaftContext.wall_clock_offset_ms``)."""
        return self.ctx.wall_clock_offset_ms

    @wall_clock_offset_ms.setter
    def wall_clock_offset_ms(self, offset_ms: int) -> None:
        self.ctx.wall_clock_offset_ms = offset_ms

    @property
    def epoch_jumps_refused(self) -> int:
        """Requests refused and responses dropped for an epoch more than ``epoch_jump_max``
        above the highest epoch this node has seen (a metric; quorum.raft.epoch_bounds)."""
        return self.ctx.epoch_bounds.refused

    @property
    def rebuilding_committed_prefix(self) -> bool:
        """Whether this observer is fetching its log again after discarding a diverged one
        (``discard_diverged_log``): True until the committed log it handed out reaches an
        entry of the current leader's epoch, and so holds everything the quorum committed.
        A broker keeps serving its old image meanwhile and then swaps in the new one."""
        return self._follower.rebuilding_committed_prefix

    @property
    def snapshot_id(self) -> SnapshotId | None:
        """The snapshot the in-memory log starts after, if any."""
        log = self.ctx.log
        if log.log_start_offset == 0:
            return None
        return SnapshotId(log.log_start_offset, log.snapshot_epoch)

    def epoch_jump_problem(self, epoch: int | None) -> str:
        """Why a peer's ``epoch`` is refused: more than ``epoch_jump_max`` above the highest
        epoch this node has seen or a majority vouched for ("" if not; counts a refusal).
        Public for the shell's own handlers of epoch-carrying requests (FetchSnapshot)."""
        return self.ctx.epoch_jump_problem(epoch)

    def _persisted_voters(self) -> frozenset[int]:
        """The voters ``quorum-state`` records: the static set, so a restart with another
        controller.quorum.voters is caught; none for a quorum whose voters are in the log."""
        return frozenset() if self.ctx.is_dynamic else self.ctx.voters

    def __repr__(self) -> str:
        return f"RaftNode(id={self.node_id}, state={self.ctx.state!r}, log={self.ctx.log!r})"

    # ----- the driver API -------------------------------------------------------------------

    def step(self, envelope: Envelope, now_ms: int) -> None:
        """Hand the core one inbound message (a request for it, or a response to it)."""
        assert not self._awaiting_advance, "step() called before advance() of the last Ready"
        ctx = self.ctx
        ctx.now_ms = max(ctx.now_ms, now_ms)
        if envelope.is_request:
            self._handle_request(envelope)
        else:
            inflight = ctx.inflight.pop(envelope.correlation_id)
            if inflight is not None:
                self._handle_response(envelope, inflight)
        self._check_invariants()

    def propose(self, records: Sequence[Record], now_ms: int) -> Proposal:
        """Queue ``records`` for one atomic batch of the current epoch. Raises
        ``NotLeaderError`` unless this node leads. The proposal is committed once the high
        watermark passes ``last_offset`` and the batch there still carries ``epoch``."""
        assert not self._awaiting_advance, "propose() called before advance()"
        ctx = self.ctx
        ctx.now_ms = max(ctx.now_ms, now_ms)
        leader = ctx.state
        if not isinstance(leader, LeaderState):
            raise NotLeaderError(ctx.leader_id, ctx.epoch)
        return self._replication.propose(leader, records)

    def open_batch_waits_until_ms(self, now_ms: int, queued: int = 0) -> int | None:
        """While this leader's open batch waits to be drained (an earlier batch is not
        committed yet, or it is held to its minimum age), when it is drained at the latest:
        proposals made before then join it all the same, so a driver may gather a busy
        leader's operations and run them together (one turn for many) instead of one turn
        each. None when this node does not lead, or the next poll would drain the open batch
        (``queued``: records about to be proposed). Changes nothing."""
        leader = self.ctx.state
        if not isinstance(leader, LeaderState):
            return None
        return leader.accumulator.waits_until_ms(
            now_ms, in_flight=self._replication.batch_in_flight(), queued=queued
        )

    def read_barrier(self) -> tuple[int, int]:
        """Start a linearizable read (Raft's ReadIndex, confirmed by read fences instead of
        clocks): returns ``(epoch, fence)`` for ``read_index``. Raises ``NotLeaderError``
        unless this node leads. The voters' parked Fetches are answered at once, so the fence
        leaves now and their next Fetches echo it within a round trip."""
        assert not self._awaiting_advance, "read_barrier() called before advance()"
        leader = self.ctx.state
        if not isinstance(leader, LeaderState):
            raise NotLeaderError(self.ctx.leader_id, self.ctx.epoch)
        return self._replication.read_barrier(leader)

    def read_index(self, epoch: int, fence: int) -> int | None:
        """Where a read started by ``read_barrier`` in ``epoch`` may be served: this node's
        high watermark, once a majority echoed ``fence`` (no other leader committed anything
        before the read began) and this epoch has committed its first entry (so the high
        watermark covers every entry an earlier leader committed). None while waiting. Raises
        ``NotLeaderError`` once this node no longer leads ``epoch``: the read may be retried
        on the new leader."""
        return self._replication.read_index(epoch, fence)

    def next_offset(self) -> int:
        """The offset the next proposed record will get (the leader's log end offset plus what
        waits in the open batch)."""
        leader = self.ctx.state
        pending = leader.accumulator.record_count if isinstance(leader, LeaderState) else 0
        return self.ctx.log.log_end_offset + pending

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown of a leader: hand leadership over through EndQuorumEpoch."""
        assert not self._awaiting_advance
        self.ctx.now_ms = max(self.ctx.now_ms, now_ms)
        if self.is_leader():
            self.transition_to_resigned("shutdown")

    def set_metadata_topic_id(self, topic_id: Uuid) -> None:
        """The metadata topic's own id, once its record is applied (KIP-516). Requests keyed
        by it are accepted from then on, besides the sentinel."""
        self.ctx.metadata_topic_id = topic_id

    def compact(self, snapshot: SnapshotId) -> None:
        """A local snapshot holding everything before ``snapshot.end_offset`` is durable: the
        in-memory log drops what it covers. Fetchers behind it are sent the snapshot."""
        assert not self._awaiting_advance
        self._snapshots.compact(snapshot)

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
        self.ctx.now_ms = max(self.ctx.now_ms, now_ms)
        self._snapshots.install_snapshot(snapshot, voters)

    def snapshot_fetch_failed(self, now_ms: int) -> None:
        """The snapshot download failed: fetch again (the leader names its current one)."""
        self.ctx.now_ms = max(self.ctx.now_ms, now_ms)
        self._snapshots.snapshot_fetch_failed()

    def discard_diverged_log(self, now_ms: int) -> None:
        """This observer's committed prefix diverged from the leader's (``Ready.prefix_diverged``)
        and its shell has discarded the local log, snapshots and image: start again empty at
        offset 0 and fetch everything from the leader, its snapshot first when it has one
        (quorum.raft.prefix_divergence). The high watermark starts again from 0 too: the
        committed log handed out from now on is the quorum's."""
        assert not self._awaiting_advance
        self.ctx.now_ms = max(self.ctx.now_ms, now_ms)
        self._follower.discard_diverged_log()

    def poll(self, now_ms: int) -> Ready:
        """Run timers, then hand out everything to persist, send and apply."""
        assert not self._awaiting_advance, "poll() called twice without advance()"
        ctx = self.ctx
        ctx.now_ms = max(ctx.now_ms, now_ms)
        self._poll_state()
        self._replication.maybe_advance_high_watermark()
        log = ctx.log
        committed: list[LogBatch] = []
        if log.high_watermark > ctx.applied_offset:
            budget = self.config.committed_records_per_ready_max
            for batch in log.batches_between(ctx.applied_offset, log.high_watermark):
                if committed and budget < batch.record_count:
                    break  # the rest at the next poll, right away (_next_poll_at)
                committed.append(batch)
                budget -= batch.record_count
            ctx.applied_offset = committed[-1].end_offset if committed else log.high_watermark
        self._follower.maybe_rebuilt()
        # I7: what this Ready truncates is at or above the high watermark it hands out, which
        # the driver passes to the log's truncation so that storage checks it again.
        assert ctx.truncate_to is None or ctx.truncate_to >= log.high_watermark, (ctx, log)
        ready = Ready(
            election_to_persist=ctx.election,
            truncate_to=ctx.truncate_to,
            entries_to_append=tuple(ctx.entries),
            messages_to_send=tuple(ctx.messages),
            committed_batches=tuple(committed),
            high_watermark=log.high_watermark,
            next_poll_at_ms=self._next_poll_at(),
            events=tuple(ctx.events),
            snapshot_to_fetch=ctx.snapshot_to_fetch,
            prefix_diverged=ctx.prefix_diverged,
        )
        ctx.snapshot_to_fetch = None
        ctx.prefix_diverged = None
        ctx.election = None
        ctx.truncate_to = None
        ctx.entries = []
        ctx.messages = []
        ctx.events = []
        self._awaiting_advance = True
        self._check_invariants()
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver has persisted, sent and applied ``ready``."""
        assert self._awaiting_advance
        self._awaiting_advance = False
        if ready.election_to_persist is not None:
            self._persisted = ready.election_to_persist
        self.ctx.durable_end_offset = self.ctx.log.log_end_offset

    # ----- dispatch: requests ---------------------------------------------------------------

    def _handle_request(self, envelope: Envelope) -> None:
        ctx = self.ctx
        message = envelope.message
        match message:
            case AddRaftVoterRequest():
                self._add_voter.handle_add_voter_request(envelope, message)
                return
            case RemoveRaftVoterRequest():
                self._remove_voter.handle_remove_voter_request(envelope, message)
                return
            case UpdateRaftVoterRequest():
                self._update_voter.handle_update_voter_request(envelope, message)
                return
        assert isinstance(
            message,
            FetchRequest
            | VoteRequest
            | BeginQuorumEpochRequest
            | EndQuorumEpochRequest
            | DescribeQuorumRequest,
        )
        error = header_error(message.header, ctx.cluster_id, ctx.metadata_topic_id)
        jump = ""
        if error is not ErrorCode.NONE:
            ctx.reject(envelope, error, "request header")
        elif jump := ctx.epoch_jump_problem(epoch := request_epoch(message)):
            error = ErrorCode.INVALID_REQUEST
            self._epoch_jump_refused(envelope, jump)
            # A voter that far ahead may be one a liar walked up: a leader asks it again, and
            # its answer moves the leader up by the bound (``_handle_response``).
            maybe_voter_ahead(ctx, envelope.source, epoch or 0)
        # Each handler answers a header error (or an epoch jump) in its own response type,
        # changing nothing; it validates the rest of the request itself.
        match message:
            case FetchRequest():
                self._replication.handle_fetch_request(envelope, message, error)
            case VoteRequest():
                self._voting.handle_vote_request(envelope, message, error)
            case BeginQuorumEpochRequest():
                self._quorum_epoch.handle_begin_quorum_epoch_request(envelope, message, error)
            case EndQuorumEpochRequest():
                self._quorum_epoch.handle_end_quorum_epoch_request(envelope, message, error)
            case DescribeQuorumRequest():
                self._replication.handle_describe_quorum_request(envelope, message, error)
        if jump:  # the answer just queued says why, for a person
            ctx.messages[-1] = explained(ctx.messages[-1], envelope, jump)

    def _epoch_jump_refused(self, envelope: Envelope, reason: str) -> None:
        """Log a peer's message refused for its epoch (throttled by the driver, counted)."""
        kind = "request" if envelope.is_request else "response"
        name = type(envelope.message).__name__
        self.ctx.emit("epoch_jump_refused", source=envelope.source, **{kind: name}, reason=reason)

    # ----- dispatch: responses --------------------------------------------------------------

    def _handle_response(self, envelope: Envelope, inflight: InflightRequest) -> None:
        ctx = self.ctx
        message = envelope.message
        if isinstance(message, RequestFailed):
            self._handle_request_failed(inflight, message)
            return
        problem = response_problem(ctx, message, envelope.source)
        if problem:
            ctx.drop_response(envelope, problem)
            if inflight.kind is RequestKind.FETCH:
                self._follower.fetch_backoff()
            return
        error: ErrorCode = getattr(message, "error_code", ErrorCode.NONE)
        if error is ErrorCode.UNKNOWN_TOPIC_ID and ctx.metadata_topic_id is not None:
            # The peer does not know the metadata topic id we applied: one of us holds a record
            # the other lacks (a lost write, quorum.raft.prefix_divergence). Ask by the sentinel,
            # which every node accepts, so the divergence shows; replay sets the id again.
            ctx.emit(
                "metadata_topic_id_unknown",
                peer=envelope.source,
                topic_id=str(ctx.metadata_topic_id),
            )
            ctx.metadata_topic_id = None
        if (
            error is ErrorCode.INCONSISTENT_VOTER_SET
            and ctx.is_dynamic
            and isinstance(message, VoteResponse)
        ):
            # A voter refused us as a candidate: we are not in its voter set (removed, and we
            # do not know it yet). A plain rejection, naming the leader it follows: we follow
            # it too, and its log tells us (KIP-853).
            message = dataclasses.replace(message, error_code=ErrorCode.NONE, vote_granted=False)
            error = ErrorCode.NONE
        if error in (ErrorCode.INCONSISTENT_CLUSTER_ID, ErrorCode.INCONSISTENT_VOTER_SET):
            # The peer belongs to another cluster or another voter set: an operator must act.
            ctx.emit(error.name.lower(), peer=envelope.source, request=inflight.kind.value)
            if inflight.kind is RequestKind.FETCH:
                self._follower.fetch_backoff()
            return
        answered_epoch: int = getattr(message, "leader_epoch", -1)
        ctx.epoch_bounds.vouch(envelope.source, answered_epoch, ctx.vouchers()[0])
        if jump := ctx.epoch_jump_problem(answered_epoch):
            # Unless a majority of voters answered with it, one voter cannot move us that far.
            self._epoch_jump_refused(envelope, jump)
            if inflight.kind is RequestKind.FETCH:
                self._follower.fetch_backoff()
            elif (
                inflight.kind is RequestKind.BEGIN_QUORUM_EPOCH
                and inflight.epoch == ctx.epoch
                and error is ErrorCode.FENCED_LEADER_EPOCH
                and self.is_leader()
            ):
                # A voter that far ahead: a liar, or one a liar walked up (requests move a
                # node the bound at a time). Sticky followers would leave it out for good, so
                # the leader steps up by the bound, no further, and resigns: within (its epoch
                # - ours) / bound elections it is followed, and each lie costs one election
                # and the bound, as a forged request does.
                ceiling = ctx.epoch_bounds.ceiling(ctx.epoch, *ctx.vouchers())
                self.transition_to_unattached(ceiling, "a voter is ahead beyond EPOCH_JUMP_MAX")
            return
        if inflight.epoch != ctx.epoch and inflight.kind is not RequestKind.FETCH:
            # An answer to a request sent in an older epoch: only its epoch news matters.
            leader: int | None = getattr(message, "leader_id", None)
            if answered_epoch > ctx.epoch:
                self.observe_epoch(answered_epoch, leader, "stale response with higher epoch")
            return
        match message:
            case FetchResponse():
                self._follower.handle_fetch_response(envelope, message, inflight)
            case VoteResponse():
                self._voting.handle_vote_response(envelope, message, inflight)
            case BeginQuorumEpochResponse():
                self._quorum_epoch.handle_begin_quorum_epoch_response(envelope, message)
            case EndQuorumEpochResponse():
                self._quorum_epoch.handle_end_quorum_epoch_response(envelope, message)
            case DescribeQuorumResponse():  # pragma: no cover - the core never asks
                pass

    def _handle_request_failed(self, inflight: InflightRequest, failure: RequestFailed) -> None:
        if inflight.kind is RequestKind.FETCH:
            self._follower.fetch_failed(inflight, failure)
        elif inflight.epoch == self.ctx.epoch:
            self._voting.vote_request_failed(inflight)

    # ----- dispatch: timers -----------------------------------------------------------------

    def _poll_state(self) -> None:
        ctx = self.ctx
        for inflight in ctx.inflight.pop_expired(ctx.now_ms):
            self._handle_request_failed(inflight, RequestFailed("request timed out"))
        match ctx.state:
            case LeaderState() as leader:
                self._replication.poll_leader(leader)
            case CandidateState() as candidate:
                self._voting.poll_candidate(candidate)
            case ProspectiveState() as prospective:
                self._voting.poll_prospective(prospective)
            case FollowerState() as follower:
                self._follower.poll_follower(follower)
            case UnattachedState() as unattached:
                self._follower.poll_unattached(unattached)
            case ResignedState() as resigned:
                self._quorum_epoch.poll_resigned(resigned)

    def _next_poll_at(self) -> int:
        """The earliest timer of the current state (Kafka's ``poll()`` return value)."""
        ctx = self.ctx
        now = ctx.now_ms
        deadlines = [now + self.config.fetch_timeout_ms]
        deadlines.extend(ctx.inflight.deadlines_ms())
        if ctx.applied_offset < ctx.log.high_watermark:
            deadlines.append(now)  # committed batches beyond this Ready's share
        state = ctx.state
        match state:
            case LeaderState():
                deadlines.extend(self._replication.timers_ms(state))
            case CandidateState() | ProspectiveState():
                deadlines.extend(Voting.timers_ms(state))
            case FollowerState() | UnattachedState():
                deadlines.extend(self._follower.timers_ms(state))
            case ResignedState():
                deadlines.append(state.election_deadline_ms)
                if state.unacknowledged:
                    deadlines.append(state.end_quorum_epoch_resend_at_ms)
        return max(now, min(deadlines))

    # ----- transitions (called by the concerns through ``Transitions``) ---------------------

    def _transition(self, new: EpochState, reason: str) -> None:
        ctx = self.ctx
        check_transition(ctx.state, new, self.node_id)
        leader = ctx.state
        if isinstance(leader, LeaderState):
            self._abandon_leadership(leader)
        ctx.state = new
        if ctx.persists_election:
            durable = election_state_of(new, self._persisted_voters(), self.node_id)
            current = ctx.election if ctx.election is not None else self._persisted
            if durable != current:
                ctx.election = durable
        ctx.inflight.retain_fetches_of(new.epoch)
        ctx.emit(f"became_{new.name}", leader_id=new.leader_id, reason=reason)

    def _abandon_leadership(self, leader: LeaderState) -> None:
        """Still in ``leader``'s epoch: answer its parked Fetches; its open batch is dropped
        with it (nothing in it was promised), and a pending voter change is answered."""
        for envelope in leader.fetch_purgatory.pop_all():
            self.ctx.reply(
                envelope, self._replication.fetch_response(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            )
        self._voter_changes.abandon(leader)

    def transition_to_unattached(
        self, epoch: int, reason: str, voted_id: int | None = None
    ) -> None:
        """No leader known in ``epoch``; ``voted_id``: the vote cast in it, if any."""
        self._transition(
            UnattachedState(epoch, voted_id, self.ctx.election_deadline(self.ctx.now_ms)), reason
        )

    def transition_to_follower(self, epoch: int, leader_id: int, reason: str) -> None:
        assert leader_id != self.node_id
        ctx = self.ctx
        state = ctx.state
        same_epoch = state.epoch == epoch
        # The vote cast in this epoch stays (a candidate voted for itself).
        voted = getattr(state, "voted_id", None) if same_epoch else None
        if same_epoch and isinstance(state, CandidateState):
            voted = self.node_id
        last_success = (
            state.last_fetch_success_ms if isinstance(state, FollowerState) and same_epoch else None
        )
        self._transition(
            FollowerState(
                epoch, leader_id, voted, ctx.now_ms + self.config.fetch_timeout_ms, last_success
            ),
            reason,
        )
        self._follower.fetcher.retry_now(ctx.now_ms)

    def transition_to_prospective(self, reason: str, retries: int = 1) -> None:
        """An election or fetch timeout: ask for pre-votes for epoch + 1 (KIP-996)."""
        ctx = self.ctx
        state = ctx.state
        assert ctx.is_voter
        voted = getattr(state, "voted_id", None)
        leader = state.leader_id
        if isinstance(state, ResignedState):
            voted = leader = self.node_id
        elif isinstance(state, CandidateState):
            # An epoch it ran in: it voted for itself there.
            voted = self.node_id
        prospective = ProspectiveState(
            state.epoch,
            voted,
            leader,
            ctx.election_deadline(ctx.now_ms),
            retries=retries,
            leader_resigned=isinstance(state, FollowerState) and state.leader_resigned,
        )
        self._transition(prospective, reason)
        self._voting.request_pre_votes(prospective)

    def transition_to_candidate(self, reason: str, retries: int) -> None:
        """A pre-vote majority: raise the epoch, vote for itself, ask for votes."""
        ctx = self.ctx
        epoch = ctx.epoch + 1
        if epoch > limits.INT32_MAX:
            # Unreachable through peers (epochs above EPOCH_MAX grow one at a time), but never
            # persist or send an epoch the wire cannot carry.
            ctx.emit("epoch_exhausted", reason="no epoch left to run an election in")
            return
        candidate = CandidateState(epoch, ctx.election_deadline(ctx.now_ms), retries=retries)
        self._transition(candidate, reason)
        candidate.granted.add(self.node_id)
        self._voting.request_votes(candidate)

    def transition_to_leader(self, state: CandidateState) -> None:
        """A vote majority: lead ``state.epoch``, starting with a LeaderChangeMessage at the
        log end (and, the first leader of a bootstrapped dynamic quorum, its voter set)."""
        ctx = self.ctx
        self._transition(
            LeaderState.elected(
                epoch=state.epoch,
                local_id=self.node_id,
                voters=ctx.voters,
                log_end_offset=ctx.log.log_end_offset,
                now_ms=ctx.now_ms,
                config=self.config,
            ),
            "won election",
        )
        records: list[Record] = [
            LeaderChangeMessage(self.node_id, state.epoch, tuple(sorted(ctx.voters)))
        ]
        history = ctx.voter_history
        if ctx.is_dynamic and history.latest_offset() is None and not history.base_from_log:
            # The voter set came from the bootstrap (storage format --standalone or
            # --initial-controllers): the first leader writes it into the log, as Kafka's
            # does, so every replica, snapshot and replay finds it there.
            records.append(KRaftVersionRecord(0, history.kraft_version()))
            records.append(ctx.voter_set.to_record())
        ctx.append_batch(state.epoch, records, control=True)

    def transition_to_resigned(self, reason: str) -> None:
        """A leader steps down (shutdown, check-quorum, its own removal): EndQuorumEpoch to
        the other voters, most caught-up first."""
        ctx = self.ctx
        leader = ctx.state
        if not isinstance(leader, LeaderState):
            raise IllegalStateError(f"not the leader: {leader!r}")
        ctx.drain_accumulator(leader)
        successors = leader.preferred_successors()
        resigned = ResignedState(
            leader.epoch,
            successors,
            set(successors),
            ctx.election_deadline(ctx.now_ms),
            ctx.now_ms,
        )
        self._transition(resigned, reason)
        self._quorum_epoch.send_end_quorum_epoch(resigned)

    def observe_epoch(
        self, epoch: int, leader_id: int | None, reason: str, source: int | None = None
    ) -> bool:
        """React to an epoch and leader learned from any message (``source``: the node that
        answered, for responses). Returns True when the message's epoch is stale, or names a
        second leader of our epoch, and its contents must be ignored."""
        ctx = self.ctx
        current = ctx.epoch
        if epoch < current:
            return True
        known = ctx.known_leader() if epoch == current else None
        if known is not None and leader_id is not None and leader_id != known:
            if source == known and source != self.node_id:
                # The node we took for the leader of this epoch says another one leads it:
                # what told us otherwise was wrong (a forged BeginQuorumEpoch). Forget the
                # leader, keep the vote; the real one is found like after an election.
                self.transition_to_unattached(
                    epoch, f"node {known} denies leading the epoch", ctx.voted_id()
                )
            return True
        if epoch > current:
            if leader_id is not None and leader_id != self.node_id:
                self.transition_to_follower(epoch, leader_id, reason)
            else:
                self.transition_to_unattached(epoch, reason)
            return False
        if leader_id is None or leader_id == self.node_id:
            return False
        state = ctx.state
        if isinstance(state, UnattachedState | CandidateState) or (
            isinstance(state, ProspectiveState) and leader_id != state.leader_id
        ):
            self.transition_to_follower(epoch, leader_id, reason)
        return False

    # ----- invariants -----------------------------------------------------------------------

    def _check_invariants(self) -> None:
        ctx = self.ctx
        ctx.log.check()
        assert ctx.state.epoch >= ctx.log.last_fetched_epoch, self
        assert ctx.durable_end_offset <= ctx.log.log_end_offset, self
        if isinstance(ctx.state, LeaderState):
            # A dynamic quorum's leader leads on after appending its own removal, until it
            # commits (KIP-853).
            assert ctx.is_voter or ctx.is_dynamic
