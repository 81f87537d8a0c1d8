"""What the leader of one partition knows of its followers (Kafka's ``Partition`` on the leader:
its ``Replica`` states and ``IsrState``), as plain state: no I/O, no clock of its own, no loop.
The replica manager (``manager.py``) feeds it the followers' fetches and the metadata image and
carries out what it asks for (an AlterPartition, a high watermark move).

Rules (docs/replication.md#the-leader):

- A follower's log end offset is the offset of its last Fetch in this leader epoch; unknown
  (-1) until it fetches. A follower is caught up at a fetch whose offset reaches the leader's
  log end offset at that moment, or the log end offset of its previous fetch (Kafka's
  ``lastCaughtUpTimeMs`` rule: a follower that keeps fetching everything there was when it
  last asked is not lagging, however fast the leader appends).
- The high watermark is the smallest log end offset among the *maximal* ISR: the committed ISR
  plus a replica an AlterPartition in flight adds (KIP-841: a replica counts for the high
  watermark as soon as the leader asks to add it, so acks=all never waits on the
  controller), the leader's own log end offset included. It never moves backwards.
- ISR expansion: a replica outside the ISR whose log end offset reached the high watermark and
  the start of the current leader epoch, and that the image shows registered and unfenced, is
  added. ISR shrink: an ISR member not caught up for ``replica.lag.time.max.ms`` is removed;
  the leader never removes itself. One AlterPartition at a time per partition; its answer or
  the next image ends it.
- acks=all: ``min.insync.replicas`` is checked against the committed ISR, before the append
  (NOT_ENOUGH_REPLICAS) and once the high watermark passed the batch
  (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from quorum.ids import Uuid

__all__ = ["FollowerState", "PartitionLeader"]

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = -1
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET


@dataclass(slots=True)
class PartitionLeader:
    topic_id: Uuid
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    """The committed ISR (the image's, or an AlterPartition's answer)."""
    epoch_start_offset: int
    """The leader's log end offset when it became leader in this epoch."""
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None
    """The ISR an AlterPartition in flight asks for."""

    @classmethod
    def start(
        cls,
        topic_id: Uuid,
        partition: int,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        log_end_offset: int,
        now_ms: int,
    ) -> PartitionLeader:
        """A new leadership: followers are given the benefit of the doubt until
        ``replica.lag.time.max.ms`` from now (Kafka resets their caught-up time too)."""
        leader = cls(
            topic_id,
            partition,
            leader_id,
            leader_epoch,
            partition_epoch,
            replicas,
            isr,
            log_end_offset,
        )
        for replica in replicas:
            if replica != leader_id:
                leader.followers[replica] = FollowerState(last_caught_up_ms=now_ms)
        return leader

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    def update(
        self, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...], now_ms: int
    ) -> None:
        """The image's state of the partition in this leader epoch (a newer partition epoch
        replaces what the leader had; an older one, seen after an AlterPartition's answer, is
        ignored)."""
        if partition_epoch < self.partition_epoch:
            return
        if partition_epoch > self.partition_epoch:
            self.pending_isr = None
        self.partition_epoch = partition_epoch
        self.isr = isr
        if replicas != self.replicas:
            for replica in replicas:
                if replica != self.leader_id and replica not in self.followers:
                    self.followers[replica] = FollowerState(last_caught_up_ms=now_ms)
            for gone in set(self.followers) - set(replicas):
                del self.followers[gone]
            self.replicas = replicas

    def committed(self, partition_epoch: int, isr: tuple[int, ...]) -> None:
        """An AlterPartition was answered with this state."""
        self.pending_isr = None
        if partition_epoch > self.partition_epoch:
            self.partition_epoch = partition_epoch
            self.isr = isr

    def follower_fetched(
        self, replica_id: int, fetch_offset: int, leader_end_offset: int, now_ms: int
    ) -> None:
        follower = self.followers.get(replica_id)
        if follower is None:
            return
        if fetch_offset >= leader_end_offset:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_end_offset >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now_ms
        follower.last_fetch_leader_end_offset = leader_end_offset

    def high_watermark(self, leader_end_offset: int) -> int:
        """The offset every member of the maximal ISR has reached (-1 while one has not
        fetched in this leader epoch)."""
        low = leader_end_offset
        for replica in self.maximal_isr:
            if replica == self.leader_id:
                continue
            follower = self.followers.get(replica)
            low = min(low, UNKNOWN_OFFSET if follower is None else follower.log_end_offset)
        return low

    def expansion(self, high_watermark: int, eligible: Collection[int]) -> tuple[int, ...] | None:
        """The ISR with every caught-up, eligible replica added, or None (nothing to add, or an
        AlterPartition in flight)."""
        if self.pending_isr is not None:
            return None
        added = [
            replica
            for replica, follower in self.followers.items()
            if replica not in self.isr
            and replica in eligible
            and follower.log_end_offset >= max(high_watermark, self.epoch_start_offset)
        ]
        if not added:
            return None
        return tuple(r for r in self.replicas if r in self.isr or r in added)

    def shrink(self, now_ms: int, lag_time_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without the members not caught up for ``lag_time_max_ms``, or None."""
        if self.pending_isr is not None:
            return None
        lagging = {
            replica
            for replica in self.isr
            if replica != self.leader_id
            and (follower := self.followers.get(replica)) is not None
            and now_ms - follower.last_caught_up_ms > lag_time_max_ms
        }
        if not lagging:
            return None
        return tuple(r for r in self.isr if r not in lagging)
