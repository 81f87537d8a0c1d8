"""The Raft core's in-memory view of the replicated log.

The core keeps every batch of the log in memory (the metadata log is small and snapshots bound
it); the driver mirrors each change onto disk through ``Ready`` (see ``quorum.raft.node``). This
class only keeps offsets, epochs and the high watermark consistent; it never touches a file.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterator
from dataclasses import dataclass

from quorum.metadata.batch import LogBatch


class FetchPosition(enum.Enum):
    """Where a fetcher's log stands against the leader's (Kafka's ``ValidOffsetAndEpoch.Kind``)."""

    VALID = "valid"  # the fetcher's log is a prefix of this one: send what follows
    DIVERGING = "diverging"  # it must truncate to the end of ``epoch`` first
    SNAPSHOT = "snapshot"  # it is behind the log start: it must load the snapshot first


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    """The answer of ``RaftLog.validate_offset_and_epoch``: for DIVERGING, the largest epoch
    both logs may share and where it ends here; for SNAPSHOT, the snapshot's epoch and end."""

    position: FetchPosition
    epoch: int
    end_offset: int


class RaftLog:
    """Batches in offset order, an epoch cache, and the high watermark.

    Invariants (checked by ``check``): batches are contiguous from ``log_start_offset``; epochs
    never decrease along the log; ``high_watermark <= log_end_offset``.
    """

    def __init__(
        self,
        batches: list[LogBatch] | None = None,
        log_start_offset: int = 0,
        snapshot_epoch: int = 0,
    ) -> None:
        """``log_start_offset`` > 0: everything before it is in a snapshot whose last record
        has ``snapshot_epoch`` (KIP-630); the log continues after it."""
        self._batches: list[LogBatch] = []
        self._base_offsets: list[int] = []
        # (epoch, start_offset) for each epoch of the batches in the log, in order (Kafka's
        # LeaderEpochFileCache). Answers end_offset_for_epoch in O(log n).
        self._epochs: list[tuple[int, int]] = []
        self.log_start_offset = log_start_offset
        self.snapshot_epoch = snapshot_epoch
        self._log_end_offset = log_start_offset
        self.high_watermark = log_start_offset
        for batch in batches or []:
            self.append(batch)

    # ----- reads ----------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        """Epoch of the last record in the log or, for an empty log, of its snapshot (0 for a
        new log: the primordial epoch)."""
        return self._epochs[-1][0] if self._epochs else self.snapshot_epoch

    def __len__(self) -> int:
        return len(self._batches)

    def batch_index(self, offset: int) -> int:
        """Index of the batch that contains ``offset`` (which must be in the log)."""
        assert self.log_start_offset <= offset < self._log_end_offset, (offset, self)
        return bisect.bisect_right(self._base_offsets, offset) - 1

    def is_batch_boundary(self, offset: int) -> bool:
        if offset in (self._log_end_offset, self.log_start_offset):
            return True
        index = bisect.bisect_left(self._base_offsets, offset)
        return index < len(self._base_offsets) and self._base_offsets[index] == offset

    def read(self, from_offset: int, max_bytes: int) -> tuple[LogBatch, ...]:
        """Batches from the one starting at ``from_offset``: at least one, then up to
        ``max_bytes`` of data in total."""
        if from_offset >= self._log_end_offset:
            return ()
        index = self.batch_index(from_offset)
        out: list[LogBatch] = []
        size = 0
        for batch in self._batches[index:]:
            if out and size + len(batch.data) > max_bytes:
                break
            out.append(batch)
            size += len(batch.data)
        return tuple(out)

    def batches_between(self, start_offset: int, end_offset: int) -> Iterator[LogBatch]:
        """Every batch whose offsets lie in [start_offset, end_offset); both are boundaries."""
        if start_offset >= end_offset:
            return
        index = self.batch_index(start_offset)
        for batch in self._batches[index:]:
            if batch.base_offset >= end_offset:
                return
            yield batch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's ``endOffsetForEpoch``: the largest epoch <= ``epoch`` in the log and the
        offset where it ends. The snapshot's epoch ends at the log start. ``(0,
        log_start_offset)`` when no such epoch is known (older than the snapshot, or a new log).
        """
        index = bisect.bisect_right(self._epochs, (epoch, float("inf"))) - 1
        if index < 0:
            if self.log_start_offset > 0 and epoch >= self.snapshot_epoch:
                return self.snapshot_epoch, self.log_start_offset
            return 0, self.log_start_offset
        found_epoch = self._epochs[index][0]
        if index + 1 < len(self._epochs):
            return found_epoch, self._epochs[index + 1][1]
        return found_epoch, self._log_end_offset

    def validate_offset_and_epoch(
        self, offset: int, last_fetched_epoch: int
    ) -> ValidOffsetAndEpoch:
        """Kafka's ``validateOffsetAndEpoch``: does a fetcher whose log ends at ``offset``, its
        last batch of ``last_fetched_epoch``, agree with this log? A divergence that lies
        inside the snapshot, or an offset below the log start, sends it to the snapshot."""
        has_snapshot = self.log_start_offset > 0
        snapshot = ValidOffsetAndEpoch(
            FetchPosition.SNAPSHOT, self.snapshot_epoch, self.log_start_offset
        )
        if has_snapshot and offset < self.log_start_offset:
            return snapshot
        if offset > self.log_start_offset or last_fetched_epoch > 0:
            epoch, end_offset = self.end_offset_for_epoch(last_fetched_epoch)
            if epoch != last_fetched_epoch or end_offset < offset:
                if has_snapshot and end_offset <= self.log_start_offset:
                    return snapshot
                return ValidOffsetAndEpoch(FetchPosition.DIVERGING, epoch, end_offset)
        return ValidOffsetAndEpoch(FetchPosition.VALID, last_fetched_epoch, offset)

    def epoch_of(self, offset: int) -> int:
        if offset < self.log_start_offset:
            raise IndexError(f"offset {offset} is in the snapshot before {self.log_start_offset}")
        return self._batches[self.batch_index(offset)].epoch

    # ----- writes ---------------------------------------------------------------------------

    def append(self, batch: LogBatch) -> None:
        assert batch.base_offset == self._log_end_offset, (batch, self._log_end_offset)
        assert batch.epoch >= self.last_fetched_epoch, (batch, self.last_fetched_epoch)
        if not self._epochs or self._epochs[-1][0] != batch.epoch:
            self._epochs.append((batch.epoch, batch.base_offset))
        self._batches.append(batch)
        self._base_offsets.append(batch.base_offset)
        self._log_end_offset = batch.end_offset

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a batch boundary, >= high watermark)."""
        assert offset >= self.high_watermark, ("truncation below the high watermark", offset)
        assert self.is_batch_boundary(offset), ("truncation inside a batch", offset)
        if offset >= self._log_end_offset:
            return
        index = bisect.bisect_left(self._base_offsets, offset)
        del self._batches[index:]
        del self._base_offsets[index:]
        self._log_end_offset = offset
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()

    def delete_before(self, offset: int) -> None:
        """Drop the batches that end at or before ``offset`` (they are in a snapshot now); the
        log then starts at ``offset``, which must be a batch boundary at or below the high
        watermark (only committed data is snapshotted)."""
        assert offset <= self.high_watermark, ("compaction past the high watermark", offset)
        assert self.is_batch_boundary(offset), ("compaction inside a batch", offset)
        if offset <= self.log_start_offset:
            return
        epoch = self.epoch_of(offset - 1)
        index = bisect.bisect_left(self._base_offsets, offset)
        del self._batches[:index]
        del self._base_offsets[:index]
        kept = [(e, start) for e, start in self._epochs if start >= offset]
        if self._batches and (not kept or kept[0][1] != offset):
            kept.insert(0, (self._batches[0].epoch, offset))
        self._epochs = kept
        self.log_start_offset = offset
        self.snapshot_epoch = epoch

    def reset_to_snapshot(self, end_offset: int, epoch: int) -> None:
        """Replace the whole log by a snapshot ending at ``end_offset`` (a follower that was
        too far behind installed the leader's snapshot)."""
        assert end_offset >= self.high_watermark, ("snapshot behind the high watermark", end_offset)
        self._batches = []
        self._base_offsets = []
        self._epochs = []
        self.log_start_offset = end_offset
        self.snapshot_epoch = epoch
        self._log_end_offset = end_offset
        self.high_watermark = end_offset

    def update_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward (never back). Returns whether it moved."""
        assert offset <= self._log_end_offset, (offset, self._log_end_offset)
        if offset <= self.high_watermark:
            return False
        self.high_watermark = offset
        return True

    def check(self) -> None:
        assert self.high_watermark <= self._log_end_offset
        assert self.log_start_offset <= self.high_watermark

    def __repr__(self) -> str:
        return (
            f"RaftLog(start={self.log_start_offset}, end={self._log_end_offset}, "
            f"hw={self.high_watermark}, batches={len(self._batches)}, "
            f"last_epoch={self.last_fetched_epoch})"
        )
