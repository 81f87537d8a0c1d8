"""The narrow core every concern of a ``RaftNode`` works on (raft-rs's ``RaftCore``, etcd's
``raft`` struct): who this node is, its epoch state, log and voter set, its config and clock,
the requests in flight and the outbox of the next ``Ready``.

The concerns (``quorum.raft.voting``, ``quorum_epoch``, ``replication``, ``fetching``,
``snapshots``, ``reconfiguration``) each hold this context and the node's ``Transitions``;
none holds another's state. The node (``quorum.raft.node``) owns the context, routes messages
and timers to the concerns, and alone changes ``state`` (its transitions).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from quorum.errors import ErrorCode
from quorum.ids import METADATA_TOPIC_ID, Uuid
from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.records import Record
from quorum.raft.config import RaftConfig
from quorum.raft.election import ElectionState
from quorum.raft.epoch_bounds import EpochBounds, vouchers
from quorum.raft.inflight import InflightRequest, InflightRequests, RequestKind
from quorum.raft.log import RaftLog
from quorum.raft.messages import Envelope, Message, RequestHeader, SnapshotId
from quorum.raft.prefix_divergence import PrefixDivergence
from quorum.raft.ready import RaftEvent
from quorum.raft.state import (
    CandidateState,
    EpochState,
    LeaderState,
    ProspectiveState,
    election_state_of,
)
from quorum.raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    ReplicaKey,
    VoterSet,
    VoterSetHistory,
    voter_changes_in,
)

StateT = TypeVar("StateT", bound=EpochState)


class Transitions(Protocol):
    """The node's state changes, which the concerns call (Kafka's ``transitionTo*``): every
    one goes through ``quorum.raft.state.check_transition`` and produces the election state
    to persist."""

    def observe_epoch(
        self, epoch: int, leader_id: int | None, reason: str, source: int | None = None
    ) -> bool: ...

    def transition_to_unattached(
        self, epoch: int, reason: str, voted_id: int | None = None
    ) -> None: ...

    def transition_to_follower(self, epoch: int, leader_id: int, reason: str) -> None: ...

    def transition_to_prospective(self, reason: str, retries: int = 1) -> None: ...

    def transition_to_candidate(self, reason: str, retries: int) -> None: ...

    def transition_to_leader(self, state: CandidateState) -> None: ...

    def transition_to_resigned(self, reason: str) -> None: ...


class RaftContext:
    """What the concerns of one node share. Plain attributes: the hot paths read them."""

    __slots__ = (
        "applied_offset",
        "bootstrap_ids",
        "bootstrap_kraft_version",
        "bootstrap_voters",
        "cluster_id",
        "config",
        "durable_end_offset",
        "election",
        "entries",
        "epoch_bounds",
        "events",
        "inflight",
        "is_voter",
        "local_key",
        "log",
        "messages",
        "metadata_topic_id",
        "next_correlation_id",
        "node_id",
        "now_ms",
        "persists_election",
        "prefix_diverged",
        "rng",
        "snapshot_to_fetch",
        "state",
        "truncate_to",
        "voter_history",
        "voter_set",
        "voters",
        "wall_clock_offset_ms",
    )

    def __init__(
        self,
        *,
        node_id: int,
        local_key: ReplicaKey,
        cluster_id: str,
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        log: RaftLog,
        voter_history: VoterSetHistory,
        bootstrap_voters: VoterSet,
        bootstrap_kraft_version: int,
        bootstrap_ids: Sequence[int],
    ) -> None:
        self.node_id = node_id
        self.local_key = local_key
        self.cluster_id = cluster_id
        self.config = config
        self.rng = rng
        # The clock: the latest ``now_ms`` the driver passed (it never goes back).
        self.now_ms = now_ms
        # Added to the clock to stamp batches (Kafka stamps a batch with its append time):
        # the driver's timers run on a monotonic clock, so it sets the difference to the wall
        # clock here before each turn; tests and the simulator set their own.
        self.wall_clock_offset_ms = 0
        self.log = log
        self.metadata_topic_id: Uuid | None = None
        # The voter set (KIP-853): its history in the log, the set in force, its ids, and
        # whether this replica is one of them.
        self.voter_history = voter_history
        self.voter_set = voter_history.latest()
        self.voters: frozenset[int] = self.voter_set.ids
        self.is_voter = self.voter_set.is_voter(local_key)
        # What the node started from (its configuration or bootstrap.checkpoint), and whom an
        # observer that knows no voter asks (controller.quorum.bootstrap.servers).
        self.bootstrap_voters = bootstrap_voters
        self.bootstrap_kraft_version = bootstrap_kraft_version
        self.bootstrap_ids = tuple(bootstrap_ids)
        self.persists_election = False  # set by the node
        # Everything below this offset is durable on this node (fsynced by the driver), and
        # everything below this one was handed out as committed.
        self.durable_end_offset = log.log_end_offset
        self.applied_offset = log.log_start_offset
        # Epochs voters vouched for, the ceiling one peer's message may not pass, refusals.
        self.epoch_bounds = EpochBounds(config.epoch_jump_max)
        self.inflight = InflightRequests()
        self.next_correlation_id = 1
        # The epoch state; only the node's transitions replace it.
        self.state: EpochState
        # The outbox: what the next Ready carries.
        self.messages: list[Envelope] = []
        self.entries: list[LogBatch] = []
        self.truncate_to: int | None = None
        self.election: ElectionState | None = None
        self.events: list[RaftEvent] = []
        self.snapshot_to_fetch: tuple[int, SnapshotId] | None = None
        self.prefix_diverged: PrefixDivergence | None = None

    # ----- views ----------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def is_dynamic(self) -> bool:
        """Whether the voter set lives in the log (kraft.version 1) rather than in the static
        controller.quorum.voters."""
        return self.voter_history.kraft_version() >= KRAFT_VERSION_DYNAMIC

    def state_as(self, role: type[StateT]) -> StateT | None:
        """The epoch state if the node is in ``role`` (a state class), else None."""
        state = self.state
        return state if isinstance(state, role) else None

    @property
    def leader_id(self) -> int | None:
        """The leader this node knows of in its epoch (a prospective node trusts none)."""
        state = self.state
        return None if isinstance(state, ProspectiveState) else state.leader_id

    def known_leader(self) -> int | None:
        """The leader of the current epoch this node knows of or persisted (itself when it
        led it): within one epoch it never changes (I1)."""
        return election_state_of(self.state, self.voters, self.node_id).leader_id

    def voted_id(self) -> int | None:
        return election_state_of(self.state, self.voters, self.node_id).voted_id

    def vouchers(self) -> tuple[frozenset[int], int]:
        """Whose answers vouch for an epoch, and out of how many voters a majority counts."""
        return vouchers(self.voters, self.node_id, self.bootstrap_ids)

    def epoch_jump_problem(self, epoch: int | None) -> str:
        """Why a peer's ``epoch`` is refused: more than ``epoch_jump_max`` above the highest
        epoch this node has seen or a majority vouched for ("" if not; counts a refusal)."""
        if epoch is None:
            return ""
        ceiling = self.epoch_bounds.ceiling(self.epoch, *self.vouchers())
        return self.epoch_bounds.problem(epoch, self.epoch, ceiling)

    # ----- timers ---------------------------------------------------------------------------

    def election_deadline(self, now_ms: int) -> int:
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self.rng.randrange(timeout)

    def backoff_ms(self, retries: int) -> int:
        """Binary exponential backoff with full jitter, capped (Kafka's
        ``binaryExponentialElectionBackoffMs``)."""
        cap = min(
            self.config.election_backoff_max_ms,
            self.config.election_backoff_base_ms * (1 << min(retries, 20)),
        )
        return self.rng.randrange(cap + 1)

    # ----- the outbox -----------------------------------------------------------------------

    def emit(self, name: str, **fields: Any) -> None:
        self.events.append(RaftEvent(name, {"epoch": self.state.epoch, **fields}))

    def send(
        self, destination: int, message: Message, kind: RequestKind, timeout_ms: int = 0
    ) -> None:
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        deadline = self.now_ms + (timeout_ms or self.config.request_timeout_ms)
        epoch = self.state.epoch
        self.inflight.add(correlation_id, InflightRequest(destination, kind, epoch, deadline))
        self.messages.append(Envelope(self.node_id, destination, correlation_id, message))

    def reply(self, request: Envelope, message: Message) -> None:
        self.messages.append(
            Envelope(self.node_id, request.source, request.correlation_id, message)
        )

    def header(self) -> RequestHeader:
        return RequestHeader(self.cluster_id, self.metadata_topic_id or METADATA_TOPIC_ID, 0)

    def reject(self, envelope: Envelope, error: ErrorCode, reason: str) -> None:
        """Log a refused request once, with the peer and the reason (the driver renders it)."""
        self.emit(
            "request_rejected",
            error=error.name,
            source=envelope.source,
            request=type(envelope.message).__name__,
            reason=reason,
        )

    def drop_response(self, envelope: Envelope, reason: str) -> None:
        """A response that breaks the protocol is dropped and logged, never asserted on: the
        peer is at fault, not this node (docs/conventions.md#errors)."""
        self.emit(
            "response_rejected",
            source=envelope.source,
            response=type(envelope.message).__name__,
            reason=reason,
        )

    # ----- the log --------------------------------------------------------------------------

    def wall_clock_ms(self) -> int:
        """The time a batch appended now carries: the wall clock, as Kafka's do."""
        return self.now_ms + self.wall_clock_offset_ms

    def append_batch(self, epoch: int, records: Sequence[Record], *, control: bool = False) -> int:
        """Append one batch of ``records`` at the log end, stamped with the wall clock (every
        batch the core builds itself goes through here). Returns its base offset."""
        offset = self.log.log_end_offset
        self.append_local(
            encode_batch(
                base_offset=offset,
                epoch=epoch,
                timestamp_ms=self.wall_clock_ms(),
                records=records,
                control=control,
            )
        )
        return offset

    def drain_accumulator(self, leader: LeaderState) -> None:
        """Append the leader's open batch, if any, to the log."""
        batch = leader.accumulator.drain(self.log.log_end_offset, self.now_ms, self.wall_clock_ms())
        if batch is None:
            return
        self.append_local(batch)
        leader.idle_deadline_ms = self.now_ms + self.config.idle_interval_ms

    def append_local(self, batch: LogBatch) -> None:
        self.log.append(batch)
        self.entries.append(batch)
        if self.add_voter_changes(batch):
            self.voter_set_changed(f"voters record at offset {batch.base_offset}")

    def truncate_local(self, offset: int) -> None:
        if offset >= self.log.log_end_offset:
            return
        self.log.truncate_to(offset)
        if self.voter_history.truncate_to(offset):
            self.voter_set_changed(f"log truncated to {offset}")
        self.entries = [b for b in self.entries if b.base_offset < offset]
        self.truncate_to = offset if self.truncate_to is None else min(self.truncate_to, offset)
        self.durable_end_offset = min(self.durable_end_offset, offset)

    # ----- the voter set --------------------------------------------------------------------

    def add_voter_changes(self, batch: LogBatch) -> bool:
        """Record the kraft.version and voter set a control batch sets (KIP-853: in force from
        its offset on, committed or not). Returns whether it held a VotersRecord."""
        kraft_version, voters = voter_changes_in(batch)
        if kraft_version is None and voters is None:
            return False
        self.voter_history.add(batch.base_offset, kraft_version, voters)
        return voters is not None

    def voter_set_changed(self, reason: str) -> None:
        """The voter set in force may have changed (appended, truncated, snapshot): update the
        views, the leader's replica progress, and tell the driver (its address book)."""
        new = self.voter_history.latest()
        if new == self.voter_set:
            return
        old: VoterSet = self.voter_set
        self.voter_set = new
        self.voters = new.ids
        self.is_voter = new.is_voter(self.local_key)
        leader = self.state_as(LeaderState)
        if leader is not None:
            leader.update_voters(new.ids, self.now_ms)
        self.epoch_bounds.forget_all_but(self.vouchers()[0])
        self.emit(
            "voter_set_changed",
            voters=[str(key) for key in new.voter_keys()],
            previous=[str(key) for key in old.voter_keys()],
            reason=reason,
            is_voter=self.is_voter,
        )
