"""One partition's log on its leader or a follower (Kafka's ``UnifiedLog`` / ``LocalLog``), in
Kafka's on-disk layout inside the partition directory reconciliation made
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

Opening is recovery (Kafka's ``LogLoader``: ``loader.py``).

A failed write (EIO, ENOSPC) is undone (the file cut back to its size before) and answered
KAFKA_STORAGE_ERROR; if even that fails, or an fsync fails, the log is failed for good until
the broker restarts (``failed``), when recovery cuts whatever was torn.

Replication (docs/architecture.md#partition-logs): the high watermark is kept apart from the
log end offset and moved by the replica layer, never by an append; consumers read below it
(``read(max_offset=)``); a follower appends its leader's batches byte for byte
(``append_as_follower``) and truncates a diverged tail (``truncate_to``,
``truncate_fully_and_start_at``).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.log.batch import (
    BATCH_HEADER_BYTES,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    BatchHeader,
    ProducedBatch,
    batches_below,
    check_replicated,
    read_header,
    record_timestamps,
    stamp,
)
from broker.log.cleaner import (
    CleanerStats,
    build_offset_map,
    complete_swaps,
    group_segments,
    plan_cleaning,
    swap_in,
    write_cleaned,
)
from broker.log.config import LogConfig
from broker.log.epochs import UNDEFINED_EPOCH, LeaderEpochCache
from broker.log.errors import (
    INVALID_RECORD,
    OFFSET_OUT_OF_RANGE,
    RECORD_LIST_TOO_LARGE,
    UNKNOWN_SERVER_ERROR,
    LogClosedError,
    LogStorageError,
    RecordBatchError,
)
from broker.log.index import INDEX_INTERVAL_BYTES, NO_TIMESTAMP
from broker.log.loader import load_producer_state, load_segments, snapshot_path
from broker.log.producer_state import (
    ActiveProducer,
    ProducerState,
    snapshot_offsets,
)
from broker.log.records import has_null_key, holds_record_from
from broker.log.segment import LogSegment, segment_name
from quorum.storage.fsutil import fsync_directory

__all__ = ["UNDEFINED_EPOCH", "AppendResult", "PartitionLog", "ReadResult", "TimestampOffset"]


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


class _Run:
    """Batches of a follower's append bound for one segment, written with one write: where
    they start in the fetched bytes, their size, their headers, and what appending them
    would do to the segment's roll conditions (index entries added, bytes since the last
    entry, the first batch's timestamp when the segment is empty)."""

    def __init__(self, start: int, bytes_since_index_entry: int) -> None:
        self.start = start
        self.size = 0
        self.headers: list[BatchHeader] = []
        self.index_entries = 0
        self.bytes_since_index_entry = bytes_since_index_entry
        self.first_timestamp: int | None = None

    def add(self, header: BatchHeader) -> None:
        if not self.headers:
            self.first_timestamp = header.max_timestamp
        if self.bytes_since_index_entry > INDEX_INTERVAL_BYTES:
            self.index_entries += 1
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += header.size
        self.size += header.size
        self.headers.append(header)


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        *,
        recovery_point: int,
        log_start_offset: int,
        now_ms: int,
        logger: Any,
        high_watermark: int = 0,
        on_truncated: Callable[[PartitionLog], None] | None = None,
        first_dirty_offset: int = 0,
    ) -> None:
        """Open (and recover) the log in ``directory``. Blocking: call it off the loop.
        ``high_watermark`` is the log dir's checkpointed one (clamped to the recovered log),
        ``first_dirty_offset`` its cleaner offset (likewise);
        ``on_truncated`` is called after a truncation, outside the log's lock, to write the
        log dir's checkpoints (``LogManager``: the lowered recovery point, log start offset
        and high watermark are durable before the log grows past the old ones again)."""
        self.directory = directory
        self._log = logger.bind(partition_dir=directory.name)
        self._lock = threading.Lock()
        self.failed: str | None = None
        self.closed = False
        self.epochs = LeaderEpochCache(directory)
        self._on_truncated = on_truncated
        loaded = load_segments(
            directory,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
            epochs=self.epochs,
            logger=self._log,
        )
        self.segments = loaded.segments
        self.log_start_offset = loaded.log_start_offset
        self.truncated_bytes = loaded.truncated_bytes
        self.recovery_point = self.log_end_offset
        self.producers = self._loaded_producer_state()
        self._high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        # The log cleaner's: where the last clean's dirty section ended (the log dir's
        # cleaner-offset-checkpoint, within the recovered log), and the earliest delete
        # horizon the last clean assigned (the log is cleaned again once it passes; after a
        # restart, at the next clean).
        self.first_dirty_offset = min(
            max(first_dirty_offset, self.log_start_offset), self.log_end_offset
        )
        self.delete_horizon_due_ms: int | None = None
        # Truncations so far: a clean whose offset map was built before one is dropped (Kafka
        # aborts cleaning a partition it truncates), its records may be gone.
        self._truncations = 0

    # ----- opening ----------------------------------------------------------------------------

    def _loaded_producer_state(self) -> ProducerState:
        return load_producer_state(self.directory, self.segments, self.log_start_offset, self._log)

    def _write_producer_snapshot(self, offset: int) -> None:
        """Kafka's snapshot at a roll and a clean close; a failure only costs a longer replay
        at the next open, so it is logged, not raised."""
        try:
            self.producers.write_snapshot(self.directory, offset)
        except OSError as exc:
            self._log.warning("producer_snapshot_failed", offset=offset, error=str(exc))

    # ----- state ---------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which every record is committed (held by every in-sync replica):
        consumers read below it. Kept apart from the log end offset, as Kafka's
        ``UnifiedLog.highWatermark``: the leader's replica layer moves it
        (``update_high_watermark``), a follower takes its leader's
        (``set_follower_high_watermark``); an append never moves it, a truncation lowers it to
        the new log end. Always within [log start offset, log end offset]."""
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> bool:
        """The leader's: move the high watermark up to ``offset`` (clamped to the log end
        offset), never down; whether it moved. The replica layer calls it once enough
        in-sync replicas hold the records below ``offset`` (right after the append when the
        leader is the only one)."""
        with self._lock:
            self._check_usable()
            return self._raise_high_watermark(offset)

    def set_follower_high_watermark(self, leader_hw: int) -> bool:
        """A follower's, from its leader's answer: min(``leader_hw``, log end offset), only
        forward (Kafka's ``maybeUpdateHighWatermark``; the follower may not hold everything
        below its leader's yet, and an older answer never lowers it; only a truncation
        does); whether it moved."""
        with self._lock:
            self._check_usable()
            return self._raise_high_watermark(leader_hw)

    def _raise_high_watermark(self, offset: int) -> bool:
        new = min(offset, self.log_end_offset)
        if new <= self._high_watermark:
            return False
        self._high_watermark = new
        return True

    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def active_producers(self) -> list[ActiveProducer]:
        """The producers this log remembers (Kafka's ``UnifiedLog.activeProducers``), least
        recently appended to first."""
        with self._lock:
            return self.producers.active()

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
        if config.compact and has_null_key(batch.data, header):
            raise RecordBatchError(
                INVALID_RECORD,
                "Compacted topic cannot accept message without key in topic partition "
                f"{self.directory.name} (its cleanup.policy holds compact: every record needs a "
                "key)",
            )
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
                active,
                size=len(batch.data),
                header=header,
                last_offset=base + header.last_offset_delta,
                config=config,
                now_ms=now_ms,
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
            self._write(active, stamped, [written])
            self.producers.update(written)
            return AppendResult(
                base_offset=base,
                last_offset=written.last_offset,
                log_append_time_ms=-1 if log_append_ms is None else log_append_ms,
                log_start_offset=self.log_start_offset,
            )

    def append_as_follower(self, data: bytes, config: LogConfig, now_ms: int) -> int:
        """Append what a follower fetched from its leader (Kafka's ``appendAsFollower``):
        whole magic-2 batches exactly as the leader wrote them, offsets and partition leader
        epochs assigned, possibly followed by a partial batch (a fetch cut at its byte limit:
        ignored). Every batch is checked first (``batch.check_replicated``: framing, magic,
        CRC32C, size, a base offset at or past the log end offset), and nothing is written if
        one fails (``RecordBatchError``). They are written byte for byte, one write per
        segment (rolls by ``append``'s rules), each new leader epoch assigned at its first
        batch, producer state updated from each batch (a follower that becomes leader
        deduplicates its producers' retries). The high watermark does not move
        (``set_follower_high_watermark``). The new log end offset. Raises ``RecordBatchError``
        or ``LogStorageError``. The CRCs are computed before the lock is taken (readers do not
        wait for them); only the first base offset is checked under it."""
        view = memoryview(data)
        headers = check_replicated(view, None, config.segment_bytes)
        with self._lock:
            self._check_usable()
            if headers and headers[0].base_offset < self.log_end_offset:
                raise RecordBatchError(
                    UNKNOWN_SERVER_ERROR,
                    f"the fetched batches start at offset {headers[0].base_offset}, below this "
                    f"replica's log end offset {self.log_end_offset}: a follower appends only "
                    "at or past its log end (past it: a compacted leader's gap)",
                )
            active = self.segments[-1]
            run = _Run(0, active.bytes_since_index_entry)
            for header in headers:
                if self._should_roll(
                    active,
                    size=header.size,
                    header=header,
                    last_offset=header.last_offset,
                    config=config,
                    now_ms=now_ms,
                    pending=run,
                ):
                    self._write_run(active, view, run)
                    active = self._roll(now_ms)
                    run = _Run(run.start + run.size, active.bytes_since_index_entry)
                run.add(header)
            self._write_run(active, view, run)
            return self.log_end_offset

    def _write_run(self, segment: LogSegment, view: memoryview, run: _Run) -> None:
        if run.headers:
            self._write(segment, view[run.start : run.start + run.size], run.headers)
            self.producers.replay(run.headers)

    def _write(
        self,
        segment: LogSegment,
        batches: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
    ) -> None:
        """Write ``batches`` at the end of the active segment with one write, each new leader
        epoch assigned (its checkpoint written) first; a failed write is undone."""
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
            assigned = False
            for header in headers:
                if header.partition_leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(
                        header.partition_leader_epoch, header.base_offset, write=False
                    )
                    assigned = True
            if assigned:
                self.epochs.write()
            segment.append_batches(batches, headers)
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
                self.epochs.truncate_from_end(segment.next_offset)
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
                f"writing {len(batches)} bytes to {segment.path} failed: {exc} (nothing was "
                "appended; retry once the disk has room)"
            ) from exc

    def _should_roll(
        self,
        segment: LogSegment,
        *,
        size: int,
        header: BatchHeader,
        last_offset: int,
        config: LogConfig,
        now_ms: int,
        pending: _Run | None = None,
    ) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: the batch would pass segment.bytes, segment.ms
        has passed since the segment's first batch (by the batches' timestamps), an index is
        full, or the batch's last offset does not fit relative to the segment's base.
        ``pending``: batches to be written before this one in the same write, counted as if
        appended (index entries at most one per batch, an upper bound for the time index)."""
        added = 0 if pending is None else pending.size
        more_entries = 0 if pending is None else pending.index_entries
        if segment.size + added == 0:
            return False
        first = segment.rolling_timestamp_ms
        if segment.size == 0 and pending is not None:
            first = pending.first_timestamp
        if first is not None and first >= 0 and header.max_timestamp >= 0:
            waited = header.max_timestamp - first
        else:
            waited = now_ms - segment.created_ms
        return (
            segment.size + added > config.segment_bytes - size
            or waited > config.segment_ms
            or segment.offset_index.full_after(more_entries)
            or segment.time_index.full_after(more_entries)
            or not segment.fits(last_offset)
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

    def read(
        self, offset: int, max_bytes: int, min_one: bool, *, max_offset: int | None = None
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (or the first
        batch whatever its size when ``min_one``), from one segment, and only batches whose
        last offset is below ``max_offset`` (exclusive: a consumer passes the high watermark,
        a follower None, the log end offset); an offset in [``max_offset``, log end offset]
        reads nothing. Raises ``RecordBatchError`` (OFFSET_OUT_OF_RANGE: outside [log start
        offset, log end offset]) or ``LogStorageError``."""
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
            limit = end if max_offset is None else min(max_offset, end)
            if offset < limit:
                index = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
                segment = self.segments[index]
                try:
                    found = segment.find(offset)
                    while found is None and index + 1 < len(self.segments):
                        # A gap at a segment's end (a cleaned log): the next segment serves.
                        index += 1
                        segment = self.segments[index]
                        found = segment.find(segment.base_offset)
                    if found is not None:
                        data = segment.read(found[0], max_bytes, min_one)
                        data = self._read_on_to_a_record(data, offset, index, found[0], max_bytes)
                except OSError as exc:
                    raise LogStorageError(f"reading {segment.path} failed: {exc}") from exc
                if limit < end:
                    kept = batches_below(data, limit)
                    data = data if kept == len(data) else data[:kept]
            return ReadResult(data, self._high_watermark, self.log_start_offset, end)

    def _read_on_to_a_record(
        self, data: bytes, offset: int, index: int, position: int, max_bytes: int
    ) -> bytes:
        """``data`` read at ``position`` of segment ``index``, and on batch by batch (into the
        next segments) until it holds a record at or past ``offset``: in a cleaned log the
        batches there may hold none (``holds_record_from``), and a consumer must not be
        answered with them alone. Beyond ``max_bytes`` by one batch at the most, as KIP-74's
        first batch. Under the lock."""
        position += len(data)
        while data and not holds_record_from(data, offset):
            segment = self.segments[index]
            if position < segment.size:
                more = segment.read(position, max(max_bytes - len(data), 0), True)
                if not more:
                    break
                data += more
                position += len(more)
            elif index + 1 < len(self.segments):
                index += 1
                position = 0
            else:
                break
        return data

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

    # ----- truncation (a follower's) -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding ``offset`` or a later one (Kafka's ``truncateTo``; a
        batch straddling ``offset`` goes whole, so the new log end offset may be below it):
        later segments are deleted, the one holding it cut (its indexes to match) and made
        the active one, leader epochs starting at or past the new end dropped, producer state
        rebuilt for the new end, and the high watermark, recovery point and log start offset
        lowered to it if above. An ``offset`` at or past the log end offset changes nothing;
        one below the first segment empties the log to start at ``offset``
        (``truncate_fully_and_start_at``). Raises ``LogStorageError`` (the log is then failed
        until a restart, whose recovery finishes the job).

        A crash at any point leaves a log that opens consistent: producer snapshots past the
        new end go first (a snapshot never describes batches the log lost), segments from the
        last backwards (what remains is contiguous), the cut segment's indexes before its
        ``.log`` (fsynced), and the leader-epoch checkpoint last (until then it may name
        epochs past the log end, which opening drops: ``truncate_from_end`` of the recovered
        end). The checkpointed recovery point may be past the new end until ``on_truncated``
        writes it; opening then checks the last segment."""
        with self._lock:
            self._check_usable()
            if offset >= self.log_end_offset:
                return
            if offset < self.segments[0].base_offset:
                self._truncate_fully(offset)
            else:
                self._truncate(offset)
        if self._on_truncated is not None:
            self._on_truncated(self)

    def _truncate(self, offset: int) -> None:
        index = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        holding = self.segments[index]
        old_end = self.log_end_offset
        try:
            found = holding.find(offset)
            assert found is not None, f"{holding.path} holds no batch with offset {offset}"
            new_end = read_header(holding.read_batch(found[0], BATCH_HEADER_BYTES)).base_offset
            self._delete_producer_snapshots(above=new_end)
            for segment in reversed(self.segments[index + 1 :]):
                segment.delete_files()
            removed = holding.truncate_to(offset)
            if not holding.active:
                holding.open_active()
                holding.offset_index.load(active=True)
                holding.time_index.load(active=True)
            fsync_directory(self.directory)
            deleted = len(self.segments) - index - 1
            del self.segments[index + 1 :]
            self.epochs.truncate_from_end(new_end)
            self.producers = self._loaded_producer_state()
        except OSError as exc:
            raise self._fail("truncating", exc) from exc
        self._lower_to(new_end)
        self._log.info(
            "log_truncated",
            offset=offset,
            log_end_offset=new_end,
            previous_log_end_offset=old_end,
            segments_deleted=deleted,
            bytes_truncated_in_segment=removed,
        )

    def _lower_to(self, end: int) -> None:
        self._truncations += 1
        self.first_dirty_offset = min(self.first_dirty_offset, end)
        self._high_watermark = min(self._high_watermark, end)
        self.recovery_point = min(self.recovery_point, end)
        self.log_start_offset = min(self.log_start_offset, end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``): log start offset, log end offset, high watermark and
        recovery point all ``offset``, no leader epoch, no producer. For a follower whose
        leader's log starts past the follower's end. Snapshots go first, then the segments
        from the last backwards, then the new segment is created: a crash between leaves an
        older, consistent log (or an empty one at the checkpointed log start offset), and the
        follower truncates again. Raises ``LogStorageError``."""
        with self._lock:
            self._check_usable()
            self._truncate_fully(offset)
        if self._on_truncated is not None:
            self._on_truncated(self)

    def _truncate_fully(self, offset: int) -> None:
        old_end = self.log_end_offset
        created_ms = self.segments[-1].created_ms
        try:
            self._delete_producer_snapshots(above=-1)
            for segment in reversed(self.segments):
                segment.delete_files()
            self.segments.clear()
            new = LogSegment(self.directory, offset, created_ms)
            new.open_active()
            self.segments.append(new)
            fsync_directory(self.directory)
            self.epochs.clear()
        except OSError as exc:
            raise self._fail("truncating fully", exc) from exc
        self.producers = ProducerState()
        self.log_start_offset = self.recovery_point = self._high_watermark = offset
        self.first_dirty_offset = offset
        self._truncations += 1
        self._log.info(
            "log_truncated_fully", log_start_offset=offset, previous_log_end_offset=old_end
        )

    def _delete_producer_snapshots(self, *, above: int) -> None:
        """Delete the producer snapshots past offset ``above`` (they describe batches the log
        is about to lose). Raises ``OSError``."""
        for offset in snapshot_offsets(self.directory):
            if offset > above:
                snapshot_path(self.directory, offset).unlink(missing_ok=True)

    # ----- retention, flush, close ---------------------------------------------------------------

    def delete_old_segments(
        self, config: LogConfig, now_ms: int, persist_log_start: Callable[[], None]
    ) -> int:
        """Kafka's retention: delete the oldest segments whose largest timestamp is older than
        retention.ms, then while the log is larger than retention.bytes by a whole segment
        (the active one too, after a roll, when it qualifies and is not empty), never a
        segment holding records at or past the high watermark (Kafka's: uncommitted records
        stay for the followers). The new log
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
            if segment.next_offset > self._high_watermark:
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

    def clean(
        self,
        config: LogConfig,
        now_ms: int,
        stop_at: Callable[[str], None] = lambda _: None,
    ) -> CleanerStats | None:
        """Compact the log if it needs it now (``cleaner.py``): None when it did not. The
        reading and writing run without the lock; each group's swap takes it, and the clean
        stops when the log changed under it (a truncation since the clean began, a close).
        ``stop_at`` cuts the clean at a step (tests). Raises ``LogStorageError`` (a failed swap
        fails the log)."""
        with self._lock:
            self._check_usable()
            plan = plan_cleaning(
                self.segments,
                self._high_watermark,
                first_dirty_offset=max(self.first_dirty_offset, self.log_start_offset),
                config=config,
                now_ms=now_ms,
                horizon_due_ms=self.delete_horizon_due_ms,
            )
            if plan is None:
                return None
            producer_last = self.producers.last_offsets()
            truncations = self._truncations
        stats = CleanerStats()
        horizon_due: int | None = None
        try:
            offset_map = build_offset_map(plan.segments, plan.first_dirty_offset)
        except OSError as exc:
            return self._cleaner_failed(exc, stats)
        # Up to where the map reaches (all of the dirty section unless the map filled up).
        covered = tuple(s for s in plan.segments if s.next_offset <= offset_map.end_offset)
        for group in group_segments(covered, config.segment_bytes):
            try:
                cleaned = write_cleaned(
                    self.directory,
                    group,
                    offset_map,
                    config=config,
                    now_ms=now_ms,
                    producer_last_offsets=producer_last,
                    stats=stats,
                )
            except OSError as exc:
                return self._cleaner_failed(exc, stats)
            stop_at("cleaned files written")
            if cleaned.horizon_ms is not None:
                horizon_due = (
                    cleaned.horizon_ms
                    if horizon_due is None
                    else min(horizon_due, cleaned.horizon_ms)
                )
            with self._lock:
                first = next((i for i, s in enumerate(self.segments) if s is group[0]), None)
                if (
                    self.closed
                    or self.failed is not None
                    or self._truncations != truncations
                    or first is None
                    or self.segments[first : first + len(group)] != group
                    or first + len(group) >= len(self.segments)
                ):
                    with contextlib.suppress(OSError):  # the directory may have moved aside
                        complete_swaps(self.directory, self._log)
                    return stats
                next_base = self.segments[first + len(group)].base_offset
                try:
                    swap_in(self.directory, cleaned.base_offset, group, stop_at)
                    new = LogSegment(self.directory, cleaned.base_offset, group[0].created_ms)
                    problem = new.load_sealed(next_base)
                except OSError as exc:
                    raise self._fail("swapping in a cleaned segment", exc) from exc
                assert problem is None, f"the cleaned {new.path} does not load: {problem}"
                self.segments[first : first + len(group)] = [new]
        with self._lock:
            self.first_dirty_offset = max(self.first_dirty_offset, offset_map.end_offset)
            self.delete_horizon_due_ms = horizon_due
        self._log.info(
            "log_cleaned",
            first_dirty_offset=plan.first_dirty_offset,
            first_uncleanable_offset=plan.first_uncleanable_offset,
            dirty_ratio=round(plan.dirty_bytes / plan.total_bytes, 3),
            segments_read=stats.segments_read,
            segments_written=stats.segments_written,
            bytes_read=stats.bytes_read,
            bytes_written=stats.bytes_written,
            records_removed=stats.records_removed,
        )
        return stats

    def _cleaner_failed(self, exc: OSError, stats: CleanerStats) -> CleanerStats:
        """Reading the segments or writing the ``.cleaned`` files failed, without the lock:
        the log was closed or truncated meanwhile (its files went: the clean is dropped), or
        the disk failed (``LogStorageError``; the log itself is untouched, its next append or
        read finds out). The ``.cleaned`` files are deleted where they can be."""
        with contextlib.suppress(OSError):
            complete_swaps(self.directory, self._log)
        with self._lock:
            if self.closed:
                return stats
        raise LogStorageError(
            f"the log cleaner could not clean {self.directory.name}: {exc} (the log is as it "
            "was; the cleaner tries again at its next run)"
        ) from exc

    def _drop_old_producer_snapshots(self) -> None:
        """Snapshots below the log start offset but the newest of them (loading starts there,
        then replays from the log start)."""
        try:
            below = [o for o in snapshot_offsets(self.directory) if o < self.log_start_offset]
            for offset in below[:-1]:
                snapshot_path(self.directory, offset).unlink(missing_ok=True)
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
