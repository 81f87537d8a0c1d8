"""The segmented metadata log: batches framed with a CRC32C, in segment files, with recovery.

Layout of one log directory (e.g. ``<metadata.log.dir>/__cluster_metadata-0/``)::

    00000000000000000000.log     segment: frames of the batches from offset 0
    00000000000000000000.index   sparse offset index of that segment (an optimisation)
    00000000000000004711.log     next segment: its name is the base offset of its first batch
    00000000000000004711.index

Frames (``quorum.storage.frames``): one batch per frame, ``magic | frame_length | crc32c |
base_offset | epoch | record_count | data``, with a CRC32C over everything after the CRC.

Index entry (``frames.INDEX_ENTRY``, 12 bytes): ``offset i64 | position u32`` -- the base offset
of a batch and the byte position of its frame in the segment. The first batch of a segment is always
indexed, then the next batch starting at least ``index_interval_bytes`` after the last entry.
The index is never trusted: open validates every frame anyway, rebuilds the index in memory on
the way, and rewrites the index file if it is missing or differs. It is not fsynced. The file is
kept for readers outside this process (Spark replay) and for a future open that validates only
the segments after a recovery point, as Kafka does.

Durability: ``append`` only writes (to the page cache); ``flush`` fsyncs. ``durable_end_offset``
is the log end offset covered by the last completed ``flush`` (docs/invariants.md I8): the Raft
layer must never count an offset at or past it toward the high watermark.

Recovery on open. Every frame of every segment is validated in order with
``frames.read_segment`` (magic, length within ``FRAME_LENGTH_MAX``, whole, CRC32C, fields a
writer can produce), and recovery adds what only a whole log shows: base offsets contiguous
within and across segments and matching the file names, epochs non-decreasing. At the first
damaged frame the reader applies the torn-tail rule of ``quorum.storage.frames`` (the damage is
a torn tail if and only if no valid frame exists anywhere after it, in this segment or a later
one) and either ends at the tail or raises; recovery turns the latter into ``CorruptLogError``.
Consequences, each tested:

- truncated anywhere, trailing zeros, a zeroed sector in the last frame: torn tail; the segment
  is truncated to the end of the last good frame, fsynced, and ``log_tail_truncated`` is logged;
- any bit flip in the *last* frame (header or data): torn tail, because nothing valid follows.
  A flipped bit and a torn sector look alike there, and only the final batch can be lost. Note
  that this batch may have been fsynced and acknowledged before the flip; losing it on one voter
  is the same exposure as Kafka's recovery (which truncates at the first invalid batch);
- any damage followed by a valid frame (a bit flip or a zeroed sector in a middle frame, a
  damaged frame at the end of a non-last segment followed by a non-empty segment):
  ``CorruptLogError`` naming the file and the byte offset;
- a CRC-valid frame with the wrong base offset, epoch going back, or a non-positive record
  count: ``CorruptLogError`` wherever it is (a torn write cannot produce a valid CRC);
- damage whose bytes after it the bounded scan for a valid frame cannot clear (see
  ``limits.FRAME_SCAN_CANDIDATES_MAX``): ``CorruptLogError``, never a truncation;
- a segment whose name does not continue the log (missing middle segment, overlap): if it and
  every later segment hold no valid frame it is crash debris from a roll that never became
  durable and is deleted; otherwise ``CorruptLogError``;
- a last segment left empty (an empty or all-zero file, or emptied by the tail rule) is
  deleted, unless it is the only segment: then it is kept and its name is the log start offset.

Log start and cleaning (KIP-630). Once a snapshot covers a prefix of the log, ``delete_before``
drops the segments that prefix fills, and a follower that installed a leader's snapshot calls
``truncate_fully_and_start_at`` to restart its log at the snapshot's end. Both first record the
new log start in the ``log-start-offset`` file (written atomically: temporary file, fsync,
rename, directory fsync), then delete segments, so a crash in between is finished by recovery:

    version: 0
    log_start_offset: 4711
    truncating_fully: false

Recovery with that file: segments whose base offset is below ``log_start_offset`` are deleted
(an interrupted ``delete_before``); the first remaining segment must start exactly there, else
``CorruptLogError`` (a lost first segment; without the file, a log that does not start at 0 is
taken as it is, for logs written before cleaning existed). With ``truncating_fully: true`` (an
interrupted ``truncate_fully_and_start_at``) every segment is deleted and the log restarts empty
at ``log_start_offset``. The file is absent until the first cleaning.

Concurrency: none. One owner (the server's driver task) calls every method; reads may be
interleaved with appends freely because they use ``pread`` at positions below the written size.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from quorum.limits import INT32_MAX
from quorum.metadata.batch import LogBatch
from quorum.storage import fsutil
from quorum.storage.errors import CorruptLogError, LogFailedError, StorageInvariantError
from quorum.storage.frames import (
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_LENGTH_MAX,
    FRAME_LENGTH_MIN,
    FRAME_MAGIC,
    FRAME_PREFIX,
    INDEX_ENTRY,
    CorruptFrameError,
    FrameView,
    Tail,
    check_frame,
    encode_frame,
    may_hold_valid_frame,
    read_segment,
)

_log = structlog.get_logger("quorum.storage.log")

# Kafka's metadata.log.segment.bytes defaults to 1 GiB; the metadata log is small and is
# cleaned behind snapshots, and recovery reads a whole segment at a time, so 64 MiB.
SEGMENT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
# Kafka's index.interval.bytes default.
INDEX_INTERVAL_BYTES_DEFAULT = 4096

# Positions in the index are u32; segments stay far below this.
_SEGMENT_BYTES_MAX_LIMIT = 2**31 - 1
# How much a read fetches from a segment at a time (a Fetch at the log end reads at most the
# distance from the last index entry plus the new data, in one pread).
_READ_CHUNK_BYTES = 64 * 1024
_SEGMENT_NAME = re.compile(r"^(\d+)\.log$")
_INDEX_NAME = re.compile(r"^(\d+)\.index$")
_SEGMENT_NAME_DIGITS = 20
LOG_START_OFFSET_FILE = "log-start-offset"
_LOG_START_VERSION = 0

assert FRAME_LENGTH_MAX < _SEGMENT_BYTES_MAX_LIMIT


def _require(condition: bool, message: str) -> None:
    """Check a caller's precondition; unlike ``assert`` it survives ``python -O``."""
    if not condition:
        raise StorageInvariantError(message)


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:0{_SEGMENT_NAME_DIGITS}d}.log"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:0{_SEGMENT_NAME_DIGITS}d}.index"


