"""The segmented log's epoch cache (Kafka's ``LeaderEpochFileCache``, kept in memory only).

For each epoch in the log, the base offset of its first batch, both ascending. Recovery
(``quorum.storage.log_recovery``) builds it from the frames when a log is opened, so it needs no
file of its own; ``SegmentedLog`` (``quorum.storage.log``) extends it on append, cuts it on
truncation and cleaning, and answers ``end_offset_for_epoch`` from its two lists (O(log n) in
the number of epochs).
"""

from __future__ import annotations

import bisect

__all__ = ["EpochCache"]


class EpochCache:
    """The first offset of each epoch of the log, ascending (see the module docstring).

    ``epochs`` and ``start_offsets`` are public so that the append path and
    ``end_offset_for_epoch`` read them without a call; only the methods change them.
    """

    __slots__ = ("epochs", "start_offsets")

    def __init__(self, epochs: list[int], start_offsets: list[int]) -> None:
        self.epochs = epochs
        self.start_offsets = start_offsets

    def extend(self, epochs: list[int], start_offsets: list[int]) -> None:
        """Add epochs that start after every epoch cached (appended batches)."""
        self.epochs.extend(epochs)
        self.start_offsets.extend(start_offsets)

    def clear(self) -> None:
        self.epochs = []
        self.start_offsets = []

    def truncate_from_end(self, log_end_offset: int) -> None:
        """Forget the epochs that start at or after ``log_end_offset`` (the log was cut there)."""
        while self.start_offsets and self.start_offsets[-1] >= log_end_offset:
            self.start_offsets.pop()
            self.epochs.pop()

    def truncate_from_start(self, log_start_offset: int, log_end_offset: int) -> None:
        """Kafka's ``truncateFromStart``: the epoch holding the new start now starts there."""
        if log_start_offset >= log_end_offset:
            self.clear()
            return
        index = bisect.bisect_right(self.start_offsets, log_start_offset) - 1
        if index < 0:
            return
        self.epochs = self.epochs[index:]
        self.start_offsets = [log_start_offset, *self.start_offsets[index + 1 :]]

    def check_invariants(self, log_start_offset: int, log_end_offset: int) -> None:
        assert len(self.epochs) == len(self.start_offsets)
        if self.start_offsets:
            assert self.start_offsets[0] >= log_start_offset
            assert self.start_offsets[-1] < log_end_offset
