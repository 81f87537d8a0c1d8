"""Following the end of a metadata log directory that a running node appends to: where its
complete batches end, which epoch wrote each offset, and where in its segment each batch
starts. The streaming source (``quorum.analytics.stream``) asks it on the driver, once per
micro-batch.

What counts as the end. A node's files do not record its high watermark (KRaft keeps it in
memory: ``quorum-state`` holds the election, not the commit point), so the end is the last
complete batch: the batches whose frames are whole and CRC-valid, in dense offsets, up to the
first torn or not yet written frame of the active segment, as ``log dump`` and the batch source
read it. On a node that is not the leader, or on the leader between its append and the commit,
that end may be ahead of the quorum's high watermark; a batch that was never committed can later
be truncated away and written again by a new leader (another epoch at the same offsets). The
tail notices: the last batch it counted is checked again (its 25 header bytes, CRC included) on
every ``advance``, and after any change it scans again from the anchor the caller asks for, so
``epoch_of`` then answers with the epochs now on disk.

Bounded work. Each ``advance`` reads only what was appended since the last one (one listing of
the directory and the new bytes of the segments after the position reached), and remembers the
base offset and byte position of the most recent ``BATCHES_REMEMBERED`` batches, so that a
micro-batch starts reading at its first batch instead of at its segment's start.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quorum.analytics.log_files import LogFile, LogReadError, list_log_files
from quorum.storage.frames import FRAME_HEADER_BYTES, check_frame

__all__ = ["BATCHES_REMEMBERED", "LogTail", "TailPosition"]

# Batch positions kept for ``position_of`` (a few MiB); older ones fall back to a segment walk.
BATCHES_REMEMBERED: Final = 200_000
# At most this much of a segment is read into memory at once while scanning.
_SCAN_CHUNK_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TailPosition:
    """Where a batch starts: its segment's path and the byte position of its frame."""

    path: str
    position: int


@dataclass(frozen=True, slots=True)
class _Counted:
    """The last batch counted: its segment, position and header bytes (CRC included)."""

    path: str
    position: int
    header: bytes


