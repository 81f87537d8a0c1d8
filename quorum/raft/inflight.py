"""The requests a node has sent and not yet seen answered (Kafka's ``RequestManager``).

Each outbound request is remembered by the correlation id the core chose, with its kind, the
epoch it was sent in and when it counts as failed. Answers are matched by correlation id; an
answer to a request the node no longer tracks is dropped.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass


class RequestKind(enum.Enum):
    """What an in-flight request asks. The values name the kind in events and logs."""

    VOTE = "vote"
    PRE_VOTE = "pre_vote"  # a VoteRequest with pre_vote set (KIP-996)
    BEGIN_QUORUM_EPOCH = "begin_epoch"
    END_QUORUM_EPOCH = "end_epoch"
    FETCH = "fetch"


@dataclass(slots=True)
class InflightRequest:
    destination: int
    kind: RequestKind
    epoch: int
    deadline_ms: int


class InflightRequests:
    """Outbound requests by correlation id, in the order they were sent."""

    __slots__ = ("_by_correlation_id",)

    def __init__(self) -> None:
        self._by_correlation_id: dict[int, InflightRequest] = {}

    def add(self, correlation_id: int, request: InflightRequest) -> None:
        assert correlation_id not in self._by_correlation_id, correlation_id
        self._by_correlation_id[correlation_id] = request

    def pop(self, correlation_id: int) -> InflightRequest | None:
        """The request this answer belongs to, no longer in flight; None if unknown."""
        return self._by_correlation_id.pop(correlation_id, None)

    def pop_expired(self, now_ms: int) -> list[InflightRequest]:
        """Remove and return the requests whose deadline has passed, in the order sent."""
        expired = [
            (cid, r) for cid, r in self._by_correlation_id.items() if r.deadline_ms <= now_ms
        ]
        for cid, _ in expired:
            del self._by_correlation_id[cid]
        return [r for _, r in expired]

    def retain_fetches_of(self, epoch: int) -> None:
        """A new epoch state began: only Fetches of its epoch stay in flight (their answers
        still carry news); every other answer is ignored from now on."""
        self._by_correlation_id = {
            cid: r
            for cid, r in self._by_correlation_id.items()
            if r.kind is RequestKind.FETCH and r.epoch == epoch
        }

    def has(self, kind: RequestKind) -> bool:
        return any(r.kind is kind for r in self._by_correlation_id.values())

    def deadlines_ms(self) -> Iterator[int]:
        return (r.deadline_ms for r in self._by_correlation_id.values())

    def __len__(self) -> int:
        return len(self._by_correlation_id)
