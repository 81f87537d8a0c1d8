"""One segment of the metadata log: its file and its sparse offset index, writing frames to
it, cutting it back, and reading its frames again.

A segment file ``{base_offset:020d}.log`` holds the frames (``quorum.storage.frames``) of
consecutive batches, the first at ``base_offset``. Its index ``{base_offset:020d}.index``
holds 12-byte entries (``frames.INDEX_ENTRY``) ``offset i64 | position u32``: the base offset
of a batch and the byte position of its frame in the segment. The first batch of a segment is
always indexed, then the next batch starting at least ``index_interval_bytes`` after the last
entry. The index is never trusted: open validates every frame anyway, rebuilds the index in
memory on the way, and rewrites the index file if it is missing or differs. It is not fsynced.
The file is kept for readers outside this process (Spark replay) and for a future open that
validates only the segments after a recovery point, as Kafka does.

``Segment`` is an open segment as the log keeps it: its file descriptors, its written and
durable sizes, and its index in memory. ``SegmentedLog`` (``quorum.storage.log``) owns the
segments and decides what happens to them; recovery (``quorum.storage.log_recovery``) builds
them when a log is opened.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from quorum.metadata.batch import LogBatch
from quorum.storage import fsutil
from quorum.storage.errors import CorruptLogError
from quorum.storage.frames import (
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_LENGTH_MAX,
    FRAME_LENGTH_MIN,
    FRAME_MAGIC,
    FRAME_PREFIX,
    INDEX_ENTRY,
    check_frame,
)

__all__ = [
    "INDEX_NAME",
    "SEGMENT_BYTES_MAX_LIMIT",
    "SEGMENT_NAME",
    "SEGMENT_NAME_DIGITS",
    "AppendChunk",
    "Segment",
    "SegmentInfo",
    "batch_containing",
    "close_fds",
    "delete_segment_files",
    "index_file_name",
    "index_lookup",
    "iter_batches",
    "iter_frames",
    "open_index",
    "read_batches",
    "segment_file_name",
    "truncate_index_file",
    "truncate_segment",
    "write_chunk",
]

# Positions in the index are u32; segments stay far below this.
SEGMENT_BYTES_MAX_LIMIT = 2**31 - 1
# How much a read fetches from a segment at a time (a Fetch at the log end reads at most the
# distance from the last index entry plus the new data, in one pread).
_READ_CHUNK_BYTES = 64 * 1024
SEGMENT_NAME = re.compile(r"^(\d+)\.log$")
INDEX_NAME = re.compile(r"^(\d+)\.index$")
SEGMENT_NAME_DIGITS = 20

assert FRAME_LENGTH_MAX < SEGMENT_BYTES_MAX_LIMIT


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:0{SEGMENT_NAME_DIGITS}d}.log"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:0{SEGMENT_NAME_DIGITS}d}.index"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What tests and tools may see of one segment."""

    base_offset: int
    end_offset: int
    path: Path
    size_bytes: int
    durable_size_bytes: int


@dataclass(slots=True)
class Segment:
    """An open segment (see the module docstring)."""

    base_offset: int
    path: Path
    fd: int  # O_RDWR; pread/pwrite only, so reads and appends never share a file position
    size_bytes: int  # bytes of whole, valid frames
    end_offset: int  # offset after the last batch (== base_offset when empty)
    durable_size_bytes: int  # bytes really fsynced: what a power loss keeps (F12 emulation)
    entry_durable: bool  # the directory entry was fsynced: the file survives a power loss
    index_offsets: list[int]
    index_positions: list[int]
    index_fd: int | None  # open only while the segment is active

    @property
    def index_path(self) -> Path:
        return self.path.with_name(index_file_name(self.base_offset))

    def info(self) -> SegmentInfo:
        return SegmentInfo(
            self.base_offset, self.end_offset, self.path, self.size_bytes, self.durable_size_bytes
        )


def open_index(path: Path, *, truncate: bool) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
    return os.open(path, flags, 0o644)


def close_fds(segment: Segment) -> None:
    if segment.fd >= 0:
        os.close(segment.fd)
        segment.fd = -1
    if segment.index_fd is not None:
        os.close(segment.index_fd)
        segment.index_fd = None


def delete_segment_files(segment: Segment) -> None:
    """Close the segment and delete its file and index (the directory is not fsynced)."""
    close_fds(segment)
    segment.path.unlink()
    segment.index_path.unlink(missing_ok=True)


