"""Opening a partition log is recovery (Kafka's ``LogLoader``), in a partition directory of
``partition_log.py``'s layout (docs/architecture.md#partition-logs).

A log cleaner's swap cut by a crash is finished or discarded (``cleaner.complete_swaps``),
leftovers of a crash are removed, segments wholly below the log start offset are deleted,
every segment from the one holding the recovery point on is checked batch by batch and cut
after its last valid batch (later segments are then deleted), the indexes of what was checked
are rebuilt, and the leader-epoch cache follows the batches. The recovery point (the offset
below which everything was fsynced: a rolled segment, a clean close) comes from the log dir's
``recovery-point-offset-checkpoint``; a log whose last segment ends exactly there (walking its
batch headers from the last index entry) was closed cleanly and is not checked again.

Idempotent producers' state is loaded the same way after the segments, and again after a
truncation (``load_producer_state``). Blocking; called under the log's lock or before the log
is shared.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from broker.log.batch import BATCH_HEADER_BYTES, read_header
from broker.log.cleaner import complete_swaps
from broker.log.epochs import LeaderEpochCache
from broker.log.producer_state import (
    SNAPSHOT_SUFFIX,
    ProducerState,
    ProducerStateError,
    snapshot_offsets,
)
from broker.log.segment import LOG_SUFFIX, OFFSET_DIGITS, LogSegment
from quorum.storage.fsutil import fsync_directory

__all__ = ["LoadedLog", "load_producer_state", "load_segments", "snapshot_path"]

# What a crash can leave in a partition directory: a checkpoint's temporary file, and (from
# Kafka's own tools) segments being deleted; the cleaner's are handled before (complete_swaps).
LEFTOVER_SUFFIXES: Final = (".tmp", ".deleted", ".cleaned", ".swap")
SEGMENT_FILE_SUFFIXES: Final = (LOG_SUFFIX, ".index", ".timeindex")


@dataclass(slots=True)
class LoadedLog:
    """The recovered segments (the last one open for appends), the log start offset, and the
    bytes recovery cut."""

    segments: list[LogSegment]
    log_start_offset: int
    truncated_bytes: int


def load_segments(
    directory: Path,
    *,
    recovery_point: int,
    log_start_offset: int,
    now_ms: int,
    epochs: LeaderEpochCache,
    logger: Any,
) -> LoadedLog:
    """Recover the segments of ``directory`` (one empty segment at the log start offset if
    there are none) and bring ``epochs`` in line with them."""
    complete_swaps(directory, logger)
    bases = _segment_files(directory)
    fresh = not bases
    if fresh:
        bases = [max(log_start_offset, 0)]
    segments = [LogSegment(directory, base, now_ms) for base in bases]
    log_start_offset = max(log_start_offset, bases[0])
    while len(segments) > 1 and segments[1].base_offset <= log_start_offset:
        segments.pop(0).delete_files()
    truncated = 0
    if not fresh:
        first_unsafe = _first_to_recover(segments, recovery_point, logger)
        if epochs.problem is not None:
            logger.warning("leader_epoch_checkpoint_unreadable", problem=epochs.problem)
            first_unsafe = 0
        if first_unsafe < len(segments):
            truncated = _recover_from(directory, segments, first_unsafe, epochs, logger)
    active = segments[-1]
    active.open_active()
    active.offset_index.load(active=True)
    active.time_index.load(active=True)
    active.bytes_since_index_entry = active.size - active.offset_index.last()[1]
    if fresh:
        fsync_directory(directory)
    end = active.next_offset
    # A truncation lowers the log start offset with the end; a crash before the checkpoint of
    # the lowered one leaves it past the end.
    log_start_offset = min(log_start_offset, end)
    epochs.truncate_from_end(end)
    epochs.truncate_from_start(log_start_offset)
    return LoadedLog(segments, log_start_offset, truncated)


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def load_producer_state(
    directory: Path, segments: list[LogSegment], log_start_offset: int, logger: Any
) -> ProducerState:
    """Idempotent producers' state (``producer_state.py``): the newest readable snapshot at or
    below the log end offset, then every batch header from its offset on (from the log start
    without one). Snapshots past the log end (the tail was cut) are deleted."""
    end = segments[-1].next_offset
    state: ProducerState | None = None
    start = log_start_offset
    for offset in reversed(snapshot_offsets(directory)):
        path = snapshot_path(directory, offset)
        if offset > end:
            path.unlink(missing_ok=True)
            continue
        if state is not None:
            continue
        try:
            state = ProducerState.decode_snapshot(path.read_bytes())
            start = max(offset, log_start_offset)
        except (OSError, ProducerStateError) as exc:
            logger.warning("producer_snapshot_unreadable", file=path.name, problem=str(exc))
    producers = state if state is not None else ProducerState()
    for segment in segments:
        if segment.next_offset <= start:
            continue
        position = segment.offset_index.lookup(start)[1] if segment.base_offset <= start else 0
        producers.replay(
            header
            for header in segment.producer_headers_from(position)
            if header.base_offset >= start
        )
    return producers


def _segment_files(directory: Path) -> list[int]:
    """Base offsets of the ``.log`` files, after removing a crash's leftovers and index files
    without a ``.log``."""
    bases: list[int] = []
    names = os.listdir(directory)
    logs = {name for name in names if name.endswith(LOG_SUFFIX)}
    for name in names:
        path = directory / name
        if name.endswith(LEFTOVER_SUFFIXES):
            os.unlink(path)
            continue
        stem, dot, suffix = name.partition(".")
        if f".{suffix}" not in SEGMENT_FILE_SUFFIXES or not dot:
            continue
        if len(stem) != OFFSET_DIGITS or not stem.isdigit():
            continue
        if name.endswith(LOG_SUFFIX):
            bases.append(int(stem))
        elif f"{stem}{LOG_SUFFIX}" not in logs:
            os.unlink(path)
    return sorted(bases)


def _first_to_recover(segments: list[LogSegment], recovery_point: int, logger: Any) -> int:
    """The index of the first segment to check: the one holding the recovery point, or none
    (``len``) when the last segment ends exactly at it (a clean close). Every earlier segment
    is loaded as it is; one whose files do not add up is checked too."""
    starts = [segment.base_offset for segment in segments]
    holding = max(bisect.bisect_right(starts, recovery_point) - 1, 0)
    for index, segment in enumerate(segments[:holding]):
        problem = segment.load_sealed(segments[index + 1].base_offset)
        if problem is not None:
            logger.warning("log_segment_unreadable", segment=segment.path.name, problem=problem)
            return index
    last = segments[-1]
    if (
        holding == len(segments) - 1
        and last.load_sealed(None) is None
        and last.next_offset == recovery_point
    ):
        last.rolling_timestamp_ms = _first_timestamp(last)
        return len(segments)
    return holding


def _first_timestamp(segment: LogSegment) -> int | None:
    """The first batch's largest timestamp: one header read (walking every header of the
    segment for it took 3 s for 200,000 batches)."""
    if segment.size < BATCH_HEADER_BYTES:
        return None
    return read_header(segment.read_batch(0, BATCH_HEADER_BYTES)).max_timestamp


def _recover_from(
    directory: Path,
    segments: list[LogSegment],
    first: int,
    epochs: LeaderEpochCache,
    logger: Any,
) -> int:
    """Check segments ``first`` .. last; cut after the last valid batch (the segments after
    it are deleted and leave ``segments``). The bytes cut."""
    truncated = 0
    epochs.truncate_from_end(segments[first].base_offset)
    for index in range(first, len(segments)):
        segment = segments[index]
        expected = segment.base_offset
        if index > first and expected != segments[index - 1].next_offset:
            _drop_from(segments, index, "its base offset does not continue the log", logger)
            break
        cut = segment.recover(epochs.assign, epochs.latest_epoch)
        segment.flush()
        if cut:
            truncated += cut
            logger.warning(
                "log_tail_truncated",
                segment=segment.path.name,
                bytes_truncated=cut,
                log_end_offset=segment.next_offset,
            )
            _drop_from(segments, index + 1, "it follows a truncated segment", logger)
            break
    fsync_directory(directory)
    return truncated


def _drop_from(segments: list[LogSegment], index: int, why: str, logger: Any) -> None:
    for segment in segments[index:]:
        logger.warning("log_segment_deleted", segment=segment.path.name, reason=why)
        segment.delete_files()
    del segments[index:]
