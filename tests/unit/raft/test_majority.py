"""Majority arithmetic (quorum/raft/majority.py), checked against brute force."""

from __future__ import annotations

import itertools

import pytest

from quorum.raft.majority import (
    VoteResult,
    committed_offset,
    has_majority,
    majority_size,
    vote_result,
)


@pytest.mark.parametrize(("voters", "majority"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_majority_size(voters: int, majority: int) -> None:
    assert majority_size(voters) == majority


def test_has_majority_counts_only_voters() -> None:
    voters = frozenset({1, 2, 3})
    assert has_majority(voters, {1, 2})
    assert not has_majority(voters, {1})
    assert not has_majority(voters, {1, 100, 101})  # observers never count


def test_committed_offset_is_reached_by_a_majority() -> None:
    """For every assignment of small offsets to 1-5 voters: a majority has reached the answer,
    and no larger offset is reached by a majority."""
    for count in range(1, 6):
        for offsets in itertools.product(range(4), repeat=count):
            committed = committed_offset(offsets)
            assert sum(o >= committed for o in offsets) >= majority_size(count)
            assert sum(o >= committed + 1 for o in offsets) < majority_size(count)


def test_committed_offset_ignores_order() -> None:
    assert committed_offset([5, 1, 3]) == committed_offset([1, 3, 5]) == 3
    assert committed_offset([7]) == 7


@pytest.mark.parametrize(
    ("voters", "granted", "rejected", "result"),
    [
        (3, {1}, set(), VoteResult.PENDING),
        (3, {1, 2}, set(), VoteResult.WON),
        (3, {1}, {2}, VoteResult.PENDING),
        (3, {1}, {2, 3}, VoteResult.LOST),
        (5, {1, 2}, {3, 4}, VoteResult.PENDING),
        (5, {1, 2}, {3, 4, 5}, VoteResult.LOST),
        (1, {1}, set(), VoteResult.WON),
        (4, {1, 2}, {3, 4}, VoteResult.LOST),  # 2 of 4 is no majority and cannot become one
    ],
)
def test_vote_result(
    voters: int, granted: set[int], rejected: set[int], result: VoteResult
) -> None:
    assert vote_result(voters, granted, rejected) is result
