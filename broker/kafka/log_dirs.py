"""DescribeLogDirs (API key 35, v1-v4) on the Kafka listener: what ``kafka-log-dirs.sh`` and
``Admin.describeLogDirs`` send (docs/kafka-listener.md).

Kafka's rules (``KafkaApis.handleDescribeLogDirsRequest``, ``ReplicaManager.describeLogDirs``):
the caller needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED and no results
otherwise); every log dir of this broker is listed, by its absolute path, with the partitions
whose directory is in it (all of them for a null topic list, else those named), each with its
size in bytes (the segments' log files), an offset lag of ``max(high watermark - log end
offset, 0)`` (always 0 for a current log: Kafka reports a real lag only for the "future" logs
of AlterReplicaLogDirs, which this project does not have) and ``is_future_key`` false; a
topic none of whose partitions is listed is left out. v4 adds the volume's total and usable
bytes (``os.statvfs``: ``f_blocks`` and ``f_bavail`` times ``f_frsize``, as Java's
``FileStore.getTotalSpace``/``getUsableSpace``).

A log dir that cannot be listed or whose volume cannot be asked (missing, permission denied,
an I/O error), or one holding a log that failed a write (``PartitionLog.failed``: Kafka takes
the whole dir offline then), is answered KAFKA_STORAGE_ERROR with no partitions and -1 bytes.

A log opened by this broker reports its segments' sizes as the log knows them; a partition
directory not opened since the broker started (logs open on first use) is measured by its
``*.log`` files' sizes, without opening (recovering) it. Directory scans block: they run in
the data plane's reader thread.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from broker.kafka.data_plane import DataPlane
from broker.kafka.protocol import Request
from broker.log.manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.reconcile import parse_partition_dir
from quorum.errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.security.acls import AclOperation, ResourceType
from quorum.security.authorization import RequestAuthorization

__all__ = ["DescribeLogDirsHandler", "LogDirReport", "describe_log_dirs"]

# Kafka's KAFKA_STORAGE_ERROR (56) and DescribeLogDirsResponse's "not known" bytes.
KAFKA_STORAGE_ERROR: Final = 56
UNKNOWN_BYTES: Final = -1
SEGMENT_SUFFIX: Final = ".log"


@dataclass(frozen=True, slots=True)
class PartitionReport:
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int


@dataclass(frozen=True, slots=True)
class LogDirReport:
    """One log dir as DescribeLogDirs reports it; ``error_code`` KAFKA_STORAGE_ERROR (then no
    partitions, and -1 bytes) or NONE."""

    path: str
    error_code: int
    partitions: tuple[PartitionReport, ...]
    total_bytes: int
    usable_bytes: int


def _segment_bytes(directory: Path) -> int:
    """The sizes of a partition directory's segment log files (``{offset:020d}.log``)."""
    total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            stem = entry.name[: -len(SEGMENT_SUFFIX)]
            if entry.name.endswith(SEGMENT_SUFFIX) and len(stem) == 20 and stem.isdigit():
                total += entry.stat(follow_symlinks=False).st_size
    return total


def _describe_dir(
    log_dir: Path,
    open_logs: dict[Path, PartitionLog],
    wanted: Collection[tuple[str, int]] | None,
) -> LogDirReport:
    path = os.path.abspath(log_dir)
    partitions: list[PartitionReport] = []
    try:
        volume = os.statvfs(log_dir)
        with os.scandir(log_dir) as entries:
            listed = sorted(
                (entry.name, parsed)
                for entry in entries
                if (parsed := parse_partition_dir(entry.name)) is not None
                and entry.is_dir(follow_symlinks=False)
            )
        for name, parsed in listed:
            if wanted is not None and parsed not in wanted:
                continue
            log = open_logs.get(log_dir / name)
            if log is not None and log.failed is not None:
                raise OSError(log.failed)
            if log is not None:
                size = log.size_bytes()
                lag = max(log.high_watermark - log.log_end_offset, 0)
            else:
                size, lag = _segment_bytes(log_dir / name), 0
            partitions.append(PartitionReport(parsed[0], parsed[1], size, lag))
    except OSError:
        return LogDirReport(path, KAFKA_STORAGE_ERROR, (), UNKNOWN_BYTES, UNKNOWN_BYTES)
    return LogDirReport(
        path,
        ErrorCode.NONE,
        tuple(partitions),
        volume.f_blocks * volume.f_frsize,
        volume.f_bavail * volume.f_frsize,
    )


def describe_log_dirs(
    logs: LogManager, wanted: Collection[tuple[str, int]] | None
) -> list[LogDirReport]:
    """Every log dir of ``logs`` with the partitions in it (``wanted`` None: all). Blocking."""
    open_logs = logs.open_logs_by_path()
    return [_describe_dir(log_dir, open_logs, wanted) for log_dir in logs.log_dirs]


class DescribeLogDirsHandler:
    def __init__(
        self,
        data: DataPlane,
        authorization: RequestAuthorization,
        read_image: Callable[[Any], Awaitable[MetadataImage]],
    ) -> None:
        self._data = data
        self._authorization = authorization
        self._read_image = read_image

    async def handle(self, request: Request, session: Any) -> dict[str, Any]:
        image = await self._read_image(session)
        if not self._authorization.allows(
            session.caller, image, AclOperation.DESCRIBE, ResourceType.CLUSTER
        ):
            # The response has no message field: the code alone says it (Kafka's answer).
            return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
        topics = request.body.topics
        wanted = (
            None
            if topics is None
            else frozenset((t.topic, partition) for t in topics for partition in t.partitions)
        )
        logs = self._data.logs
        reports = (
            []
            if logs is None
            else await self._data.in_reader(lambda: describe_log_dirs(logs, wanted))
        )
        return {"error_code": ErrorCode.NONE, "results": [_result(r) for r in reports]}


def _result(report: LogDirReport) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in report.partitions:
        by_topic.setdefault(p.topic, []).append(
            {
                "partition_index": p.partition,
                "partition_size": p.size_bytes,
                "offset_lag": p.offset_lag,
                "is_future_key": False,
            }
        )
    return {
        "error_code": report.error_code,
        "log_dir": report.path,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        "total_bytes": report.total_bytes,
        "usable_bytes": report.usable_bytes,
    }
