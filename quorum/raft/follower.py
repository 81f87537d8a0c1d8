"""The fetching side of followers and observers (Kafka's ``pollFollower`` and
``handleFetchResponse``): when a Fetch goes and to whom, what its answer does to the log
(append, truncate at a diverging epoch, load the leader's snapshot), a leader whose connection
was lost, and a committed prefix found diverging (``quorum.raft.prefix_divergence``).

The state that outlives one epoch state (the retry backoff, the observer's round-robin, a
snapshot download the shell owes an answer for, a divergence) is the ``Fetcher``
(``quorum.raft.fetcher``).
"""

from __future__ import annotations

from quorum.errors import ErrorCode
from quorum.raft.context import RaftContext, Transitions
from quorum.raft.fetcher import Fetcher
from quorum.raft.inflight import InflightRequest, RequestKind
from quorum.raft.log import RaftLog
from quorum.raft.messages import Envelope, FetchRequest, FetchResponse, RequestFailed
from quorum.raft.prefix_divergence import PrefixDivergence, committed_in_epoch
from quorum.raft.state import FollowerState, UnattachedState


class FollowerFetching:
    """Fetch requests out, Fetch responses in, on every node that does not lead."""

    __slots__ = ("_connection_loss_epoch", "_ctx", "_rebuilding", "_transitions", "fetcher")

    def __init__(self, ctx: RaftContext, transitions: Transitions) -> None:
        self._ctx = ctx
        self._transitions = transitions
        self.fetcher = Fetcher()
        # The epoch in which a lost leader connection last shortened the fetch deadline
        # (``_leader_connection_lost``: once per epoch).
        self._connection_loss_epoch: int | None = None
        # An observer that discarded a diverged log, until its committed log again reaches an
        # entry of the current leader's epoch (``rebuilding_committed_prefix``).
        self._rebuilding = False

    # ----- sending --------------------------------------------------------------------------

    def fetch_in_flight(self) -> bool:
        return self._ctx.inflight.has(RequestKind.FETCH)

    def may_fetch_now(self) -> bool:
        """No Fetch in flight and fetching not paused (a snapshot download, a diverged log)."""
        return not self.fetch_in_flight() and not self.fetcher.paused()

    def fetch_backoff(self) -> None:
        """The last Fetch failed or was refused: wait the retry backoff before the next."""
        self.fetcher.retry_after(self._ctx.now_ms, self._ctx.config.retry_backoff_ms)

    def maybe_send_fetch(self, destination: int) -> None:
        ctx = self._ctx
        if self.fetch_in_flight() or not self.fetcher.may_fetch(ctx.now_ms):
            return
        config = ctx.config
        log = ctx.log
        state = ctx.state
        ctx.send(
            destination,
            FetchRequest(
                ctx.header(),
                ctx.node_id,
                state.epoch,
                log.log_end_offset,
                log.last_fetched_epoch,
                config.fetch_max_wait_ms,
                config.fetch_max_bytes,
                log.high_watermark,
                state.read_fence if isinstance(state, FollowerState) else 0,
                ctx.local_key.directory_id,
            ),
            RequestKind.FETCH,
            timeout_ms=config.fetch_max_wait_ms + config.request_timeout_ms,
        )

    # ----- timers ---------------------------------------------------------------------------

    def poll_follower(self, state: FollowerState) -> None:
        ctx = self._ctx
        now = ctx.now_ms
        if self.fetcher.paused():
            # The driver is downloading a snapshot from the leader, or discarding a diverged
            # log (or stopping this voter); it reports the outcome.
            state.fetch_deadline_ms = now + ctx.config.fetch_timeout_ms
            return
        if now >= state.fetch_deadline_ms:
            if ctx.is_voter:
                self._transitions.transition_to_prospective(
                    "leader connection lost" if state.leader_unreachable else "fetch timeout"
                )
            else:
                # An observer - or a voter removed since it voted in this epoch: the vote stays.
                self._transitions.transition_to_unattached(
                    state.epoch, "fetch timeout", ctx.voted_id()
                )
            return
        self.maybe_send_fetch(state.leader_id)

    def poll_unattached(self, state: UnattachedState) -> None:
        ctx = self._ctx
        if not ctx.is_voter:
            # Observers look for the leader by fetching from the voters in turn (or, knowing
            # none yet, from controller.quorum.bootstrap.servers).
            targets = (ctx.voters - {ctx.node_id}) or ctx.bootstrap_ids
            if targets and not self.fetch_in_flight() and ctx.now_ms >= self.fetcher.retry_at_ms:
                self.maybe_send_fetch(self.fetcher.next_observer_target(targets))
            return
        if ctx.now_ms >= state.election_deadline_ms:
            self._transitions.transition_to_prospective("election timeout")

    def timers_ms(self, state: FollowerState | UnattachedState) -> list[int]:
        """When a follower, or an unattached voter or observer, must poll next."""
        if isinstance(state, FollowerState):
            timers = [state.fetch_deadline_ms]
        elif self._ctx.is_voter:
            return [state.election_deadline_ms]
        else:
            timers = []
        if self.may_fetch_now():
            timers.append(self.fetcher.retry_at_ms)
        return timers

    # ----- answers --------------------------------------------------------------------------

    def handle_fetch_response(
        self, envelope: Envelope, response: FetchResponse, inflight: InflightRequest
    ) -> None:
        ctx = self._ctx
        error = response.error_code
        if error not in (
            ErrorCode.NONE,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.FENCED_LEADER_EPOCH,
        ):
            self.fetch_backoff()
            return
        if self._transitions.observe_epoch(
            response.leader_epoch, response.leader_id, "fetch response", envelope.source
        ):
            return
        state = ctx.state
        if error is not ErrorCode.NONE or not isinstance(state, FollowerState):
            self.fetch_backoff()
            return
        if envelope.source != state.leader_id or response.leader_epoch != state.epoch:
            return
        now = ctx.now_ms
        state.fetch_succeeded(now, ctx.config.fetch_timeout_ms)
        state.read_fence = max(state.read_fence, response.read_fence)
        log = ctx.log
        if response.snapshot_id is not None:
            snapshot = response.snapshot_id
            if snapshot.epoch > state.epoch:
                ctx.drop_response(envelope, f"snapshot {snapshot} past the epoch")
                self.fetch_backoff()
                return
            if snapshot.end_offset < log.high_watermark:
                # Our log diverges inside the leader's snapshot, below what we saw committed.
                self._committed_prefix_diverged(
                    envelope, response, snapshot.end_offset, snapshot.epoch, via_snapshot=True
                )
                return
            # The shell downloads it and calls install_snapshot (quorum.raft.snapshots).
            self.fetcher.fetching_snapshot = snapshot
            ctx.snapshot_to_fetch = (envelope.source, snapshot)
            ctx.emit("snapshot_needed", end_offset=snapshot.end_offset, epoch=snapshot.epoch)
            return
        if response.diverging_epoch is not None:
            diverging = response.diverging_epoch
            _, our_end = log.end_offset_for_epoch(diverging.epoch)
            offset = min(diverging.end_offset, our_end)
            # Walk back to a batch boundary we share (a mismatch inside a batch cannot be
            # repaired partially).
            offset = max(offset, log.log_start_offset)
            while not log.is_batch_boundary(offset):
                offset -= 1
            if offset < log.high_watermark:
                # Only a leader that lost committed data (or a forged answer) says this.
                self._committed_prefix_diverged(
                    envelope, response, offset, diverging.epoch, via_snapshot=False
                )
                return
            ctx.emit(
                "fetch_diverged",
                truncate_to=offset,
                diverging_epoch=diverging.epoch,
                end_offset=diverging.end_offset,
            )
            ctx.truncate_local(offset)
            self.fetcher.retry_now(now)
            return
        for batch in response.batches:
            if batch.base_offset != log.log_end_offset:
                break
            if batch.epoch < log.last_fetched_epoch or batch.epoch > state.epoch:
                break
            ctx.append_local(batch)
        log.update_high_watermark(min(response.high_watermark, log.log_end_offset))
        self.fetcher.retry_now(now)

    def fetch_failed(self, inflight: InflightRequest, failure: RequestFailed) -> None:
        """A Fetch got no answer (refused, reset, timed out): back off, and react to a leader
        whose process is gone."""
        if failure.peer_gone:
            self._leader_connection_lost(inflight)
        self.fetch_backoff()

    def _leader_connection_lost(self, inflight: InflightRequest) -> None:
        """A Fetch to our leader found it gone (connection refused or reset): its process most
        likely died. The follower stops counting it as live (so it grants pre-votes) and, once
        per epoch, moves its fetch deadline to a random moment within
        ``election_backoff_base_ms``, where ``poll_follower`` starts a pre-vote (a voter) or
        looks for the new leader among the voters (an observer: a broker) instead of waiting
        out the fetch timeout (``RaftConfig.election_on_connection_loss``). A Fetch that
        succeeds meanwhile puts the deadline back."""
        ctx = self._ctx
        follower = ctx.state
        if (
            not isinstance(follower, FollowerState)
            or inflight.destination != follower.leader_id
            or inflight.epoch != follower.epoch
        ):
            return
        follower.leader_unreachable = True
        if (
            not ctx.config.election_on_connection_loss
            or self._connection_loss_epoch == follower.epoch
        ):
            return
        self._connection_loss_epoch = follower.epoch
        pause = ctx.rng.randrange(ctx.config.election_backoff_base_ms + 1)
        follower.fetch_deadline_ms = min(follower.fetch_deadline_ms, ctx.now_ms + pause)
        ctx.emit("leader_connection_lost", leader_id=follower.leader_id, pre_vote_in_ms=pause)

    # ----- a committed prefix that diverges -------------------------------------------------

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
        ctx = self._ctx
        divergence = PrefixDivergence.of_answer(
            envelope.source,
            response,
            ctx.log,
            truncate_to,
            diverging_epoch,
            via_snapshot=via_snapshot,
            recoverable=not ctx.persists_election,
        )
        self.fetcher.diverged = divergence
        ctx.prefix_diverged = divergence
        ctx.emit("committed_prefix_diverged", **divergence.fields())

    @property
    def rebuilding_committed_prefix(self) -> bool:
        """See ``RaftNode.rebuilding_committed_prefix``."""
        return self._rebuilding or self.fetcher.diverged is not None

    def discard_diverged_log(self) -> None:
        """``RaftNode.discard_diverged_log``: start again empty at offset 0."""
        ctx = self._ctx
        divergence = self.fetcher.diverged
        assert divergence is not None and divergence.recoverable, divergence
        ctx.log = RaftLog()
        ctx.voter_history.reset(ctx.bootstrap_voters, ctx.bootstrap_kraft_version, from_log=False)
        ctx.voter_set_changed("diverged log discarded")
        ctx.metadata_topic_id = None  # it may have come from a lost record
        ctx.durable_end_offset = 0
        ctx.applied_offset = 0
        ctx.entries = []
        ctx.truncate_to = None
        self.fetcher.diverged = None
        self.fetcher.retry_now(ctx.now_ms)
        self._rebuilding = True
        follower = ctx.state
        if isinstance(follower, FollowerState):
            follower.fetch_succeeded(ctx.now_ms, ctx.config.fetch_timeout_ms)
        ctx.emit(
            "diverged_log_discarded",
            high_watermark_before=divergence.high_watermark,
            log_end_offset_before=divergence.log_end_offset,
            leader_id=divergence.leader_id,
        )

    def maybe_rebuilt(self) -> None:
        """After handing out committed batches: an observer rebuilding its log is done once the
        committed log reaches an entry of the current leader's epoch."""
        ctx = self._ctx
        if (
            self._rebuilding
            and not self.fetcher.paused()
            and committed_in_epoch(ctx.log, ctx.epoch, ctx.applied_offset)
        ):
            self._rebuilding = False
            ctx.emit("committed_prefix_rebuilt", applied_offset=ctx.applied_offset)
