"""``metaquorum log dump``: the records of metadata log segments as JSON lines.

The equivalent of ``kafka-dump-log.sh --cluster-metadata-decoder --files ...``. Each record is
one line, ``type`` / ``version`` / ``data`` in the shape of Kafka's decoder payload::

    {"offset": 3, "epoch": 1, "type": "TOPIC_RECORD", "version": 0,
     "data": {"name": "orders", "topicId": "ah0vHnqLTD2eDxEiM0RVZg", "internal": false}}

Types are Kafka's UPPER_SNAKE names (``PARTITION_RECORD``, ``REGISTER_BROKER_RECORD``, control
records ``LEADER_CHANGE``, ``SNAPSHOT_HEADER``, ``SNAPSHOT_FOOTER``) and ``data`` is
``record_kafka_json``: Kafka's camelCase field names (``partitionId``, ``leaderEpoch``), a
``Uuid`` as its base64 text; the metadata shell prints the same JSON. Records of control
batches carry ``"control": true`` as well. ``offset`` and ``epoch`` are what Kafka prints in
the lines around its payload.

A dump never changes what it reads. It does not open the log with ``SegmentedLog`` (whose
recovery cuts a torn tail and rewrites indexes); it walks the segments with the storage layer's
read-only reader (``quorum.storage.frames.read_frames``), the one recovery uses too, so it
agrees with recovery on where a log ends:

- Damage after which no CRC-valid frame follows (in the segment or in a later segment of the
  same directory) is the tail: a write in progress on a log a controller is appending to, or a
  torn write that recovery will cut. The dump stops there, says so on stderr, and succeeds.
- Damage followed by a valid frame is corruption: the records before it are printed, then an
  error naming the file and byte offset, and the exit code is 1. So is a batch whose body does
  not decode (an unknown record type or version is reported, never skipped).

Snapshots. A path naming a ``{end_offset:020d}-{epoch:010d}.checkpoint`` file is read as a
snapshot (as kafka-dump-log reads ``.checkpoint`` files): the same lines, each with
``"snapshot": "<file name>"``, where ``offset`` is the record's position inside the snapshot (0
is the ``SnapshotHeader``) and ``epoch`` the snapshot's. A snapshot is complete once it has its
name, so any damage in one (including a missing footer) is an error (exit 1), never a tail.
A directory still means its segments only.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Final, TextIO

from quorum.metadata.batch import decode_log_batch
from quorum.metadata.records import (
    Record,
    RecordDecodeError,
    record_kafka_json,
    record_kafka_type,
)
from quorum.storage.frames import CorruptFrameError, Frame, Tail, read_frames
from quorum.storage.frames import segment_files as log_segment_files
from quorum.storage.snapshots import (
    CorruptSnapshotError,
    SnapshotNotFoundError,
    iter_snapshot_file,
    parse_snapshot_file_name,
)

__all__ = [
    "METADATA_PARTITION_DIR",
    "DumpedRecord",
    "Frame",
    "LogDumpError",
    "Summary",
    "Tail",
    "dump_log",
    "iter_frames",
    "iter_records",
    "iter_snapshot_records",
    "record_json",
    "segment_files",
]

# The log directory of __cluster_metadata partition 0 inside metadata.log.dir.
METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"


class LogDumpError(Exception):
    """The log cannot be read further: corruption, an undecodable batch, a missing path."""

    def __init__(self, path: Path, byte_offset: int | None, problem: str) -> None:
        self.path = path
        self.byte_offset = byte_offset
        self.problem = problem
        where = str(path) if byte_offset is None else f"{path} at byte {byte_offset}"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True, slots=True)
class DumpedRecord:
    offset: int
    epoch: int
    control: bool
    record: Record
    frame: Frame
    snapshot: str | None = None
    """The file name of the snapshot the record is from (None: a segment)."""


def segment_files(path: Path) -> list[Path]:
    """The segments ``path`` names: itself if it is a file, else the ``NNNN.log`` files of the
    directory in offset order. A ``metadata.log.dir`` is accepted for the log directory of
    ``__cluster_metadata-0`` inside it."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise LogDumpError(path, None, "no such file or directory")
    segments = log_segment_files(path)
    if not segments and (path / METADATA_PARTITION_DIR).is_dir():
        return segment_files(path / METADATA_PARTITION_DIR)
    if not segments:
        raise LogDumpError(
            path,
            None,
            "no segment files (20-digit base offset + .log) in this directory; give a segment "
            f"file, a metadata log directory ({METADATA_PARTITION_DIR}/) or metadata.log.dir",
        )
    return segments


