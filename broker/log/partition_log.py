"""One partition's log on its leader (Kafka's ``UnifiedLog`` / ``LocalLog``), in Kafka's
on-disk layout inside the partition directory reconciliation made
(docs/architecture.md#partition-logs):

    {topic}-{p}/partition.metadata            the topic id (KIP-516), written by logdirs.py
    {topic}-{p}/00000000000000000000.log      record batches, as served
    {topic}-{p}/00000000000000000000.index    offset index, every 4 KiB
    {topic}-{p}/00000000000000000000.timeindex
    {topic}-{p}/00000000000000000000.snapshot idempotent producers' state (producer_state.py)
    {topic}-{p}/leader-epoch-checkpoint

Threads: every method takes the log's lock, so appends (the listeners' writer thread), reads
(their reader thread) and retention never interleave on one partition; nothing here runs on an
event loop. Offsets are dense: a batch's base offset is the log end offset, assigned under the
lock, so the offsets of acknowledged records are consecutive and increasing (I22,
docs/invariants.md). A batch is visible to readers only once written whole.

Opening is recovery (Kafka's ``LogLoader``): leftovers of a crash are removed, segments wholly
below the log start offset are deleted, every segment from the one holding the recovery point
on is checked batch by batch and cut after its last valid batch (later segments are then
deleted), the indexes of what was checked are rebuilt, and the leader-epoch cache follows the
batches. The recovery point (the offset below which everything was fsynced: a rolled segment,
a clean close) comes from the log dir's ``recovery-point-offset-checkpoint``; a log whose last
segment ends exactly there (walking its batch headers from the last index entry) was closed
cleanly and is not checked again.

A failed write (EIO, ENOSPC) is undone (the file cut back to its size before) and answered
KAFKA_STORAGE_ERROR; if even that fails, or an fsync fails, the log is failed for good until
the broker restarts (``failed``), when recovery cuts whatever was torn.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from broker.log.batch import (
    BATCH_HEADER_BYTES,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    BatchHeader,
    ProducedBatch,
    read_header,
    record_timestamps,
    stamp,
)
from broker.log.config import LogConfig
from broker.log.epochs import UNDEFINED_EPOCH, LeaderEpochCache
from broker.log.errors import (
    OFFSET_OUT_OF_RANGE,
    LogClosedError,
    LogStorageError,
    RecordBatchError,
)
from broker.log.index import NO_TIMESTAMP
from broker.log.producer_state import (
    SNAPSHOT_SUFFIX,
    ProducerState,
    ProducerStateError,
    snapshot_offsets,
)
from broker.log.segment import LOG_SUFFIX, OFFSET_DIGITS, LogSegment, segment_name
from quorum.storage.fsutil import fsync_directory

__all__ = ["UNDEFINED_EPOCH", "AppendResult", "PartitionLog", "ReadResult", "TimestampOffset"]

RECORD_LIST_TOO_LARGE: Final = 18
# What a crash can leave in a partition directory: a checkpoint's temporary file, and (from
# Kafka's own tools or a later version of this log) segments being deleted, cleaned or swapped.
LEFTOVER_SUFFIXES: Final = (".tmp", ".deleted", ".cleaned", ".swap")
SEGMENT_FILE_SUFFIXES: Final = (LOG_SUFFIX, ".index", ".timeindex")


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    """The broker's time for a LogAppendTime topic, else -1 (Kafka's ``logAppendTime``)."""
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int
    leader_epoch: int


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        *,
        recovery_point: int,
        log_start_offset: int,
        now_ms: int,
        logger: Any,
    ) -> None:
        """Open (and recover) the log in ``directory``. Blocking: call it off the loop."""
        self.directory = directory
        self._log = logger.bind(partition_dir=directory.name)
        self._lock = threading.Lock()
        self.failed: str | None = None
        self.closed = False
        self.epochs = LeaderEpochCache(directory)
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.truncated_bytes = 0
        self.producers = ProducerState()
        self._open(recovery_point, log_start_offset, now_ms)
        self._load_producer_state()

    # ----- opening ----------------------------------------------------------------------------

    def _open(self, recovery_point: int, log_start_offset: int, now_ms: int) -> None:
        bases = self._segment_files()
        fresh = not bases
        if fresh:
            bases = [max(log_start_offset, 0)]
        self.segments = [LogSegment(self.directory, base, now_ms) for base in bases]
        self.log_start_offset = max(log_start_offset, bases[0])
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self.segments.pop(0).delete_files()
        if not fresh:
            first_unsafe = self._first_to_recover(recovery_point)
            if self.epochs.problem is not None:
                self._log.warning("leader_epoch_checkpoint_unreadable", problem=self.epochs.problem)
                first_unsafe = 0
            if first_unsafe < len(self.segments):
                self._recover_from(first_unsafe)
        active = self.segments[-1]
        active.open_active()
        active.offset_index.load(active=True)
        active.time_index.load(active=True)
        active.bytes_since_index_entry = active.size - active.offset_index.last()[1]
        if fresh:
            fsync_directory(self.directory)
        self.recovery_point = self.log_end_offset
        self.epochs.truncate_from_end(self.log_end_offset)
        self.epochs.truncate_from_start(self.log_start_offset)

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def _load_producer_state(self) -> None:
        """Idempotent producers' state (``producer_state.py``): the newest readable snapshot
        at or below the log end offset, then every batch header from its offset on (from the
        log start without one). Snapshots past the log end (the tail was cut) are deleted."""
        end = self.log_end_offset
        state: ProducerState | None = None
        start = self.log_start_offset
        for offset in reversed(snapshot_offsets(self.directory)):
            path = self._snapshot_path(offset)
            if offset > end:
                path.unlink(missing_ok=True)
                continue
            if state is not None:
                continue
            try:
                state = ProducerState.decode_snapshot(path.read_bytes())
                start = max(offset, self.log_start_offset)
            except (OSError, ProducerStateError) as exc:
                self._log.warning("producer_snapshot_unreadable", file=path.name, problem=str(exc))
        self.producers = state if state is not None else ProducerState()
        for segment in self.segments:
            if segment.next_offset <= start:
                continue
            position = segment.offset_index.lookup(start)[1] if segment.base_offset <= start else 0
            self.producers.replay(
                header
                for header in segment.producer_headers_from(position)
                if header.base_offset >= start
            )

    def _write_producer_snapshot(self, offset: int) -> None:
        """Kafka's snapshot at a roll and a clean close; a failure only costs a longer replay
        at the next open, so it is logged, not raised."""
        try:
            self.producers.write_snapshot(self.directory, offset)
        except OSError as exc:
            self._log.warning("producer_snapshot_failed", offset=offset, error=str(exc))

    def _segment_files(self) -> list[int]:
        """Base offsets of the ``.log`` files, after removing a crash's leftovers and index
        files without a ``.log``."""
        bases: list[int] = []
        names = os.listdir(self.directory)
        logs = {name for name in names if name.endswith(LOG_SUFFIX)}
        for name in names:
            path = self.directory / name
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

    def _first_to_recover(self, recovery_point: int) -> int:
        """The index of the first segment to check: the one holding the recovery point, or
        none (``len``) when the last segment ends exactly at it (a clean close). Every earlier
        segment is loaded as it is; one whose files do not add up is checked too."""
        starts = [segment.base_offset for segment in self.segments]
        holding = max(bisect.bisect_right(starts, recovery_point) - 1, 0)
        for index, segment in enumerate(self.segments[:holding]):
            problem = segment.load_sealed(self.segments[index + 1].base_offset)
            if problem is not None:
                self._log.warning(
                    "log_segment_unreadable", segment=segment.path.name, problem=problem
                )
                return index
        last = self.segments[-1]
        if (
            holding == len(self.segments) - 1
            and last.load_sealed(None) is None
            and last.next_offset == recovery_point
        ):
            last.rolling_timestamp_ms = self._first_timestamp(last)
            return len(self.segments)
        return holding

    @staticmethod
    def _first_timestamp(segment: LogSegment) -> int | None:
        """The first batch's largest timestamp: one header read (walking every header of the
        segment for it took 3 s for 200,000 batches)."""
        if segment.size < BATCH_HEADER_BYTES:
            return None
        return read_header(segment.read_batch(0, BATCH_HEADER_BYTES)).max_timestamp

    def _recover_from(self, first: int) -> None:
        """Check segments ``first`` .. last; cut after the last valid batch."""
        self.epochs.truncate_from_end(self.segments[first].base_offset)
        for index in range(first, len(self.segments)):
            segment = self.segments[index]
            expected = segment.base_offset
            if index > first and expected != self.segments[index - 1].next_offset:
                self._drop_from(index, "its base offset does not continue the log")
                break
            cut = segment.recover(self.epochs.assign, self.epochs.latest_epoch)
            segment.flush()
            if cut:
                self.truncated_bytes += cut
                self._log.warning(
                    "log_tail_truncated",
                    segment=segment.path.name,
                    bytes_truncated=cut,
                    log_end_offset=segment.next_offset,
                )
                self._drop_from(index + 1, "it follows a truncated segment")
                break
        fsync_directory(self.directory)

    def _drop_from(self, index: int, why: str) -> None:
        for segment in self.segments[index:]:
            self._log.warning("log_segment_deleted", segment=segment.path.name, reason=why)
            segment.delete_files()
        del self.segments[index:]

    # ----- state ---------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The log end offset: the leader is the only replica holding data (no replication
        yet), so a batch is committed once it is in the page cache, as with Kafka's acks=1."""
        return self.segments[-1].next_offset

    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def _check_usable(self) -> None:
        if self.closed:
            raise LogClosedError(f"the log of {self.directory.name} is closed")
        if self.failed is not None:
            raise LogStorageError(self.failed)

    def _fail(self, what: str, exc: OSError) -> LogStorageError:
        self.failed = (
            f"the log of {self.directory.name} failed ({what}: {exc}); it serves again once the "
            "broker restarts and recovers it (check the disk: dmesg, df)"
        )
        self._log.error("partition_log_failed", action=what, error=str(exc), errno=exc.errno)
        return LogStorageError(self.failed)

    # ----- appends ------------------------------------------------------------------------------

    def append(
        self, batch: ProducedBatch, leader_epoch: int, config: LogConfig, now_ms: int
    ) -> AppendResult:
        """Append one checked batch as the leader of ``leader_epoch``: its base offset is the
        log end offset. A batch with a producer id is checked against that producer's state
        first; a retry of one of its last 5 batches is not appended and is answered with that
        batch's offsets. Raises ``RecordBatchError`` (RECORD_LIST_TOO_LARGE: larger than a
        segment; the producer-state codes of ``producer_state.py``) or ``LogStorageError``."""
        header = batch.header
        if len(batch.data) > config.segment_bytes:
            raise RecordBatchError(
                RECORD_LIST_TOO_LARGE,
                f"the record batch is {len(batch.data)} bytes; allowed: at most the topic's "
                f"segment.bytes ({config.segment_bytes})",
            )
        log_append_ms = now_ms if config.timestamps.log_append_time else None
        with self._lock:
            self._check_usable()
            if header.producer_id >= 0:  # Kafka's hasProducerId
                duplicate = self.producers.check(header)
                if duplicate is not None:
                    return AppendResult(
                        base_offset=duplicate.first_offset,
                        last_offset=duplicate.last_offset,
                        log_append_time_ms=-1,
                        log_start_offset=self.log_start_offset,
                    )
            base = self.log_end_offset
            active = self.segments[-1]
            if self._should_roll(
                active, size=len(batch.data), header=header, base=base, config=config, now_ms=now_ms
            ):
                active = self._roll(now_ms)
            stamped = stamp(batch.data, base, leader_epoch, log_append_ms)
            written = header._replace(
                base_offset=base,
                partition_leader_epoch=leader_epoch,
                max_timestamp=header.max_timestamp if log_append_ms is None else log_append_ms,
                attributes=header.attributes
                | (TIMESTAMP_TYPE_LOG_APPEND_TIME if log_append_ms is not None else 0),
            )
            self._write(active, stamped, written, leader_epoch)
            self.producers.update(written)
            return AppendResult(
                base_offset=base,
                last_offset=written.last_offset,
                log_append_time_ms=-1 if log_append_ms is None else log_append_ms,
                log_start_offset=self.log_start_offset,
            )

    def _write(
        self, segment: LogSegment, stamped: bytearray, header: BatchHeader, leader_epoch: int
    ) -> None:
        saved = (
            segment.size,
            segment.next_offset,
            segment.max_timestamp,
            segment.max_timestamp_offset,
            segment.rolling_timestamp_ms,
            segment.bytes_since_index_entry,
        )
        entries = (segment.offset_index.entries, segment.time_index.entries)
        try:
            if leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(leader_epoch, header.base_offset)
            segment.append(stamped, header)
        except OSError as exc:
            (
                segment.size,
                segment.next_offset,
                segment.max_timestamp,
                segment.max_timestamp_offset,
                segment.rolling_timestamp_ms,
                segment.bytes_since_index_entry,
            ) = saved
            try:
                segment.truncate_to_size(saved[0], entries)
            except OSError as undo:
                raise self._fail("undoing a failed append", undo) from exc
            self._log.warning(
                "partition_append_failed",
                error=str(exc),
                errno=exc.errno,
                log_end_offset=segment.next_offset,
                action="undone; answered KAFKA_STORAGE_ERROR",
            )
            raise LogStorageError(
                f"writing {len(stamped)} bytes to {segment.path} failed: {exc} (nothing was "
                "appended; retry once the disk has room)"
            ) from exc

    def _should_roll(
        self,
        segment: LogSegment,
        *,
        size: int,
        header: BatchHeader,
        base: int,
        config: LogConfig,
        now_ms: int,
    ) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: the batch would pass segment.bytes, segment.ms
        has passed since the segment's first batch (by the batches' timestamps), an index is
        full, or the batch's offsets do not fit relative to the segment's base."""
        if segment.size == 0:
            return False
        first = segment.rolling_timestamp_ms
        if first is not None and first >= 0 and header.max_timestamp >= 0:
            waited = header.max_timestamp - first
        else:
            waited = now_ms - segment.created_ms
        return (
            segment.size > config.segment_bytes - size
            or waited > config.segment_ms
            or segment.offset_index.full
            or segment.time_index.full
            or not segment.fits(base + header.last_offset_delta)
        )

    def _roll(self, now_ms: int) -> LogSegment:
        """Seal the active segment (flushed: the recovery point moves to its end) and start a
        new one at the log end offset."""
        old = self.segments[-1]
        try:
            old.seal()
            self._write_producer_snapshot(old.next_offset)
            new = LogSegment(self.directory, old.next_offset, now_ms)
            new.open_active()
            fsync_directory(self.directory)
        except OSError as exc:
            raise self._fail("rolling a segment", exc) from exc
        self.segments.append(new)
        self.recovery_point = new.base_offset
        self._log.info("log_segment_rolled", segment=segment_name(new.base_offset))
        return new

    # ----- reads ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one: bool) -> ReadResult:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (or the first
        batch whatever its size when ``min_one``), from one segment. Raises
        ``RecordBatchError`` (OFFSET_OUT_OF_RANGE) or ``LogStorageError``."""
        with self._lock:
            self._check_usable()
            end = self.log_end_offset
            data = b""
            if not self.log_start_offset <= offset <= end:
                raise RecordBatchError(
                    OFFSET_OUT_OF_RANGE,
                    f"offset {offset} is out of range; the log holds [{self.log_start_offset}, "
                    f"{end}) (log start offset, log end offset)",
                )
            if offset < end:
                index = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
                segment = self.segments[index]
                try:
                    found = segment.find(offset)
                    if found is not None:
                        data = segment.read(found[0], max_bytes, min_one)
                except OSError as exc:
                    raise LogStorageError(f"reading {segment.path} failed: {exc}") from exc
            return ReadResult(data, end, self.log_start_offset, end)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        with self._lock:
            self._check_usable()
            return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def latest_epoch(self) -> int:
        with self._lock:
            return self.epochs.latest_epoch

    def offset_for_timestamp(self, target: int) -> TimestampOffset | None:
        """ListOffsets by timestamp (>= 0): the first record whose timestamp is at least
        ``target`` (Kafka's ``searchOffsetInLocalLog``), or None."""
        with self._lock:
            self._check_usable()
            for segment in self.segments:
                if segment.max_timestamp < target:
                    continue
                start = max(segment.time_index.lookup(target), self.log_start_offset)
                _, position = segment.offset_index.lookup(start)
                for at, header in segment.batches_from(position):
                    if header.max_timestamp >= target:
                        return self._record_at(segment, at, header, lambda ts: ts >= target)
        return None

    def max_timestamp(self) -> TimestampOffset | None:
        """ListOffsets -3: the record with the largest timestamp (its first, if several)."""
        with self._lock:
            self._check_usable()
            best = max(self.segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp == NO_TIMESTAMP:
                return None
            _, position = best.offset_index.lookup(best.max_timestamp_offset)
            for at, header in best.batches_from(position):
                if header.max_timestamp == best.max_timestamp:
                    return self._record_at(best, at, header, lambda ts: ts == best.max_timestamp)
        return None

    def _record_at(
        self, segment: LogSegment, at: int, header: BatchHeader, wanted: Callable[[int], bool]
    ) -> TimestampOffset:
        """The first record of the batch at ``at`` whose timestamp is ``wanted``; a batch whose
        records cannot be read here (snappy, lz4, zstd) answers its base offset."""
        records = record_timestamps(segment.read_batch(at, header.size))
        for offset, timestamp in records or ():
            if wanted(timestamp):
                return TimestampOffset(timestamp, offset, header.partition_leader_epoch)
        return TimestampOffset(
            header.max_timestamp, header.base_offset, header.partition_leader_epoch
        )

    def earliest(self) -> TimestampOffset:
        with self._lock:
            self._check_usable()
            epoch = self.epochs.epoch_for(self.log_start_offset)
            return TimestampOffset(NO_TIMESTAMP, self.log_start_offset, epoch)

    def latest(self) -> TimestampOffset:
        with self._lock:
            self._check_usable()
            return TimestampOffset(NO_TIMESTAMP, self.log_end_offset, self.epochs.latest_epoch)

    # ----- retention, flush, close ---------------------------------------------------------------

    def delete_old_segments(
        self, config: LogConfig, now_ms: int, persist_log_start: Callable[[], None]
    ) -> int:
        """Kafka's retention: delete the oldest segments whose largest timestamp is older than
        retention.ms, then while the log is larger than retention.bytes by a whole segment
        (the active one too, after a roll, when it qualifies and is not empty). The new log
        start offset is made durable (``persist_log_start``) before any file is deleted. The
        number of segments deleted."""
        with self._lock:
            self._check_usable()
            self.producers.expire(now_ms)
            deletable = self._deletable(config, now_ms)
            if not deletable:
                return 0
            if deletable == len(self.segments):
                self._roll(now_ms)
            doomed = self.segments[:deletable]
            self.log_start_offset = self.segments[deletable].base_offset
            self.epochs.truncate_from_start(self.log_start_offset)
            try:
                persist_log_start()
                for segment in doomed:
                    segment.delete_files()
                fsync_directory(self.directory)
            except OSError as exc:
                raise self._fail("deleting segments past retention", exc) from exc
            del self.segments[:deletable]
            self._drop_old_producer_snapshots()
            self._log.info(
                "log_segments_deleted",
                segments=deletable,
                log_start_offset=self.log_start_offset,
                reason="retention",
            )
            return deletable

    def _deletable(self, config: LogConfig, now_ms: int) -> int:
        count = 0
        excess = self.size_bytes() - config.retention_bytes if config.retention_bytes >= 0 else -1
        for index, segment in enumerate(self.segments):
            last = index == len(self.segments) - 1
            if last and segment.size == 0:
                break
            newest = segment.max_timestamp
            if newest <= 0:
                newest = int(os.stat(segment.path).st_mtime * 1000)
            expired = config.retention_ms >= 0 and now_ms - newest > config.retention_ms
            oversized = excess >= 0 and excess - segment.size >= 0
            if not (expired or oversized):
                break
            excess -= segment.size
            count += 1
        return count

    def _drop_old_producer_snapshots(self) -> None:
        """Snapshots below the log start offset but the newest of them (loading starts there,
        then replays from the log start)."""
        try:
            below = [o for o in snapshot_offsets(self.directory) if o < self.log_start_offset]
            for offset in below[:-1]:
                self._snapshot_path(offset).unlink(missing_ok=True)
        except OSError as exc:  # only disk space is lost: the next retention run tries again
            self._log.warning("producer_snapshot_delete_failed", error=str(exc))

    def flush(self) -> int:
        """fsync the active segment: everything up to the log end offset is durable; the new
        recovery point."""
        with self._lock:
            self._check_usable()
            try:
                self.segments[-1].flush()
            except OSError as exc:
                raise self._fail("flushing", exc) from exc
            self.recovery_point = self.log_end_offset
            return self.recovery_point

    def close(self) -> None:
        """Close the files; nothing is read or written afterwards (the directory may be about
        to move to ``deleting/``): a caller still holding the log gets ``LogClosedError``.
        A log that has not failed first writes its producer snapshot at the log end offset
        (Kafka's clean-shutdown snapshot: the next open replays nothing)."""
        with self._lock:
            if not self.closed and self.failed is None:
                self._write_producer_snapshot(self.log_end_offset)
            for segment in self.segments:
                segment.close()
            self.closed = True

    def first_batch_header(self) -> BatchHeader | None:
        """The first batch's header (tests and tools)."""
        with self._lock:
            first = self.segments[0]
            if first.size == 0:
                return None
            return read_header(first.read_batch(0, 61))
