"""The ``metaquorum`` PySpark data source: the metadata log as a typed table.

Usage::

    from quorum.analytics.source import MetaquorumDataSource
    spark.dataSource.register(MetaquorumDataSource)
    df = spark.read.format("metaquorum").load("/var/lib/metaquorum/meta")   # metadata.log.dir
    df = (spark.read.format("metaquorum")
          .option("startOffset", 1000).option("endOffset", 5000)           # [start, end)
          .load(".data/controller-1/__cluster_metadata-0"))

Options (names are case-insensitive, values strings as Spark passes them):

``path``
    The metadata log directory (``__cluster_metadata-0``) or the ``metadata.log.dir`` that
    holds it. ``load(path)`` sets it.
``startOffset`` / ``endOffset``
    Only records with ``startOffset <= offset < endOffset`` (Kafka's half-open ranges). Segments
    wholly outside the range are not read at all; batches outside it are not decoded.
``includeSnapshots`` (default ``false``)
    Also read the ``{end_offset:020d}-{epoch:010d}.checkpoint`` files, each as one more input
    partition with the same frame format. Their rows carry ``snapshot_end_offset`` (NULL for log
    rows); a checkpoint is read when ``startOffset <= end_offset <= endOffset``, and its records
    are not offset-filtered (they describe the image at ``end_offset``). The jobs in
    ``quorum.analytics.jobs`` read log rows only.

Schema. One row per record; the batch header columns come first::

    offset BIGINT, epoch INT, batch_timestamp_ms BIGINT, control BOOLEAN,
    record_type STRING, version INT, snapshot_end_offset BIGINT

then flat, nullable, typed columns shared across record families (design choice: a record's
fields are real columns, queryable and prunable in Parquet, with no JSON to parse; a column
that a record type does not have is NULL; the same meaning gets the same column whatever the
record). Which record fills which column:

==============================  ===============================================================
column                          filled by (record field when the names differ)
==============================  ===============================================================
topic_id STRING                 Topic, Partition, PartitionChange, RemoveTopic (Kafka base64)
name STRING                     TopicRecord
internal BOOLEAN                TopicRecord
partition INT                   PartitionRecord, PartitionChangeRecord
replicas, isr ARRAY<INT>        PartitionRecord, PartitionChangeRecord (NULL: unchanged)
leader INT                      PartitionRecord, PartitionChangeRecord (-1: no leader,
                                NULL: unchanged)
leader_epoch, partition_epoch   PartitionRecord, PartitionChangeRecord (NULL: unchanged)
broker_id INT                   Register/Unregister/Fence/UnfenceBrokerRecord
broker_epoch BIGINT             the same four
incarnation_id STRING           RegisterBrokerRecord
rack STRING, fenced BOOLEAN     RegisterBrokerRecord
endpoints ARRAY<STRUCT<name STRING, host STRING, port INT>>   RegisterBrokerRecord
config_resource_type INT        ConfigRecord.resource_type (2 topic, 4 broker)
config_resource_name STRING     ConfigRecord.resource_name
config_name STRING              ConfigRecord.name
config_value STRING             ConfigRecord.value (NULL: the config was deleted)
leader_id INT                   LeaderChangeMessage.leader_id (the quorum leader)
quorum_epoch INT                LeaderChangeMessage.epoch
voters ARRAY<INT>               LeaderChangeMessage.voters
snapshot_version INT            SnapshotHeader.version, SnapshotFooter.version
last_contained_log_timestamp_ms BIGINT   SnapshotHeader
==============================  ===============================================================

``NoOpRecord`` fills only the header columns. ``_RECORD_COLUMNS`` below is the one table of
this mapping; an import-time check ties it to the record classes, so a new record type or
version fails here until it is given columns, instead of being dropped.

Partitions and reading. ``partitions()`` runs where Spark plans the query (the driver) and
only *lists* the directory (names and sizes): one input partition per segment file (carrying
its path, its expected base offset and its size at listing time) and, with
``includeSnapshots``, one per checkpoint. ``read()`` runs on the executors and is the only code
that opens the files, read-only. On a cluster the path must therefore be visible under the same
name to the driver and to every worker (a shared file system: NFS, a Kubernetes volume, ...);
for local mode any path works.

Each partition reads its file up to the size seen at listing, so a DataFrame is a stable
snapshot of the log as it was when planned (a re-run action sees the same rows; a new ``load``
sees newer batches). Frames are walked with the storage layer's own ``_check_frame`` and
``_find_valid_frame`` (as ``log dump`` does), so Spark, ``log dump`` and recovery agree on where a
log ends: damage after which no CRC-valid frame follows, in this segment or a later one, is the
tail of a log being appended (or a torn write that recovery will cut) and reading stops at the
last complete batch; damage followed by a valid frame, a batch out of sequence, or a batch that
does not decode is a ``LogReadError`` naming the file and byte offset. Nothing is modified.
Unknown record types and versions are errors, never skipped rows.

Decoding. ``read()`` yields ``pyarrow.RecordBatch``es, built column-wise from the msgpack body:
records are grouped by type, each wire field becomes a column, and type and range checks run
over whole columns (``set(map(type, column))``, Arrow's ``min_max``) instead of constructing a
record object per record. Those checks are at least as strict as the record classes'; when one
fails, the chunk is decoded again with the reference ``decode_log_batch``, which either raises
its precise error or, should the fast checks ever be stricter, provides the rows
(tests/test_analytics_source.py checks both directions field by field).

Rows or Arrow: measured on the 2-core development machine, one 2 M-record log (2 segments),
``local[2]``, ``df.write.format("noop")`` (every column materialised), same session: yielding a
tuple per record built from ``decode_log_batch`` records ran at 78 k records/s; yielding these
Arrow batches at 230-370 k records/s (the tuple path pays for a record object per record and
for Spark's per-value conversion of 31 columns to Arrow). Arrow is kept. Parallelism is one
task per segment: a log of few, large segments leaves cores idle.
"""