def iter_frames(segments: Sequence[Path]) -> Iterator[Frame | Tail]:
    """Every whole frame of ``segments`` (one log, in order), then a ``Tail`` if the last
    segment read ends in damage that no valid frame follows (``read_frames``). Raises
    ``LogDumpError`` for damage that a valid frame follows. Each segment is read once, as it is
    at that moment."""
    try:
        yield from read_frames(segments)
    except CorruptFrameError as exc:
        raise LogDumpError(exc.path, exc.byte_offset, exc.problem) from exc


def iter_records(paths: Sequence[Path], warn: Callable[[str], None]) -> Iterator[DumpedRecord]:
    """Every record of every path, in order. ``warn`` hears where a segment's tail stopped."""
    for path in paths:
        if path.is_file() and parse_snapshot_file_name(path.name) is not None:
            yield from iter_snapshot_records(path)
            continue
        for item in iter_frames(segment_files(path)):
            if isinstance(item, Tail):
                warn(
                    f"Note: {item.path}: stopped at byte {item.position}; the last "
                    f"{item.bytes_left} bytes are not a whole batch ({item.problem}): a write "
                    "in progress, or a torn tail that recovery will cut"
                )
                continue
            try:
                decoded = decode_log_batch(item.batch)
            except RecordDecodeError as exc:
                raise LogDumpError(
                    item.path,
                    item.position,
                    f"cannot decode the batch at base offset {item.batch.base_offset}: {exc}",
                ) from exc
            for offset, record in enumerate(decoded.records, start=decoded.base_offset):
                yield DumpedRecord(offset, decoded.epoch, decoded.control, record, item)


def iter_snapshot_records(path: Path) -> Iterator[DumpedRecord]:
    """Every record of the snapshot file ``path``, validated as it is read (see
    ``quorum.storage.snapshots``); damage is a ``LogDumpError`` after the records before it."""
    snapshot_id = parse_snapshot_file_name(path.name)
    assert snapshot_id is not None, path
    try:
        for position, batch, decoded in iter_snapshot_file(path, snapshot_id):
            assert decoded is not None
            frame = Frame(path, position, batch)
            for offset, record in enumerate(decoded.records, start=decoded.base_offset):
                yield DumpedRecord(
                    offset, decoded.epoch, decoded.control, record, frame, snapshot=path.name
                )
    except CorruptSnapshotError as exc:
        raise LogDumpError(path, exc.byte_offset, exc.problem) from exc
    except SnapshotNotFoundError as exc:
        raise LogDumpError(path, None, "no such file") from exc


def record_json(dumped: DumpedRecord) -> dict[str, object]:
    """The JSON object of one output line."""
    line: dict[str, object] = {
        "offset": dumped.offset,
        "epoch": dumped.epoch,
        "type": record_kafka_type(dumped.record),
        "version": dumped.record.VERSION,
    }
    if dumped.control:
        line["control"] = True
    if dumped.snapshot is not None:
        line["snapshot"] = dumped.snapshot
    line["data"] = record_kafka_json(dumped.record)
    return line


@dataclass(slots=True)
class Summary:
    """What ``--summary`` prints: counts instead of records."""

    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    last_epoch: int | None = None
    record_types: Counter[str] = field(default_factory=Counter)
    _last_frame: Frame | None = None

    def add(self, dumped: DumpedRecord) -> None:
        if dumped.frame is not self._last_frame:
            self.batches += 1
            self._last_frame = dumped.frame
        self.records += 1
        if self.first_offset is None:
            self.first_offset = dumped.offset
        self.last_offset = dumped.offset
        self.last_epoch = dumped.epoch
        self.record_types[record_kafka_type(dumped.record)] += 1

    def to_json(self) -> dict[str, object]:
        return {
            "batches": self.batches,
            "records": self.records,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "last_epoch": self.last_epoch,
            "record_types": dict(sorted(self.record_types.items())),
        }


def dump_log(
    paths: Sequence[Path],
    out: TextIO,
    err: TextIO,
    *,
    max_records: int | None = None,
    summary: bool = False,
) -> int:
    """Write one JSON line per record of ``paths`` to ``out`` (or, with ``summary``, one JSON
    object of counts); problems go to ``err``. Returns the exit code: 0, or 1 after an error."""
    assert max_records is None or max_records >= 0, max_records
    totals = Summary()

    def warn(message: str) -> None:
        print(message, file=err)

    try:
        for dumped in islice(iter_records(paths, warn), max_records):
            if summary:
                totals.add(dumped)
            else:
                print(json.dumps(record_json(dumped)), file=out)
    except LogDumpError as exc:
        if summary:
            print(json.dumps(totals.to_json()), file=out)
        out.flush()
        print(f"Error: {exc}", file=err)
        return 1
    if summary:
        print(json.dumps(totals.to_json()), file=out)
    return 0
