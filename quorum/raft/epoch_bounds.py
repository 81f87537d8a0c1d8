"""How far one peer may move this node's epoch (issue 28; docs/architecture.md#epoch-jumps).

A stolen controller certificate is outside Raft's model, but one message of it must not do
unbounded damage: before this bound, a single BeginQuorumEpoch moved a quorum's epoch by two
billion. So every epoch a peer shows this node is held to a ceiling:

    ceiling = max(this node's epoch, the epoch a majority of voters vouched for) + jump_max

- **Requests** (Vote and pre-vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch) above the ceiling
  are refused with INVALID_REQUEST, naming both epochs and the bound, and change nothing. Anyone
  holding one voter's key can send them, unasked.
- **Responses** answer this node's own requests, but a voter that lies answers them too: one
  above the ceiling is dropped. A majority of voters can still move the node further: the
  epoch they vouch for is the largest E such that a majority of the voters (this node apart)
  answered with epochs of at least E, which one lying voter cannot reach alone. That is how an
  honest node that was away while the cluster ran more than ``jump_max`` elections rejoins.

Each refusal counts in ``refused`` (a metric) and becomes an ``epoch_jump_refused`` event,
which the driver logs throttled like the other rejections. Per request is what is bounded: a
holder of a voter's key that keeps sending requests walks the epoch up ``jump_max`` at a time,
each step an accepted request that is persisted and logged (docs/security.md#threat-model). An
honest voter walked that way ends more than the bound above the others; the leader, told so by
its answer to BeginQuorumEpoch, steps up by the bound and resigns (``RaftNode``), so that voter
is followed within a few elections instead of being left out for good.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from quorum.raft.majority import majority_size
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)


def request_epoch(message: object) -> int | None:
    """The epoch a request would move its receiver to, or claims to be in (None: none)."""
    match message:
        case VoteRequest():
            return message.candidate_epoch
        case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
            return message.leader_epoch
        case FetchRequest():
            return message.current_leader_epoch
    return None


def explained(reply: Envelope, request: Envelope, error_message: str) -> Envelope:
    """``reply``, the answer to ``request``, with an error message for a person (the wire's
    ``error_message``)."""
    assert reply.correlation_id == request.correlation_id, (reply, request)
    message = reply.message
    assert isinstance(
        message, VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
    ), message
    return dataclasses.replace(
        reply, message=dataclasses.replace(message, error_message=error_message)
    )


def vouchers(
    voters: frozenset[int], local_id: int, bootstrap_ids: Sequence[int]
) -> tuple[frozenset[int], int]:
    """Whose answers vouch for an epoch (the voters but this node; a node that knows no voter
    yet: the bootstrap servers it asks) and out of how many a majority is counted."""
    if voters:
        return voters - {local_id}, len(voters)
    return frozenset(bootstrap_ids), len(bootstrap_ids)


class EpochBounds:
    """The epochs voters vouched for in their responses, the ceiling they allow, and how many
    peer messages were refused for going above it."""

    __slots__ = ("_claims", "jump_max", "refused")

    def __init__(self, jump_max: int) -> None:
        assert jump_max > 0, jump_max
        self.jump_max = jump_max
        # The highest epoch each voter answered this node with; at most one entry per voter
        # (``forget_all_but`` drops the others when the voter set changes).
        self._claims: dict[int, int] = {}
        # Requests and responses refused for an epoch above the ceiling (a metric).
        self.refused = 0

    def vouch(self, source: int, epoch: int, vouchers: Collection[int]) -> None:
        """``source`` answered a request of this node with ``epoch``; only ``vouchers`` (the
        voters, or the bootstrap servers of a node that knows none) count."""
        if source in vouchers and epoch > self._claims.get(source, -1):
            self._claims[source] = epoch

    def forget_all_but(self, vouchers: Collection[int]) -> None:
        """The voter set changed: claims of nodes that are no longer voters stop counting."""
        for source in [s for s in self._claims if s not in vouchers]:
            del self._claims[source]

    def vouched_epoch(self, vouchers: Collection[int], voter_count: int) -> int:
        """The largest epoch that a majority of ``voter_count`` voters answered with at least
        (-1 when no majority answered): the majority-th largest claim among ``vouchers``,
        which exclude this node itself (its own epoch is below what it would be vouching)."""
        if voter_count <= 0:
            return -1
        claims = sorted((self._claims.get(v, -1) for v in vouchers), reverse=True)
        majority = majority_size(voter_count)
        return claims[majority - 1] if len(claims) >= majority else -1

    def ceiling(self, epoch: int, vouchers: Collection[int], voter_count: int) -> int:
        """The highest epoch a peer may show a node at ``epoch``."""
        return max(epoch, self.vouched_epoch(vouchers, voter_count)) + self.jump_max

    def problem(self, epoch: int, current: int, ceiling: int) -> str:
        """Why ``epoch`` is refused ("" if it is not above ``ceiling``); counts a refusal."""
        if epoch <= ceiling:
            return ""
        self.refused += 1
        seen = ceiling - self.jump_max
        return (
            f"epoch {epoch} is more than EPOCH_JUMP_MAX ({self.jump_max}) above epoch {seen}, "
            f"the highest this node (at epoch {current}) has seen or a majority of voters "
            "vouched for: refused, nothing changed. One voter cannot move a node that far; a "
            "leader really that far ahead is followed once a majority of voters answer with "
            "its epoch"
        )
