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
    are not offset-filtered (they describe the image at ``end_offset``; their ``offset`` is the
    record's position inside the snapshot). The jobs in ``quorum.analytics.jobs`` merge them
    with the log rows where a log does not start at 0 (``state_as_of``, the topic lifecycle;
    see its docstring).
``splitBytes`` (default 32 MiB; ``0``: one partition per segment)
    A segment larger than this is read as several input partitions, byte ranges of about this
    size, so that a log of few large segments (a controller's, cleaned behind its snapshots)
    still keeps every core busy.
``filterPushdown`` (default ``false``)
    Filters on ``offset`` (``=``, ``>``, ``>=``, ``<``, ``<=``, ``IN``) narrow the range of
    segments read, as ``startOffset`` / ``endOffset`` do: ``where("offset >= N")`` plans no
    partition for the segments before N and decodes no batch before it. Spark still evaluates
    every filter on the rows (the pushdown only skips), and checkpoints are chosen by the
    options alone (their ``offset`` is a position in the snapshot). Needs pyspark >= 4.1 and
    the session conf ``spark.sql.python.filterPushdown.enabled=true`` (``load(...,
    filterPushdown=True)`` sets it; PySpark refuses a reader that can push filters in a session
    without it). Off by default because of a PySpark 4.3.0 bug: the partitions planned for a
    filtered query are kept on the data source and reused by later queries of the same
    DataFrame that push nothing, which then read only the filtered range (Spark later moved
    that state onto each scan). With the option on, load a new DataFrame for each filtered
    query; ``startOffset`` / ``endOffset`` have no such trap.

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
kraft_version INT               KRaftVersionRecord.kraft_version (KIP-853)
voter_set STRING                VotersRecord.voters as JSON: [{"id", "directoryId",
                                "endpoints": ["NAME://host:port"]}] (directoryId omitted for none)
control_version INT             KRaftVersionRecord.version, VotersRecord.version
snapshot_version INT            SnapshotHeader.version, SnapshotFooter.version
last_contained_log_timestamp_ms BIGINT   SnapshotHeader
acl_id STRING                   AccessControlEntryRecord, RemoveAccessControlEntryRecord (id)
acl_resource_type INT, ...      AccessControlEntryRecord: acl_resource_type, acl_resource_name,
                                acl_pattern_type, acl_principal, acl_host, acl_operation,
                                acl_permission_type (Kafka's enum codes)
==============================  ===============================================================

``NoOpRecord`` fills only the header columns. ``_RECORD_COLUMNS`` below is the one table of
this mapping; an import-time check ties it to the record classes, so a new record type or
version fails here until it is given columns, instead of being dropped.

Partitions and reading. ``partitions()`` runs where Spark plans the query (the driver) and
only *lists* the directory (names and sizes): one input partition per segment file, or per
``splitBytes`` byte range of a larger one (carrying its path, its expected base offset, its size
at listing time and the range) and, with ``includeSnapshots``, one per checkpoint. ``read()``
runs on the executors and is the only code that opens the files, read-only. On a cluster the
path must therefore be visible under the same name to the driver and to every worker (a shared
file system: NFS, a Kubernetes volume, ...); for local mode any path works.

A byte range holds the batches whose frames *start* in it. Its reader starts at the batch the
segment's offset index (``NNNN.index``) names at or before the range, once the frame there has
a valid CRC and that base offset (else, with no index or a stale one, at the segment's start),
and walks the frames up to the range, checking them, so all ranges of a segment agree on where
batches begin and together read each batch exactly once. Only the last range of a segment
checks the hand-over to the next segment; epochs are checked to never go back within a range.

Each partition reads its file up to the size seen at listing, so a DataFrame is a stable
snapshot of the log as it was when planned (a re-run action sees the same rows; a new ``load``
sees newer batches). Frames are walked with the storage layer's reader
(``quorum.storage.frames.read_segment``, its byte-range variant), the one ``log dump`` and
recovery use, so they agree on where a log ends: damage after which no valid frame follows, in
this segment or a later one, is the tail of a log being appended (or a torn write that recovery
will cut) and reading stops at the last complete batch; damage followed by a valid frame, a batch
out of sequence, or a batch that does not decode is a ``LogReadError`` naming the file and byte
offset. Nothing is modified.
Unknown record types and versions are errors, never skipped rows.

Decoding. ``read()`` yields ``pyarrow.RecordBatch``es, one per chunk of about 16 Ki records.
msgspec decodes each batch body straight into typed objects: a tagged union of one
``msgspec.Struct`` per record type (the type code is the tag), whose fields are typed from
``_RECORD_COLUMNS`` with the record classes' ranges, so every check runs in C while decoding.
The records of a chunk are then grouped by type (a stable argsort), each group's fields are
transposed in one ``zip`` and each column becomes an Arrow array with no Python code per value.
What the types refuse is decoded again with the reference ``decode_log_batch``, which either
raises its precise error or, should the types ever be stricter than the record classes,
provides the records (tests/test_analytics_source.py checks both directions field by field).

Rows or Arrow: measured on the 2-core development machine, one 2 M-record log (2 segments),
``local[2]``, ``df.write.format("noop")`` (every column materialised), same session: yielding a
tuple per record built from ``decode_log_batch`` records ran at 78 k records/s; yielding Arrow
batches at 230-370 k records/s (the tuple path pays for a record object per record and for
Spark's per-value conversion of 31 columns to Arrow). Arrow is kept. One batch per chunk rather
than one per record type: the JVM's cost per row falls by about a fifth (a source that replays
cached batches: 1.5-1.8 M rows/s per type, 2.0-2.2 M rows/s per 16 Ki-row chunk on ``local[2]``).
On two cores both are already busy with one task per segment (the Python worker decodes while
the JVM converts); ``splitBytes`` pays off with more cores than segments.
"""

from __future__ import annotations

import base64
import dataclasses
import gc
import json
import os
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    Final,
    Literal,
    NamedTuple,
    Optional,
    TypeAlias,
    Union,
)

import msgspec
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
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

from quorum.ids import UUID_BASE64_CHARS, UUID_BYTES, ZERO_UUID, Uuid
from quorum.metadata.batch import BATCH_KEYS, LogBatch, decode_log_batch, encode_batch
from quorum.metadata.records import (
    CONTROL_RECORD_TYPES,
    INT8_MAX,
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    NO_LEADER,
    RECORD_CLASSES,
    SNAPSHOT_RECORD_CLASSES,
    AccessControlEntryRecord,
    BrokerEndpoint,
    ConfigRecord,
    DeletedTopicRecord,
    FenceBrokerRecord,
    InvalidRecordError,
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicIdentityRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    VoterEntry,
    VotersRecord,
)
from quorum.storage.frames import (
    INDEX_ENTRY,
    CorruptFrameError,
    Tail,
    check_frame,
    read_segment,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "COLUMN_NAMES",
    "FILTER_PUSHDOWN_CONF",
    "FORMAT_NAME",
    "LogFile",
    "LogFilePartition",
    "LogReadError",
    "MetaquorumDataSource",
    "MetaquorumPushdownReader",
    "MetaquorumReader",
    "ReadOptions",
    "arrow_schema",
    "list_log_files",
    "load",
    "offset_bounds",
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
# Distinct replica arrays remembered across chunks by the column converter.
_DISTINCT_VALUES_MAX: Final = 65_536
# Segments are read as byte ranges of about this size, each an input partition (splitBytes).
SPLIT_BYTES_DEFAULT: Final = 32 * 1024 * 1024
# A range's first read covers the range and this much more for the batch that starts last in it
# (a larger one is read when met).
_WINDOW_SLACK_BYTES: Final = 1024 * 1024


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
    # ACLs (AccessControlEntryRecord, RemoveAccessControlEntryRecord): Kafka's enum codes.
    ("acl_id", "STRING"),
    ("acl_resource_type", "INT"),
    ("acl_resource_name", "STRING"),
    ("acl_pattern_type", "INT"),
    ("acl_principal", "STRING"),
    ("acl_host", "STRING"),
    ("acl_operation", "INT"),
    ("acl_permission_type", "INT"),
    # The voter set (KIP-853): KRaftVersionRecord, VotersRecord (control records).
    ("kraft_version", "INT"),
    ("voter_set", "STRING"),
    ("control_version", "INT"),
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


_KINDS: Final = frozenset(
    {"int", "int?", "bool", "str", "str?", "uuid", "ints", "ints?", "eps", "voters"}
)
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
    AccessControlEntryRecord: (
        _Field("id", "acl_id", "uuid"),
        _Field("resource_type", "acl_resource_type", "int", 0, INT8_MAX),
        _Field("resource_name", "acl_resource_name", "str"),
        _Field("pattern_type", "acl_pattern_type", "int", 0, INT8_MAX),
        _Field("principal", "acl_principal", "str"),
        _Field("host", "acl_host", "str"),
        _Field("operation", "acl_operation", "int", 0, INT8_MAX),
        _Field("permission_type", "acl_permission_type", "int", 0, INT8_MAX),
    ),
    RemoveAccessControlEntryRecord: (_Field("id", "acl_id", "uuid"),),
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
    KRaftVersionRecord: (
        _Field("version", "control_version", "int", 0, INT16_MAX),
        _Field("kraft_version", "kraft_version", "int", 0, INT16_MAX),
    ),
    VotersRecord: (
        _Field("version", "control_version", "int", 0, INT16_MAX),
        _Field("voters", "voter_set", "voters"),
    ),
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
    "voters": ("STRING",),
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
_OPTIONS: Final = frozenset(
    {"path", "startoffset", "endoffset", "includesnapshots", "splitbytes", "filterpushdown"}
)
# The session conf PySpark (4.1+) needs before it lets a reader push filters.
FILTER_PUSHDOWN_CONF: Final = "spark.sql.python.filterPushdown.enabled"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    path: str
    start_offset: int = 0
    end_offset: int | None = None  # exclusive; None: to the end of the log
    include_snapshots: bool = False
    split_bytes: int = SPLIT_BYTES_DEFAULT  # <= 0: one partition per segment
    filter_pushdown: bool = False

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
                "path, startOffset, endOffset, includeSnapshots, splitBytes, filterPushdown"
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
            split_bytes=_parse_int("splitBytes", lowered.get("splitbytes"), SPLIT_BYTES_DEFAULT),
            filter_pushdown=_parse_bool("filterPushdown", lowered.get("filterpushdown")),
        )


def _parse_offset(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer offset, got {value!r}") from None


def _parse_int(name: str, value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


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
    """One input partition: a segment (or a byte range of one) or a checkpoint, plus what
    reading it needs to know of the segments after it (for the torn-tail rule and the offset
    hand-over check)."""

    file: LogFile
    later_segments: tuple[LogFile, ...]
    start_offset: int
    end_offset: int | None
    # The batches whose frames start in [byte_start, byte_end) (None: the size at listing).
    byte_start: int = 0
    byte_end: int | None = None


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


def offset_bounds(filters: Sequence[Filter]) -> tuple[int, int | None]:
    """The half-open offset range ``[start, end)`` that ANDed ``filters`` allow (``end`` None:
    unbounded); filters on other columns, or with values that are not integers, allow all."""
    start, end = 0, None

    def below(limit: int) -> None:
        nonlocal end
        end = limit if end is None else min(end, limit)

    for f in filters:
        if getattr(f, "attribute", None) != ("offset",):
            continue
        value: Any = getattr(f, "value", None)
        if isinstance(f, In):
            values = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
            if len(values) != len(value):
                continue
            if not values:
                below(0)
                continue
            start = max(start, min(values))
            below(max(values) + 1)
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        if isinstance(f, EqualTo):
            start = max(start, value)
            below(value + 1)
        elif isinstance(f, GreaterThan):
            start = max(start, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            start = max(start, value)
        elif isinstance(f, LessThan):
            below(value)
        elif isinstance(f, LessThanOrEqual):
            below(value + 1)
    return max(start, 0), None if end is None else max(end, 0)


def plan_partitions(
    options: ReadOptions, pushed: tuple[int, int | None] | None = None
) -> list[LogFilePartition]:
    """One partition per ``splitBytes`` of each segment that may hold offsets in the range (a
    segment's ranges are about equal), then one per checkpoint. ``pushed``: the range the
    pushed-down filters allow (``offset_bounds``), narrowing the segments' range further."""
    segments, checkpoints = list_log_files(options.path)
    start, end = options.start_offset, options.end_offset
    if pushed is not None:
        start = max(start, pushed[0])
        if pushed[1] is not None:
            end = pushed[1] if end is None else min(end, pushed[1])
    partitions: list[LogFilePartition] = []
    if end is not None and end <= start:
        segments = []  # the filters allow no offset at all
    for index, segment in enumerate(segments):
        later = tuple(segments[index + 1 :])
        next_base = later[0].base_offset if later else None
        if next_base is not None and next_base <= start:
            continue  # wholly before the range
        if end is not None and segment.base_offset >= end:
            break  # this one and every later one wholly after it
        size = segment.size_bytes
        ranges = 1 if options.split_bytes <= 0 else max(1, -(-size // options.split_bytes))
        for k in range(ranges):
            low, high = size * k // ranges, None if k == ranges - 1 else size * (k + 1) // ranges
            partitions.append(LogFilePartition(segment, later, start, end, low, high))
    if options.include_snapshots:
        start, end = options.start_offset, options.end_offset  # checkpoints: the options only
        for checkpoint in checkpoints:
            if start <= checkpoint.base_offset and (end is None or checkpoint.base_offset <= end):
                partitions.append(LogFilePartition(checkpoint, (), start, end))
    return partitions


# ----- frames (the executors) ---------------------------------------------------------------


class _Frame(NamedTuple):  # a tuple: one per batch, built fast
    position: int  # in the file
    base_offset: int
    epoch: int
    record_count: int
    data: bytes | memoryview  # a view into the file's contents: no copy


def _read_range(file: LogFile, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of ``file`` (fewer if it was cut since it was listed)."""
    try:
        with open(file.path, "rb") as f:
            f.seek(start)
            return f.read(max(stop - start, 0))
    except FileNotFoundError:
        raise LogReadError(
            file.path,
            None,
            "the file was listed when the query was planned but is gone now (deleted behind a "
            "snapshot, or the log was truncated); load the log again",
        ) from None


def _read_prefix(file: LogFile) -> bytes:
    """The first ``size_bytes`` of ``file`` (fewer if it was cut since it was listed)."""
    return _read_range(file, 0, file.size_bytes)


def _index_hint(file: LogFile, position: int) -> tuple[int, int] | None:
    """(byte position, base offset) of the last batch at or before ``position`` that the
    segment's offset index names, if it has one. Only a hint: the caller checks the frame."""
    index_path = os.path.splitext(file.path)[0] + ".index"
    try:
        with open(index_path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    best = None
    usable = len(data) - len(data) % INDEX_ENTRY.size
    for offset, entry_position in INDEX_ENTRY.iter_unpack(data[:usable]):
        if entry_position > position or entry_position >= file.size_bytes:
            break  # entries are ascending
        if offset >= file.base_offset:
            best = (entry_position, offset)
    return best


class _Window:
    """The bytes of a file from ``origin`` (a frame boundary) to its size at listing, read
    up to ``stop`` first and the rest only if a frame or the tail rule needs it."""

    def __init__(self, file: LogFile, origin: int, stop: int) -> None:
        self.file = file
        self.origin = origin
        self.complete = stop >= file.size_bytes
        self.contents = _read_range(file, origin, min(stop, file.size_bytes))

    def read_rest(self) -> bool:
        """Read up to the size at listing; False if there was nothing more to read."""
        if self.complete:
            return False
        self.contents = _read_range(self.file, self.origin, self.file.size_bytes)
        self.complete = True
        return True

    def rest(self) -> bytes | None:
        """``read_rest`` as ``read_segment`` asks for it: the contents, or None."""
        return self.contents if self.read_rest() else None


def _open_window(partition: LogFilePartition, byte_end: int) -> tuple[_Window, int | None]:
    """The bytes to walk for the partition's byte range and the base offset expected at their
    start (None for a checkpoint, whose offsets are positions of its own). A range that does
    not start the file starts at the batch the offset index names at or before it, once the
    frame there proves to be that batch; else (no index, a stale one) at the file's start."""
    file = partition.file
    stop = byte_end + _WINDOW_SLACK_BYTES  # the range and the batch that starts last in it
    if file.is_checkpoint:
        return _Window(file, 0, stop), None
    hint = _index_hint(file, partition.byte_start) if partition.byte_start > 0 else None
    if hint is not None:
        position, offset = hint
        window = _Window(file, position, stop)
        header = check_frame(window.contents, 0)
        if isinstance(header, str) and window.read_rest():
            header = check_frame(window.contents, 0)
        if not isinstance(header, str) and header.base_offset == offset:
            return window, offset  # a true frame boundary: the walk from here is exact
    return _Window(file, 0, stop), file.base_offset


def _iter_frames(partition: LogFilePartition) -> Iterator[_Frame]:
    """The whole, CRC-valid frames of the partition's file that start in its byte range, in
    order, up to ``end_offset``; batches wholly before ``start_offset`` are left out.

    Stops quietly at a tail (damage no valid frame follows); raises ``LogReadError`` for
    anything else. A checkpoint is written whole and then renamed into place, so any damage in
    one is corruption. Frames between where the walk starts (``_open_window``) and the range
    are checked but not yielded, so every range of a segment agrees on where batches begin.
    """
    file = partition.file
    byte_start = partition.byte_start
    byte_end = file.size_bytes if partition.byte_end is None else partition.byte_end
    window, expected = _open_window(partition, byte_end)
    later_segments = ((Path(later.path), _read_prefix(later)) for later in partition.later_segments)
    frames = read_segment(
        Path(file.path),
        window.contents,
        later_segments,
        origin=window.origin,
        stop=byte_end,
        read_rest=window.rest,
        complete=file.is_checkpoint,
    )
    start, end = partition.start_offset, partition.end_offset
    epoch_floor = 0
    position = window.origin  # in the file: where the next frame starts
    try:
        for frame in frames:
            if isinstance(frame, Tail):
                return
            position = frame.position
            if expected is not None and frame.base_offset != expected:
                raise LogReadError(
                    file.path,
                    position,
                    f"a batch with base offset {frame.base_offset} where offset {expected} was "
                    "expected (offsets must be contiguous from the segment's name)",
                )
            if frame.epoch < epoch_floor:
                raise LogReadError(
                    file.path, position, f"epoch {frame.epoch} after epoch {epoch_floor} (corrupt)"
                )
            if end is not None and frame.base_offset >= end and not file.is_checkpoint:
                return
            after = frame.base_offset + frame.record_count
            if position >= byte_start and (file.is_checkpoint or after > start):
                yield _Frame(
                    position, frame.base_offset, frame.epoch, frame.record_count, frame.data
                )
            epoch_floor = frame.epoch
            expected = after
            position += frame.frame_bytes
    except CorruptFrameError as exc:
        raise LogReadError(exc.path, exc.byte_offset, exc.problem) from None
    cut = position < byte_end  # the file is shorter than it was at listing
    if position < file.size_bytes and not cut:
        return  # the rest of the file is the next range's
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


# ----- decoding into columns ----------------------------------------------------------------
#
# A chunk of frames becomes Arrow batches in two steps. First msgspec decodes each batch body
# straight into typed objects: one ``msgspec.Struct`` per record, chosen by its type code (a
# tagged union of array-like structs), whose ``fields`` is a tuple typed field by field from
# ``_RECORD_COLUMNS`` (ints with the record classes' ranges, 16-byte ids, strings, int arrays).
# Every type and range check of the record classes thus runs in C while decoding, and the
# record version, the batch envelope and the control flag are part of the types too. Then the
# records are grouped by type with a stable argsort of their type indexes, each group's field
# tuples are transposed with ``zip(*fields)`` (one C call for every column of the group), and
# each column becomes an Arrow array without any further Python code per value.
#
# Anything the types refuse sends the chunk to the reference decoder, which either raises its
# precise error or (should the types ever be stricter than the record classes) provides the
# records; they are then encoded again canonically and take the same typed path. The cyclic
# garbage collector is paused while a chunk is decoded: decoding allocates millions of
# containers and no cycles, and a collection pass over them costs more than the decoding.


class _NotFast(Exception):  # a control-flow signal, not an error to report
    """The typed decoding refused something; the reference decoder decides."""


_Int32Element: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
_EndpointWire: TypeAlias = tuple[str, str, int]  # BrokerEndpoint checks the values
# A VotersRecord voter: id, directory id, endpoints, kraft.version range (VoterEntry checks).
_VoterWire: TypeAlias = tuple[int, bytes, tuple[_EndpointWire, ...], int, int]


def _wire_type(spec: _Field) -> Any:
    """The msgspec type of one wire field: what the record class accepts for it (the port of
    an endpoint excepted, which ``_endpoints`` checks with ``BrokerEndpoint`` itself)."""
    kind = spec.kind
    wire: Any
    if kind in ("int", "int?"):
        wire = Annotated[int, msgspec.Meta(ge=spec.minimum, le=spec.maximum)]
    elif kind == "bool":
        wire = bool
    elif kind in ("str", "str?"):
        wire = str
    elif kind == "uuid":
        wire = Annotated[bytes, msgspec.Meta(min_length=UUID_BYTES, max_length=UUID_BYTES)]
    elif kind in ("ints", "ints?"):
        wire = tuple[_Int32Element, ...]
    elif kind == "voters":
        wire = tuple[_VoterWire, ...]
    else:
        assert kind == "eps", kind
        wire = tuple[_EndpointWire, ...]
    return Optional[wire] if kind.endswith("?") else wire  # noqa: UP045 - a runtime type


_INT64: Final = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
_INT32: Final = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]


@dataclass(frozen=True, slots=True)
class _RecordLayout:
    """What the decoder needs to know about one record type (at its one decodable version)."""

    type_name: str
    version: int
    control: bool
    fields: tuple[_Field, ...]
    column_indexes: tuple[int, ...]  # where each field goes in COLUMN_NAMES
    struct: type[msgspec.Struct]  # [type code (the tag), version, fields] -> .version, .fields


def _layout(cls: type[Record], fields: tuple[_Field, ...]) -> _RecordLayout:
    field_types: Any = tuple.__class_getitem__(tuple(_wire_type(f) for f in fields) or ((),))
    struct = msgspec.defstruct(
        cls.__name__,
        [("version", Literal.__getitem__(cls.VERSION)), ("fields", field_types)],
        array_like=True,
        tag=cls.TYPE,
        forbid_unknown_fields=True,  # an array with extra elements is refused, not cut
        gc=False,  # holds no containers that could form a cycle
    )
    return _RecordLayout(
        type_name=cls.__name__,
        version=cls.VERSION,
        control=cls.TYPE in CONTROL_RECORD_TYPES,
        fields=fields,
        column_indexes=tuple(COLUMN_NAMES.index(f.column) for f in fields),
        struct=struct,
    )


_LAYOUT_LIST: Final = tuple(_layout(cls, fields) for cls, fields in _RECORD_COLUMNS.items())
_LAYOUT_INDEX: Final[Mapping[type, int]] = {
    layout.struct: index for index, layout in enumerate(_LAYOUT_LIST)
}


def _body_decoder(control: bool) -> msgspec.msgpack.Decoder[Any]:
    """A decoder of the batch bodies ``encode_batch`` writes (``control`` or not): the map
    with exactly the keys ``BATCH_KEYS``, header ranges as ``decode_batch`` checks them, and an
    array of records of the matching kind (``_collect_fast`` refuses an empty one)."""
    structs = tuple(layout.struct for layout in _LAYOUT_LIST if layout.control == control)
    records = types.GenericAlias(list, (Union.__getitem__(structs),))
    body = msgspec.defstruct(
        "ControlBatch" if control else "Batch",
        [
            ("base_offset", _INT64),
            ("epoch", _INT32),
            ("timestamp_ms", _INT64),
            ("control", Literal.__getitem__(control)),
            ("records", records),  # and not empty (checked with the header)
        ],
        forbid_unknown_fields=True,
    )
    assert set(body.__struct_fields__) == BATCH_KEYS
    return msgspec.msgpack.Decoder(body)


_DATA_BODY: Final = _body_decoder(control=False)
_CONTROL_BODY: Final = _body_decoder(control=True)
_DECODE_ERRORS: Final = (msgspec.DecodeError, ValueError)  # ValueError: bad UTF-8
_FIELDS_OF: Final = attrgetter("fields")


class _Distinct(dict[Any, int]):
    """Distinct values of a kind of column -> their index in ``values``. Columns become
    ``values.take(indexes)``, so the per-value work is one C-level dict lookup (replica sets
    repeat a lot). The values were checked by the typed decoding. Kept across chunks and
    bounded (cleared when full, docs/conventions.md#limits). If ``nullable``, ``None`` maps to
    -1, a null.
    """

    def __init__(self, arrow_type: str, *, nullable: bool) -> None:
        super().__init__()
        self._arrow_type = arrow_type
        self._nullable = nullable
        self._values: list[Any] = []
        self._array: pa.Array | None = None
        self._reset()

    def _reset(self) -> None:
        self.clear()
        if self._nullable:
            self[None] = -1
        self._values = []
        self._array = None

    def __missing__(self, key: Any) -> int:
        index = self[key] = len(self._values)
        self._values.append(key)
        self._array = None
        return index

    def take(self, column: Sequence[Any]) -> pa.Array:
        """``column`` as an Arrow array (nulls for ``None``)."""
        import numpy as np  # noqa: PLC0415
        import pyarrow as pa  # noqa: PLC0415

        if len(self._values) >= _DISTINCT_VALUES_MAX:
            self._reset()
        indexes = np.fromiter(map(self.__getitem__, column), np.int32, len(column))
        if self._array is None:
            self._array = pa.array(self._values, _arrow_type(self._arrow_type))
        nulls = indexes < 0
        if self._nullable and nulls.any():
            return self._array.take(pa.array(indexes, mask=nulls))
        return self._array.take(pa.array(indexes))


# Replica/ISR/voter arrays: elements are broker ids in [0, INT32_MAX] in every record type.
_INT_ARRAYS: Final = {
    nullable: _Distinct("ARRAY<INT>", nullable=nullable) for nullable in (False, True)
}


def _uuid_texts(column: Sequence[bytes]) -> pa.Array:
    """16-byte ids -> Kafka's base64 text, all at once: each id padded to 18 bytes encodes to
    24 characters whose first 22 are its text (no per-id Python code, no cache to miss)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    count = len(column)
    padded = np.zeros((count, UUID_BYTES + 2), dtype=np.uint8)
    padded[:, :UUID_BYTES] = np.frombuffer(b"".join(column), dtype=np.uint8).reshape(count, -1)
    encoded = np.frombuffer(base64.urlsafe_b64encode(padded.tobytes()), dtype=np.uint8)
    texts = np.ascontiguousarray(encoded.reshape(count, 24)[:, :UUID_BASE64_CHARS])
    offsets = np.arange(0, (count + 1) * UUID_BASE64_CHARS, UUID_BASE64_CHARS, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(texts))


def _endpoints(value: Sequence[tuple[str, str, int]]) -> list[dict[str, object]]:
    result = []
    for name, host, port in value:
        try:
            checked = BrokerEndpoint(name, host, port)
        except InvalidRecordError:
            raise _NotFast("endpoint") from None
        result.append({"name": checked.name, "host": checked.host, "port": checked.port})
    return result


def _convert(column: Sequence[Any], spec: _Field, sql: str) -> pa.Array:
    """One column of checked wire values -> one Arrow array."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    kind = spec.kind
    if kind == "int":
        dtype = np.int64 if sql == "BIGINT" else np.int32
        return pa.array(np.fromiter(column, dtype, len(column)))
    if kind == "int?":
        return pa.array(column, pa.int64() if sql == "BIGINT" else pa.int32())
    if kind == "bool":
        return pa.array(column, pa.bool_())
    if kind in ("str", "str?"):
        return pa.array(column, pa.string())
    if kind == "uuid":
        return _uuid_texts(column)
    if kind in ("ints", "ints?"):
        return _INT_ARRAYS[kind == "ints?"].take(column)
    if kind == "voters":
        return pa.array([_voter_set_json(value) for value in column], pa.string())
    assert kind == "eps", kind
    return pa.array([_endpoints(value) for value in column], _arrow_type(sql))


def _voter_set_json(value: Sequence[Any]) -> str:
    """A VotersRecord's voters as the ``voter_set`` column's JSON text (ids in order)."""
    voters = []
    for wire in value:
        try:
            voter = VoterEntry(
                wire[0],
                Uuid.from_bytes(wire[1]),
                tuple(BrokerEndpoint(*e) for e in wire[2]),
                wire[3],
                wire[4],
            )
        except (InvalidRecordError, ValueError, TypeError):
            raise _NotFast("voter") from None
        voters.append(voter)
    return voter_set_json(voters)


def voter_set_json(voters: Sequence[VoterEntry]) -> str:
    """``[{"id": 1, "directoryId": "...", "endpoints": ["CONTROLLER://h:p"]}, ...]`` by id: the
    ``voter_set`` column (``directoryId`` left out when the voter has none)."""
    entries = []
    for voter in sorted(voters, key=lambda v: v.voter_id):
        entry: dict[str, object] = {"id": voter.voter_id}
        if voter.directory_id != ZERO_UUID:
            entry["directoryId"] = str(voter.directory_id)
        entry["endpoints"] = [f"{e.name}://{e.host}:{e.port}" for e in voter.endpoints]
        entries.append(entry)
    return json.dumps(entries, separators=(",", ":"))


_null_arrays: dict[str, pa.Array] = {}


def _nulls(sql: str, count: int) -> pa.Array:
    """``count`` nulls of the column type ``sql`` (a slice of a cached array)."""
    import pyarrow as pa  # noqa: PLC0415

    cached = _null_arrays.get(sql)
    if cached is None or len(cached) < count:
        cached = _null_arrays[sql] = pa.nulls(max(count, CHUNK_RECORDS_TARGET), _arrow_type(sql))
    return cached.slice(0, count)


@dataclass(slots=True)
class _Chunk:
    """Typed records gathered from consecutive batches, with per-batch header values."""

    records: list[msgspec.Struct] = dataclasses.field(default_factory=list)
    first_offsets: list[int] = dataclasses.field(default_factory=list)
    counts: list[int] = dataclasses.field(default_factory=list)
    epochs: list[int] = dataclasses.field(default_factory=list)
    timestamps_ms: list[int] = dataclasses.field(default_factory=list)

    def add(
        self, records: Sequence[msgspec.Struct], first_offset: int, epoch: int, timestamp_ms: int
    ) -> None:
        self.records.extend(records)
        self.first_offsets.append(first_offset)
        self.counts.append(len(records))
        self.epochs.append(epoch)
        self.timestamps_ms.append(timestamp_ms)


def _decode_body(data: bytes | memoryview) -> Any:
    """The typed body of a batch, or ``_NotFast``."""
    try:
        return _DATA_BODY.decode(data)
    except _DECODE_ERRORS:
        pass
    try:
        return _CONTROL_BODY.decode(data)
    except _DECODE_ERRORS as exc:
        raise _NotFast(str(exc)) from None


def _collect_fast(chunk: _Chunk, frame: _Frame, start: int, end: int | None, *, path: str) -> None:
    """Decode a batch body with the typed decoders and gather its records in the range."""
    del path  # errors are for the reference decoder to report
    body = _decode_body(frame.data)
    records = body.records
    base_offset = body.base_offset
    header = (frame.base_offset, frame.epoch, frame.record_count)
    if not records or (base_offset, body.epoch, len(records)) != header:
        raise _NotFast("batch header")
    if start > base_offset or (end is not None and end < base_offset + len(records)):
        low = max(start - base_offset, 0)
        high = len(records) if end is None else min(end - base_offset, len(records))
        if low >= high:
            return
        records = records[low:high]
        base_offset += low
    chunk.add(records, base_offset, body.epoch, body.timestamp_ms)


def _collect_reference(
    chunk: _Chunk, frame: _Frame, start: int, end: int | None, *, path: str
) -> None:
    """Decode a batch with the reference decoder (exact errors); then gather its records,
    encoded again canonically, through the typed path."""
    batch = LogBatch(frame.base_offset, frame.epoch, frame.record_count, bytes(frame.data))
    try:
        decoded = decode_log_batch(batch)
    except RecordDecodeError as exc:
        raise LogReadError(
            path,
            frame.position,
            f"cannot decode the batch at base offset {frame.base_offset}: {exc}",
        ) from exc
    canonical = encode_batch(
        base_offset=decoded.base_offset,
        epoch=decoded.epoch,
        timestamp_ms=decoded.timestamp_ms,
        records=decoded.records,
        control=decoded.control,
    )
    again = frame._replace(data=canonical.data)
    try:
        _collect_fast(chunk, again, start, end, path=path)
    except _NotFast as exc:
        raise AssertionError(
            f"{path}: the typed decoding refused records that decode_log_batch accepts "
            f"({exc}); this is a bug in quorum.analytics.source"
        ) from exc


_kind_tables: list[pa.Array] = []


def _by_kind() -> tuple[pa.Array, pa.Array, pa.Array]:
    """control, record_type and version per layout index (taken by the kinds of a chunk)."""
    if not _kind_tables:
        import pyarrow as pa  # noqa: PLC0415

        _kind_tables.extend(
            [
                pa.array([layout.control for layout in _LAYOUT_LIST], pa.bool_()),
                pa.array([layout.type_name for layout in _LAYOUT_LIST], pa.string()),
                pa.array([layout.version for layout in _LAYOUT_LIST], pa.int32()),
            ]
        )
    control, type_name, version = _kind_tables
    return control, type_name, version


def _chunk_to_batches(chunk: _Chunk, snapshot_end_offset: int | None) -> list[pa.RecordBatch]:
    """The chunk as one Arrow batch (none if it is empty), its rows grouped by record type.

    One batch per chunk rather than one per record type: the JVM pays per batch and per
    column, and a batch of 16 Ki rows costs it about a fifth less per row than the same rows
    in one batch per type (measured with a source that only replays cached batches)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    records = chunk.records
    count = len(records)
    if not count:
        return []
    kinds = np.fromiter(map(_LAYOUT_INDEX.__getitem__, map(type, records)), np.int8, count)
    counts = np.array(chunk.counts, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    offsets = np.arange(count, dtype=np.int64) + np.repeat(
        np.array(chunk.first_offsets, dtype=np.int64) - starts, counts
    )
    epochs = np.repeat(np.array(chunk.epochs, dtype=np.int32), counts)
    timestamps_ms = np.repeat(np.array(chunk.timestamps_ms, dtype=np.int64), counts)
    order = None
    bounds = [0, count]
    if not (kinds == kinds[0]).all():
        order = np.argsort(kinds, kind="stable")
        kinds, offsets, epochs, timestamps_ms = (
            kinds[order],
            offsets[order],
            epochs[order],
            timestamps_ms[order],
        )
        bounds = [0, *(np.flatnonzero(kinds[1:] != kinds[:-1]) + 1).tolist(), count]
    # Each column's pieces, (first row, array), from the groups that have the column.
    pieces: list[list[tuple[int, pa.Array]]] = [[] for _ in COLUMNS]
    for low, high in pairwise(bounds):
        layout = _LAYOUT_LIST[kinds[low]]
        if not layout.fields:
            continue
        if order is None:
            group: Sequence[msgspec.Struct] = records
        elif high - low == 1:
            group = [records[order[low]]]
        else:
            group = itemgetter(*order[low:high].tolist())(records)
        columns = zip(*map(_FIELDS_OF, group), strict=True)  # the group's columns, transposed
        for spec, index, column in zip(layout.fields, layout.column_indexes, columns, strict=True):
            pieces[index].append((low, _convert(column, spec, COLUMNS[index][1])))
    control, type_name, version = _by_kind()
    kind_indexes = pa.array(kinds)
    arrays = [
        pa.array(offsets),  # numpy arrays of the columns' types: no conversion
        pa.array(epochs),
        pa.array(timestamps_ms),
        control.take(kind_indexes),
        type_name.take(kind_indexes),
        version.take(kind_indexes),
        _nulls("BIGINT", count)
        if snapshot_end_offset is None
        else pa.repeat(pa.scalar(snapshot_end_offset, pa.int64()), count),
    ]
    for index in range(_HEADER_COLUMNS, len(COLUMNS)):
        arrays.append(_assemble(pieces[index], COLUMNS[index][1], count))
    return [pa.RecordBatch.from_arrays(arrays, schema=arrow_schema())]


def _assemble(pieces: list[tuple[int, pa.Array]], sql: str, count: int) -> pa.Array:
    """One column of ``count`` rows from its pieces, nulls in between."""
    import pyarrow as pa  # noqa: PLC0415

    if len(pieces) == 1 and len(pieces[0][1]) == count:
        return pieces[0][1]
    parts = []
    position = 0
    for low, array in pieces:
        if low > position:
            parts.append(_nulls(sql, low - position))
        parts.append(array)
        position = low + len(array)
    if position < count:
        parts.append(_nulls(sql, count - position))
    return pa.concat_arrays(parts)


def _decode_chunk(frames: Sequence[_Frame], partition: LogFilePartition) -> list[pa.RecordBatch]:
    """The records of ``frames`` in the partition's offset range, as (at most) one Arrow
    batch."""
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
            return _chunk_to_batches(chunk, snapshot_end)
        except _NotFast:
            pass
        # Something the types refuse: the reference decoder names the problem exactly.
        chunk = _Chunk()
        for frame in frames:
            _collect_reference(chunk, frame, start, end, path=file.path)
        try:
            return _chunk_to_batches(chunk, snapshot_end)
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
        options = ReadOptions.parse(self.options)
        if options.filter_pushdown:
            return MetaquorumPushdownReader(options)
        return MetaquorumReader(options)


class MetaquorumReader(DataSourceReader):
    """Plans one partition per segment on the driver; reads them on the executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed: tuple[int, int | None] | None = None

    def partitions(self) -> list[LogFilePartition]:
        return plan_partitions(self.options, self.pushed)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Everything read() needs is imported by this module, which executors import by name
        # (the classes pickle by reference); pyarrow is imported inside the decoding functions.
        return read_partition(partition)


class MetaquorumPushdownReader(MetaquorumReader):
    """The reader with filter pushdown (option ``filterPushdown``): a separate class because
    PySpark refuses any reader that overrides ``pushFilters`` in a session where
    ``spark.sql.python.filterPushdown.enabled`` is off."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Narrow the segments read to the offsets the filters allow; hand every filter back,
        so Spark still evaluates each on the rows (the same objects, as PySpark requires)."""
        self.pushed = offset_bounds(filters)
        return filters


def load(spark: SparkSession, path: str | Path, **options: object) -> DataFrame:
    """Register the source (idempotent) and load ``path`` with ``options`` (e.g.
    ``endOffset=500``, ``includeSnapshots=True``). ``filterPushdown=True`` also turns on the
    session's ``spark.sql.python.filterPushdown.enabled`` (see the module docstring for when
    to use it)."""
    spark.dataSource.register(MetaquorumDataSource)
    if str(options.get("filterPushdown", "")).lower() == "true":
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    reader = spark.read.format(FORMAT_NAME)
    for key, value in options.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        reader = reader.option(key, text)
    return reader.load(str(path))
