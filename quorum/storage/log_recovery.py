"""Recovery of the segmented metadata log when it is opened, and the ``log-start-offset`` file
that lets recovery finish an interrupted cleaning.

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

The ``log-start-offset`` file. ``SegmentedLog.delete_before`` and
``truncate_fully_and_start_at`` (``quorum.storage.log``) first record the new log start in it
(written atomically: temporary file, fsync, rename, directory fsync), then delete segments, so a
crash in between is finished by recovery:

    version: 0
    log_start_offset: 4711
    truncating_fully: false

Recovery with that file: segments whose base offset is below ``log_start_offset`` are deleted
(an interrupted ``delete_before``); the first remaining segment must start exactly there, else
``CorruptLogError`` (a lost first segment; without the file, a log that does not start at 0 is
taken as it is, for logs written before cleaning existed). With ``truncating_fully: true`` (an
interrupted ``truncate_fully_and_start_at``) every segment is deleted and the log restarts empty
at ``log_start_offset``. The file is absent until the first cleaning.

Recovery builds the open segments (``quorum.storage.segment``), each with its index rebuilt in
memory from its frames (an index file that is missing or differs is rewritten), and the epoch
cache; ``SegmentedLog`` takes them over. Everything left is fsynced before it returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from quorum.storage import fsutil
from quorum.storage.epoch_cache import EpochCache
from quorum.storage.errors import CorruptLogError
from quorum.storage.frames import (
    INDEX_ENTRY,
    CorruptFrameError,
    FrameView,
    Tail,
    may_hold_valid_frame,
    read_segment,
)
from quorum.storage.segment import (
    INDEX_NAME,
    SEGMENT_NAME,
    SEGMENT_NAME_DIGITS,
    Segment,
    close_fds,
    open_index,
    segment_file_name,
)

__all__ = [
    "LOG_START_OFFSET_FILE",
    "RecoveredLog",
    "read_log_start_offset",
    "recover_log",
    "write_log_start_offset",
]

# The log's events keep the log's logger name, wherever in the package they are raised.
_log = structlog.get_logger("quorum.storage.log")

LOG_START_OFFSET_FILE = "log-start-offset"
_LOG_START_VERSION = 0


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


def write_log_start_offset(directory: Path, offset: int, *, truncating_fully: bool) -> None:
    """Write ``directory``'s ``log-start-offset`` file atomically (see the module docstring)."""
    text = (
        f"version: {_LOG_START_VERSION}\n"
        f"log_start_offset: {offset}\n"
        f"truncating_fully: {'true' if truncating_fully else 'false'}\n"
    )
    fsutil.write_file_atomically(directory / LOG_START_OFFSET_FILE, text.encode())


@dataclass(slots=True)
class RecoveredLog:
    """What recovery leaves: the segments in offset order (only the last with its index file
    open) and the epoch cache."""

    segments: list[Segment]
    epochs: EpochCache


def recover_log(directory: Path, *, index_interval_bytes: int) -> RecoveredLog:
    """Validate every segment in ``directory``, cut a torn tail, finish an interrupted
    cleaning, rebuild the indexes and the epoch cache (see the module docstring). Raises
    ``CorruptLogError`` for damage that is not a torn tail, having closed what it opened."""
    return _Recovery(directory, index_interval_bytes).run()


class _Recovery:
    """The segments and epoch cache recovery builds, one segment after the other."""

    def __init__(self, directory: Path, index_interval_bytes: int) -> None:
        self._directory = directory
        self._index_interval_bytes = index_interval_bytes
        self._segments: list[Segment] = []
        # Epoch cache (Kafka's LeaderEpochFileCache): the first offset of each epoch, ascending.
        self._epoch_epochs: list[int] = []
        self._epoch_start_offsets: list[int] = []

    def run(self) -> RecoveredLog:
        try:
            self._recover()
        except BaseException:
            for segment in self._segments:
                close_fds(segment)
            raise
        return RecoveredLog(
            self._segments, EpochCache(self._epoch_epochs, self._epoch_start_offsets)
        )

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
            close_fds(empty)
            self._remove_debris([empty.path], "empty_last_segment")
        self._remove_orphan_indexes()
        for segment in self._segments:
            self._verify_index_file(segment)
            fsutil.fsync_fd(segment.fd)
            # What recovery read is what the (emulated) disk holds, even under UNSAFE_SKIP_FSYNC.
            segment.durable_size_bytes = segment.size_bytes
        if self._segments:
            last = self._segments[-1]
            last.index_fd = open_index(last.index_path, truncate=False)
        fsutil.fsync_directory(self._directory)

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
            write_log_start_offset(self._directory, log_start_offset, truncating_fully=False)
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
            match = SEGMENT_NAME.match(path.name)
            if match is None:
                continue  # quorum-state, checkpoints, anything else: not ours to judge
            if len(match.group(1)) != SEGMENT_NAME_DIGITS:
                raise CorruptLogError(
                    path, None, f"a segment name must be {SEGMENT_NAME_DIGITS} digits"
                )
            if not path.is_file() or path.is_symlink():
                raise CorruptLogError(path, None, "a segment must be a regular file")
            files.append((int(match.group(1)), path))
        files.sort()
        return files

    def _recover_segment(
        self, path: Path, base_offset: int, contents: bytes, later_paths: list[Path]
    ) -> tuple[Segment, bool]:
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
        segment = Segment(
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
            if INDEX_NAME.match(path.name) and path.name not in kept and path.is_file():
                path.unlink()
                _log.info("log_index_removed", file=str(path), reason="no_segment")

    def _verify_index_file(self, segment: Segment) -> None:
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
        fd = open_index(segment.index_path, truncate=True)
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
