"""The leader's fetch purgatory (Kafka's ``fetchPurgatory``): long-poll Fetches parked until
there is news for the fetcher or their wait runs out.

One parked Fetch per replica: a newer Fetch from the same replica completes the older one.
The purgatory only keeps the requests; the leader builds the answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.raft.messages import Envelope, FetchRequest


@dataclass(slots=True)
class ParkedFetch:
    envelope: Envelope  # its message is a FetchRequest
    deadline_ms: int

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

    def park(self, replica_id: int, envelope: Envelope, deadline_ms: int) -> None:
        assert replica_id not in self._parked, replica_id
        self._parked[replica_id] = ParkedFetch(envelope, deadline_ms)

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
        self, now_ms: int, log_end_offset: int, high_watermark: int | None = None
    ) -> list[Envelope]:
        """The parked Fetches whose wait is over or that the log now has data for, and, given
        ``high_watermark``, those of fetchers that know an older one."""
        done = [
            replica_id
            for replica_id, parked in self._parked.items()
            if parked.deadline_ms <= now_ms
            or parked.request.fetch_offset < log_end_offset
            or (high_watermark is not None and parked.request.high_watermark < high_watermark)
        ]
        return [self._parked.pop(replica_id).envelope for replica_id in done]

    def deadlines_ms(self) -> list[int]:
        return [p.deadline_ms for p in self._parked.values()]

    def __len__(self) -> int:
        return len(self._parked)

    def __contains__(self, replica_id: int) -> bool:
        return replica_id in self._parked
