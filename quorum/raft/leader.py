"""What only the leader keeps (Kafka's ``LeaderState``): the progress of every replica, the
voters that acknowledged the epoch, the check-quorum clock, the high-watermark rule, the open
batch (``BatchAccumulator``) and the parked long-poll Fetches (``FetchPurgatory``).

All of it lives and dies with one leader epoch: when the node stops leading, the state object
goes and takes every piece with it. ``quorum.raft.replication`` does the I/O-shaped work
(building messages, appending to the log); this module only decides.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from quorum import limits
from quorum.ids import Uuid
from quorum.raft.accumulator import BatchAccumulator
from quorum.raft.config import RaftConfig
from quorum.raft.log import RaftLog
from quorum.raft.majority import committed_offset, has_majority, majority_size
from quorum.raft.messages import Envelope, ReplicaState
from quorum.raft.purgatory import FetchPurgatory
from quorum.raft.voters import VoterNode


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica from its Fetch requests."""

    replica_id: int
    log_end_offset: int = -1
    last_fetch_ms: int | None = None
    last_caught_up_ms: int | None = None
    directory_id: Uuid | None = None  # as its last Fetch said (KIP-853)

    def view(self) -> ReplicaState:
        return ReplicaState(
            self.replica_id,
            self.log_end_offset,
            self.last_fetch_ms,
            self.last_caught_up_ms,
            self.directory_id,
        )


@dataclass(slots=True)
class PendingVoterChange:
    """The one voter change (KIP-853) a leader works on: AddRaftVoter waits for the new voter to
    fetch up to ``catch_up_offset``; then (and at once for the others) the new voter set is
    appended at ``offset``; the request ``envelope`` is answered once the high watermark passes
    it, or at ``deadline_ms`` with REQUEST_TIMED_OUT."""

    kind: str  # "add", "remove" or "update"
    envelope: Envelope
    voter: VoterNode
    deadline_ms: int
    catch_up_offset: int | None = None
    offset: int | None = None

    def describe(self) -> str:
        where = f" at offset {self.offset}" if self.offset is not None else ""
        return f"{self.kind} {self.voter.key}{where}"


