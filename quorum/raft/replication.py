"""The leader's side of replication (Kafka's ``handleFetchRequest`` and ``pollLeader``): Fetch
requests answered or parked in the purgatory, the high watermark, read fences, proposals into
the open batch (the accumulator), check-quorum and DescribeQuorum
(docs/architecture.md#fetch-and-the-high-watermark, #linearizable-reads).

What only a leader keeps lives on its ``LeaderState`` (``quorum.raft.leader``); this module
decides what to send and append. Every Fetch of every replica passes here: a handler reads
the context into locals once and allocates only the answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from quorum.errors import ErrorCode
from quorum.metadata.batch import LogBatch
from quorum.metadata.records import NoOpRecord, Record, encode_record
from quorum.raft.context import RaftContext, Transitions
from quorum.raft.leader import LeaderState
from quorum.raft.log import FetchPosition
from quorum.raft.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DivergingEpoch,
    Envelope,
    FetchRequest,
    FetchResponse,
    SnapshotId,
)
from quorum.raft.quorum_epoch import QuorumEpoch, maybe_voter_ahead
from quorum.raft.ready import BatchTooLargeError, NotLeaderError, Proposal
from quorum.raft.reconfiguration import VoterChanges
from quorum.raft.validation import fetch_request_problem
from quorum.raft.voters import ReplicaKey


class Replication:
    """Fetch handling, the high watermark, proposals and reads on the leader."""

    __slots__ = ("_ctx", "_quorum_epoch", "_transitions", "_voter_changes")

    def __init__(
        self,
        ctx: RaftContext,
        transitions: Transitions,
        quorum_epoch: QuorumEpoch,
        voter_changes: VoterChanges,
    ) -> None:
        self._ctx = ctx
        self._transitions = transitions
        self._quorum_epoch = quorum_epoch
        self._voter_changes = voter_changes

    # ----- Fetch ----------------------------------------------------------------------------

    def fetch_response(
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
        ctx = self._ctx
        state = ctx.state
        log = ctx.log
        return FetchResponse(
            error,
            ctx.leader_id,
            state.epoch,
            log.high_watermark,
            log.log_start_offset,
            diverging_epoch,
            batches,
            snapshot_id,
            state.fence_sent() if isinstance(state, LeaderState) else 0,
        )

    def handle_fetch_request(
        self, envelope: Envelope, request: FetchRequest, header_error: ErrorCode
    ) -> None:
        """Errors: header errors; INVALID_REQUEST (negative offsets, last_fetched_epoch above
        the fetcher's epoch, offset inside a batch); NOT_LEADER_OR_FOLLOWER (this node does not
        lead; the answer names the leader it knows); FENCED_LEADER_EPOCH (the fetcher is
        behind); UNKNOWN_LEADER_EPOCH (the fetcher is ahead). A divergent fetcher gets
        ``diverging_epoch`` and truncates."""
        ctx = self._ctx
        error = header_error
        if error is ErrorCode.NONE:
            reason = fetch_request_problem(request, ctx.node_id)
            if reason:
                error = ErrorCode.INVALID_REQUEST
                ctx.reject(envelope, error, reason)
        leader = ctx.state
        epoch = leader.epoch
        if error is ErrorCode.NONE:
            if request.current_leader_epoch > epoch:
                error = ErrorCode.UNKNOWN_LEADER_EPOCH
                maybe_voter_ahead(ctx, request.replica_id, request.current_leader_epoch)
            elif not isinstance(leader, LeaderState):
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif request.current_leader_epoch < epoch:
                error = ErrorCode.FENCED_LEADER_EPOCH
        if error is not ErrorCode.NONE or not isinstance(leader, LeaderState):
            ctx.reply(envelope, self.fetch_response(error))
            return
        log = ctx.log
        position = log.validate_offset_and_epoch(request.fetch_offset, request.last_fetched_epoch)
        if position.position is FetchPosition.SNAPSHOT:
            # Behind the log start, or diverging inside the snapshot: load it first (KIP-630).
            snapshot = SnapshotId(position.end_offset, position.epoch)
            ctx.reply(envelope, self.fetch_response(snapshot_id=snapshot))
            return
        if position.position is FetchPosition.DIVERGING:
            diverging = DivergingEpoch(position.epoch, position.end_offset)
            ctx.reply(envelope, self.fetch_response(diverging_epoch=diverging))
            return
        if not log.is_batch_boundary(request.fetch_offset):
            ctx.reply(envelope, self.fetch_response(ErrorCode.INVALID_REQUEST))
            return
        config = ctx.config
        now = ctx.now_ms
        # A voter's id fetching from another directory (a wiped disk) is an observer.
        is_voter = ctx.voter_set.is_voter(
            ReplicaKey(request.replica_id, request.replica_directory_id)
        )
        leader.update_replica_state(
            request.replica_id,
            request.fetch_offset,
            log.log_end_offset,
            now,
            config,
            voter=is_voter,
            directory_id=request.replica_directory_id,
        )
        if is_voter:
            leader.record_fence_echo(request.replica_id, request.read_fence)
            self.maybe_advance_high_watermark()
        elif leader.voter_change is not None:
            self._voter_changes.maybe_add_caught_up_voter(leader)
        purgatory = leader.fetch_purgatory
        old = purgatory.pop(request.replica_id)
        if old is not None:
            self.complete_fetch(old)
        hw_news_now = (
            request.high_watermark < log.high_watermark
            and config.high_watermark_notify_delay_ms == 0
        )
        if request.fetch_offset < log.log_end_offset or request.max_wait_ms == 0 or hw_news_now:
            self.complete_fetch(envelope)
        elif not is_voter and len(purgatory) >= config.fetch_purgatory_max:
            # The purgatory is full of observers: answer at once instead of parking.
            self.complete_fetch(envelope)
        else:
            wait = min(request.max_wait_ms, config.fetch_max_wait_ms)
            # Only the high watermark may be news: it goes with the next data, or once it is
            # high_watermark_notify_delay_ms old for this fetcher.
            behind = request.high_watermark < log.high_watermark
            purgatory.park(
                request.replica_id, envelope, now + wait, news_since_ms=now if behind else None
            )

    def complete_fetch(self, envelope: Envelope) -> None:
        request = envelope.message
        assert isinstance(request, FetchRequest)
        ctx = self._ctx
        max_bytes = min(request.max_bytes, ctx.config.fetch_max_bytes)
        batches = ctx.log.read(request.fetch_offset, max_bytes)
        ctx.reply(envelope, self.fetch_response(batches=batches))

    # ----- the high watermark ---------------------------------------------------------------

    def maybe_advance_high_watermark(self) -> None:
        ctx = self._ctx
        leader = ctx.state
        if not isinstance(leader, LeaderState):
            return
        if leader.maybe_update_high_watermark(ctx.log, ctx.durable_end_offset, ctx.config):
            # Fetchers learn the new high watermark from their parked fetches: with the next
            # data, or once the notify delay is over.
            self._schedule_high_watermark_notice(leader)
            self._voter_changes.maybe_complete_voter_change(leader)

    def _schedule_high_watermark_notice(self, leader: LeaderState) -> None:
        """The high watermark moved: each parked fetcher behind it has news from now on (and
        is answered at once when there is no notify delay)."""
        ctx = self._ctx
        leader.fetch_purgatory.high_watermark_moved(ctx.log.high_watermark, ctx.now_ms)
        if ctx.config.high_watermark_notify_delay_ms == 0:
            for envelope in leader.fetch_purgatory.pop_completable(
                ctx.now_ms, ctx.log.log_end_offset, ctx.now_ms
            ):
                self.complete_fetch(envelope)

    # ----- the leader's timers --------------------------------------------------------------

    def poll_leader(self, state: LeaderState) -> None:
        ctx = self._ctx
        config = ctx.config
        now = ctx.now_ms
        self._voter_changes.maybe_complete_voter_change(state)
        if state.resign_requested:
            self._transitions.transition_to_resigned("removed from the voter set")
            return
        # Check quorum: resign when a majority has been silent too long.
        fetched = state.fetched_voters(now, config.check_quorum_timeout_ms)
        if not state.has_quorum(fetched):
            ctx.emit("check_quorum_failed", alive=len(fetched))
            self._transitions.transition_to_resigned("check quorum failed")
            return
        self._quorum_epoch.send_begin_quorum_epochs(state)
        if state.accumulator.needs_drain(now, in_flight=self.batch_in_flight()):
            ctx.drain_accumulator(state)
        elif now >= state.idle_deadline_ms and state.accumulator.is_empty():
            ctx.append_batch(state.epoch, [NoOpRecord()])
            state.idle_deadline_ms = now + config.idle_interval_ms
        # Long-poll fetches: answer those with data or past their wait, and those whose
        # high-watermark news is the notify delay old.
        for envelope in state.fetch_purgatory.pop_completable(
            now, ctx.log.log_end_offset, now - config.high_watermark_notify_delay_ms
        ):
            self.complete_fetch(envelope)

    def timers_ms(self, state: LeaderState) -> list[int]:
        """When the leader must poll next (``RaftNode.poll``'s next_poll_at_ms)."""
        ctx = self._ctx
        timers = state.timers_ms(ctx.now_ms, ctx.config)
        if ctx.durable_end_offset < ctx.log.log_end_offset:
            # Our own entries count toward the high watermark once advance() says they are
            # durable: look again right after that.
            timers.append(ctx.now_ms)
        return timers

    def batch_in_flight(self) -> bool:
        """Whether the log holds a batch not committed yet (adaptive batching waits for it)."""
        log = self._ctx.log
        return log.high_watermark < log.log_end_offset

    # ----- proposals ------------------------------------------------------------------------

    def propose(self, leader: LeaderState, records: Sequence[Record]) -> Proposal:
        """``RaftNode.propose`` on the leader: queue ``records`` for one batch."""
        ctx = self._ctx
        config = ctx.config
        if not records:
            raise BatchTooLargeError("a proposal needs at least one record")
        size = sum(len(encode_record(r)) for r in records)
        if len(records) > config.records_per_batch_max or size > config.batch_bytes_max:
            raise BatchTooLargeError(
                f"{len(records)} records / {size} bytes exceed one batch "
                f"({config.records_per_batch_max} records, "
                f"{config.batch_bytes_max} bytes)"
            )
        accumulator = leader.accumulator
        if not accumulator.is_empty() and not accumulator.fits(len(records), size):
            ctx.drain_accumulator(leader)
        base = ctx.log.log_end_offset + accumulator.record_count
        accumulator.append(records, size, ctx.now_ms)
        return Proposal(leader.epoch, base, base + len(records) - 1)

    # ----- linearizable reads ---------------------------------------------------------------

    def read_barrier(self, leader: LeaderState) -> tuple[int, int]:
        """``RaftNode.read_barrier`` on the leader: a new fence, and the voters' parked
        Fetches answered at once so that it leaves now."""
        fence = leader.new_read_fence()
        for voter in leader.voters:
            envelope = leader.fetch_purgatory.pop(voter)
            if envelope is not None:
                self.complete_fetch(envelope)
        return leader.epoch, fence

    def read_index(self, epoch: int, fence: int) -> int | None:
        """``RaftNode.read_index``: the high watermark once a majority echoed ``fence`` and
        this epoch committed its first entry; None while waiting."""
        ctx = self._ctx
        leader = ctx.state
        if not isinstance(leader, LeaderState) or leader.epoch != epoch:
            raise NotLeaderError(ctx.leader_id, ctx.epoch)
        if leader.confirmed_read_fence() < fence:
            return None
        if ctx.log.high_watermark <= leader.epoch_start_offset:
            return None
        return ctx.log.high_watermark

    # ----- DescribeQuorum -------------------------------------------------------------------

    def handle_describe_quorum_request(
        self, envelope: Envelope, request: DescribeQuorumRequest, header_error: ErrorCode
    ) -> None:
        """Errors: header errors; NOT_LEADER_OR_FOLLOWER (only the leader knows replication;
        the answer names the leader)."""
        ctx = self._ctx
        error = header_error
        leader = ctx.state
        if error is ErrorCode.NONE and not isinstance(leader, LeaderState):
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if header_error is not ErrorCode.NONE:
            # A foreign request learns nothing about this quorum (I15).
            ctx.reply(envelope, DescribeQuorumResponse(error, None, -1, -1))
            return
        if error is not ErrorCode.NONE or not isinstance(leader, LeaderState):
            ctx.reply(
                envelope,
                DescribeQuorumResponse(error, ctx.leader_id, ctx.epoch, ctx.log.high_watermark),
            )
            return
        voters, observers = leader.describe_quorum(ctx.now_ms, ctx.log.log_end_offset)
        voter_set = ctx.voter_set
        voters = tuple(
            dataclasses.replace(
                v,
                directory_id=voter_set.directory_id(v.replica_id),
                endpoints=node.endpoints if (node := voter_set.voter(v.replica_id)) else (),
            )
            for v in voters
        )
        ctx.reply(
            envelope,
            DescribeQuorumResponse(
                ErrorCode.NONE,
                ctx.node_id,
                ctx.epoch,
                ctx.log.high_watermark,
                voters,
                observers,
            ),
        )