# ----- writing ----------------------------------------------------------------------------


@dataclass(slots=True)
class AppendChunk:
    """Frames bound for one segment in one ``append``, accounted for only once written."""

    frames: bytearray
    end_offset: int
    index_offsets: list[int]
    index_positions: list[int]
    epochs: list[int]
    epoch_start_offsets: list[int]

    def __init__(self) -> None:
        self.frames = bytearray()
        self.end_offset = -1
        self.index_offsets = []
        self.index_positions = []
        self.epochs = []
        self.epoch_start_offsets = []


def write_chunk(segment: Segment, chunk: AppendChunk) -> None:
    """Write the frames and index entries of ``chunk`` at the end of ``segment`` (the active
    one, its index open), then account for them in it; its epochs are the log's to keep."""
    assert chunk.frames
    assert segment.index_fd is not None
    fsutil.write_all(segment.fd, chunk.frames, segment.size_bytes)
    if chunk.index_offsets:
        entries = b"".join(
            INDEX_ENTRY.pack(offset, position)
            for offset, position in zip(chunk.index_offsets, chunk.index_positions, strict=True)
        )
        index_position = len(segment.index_offsets) * INDEX_ENTRY.size
        fsutil.write_all(segment.index_fd, entries, index_position)
    segment.size_bytes += len(chunk.frames)
    segment.end_offset = chunk.end_offset
    segment.index_offsets.extend(chunk.index_offsets)
    segment.index_positions.extend(chunk.index_positions)


def truncate_segment(segment: Segment, position: int, end_offset: int) -> None:
    """Cut ``segment`` back to ``position`` (a frame boundary), where offset ``end_offset``
    starts, trim its index in memory and fsync it (``truncate_index_file`` trims the file)."""
    os.ftruncate(segment.fd, position)
    segment.size_bytes = position
    segment.end_offset = end_offset
    entries_kept = bisect.bisect_left(segment.index_positions, position)
    del segment.index_offsets[entries_kept:]
    del segment.index_positions[entries_kept:]
    if fsutil.fsync_fd(segment.fd):
        segment.durable_size_bytes = position
    # A truncation is emulated as durable even when the fsync was skipped.
    segment.durable_size_bytes = min(segment.durable_size_bytes, position)


def truncate_index_file(segment: Segment) -> None:
    """Cut the index file to the entries kept in memory, opening it if needed (it then stays
    open: the segment has become the active one)."""
    if segment.index_fd is None:
        segment.index_fd = open_index(segment.index_path, truncate=False)
    os.ftruncate(segment.index_fd, len(segment.index_offsets) * INDEX_ENTRY.size)


# ----- reading ----------------------------------------------------------------------------


def index_lookup(segment: Segment, offset: int) -> int:
    """The position of the last indexed batch starting at or before ``offset``."""
    entry = bisect.bisect_right(segment.index_offsets, offset) - 1
    return segment.index_positions[entry] if entry >= 0 else 0


def batch_containing(segment: Segment, offset: int) -> tuple[int, int]:
    """``(position, base_offset)`` of the batch of ``segment`` that contains ``offset``."""
    start = index_lookup(segment, offset)
    for position, batch, _ in iter_frames(segment, start, skip_before=offset):
        assert batch.base_offset <= offset < batch.end_offset
        return (position, batch.base_offset)
    raise AssertionError(f"offset {offset} is not in {segment.info()}")


