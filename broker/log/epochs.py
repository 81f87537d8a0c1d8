"""A partition's leader-epoch cache (Kafka's ``LeaderEpochFileCache``): for each leader epoch
that wrote to the log, the offset of its first batch, kept in ``leader-epoch-checkpoint``
(Kafka's text format, ``broker/log/checkpoints.py``) and written atomically on every change.

It answers OffsetForLeaderEpoch (``end_offset_for``) and gives ListOffsets the epoch of an
offset (``epoch_for``). A new leader epoch is assigned at the base offset of its first batch;
truncation (recovery of a torn tail) drops the epochs that start at or past the new end, and
retention moves the first epoch's start up to the new log start offset, as Kafka's does.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path
from typing import Final

from broker.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CheckpointError,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from quorum.limits import LEADER_EPOCHS_MAX

__all__ = ["UNDEFINED_EPOCH", "LeaderEpochCache"]

# Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self.problem: str | None = None
        try:
            entries = read_epoch_checkpoint(self.path)
        except CheckpointError as exc:
            # Rebuilt from the batches by recovery (the log recovers from its start).
            self.problem = str(exc)
            entries = []
        self._epochs = [epoch for epoch, _ in entries]
        self._starts = [start for _, start in entries]

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def _write(self) -> None:
        write_epoch_checkpoint(self.path, self.entries)

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> None:
        """Epoch ``epoch`` starts at ``start_offset`` (its first batch's base offset). Entries
        of that epoch or later, or starting at or past that offset, are replaced (Kafka's
        rule). At most ``LEADER_EPOCHS_MAX`` are kept: past it the oldest is forgotten (its
        offsets then have no known epoch)."""
        if epoch < 0 or (self._epochs and epoch == self._epochs[-1]):
            return
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        if len(self._epochs) > LEADER_EPOCHS_MAX:
            del self._epochs[0]
            del self._starts[0]
        if write:
            self._write()

    def write(self) -> None:
        self._write()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the epochs that start at or past ``end_offset`` (the log was cut there)."""
        cut = len(self._starts)
        while cut and self._starts[cut - 1] >= end_offset:
            cut -= 1
        if cut != len(self._starts):
            del self._epochs[cut:]
            del self._starts[cut:]
            self._write()

    def clear(self) -> None:
        """Forget every epoch (the log was emptied to start again elsewhere)."""
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: epochs wholly before it go, the one holding
        it starts there."""
        below = bisect_right(self._starts, start_offset)
        if below == 0 or (below == 1 and self._starts[0] == start_offset):
            return
        del self._epochs[: below - 1]
        del self._starts[: below - 1]
        self._starts[0] = start_offset
        self._write()

    def epoch_for(self, offset: int) -> int:
        """The epoch that wrote ``offset`` (-1 if none is known)."""
        index = bisect_right(self._starts, offset)
        return self._epochs[index - 1] if index else UNDEFINED_EPOCH

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, Kafka's ``endOffsetFor``: the largest
        epoch at or below ``requested`` and the start of the epoch after it (the log end
        offset for the latest epoch); (-1, -1) for an epoch past every known one."""
        if requested == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested == self._epochs[-1]:
            return requested, log_end_offset
        higher = bisect_right(self._epochs, requested)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]