from __future__ import annotations

import base64
import dataclasses
import gc
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from quorum.ids import UUID_BASE64_CHARS, UUID_BYTES
from quorum.metadata.batch import BATCH_KEYS, LogBatch, decode_log_batch
from quorum.metadata.records import (
    CONTROL_RECORD_TYPES,
    INT8_MAX,
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    NO_LEADER,
    RECORD_CLASSES,
    SNAPSHOT_RECORD_CLASSES,
    BrokerEndpoint,
    ConfigRecord,
    DeletedTopicRecord,
    FenceBrokerRecord,
    InvalidRecordError,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicIdentityRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    record_to_wire,
    unpack_msgpack,
)

# The storage layer owns the frame format; these are its definitions of "a whole frame with a
# matching CRC" and "the next such frame". Reusing them keeps Spark, log dump and recovery in
# agreement on where a log ends.
from quorum.storage.log import FRAME_HEADER_BYTES, _check_frame, _find_valid_frame

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COLUMN_NAMES",
    "FORMAT_NAME",
    "LogFile",
    "LogFilePartition",
    "LogReadError",
    "MetaquorumDataSource",
    "MetaquorumReader",
    "ReadOptions",
    "arrow_schema",
    "list_log_files",
    "load",
    "plan_partitions",
    "read_partition",
    "spark_schema",
]

FORMAT_NAME: Final = "metaquorum"
METADATA_PARTITION_DIR: Final = "__cluster_metadata-0"
_SEGMENT_NAME: Final = re.compile(r"^(\d{20})\.log$")
_CHECKPOINT_NAME: Final = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
# Records decoded and converted together into Arrow batches. Larger chunks amortise the
# per-column work, but the decoder makes several C-level passes over the records' objects and
# those are memory-bound once a chunk's objects outgrow the CPU caches: 16 Ki records measured
# fastest (e.g. 33 ns instead of 118 ns per record for one pass at 64 Ki).
CHUNK_RECORDS_TARGET: Final = 16_384
# Distinct topic ids (or replica arrays) remembered across chunks by the column converters.
_DISTINCT_VALUES_MAX: Final = 65_536


# ----- schema -------------------------------------------------------------------------------

_ENDPOINT_STRUCT: Final = "STRUCT<name STRING, host STRING, port INT>"

# (name, SQL type). The order is the column order of the table.
COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("offset", "BIGINT"),
    ("epoch", "INT"),
    ("batch_timestamp_ms", "BIGINT"),
    ("control", "BOOLEAN"),
    ("record_type", "STRING"),
    ("version", "INT"),
    ("snapshot_end_offset", "BIGINT"),
    ("topic_id", "STRING"),
    ("name", "STRING"),
    ("internal", "BOOLEAN"),
    ("partition", "INT"),
    ("replicas", "ARRAY<INT>"),
    ("isr", "ARRAY<INT>"),
    ("leader", "INT"),
    ("leader_epoch", "INT"),
    ("partition_epoch", "INT"),
    ("broker_id", "INT"),
    ("broker_epoch", "BIGINT"),
    ("incarnation_id", "STRING"),
    ("rack", "STRING"),
    ("fenced", "BOOLEAN"),
    ("endpoints", f"ARRAY<{_ENDPOINT_STRUCT}>"),
    ("config_resource_type", "INT"),
    ("config_resource_name", "STRING"),
    ("config_name", "STRING"),
    ("config_value", "STRING"),
    ("leader_id", "INT"),
    ("quorum_epoch", "INT"),
    ("voters", "ARRAY<INT>"),
    ("snapshot_version", "INT"),
    ("last_contained_log_timestamp_ms", "BIGINT"),
    # Snapshot-only records (topic identity survives snapshots).
    ("creation_offset", "BIGINT"),
    ("deletion_offset", "BIGINT"),
)
COLUMN_NAMES: Final = tuple(name for name, _ in COLUMNS)
_COLUMN_TYPES: Final = dict(COLUMNS)
_HEADER_COLUMNS: Final = 7
SCHEMA_DDL: Final = ", ".join(f"{name} {sql}" for name, sql in COLUMNS)


def _spark_type(sql: str) -> DataType:
    simple: dict[str, DataType] = {
        "BIGINT": LongType(),
        "INT": IntegerType(),
        "BOOLEAN": BooleanType(),
        "STRING": StringType(),
    }
    if sql in simple:
        return simple[sql]
    if sql == "ARRAY<INT>":
        return ArrayType(IntegerType())
    assert sql == f"ARRAY<{_ENDPOINT_STRUCT}>", sql
    endpoint = StructType(
        [
            StructField("name", StringType()),
            StructField("host", StringType()),
            StructField("port", IntegerType()),
        ]
    )
    return ArrayType(endpoint)


def spark_schema() -> StructType:
    """The schema of the table (every column nullable), built without a JVM."""
    return StructType([StructField(name, _spark_type(sql)) for name, sql in COLUMNS])


def _arrow_type(sql: str) -> pa.DataType:
    import pyarrow as pa  # noqa: PLC0415 - executors import pyarrow only when they read

    simple = {
        "BIGINT": pa.int64(),
        "INT": pa.int32(),
        "BOOLEAN": pa.bool_(),
        "STRING": pa.string(),
    }
    if sql in simple:
        return simple[sql]
    if sql == "ARRAY<INT>":
        return pa.list_(pa.field("element", pa.int32()))
    assert sql == f"ARRAY<{_ENDPOINT_STRUCT}>", sql
    endpoint = pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32())])
    return pa.list_(pa.field("element", endpoint))


