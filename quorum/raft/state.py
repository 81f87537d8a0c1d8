"""Epoch states of a KRaft node and the only place their transitions are allowed (Kafka's
``QuorumState``).

Legal transitions (voters; observers only move between Unattached and Follower)::

    Unattached  -> Unattached (higher epoch, or a vote cast) | Prospective (election timeout)
                   | Follower (leader discovered)
    Prospective -> Candidate (pre-vote majority) | Follower (leader discovered)
                   | Unattached (higher epoch, or a vote cast)
    Candidate   -> Leader (vote majority) | Prospective (election lost, after backoff)
                   | Unattached (higher epoch) | Follower (leader of the same epoch)
    Leader      -> Resigned (graceful shutdown or check-quorum failure) | Unattached (higher)
    Follower    -> Prospective (fetch timeout) | Follower (higher epoch)
                   | Unattached (higher epoch, leader unknown)
    Resigned    -> Prospective (election timeout) | Unattached / Follower (higher epoch)

The leader's state, with everything only a leader keeps, is in ``quorum.raft.leader``.

Every transition that changes what must survive a crash (epoch, vote, leader) produces an
``ElectionState`` that the driver persists before any message of the same ``Ready`` is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from quorum.raft.election import ElectionState
from quorum.raft.leader import LeaderState, ReplicaProgress

__all__ = [
    "CandidateState",
    "EpochState",
    "FollowerState",
    "IllegalStateError",
    "IllegalTransitionError",
    "LeaderState",
    "ProspectiveState",
    "ReplicaProgress",
    "ResignedState",
    "UnattachedState",
    "check_transition",
    "election_state_of",
]


class IllegalTransitionError(AssertionError):
    """A transition the state table forbids: a bug in the core, never a peer's fault."""


class IllegalStateError(AssertionError):
    """The core asked for a role's state in another role (Kafka's ``IllegalStateException``
    from ``leaderStateOrThrow``): a bug in the core."""


@dataclass(slots=True)
class UnattachedState:
    """No leader known in ``epoch``. A voter may have voted (``voted_id``) and waits for a
    leader or its election timeout; an observer keeps looking for the leader."""

    epoch: int
    voted_id: int | None
    election_deadline_ms: int

    name = "unattached"

    @property
    def leader_id(self) -> int | None:
        return None


@dataclass(slots=True)
class ProspectiveState:
    """Pre-vote (KIP-996): asks the voters whether they would vote for it in ``epoch + 1``
    without bumping the epoch, so a node that was cut off cannot disrupt a healthy leader."""

    epoch: int
    voted_id: int | None
    leader_id: int | None  # the leader it followed before timing out, if any
    election_deadline_ms: int
    backoff_until_ms: int | None = None
    retries: int = 1
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    # A leader of this epoch that a rejecting voter still hears from; if the pre-vote is lost,
    # the node goes back to following it instead of retrying forever.
    leader_hint: int | None = None
    leader_resigned: bool = False
    # Voters whose request failed (refused, timed out): when to ask them again.
    retry_at_ms: dict[int, int] = field(default_factory=dict)

    name = "prospective"

    def start_next_round(self, election_deadline_ms: int) -> None:
        """The backoff after a lost pre-vote is over: ask again, from a clean tally."""
        self.granted.clear()
        self.rejected.clear()
        self.backoff_until_ms = None
        self.retries += 1
        self.retry_at_ms.clear()
        self.election_deadline_ms = election_deadline_ms
        # One lost round is enough to doubt the resignation we were told of: if the voters
        # still hear that leader, the EndQuorumEpoch was stale or forged (issue #12), and
        # only following it again lets this node rejoin.
        self.leader_resigned = False


@dataclass(slots=True)
class CandidateState:
    """Has bumped the epoch, voted for itself and asks for votes."""

    epoch: int
    election_deadline_ms: int
    backoff_until_ms: int | None = None
    retries: int = 1
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    retry_at_ms: dict[int, int] = field(default_factory=dict)

    name = "candidate"

    @property
    def leader_id(self) -> int | None:
        return None


