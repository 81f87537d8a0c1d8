"""The files the ``metaquorum`` data source reads (``quorum.analytics.source``): listing the
segments and checkpoints of a metadata log directory on the driver, the input partitions they
become, and walking the frames of one partition on the executors.

Partitions and reading. ``partitions()`` runs where Spark plans the query (the driver) and
only *lists* the directory (names and sizes): one input partition per segment file, or per
``splitBytes`` byte range of a larger one (carrying its path, its expected base offset, its size
at listing time and the range) and, with ``includeSnapshots``, one per checkpoint. ``read()``
runs on the executors and is the only code that opens the files, read-only. On a cluster the
path must therefore be visible under the same name to the driver and to every worker (a shared
file system: NFS, a Kubernetes volume, ...); for local mode any path works.

A byte range holds the batches whose frames *start* in it. Its reader starts at the batch the
segment's offset index (``NNNN.index``) names at or before the range, once the frame there has
a valid CRC and that base offset (else, with no index or a stale one, at the segment's start),
and walks the frames up to the range, checking them, so all ranges of a segment agree on where
batches begin and together read each batch exactly once. Only the last range of a segment
checks the hand-over to the next segment; epochs are checked to never go back within a range.

Each partition reads its file up to the size seen at listing, so a DataFrame is a stable
snapshot of the log as it was when planned (a re-run action sees the same rows; a new ``load``
sees newer batches). Frames are walked with the storage layer's reader
(``quorum.storage.frames.read_segment``, its byte-range variant), the one ``log dump`` and
recovery use, so they agree on where a log ends: damage after which no valid frame follows, in
this segment or a later one, is the tail of a log being appended (or a torn write that recovery
will cut) and reading stops at the last complete batch; damage followed by a valid frame, a batch
out of sequence, or a batch that does not decode is a ``LogReadError`` naming the file and byte
offset. Nothing is modified.
Unknown record types and versions are errors, never skipped rows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

from pyspark.sql.datasource import InputPartition

from quorum.storage.frames import (
    INDEX_ENTRY,
    CorruptFrameError,
    Tail,
    check_frame,
    read_segment,
)

__all__ = [
    "METADATA_PARTITION_DIR",
    "Frame",
    "LogFile",
    "LogFilePartition",
    "LogReadError",
    "iter_frames",
    "list_log_files",
]

METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"
_SEGMENT_NAME: Final = re.compile(r"^(\d{20})\.log$")
_CHECKPOINT_NAME: Final = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
# A range's first read covers the range and this much more for the batch that starts last in it
# (a larger one is read when met).
_WINDOW_SLACK_BYTES: Final = 1024 * 1024


class LogReadError(Exception):
    """The log cannot be read: corruption, an undecodable batch, a missing file or directory."""

    def __init__(self, path: str | Path, byte_offset: int | None, problem: str) -> None:
        self.path = str(path)
        self.byte_offset = byte_offset
        self.problem = problem
        where = self.path if byte_offset is None else f"{self.path} at byte {byte_offset}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries inside Spark
        return (type(self), (self.path, self.byte_offset, self.problem))


# ----- listing and partitions (the driver) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogFile:
    """A segment or checkpoint as listed: read later only up to ``size_bytes``."""

    path: str
    base_offset: int  # a segment's base offset; a checkpoint's end offset
    size_bytes: int
    snapshot_epoch: int | None = None  # set for checkpoints only

    @property
    def is_checkpoint(self) -> bool:
        return self.snapshot_epoch is not None


@dataclass(frozen=True)
class LogFilePartition(InputPartition):
    """One input partition: a segment (or a byte range of one) or a checkpoint, plus what
    reading it needs to know of the segments after it (for the torn-tail rule and the offset
    hand-over check)."""

    file: LogFile
    later_segments: tuple[LogFile, ...]
    start_offset: int
    end_offset: int | None
    # The batches whose frames start in [byte_start, byte_end) (None: the size at listing).
    byte_start: int = 0
    byte_end: int | None = None


def _log_directory(path: Path) -> Path:
    if not path.is_dir():
        raise LogReadError(path, None, "no such directory")
    names = os.listdir(path)
    has_log_files = any(_SEGMENT_NAME.match(n) or _CHECKPOINT_NAME.match(n) for n in names)
    if not has_log_files and (path / METADATA_PARTITION_DIR).is_dir():
        return path / METADATA_PARTITION_DIR
    return path


def list_log_files(path: str | Path) -> tuple[list[LogFile], list[LogFile]]:
    """The segments (by base offset) and checkpoints (by end offset) under ``path``: a
    ``__cluster_metadata-0`` directory or the ``metadata.log.dir`` holding one. Listing only:
    names and sizes, no file is opened."""
    directory = _log_directory(Path(path))
    segments: list[LogFile] = []
    checkpoints: list[LogFile] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            segment = _SEGMENT_NAME.match(entry.name)
            if segment is not None:
                size = entry.stat(follow_symlinks=False).st_size
                segments.append(LogFile(entry.path, int(segment.group(1)), size))
                continue
            checkpoint = _CHECKPOINT_NAME.match(entry.name)
            if checkpoint is not None:
                size = entry.stat(follow_symlinks=False).st_size
                end_offset, epoch = int(checkpoint.group(1)), int(checkpoint.group(2))
                checkpoints.append(LogFile(entry.path, end_offset, size, epoch))
    segments.sort(key=lambda f: f.base_offset)
    checkpoints.sort(key=lambda f: (f.base_offset, f.snapshot_epoch))
    return segments, checkpoints


# ----- frames (the executors) ---------------------------------------------------------------


class Frame(NamedTuple):  # a tuple: one per batch, built fast
    position: int  # in the file
    base_offset: int
    epoch: int
    record_count: int
    data: bytes | memoryview  # a view into the file's contents: no copy


def _read_range(file: LogFile, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of ``file`` (fewer if it was cut since it was listed)."""
    try:
        with open(file.path, "rb") as f:
            f.seek(start)
            return f.read(max(stop - start, 0))
    except FileNotFoundError:
        raise LogReadError(
            file.path,
            None,
            "the file was listed when the query was planned but is gone now (deleted behind a "
            "snapshot, or the log was truncated); load the log again",
        ) from None