_arrow_schema_cache: list[pa.Schema] = []


def arrow_schema() -> pa.Schema:
    """The Arrow schema of the batches ``read()`` yields (Spark expects it of
    ``spark_schema()``)."""
    if not _arrow_schema_cache:
        import pyarrow as pa  # noqa: PLC0415

        _arrow_schema_cache.append(
            pa.schema([pa.field(name, _arrow_type(sql)) for name, sql in COLUMNS])
        )
    return _arrow_schema_cache[0]


# ----- record fields -> columns -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    """Where one wire field of a record goes, and what the record class accepts for it."""

    field: str  # the record class's field name (checked below)
    column: str
    kind: str  # one of _KINDS
    minimum: int = 0
    maximum: int = INT32_MAX


_KINDS: Final = frozenset({"int", "int?", "bool", "str", "str?", "uuid", "ints", "ints?", "eps"})
_TOPIC_ID: Final = _Field("topic_id", "topic_id", "uuid")
_PARTITION: Final = _Field("partition", "partition", "int")
_BROKER_ID: Final = _Field("broker_id", "broker_id", "int")
_BROKER_EPOCH: Final = _Field("broker_epoch", "broker_epoch", "int", 0, INT64_MAX)

# The one table of which record field fills which column (see the module docstring). Ranges
# repeat the record classes' __post_init__ checks; tests/test_analytics_source.py proves, value
# by value, that these checks accept exactly what the record classes accept.
_RECORD_COLUMNS: Final[Mapping[type[Record], tuple[_Field, ...]]] = {
    RegisterBrokerRecord: (
        _BROKER_ID,
        _Field("incarnation_id", "incarnation_id", "uuid"),
        _BROKER_EPOCH,
        _Field("endpoints", "endpoints", "eps"),
        _Field("rack", "rack", "str?"),
        _Field("fenced", "fenced", "bool"),
    ),
    UnregisterBrokerRecord: (_BROKER_ID, _BROKER_EPOCH),
    TopicRecord: (
        _Field("name", "name", "str"),
        _TOPIC_ID,
        _Field("internal", "internal", "bool"),
    ),
    PartitionRecord: (
        _TOPIC_ID,
        _PARTITION,
        _Field("replicas", "replicas", "ints"),
        _Field("isr", "isr", "ints"),
        _Field("leader", "leader", "int", NO_LEADER),
        _Field("leader_epoch", "leader_epoch", "int"),
        _Field("partition_epoch", "partition_epoch", "int"),
    ),
    ConfigRecord: (
        _Field("resource_type", "config_resource_type", "int", 0, INT8_MAX),
        _Field("resource_name", "config_resource_name", "str"),
        _Field("name", "config_name", "str"),
        _Field("value", "config_value", "str?"),
    ),
    PartitionChangeRecord: (
        _TOPIC_ID,
        _PARTITION,
        _Field("isr", "isr", "ints?"),
        _Field("leader", "leader", "int?", NO_LEADER),
        _Field("replicas", "replicas", "ints?"),
        _Field("leader_epoch", "leader_epoch", "int?"),
        _Field("partition_epoch", "partition_epoch", "int?"),
    ),
    FenceBrokerRecord: (_BROKER_ID, _BROKER_EPOCH),
    UnfenceBrokerRecord: (_BROKER_ID, _BROKER_EPOCH),
    RemoveTopicRecord: (_TOPIC_ID,),
    NoOpRecord: (),
    LeaderChangeMessage: (
        _Field("leader_id", "leader_id", "int"),
        _Field("epoch", "quorum_epoch", "int"),
        _Field("voters", "voters", "ints"),
    ),
    SnapshotHeader: (
        _Field("version", "snapshot_version", "int", 0, INT16_MAX),
        _Field(
            "last_contained_log_timestamp_ms",
            "last_contained_log_timestamp_ms",
            "int",
            0,
            INT64_MAX,
        ),
    ),
    SnapshotFooter: (_Field("version", "snapshot_version", "int", 0, INT16_MAX),),
    TopicIdentityRecord: (
        _TOPIC_ID,
        _Field("creation_offset", "creation_offset", "int", 0, INT64_MAX),
    ),
    DeletedTopicRecord: (
        _Field("name", "name", "str"),
        _TOPIC_ID,
        _Field("creation_offset", "creation_offset", "int", 0, INT64_MAX),
        _Field("deletion_offset", "deletion_offset", "int", 0, INT64_MAX),
    ),
}

_KIND_SQL_TYPES: Final = {
    "int": ("INT", "BIGINT"),
    "int?": ("INT", "BIGINT"),
    "bool": ("BOOLEAN",),
    "str": ("STRING",),
    "str?": ("STRING",),
    "uuid": ("STRING",),
    "ints": ("ARRAY<INT>",),
    "ints?": ("ARRAY<INT>",),
    "eps": (f"ARRAY<{_ENDPOINT_STRUCT}>",),
}


def _check_record_columns() -> None:
    """The table above covers every record class, field by field, in wire order."""
    every_class = set(RECORD_CLASSES.values()) | set(SNAPSHOT_RECORD_CLASSES.values())
    assert set(_RECORD_COLUMNS) == every_class, "a record type has no columns"
    for cls, fields in _RECORD_COLUMNS.items():
        names = tuple(f.name for f in dataclasses.fields(cls))
        assert names == tuple(f.field for f in fields), (cls.__name__, names)
        assert len({f.column for f in fields}) == len(fields), cls.__name__
        for f in fields:
            assert f.kind in _KINDS, f
            assert COLUMN_NAMES.index(f.column) >= _HEADER_COLUMNS, f
            assert _COLUMN_TYPES[f.column] in _KIND_SQL_TYPES[f.kind], f
            if _COLUMN_TYPES[f.column] == "INT":
                assert f.maximum <= INT32_MAX, f
            if f.kind.startswith("ints"):  # one shared cache of distinct int arrays
                assert (f.minimum, f.maximum) == (0, INT32_MAX), f