@dataclass(slots=True)
class FollowerState:
    """Follows ``leader_id`` in ``epoch`` by fetching from it. ``last_fetch_success_ms`` is
    what pre-vote asks about: a follower that heard its leader within the fetch timeout denies
    pre-votes (KIP-996)."""

    epoch: int
    leader_id: int
    voted_id: int | None
    fetch_deadline_ms: int
    last_fetch_success_ms: int | None = None
    # Set by EndQuorumEpoch: the leader said it stepped down, so it is not worth rejoining.
    leader_resigned: bool = False
    # The last Fetch found the leader gone (connection refused or reset: RequestFailed
    # .peer_gone); cleared by the next successful one. Such a follower grants pre-votes.
    leader_unreachable: bool = False
    # The newest read fence in a FetchResponse of this leader in this epoch; echoed in every
    # Fetch (quorum.raft.leader.LeaderState.read_fence).
    read_fence: int = 0

    name = "follower"

    def fetch_succeeded(self, now_ms: int, fetch_timeout_ms: int) -> None:
        """The leader answered a Fetch (or its snapshot was installed): it is alive, and the
        fetch timeout starts again (Kafka's ``resetFetchTimeoutForSuccessfulFetch``)."""
        self.last_fetch_success_ms = now_ms
        self.fetch_deadline_ms = now_ms + fetch_timeout_ms
        self.leader_unreachable = False

    def has_live_leader(self, now_ms: int, fetch_timeout_ms: int) -> bool:
        """Whether the leader was heard within the fetch timeout (then pre-votes are denied)
        and its connection was not refused or reset since."""
        if self.last_fetch_success_ms is None or self.leader_unreachable:
            return False
        return now_ms - self.last_fetch_success_ms < fetch_timeout_ms


@dataclass(slots=True)
class ResignedState:
    """A leader that stepped down (shutdown or lost quorum) and told the voters through
    EndQuorumEpoch. It cannot lead ``epoch`` again; it waits for a new leader or its
    election timeout."""

    epoch: int
    preferred_successors: tuple[int, ...]
    unacknowledged: set[int]
    election_deadline_ms: int
    end_quorum_epoch_resend_at_ms: int = 0

    name = "resigned"

    @property
    def leader_id(self) -> int | None:
        return None


EpochState = (
    UnattachedState
    | ProspectiveState
    | CandidateState
    | LeaderState
    | FollowerState
    | ResignedState
)


_ALLOWED: dict[str, frozenset[str]] = {
    "unattached": frozenset({"unattached", "prospective", "follower"}),
    "prospective": frozenset({"candidate", "follower", "unattached", "prospective"}),
    "candidate": frozenset({"leader", "prospective", "unattached", "follower"}),
    "leader": frozenset({"resigned", "unattached", "follower"}),
    "follower": frozenset({"prospective", "follower", "unattached"}),
    "resigned": frozenset({"prospective", "unattached", "follower"}),
}


def election_state_of(state: EpochState, voters: frozenset[int], local_id: int) -> ElectionState:
    """What a state must persist: its epoch, the vote cast in it and the leader known."""
    match state:
        case UnattachedState(epoch=epoch, voted_id=voted_id):
            return ElectionState(epoch, None, voted_id, voters)
        case ProspectiveState(epoch=epoch, voted_id=voted_id, leader_id=leader_id):
            return ElectionState(epoch, leader_id, voted_id, voters)
        case CandidateState(epoch=epoch):
            return ElectionState(epoch, None, local_id, voters)
        case LeaderState(epoch=epoch):
            return ElectionState(epoch, local_id, local_id, voters)
        case FollowerState(epoch=epoch, leader_id=leader_id, voted_id=voted_id):
            return ElectionState(epoch, leader_id, voted_id, voters)
        case ResignedState(epoch=epoch):
            return ElectionState(epoch, local_id, local_id, voters)
    raise AssertionError(state)  # pragma: no cover


def check_transition(current: EpochState, new: EpochState, local_id: int) -> None:
    """Raise ``IllegalTransitionError`` unless ``current -> new`` is in the table and keeps
    epoch safety: epochs never go back, and within one epoch a vote once cast and a leader once
    known are never replaced (I1)."""
    if new.name not in _ALLOWED[current.name]:
        raise IllegalTransitionError(f"{current.name} -> {new.name}: {current!r} -> {new!r}")
    if new.epoch < current.epoch:
        raise IllegalTransitionError(f"epoch goes back: {current!r} -> {new!r}")
    if new.epoch > current.epoch:
        return
    voters: frozenset[int] = frozenset()
    old = election_state_of(current, voters, local_id)
    fresh = election_state_of(new, voters, local_id)
    if old.voted_id is not None and fresh.voted_id != old.voted_id:
        raise IllegalTransitionError(f"vote changed within an epoch: {current!r} -> {new!r}")
    if (
        old.leader_id is not None
        and fresh.leader_id is not None
        and fresh.leader_id != old.leader_id
    ):
        raise IllegalTransitionError(f"leader changed within an epoch: {current!r} -> {new!r}")
    if isinstance(new, LeaderState) and not isinstance(current, CandidateState):
        raise IllegalTransitionError(f"leader without an election: {current!r} -> {new!r}")
