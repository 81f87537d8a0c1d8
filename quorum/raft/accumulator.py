"""The leader's open batch (Kafka's ``BatchAccumulator``).

Proposals accepted by the leader wait here until the batch is drained into the log: at the next
poll (the driver already groups what arrived during one fsync), after ``append_linger_ms``, when
the next proposal would overflow it, or when the leader resigns. Each proposal stays whole
inside one batch, so an operation's records commit or vanish together.
"""

from __future__ import annotations

from collections.abc import Sequence

from quorum.metadata.batch import LogBatch, encode_batch
from quorum.metadata.records import Record
from quorum.raft.config import RaftConfig


class BatchAccumulator:
    """Records of one leader epoch not yet in the log, with their encoded size."""

    __slots__ = ("_bytes", "_config", "_epoch", "_held", "_loaded", "_records", "_since_ms")

    def __init__(self, epoch: int, config: RaftConfig) -> None:
        self._epoch = epoch
        self._config = config
        self._records: list[Record] = []
        self._bytes = 0
        self._since_ms = 0  # when the first record of the open batch arrived
        # The open batch waited for an earlier one to commit (the leader is under load) ...
        self._loaded = False
        # ... and, that one committed, is held until adaptive_batch_age_min_ms.
        self._held = False

    @property
    def record_count(self) -> int:
        return len(self._records)

    def is_empty(self) -> bool:
        return not self._records

    def fits(self, record_count: int, size_bytes: int) -> bool:
        """Whether a proposal of this size still fits in the open batch."""
        return (
            len(self._records) + record_count <= self._config.records_per_batch_max
            and self._bytes + size_bytes <= self._config.batch_bytes_max
        )

    def append(self, records: Sequence[Record], size_bytes: int, now_ms: int) -> None:
        """Add one proposal (already known to fit) to the open batch."""
        if not self._records:
            self._since_ms = now_ms
        self._records.extend(records)
        self._bytes += size_bytes

    def needs_drain(self, now_ms: int, *, in_flight: bool = False) -> bool:
        """Whether the open batch must go to the log at this poll. ``in_flight``: an earlier
        batch of this leader is not committed yet; with ``adaptive_batching`` the open batch
        then keeps growing until that batch commits (or the linger runs out, or it holds
        ``adaptive_batch_records_min`` records), so batches grow with the load; and once it
        has committed, a batch that waited is sealed no sooner than
        ``adaptive_batch_age_min_ms`` after its first record."""
        if not self._records:
            return False
        config = self._config
        age_ms = now_ms - self._since_ms
        if age_ms >= config.append_linger_ms:
            return True
        if config.adaptive_batching:
            if len(self._records) >= config.adaptive_batch_records_min:
                return True
            if in_flight:
                self._loaded = True
                self._held = False
                return False
            if self._loaded and age_ms < config.adaptive_batch_age_min_ms:
                self._held = True
                return False
            self._held = False  # the hold is over: the linger's deadline again
        return config.seal_batches_on_poll

    def drain_deadline_ms(self) -> int | None:
        """When the open batch must be looked at again: its linger runs out, or it is held
        and reaches ``adaptive_batch_age_min_ms``; None when it is empty."""
        if not self._records:
            return None
        config = self._config
        if self._held:
            return self._since_ms + min(config.adaptive_batch_age_min_ms, config.append_linger_ms)
        return self._since_ms + config.append_linger_ms

    def waits_until_ms(self, now_ms: int, *, in_flight: bool, queued: int = 0) -> int | None:
        """When the open batch is drained at the latest, while it waits (``in_flight``: an
        earlier batch is not committed yet; or it is held to ``adaptive_batch_age_min_ms``):
        a proposal made before then joins it all the same. None when it is empty, or would be
        drained at the next poll (also once ``queued`` more records would fill it to
        ``adaptive_batch_records_min``). Changes nothing (``needs_drain`` decides)."""
        config = self._config
        if not self._records or not config.adaptive_batching or not (in_flight or self._held):
            return None
        if len(self._records) + queued >= config.adaptive_batch_records_min:
            return None
        deadline = self.drain_deadline_ms()
        return deadline if deadline is not None and deadline > now_ms else None

    def drain(
        self, base_offset: int, now_ms: int, timestamp_ms: int | None = None
    ) -> LogBatch | None:
        """The open batch, encoded at ``base_offset`` and stamped ``timestamp_ms`` (default:
        ``now_ms``), and a fresh empty one; None if empty."""
        if not self._records:
            return None
        batch = encode_batch(
            base_offset=base_offset,
            epoch=self._epoch,
            timestamp_ms=now_ms if timestamp_ms is None else timestamp_ms,
            records=self._records,
        )
        self._records = []
        self._bytes = 0
        self._since_ms = 0
        self._loaded = self._held = False
        return batch
