"""What the core hands its driver (``Ready``, ``RaftEvent``, ``Proposal``) and the two errors a
proposal can meet (``NotLeaderError``, ``BatchTooLargeError``). ``quorum.raft.node`` re-exports
them: the shells import them from there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from quorum.metadata.batch import LogBatch
from quorum.raft.election import ElectionState
from quorum.raft.messages import Envelope, SnapshotId
from quorum.raft.prefix_divergence import PrefixDivergence


class NotLeaderError(Exception):
    """A proposal reached a node that is not the leader. Retriable elsewhere."""

    retriable: ClassVar[bool] = True
    refresh_leader = True

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader (leader: {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class BatchTooLargeError(ValueError):
    """One proposal does not fit in one batch (records or bytes over the limit)."""

    retriable: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class RaftEvent:
    """A fact worth one log line (``became_leader``, ``vote_granted``, ...). The core does not
    log; the driver renders these, and the simulator keeps them in its trace."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ready:
    """What the driver must do, in this order.

    1. ``election_to_persist`` and then ``truncate_to`` / ``entries_to_append`` must be durable
       (fsynced) BEFORE any of ``messages_to_send`` leaves the node: votes, acknowledgements
       and fetch offsets promise durability.
    2. Send ``messages_to_send``.
    3. Apply ``committed_batches`` (offsets below ``high_watermark``), in order.
    4. Call ``RaftNode.advance(ready)``; only then step or poll again.
    5. Poll again at ``next_poll_at_ms`` at the latest.

    ``truncate_to`` is never below ``high_watermark`` (I7): the driver hands the high
    watermark to the log's truncation, which refuses to cut below it.
    """

    election_to_persist: ElectionState | None
    truncate_to: int | None
    entries_to_append: tuple[LogBatch, ...]
    messages_to_send: tuple[Envelope, ...]
    committed_batches: tuple[LogBatch, ...]
    high_watermark: int
    next_poll_at_ms: int
    events: tuple[RaftEvent, ...]
    # Fetch this snapshot from this leader, then call ``install_snapshot`` (or
    # ``snapshot_fetch_failed``): this node is behind the leader's log start.
    snapshot_to_fetch: tuple[int, SnapshotId] | None = None
    # The leader's answer would cut the committed prefix (quorum.raft.prefix_divergence): a
    # voter's shell stops the process; an observer's discards its local log, snapshots and
    # image, then calls ``discard_diverged_log``. No Fetch goes out until then.
    prefix_diverged: PrefixDivergence | None = None

    @property
    def needs_flush(self) -> bool:
        return bool(self.entries_to_append) or self.truncate_to is not None


@dataclass(frozen=True, slots=True)
class Proposal:
    """Where a proposal will land if the epoch that accepted it commits it."""

    epoch: int
    base_offset: int
    last_offset: int