def _read_prefix(file: LogFile) -> bytes:
    """The first ``size_bytes`` of ``file`` (fewer if it was cut since it was listed)."""
    return _read_range(file, 0, file.size_bytes)


def _index_hint(file: LogFile, position: int) -> tuple[int, int] | None:
    """(byte position, base offset) of the last batch at or before ``position`` that the
    segment's offset index names, if it has one. Only a hint: the caller checks the frame."""
    index_path = os.path.splitext(file.path)[0] + ".index"
    try:
        with open(index_path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    best = None
    usable = len(data) - len(data) % INDEX_ENTRY.size
    for offset, entry_position in INDEX_ENTRY.iter_unpack(data[:usable]):
        if entry_position > position or entry_position >= file.size_bytes:
            break  # entries are ascending
        if offset >= file.base_offset:
            best = (entry_position, offset)
    return best


class _Window:
    """The bytes of a file from ``origin`` (a frame boundary) to its size at listing, read
    up to ``stop`` first and the rest only if a frame or the tail rule needs it."""

    def __init__(self, file: LogFile, origin: int, stop: int) -> None:
        self.file = file
        self.origin = origin
        self.complete = stop >= file.size_bytes
        self.contents = _read_range(file, origin, min(stop, file.size_bytes))

    def read_rest(self) -> bool:
        """Read up to the size at listing; False if there was nothing more to read."""
        if self.complete:
            return False
        self.contents = _read_range(self.file, self.origin, self.file.size_bytes)
        self.complete = True
        return True

    def rest(self) -> bytes | None:
        """``read_rest`` as ``read_segment`` asks for it: the contents, or None."""
        return self.contents if self.read_rest() else None


def _open_window(partition: LogFilePartition, byte_end: int) -> tuple[_Window, int | None]:
    """The bytes to walk for the partition's byte range and the base offset expected at their
    start (None for a checkpoint, whose offsets are positions of its own). A range that does
    not start the file starts at the batch the offset index names at or before it, once the
    frame there proves to be that batch; else (no index, a stale one) at the file's start."""
    file = partition.file
    stop = byte_end + _WINDOW_SLACK_BYTES  # the range and the batch that starts last in it
    if file.is_checkpoint:
        return _Window(file, 0, stop), None
    hint = _index_hint(file, partition.byte_start) if partition.byte_start > 0 else None
    if hint is not None:
        position, offset = hint
        window = _Window(file, position, stop)
        header = check_frame(window.contents, 0)
        if isinstance(header, str) and window.read_rest():
            header = check_frame(window.contents, 0)
        if not isinstance(header, str) and header.base_offset == offset:
            return window, offset  # a true frame boundary: the walk from here is exact
    return _Window(file, 0, stop), file.base_offset


def iter_frames(partition: LogFilePartition) -> Iterator[Frame]:
    """The whole, CRC-valid frames of the partition's file that start in its byte range, in
    order, up to ``end_offset``; batches wholly before ``start_offset`` are left out.

    Stops quietly at a tail (damage no valid frame follows); raises ``LogReadError`` for
    anything else. A checkpoint is written whole and then renamed into place, so any damage in
    one is corruption. Frames between where the walk starts (``_open_window``) and the range
    are checked but not yielded, so every range of a segment agrees on where batches begin.
    """
    file = partition.file
    byte_start = partition.byte_start
    byte_end = file.size_bytes if partition.byte_end is None else partition.byte_end
    window, expected = _open_window(partition, byte_end)
    later_segments = ((Path(later.path), _read_prefix(later)) for later in partition.later_segments)
    frames = read_segment(
        Path(file.path),
        window.contents,
        later_segments,
        origin=window.origin,
        stop=byte_end,
        read_rest=window.rest,
        complete=file.is_checkpoint,
    )
    start, end = partition.start_offset, partition.end_offset
    epoch_floor = 0
    position = window.origin  # in the file: where the next frame starts
    try:
        for frame in frames:
            if isinstance(frame, Tail):
                return
            position = frame.position
            if expected is not None and frame.base_offset != expected:
                raise LogReadError(
                    file.path,
                    position,
                    f"a batch with base offset {frame.base_offset} where offset {expected} was "
                    "expected (offsets must be contiguous from the segment's name)",
                )
            if frame.epoch < epoch_floor:
                raise LogReadError(
                    file.path, position, f"epoch {frame.epoch} after epoch {epoch_floor} (corrupt)"
                )
            if end is not None and frame.base_offset >= end and not file.is_checkpoint:
                return
            after = frame.base_offset + frame.record_count
            if position >= byte_start and (file.is_checkpoint or after > start):
                yield Frame(
                    position, frame.base_offset, frame.epoch, frame.record_count, frame.data
                )
            epoch_floor = frame.epoch
            expected = after
            position += frame.frame_bytes
    except CorruptFrameError as exc:
        raise LogReadError(exc.path, exc.byte_offset, exc.problem) from None
    cut = position < byte_end  # the file is shorter than it was at listing
    if position < file.size_bytes and not cut:
        return  # the rest of the file is the next range's
    if partition.later_segments and expected is not None:
        following = partition.later_segments[0]
        if expected != following.base_offset:
            raise LogReadError(
                file.path,
                position,
                f"the segment ends at offset {expected} but the next segment "
                f"{Path(following.path).name} starts at offset {following.base_offset} "
                "(a missing, extra or renamed segment)",
            )
