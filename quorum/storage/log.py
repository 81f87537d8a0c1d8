"""The segmented metadata log: batches framed with a CRC32C, in segment files, with recovery.

Layout of one log directory (e.g. ``<metadata.log.dir>/__cluster_metadata-0/``)::

    00000000000000000000.log     segment: frames of the batches from offset 0
    00000000000000000000.index   sparse offset index of that segment (an optimisation)
    00000000000000004711.log     next segment: its name is the base offset of its first batch
    00000000000000004711.index

Frames (``quorum.storage.frames``): one batch per frame, ``magic | frame_length | crc32c |
base_offset | epoch | record_count | data``, with a CRC32C over everything after the CRC. The
index entries and when a batch is indexed: ``quorum.storage.segment``.

Durability: ``append`` only writes (to the page cache); ``flush`` fsyncs. ``durable_end_offset``
is the log end offset covered by the last completed ``flush`` (docs/invariants.md I8): the Raft
layer must never count an offset at or past it toward the high watermark.

Recovery on open (``quorum.storage.log_recovery``, where the rules are): every frame of every
segment is validated; a torn tail (damage that no valid frame follows) is cut off, anything else
is ``CorruptLogError`` naming the file and byte offset, and the node refuses to start. The index
of each segment is rebuilt in memory on the way and the epoch cache too.

Log start and cleaning (KIP-630). Once a snapshot covers a prefix of the log, ``delete_before``
drops the segments that prefix fills, and a follower that installed a leader's snapshot calls
``truncate_fully_and_start_at`` to restart its log at the snapshot's end. Both first record the
new log start in the ``log-start-offset`` file, then delete segments, so that recovery finishes
a cleaning a crash interrupted (the file and its rules: ``quorum.storage.log_recovery``).

Where the parts are: ``SegmentedLog`` here (the log's offsets and epochs, appends, flushes,
truncation, cleaning, reads); one segment, its index, writing, cutting and reading its frames
in ``quorum.storage.segment``; the epoch cache in ``quorum.storage.epoch_cache``; recovery and
the ``log-start-offset`` file in ``quorum.storage.log_recovery``.

Concurrency: none. One owner (the server's driver task) calls every method; reads may be
interleaved with appends freely because they use ``pread`` at positions below the written size.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import structlog

from quorum.limits import INT32_MAX
from quorum.metadata.batch import LogBatch
from quorum.storage import fsutil
from quorum.storage.epoch_cache import EpochCache
from quorum.storage.errors import LogFailedError, StorageInvariantError
from quorum.storage.frames import FRAME_LENGTH_MAX, FRAME_LENGTH_MIN, encode_frame
from quorum.storage.log_recovery import (
    LOG_START_OFFSET_FILE,
    read_log_start_offset,
    recover_log,
    write_log_start_offset,
)
from quorum.storage.segment import (
    SEGMENT_BYTES_MAX_LIMIT,
    AppendChunk,
    Segment,
    SegmentInfo,
    batch_containing,
    close_fds,
    delete_segment_files,
    index_file_name,
    iter_batches,
    open_index,
    read_batches,
    segment_file_name,
    truncate_index_file,
    truncate_segment,
    write_chunk,
)

__all__ = [
    "INDEX_INTERVAL_BYTES_DEFAULT",
    "LOG_START_OFFSET_FILE",
    "SEGMENT_BYTES_MAX_DEFAULT",
    "SegmentInfo",
    "SegmentedLog",
    "index_file_name",
    "read_log_start_offset",
    "segment_file_name",
]

_log = structlog.get_logger("quorum.storage.log")

# Kafka's metadata.log.segment.bytes defaults to 1 GiB; the metadata log is small and is
# cleaned behind snapshots, and recovery reads a whole segment at a time, so 64 MiB.
SEGMENT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
# Kafka's index.interval.bytes default.
INDEX_INTERVAL_BYTES_DEFAULT = 4096


def _require(condition: bool, message: str) -> None:
    """Check a caller's precondition; unlike ``assert`` it survives ``python -O``."""
    if not condition:
        raise StorageInvariantError(message)


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
        _require(0 < segment_bytes_max <= SEGMENT_BYTES_MAX_LIMIT, f"{segment_bytes_max=}")
        _require(index_interval_bytes > 0, f"{index_interval_bytes=}")
        self._directory = directory
        self._segment_bytes_max = segment_bytes_max
        self._index_interval_bytes = index_interval_bytes
        self._directory_dirty = False
        self._failed: BaseException | None = None
        self._closed = False
        fsutil.ensure_directory(directory)
        recovered = recover_log(directory, index_interval_bytes=index_interval_bytes)
        self._segments: list[Segment] = recovered.segments
        self._epochs: EpochCache = recovered.epochs
        # Recovery fsynced everything it left.
        self._durable_end_offset = self.log_end_offset
        _log.info(
            "log_opened",
            directory=str(self._directory),
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            last_epoch=self.last_epoch,
            segments=len(self._segments),
        )
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
        epochs = self._epochs.epochs
        return epochs[-1] if epochs else 0

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
        chunk = AppendChunk()
        for batch in batches:
            frame = encode_frame(batch)
            if segment is None or self._should_roll(segment, chunk, len(frame)):
                if segment is not None and chunk.frames:
                    self._write_chunk(segment, chunk)
                    chunk = AppendChunk()
                segment = self._roll(batch.base_offset)
            position = segment.size_bytes + len(chunk.frames)
            indexed = chunk.index_positions or segment.index_positions
            if not indexed or position - indexed[-1] >= self._index_interval_bytes:
                chunk.index_offsets.append(batch.base_offset)
                chunk.index_positions.append(position)
            epochs = chunk.epochs or self._epochs.epochs
            if not epochs or batch.epoch > epochs[-1]:
                chunk.epochs.append(batch.epoch)
                chunk.epoch_start_offsets.append(batch.base_offset)
            chunk.frames += frame
            chunk.end_offset = batch.end_offset
        if segment is not None and chunk.frames:
            self._write_chunk(segment, chunk)

    def _should_roll(self, segment: Segment, chunk: AppendChunk, frame_bytes: int) -> bool:
        size_bytes = segment.size_bytes + len(chunk.frames)
        return size_bytes > 0 and size_bytes + frame_bytes > self._segment_bytes_max

    def _write_chunk(self, segment: Segment, chunk: AppendChunk) -> None:
        """Write ``chunk`` to the active segment, then account for its epochs."""
        assert segment is self._segments[-1]
        write_chunk(segment, chunk)
        self._epochs.extend(chunk.epochs, chunk.epoch_start_offsets)

    def _roll(self, base_offset: int) -> Segment:
        """Create the segment file for a batch at ``base_offset`` and make it active."""
        assert base_offset == self.log_end_offset or not self._segments, (base_offset, self)
        path = self._directory / segment_file_name(base_offset)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if self._segments:
            self._deactivate(self._segments[-1])
        segment = Segment(
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
        segment.index_fd = open_index(segment.index_path, truncate=True)
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
        position, new_end_offset = batch_containing(segment, offset)
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
        self._epochs.truncate_from_end(new_end_offset)
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
            truncate_segment(segment, position, new_end_offset)
        truncate_index_file(segment)
        self._durable_end_offset = min(self._durable_end_offset, new_end_offset)

    def _delete_segment_files(self, segment: Segment) -> None:
        delete_segment_files(segment)
        self._directory_dirty = True

    def _deactivate(self, segment: Segment) -> None:
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
            write_log_start_offset(self._directory, new_start, truncating_fully=False)
            for segment in self._segments[:count]:
                self._delete_segment_files(segment)
            del self._segments[:count]
            self._sync_directory()
        except OSError as exc:
            self._fail(exc)
            raise
        self._epochs.truncate_from_start(new_start, self.log_end_offset)
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
            write_log_start_offset(self._directory, offset, truncating_fully=True)
            for segment in self._segments:
                self._delete_segment_files(segment)
            self._segments = []
            self._sync_directory()
            self._roll(offset)
            self._sync_directory()
            write_log_start_offset(self._directory, offset, truncating_fully=False)
        except OSError as exc:
            self._fail(exc)
            raise
        self._epochs.clear()
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
        segments = self._segments[self._segment_index_for(from_offset) :]
        return read_batches(segments, from_offset, max_bytes)

    def read_all(self, from_offset: int | None = None) -> Iterator[LogBatch]:
        """Every batch in offset order, for replay on startup; with ``from_offset``, from the
        batch containing it (found through the index; the log before it is not read). Nothing
        when ``from_offset`` is at or past the log end offset. Do not modify the log meanwhile.
        """
        self._check_usable()
        if from_offset is None or from_offset <= self.log_start_offset:
            yield from iter_batches(list(self._segments), None)
        elif from_offset < self.log_end_offset:
            first = self._segment_index_for(from_offset)
            yield from iter_batches(self._segments[first:], from_offset)

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
        epochs = self._epochs
        index = bisect.bisect_right(epochs.epochs, epoch) - 1
        if index < 0:
            return (epoch, self.log_start_offset)
        if index + 1 < len(epochs.epochs):
            return (epochs.epochs[index], epochs.start_offsets[index + 1])
        return (epochs.epochs[index], self.log_end_offset)

    def _segment_index_for(self, offset: int) -> int:
        index = bisect.bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1
        assert index >= 0, (offset, self)
        return index

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
                close_fds(segment)
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
            close_fds(segment)
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
        self._epochs.check_invariants(self.log_start_offset, self.log_end_offset)
        if self._segments:
            active = self._segments[-1]
            assert active.index_fd is not None
            assert active.size_bytes > 0 or len(self._segments) == 1
