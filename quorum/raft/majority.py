"""Majority arithmetic over a static voter set (etcd's ``quorum/majority.go``).

Every "does a majority agree?" question of the core goes through here: the size of a majority,
the offset a majority of voters has reached (the high watermark candidate), and the outcome of
a vote or pre-vote tally. The functions are pure and know nothing of epochs or the log.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable


def majority_size(voter_count: int) -> int:
    """How many voters make a majority: more than half of ``voter_count``."""
    assert voter_count > 0, voter_count
    return voter_count // 2 + 1


def has_majority(voters: Collection[int], ids: Iterable[int]) -> bool:
    """Whether the voters among ``ids`` are a majority of ``voters``."""
    return len(set(ids) & set(voters)) >= majority_size(len(voters))


def committed_offset(acked_offsets: Collection[int]) -> int:
    """The largest offset that a majority of voters has reached, given one acknowledged
    offset per voter (etcd's ``CommittedIndex``): the majority-th largest of them."""
    offsets = sorted(acked_offsets, reverse=True)
    return offsets[majority_size(len(offsets)) - 1]


class VoteResult(enum.Enum):
    """The outcome of a tally (etcd's ``VoteResult``)."""

    PENDING = "pending"  # neither side can be sure yet
    WON = "won"  # a majority granted
    LOST = "lost"  # so many rejected that a majority can no longer grant


def vote_result(
    voter_count: int, granted: Collection[int], rejected: Collection[int]
) -> VoteResult:
    """Tally the voters that ``granted`` and ``rejected`` (each a set of voter ids, the
    candidate's own vote among the granted) out of ``voter_count`` voters."""
    majority = majority_size(voter_count)
    if len(granted) >= majority:
        return VoteResult.WON
    if len(rejected) > voter_count - majority:
        return VoteResult.LOST
    return VoteResult.PENDING
