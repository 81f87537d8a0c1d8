"""The broker's partition logs (Kafka's ``LogManager``): which log serves a (topic id,
partition), the log dirs' checkpoint files, retention, and closing a log before its directory
moves to ``deleting/`` (docs/architecture.md#partition-logs).

Directories are reconciliation's (``broker/logdirs.py`` creates and moves them); this module
only opens what is there. A log is opened on first use, by the topic id the request resolved
(KIP-516): under its name ``{topic}-{p}`` in a log dir, and only when that directory's
``partition.metadata`` holds the same id (``InconsistentTopicIdError`` otherwise, never the
log of another incarnation). A path under ``deleting/`` is never opened: the hook
``before_move_aside`` closes the directory's log, forgets its checkpoint entries (written
durably first, so a new incarnation under the same name never inherits its recovery point)
and keeps the path from being opened again until the rename is done.

Checkpoints (Kafka's names, in each log dir): ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint`` (the high watermarks) and
``cleaner-offset-checkpoint`` (where each compacted log's dirty section starts),
keyed by topic name and partition as Kafka's are, written atomically by ``write_checkpoints``
(every ``LOG_CHECKPOINT_INTERVAL_MS``, after retention moved a log start offset, after a
truncation lowered a log's offsets, and at close). An entry whose log was never opened in this
run is kept as it was read. A checkpoint file that cannot be read is ignored with a warning:
every log of that dir is then recovered from its start (its high watermarks start at the log
start offsets).

Every method blocks (opens recover, retention deletes files, the cleaner rewrites files):
callers run them in a worker thread. Thread-safe: one lock guards the maps and the checkpoint
writes, each log has its own.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from broker.log.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offset_checkpoint,
    remove_stale_tmp,
    write_offset_checkpoint,
)
from broker.log.config import LogConfig
from broker.log.errors import LogClosedError, LogStorageError
from broker.log.partition_log import PartitionLog
from broker.logdirs import read_partition_metadata
from broker.partition_metadata import PARTITION_METADATA_FILE
from broker.reconcile import format_partition_dir, parse_partition_dir
from quorum.ids import Uuid

__all__ = [
    "LOG_CHECKPOINT_INTERVAL_MS",
    "LOG_CLEANER_BACKOFF_MS",
    "RETENTION_CHECK_INTERVAL_MS",
    "InconsistentTopicIdError",
    "LogManager",
    "LogNotHereError",
    "LogTarget",
]

# Kafka's log.flush.offset.checkpoint.interval.ms and log.flush.start.offset.checkpoint.interval.ms.
LOG_CHECKPOINT_INTERVAL_MS: Final = 60_000
# Kafka's log.cleaner.backoff.ms.
LOG_CLEANER_BACKOFF_MS: Final = 15_000
# Kafka's log.retention.check.interval.ms.
RETENTION_CHECK_INTERVAL_MS: Final = 300_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class LogNotHereError(Exception):
    """No directory of this partition is in the log dirs yet (reconciliation has not made it),
    or it is being moved aside: answered NOT_LEADER_OR_FOLLOWER (clients retry)."""


class InconsistentTopicIdError(Exception):
    """The partition's directory holds another topic id (another incarnation of the name,
    KIP-516): answered INCONSISTENT_TOPIC_ID (Fetch by id) or NOT_LEADER_OR_FOLLOWER."""

    def __init__(self, path: Path, wanted: Uuid, found: Uuid | None) -> None:
        super().__init__(
            f"{path} holds topic id {found if found is not None else 'none'}, not {wanted} "
            "(another incarnation of the name; reconciliation moves it aside)"
        )
        self.found = found


@dataclass(frozen=True, slots=True)
class CleanerMetrics:
    """The log cleaner's last run, as Kafka's ``LogCleaner`` gauges report it: the bytes it
    wrote as a percentage of those it read (``cleaner-recopy-percent``, of the last log
    cleaned) and the longest clean of the run (``max-clean-time-secs``)."""

    recopy_percent: int = 0
    max_clean_time_s: float = 0.0
    logs_cleaned: int = 0


@dataclass(frozen=True, slots=True)
class LogTarget:
    """A partition of this broker, as the image says: one it leads (what retention looks
    after) or one it holds a replica of (what the log cleaner looks after)."""

    topic_id: Uuid
    name: str
    partition: int
    config: LogConfig


class _LogDir:
    """One log dir's checkpoint entries: (topic, partition) -> offset."""

    def __init__(self, path: Path, logger: Any) -> None:
        self.path = path
        self.recovery_points: dict[tuple[str, int], int] = {}
        self.log_starts: dict[tuple[str, int], int] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.cleaner_offsets: dict[tuple[str, int], int] = {}
        for name, entries in (
            (RECOVERY_POINT_CHECKPOINT, self.recovery_points),
            (LOG_START_OFFSET_CHECKPOINT, self.log_starts),
            (REPLICATION_OFFSET_CHECKPOINT, self.high_watermarks),
            (CLEANER_OFFSET_CHECKPOINT, self.cleaner_offsets),
        ):
            remove_stale_tmp(path, name)
            try:
                entries.update(read_offset_checkpoint(path / name))
            except CheckpointError as exc:
                # No recovery point: every log of the dir is recovered from its start. No log
                # start offset: each log starts at its first segment. No high watermark: each
                # starts at its log start offset. No cleaner offset: each compacted log is
                # dirty from its start.
                logger.warning("log_checkpoint_unreadable", path=str(path / name), problem=str(exc))

    def drop(self, entry: tuple[str, int]) -> bool:
        """Forget ``entry``'s offsets; whether it had any."""
        found = [e.pop(entry, None) for e in self._all()]
        return any(offset is not None for offset in found)

    def _all(self) -> tuple[dict[tuple[str, int], int], ...]:
        return (self.recovery_points, self.log_starts, self.high_watermarks, self.cleaner_offsets)

    def write(self) -> None:
        write_offset_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT, self.recovery_points)
        write_offset_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, self.log_starts)
        write_offset_checkpoint(self.path / REPLICATION_OFFSET_CHECKPOINT, self.high_watermarks)
        write_offset_checkpoint(self.path / CLEANER_OFFSET_CHECKPOINT, self.cleaner_offsets)


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[Path],
        logger: Any = None,
        *,
        clock: Callable[[], int] = wall_ms,
        read_topic_id: Callable[[Path], Uuid | None] | None = None,
    ) -> None:
        self._log = logger if logger is not None else structlog.get_logger("broker.log")
        self._clock = clock
        self._read_topic_id = read_topic_id if read_topic_id is not None else _read_topic_id
        self._lock = threading.RLock()
        self._dirs = {Path(d): _LogDir(Path(d), self._log) for d in log_dirs}
        self._logs: dict[tuple[Uuid, int], PartitionLog] = {}
        self._paths: dict[tuple[Uuid, int], Path] = {}
        self._blocked: set[Path] = set()
        self._closed = False
        # Replaced whole after each run of the cleaner (a scrape reads it from another thread).
        self.cleaner_metrics = CleanerMetrics()

    # ----- lookups ----------------------------------------------------------------------------

    def get(self, topic_id: Uuid, name: str, partition: int) -> PartitionLog:
        """The log of ``topic_id`` partition ``partition`` (named ``name`` by the image),
        opened (and recovered) if needed. Raises ``LogNotHereError``,
        ``InconsistentTopicIdError`` or ``LogStorageError`` (the recovery failed)."""
        key = (topic_id, partition)
        log = self._logs.get(key)
        if log is not None and not log.closed:
            return log
        with self._lock:
            log = self._logs.get(key)
            if log is not None and not log.closed:
                return log
            if self._closed:
                raise LogClosedError("the broker is stopping")
            return self._open(topic_id, name, partition)

    def _open(self, topic_id: Uuid, name: str, partition: int) -> PartitionLog:
        dir_name = format_partition_dir(name, partition)
        for log_dir, state in self._dirs.items():
            path = log_dir / dir_name
            if path in self._blocked or not (path / PARTITION_METADATA_FILE).is_file():
                continue
            found = self._read_topic_id(path)
            if found != topic_id:
                raise InconsistentTopicIdError(path, topic_id, found)
            entry = (name, partition)
            try:
                log = PartitionLog(
                    path,
                    recovery_point=state.recovery_points.get(entry, 0),
                    log_start_offset=state.log_starts.get(entry, 0),
                    now_ms=self._clock(),
                    logger=self._log,
                    high_watermark=state.high_watermarks.get(entry, 0),
                    on_truncated=self._persist_after_truncation,
                    first_dirty_offset=state.cleaner_offsets.get(entry, 0),
                )
            except OSError as exc:
                self._log.error("partition_log_open_failed", dir=str(path), error=str(exc))
                raise LogStorageError(f"opening the log in {path} failed: {exc}") from exc
            self._logs[(topic_id, partition)] = log
            self._paths[(topic_id, partition)] = path
            state.recovery_points[entry] = log.recovery_point
            state.log_starts[entry] = log.log_start_offset
            state.high_watermarks[entry] = log.high_watermark
            self._log.info(
                "partition_log_opened",
                dir=str(path),
                topic_id=str(topic_id),
                log_start_offset=log.log_start_offset,
                log_end_offset=log.log_end_offset,
                segments=len(log.segments),
                bytes_truncated=log.truncated_bytes,
            )
            return log
        raise LogNotHereError(f"no directory {dir_name} in the log dirs yet")

    def open_logs(self) -> list[tuple[Uuid, int, PartitionLog]]:
        with self._lock:
            return [(key[0], key[1], log) for key, log in self._logs.items()]

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """The log dirs, in the order of the configuration."""
        return tuple(self._dirs)

    def open_logs_by_path(self) -> dict[Path, PartitionLog]:
        """The open logs by their partition directory (DescribeLogDirs reads their sizes)."""
        with self._lock:
            return {self._paths[key]: log for key, log in self._logs.items() if not log.closed}

    # ----- directories moved to deleting/ (broker/logdirs.py's hook) ------------------------------

    def before_move_aside(self, path: Path) -> None:
        """``path`` (a partition directory) is about to move to ``deleting/``: close its log,
        drop its checkpoint entries (durably, first) and open nothing there until
        ``after_move_aside``."""
        with self._lock:
            self._blocked.add(path)
            parsed = parse_partition_dir(path.name)
            state = self._dirs.get(path.parent)
            if parsed is not None and state is not None and state.drop(parsed):
                state.write()
            for key, open_path in list(self._paths.items()):
                if open_path == path:
                    self._logs.pop(key).close()
                    del self._paths[key]
                    self._log.info("partition_log_closed", dir=str(path), reason="moved_aside")

    def after_move_aside(self, path: Path) -> None:
        with self._lock:
            self._blocked.discard(path)

    # ----- checkpoints, retention, close ---------------------------------------------------------

    def _entry_of(self, key: tuple[Uuid, int]) -> tuple[_LogDir, tuple[str, int]] | None:
        """The log dir state and (topic, partition) entry of an open log (under the lock)."""
        path = self._paths[key]
        parsed = parse_partition_dir(path.name)
        state = self._dirs.get(path.parent)
        return None if parsed is None or state is None else (state, parsed)

    def _key_of(self, log: PartitionLog) -> tuple[Uuid, int] | None:
        return next((key for key, open_log in self._logs.items() if open_log is log), None)

    @staticmethod
    def _record(state: _LogDir, parsed: tuple[str, int], log: PartitionLog) -> None:
        state.recovery_points[parsed] = log.recovery_point
        state.log_starts[parsed] = log.log_start_offset
        state.high_watermarks[parsed] = log.high_watermark
        if parsed in state.cleaner_offsets or log.first_dirty_offset > log.log_start_offset:
            state.cleaner_offsets[parsed] = log.first_dirty_offset

    def _refresh_entries(self) -> None:
        for key, log in self._logs.items():
            entry = self._entry_of(key)
            if entry is not None:
                self._record(*entry, log)

    def write_checkpoints(self) -> None:
        """Write every log dir's four checkpoint files (atomically)."""
        with self._lock:
            self._refresh_entries()
            for state in self._dirs.values():
                state.write()

    def run_retention(self, targets: Iterable[LogTarget]) -> int:
        """Apply retention to the log of every partition this broker leads (opening those not
        open yet). The number of segments deleted."""
        deleted = 0
        for target in targets:
            try:
                log = self.get(target.topic_id, target.name, target.partition)
                deleted += log.delete_old_segments(
                    target.config, self._clock(), functools.partial(self._persist_log_start, log)
                )
            except (LogNotHereError, InconsistentTopicIdError, LogClosedError, LogStorageError):
                continue
        return deleted

    def run_cleaner(self, targets: Iterable[LogTarget]) -> int:
        """Clean the log of every compacted partition of ``targets`` (the replicas this broker
        holds) that needs it (``PartitionLog.clean``); the number of logs cleaned. A log whose
        disk fails is failed (``LogStorageError``) and skipped."""
        cleaned = 0
        longest_s = 0.0
        recopy = self.cleaner_metrics.recopy_percent
        for target in targets:
            if not target.config.compact:
                continue
            try:
                log = self.get(target.topic_id, target.name, target.partition)
                started_s = time.monotonic()
                stats = log.clean(target.config, self._clock())
                if stats is not None:
                    cleaned += 1
                    longest_s = max(longest_s, time.monotonic() - started_s)
                    recopy = 100 * stats.bytes_written // max(stats.bytes_read, 1)
            except LogStorageError as exc:
                self._log.warning(
                    "log_cleaner_failed",
                    partition_dir=f"{target.name}-{target.partition}",
                    error=str(exc),
                )
            except (LogNotHereError, InconsistentTopicIdError, LogClosedError):
                continue
        self.cleaner_metrics = CleanerMetrics(
            recopy,
            longest_s,
            self.cleaner_metrics.logs_cleaned + cleaned,
        )
        return cleaned

    def _persist_log_start(self, log: PartitionLog) -> None:
        with self._lock:
            key = self._key_of(log)
            entry = None if key is None else self._entry_of(key)
            if entry is not None:
                state, parsed = entry
                state.log_starts[parsed] = log.log_start_offset
                write_offset_checkpoint(state.path / LOG_START_OFFSET_CHECKPOINT, state.log_starts)

    def _persist_after_truncation(self, log: PartitionLog) -> None:
        """A log was truncated (``PartitionLog.truncate_to``): write its dir's checkpoints, so
        the lowered recovery point, log start offset and high watermark are durable before the
        log grows past the old ones (Kafka checkpoints the recovery points of a truncated
        log's dir). A failure is logged: opening then checks the last segment, as after a
        crash."""
        with self._lock:
            key = self._key_of(log)
            entry = None if key is None else self._entry_of(key)
            if key is None or entry is None:
                return
            state, parsed = entry
            self._record(state, parsed, log)
            try:
                state.write()
            except OSError as exc:
                self._log.warning(
                    "checkpoints_not_written", dir=str(self._paths[key]), error=str(exc)
                )

    def close(self) -> None:
        """Flush every log (the recovery point becomes its end), write the checkpoints, close."""
        with self._lock:
            self._closed = True
            for log in self._logs.values():
                try:
                    log.flush()
                except (LogStorageError, LogClosedError):
                    continue
            try:
                self.write_checkpoints()
            except OSError as exc:
                # A failing disk (the broker may be stopping because of it): each checkpoint is
                # written atomically, so the old one stays whole, and recovery starts from its
                # recovery points; the close goes on and the cause of the stop is reported.
                self._log.warning("checkpoints_not_written", error=str(exc))
            for log in self._logs.values():
                log.close()
            self._logs.clear()
            self._paths.clear()


def _read_topic_id(path: Path) -> Uuid | None:
    """The topic id of ``path``'s ``partition.metadata`` (None: missing or unreadable)."""
    _, topic_id, _ = read_partition_metadata(path)
    return topic_id
