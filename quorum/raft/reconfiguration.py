"""Changing the voter set (KIP-853), on the leader: one handler per RPC as Kafka has them
(``AddVoterHandler``, ``RemoveVoterHandler``, ``UpdateVoterHandler``) over the one pending
change a leader works on (``VoterChanges``; docs/architecture.md#changing-the-voter-set).

Kafka's rules: one uncommitted voter change at a time; the leader first commits an entry of its
own epoch (fencing changes a previous leader left uncommitted); a new voter first catches up as
an observer (fetching from its own directory) to the leader's log end; the answer comes once the
new ``VotersRecord`` is committed by the new voter set. A leader removed from the set keeps
leading until the removal commits, then resigns. Why a change cannot start is decided by
``quorum.raft.validation.voter_change_problem``.

Errors: INCONSISTENT_CLUSTER_ID; NOT_LEADER_OR_FOLLOWER (names the leader this node knows);
UNSUPPORTED_VERSION (a static quorum, kraft.version 0); REQUEST_TIMED_OUT (another change
pending or uncommitted, this leader's epoch not committed yet, the new voter not caught up in
time, the change not committed in time); DUPLICATE_VOTER (the node id is a voter already);
VOTER_NOT_FOUND (no voter has this id and directory id); INVALID_REQUEST (no directory id or no
endpoint given, removing the last voter); FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH
(UpdateRaftVoter of another epoch).
"""

from __future__ import annotations

from quorum import limits
from quorum.errors import ErrorCode
from quorum.raft.context import RaftContext
from quorum.raft.leader import LeaderState, PendingVoterChange
from quorum.raft.messages import (
    AddRaftVoterRequest,
    Envelope,
    RemoveRaftVoterRequest,
    UpdateRaftVoterRequest,
    VoterChangeRequest,
    VoterChangeResponse,
)
from quorum.raft.validation import voter_change_problem
from quorum.raft.voters import ReplicaKey, VoterNode, VoterSet