def iter_frames(
    segment: Segment, position: int, *, skip_before: int | None = None
) -> Iterator[tuple[int, LogBatch, int]]:
    """``(position, batch, frame_bytes)`` for each frame of ``segment`` from ``position``.

    ``position`` must be a frame boundary. Reads in chunks with ``pread`` and checks every
    CRC again: a frame that rotted after open must never be served (F14). A caller that
    stops early may have had one frame more checked than it used, so a read can raise
    ``CorruptLogError`` for the frame just past what it would return; either way the node
    must stop.

    With ``skip_before``, frames that end at or before that offset are stepped over by their
    header alone (no CRC, no copy: they are not served), and the first frame yielded must
    contain ``skip_before``, which catches a rotted length that jumped over it.
    """
    end = segment.size_bytes
    buffer = b""
    buffer_position = position  # file position of buffer[0]
    cursor = 0  # start of the current frame within buffer
    # Each pass yields one frame and moves past it, so it runs at most end - position times.
    while buffer_position + cursor < end:
        frame_position = buffer_position + cursor
        if len(buffer) - cursor < FRAME_HEADER_BYTES:
            buffer = _refill(segment, buffer, cursor, frame_position, FRAME_HEADER_BYTES)
            buffer_position, cursor = frame_position, 0
        if skip_before is not None and len(buffer) - cursor >= FRAME_HEADER_BYTES:
            magic, frame_length, _, base_offset, _, record_count = FRAME_HEADER.unpack_from(
                buffer, cursor
            )
            skippable = (
                magic == FRAME_MAGIC
                and FRAME_LENGTH_MIN <= frame_length <= FRAME_LENGTH_MAX
                and frame_position + FRAME_PREFIX.size + frame_length <= end
                and base_offset + record_count <= skip_before
            )
            if skippable:
                cursor += FRAME_PREFIX.size + frame_length  # may pass the buffer: refilled above
                continue
        if len(buffer) - cursor >= FRAME_PREFIX.size:
            _, frame_length = FRAME_PREFIX.unpack_from(buffer, cursor)
            frame_bytes = FRAME_PREFIX.size + frame_length
            # A length past the end is left for check_frame to report, never allocated.
            if len(buffer) - cursor < frame_bytes <= end - frame_position:
                buffer = _refill(segment, buffer, cursor, frame_position, frame_bytes)
                buffer_position, cursor = frame_position, 0
        header = check_frame(buffer, cursor)
        if isinstance(header, str):
            raise CorruptLogError(
                segment.path, frame_position, f"{header} (the frame was valid at open)"
            )
        if skip_before is not None:
            if header.base_offset > skip_before:
                raise CorruptLogError(
                    segment.path,
                    frame_position,
                    f"looking for offset {skip_before} from byte {position}, found a batch "
                    f"starting at offset {header.base_offset} (a frame length rotted)",
                )
            skip_before = None
        data_start = cursor + FRAME_HEADER_BYTES
        batch = LogBatch(
            base_offset=header.base_offset,
            epoch=header.epoch,
            record_count=header.record_count,
            data=buffer[data_start : cursor + header.frame_bytes],
        )
        yield frame_position, batch, header.frame_bytes
        cursor += header.frame_bytes


def read_batches(segments: Sequence[Segment], from_offset: int, max_bytes: int) -> list[LogBatch]:
    """``SegmentedLog.read`` from the batch containing ``from_offset``, which is in
    ``segments[0]``: batches while their frames stay within ``max_bytes`` (the first always)."""
    position = index_lookup(segments[0], from_offset)
    skip_before: int | None = from_offset
    batches: list[LogBatch] = []
    total_bytes = 0
    for segment in segments:
        frames = iter_frames(segment, position, skip_before=skip_before)
        for _, batch, frame_bytes in frames:
            if batches and total_bytes + frame_bytes > max_bytes:
                return batches
            batches.append(batch)
            total_bytes += frame_bytes
        position, skip_before = 0, None
    return batches


def iter_batches(segments: Sequence[Segment], from_offset: int | None) -> Iterator[LogBatch]:
    """``SegmentedLog.read_all``: every batch of ``segments``, or with ``from_offset`` (which is
    in ``segments[0]``) from the batch containing it, found through the index."""
    if from_offset is None:
        for segment in segments:
            for _, batch, _ in iter_frames(segment, 0):
                yield batch
        return
    position = index_lookup(segments[0], from_offset)
    skip_before: int | None = from_offset
    for segment in segments:
        for _, batch, _ in iter_frames(segment, position, skip_before=skip_before):
            yield batch
        position, skip_before = 0, None


def _refill(segment: Segment, buffer: bytes, cursor: int, frame_position: int, need: int) -> bytes:
    """``buffer[cursor:]`` (which starts at ``frame_position``) extended to hold ``need`` bytes.

    Reads ahead up to ``_READ_CHUNK_BYTES``, never past the written size of the segment.
    """
    kept = buffer[cursor:]
    want = min(max(need, _READ_CHUNK_BYTES), segment.size_bytes - frame_position)
    return kept + _pread_exact(segment, frame_position + len(kept), want - len(kept))


def _pread_exact(segment: Segment, position: int, size: int) -> bytes:
    data = os.pread(segment.fd, size, position)
    if len(data) != size:
        raise CorruptLogError(
            segment.path,
            position + len(data),
            f"the file is shorter than the {segment.size_bytes} bytes written to it",
        )
    return data
