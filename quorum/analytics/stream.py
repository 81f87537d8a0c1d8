"""The metadata log as a Structured Streaming source: ``spark.readStream.format("metaquorum")``.

Usage::

    from quorum.analytics.source import MetaquorumDataSource
    spark.dataSource.register(MetaquorumDataSource)
    stream = (spark.readStream.format("metaquorum")
              .option("startingOffsets", "earliest")          # or "latest", or an offset
              .load(".data/controller-1/__cluster_metadata-0"))
    query = (stream.writeStream.format("parquet").option("path", "out/records")
             .option("checkpointLocation", "out/_checkpoints/records").start())

The rows and their schema are the batch source's (``quorum.analytics.source``); snapshots are
not read. Options:

``path``
    The log directory of a running (or stopped) controller or broker: ``__cluster_metadata-0``
    or the ``metadata.log.dir`` that holds it. On a cluster it must be visible under the same
    path to the driver (which follows its end) and to every executor (which read the batches).
``startingOffsets`` (default ``earliest``)
    Where a new query starts: ``earliest`` (the log start: the first segment's base offset,
    0 unless retention deleted segments behind a snapshot), ``latest`` (the end of the complete
    batches when the query starts) or an offset. A query restarted from its checkpoint goes on
    from the checkpointed offset instead, as every Spark source does.
``endingOffsets``
    An offset the stream never reads at or past (exclusive): the query then idles once it has
    every record before it (``metaquorum replay --follow --until-offset``).
``splitBytes`` (default 32 MiB)
    A micro-batch that spans more than this many bytes of a segment (catching up) is read as
    several input partitions, as the batch source reads large segments.

Offsets. A stream offset is ``{"offset": N, "epoch": E}``: N is the metadata log offset of the
next record to read (so a micro-batch covers ``[start.offset, end.offset)``, Kafka's half-open
ranges), E the epoch of the batch holding offset N - 1 (-1 when nothing before N was read).
They are JSON in the query's checkpoint (``offsets/``), and a restarted query resumes at them.

How far it reads, and how safe that is. A node's files do not say how far the quorum committed
(KRaft keeps the high watermark in memory), so the stream reads up to the last complete batch
(``quorum.analytics.log_tail``). That is committed on the leader once the next commit passes it
(milliseconds), and on a follower or broker it normally is too, since they fetch what the leader
sends. The exception is a batch a leader appended and lost its leadership before committing: a
follower may hold it, and the next leader truncates it and writes other batches at the same
offsets. The stream detects this (the epoch E of the checkpointed offset no longer matches the
batch on disk, or the log now ends before it) and fails the query with an error naming the
offsets, instead of reading the new batches as if they followed the old ones: the records it
delivered from the truncated batch were never part of the metadata. Following the active
controller's directory makes it rarest (its own uncommitted tail is lost only if it fails within
a commit's time of appending).

Retention. A controller deletes the segments before its newest snapshot. A stream that is behind
reads on from its offset as long as the segment holding it is there; if the segments before
its next offset were deleted before it read them, the micro-batch fails with an error naming the
stream's offset, the log's new start and the snapshots that now hold the history (read them with
the batch source's ``includeSnapshots``, then start a new query from the log start). Records are
never skipped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from quorum.analytics.arrow_batches import read_partition
from quorum.analytics.log_files import LogFile, LogFilePartition, list_log_files
from quorum.analytics.log_tail import LogTail

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "NO_EPOCH",
    "MetaquorumStreamReader",
    "RefusedStreamReader",
    "StreamOffsetError",
    "StreamOptions",
    "checkpointed_offset",
    "plan_stream_partitions",
]

FORMAT_NAME: Final = "metaquorum"
SPLIT_BYTES_DEFAULT: Final = 32 * 1024 * 1024
NO_EPOCH: Final = -1
_OPTIONS: Final = frozenset({"path", "startingoffsets", "endingoffsets", "splitbytes"})


class StreamOffsetError(Exception):
    """The stream cannot go on from its offset: the log lost or rewrote what it needs."""


@dataclass(frozen=True, slots=True)
class StreamOptions:
    path: str
    starting: str | int = "earliest"  # "earliest", "latest" or an offset
    ending: int | None = None  # exclusive
    split_bytes: int = SPLIT_BYTES_DEFAULT

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        """From the options Spark passes (case-insensitive names, string values); a name not
        known is refused, so a misspelled option does not silently stream something else."""
        lowered = {key.lower(): str(value) for key, value in options.items()}
        unknown = sorted(set(lowered) - _OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for readStream.format({FORMAT_NAME!r}); the "
                "options are path, startingOffsets, endingOffsets, splitBytes"
            )
        if not lowered.get("path"):
            raise ValueError(
                f"readStream.format({FORMAT_NAME!r}) needs a path: .load('<metadata.log.dir or "
                "__cluster_metadata-0 directory>')"
            )
        starting: str | int = lowered.get("startingoffsets", "earliest").strip().lower()
        if starting not in ("earliest", "latest"):
            starting = _offset("startingOffsets", str(starting), "earliest, latest or an offset")
        ending = lowered.get("endingoffsets")
        split = lowered.get("splitbytes")
        return cls(
            path=lowered["path"],
            starting=starting,
            ending=None if ending is None else _offset("endingOffsets", ending, "an offset"),
            split_bytes=SPLIT_BYTES_DEFAULT
            if split is None
            else _offset("splitBytes", split, "a byte count"),
        )


def _offset(name: str, text: str, allowed: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{name} must be {allowed}, got {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be {allowed} (>= 0), got {value}")
    return value


def _next_offset(offset: Mapping[str, Any], which: str) -> tuple[int, int]:
    """(offset, epoch) of a stream offset; a checkpoint written by something else is refused."""
    try:
        return int(offset["offset"]), int(offset.get("epoch", NO_EPOCH))
    except (KeyError, TypeError, ValueError):
        raise StreamOffsetError(
            f"the {which} offset {json.dumps(offset)} is not a metaquorum stream offset "
            '({"offset": N, "epoch": E}): is the checkpoint another query\'s?'
        ) from None


def plan_stream_partitions(
    segments: list[LogFile],
    start: int,
    end: int,
    first_position: tuple[str, int] | None,
    split_bytes: int,
) -> list[LogFilePartition]:
    """The input partitions of one micro-batch ``[start, end)``: the segments that may hold
    those offsets, the first one read from ``first_position`` (the byte position of the batch
    holding ``start``, when the tail remembers it) instead of its start, each split into byte
    ranges of about ``split_bytes``."""
    partitions: list[LogFilePartition] = []
    for index, segment in enumerate(segments):
        later = tuple(segments[index + 1 :])
        if later and later[0].base_offset <= start:
            continue  # wholly before the micro-batch
        if segment.base_offset >= end:
            break
        low = 0
        if first_position is not None and first_position[0] == segment.path:
            low = first_position[1]
        size = max(segment.size_bytes, low)
        ranges = 1 if split_bytes <= 0 else max(1, -(-(size - low) // split_bytes))
        for k in range(ranges):
            byte_start = low + (size - low) * k // ranges
            byte_end = None if k == ranges - 1 else low + (size - low) * (k + 1) // ranges
            partitions.append(LogFilePartition(segment, later, start, end, byte_start, byte_end))
    return partitions


class MetaquorumStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Follows the log's end on the driver (one ``LogTail`` per query, made when first
    needed); reads each micro-batch's batches on the executors with the batch source's reader."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._tail: LogTail | None = None
        self._target: int | None = None  # Trigger.AvailableNow: the end when it was asked

    def __getstate__(self) -> dict[str, Any]:
        # read() ships this object to the executors: without the driver's tail.
        return {"options": self.options, "_tail": None, "_target": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _tail_at(self, anchor: int) -> LogTail:
        if self._tail is None:
            self._tail = LogTail(self.options.path)
        self._tail.advance(anchor)
        return self._tail

    def _offset(self, next_offset: int, tail: LogTail) -> dict[str, int]:
        epoch = tail.epoch_of(next_offset - 1) if next_offset > 0 else None
        return {"offset": next_offset, "epoch": NO_EPOCH if epoch is None else epoch}

    def initialOffset(self) -> dict[str, int]:
        starting = self.options.starting
        anchor = starting if isinstance(starting, int) else 0
        tail = self._tail_at(anchor - 1)
        if starting == "earliest":
            return {"offset": tail.log_start_offset, "epoch": NO_EPOCH}
        if starting == "latest":
            return self._offset(tail.end_offset, tail)
        assert isinstance(starting, int)
        return self._offset(starting, tail)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Everything complete after ``start`` (read limits other than all-available do not
        apply: a metadata log is small), capped by ``endingOffsets`` and, under
        ``Trigger.AvailableNow``, by the end when the query started."""
        next_offset, epoch = _next_offset(start, "start")
        tail = self._tail_at(next_offset - 1)
        self._check_resumable(tail, next_offset, epoch)
        end = tail.end_offset
        for cap in (self.options.ending, self._target):
            if cap is not None:
                end = min(end, cap)
        if end <= next_offset:
            return start
        return self._offset(end, tail)

    def _check_resumable(self, tail: LogTail, next_offset: int, epoch: int) -> None:
        if next_offset < tail.log_start_offset:
            raise StreamOffsetError(self._deleted(next_offset, tail.log_start_offset))
        if epoch == NO_EPOCH or next_offset <= tail.log_start_offset:
            return
        on_disk = tail.epoch_of(next_offset - 1)
        if on_disk == epoch:
            return
        if on_disk is None:
            found = f"the log now ends at offset {tail.end_offset}"
        else:
            found = f"offset {next_offset - 1} is now in a batch of epoch {on_disk}"
        raise StreamOffsetError(
            f"{self.options.path}: the stream read up to offset {next_offset - 1} in a batch "
            f"of epoch {epoch}, but {found}: the node truncated batches that were never "
            "committed and the stream had read (a leader lost its leadership before "
            "committing them). The records before that offset the stream wrote include "
            "some that are not part of the metadata: start a new query (a new checkpoint) "
            "from an earlier offset, or follow the active controller's log directory"
        )

    def _deleted(self, next_offset: int, log_start: int) -> str:
        _, checkpoints = list_log_files(self.options.path)
        snapshots = ", ".join(str(c.base_offset) for c in checkpoints) or "none left"
        return (
            f"{self.options.path}: the stream's next offset is {next_offset}, but the log now "
            f"starts at offset {log_start}: the segments holding offsets {next_offset} to "
            f"{log_start - 1} were deleted behind a snapshot before the stream read them "
            f"(snapshots ending at: {snapshots}). Nothing was skipped: read that history with "
            "the batch source (includeSnapshots), then start a new query (a new checkpoint) "
            "with startingOffsets=earliest"
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[LogFilePartition]:
        first, _ = _next_offset(start, "start")
        stop, _ = _next_offset(end, "end")
        if stop <= first:
            return []
        # A restarted query plans its last micro-batch again from the checkpoint, without
        # asking for the latest offset first: the tail may not know this range yet.
        tail = self._tail_at(first - 1)
        segments, _ = list_log_files(self.options.path)
        if not segments or first < segments[0].base_offset:
            log_start = segments[0].base_offset if segments else tail.end_offset
            raise StreamOffsetError(self._deleted(first, log_start))
        at = tail.position_of(first)
        first_position = None if at is None else (at.path, at.position)
        return plan_stream_partitions(
            segments, first, stop, first_position, self.options.split_bytes
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the log is the node's, read-only here."""

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._tail_at(0).end_offset


class RefusedStreamReader(DataSourceStreamReader):
    """A stream whose options or schema were refused: every call raises ``ValueError`` with
    the reason (see ``MetaquorumDataSource.streamReader`` for why it is not raised at once)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def initialOffset(self) -> dict[str, int]:
        raise ValueError(self.problem)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise ValueError(self.problem)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[LogFilePartition]:
        raise ValueError(self.problem)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise ValueError(self.problem)


def checkpointed_offset(checkpoint: str | Path) -> int | None:
    """The next offset of the newest micro-batch a query's checkpoint committed (its
    ``commits/`` and ``offsets/`` logs), or None before the first."""
    root = Path(checkpoint)
    commits = [int(p.name) for p in (root / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return None
    lines = (root / "offsets" / str(max(commits))).read_text().splitlines()
    # The offsets log: a version line, the batch's metadata, then one line per source.
    source = json.loads(lines[2])
    return int(source["offset"])