_check_record_columns()


@dataclass(frozen=True, slots=True)
class _RecordLayout:
    """What the decoder needs to know about one (type code, version)."""

    type_name: str
    version: int
    control: bool
    fields: tuple[_Field, ...]
    column_indexes: tuple[int, ...]  # where each field goes in COLUMN_NAMES


_LAYOUTS: Final[Mapping[tuple[int, int], _RecordLayout]] = {
    (cls.TYPE, cls.VERSION): _RecordLayout(
        type_name=cls.__name__,
        version=cls.VERSION,
        control=cls.TYPE in CONTROL_RECORD_TYPES,
        fields=fields,
        column_indexes=tuple(COLUMN_NAMES.index(f.column) for f in fields),
    )
    for cls, fields in _RECORD_COLUMNS.items()
}


# ----- errors and options -------------------------------------------------------------------


class LogReadError(Exception):
    """The log cannot be read: corruption, an undecodable batch, a missing file or directory."""

    def __init__(self, path: str | Path, byte_offset: int | None, problem: str) -> None:
        self.path = str(path)
        self.byte_offset = byte_offset
        self.problem = problem
        where = self.path if byte_offset is None else f"{self.path} at byte {byte_offset}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries inside Spark
        return (type(self), (self.path, self.byte_offset, self.problem))


_TRUE: Final = frozenset({"true", "1", "yes"})
_FALSE: Final = frozenset({"false", "0", "no"})
_OPTIONS: Final = frozenset({"path", "startoffset", "endoffset", "includesnapshots"})


@dataclass(frozen=True, slots=True)
class ReadOptions:
    path: str
    start_offset: int = 0
    end_offset: int | None = None  # exclusive; None: to the end of the log
    include_snapshots: bool = False

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"startOffset must be >= 0, got {self.start_offset}")
        if self.end_offset is not None and self.end_offset < self.start_offset:
            raise ValueError(
                f"endOffset ({self.end_offset}) must be >= startOffset ({self.start_offset})"
            )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """From the (case-insensitive) options Spark passes; unknown options are refused, so a
        misspelled option does not silently read the whole log."""
        keys = {key.lower() for key in options}
        unknown = sorted(keys - _OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for format({FORMAT_NAME!r}); the options are "
                "path, startOffset, endOffset, includeSnapshots"
            )
        lowered = {key.lower(): value for key, value in options.items()}
        if not lowered.get("path"):
            raise ValueError(
                f"format({FORMAT_NAME!r}) needs a path: .load('<metadata.log.dir or "
                f"{METADATA_PARTITION_DIR} directory>')"
            )
        return cls(
            path=lowered["path"],
            start_offset=_parse_offset("startOffset", lowered.get("startoffset")) or 0,
            end_offset=_parse_offset("endOffset", lowered.get("endoffset")),
            include_snapshots=_parse_bool("includeSnapshots", lowered.get("includesnapshots")),
        )