class LogTail:
    """The complete batches of one ``__cluster_metadata-0`` directory, followed as it grows.

    ``advance(anchor)`` brings ``end_offset`` up to the last complete batch; ``anchor`` is the
    lowest offset whose epoch and position the caller needs (a stream's next offset minus one):
    the tail's knowledge starts at the segment holding it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.log_start_offset = 0
        self._segment: LogFile | None = None  # the segment being scanned
        self._position = 0  # in it: where the next frame starts
        self._next_offset = 0  # the offset of that frame's first record
        self._counted: _Counted | None = None
        self._known_from = 0  # the first offset epoch_of and position_of know about
        self._epoch_starts: list[int] = []  # offsets where a new epoch starts (ascending)
        self._epochs: list[int] = []  # ... and that epoch
        self._bases: list[int] = []  # base offsets of the batches remembered (ascending)
        self._positions: list[TailPosition] = []

    @property
    def end_offset(self) -> int:
        """The offset after the last complete batch (as of the last ``advance``)."""
        return self._next_offset

    @property
    def known_from(self) -> int:
        return self._known_from

    def epoch_of(self, offset: int) -> int | None:
        """The epoch of the batch holding ``offset``, if the tail knows it."""
        if offset < self._known_from or offset >= self._next_offset or not self._epochs:
            return None
        index = bisect.bisect_right(self._epoch_starts, offset) - 1
        return self._epochs[index] if index >= 0 else None

    def position_of(self, offset: int) -> TailPosition | None:
        """Where the batch holding ``offset`` starts, if it is among the batches remembered."""
        if not self._bases or offset < self._bases[0] or offset >= self._next_offset:
            return None
        return self._positions[bisect.bisect_right(self._bases, offset) - 1]

    def advance(self, anchor: int) -> None:
        """Scan what was appended since the last call. Starts over from the segment holding
        ``anchor`` when the tail knows nothing from there, or when the last batch it counted is
        no longer on disk as it was (truncated, rewritten, or its segment deleted).
        Raises ``LogReadError`` for a directory that is not there or offsets out of sequence."""
        segments, _ = list_log_files(self.path)
        self.log_start_offset = segments[0].base_offset if segments else self._next_offset
        # An anchor before the log start (deleted segments) cannot be known: the caller sees
        # it from log_start_offset.
        anchor = max(anchor, self.log_start_offset)
        if self._segment is None or anchor < self._known_from or not self._counted_unchanged():
            self._reset(segments, anchor)
        if self._segment is None:
            return
        while True:
            current = self._segment
            listed = next((s for s in segments if s.path == current.path), None)
            if listed is None:  # deleted under us (retention): start over next time
                self._segment = None
                return
            complete = self._scan(listed)
            later = [s for s in segments if s.base_offset > listed.base_offset]
            if not later or not complete:
                return
            following = later[0]
            if following.base_offset != self._next_offset:
                raise LogReadError(
                    listed.path,
                    self._position,
                    f"the segment ends at offset {self._next_offset} but the next segment "
                    f"{Path(following.path).name} starts at offset {following.base_offset} "
                    "(a missing, extra or renamed segment)",
                )
            self._segment, self._position = following, 0

    def _counted_unchanged(self) -> bool:
        counted = self._counted
        if counted is None:
            return True
        try:
            with open(counted.path, "rb") as f:
                f.seek(counted.position)
                return f.read(FRAME_HEADER_BYTES) == counted.header
        except FileNotFoundError:
            return False

    def _reset(self, segments: list[LogFile], anchor: int) -> None:
        holding = [s for s in segments if s.base_offset <= anchor]
        start = holding[-1] if holding else (segments[0] if segments else None)
        self._segment = start
        self._position = 0
        self._next_offset = start.base_offset if start is not None else self.log_start_offset
        self._known_from = self._next_offset
        self._counted = None
        self._epoch_starts, self._epochs = [], []
        self._bases, self._positions = [], []

    def _scan(self, segment: LogFile) -> bool:
        """Count the complete frames of ``segment`` from the position reached up to its size
        at listing. True when every byte listed was a whole frame (the segment may continue in
        the next one), False when it stopped at a frame not (yet) whole."""
        while self._position < segment.size_bytes:
            stop = min(segment.size_bytes, self._position + _SCAN_CHUNK_BYTES)
            data = _read(segment.path, self._position, stop)
            consumed = self._count_frames(segment.path, data)
            if consumed == 0:
                # A frame larger than the chunk: read up to the size listed, once.
                if stop < segment.size_bytes:
                    data = _read(segment.path, self._position, segment.size_bytes)
                    consumed = self._count_frames(segment.path, data)
                if consumed == 0:
                    return False
            self._position += consumed
            if self._position < stop and stop == segment.size_bytes:
                return False  # the active segment's tail (or a frame still being written)
        return True

    def _count_frames(self, path: str, data: bytes) -> int:
        pos = 0
        while True:
            header = check_frame(data, pos)
            if isinstance(header, str):
                return pos
            if header.base_offset != self._next_offset:
                raise LogReadError(
                    path,
                    self._position + pos,
                    f"a batch with base offset {header.base_offset} where offset "
                    f"{self._next_offset} was expected (offsets must be dense)",
                )
            if not self._epochs or self._epochs[-1] != header.epoch:
                self._epoch_starts.append(header.base_offset)
                self._epochs.append(header.epoch)
            at = TailPosition(path, self._position + pos)
            self._bases.append(header.base_offset)
            self._positions.append(at)
            if len(self._bases) > 2 * BATCHES_REMEMBERED:
                del self._bases[:BATCHES_REMEMBERED], self._positions[:BATCHES_REMEMBERED]
            self._counted = _Counted(path, at.position, bytes(data[pos : pos + FRAME_HEADER_BYTES]))
            self._next_offset = header.base_offset + header.record_count
            pos += header.frame_bytes


def _read(path: str, start: int, stop: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max(stop - start, 0))
    except FileNotFoundError:
        return b""  # deleted since it was listed: nothing more to count in it
