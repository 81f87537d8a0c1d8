"""The leader's fetch purgatory (Kafka's ``fetchPurgatory``): long-poll Fetches parked until
there is news for the fetcher or their wait runs out.

One parked Fetch per replica: a newer Fetch from the same replica completes the older one.
The purgatory only keeps the requests; the leader builds the answers.

A parked Fetch whose fetcher knows an older high watermark than the leader's has news, but
only that: the leader answers it ``RaftConfig.high_watermark_notify_delay_ms`` after that
news arose *for that fetcher* (``news_since_ms``: when it parked behind, or when the high
watermark moved past what it knows), unless data comes first and carries the high watermark
along.
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.raft.messages import Envelope, FetchRequest


@dataclass(slots=True)
class ParkedFetch:
    envelope: Envelope  # its message is a FetchRequest
    deadline_ms: int
    # Since when the leader's high watermark is past the one this fetcher knows (None: it is
    # not).
    news_since_ms: int | None = None

    @property
    def request(self) -> FetchRequest:
        message = self.envelope.message
        assert isinstance(message, FetchRequest), message
        return message


class FetchPurgatory:
    """Parked Fetches by replica id, in the order they were parked."""

    __slots__ = ("_parked",)

    def __init__(self) -> None:
        self._parked: dict[int, ParkedFetch] = {}

    def park(
        self,
        replica_id: int,
        envelope: Envelope,
        deadline_ms: int,
        news_since_ms: int | None = None,
    ) -> None:
        """Park a Fetch until ``deadline_ms``; ``news_since_ms``: now, if the fetcher already
        knows an older high watermark than the leader's."""
        assert replica_id not in self._parked, replica_id
        self._parked[replica_id] = ParkedFetch(envelope, deadline_ms, news_since_ms)

    def high_watermark_moved(self, high_watermark: int, now_ms: int) -> None:
        """The leader's high watermark is now ``high_watermark``: a parked fetcher that knows
        an older one has news from ``now_ms`` on (or from earlier, if it had already)."""
        for parked in self._parked.values():
            if parked.news_since_ms is None and parked.request.high_watermark < high_watermark:
                parked.news_since_ms = now_ms

    def oldest_news_ms(self) -> int | None:
        """When the oldest high-watermark news of a parked fetcher arose; None: none has."""
        return min(
            (p.news_since_ms for p in self._parked.values() if p.news_since_ms is not None),
            default=None,
        )

    def pop(self, replica_id: int) -> Envelope | None:
        """The Fetch this replica has parked, if any, out of the purgatory."""
        parked = self._parked.pop(replica_id, None)
        return parked.envelope if parked is not None else None

    def pop_all(self) -> list[Envelope]:
        """Every parked Fetch, out of the purgatory (the high watermark moved, or the leader
        steps down)."""
        envelopes = [p.envelope for p in self._parked.values()]
        self._parked.clear()
        return envelopes

    def pop_completable(
        self, now_ms: int, log_end_offset: int, news_before_ms: int | None = None
    ) -> list[Envelope]:
        """The parked Fetches whose wait is over or that the log now has data for, and, given
        ``news_before_ms``, those whose high-watermark news arose at or before it."""
        done = [
            replica_id
            for replica_id, parked in self._parked.items()
            if parked.deadline_ms <= now_ms
            or parked.request.fetch_offset < log_end_offset
            or (
                news_before_ms is not None
                and parked.news_since_ms is not None
                and parked.news_since_ms <= news_before_ms
            )
        ]
        return [self._parked.pop(replica_id).envelope for replica_id in done]

    def deadlines_ms(self) -> list[int]:
        return [p.deadline_ms for p in self._parked.values()]

    def __len__(self) -> int:
        return len(self._parked)

    def __contains__(self, replica_id: int) -> bool:
        return replica_id in self._parked
