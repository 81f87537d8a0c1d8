"""The data plane's history checker (quorum/faults/data_checker.py) on histories that hold and
on histories that must be reported: it has to bite for the data-plane fault scenarios to mean
anything."""

from __future__ import annotations

from quorum.faults.data_checker import PROBLEMS_LISTED_MAX, check_partition

VALUES = [b"value-%d" % i for i in range(10)]


def log_of(values: list[bytes], start: int = 0) -> list[tuple[int, bytes]]:
    return [(start + i, v) for i, v in enumerate(values)]


def test_a_history_that_holds() -> None:
    acknowledged = {i: VALUES[i] for i in (0, 1, 2, 4)}  # 3 timed out, then was retried
    read = log_of([VALUES[0], VALUES[1], VALUES[2], VALUES[3], VALUES[4], VALUES[3]])
    result = check_partition("t-0", acknowledged, VALUES, read)
    assert result.ok, result.problems
    assert (result.acknowledged, result.read) == (4, 6)
    assert (result.unknown_present, result.duplicates) == (1, 1)


def test_a_lost_acknowledged_record_is_reported() -> None:
    acknowledged = {i: VALUES[i] for i in range(5)}
    result = check_partition("t-0", acknowledged, VALUES, log_of(VALUES[:3]))
    assert not result.ok
    assert result.problems == [
        "t-0: the record acknowledged at offset 3 is gone (the log ends at 3)",
        "t-0: the record acknowledged at offset 4 is gone (the log ends at 3)",
    ]


def test_an_acknowledged_record_at_another_offset_is_reported() -> None:
    acknowledged = {0: VALUES[0], 1: VALUES[1]}
    result = check_partition("t-0", acknowledged, VALUES, log_of([VALUES[1], VALUES[0]]))
    assert len(result.problems) == 2
    assert all("another record than the one acknowledged" in p for p in result.problems)


def test_a_gap_and_a_record_nobody_sent_are_reported() -> None:
    read = [(0, VALUES[0]), (2, VALUES[1]), (3, b"torn or foreign")]
    result = check_partition("t-0", {0: VALUES[0]}, VALUES, read)
    assert result.problems[0] == "t-0: offset 2 read where 1 was next: the log is not dense"
    assert "offset 3 holds a record no producer sent" in result.problems[1]


def test_retention_is_not_loss_and_problems_are_bounded() -> None:
    acknowledged = {i: VALUES[i] for i in range(10)}
    assert check_partition("t-0", acknowledged, VALUES, log_of(VALUES[6:], 6), 6).ok
    many = {i: b"x%d" % i for i in range(100)}
    result = check_partition("t-0", many, many.values(), [])
    assert len(result.problems) == PROBLEMS_LISTED_MAX + 1
    assert result.problems[-1] == f"t-0: ... and {100 - PROBLEMS_LISTED_MAX} more problems"
