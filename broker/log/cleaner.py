"""The log cleaner (Kafka's ``LogCleaner`` / ``Cleaner`` / ``LogCleanerManager``): compaction
of a log whose ``cleanup.policy`` holds ``compact`` (docs/kafka-listener.md#log-compaction).

What is cleaned. Only sealed segments wholly below the first uncleanable offset: the smallest
of the active segment's base offset, the high watermark, and the base offset of the first
segment holding a record younger than ``min.compaction.lag.ms`` (no transactions are served,
so there is no first unstable offset). The segments from the first dirty offset (where the
last clean ended; the log start offset after a restart) to there are the dirty section; a log
is cleaned when its dirty bytes are more than ``min.cleanable.dirty.ratio`` of its cleanable
bytes, or when a delete horizon it assigned has passed (KIP-534).

How. An offset map of the dirty section (key -> its last offset, at most
``OFFSET_MAP_KEYS_MAX`` keys: the section ends at the segment where the map fills) says which
records are superseded. Every segment from the log start to the section's end is then
rewritten in groups no larger than a segment (``segment.bytes``), each record kept unless:

- it has no key (a compacted log cannot hold one; produce refuses them);
- a later record of its key is in the map (per key, the last record wins);
- it is a tombstone (null value) in a batch whose delete horizon has passed.

A batch holding a tombstone gets its delete horizon (now + ``delete.retention.ms``) when first
cleaned, so a tombstone lives at least that long after the clean that saw it. Batches keep
their offsets (``records.py``): a cleaned log has gaps. A batch emptied of its records is
dropped, except (as an empty batch) when it holds the last sequence of an idempotent producer
the log remembers (Kafka's rule: that producer's state survives the clean) or when it is the
last batch of its group (our rule: a cleaned segment ends where the segments it replaced
ended, so the log's segments stay contiguous and a half-done swap is found by its offsets).
Batches whose records cannot be read here (snappy, lz4, zstd) and control batches (none
exist: transactions are not served) are kept as they are.

Crash safety, Kafka's ``replaceSegments``: the group is written as ``{base}.log.cleaned``,
``.index.cleaned``, ``.timeindex.cleaned`` and fsynced; the indexes and then the ``.log`` are
renamed to ``.swap`` (the ``.log.swap`` is the commit point); the old segments are deleted;
the ``.swap`` files are renamed to their final names, the ``.log`` last; the directory is
fsynced after each step. ``complete_swaps`` (called when the log is opened) deletes
``.cleaned`` files and finishes a swap whose ``.log.swap`` exists: the segments it replaces
(those with a base offset in its range) are deleted and it is renamed in. The heavy work runs
without the log's lock (sealed segments never change); only the swap takes it, after checking
that the segments it replaces are still the log's.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from broker.log.batch import (
    BATCH_HEADER_BYTES,
    BATCH_LENGTH_MIN,
    CONTROL_FLAG,
    LOG_OVERHEAD_BYTES,
    BatchHeader,
    batch_crc,
    read_header,
)
from broker.log.config import LogConfig
from broker.log.index import INDEX_INTERVAL_BYTES, NO_TIMESTAMP, OffsetIndex, TimeIndex
from broker.log.records import (
    decode_records,
    delete_horizon_ms,
    encode_batch,
    encode_empty_batch,
)
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_name,
)
from quorum.limits import INT32_MAX, LOG_READ_CHUNK_BYTES_MAX
from quorum.storage.fsutil import fsync_directory, fsync_fd, write_all

__all__ = [
    "CLEANED_SUFFIX",
    "OFFSET_MAP_KEYS_MAX",
    "SWAP_SUFFIX",
    "CleanedGroup",
    "CleanerStats",
    "CleanerStop",
    "CleaningPlan",
    "OffsetMap",
    "build_offset_map",
    "complete_swaps",
    "filter_batch",
    "first_uncleanable_offset",
    "group_segments",
    "iter_batches",
    "plan_cleaning",
    "swap_in",
    "write_cleaned",
]

CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
# Keys of one clean's offset map. Kafka bounds the map by log.cleaner.dedupe.buffer.size
# (128 MiB, 24 bytes an entry: about 5 million); a Python dict entry costs more, so this
# project's bound is lower. A dirty section with more keys is cleaned over several rounds.
OFFSET_MAP_KEYS_MAX: Final = 1_000_000
_OFFSET_AND_LENGTH: Final = struct.Struct(">qi")
_LAST_OFFSET_DELTA_AT: Final = 23
_SEGMENT_SUFFIXES: Final = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)  # the .log last


class CleanerStop(Exception):
    """Raised by a test's ``stop_at`` hook to cut a clean at a given step (a crash)."""