class VoterChanges:
    """The leader's one pending voter change: started, appended, committed or timed out."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: RaftContext) -> None:
        self._ctx = ctx

    def start(self, envelope: Envelope, request: VoterChangeRequest) -> LeaderState | None:
        """Check a voter change request (answering it if it cannot start) and return the
        leader that takes it on, or None."""
        ctx = self._ctx
        state = ctx.state
        leader = state if isinstance(state, LeaderState) else None
        problem = voter_change_problem(ctx, request, leader)
        if problem is not None:
            code, message = problem
            if code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT):
                ctx.reject(envelope, code, message)
            self.answer(envelope, code, message)
            return None
        assert leader is not None
        if leader.voter_change is not None:  # only with unsafe_allow_concurrent_voter_changes
            replaced, leader.voter_change = leader.voter_change, None
            self.answer(replaced.envelope, ErrorCode.REQUEST_TIMED_OUT, "replaced")
        return leader

    def answer(self, envelope: Envelope, error: ErrorCode, message: str) -> None:
        ctx = self._ctx
        ctx.reply(
            envelope,
            VoterChangeResponse(
                error,
                message,
                ctx.leader_id,
                ctx.epoch,
                ctx.log.high_watermark if error is ErrorCode.NONE else 0,
            ),
        )

    def append_voter_set(self, leader: LeaderState, voters: VoterSet) -> None:
        """Append ``voters`` as the new voter set (in force at once, KIP-853)."""
        ctx = self._ctx
        change = leader.voter_change
        assert change is not None
        assert ctx.voter_set.differs_by_at_most_one(voters), (ctx.voter_set, voters)
        ctx.drain_accumulator(leader)
        change.offset = ctx.log.log_end_offset
        ctx.append_batch(leader.epoch, [voters.to_record()], control=True)
        leader.idle_deadline_ms = ctx.now_ms + ctx.config.idle_interval_ms
        ctx.emit(
            "voter_change_appended",
            kind=change.kind,
            voter=str(change.voter.key),
            offset=change.offset,
        )

    def maybe_add_caught_up_voter(self, leader: LeaderState) -> None:
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
        added = self._ctx.voter_set.add(change.voter)
        assert added is not None, (change, self._ctx.voter_set)
        self.append_voter_set(leader, added)

    def maybe_complete_voter_change(self, leader: LeaderState) -> None:
        """After the high watermark moved or time passed: answer a voter change that committed
        (and resign if this leader was removed) or expired."""
        change = leader.voter_change
        if change is None:
            return
        ctx = self._ctx
        if change.offset is not None and ctx.log.high_watermark > change.offset:
            leader.voter_change = None
            ctx.emit("voter_change_committed", kind=change.kind, voter=str(change.voter.key))
            self.answer(change.envelope, ErrorCode.NONE, "")
            if not ctx.is_voter:
                # Kafka's rule: a leader removed from the voter set leads until the removal
                # commits, then resigns.
                leader.resign_requested = True
            return
        if ctx.now_ms >= change.deadline_ms:
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
                    f"{ctx.log.high_watermark}); it may still commit: describe the quorum"
                )
            ctx.emit("voter_change_timed_out", kind=change.kind, voter=str(change.voter.key))
            self.answer(change.envelope, ErrorCode.REQUEST_TIMED_OUT, message)

    def abandon(self, leader: LeaderState) -> None:
        """The node stops leading with a change pending: answer it, its fate unknown."""
        change = leader.voter_change
        if change is None:
            return
        leader.voter_change = None
        self.answer(
            change.envelope,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"node {self._ctx.node_id} stopped leading epoch {leader.epoch} before the voter "
            f"change {change.describe()} committed; it may still take effect: run "
            "`metaquorum quorum describe --status` and retry if it did not",
        )


class AddVoterHandler:
    """AddRaftVoter: the new voter catches up as an observer first, within the request's
    timeout (Kafka answers at once; KAFKA-17147 proposes the wait), then the set that adds it
    is appended."""

    __slots__ = ("_changes", "_ctx")

    def __init__(self, ctx: RaftContext, changes: VoterChanges) -> None:
        self._ctx = ctx
        self._changes = changes

    def handle_add_voter_request(self, envelope: Envelope, request: AddRaftVoterRequest) -> None:
        leader = self._changes.start(envelope, request)
        if leader is None:
            return
        ctx = self._ctx
        timeout_ms = max(1, min(request.timeout_ms, limits.VOTER_CHANGE_TIMEOUT_MS_MAX))
        node = VoterNode(
            ReplicaKey(request.voter_id, request.voter_directory_id), request.endpoints
        )
        leader.voter_change = PendingVoterChange(
            "add",
            envelope,
            node,
            ctx.now_ms + timeout_ms,
            catch_up_offset=ctx.log.log_end_offset,
        )
        ctx.emit("voter_add_started", voter=str(node.key))
        self._changes.maybe_add_caught_up_voter(leader)


class RemoveVoterHandler:
    """RemoveRaftVoter: the set without the voter is appended at once."""

    __slots__ = ("_changes", "_ctx")

    def __init__(self, ctx: RaftContext, changes: VoterChanges) -> None:
        self._ctx = ctx
        self._changes = changes

    def handle_remove_voter_request(
        self, envelope: Envelope, request: RemoveRaftVoterRequest
    ) -> None:
        leader = self._changes.start(envelope, request)
        if leader is None:
            return
        ctx = self._ctx
        key = ReplicaKey(request.voter_id, request.voter_directory_id)
        removed = ctx.voter_set.remove(key)
        assert removed is not None
        leader.voter_change = PendingVoterChange(
            "remove", envelope, VoterNode(key), ctx.now_ms + limits.VOTER_CHANGE_TIMEOUT_MS_MAX
        )
        self._changes.append_voter_set(leader, removed)


class UpdateVoterHandler:
    """UpdateRaftVoter: a voter's new endpoints and kraft.version range; nothing is appended
    when they did not change."""

    __slots__ = ("_changes", "_ctx")

    def __init__(self, ctx: RaftContext, changes: VoterChanges) -> None:
        self._ctx = ctx
        self._changes = changes

    def handle_update_voter_request(
        self, envelope: Envelope, request: UpdateRaftVoterRequest
    ) -> None:
        leader = self._changes.start(envelope, request)
        if leader is None:
            return
        ctx = self._ctx
        node = VoterNode(
            ReplicaKey(request.voter_id, request.voter_directory_id),
            request.endpoints,
            request.kraft_version_min,
            request.kraft_version_max,
        )
        if ctx.voter_set.voter(request.voter_id) == node:
            self._changes.answer(envelope, ErrorCode.NONE, "")
            return
        updated = ctx.voter_set.update(node)
        assert updated is not None
        leader.voter_change = PendingVoterChange(
            "update", envelope, node, ctx.now_ms + limits.VOTER_CHANGE_TIMEOUT_MS_MAX
        )
        self._changes.append_voter_set(leader, updated)