def _parse_offset(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer offset, got {value!r}") from None


def _parse_bool(name: str, value: str | None) -> bool:
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


# ----- listing and partitions (the driver) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogFile:
    """A segment or checkpoint as listed: read later only up to ``size_bytes``."""

    path: str
    base_offset: int  # a segment's base offset; a checkpoint's end offset
    size_bytes: int
    snapshot_epoch: int | None = None  # set for checkpoints only

    @property
    def is_checkpoint(self) -> bool:
        return self.snapshot_epoch is not None


@dataclass(frozen=True)
class LogFilePartition(InputPartition):
    """One input partition: one segment (or checkpoint), plus what reading it needs to know of
    the segments after it (for the torn-tail rule and the offset hand-over check)."""

    file: LogFile
    later_segments: tuple[LogFile, ...]
    start_offset: int
    end_offset: int | None


def _log_directory(path: Path) -> Path:
    if not path.is_dir():
        raise LogReadError(path, None, "no such directory")
    names = os.listdir(path)
    has_log_files = any(_SEGMENT_NAME.match(n) or _CHECKPOINT_NAME.match(n) for n in names)
    if not has_log_files and (path / METADATA_PARTITION_DIR).is_dir():
        return path / METADATA_PARTITION_DIR
    return path


def list_log_files(path: str | Path) -> tuple[list[LogFile], list[LogFile]]:
    """The segments (by base offset) and checkpoints (by end offset) under ``path``: a
    ``__cluster_metadata-0`` directory or the ``metadata.log.dir`` holding one. Listing only:
    names and sizes, no file is opened."""
    directory = _log_directory(Path(path))
    segments: list[LogFile] = []
    checkpoints: list[LogFile] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            segment = _SEGMENT_NAME.match(entry.name)
            if segment is not None:
                size = entry.stat(follow_symlinks=False).st_size
                segments.append(LogFile(entry.path, int(segment.group(1)), size))
                continue
            checkpoint = _CHECKPOINT_NAME.match(entry.name)
            if checkpoint is not None:
                size = entry.stat(follow_symlinks=False).st_size
                end_offset, epoch = int(checkpoint.group(1)), int(checkpoint.group(2))
                checkpoints.append(LogFile(entry.path, end_offset, size, epoch))
    segments.sort(key=lambda f: f.base_offset)
    checkpoints.sort(key=lambda f: (f.base_offset, f.snapshot_epoch))
    return segments, checkpoints


def plan_partitions(options: ReadOptions) -> list[LogFilePartition]:
    """One partition per segment that may hold offsets in the range, then one per checkpoint."""
    segments, checkpoints = list_log_files(options.path)
    start, end = options.start_offset, options.end_offset
    partitions: list[LogFilePartition] = []
    for index, segment in enumerate(segments):
        later = tuple(segments[index + 1 :])
        next_base = later[0].base_offset if later else None
        if next_base is not None and next_base <= start:
            continue  # wholly before the range
        if end is not None and segment.base_offset >= end:
            break  # this one and every later one wholly after it
        partitions.append(LogFilePartition(segment, later, start, end))
    if options.include_snapshots:
        for checkpoint in checkpoints:
            if start <= checkpoint.base_offset and (end is None or checkpoint.base_offset <= end):
                partitions.append(LogFilePartition(checkpoint, (), start, end))
    return partitions


# ----- frames (the executors) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Frame:
    position: int
    base_offset: int
    epoch: int
    record_count: int
    data: bytes


def _read_prefix(file: LogFile) -> bytes:
    """The first ``size_bytes`` of ``file`` (fewer if it was cut since it was listed)."""
    try:
        with open(file.path, "rb") as f:
            return f.read(file.size_bytes)
    except FileNotFoundError:
        raise LogReadError(
            file.path,
            None,
            "the file was listed when the query was planned but is gone now (deleted behind a "
            "snapshot, or the log was truncated); load the log again",
        ) from None


def _iter_frames(partition: LogFilePartition) -> Iterator[_Frame]:
    """The whole, CRC-valid frames of the partition's file, in order, up to ``end_offset``.

    Stops quietly at a tail (damage no valid frame follows); raises ``LogReadError`` for
    anything else. A checkpoint is written whole and then renamed into place, so any damage in
    one is corruption.
    """
    file = partition.file
    contents = _read_prefix(file)
    end = partition.end_offset
    expected = None if file.is_checkpoint else file.base_offset
    epoch_floor = 0
    position = 0
    # Each pass consumes one frame (>= FRAME_HEADER_BYTES) or ends the loop.
    while position < len(contents):
        header = _check_frame(contents, position)
        if isinstance(header, str):
            _raise_unless_tail(partition, contents, position, header)
            return
        if header.record_count < 1 or header.base_offset < 0 or header.epoch < 0:
            raise LogReadError(
                file.path,
                position,
                f"a batch frame with base offset {header.base_offset}, epoch {header.epoch} and "
                f"record count {header.record_count} (corrupt)",
            )
        if expected is not None and header.base_offset != expected:
            raise LogReadError(
                file.path,
                position,
                f"a batch with base offset {header.base_offset} where offset {expected} was "
                "expected (offsets must be contiguous from the segment's name)",
            )
        if header.epoch < epoch_floor:
            raise LogReadError(
                file.path, position, f"epoch {header.epoch} after epoch {epoch_floor} (corrupt)"
            )
        if end is not None and header.base_offset >= end and not file.is_checkpoint:
            return
        data = contents[position + FRAME_HEADER_BYTES : position + header.frame_bytes]
        yield _Frame(position, header.base_offset, header.epoch, header.record_count, data)
        epoch_floor = header.epoch
        expected = header.base_offset + header.record_count
        position += header.frame_bytes
    if partition.later_segments and expected is not None:
        following = partition.later_segments[0]
        if expected != following.base_offset:
            raise LogReadError(
                file.path,
                position,
                f"the segment ends at offset {expected} but the next segment "
                f"{Path(following.path).name} starts at offset {following.base_offset} "
                "(a missing, extra or renamed segment)",
            )


def _raise_unless_tail(
    partition: LogFilePartition, contents: bytes, position: int, problem: str
) -> None:
    """Apply the storage layer's torn-tail rule to damage at ``position``."""
    file = partition.file
    if file.is_checkpoint:
        raise LogReadError(
            file.path,
            position,
            f"{problem}: a checkpoint is written whole before it is renamed into place, so this "
            "is corruption",
        )
    later_position = _find_valid_frame(contents, position + 1)
    if later_position is not None:
        raise LogReadError(
            file.path,
            position,
            f"{problem}, yet a valid batch follows at byte {later_position}: the segment is "
            "corrupt (not a torn write)",
        )
    for later in partition.later_segments:
        later_position = _find_valid_frame(_read_prefix(later), 0)
        if later_position is not None:
            raise LogReadError(
                file.path,
                position,
                f"{problem}, yet the later segment {later.path} holds a valid batch at byte "
                f"{later_position}: the segment is corrupt (not a torn write)",
            )


# ----- decoding into columns ----------------------------------------------------------------
#
# A chunk of frames becomes Arrow batches in three column-wise steps (each a C-level pass over
# a list, no Python code per record): unpack every batch body and gather the record arrays;
# group the records by (type, version) with a stable argsort of their type codes; turn each
# field of a group into an Arrow array, checking types with ``set(map(type, column))`` and
# ranges with min/max. The cyclic garbage collector is paused while a chunk is decoded: the
# decoder allocates millions of tuples and no cycles, and a collection pass over them costs
# more than the decoding (measured: 2.0 us instead of 0.13 us per record for the msgpack step).


class _NotFast(Exception):  # a control-flow signal, not an error to report
    """The fast path saw something it does not accept; the reference decoder decides."""


class _Distinct(dict[Any, int]):
    """Distinct values of a kind of column -> their index in ``values``, each checked once, on
    first sight (``check`` raises ``_NotFast``). Columns become ``values.take(indexes)``, so the
    per-record work is one C-level dict lookup (replica sets and topic ids repeat a lot).

    Kept across chunks and bounded (cleared when full, STYLE.md L7). If ``nullable``, ``None``
    maps to -1, a null (else it is checked like any key, and refused). Equal keys of different
    types (``(1,)`` and ``(True,)``) share an entry, so callers check element types before
    looking values up; ``bytes`` keys never equal other types.
    """

    def __init__(self, check: Any, convert: Any, arrow_type: str, *, nullable: bool) -> None:
        super().__init__()
        self._check = check
        self._convert = convert
        self._arrow_type = arrow_type
        self._nullable = nullable
        self._values: list[Any] = []
        self._array: pa.Array | None = None
        if nullable:
            self[None] = -1

    def __missing__(self, key: Any) -> int:
        self._check(key)
        index = self[key] = len(self._values)
        self._values.append(self._convert(key))
        self._array = None
        return index

    def take(self, column: Sequence[Any]) -> pa.Array:
        """``column`` as an Arrow array (nulls for ``None``)."""
        import numpy as np  # noqa: PLC0415
        import pyarrow as pa  # noqa: PLC0415

        if len(self._values) >= _DISTINCT_VALUES_MAX:
            self.clear()
            if self._nullable:
                self[None] = -1
            self._values = []
            self._array = None
        try:
            indexes = np.array(list(map(self.__getitem__, column)), dtype=np.int32)
        except TypeError:  # an unhashable value: not one this column can hold
            raise _NotFast("unhashable value") from None
        if self._array is None:
            self._array = pa.array(self._values, _arrow_type(self._arrow_type))
        nulls = indexes < 0
        if nulls.any():
            return self._array.take(pa.array(indexes, mask=nulls))
        return self._array.take(pa.array(indexes))


def _uuid_texts(column: list[Any]) -> pa.Array:
    """16-byte ids -> Kafka's base64 text, all at once: each id padded to 18 bytes encodes to
    24 characters whose first 22 are its text (no per-id Python code, no cache to miss)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    _check_types(column, _BYTES_TYPES, False)
    if set(map(len, column)) != {UUID_BYTES}:
        raise _NotFast("an id that is not 16 bytes")
    count = len(column)
    padded = np.zeros((count, UUID_BYTES + 2), dtype=np.uint8)
    padded[:, :UUID_BYTES] = np.frombuffer(b"".join(column), dtype=np.uint8).reshape(count, -1)
    encoded = np.frombuffer(base64.urlsafe_b64encode(padded.tobytes()), dtype=np.uint8)
    texts = np.ascontiguousarray(encoded.reshape(count, 24)[:, :UUID_BASE64_CHARS])
    offsets = np.arange(0, (count + 1) * UUID_BASE64_CHARS, UUID_BASE64_CHARS, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(texts))


def _int_array_checker(minimum: int, maximum: int) -> Any:
    def check(key: object) -> None:
        if type(key) is not tuple or not all(minimum <= element <= maximum for element in key):
            raise _NotFast(f"int array {key!r:.60}")

    return check


def _identity(value: Any) -> Any:
    return value


# Replica/ISR/voter arrays: elements are broker ids in [0, INT32_MAX] in every record type.
_INT_ARRAYS: Final = {
    nullable: _Distinct(
        _int_array_checker(0, INT32_MAX), _identity, "ARRAY<INT>", nullable=nullable
    )
    for nullable in (False, True)
}
_NONE_TYPE: Final = type(None)
_WIRE_SEQUENCE_TYPES: Final = frozenset({tuple, list})
_INT_TYPES: Final = frozenset({int})
_BOOL_TYPES: Final = frozenset({bool})
_STR_TYPES: Final = frozenset({str})
_BYTES_TYPES: Final = frozenset({bytes})
_CONTROL_TYPE_CODES: Final = tuple(sorted(CONTROL_RECORD_TYPES))
_VERSION_KEY_SPAN: Final = 1 << 16  # record versions are int16 in Kafka


@dataclass(slots=True)
class _Chunk:
    """Record arrays gathered from consecutive batches, with per-batch header values."""

    wires: list[Sequence[Any]] = dataclasses.field(default_factory=list)
    first_offsets: list[int] = dataclasses.field(default_factory=list)
    counts: list[int] = dataclasses.field(default_factory=list)
    epochs: list[int] = dataclasses.field(default_factory=list)
    timestamps_ms: list[int] = dataclasses.field(default_factory=list)
    controls: list[bool] = dataclasses.field(default_factory=list)

    def add(
        self,
        wires: Sequence[Sequence[Any]],
        first_offset: int,
        epoch: int,
        timestamp_ms: int,
        control: bool,
    ) -> None:
        self.wires.extend(wires)
        self.first_offsets.append(first_offset)
        self.counts.append(len(wires))
        self.epochs.append(epoch)
        self.timestamps_ms.append(timestamp_ms)
        self.controls.append(control)


def _is_int(value: object, maximum: int) -> bool:
    return type(value) is int and 0 <= value <= maximum


def _collect_fast(chunk: _Chunk, frame: _Frame, start: int, end: int | None, *, path: str) -> None:
    """Check a batch body's envelope as ``decode_log_batch`` does and gather its records; the
    records themselves are checked column-wise later."""
    try:
        body = unpack_msgpack(frame.data)
    except RecordDecodeError as exc:
        raise _NotFast(str(exc)) from None
    if type(body) is not dict or body.keys() != BATCH_KEYS:
        raise _NotFast("batch keys")
    base_offset = body["base_offset"]
    epoch = body["epoch"]
    timestamp_ms = body["timestamp_ms"]
    control = body["control"]
    wires = body["records"]
    if not (
        _is_int(base_offset, INT64_MAX)
        and _is_int(epoch, INT32_MAX)
        and _is_int(timestamp_ms, INT64_MAX)
        and type(control) is bool
        and type(wires) is tuple
        and (base_offset, epoch, len(wires)) == (frame.base_offset, frame.epoch, frame.record_count)
    ):
        raise _NotFast("batch header")
    if start > base_offset or (end is not None and end < base_offset + len(wires)):
        # A batch across an end of the range: check all of it with the reference decoder.
        _collect_reference(chunk, frame, start, end, path=path)
        return
    chunk.add(wires, base_offset, epoch, timestamp_ms, control)


def _collect_reference(
    chunk: _Chunk, frame: _Frame, start: int, end: int | None, *, path: str
) -> None:
    """Decode a batch with the reference decoder (exact errors) and gather its records."""
    batch = LogBatch(frame.base_offset, frame.epoch, frame.record_count, frame.data)
    try:
        decoded = decode_log_batch(batch)
    except RecordDecodeError as exc:
        raise LogReadError(
            path,
            frame.position,
            f"cannot decode the batch at base offset {frame.base_offset}: {exc}",
        ) from exc
    low = max(start - decoded.base_offset, 0)
    high = len(decoded.records)
    if end is not None:
        high = min(end - decoded.base_offset, high)
    if low < high:
        wires = [record_to_wire(record) for record in decoded.records[low:high]]
        chunk.add(
            wires, decoded.base_offset + low, decoded.epoch, decoded.timestamp_ms, decoded.control
        )


def _chunk_to_batches(
    chunk: _Chunk, snapshot_end_offset: int | None, *, checked: bool
) -> list[pa.RecordBatch]:
    """One Arrow batch per (type, version) in ``chunk``. ``checked``: the record arrays came
    from the reference decoder, so only the column conversions (which check anyway) remain."""
    import numpy as np  # noqa: PLC0415

    wires = chunk.wires
    if not wires:
        return []
    if not checked and (set(map(type, wires)) != {tuple} or set(map(len, wires)) != {3}):
        raise _NotFast("record arrays")
    codes = list(map(itemgetter(0), wires))
    versions = list(map(itemgetter(1), wires))
    # Type checks over every element: in a set of the codes themselves True would pass as 1.
    if not checked and (set(map(type, codes)) != {int} or set(map(type, versions)) != {int}):
        raise _NotFast("type codes")
    try:
        codes_array = np.array(codes, dtype=np.int64)
        versions_array = np.array(versions, dtype=np.int64)
    except OverflowError:
        raise _NotFast("type code range") from None
    if versions_array.min() < 0 or versions_array.max() >= _VERSION_KEY_SPAN:
        raise _NotFast("version range")
    counts = np.array(chunk.counts, dtype=np.int64)
    is_control = np.isin(codes_array, _CONTROL_TYPE_CODES)
    if not checked and (is_control != np.repeat(np.array(chunk.controls), counts)).any():
        raise _NotFast("control records in a non-control batch or the reverse")
    starts = np.cumsum(counts) - counts
    offsets = np.arange(len(wires), dtype=np.int64) + np.repeat(
        np.array(chunk.first_offsets, dtype=np.int64) - starts, counts
    )
    epochs = np.repeat(np.array(chunk.epochs, dtype=np.int32), counts)
    timestamps_ms = np.repeat(np.array(chunk.timestamps_ms, dtype=np.int64), counts)
    keys = codes_array * _VERSION_KEY_SPAN + versions_array
    fields = list(map(itemgetter(2), wires))
    batches = []
    if (keys == keys[0]).all():
        groups: list[tuple[int, Any]] = [(int(keys[0]), None)]
    else:
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        bounds = [0, *(np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1).tolist()]
        bounds.append(len(wires))
        groups = [(int(sorted_keys[low]), order[low:high]) for low, high in pairwise(bounds)]
    for key, indexes in groups:
        layout = _LAYOUTS.get(divmod(key, _VERSION_KEY_SPAN))
        if layout is None:
            raise _NotFast(f"no layout for type {key // _VERSION_KEY_SPAN}")
        if indexes is None:
            group_fields: Sequence[Sequence[Any]] = fields
            header = (offsets, epochs, timestamps_ms)
        else:
            group_fields = list(map(fields.__getitem__, indexes.tolist()))
            header = (offsets[indexes], epochs[indexes], timestamps_ms[indexes])
        batches.append(_group_to_batch(layout, group_fields, header, snapshot_end_offset))
    return batches


def _group_to_batch(
    layout: _RecordLayout,
    fields: Sequence[Sequence[Any]],
    header: tuple[Any, Any, Any],
    snapshot_end_offset: int | None,
) -> pa.RecordBatch:
    import pyarrow as pa  # noqa: PLC0415

    count = len(fields)
    arity = len(layout.fields)
    if not set(map(type, fields)) <= _WIRE_SEQUENCE_TYPES or set(map(len, fields)) != {arity}:
        raise _NotFast("field arrays")
    schema = arrow_schema()
    arrays: list[pa.Array | None] = [None] * len(COLUMNS)
    arrays[0] = pa.array(header[0], pa.int64())
    arrays[1] = pa.array(header[1], pa.int32())
    arrays[2] = pa.array(header[2], pa.int64())
    arrays[3] = pa.repeat(layout.control, count)
    arrays[4] = pa.repeat(layout.type_name, count)
    arrays[5] = pa.repeat(pa.scalar(layout.version, pa.int32()), count)
    if snapshot_end_offset is not None:
        arrays[6] = pa.repeat(pa.scalar(snapshot_end_offset, pa.int64()), count)
    for position, (spec, index) in enumerate(
        zip(layout.fields, layout.column_indexes, strict=True)
    ):
        column = list(map(itemgetter(position), fields))
        arrays[index] = _convert(column, spec, COLUMNS[index][1])
    for index, array in enumerate(arrays):
        if array is None:
            arrays[index] = pa.nulls(count, schema.field(index).type)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _check_types(column: Sequence[Any], allowed: frozenset[type], nullable: bool) -> set[type]:
    types = set(map(type, column))
    if nullable:
        types.discard(_NONE_TYPE)
    if not types <= allowed:
        raise _NotFast(f"types {types}")
    return types


def _convert(column: list[Any], spec: _Field, sql: str) -> pa.Array:
    """One wire column -> one Arrow array, refusing what the record class would refuse."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # type: ignore[import-untyped]  # noqa: PLC0415

    kind = spec.kind
    nullable = kind.endswith("?")
    if kind in ("int", "int?"):
        if not _check_types(column, _INT_TYPES, nullable):
            return pa.nulls(len(column), _arrow_type(sql))
        try:
            array = pa.array(column, pa.int64())
        except (OverflowError, pa.ArrowException) as exc:
            raise _NotFast(str(exc)) from None
        bounds = pc.min_max(array)
        if bounds["min"].as_py() < spec.minimum or bounds["max"].as_py() > spec.maximum:
            raise _NotFast("range")
        return array if sql == "BIGINT" else array.cast(pa.int32())
    if kind == "bool":
        _check_types(column, _BOOL_TYPES, False)
        return pa.array(column, pa.bool_())
    if kind in ("str", "str?"):
        _check_types(column, _STR_TYPES, nullable)
        return pa.array(column, pa.string())
    if kind == "uuid":
        return _uuid_texts(column)
    if kind in ("ints", "ints?"):
        return _convert_int_arrays(column, spec, nullable)
    assert kind == "eps", kind
    return pa.array([_endpoints(value) for value in column], _arrow_type(sql))


def _convert_int_arrays(column: list[Any], spec: _Field, nullable: bool) -> pa.Array:
    """Arrays of ints, as indexes into their distinct values."""
    import pyarrow as pa  # noqa: PLC0415

    types = _check_types(column, _WIRE_SEQUENCE_TYPES, nullable)
    if not types:
        return pa.nulls(len(column), _arrow_type("ARRAY<INT>"))
    # Every element's type, before equal-but-differently-typed tuples can share an entry.
    if not set(map(type, chain.from_iterable(filter(None, column)))) <= _INT_TYPES:
        raise _NotFast("int array elements")
    assert (spec.minimum, spec.maximum) == (0, INT32_MAX), spec
    if list in types:  # the reference decoder's wire form: lists are not hashable
        column = [value if value is None else tuple(value) for value in column]
    return _INT_ARRAYS[nullable].take(column)


def _endpoints(value: object) -> list[dict[str, object]]:
    if type(value) not in _WIRE_SEQUENCE_TYPES:
        raise _NotFast("endpoints")
    assert isinstance(value, tuple | list)
    result = []
    for endpoint in value:
        if type(endpoint) not in _WIRE_SEQUENCE_TYPES or len(endpoint) != 3:
            raise _NotFast("endpoint")
        try:
            checked = BrokerEndpoint(endpoint[0], endpoint[1], endpoint[2])
        except InvalidRecordError:
            raise _NotFast("endpoint") from None
        result.append({"name": checked.name, "host": checked.host, "port": checked.port})
    return result


def _decode_chunk(frames: Sequence[_Frame], partition: LogFilePartition) -> list[pa.RecordBatch]:
    """The records of ``frames`` in the partition's offset range, as Arrow batches (one per
    record type present)."""
    file = partition.file
    start = 0 if file.is_checkpoint else partition.start_offset
    end = None if file.is_checkpoint else partition.end_offset
    snapshot_end = file.base_offset if file.is_checkpoint else None
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            chunk = _Chunk()
            for frame in frames:
                _collect_fast(chunk, frame, start, end, path=file.path)
            return _chunk_to_batches(chunk, snapshot_end, checked=False)
        except _NotFast:
            pass
        # Something the fast checks refuse: the reference decoder names the problem exactly.
        chunk = _Chunk()
        for frame in frames:
            _collect_reference(chunk, frame, start, end, path=file.path)
        try:
            return _chunk_to_batches(chunk, snapshot_end, checked=True)
        except _NotFast as exc:
            raise AssertionError(
                f"{file.path}: the column conversion refused records that decode_log_batch "
                f"accepts ({exc}); this is a bug in quorum.analytics.source"
            ) from exc
    finally:
        if gc_was_enabled:
            gc.enable()


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one partition as Arrow batches of ``arrow_schema()``: what ``read()``
    yields, usable without Spark (tests, benchmarks)."""
    if not isinstance(partition, LogFilePartition):
        return  # Spark's placeholder partition for an empty log
    frames: list[_Frame] = []
    records = 0
    for frame in _iter_frames(partition):
        frames.append(frame)
        records += frame.record_count
        if records >= CHUNK_RECORDS_TARGET:
            yield from _decode_chunk(frames, partition)
            frames, records = [], 0
    if frames:
        yield from _decode_chunk(frames, partition)


# ----- the Spark data source ----------------------------------------------------------------


class MetaquorumDataSource(DataSource):
    """``spark.read.format("metaquorum")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> MetaquorumReader:
        if schema != spark_schema():
            raise ValueError(
                f"format({FORMAT_NAME!r}) has a fixed schema; do not pass .schema(...) "
                f"(expected {SCHEMA_DDL})"
            )
        return MetaquorumReader(ReadOptions.parse(self.options))


class MetaquorumReader(DataSourceReader):
    """Plans one partition per segment on the driver; reads them on the executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[LogFilePartition]:
        return plan_partitions(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Everything read() needs is imported by this module, which executors import by name
        # (the classes pickle by reference); pyarrow is imported inside the decoding functions.
        return read_partition(partition)


def load(spark: SparkSession, path: str | Path, **options: object) -> DataFrame:
    """Register the source (idempotent) and load ``path`` with ``options`` (e.g.
    ``endOffset=500``, ``includeSnapshots=True``)."""
    spark.dataSource.register(MetaquorumDataSource)
    reader = spark.read.format(FORMAT_NAME)
    for key, value in options.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        reader = reader.option(key, text)
    return reader.load(str(path))
