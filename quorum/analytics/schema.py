"""The schema of the ``metaquorum`` table (``quorum.analytics.source``): its columns, one
struct per record family, and the one table of which record field fills which column.

``CORE_COLUMNS`` and ``FAMILIES`` define the schema (the columns and their meaning are
documented in ``quorum.analytics.source``) and ``RECORD_COLUMNS`` is the one table of which
field goes where; an import-time check ties it to the record classes, so a new record type or
version fails here until it is given columns, instead of being dropped. The typed decoding
(``quorum.analytics.typed_decode``) and the Arrow conversion (``quorum.analytics.arrow_batches``)
are built from these tables.

Why structs and not one flat column per field (the layout before): Spark turns every Arrow
batch a Python source yields into rows, touching every column of every row, so a NULL costs
about as much as a value. With one flat column per field (41 columns) each row carried some 30
NULLs of other families; with a struct per family it carries six NULL structs, and the JVM's
CPU per row falls by about a third (measured with a source that replays cached batches;
docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from quorum.metadata.records import (
    INT8_MAX,
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    NO_LEADER,
    RECORD_CLASSES,
    SNAPSHOT_RECORD_CLASSES,
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DeletedTopicRecord,
    FenceBrokerRecord,
    KRaftVersionRecord,
    LeaderChangeMessage,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    SnapshotFooter,
    SnapshotHeader,
    TopicIdentityRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    VotersRecord,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "CORE_COLUMNS",
    "FAMILIES",
    "FAMILY_NAMES",
    "RECORD_COLUMNS",
    "SCHEMA_DDL",
    "SLOTS",
    "SLOT_NAMES",
    "Field",
    "arrow_schema",
    "arrow_type",
    "family_of",
    "spark_schema",
    "struct_sql",
]

# ----- schema -------------------------------------------------------------------------------

_ENDPOINT_STRUCT: Final = "STRUCT<name STRING, host STRING, port INT>"
_ENDPOINTS: Final = f"ARRAY<{_ENDPOINT_STRUCT}>"

# (name, SQL type): the columns every row has, the batch header first. ``topic_id`` is here
# because three families carry it (topics, partitions, and RemoveTopicRecord, which has no
# family struct of its own).
CORE_COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("offset", "BIGINT"),
    ("epoch", "INT"),
    ("batch_timestamp_ms", "BIGINT"),
    ("control", "BOOLEAN"),
    ("record_type", "STRING"),
    ("version", "INT"),
    ("snapshot_end_offset", "BIGINT"),
    ("topic_id", "STRING"),
)
_HEADER_COLUMNS: Final = 7  # the core columns every row fills from the batch and the type

# (family, ((field, SQL type), ...)): one STRUCT column per record family, set on the rows of
# that family's record types and NULL on every other row. Field names follow Kafka's record
# schemas (PartitionRecord.PartitionId -> partition.id, RegisterBrokerRecord.BrokerEpoch ->
# broker.epoch, ...).
FAMILIES: Final[tuple[tuple[str, tuple[tuple[str, str], ...]], ...]] = (
    (
        "topic",  # TopicRecord; snapshots: TopicIdentityRecord, DeletedTopicRecord
        (
            ("name", "STRING"),
            ("internal", "BOOLEAN"),
            ("creation_offset", "BIGINT"),
            ("deletion_offset", "BIGINT"),
        ),
    ),
    (
        "partition",  # PartitionRecord, PartitionChangeRecord
        (
            ("id", "INT"),
            ("replicas", "ARRAY<INT>"),
            ("isr", "ARRAY<INT>"),
            ("leader", "INT"),
            ("leader_epoch", "INT"),
            ("partition_epoch", "INT"),
        ),
    ),
    (
        "broker",  # Register/Unregister/Fence/UnfenceBrokerRecord, ProducerIdsRecord
        (
            ("id", "INT"),
            ("epoch", "BIGINT"),
            ("incarnation_id", "STRING"),
            ("rack", "STRING"),
            ("fenced", "BOOLEAN"),
            ("endpoints", _ENDPOINTS),
            ("next_producer_id", "BIGINT"),
        ),
    ),
    (
        "config",  # ConfigRecord
        (
            ("resource_type", "INT"),
            ("resource_name", "STRING"),
            ("name", "STRING"),
            ("value", "STRING"),
        ),
    ),
    (
        "leader_change",  # LeaderChangeMessage (control)
        (("leader_id", "INT"), ("epoch", "INT"), ("voters", "ARRAY<INT>")),
    ),
    (
        "snapshot",  # SnapshotHeader, SnapshotFooter (control)
        (("version", "INT"), ("last_contained_log_timestamp_ms", "BIGINT")),
    ),
    (
        "voters",  # KRaftVersionRecord, VotersRecord (control, KIP-853)
        (("version", "INT"), ("kraft_version", "INT"), ("voter_set", "STRING")),
    ),
    (
        "acl",  # AccessControlEntryRecord, RemoveAccessControlEntryRecord
        (
            ("id", "STRING"),
            ("resource_type", "INT"),
            ("resource_name", "STRING"),
            ("pattern_type", "INT"),
            ("principal", "STRING"),
            ("host", "STRING"),
            ("operation", "INT"),
            ("permission_type", "INT"),
        ),
    ),
    (
        "client_quota",  # ClientQuotaRecord
        (("entity", "STRING"), ("key", "STRING"), ("value", "DOUBLE"), ("remove", "BOOLEAN")),
    ),
)
FAMILY_NAMES: Final = tuple(family for family, _ in FAMILIES)


def struct_sql(fields: Sequence[tuple[str, str]]) -> str:
    return "STRUCT<" + ", ".join(f"{name} {sql}" for name, sql in fields) + ">"


# (name, SQL type). The order is the column order of the table.
COLUMNS: Final[tuple[tuple[str, str], ...]] = CORE_COLUMNS + tuple(
    (family, struct_sql(fields)) for family, fields in FAMILIES
)
COLUMN_NAMES: Final = tuple(name for name, _ in COLUMNS)
SCHEMA_DDL: Final = ", ".join(f"{name} {sql}" for name, sql in COLUMNS)
# Where record fields can go: "topic_id" or "<family>.<field>", with their SQL types.
SLOTS: Final[tuple[tuple[str, str], ...]] = (
    ("topic_id", "STRING"),
    *((f"{family}.{name}", sql) for family, fields in FAMILIES for name, sql in fields),
)
SLOT_NAMES: Final = tuple(name for name, _ in SLOTS)
SLOT_TYPES: Final = dict(SLOTS)


def _spark_type(sql: str) -> DataType:
    simple: dict[str, DataType] = {
        "BIGINT": LongType(),
        "INT": IntegerType(),
        "BOOLEAN": BooleanType(),
        "STRING": StringType(),
        "DOUBLE": DoubleType(),
    }
    if sql in simple:
        return simple[sql]
    if sql == "ARRAY<INT>":
        return ArrayType(IntegerType())
    if sql == _ENDPOINTS:
        return ArrayType(_spark_type(_ENDPOINT_STRUCT))
    for _, fields in FAMILIES:
        if sql == struct_sql(fields):
            return StructType([StructField(name, _spark_type(t)) for name, t in fields])
    assert sql == _ENDPOINT_STRUCT, sql
    return StructType(
        [
            StructField("name", StringType()),
            StructField("host", StringType()),
            StructField("port", IntegerType()),
        ]
    )


def spark_schema() -> StructType:
    """The schema of the table (every column and field nullable), built without a JVM."""
    return StructType([StructField(name, _spark_type(sql)) for name, sql in COLUMNS])


def arrow_type(sql: str) -> pa.DataType:
    import pyarrow as pa  # noqa: PLC0415 - executors import pyarrow only when they read

    simple = {
        "BIGINT": pa.int64(),
        "INT": pa.int32(),
        "BOOLEAN": pa.bool_(),
        "STRING": pa.string(),
        "DOUBLE": pa.float64(),
    }
    if sql in simple:
        return simple[sql]
    if sql == "ARRAY<INT>":
        return pa.list_(pa.field("element", pa.int32()))
    if sql == _ENDPOINTS:
        return pa.list_(pa.field("element", arrow_type(_ENDPOINT_STRUCT)))
    for _, fields in FAMILIES:
        if sql == struct_sql(fields):
            return pa.struct([pa.field(name, arrow_type(t)) for name, t in fields])
    assert sql == _ENDPOINT_STRUCT, sql
    return pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32())])


_arrow_schema_cache: list[pa.Schema] = []


def arrow_schema() -> pa.Schema:
    """The Arrow schema of the batches ``read()`` yields (Spark expects it of
    ``spark_schema()``)."""
    if not _arrow_schema_cache:
        import pyarrow as pa  # noqa: PLC0415

        _arrow_schema_cache.append(
            pa.schema([pa.field(name, arrow_type(sql)) for name, sql in COLUMNS])
        )
    return _arrow_schema_cache[0]


# ----- record fields -> columns -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """Where one wire field of a record goes, and what the record class accepts for it."""

    field: str  # the record class's field name (checked below)
    column: str
    kind: str  # one of _KINDS
    minimum: int = 0
    maximum: int = INT32_MAX


_KINDS: Final = frozenset(
    {
        "int",
        "int?",
        "bool",
        "str",
        "str?",
        "uuid",
        "ints",
        "ints?",
        "eps",
        "voters",
        "float",
        "entity",
    }
)
_TOPIC_ID: Final = Field("topic_id", "topic_id", "uuid")
_PARTITION: Final = Field("partition", "partition.id", "int")
_BROKER_ID: Final = Field("broker_id", "broker.id", "int")
_BROKER_EPOCH: Final = Field("broker_epoch", "broker.epoch", "int", 0, INT64_MAX)
_CREATION_OFFSET: Final = Field("creation_offset", "topic.creation_offset", "int", 0, INT64_MAX)
_ACL_ID: Final = Field("id", "acl.id", "uuid")
_SNAPSHOT_VERSION: Final = Field("version", "snapshot.version", "int", 0, INT16_MAX)

# The one table of which record field fills which column (see the module docstring): the core
# column topic_id or a field of the record's family struct. Ranges repeat the record classes'
# __post_init__ checks; tests/spark/test_analytics_source.py proves, value by value, that these
# checks accept exactly what the record classes accept.
RECORD_COLUMNS: Final[Mapping[type[Record], tuple[Field, ...]]] = {
    RegisterBrokerRecord: (
        _BROKER_ID,
        Field("incarnation_id", "broker.incarnation_id", "uuid"),
        _BROKER_EPOCH,
        Field("endpoints", "broker.endpoints", "eps"),
        Field("rack", "broker.rack", "str?"),
        Field("fenced", "broker.fenced", "bool"),
    ),
    UnregisterBrokerRecord: (_BROKER_ID, _BROKER_EPOCH),
    TopicRecord: (
        Field("name", "topic.name", "str"),
        _TOPIC_ID,
        Field("internal", "topic.internal", "bool"),
    ),
    PartitionRecord: (
        _TOPIC_ID,
        _PARTITION,
        Field("replicas", "partition.replicas", "ints"),
        Field("isr", "partition.isr", "ints"),
        Field("leader", "partition.leader", "int", NO_LEADER),
        Field("leader_epoch", "partition.leader_epoch", "int"),
        Field("partition_epoch", "partition.partition_epoch", "int"),
    ),
    ConfigRecord: (
        Field("resource_type", "config.resource_type", "int", 0, INT8_MAX),
        Field("resource_name", "config.resource_name", "str"),
        Field("name", "config.name", "str"),
        Field("value", "config.value", "str?"),
    ),
    PartitionChangeRecord: (
        _TOPIC_ID,
        _PARTITION,
        Field("isr", "partition.isr", "ints?"),
        Field("leader", "partition.leader", "int?", NO_LEADER),
        Field("replicas", "partition.replicas", "ints?"),
        Field("leader_epoch", "partition.leader_epoch", "int?"),
        Field("partition_epoch", "partition.partition_epoch", "int?"),
    ),
    FenceBrokerRecord: (_BROKER_ID, _BROKER_EPOCH),
    # Snapshots write it with broker id and epoch -1 (only the next block start is state).
    ProducerIdsRecord: (
        Field("broker_id", "broker.id", "int", -1),
        Field("broker_epoch", "broker.epoch", "int", -1, INT64_MAX),
        Field("next_producer_id", "broker.next_producer_id", "int", 0, INT64_MAX),
    ),
    UnfenceBrokerRecord: (_BROKER_ID, _BROKER_EPOCH),
    RemoveTopicRecord: (_TOPIC_ID,),
    NoOpRecord: (),
    AccessControlEntryRecord: (
        _ACL_ID,
        Field("resource_type", "acl.resource_type", "int", 0, INT8_MAX),
        Field("resource_name", "acl.resource_name", "str"),
        Field("pattern_type", "acl.pattern_type", "int", 0, INT8_MAX),
        Field("principal", "acl.principal", "str"),
        Field("host", "acl.host", "str"),
        Field("operation", "acl.operation", "int", 0, INT8_MAX),
        Field("permission_type", "acl.permission_type", "int", 0, INT8_MAX),
    ),
    RemoveAccessControlEntryRecord: (_ACL_ID,),
    LeaderChangeMessage: (
        Field("leader_id", "leader_change.leader_id", "int"),
        Field("epoch", "leader_change.epoch", "int"),
        Field("voters", "leader_change.voters", "ints"),
    ),
    SnapshotHeader: (
        _SNAPSHOT_VERSION,
        Field(
            "last_contained_log_timestamp_ms",
            "snapshot.last_contained_log_timestamp_ms",
            "int",
            0,
            INT64_MAX,
        ),
    ),
    SnapshotFooter: (_SNAPSHOT_VERSION,),
    KRaftVersionRecord: (
        Field("version", "voters.version", "int", 0, INT16_MAX),
        Field("kraft_version", "voters.kraft_version", "int", 0, INT16_MAX),
    ),
    VotersRecord: (
        Field("version", "voters.version", "int", 0, INT16_MAX),
        Field("voters", "voters.voter_set", "voters"),
    ),
    ClientQuotaRecord: (
        Field("entity", "client_quota.entity", "entity"),
        Field("key", "client_quota.key", "str"),
        Field("value", "client_quota.value", "float"),
        Field("remove", "client_quota.remove", "bool"),
    ),
    TopicIdentityRecord: (_TOPIC_ID, _CREATION_OFFSET),
    DeletedTopicRecord: (
        Field("name", "topic.name", "str"),
        _TOPIC_ID,
        _CREATION_OFFSET,
        Field("deletion_offset", "topic.deletion_offset", "int", 0, INT64_MAX),
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
    "eps": (_ENDPOINTS,),
    "voters": ("STRING",),
    "float": ("DOUBLE",),
    "entity": ("STRING",),
}


def family_of(fields: Sequence[Field]) -> str | None:
    """The family whose struct the fields fill (None: only core columns, or none at all)."""
    families = {f.column.split(".")[0] for f in fields if "." in f.column}
    assert len(families) <= 1, families  # a record type belongs to one family at most
    return families.pop() if families else None


def _check_record_columns() -> None:
    """The table above covers every record class, field by field, in wire order; every family
    field is filled by some record type."""
    every_class = set(RECORD_CLASSES.values()) | set(SNAPSHOT_RECORD_CLASSES.values())
    assert set(RECORD_COLUMNS) == every_class, "a record type has no columns"
    filled = set()
    for cls, fields in RECORD_COLUMNS.items():
        names = tuple(f.name for f in dataclasses.fields(cls))
        assert names == tuple(f.field for f in fields), (cls.__name__, names)
        assert len({f.column for f in fields}) == len(fields), cls.__name__
        family_of(fields)
        for f in fields:
            assert f.kind in _KINDS, f
            assert f.column in SLOT_TYPES, f
            assert SLOT_TYPES[f.column] in _KIND_SQL_TYPES[f.kind], f
            if SLOT_TYPES[f.column] == "INT":
                assert f.maximum <= INT32_MAX, f
            if f.kind.startswith("ints"):  # one shared cache of distinct int arrays
                assert (f.minimum, f.maximum) == (0, INT32_MAX), f
            filled.add(f.column)
    assert filled == set(SLOT_NAMES), set(SLOT_NAMES) - filled


_check_record_columns()
