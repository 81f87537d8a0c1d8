"""The data plane's history checker (docs/faults.md#data-plane-scenarios): what producers were
told against what a partition's log holds after the faults.

A partition log is a sequence, so the check is simpler than the metadata's linearizability
search: every record a producer was told is at offset ``o`` (acks=1 or acks=all answered
without an error) must be read back at ``o``, byte for byte; the log read from its start must
be dense (offsets start, start + 1, ... with no gap and no repeat); and every record read must
be one a producer sent (a record nobody sent is corruption, or another incarnation's data).
A record whose produce failed or timed out is *unknown*: it may be in the log or not, and
without idempotence a retried one may be there twice; both are counted, neither is a problem.

Pure: no I/O, so the checker itself is tested on histories that must fail
(``tests/faults/test_data_checker.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["DataCheck", "check_partition"]

# Problems listed one by one before the rest are only counted: a lost log tail would otherwise
# print thousands of lines.
PROBLEMS_LISTED_MAX = 20


@dataclass
class DataCheck:
    """What ``check_partition`` found: figures and problems (none when the history holds)."""

    partition: str
    acknowledged: int = 0
    read: int = 0
    unknown_present: int = 0  # records whose produce was not acknowledged, found in the log
    duplicates: int = 0  # extra copies of a record (retries without idempotence)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        return (
            f"{self.partition}: {self.acknowledged} acknowledged records, {self.read} read back,"
            f" {self.unknown_present} unacknowledged present, {self.duplicates} duplicates,"
            f" {len(self.problems)} problems"
        )

    def _problem(self, text: str, counted: list[int]) -> None:
        counted[0] += 1
        if counted[0] <= PROBLEMS_LISTED_MAX:
            self.problems.append(text)


def check_partition(
    partition: str,
    acknowledged: Mapping[int, bytes],
    sent: Iterable[bytes],
    read: Iterable[tuple[int, bytes]],
    log_start_offset: int = 0,
) -> DataCheck:
    """Check one partition: ``acknowledged`` maps each offset a producer was given to the value
    it wrote there; ``sent`` is every value any producer sent (acknowledged or not); ``read``
    is the partition's log as (offset, value) from ``log_start_offset`` to its end."""
    result = DataCheck(partition, acknowledged=len(acknowledged))
    counted = [0]
    sent_values = set(sent)
    acknowledged_values = set(acknowledged.values())
    stored: dict[int, bytes] = {}
    copies: Counter[bytes] = Counter()
    expected = log_start_offset
    for offset, value in read:
        result.read += 1
        if offset != expected:
            result._problem(
                f"{partition}: offset {offset} read where {expected} was next: the log is not"
                " dense",
                counted,
            )
        expected = offset + 1
        stored[offset] = value
        copies[value] += 1
        if value not in sent_values:
            result._problem(
                f"{partition}: offset {offset} holds a record no producer sent ({value[:16]!r}...)",
                counted,
            )
        elif value not in acknowledged_values and copies[value] == 1:
            result.unknown_present += 1
    result.duplicates = sum(n - 1 for n in copies.values() if n > 1)
    for offset in sorted(acknowledged):
        value = acknowledged[offset]
        if offset < log_start_offset:
            continue  # removed by retention, not lost
        found = stored.get(offset)
        if found is None:
            result._problem(
                f"{partition}: the record acknowledged at offset {offset} is gone (the log ends"
                f" at {expected})",
                counted,
            )
        elif found != value:
            result._problem(
                f"{partition}: offset {offset} holds another record than the one acknowledged"
                " there",
                counted,
            )
    if counted[0] > PROBLEMS_LISTED_MAX:
        result.problems.append(
            f"{partition}: ... and {counted[0] - PROBLEMS_LISTED_MAX} more problems"
        )
    return result