@dataclass(slots=True)
class CleanerStats:
    """What one clean of one log did (Kafka's ``CleanerStats``)."""

    segments_read: int = 0
    segments_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """A log to clean: its cleanable segments (sealed, below the first uncleanable offset)
    from the log start, and where the dirty section starts and ends."""

    segments: tuple[LogSegment, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int
    dirty_bytes: int
    total_bytes: int


@dataclass(slots=True)
class OffsetMap:
    """Key -> the offset of its last record in the dirty section, and the offset the section
    (the part the map covers) ends at."""

    offsets: dict[bytes, int] = field(default_factory=dict)
    end_offset: int = 0


def first_uncleanable_offset(
    segments: list[LogSegment], high_watermark: int, config: LogConfig, now_ms: int
) -> int:
    """Kafka's ``LogCleanerManager.cleanableOffsets``: min(active segment's base offset, high
    watermark, base offset of the first segment with a record younger than
    ``min.compaction.lag.ms``)."""
    bound = min(segments[-1].base_offset, high_watermark)
    if config.min_compaction_lag_ms > 0:
        for segment in segments[:-1]:
            if segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    return bound


def plan_cleaning(
    segments: list[LogSegment],
    high_watermark: int,
    *,
    first_dirty_offset: int,
    config: LogConfig,
    now_ms: int,
    horizon_due_ms: int | None,
) -> CleaningPlan | None:
    """The plan when the log needs cleaning now: its dirty ratio is above
    ``min.cleanable.dirty.ratio`` (Kafka: strictly), or a delete horizon it assigned has
    passed (``horizon_due_ms``); else None."""
    uncleanable = first_uncleanable_offset(segments, high_watermark, config, now_ms)
    cleanable = [s for s in segments[:-1] if s.next_offset <= uncleanable]
    if not cleanable:
        return None
    total = sum(s.size for s in cleanable)
    dirty = sum(s.size for s in cleanable if s.base_offset >= first_dirty_offset)
    if total == 0:
        return None
    due = horizon_due_ms is not None and now_ms >= horizon_due_ms
    if not (dirty / total > config.min_cleanable_dirty_ratio or (due and total > 0)):
        return None
    return CleaningPlan(tuple(cleanable), first_dirty_offset, uncleanable, dirty, total)


def iter_batches(segment: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a sealed segment, in bounded reads, its CRC32C checked. Raises
    ``OSError`` (EIO: a batch length no magic-2 batch has, a CRC that does not hold)."""
    position = 0
    end = segment.size
    while position + BATCH_HEADER_BYTES <= end:
        chunk = segment.read_batch(position, min(LOG_READ_CHUNK_BYTES_MAX, end - position))
        at = 0
        while at + LOG_OVERHEAD_BYTES <= len(chunk):
            _, length = _OFFSET_AND_LENGTH.unpack_from(chunk, at)
            size = LOG_OVERHEAD_BYTES + length
            if length < BATCH_LENGTH_MIN:
                # A damaged sealed segment: the clean stops (Kafka marks the log uncleanable);
                # the log itself is as it was.
                raise OSError(
                    errno.EIO, f"{segment.path.name}: a batch length of {length} at {position + at}"
                )
            if at + size > len(chunk):
                break
            yield _checked(segment, position + at, read_header(chunk, at), chunk[at : at + size])
            at += size
        if at == 0:  # one batch larger than a read
            header = read_header(segment.read_batch(position, BATCH_HEADER_BYTES))
            yield _checked(segment, position, header, segment.read_batch(position, header.size))
            at = header.size
        position += at


def _checked(
    segment: LogSegment, position: int, header: BatchHeader, data: bytes
) -> tuple[BatchHeader, bytes]:
    """The batch if its CRC32C holds: a clean never rewrites a damaged batch under a new CRC.
    Raises ``OSError`` (EIO)."""
    if len(data) != header.size or batch_crc(data, 0, len(data)) != header.crc:
        raise OSError(
            errno.EIO, f"{segment.path.name}: the batch at byte {position} fails its CRC32C"
        )
    return header, data


def build_offset_map(segments: tuple[LogSegment, ...], first_dirty_offset: int) -> OffsetMap:
    """The offset map of the dirty segments (Kafka's ``buildOffsetMap``), whole segments only:
    it stops before the segment that would take it past ``OFFSET_MAP_KEYS_MAX`` keys (the
    first dirty segment is always read whole)."""
    found = OffsetMap(end_offset=first_dirty_offset)
    for segment in segments:
        if segment.base_offset < first_dirty_offset:
            continue
        if len(found.offsets) >= OFFSET_MAP_KEYS_MAX and found.end_offset > first_dirty_offset:
            break
        for header, data in iter_batches(segment):
            if header.attributes & CONTROL_FLAG:
                continue
            records = decode_records(data, header)
            for record in records or ():
                if record.key is not None:
                    found.offsets[record.key] = header.base_offset + record.offset_delta
        found.end_offset = segment.next_offset
    return found


def filter_batch(
    header: BatchHeader,
    data: bytes,
    offset_map: OffsetMap,
    *,
    config: LogConfig,
    now_ms: int,
    producer_last_offsets: dict[int, int],
    stats: CleanerStats,
) -> tuple[bytes | None, int | None]:
    """The batch as the clean keeps it (None: dropped), and its delete horizon if it still
    holds a tombstone (Kafka's ``Cleaner.shouldRetainRecord`` and ``MemoryRecords.filterTo``)."""
    if header.attributes & CONTROL_FLAG:
        return data, None
    records = decode_records(data, header)
    if records is None:
        return data, None
    stats.records_read += len(records)
    horizon = delete_horizon_ms(header)
    tombstones_expired = horizon is not None and now_ms >= horizon
    kept = []
    for record in records:
        if record.key is None:
            continue
        latest = offset_map.offsets.get(record.key)
        if latest is not None and header.base_offset + record.offset_delta < latest:
            continue
        if record.value is None and tombstones_expired:
            continue
        kept.append(record)
    stats.records_removed += len(records) - len(kept)
    holds_tombstone = any(record.value is None for record in kept)
    new_horizon = (
        (horizon if horizon is not None else now_ms + config.delete_retention_ms)
        if holds_tombstone
        else None
    )
    if not kept:
        if header.producer_id >= 0 and producer_last_offsets.get(header.producer_id) == (
            header.last_offset
        ):
            return encode_empty_batch(header), None
        return None, None
    if len(kept) == len(records) and new_horizon == horizon:
        return data, new_horizon
    return encode_batch(header, kept, new_horizon), new_horizon


def group_segments(segments: tuple[LogSegment, ...], segment_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments whose sizes add up to at most ``segment_bytes`` and whose offsets
    fit one segment's index (Kafka's ``groupSegmentsBySize``)."""
    groups: list[list[LogSegment]] = []
    for segment in segments:
        if groups:
            last = groups[-1]
            size = sum(s.size for s in last) + segment.size
            if size <= segment_bytes and segment.next_offset - 1 - last[0].base_offset <= INT32_MAX:
                last.append(segment)
                continue
        groups.append([segment])
    return groups


def cleaned_path(directory: Path, base_offset: int, suffix: str, state: str) -> Path:
    return directory / (segment_name(base_offset, suffix) + state)


@dataclass(slots=True)
class CleanedGroup:
    """The ``.cleaned`` files of one group, written and fsynced, and the earliest delete
    horizon they hold (None: no tombstone)."""

    base_offset: int
    size: int
    horizon_ms: int | None


def write_cleaned(
    directory: Path,
    group: list[LogSegment],
    offset_map: OffsetMap,
    *,
    config: LogConfig,
    now_ms: int,
    producer_last_offsets: dict[int, int],
    stats: CleanerStats,
) -> CleanedGroup:
    """Write ``group`` cleaned into ``.cleaned`` files (fsynced, the directory too), with
    both indexes built as ``LogSegment.append`` builds them. Raises ``OSError``."""
    base = group[0].base_offset
    paths = [cleaned_path(directory, base, suffix, CLEANED_SUFFIX) for suffix in _SEGMENT_SUFFIXES]
    for path in paths:
        path.unlink(missing_ok=True)
    offset_index = OffsetIndex(paths[0], base)
    time_index = TimeIndex(paths[1], base)
    for path in paths[:2]:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
    fd = os.open(paths[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    horizon_min: int | None = None
    try:
        position = 0
        since_entry = 0
        max_timestamp, max_timestamp_offset = NO_TIMESTAMP, base
        batches = [(s, h, d) for s in group for h, d in iter_batches(s)]
        for number, (_, header, data) in enumerate(batches):
            stats.bytes_read += len(data)
            kept, horizon = filter_batch(
                header,
                data,
                offset_map,
                config=config,
                now_ms=now_ms,
                producer_last_offsets=producer_last_offsets,
                stats=stats,
            )
            if kept is None and number == len(batches) - 1:
                kept = encode_empty_batch(header)  # the group ends where its segments ended
            if kept is None:
                continue
            if horizon is not None:
                horizon_min = horizon if horizon_min is None else min(horizon_min, horizon)
            written = read_header(kept)
            write_all(fd, kept, position)
            if written.max_timestamp > max_timestamp:
                max_timestamp, max_timestamp_offset = written.max_timestamp, written.last_offset
            if since_entry > INDEX_INTERVAL_BYTES:
                offset_index.append(written.last_offset, position)
                time_index.maybe_append(max_timestamp, max_timestamp_offset)
                since_entry = 0
            since_entry += len(kept)
            position += len(kept)
        time_index.maybe_append(max_timestamp, max_timestamp_offset)
        fsync_fd(fd)
    finally:
        os.close(fd)
    offset_index.flush()
    time_index.flush()
    fsync_directory(directory)
    stats.segments_read += len(group)
    stats.segments_written += 1
    stats.bytes_written += position
    return CleanedGroup(base, position, horizon_min)


def _rename(directory: Path, base: int, suffix: str, old: str, new: str) -> None:
    source = cleaned_path(directory, base, suffix, old)
    target = cleaned_path(directory, base, suffix, new)
    os.rename(source, target)


def swap_in(
    directory: Path,
    base: int,
    old: list[LogSegment],
    stop_at: Callable[[str], None] = lambda _: None,
) -> None:
    """Replace ``old`` by the cleaned files of ``base`` (Kafka's ``replaceSegments``), each step
    durable before the next; ``stop_at(step)`` is called after each step (tests cut the swap
    there). Raises ``OSError``."""
    for suffix in _SEGMENT_SUFFIXES:
        _rename(directory, base, suffix, CLEANED_SUFFIX, SWAP_SUFFIX)
        if suffix == INDEX_SUFFIX:
            stop_at("one index renamed to .swap")
    fsync_directory(directory)
    stop_at("renamed to .swap")
    for number, segment in enumerate(old):
        segment.delete_files()
        if number == 0:
            stop_at("first old segment deleted")
    fsync_directory(directory)
    stop_at("old segments deleted")
    for suffix in _SEGMENT_SUFFIXES:
        _rename(directory, base, suffix, SWAP_SUFFIX, "")
        if suffix == TIME_INDEX_SUFFIX:
            stop_at("indexes renamed in")
    fsync_directory(directory)
    stop_at("swapped")


def _next_offset_of(path: Path) -> int | None:
    """The next offset after the last batch of a ``.log.swap`` (fsynced whole before it was
    renamed), by its headers; None if it holds no batch."""
    found = None
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position + LOG_OVERHEAD_BYTES + 15 <= size:
            head = os.pread(fd, 27, position)
            base, length = _OFFSET_AND_LENGTH.unpack_from(head, 0)
            (delta,) = struct.unpack_from(">i", head, _LAST_OFFSET_DELTA_AT)
            found = base + delta + 1
            position += LOG_OVERHEAD_BYTES + length
    finally:
        os.close(fd)
    return found


def complete_swaps(directory: Path, logger: object) -> int:
    """Finish or discard what a crash left of a clean (Kafka's ``LogLoader``): ``.cleaned``
    files are deleted; a ``.log.swap`` (the clean had committed) replaces the segments whose
    base offsets fall in its offset range and is renamed in, its indexes with it; a lone
    index ``.swap`` goes in only where its segment has no index left. Swaps completed."""
    names = os.listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            os.unlink(directory / name)
    completed = 0
    bases = sorted(
        int(name[:OFFSET_DIGITS])
        for name in names
        if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and name[:OFFSET_DIGITS].isdigit()
    )
    for base in bases:
        swap = cleaned_path(directory, base, LOG_SUFFIX, SWAP_SUFFIX)
        end = _next_offset_of(swap)
        replaced = [
            int(name[:OFFSET_DIGITS])
            for name in os.listdir(directory)
            if name.endswith(LOG_SUFFIX)
            and name[:OFFSET_DIGITS].isdigit()
            and base <= int(name[:OFFSET_DIGITS]) < (end if end is not None else base + 1)
        ]
        for old in replaced:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                _unlink(directory / segment_name(old, suffix))
        fsync_directory(directory)
        for suffix in _SEGMENT_SUFFIXES:
            if cleaned_path(directory, base, suffix, SWAP_SUFFIX).exists():
                _rename(directory, base, suffix, SWAP_SUFFIX, "")
        fsync_directory(directory)
        completed += 1
        info = getattr(logger, "warning", None)
        if info is not None:
            info("log_cleaner_swap_completed", segment=swap.name, replaced=len(replaced))
    for name in os.listdir(directory):
        if name.endswith(SWAP_SUFFIX):
            final = directory / name[: -len(SWAP_SUFFIX)]
            if final.exists():
                os.unlink(directory / name)
            else:
                os.rename(directory / name, final)
    return completed


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