def read_log_start_offset(directory: Path) -> tuple[int, bool] | None:
    """``(log_start_offset, truncating_fully)`` from ``directory``'s ``log-start-offset`` file,
    or None when the log was never cleaned. Raises ``CorruptLogError`` for a file that does not
    parse. Read-only (a leftover ``.tmp`` is ignored)."""
    path = directory / LOG_START_OFFSET_FILE
    try:
        text = path.read_bytes().decode("ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptLogError(path, None, "not ASCII text") from None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(": ")
        if not separator or key in fields:
            raise CorruptLogError(path, None, f"malformed line {line!r}")
        fields[key] = value
    expected = {"version", "log_start_offset", "truncating_fully"}
    if fields.keys() != expected:
        raise CorruptLogError(path, None, f"expected the keys {sorted(expected)}, got {text!r}")
    if fields["version"] != str(_LOG_START_VERSION):
        raise CorruptLogError(path, None, f"unsupported version {fields['version']!r}")
    offset_text = fields["log_start_offset"]
    if not (offset_text.isascii() and offset_text.isdigit()) or len(offset_text) > 19:
        raise CorruptLogError(path, None, f"log_start_offset {offset_text!r} is not an offset")
    if fields["truncating_fully"] not in ("true", "false"):
        raise CorruptLogError(path, None, f"truncating_fully {fields['truncating_fully']!r}")
    return int(offset_text), fields["truncating_fully"] == "true"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What tests and tools may see of one segment."""

    base_offset: int
    end_offset: int
    path: Path
    size_bytes: int
    durable_size_bytes: int


@dataclass(slots=True)
class _Segment:
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


class SegmentedLog:
    """The metadata log of one node on disk. See the module docstring for format and recovery.

    Offsets: ``log_start_offset`` is the base offset of the first segment (0 for a new log),
    ``log_end_offset`` the offset after the last batch, ``durable_end_offset`` the end offset
    covered by the last completed ``flush``. Errors: ``CorruptLogError`` from ``open`` (and from
    reads if a frame rots after open), ``LogFailedError`` after an earlier I/O error,
    ``StorageInvariantError`` (an ``AssertionError``) when a caller breaks a precondition, and
    ``OSError`` from the failing call itself.
    """

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT,
        index_interval_bytes: int = INDEX_INTERVAL_BYTES_DEFAULT,
    ) -> None:
        """Use ``SegmentedLog.open``."""
        _require(0 < segment_bytes_max <= _SEGMENT_BYTES_MAX_LIMIT, f"{segment_bytes_max=}")
        _require(index_interval_bytes > 0, f"{index_interval_bytes=}")
        self._directory = directory
        self._segment_bytes_max = segment_bytes_max
        self._index_interval_bytes = index_interval_bytes
        self._segments: list[_Segment] = []
        # Epoch cache (Kafka's LeaderEpochFileCache): the first offset of each epoch, ascending.
        self._epoch_epochs: list[int] = []
        self._epoch_start_offsets: list[int] = []
        self._durable_end_offset = 0
        self._directory_dirty = False
        self._failed: BaseException | None = None
        self._closed = False
        fsutil.ensure_directory(directory)
        try:
            self._recover()
        except BaseException:
            for segment in self._segments:
                _close_fds(segment)
            raise
        self._check_invariants()

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT,
        index_interval_bytes: int = INDEX_INTERVAL_BYTES_DEFAULT,
    ) -> SegmentedLog:
        """Open (creating it if missing) and recover the log in ``directory``.

        Recovery truncates a torn tail and raises ``CorruptLogError`` for anything else (see the
        module docstring). Everything left after recovery is fsynced, so on return
        ``durable_end_offset == log_end_offset``.
        """
        return cls(
            directory,
            segment_bytes_max=segment_bytes_max,
            index_interval_bytes=index_interval_bytes,
        )

    # ----------------------------------------------------------------------------- properties

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset if self._segments else 0

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].end_offset if self._segments else 0

    @property
    def durable_end_offset(self) -> int:
        """The log end offset covered by the last completed ``flush`` (or ``truncate_to``)."""
        return self._durable_end_offset

    @property
    def last_epoch(self) -> int:
        """The epoch of the last batch, or 0 (the primordial epoch) when the log is empty."""
        return self._epoch_epochs[-1] if self._epoch_epochs else 0

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        return tuple(segment.info() for segment in self._segments)

    def __repr__(self) -> str:
        return (
            f"SegmentedLog({self._directory}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, "
            f"durable_end_offset={self._durable_end_offset}, last_epoch={self.last_epoch}, "
            f"segments={len(self._segments)})"
        )

    # ----------------------------------------------------------------------------- writing

    def append(self, batches: Sequence[LogBatch]) -> None:
        """Write ``batches`` at the log end (page cache only; call ``flush`` to make durable).

        Preconditions (``StorageInvariantError`` if broken, before anything is written): each
        batch starts at the end of the previous one (the first at ``log_end_offset``), epochs
        never go back (from ``last_epoch``), and a frame fits in ``FRAME_LENGTH_MAX``. A batch
        that would push the active segment past ``segment_bytes_max`` starts a new segment; a
        batch larger than that limit gets a segment of its own.
        """
        self._check_usable()
        expected_offset = self.log_end_offset
        epoch_floor = self.last_epoch
        for batch in batches:
            # The messages are built only on failure: every append and Fetch passes here.
            if batch.base_offset != expected_offset:
                raise StorageInvariantError(
                    f"append of {batch!r} at log end offset {expected_offset}: offsets must be "
                    "contiguous"
                )
            if batch.epoch < epoch_floor:
                raise StorageInvariantError(
                    f"append of {batch!r} after epoch {epoch_floor}: epochs must not go back"
                )
            if batch.epoch > INT32_MAX:
                raise StorageInvariantError(f"epoch of {batch!r} does not fit in an i32")
            if batch.record_count > INT32_MAX:
                raise StorageInvariantError(f"record count of {batch!r} exceeds i32")
            if FRAME_LENGTH_MIN + len(batch.data) > FRAME_LENGTH_MAX:
                raise StorageInvariantError(
                    f"{batch!r} does not fit in a frame (FRAME_LENGTH_MAX={FRAME_LENGTH_MAX})"
                )
            expected_offset = batch.end_offset
            epoch_floor = batch.epoch
        try:
            self._append_checked(batches)
        except OSError as exc:
            self._fail(exc)
            raise
        self._check_invariants()

    def _append_checked(self, batches: Sequence[LogBatch]) -> None:
        segment = self._segments[-1] if self._segments else None
        chunk = _Chunk()
        for batch in batches:
            frame = encode_frame(batch)
            if segment is None or self._should_roll(segment, chunk, len(frame)):
                if segment is not None and chunk.frames:
                    self._write_chunk(segment, chunk)
                    chunk = _Chunk()
                segment = self._roll(batch.base_offset)
            position = segment.size_bytes + len(chunk.frames)
            indexed = chunk.index_positions or segment.index_positions
            if not indexed or position - indexed[-1] >= self._index_interval_bytes:
                chunk.index_offsets.append(batch.base_offset)
                chunk.index_positions.append(position)
            epochs = chunk.epochs or self._epoch_epochs
            if not epochs or batch.epoch > epochs[-1]:
                chunk.epochs.append(batch.epoch)
                chunk.epoch_start_offsets.append(batch.base_offset)
            chunk.frames += frame
            chunk.end_offset = batch.end_offset
        if segment is not None and chunk.frames:
            self._write_chunk(segment, chunk)

    def _should_roll(self, segment: _Segment, chunk: _Chunk, frame_bytes: int) -> bool:
        size_bytes = segment.size_bytes + len(chunk.frames)
        return size_bytes > 0 and size_bytes + frame_bytes > self._segment_bytes_max

    def _write_chunk(self, segment: _Segment, chunk: _Chunk) -> None:
        """Write the frames and index entries of ``chunk``, then account for them."""
        assert chunk.frames
        assert segment is self._segments[-1]
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
        self._epoch_epochs.extend(chunk.epochs)
        self._epoch_start_offsets.extend(chunk.epoch_start_offsets)

    def _roll(self, base_offset: int) -> _Segment:
        """Create the segment file for a batch at ``base_offset`` and make it active."""
        assert base_offset == self.log_end_offset or not self._segments, (base_offset, self)
        path = self._directory / segment_file_name(base_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if self._segments:
            self._deactivate(self._segments[-1])
        segment = _Segment(
            base_offset=base_offset,
            path=path,
            fd=fd,
            size_bytes=0,
            end_offset=base_offset,
            durable_size_bytes=0,
            entry_durable=False,
            index_offsets=[],
            index_positions=[],
            index_fd=None,
        )
        self._segments.append(segment)
        self._directory_dirty = True
        segment.index_fd = _open_index(segment.index_path, truncate=True)
        _log.debug("log_segment_rolled", file=str(path), base_offset=base_offset)
        return segment

    def flush(self) -> None:
        """Make everything appended so far durable (fsync files, then the directory if needed).

        Group commit: append as much as is ready, then flush once. On return
        ``durable_end_offset == log_end_offset``. An ``OSError`` fails the log for good.
        """
        self._check_usable()
        try:
            for segment in self._segments:
                if segment.durable_size_bytes != segment.size_bytes and fsutil.fsync_fd(segment.fd):
                    segment.durable_size_bytes = segment.size_bytes
            if self._directory_dirty:
                if fsutil.fsync_directory(self._directory):
                    for segment in self._segments:
                        segment.entry_durable = True
                self._directory_dirty = False
        except OSError as exc:
            self._fail(exc)
            raise
        self._durable_end_offset = self.log_end_offset
        self._check_invariants()

    def truncate_to(self, offset: int, *, high_watermark: int) -> None:
        """Remove every batch that contains or follows ``offset``, durably.

        If ``offset`` is a batch boundary the new ``log_end_offset`` is ``offset``; if it falls
        inside a batch, that whole batch goes too and the new end is its base offset (a batch is
        never split, I10). An ``offset`` at or past the log end changes nothing.

        ``high_watermark`` is the caller's high watermark: it is a ``StorageInvariantError`` to
        remove any offset below it (I7, "a follower never truncates below the high watermark"),
        and nothing is changed then. It is a required keyword so that no caller can forget the
        check; a node that does not know its high watermark yet passes 0.

        When something is removed: later segments are deleted, the segment holding the new end
        is truncated and its index trimmed, a segment left empty is deleted (unless it is the
        first: it then keeps the log start offset), and the files and directory are fsynced
        before returning, so afterwards ``durable_end_offset == log_end_offset``. (A no-op
        truncation flushes nothing.)
        """
        self._check_usable()
        _require(high_watermark >= 0, f"{high_watermark=}")
        _require(
            offset >= self.log_start_offset,
            f"truncate_to({offset}) below log start offset {self.log_start_offset}",
        )
        log_end_offset_before = self.log_end_offset
        if offset >= log_end_offset_before:
            return
        segment_index = self._segment_index_for(offset)
        segment = self._segments[segment_index]
        position, new_end_offset = self._batch_containing(segment, offset)
        _require(
            new_end_offset >= high_watermark,
            f"truncate_to({offset}) would cut the log back to {new_end_offset}, below the high "
            f"watermark {high_watermark} (I7: committed batches are never removed)",
        )
        try:
            self._truncate_segments(segment_index, position, new_end_offset)
        except OSError as exc:
            self._fail(exc)
            raise
        while self._epoch_start_offsets and self._epoch_start_offsets[-1] >= new_end_offset:
            self._epoch_start_offsets.pop()
            self._epoch_epochs.pop()
        self.flush()
        _log.info(
            "log_truncated",
            directory=str(self._directory),
            requested_offset=offset,
            log_end_offset_before=log_end_offset_before,
            log_end_offset=new_end_offset,
            high_watermark=high_watermark,
        )

    def _truncate_segments(self, segment_index: int, position: int, new_end_offset: int) -> None:
        for later in self._segments[segment_index + 1 :]:
            self._delete_segment_files(later)
        del self._segments[segment_index + 1 :]
        segment = self._segments[segment_index]
        if position == 0 and segment_index > 0:
            # The segment would be empty: delete it; the previous one ends exactly here.
            self._delete_segment_files(segment)
            del self._segments[segment_index]
            segment = self._segments[-1]
            assert segment.end_offset == new_end_offset
        else:
            os.ftruncate(segment.fd, position)
            segment.size_bytes = position
            segment.end_offset = new_end_offset
            entries_kept = bisect.bisect_left(segment.index_positions, position)
            del segment.index_offsets[entries_kept:]
            del segment.index_positions[entries_kept:]
            if fsutil.fsync_fd(segment.fd):
                segment.durable_size_bytes = position
            # A truncation is emulated as durable even when the fsync was skipped.
            segment.durable_size_bytes = min(segment.durable_size_bytes, position)
        if segment.index_fd is None:
            segment.index_fd = _open_index(segment.index_path, truncate=False)
        os.ftruncate(segment.index_fd, len(segment.index_offsets) * INDEX_ENTRY.size)
        self._durable_end_offset = min(self._durable_end_offset, new_end_offset)

    def _delete_segment_files(self, segment: _Segment) -> None:
        _close_fds(segment)
        segment.path.unlink()
        segment.index_path.unlink(missing_ok=True)
        self._directory_dirty = True

    def _deactivate(self, segment: _Segment) -> None:
        if segment.index_fd is not None:
            os.close(segment.index_fd)
            segment.index_fd = None

    # ----------------------------------------------------------------------------- cleaning

    def delete_before(self, offset: int) -> int:
        """Kafka's ``deleteBeforeSnapshot``: delete the segments that end at or before ``offset``.

        Call it with the end offset of a durable snapshot (everything before ``offset`` is in
        it). Whole segments only: the new ``log_start_offset`` is the base offset of the first
        segment kept, never past ``offset``, so the log may still hold some batches the
        snapshot covers. The active segment is never deleted in place: when every segment ends
        at or before ``offset`` (then ``offset == log_end_offset``), an empty segment is rolled
        at the log end first and the log is left empty, starting at ``offset``. The new log start
        is recorded in ``log-start-offset`` before anything is deleted (see the module
        docstring), and the deletions are durable on return. Returns the new
        ``log_start_offset``; an ``offset`` at or below the first segment's end deletes nothing.
        ``offset`` past ``log_end_offset`` is a ``StorageInvariantError`` (a follower that
        installed a snapshot past its log uses ``truncate_fully_and_start_at``).
        """
        self._check_usable()
        _require(offset >= 0, f"delete_before({offset})")
        _require(
            offset <= self.log_end_offset,
            f"delete_before({offset}) past the log end offset {self.log_end_offset}",
        )
        segments = self._segments
        count = 0
        while count < len(segments) and segments[count].end_offset <= offset:
            count += 1
        if count == len(segments) and segments and segments[-1].size_bytes == 0:
            count -= 1  # the last segment is empty: it already starts at the log end
        if count == 0:
            return self.log_start_offset
        log_start_offset_before = self.log_start_offset
        try:
            if count == len(segments):
                self._roll(self.log_end_offset)
                self._sync_directory()  # the new first segment exists before the file says so
            new_start = self._segments[count].base_offset
            self._write_log_start(new_start, truncating_fully=False)
            for segment in self._segments[:count]:
                self._delete_segment_files(segment)
            del self._segments[:count]
            self._sync_directory()
        except OSError as exc:
            self._fail(exc)
            raise
        self._trim_epoch_cache_before(new_start)
        self._durable_end_offset = max(self._durable_end_offset, new_start)
        self._check_invariants()
        _log.info(
            "log_start_offset_advanced",
            directory=str(self._directory),
            requested_offset=offset,
            log_start_offset_before=log_start_offset_before,
            log_start_offset=new_start,
            segments_deleted=count,
        )
        return new_start

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete the whole log; it continues empty at ``offset`` (Kafka's namesake).

        For a follower or observer that installed a snapshot ending at ``offset``: whatever its
        log held (behind the snapshot, or diverging from it) is gone, and the next append must
        start at ``offset``. Durable on return (``log-start-offset`` records the intent first, so
        recovery completes an interrupted call).
        """
        self._check_usable()
        _require(offset >= 0, f"truncate_fully_and_start_at({offset})")
        log_end_offset_before = self.log_end_offset
        log_start_offset_before = self.log_start_offset
        try:
            self._write_log_start(offset, truncating_fully=True)
            for segment in self._segments:
                self._delete_segment_files(segment)
            self._segments = []
            self._sync_directory()
            self._roll(offset)
            self._sync_directory()
            self._write_log_start(offset, truncating_fully=False)
        except OSError as exc:
            self._fail(exc)
            raise
        self._epoch_epochs = []
        self._epoch_start_offsets = []
        self._durable_end_offset = offset
        self._check_invariants()
        _log.info(
            "log_truncated_fully",
            directory=str(self._directory),
            log_start_offset_before=log_start_offset_before,
            log_end_offset_before=log_end_offset_before,
            log_start_offset=offset,
        )

    def _sync_directory(self) -> None:
        """Make creations and deletions of segment files durable now."""
        if fsutil.fsync_directory(self._directory):
            for segment in self._segments:
                segment.entry_durable = True
        self._directory_dirty = False

    def _write_log_start(self, offset: int, *, truncating_fully: bool) -> None:
        text = (
            f"version: {_LOG_START_VERSION}\n"
            f"log_start_offset: {offset}\n"
            f"truncating_fully: {'true' if truncating_fully else 'false'}\n"
        )
        fsutil.write_file_atomically(self._directory / LOG_START_OFFSET_FILE, text.encode())

    def _trim_epoch_cache_before(self, log_start_offset: int) -> None:
        """Kafka's ``truncateFromStart``: the epoch holding the new start now starts there."""
        if log_start_offset >= self.log_end_offset:
            self._epoch_epochs = []
            self._epoch_start_offsets = []
            return
        index = bisect.bisect_right(self._epoch_start_offsets, log_start_offset) - 1
        if index < 0:
            return
        self._epoch_epochs = self._epoch_epochs[index:]
        self._epoch_start_offsets = [log_start_offset, *self._epoch_start_offsets[index + 1 :]]

    # ----------------------------------------------------------------------------- reading

    def read(self, from_offset: int, max_bytes: int) -> list[LogBatch]:
        """Batches from the one containing ``from_offset``, up to ``max_bytes`` of frames.

        The first batch is returned even if its frame alone exceeds ``max_bytes``; later
        batches only while the total frame bytes stay within ``max_bytes``. Returns ``[]`` at
        the log end. Reads see appended batches at once, flushed or not (the Raft layer decides
        what may be exposed). ``from_offset`` outside [log_start_offset, log_end_offset] is a
        ``StorageInvariantError``: the Fetch handler must answer that case itself.
        """
        self._check_usable()
        if max_bytes < 0:
            raise StorageInvariantError(f"{max_bytes=}")
        if not self.log_start_offset <= from_offset <= self.log_end_offset:
            raise StorageInvariantError(
                f"read from {from_offset} outside the log "
                f"[{self.log_start_offset}, {self.log_end_offset}]"
            )
        if from_offset == self.log_end_offset:
            return []
        segment_index = self._segment_index_for(from_offset)
        position = self._index_lookup(self._segments[segment_index], from_offset)
        skip_before: int | None = from_offset
        batches: list[LogBatch] = []
        total_bytes = 0
        for segment in self._segments[segment_index:]:
            frames = self._iter_frames(segment, position, skip_before=skip_before)
            for _, batch, frame_bytes in frames:
                if batches and total_bytes + frame_bytes > max_bytes:
                    return batches
                batches.append(batch)
                total_bytes += frame_bytes
            position, skip_before = 0, None
        return batches

    def read_all(self, from_offset: int | None = None) -> Iterator[LogBatch]:
        """Every batch in offset order, for replay on startup; with ``from_offset``, from the
        batch containing it (found through the index; the log before it is not read). Nothing
        when ``from_offset`` is at or past the log end offset. Do not modify the log meanwhile.
        """
        self._check_usable()
        if from_offset is None or from_offset <= self.log_start_offset:
            for segment in list(self._segments):
                for _, batch, _ in self._iter_frames(segment, 0):
                    yield batch
            return
        if from_offset >= self.log_end_offset:
            return
        first = self._segment_index_for(from_offset)
        position = self._index_lookup(self._segments[first], from_offset)
        skip_before: int | None = from_offset
        for segment in list(self._segments[first:]):
            for _, batch, _ in self._iter_frames(segment, position, skip_before=skip_before):
                yield batch
            position, skip_before = 0, None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's ``endOffsetForEpoch``: ``(largest epoch <= epoch in the log, its end offset)``.

        The end offset of an epoch is the base offset of the first batch of a greater epoch, or
        ``log_end_offset`` for the last epoch (so an ``epoch`` above every epoch in the log gives
        ``(last_epoch, log_end_offset)``). If no batch has an epoch <= ``epoch`` (the log is
        empty, or starts with a later epoch) the answer is ``(epoch, log_start_offset)``, as
        Kafka answers ``(requested epoch, start of the first epoch)``: the requester diverges at
        the log start. The Raft layer overrides this with the snapshot id when it has one.
        O(log n) in the number of epochs.
        """
        self._check_usable()
        _require(epoch >= 0, f"{epoch=}")
        index = bisect.bisect_right(self._epoch_epochs, epoch) - 1
        if index < 0:
            return (epoch, self.log_start_offset)
        if index + 1 < len(self._epoch_epochs):
            return (self._epoch_epochs[index], self._epoch_start_offsets[index + 1])
        return (self._epoch_epochs[index], self.log_end_offset)

    def _segment_index_for(self, offset: int) -> int:
        index = bisect.bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1
        assert index >= 0, (offset, self)
        return index

    def _index_lookup(self, segment: _Segment, offset: int) -> int:
        """The position of the last indexed batch starting at or before ``offset``."""
        entry = bisect.bisect_right(segment.index_offsets, offset) - 1
        return segment.index_positions[entry] if entry >= 0 else 0

    def _batch_containing(self, segment: _Segment, offset: int) -> tuple[int, int]:
        """``(position, base_offset)`` of the batch of ``segment`` that contains ``offset``."""
        start = self._index_lookup(segment, offset)
        for position, batch, _ in self._iter_frames(segment, start, skip_before=offset):
            assert batch.base_offset <= offset < batch.end_offset
            return (position, batch.base_offset)
        raise AssertionError(f"offset {offset} is not in {segment.info()}")

    def _iter_frames(
        self, segment: _Segment, position: int, *, skip_before: int | None = None
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
                    cursor += (
                        FRAME_PREFIX.size + frame_length
                    )  # may pass the buffer: refilled above
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

    # ----------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Flush (unless the log has failed) and close every file. Idempotent."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.flush()
        finally:
            for segment in self._segments:
                _close_fds(segment)
            self._closed = True

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def simulate_crash(self) -> None:
        """TEST ONLY: close the log as a power loss would leave it (docs/invariants.md F12).

        Each segment file is cut back to the bytes that were really fsynced, and segment files
        whose directory entry was never fsynced disappear. Index files are left as they are
        (possibly stale): recovery must not trust them. The object is unusable afterwards.
        """
        assert not self._closed
        for segment in self._segments:
            _close_fds(segment)
            if segment.entry_durable:
                os.truncate(segment.path, min(segment.durable_size_bytes, segment.size_bytes))
            else:
                segment.path.unlink()
                segment.index_path.unlink(missing_ok=True)
        self._closed = True

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise LogFailedError(
                f"the metadata log in {self._directory} failed an earlier write or fsync "
                f"({self._failed!r}); restart the node to recover from what is on disk"
            ) from self._failed
        if self._closed:
            raise StorageInvariantError(f"{self!r} is closed")

    def _fail(self, exc: BaseException) -> None:
        self._failed = exc
        _log.error("log_failed", directory=str(self._directory), error=repr(exc))

    def _check_invariants(self) -> None:
        assert self._durable_end_offset <= self.log_end_offset
        assert len(self._epoch_epochs) == len(self._epoch_start_offsets)
        if self._epoch_start_offsets:
            assert self._epoch_start_offsets[0] >= self.log_start_offset
            assert self._epoch_start_offsets[-1] < self.log_end_offset
        if self._segments:
            active = self._segments[-1]
            assert active.index_fd is not None
            assert active.size_bytes > 0 or len(self._segments) == 1

    # ----------------------------------------------------------------------------- recovery

    def _recover(self) -> None:
        """Validate every segment, cut a torn tail, rebuild indexes and the epoch cache."""
        files = self._list_segment_files()
        # write_file_atomically's leftover of a crash; the file itself is whole or absent.
        fsutil.tmp_path_for(self._directory / LOG_START_OFFSET_FILE).unlink(missing_ok=True)
        log_start = read_log_start_offset(self._directory)
        if log_start is not None:
            files = self._recover_log_start(files, *log_start)
        expected_offset = 0
        for file_index, (base_offset, path) in enumerate(files):
            later_paths = [later_path for _, later_path in files[file_index + 1 :]]
            contents = path.read_bytes()
            if file_index > 0 and base_offset != expected_offset:
                later_contents = (later_path.read_bytes() for later_path in later_paths)
                if not any(map(may_hold_valid_frame, [contents, *later_contents])):
                    self._remove_debris([path, *later_paths], "segment_name_gap")
                    break
                raise CorruptLogError(
                    path,
                    None,
                    f"its name says the segment starts at offset {base_offset} but the previous "
                    f"segments end at offset {expected_offset} (a missing, extra or renamed "
                    "segment)",
                )
            segment, torn = self._recover_segment(path, base_offset, contents, later_paths)
            self._segments.append(segment)
            expected_offset = segment.end_offset
            if torn:
                self._remove_debris(later_paths, "after_torn_tail")
                break
        if len(self._segments) > 1 and self._segments[-1].size_bytes == 0:
            empty = self._segments.pop()
            _close_fds(empty)
            self._remove_debris([empty.path], "empty_last_segment")
        self._remove_orphan_indexes()
        for segment in self._segments:
            self._verify_index_file(segment)
            fsutil.fsync_fd(segment.fd)
            # What recovery read is what the (emulated) disk holds, even under UNSAFE_SKIP_FSYNC.
            segment.durable_size_bytes = segment.size_bytes
        if self._segments:
            last = self._segments[-1]
            last.index_fd = _open_index(last.index_path, truncate=False)
        fsutil.fsync_directory(self._directory)
        self._durable_end_offset = self.log_end_offset
        _log.info(
            "log_opened",
            directory=str(self._directory),
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            last_epoch=self.last_epoch,
            segments=len(self._segments),
        )

    def _recover_log_start(
        self, files: list[tuple[int, Path]], log_start_offset: int, truncating_fully: bool
    ) -> list[tuple[int, Path]]:
        """Finish an interrupted cleaning (see the module docstring); the segments left."""
        path = self._directory / LOG_START_OFFSET_FILE
        if truncating_fully:
            self._remove_debris([p for _, p in files], "truncate_fully_interrupted")
            segment_path = self._directory / segment_file_name(log_start_offset)
            fd = os.open(segment_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            os.close(fd)
            fsutil.fsync_directory(self._directory)
            self._write_log_start(log_start_offset, truncating_fully=False)
            _log.warning(
                "log_truncate_fully_completed",
                directory=str(self._directory),
                log_start_offset=log_start_offset,
            )
            return [(log_start_offset, segment_path)]
        below = [p for base_offset, p in files if base_offset < log_start_offset]
        if below:
            self._remove_debris(below, "below_log_start_offset")
            fsutil.fsync_directory(self._directory)
        kept = [(b, p) for b, p in files if b >= log_start_offset]
        if not kept:
            raise CorruptLogError(
                path,
                None,
                f"it says the log starts at offset {log_start_offset}, but no segment is left "
                "(the segment files were deleted)",
            )
        if kept[0][0] != log_start_offset:
            raise CorruptLogError(
                kept[0][1],
                None,
                f"the log starts at offset {log_start_offset} ({LOG_START_OFFSET_FILE}) but "
                f"its first segment starts at offset {kept[0][0]} (a missing first segment)",
            )
        return kept

    def _list_segment_files(self) -> list[tuple[int, Path]]:
        files: list[tuple[int, Path]] = []
        for path in self._directory.iterdir():
            match = _SEGMENT_NAME.match(path.name)
            if match is None:
                continue  # quorum-state, checkpoints, anything else: not ours to judge
            if len(match.group(1)) != _SEGMENT_NAME_DIGITS:
                raise CorruptLogError(
                    path, None, f"a segment name must be {_SEGMENT_NAME_DIGITS} digits"
                )
            if not path.is_file() or path.is_symlink():
                raise CorruptLogError(path, None, "a segment must be a regular file")
            files.append((int(match.group(1)), path))
        files.sort()
        return files

    def _recover_segment(
        self, path: Path, base_offset: int, contents: bytes, later_paths: list[Path]
    ) -> tuple[_Segment, bool]:
        """Validate one segment; returns it and whether its tail was torn (and cut)."""
        expected_offset = base_offset
        epoch_floor = self._epoch_epochs[-1] if self._epoch_epochs else 0
        index_offsets: list[int] = []
        index_positions: list[int] = []
        position = 0
        torn = False
        later_segments = ((later_path, later_path.read_bytes()) for later_path in later_paths)
        try:
            for frame in read_segment(path, contents, later_segments):
                if isinstance(frame, Tail):
                    torn = True
                    break
                self._check_recovered_frame(path, frame, expected_offset, epoch_floor)
                if (
                    not index_positions
                    or position - index_positions[-1] >= self._index_interval_bytes
                ):
                    index_offsets.append(frame.base_offset)
                    index_positions.append(position)
                if not self._epoch_epochs or frame.epoch > self._epoch_epochs[-1]:
                    self._epoch_epochs.append(frame.epoch)
                    self._epoch_start_offsets.append(frame.base_offset)
                epoch_floor = frame.epoch
                expected_offset = frame.base_offset + frame.record_count
                position += frame.frame_bytes
        except CorruptFrameError as exc:
            raise CorruptLogError(exc.path, exc.byte_offset, exc.problem) from None
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        if torn:
            try:
                os.ftruncate(fd, position)
                fsutil.fsync_fd(fd)
            except BaseException:
                os.close(fd)
                raise
            _log.warning(
                "log_tail_truncated",
                file=str(path),
                byte_offset=position,
                bytes_dropped=len(contents) - position,
                log_end_offset=expected_offset,
            )
        segment = _Segment(
            base_offset=base_offset,
            path=path,
            fd=fd,
            size_bytes=position,
            end_offset=expected_offset,
            durable_size_bytes=0,
            entry_durable=True,
            index_offsets=index_offsets,
            index_positions=index_positions,
            index_fd=None,
        )
        return segment, torn

    def _check_recovered_frame(
        self, path: Path, frame: FrameView, expected_offset: int, epoch: int
    ) -> None:
        """Offset and epoch of a valid frame in the log. A torn write cannot produce these:
        always corruption. (The reader refused a non-positive record count already.)"""
        position = frame.position
        if frame.base_offset != expected_offset:
            if position == 0:
                problem = (
                    f"the segment's name says offset {expected_offset} but its first batch has "
                    f"base offset {frame.base_offset}"
                )
            else:
                problem = (
                    f"a batch with base offset {frame.base_offset} where offset "
                    f"{expected_offset} was expected (offsets must be contiguous)"
                )
            raise CorruptLogError(path, position, problem)
        if frame.epoch < epoch:
            raise CorruptLogError(
                path, position, f"epoch {frame.epoch} after epoch {epoch} (epochs never go back)"
            )

    def _remove_debris(self, paths: list[Path], reason: str) -> None:
        """Delete segment files that hold no valid frame after the log's last valid frame."""
        for path in paths:
            size_bytes = path.stat().st_size
            path.unlink()
            path.with_suffix(".index").unlink(missing_ok=True)
            _log.warning(
                "log_segment_removed", file=str(path), bytes_dropped=size_bytes, reason=reason
            )

    def _remove_orphan_indexes(self) -> None:
        kept = {segment.index_path.name for segment in self._segments}
        for path in self._directory.iterdir():
            if _INDEX_NAME.match(path.name) and path.name not in kept and path.is_file():
                path.unlink()
                _log.info("log_index_removed", file=str(path), reason="no_segment")

    def _verify_index_file(self, segment: _Segment) -> None:
        """Rewrite the index file of ``segment`` unless it equals the index rebuilt from it."""
        expected = b"".join(
            INDEX_ENTRY.pack(offset, position)
            for offset, position in zip(segment.index_offsets, segment.index_positions, strict=True)
        )
        try:
            actual: bytes | None = segment.index_path.read_bytes()
        except FileNotFoundError:
            actual = None
        if actual == expected:
            return
        fd = _open_index(segment.index_path, truncate=True)
        try:
            fsutil.write_all(fd, expected, 0)
        finally:
            os.close(fd)
        _log.info(
            "log_index_rebuilt",
            file=str(segment.index_path),
            reason="missing" if actual is None else "inconsistent",
            entries=len(segment.index_offsets),
        )


@dataclass(slots=True)
class _Chunk:
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


def _open_index(path: Path, *, truncate: bool) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
    return os.open(path, flags, 0o644)


def _close_fds(segment: _Segment) -> None:
    if segment.fd >= 0:
        os.close(segment.fd)
        segment.fd = -1
    if segment.index_fd is not None:
        os.close(segment.index_fd)
        segment.index_fd = None


def _refill(segment: _Segment, buffer: bytes, cursor: int, frame_position: int, need: int) -> bytes:
    """``buffer[cursor:]`` (which starts at ``frame_position``) extended to hold ``need`` bytes.

    Reads ahead up to ``_READ_CHUNK_BYTES``, never past the written size of the segment.
    """
    kept = buffer[cursor:]
    want = min(max(need, _READ_CHUNK_BYTES), segment.size_bytes - frame_position)
    return kept + _pread_exact(segment, frame_position + len(kept), want - len(kept))


def _pread_exact(segment: _Segment, position: int, size: int) -> bytes:
    data = os.pread(segment.fd, size, position)
    if len(data) != size:
        raise CorruptLogError(
            segment.path,
            position + len(data),
            f"the file is shorter than the {segment.size_bytes} bytes written to it",
        )
    return data