@dataclass(slots=True)
class LeaderState:
    """Leads ``epoch``. Its ``LeaderChangeMessage`` sits at ``epoch_start_offset``; nothing is
    committed in this epoch until that offset is on a majority."""

    epoch: int
    leader_id: int  # this node
    epoch_start_offset: int
    voters: dict[int, ReplicaProgress]
    accumulator: BatchAccumulator
    # Least recently heard first: expiry and the OBSERVERS_TRACKED_MAX bound drop from the
    # front, so each Fetch costs O(1) however many observer ids were ever seen.
    observers: OrderedDict[int, ReplicaProgress] = field(default_factory=OrderedDict)
    observers_tracked_max: int = limits.OBSERVERS_TRACKED_MAX
    # Voters that have acknowledged this epoch (BeginQuorumEpoch answered, or a Fetch seen).
    acknowledged: set[int] = field(default_factory=set)
    begin_quorum_epoch_resend_at_ms: int = 0
    idle_deadline_ms: int = 0
    fetch_purgatory: FetchPurgatory = field(default_factory=FetchPurgatory)
    # Read fences (Raft's ReadIndex, without clocks): ``new_read_fence`` hands out a number that
    # every FetchResponse from then on carries; a voter echoes the newest one it received in its
    # next Fetch. A majority echoing fence f (the leader counts itself) proves this node still
    # led after f was handed out: no other leader can have committed anything before that.
    read_fence: int = 0
    # Whether a FetchResponse carried ``read_fence`` yet: until one does, new reads share it
    # (every response carrying it is built after all of them), afterwards they need a new one.
    read_fence_sent: bool = True
    read_fence_echoes: dict[int, int] = field(default_factory=dict)  # voter -> newest echo
    # KIP-853: the voter change being worked on, and whether this leader, removed from the
    # voter set by a change now committed, must resign.
    voter_change: PendingVoterChange | None = None
    resign_requested: bool = False

    name = "leader"

    @classmethod
    def elected(
        cls,
        *,
        epoch: int,
        local_id: int,
        voters: frozenset[int],
        log_end_offset: int,
        now_ms: int,
        config: RaftConfig,
    ) -> LeaderState:
        """The state of a candidate that just won ``epoch``: its epoch starts at its log end."""
        progress = {v: ReplicaProgress(v) for v in voters}
        # Give every voter a full check-quorum window before it counts as silent.
        for p in progress.values():
            p.last_fetch_ms = now_ms
        if local_id in progress:
            progress[local_id].log_end_offset = log_end_offset
        return cls(
            epoch,
            local_id,
            log_end_offset,
            progress,
            BatchAccumulator(epoch, config),
            acknowledged={local_id},
            begin_quorum_epoch_resend_at_ms=now_ms,
            idle_deadline_ms=now_ms + config.idle_interval_ms,
            observers_tracked_max=config.observers_tracked_max,
        )

    # ----- replicas -------------------------------------------------------------------------

    def update_replica_state(
        self,
        replica_id: int,
        fetch_offset: int,
        log_end_offset: int,
        now_ms: int,
        config: RaftConfig,
        *,
        voter: bool | None = None,
        directory_id: Uuid | None = None,
    ) -> None:
        """A valid Fetch from ``replica_id`` at ``fetch_offset`` (the leader's log ends at
        ``log_end_offset``). A voter's Fetch also acknowledges the epoch. ``voter``: whether
        the fetcher is a voter (its directory matching; default: its id is a voter's)."""
        if voter is None:
            voter = replica_id in self.voters
        if voter:
            progress = self.voters[replica_id]
            self.acknowledged.add(replica_id)
        else:
            progress = (
                self.observers.pop(replica_id)
                if replica_id in self.observers
                else ReplicaProgress(replica_id)
            )
            self.observers[replica_id] = progress  # now the most recently heard
            self._expire_observers(now_ms - config.observer_expiry_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.directory_id = directory_id
        if fetch_offset >= log_end_offset:
            progress.last_caught_up_ms = now_ms

    def update_voters(self, voter_ids: frozenset[int], now_ms: int) -> None:
        """The voter set changed (KIP-853): a new voter's progress comes from its observer
        entry (it caught up as one) and gets a full check-quorum window; a removed voter's
        goes back to the observers. The high watermark counts the new set from now on."""
        for voter_id in voter_ids - self.voters.keys():
            progress = self.observers.pop(voter_id, None) or ReplicaProgress(voter_id)
            progress.last_fetch_ms = now_ms
            self.voters[voter_id] = progress
        for voter_id in self.voters.keys() - voter_ids:
            progress = self.voters.pop(voter_id)
            self.acknowledged.discard(voter_id)
            self.read_fence_echoes.pop(voter_id, None)
            if voter_id != self.leader_id:
                self.observers[voter_id] = progress

    def _expire_observers(self, horizon_ms: int) -> None:
        """Drop observers silent since before ``horizon_ms``, and the least recently heard
        beyond ``observers_tracked_max``. Amortized O(1): the dict is in order of last fetch
        (the clock never goes back), so only its front is looked at."""
        observers = self.observers
        while len(observers) > self.observers_tracked_max:
            observers.popitem(last=False)
        while len(observers) > 1:
            progress = next(iter(observers.values()))
            if progress.last_fetch_ms is None or progress.last_fetch_ms >= horizon_ms:
                break
            observers.popitem(last=False)

    def nonacknowledging_voters(self) -> list[int]:
        """Voters still to be told of this epoch through BeginQuorumEpoch, in id order."""
        return sorted(self.voters.keys() - self.acknowledged)

    def preferred_successors(self) -> tuple[int, ...]:
        """The other voters, most caught-up first (for EndQuorumEpoch)."""
        others = [v for v in self.voters if v != self.leader_id]
        return tuple(sorted(others, key=lambda v: (-self.voters[v].log_end_offset, v)))

    def describe_quorum(
        self, now_ms: int, log_end_offset: int
    ) -> tuple[tuple[ReplicaState, ...], tuple[ReplicaState, ...]]:
        """Voters and observers as DescribeQuorum shows them, the leader itself up to date
        (among the observers while it leads after its own removal, KIP-853)."""
        me = self.voters.get(self.leader_id) or ReplicaProgress(self.leader_id)
        me.log_end_offset = log_end_offset
        me.last_fetch_ms = me.last_caught_up_ms = now_ms
        observers = [p.view() for _, p in sorted(self.observers.items())]
        if self.leader_id not in self.voters:
            observers.insert(0, me.view())
        return tuple(self.voters[v].view() for v in sorted(self.voters)), tuple(observers)

    # ----- read fences ---------------------------------------------------------------------

    def new_read_fence(self) -> int:
        """The fence a read registered now waits for (see ``read_fence``)."""
        if self.read_fence_sent:
            self.read_fence += 1
            self.read_fence_sent = False
        return self.read_fence

    def fence_sent(self) -> int:
        """A FetchResponse is being built: it carries the newest fence."""
        self.read_fence_sent = True
        return self.read_fence

    def record_fence_echo(self, voter_id: int, fence: int) -> None:
        """A voter's Fetch in this epoch echoed ``fence``. A fence no response carried yet
        cannot be a real echo: it counts only up to the newest one sent."""
        newest_sent = self.read_fence if self.read_fence_sent else self.read_fence - 1
        if voter_id in self.voters and fence > self.read_fence_echoes.get(voter_id, 0):
            self.read_fence_echoes[voter_id] = min(fence, newest_sent)

    def confirmed_read_fence(self) -> int:
        """The newest fence a majority of voters has echoed (the leader counting itself)."""
        return committed_offset(
            [
                self.read_fence if v == self.leader_id else self.read_fence_echoes.get(v, 0)
                for v in self.voters
            ]
        )

    # ----- the high watermark ---------------------------------------------------------------

    def maybe_update_high_watermark(
        self, log: RaftLog, durable_end_offset: int, config: RaftConfig
    ) -> bool:
        """Move ``log``'s high watermark to the offset a majority of voters holds (the leader
        counting only what it has made durable, I8), once that is past the start of this epoch
        (Raft's rule against committing an older epoch's entries by counting). Returns whether
        it moved."""
        me = self.voters.get(self.leader_id)
        if me is not None:  # a leader removed from the voter set does not count (KIP-853)
            me.log_end_offset = durable_end_offset
        candidate = committed_offset([p.log_end_offset for p in self.voters.values()])
        if candidate <= self.epoch_start_offset and not config.unsafe_commit_previous_epoch:
            return False
        candidate = min(candidate, log.log_end_offset)
        if candidate > log.high_watermark:
            log.update_high_watermark(candidate)
            return True
        return False

    # ----- timers ---------------------------------------------------------------------------

    def timers_ms(self, now_ms: int, config: RaftConfig) -> list[int]:
        """When the leader must poll next for its own sake: BeginQuorumEpoch resend, idle
        NoOp, parked Fetch waits, the open batch's linger, the check-quorum deadline."""
        timers = [self.begin_quorum_epoch_resend_at_ms, self.idle_deadline_ms]
        timers.extend(self.fetch_purgatory.deadlines_ms())
        news_ms = self.fetch_purgatory.oldest_news_ms()
        if news_ms is not None:
            # A parked fetcher behind the high watermark gets it at most this much later.
            timers.append(news_ms + config.high_watermark_notify_delay_ms)
        drain_at = self.accumulator.drain_deadline_ms()
        if drain_at is not None:
            timers.append(drain_at)
        timers.append(self.check_quorum_deadline_ms(now_ms, config.check_quorum_timeout_ms))
        return timers

    # ----- check quorum ---------------------------------------------------------------------

    def fetched_voters(self, now_ms: int, timeout_ms: int) -> set[int]:
        """The voters heard from within ``timeout_ms`` (the leader always counts itself)."""
        horizon = now_ms - timeout_ms
        return {
            v
            for v, p in self.voters.items()
            if v == self.leader_id or (p.last_fetch_ms is not None and p.last_fetch_ms >= horizon)
        }

    def has_quorum(self, fetched: set[int]) -> bool:
        return has_majority(self.voters.keys(), fetched)

    def check_quorum_deadline_ms(self, now_ms: int, timeout_ms: int) -> int:
        """When the leader stops hearing from a majority unless more Fetches arrive: the fetch
        time of the least recent voter it still needs, plus the check-quorum timeout."""
        others = sorted(
            (p.last_fetch_ms or 0 for v, p in self.voters.items() if v != self.leader_id),
            reverse=True,
        )
        # The leader counts itself (unless it was removed from the voter set, KIP-853).
        needed = majority_size(len(self.voters)) - (1 if self.leader_id in self.voters else 0)
        if needed == 0:
            return now_ms + timeout_ms
        return others[needed - 1] + timeout_ms + 1
