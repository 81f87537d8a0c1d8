"""The election state each voter persists before acting on it (Kafka's ``quorum-state``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What a node must remember across a crash to keep election safety.

    ``epoch`` never goes back. Within one epoch a node votes for at most one candidate
    (``voted_id``) and knows at most one leader (``leader_id``). ``voters`` is the static voter
    set from ``controller.quorum.voters``, stored so a restart with a different set is caught.
    """

    epoch: int
    leader_id: int | None
    voted_id: int | None
    voters: frozenset[int]

    def __post_init__(self) -> None:
        assert self.epoch >= 0, self
        assert self.leader_id is None or self.leader_id >= 0, self
        assert self.voted_id is None or self.voted_id >= 0, self

    @classmethod
    def unattached(cls, epoch: int, voters: frozenset[int]) -> ElectionState:
        return cls(epoch=epoch, leader_id=None, voted_id=None, voters=voters)
