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

Schema. One row per record. The core columns come first: the batch header, then the topic id
that several families share::

    offset BIGINT, epoch INT, batch_timestamp_ms BIGINT, control BOOLEAN,
    record_type STRING, version INT, snapshot_end_offset BIGINT, topic_id STRING

then one nullable STRUCT column per record family, set on the rows of that family's record
types and NULL on every other row (design choice: a record's fields are real typed columns,
queryable as ``partition.leader`` and prunable in Parquet, with no JSON to parse; a field that
a record type does not have is NULL inside its struct; the same meaning gets the same field
whatever the record). ``topic_id`` (Kafka's base64 text) is filled by TopicRecord,
PartitionRecord, PartitionChangeRecord, RemoveTopicRecord and, in snapshots,
TopicIdentityRecord and DeletedTopicRecord. The families:

==============================  ===============================================================
column and its fields           filled by (record field when the names differ)
==============================  ===============================================================
topic STRUCT<name STRING,       TopicRecord (name, internal); snapshots: TopicIdentityRecord
internal BOOLEAN,               (creation_offset), DeletedTopicRecord (name, creation_offset,
creation_offset BIGINT,         deletion_offset)
deletion_offset BIGINT>
partition STRUCT<id INT,        PartitionRecord, PartitionChangeRecord (id: the partition
replicas ARRAY<INT>,            field). In a PartitionChangeRecord NULL means unchanged; leader
isr ARRAY<INT>, leader INT,     -1 means no leader
leader_epoch INT,
partition_epoch INT>
broker STRUCT<id INT,           Register/Unregister/Fence/UnfenceBrokerRecord (broker_id,
epoch BIGINT,                   broker_epoch); incarnation_id, rack, fenced and endpoints
incarnation_id STRING,          (ARRAY<STRUCT<name STRING, host STRING, port INT>>) from
rack STRING, fenced BOOLEAN,    RegisterBrokerRecord only; ProducerIdsRecord (broker_id,
endpoints ARRAY<...>,           broker_epoch, both -1 in snapshots, and next_producer_id)
next_producer_id BIGINT>
config STRUCT<resource_type     ConfigRecord (resource_type: 2 topic, 4 broker; value NULL: the
INT, resource_name STRING,      config was deleted)
name STRING, value STRING>
leader_change STRUCT<leader_id  LeaderChangeMessage (the quorum leader, its epoch, the voters)
INT, epoch INT, voters
ARRAY<INT>>
snapshot STRUCT<version INT,    SnapshotHeader (both), SnapshotFooter (version)
last_contained_log_timestamp_
ms BIGINT>
acl STRUCT<id STRING,           AccessControlEntryRecord (all, Kafka's enum codes),
resource_type INT,              RemoveAccessControlEntryRecord (id)
resource_name STRING,
pattern_type INT, principal
STRING, host STRING,
operation INT,
permission_type INT>
voters STRUCT<version INT,      KRaftVersionRecord (version, kraft_version), VotersRecord
kraft_version INT,              (version; voter_set: its voters as JSON, [{"id",
voter_set STRING>               "directoryId", "endpoints": ["NAME://host:port"]}], directoryId
                                omitted for none) (KIP-853 control records)
client_quota STRUCT<entity      ClientQuotaRecord (entity: JSON, [{"entityType": "user",
STRING, key STRING, value       "entityName": "alice"}], a null name the type's default;
DOUBLE, remove BOOLEAN>         remove true: the key was deleted)
==============================  ===============================================================

``NoOpRecord`` fills only the header columns, ``RemoveTopicRecord`` only those and
``topic_id``. ``CORE_COLUMNS`` and ``FAMILIES`` define the schema and ``RECORD_COLUMNS`` is
the one table of which field goes where (``quorum.analytics.schema``).

Where the parts are: this module holds the options, the planning of input partitions (the
driver) and the Spark data source classes; ``quorum.analytics.schema`` the schema and the
field-to-column table; ``quorum.analytics.log_files`` the listing of segments and checkpoints
and the frame walk of one partition (how byte ranges, torn tails and corruption are handled);
``quorum.analytics.wire_columns`` the fields of the common record types read straight from
the batch bodies' msgpack bytes, ``quorum.analytics.typed_decode`` the typed decoding of batch
bodies that decides whatever the first refuses; ``quorum.analytics.arrow_batches`` the Arrow
batches ``read()`` yields (``read_partition``);
``quorum.analytics.stream`` the streaming reader (``streamReader``: ``readStream``).

Where the time goes (docs/benchmarks.md has the figures and how they were taken): per record,
the JVM spends the most (rows from the Arrow batches: every column of every row, a NULL one
included) and the Python workers a little less (since the fields are read from the bytes by
``wire_columns``: the frame walk and msgspec's pass over each batch body, the columns, the Arrow
IPC stream to the JVM). Two tasks therefore keep both cores busy, and the CPU per record, not
the number of tasks, bounds the rate. Each input partition (Spark task) also costs the JVM a
Python runner's start, and cost the worker more before it froze its long-lived objects
(``_freeze_long_lived_objects``): that is why ``splitBytes`` defaults to 32 MiB (11 tasks for
6 segments of 64 MiB) rather than to smaller splits.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from quorum.analytics.arrow_batches import read_partition
from quorum.analytics.log_files import (
    METADATA_PARTITION_DIR,
    LogFile,
    LogFilePartition,
    LogReadError,
    list_log_files,
)
from quorum.analytics.schema import (
    COLUMN_NAMES,
    SCHEMA_DDL,
    arrow_schema,
    spark_schema,
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
# Segments are read as byte ranges of about this size, each an input partition (splitBytes).
SPLIT_BYTES_DEFAULT: Final = 32 * 1024 * 1024


# ----- options ------------------------------------------------------------------------------


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

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("metaquorum")``: the log followed as it grows
        (``quorum.analytics.stream``, whose docstring has the options and offsets)."""
        from quorum.analytics.stream import (  # noqa: PLC0415
            MetaquorumStreamReader,
            RefusedStreamReader,
            StreamOptions,
        )

        # Refused by the reader's first call, not here: PySpark 4.3.0's streaming runner
        # hides an exception raised by streamReader() behind an UnboundLocalError of its own.
        if schema != spark_schema():
            return RefusedStreamReader(
                f"readStream.format({FORMAT_NAME!r}) has a fixed schema; do not pass "
                f".schema(...) (expected {SCHEMA_DDL})"
            )
        try:
            return MetaquorumStreamReader(StreamOptions.parse(self.options))
        except ValueError as exc:
            return RefusedStreamReader(str(exc))


_frozen: list[bool] = []  # set once this process has frozen its long-lived objects


def _freeze_long_lived_objects() -> None:
    """Once per Python worker: move every object it holds so far (the modules of PySpark,
    pyarrow, pandas, numpy and this one) out of the cyclic garbage collector's reach, the
    fork-server idiom (``gc.freeze``). PySpark's reused worker runs a full collection after
    every task (``pyspark/daemon.py``), which walks all of them each time; frozen, they are
    skipped. Reference counting still frees them. Measured with 10 M records on ``local[2]``:
    the workers' CPU per record 0.99-1.09 -> 0.88-0.90 us (32 MiB splits), 1.13 -> 0.87 us
    (8 MiB splits, 44 tasks)."""
    if not _frozen:
        _frozen.append(True)
        gc.freeze()


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
        _freeze_long_lived_objects()
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
